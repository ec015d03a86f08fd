// LightlyTrain's device_stats_monitor callback (Lightning's
// DeviceStatsMonitor): scalars of the machine logged with the step's, as
// DeviceStatsMonitor.on_train_batch_end/NAME.
//   cpu_percent       the CPU's use over all cores since the last sample (the
//                     first: since device_stats_init; none of /proc/stat's
//                     ticks since: the last value again), in percent
//                     (psutil.cpu_percent: /proc/stat's busy time, all but
//                     idle and iowait, over its total less the guest times)
//   cpu_vm_percent    memory in use, (MemTotal - MemAvailable) / MemTotal
//                     (psutil.virtual_memory().percent), from /proc/meminfo
//   cpu_swap_percent  swap in use, (SwapTotal - SwapFree) / SwapTotal; 0
//                     without swap (psutil.swap_memory().percent)
// and on a GPU the device memory the program holds (the backend's count of
// what it allocated, plans' workspace included: PyTorch's caching
// allocator's keys of the same names):
//   allocated_bytes.all.current, allocated_bytes.all.peak
// Lightning logs its CPU scalars on the CPU only unless cpu_stats says
// otherwise; the same rule here.
#ifndef LTC_LOGGING_DEVICE_STATS_H
#define LTC_LOGGING_DEVICE_STATS_H

#include <stddef.h>

#include "backend/backend.h"

enum { DEVICE_STATS_MAX = 5 };

typedef struct DeviceStats {
    int cpu;                        // the CPU's scalars
    const Backend *backend;         // device memory when its memory_counts op exists
    unsigned long long busy, total;  // /proc/stat's at the last sample
    double cpu_percent;             // the last cpu_percent
    char tags[DEVICE_STATS_MAX][96];
} DeviceStats;

// cpu_stats: -1 Lightning's None (the CPU's scalars when the backend has no
// device memory of its own), 0 or 1.
void device_stats_init(DeviceStats *stats, const Backend *backend, int cpu_stats);

// This moment's scalars into tags and values (at most DEVICE_STATS_MAX);
// their count. A /proc file that cannot be read leaves its scalars out.
int device_stats_sample(DeviceStats *stats, const char **tags, double *values);

// The parts of the /proc files (for tests): the first "cpu" line of
// /proc/stat as busy (all but idle and iowait) and total jiffies; 0 or -1.
int device_stats_cpu_times(const char *proc_stat, unsigned long long *busy,
                           unsigned long long *total);
// cpu_percent from /proc/stat's busy and total now, against the last
// sample's (which these become, unless no tick passed).
double device_stats_cpu_percent(DeviceStats *stats, unsigned long long busy,
                                unsigned long long total);
// /proc/meminfo's memory and swap in use, in percent; 0 or -1.
int device_stats_memory(const char *meminfo, double *vm_percent, double *swap_percent);

#endif
