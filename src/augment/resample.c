// Separable resampling: weight tables, the scalar kernels and run-time
// dispatch (see resample.h; the AVX2 kernels are in resample_avx2.c).
#include "augment/resample.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "util/cpu.h"

#define WEIGHT_ONE (1 << RESAMPLE_WEIGHT_BITS)
#define WIDEN_SHIFT (RESAMPLE_WEIGHT_BITS - RESAMPLE_EXTRA_BITS)  // u8 -> u16 passes
#define NARROW_SHIFT (RESAMPLE_WEIGHT_BITS + RESAMPLE_EXTRA_BITS)  // u16 -> u8 passes

static uint8_t clamp_u8(int32_t value) { return (uint8_t)(value < 0 ? 0 : value > 255 ? 255 : value); }

int resample_grow_array(void **array, size_t *capacity, size_t need, size_t size,
                        int *allocations) {
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
    if (resample_grow_array(&weights, &table->capacity_weights, (size_t)count * (size_t)stride,
                   sizeof(int16_t), &table->allocations))
        return -1;
    table->weights = weights;
    if (resample_grow_array(&row, &table->capacity_row, (size_t)stride, sizeof(double), &table->allocations))
        return -1;
    table->row_scratch = row;
    table->count = count;
    table->stride = stride;
    table->max_taps = 0;
    table->max_start = 0;
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
        if (table->max_taps < 1) table->max_taps = 1;
        if (table->max_start < start) table->max_start = start;
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
    if (table->max_taps < used) table->max_taps = used;
    if (table->max_start < start + first) table->max_start = start + first;
}

// Source positions [*first, *end) read by outputs [from, to).
static void span_of(const ResampleTable *table, int from, int to, int *first, int *end) {
    int low = INT_MAX, high = 0;
    for (int i = from; i < to; i++) {
        if (table->start[i] < low) low = table->start[i];
        if (table->start[i] + table->taps[i] > high) high = table->start[i] + table->taps[i];
    }
    *first = low;
    *end = high;
}

void resample_table_span(const ResampleTable *table, int *first, int *end) {
    span_of(table, 0, table->count, first, end);
}

// Outputs [from, from + count) of `table` as a table of their own (shares
// the arrays; nothing is allocated).
static ResampleTable table_band(const ResampleTable *table, int from, int count) {
    ResampleTable band = *table;
    band.count = count;
    band.start = table->start + from;
    band.taps = table->taps + from;
    band.weights = table->weights + (size_t)from * (size_t)table->stride;
    return band;
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
    const int round = 1 << (WIDEN_SHIFT - 1);
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
            out[3 * x + 0] = (uint16_t)(red >> WIDEN_SHIFT);
            out[3 * x + 1] = (uint16_t)(green >> WIDEN_SHIFT);
            out[3 * x + 2] = (uint16_t)(blue >> WIDEN_SHIFT);
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
            int32_t sum = 1 << (NARROW_SHIFT - 1);
            for (int k = 0; k < taps; k++) sum += w[k] * top[(size_t)k * src_stride + (size_t)i];
            out[i] = clamp_u8(sum >> NARROW_SHIFT);
        }
    }
}

void resample_vertical_widen_scalar(const uint8_t *src, size_t src_stride, int values,
                                    const ResampleTable *rows, int first_row, uint16_t *dst,
                                    size_t dst_stride) {
    for (int y = 0; y < rows->count; y++) {
        const uint8_t *top = src + (size_t)(rows->start[y] - first_row) * src_stride;
        const int16_t *w = rows->weights + (size_t)y * (size_t)rows->stride;
        const int taps = rows->taps[y];
        uint16_t *out = dst + (size_t)y * dst_stride;
        for (int i = 0; i < values; i++) {
            int32_t sum = 1 << (WIDEN_SHIFT - 1);
            for (int k = 0; k < taps; k++) sum += w[k] * top[(size_t)k * src_stride + (size_t)i];
            out[i] = (uint16_t)(sum >> WIDEN_SHIFT);
        }
    }
}

