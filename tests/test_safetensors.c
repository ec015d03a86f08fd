// Tests of the safetensors reader and writer: round trips of every dtype and
// rank, byte equality with files written by the reference (Python
// safetensors 0.8 via safetensors.torch.save_file), every rejection class of
// a hostile header, truncation at every byte, and atomic writes that leave
// an existing file intact when anything fails.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nn/safetensors.h"
#include "image_fixtures.h"

static uint8_t *read_file(const char *path, size_t *size) {
    FILE *file = fopen(path, "rb");
    if (!file) return NULL;
    fseek(file, 0, SEEK_END);
    *size = (size_t)ftell(file);
    fseek(file, 0, SEEK_SET);
    uint8_t *bytes = malloc(*size ? *size : 1);
    assert_non_null(bytes);
    assert_int_equal(fread(bytes, 1, *size, file), *size);
    fclose(file);
    return bytes;
}

// u64 LE length | header | data (the reader owns the result).
static uint8_t *assemble(const char *header, size_t header_size, const void *data, size_t data_size,
                         size_t *size) {
    *size = 8 + header_size + data_size;
    uint8_t *bytes = malloc(*size);
    assert_non_null(bytes);
    for (int i = 0; i < 8; i++) bytes[i] = (uint8_t)((uint64_t)header_size >> (8 * i));
    memcpy(bytes + 8, header, header_size);
    if (data_size) memcpy(bytes + 8 + header_size, data, data_size);
    return bytes;
}

// Parses a header with `data_size` zero bytes of data.
static int parse_header_text(const char *header, size_t data_size, SafeTensors *out,
                             ErrorMessage *err) {
    uint8_t *zeros = calloc(1, data_size + 1);
    assert_non_null(zeros);
    size_t size;
    uint8_t *bytes = assemble(header, strlen(header), zeros, data_size, &size);
    free(zeros);
    return safetensors_parse(bytes, size, out, err);
}

// ---- round trips -----------------------------------------------------------------

