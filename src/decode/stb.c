// BMP and TGA through stb_image (Debian's libstb): 1/4/8/16/24/32-bit BMP
// without RLE compression (stb_image has none; such files are skipped with
// its reason), TGA true-colour, grey and colour-mapped, raw and RLE. Decoded
// whole (stb_image has no region API) straight to 8-bit RGB by stb_image
// (grey repeated, alpha dropped), after the header's size passed the pixel
// limit.
//
// stb_image reads zeros past the end of the data instead of failing, so a
// cut-off file would decode with black rows: for BMP and uncompressed TGA
// the size the header implies is checked here first, for RLE TGA the size
// its packets need (walked, headers only, to the header's pixel count).
// Without that walk a 58-byte RLE TGA declaring 9000 x 9000 pixels decoded
// to 243 MB of black and trained.
#include "decode/decode_internal.h"

#include <stdlib.h>
#include <string.h>

#include <stb_image.h>

static int stb_size(size_t size) { return size <= INT32_MAX ? (int)size : INT32_MAX; }

static uint32_t le16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t le32(const uint8_t *p) { return le16(p) | le16(p + 2) << 16; }

static int is_one_of(uint32_t value, const uint8_t *allowed, size_t count) {
    for (size_t i = 0; i < count; i++)
        if (value == allowed[i]) return 1;
    return 0;
}

// TGA has no magic number: its header is checked field by field, as the
// TGA specification defines it (and stb_image's TGA reader accepts it):
// colour-map type 0 or 1; image type 1 or 9 (colour-mapped, raw or RLE)
// with a colour map, else 2, 3, 10 or 11 (true-colour or grey, raw or RLE);
// a colour-map entry of 8, 15, 16, 24 or 32 bits; sides from 1; 8 or 16
// bits a pixel (an index) with a colour map, else 8, 15, 16, 24 or 32.
//
// stbi_info_from_memory alone is no TGA test: it answers for every format
// stb_image reads, and stb_image then decodes the data as that format.
// "P55\r..." (tests/fixtures/fuzz_findings/pgm16_taken_for_tga.tga) is no
// PNM to us (no whitespace after "P5") but a 16-bit PGM to stb_image, whose
// reader converted its samples for 3 channels as 8-bit ones and read 833 kB
// past its buffer (SIGSEGV); "\xFF\xFF\xD8" reached its JPEG decoder,
// which asserts on damaged Huffman codes. No other format stb_image reads
// has 0 or 1 as its second byte (the colour-map type here), so a file that
// passes this test is read by stb_image's TGA reader and by no other.
static int tga_header_ok(const uint8_t *data, size_t size) {
    static const uint8_t entry_bits[] = {8, 15, 16, 24, 32}, colour_map_types[] = {1, 9},
                         plain_types[] = {2, 3, 10, 11};
    if (size < 18 || data[1] > 1) return 0;
    const int colour_map = data[1] == 1;
    if (colour_map ? !is_one_of(data[2], colour_map_types, sizeof colour_map_types) ||
                         !is_one_of(data[7], entry_bits, sizeof entry_bits)
                   : !is_one_of(data[2], plain_types, sizeof plain_types))
        return 0;
    if (le16(data + 12) == 0 || le16(data + 14) == 0) return 0;
    const uint8_t depth = data[16];
    return colour_map ? depth == 8 || depth == 16 : is_one_of(depth, entry_bits, sizeof entry_bits);
}

int decode_stb_is_tga(const uint8_t *data, size_t size) {
    int width, height, channels;
    return tga_header_ok(data, size) &&
           stbi_info_from_memory(data, stb_size(size), &width, &height, &channels) == 1;
}

static int report_stb_failure(const char *format, ErrorMessage *err) {
    const char *reason = stbi_failure_reason();
    if (!reason) reason = "unknown error";
    if (strcmp(reason, "outofmem") == 0) return error_set(err, "out of memory in stb_image");
    if (strcmp(reason, "BMP RLE") == 0 || strcmp(reason, "BMP JPEG/PNG") == 0 ||
        strcmp(reason, "unknown BMP") == 0)
        return error_set(err, "unsupported format: %s: stb_image: %s", format, reason);
    return error_set(err, "corrupt data: %s: stb_image: %s", format, reason);
}

static const char *format_name(const uint8_t *data) { return data[0] == 'B' ? "BMP" : "TGA"; }

