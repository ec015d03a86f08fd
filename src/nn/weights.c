// Weight I/O between parameter tables and torchvision state dicts in
// safetensors (see weights.h).
#include "nn/weights.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/finite.h"
#include "util/half.h"

#define BN_MEAN_SUFFIX ".running_mean"
#define BN_COUNTER_SUFFIX ".num_batches_tracked"
#define WEIGHTS_LISTED_PER_KIND 6  // names listed in an error before "(+N more)"

// ---- layout ---------------------------------------------------------------------

// Copies a parameter between our layout and torchvision's: conv weights
// (Cout, KH, KW, Cin) <-> (Cout, Cin, KH, KW); every other tensor is the same
// in both.
static void weights_copy_layout(const Parameter *param, const float *from, float *to,
                                int to_torch) {
    if (param->rank != 4) {
        memcpy(to, from, param->count * sizeof *from);
        return;
    }
    const int out = param->shape[0], kh = param->shape[1], kw = param->shape[2];
    const int in = param->shape[3];
    for (int o = 0; o < out; o++)
        for (int y = 0; y < kh; y++)
            for (int x = 0; x < kw; x++)
                for (int i = 0; i < in; i++) {
                    const size_t ours = (((size_t)o * kh + y) * kw + x) * in + i;
                    const size_t torch = (((size_t)o * in + i) * kh + y) * kw + x;
                    if (to_torch)
                        to[torch] = from[ours];
                    else
                        to[ours] = from[torch];
                }
}

void weights_to_torch_layout(const Parameter *param, const float *ours, float *torch) {
    weights_copy_layout(param, ours, torch, 1);
}

void weights_from_torch_layout(const Parameter *param, const float *torch, float *ours) {
    weights_copy_layout(param, torch, ours, 0);
}

// ---- helpers --------------------------------------------------------------------------

// The BN prefix "X" when name is "X.running_mean"; 0 otherwise.
static int bn_prefix(const char *name, char *prefix, size_t size) {
    const size_t length = strlen(name), suffix = strlen(BN_MEAN_SUFFIX);
    if (length <= suffix || strcmp(name + length - suffix, BN_MEAN_SUFFIX) != 0) return 0;
    if (length - suffix >= size) return 0;
    memcpy(prefix, name, length - suffix);
    prefix[length - suffix] = '\0';
    return 1;
}

static int bn_count(const ParameterSet *buffers) {
    char prefix[PARAM_MAX_NAME];
    int count = 0;
    for (int i = 0; buffers && i < buffers->count; i++)
        count += bn_prefix(buffers->params[i].name, prefix, sizeof prefix);
    return count;
}

int weights_key_count(const ParameterSet *params, const ParameterSet *buffers) {
    return params->count + (buffers ? buffers->count + bn_count(buffers) : 0);
}

// ---- save -------------------------------------------------------------------------------

typedef struct SaveState {
    SafeTensorWrite *entries;
    int count;
    float *staging;      // torch-layout values
    size_t staged;       // floats used in staging
    float *ours;         // one tensor in our layout (download target)
    int64_t *counters;   // one per BN
    int counter_count;
    char (*counter_names)[PARAM_MAX_NAME + 32];
} SaveState;

static void save_tensor(SaveState *state, Backend *backend, const Parameter *param) {
    backend->op.download(backend, state->ours, param->value, param->count * sizeof(float));
    float *torch = state->staging + state->staged;
    weights_to_torch_layout(param, state->ours, torch);
    state->staged += param->count;
    SafeTensorWrite *entry = &state->entries[state->count++];
    memset(entry, 0, sizeof *entry);
    entry->name = param->name;
    entry->dtype = SAFE_F32;
    entry->rank = param->rank;
    for (int d = 0; d < param->rank; d++) entry->shape[d] = param->torch_shape[d];
    entry->data = torch;
}

// Writes the buffers of BN `prefix` (running_mean, running_var, then the counter).
static void save_bn_buffers(SaveState *state, const ParameterSet *buffers, const char *prefix,
                            int64_t num_batches_tracked, char *written) {
    for (int i = 0; i < buffers->count; i++) {
        const char *name = buffers->params[i].name;
        const size_t length = strlen(prefix);
        if (written[i] || strncmp(name, prefix, length) != 0 || name[length] != '.') continue;
        if (strchr(name + length + 1, '.')) continue;  // a deeper module, not this BN's buffer
        save_tensor(state, buffers->backend, &buffers->params[i]);
        written[i] = 1;
    }
    const int k = state->counter_count++;
    snprintf(state->counter_names[k], sizeof state->counter_names[k], "%s%s", prefix,
             BN_COUNTER_SUFFIX);
    state->counters[k] = num_batches_tracked;
    SafeTensorWrite *entry = &state->entries[state->count++];
    memset(entry, 0, sizeof *entry);
    entry->name = state->counter_names[k];
    entry->dtype = SAFE_I64;
    entry->rank = 0;
    entry->data = &state->counters[k];
}