static void test_round_trip_all_dtypes_and_ranks(void **state) {
    (void)state;
    const float f32[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};
    const uint16_t f16[5] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x8000};  // odd byte count
    const uint16_t bf16[2] = {0x3f80, 0xff80};
    const double f64[2] = {3.141592653589793, -1e300};
    const int64_t batches = 12345678901234;  // num_batches_tracked: an I64 scalar
    const int32_t i32[4] = {INT32_MIN, -1, 0, INT32_MAX};
    const int16_t i16[3] = {-32768, 7, 32767};
    const int8_t i8[4] = {-128, -1, 1, 127};
    const uint8_t flags[2] = {1, 0};
    const float deep[2] = {7.0f, 8.0f};
    SafeTensorWrite tensors[] = {
        {"conv1.weight", SAFE_F32, 2, {2, 3}, f32},
        {"half", SAFE_F16, 1, {5}, f16},
        {"bn1.num_batches_tracked", SAFE_I64, 0, {0}, &batches},
        {"brain", SAFE_BF16, 3, {1, 1, 2}, bf16},
        {"double", SAFE_F64, 1, {2}, f64},
        {"ints", SAFE_I32, 2, {2, 2}, i32},
        {"shorts", SAFE_I16, 1, {3}, i16},
        {"bytes", SAFE_I8, 1, {4}, i8},
        {"empty", SAFE_U8, 2, {0, 3}, NULL},
        {"flags", SAFE_BOOL, 1, {2}, flags},
        {"rank8", SAFE_F32, 8, {1, 1, 1, 1, 1, 1, 1, 2}, deep},
        {"quote \" backslash \\ newline \n tab \t bell \a", SAFE_U8, 1, {1}, flags},
        {"\xc3\xbcnic\xc3\xb8" "de.\xf0\x9f\x98\x80", SAFE_U8, 0, {0}, flags + 1},
    };
    const int count = (int)(sizeof tensors / sizeof tensors[0]);
    const SafeMetadata metadata[] = {{"format", "pt"}, {"note \"q\"", "line\nbreak \xc3\xa9"}};
    char path[128];
    fixture_temp_path(path, sizeof path, "round_trip.safetensors");
    ErrorMessage err = {""};
    assert_int_equal(safetensors_write(path, tensors, count, metadata, 2, &err), 0);

    SafeTensors read;
    if (safetensors_read(path, &read, &err) != 0) fail_msg("%s", err.text);
    assert_int_equal(read.count, count);
    assert_int_equal((uintptr_t)read.data % 8, 0);
    for (int i = 0; i < count; i++) {
        const SafeTensor *t = &read.tensors[i];  // header order = the order given
        assert_string_equal(t->name, tensors[i].name);
        assert_int_equal(t->dtype, tensors[i].dtype);
        assert_int_equal(t->rank, tensors[i].rank);
        for (int d = 0; d < t->rank; d++) assert_int_equal(t->shape[d], tensors[i].shape[d]);
        assert_int_equal(t->size, (size_t)safe_tensor_elements(t) * safe_dtype_size(t->dtype));
        if (t->size) assert_memory_equal(safetensors_data(&read, t), tensors[i].data, t->size);
        assert_ptr_equal(safetensors_find(&read, tensors[i].name), t);
    }
    const SafeTensor *scalar = safetensors_find(&read, "bn1.num_batches_tracked");
    assert_non_null(scalar);
    assert_int_equal(scalar->rank, 0);
    assert_int_equal(safe_tensor_elements(scalar), 1);
    int64_t batches_read;
    memcpy(&batches_read, safetensors_data(&read, scalar), 8);
    assert_int_equal(batches_read, batches);
    assert_null(safetensors_find(&read, "missing"));
    assert_string_equal(safetensors_metadata(&read, "format"), "pt");
    assert_string_equal(safetensors_metadata(&read, "note \"q\""), "line\nbreak \xc3\xa9");
    assert_null(safetensors_metadata(&read, "absent"));
    safetensors_free(&read);

    // The header length is a multiple of 8, padded with spaces.
    size_t size;
    uint8_t *bytes = read_file(path, &size);
    assert_non_null(bytes);
    uint64_t header_size = 0;
    for (int i = 7; i >= 0; i--) header_size = header_size << 8 | bytes[i];
    assert_int_equal(header_size % 8, 0);
    assert_true(bytes[8 + header_size - 1] == ' ' || bytes[8 + header_size - 1] == '}');
    free(bytes);
}

static void test_round_trip_no_tensors(void **state) {
    (void)state;
    char path[128];
    fixture_temp_path(path, sizeof path, "empty.safetensors");
    ErrorMessage err;
    assert_int_equal(safetensors_write(path, NULL, 0, NULL, 0, &err), 0);
    SafeTensors read;
    if (safetensors_read(path, &read, &err) != 0) fail_msg("%s", err.text);
    assert_int_equal(read.count, 0);
    assert_int_equal(read.metadata_count, 1);  // the CRC-32 of no bytes
    assert_string_equal(safetensors_metadata(&read, SAFETENSORS_CRC32_KEY), "00000000");
    safetensors_free(&read);
}

// ---- the reference's bytes ---------------------------------------------------------

// What safetensors.torch.save_file({"b": zeros(3, f16), "a": ones(2, 2),
// "n": tensor(5), "c.x": zeros(1, u8)}, metadata={"format": "pt",
// "lightly-train-c.data_crc32": "d176d544"}) writes (Python's safetensors
// 0.8; it writes a map of several keys in any order, this is one of them):
// metadata first, tensors sorted by alignment then name, compact JSON,
// spaces up to a multiple of 8. d176d544 is zlib.crc32 of the data.
static const char REFERENCE_HEADER[] =
    "{\"__metadata__\":{\"format\":\"pt\",\"lightly-train-c.data_crc32\":\"d176d544\"},"
    "\"n\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
    "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[8,24]},"
    "\"b\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[24,30]},"
    "\"c.x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[30,31]}}     ";

