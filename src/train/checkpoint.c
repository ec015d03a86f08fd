// Training checkpoints: a 16-byte header and one safetensors blob (see
// checkpoint.h). The writer keeps host copies of every tensor and writes them
// with file_write_atomic; the reader checks the header and hands the rest to
// the hardened safetensors parser.
#include "train/checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/weights.h"
#include "util/data_crc32.h"
#include "util/file.h"
#include "util/finite.h"

#define BN_MEAN_SUFFIX ".running_mean"
#define BN_COUNTER_SUFFIX ".num_batches_tracked"
#define LISTED_NAMES 6  // names an error lists before "..."

// ---- writer --------------------------------------------------------------------------

typedef struct CheckpointEntry {
    char *name;  // owned
    SafeDType dtype;
    int rank;
    int64_t shape[SAFETENSORS_MAX_RANK];
    void *data;  // owned host copy; NULL when empty
} CheckpointEntry;

struct CheckpointWriter {
    CheckpointEntry *entries;
    int count, capacity;
    SafeMetadata *metadata;  // keys and values owned
    int metadata_count, metadata_capacity;
};

CheckpointWriter *checkpoint_writer_create(void) {
    CheckpointWriter *writer = calloc(1, sizeof *writer);
    if (!writer) return NULL;
    if (checkpoint_set_meta(writer, "format", CHECKPOINT_FORMAT_NAME, NULL) != 0) {
        checkpoint_writer_free(writer);
        return NULL;
    }
    return writer;
}

// Frees the entries added after the first `keep` (undoes a failed add).
static void writer_truncate(CheckpointWriter *w, int keep) {
    for (int i = keep; i < w->count; i++) {
        free(w->entries[i].name);
        free(w->entries[i].data);
    }
    w->count = keep;
}

void checkpoint_writer_free(CheckpointWriter *writer) {
    if (!writer) return;
    writer_truncate(writer, 0);
    free(writer->entries);
    for (int i = 0; i < writer->metadata_count; i++) {
        free(writer->metadata[i].key);
        free(writer->metadata[i].value);
    }
    free(writer->metadata);
    free(writer);
}

// Appends an entry named prefix + name with room for its data; returns the
// data buffer to fill (a non-NULL dummy for an empty tensor) or NULL on error.
static void *writer_add(CheckpointWriter *w, const char *prefix, const char *name, SafeDType dtype,
                        int rank, const int64_t *shape, ErrorMessage *err) {
    char full[SAFETENSORS_MAX_NAME];
    const int length = snprintf(full, sizeof full, "%s%s", prefix, name);
    if (length < 0 || (size_t)length >= sizeof full) {
        error_set(err, "checkpoint tensor \"%s%s\": name longer than %d bytes", prefix, name,
                  SAFETENSORS_MAX_NAME - 1);
        return NULL;
    }
    size_t bytes = safe_dtype_size(dtype);
    for (int d = 0; d < rank; d++) bytes *= (size_t)shape[d];
    if (w->count == w->capacity) {
        const int grown = w->capacity ? 2 * w->capacity : 64;
        CheckpointEntry *entries = realloc(w->entries, (size_t)grown * sizeof *entries);
        if (!entries) {
            error_set(err, "checkpoint tensor \"%s\": out of memory", full);
            return NULL;
        }
        w->entries = entries;
        w->capacity = grown;
    }
    CheckpointEntry *entry = &w->entries[w->count];
    memset(entry, 0, sizeof *entry);
    entry->name = strdup(full);
    entry->data = malloc(bytes ? bytes : 1);
    if (!entry->name || !entry->data) {
        free(entry->name);
        free(entry->data);
        error_set(err, "checkpoint tensor \"%s\": out of memory for %zu bytes", full, bytes);
        return NULL;
    }
    entry->dtype = dtype;
    entry->rank = rank;
    for (int d = 0; d < rank; d++) entry->shape[d] = shape[d];
    w->count++;
    return entry->data;
}

// The BN name "X" when name is "X.running_mean"; 0 otherwise.
static int bn_name(const char *name, char *bn, size_t size) {
    const size_t length = strlen(name), suffix = strlen(BN_MEAN_SUFFIX);
    if (length <= suffix || length - suffix >= size ||
        strcmp(name + length - suffix, BN_MEAN_SUFFIX) != 0)
        return 0;
    memcpy(bn, name, length - suffix);
    bn[length - suffix] = '\0';
    return 1;
}