int weights_save(const char *path, const ParameterSet *params, const ParameterSet *buffers,
                 int64_t num_batches_tracked, StateDictWrite write, ErrorMessage *err) {
    const SafeMetadata format = {.key = "format", .value = "pt"};
    return weights_save_with_metadata(path, params, buffers, num_batches_tracked, &format, 1, write,
                                      err);
}

int weights_save_with_metadata(const char *path, const ParameterSet *params,
                               const ParameterSet *buffers, int64_t num_batches_tracked,
                               const SafeMetadata *metadata, int metadata_count,
                               StateDictWrite write, ErrorMessage *err) {
    const int buffer_count = buffers ? buffers->count : 0;
    const int bns = bn_count(buffers);
    size_t total = params->total + (buffers ? buffers->total : 0), largest = 1;
    for (int i = 0; i < params->count; i++)
        if (params->params[i].count > largest) largest = params->params[i].count;
    for (int i = 0; i < buffer_count; i++)
        if (buffers->params[i].count > largest) largest = buffers->params[i].count;

    SaveState state = {0};
    state.entries = calloc((size_t)(params->count + buffer_count + bns) + 1, sizeof *state.entries);
    state.staging = malloc((total + 1) * sizeof(float));
    state.ours = malloc(largest * sizeof(float));
    state.counters = calloc((size_t)bns + 1, sizeof *state.counters);
    state.counter_names = calloc((size_t)bns + 1, sizeof *state.counter_names);
    char *written = calloc((size_t)buffer_count + 1, 1);
    int status = 0;
    if (!state.entries || !state.staging || !state.ours || !state.counters ||
        !state.counter_names || !written) {
        status = error_set(err, "out of memory saving weights to '%s'", path);
        goto done;
    }
    char prefix[PARAM_MAX_NAME];
    for (int i = 0; i < params->count; i++) {
        save_tensor(&state, params->backend, &params->params[i]);
        // After "X.bias", X's buffers when X is a BN (torchvision's order).
        const char *name = params->params[i].name;
        const size_t length = strlen(name);
        if (!buffers || length <= 5 || strcmp(name + length - 5, ".bias") != 0) continue;
        char mean_name[PARAM_MAX_NAME + 32];
        snprintf(mean_name, sizeof mean_name, "%.*s%s", (int)(length - 5), name, BN_MEAN_SUFFIX);
        const Parameter *mean = parameter_find(buffers, mean_name);
        if (!mean || written[mean - buffers->params]) continue;
        snprintf(prefix, sizeof prefix, "%.*s", (int)(length - 5), name);
        save_bn_buffers(&state, buffers, prefix, num_batches_tracked, written);
    }
    // Buffers of BNs without trainable parameters, and any other buffer. Such
    // a BN never runs in training (a YOLO's neck and head, nn/yolo.h): its
    // counter is 0.
    for (int i = 0; i < buffer_count; i++) {
        if (written[i]) continue;
        if (bn_prefix(buffers->params[i].name, prefix, sizeof prefix))
            save_bn_buffers(&state, buffers, prefix, 0, written);
        else {
            save_tensor(&state, buffers->backend, &buffers->params[i]);
            written[i] = 1;
        }
    }
    status = (write ? write : safetensors_write)(path, state.entries, state.count, metadata,
                                                  metadata_count, err);
done:
    free(state.entries);
    free(state.staging);
    free(state.ours);
    free(state.counters);
    free(state.counter_names);
    free(written);
    return status;
}

// ---- load -------------------------------------------------------------------------------

// A list of names for the error message: the first few, then a count.
typedef struct NameList {
    char text[400];
    int count;
} NameList;

