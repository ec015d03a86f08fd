// Native samples -> 8-bit RGB: the one place where deeper samples, CMYK,
// grey and extra channels of the formats that keep their samples (TIFF, PNM,
// DICOM) become what the 8-bit pipeline takes. The rules, also in
// docs/input-pipeline.md:
//   - 8-bit samples are kept.
//   - 16-bit samples keep their top 8 significant bits (v >> (bits - 8)), as
//     libpng's strip_16 does for our 16-bit PNG and as Pillow does for 16-bit
//     RGB PNG and TIFF. (Pillow's convert("RGB") of a 16-bit grey image
//     instead clips every value above 255 to white.)
//   - 32-bit float samples map [0, 1] to 0..255, rounded, values outside
//     clamped (floats in [0, 1] are the convention of torchvision's float
//     images; Pillow's mode "F" clips raw values to 0..255 instead).
//   - grey is repeated to R, G and B; alpha and extra channels are dropped
//     (not composited), as Pillow's convert("RGB") does.
//   - CMYK (ink amounts, 0 = no ink) as Pillow's convert("RGB"): with
//     nk = 255 - K, R = nk - C * nk / 255 (MULDIV255 rounding), same for G, B.
//   - other band counts without a colour meaning cannot be RGB: refused.
#include "decode/decode_internal.h"

#include <math.h>
#include <string.h>

size_t sample_type_bytes(SampleType type) {
    switch (type) {
    case SAMPLE_U8: return 1;
    case SAMPLE_U16: return 2;
    case SAMPLE_F32: return 4;
    }
    return 1;
}

// Pillow's MULDIV255: a * b / 255 rounded.
static inline int muldiv255(int a, int b) {
    int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
}

// One sample of row `row` at index i, reduced to 8 bits.
static inline uint8_t sample_u8(const SampleImage *in, const uint8_t *row, size_t i, int shift) {
    switch (in->type) {
    case SAMPLE_U8: return row[i];
    case SAMPLE_U16: {
        uint16_t v;
        memcpy(&v, row + 2 * i, 2);
        const unsigned reduced = (unsigned)v >> shift;
        return (uint8_t)(reduced > 255 ? 255 : reduced);  // bits beyond `bits` are set
    }
    case SAMPLE_F32: {
        float v;
        memcpy(&v, row + 4 * i, 4);
        if (!(v > 0.0f)) return 0;  // also NaN
        if (v >= 1.0f) return 255;
        return (uint8_t)lrintf(v * 255.0f);
    }
    }
    return 0;
}

int samples_to_rgb8(const SampleImage *in, uint8_t *out, size_t out_stride, ErrorMessage *err) {
    int colour_channels = in->channels;  // bands: 1 or 3 of them (samples_channels_check)
    switch (in->colour) {
    case COLOUR_GREY: colour_channels = 1; break;
    case COLOUR_RGB: colour_channels = 3; break;
    case COLOUR_CMYK: colour_channels = 4; break;
    case COLOUR_BANDS: break;
    }
    if (in->channels < colour_channels)
        return error_set(err, "corrupt data: %d channels for a %d-channel colour model",
                         in->channels, colour_channels);
    if (samples_channels_check(in->colour, in->channels, 0, err) != 0) return -1;
    if (in->type == SAMPLE_U8 && colour_channels == in->channels && colour_channels != 4) {
        // Already 8 bits, nothing to drop: rows copied (RGB) or spread (grey).
        for (int y = 0; y < in->height; y++) {
            const uint8_t *row = in->pixels + (size_t)y * in->stride;
            uint8_t *dst = out + (size_t)y * out_stride;
            if (colour_channels == 3) {
                memcpy(dst, row, (size_t)in->width * 3);
            } else {
                for (int x = 0; x < in->width; x++, dst += 3) dst[0] = dst[1] = dst[2] = row[x];
            }
        }
        return 0;
    }
    const int bits = in->type == SAMPLE_U16 && in->bits >= 8 && in->bits <= 16 ? in->bits : 16;
    const int shift = bits - 8;
    const size_t step = (size_t)in->channels;
    for (int y = 0; y < in->height; y++) {
        const uint8_t *row = in->pixels + (size_t)y * in->stride;
        uint8_t *dst = out + (size_t)y * out_stride;
        for (int x = 0; x < in->width; x++, dst += 3) {
            const size_t i = (size_t)x * step;
            if (colour_channels == 1) {
                dst[0] = dst[1] = dst[2] = sample_u8(in, row, i, shift);
            } else if (colour_channels == 3) {
                for (int c = 0; c < 3; c++) dst[c] = sample_u8(in, row, i + (size_t)c, shift);
            } else {
                const int no_black = 255 - sample_u8(in, row, i + 3, shift);
                for (int c = 0; c < 3; c++) {
                    const int ink = sample_u8(in, row, i + (size_t)c, shift);
                    dst[c] = (uint8_t)(no_black - muldiv255(ink, no_black));
                }
            }
        }
    }
    return 0;
}

// A native request keeps the samples; those outside the Decoder's own
// buffers (a library's memory) are copied into its pixel buffer.
static int finish_native(Decoder *decoder, const SampleImage *samples, PixelRect covered,
                         DecodedImage *out, ErrorMessage *err) {
    out->samples = *samples;
    out->covered = covered;
    int which;
    size_t offset;
    if (decoder_buffer_find(decoder, samples->pixels, &which, &offset) == 0) return 0;
    const size_t row = (size_t)samples->width * (size_t)samples->channels *
                       sample_type_bytes(samples->type);
    uint8_t *pixels = decode_buffer_reserve(&decoder->pixels, row * (size_t)samples->height, err);
    if (!pixels) return -1;
    for (int y = 0; y < samples->height; y++)
        memcpy(pixels + (size_t)y * row, samples->pixels + (size_t)y * samples->stride, row);
    out->samples.pixels = pixels;
    out->samples.stride = row;
    return 0;
}

int decode_finish(Decoder *decoder, const SampleImage *samples, PixelRect covered,
                  DecodedImage *out, ErrorMessage *err) {
    if (decoder->native) return finish_native(decoder, samples, covered, out, err);
    const size_t stride = (size_t)samples->width * 3;
    uint8_t *pixels =
        decode_buffer_reserve(&decoder->pixels, stride * (size_t)samples->height, err);
    if (!pixels) return -1;
    if (samples_to_rgb8(samples, pixels, stride, err) != 0) return -1;
    out->image = (Image){pixels, samples->width, samples->height, stride};
    out->covered = covered;
    return 0;
}