// Every entry of a table, torch layout, F32. host: scratch of the largest entry.
static int add_table(CheckpointWriter *w, const char *prefix, const ParameterSet *set, float *host,
                     ErrorMessage *err) {
    for (int i = 0; i < set->count; i++) {
        const Parameter *param = &set->params[i];
        int64_t shape[PARAM_MAX_RANK];
        for (int d = 0; d < param->rank; d++) shape[d] = param->torch_shape[d];
        float *torch = writer_add(w, prefix, param->name, SAFE_F32, param->rank, shape, err);
        if (!torch) return -1;
        set->backend->op.download(set->backend, host, param->value, param->count * sizeof *host);
        weights_to_torch_layout(param, host, torch);
    }
    return 0;
}

static size_t largest_entry(const ParameterSet *set) {
    size_t largest = 1;
    for (int i = 0; set && i < set->count; i++)
        if (set->params[i].count > largest) largest = set->params[i].count;
    return largest;
}

int checkpoint_add_parameters(CheckpointWriter *w, const char *prefix, const ParameterSet *params,
                              const ParameterSet *buffers, int64_t num_batches_tracked,
                              ErrorMessage *err) {
    const int keep = w->count;
    size_t largest = largest_entry(params);
    if (largest_entry(buffers) > largest) largest = largest_entry(buffers);
    float *host = malloc(largest * sizeof *host);
    if (!host) return error_set(err, "checkpoint \"%s*\": out of memory", prefix);
    int status = add_table(w, prefix, params, host, err);
    if (status == 0 && buffers) status = add_table(w, prefix, buffers, host, err);
    for (int i = 0; status == 0 && buffers && i < buffers->count; i++) {
        char name[PARAM_MAX_NAME + sizeof BN_COUNTER_SUFFIX];
        if (!bn_name(buffers->params[i].name, name, PARAM_MAX_NAME)) continue;
        strcat(name, BN_COUNTER_SUFFIX);
        int64_t *counter = writer_add(w, prefix, name, SAFE_I64, 0, NULL, err);
        if (!counter) status = -1;
        else *counter = num_batches_tracked;
    }
    free(host);
    if (status != 0) writer_truncate(w, keep);
    return status;
}

int checkpoint_add_state_slab(CheckpointWriter *w, const char *prefix, const ParameterSet *params,
                              Backend *backend, const float *slab, ErrorMessage *err) {
    const int keep = w->count;
    for (int i = 0; i < params->count; i++) {
        const Parameter *param = &params->params[i];
        int64_t shape[PARAM_MAX_RANK];
        for (int d = 0; d < param->rank; d++) shape[d] = param->shape[d];
        float *host = writer_add(w, prefix, param->name, SAFE_F32, param->rank, shape, err);
        if (!host) {
            writer_truncate(w, keep);
            return -1;
        }
        backend->op.download(backend, host, slab + param->offset, param->count * sizeof *host);
    }
    return 0;
}

int checkpoint_add_floats(CheckpointWriter *w, const char *name, Backend *backend,
                          const float *device_data, size_t count, ErrorMessage *err) {
    const int64_t shape[1] = {(int64_t)count};
    float *host = writer_add(w, "", name, SAFE_F32, 1, shape, err);
    if (!host) return -1;
    if (count) backend->op.download(backend, host, device_data, count * sizeof *host);
    return 0;
}

int checkpoint_add_host_floats(CheckpointWriter *w, const char *name, const float *data,
                               size_t count, ErrorMessage *err) {
    const int64_t shape[1] = {(int64_t)count};
    float *host = writer_add(w, "", name, SAFE_F32, 1, shape, err);
    if (!host) return -1;
    if (count) memcpy(host, data, count * sizeof *host);
    return 0;
}

