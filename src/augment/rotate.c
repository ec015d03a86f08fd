// Rotation of a rendered view (see rotate.h). Written here: a few dozen
// lines on the views the workers already hold, where a library call would
// need OpenCV for one function.
#include "augment/rotate.h"

#include <emmintrin.h>
#include <math.h>
#include <stddef.h>

// BORDER_REFLECT_101: ... 2 1 | 0 1 2 ... n-1 | n-2 n-3 ...
static int reflect_101(int i, int n) {
    if (n == 1) return 0;
    while (i < 0 || i >= n) i = i < 0 ? -i : 2 * n - 2 - i;
    return i;
}

// The source taps of output (x, y): two columns, two rows, their weights.
typedef struct Taps {
    int x0, x1, y0, y1;
    double wx, wy;  // weights of x1 and y1
} Taps;

// lrint without libm's call (kept by errno handling): cvtsd2si rounds in
// the current mode, to nearest even, as cvRound does.
static inline int round_even(double value) {
    return _mm_cvtsd_si32(_mm_set_sd(value));
}

// The integer part of a position (floor), without libm's call.
static inline int floor_int(double value) {
    const int truncated = (int)value;
    return truncated - (value < truncated);
}

void rotate_view_u8(const uint8_t *src, uint8_t *dst, int size, double degrees) {
    const double radians = degrees * (M_PI / 180.0);
    const double cosine = cos(radians), sine = sin(radians), centre = 0.5 * (size - 1);
    const size_t row = (size_t)size * 3;
    for (int y = 0; y < size; y++) {
        // The source position of (x, y): (row_x + cosine x, row_y + sine x).
        const double dy = y - centre;
        const double row_x = centre - cosine * centre - sine * dy;
        const double row_y = centre - sine * centre + cosine * dy;
        uint8_t *out = dst + (size_t)y * row;
        for (int x = 0; x < size; x++, out += 3) {
            const double sx = row_x + cosine * x, sy = row_y + sine * x;
            const int fx = floor_int(sx), fy = floor_int(sy);
            const double wx = sx - fx, wy = sy - fy;
            int x0 = fx, x1 = fx + 1, y0 = fy, y1 = fy + 1;
            if (fx < 0 || fx + 1 >= size || fy < 0 || fy + 1 >= size) {  // the reflected rim
                x0 = reflect_101(fx, size), x1 = reflect_101(fx + 1, size);
                y0 = reflect_101(fy, size), y1 = reflect_101(fy + 1, size);
            }
            const uint8_t *a = src + (size_t)y0 * row + (size_t)x0 * 3;
            const uint8_t *b = src + (size_t)y0 * row + (size_t)x1 * 3;
            const uint8_t *d = src + (size_t)y1 * row + (size_t)x0 * 3;
            const uint8_t *e = src + (size_t)y1 * row + (size_t)x1 * 3;
            for (int c = 0; c < 3; c++) {
                const double top = (1.0 - wx) * a[c] + wx * b[c];
                const double bottom = (1.0 - wx) * d[c] + wx * e[c];
                // bilinear mixes of bytes stay within [0, 255]
                out[c] = (uint8_t)round_even((1.0 - wy) * top + wy * bottom);
            }
        }
    }
}

// OpenCV's warpAffine of float images places each output's source at a
// 1/32 pixel: the inverse matrix in 10-bit fixed point, rounded (cvRound:
// half to even), plus half a step, shifted down to 5 bits.
static Taps rotation_taps_fixed(int x, int y, int size, double cosine, double sine) {
    const double centre = 0.5 * (size - 1);
    const double m02 = centre * (1.0 - cosine) + sine * centre;
    const double m12 = centre * (1.0 - cosine) - sine * centre;
    const long x0 = lrint((-sine * y + m02) * 1024.0) + 16,
               y0 = lrint((cosine * y + m12) * 1024.0) + 16;
    const long fx = (x0 + lrint(cosine * x * 1024.0)) >> 5,
               fy = (y0 + lrint(sine * x * 1024.0)) >> 5;
    const int ix = (int)(fx >> 5), iy = (int)(fy >> 5);
    return (Taps){reflect_101(ix, size),     reflect_101(ix + 1, size), reflect_101(iy, size),
                  reflect_101(iy + 1, size), (double)(fx & 31) / 32.0,  (double)(fy & 31) / 32.0};
}

void rotate_view_float(const float *src, float *dst, int size, int channels, double degrees) {
    const double radians = degrees * (M_PI / 180.0);
    const double cosine = cos(radians), sine = sin(radians);
    const size_t row = (size_t)size * channels;
    for (int y = 0; y < size; y++)
        for (int x = 0; x < size; x++) {
            const Taps t = rotation_taps_fixed(x, y, size, cosine, sine);
            const float *r0 = src + t.y0 * row, *r1 = src + t.y1 * row;
            for (int c = 0; c < channels; c++) {
                const float a = r0[t.x0 * channels + c], b = r0[t.x1 * channels + c];
                const float d = r1[t.x0 * channels + c], e = r1[t.x1 * channels + c];
                const double top = (1.0 - t.wx) * a + t.wx * b,
                             bottom = (1.0 - t.wx) * d + t.wx * e;
                dst[((size_t)y * size + x) * channels + c] =
                    (float)((1.0 - t.wy) * top + t.wy * bottom);
            }
        }
}
