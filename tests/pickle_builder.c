// Hand-made PyTorch state dict files (see pickle_builder.h).
#include "pickle_builder.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define ZERO_BLOCK (1u << 20)

const PickleTensor PICKLE_GOOD = {"w", 6, 0, 2, {2, 3}, {3, 1}};

void pickle_put(PickleBytes *b, const void *bytes, size_t n) {
    assert_true(b->size + n <= sizeof b->data);
    memcpy(b->data + b->size, bytes, n);
    b->size += n;
}

void pickle_op(PickleBytes *b, uint8_t code) { pickle_put(b, &code, 1); }

void pickle_str(PickleBytes *b, const char *text) {
    const uint32_t length = (uint32_t)strlen(text);
    pickle_op(b, 'X');
    pickle_put(b, &length, 4);
    pickle_put(b, text, length);
}

void pickle_int(PickleBytes *b, int64_t value) {
    if (value >= 0 && value < 256) {
        pickle_op(b, 'K');
        pickle_op(b, (uint8_t)value);
    } else {
        pickle_op(b, 0x8a);  // LONG1, 8 bytes
        pickle_op(b, 8);
        pickle_put(b, &value, 8);
    }
}

void pickle_global(PickleBytes *b, const char *module, const char *name) {
    pickle_op(b, 'c');
    pickle_put(b, module, strlen(module));
    pickle_op(b, '\n');
    pickle_put(b, name, strlen(name));
    pickle_op(b, '\n');
}

void pickle_tensor(PickleBytes *b, const PickleTensor *t) {
    pickle_global(b, "torch._utils", "_rebuild_tensor_v2");
    PICKLE_OPS(b, "((");
    pickle_str(b, "storage");
    pickle_global(b, "torch", "FloatStorage");
    pickle_str(b, "0");
    pickle_str(b, "cpu");
    pickle_int(b, t->numel);
    PICKLE_OPS(b, "tQ");
    pickle_int(b, t->offset);
    pickle_op(b, '(');
    for (int d = 0; d < t->rank; d++) pickle_int(b, t->shape[d]);
    PICKLE_OPS(b, "t(");
    for (int d = 0; d < t->rank; d++) pickle_int(b, t->stride[d]);
    PICKLE_OPS(b, "t\x89");
    pickle_global(b, "collections", "OrderedDict");
    PICKLE_OPS(b, ")RtR");
}

void pickle_tensor_entry(PickleBytes *b, const PickleTensor *t) {
    pickle_str(b, t->key);
    pickle_tensor(b, t);
}

void pickle_state_dict(PickleBytes *b, const PickleTensor *t) {
    PICKLE_OPS(b, "\x80\x02}(");
    pickle_tensor_entry(b, t);
    PICKLE_OPS(b, "u.");
}

