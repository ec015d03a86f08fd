// device_stats_monitor's scalars (logging/device_stats.h): /proc/stat's CPU
// times and /proc/meminfo's percentages as psutil computes them, from fixed
// text; Lightning's rule for which scalars a run logs (the CPU's on the CPU
// only unless cpu_stats says otherwise, device memory where the backend
// counts it); a live sample's names and ranges.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>
#include <time.h>

#include "logging/device_stats.h"

static void test_cpu_times(void **state) {
    (void)state;
    unsigned long long busy = 0, total = 0;
    // user nice system idle iowait irq softirq steal guest guest_nice
    assert_int_equal(device_stats_cpu_times("cpu  100 20 30 400 50 6 7 8 9 10\n"
                                            "cpu0 50 10 15 200 25 3 3 4 4 5\n",
                                            &busy, &total),
                     0);
    assert_int_equal(total, 621);  // the guest times are inside user and nice
    assert_int_equal(busy, 171);   // all but idle and iowait
    // an old kernel's four fields
    assert_int_equal(device_stats_cpu_times("cpu 1 2 3 4\n", &busy, &total), 0);
    assert_int_equal(total, 10);
    assert_int_equal(busy, 6);
    assert_int_equal(device_stats_cpu_times("cpu0 1 2 3 4\n", &busy, &total), -1);
    assert_int_equal(device_stats_cpu_times("intr 5\n", &busy, &total), -1);
    assert_int_equal(device_stats_cpu_times("cpu 1 2\n", &busy, &total), -1);
}

// Busy ticks over all ticks since the last sample; no tick since: the last
// value again (two steps' lines logged at once), not psutil's 0.
static void test_cpu_percent_between_samples(void **state) {
    (void)state;
    DeviceStats stats = {.busy = 100, .total = 1000};
    assert_true(device_stats_cpu_percent(&stats, 150, 1200) == 25.0);
    assert_true(device_stats_cpu_percent(&stats, 150, 1200) == 25.0);  // no tick
    assert_true(device_stats_cpu_percent(&stats, 250, 1300) == 100.0);
    assert_true(device_stats_cpu_percent(&stats, 250, 1400) == 0.0);
}

static void test_memory(void **state) {
    (void)state;
    double vm = -1, swap = -1;
    assert_int_equal(device_stats_memory("MemTotal:        1000 kB\nMemFree:          100 kB\n"
                                         "MemAvailable:     250 kB\nSwapTotal:        200 kB\n"
                                         "SwapFree:          50 kB\n",
                                         &vm, &swap),
                     0);
    assert_true(fabs(vm - 75.0) < 1e-12);
    assert_true(fabs(swap - 75.0) < 1e-12);
    // no swap: 0, as psutil's usage_percent of a zero total
    assert_int_equal(device_stats_memory("MemTotal: 400 kB\nMemAvailable: 300 kB\n"
                                         "SwapTotal: 0 kB\nSwapFree: 0 kB\n",
                                         &vm, &swap),
                     0);
    assert_true(fabs(vm - 25.0) < 1e-12);
    assert_true(swap == 0.0);
    // MemAvailable is the one that counts (not MemFree), and must be there
    assert_int_equal(device_stats_memory("MemTotal: 400 kB\nMemFree: 300 kB\n", &vm, &swap), -1);
    assert_int_equal(device_stats_memory("MemAvailable: 300 kB\n", &vm, &swap), -1);
}

static size_t fake_allocated = 3 << 20, fake_peak = 5 << 20;
static void fake_memory_counts(const Backend *backend, size_t *allocated, size_t *peak) {
    (void)backend;
    *allocated = fake_allocated;
    *peak = fake_peak;
}

static int sample(DeviceStats *stats, const char **tags, double *values) {
    memset(values, 0, DEVICE_STATS_MAX * sizeof *values);
    return device_stats_sample(stats, tags, values);
}

static void test_which_scalars(void **state) {
    (void)state;
    Backend host = {.name = "cpu"}, device = {.name = "cuda"};
    device.op.memory_counts = fake_memory_counts;
    DeviceStats stats;
    const char *tags[DEVICE_STATS_MAX];
    double values[DEVICE_STATS_MAX];
    // the CPU: its three by default
    device_stats_init(&stats, &host, -1);
    assert_int_equal(sample(&stats, tags, values), 3);
    assert_string_equal(tags[0], "DeviceStatsMonitor.on_train_batch_end/cpu_percent");
    assert_string_equal(tags[1], "DeviceStatsMonitor.on_train_batch_end/cpu_vm_percent");
    assert_string_equal(tags[2], "DeviceStatsMonitor.on_train_batch_end/cpu_swap_percent");
    for (int i = 0; i < 3; i++) assert_true(values[i] >= 0.0 && values[i] <= 100.0);
    assert_true(values[1] > 0.0);  // this process's memory is in use
    device_stats_init(&stats, &host, 0);  // cpu_stats=False
    assert_int_equal(sample(&stats, tags, values), 0);
    // a GPU: its memory by default, the CPU's too with cpu_stats=True
    device_stats_init(&stats, &device, -1);
    assert_int_equal(sample(&stats, tags, values), 2);
    assert_string_equal(tags[0], "DeviceStatsMonitor.on_train_batch_end/allocated_bytes.all.current");
    assert_string_equal(tags[1], "DeviceStatsMonitor.on_train_batch_end/allocated_bytes.all.peak");
    assert_true(values[0] == (double)(3 << 20) && values[1] == (double)(5 << 20));
    device_stats_init(&stats, &device, 1);
    assert_int_equal(sample(&stats, tags, values), 5);
    assert_string_equal(tags[3], "DeviceStatsMonitor.on_train_batch_end/allocated_bytes.all.current");
}

// Busy for a fifth of a second: the next sample's cpu_percent (since the
// last sample, all cores) is above 0.
static void test_cpu_percent_counts_since_the_last_sample(void **state) {
    (void)state;
    Backend host = {.name = "cpu"};
    DeviceStats stats;
    device_stats_init(&stats, &host, -1);
    const char *tags[DEVICE_STATS_MAX];
    double values[DEVICE_STATS_MAX];
    sample(&stats, tags, values);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    volatile double sink = 0;
    do {
        for (int i = 0; i < 100000; i++) sink += sqrt((double)i);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) * 1e-9 < 0.2);
    assert_int_equal(sample(&stats, tags, values), 3);
    if (!(values[0] > 0.0 && values[0] <= 100.0))
        fail_msg("cpu_percent after 0.2 s busy: %g", values[0]);

}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_times),
        cmocka_unit_test(test_cpu_percent_between_samples),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_which_scalars),
        cmocka_unit_test(test_cpu_percent_counts_since_the_last_sample),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
