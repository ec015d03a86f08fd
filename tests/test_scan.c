// Unit tests for the dataset scan (src/data/scan.c): each test builds a small
// tree of files, folders and symlinks in a fresh mkdtemp folder and checks
// the exact sorted listing, the summary counters or the error message.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/scan.h"

typedef struct TestTree {
    char root[PATH_MAX];
} TestTree;

// ---- building trees ----------------------------------------------------------

static void tree_path(const TestTree *tree, const char *relative, char *out) {
    int written = snprintf(out, PATH_MAX, "%s/%s", tree->root, relative);
    assert_true(written > 0 && written < PATH_MAX);
}

// Creates the folder and its parents.
static void tree_folder(const TestTree *tree, const char *relative) {
    char path[PATH_MAX];
    tree_path(tree, relative, path);
    for (char *slash = path + strlen(tree->root) + 1; (slash = strchr(slash, '/')); slash++) {
        *slash = '\0';
        assert_true(mkdir(path, 0755) == 0 || access(path, F_OK) == 0);
        *slash = '/';
    }
    assert_true(mkdir(path, 0755) == 0 || access(path, F_OK) == 0);
}

// Creates a file holding `size` bytes of `content` (parents included).
static void tree_file_with(const TestTree *tree, const char *relative, const void *content, size_t size) {
    char path[PATH_MAX];
    tree_path(tree, relative, path);
    char *slash = strrchr(path, '/');
    if (slash > path + strlen(tree->root)) {
        *slash = '\0';
        tree_folder(tree, path + strlen(tree->root) + 1);
        *slash = '/';
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, content, size), (ssize_t)size);
    assert_int_equal(close(fd), 0);
}

static void tree_file(const TestTree *tree, const char *relative) {
    tree_file_with(tree, relative, "", 0);
}

static void tree_link(const TestTree *tree, const char *relative, const char *target) {
    char path[PATH_MAX];
    tree_path(tree, relative, path);
    assert_int_equal(symlink(target, path), 0);
}

static int tree_remove_entry(const char *path, const struct stat *info, int type, struct FTW *ftw) {
    return remove(path);
}

static int tree_setup(void **state) {
    TestTree *tree = calloc(1, sizeof *tree);
    if (!tree) return -1;
    snprintf(tree->root, sizeof tree->root, "/tmp/ltc_test_scan_XXXXXX");
    if (!mkdtemp(tree->root)) return -1;
    *state = tree;
    return 0;
}

