// Whole-file reads into a reusable buffer (one per worker thread), and
// atomic whole-file writes (temporary name, fsync, rename).
#ifndef LTC_UTIL_FILE_H
#define LTC_UTIL_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "util/error.h"

typedef struct ByteBuffer {
    uint8_t *data;
    size_t size;      // bytes in use
    size_t capacity;  // bytes allocated; grows, never shrinks
} ByteBuffer;

// Opens path for reading when it is a regular file; anything else (a named
// pipe, a device, a folder) is refused without blocking, the message naming
// what it is. Returns the descriptor (*size = the file's size when size is
// not NULL) or -1 with err.
int file_open_regular(const char *path, off_t *size, ErrorMessage *err);

// Reads the file at path into buffer (replacing its contents). Refuses files
// larger than max_bytes and anything but a regular file (file_open_regular).
// A NUL follows the data (not counted in size), so that its text can be
// parsed with the C string functions.
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

// Best effort: makes a rename into path's folder durable (fsync of the
// folder). A failure leaves a complete file under its name, so it is not
// reported.
void file_sync_parent_directory(const char *path);

// Writes a file's bytes into the open temporary file (fwrite on file), for
// content made while it is written rather than held whole; a nonzero return,
// with err set, abandons the write.
typedef int (*FileProducer)(FILE *file, void *context, ErrorMessage *err);

// As file_write_atomic, the bytes written by produce(file, context, err).
int file_write_atomic_produced(const char *path, FileProducer produce, void *context,
                               ErrorMessage *err);

// One file of a group (file_write_atomic_group): its chunks, or, where
// produce is set, what produce writes.
typedef struct FileWrite {
    const char *path;
    const FileChunk *chunks;
    int count;
    FileProducer produce;
    void *context;
} FileWrite;

#define FILE_GROUP_MAX 4

// Files that belong together (an embedding file and its names), written so
// that a reader never sees the main file, files[count - 1], beside
// companions of another write: every file is written to its temporary name
// and synced; then the previous main file is removed; then the companions
// are renamed into place and the main file last. A crash leaves the previous
// group, the new group, or companions without a main file; a failure leaves
// no temporary file. One file: as file_write_atomic (the previous file stays
// until the rename replaces it).
int file_write_atomic_group(const FileWrite *files, int count, ErrorMessage *err);

// Removes the temporary files "<target>.tmp.<pid>" that file_write_atomic
// left in dir when its process was killed: only those whose target matches
// one of the NULL-ended fnmatch patterns (the names the caller writes there:
// a user's "notes.tmp.123" stays) and whose process no longer exists (a live
// writer's file is never touched). Appends "path, path, ..." of the removed
// files to names (size bytes, cut to fit) and returns how many were removed.
int file_remove_stale_temporaries(const char *dir, const char *const *patterns, char *names,
                                  size_t size);
// The same for the one file path: its dead writers' "<path>.tmp.<pid>".
int file_remove_stale_temporaries_of(const char *path, char *names, size_t size);

#endif