static void name_list_add(NameList *list, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
static void name_list_add(NameList *list, const char *format, ...) {
    if (list->count++ >= WEIGHTS_LISTED_PER_KIND) return;
    size_t used = strlen(list->text);
    if (used && used + 2 < sizeof list->text) {
        strcpy(list->text + used, ", ");
        used += 2;
    }
    va_list args;
    va_start(args, format);
    vsnprintf(list->text + used, sizeof list->text - used, format, args);
    va_end(args);
}

static void name_list_report(const NameList *list, const char *what, char *out, size_t size) {
    if (!list->count) return;
    const size_t used = strlen(out);
    snprintf(out + used, size - used, "%s%d %s: %s%s", used ? "; " : "", list->count, what,
             list->text, list->count > WEIGHTS_LISTED_PER_KIND ? ", ..." : "");
}

static const char *strip_prefix(const char *key, const char *prefix) {
    const size_t length = strlen(prefix);
    return strncmp(key, prefix, length) == 0 ? key + length : NULL;
}

void weights_format_shape(const int64_t *dims, int rank, char *out, size_t size) {
    size_t used = (size_t)snprintf(out, size, "(");
    for (int d = 0; d < rank && used < size; d++)
        used += (size_t)snprintf(out + used, size - used, "%s%lld", d ? ", " : "",
                                 (long long)dims[d]);
    if (used < size) snprintf(out + used, size - used, ")");
}

int weights_check_tensor(const SafeTensor *tensor, const char *key, const int64_t *shape,
                         int rank, int count_only, ErrorMessage *err) {
    if (!tensor) return error_set(err, "weights do not match the model: \"%s\" is missing", key);
    if (tensor->dtype != SAFE_F32 && tensor->dtype != SAFE_F16 && tensor->dtype != SAFE_BF16)
        return error_set(err, "weights do not match the model: \"%s\" has dtype %s (F32, F16 "
                              "or BF16 needed)", key, safe_dtype_name(tensor->dtype));
    int64_t count = 1;
    for (int d = 0; d < rank; d++) count *= shape[d];
    int same = count_only ? safe_tensor_elements(tensor) == count : tensor->rank == rank;
    for (int d = 0; !count_only && same && d < rank; d++) same = tensor->shape[d] == shape[d];
    if (!same) {
        char want[96], got[96];
        weights_format_shape(shape, rank, want, sizeof want);
        weights_format_shape(tensor->shape, tensor->rank, got, sizeof got);
        return error_set(err, "weights do not match the model: \"%s\" is %s in the file, the "
                              "model needs %s", key, got, want);
    }
    return 0;
}

// Checks one model tensor against the file; adds to the lists.
static const SafeTensor *check_tensor(const SafeTensors *file, const char *key_prefix,
                                      const Parameter *param, NameList *missing,
                                      NameList *mismatched) {
    char key[SAFETENSORS_MAX_NAME];
    snprintf(key, sizeof key, "%s%s", key_prefix, param->name);
    const SafeTensor *tensor = safetensors_find(file, key);
    if (!tensor) {
        name_list_add(missing, "%s", param->name);
        return NULL;
    }
    if (tensor->dtype != SAFE_F32 && tensor->dtype != SAFE_F16 && tensor->dtype != SAFE_BF16) {
        name_list_add(mismatched, "%s has dtype %s (F32, F16 or BF16 needed)", param->name,
                      safe_dtype_name(tensor->dtype));
        return NULL;
    }
    int same = tensor->rank == param->rank;
    for (int d = 0; same && d < param->rank; d++) same = tensor->shape[d] == param->torch_shape[d];
    if (!same) {
        int64_t expected[PARAM_MAX_RANK];
        for (int d = 0; d < param->rank; d++) expected[d] = param->torch_shape[d];
        char want[64], got[128];
        weights_format_shape(expected, param->rank, want, sizeof want);
        weights_format_shape(tensor->shape, tensor->rank, got, sizeof got);
        name_list_add(mismatched, "%s is %s in the model but %s in the file", param->name, want,
                      got);
        return NULL;
    }
    return tensor;
}

// 1 when name is "X.num_batches_tracked" and X is a BN of the buffer table.
static int is_bn_counter(const char *name, const ParameterSet *buffers) {
    const size_t length = strlen(name), suffix = strlen(BN_COUNTER_SUFFIX);
    if (!buffers || length <= suffix || strcmp(name + length - suffix, BN_COUNTER_SUFFIX) != 0)
        return 0;
    char mean_name[SAFETENSORS_MAX_NAME + 32];
    snprintf(mean_name, sizeof mean_name, "%.*s%s", (int)(length - suffix), name, BN_MEAN_SUFFIX);
    return parameter_find(buffers, mean_name) != NULL;
}

static int is_known_key(const char *name, const ParameterSet *params,
                        const ParameterSet *buffers) {
    return parameter_find(params, name) || (buffers && parameter_find(buffers, name)) ||
           is_bn_counter(name, buffers);
}

void weights_tensor_to_float(const SafeTensors *file, const SafeTensor *tensor, float *out) {
    const void *data = safetensors_data(file, tensor);
    const size_t n = (size_t)safe_tensor_elements(tensor);
    if (tensor->dtype == SAFE_F32) memcpy(out, data, n * sizeof *out);
    else if (tensor->dtype == SAFE_F16) convert_f16_to_f32(data, out, n);
    else convert_bf16_to_f32(data, out, n);
}

static int read_counter(const SafeTensors *file, const SafeTensor *tensor, int64_t *value) {
    if (safe_tensor_elements(tensor) != 1) return -1;
    const void *data = safetensors_data(file, tensor);
    if (tensor->dtype == SAFE_I64) {
        memcpy(value, data, sizeof *value);
    } else if (tensor->dtype == SAFE_I32) {
        int32_t small;
        memcpy(&small, data, sizeof small);
        *value = small;
    } else {
        return -1;
    }
    return 0;
}

int weights_load_from(const SafeTensors *file, ParameterSet *params, ParameterSet *buffers,
                      int64_t *num_batches_tracked, const WeightsLoadOptions *options,
                      ErrorMessage *err) {
    const WeightsLoadOptions strict = {0};
    if (!options) options = &strict;
    const char *key_prefix = options->key_prefix ? options->key_prefix : "";
    ParameterSet *sets[2] = {params, buffers};
    const int set_count = buffers ? 2 : 1;

    NameList missing = {0}, unexpected = {0}, mismatched = {0};
    size_t largest = 1;
    for (int s = 0; s < set_count; s++)
        for (int i = 0; i < sets[s]->count; i++) {
            check_tensor(file, key_prefix, &sets[s]->params[i], &missing, &mismatched);
            if (sets[s]->params[i].count > largest) largest = sets[s]->params[i].count;
        }
    int64_t counter = -1;
    for (int t = 0; t < file->count; t++) {
        const char *name = strip_prefix(file->tensors[t].name, key_prefix);
        if (!name) continue;
        if (options->ignore_prefix && strip_prefix(name, options->ignore_prefix)) continue;
        if (!is_known_key(name, params, buffers)) {
            name_list_add(&unexpected, "%s", name);
            continue;
        }
        if (is_bn_counter(name, buffers)) {
            int64_t value;
            if (read_counter(file, &file->tensors[t], &value))
                name_list_add(&mismatched, "%s is not an integer scalar", name);
            else if (value < 0)
                name_list_add(&mismatched, "%s is negative (%lld)", name, (long long)value);
            else if (value > counter)
                counter = value;
        }
    }
    char problems[1600] = "";
    if (!options->allow_missing) name_list_report(&missing, "missing", problems, sizeof problems);
    if (!options->allow_unexpected)
        name_list_report(&unexpected, "unexpected", problems, sizeof problems);
    name_list_report(&mismatched, "mismatched", problems, sizeof problems);
    if (problems[0]) return error_set(err, "weights do not match the model: %s", problems);

    float *torch = malloc(largest * sizeof *torch), *ours = malloc(largest * sizeof *ours);
    if (!torch || !ours) {
        free(torch);
        free(ours);
        return error_set(err, "out of memory loading weights");
    }
    for (int s = 0; s < set_count; s++) {
        Backend *backend = sets[s]->backend;
        for (int i = 0; i < sets[s]->count; i++) {
            const Parameter *param = &sets[s]->params[i];
            char key[SAFETENSORS_MAX_NAME];
            snprintf(key, sizeof key, "%s%s", key_prefix, param->name);
            const SafeTensor *tensor = safetensors_find(file, key);
            if (!tensor) continue;  // allowed missing
            weights_tensor_to_float(file, tensor, torch);
            const size_t bad = finite_first_bad_f32(torch, param->count);
            if (bad < param->count) {
                const size_t how_many = finite_count_bad_f32(torch, param->count);
                free(torch);
                free(ours);
                return error_set(err, "tensor \"%s\" holds %zu non-finite value(s) (NaN or "
                                      "inf), the first at element %zu: a diverged or damaged "
                                      "model", key, how_many, bad);
            }
            weights_from_torch_layout(param, torch, ours);
            backend->op.upload(backend, param->value, ours, param->count * sizeof *ours);
        }
        parameter_set_written(sets[s]);
    }
    free(torch);
    free(ours);
    if (num_batches_tracked && counter >= 0) *num_batches_tracked = counter;
    return 0;
}

int weights_load(const char *path, ParameterSet *params, ParameterSet *buffers,
                 int64_t *num_batches_tracked, const WeightsLoadOptions *options,
                 ErrorMessage *err) {
    SafeTensors file;
    if (safetensors_read_weights(path, &file, err)) return -1;
    const int status =
        weights_load_from(&file, params, buffers, num_batches_tracked, options, err);
    safetensors_free(&file);
    if (status) return error_prefix(err, "%s", path);
    return 0;
}