static int tree_teardown(void **state) {
    TestTree *tree = *state;
    // FTW_PHYS: never follow the symlinks under test while deleting.
    int status = nftw(tree->root, tree_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(tree);
    return status;
}

// ---- checks -------------------------------------------------------------------

static void scan_ok(const char *root, Dataset *dataset) {
    ErrorMessage err = {{0}};
    int status = dataset_scan(root, dataset, &err);
    if (status != 0) fail_msg("dataset_scan('%s') failed: %s", root, err.text);
}

static void expect_paths(const Dataset *dataset, const char *const *expected, size_t expected_count) {
    for (size_t i = 0; i < dataset->count && i < expected_count; i++)
        assert_string_equal(dataset_path(dataset, i), expected[i]);
    assert_int_equal(dataset->count, expected_count);
}

// Scans root expecting failure; returns the message. The dataset must be
// left zeroed so that a caller's dataset_free is harmless.
static const char *scan_error(const char *root, ErrorMessage *err) {
    Dataset dataset;
    memset(&dataset, 0xAB, sizeof dataset);
    assert_int_equal(dataset_scan(root, &dataset, err), -1);
    assert_null(dataset.root);
    assert_null(dataset.path_offsets);
    assert_int_equal(dataset.count, 0);
    return err->text;
}

static void expect_contains(const char *text, const char *part) {
    if (!strstr(text, part)) fail_msg("expected \"%s\" in \"%s\"", part, text);
}

#define ARRAY_COUNT(a) (sizeof(a) / sizeof((a)[0]))

// ---- tests --------------------------------------------------------------------

static void test_nested_folders_sorted_bytewise(void **state) {
    TestTree *tree = *state;
    // Chosen so that a per-folder sort would give a different order: '-' (0x2D)
    // < '.' (0x2E) < '/' (0x2F), upper case before lower case, UTF-8 last.
    const char *files[] = {"a/x.jpg", "z/deep/er/f.jpg", "a-c.png", "a/b/c.png", "B.webp",
                           "a.b/y.jpeg", "a/b.jpg", "\xc3\xa9t\xc3\xa9.jpg", "Z.jpg"};
    for (size_t i = 0; i < ARRAY_COUNT(files); i++) tree_file(tree, files[i]);
    const char *expected[] = {"B.webp", "Z.jpg", "a-c.png", "a.b/y.jpeg", "a/b.jpg",
                              "a/b/c.png", "a/x.jpg", "z/deep/er/f.jpg", "\xc3\xa9t\xc3\xa9.jpg"};
    Dataset dataset;
    scan_ok(tree->root, &dataset);
    expect_paths(&dataset, expected, ARRAY_COUNT(expected));
    assert_int_equal(dataset.summary.directories, 7);  // root a a/b a.b z z/deep z/deep/er
    assert_int_equal(dataset.summary.skipped_files, 0);
    assert_int_equal(dataset.summary.skipped_kind_count, 0);
    assert_string_equal(dataset.root, tree->root);
    dataset_free(&dataset);
}

static void test_symlink_loops_terminate_and_are_counted(void **state) {
    TestTree *tree = *state;
    tree_file(tree, "top.jpg");
    tree_file(tree, "sub/b.jpg");
    tree_folder(tree, "sub/deeper");
    tree_link(tree, "sub/up", "..");                 // parent = the root
    tree_link(tree, "sub/self", ".");                // the folder itself
    tree_link(tree, "sub/deeper/grandparent", "../..");
    tree_link(tree, "sub/absolute", tree->root);     // the root by absolute path
    tree_link(tree, "spin.jpg", "spin.jpg");         // a link to itself: ELOOP
    Dataset dataset;
    scan_ok(tree->root, &dataset);
    const char *expected[] = {"sub/b.jpg", "top.jpg"};
    expect_paths(&dataset, expected, ARRAY_COUNT(expected));
    assert_int_equal(dataset.summary.symlink_loops, 5);
    assert_int_equal(dataset.summary.directories, 3);  // root sub sub/deeper
    assert_int_equal(dataset.summary.unreadable, 0);
    dataset_free(&dataset);
}

static void test_symlinks_to_files_and_folders_are_followed(void **state) {
    TestTree *tree = *state;
    tree_file(tree, "real/img.jpg");
    tree_folder(tree, "other");
    tree_link(tree, "other/file_link.png", "../real/img.jpg");
    tree_link(tree, "other/folder_link", "../real");
    tree_link(tree, "other/folder.jpg", "../real");    // a folder, whatever its name says
    tree_link(tree, "other/dangling.jpg", "missing.jpg");
    Dataset dataset;
    scan_ok(tree->root, &dataset);
    // The folder reached through two links is listed under each path, like
    // os.walk(followlinks=True).
    const char *expected[] = {"other/file_link.png", "other/folder.jpg/img.jpg",
                              "other/folder_link/img.jpg", "real/img.jpg"};
    expect_paths(&dataset, expected, ARRAY_COUNT(expected));
    assert_int_equal(dataset.summary.unreadable, 1);  // the dangling link
    assert_int_equal(dataset.summary.symlink_loops, 0);
    assert_int_equal(dataset.summary.directories, 5);  // root other real + the 2 folder links
    // The report names it: a dangling "x.jpg" is an image the user meant.
    char described[1024];
    scan_summary_describe(&dataset.summary, described, sizeof described);
    assert_string_equal(described, "1 entry could not be read: other/dangling.jpg (No such "
                                   "file or directory)");
    dataset_free(&dataset);
}

static void test_mixed_case_extensions(void **state) {
    TestTree *tree = *state;
    const char *files[] = {"x.JPG", "y.Jpeg", "z.PNG", "w.WebP", "v.jpg.txt", "u.PSD", "jpg",
                           "t.TIFF", "s.Dcm", "r.heic", "q.JXL", "p.pgm"};
    for (size_t i = 0; i < ARRAY_COUNT(files); i++) tree_file(tree, files[i]);
    Dataset dataset;
    scan_ok(tree->root, &dataset);
    const char *expected[] = {"p.pgm", "q.JXL", "r.heic", "s.Dcm", "t.TIFF",
                              "w.WebP", "x.JPG", "y.Jpeg", "z.PNG"};
    expect_paths(&dataset, expected, ARRAY_COUNT(expected));
    assert_int_equal(dataset.summary.skipped_files, 3);
    // Counts tie at 1, so kinds come in name order: "" (the file named "jpg"), psd, txt.
    assert_int_equal(dataset.summary.skipped_kind_count, 3);
    assert_string_equal(dataset.summary.skipped_kinds[0].extension, "");
    assert_string_equal(dataset.summary.skipped_kinds[1].extension, "psd");
    assert_string_equal(dataset.summary.skipped_kinds[2].extension, "txt");
    dataset_free(&dataset);
}

static void test_skipped_files_counted_by_extension(void **state) {
    TestTree *tree = *state;
    char name[64];
    for (int i = 0; i < 12; i++) {
        snprintf(name, sizeof name, "notes/n%02d.TXT", i);
        tree_file(tree, name);
    }
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "anim/a%d.mov", i);
        tree_file(tree, name);
    }
    tree_file(tree, "README");
    tree_file(tree, "Makefile");
    tree_file(tree, "images/one.jpg");
    Dataset dataset;
    scan_ok(tree->root, &dataset);
    const char *expected[] = {"images/one.jpg"};
    expect_paths(&dataset, expected, ARRAY_COUNT(expected));
    const ScanSummary *summary = &dataset.summary;
    assert_int_equal(summary->skipped_files, 17);
    assert_int_equal(summary->skipped_kind_count, 3);
    assert_string_equal(summary->skipped_kinds[0].extension, "txt");  // lower-cased
    assert_int_equal(summary->skipped_kinds[0].count, 12);
    assert_string_equal(summary->skipped_kinds[1].extension, "mov");
    assert_int_equal(summary->skipped_kinds[1].count, 3);
    assert_string_equal(summary->skipped_kinds[2].extension, "");
    assert_int_equal(summary->skipped_kinds[2].count, 2);
    dataset_free(&dataset);
}

