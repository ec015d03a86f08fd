// HEIF with libheif (HEIC through libde265, and the other brands libheif
// reads), except AVIF: a file whose ftyp names an AVIF brand goes to
// libavif (avif.c says why). The primary image, whole (libheif 1.15 has no
// region or reduced-scale decode; grid images are assembled by libheif), as
// 8-bit interleaved RGB converted by libheif (deeper images reduced by it,
// alpha dropped, grey repeated). A native request (decode.h) of an image
// with more than 8 bits per sample gets libheif's 16-bit interleaved RGB
// with the image's bit depth instead. HEIF's own orientation and crop
// (irot, imir, clap) are applied by libheif, always (they are part of the
// format, as pillow-heif also applies them); EXIF orientation in a HEIF
// file is not used, as the HEIF specification says: the container's
// transformations are the ones that hold. The handle's size is checked
// against the pixel limit before decoding; one decoding thread per image
// (the loader runs one per worker). Item references that would make
// libheif recurse without end are refused before it reads the file
// (heif_check.c), and so are grid and overlay canvases larger than the
// pixel limit, which libheif allocates whatever size the image says it has
// (heif_canvas.c).
#include "decode/avif.h"
#include "decode/decode_internal.h"

#include <string.h>

#include <libheif/heif.h>

static int report_heif_error(struct heif_error error, ErrorMessage *err) {
    const char *detail = error.message ? error.message : "unknown error";
    if (error.subcode == heif_suberror_End_of_data)
        return error_set(err, "truncated: HEIF: %s", detail);
    if (error.subcode == heif_suberror_Security_limit_exceeded)  // a declared size
        return error_set(err, "corrupt data: HEIF: %s", detail);
    switch (error.code) {
    case heif_error_Memory_allocation_error:
        return error_set(err, "out of memory in libheif: %s", detail);
    case heif_error_Unsupported_filetype:
    case heif_error_Unsupported_feature:
        return error_set(err, "unsupported format: HEIF: %s", detail);
    default: break;
    }
    return error_set(err, "corrupt data: HEIF: %s", detail);
}

typedef struct HeifFile {
    struct heif_context *context;
    struct heif_image_handle *handle;
    int width, height;  // as decoded: transformed
} HeifFile;

static void close_heif(HeifFile *file) {
    if (file->handle) heif_image_handle_release(file->handle);
    if (file->context) heif_context_free(file->context);
    memset(file, 0, sizeof *file);
}

static int open_heif(const Decoder *decoder, const uint8_t *data, size_t size, HeifFile *file,
                     ErrorMessage *err) {
    memset(file, 0, sizeof *file);
    if (decode_heif_check(data, size, decoder->max_pixels, err) != 0) return -1;
    file->context = heif_context_alloc();
    if (!file->context) return error_set(err, "out of memory: cannot create a HEIF reader");
    heif_context_set_maximum_image_size_limit(file->context, DECODE_MAX_SIDE);
    heif_context_set_max_decoding_threads(file->context, 0);
    struct heif_error error =
        heif_context_read_from_memory_without_copy(file->context, data, size, NULL);
    if (error.code == heif_error_Ok)
        error = heif_context_get_primary_image_handle(file->context, &file->handle);
    if (error.code != heif_error_Ok) {
        report_heif_error(error, err);  // before the context, which holds the message, goes
        close_heif(file);
        return -1;
    }
    file->width = heif_image_handle_get_width(file->handle);  // transformed
    file->height = heif_image_handle_get_height(file->handle);
    // libheif 1.15 allocates a grid's (or an overlay's) output at the size
    // its own data declares, not at the 'ispe' size the handle reports and
    // the pixel limit checks (a 1.6 kB grid declaring 30000 x 30000 made it
    // allocate three planes of 900 MB). Its size limit, checked before that
    // allocation, becomes the longer side 'ispe' declares: a larger grid is
    // refused, and what is allocated stays within that side squared.
    const int ispe_width = heif_image_handle_get_ispe_width(file->handle);
    const int ispe_height = heif_image_handle_get_ispe_height(file->handle);
    const int side = ispe_width > ispe_height ? ispe_width : ispe_height;
    if (side > 0 && side < DECODE_MAX_SIDE)
        heif_context_set_maximum_image_size_limit(file->context, side + 1);
    return 0;
}

