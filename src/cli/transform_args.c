// LightlyTrain's transform_args as train's options (see transform_args.h).
#include "cli/transform_args.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util/number.h"

#define MAX_NUMBERS 64  // a list's numbers: mean / std / weight_drop per channel

typedef enum ValueKind { VALUE_NULL, VALUE_BOOL, VALUE_NUMBER, VALUE_LIST, VALUE_TEXT } ValueKind;

// One value as LightlyTrain's command line (OmegaConf) reads it.
typedef struct Value {
    ValueKind kind;
    double number;  // NUMBER, BOOL (0 or 1)
    double list[MAX_NUMBERS];
    int list_count;  // LIST: numbers only
    const char *text;  // as given
} Value;

// The entries and what the translation emits.
typedef struct Translation {
    const char *const *entries;
    int count;
    int multi_crop, dinov31;
    TransformArgsEmit emit;
    void *context;
    ErrorMessage *err;
} Translation;

static int parse_value(const char *text, Value *value) {
    memset(value, 0, sizeof *value);
    value->text = text;
    if (!strcmp(text, "null") || !strcmp(text, "None") || !strcmp(text, "~") || !*text)
        return value->kind = VALUE_NULL, 0;
    if (number_parse_decimal(text, &value->number) == 0) return value->kind = VALUE_NUMBER, 0;
    int flag;
    if (number_parse_bool(text, &flag) == 0) {
        value->number = flag;
        return value->kind = VALUE_BOOL, 0;
    }
    const size_t length = strlen(text);
    const char close = text[0] == '[' ? ']' : text[0] == '(' ? ')' : 0;
    if (!close || text[length - 1] != close) return value->kind = VALUE_TEXT, 0;
    value->kind = VALUE_LIST;
    char item[64];
    for (const char *start = text + 1; start < text + length - 1;) {
        const char *end = start + strcspn(start, ",)]");
        const size_t n = (size_t)(end - start);
        if (n >= sizeof item || value->list_count == MAX_NUMBERS) return -1;
        memcpy(item, start, n);
        item[n] = '\0';
        char *first = item + strspn(item, " ");
        for (char *last = first + strlen(first); last > first && last[-1] == ' ';) *--last = '\0';
        if (!*first && *end != ',') break;  // "[]", "[1, 2, ]"
        if (number_parse_decimal(first, &value->list[value->list_count++]) != 0) return -1;
        start = end + 1;
    }
    return 0;
}

// The value at exactly path ("color_jitter.prob"); 0 when there is none,
// 1 when found, -1 (err set) when it is malformed.
static int find(const Translation *t, const char *path, Value *value) {
    const size_t length = strlen(path);
    int found = 0;
    for (int i = 0; i < t->count; i++)  // the last one given
        if (strncmp(t->entries[i], path, length) == 0 && t->entries[i][length] == '=') {
            if (parse_value(t->entries[i] + length + 1, value))
                return error_set(t->err, "transform_args.%s: expected numbers, [a, b]",
                                 t->entries[i]);
            found = 1;
        }
    return found;
}

// 1 when a key under path ("path.x") is given.
static int has_children(const Translation *t, const char *path) {
    const size_t length = strlen(path);
    for (int i = 0; i < t->count; i++)
        if (strncmp(t->entries[i], path, length) == 0 && t->entries[i][length] == '.') return 1;
    return 0;
}

// Every key under path is one of allowed (NULL-terminated): the direct
// ones, or under one of them (nested).
static int check_keys(const Translation *t, const char *path, const char *const *allowed) {
    const size_t length = strlen(path);
    for (int i = 0; i < t->count; i++) {
        const char *entry = t->entries[i];
        if (strncmp(entry, path, length) != 0 || entry[length] != '.') continue;
        const char *key = entry + length + 1;
        const size_t key_length = strcspn(key, ".=");
        int known = 0;
        for (int a = 0; allowed[a]; a++)
            known |= strlen(allowed[a]) == key_length && !strncmp(allowed[a], key, key_length);
        if (!known) {
            char accepted[256] = "";
            for (int a = 0; allowed[a]; a++)
                snprintf(accepted + strlen(accepted), sizeof accepted - strlen(accepted), "%s%s",
                         a ? ", " : "", allowed[a]);
            return error_set(t->err, "transform_args.%s: lightly-train-c has no %.*s (accepted: "
                                     "%s)", path, (int)key_length, key, accepted);
        }
    }
    return 0;
}