static void test_many_skipped_kinds_lumped_as_other(void **state) {
    TestTree *tree = *state;
    // 20 kinds, kind k (1..20) with k files: the 15 most frequent are named
    // and the last entry sums kinds 1..5 plus one over-long extension.
    char name[64];
    for (int kind = 1; kind <= 20; kind++)
        for (int i = 0; i < kind; i++) {
            snprintf(name, sizeof name, "f%d_%d.e%02d", kind, i, kind);
            tree_file(tree, name);
        }
    tree_file(tree, "x.sixteen_letters");  // 16 bytes: longer than SkippedExtension holds
    tree_file(tree, "image.png");
    Dataset dataset;
    scan_ok(tree->root, &dataset);
    const ScanSummary *summary = &dataset.summary;
    assert_int_equal(summary->skipped_files, 210 + 1);
    assert_int_equal(summary->skipped_kind_count, SCAN_MAX_SKIPPED_KINDS);
    for (int i = 0; i < SCAN_MAX_SKIPPED_KINDS - 1; i++) {
        snprintf(name, sizeof name, "e%02d", 20 - i);
        assert_string_equal(summary->skipped_kinds[i].extension, name);
        assert_int_equal(summary->skipped_kinds[i].count, 20 - i);
    }
    assert_string_equal(summary->skipped_kinds[SCAN_MAX_SKIPPED_KINDS - 1].extension, "other");
    assert_int_equal(summary->skipped_kinds[SCAN_MAX_SKIPPED_KINDS - 1].count, 1 + 2 + 3 + 4 + 5 + 1);
    dataset_free(&dataset);
}

