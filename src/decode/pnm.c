// Netpbm images: PBM, PGM, PPM in their ASCII (P1, P2, P3) and binary (P4,
// P5, P6) forms, and PAM (P7, any depth). Our own reader, because the
// maintained library at hand, stb_image, reads only P5 and P6, and libnetpbm
// is not a dependency worth adding for a header of ASCII numbers followed by
// raw samples. Being ours, it reads binary files row by row: only the rows of
// the region are touched.
//
// Samples become native ones (samples.c makes RGB of them): maxval 255 and
// 65535 are kept as 8 and 16 bits; other maxvals are scaled to the full range
// of 8 bits (maxval < 256) or 16 bits, rounded (Pillow scales the same way);
// values above maxval are clamped. PBM's 1 is black. PAM's TUPLTYPE decides
// the colour model (GRAYSCALE, RGB, their _ALPHA forms, BLACKANDWHITE); other
// types are bands. Pillow reads P1..P6, not PAM.
#include "decode/decode_internal.h"

#include <ctype.h>
#include <string.h>

typedef struct PnmHeader {
    int kind;  // 1..7
    int width, height, depth;
    int maxval;
    SampleType type;      // the native samples: U16 for a maxval above 255, else U8
    size_t sample_bytes;  // of a native sample, as of a binary one in the file (not PBM's)
    ColourModel colour;
    size_t data_offset;  // first byte of the samples
} PnmHeader;

typedef struct Cursor {
    const uint8_t *data;
    size_t size, at;
} Cursor;

static void skip_space_and_comments(Cursor *c) {
    while (c->at < c->size) {
        if (c->data[c->at] == '#') {
            while (c->at < c->size && c->data[c->at] != '\n') c->at++;
        } else if (isspace(c->data[c->at])) {
            c->at++;
        } else {
            break;
        }
    }
}

// A decimal number of at most `limit`; -1 when there is none or it is larger.
static long read_number(Cursor *c, long limit) {
    skip_space_and_comments(c);
    if (c->at >= c->size || !isdigit(c->data[c->at])) return -1;
    long value = 0;
    while (c->at < c->size && isdigit(c->data[c->at])) {
        value = value * 10 + (c->data[c->at++] - '0');
        if (value > limit) return -1;
    }
    return value;
}

static int read_word(Cursor *c, char *word, size_t capacity) {
    skip_space_and_comments(c);
    size_t n = 0;
    while (c->at < c->size && !isspace(c->data[c->at])) {
        if (n + 1 < capacity) word[n++] = (char)c->data[c->at];
        c->at++;
    }
    word[n] = '\0';
    return n > 0 ? 0 : -1;
}

static int parse_pam_header(Cursor *c, PnmHeader *h, ErrorMessage *err) {
    char key[32], tuple_type[32] = "";
    h->width = h->height = h->depth = h->maxval = -1;
    for (;;) {
        if (read_word(c, key, sizeof key) != 0)
            return error_set(err, "truncated: PAM header ends early");
        if (strcmp(key, "ENDHDR") == 0) break;
        if (strcmp(key, "TUPLTYPE") == 0) {
            if (read_word(c, tuple_type, sizeof tuple_type) != 0)
                return error_set(err, "truncated: PAM header ends early");
            continue;
        }
        int *field = strcmp(key, "WIDTH") == 0    ? &h->width
                     : strcmp(key, "HEIGHT") == 0 ? &h->height
                     : strcmp(key, "DEPTH") == 0  ? &h->depth
                     : strcmp(key, "MAXVAL") == 0 ? &h->maxval
                                                  : NULL;
        if (!field) return error_set(err, "corrupt data: PAM header has unknown field '%s'", key);
        *field = (int)read_number(c, DECODE_MAX_SIDE);
    }
    if (h->depth < 1 || h->depth > 64)
        return error_set(err, "corrupt data: PAM depth %d outside 1..64", h->depth);
    const int alpha = strstr(tuple_type, "_ALPHA") != NULL;
    if ((strncmp(tuple_type, "GRAYSCALE", 9) == 0 ||
         strncmp(tuple_type, "BLACKANDWHITE", 13) == 0) &&
        h->depth == 1 + alpha)
        h->colour = COLOUR_GREY;
    else if (strncmp(tuple_type, "RGB", 3) == 0 && h->depth == 3 + alpha)
        h->colour = COLOUR_RGB;
    else
        h->colour = COLOUR_BANDS;
    return 0;
}

