// Benchmark of the view-augmentation kernels on one thread: for each kernel,
// scalar vs AVX2, in megapixels of 224 x 224 output per second and images
// per second. Usage: bench_augment [seconds per measurement, default 0.3].
// The last row (whole view_render) uses the run-time choice; run it again
// with LTC_SIMD=scalar for the scalar pipeline.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/augment.h"
#include "augment/blur.h"
#include "augment/color.h"
#include "augment/resize.h"
#include "util/cpu.h"
#include "util/rng.h"

#define SIZE 224
#define PIXELS (SIZE * SIZE)

typedef void (*HorizontalPass)(const uint8_t *, size_t, const uint8_t *, int, const ResampleTable *,
                               uint16_t *, size_t);
typedef void (*VerticalPass)(const uint16_t *, size_t, int, const ResampleTable *, int, uint8_t *,
                             size_t);

typedef struct Bench {
    Image source;          // random source image
    uint8_t *view;         // (SIZE, SIZE, 3) working image
    uint8_t *view_copy;    // its pristine content
    uint16_t *middle;      // resample intermediate of the single-pass rows
    ResampleBuffer buffer; // intermediate of the whole resizes
    ResampleTable columns, rows;
    int simd;              // 1: AVX2 kernels, 0: scalar
    int kernel;            // which row of the table
    double seconds;
} Bench;

enum {
    K_RESIZE_SHRINK, K_RESIZE_FRACTIONAL, K_RESIZE_GROW, K_HORIZONTAL, K_VERTICAL, K_WIDEN,
    K_NARROW, K_BRIGHTNESS,
    K_CONTRAST, K_SATURATION, K_HUE, K_GREYSCALE, K_SOLARIZE, K_BLUR_1, K_BLUR_2, K_COUNT
};
static const char *kernel_names[K_COUNT] = {
    "resize 448->224 (area)", "resize 401x333 frac->224", "resize 160->224 (bilinear)",
    "  horizontal pass (448->224)", "  vertical pass (448->224)", "  vertical u8 pass (448->224)",
    "  horizontal u16 pass (448->224)", "brightness", "contrast",
    "saturation", "hue", "greyscale", "solarize", "blur sigma 1.0", "blur sigma 2.0"};

// Both passes as the pipeline runs them (order picked from the tables).
static void separable(Bench *b, const uint8_t *src, size_t stride, const uint8_t *end) {
    resample_separable_with(src, stride, end, &b->columns, &b->rows, &b->buffer, b->view, SIZE * 3,
                            RESAMPLE_ORDER_AUTO, b->simd);
}

static void prepare(Bench *b) {
    const Image *s = &b->source;
    switch (b->kernel) {
        case K_RESIZE_SHRINK: case K_HORIZONTAL: case K_VERTICAL: case K_WIDEN: case K_NARROW:
            resize_table(&b->columns, 0, 448, s->width, SIZE, 1, RESIZE_ANTIALIASED);
            resize_table(&b->rows, 0, 448, s->height, SIZE, 0, RESIZE_ANTIALIASED);
            break;
        case K_RESIZE_FRACTIONAL:
            resize_table(&b->columns, 37.3, 401.4, s->width, SIZE, 0, RESIZE_ANTIALIASED);
            resize_table(&b->rows, 12.7, 333.1, s->height, SIZE, 0, RESIZE_ANTIALIASED);
            break;
        case K_RESIZE_GROW:
            resize_table(&b->columns, 100, 160, s->width, SIZE, 0, RESIZE_ANTIALIASED);
            resize_table(&b->rows, 50, 160, s->height, SIZE, 0, RESIZE_ANTIALIASED);
            break;
        case K_BLUR_1: case K_BLUR_2:
            blur_table(&b->columns, SIZE, b->kernel == K_BLUR_1 ? 1.0f : 2.0f);
            blur_table(&b->rows, SIZE, b->kernel == K_BLUR_1 ? 1.0f : 2.0f);
            break;
    }
}

// One image's worth of the kernel.
static void run_once(Bench *b) {
    const Image *s = &b->source;
    const uint8_t *end = image_pixels_end(s);
    const size_t values = SIZE * 3;
    uint8_t *v = b->view;
    const int simd = b->simd;
    switch (b->kernel) {
        case K_RESIZE_SHRINK: case K_RESIZE_FRACTIONAL: case K_RESIZE_GROW:
            separable(b, s->pixels, s->stride, end);
            break;
        case K_HORIZONTAL:
            (simd ? resample_horizontal_avx2 : resample_horizontal_scalar)(s->pixels, s->stride, end, 448, &b->columns, b->middle, values);
            break;
        case K_VERTICAL:
            (simd ? resample_vertical_avx2 : resample_vertical_scalar)(b->middle, values, (int)values, &b->rows, 0, v, values);
            break;
        case K_WIDEN:  // 448 source columns kept
            (simd ? resample_vertical_widen_avx2 : resample_vertical_widen_scalar)(s->pixels, s->stride, 448 * 3, &b->rows, 0, b->middle, 448 * 3);
            break;
        case K_NARROW:
            (simd ? resample_horizontal_narrow_avx2 : resample_horizontal_narrow_scalar)(b->middle, 448 * 3, b->middle + 448 * 3 * SIZE, SIZE, &b->columns, 0, v, values);
            break;
        case K_BRIGHTNESS:
            (simd ? color_affine_avx2 : color_affine_scalar)(v, PIXELS * 3, 80000, 0);
            break;
        case K_CONTRAST: {
            const uint64_t sum = simd ? color_luma_sum_avx2(v, PIXELS) : color_luma_sum_scalar(v, PIXELS);
            (simd ? color_affine_avx2 : color_affine_scalar)(v, PIXELS * 3, 50000, (int32_t)(sum / PIXELS) * 15536);
            break;
        }
        case K_SATURATION:
            (simd ? color_saturation_avx2 : color_saturation_scalar)(v, PIXELS, 90000);
            break;
        case K_HUE:
            (simd ? color_hue_avx2 : color_hue_scalar)(v, PIXELS, 0.1f);
            break;
        case K_GREYSCALE:
            (simd ? color_greyscale_avx2 : color_greyscale_scalar)(v, PIXELS);
            break;
        case K_SOLARIZE:
            (simd ? color_solarize_avx2 : color_solarize_scalar)(v, PIXELS * 3, 128);
            break;
        case K_BLUR_1: case K_BLUR_2:
            separable(b, v, values, v + PIXELS * 3);
            break;
    }
}

