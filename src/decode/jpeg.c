// JPEG decoding with libjpeg-turbo's libjpeg API: only the requested region
// (jpeg_crop_scanline + jpeg_skip_scanlines, stopping after its last row
// unless the whole file is to be checked) at the smallest DCT scale num/8
// that keeps the requested resolution.
//
// Every image decodes as if it were the only one: the decompressor is
// destroyed and created again before each file (a few allocations), since
// libjpeg keeps quantization and Huffman tables across jpeg_abort, and a
// file without its own DQT would otherwise decode with the previous file's
// tables (or fail for a reason that depends on it). A baseline file without
// DHT gets libjpeg's standard Huffman tables, as motion-JPEG expects; one
// without DQT fails ("Quantization table 0x00 was not defined").
//
// Errors: libjpeg's error_exit longjmps back into the decode call, which
// returns -1 with the reason. Warnings that mean lost pixels (premature end of
// data, corrupt entropy data) are errors too, so no grey-filled image is ever
// returned; all other warnings are ignored and nothing is printed.
//
// A native request (decode.h) gets grey JPEGs as 1-channel samples; every
// other JPEG is RGB as above.
//
// CMYK/YCCK follow Pillow: samples are taken to be Adobe-inverted (Pillow's
// "CMYK;I" raw mode, used for every CMYK JPEG) and converted as Pillow's
// convert("RGB") does. With c, m, y, k the stored samples:
//     R = k - round((255 - c) * k / 255)   (about c * k / 255), same for G, B.
#include "decode/decode_internal.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

// Real progressive files have about 10 scans; thousands of tiny scans are a
// known way to make a small file take minutes.
#define JPEG_MAX_SCANS 500
// Rows handed to one jpeg_read_scanlines call.
#define JPEG_ROWS_PER_READ 16

typedef enum JpegFailure {
    JPEG_FAILED_CORRUPT,
    JPEG_FAILED_TRUNCATED,
    JPEG_FAILED_UNSUPPORTED,
    JPEG_FAILED_TOO_LARGE,
    JPEG_FAILED_MEMORY,
    JPEG_FAILED_EMPTY,
    JPEG_FAILED_TOO_MANY_SCANS,
} JpegFailure;

struct JpegState {
    struct jpeg_decompress_struct cinfo;  // created afresh for every image (fresh_decompressor)
    struct jpeg_error_mgr error_manager;
    struct jpeg_progress_mgr progress;
    jmp_buf jump;  // where error_exit returns to
    JpegFailure failure;
    char library_message[JMSG_LENGTH_MAX];
};

static JpegFailure classify_error(int code) {
    switch (code) {
    case JERR_OUT_OF_MEMORY: return JPEG_FAILED_MEMORY;
    case JERR_IMAGE_TOO_BIG:
    case JERR_WIDTH_OVERFLOW: return JPEG_FAILED_TOO_LARGE;
    case JERR_BAD_PRECISION:
    case JERR_SOF_UNSUPPORTED:
    case JERR_CONVERSION_NOTIMPL:
    case JERR_NOT_COMPILED: return JPEG_FAILED_UNSUPPORTED;
    case JERR_INPUT_EMPTY: return JPEG_FAILED_EMPTY;
    case JWRN_JPEG_EOF: return JPEG_FAILED_TRUNCATED;
    default: return JPEG_FAILED_CORRUPT;
    }
}

static _Noreturn void fail_with(j_common_ptr cinfo, JpegFailure failure) {
    JpegState *state = cinfo->client_data;
    state->failure = failure;
    (*cinfo->err->format_message)(cinfo, state->library_message);
    longjmp(state->jump, 1);
}

static void on_error_exit(j_common_ptr cinfo) {
    fail_with(cinfo, classify_error(cinfo->err->msg_code));
}

// Warnings whose pixels would be guesses (libjpeg fills missing data with
// zeros, i.e. grey). Extraneous bytes before a marker are not among them:
// common in camera files and the image data is intact.
static int warning_loses_pixels(int code) {
    switch (code) {
    case JWRN_JPEG_EOF:
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_ARITH_BAD_CODE:
    case JWRN_MUST_RESYNC:
    case JWRN_NOT_SEQUENTIAL:
    case JWRN_BOGUS_PROGRESSION: return 1;
    default: return 0;
    }
}