int checkpoint_add_tensor(CheckpointWriter *w, const char *name, SafeDType dtype, int rank,
                          const int64_t *shape, const void *data, ErrorMessage *err) {
    void *copy = writer_add(w, "", name, dtype, rank, shape, err);
    if (!copy) return -1;
    size_t bytes = safe_dtype_size(dtype);
    for (int d = 0; d < rank; d++) bytes *= (size_t)shape[d];
    if (bytes) memcpy(copy, data, bytes);
    return 0;
}

int checkpoint_add_i64(CheckpointWriter *w, const char *name, int64_t value, ErrorMessage *err) {
    int64_t *host = writer_add(w, "", name, SAFE_I64, 0, NULL, err);
    if (!host) return -1;
    *host = value;
    return 0;
}

int checkpoint_add_bytes(CheckpointWriter *w, const char *name, const void *data, size_t size,
                         ErrorMessage *err) {
    const int64_t shape[1] = {(int64_t)size};
    uint8_t *host = writer_add(w, "", name, SAFE_U8, 1, shape, err);
    if (!host) return -1;
    if (size) memcpy(host, data, size);
    return 0;
}

int checkpoint_set_meta(CheckpointWriter *w, const char *key, const char *value,
                        ErrorMessage *err) {
    char *copy = strdup(value);
    if (!copy) return error_set(err, "checkpoint metadata \"%s\": out of memory", key);
    for (int i = 0; i < w->metadata_count; i++)
        if (strcmp(w->metadata[i].key, key) == 0) {
            free(w->metadata[i].value);
            w->metadata[i].value = copy;
            return 0;
        }
    if (w->metadata_count == w->metadata_capacity) {
        const int grown = w->metadata_capacity ? 2 * w->metadata_capacity : 8;
        SafeMetadata *metadata = realloc(w->metadata, (size_t)grown * sizeof *metadata);
        if (!metadata) {
            free(copy);
            return error_set(err, "checkpoint metadata \"%s\": out of memory", key);
        }
        w->metadata = metadata;
        w->metadata_capacity = grown;
    }
    char *key_copy = strdup(key);
    if (!key_copy) {
        free(copy);
        return error_set(err, "checkpoint metadata \"%s\": out of memory", key);
    }
    w->metadata[w->metadata_count++] = (SafeMetadata){.key = key_copy, .value = copy};
    return 0;
}

static void put_u32(uint8_t *out, uint32_t value) {
    for (int i = 0; i < 4; i++) out[i] = (uint8_t)(value >> (8 * i));
}

static uint32_t get_u32(const uint8_t *in) {
    return (uint32_t)in[0] | (uint32_t)in[1] << 8 | (uint32_t)in[2] << 16 | (uint32_t)in[3] << 24;
}

int checkpoint_write(CheckpointWriter *w, const char *path, ErrorMessage *err) {
    SafeTensorWrite *tensors = calloc((size_t)w->count + 1, sizeof *tensors);
    FileChunk *chunks = calloc((size_t)w->count + 2, sizeof *chunks);
    if (!tensors || !chunks) {
        free(tensors);
        free(chunks);
        return error_set(err, "%s: out of memory", path);
    }
    // Largest alignment first, so that every tensor lies on its dtype's boundary.
    int n = 0;
    for (size_t alignment = 8; alignment >= 1; alignment /= 2)
        for (int i = 0; i < w->count; i++) {
            const CheckpointEntry *entry = &w->entries[i];
            if (safe_dtype_size(entry->dtype) != alignment) continue;
            SafeTensorWrite *t = &tensors[n++];
            t->name = entry->name;
            t->dtype = entry->dtype;
            t->rank = entry->rank;
            memcpy(t->shape, entry->shape, sizeof t->shape);
            t->data = entry->data;
        }
    uint8_t *blob_header = NULL;
    size_t blob_header_size = 0;
    int status = safetensors_encode_header(tensors, n, w->metadata, w->metadata_count,
                                           &blob_header, &blob_header_size, err);
    if (status != 0) {
        error_prefix(err, "%s", path);
    } else {
        uint8_t header[CHECKPOINT_HEADER_SIZE] = {0};
        memcpy(header, CHECKPOINT_MAGIC, sizeof CHECKPOINT_MAGIC);  // with the 0
        put_u32(header + 8, CHECKPOINT_FORMAT_VERSION);
        const FileChunk table = {blob_header, blob_header_size};
        put_u32(header + 12, data_crc32(&table, 1));
        chunks[0] = (FileChunk){header, sizeof header};
        chunks[1] = (FileChunk){blob_header, blob_header_size};
        for (int i = 0; i < n; i++) {
            size_t bytes = safe_dtype_size(tensors[i].dtype);
            for (int d = 0; d < tensors[i].rank; d++) bytes *= (size_t)tensors[i].shape[d];
            chunks[i + 2] = (FileChunk){tensors[i].data, bytes};
        }
        status = file_write_atomic(path, chunks, n + 2, err);
    }
    free(blob_header);
    free(tensors);
    free(chunks);
    return status;
}

