// NaN and infinity scans (see finite.h). The exponent bits decide: all ones
// is NaN or infinity, which needs no floating-point compare (and survives
// -ffast-math).
#include "util/finite.h"

#include <stdint.h>
#include <string.h>

static int f32_bits_bad(uint32_t bits) { return (bits & 0x7f800000u) == 0x7f800000u; }

size_t finite_first_bad_f32(const void *data, size_t n) {
    const unsigned char *bytes = data;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, bytes + 4 * i, sizeof bits);
        if (f32_bits_bad(bits)) return i;
    }
    return n;
}

size_t finite_first_bad_f64(const void *data, size_t n) {
    const unsigned char *bytes = data;
    for (size_t i = 0; i < n; i++) {
        uint64_t bits;
        memcpy(&bits, bytes + 8 * i, sizeof bits);
        if ((bits & 0x7ff0000000000000ull) == 0x7ff0000000000000ull) return i;
    }
    return n;
}

size_t finite_count_bad_f32(const void *data, size_t n) {
    const unsigned char *bytes = data;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, bytes + 4 * i, sizeof bits);
        bad += (size_t)f32_bits_bad(bits);
    }
    return bad;
}
