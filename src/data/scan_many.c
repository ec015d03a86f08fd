// Several --data entries as one dataset (see scan.h, dataset_scan_many):
// folders scanned one by one, image files taken as they are given
// (LightlyTrain's `data` list of "image directories and files"), and one
// check that no entry is listed twice or lies inside another.
#include "data/scan.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// Adds the counters of one folder's summary to the merged one (skipped kinds
// are kept from the first folder only: they are a hint for the message);
// named unreadable entries get their folder in front, as image paths do.
static void scan_summary_add(ScanSummary *total, const ScanSummary *part, const char *root) {
    const size_t size = sizeof total->unreadable_named[0];
    const size_t length = strlen(root);  // a trailing '/' is dropped, as for image paths
    const int root_length = (int)(length > 0 && root[length - 1] == '/' ? length - 1 : length);
    for (uint64_t i = 0; i < part->unreadable && i < SCAN_NAMED_UNREADABLE; i++) {
        const uint64_t slot = total->unreadable + i;
        if (slot < SCAN_NAMED_UNREADABLE &&
            snprintf(total->unreadable_named[slot], size, "%.*s/%.*s", root_length, root,
                     (int)(size - 2), part->unreadable_named[i]) < 0)
            total->unreadable_named[slot][0] = '\0';
    }
    total->directories += part->directories;
    total->skipped_files += part->skipped_files;
    total->symlink_loops += part->symlink_loops;
    total->unreadable += part->unreadable;
    total->hidden += part->hidden;
    total->special += part->special;
}

typedef struct RealRoot {
    char *path;  // realpath of the entry
    int index;   // its place among the entries
} RealRoot;

// Orders paths as strcmp does, with '/' before every other byte: an entry's
// descendants then follow it directly ("a", "a/b", "a-c"), so one look at
// each neighbour finds any entry inside another.
static int compare_real_roots(const void *a, const void *b) {
    const unsigned char *x = (const unsigned char *)((const RealRoot *)a)->path;
    const unsigned char *y = (const unsigned char *)((const RealRoot *)b)->path;
    for (; *x && *x == *y; x++, y++) {
    }
    const int cx = *x == '/' ? 1 : *x, cy = *y == '/' ? 1 : *y;
    return cx != cy ? cx - cy
                    : ((const RealRoot *)a)->index - ((const RealRoot *)b)->index;
}

// Fails when two entries are one path, or one lies inside another: their
// images would be read twice (every image counted twice, the epoch and the
// size-based defaults with them). Entries that do not resolve are left to
// the scan's own message. Sorted, so that a list of many files costs
// n log n, not n^2.
static int roots_overlap(const char *const *roots, int count, ErrorMessage *err) {
    RealRoot *real = calloc((size_t)count, sizeof *real);
    if (!real) return error_set(err, "out of memory");
    int resolved = 0, status = 0;
    for (int i = 0; i < count && !status; i++) {
        char path[PATH_MAX];
        if (!realpath(roots[i], path)) continue;
        real[resolved] = (RealRoot){.path = strdup(path), .index = i};
        if (!real[resolved++].path) status = error_set(err, "out of memory");
    }
    if (!status) qsort(real, (size_t)resolved, sizeof *real, compare_real_roots);
    for (int k = 1; k < resolved && !status; k++) {
        const char *outer = real[k - 1].path, *inner = real[k].path;
        const size_t length = strlen(outer);
        if (strncmp(inner, outer, length) != 0) continue;
        const char *first = roots[real[k - 1].index], *second = roots[real[k].index];
        if (inner[length] == '\0')
            status = error_set(err, "'%s' and '%s' are the same %s: read twice", first, second,
                               scan_is_image_name(inner) ? "file" : "folder");
        else if (inner[length] == '/' || (length == 1 && inner[1]))  // outer is "/"
            status = error_set(err, "'%s' lies inside '%s': read twice", second, first);
    }
    for (int k = 0; k < resolved; k++) free(real[k].path);
    free(real);
    return status;
}

