// WebP decoding with libwebp: lossy and lossless still images decode straight
// into the Decoder's buffer as RGB (alpha dropped, not composited), cropped to
// the region by libwebp; animated files give their first frame through
// libwebpdemux's WebPAnimDecoder. No scaling. The orientation comes from an
// EXIF chunk (decode_webp_orientation).
#include "decode/decode_internal.h"

#include <string.h>

#include <webp/decode.h>
#include <webp/demux.h>

static int report_status(VP8StatusCode status, ErrorMessage *err) {
    switch (status) {
    case VP8_STATUS_NOT_ENOUGH_DATA: return error_set(err, "truncated: WebP data ends early");
    case VP8_STATUS_UNSUPPORTED_FEATURE:
        return error_set(err, "unsupported format: WebP feature not supported by libwebp");
    case VP8_STATUS_OUT_OF_MEMORY: return error_set(err, "out of memory in libwebp");
    case VP8_STATUS_BITSTREAM_ERROR: return error_set(err, "corrupt data: invalid WebP bitstream");
    default: break;
    }
    return error_set(err, "corrupt data: libwebp status %d", (int)status);
}

int decode_webp_probe(const uint8_t *data, size_t size, ImageInfo *info, ErrorMessage *err) {
    WebPBitstreamFeatures features;
    VP8StatusCode status = WebPGetFeatures(data, size, &features);
    if (status != VP8_STATUS_OK) return report_status(status, err);
    info->width = features.width;  // the canvas size for animations
    info->height = features.height;
    return 0;
}

// The EXIF chunk through libwebpdemux (extended-format files only).
int decode_webp_orientation(const uint8_t *data, size_t size) {
    const WebPData webp_data = {data, size};
    WebPDemuxer *demuxer = WebPDemux(&webp_data);
    if (!demuxer) return 1;
    int orientation = 1;
    WebPChunkIterator chunk;
    if ((WebPDemuxGetI(demuxer, WEBP_FF_FORMAT_FLAGS) & EXIF_FLAG) &&
        WebPDemuxGetChunk(demuxer, "EXIF", 1, &chunk)) {
        orientation = exif_orientation(chunk.chunk.bytes, chunk.chunk.size);
        WebPDemuxReleaseChunkIterator(&chunk);
    }
    WebPDemuxDelete(demuxer);
    return orientation;
}

// Why WebPAnimDecoderNew refused the file: cut short or malformed.
static int report_animation_failure(const WebPData *webp_data, ErrorMessage *err) {
    WebPDemuxState state;
    WebPDemuxer *demuxer = WebPDemuxPartial(webp_data, &state);
    WebPDemuxDelete(demuxer);
    if (state == WEBP_DEMUX_PARSING_HEADER || state == WEBP_DEMUX_PARSED_HEADER)
        return error_set(err, "truncated: animated WebP data ends early");
    return error_set(err, "corrupt data: invalid animated WebP");
}

// The first frame of an animation, composed on its canvas, cut to region.
static int decode_first_frame(Decoder *decoder, const uint8_t *data, size_t size,
                              const PixelRect *region, int canvas_width, DecodedImage *out,
                              ErrorMessage *err) {
    WebPAnimDecoderOptions options;
    if (!WebPAnimDecoderOptionsInit(&options))
        return error_set(err, "unsupported format: libwebpdemux version mismatch");
    options.color_mode = MODE_RGBA;  // the only layouts it offers carry alpha
    options.use_threads = 0;
    const WebPData webp_data = {data, size};
    WebPAnimDecoder *animation = WebPAnimDecoderNew(&webp_data, &options);
    if (!animation) return report_animation_failure(&webp_data, err);
    uint8_t *canvas = NULL;
    int timestamp;
    if (!WebPAnimDecoderGetNext(animation, &canvas, &timestamp)) {
        WebPAnimDecoderDelete(animation);
        return error_set(err, "corrupt data: cannot decode the first WebP frame");
    }
    const size_t stride = (size_t)region->width * 3;
    uint8_t *pixels = decode_buffer_reserve(&decoder->pixels, stride * (size_t)region->height, err);
    if (pixels) {
        for (int y = 0; y < region->height; y++) {
            const uint8_t *src =
                canvas + ((size_t)(region->y + y) * canvas_width + region->x) * 4;
            uint8_t *dst = pixels + (size_t)y * stride;
            for (int x = 0; x < region->width; x++, src += 4, dst += 3) memcpy(dst, src, 3);
        }
    }
    WebPAnimDecoderDelete(animation);
    if (!pixels) return -1;
    out->image = (Image){pixels, region->width, region->height, stride};
    out->covered = *region;
    return 0;
}

