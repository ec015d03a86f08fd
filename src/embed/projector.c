// TensorBoard projector files (see projector.h): tensor and metadata TSVs,
// the thumbnail sprite (each image decoded again at the smallest scale that
// fills its cell) and the config.
#include "embed/projector.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "augment/resize.h"
#include "data/decoder_process.h"
#include "logging/tb_writer.h"
#include "nn/json_scan.h"
#include "util/file.h"
#include "util/output_path.h"

#define FLOAT_TEXT_MAX 16  // "%.7g" of a float and its separator: "-1.234567e-38\t"
// zlib level 1: on 1000 photos' thumbnails (2048 x 2048 px) 5x faster than
// the default level (1.3 s, not 6.5 s) for a 1.17x larger file (docs/projector.md).
#define PROJECTOR_PNG_LEVEL 1

static const char *const PROJECTOR_FILES[] = {PROJECTOR_CONFIG, PROJECTOR_TENSORS,
                                               PROJECTOR_METADATA, PROJECTOR_SPRITE};

static int join(const char *dir, const char *name, char *out, size_t capacity,
                ErrorMessage *err) {
    const int length = snprintf(out, capacity, "%s/%s", dir, name);
    if (length < 0 || (size_t)length >= capacity)
        return error_set(err, "'%s/%s': path too long", dir, name);
    return 0;
}

int projector_check_output(const char *dir, int overwrite, ErrorMessage *err) {
    if (output_folder_check(dir, err) != 0) return -1;
    char path[4096];
    for (size_t i = 0; i < sizeof PROJECTOR_FILES / sizeof PROJECTOR_FILES[0]; i++)
        if (join(dir, PROJECTOR_FILES[i], path, sizeof path, err) != 0 ||
            output_entry_check(path, err) != 0)
            return -1;
    struct stat info;
    if (join(dir, PROJECTOR_CONFIG, path, sizeof path, err) != 0) return -1;
    if (!overwrite && stat(path, &info) == 0)
        return error_set(err, "'%s' already holds a projector (%s): pass --overwrite to "
                              "replace it",
                         dir, PROJECTOR_CONFIG);
    return 0;
}

static int write_text(const char *dir, const char *name, const char *text, size_t size,
                      ErrorMessage *err) {
    char path[4096];
    if (join(dir, name, path, sizeof path, err) != 0) return -1;
    const FileChunk chunk = {text, size};
    return file_write_atomic(path, &chunk, 1, err);
}

// ---- tensor and metadata -----------------------------------------------------------------------

static int write_tensors(const char *dir, const EmbeddingTable *table, ErrorMessage *err) {
    const size_t values = table->count * (size_t)table->dim;
    if (values > SIZE_MAX / FLOAT_TEXT_MAX)
        return error_set(err, "%zu x %d values: too many for %s", table->count, table->dim,
                         PROJECTOR_TENSORS);
    char *text = malloc(values * FLOAT_TEXT_MAX + 1);
    if (!text) return error_set(err, "out of memory for %s (%zu values)", PROJECTOR_TENSORS,
                                values);
    size_t size = 0;
    for (size_t i = 0; i < values; i++) {
        const char separator = (i + 1) % (size_t)table->dim == 0 ? '\n' : '\t';
        size += (size_t)snprintf(text + size, FLOAT_TEXT_MAX, "%.7g%c",
                                 (double)table->features[i], separator);
    }
    const int status = write_text(dir, PROJECTOR_TENSORS, text, size, err);
    free(text);
    return status;
}

// The length of the valid UTF-8 sequence at name (1 to 4), or 0 for a byte
// that starts none: the shortest prefix that json_utf8_valid accepts.
static size_t utf8_length(const char *name, size_t available) {
    for (size_t length = 1; length <= 4 && length <= available; length++)
        if (json_utf8_valid(name, length)) return length;
    return 0;
}

// Appends name with tabs and line breaks as spaces (the TSV's separators),
// and bytes that are not UTF-8 as the text \xNN: TensorBoard reads the
// metadata as UTF-8 and, on one such byte, serves no labels at all. At most
// 4 bytes out per byte in.
static size_t put_field(char *out, const char *name, size_t length) {
    size_t size = 0;
    for (size_t i = 0; i < length;) {
        const size_t sequence = utf8_length(name + i, length - i);
        if (sequence == 0) {
            static const char hex[] = "0123456789abcdef";
            const unsigned char byte = (unsigned char)name[i++];
            memcpy(out + size, (const char[4]){'\\', 'x', hex[byte >> 4], hex[byte & 15]}, 4);
            size += 4;
            continue;
        }
        for (size_t k = 0; k < sequence; k++, i++)
            out[size++] = (name[i] == '\t' || name[i] == '\n' || name[i] == '\r') ? ' ' : name[i];
    }
    return size;
}

