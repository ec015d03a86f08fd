// Embedding file writers: npy (+ filenames sidecar), csv, lightly_csv,
// safetensors and torch (see embedding_writers.h).
#include "embed/embedding_writers.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "nn/json_scan.h"
#include "nn/safetensors.h"
#include "util/file.h"
#include "weights/pt_writer.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the npy and safetensors writers store host floats as little-endian"
#endif

const char *const embed_format_names[] = {"npy",         "csv",         "lightly_csv",
                                          "safetensors", "tensorboard", "torch", NULL};

EmbedFormat embed_format_from_path(const char *path) {
    const char *dot = strrchr(path, '.');
    const char *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash)) return EMBED_FORMAT_NPY;
    if (strcasecmp(dot, ".csv") == 0) return EMBED_FORMAT_CSV;
    if (strcasecmp(dot, ".safetensors") == 0) return EMBED_FORMAT_SAFETENSORS;
    if (strcasecmp(dot, ".pt") == 0 || strcasecmp(dot, ".pth") == 0) return EMBED_FORMAT_TORCH;
    return EMBED_FORMAT_NPY;
}

int embedding_npy_filenames_path(const char *npy_path, char *out, size_t capacity) {
    const int length = snprintf(out, capacity, "%s.filenames.txt", npy_path);
    return length < 0 || (size_t)length >= capacity ? -1 : 0;
}

// ---- growable text -------------------------------------------------------------------

typedef struct Text {
    char *data;
    size_t size, capacity;
    int failed;  // out of memory: later appends are ignored
} Text;

static void text_reserve(Text *text, size_t extra) {
    if (text->failed || text->size + extra <= text->capacity) return;
    size_t capacity = text->capacity ? text->capacity : 4096;
    while (capacity < text->size + extra) capacity *= 2;
    char *grown = realloc(text->data, capacity);
    if (!grown) {
        text->failed = 1;
        return;
    }
    text->data = grown;
    text->capacity = capacity;
}

static void text_append(Text *text, const char *bytes, size_t length) {
    text_reserve(text, length);
    if (text->failed) return;
    memcpy(text->data + text->size, bytes, length);
    text->size += length;
}

static void text_printf(Text *text, const char *format, ...) __attribute__((format(printf, 2, 3)));
static void text_printf(Text *text, const char *format, ...) {
    char small[64];
    va_list args;
    va_start(args, format);
    const int length = vsnprintf(small, sizeof small, format, args);
    va_end(args);
    if (length < 0) {
        text->failed = 1;
        return;
    }
    if ((size_t)length < sizeof small) {
        text_append(text, small, (size_t)length);
        return;
    }
    text_reserve(text, (size_t)length + 1);
    if (text->failed) return;
    va_start(args, format);
    vsnprintf(text->data + text->size, (size_t)length + 1, format, args);
    va_end(args);
    text->size += (size_t)length;
}

static void text_free(Text *text) {
    free(text->data);
    *text = (Text){0};
}

// ---- checks ----------------------------------------------------------------------------

// name for a one-line message: control bytes (and, with escape_high, every
// byte from 0x80: a name that is not UTF-8) as \n, \t or \xNN, cut with "..."
// to fit out.
static void printable_name(const char *name, int escape_high, char *out, size_t capacity) {
    size_t used = 0;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
        char piece[8];
        if (*c == '\n') snprintf(piece, sizeof piece, "\\n");
        else if (*c == '\t') snprintf(piece, sizeof piece, "\\t");
        else if (*c < 0x20 || *c == 0x7f || (escape_high && *c >= 0x80))
            snprintf(piece, sizeof piece, "\\x%02x", *c);
        else snprintf(piece, sizeof piece, "%c", *c);
        const size_t length = strlen(piece);
        if (used + length + 4 >= capacity) {
            memcpy(out + used, "...", 4);
            return;
        }
        memcpy(out + used, piece, length + 1);
        used += length;
    }
    out[used] = '\0';
}

