// Tests for the command-line option parser (src/cli/options.c): every accepted
// spelling, every error class with its message, ranges, choices, 'auto',
// flags, repeatable options, help output and did-you-mean suggestions.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/options.h"

static const char *const method_choices[] = {"simclr", "dino", NULL};

// Values the test parser fills, the table pointing at them and the last error.
typedef struct Fixture {
    const char *data;
    int batch_size;
    int num_workers;
    double lr;
    double scale;
    int method;
    int verbose;
    int seed;
    const char *out;
    StringList method_args;
    OptionSpec specs[16];
    OptionParser parser;
    ErrorMessage err;
    int result;
} Fixture;

static int fixture_setup(void **state) {
    Fixture *f = calloc(1, sizeof *f);
    if (!f) return -1;
    f->batch_size = 256;
    f->num_workers = -1;
    f->lr = 0.5;
    f->scale = 0.25;
    f->out = "out";
    f->method_args.items[0] = "default=1";
    f->method_args.count = 1;
    int n = 0;
    f->specs[n++] = (OptionSpec){.name = "data", .type = OPTION_STRING, .value = &f->data,
                                 .metavar = "DIR", .help = "folder of images", .required = 1};
    f->specs[n++] = (OptionSpec){.name = "batch-size", .type = OPTION_INT,
                                 .value = &f->batch_size, .help = "images per batch",
                                 .min = 1, .max = 65536};
    f->specs[n++] = (OptionSpec){.name = "num-workers", .type = OPTION_INT,
                                 .value = &f->num_workers, .help = "decode threads",
                                 .min = 0, .max = 1024, .allow_auto = 1};
    f->specs[n++] = (OptionSpec){.name = "lr", .type = OPTION_FLOAT, .value = &f->lr,
                                 .help = "learning rate", .min = 0, .max = INFINITY};
    f->specs[n++] = (OptionSpec){.name = "scale", .type = OPTION_FLOAT, .value = &f->scale,
                                 .help = "a scale", .min = -INFINITY, .max = 1};
    f->specs[n++] = (OptionSpec){.name = "method", .type = OPTION_CHOICE, .value = &f->method,
                                 .help = "SSL method", .choices = method_choices};
    f->specs[n++] = (OptionSpec){.name = "verbose", .type = OPTION_FLAG, .value = &f->verbose,
                                 .help = "print more"};
    f->specs[n++] = (OptionSpec){.name = "seed", .type = OPTION_INT, .value = &f->seed,
                                 .help = "random seed"};
    f->specs[n++] = (OptionSpec){.name = "out", .type = OPTION_STRING, .value = &f->out,
                                 .metavar = "DIR", .help = "output folder"};
    f->specs[n++] = (OptionSpec){.name = "method-arg", .type = OPTION_STRING,
                                 .value = &f->method_args, .metavar = "KEY=VALUE",
                                 .help = "method setting", .repeatable = 1};
    f->parser = (OptionParser){.program = "lightly-train-c bench-data",
                               .summary = "Runs the input pipeline alone.",
                               .specs = f->specs,
                               .count = n};
    *state = f;
    return 0;
}

static int fixture_teardown(void **state) {
    free(*state);
    return 0;
}

// Parses the NULL-terminated words after the sub-command name "bench-data";
// help output, if any, is discarded.
static int parse_words(Fixture *f, const char *const *words) {
    char *argv[64];
    int argc = 0;
    argv[argc++] = "bench-data";
    for (int i = 0; words[i]; i++) argv[argc++] = (char *)words[i];
    FILE *sink = fopen("/dev/null", "w");
    assert_non_null(sink);
    memset(&f->err, 0, sizeof f->err);
    f->result = options_parse(&f->parser, argc, argv, sink, &f->err);
    fclose(sink);
    return f->result;
}

#define PARSE(f, ...) parse_words((f), (const char *const[]){__VA_ARGS__, NULL})

// Expects the parse to fail with a message containing fragment.
#define ASSERT_PARSE_ERROR(f, fragment, ...)                      \
    do {                                                          \
        assert_int_equal(PARSE((f), __VA_ARGS__), -1);            \
        if (!strstr((f)->err.text, (fragment)))                   \
            fail_msg("message '%s' lacks '%s'", (f)->err.text, (fragment)); \
    } while (0)

