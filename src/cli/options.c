// Command-line option parser (see options.h): table check, argv walk, value
// conversion with range/choice checks, did-you-mean suggestions and help.
#include "cli/options.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/number.h"

// User text quoted in a message is cut to this many characters so that a huge
// argument cannot push the rest of the message out of the ErrorMessage.
#define QUOTE_MAX 200
// Names longer than this are never compared for a suggestion.
#define SUGGEST_NAME_MAX 64
// The help's left column ("  --name METAVAR") is padded to at most this width;
// a longer one puts its help text on the next line.
#define HELP_COLUMN_MAX 30

// ---- names ---------------------------------------------------------------------

static char fold_name_char(char c) {
    return c == '_' ? '-' : c;
}

// Whether the given key (key_len bytes, not NUL-terminated) is spec_name, with
// '_' and '-' treated as the same character.
static int option_name_matches(const char *spec_name, const char *key, size_t key_len) {
    size_t i = 0;
    for (; i < key_len; i++) {
        if (spec_name[i] == '\0' || fold_name_char(spec_name[i]) != fold_name_char(key[i]))
            return 0;
    }
    return spec_name[i] == '\0';
}

static int option_find(const OptionParser *parser, const char *key, size_t key_len) {
    for (int i = 0; i < parser->count; i++)
        if (option_name_matches(parser->specs[i].name, key, key_len) ||
            (parser->specs[i].alias && option_name_matches(parser->specs[i].alias, key, key_len)))
            return i;
    return -1;
}

// The index of choice (length bytes of it) in spec's choices, or -1.
static int option_choice_index(const OptionSpec *spec, const char *choice, size_t length) {
    for (int i = 0; spec->choices[i]; i++)
        if (strlen(spec->choices[i]) == length && strncmp(spec->choices[i], choice, length) == 0)
            return i;
    return -1;
}

// Levenshtein distance, case-insensitive and with '_' == '-'; both lengths are
// at most SUGGEST_NAME_MAX.
static int option_edit_distance(const char *a, size_t a_len, const char *b, size_t b_len) {
    int row[SUGGEST_NAME_MAX + 1];
    for (size_t j = 0; j <= b_len; j++) row[j] = (int)j;
    for (size_t i = 1; i <= a_len; i++) {
        int diagonal = row[0];
        row[0] = (int)i;
        char ca = (char)tolower((unsigned char)fold_name_char(a[i - 1]));
        for (size_t j = 1; j <= b_len; j++) {
            char cb = (char)tolower((unsigned char)fold_name_char(b[j - 1]));
            int substitute = diagonal + (ca != cb);
            int delete_a = row[j] + 1;
            int insert_b = row[j - 1] + 1;
            diagonal = row[j];
            int best = substitute < delete_a ? substitute : delete_a;
            row[j] = best < insert_b ? best : insert_b;
        }
    }
    return row[b_len];
}

// The known name closest to key when it is close enough to be a likely typo
// (at most a third of the name's length, and at most 3, edits away), else NULL.
static const char *option_closest_name(const OptionParser *parser, const char *key,
                                       size_t key_len) {
    if (key_len > SUGGEST_NAME_MAX) return NULL;
    const char *best_name = NULL;
    int best_distance = INT_MAX;
    for (int i = 0; i < parser->count; i++) {
        const char *name = parser->specs[i].name;
        size_t name_len = strlen(name);
        if (name_len > SUGGEST_NAME_MAX) continue;
        int limit = (int)name_len / 3;
        if (limit < 1) limit = 1;
        if (limit > 3) limit = 3;
        int distance = option_edit_distance(key, key_len, name, name_len);
        if (distance <= limit && distance < best_distance) {
            best_distance = distance;
            best_name = name;
        }
    }
    return best_name;
}

// shown: the argument as the user wrote it, up to '='; key: the bare name.
static int option_report_unknown(const OptionParser *parser, const char *shown,
                                 size_t shown_len, const char *key, size_t key_len,
                                 ErrorMessage *err) {
    int shown_width = shown_len > QUOTE_MAX ? QUOTE_MAX : (int)shown_len;
    const char *suggestion = option_closest_name(parser, key, key_len);
    if (suggestion)
        return error_set(err, "unknown option '%.*s' (did you mean --%s?)", shown_width,
                         shown, suggestion);
    return error_set(err, "unknown option '%.*s' (see --help)", shown_width, shown);
}

