// The end-of-run summary of `train`: totals, throughput, how the time split
// between computing and waiting for data, and a verdict on what limited the
// run with concrete advice. Pure functions of the numbers, so they are tested
// without running anything.
#ifndef LTC_LOGGING_RUN_SUMMARY_H
#define LTC_LOGGING_RUN_SUMMARY_H

#include <stddef.h>
#include <stdint.h>

typedef struct RunTotals {
    double wall_seconds;   // the whole training loop, end to end
    double batch_seconds;  // sum of batch_time (forward, backward, optimizer)
    double data_seconds;   // sum of data_time (the loop waiting for the next batch)
    long steps;
    uint64_t images;
    uint64_t skipped_files;  // unreadable / undecodable images skipped
    int num_workers;
    int batch_size;
    const char *precision;  // "32-true", "16-mixed", "bf16-mixed"
    const char *device;     // "cpu" or "gpu"
} RunTotals;

typedef enum Bottleneck { BOTTLENECK_DATA, BOTTLENECK_COMPUTE, BOTTLENECK_BALANCED } Bottleneck;

// Above this share of time spent waiting for data a run is data-bound, below
// RUN_SUMMARY_COMPUTE_BOUND_SHARE compute-bound (reasons in run_summary.c).
#define RUN_SUMMARY_DATA_BOUND_SHARE 0.20
#define RUN_SUMMARY_COMPUTE_BOUND_SHARE 0.05

// data share = data / (batch + data): > 0.20 data-bound, < 0.05
// compute-bound, else (and when no time was measured) balanced.
Bottleneck run_bottleneck(const RunTotals *totals);

// Multi-line text (ending in a newline) into buf, truncated to size.
// available_cores: what this process may use (cpu_usable_cores()).
void run_summary_format(const RunTotals *totals, int available_cores, char *buf, size_t size);

#endif
