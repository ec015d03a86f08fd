// End-of-run summary and bottleneck verdict (see run_summary.h).
//
// Why 20% and 5%: the loader prefetches batches in worker threads, so when it
// keeps up, the main loop only pays the hand-over of a ready batch (well
// under a few percent of a step) plus the first batches of the run, which are
// never ready in time. Below 5% waiting there is nothing left to win on the
// data side: compute is the limit. Above 20% the model sits idle at least a
// fifth of the time, so a faster input pipeline would speed the run up by
// 1.25x or more, which is worth acting on. In between both sides are close,
// and either change gives little; short runs land there from warm-up alone.
// LightlyTrain shows the same share (data_wait) on its progress bar.
#include "logging/run_summary.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "logging/progress.h"

static double data_share(const RunTotals *totals) {
    const double measured = totals->batch_seconds + totals->data_seconds;
    if (!(measured > 0)) return -1;  // nothing measured (also NaN)
    return totals->data_seconds / measured;
}

Bottleneck run_bottleneck(const RunTotals *totals) {
    const double share = data_share(totals);
    if (share < 0) return BOTTLENECK_BALANCED;
    if (share > RUN_SUMMARY_DATA_BOUND_SHARE) return BOTTLENECK_DATA;
    if (share < RUN_SUMMARY_COMPUTE_BOUND_SHARE) return BOTTLENECK_COMPUTE;
    return BOTTLENECK_BALANCED;
}

typedef struct TextBuffer {
    char *text;
    size_t size;
    size_t used;
} TextBuffer;

__attribute__((format(printf, 2, 3))) static void append(TextBuffer *out, const char *format,
                                                        ...) {
    if (out->size == 0 || out->used >= out->size - 1) return;
    va_list args;
    va_start(args, format);
    const int written = vsnprintf(out->text + out->used, out->size - out->used, format, args);
    va_end(args);
    if (written < 0) return;
    out->used += (size_t)written;
    if (out->used > out->size - 1) out->used = out->size - 1;
}

static int is_gpu(const RunTotals *totals) {
    return totals->device && strcmp(totals->device, "gpu") == 0;
}

static void append_advice(TextBuffer *out, const RunTotals *totals, int available_cores,
                          double share) {
    switch (run_bottleneck(totals)) {
    case BOTTLENECK_DATA:
        append(out,
               "  verdict         data-bound: the model waited for the next batch %.0f%% of "
               "the time.\n",
               100.0 * share);
        append(out, "                  try more workers (--num-workers, now %d; this machine has "
                    "%d cores)\n",
               totals->num_workers, available_cores);
        if (totals->num_workers + 1 >= available_cores)
            append(out, "                    (the workers already use every core: a machine "
                        "with more cores helps more)\n");
        append(out, "                  try faster storage / smaller images on disk (decoding "
                    "large files costs most)\n");
        break;
    case BOTTLENECK_COMPUTE:
        append(out,
               "  verdict         compute-bound: data was ready %.0f%% of the time; the "
               "input pipeline is not the limit.\n",
               share < 0 ? 100.0 : 100.0 * (1.0 - share));
        append(out, "                  try a larger batch if memory allows (--batch-size, now "
                    "%d)\n",
               totals->batch_size);
        if (is_gpu(totals)) {
            if (totals->precision && strcmp(totals->precision, "32-true") == 0)
                append(out, "                  try mixed precision (--precision 16-mixed / "
                            "bf16-mixed on GPU)\n");
        } else {
            append(out, "                  the run is limited by compute on the CPU: a GPU or "
                        "more cores would help\n");
        }
        break;
    case BOTTLENECK_BALANCED:
        if (share < 0)
            append(out, "  verdict         no step times were measured\n");
        else
            append(out,
                   "  verdict         balanced: compute and data loading are close (waited for "
                   "data %.0f%% of the time); neither alone limits the run.\n",
                   100.0 * share);
        break;
    }
}

void run_summary_format(const RunTotals *totals, int available_cores, char *buf, size_t size) {
    TextBuffer out = {buf, size, 0};
    if (size > 0) buf[0] = '\0';
    char wall[32];
    progress_format_duration(totals->wall_seconds, wall, sizeof wall);
    append(&out, "run summary\n");
    append(&out, "  total time      %s (%.1f s)\n", wall, totals->wall_seconds);
    append(&out, "  steps           %ld\n", totals->steps);
    if (totals->wall_seconds > 0)
        append(&out, "  images          %llu (%.1f images/s)\n",
               (unsigned long long)totals->images, (double)totals->images / totals->wall_seconds);
    else
        append(&out, "  images          %llu\n", (unsigned long long)totals->images);
    const double share = data_share(totals);
    if (share >= 0)
        append(&out, "  time split      compute %.0f%%, waiting for data %.0f%%\n",
               100.0 * (1.0 - share), 100.0 * share);
    append(&out, "  skipped files   %llu\n", (unsigned long long)totals->skipped_files);
    append(&out, "  setup           %s, %s precision, batch %d, %d workers\n",
           totals->device ? totals->device : "?", totals->precision ? totals->precision : "?",
           totals->batch_size, totals->num_workers);
    append_advice(&out, totals, available_cores, share);
}