static void on_emit_message(j_common_ptr cinfo, int level) {
    if (level < 0 && warning_loses_pixels(cinfo->err->msg_code))
        fail_with(cinfo, classify_error(cinfo->err->msg_code));
}

static void on_output_message(j_common_ptr cinfo) {
    (void)cinfo;  // never print
}

static void on_progress(j_common_ptr cinfo) {
    if (cinfo->is_decompressor &&
        ((j_decompress_ptr)cinfo)->input_scan_number > JPEG_MAX_SCANS)
        fail_with(cinfo, JPEG_FAILED_TOO_MANY_SCANS);
}

// jpeg_create_decompress reports running out of memory through error_exit.
static int create_decompressor(JpegState *state) {
    if (setjmp(state->jump)) return -1;
    jpeg_create_decompress(&state->cinfo);
    state->cinfo.progress = &state->progress;
    return 0;
}

// A new decompressor with no tables of earlier images (see the top).
// jpeg_destroy_decompress is safe on one already destroyed.
static int fresh_decompressor(JpegState *state, ErrorMessage *err) {
    jpeg_destroy_decompress(&state->cinfo);
    if (create_decompressor(state) != 0)
        return error_set(err, "out of memory: cannot create a JPEG decompressor");
    return 0;
}

JpegState *decode_jpeg_state_create(void) {
    JpegState *state = calloc(1, sizeof *state);
    if (!state) return NULL;
    state->cinfo.err = jpeg_std_error(&state->error_manager);
    state->error_manager.error_exit = on_error_exit;
    state->error_manager.emit_message = on_emit_message;
    state->error_manager.output_message = on_output_message;
    state->cinfo.client_data = state;
    state->progress.progress_monitor = on_progress;
    if (create_decompressor(state) != 0) {
        free(state);
        return NULL;
    }
    return state;
}

void decode_jpeg_state_destroy(JpegState *state) {
    if (!state) return;
    jpeg_destroy_decompress(&state->cinfo);
    free(state);
}

// Called after a longjmp: resets the decompressor for the next image and
// turns the failure into the message.
static int report_failure(JpegState *state, ErrorMessage *err) {
    jpeg_abort_decompress(&state->cinfo);
    const char *detail = state->library_message;
    switch (state->failure) {
    case JPEG_FAILED_TRUNCATED: return error_set(err, "truncated: premature end of JPEG data");
    case JPEG_FAILED_UNSUPPORTED: return error_set(err, "unsupported format: JPEG %s", detail);
    case JPEG_FAILED_TOO_LARGE: return error_set(err, "image too large: %s", detail);
    case JPEG_FAILED_MEMORY: return error_set(err, "out of memory in libjpeg: %s", detail);
    case JPEG_FAILED_EMPTY: return error_set(err, "empty file");
    case JPEG_FAILED_TOO_MANY_SCANS:
        return error_set(err, "corrupt data: JPEG has more than %d scans", JPEG_MAX_SCANS);
    case JPEG_FAILED_CORRUPT: break;
    }
    static const char redundant[] = "Corrupt JPEG data: ";
    if (strncmp(detail, redundant, sizeof redundant - 1) == 0) detail += sizeof redundant - 1;
    return error_set(err, "corrupt data: %s", detail);
}

int decode_jpeg_probe(Decoder *decoder, const uint8_t *data, size_t size, ImageInfo *info,
                      ErrorMessage *err) {
    JpegState *state = decoder->jpeg;
    if (fresh_decompressor(state, err) != 0) return -1;
    if (setjmp(state->jump)) return report_failure(state, err);
    jpeg_mem_src(&state->cinfo, data, (unsigned long)size);
    jpeg_read_header(&state->cinfo, TRUE);
    info->width = (int)state->cinfo.image_width;
    info->height = (int)state->cinfo.image_height;
    jpeg_abort_decompress(&state->cinfo);
    return 0;
}

// A side of length `side` keeps at least min_side pixels at scale num/8.
static int scale_keeps(int side, int min_side, int num) {
    return min_side > 0 && (int64_t)side * num >= (int64_t)min_side * 8;
}

