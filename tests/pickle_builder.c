// Test helper: pickles written opcode by opcode (pickle_builder.h).
#include "pickle_builder.h"

#include <stdlib.h>
#include <string.h>

void put(Bytes *b, const void *bytes, size_t n) {
    if (b->size + n > sizeof b->data) abort();  // a test's pickle outgrew the buffer
    memcpy(b->data + b->size, bytes, n);
    b->size += n;
}

void op(Bytes *b, uint8_t code) { put(b, &code, 1); }

void put_str(Bytes *b, const char *text) {
    const uint32_t length = (uint32_t)strlen(text);
    op(b, 'X');
    put(b, &length, 4);
    put(b, text, length);
}

void put_int(Bytes *b, int64_t value) {
    if (value >= 0 && value < 256) {
        op(b, 'K');
        op(b, (uint8_t)value);
    } else {
        op(b, 0x8a);  // LONG1, 8 bytes
        op(b, 8);
        put(b, &value, 8);
    }
}

void put_global(Bytes *b, const char *module, const char *name) {
    op(b, 'c');
    put(b, module, strlen(module));
    op(b, '\n');
    put(b, name, strlen(name));
    op(b, '\n');
}

void put_tensor(Bytes *b, const TensorSpec *t) {
    put_global(b, "torch._utils", "_rebuild_tensor_v2");
    OPS(b, "((");
    put_str(b, "storage");
    put_global(b, "torch", "FloatStorage");
    put_str(b, "0");
    put_str(b, "cpu");
    put_int(b, t->numel);
    OPS(b, "tQ");
    put_int(b, t->offset);
    op(b, '(');
    for (int d = 0; d < t->rank; d++) put_int(b, t->shape[d]);
    OPS(b, "t(");
    for (int d = 0; d < t->rank; d++) put_int(b, t->stride[d]);
    OPS(b, "t\x89");
    put_global(b, "collections", "OrderedDict");
    OPS(b, ")RtR");
}

void put_tensor_entry(Bytes *b, const TensorSpec *t) {
    put_str(b, t->key);
    put_tensor(b, t);
}

void put_state_dict(Bytes *b, const TensorSpec *t) {
    OPS(b, "\x80\x02}(");
    put_tensor_entry(b, t);
    OPS(b, "u.");
}

uint8_t *legacy_file(const Bytes *object, int64_t numel, size_t *size) {
    static const uint8_t head[] = {
        0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, 0x2e,
        0x80, 0x02, 'M', 0xe9, 0x03, '.',  // 1001
        0x80, 0x02, '}', 'X', 13, 0, 0, 0, 'l', 'i', 't', 't', 'l', 'e', '_', 'e', 'n', 'd',
        'i', 'a', 'n', 0x88, 's', '.'};
    static const uint8_t keys[] = {0x80, 0x02, ']', '(', 'X', 1, 0, 0, 0, '0', 'e', '.'};
    const size_t data = (size_t)numel * sizeof(float);
    *size = sizeof head + object->size + sizeof keys + 8 + data;
    uint8_t *file = calloc(1, *size), *p = file;
    memcpy(p, head, sizeof head);
    memcpy(p += sizeof head, object->data, object->size);
    memcpy(p += object->size, keys, sizeof keys);
    memcpy(p += sizeof keys, &numel, 8);
    for (int64_t i = 0; i < numel; i++) {
        const float value = (float)i;
        memcpy(p + 8 + (size_t)i * 4, &value, 4);
    }
    return file;
}