// ---- table check -----------------------------------------------------------------

// Catches mistakes in an option table (a programming error, not a user one).
static int option_check_table(const OptionParser *parser, ErrorMessage *err) {
    if (parser->count < 0 || parser->count > OPTIONS_MAX_SPECS ||
        (parser->count > 0 && !parser->specs))
        return error_set(err, "option table: %d rows (at most %d allowed)", parser->count,
                         OPTIONS_MAX_SPECS);
    for (int i = 0; i < parser->count; i++) {
        const OptionSpec *spec = &parser->specs[i];
        const char *name = spec->name;
        if (!name || !name[0] || name[0] == '-' || strchr(name, '='))
            return error_set(err, "option table: row %d has an invalid name '%s'", i,
                             name ? name : "(null)");
        if (!spec->value) return error_set(err, "option table: --%s has no value pointer", name);
        if (spec->type > OPTION_CHOICE)
            return error_set(err, "option table: --%s has an unknown type", name);
        if (spec->type == OPTION_CHOICE && (!spec->choices || !spec->choices[0]))
            return error_set(err, "option table: --%s has no choices", name);
        for (int a = 0; spec->value_aliases && spec->value_aliases[a]; a++) {
            const char *equals = strchr(spec->value_aliases[a], '=');
            if (spec->type != OPTION_CHOICE || !equals ||
                option_choice_index(spec, equals + 1, strlen(equals + 1)) < 0)
                return error_set(err, "option table: --%s: value alias '%s' names no choice",
                                 name, spec->value_aliases[a]);
        }
        for (int r = 0; spec->value_refusals && spec->value_refusals[r]; r++)
            if (spec->type != OPTION_CHOICE || !strchr(spec->value_refusals[r], '='))
                return error_set(err, "option table: --%s: refusal '%s' is no WORD=WHY", name,
                                 spec->value_refusals[r]);
        if (spec->alias && option_find(parser, spec->alias, strlen(spec->alias)) != i)
            return error_set(err, "option table: --%s: its alias names another option", name);
        if (spec->repeatable && spec->type != OPTION_STRING)
            return error_set(err, "option table: --%s is repeatable but not a string", name);
        if (spec->dotted && spec->type != OPTION_STRING)
            return error_set(err, "option table: --%s is dotted but not a string", name);
        if (spec->allow_auto && spec->type != OPTION_INT && spec->type != OPTION_FLOAT)
            return error_set(err, "option table: --%s allows 'auto' but is not a number", name);
        if (spec->allow_auto && spec->min < spec->max && spec->min <= -1 && -1 <= spec->max)
            return error_set(err, "option table: --%s stores 'auto' as -1, inside its range",
                             name);
        if (option_name_matches("help", name, strlen(name)) ||
            option_find(parser, name, strlen(name)) != i)
            return error_set(err, "option table: --%s is defined twice", name);
    }
    return 0;
}

// ---- values ------------------------------------------------------------------------

// Writes "a, b, c" (or "a,b,c" with separator ",") into buffer, cut to fit.
// The choices joined by separator; a list longer than the buffer ends in
// "..." (never a name cut in the middle).
static void option_join_choices(const char *const *choices, const char *separator,
                                char *buffer, size_t size) {
    size_t used = 0;
    buffer[0] = '\0';
    for (int i = 0; choices[i]; i++) {
        const int written = snprintf(buffer + used, size - used, "%s%s", i ? separator : "",
                                     choices[i]);
        if (written < 0 || used + (size_t)written + 4 >= size) {
            snprintf(buffer + used, size - used, "%s...", i ? separator : "");
            return;
        }
        used += (size_t)written;
    }
}

// Choice lists (the models: 27 names) fit these.
enum { CHOICES_TEXT = 1024 };

static void option_format_bound(double bound, char *buffer, size_t size) {
    snprintf(buffer, size, "%.15g", bound);
}