static void test_extension_decides_not_content(void **state) {
    TestTree *tree = *state;
    const unsigned char jpeg_start[] = {0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, 'J', 'F', 'I', 'F', 0};
    tree_file_with(tree, "photo.txt", jpeg_start, sizeof jpeg_start);  // a JPEG by content
    tree_file_with(tree, "notes.jpg", "just text\n", 10);               // text by content
    Dataset dataset;
    scan_ok(tree->root, &dataset);
    const char *expected[] = {"notes.jpg"};
    expect_paths(&dataset, expected, ARRAY_COUNT(expected));
    assert_int_equal(dataset.summary.skipped_files, 1);
    assert_string_equal(dataset.summary.skipped_kinds[0].extension, "txt");
    dataset_free(&dataset);
}

static void test_hidden_entries_skipped_and_counted(void **state) {
    TestTree *tree = *state;
    tree_file(tree, "a.jpg");
    tree_file(tree, "sub/b.png");
    tree_file(tree, ".DS_Store");
    tree_file(tree, "._a.jpg");              // macOS AppleDouble: not an image
    tree_file(tree, ".cache/x.jpg");         // not entered: counts once
    tree_file(tree, ".cache/y.jpg");
    tree_file(tree, "sub/.hidden.png");
    Dataset dataset;
    scan_ok(tree->root, &dataset);
    const char *expected[] = {"a.jpg", "sub/b.png"};
    expect_paths(&dataset, expected, ARRAY_COUNT(expected));
    assert_int_equal(dataset.summary.hidden, 4);
    assert_int_equal(dataset.summary.skipped_files, 0);
    assert_int_equal(dataset.summary.directories, 2);
    char described[256];
    scan_summary_describe(&dataset.summary, described, sizeof described);
    assert_string_equal(described, "skipped 4 hidden entries (names starting with '.')");
    dataset_free(&dataset);

    // A hidden root is scanned: only names below it are judged.
    char hidden_root[PATH_MAX];
    tree_path(tree, ".cache", hidden_root);
    scan_ok(hidden_root, &dataset);
    const char *expected_below[] = {"x.jpg", "y.jpg"};
    expect_paths(&dataset, expected_below, ARRAY_COUNT(expected_below));
    dataset_free(&dataset);
}

// A named pipe (even named .jpg) is skipped without being opened and
// counted as what it is (it was counted as a skipped ".jpg" file; embed then
// said nothing of it).
static void test_named_pipes_skipped_and_counted(void **state) {
    TestTree *tree = *state;
    tree_file(tree, "a.jpg");
    char pipe[PATH_MAX];
    tree_path(tree, "sub/pipe.jpg", pipe);
    tree_folder(tree, "sub");
    assert_int_equal(mkfifo(pipe, 0600), 0);
    Dataset dataset;
    scan_ok(tree->root, &dataset);
    const char *expected[] = {"a.jpg"};
    expect_paths(&dataset, expected, ARRAY_COUNT(expected));
    assert_int_equal(dataset.summary.special, 1);
    assert_int_equal(dataset.summary.skipped_files, 0);
    char described[256];
    scan_summary_describe(&dataset.summary, described, sizeof described);
    assert_string_equal(described, "skipped 1 entry that is not a regular file (named pipes, "
                                   "sockets or devices)");
    dataset_free(&dataset);
    // Only a pipe: no images, and the message says what was there.
    assert_int_equal(unlink(tree->root ? pipe : pipe), 0);
    ErrorMessage err = {{0}};
    tree_path(tree, "a.jpg", pipe);
    assert_int_equal(unlink(pipe), 0);
    tree_path(tree, "sub/pipe.jpg", pipe);
    assert_int_equal(mkfifo(pipe, 0600), 0);
    expect_contains(scan_error(tree->root, &err), "skipped 1 entry that is not a regular file");
}

