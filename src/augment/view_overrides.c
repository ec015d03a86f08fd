// view_set_override: user overrides of view-transform parameters by name
// ("blur_p=0.3", "local.scale_max=0.2", "view1.solarize_p=0"), the way
// LightlyTrain's transform_args change its defaults.
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/augment.h"
#include "util/number.h"

typedef struct FieldName {
    const char *name;
    size_t offset;  // of a float in ViewTransform
} FieldName;

static const FieldName view_fields[] = {
    {"scale_min", offsetof(ViewTransform, scale_min)},
    {"scale_max", offsetof(ViewTransform, scale_max)},
    {"ratio_min", offsetof(ViewTransform, ratio_min)},
    {"ratio_max", offsetof(ViewTransform, ratio_max)},
    {"flip_p", offsetof(ViewTransform, flip_p)},
    {"vflip_p", offsetof(ViewTransform, vflip_p)},
    {"rotate_p", offsetof(ViewTransform, rotate_p)},
    {"rotate_min", offsetof(ViewTransform, rotate_min)},
    {"rotate_max", offsetof(ViewTransform, rotate_max)},
    {"jitter_p", offsetof(ViewTransform, jitter_p)},
    {"brightness", offsetof(ViewTransform, brightness)},
    {"contrast", offsetof(ViewTransform, contrast)},
    {"saturation", offsetof(ViewTransform, saturation)},
    {"hue", offsetof(ViewTransform, hue)},
    {"grey_p", offsetof(ViewTransform, grey_p)},
    {"blur_p", offsetof(ViewTransform, blur_p)},
    {"blur_sigma_min", offsetof(ViewTransform, blur_sigma_min)},
    {"blur_sigma_max", offsetof(ViewTransform, blur_sigma_max)},
    {"solarize_p", offsetof(ViewTransform, solarize_p)},
    {"solarize_threshold", offsetof(ViewTransform, solarize_threshold)},
};
enum { view_field_count = sizeof view_fields / sizeof view_fields[0] };

static const FieldName *find_field(const char *name, size_t length) {
    for (int i = 0; i < view_field_count; i++)
        if (strlen(view_fields[i].name) == length && strncmp(view_fields[i].name, name, length) == 0)
            return &view_fields[i];
    return NULL;
}

static int unknown_key(const char *key, size_t length, ErrorMessage *err) {
    char known[512] = "";
    size_t used = 0;
    for (int i = 0; i < view_field_count && used + 24 < sizeof known; i++)
        used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "",
                                 view_fields[i].name);
    return error_set(err, "unknown transform parameter '%.*s' (known: %s)", (int)length, key,
                     known);
}

// Parses the scope prefix; sets [first, last) to the views it selects and
// advances *key past "SCOPE.".
static int parse_scope(const ViewSet *set, const char **key, size_t *key_length, int *first,
                       int *last, ErrorMessage *err) {
    *first = 0;
    *last = set->count;
    const char *dot = memchr(*key, '.', *key_length);
    if (!dot) return 0;
    const size_t scope_length = (size_t)(dot - *key);
    const char *scope = *key;
    if (scope_length == 6 && strncmp(scope, "global", 6) == 0) {
        *last = set->global_count;
    } else if (scope_length == 5 && strncmp(scope, "local", 5) == 0) {
        *first = set->global_count;
        if (*first >= set->count)
            return error_set(err, "transform scope 'local': this method has no local views");
    } else if (scope_length > 4 && strncmp(scope, "view", 4) == 0) {
        char *end = NULL;
        const long view = strtol(scope + 4, &end, 10);
        if (end != dot || view < 0 || view >= set->count)
            return error_set(err, "transform scope '%.*s': views are view0..view%d",
                             (int)scope_length, scope, set->count - 1);
        *first = (int)view;
        *last = (int)view + 1;
    } else {
        return error_set(err, "transform scope '%.*s' must be global, local or view<N>",
                         (int)scope_length, scope);
    }
    *key_length -= scope_length + 1;
    *key = dot + 1;
    return 0;
}

// Sets one parameter in the views it selects, unvalidated.
static int apply_override(ViewSet *set, const char *assignment, ErrorMessage *err) {
    const char *equals = strchr(assignment, '=');
    if (!equals || equals == assignment)
        return error_set(err, "transform override '%s' must look like KEY=VALUE", assignment);
    const char *key = assignment;
    size_t key_length = (size_t)(equals - assignment);
    int first, last;
    if (parse_scope(set, &key, &key_length, &first, &last, err) != 0) return -1;
    const FieldName *field = find_field(key, key_length);
    if (!field) return unknown_key(key, key_length, err);
    const char *text = equals + 1;
    double value = 0;
    if (number_parse_decimal(text, &value) != 0)
        return error_set(err, "transform parameter '%.*s': expected a decimal number, got '%s'",
                         (int)key_length, key, text);
    for (int v = first; v < last; v++)
        *(float *)((char *)&set->views[v] + field->offset) = (float)value;
    return 0;
}

// Validated once all are set: ranges tie parameters together (ratio_min <=
// ratio_max, ...), so checking after each would make the order matter
// ("ratio_min=2 ratio_max=3" refused, the other order accepted).
int view_set_overrides(ViewSet *set, const char *const *assignments, int count,
                       ErrorMessage *err) {
    for (int i = 0; i < count; i++)
        if (apply_override(set, assignments[i], err) != 0) return -1;
    if (count == 0) return 0;
    for (int v = 0; v < set->count; v++)
        if (view_transform_validate(&set->views[v], err) != 0)
            return count == 1 ? error_prefix(err, "transform override '%s' (view %d)",
                                             assignments[0], v)
                              : error_prefix(err, "transform overrides (view %d)", v);
    return 0;
}

int view_set_override(ViewSet *set, const char *assignment, ErrorMessage *err) {
    return view_set_overrides(set, &assignment, 1, err);
}
