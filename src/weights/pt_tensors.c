// The tensors of a PyTorch file (see pt_tensors.h): which dict of the
// unpickled object holds them, their keys checked, and the copy of every
// tensor view out of its storage into one SafeTensors buffer. The
// containers (zip, legacy) are pt_reader.c's.
#include "weights/pt_tensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/json_scan.h"
#include "weights/pt_modules.h"
#include "weights/pt_reader.h"

#define PT_ALIGN 64

static const char *const NESTED_KEYS[] = {"state_dict", "model_state_dict", "model", "teacher"};

static uint64_t storage_bytes(const PtStorage *storage) {
    return (uint64_t)storage->numel * safe_dtype_size(storage->dtype);  // checked by pt_pickle
}

// One chosen tensor: its key and its view.
typedef struct Entry {
    const char *name;
    const PtTensor *tensor;
    uint64_t bytes;   // elements x dtype size
    uint64_t offset;  // into the output buffer
} Entry;

static int compare_entry_names(const void *a, const void *b) {
    return strcmp(((const Entry *)a)->name, ((const Entry *)b)->name);
}

static int compare_entry_storages(const void *a, const void *b) {
    const Entry *x = a, *y = b;
    return strcmp(x->tensor->storage->as.storage->key, y->tensor->storage->as.storage->key);
}

static int same_storage(const Entry *a, const Entry *b) {
    return compare_entry_storages(a, b) == 0;
}

static size_t dict_tensor_count(const PtValue *dict) {
    size_t count = 0;
    for (size_t i = 1; dict && dict->kind == PT_DICT && i < dict->as.items.count; i += 2)
        count += dict->as.items.items[i]->kind == PT_TENSOR;
    return count;
}


// An Ultralytics checkpoint's model: "ema" when it holds one, else "model"
// (what Ultralytics' attempt_load_one_weight loads).
static const PtValue *pickled_model(const PtValue *root) {
    const PtValue *ema = pt_dict_get(root, "ema");
    if (ema && ema->kind == PT_OBJECT) return ema;
    const PtValue *model = pt_dict_get(root, "model");
    return model && model->kind == PT_OBJECT ? model : NULL;
}

int pt_choose_tensors(const PtValue *root, PtChosen *chosen, ErrorMessage *err) {
    memset(chosen, 0, sizeof *chosen);
    if (root->kind == PT_OBJECT) {  // torch.save(model): LightlyTrain's torch_model export
        if (pt_module_tensors(root, &chosen->named, &chosen->named_count, err))
            return error_prefix(err, "the pickled %s", root->as.object.cls->as.global.name);
        return 0;
    }
    if (root->kind != PT_DICT)
        return error_set(err, "the pickle holds a %s, not a dict of tensors (a state dict) nor "
                              "a pickled model",
                         pt_kind_name(root->kind));
    if (dict_tensor_count(root) > 0) {
        chosen->dict = root;
        return 0;
    }
    for (size_t k = 0; k < sizeof NESTED_KEYS / sizeof NESTED_KEYS[0]; k++) {
        const PtValue *nested = pt_dict_get(root, NESTED_KEYS[k]);
        if (dict_tensor_count(nested) > 0) {
            chosen->dict = nested;
            return 0;
        }
    }
    const PtValue *model = pickled_model(root);
    if (model) {
        if (pt_module_tensors(model, &chosen->named, &chosen->named_count, err))
            return error_prefix(err, "the pickled %s", model->as.object.cls->as.global.name);
        return 0;
    }
    char keys[200] = "";
    size_t used = 0;
    for (size_t i = 0; i < root->as.items.count && used + 1 < sizeof keys; i += 2) {
        const PtValue *key = root->as.items.items[i];
        const int n = snprintf(keys + used, sizeof keys - used, "%s%s", i ? ", " : "",
                               pt_shown(key).text);
        if (n < 0) break;
        used += (size_t)n;
    }
    return error_set(err, "no tensors in the top-level dict (keys: %s) nor in a dict under "
                          "state_dict, model_state_dict, model or teacher, nor a pickled model "
                          "under ema or model",
                     root->as.items.count ? keys : "none");
}

static int check_text(const char *text, size_t length, ErrorMessage *err) {
    if (length == 0 || length >= SAFETENSORS_MAX_NAME || strlen(text) != length ||
        !json_utf8_valid(text, length)) {
        char name[PT_PRINTABLE_SIZE];
        pt_printable(text, length, name, sizeof name);
        return error_set(err, "a tensor key that is empty, longer than %d bytes, holds a NUL or "
                              "is not UTF-8 (\"%s\")",
                         SAFETENSORS_MAX_NAME - 1, name);
    }
    return 0;
}

