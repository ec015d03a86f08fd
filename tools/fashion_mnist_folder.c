// fashion_mnist_folder: turns the Fashion-MNIST IDX files of the Debian
// package dataset-fashion-mnist into a class-per-folder tree of greyscale PNG
// files, the labelled data of the learning check (train + kNN evaluation):
//   OUT/<class name>/<split>_<index, 5 digits>.png
//   fashion_mnist_folder --out DIR [--split train|test] [--per-class N]
//                        [--upscale S] [--source DIR]
// --per-class N keeps the first N images of each class in file order;
// --upscale S enlarges each 28x28 image S times (nearest neighbour).
// Exit codes: 0 done, 1 a file could not be written, 2 bad usage or input.
#include <errno.h>
#include <limits.h>
#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "util/error.h"

#define DEFAULT_SOURCE "/usr/share/datasets/fashion-mnist"
#define CLASS_COUNT 10
#define MAX_SIDE 1024            // rows/cols accepted from an IDX header
#define MAX_IMAGES 1000000       // images accepted from an IDX header
#define MAX_UPSCALE 32
#define MAX_IDX_BYTES (1u << 30)  // pixel bytes accepted from an IDX header
#define MAX_OUTPUT_SIDE 4096      // after --upscale

static const char *const class_names[CLASS_COUNT] = {
    "t-shirt_top", "trouser", "pullover", "dress", "coat",
    "sandal", "shirt", "sneaker", "bag", "ankle_boot"};

typedef struct Options {
    const char *source;
    const char *out;
    const char *split;  // "train" or "test"
    long per_class;     // -1 = all
    long upscale;
} Options;

typedef struct IdxData {
    uint32_t count;
    uint32_t rows, cols;  // 0 for label files
    uint8_t *values;      // (count, rows, cols) or (count)
} IdxData;

// ---- IDX reading ------------------------------------------------------------------

static int read_exact(gzFile file, void *buffer, size_t size, const char *path,
                      const char *what, ErrorMessage *err) {
    size_t done = 0;
    while (done < size) {
        const size_t want = size - done < (1u << 30) ? size - done : (1u << 30);
        const int got = gzread(file, (uint8_t *)buffer + done, (unsigned)want);
        if (got < 0) {
            int code = 0;
            const char *message = gzerror(file, &code);
            return error_set(err, "'%s': cannot read %s: %s", path, what, message);
        }
        if (got == 0)
            return error_set(err, "'%s': truncated: %s needs %zu bytes, the file has %zu", path,
                             what, size, done);
        done += (size_t)got;
    }
    return 0;
}

static uint32_t big_endian_u32(const uint8_t bytes[4]) {
    return (uint32_t)bytes[0] << 24 | (uint32_t)bytes[1] << 16 | (uint32_t)bytes[2] << 8 | bytes[3];
}

