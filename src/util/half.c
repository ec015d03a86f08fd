// fp16 / bf16 conversions (see half.h). Bit manipulation, no hardware
// instructions needed; NaN stays NaN, overflow becomes infinity, subnormals
// are kept.
#include "util/half.h"

#include <string.h>

static uint32_t float_bits(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

static float bits_float(uint32_t bits) {
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

float16 float_to_f16(float value) {
    const uint32_t bits = float_bits(value);
    const uint32_t sign = (bits >> 16) & 0x8000u;
    const uint32_t magnitude = bits & 0x7FFFFFFFu;
    if (magnitude >= 0x7F800000u)  // inf or NaN (keep NaN quiet and non-zero)
        return (float16)(sign | 0x7C00u | (magnitude > 0x7F800000u ? 0x200u : 0));
    if (magnitude >= 0x477FF000u) return (float16)(sign | 0x7C00u);  // rounds past 65504
    if (magnitude < 0x38800000u) {
        // Subnormal half (or zero): value = m * 2^-24, rounded to nearest even.
        if (magnitude < 0x33000000u) return (float16)sign;  // below half the smallest subnormal
        const uint32_t exponent = magnitude >> 23;
        const uint32_t mantissa = (magnitude & 0x7FFFFFu) | 0x800000u;
        const uint32_t shift = 126 - exponent;  // 14..24
        uint32_t half = mantissa >> shift;
        const uint32_t rest = mantissa & ((1u << shift) - 1);
        const uint32_t halfway = 1u << (shift - 1);
        if (rest > halfway || (rest == halfway && (half & 1))) half++;
        return (float16)(sign | half);
    }
    // Normal: rebias exponent (127 -> 15), round mantissa 23 -> 10 bits.
    uint32_t half = ((magnitude - 0x38000000u) >> 13);
    const uint32_t rest = magnitude & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1))) half++;
    return (float16)(sign | half);
}

float f16_to_float(float16 value) {
    const uint32_t sign = (uint32_t)(value & 0x8000u) << 16;
    const uint32_t exponent = (value >> 10) & 0x1Fu;
    const uint32_t mantissa = value & 0x3FFu;
    if (exponent == 0x1F) return bits_float(sign | 0x7F800000u | (mantissa << 13));
    if (exponent == 0) {
        if (mantissa == 0) return bits_float(sign);
        // Subnormal: m * 2^-24.
        const float magnitude = (float)mantissa * (1.0f / 16777216.0f);
        return sign ? -magnitude : magnitude;
    }
    return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

bfloat16 float_to_bf16(float value) {
    const uint32_t bits = float_bits(value);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return (bfloat16)((bits >> 16) | 0x40u);  // quiet NaN
    const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1);  // nearest even
    return (bfloat16)((bits + rounding) >> 16);
}

float bf16_to_float(bfloat16 value) { return bits_float((uint32_t)value << 16); }

void convert_f32_to_f16(const float *in, float16 *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = float_to_f16(in[i]);
}

void convert_f16_to_f32(const float16 *in, float *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = f16_to_float(in[i]);
}

void convert_f32_to_bf16(const float *in, bfloat16 *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = float_to_bf16(in[i]);
}

void convert_bf16_to_f32(const bfloat16 *in, float *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = bf16_to_float(in[i]);
}
