// torch.save's format written from C (see pt_writer.h).
#include "weights/pt_writer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#include "util/file.h"

static void put_bytes(PtWriter *w, const void *bytes, size_t n) {
    if (w->failed) return;
    if (w->size + n > w->capacity) {
        size_t grown = w->capacity ? w->capacity : 4096;
        while (grown < w->size + n) grown *= 2;
        uint8_t *bigger = realloc(w->pickle, grown);
        if (!bigger) {
            w->failed = 1;
            return;
        }
        w->pickle = bigger;
        w->capacity = grown;
    }
    memcpy(w->pickle + w->size, bytes, n);
    w->size += n;
}

static void op(PtWriter *w, uint8_t code) { put_bytes(w, &code, 1); }

static void put_le(PtWriter *w, uint64_t value, int bytes) {
    uint8_t out[8];
    for (int i = 0; i < bytes; i++) out[i] = (uint8_t)(value >> (8 * i));
    put_bytes(w, out, (size_t)bytes);
}

void pt_writer_init(PtWriter *w) {
    memset(w, 0, sizeof *w);
    op(w, 0x80);  // PROTO 2
    op(w, 2);
}

void pt_writer_free(PtWriter *w) {
    for (int i = 0; i < w->storage_count; i++) free(w->storages[i].owned);
    free(w->storages);
    free(w->pickle);
    memset(w, 0, sizeof *w);
}

void pt_put_none(PtWriter *w) { op(w, 'N'); }
void pt_put_bool(PtWriter *w, int value) { op(w, value ? 0x88 : 0x89); }

void pt_put_int(PtWriter *w, int64_t value) {
    if (value >= 0 && value < 256) {
        op(w, 'K');  // BININT1
        put_le(w, (uint64_t)value, 1);
    } else if (value >= INT32_MIN && value <= INT32_MAX) {
        op(w, 'J');  // BININT
        put_le(w, (uint64_t)(uint32_t)(int32_t)value, 4);
    } else {
        op(w, 0x8a);  // LONG1, 8 bytes two's complement
        op(w, 8);
        put_le(w, (uint64_t)value, 8);
    }
}

void pt_put_float(PtWriter *w, double value) {
    uint64_t bits;
    memcpy(&bits, &value, sizeof bits);
    op(w, 'G');  // BINFLOAT: big-endian
    for (int i = 7; i >= 0; i--) op(w, (uint8_t)(bits >> (8 * i)));
}

void pt_put_str(PtWriter *w, const char *text) {
    const size_t length = strlen(text);
    op(w, 'X');  // BINUNICODE
    put_le(w, (uint64_t)length, 4);
    put_bytes(w, text, length);
}

void pt_put_global(PtWriter *w, const char *module, const char *name) {
    op(w, 'c');
    put_bytes(w, module, strlen(module));
    op(w, '\n');
    put_bytes(w, name, strlen(name));
    op(w, '\n');
}

void pt_mark(PtWriter *w) { op(w, '('); }
void pt_tuple_end(PtWriter *w) { op(w, 't'); }

void pt_put_int_tuple(PtWriter *w, const int64_t *values, int count) {
    pt_mark(w);
    for (int i = 0; i < count; i++) pt_put_int(w, values[i]);
    pt_tuple_end(w);
}

void pt_list_begin(PtWriter *w) {
    op(w, ']');
    op(w, '(');
}
void pt_list_end(PtWriter *w) { op(w, 'e'); }  // APPENDS

void pt_dict_begin(PtWriter *w) {
    op(w, '}');
    op(w, '(');
}
void pt_dict_end(PtWriter *w) { op(w, 'u'); }  // SETITEMS

void pt_ordered_dict_begin(PtWriter *w) {
    pt_put_global(w, "collections", "OrderedDict");
    op(w, ')');
    op(w, 'R');
    op(w, '(');
}

void pt_object_begin(PtWriter *w, const char *module, const char *name) {
    pt_put_global(w, module, name);
    op(w, ')');
    op(w, 0x81);  // NEWOBJ
    pt_dict_begin(w);
}

void pt_object_end(PtWriter *w) {
    pt_dict_end(w);
    op(w, 'b');  // BUILD
}

int pt_memo_put(PtWriter *w) {
    op(w, 'r');  // LONG_BINPUT
    put_le(w, (uint64_t)w->memo_count, 4);
    return w->memo_count++;
}

void pt_memo_get(PtWriter *w, int index) {
    op(w, 'j');  // LONG_BINGET
    put_le(w, (uint64_t)index, 4);
}

