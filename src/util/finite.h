// Finding NaN and infinity in host arrays: what a checkpoint, an export or
// a loaded weight file must never hold.
#ifndef LTC_UTIL_FINITE_H
#define LTC_UTIL_FINITE_H

#include <stddef.h>

// Index of the first NaN or infinity among the n float32 values at data
// (any alignment), or n when all are finite.
size_t finite_first_bad_f32(const void *data, size_t n);
// The same for float64 values.
size_t finite_first_bad_f64(const void *data, size_t n);
// The number of NaN or infinite float32 values at data (any alignment).
size_t finite_count_bad_f32(const void *data, size_t n);

#endif
