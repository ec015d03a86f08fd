// Whole-file reads into a reusable buffer (one per worker thread).
#ifndef LTC_UTIL_FILE_H
#define LTC_UTIL_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

typedef struct ByteBuffer {
    uint8_t *data;
    size_t size;      // bytes in use
    size_t capacity;  // bytes allocated; grows, never shrinks
} ByteBuffer;

// Reads the file at path into buffer (replacing its contents). Refuses files
// larger than max_bytes.
int file_read_all(const char *path, ByteBuffer *buffer, size_t max_bytes, ErrorMessage *err);
void byte_buffer_free(ByteBuffer *buffer);

#endif
