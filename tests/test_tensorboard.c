// Tests of the TensorBoard event writer and reader and of metrics.jsonl:
// CRC-32C check values from the TFRecord format, a write / read-back round
// trip (events per tag, exact steps and values, a decodable PNG image), the
// reader stopping at a corrupted or truncated record, the event file name,
// write errors (missing directory, file size limit) and metrics.jsonl lines
// read back by a strict parser.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "decode/decode.h"
#include "logging/crc32c.h"
#include "logging/metrics_jsonl.h"
#include "logging/tb_reader.h"
#include "logging/tb_writer.h"
#include "image_fixtures.h"

// ---- CRC ------------------------------------------------------------------------

static void test_crc32c_check_values(void **state) {
    (void)state;
    const uint8_t zeros[32] = {0};
    assert_int_equal(crc32c(zeros, sizeof zeros), 0x8a9136aau);
    const char *masked_input = "\x1a\x11" "CRC test, one two";
    assert_int_equal(strlen(masked_input), 19);
    assert_int_equal(crc32c_masked(masked_input, 19), 0x5794d08au);
    // The standard CRC-32C check value ("123456789" -> 0xE3069283).
    assert_int_equal(crc32c("123456789", 9), 0xe3069283u);
}

// ---- round trip ------------------------------------------------------------------

#define TAG_COUNT 3
static const char *const scalar_tags[TAG_COUNT] = {"train_loss", "lr", "data_time"};
static const int steps_per_tag[TAG_COUNT] = {12, 7, 3};

// Distinct, non-round values so a swapped step or tag shows.
static float scalar_value(int tag, int step) {
    return (float)(tag + 1) * 0.1f + (float)step * 0.37f - 1.0f / (float)(step + 3);
}

#define IMAGE_WIDTH 7
#define IMAGE_HEIGHT 5

static void make_test_image(uint8_t *rgb) {  // (IMAGE_HEIGHT, IMAGE_WIDTH, 3)
    for (int y = 0; y < IMAGE_HEIGHT; y++)
        for (int x = 0; x < IMAGE_WIDTH; x++)
            for (int c = 0; c < 3; c++)
                rgb[(y * IMAGE_WIDTH + x) * 3 + c] = (uint8_t)(x * 31 + y * 47 + c * 80);
}

// Writes the scalars of every tag (interleaved by step) and one image at step 3.
static void write_test_run(const char *dir, char *path_out, size_t path_capacity) {
    ErrorMessage err = {{0}};
    TbWriter *writer = NULL;
    assert_int_equal(tb_writer_open(&writer, dir, &err), 0);
    for (int step = 0; step < 12; step++) {
        for (int tag = 0; tag < TAG_COUNT; tag++) {
            if (step >= steps_per_tag[tag]) continue;
            assert_int_equal(tb_add_scalar(writer, scalar_tags[tag], step * 10, scalar_value(tag, step), &err), 0);
        }
        if (step == 3) {
            uint8_t rgb[IMAGE_HEIGHT * IMAGE_WIDTH * 3];
            make_test_image(rgb);
            assert_int_equal(tb_add_image(writer, "views", 30, IMAGE_WIDTH, IMAGE_HEIGHT, rgb, &err), 0);
        }
    }
    snprintf(path_out, path_capacity, "%s", tb_writer_path(writer));
    assert_int_equal(tb_writer_close(writer, &err), 0);
}

