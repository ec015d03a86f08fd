// --method-arg: the methods' argument tables, the check of the user's
// entries against them, and the lookups (see method.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssl_methods/method.h"
#include "util/number.h"

static const MethodArgSpec *const arg_specs[METHOD_KIND_COUNT] = {
    [METHOD_SIMCLR] = simclr_arg_specs,
    [METHOD_BYOL] = byol_arg_specs,
    [METHOD_DINO] = dino_arg_specs,
    [METHOD_VICREG] = vicreg_arg_specs,
    [METHOD_BARLOW_TWINS] = barlow_twins_arg_specs,
    [METHOD_DISTILLATION] = distillation_arg_specs,
    [METHOD_DISTILLATION_V1] = distillation_v1_arg_specs,
    [METHOD_DISTILLATION_V2] = distillation_v2_arg_specs,
    [METHOD_DINOV2] = dinov2_arg_specs,
    [METHOD_DINOV31] = dinov31_arg_specs,
};

const MethodArgSpec *method_arg_specs(MethodKind kind) {
    return kind >= 0 && kind < METHOD_KIND_COUNT ? arg_specs[kind] : NULL;
}

// "a or b", "a, b or c" from "a|b|c".
static void words_text(const char *words, char *out, size_t size) {
    size_t used = 0;
    out[0] = '\0';
    for (const char *word = words; *word && used < size;) {
        const char *bar = strchr(word, '|');
        const int length = bar ? (int)(bar - word) : (int)strlen(word);
        const char *separator = word == words ? "" : bar ? ", " : " or ";
        used += (size_t)snprintf(out + used, size - used, "%s%.*s", separator, length, word);
        word = bar ? bar + 1 : word + length;
    }
}

void method_arg_range_text(const MethodArgSpec *spec, char *out, size_t size) {
    char words[128] = "";
    if (spec->words) words_text(spec->words, words, sizeof words);
    switch (spec->kind) {
    case METHOD_ARG_NUMBER:
        snprintf(out, size, "a number in %s%.9g, %.9g]", spec->low_open ? "(" : "[", spec->low,
                 spec->high);
        return;
    case METHOD_ARG_INTEGER:
        snprintf(out, size, "%s%san integer in %.0f..%.0f", words, spec->words ? " or " : "",
                 spec->low, spec->high);
        return;
    case METHOD_ARG_BOOL: snprintf(out, size, "true or false"); return;
    case METHOD_ARG_CHOICE: snprintf(out, size, "%s", words); return;
    case METHOD_ARG_TEXT: snprintf(out, size, "%s", spec->words ? spec->words : "a value"); return;
    }
}

static int is_word(const char *words, const char *text) {
    const size_t length = strlen(text);
    for (const char *word = words; word && *word;) {
        const char *bar = strchr(word, '|');
        const size_t word_length = bar ? (size_t)(bar - word) : strlen(word);
        if (word_length == length && strncmp(word, text, length) == 0) return 1;
        word = bar ? bar + 1 : NULL;
    }
    return 0;
}

// Whether text is a value spec accepts.
static int value_fits(const MethodArgSpec *spec, const char *text) {
    double number = 0;
    int flag;
    switch (spec->kind) {
    case METHOD_ARG_NUMBER:
        return number_parse_decimal(text, &number) == 0 &&
               (spec->low_open ? number > spec->low : number >= spec->low) &&
               number <= spec->high;
    case METHOD_ARG_INTEGER:
        if (spec->words && is_word(spec->words, text)) return 1;
        // the range first: the cast of a double beyond long long's is undefined
        return number_parse_decimal(text, &number) == 0 && number >= spec->low &&
               number <= spec->high && number == (double)(long long)number;
    case METHOD_ARG_BOOL: return number_parse_bool(text, &flag) == 0;
    case METHOD_ARG_CHOICE: return is_word(spec->words, text);
    case METHOD_ARG_TEXT: return text[0] != '\0';
    }
    return 0;
}

int method_args_check(const MethodSetup *setup, const MethodArgSpec *specs, ErrorMessage *err) {
    for (int i = 0; i < setup->arg_count; i++) {
        const char *entry = setup->args[i];
        const char *equals = strchr(entry, '=');
        if (!equals || equals == entry)
            return error_set(err, "--method-arg '%s': expected key=value", entry);
        const size_t length = (size_t)(equals - entry);
        const MethodArgSpec *spec = NULL;
        for (int k = 0; specs[k].key && !spec; k++)
            if (strlen(specs[k].key) == length && strncmp(specs[k].key, entry, length) == 0)
                spec = &specs[k];
        if (!spec) {
            char accepted[512] = "";
            for (int k = 0; specs[k].key; k++) {
                if (k) strncat(accepted, ", ", sizeof accepted - strlen(accepted) - 1);
                strncat(accepted, specs[k].key, sizeof accepted - strlen(accepted) - 1);
            }
            return error_set(err, "--method-arg: unknown key '%.*s' (accepted: %s)", (int)length,
                             entry, accepted);
        }
        // Every other option refuses a second value; a key given twice
        // (the last used to win silently) is refused the same way.
        for (int j = 0; j < i; j++)
            if (strncmp(setup->args[j], entry, length + 1) == 0)
                return error_set(err, "--method-arg %.*s given twice (%s and %s)", (int)length,
                                 entry, setup->args[j] + length + 1, equals + 1);
        if (!value_fits(spec, equals + 1)) {
            char range[160];
            method_arg_range_text(spec, range, sizeof range);
            return error_set(err, "--method-arg %.*s: expected %s", 200, entry, range);
        }
    }
    return 0;
}

// The value of the "key=value" entry for key (one at most: method_args_check), or NULL.
static const char *method_arg_lookup(const MethodSetup *setup, const char *key) {
    const char *found = NULL;
    const size_t length = strlen(key);
    for (int i = 0; i < setup->arg_count; i++) {
        const char *entry = setup->args[i];
        if (strncmp(entry, key, length) == 0 && entry[length] == '=') found = entry + length + 1;
    }
    return found;
}

int method_arg_double(const MethodSetup *setup, const char *key, double fallback, double *value,
                      ErrorMessage *err) {
    const char *text = method_arg_lookup(setup, key);
    *value = fallback;
    if (text && number_parse_decimal(text, value) != 0)
        return error_set(err, "--method-arg %s=%s: not a decimal number", key, text);
    return 0;
}

int method_arg_string(const MethodSetup *setup, const char *key, const char **value) {
    const char *text = method_arg_lookup(setup, key);
    if (text) *value = text;
    return text != NULL;
}

int method_arg_bool(const MethodSetup *setup, const char *key, int fallback, int *value,
                    ErrorMessage *err) {
    const char *text = method_arg_lookup(setup, key);
    *value = fallback;
    if (text && number_parse_bool(text, value) != 0)
        return error_set(err, "--method-arg %s=%s: expected true or false", key, text);
    return 0;
}
