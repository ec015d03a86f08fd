// Derives a folder of real JPEGs from a few photographs, for the GPU
// script's training runs (make first-light; tests/fixtures/photos holds the
// sources): each output is a random crop of one source (a quarter to all of
// its area, aspect 3:4 to 4:3), scaled so its shorter side is MIN_SIDE to
// MAX_SIDE pixels, flipped half of the time, encoded at JPEG quality 75 to
// 95. Our decoder and resize (src/decode, src/augment/resize.h) do the
// reading and scaling; libjpeg encodes.
//   photo_crops SOURCE_DIR OUT_DIR COUNT [MIN_SIDE MAX_SIDE [SEED]]
// Writes OUT_DIR/photo_NNNNN.jpg; the same arguments give the same files.
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jpeglib.h>

#include "augment/resize.h"
#include "decode/decode.h"
#include "util/file.h"
#include "util/rng.h"

#define MAX_SOURCES 64

typedef struct Source {
    char path[4096];
    ByteBuffer bytes;
} Source;

static int is_jpeg_name(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot && (strcmp(dot, ".jpg") == 0 || strcmp(dot, ".jpeg") == 0);
}

static int compare_sources(const void *a, const void *b) {
    return strcmp(((const Source *)a)->path, ((const Source *)b)->path);
}

// Every .jpg of dir, sorted by name (so the outputs do not depend on the
// order readdir gives).
static int read_sources(const char *dir, Source *sources, ErrorMessage *err) {
    DIR *folder = opendir(dir);
    if (!folder) return error_set(err, "%s: %s", dir, strerror(errno));
    int count = 0;
    for (struct dirent *entry; (entry = readdir(folder)) != NULL;) {
        if (!is_jpeg_name(entry->d_name) || count == MAX_SOURCES) continue;
        snprintf(sources[count].path, sizeof sources[count].path, "%s/%s", dir, entry->d_name);
        sources[count].bytes = (ByteBuffer){0};
        count++;
    }
    closedir(folder);
    if (count == 0) return error_set(err, "%s: no .jpg photographs", dir);
    qsort(sources, (size_t)count, sizeof *sources, compare_sources);
    for (int i = 0; i < count; i++)
        if (file_read_all(sources[i].path, &sources[i].bytes, (size_t)64 << 20, err)) return -1;
    return count;
}

static int write_jpeg(const char *path, const uint8_t *rgb, int width, int height, int quality,
                      ErrorMessage *err) {
    struct jpeg_compress_struct cinfo;
    struct jpeg_error_mgr jerr;
    unsigned char *buffer = NULL;
    unsigned long size = 0;
    cinfo.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&cinfo);
    jpeg_mem_dest(&cinfo, &buffer, &size);
    cinfo.image_width = (JDIMENSION)width;
    cinfo.image_height = (JDIMENSION)height;
    cinfo.input_components = 3;
    cinfo.in_color_space = JCS_RGB;
    jpeg_set_defaults(&cinfo);
    jpeg_set_quality(&cinfo, quality, TRUE);
    jpeg_start_compress(&cinfo, TRUE);
    while (cinfo.next_scanline < cinfo.image_height) {
        JSAMPROW row = (JSAMPROW)(rgb + (size_t)cinfo.next_scanline * (size_t)width * 3);
        jpeg_write_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_compress(&cinfo);
    jpeg_destroy_compress(&cinfo);
    const FileChunk chunk = {buffer, size};
    const int status = file_write_atomic(path, &chunk, 1, err);
    free(buffer);
    return status;
}

// One output: crop, scale, flip and encode source `source` (decoded).
static int write_crop(const Image *photo, Rng *rng, int min_side, int max_side, const char *path,
                      ResampleTable *columns, ResampleTable *rows, ResampleBuffer *buffer,
                      ErrorMessage *err) {
    const double area = (double)photo->width * photo->height * rng_range(rng, 0.25f, 1.0f);
    const double aspect = exp(rng_range(rng, logf(3.0f / 4.0f), logf(4.0f / 3.0f)));
    double width = fmin(sqrt(area * aspect), photo->width);
    double height = fmin(sqrt(area / aspect), photo->height);
    const double x = rng_uniform(rng) * (photo->width - width);
    const double y = rng_uniform(rng) * (photo->height - height);
    const int side = min_side + (int)rng_below(rng, (uint32_t)(max_side - min_side + 1));
    const double scale = side / fmin(width, height);
    const int out_width = (int)lround(width * scale), out_height = (int)lround(height * scale);
    uint8_t *rgb = malloc((size_t)out_width * out_height * 3);
    if (!rgb) return error_set(err, "out of memory");
    int status = resize_rgb(photo, x, y, width, height, rng_bernoulli(rng, 0.5f), RESIZE_ANTIALIASED, out_width,
                            out_height, rgb, (size_t)out_width * 3, columns, rows, buffer, err);
    if (status == 0)
        status = write_jpeg(path, rgb, out_width, out_height, 75 + (int)rng_below(rng, 21), err);
    free(rgb);
    return status;
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 6 && argc != 7) {
        fprintf(stderr, "usage: %s SOURCE_DIR OUT_DIR COUNT [MIN_SIDE MAX_SIDE [SEED]]\n",
                argv[0]);
        return 2;
    }
    const int count = atoi(argv[3]);
    const int min_side = argc >= 6 ? atoi(argv[4]) : 160;
    const int max_side = argc >= 6 ? atoi(argv[5]) : 320;
    const uint64_t seed = argc == 7 ? strtoull(argv[6], NULL, 10) : 0;
    if (count < 1 || min_side < 8 || max_side < min_side) {
        fprintf(stderr, "photo_crops: COUNT >= 1 and 8 <= MIN_SIDE <= MAX_SIDE\n");
        return 2;
    }
    static Source sources[MAX_SOURCES];
    ErrorMessage err = {{0}};
    const int source_count = read_sources(argv[1], sources, &err);
    if (source_count < 0 || (mkdir(argv[2], 0755) != 0 && errno != EEXIST)) {
        fprintf(stderr, "photo_crops: %s\n", source_count < 0 ? err.text : strerror(errno));
        return 1;
    }
    Decoder *decoder = decoder_create(0);
    ResampleTable columns = {0}, rows = {0};
    ResampleBuffer buffer = {0};
    int status = decoder ? 0 : error_set(&err, "out of memory");
    for (int i = 0; i < count && status == 0; i++) {
        const Source *source = &sources[i % source_count];
        DecodedImage decoded;
        Rng rng = rng_make(seed, 0, (uint64_t)i, 0);
        char path[4200];
        snprintf(path, sizeof path, "%s/photo_%05d.jpg", argv[2], i);
        status = decoder_decode(decoder, source->bytes.data, source->bytes.size, NULL, &decoded,
                                &err);
        if (status == 0)
            status = write_crop(&decoded.image, &rng, min_side, max_side, path, &columns, &rows,
                                &buffer, &err);
        if (status) error_prefix(&err, "%s", source->path);
    }
    resample_table_free(&columns);
    resample_table_free(&rows);
    resample_buffer_free(&buffer);
    decoder_destroy(decoder);
    for (int i = 0; i < source_count; i++) byte_buffer_free(&sources[i].bytes);
    if (status) {
        fprintf(stderr, "photo_crops: %s\n", err.text);
        return 1;
    }
    printf("photo_crops: %d JPEGs from %d photographs in %s\n", count, source_count, argv[2]);
    return 0;
}
