// The Decoder object and what all formats share: format sniffing, dispatch
// through the format table, orientation, size limits, region clamping and
// the reusable buffers.
#include "decode/decode_internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t JPEG_MAGIC[] = {0xFF, 0xD8, 0xFF};
static const uint8_t PNG_MAGIC[] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
static const uint8_t GIF87_MAGIC[] = {'G', 'I', 'F', '8', '7', 'a'};
static const uint8_t GIF89_MAGIC[] = {'G', 'I', 'F', '8', '9', 'a'};
static const uint8_t TIFF_LE_MAGIC[] = {'I', 'I', 42, 0};
static const uint8_t TIFF_BE_MAGIC[] = {'M', 'M', 0, 42};
static const uint8_t BIGTIFF_LE_MAGIC[] = {'I', 'I', 43, 0};
static const uint8_t BIGTIFF_BE_MAGIC[] = {'M', 'M', 0, 43};
// JPEG XL: a bare codestream, or the ISO media container's signature box.
static const uint8_t JXL_CODESTREAM_MAGIC[] = {0xFF, 0x0A};
static const uint8_t JXL_CONTAINER_MAGIC[] = {0,   0,   0,   0x0C, 'J',  'X',
                                              'L', ' ', 0x0D, 0x0A, 0x87, 0x0A};
// DICOM part 10: a 128-byte preamble, then "DICM".
#define DICOM_PREAMBLE 128

static DecodeBuffer *decoder_buffer(Decoder *decoder, int which) {
    DecodeBuffer *buffers[DECODER_BUFFERS] = {&decoder->pixels, &decoder->scratch,
                                              &decoder->samples, &decoder->oriented};
    return buffers[which];
}

Decoder *decoder_create(uint64_t max_pixels) {
    Decoder *decoder = calloc(1, sizeof *decoder);
    if (!decoder) return NULL;
    decoder->max_pixels = max_pixels ? max_pixels : DECODE_DEFAULT_MAX_PIXELS;
    decoder->apply_exif_orientation = 1;
    decoder->channels = DECODE_ANY_CHANNELS;
    for (int i = 0; i < DECODER_BUFFERS; i++) decoder_buffer(decoder, i)->which = i;
    decoder->jpeg = decode_jpeg_state_create();
    if (!decoder->jpeg) {
        free(decoder);
        return NULL;
    }
    return decoder;
}

static void free_buffers(Decoder *decoder) {
    for (int i = 0; i < DECODER_BUFFERS; i++) {
        DecodeBuffer *buffer = decoder_buffer(decoder, i);
        if (!buffer->memory) free(buffer->data);
        buffer->data = NULL;
        buffer->capacity = 0;
    }
}

void decoder_destroy(Decoder *decoder) {
    if (!decoder) return;
    decode_jpeg_state_destroy(decoder->jpeg);
    free_buffers(decoder);
    free(decoder);
}

void decoder_set_buffer_memory(Decoder *decoder, const DecoderBufferMemory *memory) {
    free_buffers(decoder);
    decoder->buffer_memory = *memory;
    for (int i = 0; i < DECODER_BUFFERS; i++)
        decoder_buffer(decoder, i)->memory = memory->reserve ? &decoder->buffer_memory : NULL;
}

int decoder_buffer_find(const Decoder *decoder, const void *pointer, int *which, size_t *offset) {
    for (int i = 0; i < DECODER_BUFFERS; i++) {
        const DecodeBuffer *buffer = decoder_buffer((Decoder *)decoder, i);
        const uint8_t *at = pointer;
        if (!buffer->data || at < buffer->data || at >= buffer->data + buffer->capacity) continue;
        *which = i;
        *offset = (size_t)(at - buffer->data);
        return 0;
    }
    return -1;
}

void decoder_set_exif_orientation(Decoder *decoder, int apply) {
    decoder->apply_exif_orientation = apply != 0;
}

void decoder_set_channels(Decoder *decoder, int channels) {
    decoder->channels = channels >= 0 ? channels : DECODE_ANY_CHANNELS;
}

static int starts_with(const uint8_t *data, size_t size, const uint8_t *magic, size_t magic_size) {
    return size >= magic_size && memcmp(data, magic, magic_size) == 0;
}