int decode_heif_probe(Decoder *decoder, const uint8_t *data, size_t size, ImageInfo *info,
                      ErrorMessage *err) {
    if (decode_avif_accepts(data, size)) return decode_avif_probe(decoder, data, size, info, err);
    HeifFile file;
    if (open_heif(decoder, data, size, &file, err) != 0) return -1;
    info->width = file.width;
    info->height = file.height;
    close_heif(&file);
    return 0;
}

int decode_heif_decode(Decoder *decoder, const uint8_t *data, size_t size,
                       const DecodeRequest *request, DecodedImage *out, ErrorMessage *err) {
    if (decode_avif_accepts(data, size))
        return decode_avif_decode(decoder, data, size, request, out, err);
    HeifFile file;
    PixelRect region;
    if (open_heif(decoder, data, size, &file, err) != 0) return -1;
    if (decode_check_size(decoder, "HEIF image", file.width, file.height, err) != 0 ||
        decode_clamp_region(request, file.width, file.height, &region, err) != 0) {
        close_heif(&file);
        return -1;
    }
    struct heif_decoding_options *options = heif_decoding_options_alloc();
    if (!options) {
        close_heif(&file);
        return error_set(err, "out of memory: cannot create HEIF decoding options");
    }
    const int expected_width = file.width, expected_height = file.height;
    const uint16_t one = 1;
    uint8_t little_endian;
    memcpy(&little_endian, &one, 1);
    const int deep = decoder->native && heif_image_handle_get_luma_bits_per_pixel(file.handle) > 8;
    const enum heif_chroma chroma = !deep          ? heif_chroma_interleaved_RGB
                                    : little_endian ? heif_chroma_interleaved_RRGGBB_LE
                                                    : heif_chroma_interleaved_RRGGBB_BE;
    options->convert_hdr_to_8bit = !deep;
    struct heif_image *image = NULL;
    const struct heif_error error =
        heif_decode_image(file.handle, &image, heif_colorspace_RGB, chroma, options);
    heif_decoding_options_free(options);
    // (Before close_heif: the context holds libheif's message.)
    if (error.code != heif_error_Ok && error.subcode == heif_suberror_Security_limit_exceeded)
        error_set(err, "corrupt data: HEIF: larger than its header says (%d x %d): %s",
                  expected_width, expected_height, error.message ? error.message : "");
    else if (error.code != heif_error_Ok)
        report_heif_error(error, err);
    close_heif(&file);
    if (error.code != heif_error_Ok) return -1;
    int stride = 0;
    const uint8_t *plane = heif_image_get_plane_readonly(image, heif_channel_interleaved, &stride);
    const int width = heif_image_get_width(image, heif_channel_interleaved);
    const int height = heif_image_get_height(image, heif_channel_interleaved);
    const size_t pixel_bytes = deep ? 6 : 3;
    int status = 0;
    if (!plane || (size_t)stride < (size_t)width * pixel_bytes || region.x + region.width > width ||
        region.y + region.height > height) {
        status = error_set(err, "corrupt data: HEIF decoded to %d x %d, header says %d x %d", width,
                           height, expected_width, expected_height);
    } else {
        const SampleImage samples = {
            plane + (size_t)region.y * stride + (size_t)region.x * pixel_bytes,
            region.width,
            region.height,
            3,
            (size_t)stride,
            deep ? SAMPLE_U16 : SAMPLE_U8,
            COLOUR_RGB,
            deep ? heif_image_get_bits_per_pixel_range(image, heif_channel_interleaved) : 16};
        status = decode_finish(decoder, &samples, region, out, err);
    }
    heif_image_release(image);
    return status;
}
