// Whole-file reads and atomic whole-file writes (see file.h).
#include "util/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/fault.h"

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

static const char *file_kind(mode_t mode) {
    if (S_ISDIR(mode)) return "a folder";
    if (S_ISFIFO(mode)) return "a named pipe";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a plain file";
}

int file_open_regular(const char *path, off_t *size, ErrorMessage *err) {
    // O_NONBLOCK: opening a named pipe must not wait for a writer; it is
    // cleared again below (it means nothing for a regular file anyway).
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return error_set(err, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        const int saved = errno;
        close(fd);
        return error_set(err, "cannot stat: %s", strerror(saved));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return error_set(err, "not a regular file (%s)", file_kind(st.st_mode));
    }
    const int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        const int saved = errno;
        close(fd);
        return error_set(err, "cannot set blocking reads: %s", strerror(saved));
    }
    if (size) *size = st.st_size;
    return fd;
}

int file_read_all(const char *path, ByteBuffer *buffer, size_t max_bytes, ErrorMessage *err) {
    buffer->size = 0;
    off_t file_size = 0;
    const int fd = file_open_regular(path, &file_size, err);
    if (fd < 0) return -1;
    const size_t expected = (size_t)file_size;
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
    buffer->data[total] = 0;  // reserved above (expected + 1; total <= expected)
    return 0;
}

void byte_buffer_free(ByteBuffer *buffer) {
    free(buffer->data);
    memset(buffer, 0, sizeof *buffer);
}

// ---- atomic writes ----------------------------------------------------------------

static int write_chunks(FILE *file, const FileChunk *chunks, int count, ErrorMessage *err) {
    for (int i = 0; i < count; i++)
        if (chunks[i].size > 0 && fwrite(chunks[i].data, 1, chunks[i].size, file) != chunks[i].size)
            return error_set(err, "%s", strerror(errno));
    return 0;
}