static void test_only_hidden_files_is_an_error_naming_them(void **state) {
    TestTree *tree = *state;
    tree_file(tree, "._a.jpg");
    ErrorMessage err = {{0}};
    const char *text = scan_error(tree->root, &err);
    expect_contains(text, tree->root);
    expect_contains(text, "no images (.jpg .png .webp .tif .gif .bmp .ppm .tga .heic .avif .jxl "
                          ".dcm ...) found in");
    expect_contains(text, "skipped 1 hidden entry");
}

static void test_empty_folder_is_an_error(void **state) {
    TestTree *tree = *state;
    ErrorMessage err = {{0}};
    char expected[PATH_MAX + 64];
    snprintf(expected, sizeof expected, "data folder '%s' is empty", tree->root);
    expect_contains(scan_error(tree->root, &err), expected);
    // Only empty subfolders: still nothing to train on.
    tree_folder(tree, "a/b");
    tree_folder(tree, "c");
    expect_contains(scan_error(tree->root, &err), expected);
    expect_contains(err.text, "3 subfolders");
}

static void test_missing_folder_is_an_error(void **state) {
    TestTree *tree = *state;
    char missing[PATH_MAX];
    tree_path(tree, "no_such_folder", missing);
    ErrorMessage err = {{0}};
    char expected[PATH_MAX + 64];
    snprintf(expected, sizeof expected, "data folder '%s' does not exist", missing);
    expect_contains(scan_error(missing, &err), expected);
}

static void test_file_as_root_is_an_error(void **state) {
    TestTree *tree = *state;
    tree_file(tree, "image.jpg");
    char file[PATH_MAX];
    tree_path(tree, "image.jpg", file);
    ErrorMessage err = {{0}};
    char expected[PATH_MAX + 64];
    snprintf(expected, sizeof expected, "data path '%s' is not a folder", file);
    expect_contains(scan_error(file, &err), expected);
}

static void test_only_non_images_lists_what_was_skipped(void **state) {
    TestTree *tree = *state;
    char name[64];
    for (int i = 0; i < 12; i++) {
        snprintf(name, sizeof name, "docs/d%02d.txt", i);
        tree_file(tree, name);
    }
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "a%d.mov", i);
        tree_file(tree, name);
    }
    ErrorMessage err = {{0}};
    char expected[PATH_MAX + 192];
    snprintf(expected, sizeof expected,
             "no images (.jpg .png .webp .tif .gif .bmp .ppm .tga .heic .avif .jxl .dcm ...) found "
             "in '%s'; skipped 15 other files: 12 .txt, 3 .mov",
             tree->root);
    assert_string_equal(scan_error(tree->root, &err), expected);
}

static void test_unreadable_subfolder_is_counted(void **state) {
    if (geteuid() == 0) skip();  // root reads folders whatever their mode
    TestTree *tree = *state;
    tree_file(tree, "ok.jpg");
    tree_file(tree, "locked/hidden_from_us.jpg");
    char locked[PATH_MAX];
    tree_path(tree, "locked", locked);
    assert_int_equal(chmod(locked, 0), 0);
    Dataset dataset;
    ErrorMessage err = {{0}};
    const int status = dataset_scan(tree->root, &dataset, &err);
    chmod(locked, 0755);  // before any check can fail, so that teardown can delete it
    if (status != 0) fail_msg("dataset_scan failed: %s", err.text);
    const char *expected[] = {"ok.jpg"};
    expect_paths(&dataset, expected, ARRAY_COUNT(expected));
    assert_int_equal(dataset.summary.unreadable, 1);
    dataset_free(&dataset);
}

