// DICOM (part 10 files) through DCMTK (dicom_dcmtk.cpp): one frame per file,
// as LightlyTrain reads DICOM (multi-frame files are refused, as there).
// The frame is decoded whole (DCMTK's codecs have no region decode); the
// region is cut from it here. Chosen over GDCM, which has JPEG 2000 but
// whose Debian build aborts on assertions when a file is cut short: one bad
// file must never stop a run. JPEG 2000 files are skipped with that reason.
//
// What the samples become (docs/input-pipeline.md, "DICOM"):
//   - MONOCHROME2: the stored value, sign-extended from BitsStored when
//     signed, offset by 2^(BitsStored-1) so that the range starts at 0
//     (LightlyTrain's (v - min) / (max - min) for integer types), kept with
//     BitsStored significant bits; the 8-bit pipeline keeps the top 8 of them.
//     No windowing (VOI LUT): LightlyTrain applies none. The rescale
//     (slope, intercept; pydicom's modality LUT) is linear, so once the
//     range is mapped to 0..255 only the slope's sign is left of it: a
//     negative slope inverts the samples, as the modality LUT does.
//   - MONOCHROME1 (minimum is white) is inverted, so that white is high as
//     in MONOCHROME2 (pydicom's pixel_array, and so LightlyTrain, do not);
//     with a negative slope too, the two inversions cancel.
//   - RGB as stored; YBR_FULL and YBR_FULL_422 to RGB with pydicom's
//     convert_color_space matrix (what LightlyTrain applies); PALETTE COLOR
//     through its colour LUTs as pydicom's apply_color_lut (index clipped to
//     the LUT, 16-bit entries kept as 16 bits).
//   - other photometric interpretations and depths other than 8 or 16 bits
//     are refused with their name.
#include "decode/decode_internal.h"
#include "decode/dicom_dcmtk.h"
#include "decode/dicom_lengths.h"

#include <math.h>
#include <string.h>

// DCMTK's condition texts; a stream that ends inside an element is a cut file.
static int report_dcmtk_failure(const char *message, ErrorMessage *err) {
    if (strstr(message, "end of stream") || strstr(message, "Premature") ||
        strstr(message, "ended prematurely") || strstr(message, "StreamNotifyClient"))
        return error_set(err, "truncated: DICOM: %s", message);
    if (strstr(message, "no decoder"))
        return error_set(err, "unsupported format: DICOM: %s", message);
    return error_set(err, "corrupt data: DICOM: %s", message);
}

int decode_dicom_probe(Decoder *decoder, const uint8_t *data, size_t size, ImageInfo *info,
                       ErrorMessage *err) {
    (void)decoder;
    DicomInfo dicom;
    char message[256] = "";
    if (dicom_check_lengths(data, size, err) != 0) return -1;
    DicomFile *file = dicom_open(data, size, 1, &dicom, message, sizeof message);
    if (!file) return report_dcmtk_failure(message, err);
    dicom_close(file);
    info->width = dicom.width;
    info->height = dicom.height;
    return 0;
}

static int check_layout(const DicomInfo *d, ErrorMessage *err) {
    if (d->frames != 1)
        return error_set(err,
                         "unsupported format: DICOM with %d frames (one frame per file is read)",
                         d->frames);
    const int grey = d->colour == DICOM_MONOCHROME1 || d->colour == DICOM_MONOCHROME2;
    const int colour =
        d->colour == DICOM_RGB || d->colour == DICOM_YBR_FULL || d->colour == DICOM_PALETTE;
    if (!grey && !colour)
        return error_set(err, "unsupported format: DICOM photometric interpretation %s",
                         d->photometric);
    if (d->samples_per_pixel != (grey || d->colour == DICOM_PALETTE ? 1 : 3))
        return error_set(err, "corrupt data: DICOM %s with %d samples per pixel", d->photometric,
                         d->samples_per_pixel);
    if (d->bits_allocated != 8 && d->bits_allocated != 16)
        return error_set(err, "unsupported format: DICOM with %d-bit samples", d->bits_allocated);
    if (d->bits_stored < 1 || d->bits_stored > d->bits_allocated ||
        d->high_bit < d->bits_stored - 1 || d->high_bit >= d->bits_allocated)
        return error_set(err, "corrupt data: DICOM bits stored %d, high bit %d in %d bits",
                         d->bits_stored, d->high_bit, d->bits_allocated);
    if (d->colour == DICOM_YBR_FULL && d->bits_allocated != 8)
        return error_set(err, "unsupported format: %d-bit DICOM %s", d->bits_allocated,
                         d->photometric);
    return 0;
}

