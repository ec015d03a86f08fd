// Whole-file reads into a reusable buffer (one per worker thread), and
// atomic whole-file writes (temporary name, fsync, rename).
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

// One piece of a file to write (host memory).
typedef struct FileChunk {
    const void *data;
    size_t size;
} FileChunk;

// Writes the chunks, in order, as the whole file at path, atomically: into
// "path.tmp.<pid>" in the same folder, fflush, fsync, rename over path, then
// fsync of the folder (best effort: the file is complete under its name by
// then). On failure the temporary file is removed, an existing file at path
// keeps its previous contents, and err names path, the failing step
// ("cannot create/write/sync/close/rename") and the errno text.
int file_write_atomic(const char *path, const FileChunk *chunks, int count, ErrorMessage *err);

#endif