static int parse_header(const uint8_t *data, size_t size, PnmHeader *h, ErrorMessage *err) {
    memset(h, 0, sizeof *h);
    Cursor c = {data, size, 2};
    h->kind = data[1] - '0';
    if (h->kind == 7) {
        if (parse_pam_header(&c, h, err) != 0) return -1;
    } else {
        h->width = (int)read_number(&c, DECODE_MAX_SIDE);
        h->height = (int)read_number(&c, DECODE_MAX_SIDE);
        h->maxval = h->kind == 1 || h->kind == 4 ? 1 : (int)read_number(&c, 65535);
        h->depth = h->kind == 3 || h->kind == 6 ? 3 : 1;
        h->colour = h->depth == 3 ? COLOUR_RGB : COLOUR_GREY;
    }
    if (h->width < 0 || h->height < 0 || h->maxval < 0) {
        if (c.at >= c.size) return error_set(err, "truncated: PNM header ends early");
        return error_set(err, "corrupt data: PNM header has a missing or too large number");
    }
    if (h->maxval < 1 || h->maxval > 65535)
        return error_set(err, "corrupt data: PNM maxval %d outside 1..65535", h->maxval);
    h->type = h->maxval > 255 ? SAMPLE_U16 : SAMPLE_U8;
    h->sample_bytes = sample_type_bytes(h->type);
    // Binary data starts after exactly one whitespace byte (PAM: ENDHDR's
    // newline); ASCII samples are read as numbers.
    if (h->kind >= 4) {
        if (c.at >= c.size) return error_set(err, "truncated: PNM data missing");
        c.at++;
    }
    h->data_offset = c.at;
    return 0;
}

int decode_pnm_probe(Decoder *decoder, const uint8_t *data, size_t size, ImageInfo *info,
                     ErrorMessage *err) {
    (void)decoder;
    PnmHeader h;
    if (parse_header(data, size, &h, err) != 0) return -1;
    info->width = h.width;
    info->height = h.height;
    info->channels = h.depth;
    info->colour = h.colour;
    info->sample_type = h.type;
    return 0;
}

// maxval-scaled sample value -> the native type's range.
static inline unsigned scale_sample(unsigned value, const PnmHeader *h, unsigned full) {
    if (value > (unsigned)h->maxval) value = (unsigned)h->maxval;
    if ((unsigned)h->maxval == full) return value;
    return (value * 2u * full + (unsigned)h->maxval) / (2u * (unsigned)h->maxval);
}

static void store_sample(uint8_t *row, size_t i, unsigned value, const PnmHeader *h) {
    if (h->type == SAMPLE_U16) {
        const uint16_t v = (uint16_t)scale_sample(value, h, 65535);
        memcpy(row + 2 * i, &v, 2);
    } else {
        row[i] = (uint8_t)scale_sample(value, h, 255);
    }
}

