// Native samples -> float32 with a given number of channels: what the deep
// path of the pipeline (16-bit and float images, channel counts other than
// RGB's) reads, by the rules of decode.h's samples_to_float, also in
// docs/input-pipeline.md ("Depth and channels"):
//   - values: 8-bit v / 255, 16-bit v / (2^bits - 1), float as stored, so
//     an 8- or 16-bit image spans [0, 1] as torchvision's
//     to_dtype(float32, scale=True) (and so LightlyTrain) maps it;
//   - channels: all stored channels when their count is the one asked for,
//     else the colour (grey repeated, RGB as is or to luma, CMYK to RGB).
#include "decode/decode_internal.h"

#include <math.h>
#include <string.h>

// ITU-R 601-2 luma, the weights of Pillow's convert("L") (299/1000,
// 587/1000, 114/1000), kept in float.
#define LUMA_RED 0.299f
#define LUMA_GREEN 0.587f
#define LUMA_BLUE 0.114f

// Sample i of a row as a float in the documented range.
static inline float sample_value(const SampleImage *in, const uint8_t *row, size_t i,
                                 float u16_scale) {
    switch (in->type) {
    case SAMPLE_U8: return (float)row[i] * (1.0f / 255.0f);
    case SAMPLE_U16: {
        uint16_t v;
        memcpy(&v, row + 2 * i, 2);
        const float value = (float)v * u16_scale;
        return value > 1.0f ? 1.0f : value;  // bits beyond `bits` are set
    }
    case SAMPLE_F32: {
        float v;
        memcpy(&v, row + 4 * i, 4);
        return isfinite(v) ? v : 0.0f;
    }
    }
    return 0.0f;
}

// The channels an image's colour has (CMYK: 3, after conversion), 0 for
// bands without a colour meaning other than 1 or 3 of them.
static int colour_channels(ColourModel colour, int stored) {
    switch (colour) {
    case COLOUR_GREY: return 1;
    case COLOUR_RGB: return 3;
    case COLOUR_CMYK: return 3;
    case COLOUR_BANDS: return stored == 1 || stored == 3 ? stored : 0;
    }
    return 0;
}

static const char *colour_name(ColourModel colour, int stored) {
    switch (colour) {
    case COLOUR_GREY: return stored > 1 ? "grey with alpha or extra bands" : "grey";
    case COLOUR_RGB: return stored > 3 ? "RGB with alpha or extra bands" : "RGB";
    case COLOUR_CMYK: return "CMYK";
    case COLOUR_BANDS: return "bands without colour meaning";
    }
    return "unknown";
}

int samples_channels_check(ColourModel colour, int stored, int channels, ErrorMessage *err) {
    if (channels == 0) {  // 8-bit RGB: samples_to_rgb8's rule and words
        if (colour_channels(colour, stored) == 0)  // bands other than 1 or 3
            return error_set(err, "unsupported format: %d bands without colour meaning cannot "
                                  "be read as RGB", stored);
        return 0;
    }
    if (channels < 1 || channels > SAMPLES_MAX_CHANNELS)
        return error_set(err, "%d channels asked for, 1..%d are read", channels,
                         SAMPLES_MAX_CHANNELS);
    const int from_colour = colour_channels(colour, stored);
    const int minimum = colour == COLOUR_CMYK ? 4 : colour == COLOUR_RGB ? 3 : 1;
    if (stored < minimum)
        return error_set(err, "corrupt data: %d channels for a %d-channel colour model", stored,
                         minimum);
    if (stored != channels &&
        !(from_colour == 1 || (from_colour == 3 && (channels == 3 || channels == 1))))
        return error_set(err,
                         "unsupported format: an image of %d channel(s) (%s) cannot be read as "
                         "%d channel(s) (--num-channels)",
                         stored, colour_name(colour, stored), channels);
    return 0;
}

int samples_to_float(const SampleImage *in, int channels, float *out, size_t out_stride,
                     ErrorMessage *err) {
    if (channels < 1) return error_set(err, "%d channels asked for", channels);
    if (samples_channels_check(in->colour, in->channels, channels, err) != 0) return -1;
    const int stored = in->channels;
    const int colour = colour_channels(in->colour, stored);
    const int as_stored = stored == channels;
    const int bits = in->type == SAMPLE_U16 && in->bits >= 8 && in->bits <= 16 ? in->bits : 16;
    const float u16_scale = 1.0f / (float)((1u << bits) - 1u);
    const size_t step = (size_t)stored;
    for (int y = 0; y < in->height; y++) {
        const uint8_t *row = in->pixels + (size_t)y * in->stride;
        float *dst = out + (size_t)y * out_stride;
        for (int x = 0; x < in->width; x++, dst += channels) {
            const size_t i = (size_t)x * step;
            if (as_stored) {
                for (int c = 0; c < channels; c++)
                    dst[c] = sample_value(in, row, i + (size_t)c, u16_scale);
                continue;
            }
            float rgb[3];
            if (colour == 1) {
                rgb[0] = sample_value(in, row, i, u16_scale);
            } else if (in->colour == COLOUR_CMYK) {  // Pillow's formula, unrounded
                const float no_black = 1.0f - sample_value(in, row, i + 3, u16_scale);
                for (int c = 0; c < 3; c++)
                    rgb[c] = no_black * (1.0f - sample_value(in, row, i + (size_t)c, u16_scale));
            } else {
                for (int c = 0; c < 3; c++)
                    rgb[c] = sample_value(in, row, i + (size_t)c, u16_scale);
            }
            if (colour == 1) {
                for (int c = 0; c < channels; c++) dst[c] = rgb[0];
            } else if (channels == 3) {
                memcpy(dst, rgb, sizeof rgb);
            } else {
                dst[0] = LUMA_RED * rgb[0] + LUMA_GREEN * rgb[1] + LUMA_BLUE * rgb[2];
            }
        }
    }
    return 0;
}
