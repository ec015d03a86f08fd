// AVX2 versions of the colour kernels (see color.h): the same integer and
// IEEE float operations as the scalar kernels in color.c, 8 pixels or 32
// bytes per step, tails handed to the scalar kernels. Compiled with -mavx2;
// reached only when cpu_has_avx2() says so.
#include <immintrin.h>
#include <string.h>

#include "augment/color.h"

// An 8-pixel step reads 28 bytes: two 16-byte loads at offsets 0 and 12.
static inline int pixel_step_fits(size_t i, size_t pixels) { return 3 * i + 28 <= 3 * pixels; }

// Byte shuffle taking channel c of 4 pixels into the low byte of 32-bit lanes.
#define CHANNEL_PICK(c)                                                                       \
    _mm256_setr_epi8(c, -1, -1, -1, c + 3, -1, -1, -1, c + 6, -1, -1, -1, c + 9, -1, -1, -1, c, \
                     -1, -1, -1, c + 3, -1, -1, -1, c + 6, -1, -1, -1, c + 9, -1, -1, -1)

// 8 pixels -> R, G, B as 32-bit lanes (lane 0: pixels 0-3, lane 1: 4-7).
static inline void load_pixels(const uint8_t *p, __m256i *red, __m256i *green, __m256i *blue) {
    const __m256i bytes = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(p + 12)),
                                           _mm_loadu_si128((const __m128i *)p));
    *red = _mm256_shuffle_epi8(bytes, CHANNEL_PICK(0));
    *green = _mm256_shuffle_epi8(bytes, CHANNEL_PICK(1));
    *blue = _mm256_shuffle_epi8(bytes, CHANNEL_PICK(2));
}

// R, G, B 32-bit lanes (saturated to 0..255) -> 8 packed pixels at p (24 bytes).
static inline void store_pixels(uint8_t *p, __m256i red, __m256i green, __m256i blue) {
    const __m256i red_green = _mm256_packs_epi32(red, green);  // lane: r0-3 g0-3
    const __m256i blue_blue = _mm256_packs_epi32(blue, blue);
    const __m256i planar = _mm256_packus_epi16(red_green, blue_blue);  // lane: r0-3 g0-3 b0-3 b0-3
    const __m256i interleave = _mm256_setr_epi8(0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11, -1, -1, -1, -1,
                                                0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11, -1, -1, -1, -1);
    const __m256i packed = _mm256_shuffle_epi8(planar, interleave);
    const __m128i low = _mm256_castsi256_si128(packed), high = _mm256_extracti128_si256(packed, 1);
    // 12 bytes per lane, written as 8 + 4 so nothing past the 24 bytes changes.
    _mm_storel_epi64((__m128i *)p, low);
    const int32_t low_tail = _mm_extract_epi32(low, 2), high_tail = _mm_extract_epi32(high, 2);
    memcpy(p + 8, &low_tail, 4);
    _mm_storel_epi64((__m128i *)(p + 12), high);
    memcpy(p + 20, &high_tail, 4);
}

static inline __m256i luma(__m256i red, __m256i green, __m256i blue) {
    __m256i sum = _mm256_mullo_epi32(red, _mm256_set1_epi32(19595));
    sum = _mm256_add_epi32(sum, _mm256_mullo_epi32(green, _mm256_set1_epi32(38470)));
    sum = _mm256_add_epi32(sum, _mm256_mullo_epi32(blue, _mm256_set1_epi32(7471)));
    return _mm256_srai_epi32(_mm256_add_epi32(sum, _mm256_set1_epi32(1 << 15)), 16);
}

static inline __m256i affine8(__m128i bytes, __m256i scale, __m256i bias) {
    const __m256i x = _mm256_cvtepu8_epi32(bytes);
    return _mm256_srai_epi32(_mm256_add_epi32(_mm256_mullo_epi32(x, scale), bias), COLOR_FIXED_BITS);
}

void color_affine_avx2(uint8_t *bytes, size_t count, int32_t scale, int32_t offset) {
    const __m256i scale_v = _mm256_set1_epi32(scale);
    const __m256i bias = _mm256_set1_epi32(offset + (1 << (COLOR_FIXED_BITS - 1)));
    // packs/packus order the four groups as 0,2,4,6 | 1,3,5,7 (4 bytes each).
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    size_t i = 0;
    for (; i + 32 <= count; i += 32) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(bytes + i));
        const __m128i low = _mm256_castsi256_si128(v), high = _mm256_extracti128_si256(v, 1);
        const __m256i a = affine8(low, scale_v, bias), b = affine8(_mm_srli_si128(low, 8), scale_v, bias);
        const __m256i c = affine8(high, scale_v, bias), d = affine8(_mm_srli_si128(high, 8), scale_v, bias);
        const __m256i packed = _mm256_packus_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
        _mm256_storeu_si256((__m256i *)(bytes + i), _mm256_permutevar8x32_epi32(packed, order));
    }
    color_affine_scalar(bytes + i, count - i, scale, offset);
}