static void test_full_path_joins_root_and_relative(void **state) {
    TestTree *tree = *state;
    tree_file(tree, "cls/img.jpeg");
    char root_with_slash[PATH_MAX + 1];
    snprintf(root_with_slash, sizeof root_with_slash, "%s/", tree->root);
    Dataset dataset;
    scan_ok(root_with_slash, &dataset);
    char full[PATH_MAX], expected[PATH_MAX];
    tree_path(tree, "cls/img.jpeg", expected);
    assert_int_equal(dataset_full_path(&dataset, 0, full, sizeof full), 0);
    assert_string_equal(full, expected);  // one '/', not two
    // Exactly the length plus the NUL fits; one byte less does not.
    const size_t needed = strlen(expected) + 1;
    assert_int_equal(dataset_full_path(&dataset, 0, full, needed), 0);
    assert_int_equal(dataset_full_path(&dataset, 0, full, needed - 1), -1);
    dataset_free(&dataset);
    dataset_free(&dataset);  // freeing twice is harmless
    assert_null(dataset.path_arena);
}

// Several folders: each sorted, in the order given, paths carry their folder
// and dataset_full_path returns them unchanged; a bad folder fails the scan.
static void test_several_folders_keep_order_and_folder_names(void **state) {
    TestTree *tree = *state;
    tree_file(tree, "second/b.jpg");
    tree_file(tree, "second/a.png");
    tree_file(tree, "first/z.jpg");
    char first[PATH_MAX], second[PATH_MAX], second_slash[PATH_MAX + 1];
    tree_path(tree, "first", first);
    tree_path(tree, "second", second);
    snprintf(second_slash, sizeof second_slash, "%s/", second);
    const char *roots[] = {second_slash, first};
    Dataset dataset;
    ErrorMessage err = {{0}};
    assert_int_equal(dataset_scan_many(roots, 2, &dataset, &err), 0);
    assert_int_equal(dataset.count, 3);
    char expected[PATH_MAX + 16], full[PATH_MAX + 16];
    snprintf(expected, sizeof expected, "%s/a.png", second);
    assert_string_equal(dataset_path(&dataset, 0), expected);
    assert_int_equal(dataset_full_path(&dataset, 0, full, sizeof full), 0);
    assert_string_equal(full, expected);
    snprintf(expected, sizeof expected, "%s/b.jpg", second);
    assert_string_equal(dataset_path(&dataset, 1), expected);
    snprintf(expected, sizeof expected, "%s/z.jpg", first);
    assert_string_equal(dataset_path(&dataset, 2), expected);
    assert_int_equal(dataset.summary.directories, 2);
    dataset_free(&dataset);
    // One folder twice (another spelling), or one inside another: refused.
    char first_again[PATH_MAX + 16], inner[PATH_MAX];
    snprintf(first_again, sizeof first_again, "%s/../first", first);
    tree_path(tree, "", inner);
    const char *twice[] = {first, second, first_again};
    assert_int_equal(dataset_scan_many(twice, 3, &dataset, &err), -1);
    expect_contains(err.text, "are the same folder");
    const char *nested[] = {second, inner};
    assert_int_equal(dataset_scan_many(nested, 2, &dataset, &err), -1);
    expect_contains(err.text, "lies inside");
    const char *bad[] = {first, "/nonexistent-ltc-folder"};
    assert_int_equal(dataset_scan_many(bad, 2, &dataset, &err), -1);
    expect_contains(err.text, "/nonexistent-ltc-folder");
    assert_int_equal(dataset.count, 0);
    assert_null(dataset.path_arena);
}