static int is_webp(const uint8_t *data, size_t size) {
    return size >= 12 && memcmp(data, "RIFF", 4) == 0 && memcmp(data + 8, "WEBP", 4) == 0;
}

static int is_tiff(const uint8_t *data, size_t size) {
    return starts_with(data, size, TIFF_LE_MAGIC, 4) || starts_with(data, size, TIFF_BE_MAGIC, 4) ||
           starts_with(data, size, BIGTIFF_LE_MAGIC, 4) ||
           starts_with(data, size, BIGTIFF_BE_MAGIC, 4);
}

// "BM" and a file-size field, reserved fields and pixel offset that make
// sense: "BM" alone starts too many text files.
static int is_bmp(const uint8_t *data, size_t size) {
    if (size < 26 || data[0] != 'B' || data[1] != 'M') return 0;
    const uint32_t header_size = (uint32_t)data[14] | (uint32_t)data[15] << 8 |
                                 (uint32_t)data[16] << 16 | (uint32_t)data[17] << 24;
    return header_size == 12 || header_size == 40 || header_size == 52 || header_size == 56 ||
           header_size == 64 || header_size == 108 || header_size == 124;
}

// "P1".."P7" followed by whitespace (PAM is P7 and a newline).
static int is_pnm(const uint8_t *data, size_t size) {
    return size >= 3 && data[0] == 'P' && data[1] >= '1' && data[1] <= '7' && isspace(data[2]);
}

// An ISO base media file whose ftyp brand libheif decodes (HEIC, AVIF, ...).
static int is_heif(const uint8_t *data, size_t size) {
    if (size < 12 || memcmp(data + 4, "ftyp", 4) != 0) return 0;
    static const char *const brands[] = {"heic", "heix", "heim", "heis", "hevc", "hevx", "hevm",
                                         "hevs", "mif1", "msf1", "avif", "avis", "mif2"};
    for (size_t i = 0; i < sizeof brands / sizeof brands[0]; i++)
        if (memcmp(data + 8, brands[i], 4) == 0) return 1;
    return 0;
}

static int is_jxl(const uint8_t *data, size_t size) {
    return starts_with(data, size, JXL_CODESTREAM_MAGIC, sizeof JXL_CODESTREAM_MAGIC) ||
           starts_with(data, size, JXL_CONTAINER_MAGIC, sizeof JXL_CONTAINER_MAGIC);
}

static int is_dicom(const uint8_t *data, size_t size) {
    return size >= DICOM_PREAMBLE + 4 && memcmp(data + DICOM_PREAMBLE, "DICM", 4) == 0;
}

ImageFormat decode_sniff(const uint8_t *data, size_t size) {
    if (!data) return IMAGE_FORMAT_UNKNOWN;
    if (starts_with(data, size, JPEG_MAGIC, sizeof JPEG_MAGIC)) return IMAGE_FORMAT_JPEG;
    if (starts_with(data, size, PNG_MAGIC, sizeof PNG_MAGIC)) return IMAGE_FORMAT_PNG;
    if (is_webp(data, size)) return IMAGE_FORMAT_WEBP;
    if (is_tiff(data, size)) return IMAGE_FORMAT_TIFF;
    if (starts_with(data, size, GIF87_MAGIC, 6) || starts_with(data, size, GIF89_MAGIC, 6))
        return IMAGE_FORMAT_GIF;
    if (is_heif(data, size)) return IMAGE_FORMAT_HEIF;
    if (is_jxl(data, size)) return IMAGE_FORMAT_JXL;
    if (is_dicom(data, size)) return IMAGE_FORMAT_DICOM;
    if (is_bmp(data, size)) return IMAGE_FORMAT_BMP;
    if (is_pnm(data, size)) return IMAGE_FORMAT_PNM;
    // TGA has no magic number: last, and only when stb_image's header test
    // (colour-map and image types, sizes, depths) passes.
    if (decode_stb_is_tga(data, size)) return IMAGE_FORMAT_TGA;
    return IMAGE_FORMAT_UNKNOWN;
}

// ---- the format table ------------------------------------------------------------

