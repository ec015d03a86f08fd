// AVX2 versions of the separable resampling kernels (see resample.h). They
// compute exactly the integer sums of the scalar kernels in resample.c, only
// grouped differently, so results are bit-identical. Compiled with -mavx2;
// reached only when cpu_has_avx2() says so.
//
// Horizontal kernels work on two source rows at once, one per 128-bit lane:
// for one output pixel a lane holds the 32-bit sums [R, G, B, 0]. A 16-byte
// load per row gives four u8 pixels (or two u16 pixels); a byte shuffle pairs
// up (R_k, R_k+1), (G_k, G_k+1), (B_k, B_k+1) as 16-bit values and madd
// multiplies them by (w_k, w_k+1). Only rows whose loads could reach past the
// end of the source take the bounded (copying) loads; tables whose rows all
// have at most 2, 4, 6 or 8 taps get fully unrolled loops.
#include <immintrin.h>
#include <string.h>

#include "augment/resample.h"

#define WIDEN_SHIFT (RESAMPLE_WEIGHT_BITS - RESAMPLE_EXTRA_BITS)
#define NARROW_SHIFT (RESAMPLE_WEIGHT_BITS + RESAMPLE_EXTRA_BITS)
#define ALWAYS_INLINE static inline __attribute__((always_inline))

// 16 bytes from p, never reading at or past `end` (zeros there instead).
static inline __m128i load16_bounded(const uint8_t *p, const uint8_t *end) {
    if (end - p >= 16) return _mm_loadu_si128((const __m128i *)p);
    uint8_t copy[16] = {0};
    if (end > p) memcpy(copy, p, (size_t)(end - p));
    return _mm_loadu_si128((const __m128i *)copy);
}

// 16 bytes at a into lane 0 and at b into lane 1; bounded by `end` if asked.
ALWAYS_INLINE __m256i load_two_rows(const uint8_t *a, const uint8_t *b, int bounded,
                                    const uint8_t *end) {
    if (bounded) return _mm256_set_m128i(load16_bounded(b, end), load16_bounded(a, end));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)),
                                   _mm_loadu_si128((const __m128i *)b), 1);
}

// Two int16 weights as the (low, high) halves of every 32-bit lane.
static inline __m256i weight_pair(const int16_t *w) {
    int32_t pair;
    memcpy(&pair, w, sizeof pair);
    return _mm256_set1_epi32(pair);
}

// Tap pairs (k, k+1) to compute for an output of `taps` taps, given the
// table-wide `fixed_pairs` (0: look at the output's own tap count).
ALWAYS_INLINE int pairs_for(int fixed_pairs, int taps) {
    return fixed_pairs ? fixed_pairs : (taps + 1) / 2;
}

// Bytes past a row's start that the loads for any output can touch (an
// upper bound from the table's max_start and max_taps): loads of 16 bytes at
// pixel_bytes * (start - first) + 12 * (load index).
static size_t row_reach(const ResampleTable *table, int first, int pixel_bytes, int pairs_per_load) {
    const int loads = ((table->max_taps + 1) / 2 + pairs_per_load - 1) / pairs_per_load;
    return (size_t)(table->max_start - first) * (size_t)pixel_bytes + (size_t)(loads - 1) * 12 + 16;
}

// ---- horizontal u8 -> u16 ------------------------------------------------

// Sums of output x over rows a (lane 0) and b (lane 1), before the shift.
ALWAYS_INLINE __m256i widen_sum(const uint8_t *a, const uint8_t *b, const ResampleTable *columns,
                                int x, int fixed_pairs, int bounded, const uint8_t *end) {
    const __m256i pixels01 = _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1,
                                              -1, 0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1,
                                              -1, -1);
    const __m256i pixels23 = _mm256_setr_epi8(6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1,
                                              -1, -1, 6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1,
                                              -1, -1, -1, -1);
    const size_t offset = (size_t)columns->start[x] * 3;
    const int16_t *w = columns->weights + (size_t)x * (size_t)columns->stride;
    const int pairs = pairs_for(fixed_pairs, columns->taps[x]);
    __m256i sum = _mm256_set1_epi32(1 << (WIDEN_SHIFT - 1));
    for (int p = 0; p < pairs; p += 2) {
        const __m256i pixels = load_two_rows(a + offset + (size_t)p * 6, b + offset + (size_t)p * 6,
                                             bounded, end);
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_shuffle_epi8(pixels, pixels01),
                                                      weight_pair(w + 2 * p)));
        if (p + 1 < pairs)
            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_shuffle_epi8(pixels, pixels23),
                                                          weight_pair(w + 2 * p + 2)));
    }
    return _mm256_srai_epi32(sum, WIDEN_SHIFT);
}

