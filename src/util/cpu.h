// What the CPU can do and how much of it this process may use.
#ifndef LTC_UTIL_CPU_H
#define LTC_UTIL_CPU_H

// 1 when AVX2 and FMA are usable (CPU support and OS state saving), unless the
// environment variable LTC_SIMD=scalar forces the portable code paths.
int cpu_has_avx2(void);

// Cores this process may use: the smallest of the CPU affinity mask, the
// cgroup CPU quota (v2 cpu.max, v1 cfs_quota/period, rounded up) and
// SLURM_CPUS_PER_TASK when set. At least 1.
int cpu_usable_cores(void);

// Default data-loader workers per device: (cores - devices) / devices, >= 1.
int cpu_default_workers(int cores, int devices);

// Seconds from a monotonic clock.
double time_now(void);

// Sleeps for about `seconds` (>= 0; interrupted sleeps are not resumed).
void sleep_seconds(double seconds);

#endif
