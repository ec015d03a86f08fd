// Test-image encoders for TIFF (libtiff), HEIF/AVIF (libheif), AVIF with
// irot/imir (libavif), JPEG XL (libjxl), GIF (giflib) and EXIF blocks
// (libexif), writing to memory.
#include "format_encoders.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <avif/avif.h>
#include <gif_lib.h>
#include <jxl/encode.h>
#include <libexif/exif-data.h>
#include <libheif/heif.h>
#include <tiffio.h>

#define require(condition)                                                                       \
    do {                                                                                         \
        if (!(condition)) {                                                                      \
            fprintf(stderr, "%s:%d: test encoder failed: %s\n", __FILE__, __LINE__, #condition); \
            abort();                                                                             \
        }                                                                                        \
    } while (0)

static void append(Bytes *out, const void *data, size_t size) {
    out->data = realloc(out->data, out->size + size);
    require(out->data != NULL || size == 0);
    memcpy(out->data + out->size, data, size);
    out->size += size;
}

// ---- TIFF: libtiff writing into a growable memory file ------------------------------

typedef struct MemoryFile {
    Bytes bytes;
    uint64_t offset;
} MemoryFile;

static tmsize_t memory_read(thandle_t handle, void *out, tmsize_t size) {
    MemoryFile *file = (MemoryFile *)handle;
    if (file->offset >= file->bytes.size) return 0;
    size_t n = (size_t)size;
    if (n > file->bytes.size - file->offset) n = file->bytes.size - file->offset;
    memcpy(out, file->bytes.data + file->offset, n);
    file->offset += n;
    return (tmsize_t)n;
}

static tmsize_t memory_write(thandle_t handle, void *in, tmsize_t size) {
    MemoryFile *file = (MemoryFile *)handle;
    const size_t end = (size_t)file->offset + (size_t)size;
    if (end > file->bytes.size) {
        file->bytes.data = realloc(file->bytes.data, end);
        require(file->bytes.data != NULL);
        memset(file->bytes.data + file->bytes.size, 0, end - file->bytes.size);
        file->bytes.size = end;
    }
    memcpy(file->bytes.data + file->offset, in, (size_t)size);
    file->offset = end;
    return size;
}

static toff_t memory_seek(thandle_t handle, toff_t offset, int whence) {
    MemoryFile *file = (MemoryFile *)handle;
    const uint64_t base = whence == SEEK_CUR   ? file->offset
                          : whence == SEEK_END ? file->bytes.size
                                               : 0;
    file->offset = base + offset;
    return file->offset;
}

static int memory_close(thandle_t handle) {
    (void)handle;
    return 0;
}

static toff_t memory_size(thandle_t handle) { return ((MemoryFile *)handle)->bytes.size; }

static int no_map(thandle_t handle, void **base, toff_t *size) {
    (void)handle, (void)base, (void)size;
    return 0;
}

static void no_unmap(thandle_t handle, void *base, toff_t size) {
    (void)handle, (void)base, (void)size;
}

// Sample i (of the interleaved input) as raw bits of the spec's width.
static uint64_t sample_bits(const TiffSpec *spec, const void *samples, size_t i) {
    switch (spec->bits) {
    case 16: return ((const uint16_t *)samples)[i];
    case 32: return ((const uint32_t *)samples)[i];
    case 64: {
        uint64_t v;
        memcpy(&v, (const uint8_t *)samples + 8 * i, 8);
        return v;
    }
    default: return ((const uint8_t *)samples)[i];  // 1..8 bits: one byte each
    }
}

// One strip or tile: block_width x rows, of one plane (or all samples),
// rows packed to bytes as libtiff expects; pixels past the image are zero.
static uint8_t *pack_block(const TiffSpec *spec, const void *samples, int width, int height, int x0,
                           int y0, int block_width, int rows, int plane, size_t *bytes) {
    const int per_pixel = spec->planar == PLANARCONFIG_SEPARATE ? 1 : spec->samples;
    const size_t row_bytes = ((size_t)block_width * per_pixel * spec->bits + 7) / 8;
    uint8_t *block = calloc((size_t)rows, row_bytes);
    require(block != NULL);
    for (int r = 0; r < rows; r++) {
        uint8_t *row = block + (size_t)r * row_bytes;
        for (int x = 0; x < block_width; x++) {
            if (x0 + x >= width || y0 + r >= height) continue;
            for (int k = 0; k < per_pixel; k++) {
                const int c = per_pixel == 1 && spec->samples > 1 ? plane : k;
                const size_t i = ((size_t)(y0 + r) * width + (x0 + x)) * spec->samples + c;
                const uint64_t v = sample_bits(spec, samples, i);
                const size_t position = (size_t)x * per_pixel + k;
                if (spec->bits < 8) {
                    const size_t bit = position * spec->bits;
                    row[bit / 8] |= (uint8_t)(v << (8 - spec->bits - bit % 8));
                } else {
                    memcpy(row + position * (spec->bits / 8), &v, (size_t)spec->bits / 8);
                }
            }
        }
    }
    *bytes = (size_t)rows * row_bytes;
    return block;
}

Bytes encode_tiff(const TiffSpec *spec, const void *samples, int width, int height,
                  const uint16_t *colour_map) {
    MemoryFile file = {{NULL, 0}, 0};
    TIFF *tif =
        TIFFClientOpen("memory", spec->bigtiff ? "w8" : "w", (thandle_t)&file, memory_read,
                       memory_write, memory_seek, memory_close, memory_size, no_map, no_unmap);
    require(tif != NULL);
    const int jpeg = spec->compression == COMPRESSION_JPEG;
    TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, (uint32_t)width);
    TIFFSetField(tif, TIFFTAG_IMAGELENGTH, (uint32_t)height);
    TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, (uint16_t)spec->bits);
    TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, (uint16_t)spec->samples);
    TIFFSetField(tif, TIFFTAG_SAMPLEFORMAT, (uint16_t)spec->format);
    TIFFSetField(tif, TIFFTAG_PLANARCONFIG, (uint16_t)spec->planar);
    TIFFSetField(tif, TIFFTAG_COMPRESSION, (uint16_t)spec->compression);
    // JPEG: YCbCr in the file, libtiff converting from our RGB.
    TIFFSetField(tif, TIFFTAG_PHOTOMETRIC,
                 (uint16_t)(jpeg && spec->photometric == PHOTOMETRIC_RGB ? PHOTOMETRIC_YCBCR
                                                                         : spec->photometric));
    if (jpeg) {
        TIFFSetField(tif, TIFFTAG_JPEGQUALITY, 95);
        if (spec->photometric == PHOTOMETRIC_RGB)
            TIFFSetField(tif, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB);
    }
    if (spec->compression == COMPRESSION_WEBP) TIFFSetField(tif, TIFFTAG_WEBP_LOSSLESS, 1);
    if (spec->extra_alpha) {
        const uint16_t extra[1] = {EXTRASAMPLE_UNASSALPHA};
        TIFFSetField(tif, TIFFTAG_EXTRASAMPLES, (uint16_t)1, extra);
    }
    if (spec->orientation) TIFFSetField(tif, TIFFTAG_ORIENTATION, (uint16_t)spec->orientation);
    if (colour_map) {
        const size_t entries = (size_t)1 << spec->bits;
        TIFFSetField(tif, TIFFTAG_COLORMAP, colour_map, colour_map + entries,
                     colour_map + 2 * entries);
    }
    const int planes = spec->planar == PLANARCONFIG_SEPARATE ? spec->samples : 1;
    if (spec->tile) {
        TIFFSetField(tif, TIFFTAG_TILEWIDTH, (uint32_t)spec->tile);
        TIFFSetField(tif, TIFFTAG_TILELENGTH, (uint32_t)spec->tile);
        for (int plane = 0; plane < planes; plane++)
            for (int y = 0; y < height; y += spec->tile)
                for (int x = 0; x < width; x += spec->tile) {
                    size_t bytes;
                    uint8_t *block = pack_block(spec, samples, width, height, x, y, spec->tile,
                                                spec->tile, plane, &bytes);
                    const uint32_t tile =
                        TIFFComputeTile(tif, (uint32_t)x, (uint32_t)y, 0, (uint16_t)plane);
                    require(TIFFWriteEncodedTile(tif, tile, block, (tmsize_t)bytes) >= 0);
                    free(block);
                }
    } else {
        TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, (uint32_t)spec->rows_per_strip);
        for (int plane = 0; plane < planes; plane++)
            for (int y = 0; y < height; y += spec->rows_per_strip) {
                const int rows =
                    height - y < spec->rows_per_strip ? height - y : spec->rows_per_strip;
                size_t bytes;
                uint8_t *block =
                    pack_block(spec, samples, width, height, 0, y, width, rows, plane, &bytes);
                const uint32_t strip = TIFFComputeStrip(tif, (uint32_t)y, (uint16_t)plane);
                require(TIFFWriteEncodedStrip(tif, strip, block, (tmsize_t)bytes) >= 0);
                free(block);
            }
    }
    TIFFClose(tif);
    return file.bytes;
}

