// The file of cuDNN's convolution algorithm choices (backend/conv_algorithms.h):
// a choice stored is found again, the first line of a key counts, torn
// lines are skipped, "off" keeps no file; and the cuda backend's plans use
// it (group cuda: on the GPU and the CUDA emulation): the first plan of a
// shape searches and appends one line, a second plan of the shape, in this
// process as in another, reads it instead of searching; the search keeps
// the deterministic algorithm unless LTC_CUDNN_DETERMINISTIC=0.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/conv_algorithms.h"
#include "method_fixture.h"

static char path[] = "/tmp/ltc-conv-algorithms-XXXXXX";

// The group's file name, once.
static int name_file(void **state) {
    const int fd = mkstemp(path);
    if (fd < 0) return -1;
    close(fd);
    return 0;
}

static int make_file(void **state) {
    unlink(path);  // each test starts without the file
    setenv("LTC_CUDNN_ALGORITHMS", path, 1);
    return 0;
}

static int remove_file(void **state) {
    unlink(path);
    unsetenv("LTC_CUDNN_ALGORITHMS");
    return 0;
}

static int count_lines(void) {
    FILE *file = fopen(path, "r");
    if (!file) return 0;
    int lines = 0;
    for (int c; (c = fgetc(file)) != EOF;) lines += c == '\n';
    fclose(file);
    return lines;
}

static void append(const char *text) {
    FILE *file = fopen(path, "a");
    assert_non_null(file);
    fputs(text, file);
    fclose(file);
}

static void test_store_then_lookup(void **state) {
    ConvAlgorithms found;
    assert_int_equal(conv_algorithms_lookup("gpu|shape", &found), 0);  // no file yet
    const ConvAlgorithms chosen = {.forward = 1, .backward_data = 4, .backward_filter = 3,
                                   .forward_bytes = 4096, .data_bytes = 0,
                                   .filter_bytes = (size_t)5 << 30, .nondeterministic = 0};
    conv_algorithms_store("gpu|shape", &chosen);
    assert_int_equal(count_lines(), 1);
    assert_int_equal(conv_algorithms_lookup("gpu|shape", &found), 1);
    assert_int_equal(found.forward, 1);
    assert_int_equal(found.backward_data, 4);
    assert_int_equal(found.backward_filter, 3);
    assert_int_equal(found.forward_bytes, 4096);
    assert_int_equal(found.data_bytes, 0);
    assert_int_equal(found.filter_bytes, (size_t)5 << 30);
    assert_int_equal(found.nondeterministic, 0);
    // a key that is a prefix of the stored one is another key
    assert_int_equal(conv_algorithms_lookup("gpu|sha", &found), 0);
}

static void test_first_line_wins_and_torn_lines_skipped(void **state) {
    append("k\t1 0 1\n");                    // torn: too few numbers
    append("k\t2 256 0 0 6 512 0\n");         // the first whole line of k
    append("k\t7 0 7 0 7 0 1\n");             // a later process's: not read
    ConvAlgorithms found;
    assert_int_equal(conv_algorithms_lookup("k", &found), 1);
    assert_int_equal(found.forward, 2);
    assert_int_equal(found.forward_bytes, 256);
    assert_int_equal(found.backward_filter, 6);
    assert_int_equal(found.filter_bytes, 512);
    append("bad\t-1 0 0 0 0 0 0\n");  // no algorithm is negative
    assert_int_equal(conv_algorithms_lookup("bad", &found), 0);
}

static void test_off_keeps_no_file(void **state) {
    setenv("LTC_CUDNN_ALGORITHMS", "off", 1);
    char where[64];
    assert_int_equal(conv_algorithms_path(where, sizeof where), 0);
    const ConvAlgorithms chosen = {0};
    conv_algorithms_store("key", &chosen);
    ConvAlgorithms found;
    assert_int_equal(conv_algorithms_lookup("key", &found), 0);
    setenv("LTC_CUDNN_ALGORITHMS", path, 1);
    assert_int_equal(count_lines(), 0);
}

static void first_line(char *line, size_t size) {
    FILE *file = fopen(path, "r");
    assert_non_null(file);
    assert_non_null(fgets(line, (int)size, file));
    fclose(file);
}

// The numbers of the file's first line: the three algorithms, their
// workspace bytes, the non-deterministic flag; the key is copied to key.
typedef struct {
    char key[400];
    int forward, data, filter, nondeterministic;
    long long forward_bytes, data_bytes, filter_bytes;
} StoredLine;

static StoredLine first_stored(void) {
    char line[512];
    first_line(line, sizeof line);
    StoredLine stored;
    if (sscanf(line, "%399[^\t]\t%d %lld %d %lld %d %lld %d", stored.key, &stored.forward,
               &stored.forward_bytes, &stored.data, &stored.data_bytes, &stored.filter,
               &stored.filter_bytes, &stored.nondeterministic) != 8)
        fail_msg("not a line of the file: %s", line);
    return stored;
}

// The emulation's cuDNN search offers algorithm 1 (faster, not
// deterministic) before 0 (deterministic), with no workspace: there the
// picks are known exactly. A GPU's cuDNN offers its own algorithms.
static int emulated(const Backend *cuda) {
    return strstr(cuda->device, "CUDA emulation") != NULL;
}