// The first three formats predate the table; adapters give them its shape.
static int jpeg_orientation(const uint8_t *data, size_t size) {
    return exif_orientation(data, size);  // libexif finds the APP1 marker itself
}
static int png_probe(Decoder *decoder, const uint8_t *data, size_t size, ImageInfo *info,
                     ErrorMessage *err) {
    (void)decoder;
    return decode_png_probe(data, size, info, err);
}
static int webp_probe(Decoder *decoder, const uint8_t *data, size_t size, ImageInfo *info,
                      ErrorMessage *err) {
    (void)decoder;
    return decode_webp_probe(data, size, info, err);
}

typedef struct FormatEntry {
    const char *name;
    FormatProbe *probe;
    FormatDecode *decode;
    // The EXIF orientation of the file, or NULL where the format has none or
    // its library applies its own (HEIF, JPEG XL).
    int (*exif_orientation)(const uint8_t *data, size_t size);
    // The format's own orientation comes with probe (TIFF): always applied.
    int orientation_in_probe;
} FormatEntry;

static const FormatEntry FORMATS[IMAGE_FORMAT_COUNT] = {
    [IMAGE_FORMAT_UNKNOWN] = {"unknown", NULL, NULL, NULL, 0},
    [IMAGE_FORMAT_JPEG] = {"JPEG", decode_jpeg_probe, decode_jpeg_decode, jpeg_orientation, 0},
    [IMAGE_FORMAT_PNG] = {"PNG", png_probe, decode_png_decode, decode_png_orientation, 0},
    [IMAGE_FORMAT_WEBP] = {"WebP", webp_probe, decode_webp_decode, decode_webp_orientation, 0},
    [IMAGE_FORMAT_TIFF] = {"TIFF", decode_tiff_probe, decode_tiff_decode, NULL, 1},
    [IMAGE_FORMAT_GIF] = {"GIF", decode_gif_probe, decode_gif_decode, NULL, 0},
    [IMAGE_FORMAT_BMP] = {"BMP", decode_stb_probe, decode_stb_decode, NULL, 0},
    [IMAGE_FORMAT_PNM] = {"PNM", decode_pnm_probe, decode_pnm_decode, NULL, 0},
    [IMAGE_FORMAT_TGA] = {"TGA", decode_stb_probe, decode_stb_decode, NULL, 0},
    [IMAGE_FORMAT_HEIF] = {"HEIF", decode_heif_probe, decode_heif_decode, NULL, 0},
    [IMAGE_FORMAT_JXL] = {"JPEG XL", decode_jxl_probe, decode_jxl_decode, NULL, 0},
    [IMAGE_FORMAT_DICOM] = {"DICOM", decode_dicom_probe, decode_dicom_decode, NULL, 0},
};

const char *image_format_name(ImageFormat format) {
    if (format <= IMAGE_FORMAT_UNKNOWN || format >= IMAGE_FORMAT_COUNT) return "unknown";
    return FORMATS[format].name;
}

// A file shorter than a magic number that matches its beginning is a cut-off
// image rather than another format.
static const char *truncated_format(const uint8_t *data, size_t size) {
    if (size < sizeof JPEG_MAGIC && memcmp(data, JPEG_MAGIC, size) == 0) return "JPEG";
    if (size < sizeof PNG_MAGIC && memcmp(data, PNG_MAGIC, size) == 0) return "PNG";
    if (size < 12 && memcmp(data, "RIFF", size < 4 ? size : 4) == 0 &&
        (size <= 8 || memcmp(data + 8, "WEBP", size - 8) == 0))
        return "WebP";
    if (size < 6 && (memcmp(data, GIF87_MAGIC, size) == 0 || memcmp(data, GIF89_MAGIC, size) == 0))
        return "GIF";
    if (size < 4 &&
        (memcmp(data, TIFF_LE_MAGIC, size) == 0 || memcmp(data, TIFF_BE_MAGIC, size) == 0))
        return "TIFF";
    if (size < sizeof JXL_CONTAINER_MAGIC && size >= 4 &&
        memcmp(data, JXL_CONTAINER_MAGIC, size) == 0)
        return "JPEG XL";
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
    if (size >= 12 && memcmp(data + 4, "ftyp", 4) == 0) return "ISO media file that is not HEIF";
    if (size >= 4 && memcmp(data, "RIFF", 4) == 0) return "RIFF file that is not WebP";
    if (size >= 5 && memcmp(data, "%PDF-", 5) == 0) return "PDF document";
    if (size >= 2 && data[0] == 0xFF && data[1] == 0xD8) return "JPEG without a marker after SOI";
    if (size >= 2 && memcmp(data, "BM", 2) == 0) return "BMP with an unknown header size";
    if (size >= 4 && memcmp(data, "8BPS", 4) == 0) return "Photoshop document";
    if (size >= 12 && memcmp(data, "\0\0\0\x0CjP  ", 8) == 0) return "JPEG 2000 image";
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
    return error_set(err,
                     "unsupported format: %s (read are JPEG, PNG, WebP, TIFF, GIF, BMP, "
                     "PPM/PGM/PBM, TGA, HEIF/AVIF, JPEG XL and DICOM)",
                     describe_unsupported(data, size));
}

