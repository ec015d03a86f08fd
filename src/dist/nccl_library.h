// NCCL, opened at run time (see util/dynamic_library.h): only GPU ranks
// need it, so the program starts and runs without it.
#ifndef LTC_DIST_NCCL_LIBRARY_H
#define LTC_DIST_NCCL_LIBRARY_H

#include <stddef.h>

#include "util/error.h"

// Loads libnccl.so.<major of the header> once; 0, or -1 with the reason.
int nccl_library_open(ErrorMessage *err);

// The soname it loads, for --version.
const char *nccl_library_file(void);

// The file it was loaded from (after nccl_library_open), "" when unknown.
void nccl_library_path(char *path, size_t size);

#endif
