// The views' parameters and the decode request of one image (see load_plan.h).
#include "data/load_plan.h"

#include <math.h>

#include "util/rng.h"

static PixelRect rect_union(PixelRect a, PixelRect b) {
    const int x0 = a.x < b.x ? a.x : b.x, y0 = a.y < b.y ? a.y : b.y;
    const int x1 = a.x + a.width > b.x + b.width ? a.x + a.width : b.x + b.width;
    const int y1 = a.y + a.height > b.y + b.height ? a.y + a.height : b.y + b.height;
    return (PixelRect){x0, y0, x1 - x0, y1 - y0};
}

int pixel_rect_contains(PixelRect outer, PixelRect inner) {
    return inner.x >= outer.x && inner.y >= outer.y &&
           (int64_t)inner.x + inner.width <= (int64_t)outer.x + outer.width &&
           (int64_t)inner.y + inner.height <= (int64_t)outer.y + outer.height;
}

void load_plan(const ViewSet *views, uint64_t seed, uint32_t epoch, uint64_t view_key,
               const ImageInfo *info, int whole_file, LoadPlan *plan) {
    PixelRect region = {0, 0, 0, 0};
    double scale_needed = 0.0;  // smallest scale that keeps every view's resolution
    for (int v = 0; v < views->count; v++) {
        Rng rng = rng_make(seed, epoch, view_key, RNG_STREAM_VIEW + (uint32_t)v);
        view_sample(&views->views[v], info->width, info->height, &rng, &plan->params[v]);
        if (views->views[v].coupling != VIEW_COUPLING_NONE)  // validated: an earlier parent
            view_couple(&views->views[v], &plan->params[views->views[v].parent], &rng,
                        &plan->params[v]);
        const PixelRect crop = plan->params[v].crop;
        region = v == 0 ? crop : rect_union(region, crop);
        const double size = views->views[v].size;
        const double scale_x = size / crop.width, scale_y = size / crop.height;
        // a resize_only view samples the full resolution as LightlyTrain's
        // embed does (its 2-tap bilinear resize reads no DCT-scaled pixels)
        const double scale = views->views[v].resize_only ? 1.0
                             : scale_x > scale_y          ? scale_x
                                                          : scale_y;
        if (scale > scale_needed) scale_needed = scale;
    }
    if (scale_needed > 1.0) scale_needed = 1.0;
    if (views->float_pixels && whole_file && info->channels > 0 && info->sample_type == SAMPLE_F32)
        region = (PixelRect){0, 0, info->width, info->height};
    plan->request = (DecodeRequest){
        .region = region,
        .min_width = (int)ceil(region.width * scale_needed - 1e-9),
        .min_height = (int)ceil(region.height * scale_needed - 1e-9),
        .whole_file = whole_file,
        .native = views->float_pixels,
    };
}
