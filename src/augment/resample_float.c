// Float weight tables and the two-pass float resampler (resample_float.h).
#include "augment/resample_float.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "augment/resample.h"

int float_table_reserve(FloatTable *table, int count, int max_taps) {
    if (count < 1 || max_taps < 1) return -1;
    size_t count_capacity = table->capacity_count;
    void *start = table->start, *taps = table->taps, *weights = table->weights,
         *row = table->row_scratch;
    const int status =
        resample_grow_array(&start, &count_capacity, (size_t)count, sizeof(int32_t),
                            &table->allocations) ||
        resample_grow_array(&taps, &table->capacity_count, (size_t)count, sizeof(int32_t),
                            &table->allocations) ||
        resample_grow_array(&weights, &table->capacity_weights, (size_t)count * (size_t)max_taps,
                            sizeof(float), &table->allocations) ||
        resample_grow_array(&row, &table->capacity_row, (size_t)max_taps, sizeof(double),
                            &table->allocations);
    table->start = start, table->taps = taps, table->weights = weights, table->row_scratch = row;
    if (status) return -1;
    table->count = count;
    table->stride = max_taps;
    return 0;
}

void float_table_set_row(FloatTable *table, int index, int start, int taps,
                         const double *weights) {
    float *row = table->weights + (size_t)index * (size_t)table->stride;
    double total = 0.0;
    for (int k = 0; k < taps; k++) total += weights[k];
    table->start[index] = start;
    if (!(total > 0.0)) {
        table->taps[index] = 1;
        row[0] = 1.0f;
        return;
    }
    table->taps[index] = taps;
    for (int k = 0; k < taps; k++) row[k] = (float)(weights[k] / total);
}

void float_table_free(FloatTable *table) {
    free(table->start);
    free(table->taps);
    free(table->weights);
    free(table->row_scratch);
    memset(table, 0, sizeof *table);
}

void float_buffer_free(FloatBuffer *buffer) {
    free(buffer->data);
    memset(buffer, 0, sizeof *buffer);
}

// Source positions [*first, *end) the table reads.
static void table_span(const FloatTable *table, int *first, int *end) {
    int low = INT_MAX, high = 0;
    for (int i = 0; i < table->count; i++) {
        if (table->start[i] < low) low = table->start[i];
        if (table->start[i] + table->taps[i] > high) high = table->start[i] + table->taps[i];
    }
    *first = low;
    *end = high;
}

int resample_float(const float *src, size_t src_stride, int src_channels, const uint8_t *map,
                   int out_channels, const FloatTable *columns, const FloatTable *rows,
                   FloatBuffer *buffer, float *dst, size_t dst_stride) {
    int first_row, end_row;
    table_span(rows, &first_row, &end_row);
    const size_t middle_stride = (size_t)columns->count * (size_t)out_channels;
    void *data = buffer->data;
    if (resample_grow_array(&data, &buffer->capacity, (size_t)(end_row - first_row) * middle_stride,
             sizeof(float), &buffer->allocations))
        return -1;
    buffer->data = data;
    float *middle = buffer->data;
    // Horizontal: every source row the rows table reads.
    for (int y = first_row; y < end_row; y++) {
        const float *in = src + (size_t)y * src_stride;
        float *out = middle + (size_t)(y - first_row) * middle_stride;
        for (int x = 0; x < columns->count; x++, out += out_channels) {
            const float *w = columns->weights + (size_t)x * (size_t)columns->stride;
            const float *pixel = in + (size_t)columns->start[x] * (size_t)src_channels;
            for (int k = 0; k < out_channels; k++) out[k] = 0.0f;
            for (int t = 0; t < columns->taps[x]; t++, pixel += src_channels)
                for (int k = 0; k < out_channels; k++) out[k] += w[t] * pixel[map[k]];
        }
    }
    // Vertical: into dst.
    for (int y = 0; y < rows->count; y++) {
        const float *w = rows->weights + (size_t)y * (size_t)rows->stride;
        const float *top = middle + (size_t)(rows->start[y] - first_row) * middle_stride;
        float *out = dst + (size_t)y * dst_stride;
        for (size_t i = 0; i < middle_stride; i++) {
            float sum = 0.0f;
            for (int t = 0; t < rows->taps[y]; t++) sum += w[t] * top[(size_t)t * middle_stride + i];
            out[i] = sum;
        }
    }
    return 0;
}
