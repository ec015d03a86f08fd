// Hand-made PyTorch state dict files for the tests of the .pt reader
// (src/weights/pt_reader.h): pickles written opcode by opcode, as torch.save
// writes them, and a zip archive whose storage entry is a deflated run of
// zeros (made in milliseconds by repeating one full-flush deflate block, so a
// 1 GiB storage costs a 1 MB file and no 1 GiB of memory to write).
#ifndef LTC_TESTS_PICKLE_BUILDER_H
#define LTC_TESTS_PICKLE_BUILDER_H

#include <stddef.h>
#include <stdint.h>

typedef struct PickleBytes {
    uint8_t data[4096];
    size_t size;
} PickleBytes;

void pickle_put(PickleBytes *b, const void *bytes, size_t n);  // fails the test when full
void pickle_op(PickleBytes *b, uint8_t code);
// Opcodes without operands, as a string literal.
#define PICKLE_OPS(b, codes) pickle_put(b, codes, sizeof codes - 1)
void pickle_str(PickleBytes *b, const char *text);       // BINUNICODE
void pickle_int(PickleBytes *b, int64_t value);          // BININT1 or LONG1 of 8 bytes
void pickle_global(PickleBytes *b, const char *module, const char *name);  // GLOBAL

typedef struct PickleTensor {
    const char *key;
    int64_t numel;  // of storage "0", F32
    int64_t offset;
    int rank;
    int64_t shape[3], stride[3];
} PickleTensor;

// _rebuild_tensor_v2((persistent id of storage "0"), offset, shape,
// stride, False, OrderedDict()), as torch.save writes a tensor.
void pickle_tensor(PickleBytes *b, const PickleTensor *t);
// key: that tensor (a dict entry).
void pickle_tensor_entry(PickleBytes *b, const PickleTensor *t);
// {key: tensor} in protocol 2.
void pickle_state_dict(PickleBytes *b, const PickleTensor *t);

// A legacy-format file around `object` (malloc'ed, *size bytes): magic,
// protocol, sys_info, object, keys ["0"], then storage "0" as an int64
// count and `numel` floats 0, 1, 2, ...
uint8_t *pickle_legacy_file(const PickleBytes *object, int64_t numel, size_t *size);

// A 2x3 F32 tensor "w" that is the whole of its storage.
extern const PickleTensor PICKLE_GOOD;

// Writes a zip archive at path: "a/data.pkl" (stored) holding `pickle`, and
// "a/data/0" deflated, `zero_bytes` zeros (a multiple of 1 MiB) with their
// CRC-32. Returns the file's size.
size_t pickle_write_zeros_zip(const char *path, const PickleBytes *pickle, uint64_t zero_bytes);

#endif
