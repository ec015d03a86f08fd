// Writes a small image folder for the end-to-end tests:
//   make_images DIR COUNT [--corrupt N]
// COUNT patterned images (JPEG and PNG, varied sizes, in class folders), N
// corrupt files and one non-image file.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../image_fixtures.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: make_images DIR COUNT [--corrupt N]\n");
        return 2;
    }
    const char *root = argv[1];
    const int count = atoi(argv[2]);
    const int corrupt = argc >= 5 && strcmp(argv[3], "--corrupt") == 0 ? atoi(argv[4]) : 0;
    uint8_t *rgb = malloc(400 * 400 * 3);
    char path[4096];
    for (int i = 0; i < count; i++) {
        const int width = 64 + (i * 71) % 320, height = 64 + (i * 43) % 300;
        fixture_pattern(rgb, width, height, (uint32_t)i);
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