uint64_t color_luma_sum_avx2(const uint8_t *rgb, size_t pixels) {
    uint64_t total = 0;
    size_t i = 0;
    while (pixel_step_fits(i, pixels)) {
        // Lanes hold at most 65536 * 255 before being flushed: no overflow.
        __m256i sum = _mm256_setzero_si256();
        for (int step = 0; step < 65536 && pixel_step_fits(i, pixels); step++, i += 8) {
            __m256i red, green, blue;
            load_pixels(rgb + 3 * i, &red, &green, &blue);
            sum = _mm256_add_epi32(sum, luma(red, green, blue));
        }
        uint32_t lanes[8];
        _mm256_storeu_si256((__m256i *)lanes, sum);
        for (int k = 0; k < 8; k++) total += lanes[k];
    }
    return total + color_luma_sum_scalar(rgb + 3 * i, pixels - i);
}

void color_saturation_avx2(uint8_t *rgb, size_t pixels, int32_t scale) {
    const __m256i scale_v = _mm256_set1_epi32(scale);
    const __m256i grey_scale = _mm256_set1_epi32(COLOR_FIXED_ONE - scale);
    const __m256i half = _mm256_set1_epi32(1 << (COLOR_FIXED_BITS - 1));
    size_t i = 0;
    for (; pixel_step_fits(i, pixels); i += 8) {
        __m256i red, green, blue;
        load_pixels(rgb + 3 * i, &red, &green, &blue);
        const __m256i grey = _mm256_add_epi32(_mm256_mullo_epi32(luma(red, green, blue), grey_scale), half);
        red = _mm256_srai_epi32(_mm256_add_epi32(_mm256_mullo_epi32(red, scale_v), grey), COLOR_FIXED_BITS);
        green = _mm256_srai_epi32(_mm256_add_epi32(_mm256_mullo_epi32(green, scale_v), grey), COLOR_FIXED_BITS);
        blue = _mm256_srai_epi32(_mm256_add_epi32(_mm256_mullo_epi32(blue, scale_v), grey), COLOR_FIXED_BITS);
        store_pixels(rgb + 3 * i, red, green, blue);
    }
    color_saturation_scalar(rgb + 3 * i, pixels - i, scale);
}

void color_greyscale_avx2(uint8_t *rgb, size_t pixels) {
    size_t i = 0;
    for (; pixel_step_fits(i, pixels); i += 8) {
        __m256i red, green, blue;
        load_pixels(rgb + 3 * i, &red, &green, &blue);
        const __m256i grey = luma(red, green, blue);
        store_pixels(rgb + 3 * i, grey, grey, grey);
    }
    color_greyscale_scalar(rgb + 3 * i, pixels - i);
}

static inline __m256 clamp_unit(__m256 x) {
    return _mm256_min_ps(_mm256_max_ps(x, _mm256_setzero_ps()), _mm256_set1_ps(1.0f));
}

static inline __m256 fraction(__m256 x) { return _mm256_sub_ps(x, _mm256_floor_ps(x)); }

// Picks per lane by sector 0..5 (float); the scalar `switch` in color.c.
static inline __m256 by_sector(__m256 sector, __m256 s0, __m256 s1, __m256 s2, __m256 s3,
                               __m256 s4, __m256 s5) {
    __m256 out = s5;
    out = _mm256_blendv_ps(out, s4, _mm256_cmp_ps(sector, _mm256_set1_ps(4.0f), _CMP_EQ_OQ));
    out = _mm256_blendv_ps(out, s3, _mm256_cmp_ps(sector, _mm256_set1_ps(3.0f), _CMP_EQ_OQ));
    out = _mm256_blendv_ps(out, s2, _mm256_cmp_ps(sector, _mm256_set1_ps(2.0f), _CMP_EQ_OQ));
    out = _mm256_blendv_ps(out, s1, _mm256_cmp_ps(sector, _mm256_set1_ps(1.0f), _CMP_EQ_OQ));
    return _mm256_blendv_ps(out, s0, _mm256_cmp_ps(sector, _mm256_setzero_ps(), _CMP_EQ_OQ));
}