static int write_metadata(const char *dir, const EmbeddingTable *table, ErrorMessage *err) {
    static const char header[] = "filename\tfolder\n";
    size_t capacity = sizeof header;
    for (size_t i = 0; i < table->count; i++) capacity += 8 * strlen(table->filenames[i]) + 4;
    char *text = malloc(capacity);
    if (!text) return error_set(err, "out of memory for %s", PROJECTOR_METADATA);
    memcpy(text, header, sizeof header - 1);
    size_t size = sizeof header - 1;
    for (size_t i = 0; i < table->count; i++) {
        const char *name = table->filenames[i];
        const char *slash = strrchr(name, '/');
        size += put_field(text + size, name, strlen(name));
        text[size++] = '\t';
        size += slash ? put_field(text + size, name, (size_t)(slash - name))
                      : put_field(text + size, ".", 1);
        text[size++] = '\n';
    }
    const int status = write_text(dir, PROJECTOR_METADATA, text, size, err);
    free(text);
    return status;
}

// ---- sprite ------------------------------------------------------------------------------------

typedef struct Thumbnailer {
    DecoderProcess *decoder;  // as the loader's workers decode: in a child process
    ResampleTable columns, rows;
    ResampleBuffer buffer;
} Thumbnailer;

// The image at path fitted into the cell x cell square at out (rows
// `stride` bytes apart), centred.
static int thumbnail(Thumbnailer *t, const char *path, int cell, uint8_t *out, size_t stride,
                     ErrorMessage *err) {
    ImageInfo info;
    if (decoder_process_probe(t->decoder, path, &info, err) != 0) return -1;
    const double scale = (double)cell / (info.width > info.height ? info.width : info.height);
    int width = (int)lround(info.width * scale), height = (int)lround(info.height * scale);
    width = width < 1 ? 1 : width > cell ? cell : width;
    height = height < 1 ? 1 : height > cell ? cell : height;
    // The smallest (JPEG: DCT-scaled) decode that still covers the cell.
    const DecodeRequest request = {.region = {0, 0, info.width, info.height},
                                   .min_width = width, .min_height = height};
    DecoderResult result;
    if (decoder_process_decode(t->decoder, path, &request, &result, err) != 0) return -1;
    const Image *image = &result.decoded.image;
    uint8_t *at = out + (size_t)((cell - height) / 2) * stride + (size_t)((cell - width) / 2) * 3;
    return resize_rgb(image, 0, 0, image->width, image->height, 0, RESIZE_ANTIALIASED, width,
                      height, at, stride,
                      &t->columns, &t->rows, &t->buffer, err);
}

static int image_path(const char *root, const char *name, char *out, size_t capacity) {
    const size_t root_length = strlen(root);
    const char *separator = root_length == 0 || root[root_length - 1] == '/' ? "" : "/";
    const int length = snprintf(out, capacity, "%s%s%s", root, separator, name);
    return length < 0 || (size_t)length >= capacity ? -1 : 0;
}

// The sprite's RGB pixels, (rows * cell, columns * cell, 3).
static int make_sprite(const EmbeddingTable *table, const ProjectorOptions *options, int cell,
                       int columns, uint8_t *sprite, ProjectorSummary *summary,
                       ErrorMessage *err) {
    const size_t stride = (size_t)columns * cell * 3;
    const DecoderProcessConfig decoder = {.max_pixels = options->max_pixels};
    Thumbnailer t = {.decoder = decoder_process_create(&decoder, err)};
    if (!t.decoder) return -1;
    for (size_t i = 0; i < table->count; i++) {
        uint8_t *cell_at = sprite + (i / (size_t)columns) * cell * stride +
                           (i % (size_t)columns) * cell * 3;
        char path[4096];
        ErrorMessage ignored = {{0}};
        if (image_path(options->image_root, table->filenames[i], path, sizeof path) != 0 ||
            thumbnail(&t, path, cell, cell_at, stride, &ignored) != 0) {
            for (int y = 0; y < cell; y++) memset(cell_at + y * stride, PROJECTOR_GREY, cell * 3);
            summary->unreadable++;
        }
    }
    decoder_process_destroy(t.decoder);
    resample_table_free(&t.columns);
    resample_table_free(&t.rows);
    resample_buffer_free(&t.buffer);
    return 0;
}