static int plan_once(Backend *cuda, int height) {
    ErrorMessage err = {{0}};
    ConvShape shape;
    if (conv_shape_make(&shape, 2, height, height, 8, 16, 3, 1, 1, &err)) fail_msg("%s", err.text);
    ConvPlan *plan = cuda->op.conv2d_plan(cuda, &shape, &err);
    if (!plan) fail_msg("%s", err.text);
    cuda->op.conv2d_plan_free(cuda, plan);
    return count_lines();
}

static void test_cuda_plans_keep_their_choice(void **state) {
    Backend *cuda = method_fixture_backend("cuda", COMPUTE_F32);
    if (!cuda) skip();
    assert_int_equal(plan_once(cuda, 12), 1);  // searched, appended
    assert_int_equal(plan_once(cuda, 12), 1);  // read back: no second search
    assert_int_equal(plan_once(cuda, 10), 2);  // another shape
    backend_destroy(cuda);
    // Another backend (as another process would be) reads the same lines.
    cuda = method_fixture_backend("cuda", COMPUTE_F16);
    assert_non_null(cuda);
    const int emulation = emulated(cuda);
    // fp16 is another key; its plan also probes the convolution fused with
    // BatchNorm's statistics (cuda_conv_fusion.c) and keeps the outcome
    // under the key with "|conv-genstats" (sm80 and later: the lent GPUs and
    // the emulation), then its prologue graphs under "|conv-prologue" and,
    // where cuDNN gave those, the data gradient through them under
    // "|conv-dgrad-bn": five or six lines (six on the emulation), all read
    // back by the second plan
    setenv("LTC_CUDA_CONV_FUSION", "dgrad", 1);  // the prologues are asked for only
    const int lines = plan_once(cuda, 12);
    assert_true(lines >= 5 && lines <= 6);
    if (emulation) assert_int_equal(lines, 6);
    assert_int_equal(plan_once(cuda, 12), lines);
    unsetenv("LTC_CUDA_CONV_FUSION");
    backend_destroy(cuda);
    char probe[512];
    FILE *file = fopen(getenv("LTC_CUDNN_ALGORITHMS"), "r");
    assert_non_null(file);
    int probes = 0, prologue_probes = 0, data_probes = 0;
    while (fgets(probe, sizeof probe, file)) {
        probes += strstr(probe, "|fp16|") && strstr(probe, "|conv-genstats\t") != NULL;
        prologue_probes += strstr(probe, "|fp16|") && strstr(probe, "|conv-prologue\t") != NULL;
        data_probes += strstr(probe, "|fp16|") && strstr(probe, "|conv-dgrad-bn\t") != NULL;
    }
    fclose(file);
    assert_int_equal(probes, 1);
    assert_int_equal(prologue_probes, 1);
    assert_int_equal(data_probes, lines - 5);
    const StoredLine stored = first_stored();
    if (!strstr(stored.key, "|sm") || !strstr(stored.key, "|cudnn") || !strstr(stored.key, "|fp32|"))
        fail_msg("the key names no GPU, cuDNN or dtype: %s", stored.key);
    if (strstr(stored.key, "|any")) fail_msg("a default search stored under |any: %s", stored.key);
    // The deterministic algorithms are kept: in the emulation 0 over the
    // faster 1; on a GPU whichever cuDNN found, all three deterministic.
    assert_int_equal(stored.nondeterministic, 0);
    if (emulation) {
        assert_int_equal(stored.forward, 0);
        assert_int_equal(stored.data, 0);
        assert_int_equal(stored.filter, 0);
    }
}

// LTC_CUDNN_DETERMINISTIC=0: the fastest algorithm of any kind, under a key
// of its own ("|any"), so the two choices never mix.
static void test_cuda_any_algorithm(void **state) {
    Backend *cuda = method_fixture_backend("cuda", COMPUTE_F32);
    if (!cuda) skip();
    setenv("LTC_CUDNN_DETERMINISTIC", "0", 1);
    const int lines = plan_once(cuda, 12);
    unsetenv("LTC_CUDNN_DETERMINISTIC");
    assert_int_equal(lines, 1);
    const StoredLine stored = first_stored();
    const char *suffix = strstr(stored.key, "|any");
    if (!suffix || suffix[4] != '\0') fail_msg("not stored under |any: %s", stored.key);
    // The emulation's fastest are the non-deterministic 1s; on a GPU the
    // fastest may be deterministic or not.
    if (emulated(cuda)) {
        assert_int_equal(stored.forward, 1);
        assert_int_equal(stored.data, 1);
        assert_int_equal(stored.filter, 1);
        assert_int_equal(stored.nondeterministic, 1);
    }
    assert_int_equal(plan_once(cuda, 12), 2);  // deterministic again: another key, searched
    backend_destroy(cuda);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_store_then_lookup, make_file, remove_file),
        cmocka_unit_test_setup_teardown(test_first_line_wins_and_torn_lines_skipped, make_file,
                                        remove_file),
        cmocka_unit_test_setup_teardown(test_off_keeps_no_file, make_file, remove_file),
        cmocka_unit_test_setup_teardown(test_cuda_plans_keep_their_choice, make_file, remove_file),
        cmocka_unit_test_setup_teardown(test_cuda_any_algorithm, make_file, remove_file),
    };
    return cmocka_run_group_tests(tests, name_file, NULL);
}