// Binary rows [region.y, region.y + region.height), region's columns only.
static void read_binary_rows(const uint8_t *data, const PnmHeader *h, size_t row_bytes,
                             const PixelRect *region, uint8_t *out, size_t out_stride) {
    for (int y = 0; y < region->height; y++) {
        const uint8_t *src = data + h->data_offset + (size_t)(region->y + y) * row_bytes;
        uint8_t *dst = out + (size_t)y * out_stride;
        if (h->kind != 4 && h->maxval == 255) {  // the common case: a copy
            memcpy(dst, src + (size_t)region->x * h->depth, (size_t)region->width * h->depth);
            continue;
        }
        for (int x = 0; x < region->width; x++) {
            const int column = region->x + x;
            if (h->kind == 4) {  // bits, most significant first; 1 = black
                const int bit = (src[column / 8] >> (7 - column % 8)) & 1;
                dst[x] = bit ? 0 : 255;
                continue;
            }
            for (int k = 0; k < h->depth; k++) {
                const size_t i = (size_t)column * (size_t)h->depth + (size_t)k;
                const unsigned value =
                    h->type == SAMPLE_U16 ? (unsigned)src[2 * i] << 8 | src[2 * i + 1] : src[i];
                store_sample(dst, (size_t)x * (size_t)h->depth + (size_t)k, value, h);
            }
        }
    }
}

// ASCII samples up to the region's last row (every row when whole_file).
static int read_ascii_rows(const uint8_t *data, size_t size, const PnmHeader *h,
                           const PixelRect *region, int whole_file, uint8_t *out, size_t out_stride,
                           ErrorMessage *err) {
    Cursor c = {data, size, h->data_offset};
    const int last_row = whole_file ? h->height : region->y + region->height;
    for (int y = 0; y < last_row; y++) {
        const int keep = y >= region->y && y < region->y + region->height;
        uint8_t *dst = keep ? out + (size_t)(y - region->y) * out_stride : NULL;
        for (int x = 0; x < h->width; x++) {
            for (int k = 0; k < h->depth; k++) {
                long value;
                if (h->kind == 1) {  // digits may touch: one character each
                    skip_space_and_comments(&c);
                    value = c.at < c.size && (c.data[c.at] == '0' || c.data[c.at] == '1')
                                ? c.data[c.at++] - '0'
                                : -1;
                } else {
                    value = read_number(&c, 65535);
                }
                if (value < 0) {
                    if (c.at >= c.size) return error_set(err, "truncated: PNM data ends early");
                    return error_set(err, "corrupt data: PNM sample is not a number");
                }
                if (!keep || x < region->x || x >= region->x + region->width) continue;
                const size_t i = (size_t)(x - region->x) * (size_t)h->depth + (size_t)k;
                if (h->kind == 1)
                    dst[i] = value ? 0 : 255;
                else
                    store_sample(dst, i, (unsigned)value, h);
            }
        }
    }
    return 0;
}

int decode_pnm_decode(Decoder *decoder, const uint8_t *data, size_t size,
                      const DecodeRequest *request, DecodedImage *out, ErrorMessage *err) {
    PnmHeader h;
    PixelRect region;
    if (parse_header(data, size, &h, err) != 0 ||
        decode_check_samples(decoder, "PNM image", h.width, h.height, h.depth, h.sample_bytes,
                             err) != 0 ||
        decode_clamp_region(request, h.width, h.height, &region, err) != 0)
        return -1;
    const size_t out_stride = (size_t)region.width * (size_t)h.depth * h.sample_bytes;
    uint8_t *samples =
        decode_buffer_reserve(&decoder->samples, out_stride * (size_t)region.height, err);
    if (!samples) return -1;
    if (h.kind >= 4) {
        const size_t row_bytes = h.kind == 4 ? ((size_t)h.width + 7) / 8
                                             : (size_t)h.width * (size_t)h.depth * h.sample_bytes;
        // The whole image must be there, whichever rows are read.
        if (row_bytes * (size_t)h.height > size - h.data_offset)
            return error_set(err, "truncated: PNM data ends at %zu of %zu bytes", size,
                             h.data_offset + row_bytes * (size_t)h.height);
        read_binary_rows(data, &h, row_bytes, &region, samples, out_stride);
    } else if (read_ascii_rows(data, size, &h, &region, request && request->whole_file, samples,
                               out_stride, err) != 0) {
        return -1;
    }
    const SampleImage image = {samples,    region.width, region.height, h.depth,
                               out_stride, h.type,       h.colour,      16};
    return decode_finish(decoder, &image, region, out, err);
}
