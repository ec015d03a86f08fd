// Separable resampling of 8-bit RGB images with precomputed fixed-point
// weight tables: the hot loops shared by resize (area / bilinear tables) and
// Gaussian blur (Gaussian tables with clamped edges folded in).
//
// A ResampleTable says, for every output position along one axis, which
// contiguous run of source positions it reads and with which weights. Weights
// are non-negative int16 in units of 1/2^14 and each row sums to exactly
// 2^14, so a constant image stays constant.
//
// Two passes through a u16 intermediate that keeps 7 extra fraction bits
// (value * 2^7), in either order:
//   horizontal first: horizontal u8 -> u16, then vertical u16 -> u8;
//   vertical first:   vertical u8 -> u16 ("widen"), then horizontal u16 -> u8
//                     ("narrow").
// The vertical kernels are several times cheaper per tap than the horizontal
// ones, so resample_separable filters horizontally after the axis that
// shrinks the row count most (see resample_pick_order). Every kernel has a
// plain scalar version and an AVX2 version computing the same integer sums,
// so the two agree bit for bit; the un-suffixed entry points pick one at run
// time through cpu_has_avx2().
#ifndef LTC_AUGMENT_RESAMPLE_H
#define LTC_AUGMENT_RESAMPLE_H

#include <stddef.h>
#include <stdint.h>

#define RESAMPLE_WEIGHT_BITS 14
#define RESAMPLE_EXTRA_BITS 7  // fraction bits kept in the u16 intermediate

typedef struct ResampleTable {
    int count;         // output positions described
    int stride;        // weights per output in `weights`, a multiple of 4
    int max_taps;      // at least the largest taps[] (raised by resample_table_set_row)
    int max_start;     // at least the largest start[] (likewise)
    int32_t *start;    // (count) first source position read
    int32_t *taps;     // (count) weights used, 1..stride
    int16_t *weights;  // (count, stride), zero padded after `taps`
    double *row_scratch;  // (max_taps) building space for one row
    size_t capacity_count, capacity_weights, capacity_row;
    int allocations;  // times any array above was (re)allocated
} ResampleTable;

// The u16 intermediate between the passes; grows, never shrinks.
typedef struct ResampleBuffer {
    uint16_t *data;
    size_t capacity;  // elements
    int allocations;
} ResampleBuffer;

typedef enum ResampleOrder {
    RESAMPLE_ORDER_AUTO,       // resample_pick_order decides
    RESAMPLE_HORIZONTAL_FIRST,
    RESAMPLE_VERTICAL_FIRST,
} ResampleOrder;

// Grows *array to hold `need` elements of `size` bytes (capacity in
// elements); counts reallocations in *allocations. -1 when out of memory.
int resample_grow_array(void **array, size_t *capacity, size_t need, size_t size,
                        int *allocations);

// Makes room for `count` outputs of up to `max_taps` weights; sets count and
// stride. Returns -1 when out of memory.
int resample_table_reserve(ResampleTable *table, int count, int max_taps);
// Sets output `index` from real-valued weights (table->row_scratch may be
// passed): normalised to sum 1, quantised on the cumulative sum so the fixed
// point weights sum to exactly 2^14, zero weights at both ends dropped.
// start + count must stay inside the source; count <= max_taps of reserve.
void resample_table_set_row(ResampleTable *table, int index, int start, int count,
                            const double *weights);
// The source positions the table reads: [*first, *end).
void resample_table_span(const ResampleTable *table, int *first, int *end);
void resample_table_free(ResampleTable *table);
void resample_buffer_free(ResampleBuffer *buffer);

// Horizontal pass u8 -> u16 over `rows` rows. src: row r at src + r *
// src_stride, RGB u8; src_end: one past the last readable byte (never read
// beyond). dst: row r at dst + r * dst_stride (elements), (columns->count *
// 3) u16, each = round(sum of weight * pixel / 2^7).
void resample_horizontal(const uint8_t *src, size_t src_stride, const uint8_t *src_end, int rows,
                         const ResampleTable *columns, uint16_t *dst, size_t dst_stride);
void resample_horizontal_scalar(const uint8_t *src, size_t src_stride, const uint8_t *src_end,
                                int rows, const ResampleTable *columns, uint16_t *dst,
                                size_t dst_stride);