// Seconds per image: the fastest of many short rounds of 8 images over about
// b->seconds, so that time slices lost to other processes on a busy machine
// do not count.
static double measure(Bench *b) {
    prepare(b);
    double best = 1e30;
    long count = 0;
    const double start = time_now();
    while (time_now() - start < b->seconds) {
        const double round_start = time_now();
        for (int i = 0; i < 8; i++, count++) {
            if (count % 16 == 0) memcpy(b->view, b->view_copy, PIXELS * 3);  // keep colours varied
            run_once(b);
        }
        const double per_image = (time_now() - round_start) / 8;
        if (per_image < best) best = per_image;
    }
    return best;
}

static double measure_render(double seconds) {
    ViewSet set;
    view_set_simclr(&set, SIZE);
    Image source = {.width = 500, .height = 375, .stride = 1500};
    source.pixels = malloc(1500 * 375);
    Rng fill = rng_make(7, 0, 0, 0);
    for (size_t i = 0; i < 1500 * 375; i++) source.pixels[i] = (uint8_t)(rng_u32(&fill) & 0xff);
    AugmentScratch *scratch = augment_scratch_create();
    uint8_t *out = malloc(PIXELS * 3);
    const PixelRect whole = {0, 0, 500, 375};
    long count = 0;
    const double start = time_now();
    while (time_now() - start < seconds) {
        Rng rng = rng_make(1, 0, (uint64_t)count, RNG_STREAM_VIEW);
        ViewParams params;
        view_sample(&set.views[0], 500, 375, &rng, &params);
        if (view_render(&set.views[0], &params, &source, whole, out, scratch, NULL)) break;
        count++;
    }
    const double elapsed = time_now() - start;
    augment_scratch_destroy(scratch);
    free(out);
    free(source.pixels);
    return elapsed / (double)(count ? count : 1);
}

int main(int argc, char **argv) {
    Bench b = {.seconds = argc > 1 ? atof(argv[1]) : 0.3};
    if (!(b.seconds > 0)) {
        fprintf(stderr, "usage: bench_augment [seconds per measurement]\n");
        return 2;
    }
    b.source = (Image){.width = 640, .height = 480, .stride = 640 * 3};
    b.source.pixels = malloc(b.source.stride * 480);
    b.view = malloc(PIXELS * 3);
    b.view_copy = malloc(PIXELS * 3);
    b.middle = malloc(sizeof(uint16_t) * 480 * SIZE * 3);
    if (!b.source.pixels || !b.view || !b.view_copy || !b.middle) return 1;
    Rng rng = rng_make(3, 0, 0, 0);
    for (size_t i = 0; i < b.source.stride * 480; i++) b.source.pixels[i] = (uint8_t)(rng_u32(&rng) & 0xff);
    for (size_t i = 0; i < PIXELS * 3; i++) b.view_copy[i] = (uint8_t)(rng_u32(&rng) & 0xff);
    memcpy(b.view, b.view_copy, PIXELS * 3);
    const int avx2 = cpu_has_avx2();
    printf("bench_augment: one thread, %dx%d output, %s\n", SIZE, SIZE,
           avx2 ? "AVX2 available" : "no AVX2 (scalar only)");
    printf("%-30s %12s %12s %8s %12s\n", "kernel", "scalar Mpx/s", "AVX2 Mpx/s", "speedup", "best img/s");
    for (int k = 0; k < K_COUNT; k++) {
        b.kernel = k;
        b.simd = 0;
        const double scalar = measure(&b);
        double simd = 0;
        if (avx2) {
            b.simd = 1;
            simd = measure(&b);
        }
        const double best = avx2 && simd < scalar ? simd : scalar;
        if (avx2)
            printf("%-30s %12.1f %12.1f %7.2fx %12.0f\n", kernel_names[k], PIXELS / scalar / 1e6,
                   PIXELS / simd / 1e6, scalar / simd, 1.0 / best);
        else
            printf("%-30s %12.1f %12s %8s %12.0f\n", kernel_names[k], PIXELS / scalar / 1e6, "-", "-",
                   1.0 / best);
    }
    const double render = measure_render(3 * b.seconds);
    printf("%-30s %25.1f Mpx/s (%s) %8.0f img/s\n", "view_render simclr 500x375", PIXELS / render / 1e6,
           avx2 ? "AVX2" : "scalar", 1.0 / render);
    resample_table_free(&b.columns);
    resample_table_free(&b.rows);
    resample_buffer_free(&b.buffer);
    free(b.source.pixels);
    free(b.view);
    free(b.view_copy);
    free(b.middle);
    return 0;
}
