// The tensors of a pickled module tree by state_dict name (pt_modules.h).
#include "weights/pt_modules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Collected {
    PtNamedTensor *items;
    int count, capacity;
} Collected;

static int add(Collected *list, const char *prefix, const char *name, const PtValue *tensor,
               ErrorMessage *err) {
    if (list->count == SAFETENSORS_MAX_TENSORS)
        return error_set(err, "more than %d tensors in the model", SAFETENSORS_MAX_TENSORS);
    if (list->count == list->capacity) {
        const int grown = list->capacity ? 2 * list->capacity : 64;
        PtNamedTensor *items = realloc(list->items, (size_t)grown * sizeof *items);
        if (!items) return error_set(err, "out of memory");
        list->items = items;
        list->capacity = grown;
    }
    PtNamedTensor *item = &list->items[list->count];
    if ((size_t)snprintf(item->name, sizeof item->name, "%s%s", prefix, name) >= sizeof item->name)
        return error_set(err, "the tensor name \"%.40s...\" is too long", prefix);
    item->tensor = tensor;
    list->count++;
    return 0;
}

// A dict entry's key as a C string, or NULL when it is not a plain str.
static const char *key_text(const PtValue *key) {
    if (key->kind != PT_STRING || strlen(key->as.string.bytes) != key->as.string.length)
        return NULL;
    return key->as.string.bytes;
}

// 1 when name is listed in the module's _non_persistent_buffers_set (a list here).
static int non_persistent(const PtValue *state, const char *name) {
    const PtValue *set = pt_dict_get(state, "_non_persistent_buffers_set");
    for (size_t i = 0; set && set->kind == PT_LIST && i < set->as.items.count; i++) {
        const char *listed = key_text(set->as.items.items[i]);
        if (listed && strcmp(listed, name) == 0) return 1;
    }
    return 0;
}

static const char *class_of(const PtValue *module) {
    return module->as.object.cls->as.global.name;
}

// The tensors of dict `which` ("_parameters" or "_buffers") of module at path prefix.
static int add_tensors(Collected *list, const PtValue *state, const char *which,
                       const char *prefix, const char *cls, ErrorMessage *err) {
    const PtValue *dict = pt_dict_get(state, which);
    if (!dict || dict->kind != PT_DICT)
        return error_set(err, "module \"%s\" (%s) has no %s dict", prefix, cls, which);
    for (size_t i = 0; i + 1 < dict->as.items.count; i += 2) {
        const char *name = key_text(dict->as.items.items[i]);
        const PtValue *value = dict->as.items.items[i + 1];
        if (!name) return error_set(err, "module \"%s\" (%s): a %s key that is not a str", prefix,
                                    cls, which);
        if (value->kind == PT_NONE) continue;  // bias=False
        if (value->kind != PT_TENSOR)
            return error_set(err, "\"%s%s\" of %s is a %s, not a tensor", prefix, name, cls,
                             pt_kind_name(value->kind));
        if (which[1] == 'b' && non_persistent(state, name)) continue;
        if (add(list, prefix, name, value, err)) return -1;
    }
    return 0;
}

static int walk(Collected *list, const PtValue *module, const char *prefix, int depth,
                ErrorMessage *err) {
    if (depth > PT_MAX_MODULE_DEPTH)
        return error_set(err, "modules nested deeper than %d at \"%s\"", PT_MAX_MODULE_DEPTH,
                         prefix);
    const char *cls = class_of(module);
    const PtValue *state = module->as.object.state;
    if (!state) return error_set(err, "module \"%s\" (%s) has no state", prefix, cls);
    if (add_tensors(list, state, "_parameters", prefix, cls, err) ||
        add_tensors(list, state, "_buffers", prefix, cls, err))
        return -1;
    const PtValue *children = pt_dict_get(state, "_modules");
    if (!children || children->kind != PT_DICT)
        return error_set(err, "module \"%s\" (%s) has no _modules dict", prefix, cls);
    for (size_t i = 0; i + 1 < children->as.items.count; i += 2) {
        const char *name = key_text(children->as.items.items[i]);
        const PtValue *child = children->as.items.items[i + 1];
        if (!name) return error_set(err, "module \"%s\" (%s): a child name that is not a str",
                                    prefix, cls);
        if (child->kind == PT_NONE) continue;
        if (child->kind != PT_OBJECT)
            return error_set(err, "child \"%s%s\" of %s is a %s, not a module", prefix, name, cls,
                             pt_kind_name(child->kind));
        char path[SAFETENSORS_MAX_NAME];
        if ((size_t)snprintf(path, sizeof path, "%s%s.", prefix, name) >= sizeof path)
            return error_set(err, "the module path \"%.40s...\" is too long", prefix);
        if (walk(list, child, path, depth + 1, err)) return -1;
    }
    return 0;
}

int pt_module_tensors(const PtValue *module, PtNamedTensor **out, int *count, ErrorMessage *err) {
    Collected list = {0};
    *out = NULL;
    *count = 0;
    if (module->kind != PT_OBJECT) return error_set(err, "not a module: a %s", pt_kind_name(module->kind));
    if (walk(&list, module, "", 0, err)) {
        free(list.items);
        return -1;
    }
    *out = list.items;
    *count = list.count;
    return 0;
}