// One row pair (out1 written only if `pair`), outputs two at a time: the
// pack gives [R0 G0 B0 0 R1 G1 B1 0] per lane, stored as two 8-byte halves
// whose 4th value lands in the next output's slot (rewritten next). The last
// output is stored exactly.
ALWAYS_INLINE void widen_row_pair(const uint8_t *in0, const uint8_t *in1, uint16_t *out0,
                                  uint16_t *out1, int pair, const ResampleTable *columns,
                                  int fixed_pairs, int bounded, const uint8_t *end) {
    const int count = columns->count;
    int x = 0;
    for (; x + 2 < count; x += 2) {
        const __m256i s0 = widen_sum(in0, in1, columns, x, fixed_pairs, bounded, end);
        const __m256i s1 = widen_sum(in0, in1, columns, x + 1, fixed_pairs, bounded, end);
        const __m256i packed = _mm256_packus_epi32(s0, s1);
        const __m128i low = _mm256_castsi256_si128(packed);
        _mm_storel_epi64((__m128i *)(out0 + 3 * x), low);
        _mm_storeh_pi((__m64 *)(out0 + 3 * x + 3), _mm_castsi128_ps(low));
        if (pair) {
            const __m128i high = _mm256_extracti128_si256(packed, 1);
            _mm_storel_epi64((__m128i *)(out1 + 3 * x), high);
            _mm_storeh_pi((__m64 *)(out1 + 3 * x + 3), _mm_castsi128_ps(high));
        }
    }
    for (; x < count; x++) {
        const __m256i s = widen_sum(in0, in1, columns, x, fixed_pairs, bounded, end);
        const __m256i packed = _mm256_packus_epi32(s, s);
        uint16_t last[8];
        _mm_storeu_si128((__m128i *)last, _mm256_castsi256_si128(packed));
        memcpy(out0 + 3 * x, last, 3 * sizeof *last);
        if (pair) {
            _mm_storeu_si128((__m128i *)last, _mm256_extracti128_si256(packed, 1));
            memcpy(out1 + 3 * x, last, 3 * sizeof *last);
        }
    }
}

// All rows with a fixed pair count (0: per output), so each variant unrolls.
ALWAYS_INLINE void widen_rows(const uint8_t *src, size_t src_stride, const uint8_t *src_end,
                              int rows, const ResampleTable *columns, uint16_t *dst,
                              size_t dst_stride, int fixed_pairs) {
    const size_t reach = row_reach(columns, 0, 3, 2);
    for (int r = 0; r < rows; r += 2) {
        const int pair = r + 1 < rows;
        const uint8_t *in0 = src + (size_t)r * src_stride;
        const uint8_t *in1 = pair ? in0 + src_stride : in0;  // odd last row: computed twice
        uint16_t *out0 = dst + (size_t)r * dst_stride;
        uint16_t *out1 = pair ? out0 + dst_stride : out0;
        if ((size_t)(src_end - in1) >= reach)
            widen_row_pair(in0, in1, out0, out1, pair, columns, fixed_pairs, 0, src_end);
        else
            widen_row_pair(in0, in1, out0, out1, pair, columns, fixed_pairs, 1, src_end);
    }
}

void resample_horizontal_avx2(const uint8_t *src, size_t src_stride, const uint8_t *src_end,
                              int rows, const ResampleTable *columns, uint16_t *dst,
                              size_t dst_stride) {
    switch ((columns->max_taps + 1) / 2) {  // unrolled variants for up to 8 taps
        case 1: widen_rows(src, src_stride, src_end, rows, columns, dst, dst_stride, 1); break;
        case 2: widen_rows(src, src_stride, src_end, rows, columns, dst, dst_stride, 2); break;
        case 3: widen_rows(src, src_stride, src_end, rows, columns, dst, dst_stride, 3); break;
        case 4: widen_rows(src, src_stride, src_end, rows, columns, dst, dst_stride, 4); break;
        default: widen_rows(src, src_stride, src_end, rows, columns, dst, dst_stride, 0); break;
    }
}

// ---- horizontal u16 -> u8 ------------------------------------------------

// Sums of output x over rows a (lane 0) and b (lane 1), shifted: one 16-byte
// load per row holds the two u16 pixels of a tap pair.
ALWAYS_INLINE __m256i narrow_sum(const uint8_t *a, const uint8_t *b, const ResampleTable *columns,
                                 int first_column, int x, int fixed_pairs, int bounded,
                                 const uint8_t *end) {
    const __m256i pixels01 = _mm256_setr_epi8(0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11, -1, -1, -1, -1,
                                              0, 1, 6, 7, 2, 3, 8, 9, 4, 5, 10, 11, -1, -1, -1, -1);
    const size_t offset = (size_t)(columns->start[x] - first_column) * 6;
    const int16_t *w = columns->weights + (size_t)x * (size_t)columns->stride;
    const int pairs = pairs_for(fixed_pairs, columns->taps[x]);
    __m256i sum = _mm256_set1_epi32(1 << (NARROW_SHIFT - 1));
    for (int p = 0; p < pairs; p++) {
        const __m256i pixels = load_two_rows(a + offset + (size_t)p * 12,
                                             b + offset + (size_t)p * 12, bounded, end);
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_shuffle_epi8(pixels, pixels01),
                                                      weight_pair(w + 2 * p)));
    }
    return _mm256_srai_epi32(sum, NARROW_SHIFT);
}