static int option_check_range(const OptionSpec *spec, double number, const char *text,
                              ErrorMessage *err) {
    if (!(spec->min < spec->max) || (number >= spec->min && number <= spec->max)) return 0;
    char low[32], high[32];
    option_format_bound(spec->min, low, sizeof low);
    option_format_bound(spec->max, high, sizeof high);
    if (isinf(spec->max))
        return error_set(err, "--%s: must be at least %s, got %.*s", spec->name, low,
                         QUOTE_MAX, text);
    if (isinf(spec->min))
        return error_set(err, "--%s: must be at most %s, got %.*s", spec->name, high,
                         QUOTE_MAX, text);
    return error_set(err, "--%s: must be between %s and %s, got %.*s", spec->name, low, high,
                     QUOTE_MAX, text);
}

static int option_store_flag(const OptionSpec *spec, const char *text, ErrorMessage *err) {
    int *flag = spec->value;
    if (strcasecmp(text, "true") == 0 || strcmp(text, "1") == 0) {
        *flag = 1;
    } else if (strcasecmp(text, "false") == 0 || strcmp(text, "0") == 0) {
        *flag = 0;
    } else {
        return error_set(err, "--%s: expected true or false, got '%.*s'", spec->name,
                         QUOTE_MAX, text);
    }
    return 0;
}

static int option_store_int(const OptionSpec *spec, const char *text, ErrorMessage *err) {
    int *number = spec->value;
    if (spec->allow_auto && strcmp(text, "auto") == 0) {
        *number = -1;
        return 0;
    }
    const char *expected = spec->allow_auto ? "an integer or 'auto'" : "an integer";
    // strtoll would skip leading blanks; a value with them is a mistake.
    if (isspace((unsigned char)text[0]))
        return error_set(err, "--%s: expected %s, got '%.*s'", spec->name, expected,
                         QUOTE_MAX, text);
    char *end = NULL;
    errno = 0;
    long long parsed = strtoll(text, &end, 10);
    if (end == text || *end != '\0')
        return error_set(err, "--%s: expected %s, got '%.*s'", spec->name, expected,
                         QUOTE_MAX, text);
    if (errno == ERANGE || parsed < INT_MIN || parsed > INT_MAX)
        return error_set(err, "--%s: %.*s is too large for an integer", spec->name,
                         QUOTE_MAX, text);
    if (option_check_range(spec, (double)parsed, text, err)) return -1;
    *number = (int)parsed;
    return 0;
}

static int option_store_float(const OptionSpec *spec, const char *text, ErrorMessage *err) {
    if (spec->allow_auto && strcmp(text, "auto") == 0) {
        *(double *)spec->value = -1;
        return 0;
    }
    const char *expected = spec->allow_auto ? "a decimal number or 'auto'" : "a decimal number";
    // Decimal only: strtod would read "0x10" as 16, and take "inf" and "nan".
    double parsed = 0;
    const int status = number_parse_decimal(text, &parsed);
    if (status == -1)
        return error_set(err, "--%s: expected %s, got '%.*s'", spec->name, expected, QUOTE_MAX,
                         text);
    if (status != 0)
        return error_set(err, "--%s: expected a finite number, got '%.*s'", spec->name,
                         QUOTE_MAX, text);
    if (option_check_range(spec, parsed, text, err)) return -1;
    *(double *)spec->value = parsed;
    return 0;
}

static int option_store_choice(const OptionSpec *spec, const char *text, ErrorMessage *err) {
    int index = option_choice_index(spec, text, strlen(text));
    for (int a = 0; index < 0 && spec->value_aliases && spec->value_aliases[a]; a++) {
        const char *word = spec->value_aliases[a], *equals = strchr(word, '=');
        if ((size_t)(equals - word) == strlen(text) && strncmp(word, text, strlen(text)) == 0)
            index = option_choice_index(spec, equals + 1, strlen(equals + 1));
    }
    char canonical[128];
    if (index < 0 && spec->value_canonical &&
        spec->value_canonical(text, canonical, sizeof canonical))
        index = option_choice_index(spec, canonical, strlen(canonical));
    if (index >= 0) {
        *(int *)spec->value = index;
        if (spec->given) *spec->given = text;
        return 0;
    }
    for (int r = 0; spec->value_refusals && spec->value_refusals[r]; r++) {
        const char *word = spec->value_refusals[r], *equals = strchr(word, '=');
        if ((size_t)(equals - word) == strlen(text) && strncmp(word, text, strlen(text)) == 0)
            return error_set(err, "--%s %s: %s", spec->name, text, equals + 1);
    }
    char listed[CHOICES_TEXT];
    option_join_choices(spec->choices, ", ", listed, sizeof listed);
    // A list longer than the one-line message holds (the models): its
    // first and last names and where the rest are, not a list cut anywhere.
    const size_t quoted = strlen(text) < QUOTE_MAX ? strlen(text) : QUOTE_MAX;
    if (strlen(listed) + strlen(spec->name) + quoted + 40 > sizeof err->text) {
        int count = 0;
        while (spec->choices[count]) count++;
        return error_set(err, "--%s: expected one of %s, %s, %s, ..., %s, %s (all %d: --help), "
                              "got '%.*s'",
                         spec->name, spec->choices[0], spec->choices[1], spec->choices[2],
                         spec->choices[count - 2], spec->choices[count - 1], count, QUOTE_MAX,
                         text);
    }
    return error_set(err, "--%s: expected one of %s, got '%.*s'", spec->name, listed,
                     QUOTE_MAX, text);
}

