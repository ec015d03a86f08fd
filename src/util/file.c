// Whole-file reads and atomic whole-file writes (see file.h).
#include "util/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int byte_buffer_reserve(ByteBuffer *buffer, size_t capacity) {
    if (capacity <= buffer->capacity) return 0;
    size_t grown = buffer->capacity ? buffer->capacity : 65536;
    while (grown < capacity) grown *= 2;
    uint8_t *data = realloc(buffer->data, grown);
    if (!data) return -1;
    buffer->data = data;
    buffer->capacity = grown;
    return 0;
}

int file_read_all(const char *path, ByteBuffer *buffer, size_t max_bytes, ErrorMessage *err) {
    buffer->size = 0;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return error_set(err, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        const int saved = errno;
        close(fd);
        return error_set(err, "cannot stat: %s", strerror(saved));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return error_set(err, "not a regular file");
    }
    const size_t expected = (size_t)st.st_size;
    if (expected > max_bytes) {
        close(fd);
        return error_set(err, "file of %zu bytes exceeds the limit of %zu bytes", expected,
                         max_bytes);
    }
    if (byte_buffer_reserve(buffer, expected + 1) != 0) {
        close(fd);
        return error_set(err, "out of memory for %zu bytes", expected);
    }
    size_t total = 0;
    while (total < expected) {
        const ssize_t got = read(fd, buffer->data + total, expected - total);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            const int saved = errno;
            close(fd);
            return error_set(err, "read failed: %s", strerror(saved));
        }
        if (got == 0) break;  // file shrank while reading: use what is there
        total += (size_t)got;
    }
    close(fd);
    buffer->size = total;
    return 0;
}

void byte_buffer_free(ByteBuffer *buffer) {
    free(buffer->data);
    memset(buffer, 0, sizeof *buffer);
}

// ---- atomic writes ----------------------------------------------------------------

static int write_chunks(FILE *file, const char *temp_path, const FileChunk *chunks, int count,
                        ErrorMessage *err) {
    for (int i = 0; i < count; i++)
        if (chunks[i].size > 0 && fwrite(chunks[i].data, 1, chunks[i].size, file) != chunks[i].size)
            return error_set(err, "cannot write \"%s\": %s", temp_path, strerror(errno));
    if (fflush(file) != 0)
        return error_set(err, "cannot write \"%s\": %s", temp_path, strerror(errno));
    if (fsync(fileno(file)) != 0)
        return error_set(err, "cannot sync \"%s\": %s", temp_path, strerror(errno));
    return 0;
}

// Best effort: makes the rename itself durable. A failure here leaves a
// complete file under its name, so it is not reported.
static void sync_parent_directory(const char *path) {
    const char *slash = strrchr(path, '/');
    char *directory = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!directory) return;
    const int fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(directory);
}

int file_write_atomic(const char *path, const FileChunk *chunks, int count, ErrorMessage *err) {
    const size_t temp_capacity = strlen(path) + 32;
    char *temp_path = malloc(temp_capacity);
    if (!temp_path) return error_set(err, "%s: out of memory", path);
    snprintf(temp_path, temp_capacity, "%s.tmp.%ld", path, (long)getpid());
    int status = 0;
    FILE *file = fopen(temp_path, "wb");
    if (!file) {
        status = error_set(err, "cannot create \"%s\": %s", temp_path, strerror(errno));
    } else {
        status = write_chunks(file, temp_path, chunks, count, err);
        if (fclose(file) != 0 && status == 0)
            status = error_set(err, "cannot close \"%s\": %s", temp_path, strerror(errno));
        if (status == 0 && rename(temp_path, path) != 0)
            status = error_set(err, "cannot rename \"%s\" to it: %s", temp_path, strerror(errno));
        if (status != 0) unlink(temp_path);
    }
    if (status == 0) sync_parent_directory(path);
    free(temp_path);
    return status == 0 ? 0 : error_prefix(err, "%s", path);
}