static void test_reads_and_writes_reference_bytes(void **state) {
    (void)state;
    const int64_t n = 5;
    const float a[4] = {1, 1, 1, 1};
    const uint16_t b[3] = {0, 0, 0};
    const uint8_t cx = 0;
    uint8_t data[31];
    memcpy(data, &n, 8);
    memcpy(data + 8, a, 16);
    memcpy(data + 24, b, 6);
    data[30] = cx;
    assert_int_equal(strlen(REFERENCE_HEADER), 296);
    size_t size;
    uint8_t *expected = assemble(REFERENCE_HEADER, 296, data, sizeof data, &size);
    uint8_t *copy = malloc(size);
    memcpy(copy, expected, size);
    SafeTensors read;
    ErrorMessage err;
    if (safetensors_parse(copy, size, &read, &err) != 0) fail_msg("%s", err.text);
    assert_int_equal(read.count, 4);
    const SafeTensor *tensor_a = safetensors_find(&read, "a");
    assert_non_null(tensor_a);
    assert_int_equal(tensor_a->rank, 2);
    assert_int_equal(tensor_a->offset, 8);
    assert_memory_equal(safetensors_data(&read, tensor_a), a, 16);
    safetensors_free(&read);

    // Given the same order, our writer produces the same bytes.
    const SafeTensorWrite tensors[] = {{"n", SAFE_I64, 0, {0}, &n},
                                       {"a", SAFE_F32, 2, {2, 2}, a},
                                       {"b", SAFE_F16, 1, {3}, b},
                                       {"c.x", SAFE_U8, 1, {1}, &cx}};
    const SafeMetadata metadata = {"format", "pt"};
    char path[128];
    fixture_temp_path(path, sizeof path, "reference.safetensors");
    assert_int_equal(safetensors_write(path, tensors, 4, &metadata, 1, &err), 0);
    size_t written_size;
    uint8_t *written = read_file(path, &written_size);
    assert_int_equal(written_size, size);
    assert_memory_equal(written, expected, size);
    free(written);
    free(expected);
}

// safetensors.torch.save_file({"é\"\\\n\x01\x1f\x7f/€😀": zeros(1)},
// metadata={"k\n": "v\"", "lightly-train-c.data_crc32": "2144df1c"}) in
// this order of the map: serde_json escapes '"', '\\', control bytes (\n
// short, others \u00XX) and leaves UTF-8 and DEL as they are.
static void test_escapes_match_reference(void **state) {
    (void)state;
    static const char header[] =
        "{\"__metadata__\":{\"k\\n\":\"v\\\"\",\"lightly-train-c.data_crc32\":\"2144df1c\"},"
        "\"\xc3\xa9\\\"\\\\\\n\\u0001\\u001f\x7f/\xe2\x82\xac\xf0\x9f\x98\x80\":"
        "{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} ";
    const size_t header_size = sizeof header - 1;
    assert_int_equal(header_size, 152);
    const float zero = 0;
    const char *name = "\xc3\xa9\"\\\n\x01\x1f\x7f/\xe2\x82\xac\xf0\x9f\x98\x80";
    const SafeTensorWrite tensor = {name, SAFE_F32, 1, {1}, &zero};
    const SafeMetadata metadata = {"k\n", "v\""};
    char path[128];
    fixture_temp_path(path, sizeof path, "escapes.safetensors");
    ErrorMessage err;
    assert_int_equal(safetensors_write(path, &tensor, 1, &metadata, 1, &err), 0);
    size_t size, expected_size;
    uint8_t *written = read_file(path, &size);
    uint8_t *expected = assemble(header, header_size, &zero, 4, &expected_size);
    assert_int_equal(size, expected_size);
    assert_memory_equal(written, expected, size);
    free(written);

    SafeTensors read;
    if (safetensors_parse(expected, expected_size, &read, &err) != 0) fail_msg("%s", err.text);
    assert_string_equal(read.tensors[0].name, name);
    assert_string_equal(safetensors_metadata(&read, "k\n"), "v\"");
    safetensors_free(&read);
}

