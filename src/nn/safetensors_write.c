// safetensors writer (see safetensors.h): the same bytes as the reference
// implementation for the same tensor order and metadata, the CRC-32 of the
// data recorded in __metadata__, written atomically. It checks everything the
// reader (safetensors.c) would refuse, so a file it writes always reads back.
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/safetensors.h"
#include "nn/safetensors_internal.h"
#include "nn/json_scan.h"
#include "util/data_crc32.h"
#include "util/file.h"
#include "util/finite.h"

// A growing text buffer; `failed` sticks after an allocation failure.
typedef struct TextBuilder {
    char *text;
    size_t length, capacity;
    int failed;
} TextBuilder;

static void text_append(TextBuilder *builder, const char *bytes, size_t count) {
    if (builder->failed) return;
    if (builder->capacity - builder->length <= count) {
        size_t grown = builder->capacity ? builder->capacity : 256;
        while (grown - builder->length <= count) grown *= 2;
        char *resized = realloc(builder->text, grown);
        if (!resized) {
            builder->failed = 1;
            return;
        }
        builder->text = resized;
        builder->capacity = grown;
    }
    memcpy(builder->text + builder->length, bytes, count);
    builder->length += count;
}

static void text_printf(TextBuilder *builder, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
static void text_printf(TextBuilder *builder, const char *format, ...) {
    char piece[128];  // the longest piece: data_offsets with two 20-digit numbers
    va_list args;
    va_start(args, format);
    const int length = vsnprintf(piece, sizeof piece, format, args);
    va_end(args);
    if (length < 0 || (size_t)length >= sizeof piece) {
        builder->failed = 1;
        return;
    }
    text_append(builder, piece, (size_t)length);
}

// A JSON string escaped as the reference (serde_json) does: '"', '\\' and
// control bytes escaped, everything else (UTF-8 included) as is.
static void text_append_json_string(TextBuilder *builder, const char *text) {
    text_append(builder, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        const char *short_escape = *c == '"'    ? "\\\""
                                   : *c == '\\' ? "\\\\"
                                   : *c == '\b' ? "\\b"
                                   : *c == '\f' ? "\\f"
                                   : *c == '\n' ? "\\n"
                                   : *c == '\r' ? "\\r"
                                   : *c == '\t' ? "\\t"
                                                : NULL;
        if (short_escape)
            text_append(builder, short_escape, 2);
        else if (*c < 0x20)
            text_printf(builder, "\\u%04x", *c);
        else
            text_append(builder, (const char *)c, 1);
    }
    text_append(builder, "\"", 1);
}

// Checks what the reader would refuse, so a written file always reads back.
static int check_write_arguments(const SafeTensorWrite *tensors, int count,
                                 const SafeMetadata *metadata, int metadata_count,
                                 ErrorMessage *err) {
    if (count < 0 || metadata_count < 0 || (count > 0 && !tensors) ||
        (metadata_count > 0 && !metadata))
        return error_set(err, "invalid tensor or metadata list");
    if (count > SAFETENSORS_MAX_TENSORS)
        return error_set(err, "%d tensors, above the limit of %d", count, SAFETENSORS_MAX_TENSORS);
    for (int i = 0; i < metadata_count; i++) {
        const SafeMetadata *entry = &metadata[i];
        if (!entry->key || !entry->value) return error_set(err, "metadata %d: NULL key or value", i);
        if (!json_utf8_valid(entry->key, strlen(entry->key)) ||
            !json_utf8_valid(entry->value, strlen(entry->value)))
            return error_set(err, "metadata \"%s\": not valid UTF-8", safe_printable_name(entry->key).text);
    }
    for (int i = 0; i < count; i++) {
        const SafeTensorWrite *t = &tensors[i];
        if (!t->name || !t->name[0]) return error_set(err, "tensor %d: empty name", i);
        const PrintableName name = safe_printable_name(t->name);
        const size_t length = strlen(t->name);
        if (length >= SAFETENSORS_MAX_NAME)
            return error_set(err, "tensor \"%s\": name of %zu bytes above the limit of %d", name.text,
                             length, SAFETENSORS_MAX_NAME - 1);
        if (strcmp(t->name, SAFETENSORS_METADATA_KEY) == 0)
            return error_set(err, "tensor \"%s\": reserved name", name.text);
        if (!json_utf8_valid(t->name, length))
            return error_set(err, "tensor \"%s\": name is not valid UTF-8", name.text);
        if (safe_dtype_size(t->dtype) == 0)
            return error_set(err, "tensor \"%s\": unknown dtype %d", name.text, (int)t->dtype);
        if (t->rank < 0 || t->rank > SAFETENSORS_MAX_RANK)
            return error_set(err, "tensor \"%s\": rank %d outside 0..%d", name.text, t->rank,
                             SAFETENSORS_MAX_RANK);
        const int64_t bytes = safe_shape_bytes(t->dtype, t->rank, t->shape);
        if (bytes < 0)
            return error_set(err, "tensor \"%s\": negative dimension or size overflow", name.text);
        if (bytes > 0 && !t->data) return error_set(err, "tensor \"%s\": no data", name.text);
        // Nothing non-finite is ever written: a diverged model must not reach a
        // checkpoint or an export that looks like a result.
        const size_t elements = (size_t)bytes / safe_dtype_size(t->dtype);
        const size_t bad = t->dtype == SAFE_F32   ? finite_first_bad_f32(t->data, elements)
                           : t->dtype == SAFE_F64 ? finite_first_bad_f64(t->data, elements)
                                                  : elements;
        if (bad < elements)
            return error_set(err, "tensor \"%s\": non-finite value (NaN or inf) at element %zu; "
                                  "refusing to write it", name.text, bad);
    }
    // Duplicates, tensor names then metadata keys.
    const int most = count > metadata_count ? count : metadata_count;
    const char **names = malloc((size_t)(most ? most : 1) * sizeof *names);
    if (!names) return error_set(err, "out of memory");
    int failed;
    for (int i = 0; i < count; i++) names[i] = tensors[i].name;
    const char *duplicate = safe_find_duplicate(names, count, &failed);
    if (!duplicate && !failed) {
        for (int i = 0; i < metadata_count; i++) names[i] = metadata[i].key;
        duplicate = safe_find_duplicate(names, metadata_count, &failed);
    }
    const int status = failed      ? error_set(err, "out of memory")
                       : duplicate ? error_set(err, "duplicate name \"%s\"", safe_printable_name(duplicate).text)
                                   : 0;
    free(names);
    return status;
}

// The header JSON, padded with spaces to a multiple of 8 bytes, and the size
// of the data section.
static int build_header(const SafeTensorWrite *tensors, int count, const SafeMetadata *metadata,
                        int metadata_count, TextBuilder *header, uint64_t *data_size,
                        ErrorMessage *err) {
    text_append(header, "{", 1);
    if (metadata_count > 0) {
        text_append(header, "\"__metadata__\":{", 16);
        for (int i = 0; i < metadata_count; i++) {
            if (i) text_append(header, ",", 1);
            text_append_json_string(header, metadata[i].key);
            text_append(header, ":", 1);
            text_append_json_string(header, metadata[i].value);
        }
        text_append(header, "}", 1);
    }
    uint64_t offset = 0;
    for (int i = 0; i < count; i++) {
        const SafeTensorWrite *t = &tensors[i];
        if (i > 0 || metadata_count > 0) text_append(header, ",", 1);
        text_append_json_string(header, t->name);
        text_printf(header, ":{\"dtype\":\"%s\",\"shape\":[", safe_dtype_name(t->dtype));
        for (int d = 0; d < t->rank; d++) text_printf(header, d ? ",%lld" : "%lld", (long long)t->shape[d]);
        const uint64_t bytes = (uint64_t)safe_shape_bytes(t->dtype, t->rank, t->shape);
        if (bytes > (uint64_t)INT64_MAX - offset)
            return error_set(err, "total data size overflows");
        text_printf(header, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                    (unsigned long long)(offset + bytes));
        offset += bytes;
    }
    text_append(header, "}", 1);
    while (!header->failed && header->length % 8 != 0) text_append(header, " ", 1);
    if (header->failed) return error_set(err, "out of memory for the header");
    if (header->length > SAFETENSORS_MAX_HEADER)
        return error_set(err, "header of %zu bytes above the limit", header->length);
    *data_size = offset;
    return 0;
}

// The caller's metadata less a CRC-32 it passes (copied from another file),
// then the CRC-32 of the tensors' bytes in write order (the data section)
// as `text`: *with_crc_count entries, malloc'ed; NULL when out of memory.
static SafeMetadata *metadata_with_crc32(const SafeTensorWrite *tensors, int count,
                                         const SafeMetadata *metadata, int metadata_count,
                                         char text[DATA_CRC32_TEXT], int *with_crc_count) {
    FileChunk *pieces = malloc(((size_t)count + 1) * sizeof *pieces);
    SafeMetadata *with_crc = malloc(((size_t)metadata_count + 1) * sizeof *with_crc);
    if (!pieces || !with_crc) {
        free(pieces);
        free(with_crc);
        return NULL;
    }
    for (int i = 0; i < count; i++) {
        const SafeTensorWrite *t = &tensors[i];
        pieces[i] = (FileChunk){t->data, (size_t)safe_shape_bytes(t->dtype, t->rank, t->shape)};
    }
    data_crc32_format(data_crc32(pieces, count), text);
    free(pieces);
    int kept = 0;
    for (int i = 0; i < metadata_count; i++)
        if (strcmp(metadata[i].key, SAFETENSORS_CRC32_KEY) != 0) with_crc[kept++] = metadata[i];
    static char key[] = SAFETENSORS_CRC32_KEY;
    with_crc[kept] = (SafeMetadata){.key = key, .value = text};
    *with_crc_count = kept + 1;
    return with_crc;
}

int safetensors_encode_header(const SafeTensorWrite *tensors, int count,
                              const SafeMetadata *metadata, int metadata_count, uint8_t **header,
                              size_t *header_size, ErrorMessage *err) {
    *header = NULL;
    *header_size = 0;
    if (check_write_arguments(tensors, count, metadata, metadata_count, err) != 0) return -1;
    char crc_text[DATA_CRC32_TEXT];
    int with_crc_count = 0;
    SafeMetadata *with_crc = metadata_with_crc32(tensors, count, metadata, metadata_count,
                                                 crc_text, &with_crc_count);
    if (!with_crc) return error_set(err, "out of memory for the header");
    TextBuilder json = {0};
    uint64_t data_size;
    const int built = build_header(tensors, count, with_crc, with_crc_count, &json, &data_size, err);
    free(with_crc);
    if (built != 0) {
        free(json.text);
        return -1;
    }
    uint8_t *bytes = malloc(8 + json.length);
    if (!bytes) {
        free(json.text);
        return error_set(err, "out of memory for the header");
    }
    for (int i = 0; i < 8; i++) bytes[i] = (uint8_t)((uint64_t)json.length >> (8 * i));
    memcpy(bytes + 8, json.text, json.length);
    free(json.text);
    *header = bytes;
    *header_size = 8 + json.length;
    return 0;
}

int safetensors_write(const char *path, const SafeTensorWrite *tensors, int count,
                      const SafeMetadata *metadata, int metadata_count, ErrorMessage *err) {
    uint8_t *header;
    size_t header_size;
    if (safetensors_encode_header(tensors, count, metadata, metadata_count, &header, &header_size,
                                  err) != 0)
        return error_prefix(err, "%s", path);
    FileChunk *chunks = malloc(((size_t)count + 1) * sizeof *chunks);
    if (!chunks) {
        free(header);
        return error_set(err, "%s: out of memory", path);
    }
    chunks[0] = (FileChunk){header, header_size};
    for (int i = 0; i < count; i++) {
        const SafeTensorWrite *t = &tensors[i];
        chunks[i + 1] = (FileChunk){t->data, (size_t)safe_shape_bytes(t->dtype, t->rank, t->shape)};
    }
    const int status = file_write_atomic(path, chunks, count + 1, err);
    free(chunks);
    free(header);
    return status;
}