static void check_image_value(const TbValue *value) {
    assert_int_equal(value->image_width, IMAGE_WIDTH);
    assert_int_equal(value->image_height, IMAGE_HEIGHT);
    assert_int_equal(value->image_colorspace, 3);
    Decoder *decoder = decoder_create(0);
    assert_non_null(decoder);
    DecodedImage decoded;
    ErrorMessage err = {{0}};
    assert_int_equal(decode_sniff(value->image_encoded, value->image_encoded_size), IMAGE_FORMAT_PNG);
    assert_int_equal(decoder_decode(decoder, value->image_encoded, value->image_encoded_size, NULL,
                                    &decoded, &err), 0);
    assert_int_equal(decoded.image.width, IMAGE_WIDTH);
    assert_int_equal(decoded.image.height, IMAGE_HEIGHT);
    uint8_t expected[IMAGE_HEIGHT * IMAGE_WIDTH * 3];
    make_test_image(expected);
    for (int y = 0; y < IMAGE_HEIGHT; y++)  // PNG is lossless: exact pixels
        assert_memory_equal(decoded.image.pixels + (size_t)y * decoded.image.stride,
                            expected + y * IMAGE_WIDTH * 3, IMAGE_WIDTH * 3);
    decoder_destroy(decoder);
}

static void test_round_trip(void **state) {
    (void)state;
    char dir[128], path[512];
    fixture_temp_path(dir, sizeof dir, "run-round-trip");  // created by the writer
    write_test_run(dir, path, sizeof path);

    ErrorMessage err = {{0}};
    TbReader *reader = NULL;
    assert_int_equal(tb_reader_open(&reader, path, &err), 0);
    TbEvent event;
    assert_int_equal(tb_reader_next(reader, &event, &err), 1);
    assert_non_null(event.file_version);
    assert_string_equal(event.file_version, "brain.Event:2");
    assert_true(event.wall_time > 1.6e9);  // a real Unix time (after 2020)

    int seen[TAG_COUNT] = {0};
    int images = 0;
    int status;
    while ((status = tb_reader_next(reader, &event, &err)) == 1) {
        assert_null(event.file_version);
        assert_int_equal(event.value_count, 1);
        const TbValue *value = &event.values[0];
        if (value->kind == TB_VALUE_IMAGE) {
            assert_string_equal(value->tag, "views");
            assert_int_equal(event.step, 30);
            check_image_value(value);
            images++;
            continue;
        }
        assert_int_equal(value->kind, TB_VALUE_SCALAR);
        int tag = 0;
        while (tag < TAG_COUNT && strcmp(scalar_tags[tag], value->tag) != 0) tag++;
        assert_true(tag < TAG_COUNT);
        // Written in step order per tag: the n-th event of a tag is step n.
        int step = seen[tag]++;
        assert_int_equal(event.step, step * 10);
        // float on the wire both ways: exact equality.
        assert_true(value->scalar == scalar_value(tag, step));
    }
    assert_int_equal(status, 0);
    for (int tag = 0; tag < TAG_COUNT; tag++) assert_int_equal(seen[tag], steps_per_tag[tag]);
    assert_int_equal(images, 1);
    assert_int_equal(tb_reader_record_count(reader), 1 + 12 + 7 + 3 + 1);
    tb_reader_close(reader);
}

// ---- corruption ------------------------------------------------------------------

static uint8_t *read_whole_file(const char *path, size_t *size) {
    FILE *file = fopen(path, "rb");
    assert_non_null(file);
    fseek(file, 0, SEEK_END);
    *size = (size_t)ftell(file);
    fseek(file, 0, SEEK_SET);
    uint8_t *bytes = malloc(*size);
    assert_non_null(bytes);
    assert_int_equal(fread(bytes, 1, *size, file), *size);
    fclose(file);
    return bytes;
}

static void write_whole_file(const char *path, const uint8_t *bytes, size_t size) {
    FILE *file = fopen(path, "wb");
    assert_non_null(file);
    assert_int_equal(fwrite(bytes, 1, size, file), size);
    assert_int_equal(fclose(file), 0);
}

// Byte offset of record `index` (0 = the file_version record).
static size_t record_offset(const uint8_t *bytes, size_t size, int index) {
    size_t offset = 0;
    for (int i = 0; i < index; i++) {
        assert_true(offset + 8 <= size);
        uint64_t length = 0;
        for (int b = 7; b >= 0; b--) length = (length << 8) | bytes[offset + b];
        offset += 12 + (size_t)length + 4;
    }
    return offset;
}

