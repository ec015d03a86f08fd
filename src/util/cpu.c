// CPU features, usable cores and a monotonic clock (see cpu.h).
#include "util/cpu.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int cpu_has_avx2(void) {
    static int cached = -1;
    if (cached < 0) {
        const char *force = getenv("LTC_SIMD");
        if (force && strcmp(force, "scalar") == 0) {
            cached = 0;
        } else {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_cpu_init();
            cached = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
            cached = 0;
#endif
        }
    }
    return cached;
}

static int affinity_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
    return CPU_COUNT(&set);
}

// cgroup v2 "max 100000" / "200000 100000", or v1 quota and period files.
static int cgroup_quota_cores(void) {
    long long quota = -1, period = 0;
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    if (f) {
        char word[32];
        if (fscanf(f, "%31s %lld", word, &period) == 2 && strcmp(word, "max") != 0)
            quota = atoll(word);
        fclose(f);
    } else {
        f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "r");
        if (f) {
            if (fscanf(f, "%lld", &quota) != 1) quota = -1;
            fclose(f);
        }
        f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "r");
        if (f) {
            if (fscanf(f, "%lld", &period) != 1) period = 0;
            fclose(f);
        }
    }
    if (quota <= 0 || period <= 0) return 0;
    return (int)((quota + period - 1) / period);
}

int cpu_usable_cores(void) {
    int cores = affinity_cores();
    const int quota = cgroup_quota_cores();
    if (quota > 0 && (cores == 0 || quota < cores)) cores = quota;
    const char *slurm = getenv("SLURM_CPUS_PER_TASK");
    if (slurm) {
        const int slurm_cores = atoi(slurm);
        if (slurm_cores > 0 && (cores == 0 || slurm_cores < cores)) cores = slurm_cores;
    }
    return cores > 0 ? cores : 1;
}

int cpu_default_workers(int cores, int devices) {
    if (devices < 1) devices = 1;
    const int workers = (cores - devices) / devices;
    return workers > 0 ? workers : 1;
}

double time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void sleep_seconds(double seconds) {
    if (!(seconds > 0)) return;
    const time_t whole = (time_t)seconds;
    const struct timespec pause = {whole, (long)((seconds - (double)whole) * 1e9)};
    nanosleep(&pause, NULL);
}
