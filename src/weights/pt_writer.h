// Writing PyTorch's torch.save format from C: a pickle (protocol 2, the
// opcodes torch.save emits) built value by value, tensors as persistent-id
// storages, and the zip torch.load reads:
//   <archive>/data.pkl       the pickle
//   <archive>/data/<k>       storage k's raw little-endian bytes (k = 0, 1, ...)
//   <archive>/byteorder      "little"
//   <archive>/version        "3" (the format version torch.save writes)
// Entries stored uncompressed (libzip), the whole file written atomically
// (util/file.h), streamed from libzip's archive in memory: the data is held
// once more while the file is written. What is pickled is the caller's: a
// state dict (pt_state_dict_write), a dict of embeddings, or a whole module
// tree (weights/ultralytics_export.c), each object a GLOBAL class made by
// NEWOBJ and given its __dict__ by BUILD, as pickle does for objects.
//
// Why our own: PyTorch's writer is Python; the pickle opcodes are specified
// by CPython's Lib/pickletools.py, the container by torch/serialization.py.
#ifndef LTC_WEIGHTS_PT_WRITER_H
#define LTC_WEIGHTS_PT_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "nn/safetensors.h"
#include "util/error.h"

typedef struct PtWriterStorage {
    const uint8_t *bytes;  // owned, or the caller's (pt_put_tensor_borrowed)
    uint8_t *owned;        // the copy to free, or NULL
    size_t size;
    SafeDType dtype;
} PtWriterStorage;

typedef struct PtWriter {
    uint8_t *pickle;
    size_t size, capacity;
    PtWriterStorage *storages;
    int storage_count, storage_capacity;
    int failed;  // out of memory at some point: pt_writer_save refuses
    int memo_count;
} PtWriter;

void pt_writer_init(PtWriter *w);  // starts the pickle (PROTO 2)
void pt_writer_free(PtWriter *w);

// Values (each pushes one value).
void pt_put_none(PtWriter *w);
void pt_put_bool(PtWriter *w, int value);
void pt_put_int(PtWriter *w, int64_t value);
void pt_put_float(PtWriter *w, double value);
void pt_put_str(PtWriter *w, const char *text);
void pt_put_global(PtWriter *w, const char *module, const char *name);
// A tuple of the values pushed since pt_mark.
void pt_mark(PtWriter *w);
void pt_tuple_end(PtWriter *w);
void pt_put_int_tuple(PtWriter *w, const int64_t *values, int count);
// A list / dict of the values (key, value, key, value, ...) pushed between begin and end.
void pt_list_begin(PtWriter *w);
void pt_list_end(PtWriter *w);
void pt_dict_begin(PtWriter *w);
void pt_dict_end(PtWriter *w);
// collections.OrderedDict(), then its items as a dict's.
void pt_ordered_dict_begin(PtWriter *w);
// An object of class module.name: NEWOBJ, then its __dict__'s items
// (key, value, ...) until pt_object_end (BUILD).
void pt_object_begin(PtWriter *w, const char *module, const char *name);
void pt_object_end(PtWriter *w);
// The value just pushed into the memo; returns its index for pt_memo_get,
// which pushes that same object again (pickle's sharing: one object
// referenced twice, as Ultralytics' Conv.default_act is by every Conv).
int pt_memo_put(PtWriter *w);
void pt_memo_get(PtWriter *w, int index);
// A tensor of `data` (copied into a new storage), row-major: as torch.save
// writes a tensor (_rebuild_tensor_v2), or with parameter a
// torch.nn.Parameter (_rebuild_parameter) with requires_grad.
void pt_put_tensor(PtWriter *w, SafeDType dtype, const void *data, int rank,
                   const int64_t *shape, int parameter, int requires_grad);
// The same tensor without the copy: data must stay as it is until
// pt_writer_save has written the file (for data as large as the memory
// allows: embeddings).
void pt_put_tensor_borrowed(PtWriter *w, SafeDType dtype, const void *data, int rank,
                            const int64_t *shape);

// A torch.nn.Parameter (requires_grad) of data without the copy, as
// pt_put_tensor_borrowed.
void pt_put_parameter_borrowed(PtWriter *w, SafeDType dtype, const void *data, int rank,
                               const int64_t *shape);

// Ends the pickle (STOP) and writes the file at path atomically; archive
// names the zip's folder ("exported_last"). -1 with err.
int pt_writer_save(PtWriter *w, const char *path, const char *archive, ErrorMessage *err);
// pt_writer_save with the folder named as torch.save names it: after the
// file, without its extension.
int pt_writer_save_as_file(PtWriter *w, const char *path, ErrorMessage *err);

// torch.save(state_dict) of these tensors: an OrderedDict of name -> tensor
// in the given order, the tensors' bytes written from where they are. The
// metadata has no place in a state dict and is dropped. A StateDictWrite
// (nn/safetensors.h): backbone_save_as(model, "x.pt", pt_state_dict_write, err).
int pt_state_dict_write(const char *path, const SafeTensorWrite *tensors, int count,
                        const SafeMetadata *metadata, int metadata_count, ErrorMessage *err);

#endif
