// PyTorch state dict files (see pt_reader.h): the zip and legacy
// containers, the choice of the dict of tensors, and the copy of every
// tensor view out of its storage into one SafeTensors buffer.
#include "weights/pt_reader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "nn/json_scan.h"
#include "util/file.h"
#include "weights/pt_modules.h"
#include "weights/pt_pickle.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the .pt reader hands storages' little-endian bytes on as they are"
#endif

#define PT_ALIGN 64
// Deflate's largest possible ratio is 1032:1; torch stores entries
// uncompressed, but a zip tool may have deflated them.
#define PT_MAX_DEFLATE_RATIO 1032

// torch's legacy magic number 0x1950a86a20f9469cfc6c as the first pickle:
// PROTO 2..5 (torch.save's pickle_protocol, 2 by default), a FRAME from
// protocol 4 on, then LONG1 of 10 bytes and STOP.
static const uint8_t LEGACY_MAGIC_NUMBER[] = {0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9,
                                              0x20, 0x6a, 0xa8, 0x50, 0x19, 0x2e};

// The length of the magic number's pickle at head, 0 when it is not there.
static size_t legacy_magic_length(const uint8_t *head, size_t size) {
    if (size < 2 || head[0] != 0x80 || head[1] < 2 || head[1] > 5) return 0;
    size_t pos = 2;
    if (size > pos && head[pos] == 0x95) pos += 9;  // FRAME and its u64 length
    if (size < pos + sizeof LEGACY_MAGIC_NUMBER ||
        memcmp(head + pos, LEGACY_MAGIC_NUMBER, sizeof LEGACY_MAGIC_NUMBER) != 0)
        return 0;
    return pos + sizeof LEGACY_MAGIC_NUMBER;
}
int pt_is_bare_pickle(const uint8_t *head, size_t size) {
    return size >= 3 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5 &&
           !legacy_magic_length(head, size);
}

static const char *const NESTED_KEYS[] = {"state_dict", "model_state_dict", "model", "teacher"};

PtFormat pt_sniff(const uint8_t *head, size_t size) {
    if (size >= 4 && memcmp(head, "PK\x03\x04", 4) == 0) return PT_FORMAT_ZIP;
    if (legacy_magic_length(head, size)) return PT_FORMAT_LEGACY;
    if (size >= 262 && memcmp(head + 257, "ustar", 5) == 0) return PT_FORMAT_TAR;
    return PT_FORMAT_NONE;
}

// ---- storages ----------------------------------------------------------------------------------

// Where the storages' bytes come from: `check` confirms that a storage's
// entry exists and holds exactly `bytes` (before anything is allocated),
// `load` makes them available at *data (valid until the next load),
// `read_into` writes exactly `bytes` of them at dest and never more.
// `budget`: the most bytes all storages read may hold (a zip's deflated
// entries inflate; UINT64_MAX where they lie in the file as they are).
typedef struct StorageSource {
    int (*check)(void *context, const PtStorage *storage, uint64_t bytes, ErrorMessage *err);
    int (*load)(void *context, const PtStorage *storage, uint64_t bytes, const uint8_t **data,
                ErrorMessage *err);
    int (*read_into)(void *context, const PtStorage *storage, uint64_t bytes, uint8_t *dest,
                     ErrorMessage *err);
    void *context;
    uint64_t budget;
    uint64_t file_size;  // for the budget's message
} StorageSource;

// A str value shown in a message (pt_printable).
typedef struct Shown {
    char text[PT_PRINTABLE_SIZE];
} Shown;

static Shown shown(const PtValue *value) {
    Shown out = {"(not a str)"};
    if (value->kind == PT_STRING)
        pt_printable(value->as.string.bytes, value->as.string.length, out.text, sizeof out.text);
    return out;
}

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

// What is read: a dict's tensors, or those of a pickled model's module tree.
typedef struct Chosen {
    const PtValue *dict;
    PtNamedTensor *named;  // malloc'ed; or NULL
    int named_count;
} Chosen;

// An Ultralytics checkpoint's model: "ema" when it holds one, else "model"
// (what Ultralytics' attempt_load_one_weight loads).
static const PtValue *pickled_model(const PtValue *root) {
    const PtValue *ema = pt_dict_get(root, "ema");
    if (ema && ema->kind == PT_OBJECT) return ema;
    const PtValue *model = pt_dict_get(root, "model");
    return model && model->kind == PT_OBJECT ? model : NULL;
}