void resample_horizontal_narrow_scalar(const uint16_t *src, size_t src_stride,
                                       const uint16_t *src_end, int rows,
                                       const ResampleTable *columns, int first_column,
                                       uint8_t *dst, size_t dst_stride) {
    for (int r = 0; r < rows; r++) {
        const uint16_t *in = src + (size_t)r * src_stride;
        uint8_t *out = dst + (size_t)r * dst_stride;
        for (int x = 0; x < columns->count; x++) {
            const uint16_t *pixel = in + (size_t)(columns->start[x] - first_column) * 3;
            const int16_t *w = columns->weights + (size_t)x * (size_t)columns->stride;
            int32_t red = 1 << (NARROW_SHIFT - 1), green = red, blue = red;
            for (int k = 0; k < columns->taps[x]; k++, pixel += 3) {
                red += w[k] * pixel[0];
                green += w[k] * pixel[1];
                blue += w[k] * pixel[2];
            }
            out[3 * x + 0] = clamp_u8(red >> NARROW_SHIFT);
            out[3 * x + 1] = clamp_u8(green >> NARROW_SHIFT);
            out[3 * x + 2] = clamp_u8(blue >> NARROW_SHIFT);
        }
    }
}

void resample_horizontal(const uint8_t *src, size_t src_stride, const uint8_t *src_end, int rows,
                         const ResampleTable *columns, uint16_t *dst, size_t dst_stride) {
    (cpu_has_avx2() ? resample_horizontal_avx2 : resample_horizontal_scalar)(
        src, src_stride, src_end, rows, columns, dst, dst_stride);
}

void resample_vertical(const uint16_t *src, size_t src_stride, int values,
                       const ResampleTable *rows, int first_row, uint8_t *dst, size_t dst_stride) {
    (cpu_has_avx2() ? resample_vertical_avx2 : resample_vertical_scalar)(
        src, src_stride, values, rows, first_row, dst, dst_stride);
}

void resample_vertical_widen(const uint8_t *src, size_t src_stride, int values,
                             const ResampleTable *rows, int first_row, uint16_t *dst,
                             size_t dst_stride) {
    (cpu_has_avx2() ? resample_vertical_widen_avx2 : resample_vertical_widen_scalar)(
        src, src_stride, values, rows, first_row, dst, dst_stride);
}

void resample_horizontal_narrow(const uint16_t *src, size_t src_stride, const uint16_t *src_end,
                                int rows, const ResampleTable *columns, int first_column,
                                uint8_t *dst, size_t dst_stride) {
    (cpu_has_avx2() ? resample_horizontal_narrow_avx2 : resample_horizontal_narrow_scalar)(
        src, src_stride, src_end, rows, columns, first_column, dst, dst_stride);
}

// Cost of the kernels in ns (AVX2, banded, fitted to timings of both orders
// on 120..640 px crops to 224 px): a horizontal output pixel costs about
// HORIZONTAL_PIXEL + HORIZONTAL_PAIR per pair of taps, a vertical output value
// VERTICAL_VALUE + VERTICAL_TAP per tap.
#define HORIZONTAL_PIXEL 0.555
#define HORIZONTAL_PAIR 0.165
#define VERTICAL_VALUE 0.063
#define VERTICAL_TAP 0.056

static double mean_taps(const ResampleTable *table) {
    long total = 0;
    for (int i = 0; i < table->count; i++) total += table->taps[i];
    return (double)total / table->count;
}

ResampleOrder resample_pick_order(const ResampleTable *columns, const ResampleTable *rows) {
    int first_column, end_column, first_row, end_row;
    resample_table_span(columns, &first_column, &end_column);
    resample_table_span(rows, &first_row, &end_row);
    const double horizontal =
        HORIZONTAL_PIXEL + HORIZONTAL_PAIR * (double)((columns->max_taps + 1) / 2);
    const double vertical = 3.0 * (VERTICAL_VALUE + VERTICAL_TAP * mean_taps(rows));
    // Both orders filter rows->count x columns->count pixels in each pass; they
    // differ in the extra source rows (filtered horizontally) or extra source
    // columns (filtered vertically) that the intermediate holds.
    const double extra_rows = (double)(end_row - first_row - rows->count) * columns->count * horizontal;
    const double extra_columns = (double)(end_column - first_column - columns->count) * rows->count * vertical;
    return extra_columns < extra_rows ? RESAMPLE_VERTICAL_FIRST : RESAMPLE_HORIZONTAL_FIRST;
}