// Decodes the whole still image into the scratch buffer, for its status only.
static int decode_whole_image(Decoder *decoder, const uint8_t *data, size_t size, int width,
                              int height, ErrorMessage *err) {
    WebPDecoderConfig config;
    if (!WebPInitDecoderConfig(&config))
        return error_set(err, "unsupported format: libwebp version mismatch");
    const size_t stride = (size_t)width * 3;
    uint8_t *pixels = decode_buffer_reserve(&decoder->scratch, stride * (size_t)height, err);
    if (!pixels) return -1;
    config.output.colorspace = MODE_RGB;
    config.output.is_external_memory = 1;
    config.output.u.RGBA.rgba = pixels;
    config.output.u.RGBA.stride = (int)stride;
    config.output.u.RGBA.size = stride * (size_t)height;
    const VP8StatusCode status = WebPDecode(data, size, &config);
    WebPFreeDecBuffer(&config.output);
    return status == VP8_STATUS_OK ? 0 : report_status(status, err);
}

int decode_webp_decode(Decoder *decoder, const uint8_t *data, size_t size,
                       const DecodeRequest *request, DecodedImage *out, ErrorMessage *err) {
    WebPDecoderConfig config;
    if (!WebPInitDecoderConfig(&config))
        return error_set(err, "unsupported format: libwebp version mismatch");
    VP8StatusCode status = WebPGetFeatures(data, size, &config.input);
    if (status != VP8_STATUS_OK) return report_status(status, err);
    const int width = config.input.width, height = config.input.height;
    PixelRect region;
    if (decode_check_size(decoder, "WebP image", width, height, err) != 0 ||
        decode_clamp_region(request, width, height, &region, err) != 0)
        return -1;
    if (config.input.has_animation)
        return decode_first_frame(decoder, data, size, &region, width, out, err);

    // libwebp moves an odd crop origin down to even; do it here so that the
    // covered rectangle is exact.
    PixelRect crop = {region.x & ~1, region.y & ~1, 0, 0};
    crop.width = region.x + region.width - crop.x;
    crop.height = region.y + region.height - crop.y;
    // Checking the whole file: libwebp stops at the crop's last row, so the
    // whole image is decoded first, into scratch (a crop cut from it would
    // differ at the crop's edges, where cropped decoding upsamples chroma on
    // its own).
    const int cropped = crop.width != width || crop.height != height;
    if (request && request->whole_file && cropped &&
        decode_whole_image(decoder, data, size, width, height, err) != 0)
        return -1;
    if (cropped) {
        config.options.use_cropping = 1;
        config.options.crop_left = crop.x;
        config.options.crop_top = crop.y;
        config.options.crop_width = crop.width;
        config.options.crop_height = crop.height;
    }
    const size_t stride = (size_t)crop.width * 3;
    uint8_t *pixels = decode_buffer_reserve(&decoder->pixels, stride * (size_t)crop.height, err);
    if (!pixels) return -1;
    config.output.colorspace = MODE_RGB;
    config.output.is_external_memory = 1;
    config.output.u.RGBA.rgba = pixels;
    config.output.u.RGBA.stride = (int)stride;
    config.output.u.RGBA.size = stride * (size_t)crop.height;
    status = WebPDecode(data, size, &config);
    WebPFreeDecBuffer(&config.output);  // frees nothing external; kept for symmetry
    if (status != VP8_STATUS_OK) return report_status(status, err);
    out->image = (Image){pixels, crop.width, crop.height, stride};
    out->covered = crop;
    return 0;
}