static int check_name(const PtValue *key, ErrorMessage *err) {
    if (key->kind != PT_STRING)
        return error_set(err, "a tensor's key is a %s, not a str", pt_kind_name(key->kind));
    return check_text(key->as.string.bytes, key->as.string.length, err);
}

static Entry entry_of(const char *name, const PtTensor *tensor) {
    return (Entry){
        .name = name,
        .tensor = tensor,
        .bytes = (uint64_t)tensor->elements * safe_dtype_size(tensor->storage->as.storage->dtype),
    };
}

// The chosen tensors as entries, names checked and unique.
static int collect_entries(const PtChosen *chosen, Entry **entries, int *count, ErrorMessage *err) {
    const PtValue *dict = chosen->dict;
    const size_t found = dict ? dict_tensor_count(dict) : (size_t)chosen->named_count;
    if (found > SAFETENSORS_MAX_TENSORS)
        return error_set(err, "%zu tensors (at most %d)", found, SAFETENSORS_MAX_TENSORS);
    const int n = (int)found;
    Entry *list = calloc((size_t)n, sizeof *list);
    if (!list) return error_set(err, "out of memory for %d tensors", n);
    int used = 0;
    for (int i = 0; !dict && i < n; i++) {
        const PtNamedTensor *named = &chosen->named[i];
        if (check_text(named->name, strlen(named->name), err) != 0) {
            free(list);
            return -1;
        }
        list[used++] = entry_of(named->name, named->tensor->as.tensor);
    }
    for (size_t i = 0; dict && i + 1 < dict->as.items.count; i += 2) {
        const PtValue *value = dict->as.items.items[i + 1];
        if (value->kind != PT_TENSOR) continue;  // an epoch counter, a config string, ...
        if (check_name(dict->as.items.items[i], err) != 0) {
            free(list);
            return -1;
        }
        list[used++] = entry_of(dict->as.items.items[i]->as.string.bytes, value->as.tensor);
    }
    Entry *sorted = malloc((size_t)n * sizeof *sorted);
    if (!sorted) {
        free(list);
        return error_set(err, "out of memory for %d tensors", n);
    }
    memcpy(sorted, list, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, compare_entry_names);
    for (int i = 1; i < n; i++) {
        if (strcmp(sorted[i - 1].name, sorted[i].name) == 0) {
            char name[PT_PRINTABLE_SIZE];
            pt_printable(sorted[i].name, strlen(sorted[i].name), name, sizeof name);
            error_set(err, "the key \"%s\" appears twice", name);
            free(sorted);
            free(list);
            return -1;
        }
    }
    free(sorted);
    *entries = list;
    *count = n;
    return 0;
}

// 1 when the tensor is its whole storage in row-major order: its bytes are
// the storage's, read straight into the output (no copy of the storage).
static int is_whole_storage(const PtTensor *t) {
    if (t->offset != 0 || t->elements != t->storage->as.storage->numel) return 0;
    int64_t expected = 1;
    for (int d = t->rank - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->stride[d] != expected) return 0;
        expected *= t->shape[d];
    }
    return 1;
}

// Copies a view of `storage` (elements of `size` bytes) into out, row-major.
static void copy_view(uint8_t *out, const uint8_t *storage, size_t size, const PtTensor *t) {
    if (t->elements == 0) return;
    int64_t expected = 1;
    int contiguous = 1;
    for (int d = t->rank - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->stride[d] != expected) contiguous = 0;
        expected *= t->shape[d];
    }
    if (contiguous) {
        memcpy(out, storage + (size_t)t->offset * size, (size_t)t->elements * size);
        return;
    }
    // rank >= 1 here: a scalar is contiguous. Rows of the last dimension.
    const int last = t->rank - 1;
    const int64_t run = t->shape[last], step = t->stride[last];
    int64_t index[PT_MAX_RANK] = {0};
    for (;;) {
        int64_t base = t->offset;
        for (int d = 0; d < last; d++) base += index[d] * t->stride[d];
        if (step == 1) {
            memcpy(out, storage + (size_t)base * size, (size_t)run * size);
            out += (size_t)run * size;
        } else {
            for (int64_t i = 0; i < run; i++, out += size)
                memcpy(out, storage + (size_t)(base + i * step) * size, size);
        }
        int d = last - 1;
        while (d >= 0 && ++index[d] == t->shape[d]) index[d--] = 0;
        if (d < 0) return;
    }
}

