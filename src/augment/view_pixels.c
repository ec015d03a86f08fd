// The pixels a view set carries (augment.h): channel counts and
// ChannelDrop's weights on every view, 8-bit or float pixels, the
// normalisation into the model, and the text forms of --normalize
// ("MEAN,...:STD,...") and --channel-drop ("KEEP:WEIGHT,...").
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/augment.h"
#include "util/number.h"

void view_set_channels(ViewSet *set, int input_channels, int channels,
                       const float *drop_weights) {
    for (int v = 0; v < set->count; v++) {
        ViewTransform *view = &set->views[v];
        view->input_channels = input_channels;
        view->channels = channels;
        for (int c = 0; c < AUGMENT_MAX_CHANNELS; c++)
            view->drop_weights[c] = drop_weights && c < input_channels ? drop_weights[c] : 0.0f;
        if (input_channels != 3 || channels != 3)  // LightlyTrain: images of other than 3
            view->jitter_p = view->grey_p = view->solarize_p = 0.0f;
    }
}

void view_set_pixels(ViewSet *set, int channels, int float_pixels, int normalize_count,
                     const float *mean, const float *std) {
    view_set_channels(set, channels, channels, NULL);
    set->float_pixels = float_pixels;
    set->normalize_count = normalize_count;
    for (int c = 0; c < normalize_count && c < AUGMENT_MAX_CHANNELS; c++) {
        set->mean[c] = mean[c];
        set->std[c] = std[c];
    }
}

int view_set_channels_out(const ViewSet *set) { return view_channels(&set->views[0]); }

size_t view_set_pixel_bytes(const ViewSet *set) {
    return set->float_pixels ? (size_t)view_set_channels_out(set) * sizeof(float) : 3;
}

// ImageNet's statistics, as LightlyTrain's default Normalize (for other
// than 3 channels the command asks for --normalize; repeated here only so
// that a set without one still has numbers).
static const float imagenet_mean[3] = {0.485f, 0.456f, 0.406f};
static const float imagenet_std[3] = {0.229f, 0.224f, 0.225f};

void view_set_normalization(const ViewSet *set, float *mean, float *std) {
    const int channels = view_set_channels_out(set);
    for (int c = 0; c < channels; c++) {
        mean[c] = set->normalize_count ? set->mean[c] : imagenet_mean[c % 3];
        std[c] = set->normalize_count ? set->std[c] : imagenet_std[c % 3];
    }
}

void view_set_sample_range(const ViewSet *set, float *low, float *high) {
    float mean[AUGMENT_MAX_CHANNELS], std[AUGMENT_MAX_CHANNELS];
    view_set_normalization(set, mean, std);
    const int inputs = view_input_channels(&set->views[0]);
    const int outputs = view_set_channels_out(set);
    const int dropped = inputs - outputs;  // ChannelDrop's; 0 without it
    for (int c = 0; c < inputs; c++) {
        double lowest = -HUGE_VAL, highest = HUGE_VAL;
        const int first = c - dropped > 0 ? c - dropped : 0;
        const int last = c < outputs - 1 ? c : outputs - 1;
        for (int k = first; k <= last; k++) {
            lowest = fmax(lowest, mean[k] - VIEW_NORMALIZED_LIMIT * std[k]);
            highest = fmin(highest, mean[k] + VIEW_NORMALIZED_LIMIT * std[k]);
        }
        low[c] = (float)lowest;
        high[c] = (float)highest;
    }
}