static void test_unicode_escapes_and_any_order(void **state) {
    (void)state;
    // \u escapes (a surrogate pair too) decode to UTF-8; the header lists
    // tensors in an order other than their data; padding may be absent and
    // the data is still handed out 8-byte aligned.
    static const char header[] =
        "{\"second\":{\"shape\":[1],\"data_offsets\":[8,16],\"dtype\":\"I64\"},"
        " \"\\u00e9\\ud83d\\ude00\\/\" : {\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}";
    const double first = 2.5;
    const int64_t second = -7;
    uint8_t data[16];
    memcpy(data, &first, 8);
    memcpy(data + 8, &second, 8);
    assert_true((strlen(header) + 8) % 8 != 0);
    size_t size;
    uint8_t *bytes = assemble(header, strlen(header), data, 16, &size);
    SafeTensors read;
    ErrorMessage err;
    if (safetensors_parse(bytes, size, &read, &err) != 0) fail_msg("%s", err.text);
    assert_int_equal(read.count, 2);
    assert_string_equal(read.tensors[0].name, "second");
    assert_string_equal(read.tensors[1].name, "\xc3\xa9\xf0\x9f\x98\x80/");
    assert_int_equal((uintptr_t)read.data % 8, 0);
    assert_memory_equal(safetensors_data(&read, &read.tensors[0]), &second, 8);
    assert_memory_equal(safetensors_data(&read, &read.tensors[1]), &first, 8);
    safetensors_free(&read);
}

// ---- hostile headers -------------------------------------------------------------

typedef struct Rejection {
    const char *header;
    size_t data_size;
    const char *fragment;  // expected in the message
} Rejection;

#define ENTRY(name, dtype, shape, offsets) \
    "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":" offsets "}"

