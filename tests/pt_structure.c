// Module-tree structure lines for the export tests (pt_structure.h).
#include "pt_structure.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void lines_add(Lines *lines, const char *text) {
    if (lines->count == lines->capacity) {
        lines->capacity = lines->capacity ? 2 * lines->capacity : 256;
        lines->items = realloc(lines->items, (size_t)lines->capacity * sizeof *lines->items);
        assert_non_null(lines->items);
    }
    lines->items[lines->count++] = strdup(text);
}

void lines_free(Lines *lines) {
    for (int i = 0; i < lines->count; i++) free(lines->items[i]);
    free(lines->items);
    memset(lines, 0, sizeof *lines);
}

void fixture_section(const char *fixture, const char *name, Lines *out) {
    FILE *file = fopen(fixture, "r");
    if (!file) fail_msg("cannot open %s", fixture);
    char line[PT_STRUCTURE_LINE_BYTES], header[64];
    snprintf(header, sizeof header, "# %s", name);
    int inside = 0;
    while (fgets(line, sizeof line, file)) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == '#') {
            inside = strcmp(line, header) == 0;
            continue;
        }
        if (inside) lines_add(out, line);
    }
    fclose(file);
    if (out->count == 0) fail_msg("%s has no section %s", fixture, name);
}

int compare_strings(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

// "|"-joined keys of the dict under `which` in a module's state.
static void joined_keys(const PtValue *state, const char *which, char *out, size_t size) {
    const PtValue *dict = pt_dict_get(state, which);
    out[0] = '\0';
    for (size_t i = 0; dict && i + 1 < dict->as.items.count; i += 2) {
        const size_t used = strlen(out);
        snprintf(out + used, size - used, "%s%s", i ? "|" : "",
                 dict->as.items.items[i]->as.string.bytes);
    }
}

// Appends to out (size bytes) as tools/make_torchvision_structure.py's
// format_value writes a value: no spaces.
static void append(char *out, size_t size, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char *out, size_t size, const char *format, ...) {
    const size_t used = strlen(out);
    va_list args;
    va_start(args, format);
    vsnprintf(out + used, size - used, format, args);
    va_end(args);
}

static void format_value(const PtValue *value, char *out, size_t size) {
    switch (value->kind) {
    case PT_NONE: append(out, size, "None"); break;
    case PT_BOOL: append(out, size, "%s", value->as.integer ? "True" : "False"); break;
    case PT_INT: append(out, size, "%lld", (long long)value->as.integer); break;
    case PT_FLOAT: append(out, size, "%.17g", value->as.real); break;
    case PT_STRING: append(out, size, "'%s'", value->as.string.bytes); break;
    case PT_TUPLE:
    case PT_LIST: {
        const int tuple = value->kind == PT_TUPLE;
        append(out, size, "%s", tuple ? "(" : "[");
        for (size_t i = 0; i < value->as.items.count; i++) {
            if (i) append(out, size, ",");
            format_value(value->as.items.items[i], out, size);
        }
        append(out, size, "%s", tuple ? (value->as.items.count == 1 ? ",)" : ")") : "]");
        break;
    }
    case PT_GLOBAL:
        append(out, size, "class:%s", value->as.global.name ? value->as.global.name : "?");
        break;
    default: append(out, size, "<kind %d>", (int)value->kind);
    }
}

// nn.Module.__init__'s own entries of __dict__ (besides training).
static int bookkeeping(const char *key) {
    static const char *const names[] = {
        "_parameters", "_buffers", "_modules", "_non_persistent_buffers_set",
        "_backward_pre_hooks", "_backward_hooks", "_is_full_backward_hook", "_forward_hooks",
        "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
        "_forward_pre_hooks_with_kwargs", "_state_dict_hooks", "_state_dict_pre_hooks",
        "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(key, names[i]) == 0) return 1;
    return 0;
}

static void describe(const PtValue *module, const char *path, int with_values, Lines *out,
                     Lines *seen) {
    assert_int_equal(module->kind, PT_OBJECT);
    char identity[32];
    snprintf(identity, sizeof identity, "%p", (const void *)module);
    for (int i = 0; i < seen->count; i++)
        if (strcmp(seen->items[i], identity) == 0) return;
    lines_add(seen, identity);
    const PtValue *state = module->as.object.state;
    assert_non_null(state);
    const char *keys[128];
    const PtValue *values[128];
    int count = 0;
    for (size_t i = 0; i + 1 < state->as.items.count && count < 128; i += 2) {
        const char *k = state->as.items.items[i]->as.string.bytes;
        if (with_values ? !bookkeeping(k) : k[0] != '_') keys[count++] = k;
    }
    qsort(keys, (size_t)count, sizeof *keys, compare_strings);
    for (int i = 0; i < count; i++) values[i] = pt_dict_get(state, keys[i]);
    char line[PT_STRUCTURE_LINE_BYTES], params[512], buffers[512];
    snprintf(line, sizeof line, "%s %s", path[0] ? path : ".",
             module->as.object.cls->as.global.name);
    for (int i = 0; i < count; i++) {
        append(line, sizeof line, " %s", keys[i]);
        if (!with_values) continue;
        append(line, sizeof line, "=");
        format_value(values[i], line, sizeof line);
    }
    joined_keys(state, "_parameters", params, sizeof params);
    joined_keys(state, "_buffers", buffers, sizeof buffers);
    append(line, sizeof line, " params=%s buffers=%s", params, buffers);
    lines_add(out, line);
    const PtValue *children = pt_dict_get(state, "_modules");
    for (size_t i = 0; children && i + 1 < children->as.items.count; i += 2) {
        char child[512];
        snprintf(child, sizeof child, "%s%s%s", path, path[0] ? "." : "",
                 children->as.items.items[i]->as.string.bytes);
        describe(children->as.items.items[i + 1], child, with_values, out, seen);
    }
}

void pt_structure_describe(const PtValue *module, const char *path, int with_values,
                           Lines *out) {
    Lines seen = {0};
    describe(module, path, with_values, out, &seen);
    lines_free(&seen);
}

void pt_structure_expect(const char *model, const Lines *expected, const Lines *ours) {
    for (int i = 0; i < expected->count && i < ours->count; i++)
        if (strcmp(expected->items[i], ours->items[i]) != 0)
            fail_msg("%s line %d:\n  PyTorch's: %s\n  ours:      %s", model, i,
                     expected->items[i], ours->items[i]);
    assert_int_equal(ours->count, expected->count);
}
