// safetensors reader and writer (see safetensors.h): the header is parsed
// with the bounds-checked scanner of json_scan.h and validated as the
// reference implementation does (offsets must tile the data exactly), then
// the data against the CRC-32 the header records; the writer produces the
// same bytes as the reference for the same tensor order and metadata.
#include "nn/safetensors.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/json_scan.h"
#include "util/data_crc32.h"
#include "util/finite.h"
#include "util/file.h"
#include "weights/pt_reader.h"

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

static const char METADATA_KEY[] = "__metadata__";

const char *safe_dtype_name(SafeDType dtype) {
    return (unsigned)dtype < DTYPE_COUNT ? DTYPES[dtype].name : "?";
}

size_t safe_dtype_size(SafeDType dtype) {
    return (unsigned)dtype < DTYPE_COUNT ? DTYPES[dtype].size : 0;
}

// Every F64 tensor becomes F32 in place (see safetensors_read_weights).
static void narrow_f64(SafeTensors *tensors) {
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

// Bytes of a tensor of this dtype and shape, or -1 when a dimension is
// negative or the size does not fit in int64.
static int64_t shape_bytes(SafeDType dtype, int rank, const int64_t *shape) {
    int64_t bytes = (int64_t)safe_dtype_size(dtype);
    for (int d = 0; d < rank; d++) {
        if (shape[d] < 0) return -1;
        if (shape[d] != 0 && bytes > INT64_MAX / shape[d]) return -1;
        bytes *= shape[d];
    }
    return bytes;
}

// A name fit for an error message: at most 60 bytes, control bytes as '?'.
typedef struct PrintableName {
    char text[68];
} PrintableName;

static PrintableName printable(const char *name) {
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

// The first name that occurs twice (sorting a copy: O(n log n) even for a
// hostile header with millions of entries), or NULL. Sets *failed on OOM.
static const char *find_duplicate(const char **names, int count, int *failed) {
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
                             printable(entry->key).text);
        entry->value = read_string_alloc(scanner, err);
        if (!entry->value)
            return error_prefix(err, "__metadata__: value of \"%s\"", printable(entry->key).text);
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
            if (which == 0) return error_set(err, "unknown field \"%s\"", printable(field).text);
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

    const int64_t bytes = shape_bytes(tensor->dtype, tensor->rank, tensor->shape);
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
            return error_prefix(err, "after \"%s\"", printable(tensor->name).text);
        if (strcmp(tensor->name, METADATA_KEY) == 0) {
            if (have_metadata) return error_set(err, "duplicate \"__metadata__\"");
            have_metadata = 1;
            if (parse_metadata(scanner, out, err) != 0) return -1;
        } else {
            if (parse_tensor_info(scanner, tensor, data_size, err) != 0)
                return error_prefix(err, "tensor \"%s\"", printable(tensor->name).text);
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
    const char *duplicate = find_duplicate(names, out->metadata_count, &failed);
    if (duplicate || failed) {
        error_set(err, "__metadata__: %s \"%s\"", failed ? "out of memory checking" : "duplicate key",
                  printable(duplicate ? duplicate : "").text);
        free(sorted);
        return -1;
    }
    for (int i = 0; i < out->count; i++) names[i] = out->tensors[i].name;
    duplicate = find_duplicate(names, out->count, &failed);
    if (duplicate || failed) {
        error_set(err, "%s \"%s\"", failed ? "out of memory checking" : "duplicate tensor name",
                  printable(duplicate ? duplicate : "").text);
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
                          printable(t->name).text, t->offset, covered);
            else
                error_set(err, "tensor \"%s\": data [%zu, %zu) overlaps tensor \"%s\"",
                          printable(t->name).text, t->offset, t->offset + t->size,
                          printable(by_offset[i - 1]->name).text);
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
                  SAFETENSORS_CRC32_KEY, printable(recorded).text);
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

_Static_assert(SAFE_FILE_SNIFF_BYTES >= PT_SNIFF_BYTES, "pt_sniff sees what it needs");

// The kind of a file of file_size bytes from its first size bytes: PyTorch's
// signatures (pt_sniff), else safetensors' u64 header length within the file
// followed by the JSON's '{'.
static SafeFileKind sniff_head(const uint8_t *head, size_t size, uint64_t file_size) {
    if (pt_sniff(head, size < PT_SNIFF_BYTES ? size : PT_SNIFF_BYTES) != PT_FORMAT_NONE)
        return SAFE_FILE_PYTORCH;
    uint64_t header = 0;
    for (int i = 0; i < 8 && (size_t)i < size; i++) header |= (uint64_t)head[i] << (8 * i);
    return size > 8 && head[8] == '{' && header <= file_size - 8 ? SAFE_FILE_SAFETENSORS
                                                                 : SAFE_FILE_UNKNOWN;
}

int safetensors_sniff_file(const char *path, uint8_t head[SAFE_FILE_SNIFF_BYTES], size_t *size,
                           SafeFileKind *kind, ErrorMessage *err) {
    off_t file_size = 0;
    const int fd = file_open_regular(path, &file_size, err);
    if (fd < 0) return -1;
    const ssize_t got = read(fd, head, SAFE_FILE_SNIFF_BYTES);
    close(fd);
    *size = got > 0 ? (size_t)got : 0;
    *kind = sniff_head(head, *size, (uint64_t)file_size);
    return 0;
}

// safetensors_read of a file of a known kind (safetensors_sniff_file).
static int read_kind(const char *path, SafeFileKind kind, SafeTensors *out, ErrorMessage *err) {
    memset(out, 0, sizeof *out);
    if (kind == SAFE_FILE_PYTORCH)
        return pt_read(path, out, err) ? error_prefix(err, "%s", path) : 0;
    ByteBuffer buffer = {0};
    if (file_read_all(path, &buffer, SIZE_MAX / 2, err) != 0) {
        byte_buffer_free(&buffer);
        return error_prefix(err, "%s", path);
    }
    if (safetensors_parse(buffer.data, buffer.size, out, err) != 0)
        return error_prefix(err, "%s", path);
    return 0;
}

// The kind of the file at path; a file that cannot be opened is left to the
// safetensors path, whose error names it.
static SafeFileKind kind_of(const char *path) {
    uint8_t head[SAFE_FILE_SNIFF_BYTES];
    size_t size;
    SafeFileKind kind;
    ErrorMessage ignored;
    return safetensors_sniff_file(path, head, &size, &kind, &ignored) ? SAFE_FILE_UNKNOWN : kind;
}

int safetensors_read(const char *path, SafeTensors *out, ErrorMessage *err) {
    return read_kind(path, kind_of(path), out, err);
}

int safetensors_read_weights_as(const char *path, SafeFileKind kind, SafeTensors *out,
                                ErrorMessage *err) {
    if (read_kind(path, kind, out, err)) return -1;
    narrow_f64(out);
    return 0;
}

int safetensors_read_weights(const char *path, SafeTensors *out, ErrorMessage *err) {
    return safetensors_read_weights_as(path, kind_of(path), out, err);
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

// ---- writer --------------------------------------------------------------------

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
            return error_set(err, "metadata \"%s\": not valid UTF-8", printable(entry->key).text);
    }
    for (int i = 0; i < count; i++) {
        const SafeTensorWrite *t = &tensors[i];
        if (!t->name || !t->name[0]) return error_set(err, "tensor %d: empty name", i);
        const PrintableName name = printable(t->name);
        const size_t length = strlen(t->name);
        if (length >= SAFETENSORS_MAX_NAME)
            return error_set(err, "tensor \"%s\": name of %zu bytes above the limit of %d", name.text,
                             length, SAFETENSORS_MAX_NAME - 1);
        if (strcmp(t->name, METADATA_KEY) == 0)
            return error_set(err, "tensor \"%s\": reserved name", name.text);
        if (!json_utf8_valid(t->name, length))
            return error_set(err, "tensor \"%s\": name is not valid UTF-8", name.text);
        if ((unsigned)t->dtype >= DTYPE_COUNT)
            return error_set(err, "tensor \"%s\": unknown dtype %d", name.text, (int)t->dtype);
        if (t->rank < 0 || t->rank > SAFETENSORS_MAX_RANK)
            return error_set(err, "tensor \"%s\": rank %d outside 0..%d", name.text, t->rank,
                             SAFETENSORS_MAX_RANK);
        const int64_t bytes = shape_bytes(t->dtype, t->rank, t->shape);
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
    const char *duplicate = find_duplicate(names, count, &failed);
    if (!duplicate && !failed) {
        for (int i = 0; i < metadata_count; i++) names[i] = metadata[i].key;
        duplicate = find_duplicate(names, metadata_count, &failed);
    }
    const int status = failed      ? error_set(err, "out of memory")
                       : duplicate ? error_set(err, "duplicate name \"%s\"", printable(duplicate).text)
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
        const uint64_t bytes = (uint64_t)shape_bytes(t->dtype, t->rank, t->shape);
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
        pieces[i] = (FileChunk){t->data, (size_t)shape_bytes(t->dtype, t->rank, t->shape)};
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
        chunks[i + 1] = (FileChunk){t->data, (size_t)shape_bytes(t->dtype, t->rank, t->shape)};
    }
    const int status = file_write_atomic(path, chunks, count + 1, err);
    free(chunks);
    free(header);
    return status;
}
