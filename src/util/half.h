// IEEE half (fp16) and bfloat16 storage types with round-to-nearest-even
// conversions from and to float, for mixed precision and for weight files
// in F16/BF16.
#ifndef LTC_UTIL_HALF_H
#define LTC_UTIL_HALF_H

#include <stddef.h>
#include <stdint.h>

typedef uint16_t float16;   // IEEE 754 binary16 bits
typedef uint16_t bfloat16;  // upper 16 bits of a binary32

float16 float_to_f16(float value);
float f16_to_float(float16 value);
bfloat16 float_to_bf16(float value);
float bf16_to_float(bfloat16 value);

void convert_f32_to_f16(const float *in, float16 *out, size_t n);
void convert_f16_to_f32(const float16 *in, float *out, size_t n);
void convert_f32_to_bf16(const float *in, bfloat16 *out, size_t n);
void convert_bf16_to_f32(const bfloat16 *in, float *out, size_t n);

#endif
