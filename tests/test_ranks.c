// Tests of --devices parsing and of where a process runs (cli/ranks.h) on
// this machine: lists, counts and auto; bad lists name the problem; a GPU
// list on a CPU run and --accelerator gpu without a GPU are refused before
// anything starts; one CPU process is a world of one.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "cli/ranks.h"

static void test_device_spec(void **state) {
    (void)state;
    DeviceSpec spec;
    ErrorMessage err = {{0}};
    assert_int_equal(device_spec_parse("auto", &spec, &err), 0);
    assert_int_equal(spec.count, -1);
    assert_int_equal(spec.id_count, 0);
    assert_int_equal(device_spec_parse("3", &spec, &err), 0);
    assert_int_equal(spec.count, 3);
    assert_int_equal(spec.id_count, 0);
    assert_int_equal(device_spec_parse("2,0,5", &spec, &err), 0);
    assert_int_equal(spec.count, 3);
    assert_int_equal(spec.id_count, 3);
    assert_int_equal(spec.ids[0], 2);
    assert_int_equal(spec.ids[1], 0);
    assert_int_equal(spec.ids[2], 5);
    // A trailing comma makes a list: "1," is GPU 1 alone, not one device.
    assert_int_equal(device_spec_parse("1,", &spec, &err), 0);
    assert_int_equal(spec.count, 1);
    assert_int_equal(spec.id_count, 1);
    assert_int_equal(spec.ids[0], 1);
    assert_int_equal(device_spec_parse("0,", &spec, &err), 0);
    assert_int_equal(spec.id_count, 1);
    assert_int_equal(spec.ids[0], 0);
    assert_int_equal(device_spec_parse("0,3,", &spec, &err), 0);
    assert_int_equal(spec.id_count, 2);
    assert_int_equal(spec.ids[1], 3);
    const struct {
        const char *text, *message;
    } bad[] = {
        {"0", "expected auto, a count"}, {"-1", "expected auto"},   {"two", "expected auto"},
        {"1,1", "GPU 1 is listed twice"}, {"0,,1", "separated by commas"},
        {",", "separated by commas"},    {"0,x", "separated by commas"}, {"3a", "expected auto"},
        {"1,,", "separated by commas"},  {",1", "separated by commas"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err = (ErrorMessage){{0}};
        assert_int_equal(device_spec_parse(bad[i].text, &spec, &err), -1);
        assert_non_null(strstr(err.text, bad[i].message));
        assert_non_null(strstr(err.text, bad[i].text));
    }
}

static void test_cpu_process(void **state) {
    (void)state;
    RankPlace place;
    int status = -1;
    ErrorMessage err = {{0}};
    const RankRequest cpu = {.accelerator = "cpu", .devices = "auto", .num_nodes = -1,
                             .timeout_seconds = 10};
    assert_int_equal(ranks_start(&cpu, NULL, &place, &status, &err), RANKS_THIS_PROCESS);
    assert_string_equal(place.accelerator, "cpu");
    assert_int_equal(comm_world_size(place.dist.comm), 1);
    assert_int_equal(place.dist.devices, 1);
    comm_destroy(place.dist.comm);

    const RankRequest listed = {.accelerator = "cpu", .devices = "0,1", .num_nodes = -1,
                                .timeout_seconds = 10};
    assert_int_equal(ranks_start(&listed, NULL, &place, &status, &err), -1);
    assert_non_null(strstr(err.text, "--devices 0,1 names GPUs, but this run is on the CPU"));
}

static void test_gpu_without_gpu(void **state) {
    (void)state;
    char why[256];
    if (backend_gpu_count(why, sizeof why) > 0) skip();  // this machine has one
    RankPlace place;
    int status = -1;
    ErrorMessage err = {{0}};
    const RankRequest gpu = {.accelerator = "gpu", .devices = "2", .num_nodes = -1,
                             .timeout_seconds = 10};
    assert_int_equal(ranks_start(&gpu, NULL, &place, &status, &err), -1);
    assert_non_null(strstr(err.text, "--accelerator gpu: no usable GPU: "));
    // auto without a GPU is a CPU run.
    const RankRequest automatic = {.accelerator = "auto", .devices = "auto", .num_nodes = -1,
                                   .timeout_seconds = 10};
    assert_int_equal(ranks_start(&automatic, NULL, &place, &status, &err), RANKS_THIS_PROCESS);
    assert_string_equal(place.accelerator, "auto");
    comm_destroy(place.dist.comm);
}

// On a GPU machine: one GPU is this process, on GPU 0 (or the listed one);
// more devices than GPUs is refused before any worker starts.
static void test_gpu_process(void **state) {
    (void)state;
    char why[256];
    const int gpus = backend_gpu_count(why, sizeof why);
    if (gpus == 0) skip();
    RankPlace place;
    int status = -1;
    ErrorMessage err = {{0}};
    const RankRequest one = {.accelerator = "gpu", .devices = "1", .num_nodes = -1,
                             .timeout_seconds = 10};
    assert_int_equal(ranks_start(&one, NULL, &place, &status, &err), RANKS_THIS_PROCESS);
    assert_string_equal(place.accelerator, "gpu");
    assert_int_equal(place.gpu, 0);
    assert_int_equal(comm_world_size(place.dist.comm), 1);
    comm_destroy(place.dist.comm);
    char missing[32], too_many[16];
    snprintf(missing, sizeof missing, "0,%d", gpus);  // a list naming a GPU that is not there
    snprintf(too_many, sizeof too_many, "%d", gpus + 1);
    const RankRequest listed = {.accelerator = "gpu", .devices = missing, .num_nodes = -1,
                                .timeout_seconds = 10};
    assert_int_equal(ranks_start(&listed, NULL, &place, &status, &err), -1);
    assert_non_null(strstr(err.text, "does not exist"));
    const RankRequest excess = {.accelerator = "gpu", .devices = too_many, .num_nodes = -1,
                                .timeout_seconds = 10};
    assert_int_equal(ranks_start(&excess, NULL, &place, &status, &err), -1);
    assert_non_null(strstr(err.text, "GPU"));
    assert_non_null(strstr(err.text, "visible"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_spec),
        cmocka_unit_test(test_cpu_process),
        cmocka_unit_test(test_gpu_without_gpu),
        cmocka_unit_test(test_gpu_process),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
