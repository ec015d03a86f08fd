// Rendering one decoded image's views (see image_renderer.h).
#include "data/image_renderer.h"

#include <stdlib.h>
#include <string.h>

#define RENDER_RANGE_PIXELS 16

struct ImageRenderer {
    ViewSet views;
    AugmentScratch *scratch;
    float *samples;  // the float path's image (samples_to_float)
    size_t samples_capacity;  // floats
    // The float path: per image channel, the samples whose normalised value
    // the device can hold (view_set_sample_range), repeated for
    // RENDER_RANGE_PIXELS pixels so that check_sample_range runs over flat,
    // fixed-length blocks that the compiler vectorises.
    float range_low[AUGMENT_MAX_CHANNELS * RENDER_RANGE_PIXELS];
    float range_high[AUGMENT_MAX_CHANNELS * RENDER_RANGE_PIXELS];
};

static void sample_ranges(const ViewSet *views, float *low, float *high) {
    const int channels = view_input_channels(&views->views[0]);
    view_set_sample_range(views, low, high);
    for (int i = channels; i < channels * RENDER_RANGE_PIXELS; i++) {
        low[i] = low[i % channels];
        high[i] = high[i % channels];
    }
}

ImageRenderer *image_renderer_create(const ViewSet *views) {
    ImageRenderer *renderer = calloc(1, sizeof *renderer);
    if (!renderer) return NULL;
    renderer->views = *views;
    renderer->scratch = augment_scratch_create();
    if (!renderer->scratch) {
        free(renderer);
        return NULL;
    }
    sample_ranges(views, renderer->range_low, renderer->range_high);
    return renderer;
}

void image_renderer_destroy(ImageRenderer *renderer) {
    if (!renderer) return;
    augment_scratch_destroy(renderer->scratch);
    free(renderer->samples);
    free(renderer);
}

int image_renderer_check_unit_range(const ViewSet *views, ErrorMessage *err) {
    float low[AUGMENT_MAX_CHANNELS * RENDER_RANGE_PIXELS], high[AUGMENT_MAX_CHANNELS * RENDER_RANGE_PIXELS];
    sample_ranges(views, low, high);
    for (int c = 0; c < view_input_channels(&views->views[0]); c++)
        if (low[c] > 0.0f || high[c] < 1.0f)
            return error_set(err,
                             "--normalize: samples of 8- and 16-bit images lie in [0, 1], but "
                             "channel %d keeps (x - mean) / std within the %g that 16-bit "
                             "activations hold only for [%g, %g]; give --normalize MEAN:STD "
                             "matching the data",
                             c + 1, VIEW_NORMALIZED_LIMIT, (double)low[c], (double)high[c]);
    return 0;
}

// Every sample inside its channel's range, or -1 naming the first one
// outside: a no-data fill such as -3.4e38 would become infinite on the
// device and stop the run with a NaN loss. One OR over the image without a
// branch (0.1 ms for 384 x 512 samples, about a tenth of the branching
// loop); the sample is searched for only when one is out.
static int check_sample_range(const ImageRenderer *renderer, const float *samples, size_t pixels,
                              int channels, ErrorMessage *err) {
    const float *low = renderer->range_low, *high = renderer->range_high;
    const size_t total = pixels * (size_t)channels, block = (size_t)channels * RENDER_RANGE_PIXELS;
    int outside = 0;
    size_t start = 0;
    for (; start + block <= total; start += block)
        for (size_t j = 0; j < block; j++)
            outside |= (samples[start + j] < low[j]) | (samples[start + j] > high[j]);
    for (size_t j = 0; start + j < total; j++)
        outside |= (samples[start + j] < low[j]) | (samples[start + j] > high[j]);
    if (!outside) return 0;
    for (size_t i = 0; i < total; i++) {
        const int c = (int)(i % (size_t)channels);
        if (samples[i] >= low[c] && samples[i] <= high[c]) continue;
        return error_set(err,
                         "out of range: sample %g of channel %d is outside [%g, %g], where "
                         "(x - mean) / std stays within the %g that 16-bit activations "
                         "hold (a no-data fill value?); give --normalize MEAN:STD matching "
                         "the data",
                         (double)samples[i], c + 1, (double)low[c], (double)high[c],
                         VIEW_NORMALIZED_LIMIT);
    }
    return 0;
}

// The float path: native samples -> floats of the views' input channels
// (samples_to_float: an image whose channels cannot become them fails with
// both counts, and is skipped like any bad file) -> float views.
static int render_float(ImageRenderer *renderer, const ViewParams *params,
                        const DecodedImage *decoded, int check_range, uint8_t *const *out,
                        ErrorMessage *err) {
    const ViewSet *views = &renderer->views;
    const SampleImage *in = &decoded->samples;
    const int channels = view_input_channels(&views->views[0]);
    const size_t need = (size_t)in->width * (size_t)in->height * (size_t)channels;
    if (need > renderer->samples_capacity) {
        float *bigger = realloc(renderer->samples, need * sizeof *bigger);
        if (!bigger) return error_set(err, "out of memory for a %dx%d image", in->width, in->height);
        renderer->samples = bigger;
        renderer->samples_capacity = need;
    }
    const size_t stride = (size_t)in->width * (size_t)channels;
    if (samples_to_float(in, channels, renderer->samples, stride, err) != 0) return -1;
    if (check_range && check_sample_range(renderer, renderer->samples,
                                          (size_t)in->width * in->height, channels, err) != 0)
        return -1;
    const FloatImage source = {renderer->samples, in->width, in->height, channels, stride};
    for (int v = 0; v < views->count; v++)
        if (view_render_float(&views->views[v], &params[v], &source, decoded->covered,
                              (float *)out[v], renderer->scratch, err) != 0)
            return -1;
    return 0;
}

int image_renderer_render(ImageRenderer *renderer, const ViewParams *params,
                          const DecodedImage *decoded, int check_range, uint8_t *const *out,
                          ErrorMessage *err) {
    const ViewSet *views = &renderer->views;
    if (views->float_pixels) return render_float(renderer, params, decoded, check_range, out, err);
    for (int v = 0; v < views->count; v++)
        if (view_render(&views->views[v], &params[v], &decoded->image, decoded->covered, out[v],
                        renderer->scratch, err) != 0)
            return -1;
    return 0;
}
