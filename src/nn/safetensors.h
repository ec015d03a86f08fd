// safetensors files: the weight interchange format of PyTorch, torchvision
// and timm (format: ../shared/reference/formats.md).
//
//   u64 N (LE) | N bytes of JSON header | data
//
// The reader treats every file as hostile: header size limit, JSON parsed
// with bounds checks, names/dtypes/shapes validated, data offsets checked
// against the file size and against the shape (contiguous from 0, no gaps,
// no overlaps, covering the data exactly). The writer writes to a temporary
// name, flushes and renames, so a crash never leaves a half file.
//
// Integrity: the writer records the CRC-32 of the data section (every byte
// after the header) in __metadata__ under SAFETENSORS_CRC32_KEY, and the
// parser verifies it where the key is present, so flipped or zeroed bytes in
// a file of ours are refused instead of trained on. Files without the key
// (PyTorch's, timm's, ours from before it) load as before.
#ifndef LTC_NN_SAFETENSORS_H
#define LTC_NN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

#define SAFETENSORS_MAX_HEADER 100000000ull  // what the reference readers accept
#define SAFETENSORS_MAX_RANK 8
#define SAFETENSORS_MAX_NAME 512
// Bounds the memory a hostile header can make the reader allocate (a
// SafeTensor is ~600 bytes); real checkpoints hold at most a few thousand.
#define SAFETENSORS_MAX_TENSORS 262144

// 8 lowercase hex digits: zlib's crc32 (the CRC-32 of zip, gzip and PNG,
// which torch.save's zip files carry too) of the data section.
#define SAFETENSORS_CRC32_KEY "lightly-train-c.data_crc32"
// What safetensors_parse returns when the data does not match the recorded
// CRC-32 or the recorded value is not 8 hex digits (-1: any other error).
#define SAFETENSORS_DAMAGED (-2)

typedef enum SafeDType {
    SAFE_F32 = 0,
    SAFE_F16,
    SAFE_BF16,
    SAFE_F64,
    SAFE_I64,
    SAFE_I32,
    SAFE_I16,
    SAFE_I8,
    SAFE_U8,
    SAFE_BOOL,
} SafeDType;

const char *safe_dtype_name(SafeDType dtype);  // "F32", ...
size_t safe_dtype_size(SafeDType dtype);       // bytes per element

typedef struct SafeTensor {
    char name[SAFETENSORS_MAX_NAME];
    SafeDType dtype;
    int rank;                              // 0 for a scalar
    int64_t shape[SAFETENSORS_MAX_RANK];
    size_t offset;                         // into SafeTensors.data
    size_t size;                           // bytes = elements * dtype size
} SafeTensor;

typedef struct SafeMetadata {
    char *key;
    char *value;
} SafeMetadata;

typedef struct SafeTensors {
    uint8_t *file;        // the whole file (owned)
    size_t file_size;
    // Start of the data section, 8-byte aligned (to get there the reader may
    // move the data over the header bytes in `file`). A tensor is aligned to
    // its dtype when the writer ordered tensors by alignment (the reference
    // writer does; safetensors_write keeps the caller's order): memcpy when
    // unsure.
    const uint8_t *data;
    int count;
    SafeTensor *tensors;  // in header order
    int metadata_count;
    SafeMetadata *metadata;
} SafeTensors;

// Parses a whole file held in memory; takes ownership of `bytes` (malloc'ed)
// on success and on failure. Verifies the recorded CRC-32, if any: then
// SAFETENSORS_DAMAGED with a message that says so.
int safetensors_parse(uint8_t *bytes, size_t size, SafeTensors *out, ErrorMessage *err);
// The same for a blob that starts at byte `offset` of bytes, after a header
// of another format (checkpoints): parsed in place. With offset a multiple
// of 8, tensors stay aligned as safetensors_parse hands them out.
int safetensors_parse_at(uint8_t *bytes, size_t size, size_t offset, SafeTensors *out,
                         ErrorMessage *err);
// Reads and parses a safetensors file; errors name the path. Any kind of
// weight file (PyTorch's too): weights/weight_file.h.
int safetensors_read(const char *path, SafeTensors *out, ErrorMessage *err);
// Every F64 tensor becomes F32 in place (its first half of bytes; size
// halved), rounded to nearest: the weights' consumers take F32, F16 and
// BF16, and a double checkpoint's values are float ones widened. Out of F32
// range values become inf (then refused as non-finite where loaded). Test
// fixtures keep their F64 (safetensors_read).
void safetensors_narrow_f64(SafeTensors *tensors);
// safetensors_read for a model's weights: safetensors_narrow_f64 after.
int safetensors_read_weights(const char *path, SafeTensors *out, ErrorMessage *err);
void safetensors_free(SafeTensors *tensors);

const SafeTensor *safetensors_find(const SafeTensors *tensors, const char *name);
static inline const void *safetensors_data(const SafeTensors *tensors, const SafeTensor *tensor) {
    return tensors->data + tensor->offset;
}
// NULL when absent.
const char *safetensors_metadata(const SafeTensors *tensors, const char *key);
// Number of elements (product of the shape; 1 for a scalar).
int64_t safe_tensor_elements(const SafeTensor *tensor);


// One tensor to write: name, dtype, shape and its bytes (host memory).
typedef struct SafeTensorWrite {
    const char *name;
    SafeDType dtype;
    int rank;
    int64_t shape[SAFETENSORS_MAX_RANK];
    const void *data;
} SafeTensorWrite;

// Writes path atomically (path.tmp.<pid>, fsync, rename). Tensors are
// written in the given order; metadata may be NULL. The CRC-32 of the data
// is added to the metadata as SAFETENSORS_CRC32_KEY (replacing a value the
// caller passes under that key, e.g. one copied from another file).
int safetensors_write(const char *path, const SafeTensorWrite *tensors, int count,
                      const SafeMetadata *metadata, int metadata_count, ErrorMessage *err);
// A writer of a state dict with safetensors_write's arguments: the models'
// save functions take one (NULL: safetensors_write), so that a caller above
// nn/ can write the same tensors in another container (weights/pt_writer.h:
// a torch state dict, which keeps no metadata).
typedef int (*StateDictWrite)(const char *path, const SafeTensorWrite *tensors, int count,
                              const SafeMetadata *metadata, int metadata_count,
                              ErrorMessage *err);
// The bytes a file with these tensors starts with: the u64 header length and
// the JSON header padded to 8 bytes (*header malloc'ed, *header_size bytes),
// after the checks safetensors_write makes, with the CRC-32 of the tensors'
// bytes in its metadata; the tensors' bytes follow it in the given order.
// For formats that embed a safetensors blob (checkpoints).
int safetensors_encode_header(const SafeTensorWrite *tensors, int count,
                              const SafeMetadata *metadata, int metadata_count, uint8_t **header,
                              size_t *header_size, ErrorMessage *err);

#endif