// An IDX file of unsigned bytes with 1 (labels) or 3 (images) dimensions,
// gzip-compressed or plain (gzread reads both).
static int idx_read(const char *path, int dimensions, IdxData *data, ErrorMessage *err) {
    memset(data, 0, sizeof *data);
    gzFile file = gzopen(path, "rb");
    if (!file) return error_set(err, "'%s': cannot open: %s", path, strerror(errno ? errno : ENOMEM));
    uint8_t header[16];
    const size_t header_size = 4 + 4 * (size_t)dimensions;
    int status = read_exact(file, header, header_size, path, "the IDX header", err);
    const uint32_t magic = status == 0 ? big_endian_u32(header) : 0;
    const uint32_t expected_magic = 0x00000800u | (uint32_t)dimensions;  // type 0x08 = ubyte
    if (status == 0 && magic != expected_magic)
        status = error_set(err, "'%s': not an IDX file of %d-d unsigned bytes (magic 0x%08x, expected 0x%08x)",
                           path, dimensions, (unsigned)magic, (unsigned)expected_magic);
    if (status == 0) {
        data->count = big_endian_u32(header + 4);
        data->rows = dimensions == 3 ? big_endian_u32(header + 8) : 1;
        data->cols = dimensions == 3 ? big_endian_u32(header + 12) : 1;
        if (data->count < 1 || data->count > MAX_IMAGES || data->rows < 1 || data->rows > MAX_SIDE ||
            data->cols < 1 || data->cols > MAX_SIDE ||
            (uint64_t)data->count * data->rows * data->cols > MAX_IDX_BYTES)
            status = error_set(err, "'%s': implausible IDX sizes %u x %u x %u (limits: %d items of at "
                               "most %d x %d, %u bytes in all)",
                               path, (unsigned)data->count, (unsigned)data->rows,
                               (unsigned)data->cols, MAX_IMAGES, MAX_SIDE, MAX_SIDE, MAX_IDX_BYTES);
    }
    if (status == 0) {
        const size_t size = (size_t)data->count * data->rows * data->cols;
        data->values = malloc(size);
        status = data->values ? read_exact(file, data->values, size, path, "the IDX data", err)
                              : error_set(err, "'%s': out of memory for %zu bytes", path, size);
    }
    gzclose(file);
    if (status != 0) {
        free(data->values);
        memset(data, 0, sizeof *data);
    }
    return status;
}

// SOURCE/<name>.gz, else SOURCE/<name> (an unpacked copy).
static int find_source_file(const char *source, const char *name, char *path, size_t capacity,
                            ErrorMessage *err) {
    struct stat info;
    snprintf(path, capacity, "%s/%s.gz", source, name);
    if (stat(path, &info) == 0) return 0;
    snprintf(path, capacity, "%s/%s", source, name);
    if (stat(path, &info) == 0) return 0;
    return error_set(err,
                     "Fashion-MNIST not found: no '%s.gz' (or unpacked '%s'); install the "
                     "dataset with `make deps` or `apt-get install dataset-fashion-mnist`, or "
                     "pass --source DIR",
                     path, name);
}

// ---- PNG writing --------------------------------------------------------------------

typedef struct PngBuffer {
    uint8_t *data;
    size_t size, capacity;
    int out_of_memory;
} PngBuffer;

static void png_buffer_write(png_structp png, png_bytep bytes, png_size_t length) {
    PngBuffer *buffer = png_get_io_ptr(png);
    if (buffer->size + length > buffer->capacity) {
        size_t capacity = buffer->capacity ? buffer->capacity * 2 : 4096;
        while (capacity < buffer->size + length) capacity *= 2;
        uint8_t *grown = realloc(buffer->data, capacity);
        if (!grown) {
            buffer->out_of_memory = 1;
            png_error(png, "out of memory");
        }
        buffer->data = grown;
        buffer->capacity = capacity;
    }
    memcpy(buffer->data + buffer->size, bytes, length);
    buffer->size += length;
}

static void png_buffer_flush(png_structp png) { (void)png; }

// 8-bit greyscale PNG of a (height, width) image into buffer (reset first).
static int png_encode_grey(const uint8_t *pixels, int width, int height, PngBuffer *buffer,
                           ErrorMessage *err) {
    buffer->size = 0;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        return error_set(err, "libpng: cannot create the encoder");
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        return error_set(err, "libpng: encoding failed%s", buffer->out_of_memory ? " (out of memory)" : "");
    }
    png_set_write_fn(png, buffer, png_buffer_write, png_buffer_flush);
    png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, 8, PNG_COLOR_TYPE_GRAY,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < height; y++) png_write_row(png, (png_const_bytep)(pixels + (size_t)y * width));
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return 0;
}

static int write_whole_file(const char *path, const void *data, size_t size, ErrorMessage *err) {
    FILE *file = fopen(path, "wb");
    if (!file) return error_set(err, "'%s': cannot create: %s", path, strerror(errno));
    const int wrote = fwrite(data, 1, size, file) == size;
    const int closed = fclose(file) == 0;
    if (wrote && closed) return 0;
    const int saved = errno;
    unlink(path);  // no half file left under the real name
    return error_set(err, "'%s': cannot write: %s", path, strerror(saved));
}