// The tensors to read (see pt_reader.h); 0 or -1 with err.
static int choose(const PtValue *root, Chosen *chosen, ErrorMessage *err) {
    memset(chosen, 0, sizeof *chosen);
    if (root->kind != PT_DICT)
        return error_set(err, "the pickle holds a %s, not a dict of tensors (a state dict)",
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
                               shown(key).text);
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
static int collect_entries(const Chosen *chosen, Entry **entries, int *count, ErrorMessage *err) {
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

// The chosen dict -> *out: storages checked, sizes bounded, views copied.
static int build_tensors(const Chosen *chosen, const StorageSource *source, SafeTensors *out,
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

// ---- zip ---------------------------------------------------------------------------------------

typedef struct ZipArchive {
    zip_t *zip;
    char prefix[256];     // "<archive>/"
    uint64_t file_size;   // of the whole archive
    uint8_t *scratch;     // the storage being copied from
    size_t scratch_size;
} ZipArchive;

// One entry, found by name: its sizes and its name fit for messages.
typedef struct ZipEntry {
    zip_stat_t stat;
    char shown[PT_PRINTABLE_SIZE];
} ZipEntry;

// The entry "<prefix><name>"; -1 when absent (no message).
static int zip_entry(ZipArchive *archive, const char *name, ZipEntry *entry) {
    char full[sizeof archive->prefix + PT_MAX_STORAGE_KEY + 16];
    snprintf(full, sizeof full, "%s%s", archive->prefix, name);
    pt_printable(full, strlen(full), entry->shown, sizeof entry->shown);
    const zip_int64_t index = zip_name_locate(archive->zip, full, 0);
    if (index < 0) return -1;
    zip_stat_t *stat = &entry->stat;
    zip_stat_init(stat);
    if (zip_stat_index(archive->zip, (zip_uint64_t)index, 0, stat) != 0 ||
        !(stat->valid & ZIP_STAT_SIZE) || !(stat->valid & ZIP_STAT_COMP_SIZE) ||
        !(stat->valid & ZIP_STAT_COMP_METHOD))
        return -1;
    return 0;
}

// Reads exactly the entry's size in bytes into data.
static int zip_read_entry(ZipArchive *archive, const ZipEntry *entry, uint8_t *data,
                          ErrorMessage *err) {
    zip_file_t *file = zip_fopen_index(archive->zip, entry->stat.index, 0);
    if (!file) return error_set(err, "zip: %s: %s", entry->shown, zip_strerror(archive->zip));
    const uint64_t size = entry->stat.size;
    uint64_t done = 0;
    zip_int64_t got = 1;
    while (done < size && (got = zip_fread(file, data + done, size - done)) > 0)
        done += (uint64_t)got;
    // The CRC is checked when the data's end is reached: read past it.
    uint8_t past;
    if (got > 0) {
        const zip_int64_t extra = zip_fread(file, &past, 1);
        got = extra == 0 ? 0 : extra < 0 ? -1 : -2;
    }
    const int status = got == 0 && done == size ? 0
                       : error_set(err, "zip: %s: %s", entry->shown,
                                   got == -1 ? zip_file_strerror(file)
                                             : got == -2 ? "longer than its size" : "ends early");
    zip_fclose(file);
    return status;
}

// An entry's sizes must be possible for this archive before its claimed
// size is allocated.
static int zip_check_sizes(const ZipArchive *archive, const ZipEntry *entry, ErrorMessage *err) {
    const zip_stat_t *stat = &entry->stat;
    if (stat->comp_size > archive->file_size ||
        (stat->comp_method == ZIP_CM_STORE && stat->size != stat->comp_size) ||
        stat->size / PT_MAX_DEFLATE_RATIO > stat->comp_size)
        return error_set(err, "zip: %s: sizes %llu (compressed %llu) impossible in a file of "
                              "%llu bytes",
                         entry->shown, (unsigned long long)stat->size,
                         (unsigned long long)stat->comp_size,
                         (unsigned long long)archive->file_size);
    return 0;
}

static int zip_storage_check(void *context, const PtStorage *storage, uint64_t bytes,
                             ErrorMessage *err) {
    ZipArchive *archive = context;
    char name[PT_MAX_STORAGE_KEY + 8];
    snprintf(name, sizeof name, "data/%s", storage->key);
    ZipEntry entry;
    if (zip_entry(archive, name, &entry) != 0)
        return error_set(err, "storage \"%s\": no entry %s in the archive", storage->key,
                         entry.shown);
    if (zip_check_sizes(archive, &entry, err) != 0) return -1;
    if (entry.stat.size != bytes)
        return error_set(err, "storage \"%s\" holds %llu bytes, its %lld %s elements need %llu",
                         storage->key, (unsigned long long)entry.stat.size,
                         (long long)storage->numel, safe_dtype_name(storage->dtype),
                         (unsigned long long)bytes);
    return 0;
}

// The storage's entry, as checked by zip_storage_check, into dest (exactly
// bytes long: a longer entry is refused, never written past it).
static int zip_storage_read_into(void *context, const PtStorage *storage, uint64_t bytes,
                                 uint8_t *dest, ErrorMessage *err) {
    ZipArchive *archive = context;
    char name[PT_MAX_STORAGE_KEY + 8];
    snprintf(name, sizeof name, "data/%s", storage->key);
    ZipEntry entry;
    if (zip_entry(archive, name, &entry) != 0 || entry.stat.size != bytes)
        return error_set(err, "storage \"%s\" changed while reading", storage->key);
    return zip_read_entry(archive, &entry, dest, err);
}

static int zip_storage_load(void *context, const PtStorage *storage, uint64_t bytes,
                            const uint8_t **data, ErrorMessage *err) {
    ZipArchive *archive = context;
    if (bytes > archive->scratch_size) {
        free(archive->scratch);
        archive->scratch_size = 0;
        archive->scratch = malloc(bytes ? (size_t)bytes : 1);
        if (!archive->scratch) return error_set(err, "out of memory for storage \"%s\"",
                                                storage->key);
        archive->scratch_size = (size_t)bytes;
    }
    if (zip_storage_read_into(context, storage, bytes, archive->scratch, err) != 0) return -1;
    *data = archive->scratch;
    return 0;
}

// Finds "<archive>/data.pkl" (exactly one folder deep) and sets the prefix.
static int zip_find_pickle(ZipArchive *archive, ErrorMessage *err) {
    const zip_int64_t count = zip_get_num_entries(archive->zip, 0);
    int torchscript = 0, found = 0;
    for (zip_int64_t i = 0; i < count; i++) {
        const char *name = zip_get_name(archive->zip, (zip_uint64_t)i, ZIP_FL_ENC_RAW);
        const char *slash = name ? strchr(name, '/') : NULL;
        if (!slash || (size_t)(slash - name) + 2 > sizeof archive->prefix) continue;
        if (strcmp(slash + 1, "constants.pkl") == 0) torchscript = 1;
        if (found || strcmp(slash + 1, "data.pkl") != 0) continue;
        snprintf(archive->prefix, sizeof archive->prefix, "%.*s", (int)(slash - name + 1), name);
        found = 1;
    }
    if (torchscript)
        return error_set(err, "a TorchScript archive (torch.jit.save), not a state dict: save "
                              "model.state_dict() with torch.save");
    if (!found) return error_set(err, "a zip archive without <name>/data.pkl: not a PyTorch file");
    return 0;
}

static int zip_check_byteorder(ZipArchive *archive, ErrorMessage *err) {
    ZipEntry entry;
    if (zip_entry(archive, "byteorder", &entry) != 0) return 0;  // before PyTorch 1.11: little
    char text[16] = {0};
    if (entry.stat.size >= sizeof text)
        return error_set(err, "%s of %llu bytes", entry.shown,
                         (unsigned long long)entry.stat.size);
    if (zip_check_sizes(archive, &entry, err) ||
        zip_read_entry(archive, &entry, (uint8_t *)text, err))
        return -1;
    if (strcmp(text, "little") != 0) {
        char shown_order[PT_PRINTABLE_SIZE];
        pt_printable(text, strlen(text), shown_order, sizeof shown_order);
        return error_set(err, "byte order \"%s\": only little-endian files are read",
                         shown_order);
    }
    return 0;
}

static int read_zip(ZipArchive *archive, SafeTensors *out, ErrorMessage *err) {
    if (zip_find_pickle(archive, err) || zip_check_byteorder(archive, err)) return -1;
    ZipEntry entry;
    if (zip_entry(archive, "data.pkl", &entry) != 0)
        return error_set(err, "zip: %s: %s", entry.shown, zip_strerror(archive->zip));
    if (zip_check_sizes(archive, &entry, err) != 0) return -1;
    const uint64_t size = entry.stat.size;
    if (size > PT_MAX_PICKLE_BYTES)
        return error_set(err, "%s of %llu bytes (at most %llu)", entry.shown,
                         (unsigned long long)size, PT_MAX_PICKLE_BYTES);
    uint8_t *bytes = malloc(size ? (size_t)size : 1);
    if (!bytes) return error_set(err, "out of memory for %s", entry.shown);
    PtPickle pickle;
    size_t consumed = 0;
    int status = zip_read_entry(archive, &entry, bytes, err);
    int is_lightning = 0;
    if (status == 0) {
        status = pt_pickle_load(bytes, (size_t)size, 0, &pickle, &consumed, err);
        // Lightning's checkpoints pickle hyper-parameters and callbacks as
        // Python objects, which no state dict holds: say what the file is
        // (searched only in a pickle read whole: a failed read leaves the
        // buffer partly unwritten).
        static const char lightning[] = "pytorch-lightning_version";
        is_lightning = status != 0 &&
                       memmem(bytes, (size_t)size, lightning, sizeof lightning - 1) != NULL;
    }
    free(bytes);
    if (status != 0 && is_lightning)
        return error_prefix(err, "a PyTorch Lightning checkpoint (Python objects beside the "
                                 "weights), not a state dict: save its model's state_dict() with "
                                 "torch.save; %s", entry.shown);
    if (status != 0) return error_prefix(err, "%s", entry.shown);
    Chosen chosen;
    const StorageSource source = {
        zip_storage_check, zip_storage_load, zip_storage_read_into, archive,
        PT_MAX_INFLATION * archive->file_size + PT_INFLATION_SLACK, archive->file_size};
    status = choose(pickle.root, &chosen, err) == 0 ? build_tensors(&chosen, &source, out, err)
                                                     : -1;
    free(chosen.named);
    pt_pickle_free(&pickle);
    return status;
}

static int finish_zip(zip_t *zip, uint64_t file_size, SafeTensors *out, ErrorMessage *err) {
    ZipArchive archive = {.zip = zip, .file_size = file_size};
    const int status = read_zip(&archive, out, err);
    free(archive.scratch);
    zip_discard(zip);
    return status;
}

static int open_error(int code, ErrorMessage *err) {
    zip_error_t error;
    zip_error_init_with_code(&error, code);
    error_set(err, "zip: %s", zip_error_strerror(&error));
    zip_error_fini(&error);
    return -1;
}

// ---- legacy ------------------------------------------------------------------------------------

typedef struct LegacyStorage {
    const char *key;
    const uint8_t *data;
    uint64_t bytes;
} LegacyStorage;

// The storages found after the object's pickle, sorted by key.
typedef struct LegacyFile {
    LegacyStorage *storages;
    size_t count;
} LegacyFile;

static int compare_legacy_keys(const void *a, const void *b) {
    return strcmp(((const LegacyStorage *)a)->key, ((const LegacyStorage *)b)->key);
}

static const LegacyStorage *legacy_find(const LegacyFile *file, const char *key) {
    const LegacyStorage wanted = {.key = key};
    return bsearch(&wanted, file->storages, file->count, sizeof wanted, compare_legacy_keys);
}

static int legacy_storage_check(void *context, const PtStorage *storage, uint64_t bytes,
                                ErrorMessage *err) {
    const LegacyStorage *found = legacy_find(context, storage->key);
    if (!found) return error_set(err, "storage \"%s\" is not in the file", storage->key);
    if (found->bytes != bytes)
        return error_set(err, "storage \"%s\" holds %llu bytes, its tensors' type and size "
                              "need %llu",
                         storage->key, (unsigned long long)found->bytes,
                         (unsigned long long)bytes);
    return 0;
}

static int legacy_storage_load(void *context, const PtStorage *storage, uint64_t bytes,
                               const uint8_t **data, ErrorMessage *err) {
    if (legacy_storage_check(context, storage, bytes, err) != 0) return -1;
    *data = legacy_find(context, storage->key)->data;
    return 0;
}

static int legacy_storage_read_into(void *context, const PtStorage *storage, uint64_t bytes,
                                    uint8_t *dest, ErrorMessage *err) {
    const uint8_t *data = NULL;
    if (legacy_storage_load(context, storage, bytes, &data, err) != 0) return -1;
    memcpy(dest, data, (size_t)bytes);
    return 0;
}

static int compare_storage_values(const void *a, const void *b) {
    const PtValue *x = *(const PtValue *const *)a, *y = *(const PtValue *const *)b;
    return strcmp(x->as.storage->key, y->as.storage->key);
}

// The persistent ids of the object's pickle, sorted by key (to find a
// storage's element size by key).
static const PtValue **sorted_storage_ids(const PtPickle *object, size_t *count) {
    const PtValue **ids = malloc((object->value_count + 1) * sizeof *ids);
    if (!ids) return NULL;
    *count = 0;
    for (size_t i = 0; i < object->value_count; i++)
        if (pt_pickle_value(object, i)->kind == PT_STORAGE)
            ids[(*count)++] = pt_pickle_value(object, i);
    qsort(ids, *count, sizeof *ids, compare_storage_values);
    return ids;
}

// After the object's pickle: the keys' pickle, then per key an int64
// element count and the bytes.
static int legacy_storages(const uint8_t *bytes, size_t size, size_t pos, const PtPickle *object,
                           LegacyFile *file, PtPickle *keys, ErrorMessage *err) {
    size_t consumed = 0, id_count = 0;
    if (pt_pickle_load(bytes + pos, size - pos, pos, keys, &consumed, err) != 0) return -1;
    pos += consumed;
    const PtValue *list = keys->root;
    if (list->kind != PT_LIST) return error_set(err, "the storage keys are not a list");
    const PtValue **ids = sorted_storage_ids(object, &id_count);
    file->storages = calloc(list->as.items.count + 1, sizeof *file->storages);
    int status = !ids || !file->storages ? error_set(err, "out of memory") : 0;
    for (size_t i = 0; status == 0 && i < list->as.items.count; i++) {
        const PtValue *key = list->as.items.items[i];
        if (key->kind != PT_STRING) {
            status = error_set(err, "a storage key is not a str");
            break;
        }
        PtStorage probe_storage = {0};
        PtValue probe = {.kind = PT_STORAGE, .as.storage = &probe_storage};
        snprintf(probe_storage.key, sizeof probe_storage.key, "%s", key->as.string.bytes);
        const PtValue *probe_pointer = &probe;
        const PtValue **id = bsearch(&probe_pointer, ids, id_count, sizeof *ids,
                                     compare_storage_values);
        if (!id || strcmp((*id)->as.storage->key, key->as.string.bytes) != 0) {
            status = error_set(err, "storage \"%s\" has no persistent id", shown(key).text);
            break;
        }
        const size_t element = safe_dtype_size((*id)->as.storage->dtype);
        uint64_t numel = 0;
        if (size - pos < 8) {
            status = error_set(err, "offset %zu: the file ends before storage \"%s\"", pos,
                               shown(key).text);
            break;
        }
        memcpy(&numel, bytes + pos, 8);
        pos += 8;
        if (numel > (size - pos) / element) {
            status = error_set(err, "offset %zu: storage \"%s\" of %llu elements runs past "
                                    "the end of the file",
                               pos, shown(key).text, (unsigned long long)numel);
            break;
        }
        file->storages[file->count++] = (LegacyStorage){key->as.string.bytes, bytes + pos,
                                                        numel * element};
        pos += (size_t)(numel * element);
    }
    free(ids);
    if (status == 0) {
        qsort(file->storages, file->count, sizeof *file->storages, compare_legacy_keys);
        for (size_t i = 1; i < file->count; i++)
            if (strcmp(file->storages[i - 1].key, file->storages[i].key) == 0)
                return error_set(err, "storage \"%s\" is listed twice", file->storages[i].key);
    }
    return status;
}

static int read_legacy(const uint8_t *bytes, size_t size, SafeTensors *out, ErrorMessage *err) {
    size_t pos = legacy_magic_length(bytes, size), consumed = 0;
    PtPickle header = {0}, object = {0}, keys = {0};
    // Protocol version 1001, then sys_info {'little_endian': True, ...}.
    int status = pt_pickle_load(bytes + pos, size - pos, pos, &header, &consumed, err);
    if (status == 0 && (header.root->kind != PT_INT || header.root->as.integer != 1001))
        status = error_set(err, "legacy format protocol is not 1001");
    pt_pickle_free(&header);
    pos += consumed;
    if (status == 0) status = pt_pickle_load(bytes + pos, size - pos, pos, &header, &consumed, err);
    if (status == 0) {
        const PtValue *little = pt_dict_get(header.root, "little_endian");
        if (!little || little->kind != PT_BOOL || little->as.integer != 1)
            status = error_set(err, "sys_info does not say little_endian: True");
        pt_pickle_free(&header);
        pos += consumed;
    }
    if (status == 0) status = pt_pickle_load(bytes + pos, size - pos, pos, &object, &consumed, err);
    Chosen chosen = {0};
    if (status == 0) status = choose(object.root, &chosen, err);
    LegacyFile file = {0};
    if (status == 0)
        status = legacy_storages(bytes, size, pos + consumed, &object, &file, &keys, err);
    const StorageSource source = {legacy_storage_check, legacy_storage_load,
                                  legacy_storage_read_into, &file, UINT64_MAX, size};
    if (status == 0) status = build_tensors(&chosen, &source, out, err);
    free(chosen.named);
    free(file.storages);
    pt_pickle_free(&keys);
    pt_pickle_free(&object);
    return status;
}

// ---- entry points ------------------------------------------------------------------------------

static int refuse_tar(ErrorMessage *err) {
    return error_set(err, "a tar archive: PyTorch's format before 0.4 (2018) is not read; load "
                          "it with torch and save it again (torch.save(torch.load(f), g))");
}

int pt_parse(uint8_t *bytes, size_t size, SafeTensors *out, ErrorMessage *err) {
    memset(out, 0, sizeof *out);
    int status;
    switch (pt_sniff(bytes, size < PT_SNIFF_BYTES ? size : PT_SNIFF_BYTES)) {
        case PT_FORMAT_ZIP: {
            zip_error_t error;
            zip_error_init(&error);
            zip_source_t *zip_source = zip_source_buffer_create(bytes, size, 0, &error);
            zip_t *zip = zip_source ? zip_open_from_source(zip_source, ZIP_RDONLY | ZIP_CHECKCONS,
                                                           &error)
                                    : NULL;
            if (!zip) {
                status = error_set(err, "zip: %s", zip_error_strerror(&error));
                if (zip_source) zip_source_free(zip_source);
            } else {
                status = finish_zip(zip, size, out, err);
            }
            zip_error_fini(&error);
            break;
        }
        case PT_FORMAT_LEGACY: status = read_legacy(bytes, size, out, err); break;
        case PT_FORMAT_TAR: status = refuse_tar(err); break;
        default: status = error_set(err, "not a PyTorch file (no zip, legacy or tar signature)");
    }
    free(bytes);
    return status;
}

int pt_read(const char *path, SafeTensors *out, ErrorMessage *err) {
    memset(out, 0, sizeof *out);
    off_t size = 0;
    const int fd = file_open_regular(path, &size, err);
    if (fd < 0) return -1;
    uint8_t head[PT_SNIFF_BYTES];
    const ssize_t got = read(fd, head, sizeof head);
    close(fd);
    const PtFormat format = got > 0 ? pt_sniff(head, (size_t)got) : PT_FORMAT_NONE;
    if (format == PT_FORMAT_ZIP) {  // libzip reads the entries it needs from the file
        int code = 0;
        zip_t *zip = zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &code);
        if (!zip) return open_error(code, err);
        return finish_zip(zip, (uint64_t)size, out, err);
    }
    if (format == PT_FORMAT_TAR) return refuse_tar(err);
    ByteBuffer buffer = {0};
    if (file_read_all(path, &buffer, SIZE_MAX / 2, err) != 0) {
        byte_buffer_free(&buffer);
        return -1;
    }
    return pt_parse(buffer.data, buffer.size, out, err);
}
