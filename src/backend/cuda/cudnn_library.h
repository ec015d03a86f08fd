// cuDNN, opened at run time (see util/dynamic_library.h): the cuda backend
// opens it when it is made, so a CPU-only machine never needs it.
#ifndef LTC_BACKEND_CUDA_CUDNN_LIBRARY_H
#define LTC_BACKEND_CUDA_CUDNN_LIBRARY_H

#include <stddef.h>

#include "util/error.h"

// Loads libcudnn.so.<major of the headers> once; 0, or -1 with the reason.
int cudnn_library_open(ErrorMessage *err);

// The soname it loads, for --version.
const char *cudnn_library_file(void);

// The file it was loaded from (after cudnn_library_open), "" when unknown.
void cudnn_library_path(char *path, size_t size);

#endif
