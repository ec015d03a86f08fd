// Dropping the logged tail after a checkpoint (see log_truncate.h).
#include "logging/log_truncate.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "logging/tb_reader.h"
#include "util/file.h"

#define KNN_TAG "knn/top1"
#define LOG_MAX_BYTES ((size_t)1 << 32)

// The rule of log_truncate.h for one record: its step, and whether it holds
// only the kNN tag.
static int keep_record(int64_t step, int only_knn, int64_t checkpoint_step) {
    return step < checkpoint_step || (step == checkpoint_step && only_knn);
}

// The step of a metrics.jsonl line ({"step": N, ...}), read within the
// line's own length: 1 when it parsed.
static int line_step(const char *line, size_t length, long long *step) {
    static const char prefix[] = "{\"step\": ";
    const size_t prefix_length = sizeof prefix - 1;
    if (length <= prefix_length || memcmp(line, prefix, prefix_length) != 0) return 0;
    const char *digits = line + prefix_length, *line_end = line + length;
    const char *after = digits + (*digits == '-');
    if (after >= line_end || *after < '0' || *after > '9') return 0;
    char *parsed_end = NULL;
    errno = 0;
    *step = strtoll(digits, &parsed_end, 10);  // stops at the ',' or '}' before the newline
    return errno == 0 && parsed_end <= line_end;
}

int metrics_jsonl_truncate(const char *path, int64_t checkpoint_step, LogTruncation *result,
                           ErrorMessage *err) {
    if (access(path, F_OK) != 0) return 0;
    ByteBuffer file = {0};
    if (file_read_all(path, &file, LOG_MAX_BYTES, err)) {
        byte_buffer_free(&file);
        return error_prefix(err, "%s", path);
    }
    // Kept lines are copied as they are, each a chunk of the new file.
    FileChunk *chunks = malloc((file.size / 2 + 1) * sizeof *chunks);  // a line has >= 2 bytes
    if (!chunks) {
        byte_buffer_free(&file);
        return error_set(err, "%s: out of memory", path);
    }
    int count = 0;
    long dropped = 0;
    const char *text = (const char *)file.data, *end = text + file.size;
    for (const char *line = text; line < end;) {
        const char *newline = memchr(line, '\n', (size_t)(end - line));
        if (!newline) {  // a partial last line: the process died writing it
            dropped++;
            break;
        }
        const size_t length = (size_t)(newline - line);
        long long step = -1;
        const int parsed = line_step(line, length, &step);
        // The kNN line is {"step": N, "knn/top1": V} (one tag).
        const char *knn = memmem(line, length, "\"" KNN_TAG "\"", strlen(KNN_TAG) + 2);
        const int only_knn = knn && !memmem(line, length, "\"train_loss\"", 12);
        if (parsed && keep_record(step, only_knn, checkpoint_step)) {
            chunks[count++] = (FileChunk){line, length + 1};
            if (step == checkpoint_step && only_knn) result->knn_at_step = 1;
        } else {
            dropped++;
        }
        line = newline + 1;
    }
    int status = 0;
    if (dropped) status = file_write_atomic(path, chunks, count, err);
    result->dropped += dropped;
    free(chunks);
    byte_buffer_free(&file);
    return status;
}

// One events file: the byte ranges of the kept records, rewritten.
static int truncate_event_file(const char *path, int64_t checkpoint_step, LogTruncation *result,
                               ErrorMessage *err) {
    ByteBuffer file = {0};
    if (file_read_all(path, &file, LOG_MAX_BYTES, err)) {
        byte_buffer_free(&file);
        return error_prefix(err, "%s", path);
    }
    TbReader *reader = NULL;
    if (tb_reader_open(&reader, path, err)) {
        byte_buffer_free(&file);
        return -1;
    }
    FileChunk *chunks = NULL;
    int count = 0, capacity = 0, status = 0;
    long dropped = 0;
    for (;;) {
        const uint64_t start = tb_reader_offset(reader);
        TbEvent event;
        ErrorMessage bad = {{0}};
        const int got = tb_reader_next(reader, &event, &bad);
        if (got == 0) break;
        if (got < 0) {  // a record cut by a kill, or damage: the rest goes
            dropped += start < file.size;
            break;
        }
        int only_knn = event.value_count > 0;
        for (size_t v = 0; v < event.value_count; v++)
            only_knn &= strcmp(event.values[v].tag, KNN_TAG) == 0;
        const int keep = event.value_count == 0 || keep_record(event.step, only_knn,
                                                               checkpoint_step);
        if (keep && event.value_count && event.step == checkpoint_step) result->knn_at_step = 1;
        if (!keep) {
            dropped++;
            continue;
        }
        if (count == capacity) {
            capacity = capacity ? 2 * capacity : 256;
            FileChunk *grown = realloc(chunks, (size_t)capacity * sizeof *grown);
            if (!grown) {
                status = error_set(err, "%s: out of memory", path);
                break;
            }
            chunks = grown;
        }
        const uint64_t stop = tb_reader_offset(reader);
        chunks[count++] = (FileChunk){file.data + start, (size_t)(stop - start)};
    }
    tb_reader_close(reader);
    if (!status && dropped) status = file_write_atomic(path, chunks, count, err);
    result->dropped += dropped;
    free(chunks);
    byte_buffer_free(&file);
    return status;
}

int tb_events_truncate(const char *dir, int64_t checkpoint_step, LogTruncation *result,
                       ErrorMessage *err) {
    DIR *handle = opendir(dir);
    if (!handle) return errno == ENOENT ? 0 : error_set(err, "%s: %s", dir, strerror(errno));
    struct dirent *entry;
    int status = 0;
    while (!status && (entry = readdir(handle))) {
        if (strncmp(entry->d_name, "events.out.tfevents.", 20) != 0) continue;
        if (strstr(entry->d_name, ".tmp.")) continue;  // a leftover temporary file
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, entry->d_name) >= (int)sizeof path)
            status = error_set(err, "%s/%s: path too long", dir, entry->d_name);
        else
            status = truncate_event_file(path, checkpoint_step, result, err);
    }
    closedir(handle);
    return status;
}
