// Shared body of the decoder fuzz targets (fuzz_decode.c and one target per
// decoder): sniff, probe, whole decode and a region + DCT-scaled decode (region
// and minimum size taken from the input's last bytes; native samples and
// their float conversion to 1..4 channels for one in two inputs) with one
// reused Decoder and a small pixel limit.
#ifndef LTC_FUZZ_DECODE_COMMON_H
#define LTC_FUZZ_DECODE_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "decode/decode.h"

// Small enough that bombs are refused quickly, large enough for real seeds.
#define FUZZ_MAX_PIXELS (1u << 20)

static uint16_t tail_value(const uint8_t *data, size_t size, size_t from_end) {
    if (size < from_end + 2) return 0;
    const uint8_t *p = data + size - from_end - 2;
    return (uint16_t)(p[0] | p[1] << 8);
}

// only: decode inputs of this format alone (IMAGE_FORMAT_UNKNOWN: all), so a
// per-decoder target spends its time inside one library.
static int fuzz_decode_input(const uint8_t *data, size_t size, ImageFormat only) {
    if (only != IMAGE_FORMAT_UNKNOWN && decode_sniff(data, size) != only) return 0;
    // One Decoder for the whole run, as a worker thread keeps one: this also
    // checks that a failure leaves it usable.
    static Decoder *decoder;
    if (!decoder) decoder = decoder_create(FUZZ_MAX_PIXELS);
    if (!decoder) return 0;
    (void)image_format_name(decode_sniff(data, size));
    ErrorMessage err;
    ImageInfo info;
    DecodedImage out;
    if (decoder_probe(decoder, data, size, &info, &err) != 0) return 0;
    if (decoder_decode(decoder, data, size, NULL, &out, &err) == 0) {
        // Touch every returned byte so ASan checks the whole view.
        volatile uint8_t sink = 0;
        for (int y = 0; y < out.image.height; y++)
            for (int x = 0; x < out.image.width * 3; x++) sink ^= out.image.pixels[y * out.image.stride + x];
        (void)sink;
    }
    // Regions reach one pixel past each edge, to test clamping.
    const int64_t width = info.width, height = info.height;
    DecodeRequest request = {0};
    request.native = tail_value(data, size, 12) & 1;
    request.region.x = (int)(tail_value(data, size, 0) % (width + 1) - 1);
    request.region.y = (int)(tail_value(data, size, 2) % (height + 1) - 1);
    request.region.width = (int)(tail_value(data, size, 4) % (width + 2));
    request.region.height = (int)(tail_value(data, size, 6) % (height + 2));
    request.min_width = tail_value(data, size, 8) % 300;
    request.min_height = tail_value(data, size, 10) % 300;
    if (request.native && decoder_decode(decoder, data, size, &request, &out, &err) == 0) {
        const SampleImage *s = &out.samples;
        const int channels = 1 + (tail_value(data, size, 12) >> 1) % 4;
        float *values = malloc((size_t)s->width * (size_t)s->height * (size_t)channels * 4);
        const size_t stride = (size_t)s->width * (size_t)channels;
        if (values && samples_to_float(s, channels, values, stride, &err) == 0) {
            volatile float sum = 0;
            for (size_t i = 0; i < (size_t)s->width * (size_t)s->height * (size_t)channels; i++)
                sum += values[i];
            (void)sum;
        }
        free(values);
    } else if (!request.native && decoder_decode(decoder, data, size, &request, &out, &err) == 0 &&
               out.image.height > 0) {
        volatile uint8_t last = out.image.pixels[(size_t)(out.image.height - 1) * out.image.stride +
                                                 (size_t)out.image.width * 3 - 1];
        (void)last;
    }
    return 0;
}

#endif