// The smallest num in 1..8 whose scale keeps both minimum sides; 8 (full
// resolution) when a minimum is 0 or larger than the region.
static int choose_scale_num(const PixelRect *region, const DecodeRequest *request) {
    if (!request) return 8;
    for (int num = 1; num < 8; num++)
        if (scale_keeps(region->width, request->min_width, num) &&
            scale_keeps(region->height, request->min_height, num))
            return num;
    return 8;
}

// Full-image coordinate of scaled coordinate s at scale num/8, rounded.
static int unscale(int64_t s, int num) { return (int)((s * 8 + num / 2) / num); }

// native: a native request, for which grey stays grey.
static J_COLOR_SPACE output_colour_space(const struct jpeg_decompress_struct *cinfo, int native) {
    switch (cinfo->jpeg_color_space) {
    case JCS_CMYK:
    case JCS_YCCK: return JCS_CMYK;  // libjpeg converts YCCK to CMYK
    case JCS_GRAYSCALE: return native ? JCS_GRAYSCALE : JCS_RGB;  // libjpeg-turbo expands it
    case JCS_RGB:
    case JCS_YCbCr: return JCS_RGB;
    default: return JCS_UNKNOWN;
    }
}

// Pillow's MULDIV255: a * b / 255 rounded.
static inline int muldiv255(int a, int b) {
    int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
}

static void cmyk_row_to_rgb(const uint8_t *cmyk, uint8_t *rgb, int width) {
    for (int x = 0; x < width; x++, cmyk += 4, rgb += 3) {
        int k = cmyk[3];  // stored (inverted) K is Pillow's 255 - K
        for (int c = 0; c < 3; c++) rgb[c] = (uint8_t)(k - muldiv255(255 - cmyk[c], k));
    }
}

// Reads output rows [first, end) into pixels (RGB, stride bytes apart); CMYK
// rows go through scratch. cinfo->output_scanline is `first` on entry.
static int read_rows(Decoder *decoder, int end, uint8_t *pixels, size_t stride,
                     ErrorMessage *err) {
    struct jpeg_decompress_struct *cinfo = &decoder->jpeg->cinfo;
    const int width = (int)cinfo->output_width;
    const int cmyk = cinfo->out_color_space == JCS_CMYK;
    uint8_t *cmyk_rows = NULL;
    if (cmyk) {
        cmyk_rows = decode_buffer_reserve(&decoder->scratch,
                                          (size_t)width * 4 * JPEG_ROWS_PER_READ, err);
        if (!cmyk_rows) return -1;
    }
    int row = 0;
    while ((int)cinfo->output_scanline < end) {
        int want = end - (int)cinfo->output_scanline;
        if (want > JPEG_ROWS_PER_READ) want = JPEG_ROWS_PER_READ;
        JSAMPROW pointers[JPEG_ROWS_PER_READ];
        for (int i = 0; i < want; i++)
            pointers[i] = cmyk ? cmyk_rows + (size_t)i * width * 4
                               : pixels + (size_t)(row + i) * stride;
        int got = (int)jpeg_read_scanlines(cinfo, pointers, (JDIMENSION)want);
        if (got <= 0) return error_set(err, "corrupt data: JPEG decoder made no progress");
        if (cmyk)
            for (int i = 0; i < got; i++)
                cmyk_row_to_rgb(pointers[i], pixels + (size_t)(row + i) * stride, width);
        row += got;
    }
    return 0;
}

// The rows below the region, entropy-decoded and dropped, then the rest of
// the file up to the EOI marker: a cut or damaged tail fails here as in a
// full decode. jpeg_skip_scanlines decodes nothing when asked to skip to the
// very end, so it stops one row short and that row is read.
static int read_tail(Decoder *decoder, ErrorMessage *err) {
    struct jpeg_decompress_struct *cinfo = &decoder->jpeg->cinfo;
    const JDIMENSION left = cinfo->output_height - cinfo->output_scanline;
    if (left > 1) jpeg_skip_scanlines(cinfo, left - 1);
    if (left > 0) {
        JSAMPROW row = decode_buffer_reserve(&decoder->scratch,
                                             (size_t)cinfo->output_width * 4, err);
        if (!row) return -1;
        if (jpeg_read_scanlines(cinfo, &row, 1) != 1)
            return error_set(err, "corrupt data: JPEG decoder made no progress");
    }
    jpeg_finish_decompress(cinfo);
    return 0;
}