void file_sync_parent_directory(const char *path) {
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

// Atomic writes so far in this process (for the kill-before-rename fault),
// and the steps of all of them (for kill-in-write: fault.h).
static atomic_long writes, write_steps;

// A point where a crash changes what is on disk: the kill-in-write fault
// ends the process here at the step it names.
static void write_step(void) {
    if (fault_fires("kill-in-write", atomic_fetch_add(&write_steps, 1) + 1)) raise(SIGKILL);
}

// The temporary name of path for this process: "path.tmp.<pid>" (malloc'ed).
static char *temporary_path(const char *path) {
    const size_t capacity = strlen(path) + 32;
    char *temp_path = malloc(capacity);
    if (temp_path) snprintf(temp_path, capacity, "%s.tmp.%ld", path, (long)getpid());
    return temp_path;
}

// Writes the file's bytes to temp_path, flushed and synced; removes it on failure.
static int write_temporary(const char *temp_path, const FileWrite *write, ErrorMessage *err) {
    FILE *file = fopen(temp_path, "wb");
    if (!file) return error_set(err, "cannot create \"%s\": %s", temp_path, strerror(errno));
    write_step();
    int status = write->produce ? write->produce(file, write->context, err)
                                : write_chunks(file, write->chunks, write->count, err);
    if (status != 0) status = error_prefix(err, "cannot write \"%s\"", temp_path);
    if (status == 0 && fflush(file) != 0)
        status = error_set(err, "cannot write \"%s\": %s", temp_path, strerror(errno));
    if (status == 0 && fsync(fileno(file)) != 0)
        status = error_set(err, "cannot sync \"%s\": %s", temp_path, strerror(errno));
    if (fclose(file) != 0 && status == 0)
        status = error_set(err, "cannot close \"%s\": %s", temp_path, strerror(errno));
    if (status != 0) {
        unlink(temp_path);
        return -1;
    }
    write_step();
    const long number = atomic_fetch_add(&writes, 1) + 1;
    if (fault_fires("kill-before-rename", number)) raise(SIGKILL);
    if (fault_fires("fail-write", number)) {
        unlink(temp_path);
        return error_set(err, "cannot write \"%s\": %s", temp_path, strerror(ENOSPC));
    }
    return 0;
}

int file_write_atomic(const char *path, const FileChunk *chunks, int count, ErrorMessage *err) {
    const FileWrite file = {.path = path, .chunks = chunks, .count = count};
    return file_write_atomic_group(&file, 1, err);
}

int file_write_atomic_produced(const char *path, FileProducer produce, void *context,
                               ErrorMessage *err) {
    const FileWrite file = {.path = path, .produce = produce, .context = context};
    return file_write_atomic_group(&file, 1, err);
}

int file_write_atomic_group(const FileWrite *files, int count, ErrorMessage *err) {
    char *temp_paths[FILE_GROUP_MAX] = {0};
    if (count < 1 || count > FILE_GROUP_MAX)
        return error_set(err, "a group of %d files (1..%d)", count, FILE_GROUP_MAX);
    int status = 0, failed = 0;  // failed: the file the message names
    for (int i = 0; i < count && status == 0; i++) {
        failed = i;
        temp_paths[i] = temporary_path(files[i].path);
        if (!temp_paths[i]) status = error_set(err, "out of memory");
        else status = write_temporary(temp_paths[i], &files[i], err);
        if (status != 0) free(temp_paths[i]), temp_paths[i] = NULL;
    }
    // The main file (the last) goes first: from here until its rename a
    // reader finds no main file, never one beside companions of another write.
    const char *main_path = files[count - 1].path;
    if (status == 0 && count > 1 && unlink(main_path) != 0 && errno != ENOENT) {
        failed = count - 1;
        status = error_set(err, "cannot remove the previous file: %s", strerror(errno));
    }
    if (status == 0 && count > 1) write_step();
    for (int i = 0; i < count && status == 0; i++) {
        failed = i;
        if (rename(temp_paths[i], files[i].path) != 0)
            status = error_set(err, "cannot rename \"%s\" to it: %s", temp_paths[i],
                               strerror(errno));
        else
            free(temp_paths[i]), temp_paths[i] = NULL, write_step();
    }
    for (int i = 0; i < count; i++) {
        if (temp_paths[i]) unlink(temp_paths[i]);
        free(temp_paths[i]);
    }
    if (status != 0) return error_prefix(err, "%s", files[failed].path);
    for (int i = 0; i < count; i++) file_sync_parent_directory(files[i].path);
    return 0;
}

// ---- leftovers of killed writers ---------------------------------------------------

// The pid of "<target>.tmp.<pid>" with its target name in target (size
// bytes), or 0 when entry is not such a name.
static long temporary_owner(const char *entry, char *target, size_t size) {
    const char *mark = strstr(entry, ".tmp.");
    if (!mark || mark == entry) return 0;
    while (strstr(mark + 1, ".tmp.")) mark = strstr(mark + 1, ".tmp.");  // the last one
    const char *digits = mark + 5;
    char *end = NULL;
    const long pid = strtol(digits, &end, 10);
    if (end == digits || *end != '\0' || pid <= 0 || (size_t)(mark - entry) >= size) return 0;
    memcpy(target, entry, (size_t)(mark - entry));
    target[mark - entry] = '\0';
    return pid;
}

// Whether target is one of the NULL-ended fnmatch patterns.
static int matches_any(const char *target, const char *const *patterns) {
    for (int i = 0; patterns[i]; i++)
        if (fnmatch(patterns[i], target, FNM_PERIOD) == 0) return 1;
    return 0;
}

// The removal for both entry points: patterns, or one exact name.
static int remove_stale(const char *dir, const char *const *patterns, const char *exact,
                        char *names, size_t size) {
    DIR *handle = opendir(dir);
    if (!handle) return 0;
    int removed = 0;
    struct dirent *entry;
    while ((entry = readdir(handle))) {
        char target[NAME_MAX + 1];
        const long pid = temporary_owner(entry->d_name, target, sizeof target);
        if (!pid || !(exact ? strcmp(target, exact) == 0 : matches_any(target, patterns)))
            continue;
        // kill(pid, 0) fails with ESRCH only when no such process exists.
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, entry->d_name) >= (int)sizeof path) continue;
        struct stat info;
        if (lstat(path, &info) != 0 || !S_ISREG(info.st_mode) || unlink(path) != 0) continue;
        const size_t used = strlen(names);
        if (size > used)
            snprintf(names + used, size - used, "%s%s", used ? ", " : "", path);
        removed++;
    }
    closedir(handle);
    return removed;
}

int file_remove_stale_temporaries(const char *dir, const char *const *patterns, char *names,
                                  size_t size) {
    return remove_stale(dir, patterns, NULL, names, size);
}

int file_remove_stale_temporaries_of(const char *path, char *names, size_t size) {
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path) >=
             (int)sizeof dir)
        return 0;
    return remove_stale(dir, NULL, slash ? slash + 1 : path, names, size);
}