// ---- reader --------------------------------------------------------------------------

// Version 2: the blob's header against the CRC-32 recorded for it. A header
// length that does not fit the file is left to the parser, which says so.
static int check_header_crc32(const uint8_t *bytes, size_t size, uint32_t recorded,
                              ErrorMessage *err) {
    const size_t start = CHECKPOINT_HEADER_SIZE;
    if (size - start < 8) return 0;
    uint64_t length = 0;
    for (int i = 7; i >= 0; i--) length = length << 8 | bytes[start + (size_t)i];
    if (length > size - start - 8) return 0;
    const FileChunk table = {bytes + start, 8 + (size_t)length};
    const uint32_t actual = data_crc32(&table, 1);
    if (actual == recorded) return 0;
    return error_set(err, "the checkpoint header is damaged (CRC-32 %08x recorded, %08x read): "
                          "its tensor table or metadata changed after it was written; use "
                          "another copy", (unsigned)recorded, (unsigned)actual);
}

int checkpoint_parse(uint8_t *bytes, size_t size, Checkpoint *ckpt, ErrorMessage *err) {
    memset(ckpt, 0, sizeof *ckpt);
    if (size < CHECKPOINT_HEADER_SIZE) {
        free(bytes);
        return error_set(err, "file of %zu bytes is too short for the %d-byte checkpoint header",
                         size, CHECKPOINT_HEADER_SIZE);
    }
    if (memcmp(bytes, CHECKPOINT_MAGIC, sizeof CHECKPOINT_MAGIC) != 0) {
        free(bytes);
        return error_set(err, "not a lightly-train-c checkpoint (no \"%s\" magic)",
                         CHECKPOINT_MAGIC);
    }
    // Bytes 12..15: version 1's flags (none defined), version 2's CRC-32.
    const uint32_t version = get_u32(bytes + 8), word = get_u32(bytes + 12);
    int status = 0;
    if (version == 0)
        status = error_set(err, "checkpoint format version 0 is invalid");
    else if (version > CHECKPOINT_FORMAT_VERSION)
        status = error_set(err,
                           "checkpoint format version %u is newer than this program supports (%d)",
                           version, CHECKPOINT_FORMAT_VERSION);
    else if (version == 1 && word)
        status = error_set(err, "checkpoint flags 0x%x are unknown to format version %u", word,
                           version);
    else if (version >= 2)
        status = check_header_crc32(bytes, size, word, err);
    if (status != 0) {
        free(bytes);
        return -1;
    }
    // The blob is parsed in place (its data stays 8-byte aligned after the
    // 16-byte header); damaged data is told as such, not as a tensor problem.
    const int parsed = safetensors_parse_at(bytes, size, CHECKPOINT_HEADER_SIZE, &ckpt->tensors,
                                            err);
    if (parsed == SAFETENSORS_DAMAGED) return -1;
    if (parsed != 0) return error_prefix(err, "checkpoint tensors");
    ckpt->version = (int)version;
    return 0;
}

int checkpoint_read(const char *path, Checkpoint *ckpt, ErrorMessage *err) {
    memset(ckpt, 0, sizeof *ckpt);
    ByteBuffer buffer = {0};
    if (file_read_all(path, &buffer, SIZE_MAX / 2, err) != 0) {
        byte_buffer_free(&buffer);
        return error_prefix(err, "%s", path);
    }
    if (checkpoint_parse(buffer.data, buffer.size, ckpt, err) != 0)
        return error_prefix(err, "%s", path);
    return 0;
}

