// Our RandomResizedCrop resize (src/augment/resize.c) against libyuv's
// scalers on the same sizes, one thread, to decide whether to use libyuv
// (the issue allows a well-kept SIMD library where it is faster). Not part of
// the build: libyuv is only needed to run this comparison.
// Build and run (one command, in the repository root, after `make`):
//   apt-get install libyuv-dev
//   cc -O2 -std=c11 -D_GNU_SOURCE -Isrc tools/compare/libyuv_resize.c build/libltc.a
//      $(pkg-config --libs libjpeg libpng libwebp libwebpdemux libwebpmux) -lyuv -lpthread -lm
//      -o build/libyuv_resize && build/libyuv_resize
#include <libyuv/scale_argb.h>
#include <libyuv/scale_rgb.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "augment/resize.h"
#include "util/cpu.h"

typedef struct Case {
    const char *name;
    int width, height;  // source, resized whole to 224 x 224
} Case;

typedef struct Buffers {
    Image rgb;         // source, 3 bytes per pixel
    uint8_t *argb;     // same pixels, 4 bytes per pixel
    uint8_t *out;      // 224 x 224 x 4 (large enough for both)
    ResampleTable columns, rows;
    ResampleBuffer middle;
} Buffers;

enum { OUT = 224, METHOD_OURS = 0, METHOD_YUV_RGB = 1, METHOD_YUV_ARGB = 2 };

static void resize_once(Buffers *b, int method, int shrinking) {
    const enum FilterMode filter = shrinking ? kFilterBox : kFilterBilinear;
    if (method == METHOD_OURS) {
        ErrorMessage err;
        if (resize_rgb(&b->rgb, 0, 0, b->rgb.width, b->rgb.height, 0, OUT, OUT, b->out, OUT * 3,
                       &b->columns, &b->rows, &b->middle, &err) != 0) {
            fprintf(stderr, "%s\n", err.text);
            exit(1);
        }
    } else if (method == METHOD_YUV_RGB) {
        RGBScale(b->rgb.pixels, (int)b->rgb.stride, b->rgb.width, b->rgb.height, b->out, OUT * 3,
                 OUT, OUT, filter);
    } else {
        ARGBScale(b->argb, b->rgb.width * 4, b->rgb.width, b->rgb.height, b->out, OUT * 4, OUT,
                  OUT, filter);
    }
}

// Exact area average (shrinking) of channel c at output (ox, oy), in double.
static double area_reference(const Image *src, int ox, int oy, int c) {
    const double sx = (double)src->width / OUT, sy = (double)src->height / OUT;
    const double x0 = ox * sx, x1 = x0 + sx, y0 = oy * sy, y1 = y0 + sy;
    double sum = 0;
    for (int y = (int)floor(y0); y < (int)ceil(y1); y++) {
        const double wy = fmin(y + 1, y1) - fmax(y, y0);
        for (int x = (int)floor(x0); x < (int)ceil(x1); x++) {
            const double wx = fmin(x + 1, x1) - fmax(x, x0);
            sum += wx * wy * src->pixels[(size_t)y * src->stride + (size_t)x * 3 + (size_t)c];
        }
    }
    return sum / (sx * sy);
}

// Mean absolute difference from the exact area average, in levels.
static double area_error(Buffers *b, int method) {
    resize_once(b, method, 1);
    const int bytes = method == METHOD_YUV_ARGB ? 4 : 3;
    double total = 0;
    for (int y = 0; y < OUT; y++)
        for (int x = 0; x < OUT; x++)
            for (int c = 0; c < 3; c++) {
                // ARGB in memory is B, G, R, A.
                const int channel = method == METHOD_YUV_ARGB ? 2 - c : c;
                const double got = b->out[((size_t)y * OUT + x) * bytes + (size_t)channel];
                total += fabs(got - area_reference(&b->rgb, x, y, c));
            }
    return total / (OUT * OUT * 3);
}

// Output megapixels per second over about `seconds`.
static double measure(Buffers *b, int method, int shrinking, double seconds) {
    for (int i = 0; i < 5; i++) resize_once(b, method, shrinking);  // warm caches and tables
    int runs = 0;
    const double start = time_now();
    double now = start;
    while (now - start < seconds) {
        for (int i = 0; i < 20; i++) resize_once(b, method, shrinking);
        runs += 20;
        now = time_now();
    }
    return runs * (double)OUT * OUT / (now - start) / 1e6;
}

int main(void) {
    const Case cases[] = {
        {"448x448 -> 224 (area)", 448, 448},
        {"500x375 -> 224 (area)", 500, 375},
        {"1333x1000 -> 224 (area)", 1333, 1000},
        {"160x160 -> 224 (bilinear)", 160, 160},
    };
    printf("one thread, %s kernels; output megapixels/s (224 x 224)\n",
           cpu_has_avx2() ? "AVX2" : "scalar");
    printf("%-28s %12s %14s %15s\n", "case", "ours (RGB)", "libyuv RGB", "libyuv ARGB");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        Buffers b = {0};
        const int w = cases[c].width, h = cases[c].height;
        b.rgb = (Image){malloc((size_t)w * h * 3), w, h, (size_t)w * 3};
        b.argb = malloc((size_t)w * h * 4);
        b.out = malloc(OUT * OUT * 4);
        for (size_t i = 0; i < (size_t)w * h; i++) {
            // Detail at several frequencies, like texture in a photo.
            const double x = (double)(i % (size_t)w), y = (double)(i / (size_t)w);
            const uint8_t r = (uint8_t)(127.5 + 127 * sin(x * 0.9) * cos(y * 0.7));
            const uint8_t g = (uint8_t)(127.5 + 127 * sin(x * 0.05 + y * 0.11));
            const uint8_t bl = (uint8_t)(127.5 + 127 * sin((x + y) * 0.33));
            b.rgb.pixels[i * 3] = r, b.rgb.pixels[i * 3 + 1] = g, b.rgb.pixels[i * 3 + 2] = bl;
            b.argb[i * 4] = bl, b.argb[i * 4 + 1] = g, b.argb[i * 4 + 2] = r, b.argb[i * 4 + 3] = 255;
        }
        const int shrinking = w > OUT;
        const double ours = measure(&b, METHOD_OURS, shrinking, 0.5);
        const double yuv_rgb = measure(&b, METHOD_YUV_RGB, shrinking, 0.5);
        const double yuv_argb = measure(&b, METHOD_YUV_ARGB, shrinking, 0.5);
        printf("%-28s %12.1f %14.1f %15.1f\n", cases[c].name, ours, yuv_rgb, yuv_argb);
        if (shrinking)
            printf("%-28s %12.2f %14.2f %15.2f\n", "  mean |error| vs exact area", area_error(&b, METHOD_OURS),
                   area_error(&b, METHOD_YUV_RGB), area_error(&b, METHOD_YUV_ARGB));
        resample_table_free(&b.columns);
        resample_table_free(&b.rows);
        resample_buffer_free(&b.middle);
        free(b.rgb.pixels);
        free(b.argb);
        free(b.out);
    }
    return 0;
}
