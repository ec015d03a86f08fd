// The --data entries of a command (see data_list.h).
#include "data/data_list.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "nn/json_scan.h"
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

// A --data value meant as LightlyTrain's JSON list: '[' first, and no file
// of that name (a folder may be called "[x]").
static int is_json_list(const char *value) {
    struct stat info;
    return value[strspn(value, " \t")] == '[' && stat(value, &info) != 0;
}

// The strings of the JSON list text, each NUL-terminated, appended to
// *out (size *used of *capacity); *count gets their number. 0 or -1 with err.
static int read_json_list(const char *text, char **out, size_t *used, size_t *capacity,
                          int *count, ErrorMessage *err) {
    JsonScanner scanner;
    json_scanner_init(&scanner, text, strlen(text));
    *count = 0;
    if (json_expect(&scanner, '[', err)) return -1;
    int more = json_peek(&scanner) == ']' ? (json_expect(&scanner, ']', err), 0) : 1;
    while (more > 0) {
        size_t length;
        if (json_peek(&scanner) != '"')
            return error_set(err, "a list of quoted paths, [\"a.jpg\", \"dir\"]");
        if (json_string_length(&scanner, &length, err)) return -1;
        if (*used + length + 1 > *capacity) {
            const size_t grown = (*used + length + 1) * 2;
            char *bigger = realloc(*out, grown);
            if (!bigger) return error_set(err, "out of memory");
            *out = bigger, *capacity = grown;
        }
        if (json_read_string(&scanner, *out + *used, length + 1, err)) return -1;
        if (length == 0) return error_set(err, "an empty path");
        *used += length + 1;
        (*count)++;
        more = json_next_item(&scanner, ']', err);
    }
    if (more < 0 || json_expect_end(&scanner, err)) return -1;
    return *count ? 0 : error_set(err, "the list names no folder or image");
}

// Replaces the JSON lists among the given entries by their strings: the
// entries in *entries (allocated), their number in *count, the strings in
// list->listed. 0 or -1 with err.
static int expand_json_lists(const char *const *given, int given_count, DataList *list,
                             const char ***entries, int *count, ErrorMessage *err) {
    size_t used = 0, capacity = 0;
    // Per entry: the strings of its list, 0 for a path (a list has at least one).
    int strings[given_count > 0 ? given_count : 1], total = 0;
    for (int i = 0; i < given_count; i++) {
        strings[i] = 0;
        if (is_json_list(given[i]) &&
            read_json_list(given[i], &list->listed, &used, &capacity, &strings[i], err))
            return error_prefix(err, "--data %.200s: expected LightlyTrain's JSON list", given[i]);
        total += strings[i] ? strings[i] : 1;
    }
    *entries = malloc((size_t)(total ? total : 1) * sizeof **entries);
    if (!*entries) return error_set(err, "out of memory for %d --data entries", total);
    const char *next = list->listed;
    *count = 0;
    for (int i = 0; i < given_count; i++) {
        if (!strings[i]) {
            (*entries)[(*count)++] = given[i];
            continue;
        }
        for (int j = 0; j < strings[i]; j++, next += strlen(next) + 1)
            (*entries)[(*count)++] = next;
    }
    return 0;
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
    const char **entries = NULL;
    int entry_count = 0;
    if (expand_json_lists(given, given_count, list, &entries, &entry_count, err)) goto failed;
    if (entry_count + listed == 0) {
        error_set(err, "--data is required (or --data-list)");
        goto failed;
    }
    list->items = malloc((size_t)(entry_count + listed) * sizeof *list->items);
    if (!list->items) {
        error_set(err, "out of memory for %d --data entries", entry_count + listed);
        goto failed;
    }
    for (int i = 0; i < entry_count; i++) list->items[i] = entries[i];
    free(entries);
    if (listed) cut_lines((char *)buffer.data, buffer.size, list->items + entry_count);
    list->count = entry_count + listed;
    list->text = (char *)buffer.data;  // the entries point into it
    return 0;
failed:
    free(entries);
    free(list->listed);
    list->listed = NULL;
    byte_buffer_free(&buffer);
    return -1;
}

void data_list_free(DataList *list) {
    free(list->items);
    free(list->text);
    free(list->listed);
    memset(list, 0, sizeof *list);
}