int decode_jpeg_decode(Decoder *decoder, const uint8_t *data, size_t size,
                       const DecodeRequest *request, DecodedImage *out, ErrorMessage *err) {
    JpegState *state = decoder->jpeg;
    struct jpeg_decompress_struct *cinfo = &state->cinfo;
    if (fresh_decompressor(state, err) != 0) return -1;
    if (setjmp(state->jump)) return report_failure(state, err);
    jpeg_mem_src(cinfo, data, (unsigned long)size);
    jpeg_read_header(cinfo, TRUE);
    const int width = (int)cinfo->image_width, height = (int)cinfo->image_height;

    PixelRect region;
    int status = decode_clamp_region(request, width, height, &region, err);
    J_COLOR_SPACE colour = output_colour_space(cinfo, decoder->native);
    if (status == 0 && colour == JCS_UNKNOWN)
        status = error_set(err, "unsupported format: JPEG colour space %d with %d components",
                           (int)cinfo->jpeg_color_space, cinfo->num_components);
    // Multi-scan (progressive) files keep the whole image's coefficients.
    if (status == 0 && jpeg_has_multiple_scans(cinfo))
        status = decode_check_size(decoder, "progressive JPEG", width, height, err);
    if (status != 0) {
        jpeg_abort_decompress(cinfo);
        return -1;
    }

    const int num = choose_scale_num(&region, request);
    cinfo->scale_num = (unsigned int)num;
    cinfo->scale_denom = 8;
    cinfo->out_color_space = colour;
    jpeg_start_decompress(cinfo);

    // The region in scaled coordinates: scaled pixel s covers full-image
    // pixels [s*8/num, (s+1)*8/num).
    const int64_t scaled_width = cinfo->output_width, scaled_height = cinfo->output_height;
    int64_t x0 = (int64_t)region.x * num / 8, y0 = (int64_t)region.y * num / 8;
    int64_t x1 = ((int64_t)(region.x + region.width) * num + 7) / 8;
    int64_t y1 = ((int64_t)(region.y + region.height) * num + 7) / 8;
    if (x1 > scaled_width) x1 = scaled_width;
    if (y1 > scaled_height) y1 = scaled_height;
    JDIMENSION crop_x = (JDIMENSION)x0, crop_width = (JDIMENSION)(x1 - x0);
    // Moves crop_x left to an iMCU boundary and widens crop_width to match.
    jpeg_crop_scanline(cinfo, &crop_x, &crop_width);
    const int rows = (int)(y1 - y0);
    if (decode_check_size(decoder, "decoded JPEG region", crop_width, rows, err) != 0) {
        jpeg_abort_decompress(cinfo);
        return -1;
    }
    const int channels = colour == JCS_GRAYSCALE ? 1 : 3;
    const size_t stride = (size_t)crop_width * (size_t)channels;
    uint8_t *pixels = decode_buffer_reserve(&decoder->pixels, stride * (size_t)rows, err);
    if (!pixels) {
        jpeg_abort_decompress(cinfo);
        return -1;
    }
    if (y0 > 0) jpeg_skip_scanlines(cinfo, (JDIMENSION)y0);
    if ((int64_t)cinfo->output_scanline != y0) {
        jpeg_abort_decompress(cinfo);
        return error_set(err, "corrupt data: cannot skip to JPEG row %lld", (long long)y0);
    }
    status = read_rows(decoder, (int)y1, pixels, stride, err);
    if (status == 0 && request && request->whole_file) status = read_tail(decoder, err);
    // Otherwise stop here: rows below the region are never decoded.
    jpeg_abort_decompress(cinfo);
    if (status != 0) return -1;

    if (channels == 1)  // native grey
        out->samples = (SampleImage){pixels, (int)crop_width, rows, 1, stride, SAMPLE_U8,
                                     COLOUR_GREY, 8};
    else
        out->image = (Image){pixels, (int)crop_width, rows, stride};
    // Not clamped to the image: when its size is not a multiple of 8/num the
    // last scaled column/row stands for a partial block (padded by the
    // encoder), and clamping would break covered.width / image.width = 8/num.
    int cover_x = unscale(crop_x, num), cover_y = unscale(y0, num);
    out->covered = (PixelRect){cover_x, cover_y, unscale(crop_x + crop_width, num) - cover_x,
                               unscale(y1, num) - cover_y};
    return 0;
}
