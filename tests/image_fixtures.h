// Test helpers shared by the unit tests: temporary folders and small images
// written with the codec libraries themselves (so tests know every pixel).
#ifndef LTC_TESTS_IMAGE_FIXTURES_H
#define LTC_TESTS_IMAGE_FIXTURES_H

#include <stddef.h>
#include <stdint.h>

#include "data/scan.h"

// A fresh folder under $TMPDIR or /tmp; abort()s when it cannot be made.
char *fixture_tempdir(void);
// rm -rf of a fixture folder (refuses paths outside the temp area).
void fixture_remove_tree(const char *path);
// cmocka group setup / teardown around one fresh temporary folder, and a
// path inside it.
int fixture_tempdir_setup(void **state);
int fixture_tempdir_teardown(void **state);
void fixture_temp_path(char *out, size_t capacity, const char *name);
// A temporary folder of images and its scan, the state of a cmocka group
// of loader tests; fixture_folder_teardown frees the scan and removes the
// folder.
typedef struct FixtureFolder {
    char *root;
    Dataset dataset;
} FixtureFolder;
int fixture_folder_teardown(void **state);
// Creates the parent folders of path too.
int fixture_write_file(const char *path, const void *data, size_t size);
// A smooth, seed-dependent RGB pattern (compresses well and survives JPEG).
void fixture_pattern(uint8_t *rgb, int width, int height, uint32_t seed);
int fixture_write_png(const char *path, int width, int height, const uint8_t *rgb);
int fixture_write_jpeg(const char *path, int width, int height, const uint8_t *rgb, int quality);
// Encodes to memory; *out is malloc'ed.
int fixture_encode_jpeg(int width, int height, const uint8_t *rgb, int quality, uint8_t **out,
                        size_t *out_size);
// Removes every marker segment of type `marker` (0xDB: DQT, 0xC4: DHT) before
// the first SOS of a JPEG, in place; returns the new size.
size_t fixture_jpeg_drop_segments(uint8_t *jpeg, size_t size, uint8_t marker);

#endif