void resample_horizontal_avx2(const uint8_t *src, size_t src_stride, const uint8_t *src_end,
                              int rows, const ResampleTable *columns, uint16_t *dst,
                              size_t dst_stride);

// Vertical pass u16 -> u8. src: u16 rows of `values` elements, src_stride
// apart; the table's source position p is row (p - first_row). dst:
// (rows->count, values) u8, dst_stride bytes apart, each = round(sum / 2^21)
// clamped.
void resample_vertical(const uint16_t *src, size_t src_stride, int values,
                       const ResampleTable *rows, int first_row, uint8_t *dst, size_t dst_stride);
void resample_vertical_scalar(const uint16_t *src, size_t src_stride, int values,
                              const ResampleTable *rows, int first_row, uint8_t *dst,
                              size_t dst_stride);
void resample_vertical_avx2(const uint16_t *src, size_t src_stride, int values,
                            const ResampleTable *rows, int first_row, uint8_t *dst,
                            size_t dst_stride);

// Vertical pass u8 -> u16 (first pass of the vertical-first order). src: u8
// rows of `values` bytes, src_stride apart, source position p is row (p -
// first_row). dst: (rows->count, values) u16, dst_stride elements apart, each
// = round(sum of weight * value / 2^7).
void resample_vertical_widen(const uint8_t *src, size_t src_stride, int values,
                             const ResampleTable *rows, int first_row, uint16_t *dst,
                             size_t dst_stride);
void resample_vertical_widen_scalar(const uint8_t *src, size_t src_stride, int values,
                                    const ResampleTable *rows, int first_row, uint16_t *dst,
                                    size_t dst_stride);
void resample_vertical_widen_avx2(const uint8_t *src, size_t src_stride, int values,
                                  const ResampleTable *rows, int first_row, uint16_t *dst,
                                  size_t dst_stride);

// Horizontal pass u16 -> u8 (second pass of the vertical-first order). src:
// `rows` rows of RGB u16 (value * 2^7), src_stride elements apart; the
// table's source position p is pixel (p - first_column) of a row; src_end:
// one past the last readable element. dst: row r at dst + r * dst_stride
// bytes, (columns->count * 3) u8, each = round(sum / 2^21) clamped.
void resample_horizontal_narrow(const uint16_t *src, size_t src_stride, const uint16_t *src_end,
                                int rows, const ResampleTable *columns, int first_column,
                                uint8_t *dst, size_t dst_stride);
void resample_horizontal_narrow_scalar(const uint16_t *src, size_t src_stride,
                                       const uint16_t *src_end, int rows,
                                       const ResampleTable *columns, int first_column,
                                       uint8_t *dst, size_t dst_stride);
void resample_horizontal_narrow_avx2(const uint16_t *src, size_t src_stride,
                                     const uint16_t *src_end, int rows,
                                     const ResampleTable *columns, int first_column,
                                     uint8_t *dst, size_t dst_stride);

// The cheaper order for these tables, from a cost model of the kernels
// (per output value and tap, measured with tools/bench_augment).
ResampleOrder resample_pick_order(const ResampleTable *columns, const ResampleTable *rows);

// Both passes: dst (rows->count, columns->count, 3) = rows x columns applied
// to src, in the order resample_pick_order chooses. Only the source rows and
// columns the tables read are filtered. The work goes in bands of a few output
// rows so that the intermediate stays in cache; the buffer is sized for
// either order, so it stops growing once it has served the largest tables.
// dst may equal src (blur in place): then it runs as one band, so all of src
// is read before dst is written. Returns -1 when the buffer cannot grow.
int resample_separable(const uint8_t *src, size_t src_stride, const uint8_t *src_end,
                       const ResampleTable *columns, const ResampleTable *rows,
                       ResampleBuffer *buffer, uint8_t *dst, size_t dst_stride);
// The same with the order and the kernels given: simd 1 uses the AVX2
// kernels (only where cpu_has_avx2() says so), 0 the scalar ones. For tests
// and benchmarks.
int resample_separable_with(const uint8_t *src, size_t src_stride, const uint8_t *src_end,
                            const ResampleTable *columns, const ResampleTable *rows,
                            ResampleBuffer *buffer, uint8_t *dst, size_t dst_stride,
                            ResampleOrder order, int simd);

#endif
