// Separable resampling: weight tables, the scalar kernels and run-time
// dispatch (see resample.h; the AVX2 kernels are in resample_avx2.c).
#include "augment/resample.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/cpu.h"

#define WEIGHT_ONE (1 << RESAMPLE_WEIGHT_BITS)
#define VERTICAL_SHIFT (RESAMPLE_WEIGHT_BITS + RESAMPLE_EXTRA_BITS)

// Grows *array to hold `need` elements of `size` bytes; counts reallocations.
static int grow_array(void **array, size_t *capacity, size_t need, size_t size, int *allocations) {
    if (need <= *capacity) return 0;
    void *bigger = realloc(*array, need * size);
    if (!bigger) return -1;
    *array = bigger;
    *capacity = need;
    (*allocations)++;
    return 0;
}

int resample_table_reserve(ResampleTable *table, int count, int max_taps) {
    if (count < 1 || max_taps < 1) return -1;
    const int stride = (max_taps + 3) & ~3;
    if ((size_t)count > table->capacity_count) {
        int32_t *start = realloc(table->start, (size_t)count * sizeof *start);
        if (!start) return -1;
        table->start = start;
        int32_t *taps = realloc(table->taps, (size_t)count * sizeof *taps);
        if (!taps) return -1;
        table->taps = taps;
        table->capacity_count = (size_t)count;
        table->allocations += 2;
    }
    void *weights = table->weights, *row = table->row_scratch;
    if (grow_array(&weights, &table->capacity_weights, (size_t)count * (size_t)stride,
                   sizeof(int16_t), &table->allocations))
        return -1;
    table->weights = weights;
    if (grow_array(&row, &table->capacity_row, (size_t)stride, sizeof(double), &table->allocations))
        return -1;
    table->row_scratch = row;
    table->count = count;
    table->stride = stride;
    return 0;
}

void resample_table_set_row(ResampleTable *table, int index, int start, int count,
                            const double *weights) {
    int16_t *row = table->weights + (size_t)index * (size_t)table->stride;
    double total = 0.0;
    for (int k = 0; k < count; k++) total += weights[k];
    if (!(total > 0.0)) {  // degenerate (all zero): take the first source position
        for (int k = 0; k < table->stride; k++) row[k] = k == 0 ? WEIGHT_ONE : 0;
        table->start[index] = start;
        table->taps[index] = 1;
        return;
    }
    // Quantise the cumulative sum: each weight is off by less than one unit
    // and the errors do not pile up, and the last boundary is exactly 2^14.
    double cumulative = 0.0;
    int previous = 0;
    for (int k = 0; k < count; k++) {
        cumulative += weights[k];
        const int boundary =
            k == count - 1 ? WEIGHT_ONE : (int)lround(cumulative / total * WEIGHT_ONE);
        row[k] = (int16_t)(boundary - previous);
        previous = boundary;
    }
    int first = 0, last = count - 1;
    while (first < last && row[first] == 0) first++;
    while (last > first && row[last] == 0) last--;
    if (first > 0) memmove(row, row + first, (size_t)(last - first + 1) * sizeof *row);
    const int used = last - first + 1;
    for (int k = used; k < table->stride; k++) row[k] = 0;
    table->start[index] = start + first;
    table->taps[index] = used;
}

void resample_table_free(ResampleTable *table) {
    free(table->start);
    free(table->taps);
    free(table->weights);
    free(table->row_scratch);
    memset(table, 0, sizeof *table);
}

void resample_buffer_free(ResampleBuffer *buffer) {
    free(buffer->data);
    memset(buffer, 0, sizeof *buffer);
}