// ---- spellings ---------------------------------------------------------------

static void test_defaults_kept(void **state) {
    Fixture *f = *state;
    assert_int_equal(PARSE(f, "--data", "images"), 0);
    assert_string_equal(f->data, "images");
    assert_int_equal(f->batch_size, 256);
    assert_int_equal(f->num_workers, -1);
    assert_true(f->lr == 0.5);  // exact: untouched default
    assert_int_equal(f->method, 0);
    assert_int_equal(f->verbose, 0);
    assert_string_equal(f->out, "out");
    assert_int_equal(f->method_args.count, 1);
    assert_string_equal(f->method_args.items[0], "default=1");
}

static void test_every_spelling(void **state) {
    const char *const spellings[][2] = {
        {"--batch-size", "64"}, {"--batch-size=64", NULL}, {"batch-size=64", NULL},
        {"batch_size=64", NULL}, {"--batch_size=64", NULL}, {"--batch_size", "64"},
    };
    for (size_t i = 0; i < sizeof spellings / sizeof spellings[0]; i++) {
        Fixture *f = NULL;
        assert_int_equal(fixture_setup((void **)&f), 0);
        const char *words[] = {"data=images", spellings[i][0], spellings[i][1], NULL};
        if (parse_words(f, words) != 0) fail_msg("%s: %s", spellings[i][0], f->err.text);
        assert_int_equal(f->batch_size, 64);
        assert_string_equal(f->data, "images");
        free(f);
    }
    (void)state;
}

static void test_mixed_spellings_in_one_line(void **state) {
    Fixture *f = *state;
    assert_int_equal(PARSE(f, "data=imgs", "--lr", "0.1", "num_workers=3", "--method=dino",
                           "verbose=true", "--seed", "-3", "out=runs/a"),
                     0);
    assert_string_equal(f->data, "imgs");
    assert_true(f->lr == 0.1);  // exact: strtod("0.1") is the same double as 0.1
    assert_int_equal(f->num_workers, 3);
    assert_int_equal(f->method, 1);
    assert_int_equal(f->verbose, 1);
    assert_int_equal(f->seed, -3);
    assert_string_equal(f->out, "runs/a");
}

static void test_value_containing_equals(void **state) {
    Fixture *f = *state;
    assert_int_equal(PARSE(f, "--data=a=b", "--method-arg=temperature=0.1", "method_arg=x==y",
                           "--method-arg", "k=v", "--out=--odd"),
                     0);
    assert_string_equal(f->data, "a=b");
    assert_int_equal(f->method_args.count, 3);
    assert_string_equal(f->method_args.items[0], "temperature=0.1");
    assert_string_equal(f->method_args.items[1], "x==y");
    assert_string_equal(f->method_args.items[2], "k=v");
    assert_string_equal(f->out, "--odd");
}

// ---- flags ---------------------------------------------------------------------

