// EXIF orientation as Pillow's ImageOps.exif_transpose applies it:
//   2 FLIP_LEFT_RIGHT   3 ROTATE_180   4 FLIP_TOP_BOTTOM   5 TRANSPOSE
//   6 ROTATE_270 (90 degrees clockwise)   7 TRANSVERSE   8 ROTATE_90.
// Written as "oriented pixel (x, y) shows stored pixel (u, v)": swap the axes
// for 5..8 (u = y, v = x), then mirror u and/or v:
//   o   swap  mirror u  mirror v
//   2    -       x         -
//   3    -       x         x
//   4    -       -         x
//   5    x       -         -
//   6    x       -         x
//   7    x       x         x
//   8    x       x         -
// Rectangles map the same way, so a region of the oriented image is decoded
// as the matching region of the stored one and only the decoded pixels are
// rearranged.
#include "decode/decode_internal.h"

#include <string.h>

typedef struct Transform {
    int swap, mirror_u, mirror_v;
} Transform;

static Transform transform_of(int orientation) {
    static const Transform table[9] = {
        {0, 0, 0}, {0, 0, 0}, {0, 1, 0}, {0, 1, 1}, {0, 0, 1},
        {1, 0, 0}, {1, 0, 1}, {1, 1, 1}, {1, 1, 0},
    };
    return orientation >= 1 && orientation <= 8 ? table[orientation] : table[1];
}

void orientation_size(int orientation, int width, int height, int *out_width, int *out_height) {
    const int swap = transform_of(orientation).swap;
    *out_width = swap ? height : width;
    *out_height = swap ? width : height;
}

PixelRect orientation_to_stored(int orientation, PixelRect oriented, int stored_width,
                                int stored_height) {
    const Transform t = transform_of(orientation);
    PixelRect r =
        t.swap ? (PixelRect){oriented.y, oriented.x, oriented.height, oriented.width} : oriented;
    if (t.mirror_u) r.x = stored_width - (r.x + r.width);
    if (t.mirror_v) r.y = stored_height - (r.y + r.height);
    return r;
}

PixelRect orientation_from_stored(int orientation, PixelRect stored, int stored_width,
                                  int stored_height) {
    const Transform t = transform_of(orientation);
    PixelRect r = stored;
    if (t.mirror_u) r.x = stored_width - (r.x + r.width);
    if (t.mirror_v) r.y = stored_height - (r.y + r.height);
    return t.swap ? (PixelRect){r.y, r.x, r.height, r.width} : r;
}

// Rearranges width x height stored pixels of `pixel` bytes into `buffer`;
// *out gets the oriented rows (*out_stride bytes apart). Always inlined, so
// that the 8-bit RGB caller's constant 3-byte copies stay inline copies.
static inline __attribute__((always_inline)) int orient_pixels(
    int orientation, const uint8_t *pixels, int in_width, int in_height, size_t in_stride,
    size_t pixel, DecodeBuffer *buffer, uint8_t **out, size_t *out_stride, ErrorMessage *err) {
    const Transform t = transform_of(orientation);
    int width, height;
    orientation_size(orientation, in_width, in_height, &width, &height);
    const size_t stride = (size_t)width * pixel;
    uint8_t *oriented = decode_buffer_reserve(buffer, stride * (size_t)height, err);
    if (!oriented) return -1;
    // Oriented (x, y) reads stored (u, v); u moves by du and v by dv per step
    // in x (in bytes), and per row both start over from a row-dependent place.
    const ptrdiff_t row = (ptrdiff_t)in_stride, size = (ptrdiff_t)pixel;
    const ptrdiff_t step_u = t.mirror_u ? -size : size, step_v = t.mirror_v ? -row : row;
    const uint8_t *origin = pixels + (t.mirror_u ? (ptrdiff_t)(in_width - 1) * size : 0) +
                            (t.mirror_v ? (ptrdiff_t)(in_height - 1) * row : 0);
    const ptrdiff_t along_x = t.swap ? step_v : step_u;  // x walks v when swapped
    const ptrdiff_t along_y = t.swap ? step_u : step_v;
    for (int y = 0; y < height; y++) {
        const uint8_t *src = origin + y * along_y;
        uint8_t *dst = oriented + (size_t)y * stride;
        for (int x = 0; x < width; x++, src += along_x, dst += pixel) memcpy(dst, src, pixel);
    }
    *out = oriented;
    *out_stride = stride;
    return 0;
}

int orientation_apply(int orientation, Image *in, DecodeBuffer *buffer, ErrorMessage *err) {
    const Transform t = transform_of(orientation);
    if (!t.swap && !t.mirror_u && !t.mirror_v) return 0;
    uint8_t *out;
    size_t stride;
    if (orient_pixels(orientation, in->pixels, in->width, in->height, in->stride, 3, buffer, &out,
                      &stride, err) != 0)
        return -1;
    int width, height;
    orientation_size(orientation, in->width, in->height, &width, &height);
    *in = (Image){out, width, height, stride};
    return 0;
}

int orientation_apply_samples(int orientation, SampleImage *in, DecodeBuffer *buffer,
                              ErrorMessage *err) {
    const Transform t = transform_of(orientation);
    if (!t.swap && !t.mirror_u && !t.mirror_v) return 0;
    uint8_t *out;
    size_t stride;
    const size_t pixel = (size_t)in->channels * sample_type_bytes(in->type);
    if (orient_pixels(orientation, in->pixels, in->width, in->height, in->stride, pixel, buffer,
                      &out, &stride, err) != 0)
        return -1;
    orientation_size(orientation, in->width, in->height, &in->width, &in->height);
    in->pixels = out;
    in->stride = stride;
    return 0;
}