void projector_sprite_layout(size_t count, int *columns, int *cell) {
    size_t side = (size_t)ceil(sqrt((double)count));
    while (side * side < count) side++;  // sqrt's rounding
    while (side > 1 && (side - 1) * (side - 1) >= count) side--;
    const size_t fits = side ? PROJECTOR_SPRITE_MAX / side : PROJECTOR_CELL;
    *columns = side > INT_MAX ? INT_MAX : (int)side;
    *cell = fits > PROJECTOR_CELL ? PROJECTOR_CELL : fits < PROJECTOR_MIN_CELL ? 0 : (int)fits;
}

static int write_sprite(const char *dir, const EmbeddingTable *table,
                        const ProjectorOptions *options, ProjectorSummary *summary,
                        ErrorMessage *err) {
    int columns, cell;
    projector_sprite_layout(table->count, &columns, &cell);
    const int rows = (int)((table->count + (size_t)columns - 1) / (size_t)columns);
    summary->columns = columns;
    if (cell == 0) return 0;  // no sprite (summary->cell stays 0)
    const size_t width = (size_t)columns * cell, height = (size_t)rows * cell;
    uint8_t *sprite = malloc(width * height * 3);
    if (!sprite) return error_set(err, "out of memory for a %zux%zu sprite", width, height);
    memset(sprite, PROJECTOR_BACKGROUND, width * height * 3);
    uint8_t *png = NULL;
    size_t png_size = 0;
    int status = make_sprite(table, options, cell, columns, sprite, summary, err);
    if (status == 0)
        status = tb_encode_png(sprite, (int)width, (int)height, PROJECTOR_PNG_LEVEL, &png,
                               &png_size, err);
    free(sprite);
    if (status == 0) status = write_text(dir, PROJECTOR_SPRITE, (const char *)png, png_size, err);
    free(png);
    if (status == 0) summary->cell = cell;
    return status;
}

// ---- config ------------------------------------------------------------------------------------

static int write_config(const char *dir, int cell, ErrorMessage *err) {
    char text[512];
    int length = snprintf(text, sizeof text,
                          "embeddings {\n"
                          "  tensor_name: \"embeddings\"\n"
                          "  tensor_path: \"%s\"\n"
                          "  metadata_path: \"%s\"\n",
                          PROJECTOR_TENSORS, PROJECTOR_METADATA);
    if (cell > 0)
        length += snprintf(text + length, sizeof text - (size_t)length,
                           "  sprite {\n"
                           "    image_path: \"%s\"\n"
                           "    single_image_dim: %d\n"
                           "    single_image_dim: %d\n"
                           "  }\n",
                           PROJECTOR_SPRITE, cell, cell);
    length += snprintf(text + length, sizeof text - (size_t)length, "}\n");
    return write_text(dir, PROJECTOR_CONFIG, text, (size_t)length, err);
}

void projector_logdir(const char *dir, char *out, size_t capacity) {
    size_t length = strlen(dir);
    while (length > 1 && dir[length - 1] == '/') length--;
    const size_t assets = strlen(PROJECTOR_ASSETS);
    if (length > assets && strncmp(dir + length - assets, PROJECTOR_ASSETS, assets) == 0 &&
        dir[length - assets - 1] == '/')
        length -= assets + 1;  // "/plugins/..." leaves 0: the root
    else if (length == assets && strncmp(dir, PROJECTOR_ASSETS, assets) == 0)
        length = 0;
    if (length == 0) snprintf(out, capacity, "%s", dir[0] == '/' ? "/" : ".");
    else snprintf(out, capacity, "%.*s", (int)length, dir);
}

int projector_write(const char *dir, const EmbeddingTable *table,
                    const ProjectorOptions *options, ProjectorSummary *summary,
                    ErrorMessage *err) {
    memset(summary, 0, sizeof *summary);
    if (!table || table->count == 0 || table->dim < 1 || !table->features || !table->filenames)
        return error_set(err, "projector: no embeddings to write");
    if (output_folder_create(dir, err) != 0) return -1;
    if (write_tensors(dir, table, err) != 0 || write_metadata(dir, table, err) != 0 ||
        write_sprite(dir, table, options, summary, err) != 0)
        return -1;
    return write_config(dir, summary->cell, err);
}