void checkpoint_free(Checkpoint *ckpt) {
    safetensors_free(&ckpt->tensors);
    memset(ckpt, 0, sizeof *ckpt);
}

int checkpoint_sniff(const char *path, int *is_checkpoint, WeightFileKind *kind,
                     ErrorMessage *err) {
    uint8_t head[WEIGHT_FILE_SNIFF_BYTES];
    size_t size;
    if (weight_file_sniff(path, head, &size, kind, err)) return error_prefix(err, "%s", path);
    *is_checkpoint = size >= sizeof CHECKPOINT_MAGIC &&
                     memcmp(head, CHECKPOINT_MAGIC, sizeof CHECKPOINT_MAGIC) == 0;
    if (*is_checkpoint || *kind != WEIGHT_FILE_UNKNOWN) return 0;
    // Told apart by content, never by name: a state dict named .ckpt is read.
    const size_t length = strlen(path);
    if (length >= 5 && strcmp(path + length - 5, ".ckpt") == 0)
        return error_set(err, "%s: not a lightly-train-c checkpoint (it does not start with "
                              "the %s magic), nor a safetensors or PyTorch file: damaged, or "
                              "another program's file",
                         path, CHECKPOINT_MAGIC);
    return 0;
}

int checkpoint_is_checkpoint_file(const char *path) {
    int is_checkpoint;
    WeightFileKind kind;
    ErrorMessage ignored;
    return checkpoint_sniff(path, &is_checkpoint, &kind, &ignored) == 0 && is_checkpoint;
}

const char *checkpoint_meta(const Checkpoint *ckpt, const char *key) {
    return safetensors_metadata(&ckpt->tensors, key);
}

int checkpoint_has_prefix(const Checkpoint *ckpt, const char *prefix) {
    const size_t length = strlen(prefix);
    for (int i = 0; i < ckpt->tensors.count; i++)
        if (strncmp(ckpt->tensors.tensors[i].name, prefix, length) == 0) return 1;
    return 0;
}

int checkpoint_load_parameters(const Checkpoint *ckpt, const char *prefix, ParameterSet *params,
                               ParameterSet *buffers, int64_t *num_batches_tracked,
                               ErrorMessage *err) {
    const WeightsLoadOptions options = {.key_prefix = prefix};
    if (weights_load_from(&ckpt->tensors, params, buffers, num_batches_tracked, &options, err))
        return error_prefix(err, "checkpoint tensors \"%s*\"", prefix);
    return 0;
}

// "N what: a, b, c, ..." appended to a problem report.
typedef struct ProblemList {
    char names[300];
    int count;
} ProblemList;

static void problem_add(ProblemList *list, const char *name) {
    if (list->count++ >= LISTED_NAMES) return;
    const size_t used = strlen(list->names);
    snprintf(list->names + used, sizeof list->names - used, "%s%s", used ? ", " : "", name);
}

static void problem_report(const ProblemList *list, const char *what, char *out, size_t size) {
    if (!list->count) return;
    const size_t used = strlen(out);
    snprintf(out + used, size - used, "%s%d %s: %s%s", used ? "; " : "", list->count, what,
             list->names, list->count > LISTED_NAMES ? ", ..." : "");
}