int embedding_check_filenames(EmbedFormat format, const char *const *filenames, size_t count,
                              ErrorMessage *err) {
    char shown[512];
    for (size_t i = 0; i < count; i++) {
        const char *name = filenames[i];
        if (format == EMBED_FORMAT_NPY && strpbrk(name, "\n")) {
            printable_name(name, 0, shown, sizeof shown);
            return error_set(err,
                             "file name '%s' contains a newline, which the npy format's "
                             "one-name-per-line filenames file cannot hold (use csv or "
                             "safetensors)",
                             shown);
        }
        if ((format == EMBED_FORMAT_SAFETENSORS || format == EMBED_FORMAT_TORCH) &&
            !json_utf8_valid(name, strlen(name))) {
            printable_name(name, 1, shown, sizeof shown);
            return error_set(err,
                             "file name '%s' is not valid UTF-8, which %s cannot hold (use "
                             "npy or csv)",
                             shown,
                             format == EMBED_FORMAT_TORCH ? "a pickled Python str"
                                                          : "safetensors metadata");
        }
    }
    return 0;
}

static int check_table(const EmbeddingTable *table, ErrorMessage *err) {
    if (!table || (table->count > 0 && (!table->features || !table->filenames)) ||
        table->dim < 1)
        return error_set(err, "embedding table: missing data or dimension < 1");
    return 0;
}

// ---- npy -------------------------------------------------------------------------------

// Magic, version 1.0, u16 header length, then the dict padded with spaces and
// a final '\n' so that the data starts at a multiple of 64 bytes.
static int npy_header(size_t rows, int dim, char *out, size_t capacity, size_t *size) {
    char dict[256];
    const int dict_length = snprintf(dict, sizeof dict,
                                     "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, %d), }",
                                     rows, dim);
    if (dict_length < 0 || (size_t)dict_length >= sizeof dict) return -1;
    const size_t prefix = 10;
    size_t total = prefix + (size_t)dict_length + 1;
    total = (total + 63) / 64 * 64;
    if (total > capacity) return -1;
    const size_t header_length = total - prefix;
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    out[8] = (char)(header_length & 0xff);
    out[9] = (char)(header_length >> 8);
    memcpy(out + prefix, dict, (size_t)dict_length);
    memset(out + prefix + dict_length, ' ', total - prefix - (size_t)dict_length - 1);
    out[total - 1] = '\n';
    *size = total;
    return 0;
}

static int write_npy(const char *path, const EmbeddingTable *table, ErrorMessage *err) {
    char sidecar[4200];
    if (embedding_npy_filenames_path(path, sidecar, sizeof sidecar) != 0)
        return error_set(err, "'%s': path too long", path);
    if (embedding_check_filenames(EMBED_FORMAT_NPY, table->filenames, table->count, err) != 0)
        return -1;
    Text names = {0};
    for (size_t i = 0; i < table->count; i++) {
        text_append(&names, table->filenames[i], strlen(table->filenames[i]));
        text_append(&names, "\n", 1);
    }
    if (names.failed) {
        text_free(&names);
        return error_set(err, "out of memory for the file names of '%s'", sidecar);
    }
    char header[256];
    size_t header_size = 0;
    if (npy_header(table->count, table->dim, header, sizeof header, &header_size) != 0) {
        text_free(&names);
        return error_set(err, "'%s': npy header too long", path);
    }
    const FileChunk data[2] = {
        {header, header_size},
        {table->features, table->count * (size_t)table->dim * sizeof(float)},
    };
    const FileChunk name_chunk = {names.data, names.size};
    // One unit, the .npy last: never a .npy beside the names of another write.
    const FileWrite pair[2] = {{.path = sidecar, .chunks = &name_chunk, .count = 1},
                               {.path = path, .chunks = data, .count = 2}};
    const int status = file_write_atomic_group(pair, 2, err);
    text_free(&names);
    return status;
}

// ---- csv -------------------------------------------------------------------------------

static void csv_append_field(Text *text, const char *field) {
    if (!strpbrk(field, ",\"\r\n")) {
        text_append(text, field, strlen(field));
        return;
    }
    text_append(text, "\"", 1);
    for (const char *c = field; *c; c++) {
        if (*c == '"') text_append(text, "\"", 1);
        text_append(text, c, 1);
    }
    text_append(text, "\"", 1);
}