// An entry that is not a folder: an image file by its extension, taken as
// it is given (it is decoded, or skipped and counted, as any other).
// Returns 1 for such a file, 0 for a folder (or a missing entry: the scan
// names it), -1 with err for anything else.
static int scan_entry_is_file(const char *path, ErrorMessage *err) {
    struct stat info;
    const char *slash = strrchr(path, '/');
    if (stat(path, &info) != 0)  // a folder's absence is the scan's to name
        return errno == ENOENT && scan_is_image_name(slash ? slash + 1 : path)
                   ? error_set(err, "data file '%s' does not exist", path)
                   : 0;
    if (S_ISDIR(info.st_mode)) return 0;
    if (!S_ISREG(info.st_mode) || !scan_is_image_name(slash ? slash + 1 : path))
        return error_set(err, "data path '%s' is neither a folder nor an image file (.jpg, "
                              ".png, .webp, .tif, ...: docs/input-pipeline.md)", path);
    return 1;
}

int dataset_scan_many(const char *const *roots, int count, Dataset *dataset, ErrorMessage *err) {
    memset(dataset, 0, sizeof *dataset);
    if (count < 1) return error_set(err, "no data folder given");
    int *folder_of = calloc((size_t)count, sizeof *folder_of);  // -1: an image file
    if (!folder_of) return error_set(err, "out of memory");
    int folders = 0, status = 0;
    for (int i = 0; i < count && !status; i++) {
        const int is_file = scan_entry_is_file(roots[i], err);
        if (is_file < 0) status = -1;
        folder_of[i] = is_file ? -1 : folders++;
    }
    if (!status && count == 1 && folders == 1) {
        free(folder_of);
        return dataset_scan(roots[0], dataset, err);
    }
    if (!status) status = roots_overlap(roots, count, err);
    Dataset *parts = status ? NULL : calloc((size_t)(folders ? folders : 1), sizeof *parts);
    if (!status && !parts) status = error_set(err, "out of memory");
    size_t images = 0, bytes = 0;
    for (int i = 0; i < count && !status; i++) {
        const int f = folder_of[i];
        if (f < 0) {
            images++;
            bytes += strlen(roots[i]) + 1;
            continue;
        }
        status = dataset_scan(roots[i], &parts[f], err);
        for (size_t j = 0; !status && j < parts[f].count; j++)
            bytes += strlen(roots[i]) + 1 + strlen(dataset_path(&parts[f], j)) + 1;
        images += parts[f].count;
    }
    if (!status) {
        dataset->root = strdup("");
        dataset->path_arena = malloc(bytes);
        dataset->path_offsets = malloc(images * sizeof *dataset->path_offsets);
        if (!dataset->root || !dataset->path_arena || !dataset->path_offsets)
            status = error_set(err, "out of memory for %zu image paths", images);
    }
    size_t used = 0;
    for (int i = 0; i < count && !status; i++) {
        const int f = folder_of[i];
        if (f < 0) {
            dataset->path_offsets[dataset->count++] = used;
            used += (size_t)sprintf(dataset->path_arena + used, "%s", roots[i]) + 1;
            continue;
        }
        const size_t length = strlen(roots[i]);
        const int slash = length > 0 && roots[i][length - 1] == '/';
        for (size_t j = 0; j < parts[f].count; j++) {
            dataset->path_offsets[dataset->count++] = used;
            used += (size_t)sprintf(dataset->path_arena + used, "%.*s/%s",
                                    (int)(slash ? length - 1 : length), roots[i],
                                    dataset_path(&parts[f], j)) + 1;
        }
        scan_summary_add(&dataset->summary, &parts[f].summary, roots[i]);
    }
    for (int f = 0; parts && f < folders; f++) dataset_free(&parts[f]);
    free(parts);
    free(folder_of);
    if (status) dataset_free(dataset);
    return status;
}