// ---- HEIF / AVIF ---------------------------------------------------------------------

static struct heif_error heif_append(struct heif_context *context, const void *data, size_t size,
                                     void *user_data) {
    (void)context;
    append(user_data, data, size);
    const struct heif_error ok = {heif_error_Ok, heif_suberror_Unspecified, "ok"};
    return ok;
}

Bytes encode_heif(const uint8_t *rgb, int width, int height, int avif, int orientation) {
    struct heif_context *context = heif_context_alloc();
    struct heif_image *image = NULL;
    require(
        heif_image_create(width, height, heif_colorspace_RGB, heif_chroma_interleaved_RGB, &image)
            .code == heif_error_Ok);
    require(heif_image_add_plane(image, heif_channel_interleaved, width, height, 8).code ==
            heif_error_Ok);
    int stride = 0;
    uint8_t *plane = heif_image_get_plane(image, heif_channel_interleaved, &stride);
    for (int y = 0; y < height; y++)
        memcpy(plane + (size_t)y * stride, rgb + (size_t)y * width * 3, (size_t)width * 3);
    struct heif_encoder *encoder = NULL;
    require(heif_context_get_encoder_for_format(
                context, avif ? heif_compression_AV1 : heif_compression_HEVC, &encoder)
                .code == heif_error_Ok);
    heif_encoder_set_lossy_quality(encoder, 95);
    if (avif) heif_encoder_set_parameter_integer(encoder, "speed", 9);
    struct heif_encoding_options *options = heif_encoding_options_alloc();
    options->image_orientation = (enum heif_orientation)orientation;
    require(heif_context_encode_image(context, image, encoder, options, NULL).code ==
            heif_error_Ok);
    heif_encoding_options_free(options);
    heif_encoder_release(encoder);
    heif_image_release(image);
    Bytes out = {NULL, 0};
    struct heif_writer writer = {1, heif_append};
    require(heif_context_write(context, &writer, &out).code == heif_error_Ok);
    heif_context_free(context);
    return out;
}