// first_time: the option has not been seen before in this argv (a repeatable
// option then drops its default list).
static int option_store_string(const OptionSpec *spec, const char *text, int first_time,
                               ErrorMessage *err) {
    if (!spec->repeatable) {
        *(const char **)spec->value = text;
        return 0;
    }
    StringList *list = spec->value;
    if (first_time) list->count = 0;
    if (list->count >= OPTIONS_MAX_REPEATS)
        return error_set(err, "--%s: given more than %d times", spec->name,
                         OPTIONS_MAX_REPEATS);
    list->items[list->count++] = text;
    return 0;
}

static int option_store(const OptionSpec *spec, const char *text, int first_time,
                        ErrorMessage *err) {
    if (text[0] == '\0') return error_set(err, "--%s needs a value, got an empty one", spec->name);
    switch (spec->type) {
    case OPTION_FLAG: return option_store_flag(spec, text, err);
    case OPTION_INT: return option_store_int(spec, text, err);
    case OPTION_FLOAT: return option_store_float(spec, text, err);
    case OPTION_STRING: return option_store_string(spec, text, first_time, err);
    case OPTION_CHOICE: return option_store_choice(spec, text, err);
    }
    return error_set(err, "--%s: unknown option type", spec->name);
}

// ---- parsing -------------------------------------------------------------------------

static int option_is_help(const char *arg) {
    return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

int options_parse(const OptionParser *parser, int argc, char **argv, FILE *out,
                  ErrorMessage *err) {
    if (option_check_table(parser, err)) return -1;
    for (int i = 1; i < argc; i++) {
        if (option_is_help(argv[i])) {
            if (out) options_print_help(parser, out);
            return 1;
        }
    }
    int seen[OPTIONS_MAX_SPECS] = {0};
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *key = NULL;  // the name, without dashes, up to '='
        if (arg[0] == '-' && arg[1] == '-' && arg[2] != '\0') {
            key = arg + 2;
        } else if (arg[0] == '-' && arg[1] != '\0' && arg[1] != '-') {
            // Only long options exist: "-batch-size" is unknown, but a
            // suggestion is still worth giving.
            key = arg + 1;
            size_t length = strcspn(arg, "=");
            return option_report_unknown(parser, arg, length, key, length - 1, err);
        } else if (arg[0] != '-' && arg[0] != '=' && strchr(arg, '=')) {
            key = arg;  // LightlyTrain's name=value
        } else {
            return error_set(err,
                             "unexpected argument '%.*s' (options are written --name value "
                             "or name=value)",
                             QUOTE_MAX, arg);
        }
        size_t key_len = strcspn(key, "=");
        const char *value = key[key_len] == '=' ? key + key_len + 1 : NULL;
        int index = option_find(parser, key, key_len);
        const size_t dot = strcspn(key, ".");
        if (index < 0 && dot < key_len && (index = option_find(parser, key, dot)) >= 0) {
            // name.key=value: the dotted option's value is key=value.
            if (!parser->specs[index].dotted)
                return option_report_unknown(parser, arg, (size_t)(key - arg) + key_len, key,
                                             key_len, err);
            if (!value)
                return error_set(err, "--%.*s: write it %.*s=VALUE (or --%s %.*s=VALUE)",
                                 QUOTE_MAX, key, QUOTE_MAX, key, parser->specs[index].name,
                                 QUOTE_MAX, key + dot + 1);
            value = key + dot + 1;
        }
        if (index < 0)
            return option_report_unknown(parser, arg, (size_t)(key - arg) + key_len, key,
                                         key_len, err);
        const OptionSpec *spec = &parser->specs[index];
        if (seen[index] && !spec->repeatable)
            return error_set(err, "--%s given more than once", spec->name);
        if (!value && spec->type == OPTION_FLAG) {
            *(int *)spec->value = 1;
            seen[index] = 1;
            continue;
        }
        if (!value) {
            // A following "--other" is taken as the next option, not as this
            // value; such a value can still be written --name=--other.
            if (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)
                return error_set(err, "--%s needs a value", spec->name);
            value = argv[++i];
        }
        if (option_store(spec, value, !seen[index], err)) return -1;
        seen[index] = 1;
    }
    for (int i = 0; i < parser->count; i++) {
        if (parser->specs[i].required && !seen[i])
            return error_set(err, "--%s is required", parser->specs[i].name);
    }
    return 0;
}