// Reads path to its end or first error; returns the number of events read.
static int count_events(const char *path, int *last_status, ErrorMessage *err) {
    TbReader *reader = NULL;
    assert_int_equal(tb_reader_open(&reader, path, err), 0);
    TbEvent event;
    int count = 0;
    while ((*last_status = tb_reader_next(reader, &event, err)) == 1) count++;
    if (*last_status == -1) {  // stays stopped
        ErrorMessage again = {{0}};
        assert_int_equal(tb_reader_next(reader, &event, &again), -1);
    }
    tb_reader_close(reader);
    return count;
}

static void test_reader_stops_at_corrupt_record(void **state) {
    (void)state;
    char dir[128], path[512], broken[512];
    fixture_temp_path(dir, sizeof dir, "run-corrupt");
    write_test_run(dir, path, sizeof path);
    fixture_temp_path(broken, sizeof broken, "broken.tfevents");
    size_t size;
    uint8_t *original = read_whole_file(path, &size);
    uint8_t *bytes = malloc(size);
    assert_non_null(bytes);
    const int total = 1 + 12 + 7 + 3 + 1;
    int status;
    ErrorMessage err = {{0}};

    // Unmodified copy: every record.
    write_whole_file(broken, original, size);
    assert_int_equal(count_events(broken, &status, &err), total);
    assert_int_equal(status, 0);

    // One flipped bit in record 5's data: records 0..4 read, then a data CRC error.
    memcpy(bytes, original, size);
    bytes[record_offset(bytes, size, 5) + 12 + 3] ^= 0x10;
    write_whole_file(broken, bytes, size);
    assert_int_equal(count_events(broken, &status, &err), 5);
    assert_int_equal(status, -1);
    assert_non_null(strstr(err.text, "record 5"));
    assert_non_null(strstr(err.text, "data CRC mismatch"));

    // A flipped bit in record 9's length: the length CRC catches it.
    memcpy(bytes, original, size);
    bytes[record_offset(bytes, size, 9) + 1] ^= 0x01;
    write_whole_file(broken, bytes, size);
    assert_int_equal(count_events(broken, &status, &err), 9);
    assert_int_equal(status, -1);
    assert_non_null(strstr(err.text, "length CRC mismatch"));

    // Truncated in the middle of the last record.
    write_whole_file(broken, original, size - 3);
    assert_int_equal(count_events(broken, &status, &err), total - 1);
    assert_int_equal(status, -1);
    assert_non_null(strstr(err.text, "truncated"));
    free(bytes);
    free(original);
}

// ---- file name and errors ----------------------------------------------------------

static void test_file_name_pattern(void **state) {
    (void)state;
    char dir[128];
    fixture_temp_path(dir, sizeof dir, "run-names");
    ErrorMessage err = {{0}};
    TbWriter *first = NULL, *second = NULL;
    assert_int_equal(tb_writer_open(&first, dir, &err), 0);
    assert_int_equal(tb_writer_open(&second, dir, &err), 0);
    char hostname[256] = {0};
    assert_int_equal(gethostname(hostname, sizeof hostname - 1), 0);
    char pattern[512];
    snprintf(pattern, sizeof pattern, "^%s/events\\.out\\.tfevents\\.[0-9]{10}\\.%s\\.%ld\\.[0-9]+$", dir,
             hostname, (long)getpid());
    regex_t regex;
    assert_int_equal(regcomp(&regex, pattern, REG_EXTENDED | REG_NOSUB), 0);
    assert_int_equal(regexec(&regex, tb_writer_path(first), 0, NULL, 0), 0);
    assert_int_equal(regexec(&regex, tb_writer_path(second), 0, NULL, 0), 0);
    regfree(&regex);
    // Same process, maybe the same second: the second never overwrites the first.
    assert_string_not_equal(tb_writer_path(first), tb_writer_path(second));
    const char *suffix = strrchr(tb_writer_path(first), '.');
    assert_string_equal(suffix, ".0");
    // The 10 digits are the current time (within a minute).
    long long seconds = atoll(strstr(tb_writer_path(first), "tfevents.") + 9);
    assert_true(llabs(seconds - (long long)time(NULL)) < 60);
    assert_int_equal(tb_writer_close(first, &err), 0);
    assert_int_equal(tb_writer_close(second, &err), 0);
}

