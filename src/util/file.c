// Whole-file reads (see file.h).
#include "util/file.h"

#include <errno.h>
#include <fcntl.h>
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