// EXIF orientation -> irot angle (x 90 degrees anticlockwise) and imir mode
// (0: top and bottom exchanged, 1: left and right; -1: none), the mapping
// HEIF readers apply (irot first).
static void irot_imir_of(int orientation, int *angle, int *mode) {
    static const int angles[9] = {0, 0, 0, 2, 0, 1, 3, 3, 1};
    static const int modes[9] = {-1, -1, 1, -1, 0, 0, -1, 0, -1};
    *angle = orientation >= 1 && orientation <= 8 ? angles[orientation] : 0;
    *mode = orientation >= 1 && orientation <= 8 ? modes[orientation] : -1;
}

Bytes encode_avif(const uint8_t *rgb, int width, int height, int orientation) {
    avifImage *image = avifImageCreate((uint32_t)width, (uint32_t)height, 8,
                                       AVIF_PIXEL_FORMAT_YUV444);
    require(image != NULL);
    avifRGBImage pixels;
    avifRGBImageSetDefaults(&pixels, image);
    pixels.format = AVIF_RGB_FORMAT_RGB;
    pixels.pixels = (uint8_t *)rgb;
    pixels.rowBytes = (uint32_t)width * 3;
    require(avifImageRGBToYUV(image, &pixels) == AVIF_RESULT_OK);
    int angle, mode;
    irot_imir_of(orientation, &angle, &mode);
    if (angle) {
        image->transformFlags |= AVIF_TRANSFORM_IROT;
        image->irot.angle = (uint8_t)angle;
    }
    if (mode >= 0) {
        image->transformFlags |= AVIF_TRANSFORM_IMIR;
        image->imir.mode = (uint8_t)mode;
    }
    avifEncoder *encoder = avifEncoderCreate();
    require(encoder != NULL);
    encoder->minQuantizer = encoder->maxQuantizer = 3;  // Pillow's quality 95
    encoder->speed = 9;
    avifRWData output = AVIF_DATA_EMPTY;
    require(avifEncoderWrite(encoder, image, &output) == AVIF_RESULT_OK);
    Bytes out = {NULL, 0};
    append(&out, output.data, output.size);
    avifRWDataFree(&output);
    avifEncoderDestroy(encoder);
    avifImageDestroy(image);
    return out;
}

// ---- JPEG XL -----------------------------------------------------------------------