static int make_folder(const char *path, ErrorMessage *err) {
    if (mkdir(path, 0755) == 0 || errno == EEXIST) {
        struct stat info;
        if (stat(path, &info) == 0 && S_ISDIR(info.st_mode)) return 0;
        return error_set(err, "'%s' exists and is not a folder", path);
    }
    return error_set(err, "cannot create folder '%s': %s", path, strerror(errno));
}

// ---- conversion -------------------------------------------------------------------------

static void upscale_nearest(const uint8_t *source, int width, int height, int scale,
                            uint8_t *target /* (height * scale, width * scale) */) {
    const int target_width = width * scale;
    for (int y = 0; y < height * scale; y++)
        for (int x = 0; x < target_width; x++)
            target[(size_t)y * target_width + x] = source[(size_t)(y / scale) * width + x / scale];
}

// Returns 0, or the exit code with a message in err.
static int convert(const Options *options, ErrorMessage *err) {
    const int is_test = strcmp(options->split, "test") == 0;
    const char *prefix = is_test ? "t10k" : "train";
    char image_name[64], label_name[64], image_path[4096], label_path[4096];
    snprintf(image_name, sizeof image_name, "%s-images-idx3-ubyte", prefix);
    snprintf(label_name, sizeof label_name, "%s-labels-idx1-ubyte", prefix);
    if (find_source_file(options->source, image_name, image_path, sizeof image_path, err) != 0 ||
        find_source_file(options->source, label_name, label_path, sizeof label_path, err) != 0)
        return 2;
    IdxData images, labels;
    if (idx_read(image_path, 3, &images, err) != 0) return 2;
    if (idx_read(label_path, 1, &labels, err) != 0) {
        free(images.values);
        return 2;
    }
    int status = 0;
    if (labels.count != images.count) {
        error_set(err, "'%s' holds %u labels but '%s' holds %u images", label_path,
                  (unsigned)labels.count, image_path, (unsigned)images.count);
        status = 2;
    }
    for (uint32_t i = 0; status == 0 && i < labels.count; i++)
        if (labels.values[i] >= CLASS_COUNT) {
            error_set(err, "'%s': label %u of item %u is not a class (0-%d)", label_path,
                      (unsigned)labels.values[i], (unsigned)i, CLASS_COUNT - 1);
            status = 2;
        }
    const int scale = (int)options->upscale;
    const int width = (int)images.cols * scale, height = (int)images.rows * scale;
    if (status == 0 && (width > MAX_OUTPUT_SIDE || height > MAX_OUTPUT_SIDE)) {
        error_set(err, "--upscale %d makes %d x %d images, over the %d pixel limit per side", scale,
                  width, height, MAX_OUTPUT_SIDE);
        status = 2;
    }
    uint8_t *scaled = status == 0 ? malloc((size_t)width * height) : NULL;
    PngBuffer png = {0};
    if (status == 0 && !scaled) {
        error_set(err, "out of memory for a %d x %d image", width, height);
        status = 1;
    }
    char path[4096];
    for (int c = 0; status == 0 && c < CLASS_COUNT; c++) {
        snprintf(path, sizeof path, "%s/%s", options->out, class_names[c]);
        if (make_folder(options->out, err) != 0 || make_folder(path, err) != 0) status = 1;
    }
    long written[CLASS_COUNT] = {0};
    const size_t image_size = (size_t)images.rows * images.cols;
    for (uint32_t i = 0; status == 0 && i < images.count; i++) {
        const int label = labels.values[i];
        if (options->per_class >= 0 && written[label] >= options->per_class) continue;
        upscale_nearest(images.values + i * image_size, (int)images.cols, (int)images.rows, scale, scaled);
        snprintf(path, sizeof path, "%s/%s/%s_%05u.png", options->out, class_names[label],
                 options->split, (unsigned)i);
        if (png_encode_grey(scaled, width, height, &png, err) != 0 ||
            write_whole_file(path, png.data, png.size, err) != 0) {
            status = 1;
            break;
        }
        written[label]++;
    }
    if (status == 0) {
        long total = 0;
        for (int c = 0; c < CLASS_COUNT; c++) total += written[c];
        printf("wrote %ld images (%d x %d grey PNG) of the %s split to '%s':", total, width, height,
               options->split, options->out);
        for (int c = 0; c < CLASS_COUNT; c++) printf(" %s %ld%s", class_names[c], written[c], c + 1 < CLASS_COUNT ? "," : "\n");
    }
    free(png.data);
    free(scaled);
    free(images.values);
    free(labels.values);
    return status;
}