void resample_horizontal_scalar(const uint8_t *src, size_t src_stride, const uint8_t *src_end,
                                int rows, const ResampleTable *columns, uint16_t *dst,
                                size_t dst_stride) {
    const int round = 1 << (RESAMPLE_WEIGHT_BITS - RESAMPLE_EXTRA_BITS - 1);
    for (int r = 0; r < rows; r++) {
        const uint8_t *in = src + (size_t)r * src_stride;
        uint16_t *out = dst + (size_t)r * dst_stride;
        for (int x = 0; x < columns->count; x++) {
            const uint8_t *pixel = in + (size_t)columns->start[x] * 3;
            const int16_t *w = columns->weights + (size_t)x * (size_t)columns->stride;
            int32_t red = round, green = round, blue = round;
            for (int k = 0; k < columns->taps[x]; k++, pixel += 3) {
                red += w[k] * pixel[0];
                green += w[k] * pixel[1];
                blue += w[k] * pixel[2];
            }
            out[3 * x + 0] = (uint16_t)(red >> (RESAMPLE_WEIGHT_BITS - RESAMPLE_EXTRA_BITS));
            out[3 * x + 1] = (uint16_t)(green >> (RESAMPLE_WEIGHT_BITS - RESAMPLE_EXTRA_BITS));
            out[3 * x + 2] = (uint16_t)(blue >> (RESAMPLE_WEIGHT_BITS - RESAMPLE_EXTRA_BITS));
        }
    }
}

void resample_vertical_scalar(const uint16_t *src, size_t src_stride, int values,
                              const ResampleTable *rows, int first_row, uint8_t *dst,
                              size_t dst_stride) {
    for (int y = 0; y < rows->count; y++) {
        const uint16_t *top = src + (size_t)(rows->start[y] - first_row) * src_stride;
        const int16_t *w = rows->weights + (size_t)y * (size_t)rows->stride;
        const int taps = rows->taps[y];
        uint8_t *out = dst + (size_t)y * dst_stride;
        for (int i = 0; i < values; i++) {
            int32_t sum = 1 << (VERTICAL_SHIFT - 1);
            for (int k = 0; k < taps; k++) sum += w[k] * top[(size_t)k * src_stride + (size_t)i];
            const int32_t value = sum >> VERTICAL_SHIFT;
            out[i] = (uint8_t)(value < 0 ? 0 : value > 255 ? 255 : value);
        }
    }
}

void resample_horizontal(const uint8_t *src, size_t src_stride, const uint8_t *src_end, int rows,
                         const ResampleTable *columns, uint16_t *dst, size_t dst_stride) {
    if (cpu_has_avx2())
        resample_horizontal_avx2(src, src_stride, src_end, rows, columns, dst, dst_stride);
    else
        resample_horizontal_scalar(src, src_stride, src_end, rows, columns, dst, dst_stride);
}

void resample_vertical(const uint16_t *src, size_t src_stride, int values,
                       const ResampleTable *rows, int first_row, uint8_t *dst, size_t dst_stride) {
    if (cpu_has_avx2())
        resample_vertical_avx2(src, src_stride, values, rows, first_row, dst, dst_stride);
    else
        resample_vertical_scalar(src, src_stride, values, rows, first_row, dst, dst_stride);
}

int resample_separable(const uint8_t *src, size_t src_stride, const uint8_t *src_end,
                       const ResampleTable *columns, const ResampleTable *rows,
                       ResampleBuffer *buffer, uint8_t *dst, size_t dst_stride) {
    int first = INT_MAX, end = 0;
    for (int y = 0; y < rows->count; y++) {
        if (rows->start[y] < first) first = rows->start[y];
        if (rows->start[y] + rows->taps[y] > end) end = rows->start[y] + rows->taps[y];
    }
    const size_t row_values = (size_t)columns->count * 3;
    const size_t need = (size_t)(end - first) * row_values;
    void *data = buffer->data;
    if (grow_array(&data, &buffer->capacity, need, sizeof(uint16_t), &buffer->allocations))
        return -1;
    buffer->data = data;
    resample_horizontal(src + (size_t)first * src_stride, src_stride, src_end, end - first,
                        columns, buffer->data, row_values);
    resample_vertical(buffer->data, row_values, (int)row_values, rows, first, dst, dst_stride);
    return 0;
}