// Sample c of pixel (x, y) of the decoded frame, as stored.
static inline unsigned stored_sample(const DicomInfo *d, const uint8_t *pixels, int x, int y,
                                     int c) {
    const size_t channels = (size_t)d->samples_per_pixel;
    const size_t index = d->planar ? (size_t)c * d->width * d->height + (size_t)y * d->width + x
                                   : ((size_t)y * d->width + x) * channels + (size_t)c;
    if (d->bits_allocated == 8) return pixels[index];
    uint16_t v;
    memcpy(&v, pixels + 2 * index, 2);
    return v;
}

// A monochrome sample: its bits, sign removed by the offset, inverted for
// MONOCHROME1 or a negative rescale slope (not both); 0 .. 2^bits_stored - 1.
static inline unsigned grey_value(const DicomInfo *d, unsigned raw) {
    const unsigned mask = (1u << d->bits_stored) - 1u;
    unsigned v = (raw >> (d->high_bit + 1 - d->bits_stored)) & mask;
    if (d->signed_samples) v ^= 1u << (d->bits_stored - 1);  // two's complement + offset
    const int invert = (d->colour == DICOM_MONOCHROME1) != (d->slope < 0.0);
    return invert ? mask - v : v;
}

// pydicom's YBR_FULL -> RGB: float32 products, floor(x + 0.5), clipped.
static void ybr_to_rgb(unsigned y, unsigned cb, unsigned cr, uint8_t rgb[3]) {
    const float luma = (float)y, blue = (float)cb - 128.0f, red = (float)cr - 128.0f;
    const float values[3] = {luma + 1.402f * red, luma - 0.344136f * blue - 0.714136f * red,
                             luma + 1.772f * blue};
    for (int c = 0; c < 3; c++) {
        const float v = floorf(values[c] + 0.5f);
        rgb[c] = (uint8_t)(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v);
    }
}

// LUT entry for a stored value, as pydicom's apply_color_lut: clipped to the
// table, 8 or 16 bits per entry.
static inline unsigned lut_value(const DicomLut *lut, unsigned stored) {
    int index = (int)stored - lut->first;
    if (index < 0) index = 0;
    if (index >= lut->entries) index = lut->entries - 1;
    if (lut->bits == 16)
        return (unsigned)lut->data[2 * index] | (unsigned)lut->data[2 * index + 1] << 8;
    // 8-bit entries: one per byte, or one per 16-bit word when stored in OW.
    return lut->data_bytes >= 2 * (size_t)lut->entries ? lut->data[2 * index] : lut->data[index];
}

static int check_palette(const DicomLut luts[3], ErrorMessage *err) {
    for (int c = 0; c < 3; c++) {
        const size_t bytes_per_entry = luts[c].bits == 16 ? 2 : 1;
        if ((luts[c].bits != 8 && luts[c].bits != 16) ||
            luts[c].data_bytes < (size_t)luts[c].entries * bytes_per_entry)
            return error_set(err, "corrupt data: DICOM palette of %d %d-bit entries in %zu bytes",
                             luts[c].entries, luts[c].bits, luts[c].data_bytes);
    }
    return 0;
}