// The pixel data of an RLE TGA (types 9 to 11) walked packet by packet
// from at: a header byte (count - 1 in the low 7 bits, the top bit set for
// one repeated pixel, clear for count literal pixels), then the pixel
// bytes. Returns the bytes all pixels need; where the data ends first, the
// bytes the next packet needs (> size).
static uint64_t rle_tga_end(const uint8_t *data, size_t size, uint64_t at, uint64_t pixels,
                            uint64_t pixel_bytes) {
    for (uint64_t found = 0; found < pixels;) {
        if (at >= size) return at + 1;  // the next packet's header is missing
        const uint8_t header = data[at++];
        const uint64_t count = (uint64_t)(header & 0x7f) + 1;
        at += header & 0x80 ? pixel_bytes : count * pixel_bytes;
        if (at > size) return at;
        found += count;
    }
    return at;
}

// Bytes a BMP or TGA of this header needs; 0 when unknown (compressed BMP,
// or a header stb_image will refuse anyway).
static uint64_t expected_size(const uint8_t *data, size_t size) {
    if (data[0] == 'B') {  // sniffed: size >= 26
        const uint32_t header = le32(data + 14), pixels_at = le32(data + 10);
        uint64_t width, height, bits;
        if (header == 12) {
            width = le16(data + 18);
            height = le16(data + 20);
            bits = le16(data + 24);
        } else {
            const uint32_t compression = size >= 34 ? le32(data + 30) : 1;
            if (compression != 0 && compression != 3) return 0;  // 3: bit fields, uncompressed
            const int32_t signed_height = (int32_t)le32(data + 22);
            width = le32(data + 18);
            height =
                signed_height < 0 ? (uint64_t) - (int64_t)signed_height : (uint64_t)signed_height;
            bits = le16(data + 28);
        }
        if (width > DECODE_MAX_SIDE || height > DECODE_MAX_SIDE || bits > 32) return 0;
        return pixels_at + (width * bits + 31) / 32 * 4 * height;
    }
    const uint32_t type = data[2], bits = data[16];
    const uint64_t map_bytes = data[1] ? le16(data + 5) * (uint64_t)((data[7] + 7) / 8) : 0;
    const uint64_t pixels_at = 18 + (uint64_t)data[0] + map_bytes;
    const uint64_t pixels = le16(data + 12) * (uint64_t)le16(data + 14);
    if (type >= 1 && type <= 3) return pixels_at + pixels * ((bits + 7) / 8);
    if (type >= 9 && type <= 11) return rle_tga_end(data, size, pixels_at, pixels, (bits + 7) / 8);
    return 0;
}

int decode_stb_probe(Decoder *decoder, const uint8_t *data, size_t size, ImageInfo *info,
                     ErrorMessage *err) {
    (void)decoder;
    int width, height, channels;
    if (!stbi_info_from_memory(data, stb_size(size), &width, &height, &channels))
        return report_stb_failure(format_name(data), err);
    info->width = width;
    info->height = height;
    return 0;
}

int decode_stb_decode(Decoder *decoder, const uint8_t *data, size_t size,
                      const DecodeRequest *request, DecodedImage *out, ErrorMessage *err) {
    const char *format = format_name(data);
    int width, height, channels;
    PixelRect region;
    if (!stbi_info_from_memory(data, stb_size(size), &width, &height, &channels))
        return report_stb_failure(format, err);
    if (decode_check_size(decoder, format, width, height, err) != 0 ||
        decode_clamp_region(request, width, height, &region, err) != 0)
        return -1;
    const uint64_t needed = expected_size(data, size);
    if (needed > size)
        return error_set(err, "truncated: %s data ends at %zu of %llu bytes", format, size,
                         (unsigned long long)needed);
    // The channels stb_image reads the file with: grey (1), grey + alpha (2),
    // RGB (3) or RGBA (4).
    int got_width, got_height, stored;
    uint8_t *samples =
        stbi_load_from_memory(data, stb_size(size), &got_width, &got_height, &stored, 0);
    if (!samples) return report_stb_failure(format, err);
    int status;
    if (got_width != width || got_height != height || stored < 1 || stored > 4) {
        status = error_set(err, "corrupt data: %s header says %d x %d, stb_image decoded %d x %d",
                           format, width, height, got_width, got_height);
    } else {
        const size_t row = (size_t)width * (size_t)stored;
        const SampleImage image = {samples + (size_t)region.y * row + (size_t)region.x * stored,
                                   region.width,
                                   region.height,
                                   stored,
                                   row,
                                   SAMPLE_U8,
                                   stored <= 2 ? COLOUR_GREY : COLOUR_RGB,
                                   8};
        status = decode_finish(decoder, &image, region, out, err);
    }
    stbi_image_free(samples);
    return status;
}
