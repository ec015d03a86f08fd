// AVIF through libavif (Debian's libavif-dev), the library Pillow decodes
// AVIF with, so that an AVIF gives Pillow's pixels; HEIC stays with libheif
// (heif.c routes by the ftyp brands). libheif 1.15 converts YCbCr to RGB
// itself (nearest-neighbour chroma upsampling; limited range ignored for
// grey; its own rounding) and hands out no decoded planes to convert
// otherwise: a YCbCr request is converted to RGB and back. Measured on
// Pillow-written quality-95 files it was up to 12 levels off Pillow (4:2:0),
// up to 20 (limited-range grey); docs/input-pipeline.md has the table.
//
// Pixels: avifImageYUVToRGB with the defaults Pillow calls it with (the
// nclx matrix and range; bilinear chroma upsampling; libyuv's fixed-point
// conversion for the matrices libyuv has constants for, libavif's own
// otherwise). Where the file has alpha, RGBA is asked for, as Pillow does
// (libavif premultiplies alpha into an RGB request); the 8-bit output drops
// it, a native request keeps it as a fourth channel. A 10/12-bit image:
// libavif 1.x (Pillow's) first truncates the planes to 8 bits in the cases
// its libyuv has no deep function for (reduced_before_conversion); libavif
// 0.11 (Debian's) converts those at full depth, so the truncation is done
// here first for the same cases. A native request of a deep image gets RGB(A)
// at the image's own depth instead (libavif's conversion, what imagecodecs'
// avif_decode gives).
//
// Transformations, as libheif applies them to HEIC: the clean aperture
// (clap) crops, then irot and imir turn and mirror, always (Pillow ignores
// clap and leaves irot/imir to ImageOps.exif_transpose as an EXIF
// orientation). Decoded whole (libavif has no region decode); the first
// image of a sequence; one thread.
#include "decode/avif.h"

#include <limits.h>
#include <string.h>

#include <avif/avif.h>

int decode_avif_accepts(const uint8_t *data, size_t size) {
    const avifROData input = {data, size};
    return avifPeekCompatibleFileType(&input) == AVIF_TRUE;
}

static int report_avif_error(avifResult result, const avifDecoder *avif, ErrorMessage *err) {
    const char *detail =
        avif && avif->diag.error[0] ? avif->diag.error : avifResultToString(result);
    switch (result) {
    case AVIF_RESULT_TRUNCATED_DATA: return error_set(err, "truncated: AVIF: %s", detail);
    case AVIF_RESULT_OUT_OF_MEMORY: return error_set(err, "out of memory in libavif: %s", detail);
    case AVIF_RESULT_NO_CODEC_AVAILABLE:
    case AVIF_RESULT_NOT_IMPLEMENTED:
    case AVIF_RESULT_UNSUPPORTED_DEPTH:
        return error_set(err, "unsupported format: AVIF: %s", detail);
    default: break;
    }
    return error_set(err, "corrupt data: AVIF: %s", detail);
}

typedef struct AvifFile {
    avifDecoder *avif;
    PixelRect crop;     // the clean aperture, in the stored image
    int orientation;    // irot and imir as an EXIF orientation (1..8)
    int width, height;  // as decoded: cropped, then oriented
} AvifFile;

// irot (angle a: a x 90 degrees anticlockwise), then imir (mode 0: top and
// bottom exchanged, 1: left and right) as the EXIF orientation that turns
// the image the same way (orientation.c).
static int orientation_of(const avifImage *image) {
    const int angle = image->transformFlags & AVIF_TRANSFORM_IROT ? image->irot.angle & 3 : 0;
    static const int rotated[4] = {1, 8, 3, 6};
    static const int mirrored[2][4] = {{4, 5, 2, 7}, {2, 7, 4, 5}};
    if (!(image->transformFlags & AVIF_TRANSFORM_IMIR)) return rotated[angle];
    return mirrored[image->imir.mode & 1][angle];
}

static void close_avif(AvifFile *file) {
    if (file->avif) avifDecoderDestroy(file->avif);
    memset(file, 0, sizeof *file);
}

