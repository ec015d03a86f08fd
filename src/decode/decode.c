// The Decoder object and what all formats share: format sniffing, dispatch to
// jpeg.c / png.c / webp.c, size limits, region clamping and the reusable
// buffers.
#include "decode/decode_internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t JPEG_MAGIC[] = {0xFF, 0xD8, 0xFF};
static const uint8_t PNG_MAGIC[] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};

Decoder *decoder_create(uint64_t max_pixels) {
    Decoder *decoder = calloc(1, sizeof *decoder);
    if (!decoder) return NULL;
    decoder->max_pixels = max_pixels ? max_pixels : DECODE_DEFAULT_MAX_PIXELS;
    decoder->jpeg = decode_jpeg_state_create();
    if (!decoder->jpeg) {
        free(decoder);
        return NULL;
    }
    return decoder;
}

void decoder_destroy(Decoder *decoder) {
    if (!decoder) return;
    decode_jpeg_state_destroy(decoder->jpeg);
    free(decoder->pixels.data);
    free(decoder->scratch.data);
    free(decoder);
}

static int starts_with(const uint8_t *data, size_t size, const uint8_t *magic, size_t magic_size) {
    return size >= magic_size && memcmp(data, magic, magic_size) == 0;
}

static int is_webp(const uint8_t *data, size_t size) {
    return size >= 12 && memcmp(data, "RIFF", 4) == 0 && memcmp(data + 8, "WEBP", 4) == 0;
}

ImageFormat decode_sniff(const uint8_t *data, size_t size) {
    if (!data) return IMAGE_FORMAT_UNKNOWN;
    if (starts_with(data, size, JPEG_MAGIC, sizeof JPEG_MAGIC)) return IMAGE_FORMAT_JPEG;
    if (starts_with(data, size, PNG_MAGIC, sizeof PNG_MAGIC)) return IMAGE_FORMAT_PNG;
    if (is_webp(data, size)) return IMAGE_FORMAT_WEBP;
    return IMAGE_FORMAT_UNKNOWN;
}

const char *image_format_name(ImageFormat format) {
    switch (format) {
    case IMAGE_FORMAT_JPEG: return "JPEG";
    case IMAGE_FORMAT_PNG: return "PNG";
    case IMAGE_FORMAT_WEBP: return "WebP";
    case IMAGE_FORMAT_UNKNOWN: break;
    }
    return "unknown";
}

// A file shorter than a magic number that matches its beginning is a cut-off
// image rather than another format.
static const char *truncated_format(const uint8_t *data, size_t size) {
    if (size < sizeof JPEG_MAGIC && memcmp(data, JPEG_MAGIC, size) == 0) return "JPEG";
    if (size < sizeof PNG_MAGIC && memcmp(data, PNG_MAGIC, size) == 0) return "PNG";
    if (size < 12 && memcmp(data, "RIFF", size < 4 ? size : 4) == 0 &&
        (size <= 8 || memcmp(data + 8, "WEBP", size - 8) == 0))
        return "WebP";
    return NULL;
}

static int looks_like_text(const uint8_t *data, size_t size) {
    size_t n = size < 64 ? size : 64;
    for (size_t i = 0; i < n; i++)
        if (!isprint(data[i]) && !isspace(data[i])) return 0;
    return 1;
}

// What an unsupported file seems to be, for the error message.
static const char *describe_unsupported(const uint8_t *data, size_t size) {
    if (size >= 6 && (memcmp(data, "GIF87a", 6) == 0 || memcmp(data, "GIF89a", 6) == 0))
        return "GIF image";
    if (size >= 2 && memcmp(data, "BM", 2) == 0) return "BMP image";
    if (size >= 4 && (memcmp(data, "II*\0", 4) == 0 || memcmp(data, "MM\0*", 4) == 0))
        return "TIFF image";
    if (size >= 12 && memcmp(data + 4, "ftyp", 4) == 0) {
        if (memcmp(data + 8, "avif", 4) == 0) return "AVIF image";
        if (memcmp(data + 8, "heic", 4) == 0 || memcmp(data + 8, "mif1", 4) == 0)
            return "HEIF image";
        return "ISO media file";
    }
    if (size >= 4 && memcmp(data, "RIFF", 4) == 0) return "RIFF file that is not WebP";
    if (size >= 5 && memcmp(data, "%PDF-", 5) == 0) return "PDF document";
    if (size >= 2 && data[0] == 0xFF && data[1] == 0xD8) return "JPEG without a marker after SOI";
    if (looks_like_text(data, size)) return "text, not an image";
    return "unknown magic bytes";
}