// Output rows per band: the intermediate of a band (a few source rows of
// output width, or BAND_ROWS rows of source width) stays in L1/L2 cache.
#define BAND_ROWS 8
// Elements after the intermediate that the horizontal u16 kernel may load
// (weight 0) so that no band takes the bounded loads; zeroed.
#define BUFFER_SLACK 16

// Largest number of source rows any band of `band` output rows reads.
static int band_source_rows(const ResampleTable *rows, int band) {
    int most = 0;
    for (int y = 0; y < rows->count; y += band) {
        int first, end;
        span_of(rows, y, y + band < rows->count ? y + band : rows->count, &first, &end);
        if (end - first > most) most = end - first;
    }
    return most;
}

int resample_separable_with(const uint8_t *src, size_t src_stride, const uint8_t *src_end,
                            const ResampleTable *columns, const ResampleTable *rows,
                            ResampleBuffer *buffer, uint8_t *dst, size_t dst_stride,
                            ResampleOrder order, int simd) {
    if (order == RESAMPLE_ORDER_AUTO) order = resample_pick_order(columns, rows);
    const uintptr_t dst_begin = (uintptr_t)dst, src_begin = (uintptr_t)src;
    const int in_place = dst_begin < (uintptr_t)src_end && src_begin < dst_begin + (size_t)rows->count * dst_stride;
    const int band = in_place ? rows->count : BAND_ROWS;
    int first_column, end_column;
    resample_table_span(columns, &first_column, &end_column);
    // Room for either order, so that the buffer stops growing once warm.
    const size_t out_values = (size_t)columns->count * 3;
    const size_t span_values = (size_t)(end_column - first_column) * 3;
    const size_t horizontal_first = (size_t)band_source_rows(rows, band) * out_values;
    const size_t vertical_first = (size_t)(band < rows->count ? band : rows->count) * span_values;
    const size_t need = (horizontal_first > vertical_first ? horizontal_first : vertical_first) + BUFFER_SLACK;
    void *data = buffer->data;
    if (resample_grow_array(&data, &buffer->capacity, need, sizeof(uint16_t), &buffer->allocations))
        return -1;
    buffer->data = data;
    uint16_t *middle = buffer->data;
    for (int y = 0; y < rows->count; y += band) {
        const int count = y + band < rows->count ? band : rows->count - y;
        const ResampleTable rows_band = table_band(rows, y, count);
        uint8_t *out = dst + (size_t)y * dst_stride;
        if (order == RESAMPLE_HORIZONTAL_FIRST) {
            int first_row, end_row;
            span_of(rows, y, y + count, &first_row, &end_row);
            (simd ? resample_horizontal_avx2 : resample_horizontal_scalar)(
                src + (size_t)first_row * src_stride, src_stride, src_end, end_row - first_row,
                columns, middle, out_values);
            (simd ? resample_vertical_avx2 : resample_vertical_scalar)(
                middle, out_values, (int)out_values, &rows_band, first_row, out, dst_stride);
        } else {
            const size_t used = (size_t)count * span_values;
            memset(middle + used, 0, BUFFER_SLACK * sizeof *middle);
            (simd ? resample_vertical_widen_avx2 : resample_vertical_widen_scalar)(
                src + (size_t)first_column * 3, src_stride, (int)span_values, &rows_band, 0, middle,
                span_values);
            (simd ? resample_horizontal_narrow_avx2 : resample_horizontal_narrow_scalar)(
                middle, span_values, middle + used + BUFFER_SLACK, count, columns, first_column,
                out, dst_stride);
        }
    }
    return 0;
}

int resample_separable(const uint8_t *src, size_t src_stride, const uint8_t *src_end,
                       const ResampleTable *columns, const ResampleTable *rows,
                       ResampleBuffer *buffer, uint8_t *dst, size_t dst_stride) {
    return resample_separable_with(src, src_stride, src_end, columns, rows, buffer, dst,
                                   dst_stride, RESAMPLE_ORDER_AUTO, cpu_has_avx2());
}
