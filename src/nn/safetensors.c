// safetensors reader (see safetensors.h; the writer is safetensors_write.c):
// the header is parsed with the bounds-checked scanner of json_scan.h and
// validated as the reference implementation does (offsets must tile the data
// exactly), then the data against the CRC-32 the header records.
#include "nn/safetensors.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/json_scan.h"
#include "nn/safetensors_internal.h"
#include "util/data_crc32.h"
#include "util/finite.h"
#include "util/file.h"

static const struct {
    const char *name;
    size_t size;
} DTYPES[] = {
    [SAFE_F32] = {"F32", 4}, [SAFE_F16] = {"F16", 2}, [SAFE_BF16] = {"BF16", 2},
    [SAFE_F64] = {"F64", 8}, [SAFE_I64] = {"I64", 8}, [SAFE_I32] = {"I32", 4},
    [SAFE_I16] = {"I16", 2}, [SAFE_I8] = {"I8", 1},   [SAFE_U8] = {"U8", 1},
    [SAFE_BOOL] = {"BOOL", 1},
};
enum { DTYPE_COUNT = sizeof DTYPES / sizeof DTYPES[0] };

const char *safe_dtype_name(SafeDType dtype) {
    return (unsigned)dtype < DTYPE_COUNT ? DTYPES[dtype].name : "?";
}

size_t safe_dtype_size(SafeDType dtype) {
    return (unsigned)dtype < DTYPE_COUNT ? DTYPES[dtype].size : 0;
}

void safetensors_narrow_f64(SafeTensors *tensors) {
    for (int i = 0; i < tensors->count; i++) {
        SafeTensor *t = &tensors->tensors[i];
        if (t->dtype != SAFE_F64) continue;
        // The data lies in the owned `file`; element k's float is written at
        // 4k, never past the doubles not yet read (at 8k and on).
        uint8_t *data = (uint8_t *)tensors->data + t->offset;
        const size_t n = t->size / sizeof(double);
        for (size_t k = 0; k < n; k++) {
            double wide;
            memcpy(&wide, data + k * sizeof wide, sizeof wide);
            const float narrow = (float)wide;
            memcpy(data + k * sizeof narrow, &narrow, sizeof narrow);
        }
        t->dtype = SAFE_F32;
        t->size = n * sizeof(float);
    }
}

int64_t safe_tensor_elements(const SafeTensor *tensor) {
    int64_t elements = 1;
    for (int d = 0; d < tensor->rank; d++) elements *= tensor->shape[d];
    return elements;
}

int64_t safe_shape_bytes(SafeDType dtype, int rank, const int64_t *shape) {
    int64_t bytes = (int64_t)safe_dtype_size(dtype);
    for (int d = 0; d < rank; d++) {
        if (shape[d] < 0) return -1;
        if (shape[d] != 0 && bytes > INT64_MAX / shape[d]) return -1;
        bytes *= shape[d];
    }
    return bytes;
}

PrintableName safe_printable_name(const char *name) {
    PrintableName out;
    size_t i = 0;
    for (; name[i] && i < 60; i++) {
        const unsigned char c = (unsigned char)name[i];
        out.text[i] = c < 0x20 || c == 0x7f ? '?' : (char)c;
    }
    strcpy(out.text + i, name[i] ? "..." : "");
    return out;
}

