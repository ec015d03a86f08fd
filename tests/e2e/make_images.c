// Writes a small image folder for the end-to-end tests:
//   make_images DIR COUNT [--corrupt N] [--noise]
// COUNT patterned images (JPEG and PNG, varied sizes, in class folders), N
// corrupt files and one non-image file. --noise: random pixels on top of
// the pattern (no flat areas: numerical comparisons of training runs stay
// well conditioned, tests/e2e/train_ranks.sh).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../image_fixtures.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: make_images DIR COUNT [--corrupt N] [--noise]\n");
        return 2;
    }
    const char *root = argv[1];
    const int count = atoi(argv[2]);
    int corrupt = 0, noise = 0;
    for (int a = 3; a < argc; a++) {
        if (strcmp(argv[a], "--corrupt") == 0 && a + 1 < argc) corrupt = atoi(argv[++a]);
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
    snprintf(path, sizeof path, "%s/README.txt", root);
    fixture_write_file(path, "not an image\n", 13);
    free(rgb);
    return 0;
}