static void test_rejects_hostile_headers(void **state) {
    (void)state;
    static const Rejection cases[] = {
        {"{" ENTRY("a", "F32", "[1]", "[0,4]"), 4, "invalid JSON at byte 53: expected ',' or '}'"},
        {"{" ENTRY("a", "F32", "[1]", "[0,4]") "} x", 4, "expected only spaces after the JSON"},
        {"[]", 0, "expected '{', found '['"},
        {"", 0, "expected '{', found the end"},
        {"{" ENTRY("a", "F32", "[1]", "[0,4]") "," ENTRY("a", "F32", "[1]", "[4,8]") "}", 8,
         "duplicate tensor name \"a\""},
        {"{" ENTRY("", "F32", "[1]", "[0,4]") "}", 4, "empty tensor name"},
        {"{" ENTRY("a", "F8_E4M3", "[1]", "[0,1]") "}", 1, "tensor \"a\": unsupported dtype \"F8_E4M3\""},
        {"{\"a\":{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
         "tensor \"a\": dtype: must be a string"},
        {"{" ENTRY("a", "F32", "[2,-1]", "[0,4]") "}", 4, "tensor \"a\": shape: dimension 1 is negative"},
        {"{" ENTRY("a", "F32", "[4294967296,4294967296]", "[0,4]") "}", 4,
         "tensor \"a\": shape: element count overflows"},
        {"{" ENTRY("a", "F32", "[1.5]", "[0,4]") "}", 4, "tensor \"a\": shape: byte 29: expected an integer"},
        {"{" ENTRY("a", "F32", "[99999999999999999999]", "[0,4]") "}", 4, "out of the 64-bit range"},
        {"{" ENTRY("a", "F32", "[01]", "[0,4]") "}", 4, "leading zero"},
        {"{" ENTRY("a", "F32", "\"1\"", "[0,4]") "}", 4, "tensor \"a\": shape: must be an array"},
        {"{" ENTRY("a", "F32", "[1,1,1,1,1,1,1,1,1]", "[0,4]") "}", 4,
         "tensor \"a\": shape: rank above the limit of 8"},
        {"{" ENTRY("a", "F32", "[1]", "[0]") "}", 4, "tensor \"a\": data_offsets: must be [begin, end]"},
        {"{" ENTRY("a", "F32", "[1]", "[0,4,8]") "}", 4, "tensor \"a\": data_offsets: must be [begin, end]"},
        {"{" ENTRY("a", "F32", "[1]", "[0,\"4\"]") "}", 4, "tensor \"a\": data_offsets: must be [begin, end]"},
        {"{" ENTRY("a", "F32", "[1]", "{}") "}", 4, "tensor \"a\": data_offsets: must be [begin, end]"},
        {"{" ENTRY("a", "F32", "[1]", "[-4,0]") "}", 4, "tensor \"a\": data_offsets: negative offset -4"},
        {"{" ENTRY("a", "F32", "[0]", "[4,0]") "}", 4, "tensor \"a\": data_offsets: end 0 before begin 4"},
        {"{" ENTRY("a", "F32", "[2]", "[0,4]") "}", 4,
         "tensor \"a\": data_offsets: [0, 4] span 4 bytes but the shape of 2 F32 elements needs 8"},
        {"{" ENTRY("a", "F32", "[2]", "[0,8]") "}", 4, "tensor \"a\": data_offsets: [0, 8] beyond the data (4 bytes)"},
        {"{" ENTRY("a", "F32", "[1]", "[0,4]") "," ENTRY("b", "F32", "[1]", "[8,12]") "}", 12,
         "tensor \"b\": data begins at 8, leaving a gap after byte 4"},
        {"{" ENTRY("a", "F32", "[2]", "[0,8]") "," ENTRY("b", "F32", "[1]", "[4,8]") "}", 8,
         "tensor \"b\": data [4, 8) overlaps tensor \"a\""},
        {"{" ENTRY("b", "F32", "[2]", "[0,8]") "," ENTRY("a", "F32", "[2]", "[0,8]") "}", 8,
         "tensor \"b\": data [0, 8) overlaps tensor \"a\""},
        {"{" ENTRY("a", "F32", "[1]", "[0,4]") "}", 8, "data section of 8 bytes but the tensors cover only 4"},
        {"{\"__metadata__\":[]}", 0, "__metadata__: must be an object of string to string"},
        {"{\"__metadata__\":{\"k\":1}}", 0, "__metadata__: value of \"k\" is not a string"},
        {"{\"__metadata__\":{\"k\":{}}}", 0, "__metadata__: value of \"k\" is not a string"},
        {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate \"__metadata__\""},
        {"{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "__metadata__: duplicate key \"k\""},
        {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "tensor \"a\": missing field \"shape\""},
        {"{\"a\":{}}", 0, "tensor \"a\": missing field \"dtype\""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"foo\":1}}", 4,
         "tensor \"a\": unknown field \"foo\""},
        {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\"}}", 4, "tensor \"a\": duplicate field \"dtype\""},
        {"{\"a\":5}", 0, "tensor \"a\": must be an object"},
        {"{" ENTRY("\xff", "F32", "[1]", "[0,4]") "}", 4, "byte 2: invalid UTF-8 in a string"},
        {"{" ENTRY("\xc0\xaf", "F32", "[1]", "[0,4]") "}", 4, "invalid UTF-8"},  // overlong '/'
        {"{" ENTRY("\xed\xa0\x80", "F32", "[1]", "[0,4]") "}", 4, "invalid UTF-8"},  // surrogate
        {"{" ENTRY("\\ud800", "F32", "[1]", "[0,4]") "}", 4, "high surrogate \\ud800 without a low one"},
        {"{" ENTRY("\\udc00", "F32", "[1]", "[0,4]") "}", 4, "lone low surrogate"},
        {"{" ENTRY("a\\u0000", "F32", "[1]", "[0,4]") "}", 4, "\\u0000 (NUL) is not allowed"},
        {"{" ENTRY("a\\u12", "F32", "[1]", "[0,4]") "}", 4, "\\u needs four hex digits"},
        {"{" ENTRY("a\\q", "F32", "[1]", "[0,4]") "}", 4, "unknown escape '\\q'"},
        {"{" ENTRY("a\tb", "F32", "[1]", "[0,4]") "}", 4, "control byte 0x09 in a string"},
        {"{\"a", 0, "unterminated string"},
        {"{\"a\" 5}", 0, "after \"a\": invalid JSON at byte 5: expected ':', found '5'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        SafeTensors read;
        ErrorMessage err = {""};
        if (parse_header_text(cases[i].header, cases[i].data_size, &read, &err) == 0)
            fail_msg("case %zu accepted: %s", i, cases[i].header);
        if (!strstr(err.text, cases[i].fragment))
            fail_msg("case %zu: message \"%s\" lacks \"%s\"", i, err.text, cases[i].fragment);
        assert_int_equal(strncmp(err.text, "header: ", 8), 0);
        assert_null(read.tensors);  // freed and cleared on failure
    }
}

static void test_rejects_long_names(void **state) {
    (void)state;
    char header[1200];
    char name[SAFETENSORS_MAX_NAME + 1];
    SafeTensors read;
    ErrorMessage err;
    // 511 bytes is the longest name; 512 is refused.
    for (int length = SAFETENSORS_MAX_NAME - 1; length <= SAFETENSORS_MAX_NAME; length++) {
        memset(name, 'x', (size_t)length);
        name[length] = '\0';
        snprintf(header, sizeof header,
                 "{\"%s\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", name);
        const int status = parse_header_text(header, 4, &read, &err);
        if (length < SAFETENSORS_MAX_NAME) {
            if (status != 0) fail_msg("%s", err.text);
            assert_string_equal(read.tensors[0].name, name);
            safetensors_free(&read);
        } else {
            assert_int_equal(status, -1);
            assert_non_null(strstr(err.text, "tensor name of 512 bytes above the limit of 511"));
        }
    }
}

static void test_rejects_too_many_tensors(void **state) {
    (void)state;
    // Empty tensors cost a header entry and no data: without a limit, a
    // 100 MB header could make the reader allocate gigabytes.
    const int count = SAFETENSORS_MAX_TENSORS + 1;
    static const char entry[] = "\"t%07d\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},";
    const size_t entry_size = sizeof entry - 1 - 4 + 7;  // "%07d" prints 7 digits
    char *header = malloc((size_t)count * entry_size + 2);
    assert_non_null(header);
    char *at = header;
    *at++ = '{';
    for (int i = 0; i < count; i++) at += sprintf(at, entry, i);
    at[-1] = '}';
    SafeTensors read;
    ErrorMessage err;
    assert_int_equal(parse_header_text(header, 0, &read, &err), -1);
    assert_non_null(strstr(err.text, "more than 262144 tensors"));
    // One fewer is accepted.
    sprintf(header + (size_t)(count - 1) * entry_size, "}");
    if (parse_header_text(header, 0, &read, &err) != 0) fail_msg("%s", err.text);
    assert_int_equal(read.count, SAFETENSORS_MAX_TENSORS);
    safetensors_free(&read);
    free(header);
}

static void test_rejects_bad_lengths(void **state) {
    (void)state;
    SafeTensors read;
    ErrorMessage err;
    uint8_t *bytes = calloc(1, 7);
    assert_int_equal(safetensors_parse(bytes, 7, &read, &err), -1);
    assert_non_null(strstr(err.text, "file of 7 bytes is too short"));

    size_t size;
    bytes = assemble("{}", 2, NULL, 0, &size);
    bytes[0] = 3;  // header length 3 with 2 bytes after it
    assert_int_equal(safetensors_parse(bytes, size, &read, &err), -1);
    assert_non_null(strstr(err.text, "header length 3 above the rest of the file (2 bytes)"));

    bytes = assemble("{}", 2, NULL, 0, &size);
    const uint64_t huge = SAFETENSORS_MAX_HEADER + 1;
    for (int i = 0; i < 8; i++) bytes[i] = (uint8_t)(huge >> (8 * i));
    assert_int_equal(safetensors_parse(bytes, size, &read, &err), -1);
    assert_non_null(strstr(err.text, "header length 100000001 above the limit"));

    bytes = assemble("{}", 2, NULL, 0, &size);
    memset(bytes, 0xff, 8);  // 2^64 - 1: must not wrap around
    assert_int_equal(safetensors_parse(bytes, size, &read, &err), -1);
    assert_non_null(strstr(err.text, "above the limit"));

    char path[128];
    fixture_temp_path(path, sizeof path, "does-not-exist.safetensors");
    assert_int_equal(safetensors_read(path, &read, &err), -1);
    assert_non_null(strstr(err.text, path));
}

// Every prefix of a valid file is refused without a crash; every single-byte
// corruption either is refused or yields tensors inside the data.
static void test_truncated_and_corrupted_files(void **state) {
    (void)state;
    const float values[3] = {1, 2, 3};
    const int64_t scalar = 4;
    const SafeTensorWrite tensors[] = {{"w", SAFE_F32, 2, {1, 3}, values},
                                       {"n", SAFE_I64, 0, {0}, &scalar}};
    const SafeMetadata metadata = {"k", "v"};
    char path[128];
    fixture_temp_path(path, sizeof path, "small.safetensors");
    ErrorMessage err;
    assert_int_equal(safetensors_write(path, tensors, 2, &metadata, 1, &err), 0);
    size_t size;
    uint8_t *file = read_file(path, &size);
    SafeTensors read;
    for (size_t length = 0; length <= size; length++) {
        uint8_t *copy = malloc(length ? length : 1);
        memcpy(copy, file, length);
        const int status = safetensors_parse(copy, length, &read, &err);
        if (length < size) {
            if (status == 0) fail_msg("prefix of %zu of %zu bytes accepted", length, size);
        } else {
            if (status != 0) fail_msg("%s", err.text);
            safetensors_free(&read);
        }
    }
    for (size_t at = 0; at < size; at++) {
        for (int flip = 1; flip < 256; flip <<= 1) {
            uint8_t *copy = malloc(size);
            memcpy(copy, file, size);
            copy[at] ^= (uint8_t)flip;
            if (safetensors_parse(copy, size, &read, &err) == 0) {
                const size_t data_size = read.file_size - (size_t)(read.data - read.file);
                for (int i = 0; i < read.count; i++)
                    assert_true(read.tensors[i].offset + read.tensors[i].size <= data_size);
                safetensors_free(&read);
            }
        }
    }
    free(file);
}

// ---- atomic writes ---------------------------------------------------------------

static const float ORIGINAL[2] = {1, 2};

// Writes a one-tensor file at path and returns its bytes.
static uint8_t *write_original(const char *path, size_t *size) {
    const SafeTensorWrite tensor = {"original", SAFE_F32, 1, {2}, ORIGINAL};
    ErrorMessage err;
    if (safetensors_write(path, &tensor, 1, NULL, 0, &err) != 0) fail_msg("%s", err.text);
    return read_file(path, size);
}

static void assert_file_is(const char *path, const uint8_t *bytes, size_t size) {
    size_t now_size;
    uint8_t *now = read_file(path, &now_size);
    assert_non_null(now);
    assert_int_equal(now_size, size);
    assert_memory_equal(now, bytes, size);
    free(now);
}

static void assert_no_temp_file(const char *path) {
    char temp[256];
    snprintf(temp, sizeof temp, "%s.tmp.%ld", path, (long)getpid());
    assert_int_equal(access(temp, F_OK), -1);
}

static void test_write_into_missing_folder_fails(void **state) {
    (void)state;
    char path[128];
    fixture_temp_path(path, sizeof path, "missing/x.safetensors");
    const SafeTensorWrite tensor = {"t", SAFE_F32, 1, {2}, ORIGINAL};
    ErrorMessage err;
    assert_int_equal(safetensors_write(path, &tensor, 1, NULL, 0, &err), -1);
    assert_non_null(strstr(err.text, path));
    assert_non_null(strstr(err.text, "cannot create"));
    assert_non_null(strstr(err.text, "No such file or directory"));
}

static void test_failed_writes_keep_the_old_file(void **state) {
    (void)state;
    char path[128], temp[256];
    fixture_temp_path(path, sizeof path, "keep.safetensors");
    size_t size;
    uint8_t *original = write_original(path, &size);
    const float other[4] = {5, 6, 7, 8};
    const SafeTensorWrite tensor = {"replacement", SAFE_F32, 1, {4}, other};
    ErrorMessage err;

    // The temporary name cannot be created (a folder is in the way; running
    // as root, a read-only folder would not stop us).
    snprintf(temp, sizeof temp, "%s.tmp.%ld", path, (long)getpid());
    assert_int_equal(mkdir(temp, 0700), 0);
    assert_int_equal(safetensors_write(path, &tensor, 1, NULL, 0, &err), -1);
    assert_non_null(strstr(err.text, "cannot create"));
    assert_file_is(path, original, size);
    assert_int_equal(rmdir(temp), 0);

    // Writing fails part way (file size limit): the temporary file goes.
    static float big[16384];
    const SafeTensorWrite big_tensor = {"big", SAFE_F32, 1, {16384}, big};
    struct rlimit saved, limited;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &saved), 0);
    limited = saved;
    limited.rlim_cur = 4096;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &limited), 0);
    const int status = safetensors_write(path, &big_tensor, 1, NULL, 0, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &saved), 0);
    signal(SIGXFSZ, old_handler);
    assert_int_equal(status, -1);
    assert_non_null(strstr(err.text, "cannot write"));
    assert_file_is(path, original, size);
    assert_no_temp_file(path);

    // Invalid arguments write nothing.
    const SafeTensorWrite twins[2] = {tensor, tensor};
    assert_int_equal(safetensors_write(path, twins, 2, NULL, 0, &err), -1);
    assert_non_null(strstr(err.text, "duplicate name \"replacement\""));
    const SafeTensorWrite reserved = {"__metadata__", SAFE_F32, 1, {4}, other};
    assert_int_equal(safetensors_write(path, &reserved, 1, NULL, 0, &err), -1);
    assert_non_null(strstr(err.text, "reserved name"));
    const SafeTensorWrite negative = {"n", SAFE_F32, 2, {4, -1}, other};
    assert_int_equal(safetensors_write(path, &negative, 1, NULL, 0, &err), -1);
    assert_non_null(strstr(err.text, "tensor \"n\": negative dimension"));
    const SafeTensorWrite no_data = {"n", SAFE_F32, 1, {4}, NULL};
    assert_int_equal(safetensors_write(path, &no_data, 1, NULL, 0, &err), -1);
    assert_non_null(strstr(err.text, "tensor \"n\": no data"));
    const SafeTensorWrite bad_utf8 = {"\xff", SAFE_F32, 1, {4}, other};
    assert_int_equal(safetensors_write(path, &bad_utf8, 1, NULL, 0, &err), -1);
    assert_non_null(strstr(err.text, "not valid UTF-8"));
    const SafeMetadata twin_keys[2] = {{"k", "1"}, {"k", "2"}};
    assert_int_equal(safetensors_write(path, &tensor, 1, twin_keys, 2, &err), -1);
    assert_non_null(strstr(err.text, "duplicate name \"k\""));
    assert_file_is(path, original, size);
    free(original);
}