// The region of the decoded frame as native samples (luts: PALETTE COLOR).
static int to_samples(Decoder *decoder, const DicomInfo *d, const uint8_t *pixels,
                      const DicomLut *luts, const PixelRect *region, SampleImage *image,
                      ErrorMessage *err) {
    const int grey = d->colour == DICOM_MONOCHROME1 || d->colour == DICOM_MONOCHROME2;
    const int channels = grey ? 1 : 3;
    // Grey always 16-bit wide with bits_stored significant bits (at least
    // 8: fewer are moved up); colour in its allocated width (a palette: its
    // LUT's).
    const int colour_bits = d->colour == DICOM_PALETTE ? luts[0].bits : d->bits_allocated;
    const SampleType type = grey || colour_bits == 16 ? SAMPLE_U16 : SAMPLE_U8;
    const int up = grey && d->bits_stored < 8 ? 8 - d->bits_stored : 0;
    const size_t stride = (size_t)region->width * channels * sample_type_bytes(type);
    uint8_t *out = decode_buffer_reserve(&decoder->samples, stride * (size_t)region->height, err);
    if (!out) return -1;
    const int copy_rows = d->colour == DICOM_RGB && d->bits_allocated == 8 && !d->planar;
    for (int y = 0; y < region->height; y++) {
        uint8_t *row = out + (size_t)y * stride;
        if (copy_rows) {  // interleaved 8-bit RGB: as stored
            memcpy(row, pixels + (((size_t)(region->y + y) * d->width + region->x) * 3), stride);
            continue;
        }
        for (int x = 0; x < region->width; x++) {
            const int sx = region->x + x, sy = region->y + y;
            if (grey) {
                const uint16_t v =
                    (uint16_t)(grey_value(d, stored_sample(d, pixels, sx, sy, 0)) << up);
                memcpy(row + 2 * (size_t)x, &v, 2);
            } else if (d->colour == DICOM_PALETTE) {
                const unsigned index = stored_sample(d, pixels, sx, sy, 0);
                for (int c = 0; c < 3; c++) {
                    const unsigned v = lut_value(&luts[c], index);
                    if (type == SAMPLE_U8) {
                        row[3 * (size_t)x + c] = (uint8_t)v;
                    } else {
                        const uint16_t s = (uint16_t)v;
                        memcpy(row + 2 * (3 * (size_t)x + c), &s, 2);
                    }
                }
            } else if (d->colour == DICOM_YBR_FULL) {
                ybr_to_rgb(stored_sample(d, pixels, sx, sy, 0), stored_sample(d, pixels, sx, sy, 1),
                           stored_sample(d, pixels, sx, sy, 2), row + 3 * (size_t)x);
            } else {
                for (int c = 0; c < 3; c++) {
                    const unsigned v = stored_sample(d, pixels, sx, sy, c);
                    if (type == SAMPLE_U8) {
                        row[3 * (size_t)x + c] = (uint8_t)v;
                    } else {
                        const uint16_t s = (uint16_t)v;
                        memcpy(row + 2 * (3 * (size_t)x + c), &s, 2);
                    }
                }
            }
        }
    }
    const int bits = grey                         ? (d->bits_stored < 8 ? 8 : d->bits_stored)
                     : d->colour == DICOM_PALETTE ? colour_bits
                                                  : d->bits_stored;
    *image = (SampleImage){
        out, region->width, region->height, channels, stride, type, grey ? COLOUR_GREY : COLOUR_RGB,
        bits};
    return 0;
}

static uint8_t *reserve_scratch(void *context, size_t bytes) {
    Decoder *decoder = context;
    ErrorMessage ignored;
    return decode_buffer_reserve(&decoder->scratch, bytes, &ignored);
}

int decode_dicom_decode(Decoder *decoder, const uint8_t *data, size_t size,
                        const DecodeRequest *request, DecodedImage *out, ErrorMessage *err) {
    DicomInfo d;
    char message[256] = "";
    if (dicom_check_lengths(data, size, err) != 0) return -1;
    DicomFile *file = dicom_open(data, size, 0, &d, message, sizeof message);
    if (!file) return report_dcmtk_failure(message, err);
    PixelRect region;
    uint8_t *pixels = NULL;
    size_t length = 0;
    DicomLut luts[3];
    int status = check_layout(&d, err);
    if (status == 0) status = decode_check_size(decoder, "DICOM image", d.width, d.height, err);
    if (status == 0) status = decode_clamp_region(request, d.width, d.height, &region, err);
    if (status == 0 && dicom_first_frame(file, reserve_scratch, decoder, &pixels, &length, &d,
                                         message, sizeof message) != 0)
        status = report_dcmtk_failure(message, err);
    if (status == 0) status = check_layout(&d, err);  // as decoded
    if (status == 0 && d.colour == DICOM_PALETTE) {
        if (dicom_palette(file, luts, message, sizeof message) != 0)
            status = error_set(err, "corrupt data: DICOM: %s", message);
        else
            status = check_palette(luts, err);
    }
    const size_t needed = (size_t)d.width * (size_t)d.height * (size_t)d.samples_per_pixel *
                          (size_t)(d.bits_allocated / 8);
    if (status == 0 && length < needed)
        status = error_set(err, "corrupt data: DICOM frame holds %zu of %zu bytes", length, needed);
    SampleImage image;
    if (status == 0) status = to_samples(decoder, &d, pixels, luts, &region, &image, err);
    dicom_close(file);  // after the palette LUTs are used
    if (status != 0) return -1;
    return decode_finish(decoder, &image, region, out, err);
}