static int compare_name_pointers(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

const char *safe_find_duplicate(const char **names, int count, int *failed) {
    *failed = 0;
    if (count < 2) return NULL;
    const char **sorted = malloc((size_t)count * sizeof *sorted);
    if (!sorted) {
        *failed = 1;
        return NULL;
    }
    memcpy(sorted, names, (size_t)count * sizeof *sorted);
    qsort(sorted, (size_t)count, sizeof *sorted, compare_name_pointers);
    const char *duplicate = NULL;
    for (int i = 1; i < count && !duplicate; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0) duplicate = sorted[i];
    free(sorted);
    return duplicate;
}

// ---- reader --------------------------------------------------------------------

void safetensors_free(SafeTensors *tensors) {
    if (!tensors) return;
    for (int i = 0; i < tensors->metadata_count; i++) {
        free(tensors->metadata[i].key);
        free(tensors->metadata[i].value);
    }
    free(tensors->metadata);
    free(tensors->tensors);
    free(tensors->file);
    memset(tensors, 0, sizeof *tensors);
}

// Grows an array of `item` bytes to hold at least count + 1 items.
static int grow(void **items, int *capacity, int count, size_t item, ErrorMessage *err) {
    if (count < *capacity) return 0;
    if (*capacity > INT_MAX / 2) return error_set(err, "too many header entries");
    const int grown = *capacity ? *capacity * 2 : 16;
    void *resized = realloc(*items, (size_t)grown * item);
    if (!resized) return error_set(err, "out of memory for %d header entries", grown);
    *items = resized;
    *capacity = grown;
    return 0;
}

// Reads the string at the cursor into a new malloc'ed C string.
static char *read_string_alloc(JsonScanner *scanner, ErrorMessage *err) {
    size_t length;
    if (json_string_length(scanner, &length, err) != 0) return NULL;
    char *text = malloc(length + 1);
    if (!text) {
        error_set(err, "out of memory for a string of %zu bytes", length);
        return NULL;
    }
    if (json_read_string(scanner, text, length + 1, err) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

// "__metadata__": {"key": "value", ...}, string to string only.
static int parse_metadata(JsonScanner *scanner, SafeTensors *out, ErrorMessage *err) {
    if (json_peek(scanner) != '{')
        return error_set(err, "__metadata__: must be an object of string to string");
    scanner->pos++;
    if (json_peek(scanner) == '}') {
        scanner->pos++;
        return 0;
    }
    int capacity = 0, more;
    do {
        if (grow((void **)&out->metadata, &capacity, out->metadata_count, sizeof *out->metadata,
                 err) != 0)
            return error_prefix(err, "__metadata__");
        SafeMetadata *entry = &out->metadata[out->metadata_count];
        entry->value = NULL;
        entry->key = read_string_alloc(scanner, err);
        if (!entry->key) return error_prefix(err, "__metadata__: key");
        out->metadata_count++;  // from here safetensors_free releases it
        if (json_expect(scanner, ':', err) != 0) return error_prefix(err, "__metadata__");
        if (json_peek(scanner) != '"')
            return error_set(err, "__metadata__: value of \"%s\" is not a string",
                             safe_printable_name(entry->key).text);
        entry->value = read_string_alloc(scanner, err);
        if (!entry->value)
            return error_prefix(err, "__metadata__: value of \"%s\"", safe_printable_name(entry->key).text);
    } while ((more = json_next_item(scanner, '}', err)) == 1);
    if (more < 0) return error_prefix(err, "__metadata__");
    return 0;
}

// "shape": [d0, d1, ...]: rank and dimensions checked.
static int parse_shape(JsonScanner *scanner, SafeTensor *tensor, ErrorMessage *err) {
    if (json_peek(scanner) != '[') return error_set(err, "shape: must be an array of integers");
    scanner->pos++;
    tensor->rank = 0;
    if (json_peek(scanner) == ']') {
        scanner->pos++;
        return 0;
    }
    int more;
    do {
        if (tensor->rank == SAFETENSORS_MAX_RANK)
            return error_set(err, "shape: rank above the limit of %d", SAFETENSORS_MAX_RANK);
        int64_t dim;
        if (json_read_int64(scanner, &dim, err) != 0) return error_prefix(err, "shape");
        if (dim < 0)
            return error_set(err, "shape: dimension %d is negative (%lld)", tensor->rank,
                             (long long)dim);
        tensor->shape[tensor->rank++] = dim;
    } while ((more = json_next_item(scanner, ']', err)) == 1);
    return more < 0 ? error_prefix(err, "shape") : 0;
}

// "data_offsets": [begin, end], two non-negative integers.
static int parse_offsets(JsonScanner *scanner, int64_t offsets[2], ErrorMessage *err) {
    if (json_peek(scanner) != '[')
        return error_set(err, "data_offsets: must be [begin, end] integers");
    scanner->pos++;
    for (int i = 0; i < 2; i++) {
        if (i == 1 && json_next_item(scanner, ']', err) != 1)
            return error_set(err, "data_offsets: must be [begin, end] integers");
        if (json_read_int64(scanner, &offsets[i], err) != 0)
            return error_prefix(err, "data_offsets: must be [begin, end] integers");
        if (offsets[i] < 0)
            return error_set(err, "data_offsets: negative offset %lld", (long long)offsets[i]);
    }
    if (json_next_item(scanner, ']', err) != 0)
        return error_set(err, "data_offsets: must be [begin, end] integers");
    return 0;
}

static int parse_dtype(JsonScanner *scanner, SafeDType *dtype, ErrorMessage *err) {
    if (json_peek(scanner) != '"') return error_set(err, "dtype: must be a string");
    size_t length;
    if (json_string_length(scanner, &length, err) != 0) return error_prefix(err, "dtype");
    char name[16] = "";
    if (length < sizeof name && json_read_string(scanner, name, sizeof name, err) != 0)
        return error_prefix(err, "dtype");
    for (int d = 0; d < DTYPE_COUNT && length < sizeof name; d++) {
        if (strcmp(name, DTYPES[d].name) == 0) {
            *dtype = (SafeDType)d;
            return 0;
        }
    }
    return error_set(err, "unsupported dtype \"%s\"", length < sizeof name ? name : "(long)");
}

// {"dtype": ..., "shape": [...], "data_offsets": [b, e]} in any order, each
// exactly once; then the size is checked against the shape and data size.
static int parse_tensor_info(JsonScanner *scanner, SafeTensor *tensor, size_t data_size,
                             ErrorMessage *err) {
    enum { HAVE_DTYPE = 1, HAVE_SHAPE = 2, HAVE_OFFSETS = 4 };
    if (json_peek(scanner) != '{')
        return error_set(err, "must be an object with dtype, shape and data_offsets");
    scanner->pos++;
    int seen = 0, more = 0;
    int64_t offsets[2] = {0, 0};
    if (json_peek(scanner) == '}') {
        scanner->pos++;
    } else {
        do {
            size_t length;
            char field[16] = "";
            if (json_string_length(scanner, &length, err) != 0) return -1;
            if (length >= sizeof field) return error_set(err, "unknown field of %zu bytes", length);
            if (json_read_string(scanner, field, sizeof field, err) != 0) return -1;
            if (json_expect(scanner, ':', err) != 0) return -1;
            const int which = strcmp(field, "dtype") == 0          ? HAVE_DTYPE
                              : strcmp(field, "shape") == 0        ? HAVE_SHAPE
                              : strcmp(field, "data_offsets") == 0 ? HAVE_OFFSETS
                                                                   : 0;
            if (which == 0) return error_set(err, "unknown field \"%s\"", safe_printable_name(field).text);
            if (seen & which) return error_set(err, "duplicate field \"%s\"", field);
            seen |= which;
            const int status = which == HAVE_DTYPE   ? parse_dtype(scanner, &tensor->dtype, err)
                               : which == HAVE_SHAPE ? parse_shape(scanner, tensor, err)
                                                     : parse_offsets(scanner, offsets, err);
            if (status != 0) return -1;
        } while ((more = json_next_item(scanner, '}', err)) == 1);
        if (more < 0) return -1;
    }
    if (!(seen & HAVE_DTYPE)) return error_set(err, "missing field \"dtype\"");
    if (!(seen & HAVE_SHAPE)) return error_set(err, "missing field \"shape\"");
    if (!(seen & HAVE_OFFSETS)) return error_set(err, "missing field \"data_offsets\"");

    const int64_t bytes = safe_shape_bytes(tensor->dtype, tensor->rank, tensor->shape);
    if (bytes < 0) return error_set(err, "shape: element count overflows");
    if (offsets[1] < offsets[0])
        return error_set(err, "data_offsets: end %lld before begin %lld", (long long)offsets[1],
                         (long long)offsets[0]);
    if ((uint64_t)offsets[1] > data_size)
        return error_set(err, "data_offsets: [%lld, %lld] beyond the data (%zu bytes)",
                         (long long)offsets[0], (long long)offsets[1], data_size);
    if (offsets[1] - offsets[0] != bytes)
        return error_set(err,
                         "data_offsets: [%lld, %lld] span %lld bytes but the shape of %lld %s "
                         "elements needs %lld",
                         (long long)offsets[0], (long long)offsets[1],
                         (long long)(offsets[1] - offsets[0]),
                         (long long)safe_tensor_elements(tensor), safe_dtype_name(tensor->dtype),
                         (long long)bytes);
    tensor->offset = (size_t)offsets[0];
    tensor->size = (size_t)bytes;
    return 0;
}

// Top level: {"name": {...}, ..., "__metadata__": {...}} then only spaces.
static int parse_header(JsonScanner *scanner, SafeTensors *out, size_t data_size,
                        ErrorMessage *err) {
    if (json_expect(scanner, '{', err) != 0) return -1;
    int capacity = 0, have_metadata = 0, more = 0;
    if (json_peek(scanner) == '}') {
        scanner->pos++;
        return json_expect_end(scanner, err);
    }
    do {
        size_t length;
        if (json_string_length(scanner, &length, err) != 0) return -1;
        if (length >= SAFETENSORS_MAX_NAME)
            return error_set(err, "tensor name of %zu bytes above the limit of %d", length,
                             SAFETENSORS_MAX_NAME - 1);
        if (length == 0) return error_set(err, "empty tensor name");
        if (out->count == SAFETENSORS_MAX_TENSORS)
            return error_set(err, "more than %d tensors", SAFETENSORS_MAX_TENSORS);
        if (grow((void **)&out->tensors, &capacity, out->count, sizeof *out->tensors, err) != 0)
            return -1;
        SafeTensor *tensor = &out->tensors[out->count];
        memset(tensor, 0, sizeof *tensor);
        if (json_read_string(scanner, tensor->name, sizeof tensor->name, err) != 0) return -1;
        if (json_expect(scanner, ':', err) != 0)
            return error_prefix(err, "after \"%s\"", safe_printable_name(tensor->name).text);
        if (strcmp(tensor->name, SAFETENSORS_METADATA_KEY) == 0) {
            if (have_metadata) return error_set(err, "duplicate \"__metadata__\"");
            have_metadata = 1;
            if (parse_metadata(scanner, out, err) != 0) return -1;
        } else {
            if (parse_tensor_info(scanner, tensor, data_size, err) != 0)
                return error_prefix(err, "tensor \"%s\"", safe_printable_name(tensor->name).text);
            out->count++;
        }
    } while ((more = json_next_item(scanner, '}', err)) == 1);
    if (more < 0) return -1;
    return json_expect_end(scanner, err);
}

static int compare_tensor_ranges(const void *a, const void *b) {
    const SafeTensor *x = *(const SafeTensor *const *)a, *y = *(const SafeTensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->size != y->size) return x->size < y->size ? -1 : 1;
    return strcmp(x->name, y->name);  // names are unique: messages are deterministic
}

// Unique names, and the tensors sorted by offset tile [0, data_size) with no
// gap and no overlap (what the reference reader demands).
static int check_names_and_tiling(const SafeTensors *out, size_t data_size, ErrorMessage *err) {
    const size_t pointers = (size_t)(out->count > out->metadata_count ? out->count
                                                                       : out->metadata_count);
    void **sorted = malloc((pointers ? pointers : 1) * sizeof *sorted);
    if (!sorted) return error_set(err, "out of memory for %zu header entries", pointers);
    int failed;
    const char **names = (const char **)sorted;
    for (int i = 0; i < out->metadata_count; i++) names[i] = out->metadata[i].key;
    const char *duplicate = safe_find_duplicate(names, out->metadata_count, &failed);
    if (duplicate || failed) {
        error_set(err, "__metadata__: %s \"%s\"", failed ? "out of memory checking" : "duplicate key",
                  safe_printable_name(duplicate ? duplicate : "").text);
        free(sorted);
        return -1;
    }
    for (int i = 0; i < out->count; i++) names[i] = out->tensors[i].name;
    duplicate = safe_find_duplicate(names, out->count, &failed);
    if (duplicate || failed) {
        error_set(err, "%s \"%s\"", failed ? "out of memory checking" : "duplicate tensor name",
                  safe_printable_name(duplicate ? duplicate : "").text);
        free(sorted);
        return -1;
    }
    const SafeTensor **by_offset = (const SafeTensor **)sorted;
    for (int i = 0; i < out->count; i++) by_offset[i] = &out->tensors[i];
    qsort(by_offset, (size_t)out->count, sizeof *by_offset, compare_tensor_ranges);
    size_t covered = 0;
    for (int i = 0; i < out->count; i++) {
        const SafeTensor *t = by_offset[i];
        if (t->offset != covered) {
            if (t->offset > covered)
                error_set(err, "tensor \"%s\": data begins at %zu, leaving a gap after byte %zu",
                          safe_printable_name(t->name).text, t->offset, covered);
            else
                error_set(err, "tensor \"%s\": data [%zu, %zu) overlaps tensor \"%s\"",
                          safe_printable_name(t->name).text, t->offset, t->offset + t->size,
                          safe_printable_name(by_offset[i - 1]->name).text);
            free(sorted);
            return -1;
        }
        covered = t->offset + t->size;
    }
    free(sorted);
    if (covered != data_size)
        return error_set(err, "data section of %zu bytes but the tensors cover only %zu",
                         data_size, covered);
    return 0;
}

// The data section against the CRC-32 the header records, when it records
// one: a pass over the data in memory after the read, in parallel
// (util/data_crc32.h). Computing it on each chunk as read() brings it in
// measured no faster (docs/training.md, "Integrity").
static int verify_data_crc32(const SafeTensors *out, const uint8_t *data, size_t size,
                             ErrorMessage *err) {
    const char *recorded = safetensors_metadata(out, SAFETENSORS_CRC32_KEY);
    if (!recorded) return 0;  // another program's file, or ours from before the key
    uint32_t expected;
    if (data_crc32_parse(recorded, &expected) != 0) {
        error_set(err, "the header is damaged (its %s is \"%s\", not 8 hex digits): the file "
                       "changed after it was written; use another copy",
                  SAFETENSORS_CRC32_KEY, safe_printable_name(recorded).text);
        return SAFETENSORS_DAMAGED;
    }
    const FileChunk all = {data, size};
    const uint32_t actual = data_crc32(&all, 1);
    if (actual != expected) {
        error_set(err, "the tensor data is damaged (CRC-32 %08x recorded, %08x read): the file "
                       "changed after it was written; use another copy",
                  (unsigned)expected, (unsigned)actual);
        return SAFETENSORS_DAMAGED;
    }
    return 0;
}

int safetensors_parse_at(uint8_t *bytes, size_t size, size_t offset, SafeTensors *out,
                         ErrorMessage *err) {
    memset(out, 0, sizeof *out);
    out->file = bytes;  // owned from here, freed on failure by safetensors_free
    out->file_size = size;
    const uint8_t *blob = bytes + offset;
    const size_t blob_size = size > offset ? size - offset : 0;
    if (blob_size < 8) {
        safetensors_free(out);
        return error_set(err, "file of %zu bytes is too short for the 8-byte header length",
                         blob_size);
    }
    uint64_t header_size = 0;
    for (int i = 7; i >= 0; i--) header_size = header_size << 8 | blob[i];
    if (header_size > SAFETENSORS_MAX_HEADER || header_size > blob_size - 8) {
        error_set(err, "header length %llu above the %s (%llu bytes)",
                  (unsigned long long)header_size,
                  header_size > SAFETENSORS_MAX_HEADER ? "limit" : "rest of the file",
                  header_size > SAFETENSORS_MAX_HEADER ? SAFETENSORS_MAX_HEADER
                                                       : (unsigned long long)(blob_size - 8));
        safetensors_free(out);
        return -1;
    }
    const size_t data_start = offset + 8 + (size_t)header_size, data_size = size - data_start;
    JsonScanner scanner;
    json_scanner_init(&scanner, (const char *)blob + 8, (size_t)header_size);
    if (parse_header(&scanner, out, data_size, err) != 0 ||
        check_names_and_tiling(out, data_size, err) != 0) {
        error_prefix(err, "header");
        safetensors_free(out);
        return -1;
    }
    const int verified = verify_data_crc32(out, bytes + data_start, data_size, err);
    if (verified != 0) {
        safetensors_free(out);
        return verified;
    }
    // Move the data down onto an 8-byte boundary (the header is no longer
    // needed) so that tensors written in alignment order can be read in place.
    const size_t aligned = data_start & ~(size_t)7;
    if (aligned != data_start) memmove(bytes + aligned, bytes + data_start, data_size);
    out->data = bytes + aligned;
    return 0;
}

int safetensors_parse(uint8_t *bytes, size_t size, SafeTensors *out, ErrorMessage *err) {
    return safetensors_parse_at(bytes, size, 0, out, err);
}

int safetensors_read(const char *path, SafeTensors *out, ErrorMessage *err) {
    memset(out, 0, sizeof *out);
    ByteBuffer buffer = {0};
    if (file_read_all(path, &buffer, SIZE_MAX / 2, err) != 0) {
        byte_buffer_free(&buffer);
        return error_prefix(err, "%s", path);
    }
    if (safetensors_parse(buffer.data, buffer.size, out, err) != 0)
        return error_prefix(err, "%s", path);
    return 0;
}

int safetensors_read_weights(const char *path, SafeTensors *out, ErrorMessage *err) {
    if (safetensors_read(path, out, err)) return -1;
    safetensors_narrow_f64(out);
    return 0;
}

const SafeTensor *safetensors_find(const SafeTensors *tensors, const char *name) {
    for (int i = 0; i < tensors->count; i++)
        if (strcmp(tensors->tensors[i].name, name) == 0) return &tensors->tensors[i];
    return NULL;
}

const char *safetensors_metadata(const SafeTensors *tensors, const char *key) {
    for (int i = 0; i < tensors->metadata_count; i++)
        if (strcmp(tensors->metadata[i].key, key) == 0) return tensors->metadata[i].value;
    return NULL;
}