// The orientation to apply to this file (1: none) and, when it is not 1,
// the stored size.
static int find_orientation(Decoder *decoder, const FormatEntry *entry, const uint8_t *data,
                            size_t size, ImageInfo *stored, ErrorMessage *err) {
    stored->orientation = 1;
    if (entry->orientation_in_probe) return entry->probe(decoder, data, size, stored, err);
    if (!entry->exif_orientation || !decoder->apply_exif_orientation) return 0;
    const int orientation = entry->exif_orientation(data, size);
    if (orientation == 1) return 0;
    if (entry->probe(decoder, data, size, stored, err) != 0) return -1;
    stored->orientation = orientation;
    return 0;
}

// The float path's image, width x height x the caller's channels as float32,
// is bounded like the decoders' samples (DECODE_BYTES_PER_PIXEL x the pixel
// limit), from the whole image's size so that the verdict does not depend on
// the crops drawn: a grey image read as 64 channels cannot ask for gigabytes.
// Up to 3 channels the decoders' own pixel limit already keeps within it
// (and a large JPEG stays readable at a reduced scale).
static int float_image_check(const Decoder *decoder, const ImageInfo *info, ErrorMessage *err) {
    if (decoder->channels <= 0) return 0;
    const uint64_t bytes = (uint64_t)info->width * (uint64_t)info->height *
                           (uint64_t)decoder->channels * sizeof(float);
    const uint64_t limit = DECODE_BYTES_PER_PIXEL * decoder->max_pixels;
    if ((uint64_t)decoder->channels * sizeof(float) <= DECODE_BYTES_PER_PIXEL || bytes <= limit)
        return 0;
    return error_set(err,
                     "image too large: %d x %d read as %d float channel(s) is %llu MB, over the "
                     "limit of %llu MB (--max-pixels x %d bytes)",
                     info->width, info->height, decoder->channels,
                     (unsigned long long)(bytes >> 20), (unsigned long long)(limit >> 20),
                     DECODE_BYTES_PER_PIXEL);
}

int decoder_probe(Decoder *decoder, const uint8_t *data, size_t size, ImageInfo *info,
                  ErrorMessage *err) {
    ImageFormat format;
    if (check_known_format(data, size, &format, err) != 0) return -1;
    memset(info, 0, sizeof *info);
    const FormatEntry *entry = &FORMATS[format];
    info->orientation = 1;
    if (entry->probe(decoder, data, size, info, err) != 0) return -1;
    // Every caller divides by the size (a library may report a negative one).
    if (info->width <= 0 || info->height <= 0)
        return error_set(err, "corrupt data: %s header says %d x %d pixels", entry->name,
                         info->width, info->height);
    if (entry->exif_orientation && decoder->apply_exif_orientation)
        info->orientation = entry->exif_orientation(data, size);
    orientation_size(info->orientation, info->width, info->height, &info->width, &info->height);
    info->format = format;
    // What the header shows cannot become the caller's channels is refused
    // here, before a 64-band TIFF is decoded to be refused after.
    if (info->channels > 0 && decoder->channels != DECODE_ANY_CHANNELS &&
        samples_channels_check(info->colour, info->channels, decoder->channels, err) != 0)
        return -1;
    return float_image_check(decoder, info, err);
}

// A native request answered with 8-bit RGB only (the formats that give
// nothing else): those pixels as samples.
static void samples_from_rgb8(DecodedImage *out) {
    if (out->samples.pixels) return;
    const Image *image = &out->image;
    out->samples = (SampleImage){image->pixels, image->width, image->height, 3,
                                 image->stride, SAMPLE_U8,    COLOUR_RGB,    8};
    out->image = (Image){0};
}