// LightlyTrain's list of "image directories and files": a file with an
// image extension is taken as given, beside folders; anything else is
// refused by name, and so is a file listed twice or inside a listed folder.
// Hundreds of entries sort instead of comparing every pair.
static void test_image_files_among_folders(void **state) {
    TestTree *tree = *state;
    tree_file(tree, "first/z.jpg");
    tree_file(tree, "loose/c.PNG");
    tree_file(tree, "loose/notes.txt");
    char first[PATH_MAX], loose[PATH_MAX], notes[PATH_MAX], missing[PATH_MAX];
    char loose_again[PATH_MAX + 16], inner[PATH_MAX];
    tree_path(tree, "first", first);
    tree_path(tree, "loose/c.PNG", loose);
    tree_path(tree, "loose/notes.txt", notes);
    tree_path(tree, "loose/missing.jpg", missing);
    tree_path(tree, "first/z.jpg", inner);
    snprintf(loose_again, sizeof loose_again, "%s/../loose/c.PNG", first);
    Dataset dataset;
    ErrorMessage err = {{0}};
    const char *mixed[] = {loose, first};
    assert_int_equal(dataset_scan_many(mixed, 2, &dataset, &err), 0);
    assert_int_equal(dataset.count, 2);
    assert_string_equal(dataset_path(&dataset, 0), loose);
    char full[PATH_MAX + 16];
    assert_int_equal(dataset_full_path(&dataset, 0, full, sizeof full), 0);
    assert_string_equal(full, loose);
    assert_string_equal(dataset_path(&dataset, 1), inner);
    dataset_free(&dataset);
    const char *alone[] = {loose};
    assert_int_equal(dataset_scan_many(alone, 1, &dataset, &err), 0);
    assert_int_equal(dataset.count, 1);
    assert_string_equal(dataset_path(&dataset, 0), loose);
    dataset_free(&dataset);
    const char *text[] = {first, notes};
    assert_int_equal(dataset_scan_many(text, 2, &dataset, &err), -1);
    expect_contains(err.text, "is neither a folder nor an image file");
    expect_contains(err.text, notes);
    const char *absent[] = {first, missing};
    assert_int_equal(dataset_scan_many(absent, 2, &dataset, &err), -1);
    expect_contains(err.text, "does not exist");
    const char *twice[] = {loose, first, loose_again};
    assert_int_equal(dataset_scan_many(twice, 3, &dataset, &err), -1);
    expect_contains(err.text, "are the same file");
    enum { MANY = 400 };
    const char *many[MANY + 1];
    char (*paths)[PATH_MAX] = calloc(MANY, sizeof *paths);
    for (int i = 0; i < MANY; i++) {
        char relative[64];
        snprintf(relative, sizeof relative, "many/%03d.jpg", (i * 7) % MANY);
        tree_file(tree, relative);
        tree_path(tree, relative, paths[i]);
        many[i] = paths[i];
    }
    assert_int_equal(dataset_scan_many(many, MANY, &dataset, &err), 0);
    assert_int_equal(dataset.count, MANY);
    assert_string_equal(dataset_path(&dataset, 1), paths[1]);  // as given, not sorted
    dataset_free(&dataset);
    tree_path(tree, "many", paths[MANY - 1]);  // the folder of the others, listed last
    many[MANY - 1] = paths[MANY - 1];
    assert_int_equal(dataset_scan_many(many, MANY, &dataset, &err), -1);
    expect_contains(err.text, "lies inside");
    free(paths);
    assert_null(dataset.path_arena);
}

static void test_thousands_of_files_sorted(void **state) {
    TestTree *tree = *state;
    // Enough paths to grow every buffer many times over; created in an order
    // that is neither sorted nor reverse-sorted.
    enum { FOLDERS = 30, FILES_PER_FOLDER = 100 };
    char name[64];
    for (int f = 0; f < FOLDERS; f++) {
        snprintf(name, sizeof name, "n%08d", (f * 7) % FOLDERS);
        tree_folder(tree, name);
        for (int i = 0; i < FILES_PER_FOLDER; i++) {
            snprintf(name, sizeof name, "n%08d/n%08d_%d.JPEG", (f * 7) % FOLDERS, (f * 7) % FOLDERS,
                     (i * 37) % FILES_PER_FOLDER);
            tree_file(tree, name);
        }
    }
    Dataset dataset;
    scan_ok(tree->root, &dataset);
    assert_int_equal(dataset.count, FOLDERS * FILES_PER_FOLDER);
    for (size_t i = 1; i < dataset.count; i++)
        if (strcmp(dataset_path(&dataset, i - 1), dataset_path(&dataset, i)) >= 0)
            fail_msg("not sorted at %zu: '%s' then '%s'", i, dataset_path(&dataset, i - 1),
                     dataset_path(&dataset, i));
    assert_string_equal(dataset_path(&dataset, 0), "n00000000/n00000000_0.JPEG");
    // "_10" < "_9" bytewise: the last file of the last folder is _99.
    assert_string_equal(dataset_path(&dataset, dataset.count - 1), "n00000029/n00000029_99.JPEG");
    dataset_free(&dataset);
}

