// What the safetensors reader (safetensors.c) and writer
// (safetensors_write.c) share; not for other callers.
#ifndef LTC_NN_SAFETENSORS_INTERNAL_H
#define LTC_NN_SAFETENSORS_INTERNAL_H

#include <stdint.h>

#include "nn/safetensors.h"

// The header key that holds the metadata, never a tensor's name.
#define SAFETENSORS_METADATA_KEY "__metadata__"

// Bytes of a tensor of this dtype and shape, or -1 when a dimension is
// negative or the size does not fit in int64.
int64_t safe_shape_bytes(SafeDType dtype, int rank, const int64_t *shape);

// A name fit for an error message: at most 60 bytes, control bytes as '?'.
typedef struct PrintableName {
    char text[68];
} PrintableName;
PrintableName safe_printable_name(const char *name);

// The first name that occurs twice (sorting a copy: O(n log n) even for a
// hostile header with millions of entries), or NULL. Sets *failed on OOM.
const char *safe_find_duplicate(const char **names, int count, int *failed);

#endif