static int write_csv(const char *path, const EmbeddingTable *table, int lightly,
                     ErrorMessage *err) {
    Text text = {0};
    text_append(&text, lightly ? "filenames" : "filename", lightly ? 9 : 8);
    for (int d = 0; d < table->dim; d++) text_printf(&text, ",embedding_%d", d);
    if (lightly) text_append(&text, ",labels", 7);
    text_append(&text, "\n", 1);
    for (size_t i = 0; i < table->count && !text.failed; i++) {
        csv_append_field(&text, table->filenames[i]);
        const float *row = table->features + i * (size_t)table->dim;
        for (int d = 0; d < table->dim; d++) text_printf(&text, ",%.9g", (double)row[d]);
        if (lightly) text_append(&text, ",0", 2);
        text_append(&text, "\n", 1);
    }
    if (text.failed) {
        text_free(&text);
        return error_set(err, "out of memory for the text of '%s'", path);
    }
    const FileChunk chunk = {text.data, text.size};
    const int status = file_write_atomic(path, &chunk, 1, err);
    text_free(&text);
    return status;
}

// ---- safetensors -----------------------------------------------------------------------

// A JSON string: '"', '\\' and control bytes escaped, UTF-8 kept as is.
static void json_append_string(Text *text, const char *value) {
    text_append(text, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)value; *c; c++) {
        if (*c == '"' || *c == '\\') {
            const char escaped[2] = {'\\', (char)*c};
            text_append(text, escaped, 2);
        } else if (*c < 0x20) {
            text_printf(text, "\\u%04x", *c);
        } else {
            text_append(text, (const char *)c, 1);
        }
    }
    text_append(text, "\"", 1);
}

static int write_safetensors(const char *path, const EmbeddingTable *table, ErrorMessage *err) {
    if (embedding_check_filenames(EMBED_FORMAT_SAFETENSORS, table->filenames, table->count,
                                  err) != 0)
        return -1;
    Text names = {0};
    text_append(&names, "[", 1);
    for (size_t i = 0; i < table->count; i++) {
        if (i) text_append(&names, ",", 1);
        json_append_string(&names, table->filenames[i]);
    }
    text_append(&names, "]", 2);  // with the terminating NUL
    if (names.failed) {
        text_free(&names);
        return error_set(err, "out of memory for the file names of '%s'", path);
    }
    const SafeTensorWrite tensor = {
        .name = "embeddings",
        .dtype = SAFE_F32,
        .rank = 2,
        .shape = {(int64_t)table->count, table->dim},
        .data = table->features,
    };
    char key[] = "filenames";
    const SafeMetadata metadata = {.key = key, .value = names.data};
    const int status = safetensors_write(path, &tensor, 1, &metadata, 1, err);
    text_free(&names);
    return status;
}

// ---- torch -----------------------------------------------------------------------------

// torch.save of LightlyTrain's dict; the features are written from where
// they are (borrowed), not copied.
static int write_torch(const char *path, const EmbeddingTable *table, ErrorMessage *err) {
    if (embedding_check_filenames(EMBED_FORMAT_TORCH, table->filenames, table->count, err) != 0)
        return -1;
    PtWriter w;
    pt_writer_init(&w);
    pt_dict_begin(&w);
    pt_put_str(&w, "filenames");
    pt_list_begin(&w);
    for (size_t i = 0; i < table->count; i++) pt_put_str(&w, table->filenames[i]);
    pt_list_end(&w);
    pt_put_str(&w, "embeddings");
    const int64_t shape[2] = {(int64_t)table->count, table->dim};
    pt_put_tensor_borrowed(&w, SAFE_F32, table->features, 2, shape);
    pt_dict_end(&w);
    const int status = pt_writer_save(&w, path, "embeddings", err);
    pt_writer_free(&w);
    return status;
}

int embedding_write(const char *path, EmbedFormat format, const EmbeddingTable *table,
                    ErrorMessage *err) {
    if (check_table(table, err) != 0) return -1;
    switch (format) {
        case EMBED_FORMAT_NPY: return write_npy(path, table, err);
        case EMBED_FORMAT_CSV: return write_csv(path, table, 0, err);
        case EMBED_FORMAT_LIGHTLY_CSV: return write_csv(path, table, 1, err);
        case EMBED_FORMAT_SAFETENSORS: return write_safetensors(path, table, err);
        case EMBED_FORMAT_TORCH: return write_torch(path, table, err);
        case EMBED_FORMAT_TENSORBOARD:
            return error_set(err, "'%s': the tensorboard format is a folder of projector files "
                                  "(projector_write)", path);
    }
    return error_set(err, "unknown embedding format %d", (int)format);
}