// Creates, in `folder` and below to `depth` levels, subfolders and files
// whose names are prefixes of each other and differ in '-' '.' '/' order.
static void make_prefix_tree(const TestTree *tree, const char *folder, int depth, size_t *files) {
    static const char *const file_names[] = {"a.jpg", "a-.png", "a.b.webp", "a0.jpeg", "Z.jpg"};
    static const char *const folder_names[] = {"a", "a-", "a.b", "A"};
    char path[PATH_MAX];
    for (size_t i = 0; i < ARRAY_COUNT(file_names); i++) {
        snprintf(path, sizeof path, "%s%s%s", folder, *folder ? "/" : "", file_names[i]);
        tree_file(tree, path);
        (*files)++;
    }
    if (depth == 0) return;
    for (size_t i = 0; i < ARRAY_COUNT(folder_names); i++) {
        snprintf(path, sizeof path, "%s%s%s", folder, *folder ? "/" : "", folder_names[i]);
        tree_folder(tree, path);
        make_prefix_tree(tree, path, depth - 1, files);
    }
}

static void test_prefix_names_sorted_like_strcmp(void **state) {
    TestTree *tree = *state;
    size_t files = 0;
    make_prefix_tree(tree, "", 2, &files);
    Dataset dataset;
    scan_ok(tree->root, &dataset);
    assert_int_equal(dataset.count, files);  // 21 folders x 5 files
    // Strictly increasing and complete: exactly the strcmp-sorted list.
    for (size_t i = 1; i < dataset.count; i++)
        if (strcmp(dataset_path(&dataset, i - 1), dataset_path(&dataset, i)) >= 0)
            fail_msg("not sorted at %zu: '%s' then '%s'", i, dataset_path(&dataset, i - 1),
                     dataset_path(&dataset, i));
    assert_string_equal(dataset_path(&dataset, 0), "A/A/Z.jpg");
    assert_string_equal(dataset_path(&dataset, dataset.count - 1), "a0.jpeg");
    dataset_free(&dataset);
}

int main(void) {
#define TREE_TEST(name) cmocka_unit_test_setup_teardown(name, tree_setup, tree_teardown)
    const struct CMUnitTest tests[] = {
        TREE_TEST(test_nested_folders_sorted_bytewise),
        TREE_TEST(test_symlink_loops_terminate_and_are_counted),
        TREE_TEST(test_symlinks_to_files_and_folders_are_followed),
        TREE_TEST(test_mixed_case_extensions),
        TREE_TEST(test_skipped_files_counted_by_extension),
        TREE_TEST(test_many_skipped_kinds_lumped_as_other),
        TREE_TEST(test_extension_decides_not_content),
        TREE_TEST(test_hidden_entries_skipped_and_counted),
        TREE_TEST(test_named_pipes_skipped_and_counted),
        TREE_TEST(test_only_hidden_files_is_an_error_naming_them),
        TREE_TEST(test_empty_folder_is_an_error),
        TREE_TEST(test_missing_folder_is_an_error),
        TREE_TEST(test_file_as_root_is_an_error),
        TREE_TEST(test_only_non_images_lists_what_was_skipped),
        TREE_TEST(test_unreadable_subfolder_is_counted),
        TREE_TEST(test_full_path_joins_root_and_relative),
        TREE_TEST(test_several_folders_keep_order_and_folder_names),
        TREE_TEST(test_image_files_among_folders),
        TREE_TEST(test_thousands_of_files_sorted),
        TREE_TEST(test_prefix_names_sorted_like_strcmp),
    };
#undef TREE_TEST
    return cmocka_run_group_tests(tests, NULL, NULL);
}
