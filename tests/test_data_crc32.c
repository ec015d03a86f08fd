// The CRC-32 of the data section that our safetensors files and checkpoints
// record (nn/safetensors.h, SAFETENSORS_CRC32_KEY): the value written is the
// CRC-32 of the data computed here bit by bit (not with zlib), a changed
// data byte or a changed recorded value is refused naming the file, a file
// without the key loads as before, and a value copied from another file is
// replaced by the writer's own. The parallel CRC-32 (util/data_crc32.h)
// over pieces of several blocks equals the CRC-32 of their concatenation.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image_fixtures.h"
#include "safetensors_edit.h"
#include "nn/safetensors.h"
#include "train/checkpoint.h"
#include "util/cpu.h"
#include "util/data_crc32.h"
#include "util/file.h"

#define ASSERT_OK(call, err)                                   \
    do {                                                       \
        if ((call) != 0) fail_msg("%s: %s", #call, (err).text); \
    } while (0)

// The CRC-32 of zip, gzip and PNG (reflected polynomial 0xedb88320), one
// bit at a time: the reference the writer's zlib value is checked against.
static uint32_t crc32_bitwise(const uint8_t *bytes, size_t size) {
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < size; i++) {
        crc ^= bytes[i];
        for (int bit = 0; bit < 8; bit++) crc = crc >> 1 ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

// Where the 8 hex digits of the recorded value start in the header.
static size_t recorded_value_offset(const uint8_t *bytes, size_t data) {
    static const char key[] = "\"" SAFETENSORS_CRC32_KEY "\":\"";
    const uint8_t *found = memmem(bytes, data, key, sizeof key - 1);
    assert_non_null(found);
    return (size_t)(found - bytes) + sizeof key - 1;
}

// A safetensors file of three tensors of three dtypes (~4 KB of data).
static void write_safetensors(const char *path) {
    static float weights[1000];
    for (int i = 0; i < 1000; i++) weights[i] = (float)i * 0.25f - 17.0f;
    const int64_t steps = 1234567;
    const uint8_t state[5] = {1, 2, 3, 250, 0};
    const SafeTensorWrite tensors[] = {{"steps", SAFE_I64, 0, {0}, &steps},
                                       {"layer.weight", SAFE_F32, 2, {10, 100}, weights},
                                       {"state", SAFE_U8, 1, {5}, state}};
    const SafeMetadata metadata = {"format", "pt"};
    ErrorMessage err;
    ASSERT_OK(safetensors_write(path, tensors, 3, &metadata, 1, &err), err);
}

// A checkpoint of the same kinds of tensors.
static void write_checkpoint(const char *path) {
    CheckpointWriter *writer = checkpoint_writer_create();
    assert_non_null(writer);
    float values[300];
    for (int i = 0; i < 300; i++) values[i] = (float)(i % 7) - 3.0f;
    const uint8_t state[3] = {9, 8, 7};
    ErrorMessage err;
    ASSERT_OK(checkpoint_add_host_floats(writer, "backbone.fc.weight", values, 300, &err), err);
    ASSERT_OK(checkpoint_add_i64(writer, "train.completed_steps", 12, &err), err);
    ASSERT_OK(checkpoint_add_bytes(writer, "loader.state", state, 3, &err), err);
    ASSERT_OK(checkpoint_set_meta(writer, "model", "resnet18", &err), err);
    ASSERT_OK(checkpoint_write(writer, path, &err), err);
    checkpoint_writer_free(writer);
}

// A file written by write_safetensors or write_checkpoint, read back.
typedef struct WrittenFile {
    char path[256];
    uint8_t *bytes;  // the whole file
    size_t size;
    size_t blob;  // where the safetensors blob starts: 0, or after a checkpoint's header
    size_t data;  // where its data section starts
} WrittenFile;

static WrittenFile written_file(int checkpoint, const char *name) {
    WrittenFile file = {.blob = checkpoint ? CHECKPOINT_HEADER_SIZE : 0};
    fixture_temp_path(file.path, sizeof file.path, name);
    if (checkpoint) write_checkpoint(file.path);
    else write_safetensors(file.path);
    ByteBuffer buffer = {0};
    ErrorMessage err;
    ASSERT_OK(file_read_all(file.path, &buffer, SIZE_MAX, &err), err);
    assert_int_equal(buffer.data[buffer.size], 0);  // file_read_all's NUL after the data
    file.bytes = buffer.data;
    file.size = buffer.size;
    file.data = safetensors_edit_data_offset(file.bytes, file.size, file.blob);
    assert_true(file.data > file.blob && file.size - file.data > 10);
    return file;
}

// The parse of a changed copy of bytes: its status, the message in err.
static int parse_copy(const uint8_t *bytes, size_t size, size_t blob_offset, ErrorMessage *err) {
    uint8_t *copy = malloc(size);
    assert_non_null(copy);
    memcpy(copy, bytes, size);
    SafeTensors tensors;
    const int status = safetensors_parse_at(copy, size, blob_offset, &tensors, err);
    if (status == 0) safetensors_free(&tensors);
    return status;
}

static void test_recorded_value_is_the_crc32_of_the_data(void **state) {
    (void)state;
    // The reference itself: the standard check value of CRC-32.
    assert_int_equal(crc32_bitwise((const uint8_t *)"123456789", 9), 0xcbf43926u);
    for (int checkpoint = 0; checkpoint < 2; checkpoint++) {
        WrittenFile file = written_file(checkpoint, checkpoint ? "crc.ckpt" : "crc.safetensors");
        char expected[16];
        snprintf(expected, sizeof expected, "%08x",
                 crc32_bitwise(file.bytes + file.data, file.size - file.data));
        const size_t value = recorded_value_offset(file.bytes, file.data);
        assert_memory_equal(file.bytes + value, expected, 8);
        assert_int_equal(file.bytes[value + 8], '"');
        if (!checkpoint) {  // and the reader hands the same value out
            SafeTensors tensors;
            ErrorMessage err;
            ASSERT_OK(safetensors_read(file.path, &tensors, &err), err);
            assert_string_equal(safetensors_metadata(&tensors, SAFETENSORS_CRC32_KEY), expected);
            safetensors_free(&tensors);
        }
        free(file.bytes);
    }
}

// One bit changed, or 4 bytes zeroed, at the start, the middle and the last
// 4 bytes of the data: refused, with both values.
static void test_changed_data_is_refused(void **state) {
    (void)state;
    for (int checkpoint = 0; checkpoint < 2; checkpoint++) {
        WrittenFile file = written_file(checkpoint, checkpoint ? "flip.ckpt" : "flip.safetensors");
        const size_t value = recorded_value_offset(file.bytes, file.data);
        ErrorMessage err;
        assert_int_equal(parse_copy(file.bytes, file.size, file.blob, &err), 0);
        const size_t positions[3] = {file.data, (file.data + file.size) / 2, file.size - 4};
        uint8_t *bytes = malloc(file.size);
        assert_non_null(bytes);
        for (int p = 0; p < 3; p++)
            for (int zero = 0; zero < 2; zero++) {
                memcpy(bytes, file.bytes, file.size);
                if (zero) memset(bytes + positions[p], 0, 4);
                else bytes[positions[p]] ^= 0x10;
                if (memcmp(bytes, file.bytes, file.size) == 0) bytes[positions[p]] = 0x5a;
                char expected[160];
                snprintf(expected, sizeof expected,
                         "the tensor data is damaged (CRC-32 %.8s recorded, %08x read): the file "
                         "changed after it was written; use another copy",
                         (const char *)file.bytes + value,
                         crc32_bitwise(bytes + file.data, file.size - file.data));
                err.text[0] = '\0';
                assert_int_equal(parse_copy(bytes, file.size, file.blob, &err),
                                 SAFETENSORS_DAMAGED);
                assert_string_equal(err.text, expected);
            }
        // Read from a file (the last change): the message names it, first.
        char damaged[256], with_path[256 + sizeof err.text + 2];
        fixture_temp_path(damaged, sizeof damaged, checkpoint ? "damaged.ckpt" : "damaged.st");
        assert_int_equal(fixture_write_file(damaged, bytes, file.size), 0);
        parse_copy(bytes, file.size, file.blob, &err);
        snprintf(with_path, sizeof with_path, "%s: %s", damaged, err.text);
        if (checkpoint) {
            Checkpoint ckpt;
            assert_int_equal(checkpoint_read(damaged, &ckpt, &err), -1);
        } else {
            SafeTensors tensors;
            assert_int_equal(safetensors_read_weights(damaged, &tensors, &err), -1);
        }
        assert_string_equal(err.text, with_path);
        free(bytes);
        free(file.bytes);
    }
}

// The recorded value changed (another hex digit, or not hex): refused.
static void test_changed_recorded_value_is_refused(void **state) {
    (void)state;
    WrittenFile file = written_file(1, "value.ckpt");
    uint8_t *bytes = file.bytes;
    const size_t value = recorded_value_offset(bytes, file.data);
    ErrorMessage err;
    for (int digit = 0; digit < 8; digit++) {
        const uint8_t kept = bytes[value + (size_t)digit];
        bytes[value + (size_t)digit] = kept == '7' ? '8' : '7';
        assert_int_equal(parse_copy(bytes, file.size, file.blob, &err), SAFETENSORS_DAMAGED);
        assert_non_null(strstr(err.text, "the tensor data is damaged (CRC-32 "));
        bytes[value + (size_t)digit] = 'g';
        assert_int_equal(parse_copy(bytes, file.size, file.blob, &err), SAFETENSORS_DAMAGED);
        assert_non_null(
            strstr(err.text, "the header is damaged (its " SAFETENSORS_CRC32_KEY " is \""));
        bytes[value + (size_t)digit] = kept;
    }
    assert_int_equal(parse_copy(bytes, file.size, file.blob, &err), 0);
    // Through checkpoint_read: the file named, no "checkpoint tensors" prefix.
    // The checkpoint header's own CRC-32 finds the change first; recorded
    // again, the data's CRC-32 is what refuses it.
    bytes[value] = bytes[value] == '0' ? '1' : '0';
    const size_t length = strlen(file.path);
    for (int rerecorded = 0; rerecorded < 2; rerecorded++) {
        if (rerecorded) safetensors_edit_rerecord_checkpoint_header(bytes, file.size);
        assert_int_equal(fixture_write_file(file.path, bytes, file.size), 0);
        Checkpoint ckpt;
        assert_int_equal(checkpoint_read(file.path, &ckpt, &err), -1);
        assert_int_equal(strncmp(err.text, file.path, length), 0);
        const char *expected = rerecorded ? ": the tensor data is damaged"
                                          : ": the checkpoint header is damaged";
        assert_int_equal(strncmp(err.text + length, expected, strlen(expected)), 0);
    }
    free(bytes);
}

// The key's entry blanked with spaces (JSON whitespace: the header keeps its
// length): what a file of another program, or ours from before the key,
// is (a checkpoint of then: format version 1, no header CRC-32). It loads,
// changed data and all, since there is nothing to check.
static void test_file_without_the_key_loads(void **state) {
    (void)state;
    for (int checkpoint = 0; checkpoint < 2; checkpoint++) {
        WrittenFile file = written_file(checkpoint, checkpoint ? "old.ckpt" : "old.safetensors");
        static const char entry[] = ",\"" SAFETENSORS_CRC32_KEY "\":\"";
        uint8_t *found = memmem(file.bytes, file.data, entry, sizeof entry - 1);
        assert_non_null(found);
        memset(found, ' ', sizeof entry - 1 + 9);  // the entry, 8 digits and '"'
        file.bytes[file.size - 1] ^= 0x10;
        if (checkpoint) {  // version 1: bytes 12..15 are flags, 0
            file.bytes[8] = 1;
            memset(file.bytes + 12, 0, 4);
        }
        assert_int_equal(fixture_write_file(file.path, file.bytes, file.size), 0);
        ErrorMessage err;
        if (checkpoint) {
            Checkpoint ckpt;
            ASSERT_OK(checkpoint_read(file.path, &ckpt, &err), err);
            assert_null(checkpoint_meta(&ckpt, SAFETENSORS_CRC32_KEY));
            assert_string_equal(checkpoint_meta(&ckpt, "model"), "resnet18");
            checkpoint_free(&ckpt);
        } else {
            SafeTensors tensors;
            ASSERT_OK(safetensors_read_weights(file.path, &tensors, &err), err);
            assert_int_equal(tensors.metadata_count, 1);
            assert_int_equal(tensors.count, 3);
            safetensors_free(&tensors);
        }
        free(file.bytes);
    }
}

// A value passed by the caller (copied from another file) is replaced by
// the CRC-32 of what is written, once.
static void test_writer_replaces_a_given_value(void **state) {
    (void)state;
    char path[256];
    fixture_temp_path(path, sizeof path, "copied.safetensors");
    const float values[3] = {1, 2, 3};
    const SafeTensorWrite tensor = {"x", SAFE_F32, 1, {3}, values};
    char key[] = SAFETENSORS_CRC32_KEY, stale[] = "00000000", format[] = "format", pt[] = "pt";
    const SafeMetadata metadata[2] = {{key, stale}, {format, pt}};
    ErrorMessage err;
    ASSERT_OK(safetensors_write(path, &tensor, 1, metadata, 2, &err), err);
    SafeTensors tensors;
    ASSERT_OK(safetensors_read(path, &tensors, &err), err);
    assert_int_equal(tensors.metadata_count, 2);
    char expected[16];
    snprintf(expected, sizeof expected, "%08x",
             crc32_bitwise((const uint8_t *)values, sizeof values));
    assert_string_equal(safetensors_metadata(&tensors, SAFETENSORS_CRC32_KEY), expected);
    assert_string_equal(safetensors_metadata(&tensors, "format"), "pt");
    safetensors_free(&tensors);
}

// Pieces of 0 to 9 MiB, cut inside and across the 4 MiB blocks.
static void test_crc32_of_pieces_in_parallel(void **state) {
    (void)state;
    const size_t sizes[6] = {0, (5u << 20) + 3, 1, (9u << 20) - 7, 4u << 20, 12345};
    size_t total = 0;
    for (int i = 0; i < 6; i++) total += sizes[i];
    uint8_t *all = malloc(total);
    assert_non_null(all);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < total; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        all[i] = (uint8_t)x;
    }
    FileChunk pieces[6];
    size_t offset = 0;
    for (int i = 0; i < 6; i++) {
        pieces[i] = (FileChunk){all + offset, sizes[i]};
        offset += sizes[i];
    }
    const uint32_t expected = crc32_bitwise(all, total);
    assert_int_equal(data_crc32(pieces, 6), expected);
    const FileChunk whole = {all, total};
    assert_int_equal(data_crc32(&whole, 1), expected);
    assert_int_equal(data_crc32(pieces, 2), crc32_bitwise(all, sizes[1]));
    assert_int_equal(data_crc32(pieces, 0), 0);
    print_message("data_crc32 on %d usable cores\n", cpu_usable_cores());
    free(all);
    char text[DATA_CRC32_TEXT];
    data_crc32_format(0x0badcafeu, text);
    assert_string_equal(text, "0badcafe");
    uint32_t parsed = 0;
    assert_int_equal(data_crc32_parse("0BADcafe", &parsed), 0);
    assert_int_equal(parsed, 0x0badcafeu);
    assert_int_equal(data_crc32_parse("0badcaf", &parsed), -1);
    assert_int_equal(data_crc32_parse("0badcafe0", &parsed), -1);
    assert_int_equal(data_crc32_parse("0badcafg", &parsed), -1);
    assert_int_equal(data_crc32_parse("+badcafe", &parsed), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recorded_value_is_the_crc32_of_the_data),
        cmocka_unit_test(test_changed_data_is_refused),
        cmocka_unit_test(test_changed_recorded_value_is_refused),
        cmocka_unit_test(test_file_without_the_key_loads),
        cmocka_unit_test(test_writer_replaces_a_given_value),
        cmocka_unit_test(test_crc32_of_pieces_in_parallel),
    };
    return cmocka_run_group_tests(tests, fixture_tempdir_setup, fixture_tempdir_teardown);
}
