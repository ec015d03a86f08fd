// metrics.jsonl writer: formats one step's values as a JSON object line.
#include "logging/metrics_jsonl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct MetricsJsonl {
    FILE *file;
    char *path;
};

int metrics_jsonl_open(MetricsJsonl **metrics_out, const char *path, bool append, ErrorMessage *err) {
    *metrics_out = NULL;
    MetricsJsonl *metrics = calloc(1, sizeof *metrics);
    if (!metrics || !(metrics->path = strdup(path))) {
        free(metrics);
        return error_set(err, "%s: out of memory for the metrics writer", path);
    }
    metrics->file = fopen(path, append ? "ab" : "wb");
    if (!metrics->file) {
        error_set(err, "cannot open metrics file %s: %s", path, strerror(errno));
        free(metrics->path);
        free(metrics);
        return -1;
    }
    *metrics_out = metrics;
    return 0;
}

// A JSON string literal: quotes, backslashes and control characters escaped.
static void write_json_string(FILE *file, const char *text) {
    fputc('"', file);
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"' || *c == '\\') {
            fputc('\\', file);
            fputc(*c, file);
        } else if (*c < 0x20) {
            fprintf(file, "\\u%04x", *c);
        } else {
            fputc(*c, file);
        }
    }
    fputc('"', file);
}

int metrics_jsonl_write(MetricsJsonl *metrics, int64_t step, const char *const *tags,
                        const double *values, size_t count, ErrorMessage *err) {
    FILE *file = metrics->file;
    fprintf(file, "{\"step\": %lld", (long long)step);
    for (size_t i = 0; i < count; i++) {
        fputs(", ", file);
        write_json_string(file, tags[i]);
        if (isfinite(values[i])) {
            fprintf(file, ": %.17g", values[i]);
        } else {
            fputs(": null", file);
        }
    }
    fputs("}\n", file);
    // stdio errors are sticky: one check after the flush covers every write.
    errno = 0;
    if (fflush(file) != 0 || ferror(file)) {
        int saved = errno;
        clearerr(file);
        return error_set(err, "%s: write failed: %s", metrics->path,
                         saved ? strerror(saved) : "stream error");
    }
    return 0;
}

int metrics_jsonl_close(MetricsJsonl *metrics, ErrorMessage *err) {
    if (!metrics) return 0;
    int status = 0;
    errno = 0;
    if (fclose(metrics->file) != 0)
        status = error_set(err, "%s: close failed: %s", metrics->path, strerror(errno));
    free(metrics->path);
    free(metrics);
    return status;
}