static int emit(const Translation *t, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
static int emit(const Translation *t, const char *format, ...) {
    char argument[512];
    va_list args;
    va_start(args, format);
    vsnprintf(argument, sizeof argument, format, args);
    va_end(args);
    return t->emit(t->context, argument, t->err);
}

// The shortest text that reads back as value ("0.2", not 0.20000000000000001).
static const char *number_text(double value, char *out, size_t size) {
    for (int digits = 6; digits <= 17; digits++) {  // %g's six first: 20, not 2e+01
        snprintf(out, size, "%.*g", digits, value);
        double back;
        if (number_parse_decimal(out, &back) == 0 && back == value) break;
    }
    return out;
}

// 1 when value is a whole number from 1 to INT_MAX, into *out (a cast of a
// double out of int's range is undefined: tested before it).
static int positive_int(double value, int *out) {
    if (!(value >= 1 && value <= INT_MAX) || value != (double)(int)value) return 0;
    *out = (int)value;
    return 1;
}

// "transform=SCOPEKEY=V" for the number at path, when given.
static int set_number(const Translation *t, const char *path, const char *scope,
                      const char *key) {
    Value value;
    const int found = find(t, path, &value);
    if (found <= 0) return found;
    if (value.kind != VALUE_NUMBER && value.kind != VALUE_BOOL)
        return error_set(t->err, "transform_args.%s=%s: expected a number", path, value.text);
    char text[32];
    return emit(t, "transform=%s%s=%s", scope, key, number_text(value.number, text, sizeof text));
}

// A square size: n or [n, n].
static int square(const Translation *t, const char *path, const Value *value, int *size) {
    const int pair = value->kind == VALUE_LIST && value->list_count == 2 &&
                     value->list[0] == value->list[1];
    const double n = value->kind == VALUE_NUMBER ? value->number : pair ? value->list[0] : -1;
    if (!positive_int(n, size))
        return error_set(t->err, "transform_args.%s=%s: lightly-train-c takes square images, n "
                                 "or [n, n]", path, value->text);
    return 0;
}

// 1 when path is given as null (LightlyTrain's None: the transform off).
static int given_null(const Translation *t, const char *path) {
    Value value;
    return find(t, path, &value) == 1 && value.kind == VALUE_NULL;
}

static int random_resize(const Translation *t, const char *path, const char *scope) {
    static const char *const keys[] = {"min_scale", "max_scale", NULL};
    char key[128];
    if (given_null(t, path))
        return error_set(t->err, "transform_args.%s=null: lightly-train-c always crops", path);
    if (check_keys(t, path, keys)) return -1;
    snprintf(key, sizeof key, "%s.min_scale", path);
    if (set_number(t, key, scope, "scale_min") < 0) return -1;
    snprintf(key, sizeof key, "%s.max_scale", path);
    return set_number(t, key, scope, "scale_max") < 0 ? -1 : 0;
}

static int gaussian_blur(const Translation *t, const char *path, const char *scope) {
    static const char *const keys[] = {"prob", "sigmas", "blur_limit", NULL};
    char key[128];
    Value value;
    if (given_null(t, path)) return emit(t, "transform=%sblur_p=0", scope);
    if (check_keys(t, path, keys)) return -1;
    snprintf(key, sizeof key, "%s.blur_limit", path);
    int found = find(t, key, &value);
    if (found < 0) return -1;
    if (found && !(value.kind == VALUE_NUMBER && value.number == 0) &&
        !(value.kind == VALUE_LIST && value.list_count == 2 && !value.list[0] && !value.list[1]))
        return error_set(t->err, "transform_args.%s=%s: lightly-train-c sizes the kernel from "
                                 "sigma (blur_limit 0)", key, value.text);
    snprintf(key, sizeof key, "%s.prob", path);
    if (set_number(t, key, scope, "blur_p") < 0) return -1;
    snprintf(key, sizeof key, "%s.sigmas", path);
    if ((found = find(t, key, &value)) <= 0) return found;
    if (value.kind != VALUE_LIST || value.list_count != 2)
        return error_set(t->err, "transform_args.%s=%s: expected [min, max], two numbers", key,
                         value.text);
    char low[32], high[32];
    return emit(t, "transform=%sblur_sigma_min=%s", scope,
                number_text(value.list[0], low, sizeof low)) ||
                   emit(t, "transform=%sblur_sigma_max=%s", scope,
                        number_text(value.list[1], high, sizeof high))
               ? -1
               : 0;
}

static int solarize(const Translation *t, const char *path, const char *scope) {
    static const char *const keys[] = {"prob", "threshold", NULL};
    char key[128];
    if (given_null(t, path)) return emit(t, "transform=%ssolarize_p=0", scope);
    if (check_keys(t, path, keys)) return -1;
    snprintf(key, sizeof key, "%s.prob", path);
    if (set_number(t, key, scope, "solarize_p") < 0) return -1;
    snprintf(key, sizeof key, "%s.threshold", path);
    return set_number(t, key, scope, "solarize_threshold") < 0 ? -1 : 0;
}

// LightlyTrain's jitter is each factor times strength: both or neither.
static int color_jitter(const Translation *t) {
    static const char *const keys[] = {"prob",     "strength",   "brightness", "contrast",
                                       "saturation", "hue",      NULL};
    if (given_null(t, "color_jitter")) return emit(t, "transform=jitter_p=0");
    if (check_keys(t, "color_jitter", keys) || set_number(t, "color_jitter.prob", "", "jitter_p") < 0)
        return -1;
    Value strength, factor;
    const int has_strength = find(t, "color_jitter.strength", &strength);
    if (has_strength < 0) return -1;
    int given = 0;
    for (int k = 2; keys[k]; k++) {
        char key[64];
        snprintf(key, sizeof key, "color_jitter.%s", keys[k]);
        const int found = find(t, key, &factor);
        if (found < 0) return -1;
        given += found;
    }
    if (given && !has_strength)
        return error_set(t->err, "transform_args.color_jitter: give strength with the factors "
                                 "(the jitter is strength x factor)");
    if (has_strength && given < 4)
        return error_set(t->err, "transform_args.color_jitter: with strength, give all of "
                                 "brightness, contrast, saturation, hue (each is scaled by it)");
    for (int k = 2; keys[k] && has_strength; k++) {
        char key[64];
        snprintf(key, sizeof key, "color_jitter.%s", keys[k]);
        find(t, key, &factor);
        if (factor.kind != VALUE_NUMBER || strength.kind != VALUE_NUMBER)
            return error_set(t->err, "transform_args.color_jitter: expected numbers");
        char text[32];
        if (emit(t, "transform=%s=%s", keys[k],
                 number_text(strength.number * factor.number, text, sizeof text)))
            return -1;
    }
    return 0;
}

static int random_rotation(const Translation *t) {
    static const char *const keys[] = {"prob", "degrees", "interpolation", NULL};
    if (given_null(t, "random_rotation")) return emit(t, "transform=rotate_p=0");
    if (check_keys(t, "random_rotation", keys)) return -1;
    Value value;
    int found = find(t, "random_rotation.interpolation", &value);
    if (found < 0) return -1;
    if (found && !(value.kind == VALUE_NUMBER && (value.number == 1 || value.number == 3)))
        return error_set(t->err, "transform_args.random_rotation.interpolation=%s: "
                                 "lightly-train-c rotates bilinearly, as warpAffine takes "
                                 "cv2.INTER_AREA (3, LightlyTrain's) and INTER_LINEAR (1)",
                         value.text);
    double low, high;
    if ((found = find(t, "random_rotation.degrees", &value)) < 0) return -1;
    if (found && value.kind == VALUE_NUMBER) {
        high = value.number < 0 ? -value.number : value.number, low = -high;
    } else if (found && value.kind == VALUE_LIST && value.list_count == 2) {
        low = value.list[0], high = value.list[1];
    } else {
        return error_set(t->err, "transform_args.random_rotation.degrees: expected a number or "
                                 "[low, high]%s%s", found ? ", got " : "", found ? value.text : "");
    }
    double prob = 0;
    if ((found = find(t, "random_rotation.prob", &value)) < 0) return -1;
    if (found) prob = value.number;
    char texts[3][32];
    return emit(t, "transform=rotate_p=%s", number_text(prob, texts[0], 32)) ||
                   emit(t, "transform=rotate_min=%s", number_text(low, texts[1], 32)) ||
                   emit(t, "transform=rotate_max=%s", number_text(high, texts[2], 32))
               ? -1
               : 0;
}

static int local_view(const Translation *t) {
    static const char *const keys[] = {"num_views", "view_size", "random_resize",
                                       "gaussian_blur", NULL};
    if (check_keys(t, "local_view", keys)) return -1;
    Value value;
    int found = find(t, "local_view.num_views", &value);
    if (found < 0) return -1;
    if (found && emit(t, "local-views=%s", value.text)) return -1;
    if ((found = find(t, "local_view.view_size", &value)) < 0) return -1;
    int size;
    if (found && (square(t, "local_view.view_size", &value, &size) ||
                  emit(t, "local-image-size=%d", size)))
        return -1;
    if ((has_children(t, "local_view.random_resize") ||
         given_null(t, "local_view.random_resize")) &&
        random_resize(t, "local_view.random_resize", "local."))
        return -1;
    if (has_children(t, "local_view.gaussian_blur") ||
        given_null(t, "local_view.gaussian_blur"))
        return gaussian_blur(t, "local_view.gaussian_blur", "local.");
    return 0;
}

// DINOv31TransformArgs: the PaKA views' count (the method arg of the same
// name), the geometry they need, and a containment bound that boxes drawn
// inside their parent always meet.
static int dinov31_key(const Translation *t, const char *key, const Value *value) {
    if (!strcmp(key, "paka_num_local")) {
        int count;
        if (value->kind != VALUE_NUMBER || !positive_int(value->number, &count))
            return error_set(t->err, "transform_args.paka_num_local=%s: expected an integer "
                                     ">= 1", value->text);
        return emit(t, "method-arg=paka_num_local=%d", count);
    }
    if (!strcmp(key, "record_geometry") && !(value->kind == VALUE_BOOL && value->number))
        return error_set(t->err, "transform_args.record_geometry: dinov31 needs the views' "
                                 "geometry, lightly-train-c always records it");
    if (!strcmp(key, "paka_high_overlap_iou") &&
        !(value->kind == VALUE_NUMBER && value->number > 0 && value->number <= 1))
        return error_set(t->err, "transform_args.paka_high_overlap_iou=%s: expected a number in "
                                 "(0, 1] (PaKA locals lie inside their parent: containment 1)",
                         value->text);
    return 0;
}

// A list of numbers at path ("normalize.mean"), or *count 0 when not given.
static int numbers_at(const Translation *t, const char *path, double *out, int *count) {
    Value value;
    const int found = find(t, path, &value);
    *count = 0;
    if (found <= 0) return found;
    if (value.kind != VALUE_LIST || value.list_count == 0)
        return error_set(t->err, "transform_args.%s=%s: expected a list of one or more numbers",
                         path, value.text);
    memcpy(out, value.list, (size_t)value.list_count * sizeof *out);
    *count = value.list_count;
    return 0;
}

// The numbers joined by ','.
static void join(const double *values, int count, char *out, size_t size) {
    out[0] = '\0';
    for (int i = 0; i < count; i++) {
        char text[32];
        snprintf(out + strlen(out), size - strlen(out), "%s%s", i ? "," : "",
                 number_text(values[i], text, sizeof text));
    }
}

// num_channels, channel_drop and normalize, as LightlyTrain's
// MethodTransformArgs resolves them: the model takes num_channels_keep
// channels with channel_drop, else num_channels, else ("auto") the length
// of normalize's mean, else 3; mean and std are repeated to that count.
static int channels(const Translation *t) {
    static const double imagenet_mean[] = {0.485, 0.456, 0.406}, imagenet_std[] = {0.229, 0.224,
                                                                                   0.225};
    static const char *const normalize_keys[] = {"mean", "std", NULL};
    static const char *const drop_keys[] = {"num_channels_keep", "weight_drop", NULL};
    double mean[MAX_NUMBERS], std[MAX_NUMBERS], weights[MAX_NUMBERS];
    int mean_count, std_count, weight_count, model_channels = -1;
    Value value;
    int found = find(t, "num_channels", &value);
    if (found < 0) return -1;
    if (found && strcmp(value.text, "auto") != 0) {
        if (value.kind != VALUE_NUMBER || !positive_int(value.number, &model_channels))
            return error_set(t->err, "transform_args.num_channels=%s: expected an integer >= 1 "
                                     "or auto", value.text);
    }
    if (check_keys(t, "normalize", normalize_keys) || check_keys(t, "channel_drop", drop_keys) ||
        numbers_at(t, "normalize.mean", mean, &mean_count) ||
        numbers_at(t, "normalize.std", std, &std_count))
        return -1;
    if (!mean_count) memcpy(mean, imagenet_mean, sizeof imagenet_mean), mean_count = 3;
    if (!std_count) memcpy(std, imagenet_std, sizeof imagenet_std), std_count = 3;
    if (has_children(t, "channel_drop")) {
        if ((found = find(t, "channel_drop.num_channels_keep", &value)) < 0) return -1;
        int keep;
        if (!found || value.kind != VALUE_NUMBER || !positive_int(value.number, &keep))
            return error_set(t->err, "transform_args.channel_drop.num_channels_keep=%s: expected "
                                     "an integer >= 1", found ? value.text : "(none)");
        if (numbers_at(t, "channel_drop.weight_drop", weights, &weight_count)) return -1;
        if (!weight_count)
            return error_set(t->err, "transform_args.channel_drop: expected weight_drop, a list "
                                     "of one or more numbers");
        if (model_channels > 0 && model_channels != keep)
            return error_set(t->err, "transform_args.num_channels=%d: with channel_drop the "
                                     "model takes num_channels_keep=%d channels",
                             model_channels, keep);
        char listed[MAX_NUMBERS * 26];
        join(weights, weight_count, listed, sizeof listed);
        if (emit(t, "num-channels=%d", weight_count) ||  // the images' channels
            emit(t, "channel-drop=%d:%s", keep, listed))
            return -1;
        model_channels = keep;
    } else {
        if (model_channels < 0) model_channels = mean_count;
        if (model_channels != 3 && emit(t, "num-channels=%d", model_channels)) return -1;
    }
    if (model_channels > MAX_NUMBERS)
        return error_set(t->err, "transform_args: more than %d channels", MAX_NUMBERS);
    double model_mean[MAX_NUMBERS], model_std[MAX_NUMBERS];
    int imagenet = model_channels == 3;
    for (int c = 0; c < model_channels; c++) {
        model_mean[c] = mean[c % mean_count], model_std[c] = std[c % std_count];
        imagenet &= model_mean[c] == imagenet_mean[c % 3] && model_std[c] == imagenet_std[c % 3];
    }
    if (imagenet) return 0;
    char means[MAX_NUMBERS * 26], stds[MAX_NUMBERS * 26];
    join(model_mean, model_channels, means, sizeof means);
    join(model_std, model_channels, stds, sizeof stds);
    return emit(t, "normalize=%s:%s", means, stds);
}

// One top-level key (all its entries).
static int translate_key(const Translation *t, const char *key) {
    const char *first_global = t->multi_crop ? "view0." : "global.";
    Value value;
    const int found = find(t, key, &value);
    if (found < 0) return -1;
    if (!strcmp(key, "image_size")) {
        int size;
        return found && (square(t, key, &value, &size) || emit(t, "image-size=%d", size)) ? -1 : 0;
    }
    if (!strcmp(key, "random_resize")) return random_resize(t, key, "global.");
    if (!strcmp(key, "random_flip")) {
        static const char *const keys[] = {"horizontal_prob", "vertical_prob", NULL};
        Value vertical;
        const int has_vertical = find(t, "random_flip.vertical_prob", &vertical);
        if (check_keys(t, key, keys) || has_vertical < 0 ||
            set_number(t, "random_flip.horizontal_prob", "", "flip_p") < 0)
            return -1;
        return has_vertical && vertical.number ? set_number(t, "random_flip.vertical_prob", "",
                                                            "vflip_p") < 0 ? -1 : 0
                                               : 0;
    }
    if (!strcmp(key, "random_rotation")) return random_rotation(t);
    if (!strcmp(key, "color_jitter")) return color_jitter(t);
    if (!strcmp(key, "random_gray_scale"))
        return given_null(t, key) ? emit(t, "transform=grey_p=0")
                                  : set_number(t, key, "", "grey_p") < 0 ? -1 : 0;
    if (!strcmp(key, "gaussian_blur")) return gaussian_blur(t, key, first_global);
    if (!strcmp(key, "solarize")) return solarize(t, key, first_global);
    if (!strcmp(key, "global_view_1") && t->multi_crop) {
        static const char *const keys[] = {"gaussian_blur", "solarize", NULL};
        if (check_keys(t, key, keys)) return -1;
        if ((has_children(t, "global_view_1.gaussian_blur") ||
             given_null(t, "global_view_1.gaussian_blur")) &&
            gaussian_blur(t, "global_view_1.gaussian_blur", "view1."))
            return -1;
        if (has_children(t, "global_view_1.solarize") || given_null(t, "global_view_1.solarize"))
            return solarize(t, "global_view_1.solarize", "view1.");
        return 0;
    }
    if (!strcmp(key, "local_view") && t->multi_crop) return local_view(t);
    if (t->dinov31 && (!strcmp(key, "paka_num_local") || !strcmp(key, "record_geometry") ||
                       !strcmp(key, "paka_high_overlap_iou")))
        return found ? dinov31_key(t, key, &value) : 0;
    if (!strcmp(key, "local_view") || !strcmp(key, "global_view_1"))
        return error_set(t->err, "transform_args.%s: the views of --method dino, dinov2 and "
                                 "dinov31 (this method's are all alike: set them without it)",
                         key);
    // One of the program's own keys ("scale_min", "local.blur_p"), each entry as given.
    const size_t length = strlen(key);
    for (int i = 0; i < t->count; i++) {
        const char *entry = t->entries[i];
        if (strncmp(entry, key, length) != 0 || (entry[length] != '=' && entry[length] != '.'))
            continue;
        const char *equals = strchr(entry, '=');
        if (equals && (equals[1] == '[' || equals[1] == '('))
            return error_set(t->err, "transform_args.%s: lightly-train-c has no such transform "
                                     "(docs/commands.md)", entry);
        if (emit(t, "transform=%s", entry)) return -1;
    }
    return 0;
}

int transform_args_translate(const char *const *entries, int count, const char *method,
                             TransformArgsEmit emit_argument, void *context, ErrorMessage *err) {
    Translation t = {.entries = entries, .count = count, .emit = emit_argument,
                     .context = context, .err = err};
    t.dinov31 = method && !strcmp(method, "dinov31");
    t.multi_crop = method && (!strcmp(method, "dino") || !strcmp(method, "dinov2") || t.dinov31);
    int channel_args = 0;
    for (int i = 0; i < count; i++) {
        if (!strchr(entries[i], '='))
            return error_set(err, "transform_args.%.200s: expected transform_args.KEY=VALUE",
                             entries[i]);
        char key[128];
        const size_t length = strcspn(entries[i], ".=");
        if (length == 0 || length >= sizeof key)
            return error_set(err, "transform_args.%.200s: expected transform_args.KEY=VALUE",
                             entries[i]);
        memcpy(key, entries[i], length);
        key[length] = '\0';
        int seen = 0;  // each key once, where it first appears
        for (int j = 0; j < i && !seen; j++)
            seen = !strncmp(entries[j], key, length) &&
                   (entries[j][length] == '.' || entries[j][length] == '=');
        if (seen) continue;
        if (!strcmp(key, "num_channels") || !strcmp(key, "channel_drop") ||
            !strcmp(key, "normalize")) {
            channel_args = 1;  // resolved together, after the others
            continue;
        }
        if (translate_key(&t, key)) return -1;
    }
    return channel_args ? channels(&t) : 0;
}
