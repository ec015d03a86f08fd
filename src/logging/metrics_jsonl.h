// metrics.jsonl: one JSON object per logged step, {"step": N, "tag": value,
// ...}, each line written and flushed at once so a crash loses at most the
// line being written and `tail -f` / scripts see progress live. Values are
// printed with 17 significant digits (they read back as the same double);
// NaN and infinities, which JSON lacks, are written as null.
#ifndef LTC_LOGGING_METRICS_JSONL_H
#define LTC_LOGGING_METRICS_JSONL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

typedef struct MetricsJsonl MetricsJsonl;

// append: keep existing lines (a resumed run); otherwise the file is
// truncated.
int metrics_jsonl_open(MetricsJsonl **metrics, const char *path, bool append, ErrorMessage *err);

// tags: (count) names, JSON-escaped on output; values: (count).
int metrics_jsonl_write(MetricsJsonl *metrics, int64_t step, const char *const *tags,
                        const double *values, size_t count, ErrorMessage *err);

// metrics may be NULL. Returns -1 when closing failed (freed either way).
int metrics_jsonl_close(MetricsJsonl *metrics, ErrorMessage *err);

#endif