static int decode_format(Decoder *decoder, const FormatEntry *entry, const uint8_t *data,
                         size_t size, const DecodeRequest *request, DecodedImage *out,
                         ErrorMessage *err) {
    decoder->native = request && request->native;
    const int status = entry->decode(decoder, data, size, request, out, err);
    if (status == 0 && decoder->native) samples_from_rgb8(out);
    decoder->native = 0;
    return status;
}

int decoder_decode(Decoder *decoder, const uint8_t *data, size_t size,
                   const DecodeRequest *request, DecodedImage *out, ErrorMessage *err) {
    ImageFormat format;
    memset(out, 0, sizeof *out);
    if (check_known_format(data, size, &format, err) != 0) return -1;
    const FormatEntry *entry = &FORMATS[format];
    ImageInfo stored = {0};
    if (find_orientation(decoder, entry, data, size, &stored, err) != 0) return -1;
    const int orientation = stored.orientation;
    if (orientation == 1) return decode_format(decoder, entry, data, size, request, out, err);

    // The request in stored coordinates: the region clamped to the oriented
    // image first (its own clamping would see the stored sides), then mapped.
    int width, height;
    orientation_size(orientation, stored.width, stored.height, &width, &height);
    DecodeRequest stored_request = {0};
    if (request) {
        stored_request = *request;
        if (decode_clamp_region(request, width, height, &stored_request.region, err) != 0)
            return -1;
        stored_request.region =
            orientation_to_stored(orientation, stored_request.region, stored.width, stored.height);
        if (orientation >= 5) {
            stored_request.min_width = request->min_height;
            stored_request.min_height = request->min_width;
        }
    }
    if (decode_format(decoder, entry, data, size, request ? &stored_request : NULL, out, err) !=
        0)
        return -1;
    const int oriented = out->samples.pixels
                             ? orientation_apply_samples(orientation, &out->samples,
                                                         &decoder->oriented, err)
                             : orientation_apply(orientation, &out->image, &decoder->oriented, err);
    if (oriented != 0) return -1;
    out->covered = orientation_from_stored(orientation, out->covered, stored.width, stored.height);
    return 0;
}

uint8_t *decode_buffer_reserve(DecodeBuffer *buffer, size_t size, ErrorMessage *err) {
    if (size <= buffer->capacity) return buffer->data;
    if (buffer->memory) {
        buffer->data = buffer->memory->reserve(buffer->memory->context, buffer->which, size,
                                               &buffer->capacity);
        if (!buffer->data) buffer->capacity = 0;
    } else {
        // The old contents are not needed: free first so peak memory stays low.
        free(buffer->data);
        buffer->data = malloc(size);
        buffer->capacity = buffer->data ? size : 0;
    }
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

int decode_check_samples(const Decoder *decoder, const char *what, int64_t width, int64_t height,
                         int64_t samples, size_t sample_bytes, ErrorMessage *err) {
    if (decode_check_size(decoder, what, width, height, err) != 0) return -1;
    const uint64_t count = (uint64_t)width * (uint64_t)height * (uint64_t)(samples > 0 ? samples : 0);
    if (samples < 1 || count > 4 * decoder->max_pixels)
        return error_set(err,
                         "image too large: %s %lld x %lld with %lld samples per pixel exceeds "
                         "limit %llu samples",
                         what, (long long)width, (long long)height, (long long)samples,
                         (unsigned long long)(4 * decoder->max_pixels));
    if (count * sample_bytes > DECODE_BYTES_PER_PIXEL * decoder->max_pixels)
        return error_set(err,
                         "image too large: %s %lld x %lld with %lld samples of %zu bytes per "
                         "pixel is %llu MB, over the limit of %llu MB (--max-pixels x %d bytes, "
                         "3 float channels a pixel)",
                         what, (long long)width, (long long)height, (long long)samples,
                         sample_bytes, (unsigned long long)((count * sample_bytes) >> 20),
                         (unsigned long long)((DECODE_BYTES_PER_PIXEL * decoder->max_pixels) >> 20),
                         DECODE_BYTES_PER_PIXEL);
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
