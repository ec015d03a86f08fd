// Dataset scan: every image file under a folder, recursively, following
// symlinks without looping, as paths relative to the folder in bytewise
// sorted order (the same order on every machine). Files are chosen by
// extension, in any case (the list is in scan.c: every format src/decode
// reads, e.g. .jpg .png .webp .tif .gif .bmp .ppm .tga .heic .avif .jxl
// .dcm); their real format is sniffed later from their bytes (no file is
// opened here). Other files are counted by extension.
//
// Hidden entries (name starting with '.') are skipped and counted in
// summary.hidden; a hidden folder is not entered. This differs from
// torchvision's ImageFolder and LightlyTrain, which list them: the hidden
// files found in image folders are almost never training data but macOS
// AppleDouble files ("._IMG_1.jpg", not images at all), .DS_Store, and copies
// under .ipynb_checkpoints/, .git/, .Trash/, .thumbnails/. The root folder
// itself may be hidden ("./.data" is scanned).
//
// Symlinks to files and folders are followed. A folder whose (st_dev, st_ino)
// equals one on the current path (a link to an ancestor or to the folder
// itself) is not entered again and counts in summary.symlink_loops, as does a
// link chain that never resolves (ELOOP). A folder reached through two
// different non-looping links is listed under both paths, like
// os.walk(followlinks=True). Dangling links and folders that cannot be opened
// count in summary.unreadable and are not fatal; the first few are named in
// summary.unreadable_named (a dangling "x.jpg" is an image the user meant).
// Entries that are neither regular files nor folders (FIFOs, sockets,
// devices) are never listed nor opened; they count in summary.special.
//
// Paths live in one string arena (no allocation per file), so a million
// files cost a few large buffers; the order equals a strcmp sort of the
// relative paths (computed per folder during the walk, see scan.c).
#ifndef LTC_DATA_SCAN_H
#define LTC_DATA_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

#define SCAN_MAX_SKIPPED_KINDS 16
#define SCAN_NAMED_UNREADABLE 3  // unreadable entries named in the summary

typedef struct SkippedExtension {
    char extension[16];  // lower case without the dot; "" for no extension, "other" for the rest
                         // (also extensions over 15 bytes and kinds past the first 4096 seen)
    uint64_t count;
} SkippedExtension;

typedef struct ScanSummary {
    uint64_t directories;        // folders visited
    uint64_t skipped_files;      // files without an image extension
    uint64_t symlink_loops;      // links to an ancestor/the folder itself, and ELOOP chains, not followed
    uint64_t unreadable;         // entries that could not be opened or stat'ed
    uint64_t hidden;             // entries named ".*" that were skipped (a hidden folder counts once)
    uint64_t special;            // named pipes, sockets, devices: skipped, never opened
    // The first unreadable entries: "path (reason)", path relative to the root.
    char unreadable_named[SCAN_NAMED_UNREADABLE][192];
    int skipped_kind_count;      // entries used in skipped_kinds
    SkippedExtension skipped_kinds[SCAN_MAX_SKIPPED_KINDS];  // most frequent first
} ScanSummary;

typedef struct Dataset {
    char *root;          // the folder as given
    size_t count;        // number of images
    char *path_arena;    // NUL-terminated relative paths, back to back
    size_t *path_offsets;  // (count) offsets into path_arena, in sorted order
    ScanSummary summary;
} Dataset;

// Fails (-1, message naming the path) when root is missing, not a folder,
// empty (no file at any depth), or holds no image file; the message of the
// last case lists what was skipped. On failure *dataset is left zeroed.
int dataset_scan(const char *root, Dataset *dataset, ErrorMessage *err);
// Several entries as one dataset, LightlyTrain's list of "image directories
// and files" (src/data/scan_many.c): each folder scanned as above, each
// image file (by its extension) taken as given, in the given order (sorted
// within each folder). With one folder this is dataset_scan; otherwise the
// paths become "folder/relative", and a file's its own path (root is "")
// so that every image keeps a unique, readable name. Fails on the first
// entry that fails, on an entry that is neither a folder nor an image file,
// and on one listed twice or inside another.
int dataset_scan_many(const char *const *roots, int count, Dataset *dataset, ErrorMessage *err);
// Whether a file name has an image extension (any case) of the list above.
bool scan_is_image_name(const char *name);
// What the scan skipped, as one line for a report ("skipped 12 other files:
// 12 .txt; skipped 2 hidden entries (names starting with '.'); 1 entries
// could not be read: m/dangling.jpg (No such file or directory)"); empty
// when nothing was.
void scan_summary_describe(const ScanSummary *summary, char *text, size_t size);
// Releases everything and zeroes *dataset; safe on a zeroed or freed Dataset.
void dataset_free(Dataset *dataset);

static inline const char *dataset_path(const Dataset *dataset, size_t index) {
    return dataset->path_arena + dataset->path_offsets[index];
}

// Writes "root/relative" into buffer (no doubled '/' when root ends in one);
// returns -1 when it does not fit.
int dataset_full_path(const Dataset *dataset, size_t index, char *buffer, size_t buffer_size);

#endif