int view_set_validate(const ViewSet *set, ErrorMessage *err) {
    if (set->count < 1 || set->count > AUGMENT_MAX_VIEWS)
        return error_set(err, "view count %d outside 1..%d", set->count, AUGMENT_MAX_VIEWS);
    const int input = view_input_channels(&set->views[0]), channels = view_set_channels_out(set);
    for (int v = 0; v < set->count; v++) {
        if (view_transform_validate(&set->views[v], err) != 0) return error_prefix(err, "view %d", v);
        if (view_input_channels(&set->views[v]) != input || view_channels(&set->views[v]) != channels)
            return error_set(err, "view %d: every view must read and carry the same channels", v);
        const ViewTransform *view = &set->views[v];
        if (view->coupling != VIEW_COUPLING_NONE &&
            (view->parent < 0 || view->parent >= v ||
             set->views[view->parent].coupling != VIEW_COUPLING_NONE))
            return error_set(err, "view %d follows view %d: a coupled view needs an earlier, "
                                  "uncoupled parent", v, view->parent);
    }
    // DINOv31's PaKA aligns the coupled views by their crops and horizontal
    // flips (ViewGeometry): a vertical flip or a rotation would mismatch its
    // cells (LightlyTrain refuses rotation with record_geometry alike).
    for (int v = 0; v < set->count; v++)
        if (set->views[v].vflip_p > 0.0f || set->views[v].rotate_p > 0.0f)
            for (int u = 0; u < set->count; u++)
                if (set->views[u].coupling != VIEW_COUPLING_NONE)
                    return error_set(err, "view %d: %s with coupled views (dinov31's PaKA "
                                          "aligns crops and horizontal flips only)", v,
                                     set->views[v].vflip_p > 0.0f ? "vflip_p" : "rotate_p");
    if (set->teacher_views < 0 || set->teacher_views >= set->global_count)
        return error_set(err, "%d teacher-only views of %d global ones: the student needs one",
                         set->teacher_views, set->global_count);
    if (!set->float_pixels && (input != 3 || channels != 3))
        return error_set(err, "8-bit views are RGB: %d channel(s) need the float path", channels);
    if (set->normalize_count && set->normalize_count != channels)
        return error_set(err, "normalisation of %d channel(s) for views of %d",
                         set->normalize_count, channels);
    for (int c = 0; c < set->normalize_count; c++)
        if (!(isfinite(set->mean[c]) && set->std[c] > 0.0f && isfinite(set->std[c])))
            return error_set(err, "normalisation channel %d: mean %g, std %g (std must be "
                                  "positive, both finite)", c, (double)set->mean[c],
                             (double)set->std[c]);
    return 0;
}

// "A,B,C" -> values; at most `most`. Returns the count or -1.
static int parse_list(const char *text, size_t length, float *values, int most) {
    int count = 0;
    while (length > 0) {
        const char *comma = memchr(text, ',', length);
        const size_t item = comma ? (size_t)(comma - text) : length;
        char buffer[64];
        double value;
        if (count == most || item == 0 || item >= sizeof buffer) return -1;
        memcpy(buffer, text, item);
        buffer[item] = '\0';
        if (number_parse_decimal(buffer, &value)) return -1;
        values[count++] = (float)value;
        if (!comma) return count;
        text = comma + 1;
        length -= item + 1;
        if (length == 0) return -1;  // a trailing comma
    }
    return count;
}

int channel_normalize_parse(const char *text, ChannelSettings *settings, ErrorMessage *err) {
    const char *colon = strchr(text, ':');
    const int means = colon ? parse_list(text, (size_t)(colon - text), settings->mean,
                                         AUGMENT_MAX_CHANNELS)
                            : -1;
    const int stds = colon ? parse_list(colon + 1, strlen(colon + 1), settings->std,
                                        AUGMENT_MAX_CHANNELS)
                           : -1;
    if (means < 1 || stds < 1)
        return error_set(err, "--normalize %s: expected MEAN1,MEAN2,...:STD1,STD2,... (one "
                              "decimal number per channel, at most %d)", text,
                         AUGMENT_MAX_CHANNELS);
    if (means != stds)
        return error_set(err, "--normalize %s: %d mean(s) but %d std(s)", text, means, stds);
    for (int c = 0; c < means; c++)
        if (!(settings->std[c] > 0.0f))
            return error_set(err, "--normalize %s: std %d is %g, must be positive", text, c + 1,
                             (double)settings->std[c]);
    settings->normalize_count = means;
    return 0;
}

// The shortest decimal that reads back as the same float ("0.2", not
// "0.200000003"); 9 significant digits always do.
static void format_float(float value, char *out, size_t size) {
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(out, size, "%.*g", digits, (double)value);
        if (strtof(out, NULL) == value) return;
    }
}