uint8_t *pickle_legacy_file(const PickleBytes *object, int64_t numel, size_t *size) {
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

// ---- the zip of zeros -------------------------------------------------------------------

static void put_u16(uint8_t *p, uint32_t value) {
    p[0] = (uint8_t)value;
    p[1] = (uint8_t)(value >> 8);
}

static void put_u32(uint8_t *p, uint32_t value) {
    put_u16(p, value & 0xffff);
    put_u16(p + 2, value >> 16);
}

typedef struct ZipMember {
    const char *name;
    uint32_t method, crc, compressed, size, offset;
} ZipMember;

// The local header (30 bytes + name) or the central one (46 + name).
static size_t zip_header(uint8_t *out, const ZipMember *m, int central) {
    const size_t length = strlen(m->name), at = central ? 46 : 30;
    memset(out, 0, at);
    put_u32(out, central ? 0x02014b50 : 0x04034b50);
    uint8_t *p = out + (central ? 6 : 4);
    if (central) put_u16(out + 4, 20);
    put_u16(p, 20);              // version needed
    put_u16(p + 4, m->method);   // after the flags
    put_u32(p + 10, m->crc);     // after time and date
    put_u32(p + 14, m->compressed);
    put_u32(p + 18, m->size);
    put_u16(p + 22, (uint32_t)length);
    if (central) put_u32(out + 42, m->offset);
    memcpy(out + at, m->name, length);
    return at + length;
}

// One full-flush deflate of ZERO_BLOCK zeros: byte-aligned, referring to
// nothing before it, so copies of it in a row inflate to that many blocks.
static uint8_t *deflate_zero_block(size_t *size) {
    uint8_t *zeros = calloc(1, ZERO_BLOCK), *out = malloc(ZERO_BLOCK);
    assert_true(zeros && out);
    z_stream stream = {0};
    assert_int_equal(deflateInit2(&stream, 9, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY), Z_OK);
    stream.next_in = zeros;
    stream.avail_in = ZERO_BLOCK;
    stream.next_out = out;
    stream.avail_out = ZERO_BLOCK;
    assert_int_equal(deflate(&stream, Z_FULL_FLUSH), Z_OK);
    assert_int_equal(stream.avail_in, 0);
    *size = ZERO_BLOCK - stream.avail_out;
    deflateEnd(&stream);
    free(zeros);
    return out;
}

size_t pickle_write_zeros_zip(const char *path, const PickleBytes *pickle, uint64_t zero_bytes) {
    assert_true(zero_bytes % ZERO_BLOCK == 0 && zero_bytes < (1ull << 32));
    const uint64_t blocks = zero_bytes / ZERO_BLOCK;
    size_t block_size = 0;
    uint8_t *block = deflate_zero_block(&block_size);
    static const uint8_t final_block[2] = {0x03, 0x00};  // an empty fixed block, BFINAL
    uLong block_crc = crc32(0, Z_NULL, 0), crc = crc32(0, Z_NULL, 0);
    for (uint32_t i = 0; i < ZERO_BLOCK / 4096; i++) {
        static const uint8_t page[4096];
        block_crc = crc32(block_crc, page, sizeof page);
    }
    for (uint64_t i = 0; i < blocks; i++) crc = crc32_combine(crc, block_crc, ZERO_BLOCK);
    ZipMember members[2] = {
        {"a/data.pkl", 0, (uint32_t)crc32(0, pickle->data, (uInt)pickle->size),
         (uint32_t)pickle->size, (uint32_t)pickle->size, 0},
        {"a/data/0", 8, (uint32_t)crc, (uint32_t)(blocks * block_size + sizeof final_block),
         (uint32_t)zero_bytes, 0},
    };
    FILE *file = fopen(path, "wb");
    assert_non_null(file);
    uint8_t header[128];
    size_t written = 0;
    for (int m = 0; m < 2; m++) {
        members[m].offset = (uint32_t)written;
        const size_t length = zip_header(header, &members[m], 0);
        assert_int_equal(fwrite(header, 1, length, file), length);
        written += length;
        if (m == 0) {
            assert_int_equal(fwrite(pickle->data, 1, pickle->size, file), pickle->size);
            written += pickle->size;
            continue;
        }
        for (uint64_t i = 0; i < blocks; i++)
            assert_int_equal(fwrite(block, 1, block_size, file), block_size);
        assert_int_equal(fwrite(final_block, 1, sizeof final_block, file), sizeof final_block);
        written += members[1].compressed;
    }
    const size_t directory = written;
    for (int m = 0; m < 2; m++) {
        const size_t length = zip_header(header, &members[m], 1);
        assert_int_equal(fwrite(header, 1, length, file), length);
        written += length;
    }
    uint8_t end[22] = {0};
    put_u32(end, 0x06054b50);
    put_u16(end + 8, 2);
    put_u16(end + 10, 2);
    put_u32(end + 12, (uint32_t)(written - directory));
    put_u32(end + 16, (uint32_t)directory);
    assert_int_equal(fwrite(end, 1, sizeof end, file), sizeof end);
    assert_int_equal(fclose(file), 0);
    free(block);
    return written + sizeof end;
}
