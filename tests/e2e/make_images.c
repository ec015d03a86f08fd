// Writes a small image folder for the end-to-end tests:
//   make_images DIR COUNT [--corrupt N] [--damaged N] [--no-dqt N] [--noise]
// COUNT patterned images (JPEG and PNG, varied sizes, in class folders), N
// corrupt files (a JPEG marker and garbage) and one non-image file.
// --damaged: N JPEGs cut at 95% of their bytes (premature end of data) and N
// PNGs whose zlib stream is broken near its end (chunk CRCs fixed), in
// damaged/: damage a decoder that reads only a crop's rows would miss.
// --no-dqt: N JPEGs without their quantization tables (DQT segments
// removed), in damaged/: unreadable alone, and after any other image.
// --noise: random pixels on top of the pattern (no flat areas: numerical
// comparisons of training runs stay well conditioned, e2e/train_ranks.sh).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../image_fixtures.h"

static uint32_t read_be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void write_be32(uint8_t *p, uint32_t value) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(value >> (24 - 8 * i));
}

// Overwrites bytes at 75%..80% of the last IDAT chunk's data with 0xff and
// fixes that chunk's CRC, so only inflating that far finds the damage.
static int break_png_zlib(uint8_t *png, size_t size) {
    size_t last = 0;
    for (size_t at = 8; at + 12 <= size;) {
        const uint32_t length = read_be32(png + at);
        if (memcmp(png + at + 4, "IDAT", 4) == 0) last = at;
        at += 12 + (size_t)length;
    }
    if (!last) return -1;
    const uint32_t length = read_be32(png + last);
    uint8_t *data = png + last + 8;
    for (uint32_t i = length * 19 / 20; i < length - 8; i++) data[i] = 0xff;
    write_be32(data + length, (uint32_t)crc32(crc32(0, png + last + 4, 4), data, length));
    return 0;
}

static int write_damaged(const char *root, int index, uint8_t *rgb) {
    const int width = 300, height = 240;
    fixture_pattern(rgb, width, height, 1000u + (uint32_t)index);
    char path[4096];
    uint8_t *jpeg = NULL;
    size_t size = 0;
    if (fixture_encode_jpeg(width, height, rgb, 90, &jpeg, &size) != 0) return -1;
    snprintf(path, sizeof path, "%s/damaged/truncated%d.jpg", root, index);
    int status = fixture_write_file(path, jpeg, size * 95 / 100);
    free(jpeg);
    snprintf(path, sizeof path, "%s/damaged/badzlib%d.png", root, index);
    if (status || fixture_write_png(path, width, height, rgb)) return -1;
    FILE *file = fopen(path, "rb");
    uint8_t *png = malloc(1 << 22);
    size = file ? fread(png, 1, 1 << 22, file) : 0;
    if (file) fclose(file);
    status = size ? break_png_zlib(png, size) : -1;
    if (!status) status = fixture_write_file(path, png, size);
    free(png);
    return status;
}

static int write_without_dqt(const char *root, int index, uint8_t *rgb) {
    const int width = 96, height = 80;
    fixture_pattern(rgb, width, height, 2000u + (uint32_t)index);
    uint8_t *jpeg = NULL;
    size_t size = 0;
    if (fixture_encode_jpeg(width, height, rgb, 90, &jpeg, &size) != 0) return -1;
    size = fixture_jpeg_drop_segments(jpeg, size, 0xDB);
    char path[4096];
    snprintf(path, sizeof path, "%s/damaged/nodqt%d.jpg", root, index);
    const int status = fixture_write_file(path, jpeg, size);
    free(jpeg);
    return status;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: make_images DIR COUNT [--corrupt N] [--damaged N] [--no-dqt N] "
                        "[--noise]\n");
        return 2;
    }
    const char *root = argv[1];
    const int count = atoi(argv[2]);
    int corrupt = 0, damaged = 0, no_dqt = 0, noise = 0;
    for (int a = 3; a < argc; a++) {
        if (strcmp(argv[a], "--corrupt") == 0 && a + 1 < argc) corrupt = atoi(argv[++a]);
        else if (strcmp(argv[a], "--damaged") == 0 && a + 1 < argc) damaged = atoi(argv[++a]);
        else if (strcmp(argv[a], "--no-dqt") == 0 && a + 1 < argc) no_dqt = atoi(argv[++a]);
        else if (strcmp(argv[a], "--noise") == 0) noise = 1;
        else {
            fprintf(stderr, "make_images: unknown argument '%s'\n", argv[a]);
            return 2;
        }
    }
    uint32_t state = 12345;
    uint8_t *rgb = malloc(400 * 400 * 3);
    char path[4096];
    for (int i = 0; i < count; i++) {
        const int width = 64 + (i * 71) % 320, height = 64 + (i * 43) % 300;
        fixture_pattern(rgb, width, height, (uint32_t)i);
        for (int p = 0; noise && p < width * height * 3; p++) {
            state = state * 1664525u + 1013904223u;  // a plain LCG is random enough here
            rgb[p] = (uint8_t)(rgb[p] / 2 + (state >> 25));
        }
        snprintf(path, sizeof path, "%s/class%d/image%04d.%s", root, i % 4, i,
                 i % 3 == 2 ? "png" : "jpg");
        const int status = i % 3 == 2 ? fixture_write_png(path, width, height, rgb)
                                      : fixture_write_jpeg(path, width, height, rgb, 90);
        if (status != 0) {
            fprintf(stderr, "make_images: cannot write %s\n", path);
            return 1;
        }
    }
    for (int i = 0; i < corrupt; i++) {
        snprintf(path, sizeof path, "%s/corrupt/broken%d.jpg", root, i);
        if (fixture_write_file(path, "\xff\xd8\xff garbage", 12) != 0) return 1;
    }
    for (int i = 0; i < damaged; i++)
        if (write_damaged(root, i, rgb) != 0) {
            fprintf(stderr, "make_images: cannot write the damaged images\n");
            return 1;
        }
    for (int i = 0; i < no_dqt; i++)
        if (write_without_dqt(root, i, rgb) != 0) {
            fprintf(stderr, "make_images: cannot write the images without DQT\n");
            return 1;
        }
    snprintf(path, sizeof path, "%s/README.txt", root);
    fixture_write_file(path, "not an image\n", 13);
    free(rgb);
    return 0;
}
