// Shared test helpers (see image_fixtures.h).
#include "image_fixtures.h"

#include "codec_fixtures.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *fixture_tempdir(void) {
    const char *base = getenv("TMPDIR");
    char template_path[4096];
    snprintf(template_path, sizeof template_path, "%s/ltc-test-XXXXXX", base ? base : "/tmp");
    char *made = mkdtemp(template_path);
    if (!made) abort();
    return strdup(made);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void fixture_remove_tree(const char *path) {
    if (!path || !strstr(path, "ltc-test-")) return;
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void make_parents(const char *path) {
    char buffer[4096];
    snprintf(buffer, sizeof buffer, "%s", path);
    for (char *p = buffer + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(buffer, 0755);
        *p = '/';
    }
}

static char *group_tempdir;

int fixture_tempdir_setup(void **state) {
    (void)state;
    group_tempdir = fixture_tempdir();
    return 0;
}

int fixture_tempdir_teardown(void **state) {
    (void)state;
    fixture_remove_tree(group_tempdir);
    free(group_tempdir);
    group_tempdir = NULL;
    return 0;
}

void fixture_temp_path(char *out, size_t capacity, const char *name) {
    snprintf(out, capacity, "%s/%s", group_tempdir, name);
}

int fixture_write_file(const char *path, const void *data, size_t size) {
    make_parents(path);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    const size_t written = size ? fwrite(data, 1, size, f) : 0;
    return fclose(f) == 0 && written == size ? 0 : -1;
}

void fixture_pattern(uint8_t *rgb, int width, int height, uint32_t seed) {
    const int fx = 1 + (int)(seed % 5), fy = 1 + (int)(seed / 5 % 5);
    for (int y = 0; y < height; y++) {
        for (int x = 0; x < width; x++) {
            uint8_t *p = rgb + ((size_t)y * width + x) * 3;
            p[0] = (uint8_t)((x * 255 * fx / (width > 1 ? width - 1 : 1)) % 256);
            p[1] = (uint8_t)((y * 255 * fy / (height > 1 ? height - 1 : 1)) % 256);
            p[2] = (uint8_t)((seed * 37 + (uint32_t)(x + y)) % 256);
        }
    }
}

int fixture_write_png(const char *path, int width, int height, const uint8_t *rgb) {
    Bytes file = encode_png_rgb(rgb, width, height);
    const int status = fixture_write_file(path, file.data, file.size);
    free(file.data);
    return status;
}

int fixture_encode_jpeg(int width, int height, const uint8_t *rgb, int quality, uint8_t **out,
                        size_t *out_size) {
    JpegSpec spec = JPEG_RGB;
    spec.quality = quality;
    const Bytes file = encode_jpeg(rgb, width, height, &spec);
    *out = file.data;
    *out_size = file.size;
    return 0;
}

int fixture_write_jpeg(const char *path, int width, int height, const uint8_t *rgb, int quality) {
    uint8_t *data = NULL;
    size_t size = 0;
    if (fixture_encode_jpeg(width, height, rgb, quality, &data, &size) != 0) return -1;
    const int status = fixture_write_file(path, data, size);
    free(data);
    return status;
}

size_t fixture_jpeg_drop_segments(uint8_t *jpeg, size_t size, uint8_t marker) {
    size_t read = 2, write = 2;  // after SOI
    while (read + 4 <= size && jpeg[read] == 0xFF && jpeg[read + 1] != 0xDA) {
        const size_t length = 2 + ((size_t)jpeg[read + 2] << 8 | jpeg[read + 3]);
        if (read + length > size) break;
        if (jpeg[read + 1] != marker) memmove(jpeg + write, jpeg + read, length), write += length;
        read += length;
    }
    memmove(jpeg + write, jpeg + read, size - read);  // SOS, the scans, EOI
    return write + size - read;
}

int fixture_folder_teardown(void **state) {
    FixtureFolder *folder = *state;
    dataset_free(&folder->dataset);
    fixture_remove_tree(folder->root);
    free(folder->root);
    free(folder);
    return 0;
}