static void test_flag_spellings(void **state) {
    const struct {
        const char *word;
        int start, expected;
    } cases[] = {
        {"--verbose", 0, 1},      {"--verbose=true", 0, 1}, {"verbose=1", 0, 1},
        {"verbose=TRUE", 0, 1},   {"verbose=false", 1, 0},  {"--verbose=0", 1, 0},
        {"verbose=False", 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Fixture *f = NULL;
        assert_int_equal(fixture_setup((void **)&f), 0);
        f->verbose = cases[i].start;
        const char *words[] = {cases[i].word, "--data", "d", NULL};
        if (parse_words(f, words) != 0) fail_msg("%s: %s", cases[i].word, f->err.text);
        if (f->verbose != cases[i].expected) fail_msg("%s gave %d", cases[i].word, f->verbose);
        free(f);
    }
    (void)state;
}

static void test_flag_does_not_take_next_word(void **state) {
    Fixture *f = *state;
    assert_int_equal(PARSE(f, "--verbose", "--data", "d"), 0);
    assert_int_equal(f->verbose, 1);
    assert_string_equal(f->data, "d");
    ASSERT_PARSE_ERROR(f, "unexpected argument 'true'", "--data", "d", "--verbose", "true");
}

static void test_flag_bad_value(void **state) {
    Fixture *f = *state;
    ASSERT_PARSE_ERROR(f, "--verbose: expected true or false, got 'maybe'", "--data", "d",
                       "--verbose=maybe");
    ASSERT_PARSE_ERROR(f, "--verbose: expected true or false, got 'yes'", "--data", "d",
                       "verbose=yes");
}

// ---- integers ------------------------------------------------------------------

static void test_int_not_a_number(void **state) {
    Fixture *f = *state;
    ASSERT_PARSE_ERROR(f, "--batch-size: expected an integer, got 'abc'", "--data", "d",
                       "--batch-size", "abc");
    ASSERT_PARSE_ERROR(f, "--batch-size: expected an integer, got '12abc'", "--data", "d",
                       "batch_size=12abc");
    ASSERT_PARSE_ERROR(f, "--batch-size: expected an integer, got '1.5'", "--data", "d",
                       "--batch-size=1.5");
    ASSERT_PARSE_ERROR(f, "--batch-size: expected an integer, got ' 12'", "--data", "d",
                       "--batch-size", " 12");
    ASSERT_PARSE_ERROR(f, "--seed: expected an integer, got '0x10'", "--data", "d", "--seed",
                       "0x10");
}

static void test_int_overflow(void **state) {
    Fixture *f = *state;
    // Beyond long long: strtoll reports ERANGE.
    ASSERT_PARSE_ERROR(f, "--seed: 99999999999999999999999 is too large for an integer",
                       "--data", "d", "--seed", "99999999999999999999999");
    // Fits a long long but not an int.
    ASSERT_PARSE_ERROR(f, "--seed: 4294967296 is too large for an integer", "--data", "d",
                       "--seed", "4294967296");
    ASSERT_PARSE_ERROR(f, "--seed: -2147483649 is too large for an integer", "--data", "d",
                       "--seed", "-2147483649");
    assert_int_equal(PARSE(f, "--data", "d", "--seed", "-2147483648"), 0);
    assert_int_equal(f->seed, -2147483647 - 1);
}

static void test_int_range(void **state) {
    Fixture *f = *state;
    ASSERT_PARSE_ERROR(f, "--batch-size: must be between 1 and 65536, got 0", "--data", "d",
                       "--batch-size", "0");
    ASSERT_PARSE_ERROR(f, "--batch-size: must be between 1 and 65536, got 65537", "--data",
                       "d", "--batch-size", "65537");
    ASSERT_PARSE_ERROR(f, "--batch-size: must be between 1 and 65536, got -5", "--data", "d",
                       "--batch-size", "-5");
    assert_int_equal(PARSE(f, "--data", "d", "--batch-size", "1"), 0);
    assert_int_equal(f->batch_size, 1);
    assert_int_equal(PARSE(f, "--data", "d", "--batch-size", "65536"), 0);
    assert_int_equal(f->batch_size, 65536);
}

static void test_int_auto(void **state) {
    Fixture *f = *state;
    f->num_workers = 7;
    assert_int_equal(PARSE(f, "--data", "d", "--num-workers", "auto"), 0);
    assert_int_equal(f->num_workers, -1);
    assert_int_equal(PARSE(f, "--data", "d", "num_workers=4"), 0);
    assert_int_equal(f->num_workers, 4);
    // 'auto' bypasses the range, but a literal -1 does not.
    ASSERT_PARSE_ERROR(f, "--num-workers: must be between 0 and 1024, got -1", "--data", "d",
                       "--num-workers", "-1");
    ASSERT_PARSE_ERROR(f, "--num-workers: expected an integer or 'auto', got 'Auto'", "--data",
                       "d", "--num-workers=Auto");
    ASSERT_PARSE_ERROR(f, "--batch-size: expected an integer, got 'auto'", "--data", "d",
                       "--batch-size", "auto");
}

// ---- floats ----------------------------------------------------------------------

static void test_float_values(void **state) {
    Fixture *f = *state;
    assert_int_equal(PARSE(f, "--data", "d", "lr=1e-3", "--scale", "-2.5"), 0);
    assert_true(f->lr == 1e-3);    // exact: same decimal text as the literal
    assert_true(f->scale == -2.5); // exact: representable
    assert_int_equal(PARSE(f, "--data", "d", "--lr", "0"), 0);
    assert_true(f->lr == 0.0);  // exact: the lower bound itself is allowed
}

static void test_float_errors(void **state) {
    Fixture *f = *state;
    ASSERT_PARSE_ERROR(f, "--lr: expected a decimal number, got 'abc'", "--data", "d", "--lr",
                       "abc");
    ASSERT_PARSE_ERROR(f, "--lr: expected a decimal number, got '0.1x'", "--data", "d",
                       "lr=0.1x");
    ASSERT_PARSE_ERROR(f, "--lr: expected a decimal number, got 'inf'", "--data", "d", "--lr",
                       "inf");
    ASSERT_PARSE_ERROR(f, "--lr: expected a decimal number, got 'nan'", "--data", "d", "--lr",
                       "nan");
    // Not hexadecimal (strtod reads 0x10 as 16), nor blanks around the number.
    ASSERT_PARSE_ERROR(f, "--lr: expected a decimal number, got '0x10'", "--data", "d", "--lr",
                       "0x10");
    ASSERT_PARSE_ERROR(f, "--lr: expected a decimal number, got ' 0.1'", "--data", "d", "--lr",
                       " 0.1");
    ASSERT_PARSE_ERROR(f, "--lr: expected a decimal number, got '1e'", "--data", "d", "--lr",
                       "1e");
    ASSERT_PARSE_ERROR(f, "--lr: expected a finite number, got '1e999'", "--data", "d", "--lr",
                       "1e999");
    ASSERT_PARSE_ERROR(f, "--lr: must be at least 0, got -0.5", "--data", "d", "--lr", "-0.5");
    ASSERT_PARSE_ERROR(f, "--scale: must be at most 1, got 1.5", "--data", "d", "--scale",
                       "1.5");
}

// 'auto' on a float option stores -1; a typed negative value, -1 included,
// stays an error (the --lr case: -0.5 must not silently mean "the default").
static void test_float_auto(void **state) {
    Fixture *f = *state;
    f->specs[3].allow_auto = 1;  // --lr, range [0, inf)
    assert_int_equal(PARSE(f, "--data", "d", "--lr", "auto"), 0);
    assert_true(f->lr == -1.0);
    assert_int_equal(PARSE(f, "--data", "d", "lr=0.25"), 0);
    assert_true(f->lr == 0.25);
    ASSERT_PARSE_ERROR(f, "--lr: must be at least 0, got -1", "--data", "d", "--lr", "-1");
    ASSERT_PARSE_ERROR(f, "--lr: must be at least 0, got -0.5", "--data", "d", "--lr", "-0.5");
    ASSERT_PARSE_ERROR(f, "--lr: expected a decimal number or 'auto', got 'Auto'", "--data", "d",
                       "--lr", "Auto");
    // -1 inside the range would make 'auto' and a typed -1 the same value.
    f->specs[4].allow_auto = 1;  // --scale, range (-inf, 1]
    ASSERT_PARSE_ERROR(f, "option table: --scale stores 'auto' as -1, inside its range",
                       "--data", "d");
}

// ---- choices -------------------------------------------------------------------

static void test_choice(void **state) {
    Fixture *f = *state;
    assert_int_equal(PARSE(f, "--data", "d", "--method", "dino"), 0);
    assert_int_equal(f->method, 1);
    assert_int_equal(PARSE(f, "--data", "d", "method=simclr"), 0);
    assert_int_equal(f->method, 0);
    ASSERT_PARSE_ERROR(f, "--method: expected one of simclr, dino, got 'foo'", "--data", "d",
                       "method=foo");
    ASSERT_PARSE_ERROR(f, "--method: expected one of simclr, dino, got 'DINO'", "--data", "d",
                       "--method", "DINO");
}

// ---- repeatable ------------------------------------------------------------------

static void test_repeatable_replaces_default(void **state) {
    Fixture *f = *state;
    assert_int_equal(PARSE(f, "--data", "d", "--method-arg", "a=1", "method_arg=b=2"), 0);
    assert_int_equal(f->method_args.count, 2);
    assert_string_equal(f->method_args.items[0], "a=1");
    assert_string_equal(f->method_args.items[1], "b=2");
}

static void test_repeatable_limit(void **state) {
    Fixture *f = *state;
    const char *words[2 * OPTIONS_MAX_REPEATS + 8];
    int n = 0;
    words[n++] = "--data";
    words[n++] = "d";
    for (int i = 0; i < OPTIONS_MAX_REPEATS; i++) words[n++] = "--method-arg=k=v";
    words[n] = NULL;
    assert_int_equal(parse_words(f, words), 0);
    assert_int_equal(f->method_args.count, OPTIONS_MAX_REPEATS);
    words[n++] = "--method-arg=one-too-many";
    words[n] = NULL;
    assert_int_equal(parse_words(f, words), -1);
    assert_non_null(strstr(f->err.text, "--method-arg: given more than 32 times"));
}

static void test_given_twice(void **state) {
    Fixture *f = *state;
    ASSERT_PARSE_ERROR(f, "--batch-size given more than once", "--data", "d", "--batch-size",
                       "1", "--batch-size", "2");
    ASSERT_PARSE_ERROR(f, "--batch-size given more than once", "--data", "d", "batch_size=1",
                       "--batch-size=2");
    ASSERT_PARSE_ERROR(f, "--verbose given more than once", "--data", "d", "--verbose",
                       "verbose=false");
}

// ---- missing, empty, required ------------------------------------------------------

static void test_missing_value(void **state) {
    Fixture *f = *state;
    ASSERT_PARSE_ERROR(f, "--data needs a value", "--data");
    ASSERT_PARSE_ERROR(f, "--data needs a value", "--data", "--verbose");
    ASSERT_PARSE_ERROR(f, "--lr needs a value", "--data", "d", "--lr");
}

static void test_empty_value(void **state) {
    Fixture *f = *state;
    ASSERT_PARSE_ERROR(f, "--data needs a value, got an empty one", "--data=");
    ASSERT_PARSE_ERROR(f, "--data needs a value, got an empty one", "data=");
    ASSERT_PARSE_ERROR(f, "--data needs a value, got an empty one", "--data", "");
    ASSERT_PARSE_ERROR(f, "--batch-size needs a value, got an empty one", "--data", "d",
                       "batch_size=");
    ASSERT_PARSE_ERROR(f, "--verbose needs a value, got an empty one", "--data", "d",
                       "--verbose=");
}

static void test_required(void **state) {
    Fixture *f = *state;
    ASSERT_PARSE_ERROR(f, "--data is required", "--batch-size", "4");
    const char *nothing[] = {NULL};
    assert_int_equal(parse_words(f, nothing), -1);
    assert_string_equal(f->err.text, "--data is required");
}

// ---- unknown options and positionals -------------------------------------------------

static void test_unknown_with_suggestion(void **state) {
    Fixture *f = *state;
    ASSERT_PARSE_ERROR(f, "unknown option '--bach-size' (did you mean --batch-size?)",
                       "--data", "d", "--bach-size", "3");
    ASSERT_PARSE_ERROR(f, "unknown option 'bach_size' (did you mean --batch-size?)", "--data",
                       "d", "bach_size=3");
    ASSERT_PARSE_ERROR(f, "unknown option '--num-worker' (did you mean --num-workers?)",
                       "--data", "d", "--num-worker=2");
    ASSERT_PARSE_ERROR(f, "unknown option '-batch-size' (did you mean --batch-size?)",
                       "--data", "d", "-batch-size", "3");
    ASSERT_PARSE_ERROR(f, "unknown option '--lx' (did you mean --lr?)", "--data", "d", "--lx",
                       "1");
}

static void test_unknown_without_suggestion(void **state) {
    Fixture *f = *state;
    ASSERT_PARSE_ERROR(f, "unknown option '--zzz' (see --help)", "--data", "d", "--zzz");
    // 3 edits from "verbose" is past the limit for a 7-letter name (2).
    ASSERT_PARSE_ERROR(f, "unknown option '--verb' (see --help)", "--data", "d", "--verb");
    ASSERT_PARSE_ERROR(f, "unknown option 'epochs' (see --help)", "--data", "d", "epochs=3");
    ASSERT_PARSE_ERROR(f, "unknown option '-x' (see --help)", "--data", "d", "-x");
}

static void test_positional_rejected(void **state) {
    Fixture *f = *state;
    ASSERT_PARSE_ERROR(f, "unexpected argument 'images'", "images");
    ASSERT_PARSE_ERROR(f, "unexpected argument '-'", "--data", "d", "-");
    ASSERT_PARSE_ERROR(f, "unexpected argument '--'", "--data", "d", "--");
    ASSERT_PARSE_ERROR(f, "unexpected argument '=x'", "--data", "d", "=x");
}

// ---- help ------------------------------------------------------------------------------

// Runs the parser with help output captured into a malloc'ed string.
static char *parse_capturing_help(Fixture *f, const char *const *words) {
    char *argv[16];
    int argc = 0;
    argv[argc++] = "bench-data";
    for (int i = 0; words[i]; i++) argv[argc++] = (char *)words[i];
    char *text = NULL;
    size_t length = 0;
    FILE *stream = open_memstream(&text, &length);
    assert_non_null(stream);
    f->result = options_parse(&f->parser, argc, argv, stream, &f->err);
    fclose(stream);
    return text;
}

static void test_help_lists_every_option(void **state) {
    Fixture *f = *state;
    const char *words[] = {"--help", NULL};
    char *text = parse_capturing_help(f, words);
    assert_int_equal(f->result, 1);
    assert_non_null(strstr(text, "usage: lightly-train-c bench-data --data DIR [options]"));
    assert_non_null(strstr(text, "Runs the input pipeline alone."));
    for (int i = 0; i < f->parser.count; i++) {
        char option[64];
        snprintf(option, sizeof option, "  --%s ", f->specs[i].name);
        if (!strstr(text, option)) fail_msg("help lacks '%s':\n%s", option, text);
    }
    assert_non_null(strstr(text, "-h, --help"));
    assert_non_null(strstr(text, "--batch-size N"));
    assert_non_null(strstr(text, "images per batch (default: 256)"));
    assert_non_null(strstr(text, "decode threads (default: auto)"));
    assert_non_null(strstr(text, "folder of images (required)"));
    assert_non_null(strstr(text, "--method {simclr,dino}"));
    assert_non_null(strstr(text, "SSL method (default: simclr)"));
    assert_non_null(strstr(text, "learning rate (default: 0.5)"));
    assert_non_null(strstr(text, "method setting (repeatable) (default: default=1)"));
    assert_non_null(strstr(text, "output folder (default: out)"));
    assert_null(strstr(text, "print more ("));  // a flag that is off shows no default
    free(text);
}

static void test_help_lists_choices_behind_metavar(void **state) {
    Fixture *f = *state;
    f->specs[5].metavar = "NAME";  // the method row: a metavar hides {simclr,dino}
    f->lr = 1e-4;
    const char *words[] = {"--help", NULL};
    char *text = parse_capturing_help(f, words);
    assert_int_equal(f->result, 1);
    assert_non_null(strstr(text, "--method NAME"));
    assert_non_null(strstr(text, "SSL method (one of: simclr, dino) (default: simclr)"));
    assert_non_null(strstr(text, "learning rate (default: 0.0001)"));
    free(text);
}

// A long list (the models: 27 names) is listed whole, in the error and in
// --help (cut at 256 and 200 bytes before: the last names were missing, one
// cut in the middle).
static void test_long_choice_list(void **state) {
    Fixture *f = *state;
    static const char *const many[] = {
        "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "vit_t14", "vit_t16",
        "vit_s14", "vit_s16", "vit_b14", "vit_b16", "vit_l14", "vit_l16", "vit_g14",
        "vit_s14_reg4", "vit_b14_reg4", "vit_l14_reg4", "vit_g14_reg4", "dinov3/vitt16",
        "dinov3/vitt16plus", "dinov3/vits16", "dinov3/vits16plus", "dinov3/vitb16",
        "dinov3/vitl16", "dinov3/vitl16plus", "dinov3/vith16plus", NULL};
    f->specs[5].choices = many;
    f->specs[5].metavar = "NAME";
    ASSERT_PARSE_ERROR(f, ", dinov3/vitl16plus, dinov3/vith16plus, got 'x'", "--data", "d",
                       "--method", "x");
    const char *words[] = {"--help", NULL};
    char *text = parse_capturing_help(f, words);
    if (!strstr(text, ", dinov3/vitl16plus, dinov3/vith16plus)")) fail_msg("%s", text);
    free(text);
}

// A list longer than a one-line message holds (the 46 model names): its
// first and last names and the count, not a list cut in the middle.
static void test_longer_choice_list_abbreviated(void **state) {
    Fixture *f = *state;
    static char names[60][24];  // room for any int: gcc -O1 warns otherwise
    static const char *many[61];
    for (int i = 0; i < 60; i++) {
        snprintf(names[i], sizeof names[i], "model_%02d", i);
        many[i] = names[i];
    }
    many[60] = NULL;
    f->specs[5].choices = many;
    ASSERT_PARSE_ERROR(f, "expected one of model_00, model_01, model_02, ..., model_58, model_59 "
                          "(all 60: --help), got 'x'",
                       "--data", "d", "--method", "x");
}

// LightlyTrain's names: a value alias stores its choice, an option alias
// sets the option (in both spellings); an alias naming no choice is a table
// mistake.
static void test_aliases(void **state) {
    Fixture *f = *state;
    static const char *const method_aliases[] = {"lightly/dino=dino", NULL};
    f->specs[5].value_aliases = method_aliases;
    f->specs[1].alias = "images-per-batch";
    assert_int_equal(PARSE(f, "--data", "d", "method=lightly/dino", "images_per_batch=8"), 0);
    assert_int_equal(f->method, 1);
    assert_int_equal(f->batch_size, 8);
    assert_int_equal(PARSE(f, "--data", "d", "--images-per-batch", "16"), 0);
    assert_int_equal(f->batch_size, 16);
    ASSERT_PARSE_ERROR(f, "got 'lightly/din'", "--data", "d", "--method", "lightly/din");
    ASSERT_PARSE_ERROR(f, "--batch-size given more than once", "--data", "d", "--batch-size",
                       "4", "images_per_batch=8");
    static const char *const broken[] = {"x=nothing", NULL};
    f->specs[5].value_aliases = broken;
    ASSERT_PARSE_ERROR(f, "value alias 'x=nothing' names no choice", "--data", "d");
}

// Another tool's value with no counterpart: refused saying why, in one
// line naming the option and the word; a refusal without its reason is a
// table mistake.
static void test_value_refusals(void **state) {
    Fixture *f = *state;
    static const char *const refusals[] = {"moco=no memory bank here: dino or simclr", NULL};
    f->specs[5].value_refusals = refusals;
    ASSERT_PARSE_ERROR(f, "--method moco: no memory bank here: dino or simclr", "--data", "d",
                       "method=moco");
    ASSERT_PARSE_ERROR(f, "got 'mocov2'", "--data", "d", "--method", "mocov2");
    assert_int_equal(PARSE(f, "--data", "d", "--method", "dino"), 0);
    static const char *const broken[] = {"moco", NULL};
    f->specs[5].value_refusals = broken;
    ASSERT_PARSE_ERROR(f, "refusal 'moco' is no WORD=WHY", "--data", "d");
}

// A word that is no choice nor alias is tried once more in the spelling the
// table's hook gives (LightlyTrain's model names); `given` keeps the word as
// typed, whichever way it matched.
static int upper_canonical(const char *word, char *buffer, size_t size) {
    if (strncmp(word, "LT:", 3) != 0) return 0;
    snprintf(buffer, size, "%s", word + 3);
    return 1;
}

static void test_canonical_spelling_and_given(void **state) {
    Fixture *f = *state;
    const char *given = NULL;
    static const char *const method_aliases[] = {"lightly/dino=dino", NULL};
    f->specs[5].value_aliases = method_aliases;
    f->specs[5].value_canonical = upper_canonical;
    f->specs[5].given = &given;
    assert_int_equal(PARSE(f, "--data", "d", "--method", "LT:dino"), 0);
    assert_int_equal(f->method, 1);
    assert_string_equal(given, "LT:dino");
    assert_int_equal(PARSE(f, "--data", "d", "method=simclr"), 0);
    assert_int_equal(f->method, 0);
    assert_string_equal(given, "simclr");
    assert_int_equal(PARSE(f, "--data", "d", "method=lightly/dino"), 0);
    assert_string_equal(given, "lightly/dino");
    // The hook's spelling must still be a choice; the message quotes the word typed.
    ASSERT_PARSE_ERROR(f, "expected one of simclr, dino, got 'LT:byol'", "--data", "d",
                       "--method", "LT:byol");
    ASSERT_PARSE_ERROR(f, "got 'byol'", "--data", "d", "--method", "byol");
}

static void test_help_is_aligned(void **state) {
    Fixture *f = *state;
    const char *words[] = {"-h", NULL};
    char *text = parse_capturing_help(f, words);
    assert_int_equal(f->result, 1);
    // Every option's help text starts in the same column.
    const char *helps[] = {"folder of images", "images per batch", "SSL method",
                           "print more", "method setting", "show this help"};
    long column = -1;
    for (size_t i = 0; i < sizeof helps / sizeof helps[0]; i++) {
        const char *at = strstr(text, helps[i]);
        assert_non_null(at);
        const char *line = at;
        while (line > text && line[-1] != '\n') line--;
        if (column < 0) column = at - line;
        if (at - line != column) fail_msg("'%s' at column %ld, not %ld", helps[i],
                                          (long)(at - line), column);
    }
    free(text);
}

static void test_help_anywhere_wins(void **state) {
    Fixture *f = *state;
    // Help is honoured even after an unknown option and without --data.
    assert_int_equal(PARSE(f, "--bogus", "-h"), 1);
    assert_int_equal(PARSE(f, "batch_size=0", "--help", "--lr"), 1);
}

// ---- option table mistakes ----------------------------------------------------------

static void test_table_mistakes(void **state) {
    Fixture *f = *state;
    f->specs[1].name = "data";
    ASSERT_PARSE_ERROR(f, "option table: --data is defined twice", "--data", "d");
    f->specs[1].name = "batch-size";
    f->specs[5].choices = NULL;
    ASSERT_PARSE_ERROR(f, "option table: --method has no choices", "--data", "d");
    f->specs[5].choices = method_choices;
    f->specs[1].repeatable = 1;
    ASSERT_PARSE_ERROR(f, "option table: --batch-size is repeatable but not a string", "--data",
                       "d");
    f->specs[1].repeatable = 0;
    assert_int_equal(PARSE(f, "--data", "d"), 0);
}

#define FIXTURE_TEST(name) cmocka_unit_test_setup_teardown(name, fixture_setup, fixture_teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        FIXTURE_TEST(test_defaults_kept),
        FIXTURE_TEST(test_every_spelling),
        FIXTURE_TEST(test_mixed_spellings_in_one_line),
        FIXTURE_TEST(test_value_containing_equals),
        FIXTURE_TEST(test_flag_spellings),
        FIXTURE_TEST(test_flag_does_not_take_next_word),
        FIXTURE_TEST(test_flag_bad_value),
        FIXTURE_TEST(test_int_not_a_number),
        FIXTURE_TEST(test_int_overflow),
        FIXTURE_TEST(test_int_range),
        FIXTURE_TEST(test_int_auto),
        FIXTURE_TEST(test_float_values),
        FIXTURE_TEST(test_float_errors),
        FIXTURE_TEST(test_float_auto),
        FIXTURE_TEST(test_choice),
        FIXTURE_TEST(test_repeatable_replaces_default),
        FIXTURE_TEST(test_repeatable_limit),
        FIXTURE_TEST(test_given_twice),
        FIXTURE_TEST(test_missing_value),
        FIXTURE_TEST(test_empty_value),
        FIXTURE_TEST(test_required),
        FIXTURE_TEST(test_unknown_with_suggestion),
        FIXTURE_TEST(test_unknown_without_suggestion),
        FIXTURE_TEST(test_positional_rejected),
        FIXTURE_TEST(test_help_lists_every_option),
        FIXTURE_TEST(test_help_lists_choices_behind_metavar),
        FIXTURE_TEST(test_long_choice_list),
        FIXTURE_TEST(test_longer_choice_list_abbreviated),
        FIXTURE_TEST(test_aliases),
        FIXTURE_TEST(test_value_refusals),
        FIXTURE_TEST(test_canonical_spelling_and_given),
        FIXTURE_TEST(test_help_is_aligned),
        FIXTURE_TEST(test_help_anywhere_wins),
        FIXTURE_TEST(test_table_mistakes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