// ---- help ------------------------------------------------------------------------------

// The word after the option name in help and usage lines.
static const char *option_metavar(const OptionSpec *spec, char *buffer, size_t size) {
    if (spec->metavar) return spec->metavar;
    switch (spec->type) {
    case OPTION_FLAG: return "";
    case OPTION_INT: return spec->allow_auto ? "N|auto" : "N";
    case OPTION_FLOAT: return spec->allow_auto ? "X|auto" : "X";
    case OPTION_STRING: return "VALUE";
    case OPTION_CHOICE: {
        char listed[CHOICES_TEXT];
        option_join_choices(spec->choices, ",", listed, sizeof listed);
        snprintf(buffer, size, "{%s}", listed);
        return buffer;
    }
    }
    return "";
}

void options_format_value(const OptionSpec *spec, char *buffer, size_t size) {
    buffer[0] = '\0';
    switch (spec->type) {
    case OPTION_FLAG:
        snprintf(buffer, size, "%s", *(const int *)spec->value ? "true" : "false");
        break;
    case OPTION_INT: {
        const int number = *(const int *)spec->value;
        if (spec->allow_auto && number == -1)
            snprintf(buffer, size, "auto");
        else
            snprintf(buffer, size, "%d", number);
        break;
    }
    case OPTION_FLOAT: {
        const double number = *(const double *)spec->value;
        if (spec->allow_auto && number == -1)
            snprintf(buffer, size, "auto");
        else
            snprintf(buffer, size, "%.15g", number);
        break;
    }
    case OPTION_STRING:
        if (spec->repeatable) {
            const StringList *list = spec->value;
            size_t used = 0;
            for (int i = 0; i < list->count && used < size; i++) {
                const int written = snprintf(buffer + used, size - used, "%s%s", i ? " " : "",
                                             list->items[i]);
                if (written < 0) break;
                used += (size_t)written;
            }
        } else {
            const char *text = *(const char *const *)spec->value;
            snprintf(buffer, size, "%s", text ? text : "");
        }
        break;
    case OPTION_CHOICE: {
        const int index = *(const int *)spec->value;
        int count = 0;
        while (spec->choices[count]) count++;
        if (index >= 0 && index < count) snprintf(buffer, size, "%s", spec->choices[index]);
        break;
    }
    }
}

// "(required)", "(default: 256)", "" when there is no default to show.
static void option_describe_default(const OptionSpec *spec, char *buffer, size_t size) {
    buffer[0] = '\0';
    if (spec->required) {
        snprintf(buffer, size, "(required)");
        return;
    }
    if (spec->type == OPTION_FLAG) {  // only "on" is worth saying
        if (*(const int *)spec->value) snprintf(buffer, size, "(default: on)");
        return;
    }
    char value[240];
    options_format_value(spec, value, sizeof value);
    const int is_string = spec->type == OPTION_STRING && !spec->repeatable;
    if (is_string && *(const char *const *)spec->value && !value[0])
        snprintf(value, sizeof value, "''");  // set to the empty string
    if (value[0]) snprintf(buffer, size, "(default: %s)", value);
}

