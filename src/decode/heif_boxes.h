// Private to the HEIF checks (heif_check.c, heif_canvas.c): reading ISO base
// media file boxes (ISO/IEC 14496-12) before libheif sees a file.
#ifndef LTC_DECODE_HEIF_BOXES_H
#define LTC_DECODE_HEIF_BOXES_H

#include "decode/decode_internal.h"

typedef struct HeifBox {
    const uint8_t *body;  // after the header
    uint64_t size;        // of the body
    char type[5];
} HeifBox;

static inline uint32_t heif_be16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }
static inline uint32_t heif_be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

// The box at data[*at] inside data[0, end) (size; 64-bit size when size is
// 1; to the end when 0; 16 more header bytes for 'uuid'); advances *at past
// it. 0, or -1 where no whole box fits.
int heif_next_box(const uint8_t *data, uint64_t end, uint64_t *at, HeifBox *box);

// heif_canvas.c: the canvases of the grid and overlay items of one 'meta'
// box against the pixel limit; file: the whole file (item data may lie in
// it). 0, or -1 with the reason.
int heif_check_canvases(const HeifBox *meta, const uint8_t *file, uint64_t file_size,
                        uint64_t max_pixels, ErrorMessage *err);

#endif
