// The --data entries of a command (see data_list.h).
#include "data/data_list.h"

#include <stdlib.h>
#include <string.h>

#include "util/file.h"

// A list file is text, one path per line: a few hundred megabytes hold
// millions of paths; more is not a list of paths.
#define DATA_LIST_MAX_BYTES ((size_t)1 << 30)

// Cuts text into lines in place (the '\n' become NULs), skipping blank ones;
// returns their count, and stores their starts in lines when it is not NULL.
static int cut_lines(char *text, size_t size, const char **lines) {
    int count = 0;
    for (size_t start = 0; start < size;) {
        char *end = memchr(text + start, '\n', size - start);
        const size_t length = end ? (size_t)(end - (text + start)) : size - start;
        if (lines && end) *end = '\0';
        if (length > 0 && lines) lines[count] = text + start;
        count += length > 0;
        start += length + 1;
    }
    return count;
}

int data_list_build(const char *const *given, int given_count, const char *list_file,
                    DataList *list, ErrorMessage *err) {
    memset(list, 0, sizeof *list);
    ByteBuffer buffer = {0};
    int listed = 0;
    if (list_file) {
        if (file_read_all(list_file, &buffer, DATA_LIST_MAX_BYTES, err)) {
            byte_buffer_free(&buffer);  // a read that failed midway keeps its memory
            return error_prefix(err, "--data-list");
        }
        const char *bad = memchr(buffer.data, '\0', buffer.size) ? "a NUL byte"
                          : memchr(buffer.data, '\r', buffer.size) ? "a carriage return (a "
                                                                     "Windows line end)"
                                                                   : NULL;
        listed = bad ? 0 : cut_lines((char *)buffer.data, buffer.size, NULL);
        if (bad || listed == 0) {
            byte_buffer_free(&buffer);
            return bad ? error_set(err, "--data-list %s holds %s: one path per line", list_file,
                                   bad)
                       : error_set(err, "--data-list %s names no folder or image", list_file);
        }
    }
    if (given_count + listed == 0) return error_set(err, "--data is required (or --data-list)");
    list->items = malloc((size_t)(given_count + listed) * sizeof *list->items);
    if (!list->items) {
        byte_buffer_free(&buffer);
        return error_set(err, "out of memory for %d --data entries", given_count + listed);
    }
    for (int i = 0; i < given_count; i++) list->items[i] = given[i];
    if (listed) cut_lines((char *)buffer.data, buffer.size, list->items + given_count);
    list->count = given_count + listed;
    list->text = (char *)buffer.data;  // the entries point into it
    return 0;
}

void data_list_free(DataList *list) {
    free(list->items);
    free(list->text);
    memset(list, 0, sizeof *list);
}