static int open_avif(const uint8_t *data, size_t size, AvifFile *file, ErrorMessage *err) {
    memset(file, 0, sizeof *file);
    avifDecoder *avif = avifDecoderCreate();
    if (!avif) return error_set(err, "out of memory: cannot create an AVIF reader");
    file->avif = avif;
    avif->maxThreads = 1;  // the loader runs one decode per worker
    avif->ignoreExif = avif->ignoreXMP = AVIF_TRUE;
    // Pillow's strictness: an invalid clean aperture is ignored, a missing
    // pixi box (libheif 1.11 and older) accepted.
    avif->strictFlags &= ~(avifStrictFlags)(AVIF_STRICT_CLAP_VALID | AVIF_STRICT_PIXI_REQUIRED);
    avifResult result = avifDecoderSetIOMemory(avif, data, size);
    if (result == AVIF_RESULT_OK) result = avifDecoderParse(avif);
    if (result != AVIF_RESULT_OK) {
        report_avif_error(result, avif, err);
        close_avif(file);
        return -1;
    }
    const avifImage *image = avif->image;
    if (image->width == 0 || image->height == 0 || image->width > INT_MAX ||
        image->height > INT_MAX) {
        error_set(err, "corrupt data: AVIF image of %u x %u pixels", image->width, image->height);
        close_avif(file);
        return -1;
    }
    file->crop = (PixelRect){0, 0, (int)image->width, (int)image->height};
    avifCropRect rect;
    if (image->transformFlags & AVIF_TRANSFORM_CLAP) {
        if (avifCropRectConvertCleanApertureBox(&rect, &image->clap, image->width, image->height,
                                                image->yuvFormat, &avif->diag))
            file->crop = (PixelRect){(int)rect.x, (int)rect.y, (int)rect.width, (int)rect.height};
        avifDiagnosticsClearError(&avif->diag);
    }
    file->orientation = orientation_of(image);
    orientation_size(file->orientation, file->crop.width, file->crop.height, &file->width,
                     &file->height);
    return 0;
}

int decode_avif_probe(Decoder *decoder, const uint8_t *data, size_t size, ImageInfo *info,
                      ErrorMessage *err) {
    (void)decoder;
    AvifFile file;
    if (open_avif(data, size, &file, err) != 0) return -1;
    info->width = file.width;
    info->height = file.height;
    close_avif(&file);
    return 0;
}

// Whether libyuv has constants for the image's matrix (libavif 1.x's list;
// then libavif converts 8-bit output with libyuv).
static int libyuv_knows_matrix(const avifImage *image) {
    avifMatrixCoefficients matrix = image->matrixCoefficients;
    if (matrix == AVIF_MATRIX_COEFFICIENTS_IDENTITY && image->yuvFormat == AVIF_PIXEL_FORMAT_YUV400)
        matrix = AVIF_MATRIX_COEFFICIENTS_BT601;  // grey needs no matrix: libavif takes BT.601's
    if (matrix == AVIF_MATRIX_COEFFICIENTS_CHROMA_DERIVED_NCL) {
        switch (image->colorPrimaries) {
        case AVIF_COLOR_PRIMARIES_BT709:
        case AVIF_COLOR_PRIMARIES_UNSPECIFIED:
        case AVIF_COLOR_PRIMARIES_BT470BG:
        case AVIF_COLOR_PRIMARIES_BT601:
        case AVIF_COLOR_PRIMARIES_BT2020: return 1;
        default: return 0;
        }
    }
    return matrix == AVIF_MATRIX_COEFFICIENTS_BT709 || matrix == AVIF_MATRIX_COEFFICIENTS_BT470BG ||
           matrix == AVIF_MATRIX_COEFFICIENTS_BT601 ||
           matrix == AVIF_MATRIX_COEFFICIENTS_UNSPECIFIED ||
           matrix == AVIF_MATRIX_COEFFICIENTS_BT2020_NCL;
}

// Whether libavif 1.x, converting this 10/12-bit image to the 8-bit RGB
// (no alpha) or RGBA (alpha) that Pillow asks for, first truncates its
// planes to 8 bits: where libyuv converts it but has no function for its
// depth, layout and output. That is every layout but grey into RGB (grey
// without alpha Pillow reads as "L", which libavif converts itself), and
// grey and 12-bit 4:4:4 and 4:2:2 into RGBA.
static int reduced_before_conversion(const avifImage *image, int alpha) {
    if (image->depth <= 8 || !libyuv_knows_matrix(image)) return 0;
    const avifPixelFormat layout = image->yuvFormat;
    if (!alpha) return layout != AVIF_PIXEL_FORMAT_YUV400;
    return layout == AVIF_PIXEL_FORMAT_YUV400 ||
           (image->depth == 12 &&
            (layout == AVIF_PIXEL_FORMAT_YUV444 || layout == AVIF_PIXEL_FORMAT_YUV422));
}

