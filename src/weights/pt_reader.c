// PyTorch state dict files (see pt_reader.h): the format sniffed from the
// first bytes, and the zip and legacy containers, which unpickle the object
// and hand its storages to pt_tensors.c (the choice of the dict of tensors,
// the copy of every view into one SafeTensors buffer).
#include "weights/pt_reader.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "util/file.h"
#include "weights/pt_pickle.h"
#include "weights/pt_tensors.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the .pt reader hands storages' little-endian bytes on as they are"
#endif

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

PtFormat pt_sniff(const uint8_t *head, size_t size) {
    if (size >= 4 && memcmp(head, "PK\x03\x04", 4) == 0) return PT_FORMAT_ZIP;
    if (legacy_magic_length(head, size)) return PT_FORMAT_LEGACY;
    if (size >= 262 && memcmp(head + 257, "ustar", 5) == 0) return PT_FORMAT_TAR;
    return PT_FORMAT_NONE;
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
    PtChosen chosen;
    const PtStorageSource source = {
        zip_storage_check, zip_storage_load, zip_storage_read_into, archive,
        PT_MAX_INFLATION * archive->file_size + PT_INFLATION_SLACK, archive->file_size};
    status = pt_choose_tensors(pickle.root, &chosen, err) == 0
                 ? pt_build_tensors(&chosen, &source, out, err)
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
            status = error_set(err, "storage \"%s\" has no persistent id", pt_shown(key).text);
            break;
        }
        const size_t element = safe_dtype_size((*id)->as.storage->dtype);
        uint64_t numel = 0;
        if (size - pos < 8) {
            status = error_set(err, "offset %zu: the file ends before storage \"%s\"", pos,
                               pt_shown(key).text);
            break;
        }
        memcpy(&numel, bytes + pos, 8);
        pos += 8;
        if (numel > (size - pos) / element) {
            status = error_set(err, "offset %zu: storage \"%s\" of %llu elements runs past "
                                    "the end of the file",
                               pos, pt_shown(key).text, (unsigned long long)numel);
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
    PtChosen chosen = {0};
    if (status == 0) status = pt_choose_tensors(object.root, &chosen, err);
    LegacyFile file = {0};
    if (status == 0)
        status = legacy_storages(bytes, size, pos + consumed, &object, &file, &keys, err);
    const PtStorageSource source = {legacy_storage_check, legacy_storage_load,
                                  legacy_storage_read_into, &file, UINT64_MAX, size};
    if (status == 0) status = pt_build_tensors(&chosen, &source, out, err);
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
