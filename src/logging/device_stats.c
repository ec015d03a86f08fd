// device_stats_monitor's scalars (see device_stats.h).
#include "logging/device_stats.h"

#include <stdio.h>
#include <string.h>


static const char prefix[] = "DeviceStatsMonitor.on_train_batch_end/";

int device_stats_cpu_times(const char *proc_stat, unsigned long long *busy,
                           unsigned long long *total) {
    // user nice system idle iowait irq softirq steal (guest and guest_nice
    // are inside user and nice already)
    unsigned long long t[8] = {0};
    if (strncmp(proc_stat, "cpu ", 4) != 0 ||
        sscanf(proc_stat + 4, "%llu %llu %llu %llu %llu %llu %llu %llu", &t[0], &t[1], &t[2],
               &t[3], &t[4], &t[5], &t[6], &t[7]) < 4)
        return -1;
    *total = 0;
    for (int i = 0; i < 8; i++) *total += t[i];
    *busy = *total - t[3] - t[4];
    return 0;
}

// The value in kB of "NAME:" in /proc/meminfo's text; -1 when absent.
static double meminfo_value(const char *meminfo, const char *name) {
    const size_t length = strlen(name);
    for (const char *line = meminfo; line && *line; line = strchr(line, '\n')) {
        if (*line == '\n') line++;
        double kilobytes = 0;
        if (!strncmp(line, name, length) && line[length] == ':' &&
            sscanf(line + length + 1, "%lf", &kilobytes) == 1)
            return kilobytes;
    }
    return -1;
}

double device_stats_cpu_percent(DeviceStats *stats, unsigned long long busy,
                                unsigned long long total) {
    // No tick since the last sample (two steps' lines logged together, as
    // the loop reads a step's record after queueing the next): the last
    // value again, where psutil would say 0.
    const unsigned long long span = total - stats->total;
    if (span) {
        stats->cpu_percent = 100.0 * (double)(busy - stats->busy) / (double)span;
        stats->busy = busy;
        stats->total = total;
    }
    return stats->cpu_percent;
}

int device_stats_memory(const char *meminfo, double *vm_percent, double *swap_percent) {
    const double total = meminfo_value(meminfo, "MemTotal");
    const double available = meminfo_value(meminfo, "MemAvailable");
    const double swap_total = meminfo_value(meminfo, "SwapTotal");
    const double swap_free = meminfo_value(meminfo, "SwapFree");
    if (total <= 0 || available < 0) return -1;
    *vm_percent = 100.0 * (total - available) / total;
    *swap_percent = swap_total > 0 && swap_free >= 0 ? 100.0 * (swap_total - swap_free) / swap_total
                                                     : 0.0;
    return 0;
}

// The start of a /proc file (its size reads 0: read, not stat'ed) into
// text; 0 or -1.
static int read_proc(const char *path, char *text, size_t size) {
    FILE *file = fopen(path, "r");
    if (!file) return -1;
    const size_t got = fread(text, 1, size - 1, file);
    fclose(file);
    text[got] = '\0';
    return got ? 0 : -1;
}

// /proc/stat's CPU times now; 0 or -1.
static int read_cpu_times(unsigned long long *busy, unsigned long long *total) {
    char text[512];
    return read_proc("/proc/stat", text, sizeof text) ? -1
                                                      : device_stats_cpu_times(text, busy, total);
}

void device_stats_init(DeviceStats *stats, const Backend *backend, int cpu_stats) {
    memset(stats, 0, sizeof *stats);
    stats->backend = backend && backend->op.memory_counts ? backend : NULL;
    stats->cpu = cpu_stats < 0 ? stats->backend == NULL : cpu_stats;
    if (stats->cpu && read_cpu_times(&stats->busy, &stats->total)) stats->busy = stats->total = 0;
}

// Adds NAME = value with the prefix; the tag lives in stats.
static void add(DeviceStats *stats, const char *name, double value, const char **tags,
                double *values, int *count) {
    snprintf(stats->tags[*count], sizeof stats->tags[*count], "%s%s", prefix, name);
    tags[*count] = stats->tags[*count];
    values[(*count)++] = value;
}

int device_stats_sample(DeviceStats *stats, const char **tags, double *values) {
    int count = 0;
    unsigned long long busy = 0, total = 0;
    if (stats->cpu && read_cpu_times(&busy, &total) == 0) {
        add(stats, "cpu_percent", device_stats_cpu_percent(stats, busy, total), tags, values,
            &count);
    }
    char meminfo[8192];  // (SwapFree is within the first 1 kB)
    double vm = 0, swap = 0;
    if (stats->cpu && read_proc("/proc/meminfo", meminfo, sizeof meminfo) == 0 &&
        device_stats_memory(meminfo, &vm, &swap) == 0) {
        add(stats, "cpu_vm_percent", vm, tags, values, &count);
        add(stats, "cpu_swap_percent", swap, tags, values, &count);
    }
    if (stats->backend) {
        size_t allocated = 0, peak = 0;
        stats->backend->op.memory_counts(stats->backend, &allocated, &peak);
        add(stats, "allocated_bytes.all.current", (double)allocated, tags, values, &count);
        add(stats, "allocated_bytes.all.peak", (double)peak, tags, values, &count);
    }
    return count;
}