static void test_unwritable_directory(void **state) {
    (void)state;
    char file_path[128], dir[160];
    fixture_temp_path(file_path, sizeof file_path, "not-a-directory");
    write_whole_file(file_path, (const uint8_t *)"x", 1);
    snprintf(dir, sizeof dir, "%s/run", file_path);  // parent is a regular file
    ErrorMessage err = {{0}};
    TbWriter *writer = (TbWriter *)&err;  // must be reset to NULL on failure
    assert_int_equal(tb_writer_open(&writer, dir, &err), -1);
    assert_null(writer);
    assert_non_null(strstr(err.text, dir));
    assert_non_null(strstr(err.text, "Not a directory"));
}

// RLIMIT_FSIZE stands in for a full disk: writes past it fail with EFBIG.
static void test_write_error_is_reported(void **state) {
    (void)state;
    char dir[128];
    fixture_temp_path(dir, sizeof dir, "run-full");
    ErrorMessage err = {{0}};
    TbWriter *writer = NULL;
    assert_int_equal(tb_writer_open(&writer, dir, &err), 0);
    enum { SIDE = 96 };
    uint8_t *noise = malloc(SIDE * SIDE * 3);  // incompressible: PNG > 4 KiB
    assert_non_null(noise);
    uint32_t state_bits = 12345;
    for (int i = 0; i < SIDE * SIDE * 3; i++) {
        state_bits = state_bits * 1664525u + 1013904223u;
        noise[i] = (uint8_t)(state_bits >> 24);
    }
    struct rlimit saved, limited;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &saved), 0);
    limited = saved;
    limited.rlim_cur = 4096;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &limited), 0);
    int status = tb_add_image(writer, "noise", 0, SIDE, SIDE, noise, &err);
    if (status == 0) status = tb_flush(writer, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &saved), 0);
    signal(SIGXFSZ, old_handler);
    assert_int_equal(status, -1);
    assert_non_null(strstr(err.text, "File too large"));
    assert_non_null(strstr(err.text, tb_writer_path(writer)));
    // The writer refuses more records after a failed write.
    assert_int_equal(tb_add_scalar(writer, "loss", 1, 1.0f, &err), -1);
    assert_non_null(strstr(err.text, "earlier write failed"));
    assert_int_equal(tb_writer_close(writer, &err), 0);
    free(noise);
}

// ---- metrics.jsonl -----------------------------------------------------------------

// Strict parser for the lines metrics_jsonl writes: {"step": N, "k": v, ...}
// with v a number or null; keys may hold \" and \\ escapes. Returns the
// number of tag/value pairs, or -1 for anything malformed.
static int parse_metrics_line(const char *line, long long *step, char keys[][64], double *values,
                              int max_pairs) {
    const char *p = line;
    int consumed = 0;
    if (sscanf(p, "{\"step\": %lld%n", step, &consumed) != 1 || consumed == 0) return -1;
    p += consumed;
    int pairs = 0;
    while (*p == ',') {
        if (pairs == max_pairs || strncmp(p, ", \"", 3) != 0) return -1;
        p += 3;
        int k = 0;
        while (*p != '"') {
            if (*p == '\0' || k == 63) return -1;
            if (*p == '\\') {
                p++;
                if (*p != '"' && *p != '\\') return -1;
            }
            keys[pairs][k++] = *p++;
        }
        keys[pairs][k] = '\0';
        p++;
        if (strncmp(p, ": ", 2) != 0) return -1;
        p += 2;
        if (strncmp(p, "null", 4) == 0) {
            values[pairs] = NAN;
            p += 4;
        } else {
            char *end;
            values[pairs] = strtod(p, &end);
            if (end == p) return -1;
            p = end;
        }
        pairs++;
    }
    return strcmp(p, "}\n") == 0 ? pairs : -1;
}

