// Test helper: pickles written opcode by opcode (protocol 2, as torch.save
// writes them) for the restricted reader's tests (tests/test_pt_reader.c,
// tests/test_pt_modules.c): strings, ints, globals, tensors of storage "0",
// a state dict, and a legacy-format file around a pickle. Links without
// cmocka: an overflowing buffer aborts.
#ifndef LTC_TESTS_PICKLE_BUILDER_H
#define LTC_TESTS_PICKLE_BUILDER_H

#include <stddef.h>
#include <stdint.h>

typedef struct Bytes {
    uint8_t data[8192];
    size_t size;
} Bytes;

void put(Bytes *b, const void *bytes, size_t n);
void op(Bytes *b, uint8_t code);
// Opcodes without operands, as a string literal.
#define OPS(b, codes) put(b, codes, sizeof codes - 1)
void put_str(Bytes *b, const char *text);
void put_int(Bytes *b, int64_t value);
void put_global(Bytes *b, const char *module, const char *name);

typedef struct TensorSpec {
    const char *key;
    int64_t numel;  // of storage "0", F32
    int64_t offset;
    int rank;
    int64_t shape[3], stride[3];
} TensorSpec;

// The tensor alone: _rebuild_tensor_v2((persistent id of storage "0"),
// offset, shape, stride, False, OrderedDict()), as torch.save writes it.
void put_tensor(Bytes *b, const TensorSpec *t);
// key: the tensor (a dict entry).
void put_tensor_entry(Bytes *b, const TensorSpec *t);
// {key: tensor} in protocol 2.
void put_state_dict(Bytes *b, const TensorSpec *t);
// A legacy-format file around `object`: magic, protocol, sys_info, object,
// keys ["0"], then storage "0" as an int64 count and `numel` floats i = 0,
// 1, ... (malloc'ed, *size bytes).
uint8_t *legacy_file(const Bytes *object, int64_t numel, size_t *size);

#endif
