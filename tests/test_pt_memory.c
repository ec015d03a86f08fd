// The .pt reader's memory against hostile and large files
// (src/weights/pt_reader.h, "Memory"): a 1 MB zip whose storage entry
// inflates to 1 GiB of zeros is refused from its declared sizes before
// anything is allocated or inflated (it used to be read, with 2 GiB of
// memory: the output and a scratch copy of the storage); a storage within
// the budget is inflated straight into its tensor, without a scratch copy.
// Memory is measured as the growth of this process's peak resident set
// (getrusage), so the tests run in their own binary, the smallest first.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "image_fixtures.h"
#include "nn/safetensors.h"
#include "pickle_builder.h"
#include "weights/pt_reader.h"
#include "weights/weight_file.h"

#define MIB (1ull << 20)

static uint64_t peak_resident_bytes(void) {
    struct rusage usage;
    assert_int_equal(getrusage(RUSAGE_SELF, &usage), 0);
    return (uint64_t)usage.ru_maxrss * 1024;  // kB on Linux
}

// A zip holding one F32 tensor "w" whose storage is `zero_bytes` deflated
// zeros; returns the file's size.
static size_t write_zeros(const char *path, uint64_t zero_bytes) {
    PickleBytes pickle = {0};
    const int64_t numel = (int64_t)(zero_bytes / sizeof(float));
    pickle_state_dict(&pickle, &(PickleTensor){"w", numel, 0, 1, {numel}, {1}});
    return pickle_write_zeros_zip(path, &pickle, zero_bytes);
}

// weight_file_read (the front door every consumer takes) of the file at
// path, then removes it; *grown: how much the peak resident set grew
// meanwhile.
static int read_measured(const char *path, SafeTensors *out, ErrorMessage *err, uint64_t *grown) {
    const uint64_t before = peak_resident_bytes();
    const int status = weight_file_read(path, out, err);
    *grown = peak_resident_bytes() - before;
    unlink(path);
    return status;
}

// A zip of `zero_bytes` deflated zeros is refused; *size gets the file's
// size, *grown the growth of the peak memory while it was read.
static void assert_zeros_refused(const char *name, uint64_t zero_bytes, size_t *size,
                                 uint64_t *grown, ErrorMessage *err) {
    char path[256];
    fixture_temp_path(path, sizeof path, name);
    *size = write_zeros(path, zero_bytes);
    SafeTensors out;
    if (read_measured(path, &out, err, grown) == 0) {
        safetensors_free(&out);
        fail_msg("%llu MiB from a %zu-byte file were read (peak memory +%llu MiB)",
                 (unsigned long long)(zero_bytes / MIB), *size, (unsigned long long)(*grown / MIB));
    }
    if (strchr(err->text, '\n')) fail_msg("not one line: %s", err->text);
}

static void test_deflate_bomb_refused_before_inflating(void **state) {
    (void)state;
    size_t size = 0;
    uint64_t grown = 0;
    ErrorMessage err = {{0}};
    assert_zeros_refused("bomb.pt", 1024 * MIB, &size, &grown, &err);
    assert_true(size < 2 * MIB);
    char expected[200];
    snprintf(expected, sizeof expected, "its storages hold 1073741824 bytes once inflated, from "
             "a file of %zu bytes (at most %dx the file's size + 64 MiB: refused before "
             "inflating anything)", size, PT_MAX_INFLATION);
    if (!strstr(err.text, expected)) fail_msg("%s", err.text);
    if (grown > 16 * MIB)
        fail_msg("peak memory grew by %llu MiB", (unsigned long long)(grown / MIB));
}

// Within the budget (PT_INFLATION_SLACK: zeros compress ~1000x), 48 MiB of
// deflated zeros read, using the output's 48 MiB and no scratch copy of them
// (before, the storage was inflated into a scratch buffer and copied: 96).
static void test_storage_inflated_into_its_tensor(void **state) {
    (void)state;
    char path[256];
    fixture_temp_path(path, sizeof path, "zeros.pt");
    const uint64_t bytes = 48 * MIB;
    write_zeros(path, bytes);
    SafeTensors out;
    ErrorMessage err = {{0}};
    uint64_t grown = 0;
    const int status = read_measured(path, &out, &err, &grown);
    if (status != 0) fail_msg("%s", err.text);
    assert_int_equal(out.count, 1);
    assert_int_equal(out.tensors[0].size, bytes);
    const uint8_t *data = safetensors_data(&out, &out.tensors[0]);
    for (uint64_t i = 0; i < bytes; i += 4096) assert_int_equal(data[i], 0);
    safetensors_free(&out);
    if (grown > bytes + bytes / 4)
        fail_msg("reading %llu MiB grew the peak memory by %llu MiB",
                 (unsigned long long)(bytes / MIB), (unsigned long long)(grown / MIB));
}

// Past the budget by a little: a file of ~100 kB may inflate to 64 MiB +
// 16x its size, not to 80 MiB.
static void test_budget_boundary(void **state) {
    (void)state;
    size_t size = 0;
    uint64_t grown = 0;
    ErrorMessage err = {{0}};
    assert_zeros_refused("over.pt", 80 * MIB, &size, &grown, &err);
    assert_true(PT_MAX_INFLATION * size + PT_INFLATION_SLACK < 80 * MIB);
    if (!strstr(err.text, "refused before inflating anything")) fail_msg("%s", err.text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_storage_inflated_into_its_tensor),
        cmocka_unit_test(test_budget_boundary),
        cmocka_unit_test(test_deflate_bomb_refused_before_inflating),
    };
    return cmocka_run_group_tests_name("pt memory", tests, fixture_tempdir_setup,
                                       fixture_tempdir_teardown);
}
