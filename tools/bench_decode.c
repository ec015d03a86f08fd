// Decode benchmark per format: every image file under a folder is read into
// memory once, then probed and decoded REPEAT times on one thread; prints the
// CPU time per image (this thread's, so other processes on a shared machine
// disturb it less than wall time) and images/s, per format.
//
//   bench_decode DIR [--repeat N (default 5)] [--mode whole|train]
//
// whole: the full image at full resolution, 8-bit RGB (what
//        tools/compare/pillow_decode.py times for Pillow's open + convert).
// train: what the training loader asks of a file after its first read: the
//        centre 64% of the image at the smallest scale that keeps 224 pixels
//        on its shorter side (JPEG's DCT scaling, TIFF's strips, ...).
// Uses only decoder_probe/decoder_decode, so the same source builds against
// an older libltc.a for before/after figures.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data/scan.h"
#include "decode/decode.h"
#include "util/file.h"

#define MAX_FORMATS 32

static double thread_seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

typedef struct Totals {
    double seconds;
    long images;
} Totals;

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR [--repeat N] [--mode whole|train]\n", argv[0]);
        return 2;
    }
    int repeat = 5, train_mode = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--repeat") == 0) repeat = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--mode") == 0) train_mode = strcmp(argv[i + 1], "train") == 0;
    }
    Dataset dataset;
    ErrorMessage err = {{0}};
    if (dataset_scan(argv[1], &dataset, &err) != 0) {
        fprintf(stderr, "bench_decode: %s\n", err.text);
        return 2;
    }
    ByteBuffer *files = calloc(dataset.count, sizeof *files);
    for (size_t i = 0; i < dataset.count; i++) {
        char path[4096];
        if (dataset_full_path(&dataset, i, path, sizeof path) != 0 ||
            file_read_all(path, &files[i], (size_t)1 << 30, &err) != 0) {
            fprintf(stderr, "bench_decode: %s\n", err.text);
            return 1;
        }
    }
    Decoder *decoder = decoder_create(0);
    Totals totals[MAX_FORMATS] = {{0, 0}};
    long failed = 0;
    for (int r = 0; r < repeat; r++)
        for (size_t i = 0; i < dataset.count; i++) {
            const double start = thread_seconds();
            ImageInfo info;
            DecodedImage out;
            DecodeRequest request = {{0, 0, 0, 0}, 0, 0, 0, 0};
            int status = decoder_probe(decoder, files[i].data, files[i].size, &info, &err);
            if (status == 0) {
                request.region = (PixelRect){info.width / 5, info.height / 5,
                                             info.width * 3 / 5, info.height * 3 / 5};
                const int shorter = request.region.width < request.region.height
                                        ? request.region.width : request.region.height;
                const double scale = shorter > 224 ? 224.0 / shorter : 1.0;
                request.min_width = (int)(request.region.width * scale + 0.999);
                request.min_height = (int)(request.region.height * scale + 0.999);
                status = decoder_decode(decoder, files[i].data, files[i].size,
                                        train_mode ? &request : NULL, &out, &err);
            }
            const double seconds = thread_seconds() - start;
            if (status != 0) {
                failed++;
                continue;
            }
            const int f = info.format < MAX_FORMATS ? (int)info.format : 0;
            totals[f].seconds += seconds;
            totals[f].images++;
        }
    printf("bench_decode %s: %zu files x %d, mode %s, one thread (CPU time)\n", argv[1],
           dataset.count, repeat, train_mode ? "train" : "whole");
    for (int f = 0; f < MAX_FORMATS; f++)
        if (totals[f].images)
            printf("RESULT format %s: %.3f ms per image, %.1f images/s (%ld decodes)\n",
                   image_format_name((ImageFormat)f), 1e3 * totals[f].seconds / totals[f].images,
                   totals[f].images / totals[f].seconds, totals[f].images);
    if (failed) printf("failed decodes: %ld\n", failed);
    decoder_destroy(decoder);
    for (size_t i = 0; i < dataset.count; i++) byte_buffer_free(&files[i]);
    free(files);
    dataset_free(&dataset);
    return 0;
}