Bytes encode_jxl(const void *samples, int width, int height, int channels, int bits,
                 int orientation) {
    JxlEncoder *encoder = JxlEncoderCreate(NULL);
    JxlBasicInfo info;
    JxlEncoderInitBasicInfo(&info);
    info.xsize = (uint32_t)width;
    info.ysize = (uint32_t)height;
    info.bits_per_sample = (uint32_t)bits;
    info.num_color_channels = (uint32_t)channels;
    info.uses_original_profile = JXL_TRUE;  // needed for lossless
    info.orientation = (JxlOrientation)orientation;
    require(JxlEncoderSetBasicInfo(encoder, &info) == JXL_ENC_SUCCESS);
    JxlColorEncoding colour;
    JxlColorEncodingSetToSRGB(&colour, channels == 1);
    require(JxlEncoderSetColorEncoding(encoder, &colour) == JXL_ENC_SUCCESS);
    JxlEncoderFrameSettings *settings = JxlEncoderFrameSettingsCreate(encoder, NULL);
    require(JxlEncoderSetFrameLossless(settings, JXL_TRUE) == JXL_ENC_SUCCESS);
    JxlEncoderFrameSettingsSetOption(settings, JXL_ENC_FRAME_SETTING_EFFORT, 1);
    const JxlPixelFormat format = {
        (uint32_t)channels, bits == 16 ? JXL_TYPE_UINT16 : JXL_TYPE_UINT8, JXL_NATIVE_ENDIAN, 0};
    const size_t bytes = (size_t)width * height * channels * (bits == 16 ? 2 : 1);
    require(JxlEncoderAddImageFrame(settings, &format, samples, bytes) == JXL_ENC_SUCCESS);
    JxlEncoderCloseInput(encoder);
    Bytes out = {malloc(4096), 4096};
    uint8_t *next = out.data;
    size_t available = out.size;
    JxlEncoderStatus status;
    while ((status = JxlEncoderProcessOutput(encoder, &next, &available)) ==
           JXL_ENC_NEED_MORE_OUTPUT) {
        const size_t used = (size_t)(next - out.data);
        out.size *= 2;
        out.data = realloc(out.data, out.size);
        next = out.data + used;
        available = out.size - used;
    }
    require(status == JXL_ENC_SUCCESS);
    out.size = (size_t)(next - out.data);
    JxlEncoderDestroy(encoder);
    return out;
}

// ---- GIF ---------------------------------------------------------------------------

static int gif_append(GifFileType *gif, const GifByteType *data, int size) {
    append(gif->UserData, data, (size_t)size);
    return size;
}

Bytes encode_gif(int screen_width, int screen_height, int left, int top, int frame_width,
                 int frame_height, const uint8_t *pixels, const uint8_t *colours, int colour_count,
                 int interlace, int transparent) {
    Bytes out = {NULL, 0};
    int error = 0;
    GifFileType *gif = EGifOpen(&out, gif_append, &error);
    require(gif != NULL);
    EGifSetGifVersion(gif, true);
    const GifColorType global_colours[2] = {{1, 2, 3}, {250, 251, 252}};
    ColorMapObject *global = GifMakeMapObject(2, global_colours);
    ColorMapObject *local = GifMakeMapObject(colour_count, (const GifColorType *)colours);
    require(global && local);
    require(EGifPutScreenDesc(gif, screen_width, screen_height, 8, 0, global) == GIF_OK);
    if (transparent >= 0) {
        GraphicsControlBlock control = {DISPOSAL_UNSPECIFIED, false, 0, transparent};
        GifByteType extension[4];
        const size_t length = EGifGCBToExtension(&control, extension);
        require(EGifPutExtension(gif, GRAPHICS_EXT_FUNC_CODE, (int)length, extension) == GIF_OK);
    }
    require(EGifPutImageDesc(gif, left, top, frame_width, frame_height, interlace, local) ==
            GIF_OK);
    // An interlaced frame is written in its pass order.
    static const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
    for (int pass = 0; pass < (interlace ? 4 : 1); pass++)
        for (int y = interlace ? start[pass] : 0; y < frame_height; y += interlace ? step[pass] : 1)
            require(EGifPutLine(gif, (GifPixelType *)pixels + (size_t)y * frame_width,
                                frame_width) == GIF_OK);
    GifFreeMapObject(global);
    GifFreeMapObject(local);
    require(EGifCloseFile(gif, &error) == GIF_OK);
    return out;
}

// ---- EXIF ----------------------------------------------------------------------------

Bytes exif_orientation_block(int orientation, int bare) {
    ExifData *exif = exif_data_new();
    require(exif != NULL);
    exif_data_set_byte_order(exif, EXIF_BYTE_ORDER_MOTOROLA);
    ExifEntry *entry = exif_entry_new();
    exif_content_add_entry(exif->ifd[EXIF_IFD_0], entry);
    exif_entry_initialize(entry, EXIF_TAG_ORIENTATION);
    exif_set_short(entry->data, EXIF_BYTE_ORDER_MOTOROLA, (ExifShort)orientation);
    exif_entry_unref(entry);
    unsigned char *saved = NULL;
    unsigned int size = 0;
    exif_data_save_data(exif, &saved, &size);
    exif_data_unref(exif);
    require(saved != NULL && size > 6 && memcmp(saved, "Exif\0\0", 6) == 0);
    const size_t skip = bare ? 6 : 0;
    Bytes out = {malloc(size - skip), size - skip};
    memcpy(out.data, saved + skip, out.size);
    free(saved);
    return out;
}