static const char *storage_class(SafeDType dtype) {
    switch (dtype) {
    case SAFE_F32: return "FloatStorage";
    case SAFE_F16: return "HalfStorage";
    case SAFE_BF16: return "BFloat16Storage";
    case SAFE_F64: return "DoubleStorage";
    case SAFE_I64: return "LongStorage";
    case SAFE_I32: return "IntStorage";
    case SAFE_I16: return "ShortStorage";
    case SAFE_I8: return "CharStorage";
    case SAFE_U8: return "ByteStorage";
    case SAFE_BOOL: return "BoolStorage";
    }
    return "FloatStorage";
}

// A new storage of size bytes at data (copied when copy is set); 0, or -1
// when out of memory (w->failed).
static int add_storage(PtWriter *w, SafeDType dtype, const void *data, size_t size, int copy) {
    if (w->failed) return -1;
    if (w->storage_count == w->storage_capacity) {
        const int grown = w->storage_capacity ? 2 * w->storage_capacity : 64;
        PtWriterStorage *bigger = realloc(w->storages, (size_t)grown * sizeof *bigger);
        if (!bigger) {
            w->failed = 1;
            return -1;
        }
        w->storages = bigger;
        w->storage_capacity = grown;
    }
    PtWriterStorage *storage = &w->storages[w->storage_count];
    *storage = (PtWriterStorage){.bytes = data, .size = size, .dtype = dtype};
    if (copy) {
        storage->owned = malloc(size ? size : 1);
        if (!storage->owned) {
            w->failed = 1;
            return -1;
        }
        if (size) memcpy(storage->owned, data, size);
        storage->bytes = storage->owned;
    }
    w->storage_count++;
    return 0;
}

static void put_tensor(PtWriter *w, SafeDType dtype, const void *data, int rank,
                       const int64_t *shape, int parameter, int requires_grad, int copy) {
    int64_t elements = 1, stride[SAFETENSORS_MAX_RANK];
    for (int d = rank - 1; d >= 0; d--) {
        stride[d] = elements;
        elements *= shape[d];
    }
    if (add_storage(w, dtype, data, (size_t)elements * safe_dtype_size(dtype), copy) != 0) return;
    char key[16];
    snprintf(key, sizeof key, "%d", w->storage_count - 1);
    if (parameter) pt_put_global(w, "torch._utils", "_rebuild_parameter");
    if (parameter) pt_mark(w);
    pt_put_global(w, "torch._utils", "_rebuild_tensor_v2");
    pt_mark(w);
    pt_mark(w);  // the persistent id: ('storage', type, key, location, numel)
    pt_put_str(w, "storage");
    pt_put_global(w, "torch", storage_class(dtype));
    pt_put_str(w, key);
    pt_put_str(w, "cpu");
    pt_put_int(w, elements);
    pt_tuple_end(w);
    op(w, 'Q');  // BINPERSID
    pt_put_int(w, 0);  // storage offset
    pt_put_int_tuple(w, shape, rank);
    pt_put_int_tuple(w, stride, rank);
    pt_put_bool(w, 0);  // requires_grad (the parameter carries its own)
    pt_ordered_dict_begin(w);  // backward hooks
    pt_dict_end(w);
    pt_tuple_end(w);
    op(w, 'R');
    if (!parameter) return;
    pt_put_bool(w, requires_grad);
    pt_ordered_dict_begin(w);
    pt_dict_end(w);
    pt_tuple_end(w);
    op(w, 'R');
}

void pt_put_tensor(PtWriter *w, SafeDType dtype, const void *data, int rank,
                   const int64_t *shape, int parameter, int requires_grad) {
    put_tensor(w, dtype, data, rank, shape, parameter, requires_grad, 1);
}

void pt_put_tensor_borrowed(PtWriter *w, SafeDType dtype, const void *data, int rank,
                            const int64_t *shape) {
    put_tensor(w, dtype, data, rank, shape, 0, 0, 0);
}

void pt_put_parameter_borrowed(PtWriter *w, SafeDType dtype, const void *data, int rank,
                               const int64_t *shape) {
    put_tensor(w, dtype, data, rank, shape, 1, 1, 0);
}