// One row pair, outputs four at a time: packs give [R G B 0] x 4 bytes per
// lane, a shuffle drops the zeros, and a 16-byte store per row writes 12
// bytes plus 4 that the next group rewrites. Stores that would cross the
// row's end (into a row already written) go through a copy.
ALWAYS_INLINE void narrow_row_pair(const uint8_t *in0, const uint8_t *in1, uint8_t *out0,
                                   uint8_t *out1, int pair, const ResampleTable *columns,
                                   int first_column, int fixed_pairs, int bounded,
                                   const uint8_t *end) {
    const __m256i compact = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1,
                                             -1, 0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1,
                                             -1, -1);
    const int count = columns->count;
    for (int x = 0; x < count; x += 4) {
        // The last group repeats its last output where fewer than 4 remain.
        const int x1 = x + 1 < count ? x + 1 : count - 1;
        const int x2 = x + 2 < count ? x + 2 : count - 1;
        const int x3 = x + 3 < count ? x + 3 : count - 1;
        const __m256i s0 = narrow_sum(in0, in1, columns, first_column, x, fixed_pairs, bounded, end);
        const __m256i s1 = narrow_sum(in0, in1, columns, first_column, x1, fixed_pairs, bounded, end);
        const __m256i s2 = narrow_sum(in0, in1, columns, first_column, x2, fixed_pairs, bounded, end);
        const __m256i s3 = narrow_sum(in0, in1, columns, first_column, x3, fixed_pairs, bounded, end);
        const __m256i bytes = _mm256_shuffle_epi8(
            _mm256_packus_epi16(_mm256_packus_epi32(s0, s1), _mm256_packus_epi32(s2, s3)), compact);
        if (x + 6 <= count) {  // 16 bytes from 3x stay inside the row
            _mm_storeu_si128((__m128i *)(out0 + 3 * x), _mm256_castsi256_si128(bytes));
            if (pair) _mm_storeu_si128((__m128i *)(out1 + 3 * x), _mm256_extracti128_si256(bytes, 1));
        } else {
            const size_t length = (size_t)(count - x < 4 ? count - x : 4) * 3;
            uint8_t last[16];
            _mm_storeu_si128((__m128i *)last, _mm256_castsi256_si128(bytes));
            memcpy(out0 + 3 * x, last, length);
            if (pair) {
                _mm_storeu_si128((__m128i *)last, _mm256_extracti128_si256(bytes, 1));
                memcpy(out1 + 3 * x, last, length);
            }
        }
    }
}

ALWAYS_INLINE void narrow_rows(const uint16_t *src, size_t src_stride, const uint16_t *src_end,
                               int rows, const ResampleTable *columns, int first_column,
                               uint8_t *dst, size_t dst_stride, int fixed_pairs) {
    const size_t reach = row_reach(columns, first_column, 6, 1);
    const uint8_t *end = (const uint8_t *)src_end;
    for (int r = 0; r < rows; r += 2) {
        const int pair = r + 1 < rows;
        const uint8_t *in0 = (const uint8_t *)(src + (size_t)r * src_stride);
        const uint8_t *in1 = pair ? in0 + src_stride * sizeof *src : in0;
        uint8_t *out0 = dst + (size_t)r * dst_stride;
        uint8_t *out1 = pair ? out0 + dst_stride : out0;
        if ((size_t)(end - in1) >= reach)
            narrow_row_pair(in0, in1, out0, out1, pair, columns, first_column, fixed_pairs, 0, end);
        else
            narrow_row_pair(in0, in1, out0, out1, pair, columns, first_column, fixed_pairs, 1, end);
    }
}

void resample_horizontal_narrow_avx2(const uint16_t *src, size_t src_stride,
                                     const uint16_t *src_end, int rows,
                                     const ResampleTable *columns, int first_column,
                                     uint8_t *dst, size_t dst_stride) {
    switch ((columns->max_taps + 1) / 2) {  // unrolled variants for up to 8 taps
        case 1: narrow_rows(src, src_stride, src_end, rows, columns, first_column, dst, dst_stride, 1); break;
        case 2: narrow_rows(src, src_stride, src_end, rows, columns, first_column, dst, dst_stride, 2); break;
        case 3: narrow_rows(src, src_stride, src_end, rows, columns, first_column, dst, dst_stride, 3); break;
        case 4: narrow_rows(src, src_stride, src_end, rows, columns, first_column, dst, dst_stride, 4); break;
        default: narrow_rows(src, src_stride, src_end, rows, columns, first_column, dst, dst_stride, 0); break;
    }
}