static void test_metrics_jsonl(void **state) {
    (void)state;
    char path[128];
    fixture_temp_path(path, sizeof path, "metrics.jsonl");
    ErrorMessage err = {{0}};
    MetricsJsonl *metrics = NULL;
    assert_int_equal(metrics_jsonl_open(&metrics, path, false, &err), 0);
    const char *const tags[3] = {"train_loss", "lr", "odd \"tag\\"};
    for (int step = 0; step < 4; step++) {
        double values[3] = {1.0 / (step + 3), 0.1 * step, step == 2 ? NAN : -1e-30 * step};
        assert_int_equal(metrics_jsonl_write(metrics, step * 5, tags, values, 3, &err), 0);
    }
    // Flushed per line: readable before close.
    FILE *file = fopen(path, "r");
    assert_non_null(file);
    char line[512];
    int lines = 0;
    while (fgets(line, sizeof line, file)) {
        long long step;
        char keys[4][64];
        double values[4];
        assert_int_equal(parse_metrics_line(line, &step, keys, values, 4), 3);
        assert_int_equal(step, lines * 5);
        for (int i = 0; i < 3; i++) assert_string_equal(keys[i], tags[i]);
        // 17 significant digits: the same double comes back, exactly.
        assert_true(values[0] == 1.0 / (lines + 3));
        assert_true(values[1] == 0.1 * lines);
        if (lines == 2) {
            assert_true(isnan(values[2]));  // NaN written as null
        } else {
            assert_true(values[2] == -1e-30 * lines);
        }
        lines++;
    }
    fclose(file);
    assert_int_equal(lines, 4);
    assert_int_equal(metrics_jsonl_close(metrics, &err), 0);

    // Appending keeps the old lines.
    assert_int_equal(metrics_jsonl_open(&metrics, path, true, &err), 0);
    double one = 1.0;
    assert_int_equal(metrics_jsonl_write(metrics, 20, tags, &one, 1, &err), 0);
    assert_int_equal(metrics_jsonl_close(metrics, &err), 0);
    size_t size;
    uint8_t *bytes = read_whole_file(path, &size);
    int newlines = 0;
    for (size_t i = 0; i < size; i++) newlines += bytes[i] == '\n';
    assert_int_equal(newlines, 5);
    assert_non_null(strstr((const char *)bytes, "{\"step\": 20, \"train_loss\": 1}\n"));
    free(bytes);
}

static void test_metrics_jsonl_disk_full(void **state) {
    (void)state;
    ErrorMessage err = {{0}};
    MetricsJsonl *metrics = NULL;
    assert_int_equal(metrics_jsonl_open(&metrics, "/dev/full", false, &err), 0);
    const char *tag = "loss";
    double value = 1.5;
    assert_int_equal(metrics_jsonl_write(metrics, 0, &tag, &value, 1, &err), -1);
    assert_non_null(strstr(err.text, "/dev/full"));
    assert_non_null(strstr(err.text, "No space left"));
    metrics_jsonl_close(metrics, &err);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_check_values),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_reader_stops_at_corrupt_record),
        cmocka_unit_test(test_file_name_pattern),
        cmocka_unit_test(test_unwritable_directory),
        cmocka_unit_test(test_write_error_is_reported),
        cmocka_unit_test(test_metrics_jsonl),
        cmocka_unit_test(test_metrics_jsonl_disk_full),
    };
    return cmocka_run_group_tests(tests, fixture_tempdir_setup, fixture_tempdir_teardown);
}