static void option_print_row(FILE *out, const char *left, int width, const char *help,
                             const char *suffix, const char *default_text) {
    int left_len = (int)strlen(left);
    fputs(left, out);
    if (left_len > width)
        fprintf(out, "\n%*s", width + 2, "");
    else
        fprintf(out, "%*s", width - left_len + 2, "");
    const char *parts[3] = {help, suffix, default_text};
    int printed = 0;
    for (int i = 0; i < 3; i++) {
        if (!parts[i] || !parts[i][0]) continue;
        fprintf(out, "%s%s", printed ? " " : "", parts[i]);
        printed = 1;
    }
    fputc('\n', out);
}

static void option_left_column(const OptionSpec *spec, char *buffer, size_t size) {
    char choices[CHOICES_TEXT + 2];
    const char *metavar = option_metavar(spec, choices, sizeof choices);
    snprintf(buffer, size, "  --%s%s%s", spec->name, metavar[0] ? " " : "", metavar);
}

void options_print_help(const OptionParser *parser, FILE *out) {
    char left[CHOICES_TEXT + 64];
    fprintf(out, "usage: %s", parser->program ? parser->program : "lightly-train-c");
    for (int i = 0; i < parser->count; i++) {
        if (!parser->specs[i].required && !parser->specs[i].in_usage) continue;
        option_left_column(&parser->specs[i], left, sizeof left);
        fprintf(out, " %s", left + 2);
    }
    fprintf(out, " [options]\n");
    if (parser->summary) fprintf(out, "\n%s\n", parser->summary);

    const char *help_left = "  -h, --help";
    int width = (int)strlen(help_left);
    for (int i = 0; i < parser->count; i++) {
        option_left_column(&parser->specs[i], left, sizeof left);
        int length = (int)strlen(left);
        if (length <= HELP_COLUMN_MAX && length > width) width = length;
    }
    fprintf(out, "\noptions:\n");
    for (int i = 0; i < parser->count; i++) {
        const OptionSpec *spec = &parser->specs[i];
        char default_text[256];
        char suffix[CHOICES_TEXT + 16] = "";
        option_left_column(spec, left, sizeof left);
        option_describe_default(spec, default_text, sizeof default_text);
        if (spec->repeatable) snprintf(suffix, sizeof suffix, "(repeatable)");
        if (spec->type == OPTION_CHOICE && spec->metavar) {
            // A custom metavar hides the choices, so list them after the help.
            char listed[CHOICES_TEXT];
            option_join_choices(spec->choices, ", ", listed, sizeof listed);
            snprintf(suffix, sizeof suffix, "(one of: %s)", listed);
        }
        option_print_row(out, left, width, spec->help, suffix, default_text);
    }
    option_print_row(out, help_left, width, "show this help and exit", NULL, NULL);
    fprintf(out,
            "\nEvery option can also be written LightlyTrain's way, name=value, with\n"
            "dashes or underscores (batch_size=64); flags take true or false.\n");
    if (parser->epilog) fprintf(out, "\n%s\n", parser->epilog);
}

int options_parse_command(const OptionParser *parser, int argc, char **argv, int *exit_status) {
    ErrorMessage err = {{0}};
    const int parsed = options_parse(parser, argc, argv, stdout, &err);
    if (parsed == 0) return 0;
    if (parsed == 1) {
        *exit_status = 0;
        return 1;
    }
    fprintf(stderr, "%s: %s\n", parser->program, err.text);
    *exit_status = 2;
    return 1;
}

const char *const OPTION_BOOLEAN_CHOICES[] = {"true", "false", NULL};
const char *const OPTION_ACCELERATOR_ALIASES[] = {"cuda=gpu", NULL};
// Lightning's legacy spellings of its precisions (its _PRECISION_INPUT_STR_ALIAS).
const char *const OPTION_PRECISION_ALIASES[] = {"32=32-true", "16=16-mixed", "bf16=bf16-mixed",
                                                NULL};
const char *const OPTION_PRECISION_REFUSALS[] = {
    "16-true=fp16 weights are not used here: 16-mixed keeps fp32 weights and 16-bit "
    "activations",
    "bf16-true=bf16 weights are not used here: bf16-mixed keeps fp32 weights and bf16 "
    "activations",
    "64-true=float64 is not computed here (32-true is the widest)",
    "64=float64 is not computed here (32-true is the widest)",
    "transformer-engine=NVIDIA's Transformer Engine is not used here: 16-mixed or bf16-mixed",
    "transformer-engine-float16=NVIDIA's Transformer Engine is not used here: 16-mixed",
    NULL};
