// AVX2 versions of the separable resampling kernels (see resample.h). They
// compute exactly the integer sums of the scalar kernels in resample.c, only
// grouped differently, so results are bit-identical. Compiled with -mavx2;
// reached only when cpu_has_avx2() says so.
#include <immintrin.h>
#include <string.h>

#include "augment/resample.h"

#define HORIZONTAL_SHIFT (RESAMPLE_WEIGHT_BITS - RESAMPLE_EXTRA_BITS)
#define VERTICAL_SHIFT (RESAMPLE_WEIGHT_BITS + RESAMPLE_EXTRA_BITS)

// 16 bytes from p, never reading at or past `end` (zeros there instead).
static inline __m128i load16_bounded(const uint8_t *p, const uint8_t *end) {
    if (end - p >= 16) return _mm_loadu_si128((const __m128i *)p);
    uint8_t copy[16] = {0};
    memcpy(copy, p, (size_t)(end - p));
    return _mm_loadu_si128((const __m128i *)copy);
}

// Two int16 weights as the (low, high) halves of every 32-bit lane.
static inline __m256i weight_pair(const int16_t *w) {
    int32_t pair;
    memcpy(&pair, w, sizeof pair);
    return _mm256_set1_epi32(pair);
}

// Two source rows at a time, one per 128-bit lane. Per output pixel, each
// step takes 4 taps: one 16-byte load per row holds pixels k..k+3; shuffles
// pair up (R_k, R_k+1), (G_k, G_k+1), (B_k, B_k+1) as 16-bit values and
// madd multiplies by (w_k, w_k+1), giving [R, G, B, 0] sums per lane. Taps
// past `taps` have weight 0 (the table is zero padded to a multiple of 4).
void resample_horizontal_avx2(const uint8_t *src, size_t src_stride, const uint8_t *src_end,
                              int rows, const ResampleTable *columns, uint16_t *dst,
                              size_t dst_stride) {
    const __m256i pixels01 = _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1,
                                              -1, 0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1,
                                              -1, -1);
    const __m256i pixels23 = _mm256_setr_epi8(6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1,
                                              -1, -1, 6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1,
                                              -1, -1, -1, -1);
    const __m256i round = _mm256_set1_epi32(1 << (HORIZONTAL_SHIFT - 1));
    for (int r = 0; r < rows; r += 2) {
        const int pair = r + 1 < rows;
        const uint8_t *in0 = src + (size_t)r * src_stride;
        const uint8_t *in1 = pair ? in0 + src_stride : in0;  // odd last row: computed twice
        uint16_t *out0 = dst + (size_t)r * dst_stride;
        uint16_t *out1 = pair ? out0 + dst_stride : out0;  // not written unless pair
        for (int x = 0; x < columns->count; x++) {
            const size_t offset = (size_t)columns->start[x] * 3;
            const int16_t *w = columns->weights + (size_t)x * (size_t)columns->stride;
            const int taps = columns->taps[x];
            __m256i sum = round;
            for (int k = 0; k < taps; k += 4) {
                const size_t at = offset + (size_t)k * 3;
                const __m256i pixels = _mm256_set_m128i(load16_bounded(in1 + at, src_end),
                                                        load16_bounded(in0 + at, src_end));
                sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_shuffle_epi8(pixels, pixels01),
                                                              weight_pair(w + k)));
                sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_shuffle_epi8(pixels, pixels23),
                                                              weight_pair(w + k + 2)));
            }
            sum = _mm256_srai_epi32(sum, HORIZONTAL_SHIFT);
            const __m256i packed = _mm256_packus_epi32(sum, sum);  // lane: R G B 0 R G B 0
            const __m128i low = _mm256_castsi256_si128(packed);
            const __m128i high = _mm256_extracti128_si256(packed, 1);
            if (x + 1 < columns->count) {
                // Writes a 4th value into the next pixel's slot, rewritten next.
                _mm_storel_epi64((__m128i *)(out0 + 3 * x), low);
                if (pair) _mm_storel_epi64((__m128i *)(out1 + 3 * x), high);
            } else {
                uint16_t last[8];
                _mm_storeu_si128((__m128i *)last, low);
                memcpy(out0 + 3 * x, last, 3 * sizeof *last);
                if (pair) {
                    _mm_storeu_si128((__m128i *)last, high);
                    memcpy(out1 + 3 * x, last, 3 * sizeof *last);
                }
            }
        }
    }
}

// 16 values per step; taps in pairs of rows interleaved so that madd forms
// w_k * a + w_k+1 * b in 32 bits. An odd last tap pairs with zeros.
void resample_vertical_avx2(const uint16_t *src, size_t src_stride, int values,
                            const ResampleTable *rows, int first_row, uint8_t *dst,
                            size_t dst_stride) {
    const __m256i round = _mm256_set1_epi32(1 << (VERTICAL_SHIFT - 1));
    const __m256i zero = _mm256_setzero_si256();
    for (int y = 0; y < rows->count; y++) {
        const uint16_t *top = src + (size_t)(rows->start[y] - first_row) * src_stride;
        const int16_t *w = rows->weights + (size_t)y * (size_t)rows->stride;
        const int taps = rows->taps[y];
        uint8_t *out = dst + (size_t)y * dst_stride;
        int i = 0;
        for (; i + 16 <= values; i += 16) {
            __m256i low = round, high = round;
            int k = 0;
            for (; k + 1 < taps; k += 2) {
                const __m256i a = _mm256_loadu_si256((const __m256i *)(top + (size_t)k * src_stride + i));
                const __m256i b =
                    _mm256_loadu_si256((const __m256i *)(top + (size_t)(k + 1) * src_stride + i));
                const __m256i weights = weight_pair(w + k);
                low = _mm256_add_epi32(low, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), weights));
                high = _mm256_add_epi32(high, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), weights));
            }
            if (k < taps) {
                const __m256i a = _mm256_loadu_si256((const __m256i *)(top + (size_t)k * src_stride + i));
                const __m256i weights = _mm256_set1_epi32((uint16_t)w[k]);
                low = _mm256_add_epi32(low, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, zero), weights));
                high = _mm256_add_epi32(high, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, zero), weights));
            }
            low = _mm256_srai_epi32(low, VERTICAL_SHIFT);
            high = _mm256_srai_epi32(high, VERTICAL_SHIFT);
            // unpacklo/hi split each lane in halves; packs puts them back in order.
            const __m256i words = _mm256_packs_epi32(low, high);
            const __m256i bytes = _mm256_packus_epi16(words, words);
            const __m256i ordered = _mm256_permute4x64_epi64(bytes, 0x08);  // qwords 0, 2
            _mm_storeu_si128((__m128i *)(out + i), _mm256_castsi256_si128(ordered));
        }
        for (; i < values; i++) {
            int32_t sum = 1 << (VERTICAL_SHIFT - 1);
            for (int k = 0; k < taps; k++) sum += w[k] * top[(size_t)k * src_stride + (size_t)i];
            const int32_t value = sum >> VERTICAL_SHIFT;
            out[i] = (uint8_t)(value < 0 ? 0 : value > 255 ? 255 : value);
        }
    }
}