// Adds `bytes` as archive/name, stored (torch.load reads stored entries).
static int add_entry(zip_t *zip, const char *archive, const char *name, const void *bytes,
                     size_t size, ErrorMessage *err) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", archive, name);
    zip_source_t *source = zip_source_buffer(zip, bytes, size, 0);
    if (!source) return error_set(err, "zip: %s: %s", path, zip_strerror(zip));
    const zip_int64_t index = zip_file_add(zip, path, source, ZIP_FL_ENC_UTF_8);
    if (index < 0) {
        zip_source_free(source);
        return error_set(err, "zip: %s: %s", path, zip_strerror(zip));
    }
    if (zip_set_file_compression(zip, (zip_uint64_t)index, ZIP_CM_STORE, 0) != 0)
        return error_set(err, "zip: %s: %s", path, zip_strerror(zip));
    return 0;
}

// The zip in a memory source (*archive_out; the caller frees it).
static int build_zip(PtWriter *w, const char *archive, zip_source_t **archive_out,
                     ErrorMessage *err) {
    zip_error_t error;
    zip_error_init(&error);
    zip_source_t *memory = zip_source_buffer_create(NULL, 0, 0, &error);
    zip_t *zip = memory ? zip_open_from_source(memory, ZIP_TRUNCATE, &error) : NULL;
    if (!zip) {
        error_set(err, "zip: %s", zip_error_strerror(&error));
        if (memory) zip_source_free(memory);
        zip_error_fini(&error);
        return -1;
    }
    zip_error_fini(&error);
    zip_source_keep(memory);
    int status = add_entry(zip, archive, "data.pkl", w->pickle, w->size, err);
    for (int i = 0; status == 0 && i < w->storage_count; i++) {
        char name[32];
        snprintf(name, sizeof name, "data/%d", i);
        status = add_entry(zip, archive, name, w->storages[i].bytes, w->storages[i].size, err);
    }
    if (status == 0) status = add_entry(zip, archive, "byteorder", "little", 6, err);
    if (status == 0) status = add_entry(zip, archive, "version", "3\n", 2, err);
    if (status == 0 && zip_close(zip) != 0)
        status = error_set(err, "zip: %s", zip_strerror(zip));
    if (status != 0) {
        zip_discard(zip);
        zip_source_free(memory);
        return -1;
    }
    *archive_out = memory;
    return 0;
}

// The archive's bytes into the file, a piece at a time (a FileProducer).
static int copy_archive(FILE *file, void *context, ErrorMessage *err) {
    zip_source_t *memory = context;
    enum { PIECE = 1 << 20 };
    uint8_t *piece = malloc(PIECE);
    if (!piece) return error_set(err, "out of memory");
    if (zip_source_open(memory) != 0) {
        free(piece);
        return error_set(err, "zip: reading the archive back failed");
    }
    zip_int64_t got;
    int status = 0;
    while (status == 0 && (got = zip_source_read(memory, piece, PIECE)) > 0)
        if (fwrite(piece, 1, (size_t)got, file) != (size_t)got)
            status = error_set(err, "%s", strerror(errno));
    if (status == 0 && got < 0) status = error_set(err, "zip: reading the archive back failed");
    zip_source_close(memory);
    free(piece);
    return status;
}

int pt_writer_save(PtWriter *w, const char *path, const char *archive, ErrorMessage *err) {
    op(w, '.');  // STOP
    if (w->failed) return error_set(err, "%s: out of memory writing the pickle", path);
    zip_source_t *memory = NULL;
    if (build_zip(w, archive, &memory, err) != 0) return error_prefix(err, "%s", path);
    const int status = file_write_atomic_produced(path, copy_archive, memory, err);
    zip_source_free(memory);
    return status;
}

int pt_writer_save_as_file(PtWriter *w, const char *path, ErrorMessage *err) {
    // torch.save names the archive's folder after the file; torch.load reads any.
    const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path;
    const char *dot = strrchr(name, '.');
    char archive[128];
    snprintf(archive, sizeof archive, "%.*s",
             (int)(dot && dot > name ? (size_t)(dot - name) : strlen(name)), name);
    return pt_writer_save(w, path, archive[0] ? archive : "archive", err);
}

int pt_state_dict_write(const char *path, const SafeTensorWrite *tensors, int count,
                        const SafeMetadata *metadata, int metadata_count, ErrorMessage *err) {
    (void)metadata, (void)metadata_count;
    PtWriter w;
    pt_writer_init(&w);
    pt_ordered_dict_begin(&w);
    for (int i = 0; i < count; i++) {
        pt_put_str(&w, tensors[i].name);
        pt_put_tensor_borrowed(&w, tensors[i].dtype, tensors[i].data, tensors[i].rank,
                               tensors[i].shape);
    }
    pt_dict_end(&w);
    const int status = pt_writer_save_as_file(&w, path, err);
    pt_writer_free(&w);
    return status;
}