void channel_normalize_format(const ViewSet *set, char *out, size_t size) {
    float mean[AUGMENT_MAX_CHANNELS], std[AUGMENT_MAX_CHANNELS];
    view_set_normalization(set, mean, std);
    const int channels = view_set_channels_out(set);
    size_t used = 0;
    out[0] = '\0';
    for (int pass = 0; pass < 2; pass++)
        for (int c = 0; c < channels && used < size; c++) {
            char number[32];
            format_float((pass ? std : mean)[c], number, sizeof number);
            used += (size_t)snprintf(out + used, size - used, "%s%s",
                                     c ? "," : pass ? ":" : "", number);
        }
}

int channel_drop_parse(const char *text, ChannelSettings *settings, ErrorMessage *err) {
    const char *colon = strchr(text, ':');
    double keep = 0.0;
    char number[32];
    const size_t length = colon ? (size_t)(colon - text) : 0;
    int weights = -1;
    if (colon && length > 0 && length < sizeof number) {
        memcpy(number, text, length);
        number[length] = '\0';
        if (number_parse_decimal(number, &keep) == 0)
            weights = parse_list(colon + 1, strlen(colon + 1), settings->drop_weights,
                                 AUGMENT_MAX_CHANNELS);
    }
    if (weights < 1 || keep != floor(keep) || keep < 1)
        return error_set(err, "--channel-drop %s: expected KEEP:WEIGHT1,WEIGHT2,... (the "
                              "channels each view keeps, then one drop weight per image "
                              "channel)", text);
    settings->keep = (int)keep;
    settings->drop_count = weights;
    return 0;
}

// ChannelDrop's own settings first: the model's channel count, which
// --normalize must match, follows from them.
static int channel_drop_check(const ChannelSettings *s, int channels, ErrorMessage *err) {
    if (s->drop_count != channels)
        return error_set(err, "--channel-drop has %d weight(s), the images have %d channel(s) "
                              "(--num-channels)", s->drop_count, channels);
    if (s->keep >= channels)
        return error_set(err, "--channel-drop keeps %d of %d channel(s): it must keep fewer "
                              "than --num-channels", s->keep, channels);
    int zeros = 0;
    for (int c = 0; c < channels; c++) {
        if (!(s->drop_weights[c] >= 0.0f))
            return error_set(err, "--channel-drop: weight %d is %g, must be >= 0", c + 1,
                             (double)s->drop_weights[c]);
        zeros += s->drop_weights[c] == 0.0f;
    }
    if (zeros > s->keep)
        return error_set(err, "--channel-drop: %d channel(s) have weight 0 (never dropped) but "
                              "only %d are kept (LightlyTrain's rule: at most KEEP zeros)",
                         zeros, s->keep);
    return 0;
}

int channel_settings_check(const ChannelSettings *s, ErrorMessage *err) {
    const int channels = s->channels > 0 ? s->channels : 3;
    if (s->keep && channel_drop_check(s, channels, err)) return -1;
    if (s->normalize_count && s->normalize_count != channel_settings_model_channels(s))
        return error_set(err, "--normalize has %d mean(s) and std(s), the model takes %d "
                              "channel(s)", s->normalize_count, channel_settings_model_channels(s));
    if (!s->normalize_count && channel_settings_model_channels(s) != 3)
        return error_set(err, "the model takes %d channel(s): give their mean and std with "
                              "--normalize MEAN1,...:STD1,... (ImageNet's are for RGB)",
                         channel_settings_model_channels(s));
    return 0;
}

int channel_settings_model_channels(const ChannelSettings *s) {
    return s->keep ? s->keep : s->channels > 0 ? s->channels : 3;
}

void view_set_apply_channels(ViewSet *set, const ChannelSettings *s, int float_pixels) {
    const int channels = s->channels > 0 ? s->channels : 3;
    view_set_channels(set, channels, channel_settings_model_channels(s),
                      s->keep ? s->drop_weights : NULL);
    set->float_pixels = float_pixels;
    set->normalize_count = s->normalize_count;
    memcpy(set->mean, s->mean, sizeof set->mean);
    memcpy(set->std, s->std, sizeof set->std);
}