static inline __m256i to_level(__m256 x) {
    return _mm256_cvttps_epi32(_mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(255.0f)), _mm256_set1_ps(0.5f)));
}

void color_hue_avx2(uint8_t *rgb, size_t pixels, float hue_factor) {
    const __m256 one = _mm256_set1_ps(1.0f), level_max = _mm256_set1_ps(255.0f);
    const __m256 two = _mm256_set1_ps(2.0f), four = _mm256_set1_ps(4.0f), six = _mm256_set1_ps(6.0f);
    const __m256 shift = _mm256_set1_ps(hue_factor);
    size_t i = 0;
    for (; pixel_step_fits(i, pixels); i += 8) {
        __m256i red_i, green_i, blue_i;
        load_pixels(rgb + 3 * i, &red_i, &green_i, &blue_i);
        const __m256 r = _mm256_div_ps(_mm256_cvtepi32_ps(red_i), level_max);
        const __m256 g = _mm256_div_ps(_mm256_cvtepi32_ps(green_i), level_max);
        const __m256 b = _mm256_div_ps(_mm256_cvtepi32_ps(blue_i), level_max);
        const __m256 maxc = _mm256_max_ps(_mm256_max_ps(r, g), b);
        const __m256 minc = _mm256_min_ps(_mm256_min_ps(r, g), b);
        const __m256 equal = _mm256_cmp_ps(maxc, minc, _CMP_EQ_OQ);
        const __m256 chroma = _mm256_sub_ps(maxc, minc);
        const __m256 s = _mm256_div_ps(chroma, _mm256_blendv_ps(maxc, one, equal));
        const __m256 divisor = _mm256_blendv_ps(chroma, one, equal);
        const __m256 rc = _mm256_div_ps(_mm256_sub_ps(maxc, r), divisor);
        const __m256 gc = _mm256_div_ps(_mm256_sub_ps(maxc, g), divisor);
        const __m256 bc = _mm256_div_ps(_mm256_sub_ps(maxc, b), divisor);
        const __m256 from_red = _mm256_sub_ps(bc, gc);
        const __m256 from_green = _mm256_sub_ps(_mm256_add_ps(two, rc), bc);
        const __m256 from_blue = _mm256_sub_ps(_mm256_add_ps(four, gc), rc);
        __m256 h = _mm256_blendv_ps(from_blue, from_green, _mm256_cmp_ps(maxc, g, _CMP_EQ_OQ));
        h = _mm256_blendv_ps(h, from_red, _mm256_cmp_ps(maxc, r, _CMP_EQ_OQ));
        h = fraction(_mm256_add_ps(_mm256_div_ps(h, six), one));
        h = fraction(_mm256_add_ps(h, shift));
        const __m256 h6 = _mm256_mul_ps(h, six);
        __m256 sector = _mm256_floor_ps(h6);
        const __m256 f = _mm256_sub_ps(h6, sector);
        sector = _mm256_blendv_ps(sector, _mm256_setzero_ps(), _mm256_cmp_ps(sector, six, _CMP_EQ_OQ));
        const __m256 v = maxc;
        const __m256 p = clamp_unit(_mm256_mul_ps(v, _mm256_sub_ps(one, s)));
        const __m256 q = clamp_unit(_mm256_mul_ps(v, _mm256_sub_ps(one, _mm256_mul_ps(s, f))));
        const __m256 t = clamp_unit(_mm256_mul_ps(v, _mm256_sub_ps(one, _mm256_mul_ps(s, _mm256_sub_ps(one, f)))));
        store_pixels(rgb + 3 * i, to_level(by_sector(sector, v, q, p, p, t, v)),
                     to_level(by_sector(sector, t, v, v, q, p, p)),
                     to_level(by_sector(sector, p, p, t, v, v, q)));
    }
    color_hue_scalar(rgb + 3 * i, pixels - i, hue_factor);
}

void color_solarize_avx2(uint8_t *bytes, size_t count, int threshold) {
    const __m256i level = _mm256_set1_epi8((char)threshold);
    const __m256i all = _mm256_set1_epi8(-1);
    size_t i = 0;
    for (; i + 32 <= count; i += 32) {
        const __m256i x = _mm256_loadu_si256((const __m256i *)(bytes + i));
        const __m256i at_or_above = _mm256_cmpeq_epi8(_mm256_max_epu8(x, level), x);
        _mm256_storeu_si256((__m256i *)(bytes + i),
                            _mm256_blendv_epi8(x, _mm256_xor_si256(x, all), at_or_above));
    }
    color_solarize_scalar(bytes + i, count - i, threshold);
}
