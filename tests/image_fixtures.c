// Shared test helpers (see image_fixtures.h).
#include "image_fixtures.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>  // before jpeglib.h, which uses FILE
#include <jpeglib.h>
#include <png.h>
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
    make_parents(path);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info || setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        fclose(f);
        return -1;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, 8, PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < height; y++) png_write_row(png, rgb + (size_t)y * width * 3);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return fclose(f) == 0 ? 0 : -1;
}

int fixture_encode_jpeg(int width, int height, const uint8_t *rgb, int quality, uint8_t **out,
                        size_t *out_size) {
    struct jpeg_compress_struct cinfo;
    struct jpeg_error_mgr jerr;
    cinfo.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&cinfo);
    unsigned char *buffer = NULL;
    unsigned long size = 0;
    jpeg_mem_dest(&cinfo, &buffer, &size);
    cinfo.image_width = (JDIMENSION)width;
    cinfo.image_height = (JDIMENSION)height;
    cinfo.input_components = 3;
    cinfo.in_color_space = JCS_RGB;
    jpeg_set_defaults(&cinfo);
    jpeg_set_quality(&cinfo, quality, TRUE);
    jpeg_start_compress(&cinfo, TRUE);
    while (cinfo.next_scanline < cinfo.image_height) {
        JSAMPROW row = (JSAMPROW)(rgb + (size_t)cinfo.next_scanline * width * 3);
        jpeg_write_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_compress(&cinfo);
    jpeg_destroy_compress(&cinfo);
    *out = buffer;
    *out_size = size;
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
