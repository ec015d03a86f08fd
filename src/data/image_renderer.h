// The views of one decoded image, rendered into their places in a batch:
// 8-bit RGB (view_render) or, on the float path, the native samples as
// floats (samples_to_float), their range checked, then view_render_float.
// Each decoder process renders with one (data/decoder_process.h), right
// after decoding, so that the decoded pixels are read where they were
// written.
#ifndef LTC_DATA_IMAGE_RENDERER_H
#define LTC_DATA_IMAGE_RENDERER_H

#include <stdint.h>

#include "augment/augment.h"
#include "decode/decode.h"
#include "util/error.h"

typedef struct ImageRenderer ImageRenderer;

// For the views of `views` (copied); NULL when out of memory.
ImageRenderer *image_renderer_create(const ViewSet *views);
void image_renderer_destroy(ImageRenderer *renderer);

// 8- and 16-bit samples become [0, 1]: a normalisation that takes them past
// what the device holds (a std below about 1/65504) is refused at start-up
// (the float path's), so that only float samples need checking image by
// image. 0, or -1 naming the channel.
int image_renderer_check_unit_range(const ViewSet *views, ErrorMessage *err);

// Renders view v of `decoded` with params[v] into out[v]: (size, size,
// channels) samples of view_set_pixel_bytes each, rows packed. check_range:
// float samples on a file's whole first read are checked to lie where the
// normalised values stay finite on the device (out of range: -1 naming the
// sample).
int image_renderer_render(ImageRenderer *renderer, const ViewParams *params,
                          const DecodedImage *decoded, int check_range, uint8_t *const *out,
                          ErrorMessage *err);

#endif