// The colour planes truncated to 8 bits, v >> (depth - 8) (what libyuv's
// Convert16To8Plane does for libavif 1.x); NULL when out of memory.
static avifImage *reduce_to_8_bits(const avifImage *image) {
    avifImage *reduced = avifImageCreate(image->width, image->height, 8, image->yuvFormat);
    if (!reduced) return NULL;
    reduced->yuvRange = image->yuvRange;
    reduced->yuvChromaSamplePosition = image->yuvChromaSamplePosition;
    reduced->colorPrimaries = image->colorPrimaries;
    reduced->transferCharacteristics = image->transferCharacteristics;
    reduced->matrixCoefficients = image->matrixCoefficients;
    if (avifImageAllocatePlanes(reduced, AVIF_PLANES_YUV) != AVIF_RESULT_OK) {
        avifImageDestroy(reduced);
        return NULL;
    }
    avifPixelFormatInfo layout;
    avifGetPixelFormatInfo(image->yuvFormat, &layout);
    const unsigned shift = image->depth - 8;
    for (int plane = 0; plane < 3; plane++) {
        if (!image->yuvPlanes[plane] || !reduced->yuvPlanes[plane]) continue;  // grey
        const int chroma = plane > 0;
        const uint32_t width = chroma ? (image->width + layout.chromaShiftX) >> layout.chromaShiftX
                                      : image->width;
        const uint32_t height =
            chroma ? (image->height + layout.chromaShiftY) >> layout.chromaShiftY : image->height;
        for (uint32_t y = 0; y < height; y++) {
            const uint8_t *row = image->yuvPlanes[plane] + (size_t)y * image->yuvRowBytes[plane];
            uint8_t *out = reduced->yuvPlanes[plane] + (size_t)y * reduced->yuvRowBytes[plane];
            for (uint32_t x = 0; x < width; x++) {
                uint16_t v;
                memcpy(&v, row + 2 * (size_t)x, 2);
                const unsigned top = (unsigned)v >> shift;
                out[x] = (uint8_t)(top > 255 ? 255 : top);  // bits beyond the depth set
            }
        }
    }
    return reduced;
}

// The decoded image as interleaved samples in the Decoder's sample buffer:
// 8-bit RGB, or RGBA where it has alpha; a native request of a deeper
// image at its own depth.
static int convert_to_rgb(Decoder *decoder, const avifDecoder *avif, SampleImage *out,
                          ErrorMessage *err) {
    const avifImage *image = avif->image;
    const int alpha = avif->alphaPresent == AVIF_TRUE;
    const int deep = decoder->native && image->depth > 8;
    avifImage *reduced = NULL;
    if (!deep && reduced_before_conversion(image, alpha)) {
        reduced = reduce_to_8_bits(image);
        if (!reduced) return error_set(err, "out of memory: cannot reduce an AVIF image to 8 bits");
    }
    const avifImage *source = reduced ? reduced : image;
    avifRGBImage rgb;
    avifRGBImageSetDefaults(&rgb, source);
    rgb.format = alpha ? AVIF_RGB_FORMAT_RGBA : AVIF_RGB_FORMAT_RGB;
    rgb.depth = deep ? image->depth : 8;
    const int channels = alpha ? 4 : 3;
    rgb.rowBytes = image->width * (uint32_t)channels * (deep ? 2 : 1);
    rgb.pixels =
        decode_buffer_reserve(&decoder->samples, (size_t)rgb.rowBytes * image->height, err);
    const avifResult result = rgb.pixels ? avifImageYUVToRGB(source, &rgb) : AVIF_RESULT_OK;
    if (reduced) avifImageDestroy(reduced);
    if (!rgb.pixels) return -1;
    if (result != AVIF_RESULT_OK) return report_avif_error(result, NULL, err);
    *out = (SampleImage){rgb.pixels,
                         (int)image->width,
                         (int)image->height,
                         channels,
                         rgb.rowBytes,
                         deep ? SAMPLE_U16 : SAMPLE_U8,
                         COLOUR_RGB,
                         deep ? (int)image->depth : 8};
    return 0;
}

// `region` of the decoded image (clean aperture, then orientation): only
// its stored pixels are rearranged.
static int finish_region(Decoder *decoder, const AvifFile *file, PixelRect region,
                         DecodedImage *out, ErrorMessage *err) {
    SampleImage samples;
    if (convert_to_rgb(decoder, file->avif, &samples, err) != 0) return -1;
    const PixelRect stored =
        orientation_to_stored(file->orientation, region, file->crop.width, file->crop.height);
    const size_t pixel = (size_t)samples.channels * sample_type_bytes(samples.type);
    samples.pixels += (size_t)(file->crop.y + stored.y) * samples.stride +
                      (size_t)(file->crop.x + stored.x) * pixel;
    samples.width = stored.width;
    samples.height = stored.height;
    if (orientation_apply_samples(file->orientation, &samples, &decoder->scratch, err) != 0)
        return -1;
    return decode_finish(decoder, &samples, region, out, err);
}

int decode_avif_decode(Decoder *decoder, const uint8_t *data, size_t size,
                       const DecodeRequest *request, DecodedImage *out, ErrorMessage *err) {
    AvifFile file;
    PixelRect region;
    if (open_avif(data, size, &file, err) != 0) return -1;
    avifDecoder *avif = file.avif;
    const uint32_t width = avif->image->width, height = avif->image->height;
    int status = -1;
    if (decode_check_size(decoder, "AVIF image", width, height, err) == 0 &&
        decode_clamp_region(request, file.width, file.height, &region, err) == 0) {
        const avifResult result = avifDecoderNextImage(avif);
        if (result != AVIF_RESULT_OK)
            report_avif_error(result, avif, err);
        else if (avif->image->width != width || avif->image->height != height)
            error_set(err, "corrupt data: AVIF decoded to %u x %u, header says %u x %u",
                      avif->image->width, avif->image->height, width, height);
        else
            status = finish_region(decoder, &file, region, out, err);
    }
    close_avif(&file);
    return status;
}
