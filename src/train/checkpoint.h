// Training checkpoints (.ckpt): everything a run needs to resume (model
// tables, optimizer state, counters, RNG/loader state as bytes) and what
// `export` / `embed` read a backbone from.
//
// Layout (little endian):
//   bytes 0..7    magic "LTCCKPT\0"
//   bytes 8..11   u32 format version (CHECKPOINT_FORMAT_VERSION)
//   bytes 12..15  version 2: u32 CRC-32 (util/data_crc32.h) of the blob's
//                 header, its u64 length and JSON: the tensor table and all
//                 metadata (the data's own CRC-32 among it), so that together
//                 every byte after these 16 is covered; version 1: u32 flags,
//                 0 (no flag was defined): read without a header check
//   bytes 16..    exactly one safetensors blob (nn/safetensors.h), read by the
//                 hardened safetensors parser: names, dtypes, shapes, offsets
//                 and string metadata are all checked there.
// Tensors are written ordered by alignment (I64, then F32, then U8), so each
// lies on a boundary of its dtype once parsed; readers still memcpy.
//
// Naming conventions (tensor names = prefix + name):
//   "backbone."            the student backbone, torchvision names and layout
//                          (conv weights OIHW), F32, with BN running stats and
//                          one I64 "X.num_batches_tracked" per BN
//   "teacher_backbone."    an EMA or frozen teacher backbone (BYOL, DINO,
//                          distillation), same form
//   "<group>."             other trainable tables, e.g. "projection_head."
//   "teacher_<head>."      teacher heads, e.g. "teacher_projection_head."
//   "optimizer.<group>.<slab index>."  optimizer state slabs, one F32 tensor
//                          per parameter in OUR layout (they only come back
//                          into this program)
// String metadata keys:
//   "format"       "lightly-train-c checkpoint" (CHECKPOINT_FORMAT_NAME; set by
//                  checkpoint_writer_create)
//   "model"        e.g. "resnet18"
//   "method"       e.g. "dino"
//   "export_part"  "teacher_backbone" or "backbone": the backbone `export` and
//                  `embed` use by default (the teacher for DINO)
//   "lightly-train-c.data_crc32"  the CRC-32 of the blob's data section
//                  (SAFETENSORS_CRC32_KEY; set by the safetensors writer and
//                  verified by its parser: nn/safetensors.h)
//   ... and others the training loop adds.
//
// Atomicity: checkpoint_write writes a temporary file in the same folder,
// fflush + fsync, renames it over the path and fsyncs the folder
// (file_write_atomic): a crash or a failed write (disk full, unwritable
// folder) never leaves a half file under the real name, and an existing
// checkpoint stays intact.
//
// The writer copies every tensor into host memory when it is added (from
// backend memory where the argument says so), so the model may keep training
// while the file is written.
#ifndef LTC_TRAIN_CHECKPOINT_H
#define LTC_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "nn/parameters.h"
#include "nn/safetensors.h"
#include "util/error.h"
#include "weights/weight_file.h"

#define CHECKPOINT_MAGIC "LTCCKPT"  // 7 characters + the terminating 0 = 8 bytes
#define CHECKPOINT_HEADER_SIZE 16
#define CHECKPOINT_FORMAT_VERSION 2
#define CHECKPOINT_FORMAT_NAME "lightly-train-c checkpoint"

// ---- writing ------------------------------------------------------------------------

typedef struct CheckpointWriter CheckpointWriter;

// NULL on OOM. Metadata "format" is set already.
CheckpointWriter *checkpoint_writer_create(void);
void checkpoint_writer_free(CheckpointWriter *writer);

// Every tensor of the tables as prefix + name: values downloaded from backend
// memory, converted to torch layout (weights_to_torch_layout), F32; with
// buffers (may be NULL) also the running stats and one I64 scalar
// "X.num_batches_tracked" = num_batches_tracked per BN "X" (the keys
// weights_save writes).
int checkpoint_add_parameters(CheckpointWriter *w, const char *prefix, const ParameterSet *params,
                              const ParameterSet *buffers, int64_t num_batches_tracked,
                              ErrorMessage *err);
// A gradient-shaped optimizer state slab (backend memory, params->total
// floats): one F32 tensor per parameter, prefix + name, our layout and shape,
// data = slab + param.offset.
int checkpoint_add_state_slab(CheckpointWriter *w, const char *prefix, const ParameterSet *params,
                              Backend *backend, const float *slab, ErrorMessage *err);
// F32 1-d tensor (count) from backend memory.
int checkpoint_add_floats(CheckpointWriter *w, const char *name, Backend *backend,
                          const float *device_data, size_t count, ErrorMessage *err);