static void test_failed_rename_removes_temp_file(void **state) {
    (void)state;
    // The destination is a non-empty folder: rename fails after the data is
    // written; the temporary file must not stay behind.
    char path[128], inside[160];
    fixture_temp_path(path, sizeof path, "folder.safetensors");
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(inside, sizeof inside, "%s/file", path);
    FILE *file = fopen(inside, "w");
    assert_non_null(file);
    fclose(file);
    const SafeTensorWrite tensor = {"t", SAFE_F32, 1, {2}, ORIGINAL};
    ErrorMessage err;
    assert_int_equal(safetensors_write(path, &tensor, 1, NULL, 0, &err), -1);
    assert_non_null(strstr(err.text, "cannot rename"));
    assert_no_temp_file(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_all_dtypes_and_ranks),
        cmocka_unit_test(test_round_trip_no_tensors),
        cmocka_unit_test(test_reads_and_writes_reference_bytes),
        cmocka_unit_test(test_escapes_match_reference),
        cmocka_unit_test(test_unicode_escapes_and_any_order),
        cmocka_unit_test(test_rejects_hostile_headers),
        cmocka_unit_test(test_rejects_long_names),
        cmocka_unit_test(test_rejects_too_many_tensors),
        cmocka_unit_test(test_rejects_bad_lengths),
        cmocka_unit_test(test_truncated_and_corrupted_files),
        cmocka_unit_test(test_write_into_missing_folder_fails),
        cmocka_unit_test(test_failed_writes_keep_the_old_file),
        cmocka_unit_test(test_failed_rename_removes_temp_file),
    };
    return cmocka_run_group_tests(tests, fixture_tempdir_setup, fixture_tempdir_teardown);
}