int checkpoint_load_state_slab(const Checkpoint *ckpt, const char *prefix,
                               const ParameterSet *params, Backend *backend, float *slab,
                               ErrorMessage *err) {
    const SafeTensors *file = &ckpt->tensors;
    const size_t length = strlen(prefix);
    ProblemList missing = {0}, mismatched = {0}, unexpected = {0}, nonfinite = {0};
    const SafeTensor **found = calloc((size_t)params->count + 1, sizeof *found);
    if (!found) return error_set(err, "checkpoint tensors \"%s*\": out of memory", prefix);
    for (int i = 0; i < params->count; i++) {
        const Parameter *param = &params->params[i];
        char key[SAFETENSORS_MAX_NAME];
        snprintf(key, sizeof key, "%s%s", prefix, param->name);
        const SafeTensor *tensor = safetensors_find(file, key);
        if (!tensor) problem_add(&missing, param->name);
        else if (tensor->dtype != SAFE_F32 || (size_t)safe_tensor_elements(tensor) != param->count)
            problem_add(&mismatched, param->name);
        else if (finite_first_bad_f32(safetensors_data(file, tensor), param->count) < param->count)
            problem_add(&nonfinite, param->name);
        else found[i] = tensor;
    }
    for (int t = 0; t < file->count; t++) {
        const char *name = file->tensors[t].name;
        if (strncmp(name, prefix, length) == 0 && !parameter_find(params, name + length))
            problem_add(&unexpected, name + length);
    }
    char problems[1100] = "";
    problem_report(&missing, "missing", problems, sizeof problems);
    problem_report(&mismatched, "not F32 of the parameter's size", problems, sizeof problems);
    problem_report(&nonfinite, "holding NaN or inf", problems, sizeof problems);
    problem_report(&unexpected, "unexpected", problems, sizeof problems);
    if (!problems[0])
        for (int i = 0; i < params->count; i++)
            backend->op.upload(backend, slab + params->params[i].offset,
                               safetensors_data(file, found[i]), found[i]->size);
    free(found);
    if (problems[0])
        return error_set(err, "checkpoint tensors \"%s*\" do not match the parameters: %s", prefix,
                         problems);
    return 0;
}

// The tensor `name` of the given dtype and element count (count < 0: any).
static const SafeTensor *find_tensor(const Checkpoint *ckpt, const char *name, SafeDType dtype,
                                     int64_t count, ErrorMessage *err) {
    const SafeTensor *tensor = safetensors_find(&ckpt->tensors, name);
    if (!tensor) {
        error_set(err, "checkpoint has no tensor \"%s\"", name);
        return NULL;
    }
    if (tensor->dtype != dtype) {
        error_set(err, "checkpoint tensor \"%s\" is %s, expected %s", name,
                  safe_dtype_name(tensor->dtype), safe_dtype_name(dtype));
        return NULL;
    }
    if (count >= 0 && safe_tensor_elements(tensor) != count) {
        error_set(err, "checkpoint tensor \"%s\" has %lld elements, expected %lld", name,
                  (long long)safe_tensor_elements(tensor), (long long)count);
        return NULL;
    }
    const size_t elements = (size_t)safe_tensor_elements(tensor);
    const size_t bad = dtype == SAFE_F32
                           ? finite_first_bad_f32(safetensors_data(&ckpt->tensors, tensor), elements)
                           : elements;
    if (bad < elements) {
        error_set(err, "checkpoint tensor \"%s\" holds a non-finite value (NaN or inf) at "
                       "element %zu", name, bad);
        return NULL;
    }
    return tensor;
}

int checkpoint_get_floats(const Checkpoint *ckpt, const char *name, Backend *backend,
                          float *device_data, size_t count, ErrorMessage *err) {
    const SafeTensor *tensor = find_tensor(ckpt, name, SAFE_F32, (int64_t)count, err);
    if (!tensor) return -1;
    if (count) backend->op.upload(backend, device_data, safetensors_data(&ckpt->tensors, tensor),
                                  tensor->size);
    return 0;
}

int checkpoint_get_host_floats(const Checkpoint *ckpt, const char *name, float *data,
                               size_t count, ErrorMessage *err) {
    const SafeTensor *tensor = find_tensor(ckpt, name, SAFE_F32, (int64_t)count, err);
    if (!tensor) return -1;
    if (count) memcpy(data, safetensors_data(&ckpt->tensors, tensor), tensor->size);
    return 0;
}

int checkpoint_get_i64(const Checkpoint *ckpt, const char *name, int64_t *value,
                       ErrorMessage *err) {
    const SafeTensor *tensor = find_tensor(ckpt, name, SAFE_I64, 1, err);
    if (!tensor) return -1;
    memcpy(value, safetensors_data(&ckpt->tensors, tensor), sizeof *value);
    return 0;
}

int checkpoint_get_bytes(const Checkpoint *ckpt, const char *name, const uint8_t **data,
                         size_t *size, ErrorMessage *err) {
    const SafeTensor *tensor = find_tensor(ckpt, name, SAFE_U8, -1, err);
    if (!tensor) return -1;
    *data = safetensors_data(&ckpt->tensors, tensor);
    *size = tensor->size;
    return 0;
}
