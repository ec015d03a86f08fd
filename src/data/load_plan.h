// What one image of a batch needs decoded: the random parameters of its
// views for an image of its size, and the region (the union of their crops)
// at the smallest resolution that keeps every view's. The decoder process
// plans to decode just that (data/decoder_process.h); the worker plans again
// from the size the process reports, to render the views and to check that
// the decoded pixels cover the crops: the same inputs give the same plan.
#ifndef LTC_DATA_LOAD_PLAN_H
#define LTC_DATA_LOAD_PLAN_H

#include <stdint.h>

#include "augment/augment.h"
#include "decode/decode.h"

typedef struct LoadPlan {
    ViewParams params[AUGMENT_MAX_VIEWS];
    DecodeRequest request;
} LoadPlan;

// view_key keys the view randomness with (seed, epoch); whole_file: the
// run's first read of the file (DecodeRequest.whole_file; a float image's
// first read then converts all of it, so that its range check does not
// depend on the crops drawn).
void load_plan(const ViewSet *views, uint64_t seed, uint32_t epoch, uint64_t view_key,
               const ImageInfo *info, int whole_file, LoadPlan *plan);

// 1 when `outer` contains `inner`.
int pixel_rect_contains(PixelRect outer, PixelRect inner);

#endif