// ---- vertical ------------------------------------------------------------

// 16 values per step; taps in pairs of rows interleaved so that madd forms
// w_k * a + w_k+1 * b in 32 bits. An odd last tap pairs with zeros. `load`
// gives 16 values of a row as u16 (from u8 or u16 rows).
#define VERTICAL_SUMS(load, round_value)                                                        \
    __m256i low = _mm256_set1_epi32(round_value), high = low;                                   \
    int k = 0;                                                                                  \
    for (; k + 1 < taps; k += 2) {                                                              \
        const __m256i a = load(k), b = load(k + 1);                                             \
        const __m256i weights = weight_pair(w + k);                                             \
        low = _mm256_add_epi32(low, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), weights));   \
        high = _mm256_add_epi32(high, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), weights)); \
    }                                                                                           \
    if (k < taps) {                                                                             \
        const __m256i a = load(k), zero = _mm256_setzero_si256();                               \
        const __m256i weights = _mm256_set1_epi32((uint16_t)w[k]);                              \
        low = _mm256_add_epi32(low, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, zero), weights)); \
        high = _mm256_add_epi32(high, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, zero), weights)); \
    }

void resample_vertical_avx2(const uint16_t *src, size_t src_stride, int values,
                            const ResampleTable *rows, int first_row, uint8_t *dst,
                            size_t dst_stride) {
    for (int y = 0; y < rows->count; y++) {
        const uint16_t *top = src + (size_t)(rows->start[y] - first_row) * src_stride;
        const int16_t *w = rows->weights + (size_t)y * (size_t)rows->stride;
        const int taps = rows->taps[y];
        uint8_t *out = dst + (size_t)y * dst_stride;
        int i = 0;
        for (; i + 16 <= values; i += 16) {
#define LOAD_U16(k) _mm256_loadu_si256((const __m256i *)(top + (size_t)(k) * src_stride + i))
            VERTICAL_SUMS(LOAD_U16, 1 << (NARROW_SHIFT - 1))
#undef LOAD_U16
            low = _mm256_srai_epi32(low, NARROW_SHIFT);
            high = _mm256_srai_epi32(high, NARROW_SHIFT);
            // unpacklo/hi split each lane in halves; packs puts them back in order.
            const __m256i words = _mm256_packs_epi32(low, high);
            const __m256i bytes = _mm256_packus_epi16(words, words);
            const __m256i ordered = _mm256_permute4x64_epi64(bytes, 0x08);  // qwords 0, 2
            _mm_storeu_si128((__m128i *)(out + i), _mm256_castsi256_si128(ordered));
        }
        for (; i < values; i++) {
            int32_t sum = 1 << (NARROW_SHIFT - 1);
            for (int k = 0; k < taps; k++) sum += w[k] * top[(size_t)k * src_stride + (size_t)i];
            const int32_t value = sum >> NARROW_SHIFT;
            out[i] = (uint8_t)(value < 0 ? 0 : value > 255 ? 255 : value);
        }
    }
}

void resample_vertical_widen_avx2(const uint8_t *src, size_t src_stride, int values,
                                  const ResampleTable *rows, int first_row, uint16_t *dst,
                                  size_t dst_stride) {
    for (int y = 0; y < rows->count; y++) {
        const uint8_t *top = src + (size_t)(rows->start[y] - first_row) * src_stride;
        const int16_t *w = rows->weights + (size_t)y * (size_t)rows->stride;
        const int taps = rows->taps[y];
        uint16_t *out = dst + (size_t)y * dst_stride;
        int i = 0;
        for (; i + 16 <= values; i += 16) {
#define LOAD_U8(k) \
    _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(top + (size_t)(k) * src_stride + i)))
            VERTICAL_SUMS(LOAD_U8, 1 << (WIDEN_SHIFT - 1))
#undef LOAD_U8
            low = _mm256_srai_epi32(low, WIDEN_SHIFT);
            high = _mm256_srai_epi32(high, WIDEN_SHIFT);
            _mm256_storeu_si256((__m256i *)(out + i), _mm256_packus_epi32(low, high));
        }
        for (; i < values; i++) {
            int32_t sum = 1 << (WIDEN_SHIFT - 1);
            for (int k = 0; k < taps; k++) sum += w[k] * top[(size_t)k * src_stride + (size_t)i];
            out[i] = (uint16_t)(sum >> WIDEN_SHIFT);
        }
    }
}
