// Separable resampling of 8-bit RGB images with precomputed fixed-point
// weight tables: the hot loops shared by resize (area / bilinear tables) and
// Gaussian blur (Gaussian tables with clamped edges folded in).
//
// A ResampleTable says, for every output position along one axis, which
// contiguous run of source positions it reads and with which weights. Weights
// are non-negative int16 in units of 1/2^14 and each row sums to exactly
// 2^14, so a constant image stays constant.
//
// Two passes: horizontal u8 -> u16 (value * 2^7, i.e. 7 extra bits kept
// between passes), then vertical u16 -> u8 with rounding. Every kernel has a
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

// Makes room for `count` outputs of up to `max_taps` weights; sets count and
// stride. Returns -1 when out of memory.
int resample_table_reserve(ResampleTable *table, int count, int max_taps);
// Sets output `index` from real-valued weights (table->row_scratch may be
// passed): normalised to sum 1, quantised on the cumulative sum so the fixed
// point weights sum to exactly 2^14, zero weights at both ends dropped.
// start + count must stay inside the source; count <= max_taps of reserve.
void resample_table_set_row(ResampleTable *table, int index, int start, int count,
                            const double *weights);
void resample_table_free(ResampleTable *table);
void resample_buffer_free(ResampleBuffer *buffer);

// Horizontal pass over `rows` rows. src: row r at src + r * src_stride, RGB
// u8; src_end: one past the last readable byte (never read beyond).
// dst: row r at dst + r * dst_stride (elements), (columns->count * 3) u16,
// each = round(sum of weight * pixel / 2^7).
void resample_horizontal(const uint8_t *src, size_t src_stride, const uint8_t *src_end, int rows,
                         const ResampleTable *columns, uint16_t *dst, size_t dst_stride);
void resample_horizontal_scalar(const uint8_t *src, size_t src_stride, const uint8_t *src_end,
                                int rows, const ResampleTable *columns, uint16_t *dst,
                                size_t dst_stride);
void resample_horizontal_avx2(const uint8_t *src, size_t src_stride, const uint8_t *src_end,
                              int rows, const ResampleTable *columns, uint16_t *dst,
                              size_t dst_stride);

// Vertical pass. src: u16 rows of `values` elements, src_stride apart; the
// table's source position p is row (p - first_row). dst: (rows->count,
// values) u8, dst_stride bytes apart, each = round(sum / 2^21) clamped.
void resample_vertical(const uint16_t *src, size_t src_stride, int values,
                       const ResampleTable *rows, int first_row, uint8_t *dst, size_t dst_stride);
void resample_vertical_scalar(const uint16_t *src, size_t src_stride, int values,
                              const ResampleTable *rows, int first_row, uint8_t *dst,
                              size_t dst_stride);
void resample_vertical_avx2(const uint16_t *src, size_t src_stride, int values,
                            const ResampleTable *rows, int first_row, uint8_t *dst,
                            size_t dst_stride);

// Both passes: dst (rows->count, columns->count, 3) = rows x columns applied
// to src. Only the source rows the row table reads are filtered
// horizontally. dst may equal src (all of src is read before dst is written).
// Returns -1 when the intermediate buffer cannot grow.
int resample_separable(const uint8_t *src, size_t src_stride, const uint8_t *src_end,
                       const ResampleTable *columns, const ResampleTable *rows,
                       ResampleBuffer *buffer, uint8_t *dst, size_t dst_stride);

#endif