// ---- command line --------------------------------------------------------------------------

static void print_usage(FILE *stream, const char *program) {
    fprintf(stream,
            "usage: %s --out DIR [--split train|test] [--per-class N] [--upscale S] [--source DIR]\n"
            "  writes OUT/<class>/<split>_<index>.png from the Fashion-MNIST IDX files\n"
            "  --source DIR     the IDX files (default %s, from dataset-fashion-mnist)\n"
            "  --split NAME     train (60000 images) or test (10000); default train\n"
            "  --per-class N    the first N images of each class in file order; default all\n"
            "  --upscale S      nearest-neighbour enlargement, 1-%d; default 1 (28 x 28)\n",
            program, DEFAULT_SOURCE, MAX_UPSCALE);
}

static int parse_count(const char *option, const char *text, long low, long high, long *value) {
    char *end = NULL;
    errno = 0;
    const long parsed = strtol(text, &end, 10);
    if (errno || end == text || *end || parsed < low || parsed > high) {
        fprintf(stderr, "error: %s: expected an integer in %ld..%ld, got '%s'\n", option, low, high, text);
        return -1;
    }
    *value = parsed;
    return 0;
}

int main(int argc, char **argv) {
    Options options = {.source = DEFAULT_SOURCE, .split = "train", .per_class = -1, .upscale = 1};
    for (int i = 1; i < argc; i++) {
        const char *option = argv[i];
        if (strcmp(option, "--help") == 0 || strcmp(option, "-h") == 0) {
            print_usage(stdout, argv[0]);
            return 0;
        }
        const int known = strcmp(option, "--source") == 0 || strcmp(option, "--out") == 0 ||
                          strcmp(option, "--split") == 0 || strcmp(option, "--per-class") == 0 ||
                          strcmp(option, "--upscale") == 0;
        if (!known) {
            fprintf(stderr, "error: unknown option '%s'\n", option);
            print_usage(stderr, argv[0]);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "error: %s needs a value\n", option);
            return 2;
        }
        const char *value = argv[++i];
        if (strcmp(option, "--source") == 0) options.source = value;
        else if (strcmp(option, "--out") == 0) options.out = value;
        else if (strcmp(option, "--split") == 0) options.split = value;
        else if (strcmp(option, "--per-class") == 0) {
            if (parse_count(option, value, 0, INT_MAX, &options.per_class) != 0) return 2;
        } else if (parse_count(option, value, 1, MAX_UPSCALE, &options.upscale) != 0) {
            return 2;
        }
    }
    if (!options.out) {
        fprintf(stderr, "error: --out is required\n");
        print_usage(stderr, argv[0]);
        return 2;
    }
    if (strcmp(options.split, "train") != 0 && strcmp(options.split, "test") != 0) {
        fprintf(stderr, "error: --split: expected train or test, got '%s'\n", options.split);
        return 2;
    }
    ErrorMessage err = {{0}};
    const int status = convert(&options, &err);
    if (status != 0) fprintf(stderr, "error: %s\n", err.text);
    return status;
}