// Empty, cut-off-magic and unsupported inputs share one message style.
static int check_known_format(const uint8_t *data, size_t size, ImageFormat *format,
                              ErrorMessage *err) {
    if (!data || size == 0) return error_set(err, "empty file (0 bytes)");
    *format = decode_sniff(data, size);
    if (*format != IMAGE_FORMAT_UNKNOWN) return 0;
    const char *cut = truncated_format(data, size);
    if (cut) return error_set(err, "truncated: only %zu bytes of a %s header", size, cut);
    return error_set(err, "unsupported format: %s (only JPEG, PNG and WebP are read)",
                     describe_unsupported(data, size));
}

int decoder_probe(Decoder *decoder, const uint8_t *data, size_t size, ImageInfo *info,
                  ErrorMessage *err) {
    ImageFormat format;
    if (check_known_format(data, size, &format, err) != 0) return -1;
    memset(info, 0, sizeof *info);
    int status = -1;
    switch (format) {
    case IMAGE_FORMAT_JPEG: status = decode_jpeg_probe(decoder, data, size, info, err); break;
    case IMAGE_FORMAT_PNG: status = decode_png_probe(data, size, info, err); break;
    case IMAGE_FORMAT_WEBP: status = decode_webp_probe(data, size, info, err); break;
    case IMAGE_FORMAT_UNKNOWN: break;
    }
    info->format = format;
    return status;
}

int decoder_decode(Decoder *decoder, const uint8_t *data, size_t size,
                   const DecodeRequest *request, DecodedImage *out, ErrorMessage *err) {
    ImageFormat format;
    memset(out, 0, sizeof *out);
    if (check_known_format(data, size, &format, err) != 0) return -1;
    switch (format) {
    case IMAGE_FORMAT_JPEG: return decode_jpeg_decode(decoder, data, size, request, out, err);
    case IMAGE_FORMAT_PNG: return decode_png_decode(decoder, data, size, request, out, err);
    case IMAGE_FORMAT_WEBP: return decode_webp_decode(decoder, data, size, request, out, err);
    case IMAGE_FORMAT_UNKNOWN: break;
    }
    return error_set(err, "unsupported format");
}

uint8_t *decode_buffer_reserve(DecodeBuffer *buffer, size_t size, ErrorMessage *err) {
    if (size <= buffer->capacity) return buffer->data;
    // The old contents are not needed: free first so peak memory stays low.
    free(buffer->data);
    buffer->data = malloc(size);
    buffer->capacity = buffer->data ? size : 0;
    if (!buffer->data) error_set(err, "out of memory: cannot allocate %zu bytes for pixels", size);
    return buffer->data;
}

int decode_check_size(const Decoder *decoder, const char *what, int64_t width, int64_t height,
                      ErrorMessage *err) {
    if (width <= 0 || height <= 0)
        return error_set(err, "corrupt data: %s size %lld x %lld", what, (long long)width,
                         (long long)height);
    if (width > DECODE_MAX_SIDE || height > DECODE_MAX_SIDE)
        return error_set(err, "image too large: %s %lld x %lld exceeds the side limit %d", what,
                         (long long)width, (long long)height, DECODE_MAX_SIDE);
    if ((uint64_t)width * (uint64_t)height > decoder->max_pixels)
        return error_set(err, "image too large: %s %lld x %lld exceeds limit %llu pixels", what,
                         (long long)width, (long long)height,
                         (unsigned long long)decoder->max_pixels);
    return 0;
}

int decode_clamp_region(const DecodeRequest *request, int width, int height, PixelRect *region,
                        ErrorMessage *err) {
    if (!request) {
        *region = (PixelRect){0, 0, width, height};
        return 0;
    }
    const PixelRect *r = &request->region;
    // 64-bit so that x + width cannot overflow.
    int64_t x0 = r->x > 0 ? r->x : 0, y0 = r->y > 0 ? r->y : 0;
    int64_t x1 = (int64_t)r->x + r->width, y1 = (int64_t)r->y + r->height;
    if (x1 > width) x1 = width;
    if (y1 > height) y1 = height;
    if (x1 <= x0 || y1 <= y0)
        return error_set(err, "region %d,%d %dx%d lies outside the %d x %d image", r->x, r->y,
                         r->width, r->height, width, height);
    *region = (PixelRect){(int)x0, (int)y0, (int)(x1 - x0), (int)(y1 - y0)};
    return 0;
}
