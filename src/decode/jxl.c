// JPEG XL through libjxl: the first frame (coalesced, so an animation's first
// displayed frame), whole: libjxl 0.7 offers neither region nor reduced-scale
// output. Colour images come out as 8-bit RGB and grey ones as 8-bit grey,
// converted by libjxl (to the file's colour encoding, rounded); alpha and
// extra channels are not requested. A native request (decode.h) asks libjxl
// for 16-bit samples where the file has more than 8 bits per sample and for
// floats where it stores floats. The codestream's orientation is applied
// by libjxl, always (it is part of the format).
// The size in the basic info is checked against the pixel limit before any
// pixel buffer exists; one thread per image (the loader runs one per worker).
#include "decode/decode_internal.h"

#include <string.h>

#include <jxl/decode.h>

static int report_status(JxlDecoderStatus status, ErrorMessage *err) {
    if (status == JXL_DEC_NEED_MORE_INPUT)
        return error_set(err, "truncated: JPEG XL data ends early");
    return error_set(err, "corrupt data: libjxl could not decode the JPEG XL data");
}

// Runs the decoder to the basic info (and, with pixels, to the first full
// frame). info gets the size as the caller sees it.
typedef struct JxlRun {
    JxlDecoder *decoder;
    JxlBasicInfo basic;
    int width, height;  // after orientation
} JxlRun;

static int start(JxlRun *run, const uint8_t *data, size_t size, int events, ErrorMessage *err) {
    run->decoder = JxlDecoderCreate(NULL);
    if (!run->decoder) return error_set(err, "out of memory: cannot create a JPEG XL decoder");
    if (JxlDecoderSubscribeEvents(run->decoder, events) != JXL_DEC_SUCCESS ||
        JxlDecoderSetInput(run->decoder, data, size) != JXL_DEC_SUCCESS)
        return error_set(err, "corrupt data: libjxl refused the decoder settings");
    // The input is not closed: a cut file then asks for more input (our
    // "truncated") instead of failing with a message libjxl prints.
    const JxlDecoderStatus status = JxlDecoderProcessInput(run->decoder);
    if (status != JXL_DEC_BASIC_INFO) return report_status(status, err);
    if (JxlDecoderGetBasicInfo(run->decoder, &run->basic) != JXL_DEC_SUCCESS)
        return error_set(err, "corrupt data: JPEG XL basic info unreadable");
    const int swap = run->basic.orientation >= JXL_ORIENT_TRANSPOSE;  // libjxl applies it
    if (run->basic.xsize > DECODE_MAX_SIDE || run->basic.ysize > DECODE_MAX_SIDE)
        return error_set(err, "image too large: JPEG XL %u x %u exceeds the side limit %d",
                         run->basic.xsize, run->basic.ysize, DECODE_MAX_SIDE);
    run->width = (int)(swap ? run->basic.ysize : run->basic.xsize);
    run->height = (int)(swap ? run->basic.xsize : run->basic.ysize);
    return 0;
}

// The type of the native samples: float where the image stores floats.
static SampleType native_type(const JxlBasicInfo *basic) {
    if (basic->exponent_bits_per_sample > 0) return SAMPLE_F32;
    return basic->bits_per_sample > 8 ? SAMPLE_U16 : SAMPLE_U8;
}

int decode_jxl_probe(Decoder *decoder, const uint8_t *data, size_t size, ImageInfo *info,
                     ErrorMessage *err) {
    JxlRun run = {0};
    (void)decoder;
    const int status = start(&run, data, size, JXL_DEC_BASIC_INFO, err);
    JxlDecoderDestroy(run.decoder);
    if (status != 0) return -1;
    info->width = run.width;
    info->height = run.height;
    // What decode_frame gives: grey or RGB, alpha dropped.
    info->channels = run.basic.num_color_channels == 1 ? 1 : 3;
    info->colour = info->channels == 1 ? COLOUR_GREY : COLOUR_RGB;
    info->sample_type = native_type(&run.basic);
    return 0;
}

// The sample type a decode asks libjxl for.
static SampleType output_type(const Decoder *decoder, const JxlBasicInfo *basic) {
    return decoder->native ? native_type(basic) : SAMPLE_U8;
}

// Pixels of the first frame into the samples buffer (channels 1 or 3).
static int decode_frame(Decoder *decoder, JxlRun *run, SampleImage *image, ErrorMessage *err) {
    const SampleType type = output_type(decoder, &run->basic);
    const JxlDataType data_type = type == SAMPLE_F32   ? JXL_TYPE_FLOAT
                                  : type == SAMPLE_U16 ? JXL_TYPE_UINT16
                                                       : JXL_TYPE_UINT8;
    const JxlPixelFormat format = {run->basic.num_color_channels == 1 ? 1 : 3, data_type,
                                   JXL_NATIVE_ENDIAN, 0};
    const size_t pixel_bytes = format.num_channels * sample_type_bytes(type);
    for (;;) {
        const JxlDecoderStatus status = JxlDecoderProcessInput(run->decoder);
        if (status == JXL_DEC_NEED_IMAGE_OUT_BUFFER) {
            size_t bytes = 0;
            if (JxlDecoderImageOutBufferSize(run->decoder, &format, &bytes) != JXL_DEC_SUCCESS ||
                bytes != (size_t)run->width * run->height * pixel_bytes)
                return error_set(err, "corrupt data: JPEG XL output size mismatch");
            uint8_t *pixels = decode_buffer_reserve(&decoder->samples, bytes, err);
            if (!pixels) return -1;
            if (JxlDecoderSetImageOutBuffer(run->decoder, &format, pixels, bytes) !=
                JXL_DEC_SUCCESS)
                return error_set(err, "corrupt data: libjxl refused the output buffer");
            *image = (SampleImage){pixels,
                                   run->width,
                                   run->height,
                                   (int)format.num_channels,
                                   (size_t)run->width * pixel_bytes,
                                   type,
                                   format.num_channels == 1 ? COLOUR_GREY : COLOUR_RGB,
                                   16};
        } else if (status == JXL_DEC_FULL_IMAGE) {
            return image->pixels ? 0 : error_set(err, "corrupt data: JPEG XL frame without pixels");
        } else {
            return report_status(status, err);
        }
    }
}

int decode_jxl_decode(Decoder *decoder, const uint8_t *data, size_t size,
                      const DecodeRequest *request, DecodedImage *out, ErrorMessage *err) {
    JxlRun run = {0};
    PixelRect region;
    SampleImage image = {0};
    int status = start(&run, data, size, JXL_DEC_BASIC_INFO | JXL_DEC_FULL_IMAGE, err);
    if (status == 0)
        status = decode_check_size(decoder, "JPEG XL image", run.width, run.height, err);
    if (status == 0) status = decode_clamp_region(request, run.width, run.height, &region, err);
    if (status == 0) status = decode_frame(decoder, &run, &image, err);
    JxlDecoderDestroy(run.decoder);
    if (status != 0) return -1;
    const size_t pixel_bytes = (size_t)image.channels * sample_type_bytes(image.type);
    image.pixels += (size_t)region.y * image.stride + (size_t)region.x * pixel_bytes;
    image.width = region.width;
    image.height = region.height;
    return decode_finish(decoder, &image, region, out, err);
}