// F32 1-d tensor (count) from host memory.
int checkpoint_add_host_floats(CheckpointWriter *w, const char *name, const float *data,
                               size_t count, ErrorMessage *err);
// Any tensor, copied from host memory as it is (e.g. from another file).
int checkpoint_add_tensor(CheckpointWriter *w, const char *name, SafeDType dtype, int rank,
                          const int64_t *shape, const void *data, ErrorMessage *err);
// I64 scalar.
int checkpoint_add_i64(CheckpointWriter *w, const char *name, int64_t value, ErrorMessage *err);
// U8 1-d tensor (size) of opaque bytes (e.g. RNG or loader state).
int checkpoint_add_bytes(CheckpointWriter *w, const char *name, const void *data, size_t size,
                         ErrorMessage *err);
// String metadata; replaces the value of an existing key.
int checkpoint_set_meta(CheckpointWriter *w, const char *key, const char *value,
                        ErrorMessage *err);
// Writes the file atomically (see above). Names must be unique (checked
// here: the message names the duplicate). The writer stays usable.
int checkpoint_write(CheckpointWriter *w, const char *path, ErrorMessage *err);

// ---- reading ------------------------------------------------------------------------

typedef struct Checkpoint {
    SafeTensors tensors;
    int version;
} Checkpoint;

// Reads and checks a file; errors name the path. A newer format version
// fails with "checkpoint format version N is newer than this program
// supports (2)"; a header (tensor table, metadata) that does not match the
// CRC-32 recorded beside the version with "the checkpoint header is damaged
// (CRC-32 ... recorded, ... read) ..."; data that does not match its recorded
// CRC-32 with "the tensor data is damaged (CRC-32 ... recorded, ... read)
// ...". Version 1 files (no header CRC-32) are read as before.
int checkpoint_read(const char *path, Checkpoint *ckpt, ErrorMessage *err);
// The same on a whole file in memory; takes ownership of `bytes` (malloc'ed)
// on success and on failure, like safetensors_parse.
int checkpoint_parse(uint8_t *bytes, size_t size, Checkpoint *ckpt, ErrorMessage *err);
void checkpoint_free(Checkpoint *ckpt);
// What a file to load weights from is, from one read of its first bytes:
// *is_checkpoint = 1 when it starts with the magic, else *kind says which
// state dict it is (weights/weight_file.h). -1 with err naming the path when it
// is unreadable or not a regular file, or when its name ends in ".ckpt" and
// it is neither a checkpoint nor a safetensors or PyTorch file (a damaged or
// foreign checkpoint, which the safetensors parser would only describe as a
// bad header). A state dict named .ckpt is read like any other (files are
// told by content). Pass kind to weight_file_read_weights_as.
int checkpoint_sniff(const char *path, int *is_checkpoint, WeightFileKind *kind,
                     ErrorMessage *err);
// 1 when the file starts with the magic; 0 otherwise (also when unreadable).
int checkpoint_is_checkpoint_file(const char *path);
// String metadata; NULL when absent.
const char *checkpoint_meta(const Checkpoint *ckpt, const char *key);
// 1 when some tensor name starts with prefix.
int checkpoint_has_prefix(const Checkpoint *ckpt, const char *prefix);

// Loads the prefix + name tensors into the tables (weights_load_from with
// key_prefix = prefix, strict: every table entry must be there, no unknown
// key under the prefix; keys of other prefixes are ignored). The message
// names missing tensors. buffers and num_batches_tracked may be NULL.
int checkpoint_load_parameters(const Checkpoint *ckpt, const char *prefix, ParameterSet *params,
                               ParameterSet *buffers, int64_t *num_batches_tracked,
                               ErrorMessage *err);
// Fills slab (backend memory, params->total floats) at each param.offset from
// the prefix + name tensors written by checkpoint_add_state_slab; strict as above.
int checkpoint_load_state_slab(const Checkpoint *ckpt, const char *prefix,
                               const ParameterSet *params, Backend *backend, float *slab,
                               ErrorMessage *err);
// F32 tensor of exactly count elements into backend / host memory.
int checkpoint_get_floats(const Checkpoint *ckpt, const char *name, Backend *backend,
                          float *device_data, size_t count, ErrorMessage *err);
int checkpoint_get_host_floats(const Checkpoint *ckpt, const char *name, float *data,
                               size_t count, ErrorMessage *err);
// I64 scalar.
int checkpoint_get_i64(const Checkpoint *ckpt, const char *name, int64_t *value,
                       ErrorMessage *err);
// A U8 tensor's bytes and size (a pointer into the checkpoint, valid until
// checkpoint_free); an error when missing.
int checkpoint_get_bytes(const Checkpoint *ckpt, const char *name, const uint8_t **data,
                         size_t *size, ErrorMessage *err);

#endif