int pt_build_tensors(const PtChosen *chosen, const PtStorageSource *source, SafeTensors *out,
                     ErrorMessage *err) {
    Entry *entries = NULL;
    int count = 0;
    if (collect_entries(chosen, &entries, &count, err) != 0) return -1;
    // Output offsets in dict order, then storages grouped by key.
    uint64_t total = 0;
    for (int i = 0; i < count; i++) {
        entries[i].offset = total;
        total += (entries[i].bytes + PT_ALIGN - 1) / PT_ALIGN * PT_ALIGN;  // < 2^63 each
        if (total > SIZE_MAX / 2) {
            free(entries);
            return error_set(err, "the tensors add up to more than the address space");
        }
    }
    Entry *by_storage = malloc((size_t)count * sizeof *by_storage);
    SafeTensor *tensors = calloc((size_t)(count ? count : 1), sizeof *tensors);
    uint8_t *buffer = NULL;
    int status = !by_storage || !tensors ? error_set(err, "out of memory") : 0;
    if (status == 0) {
        memcpy(by_storage, entries, (size_t)count * sizeof *by_storage);
        qsort(by_storage, (size_t)count, sizeof *by_storage, compare_entry_storages);
    }
    uint64_t stored = 0;
    for (int i = 0; status == 0 && i < count; i++) {
        const PtStorage *s = by_storage[i].tensor->storage->as.storage;
        if (i > 0 && strcmp(s->key, by_storage[i - 1].tensor->storage->as.storage->key) == 0) {
            const PtStorage *previous = by_storage[i - 1].tensor->storage->as.storage;
            if (previous->dtype != s->dtype || previous->numel != s->numel)
                status = error_set(err, "storage \"%s\" is declared twice with different types "
                                        "or sizes", s->key);
            continue;
        }
        status = source->check(source->context, s, storage_bytes(s), err);
        stored += storage_bytes(s);  // < 2^18 storages of < 1032 x the file size: no overflow
    }
    if (status == 0 && stored > source->budget)
        status = error_set(err, "its storages hold %llu bytes once inflated, from a file of %llu "
                                "bytes (at most %dx the file's size + %llu MiB: refused before "
                                "inflating anything)",
                           (unsigned long long)stored, (unsigned long long)source->file_size,
                           PT_MAX_INFLATION, PT_INFLATION_SLACK >> 20);
    if (status == 0 && total > PT_MAX_EXPANSION * stored + PT_EXPANSION_SLACK)
        status = error_set(err, "the tensors' views add up to %llu bytes from %llu bytes of "
                                "storage (more than %dx: refused)",
                           (unsigned long long)total, (unsigned long long)stored,
                           PT_MAX_EXPANSION);
    if (status == 0 && !(buffer = malloc(total ? (size_t)total : 1)))
        status = error_set(err, "out of memory for %llu bytes of tensors",
                           (unsigned long long)total);
    const uint8_t *data = NULL;
    for (int i = 0; status == 0 && i < count; i++) {
        const PtStorage *s = by_storage[i].tensor->storage->as.storage;
        const int first = i == 0 || !same_storage(&by_storage[i - 1], &by_storage[i]);
        const int alone = first && (i + 1 == count ||
                                    !same_storage(&by_storage[i], &by_storage[i + 1]));
        if (alone && is_whole_storage(by_storage[i].tensor)) {  // the common case: no copy
            status = source->read_into(source->context, s, storage_bytes(s),
                                       buffer + by_storage[i].offset, err);
            continue;
        }
        if (first) status = source->load(source->context, s, storage_bytes(s), &data, err);
        if (status == 0)
            copy_view(buffer + by_storage[i].offset, data, safe_dtype_size(s->dtype),
                      by_storage[i].tensor);
    }
    for (int i = 0; status == 0 && i < count; i++) {
        SafeTensor *t = &tensors[i];
        memcpy(t->name, entries[i].name, strlen(entries[i].name) + 1);
        t->dtype = entries[i].tensor->storage->as.storage->dtype;
        t->rank = entries[i].tensor->rank;
        memcpy(t->shape, entries[i].tensor->shape, sizeof t->shape);
        t->offset = (size_t)entries[i].offset;
        t->size = (size_t)entries[i].bytes;
    }
    free(by_storage);
    free(entries);
    if (status != 0) {
        free(tensors);
        free(buffer);
        return -1;
    }
    memset(out, 0, sizeof *out);
    out->file = buffer;
    out->file_size = (size_t)total;
    out->data = buffer;
    out->count = count;
    out->tensors = tensors;
    return 0;
}
