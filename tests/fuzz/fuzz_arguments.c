// libFuzzer target: the parsers of LightlyTrain's spellings on the command
// line, on arbitrary words (the input split at newlines): its nested
// arguments (cli/lightly_args.h), transform_args for a view-per-scope
// method and for one without (cli/transform_args.h), the --loggers and
// --callbacks entries (cli/loggers.h, cli/callbacks.h), --max-time's entries
// and each word as --limit-train-batches (cli/run_limits.h), and every method's
// --method-arg entries (ssl_methods/method.h: method_args_check). A command line is
// not trusted: each parser must read in bounds and either take the words
// or refuse them with one line (no newline) that says something.
#include <stdlib.h>
#include <string.h>

#include "cli/callbacks.h"
#include "cli/lightly_args.h"
#include "cli/loggers.h"
#include "cli/run_limits.h"
#include "cli/transform_args.h"
#include "ssl_methods/method.h"

// The error of a refusal: one non-empty line.
static void expect_one_line(const ErrorMessage *err) {
    if (!err->text[0] || strchr(err->text, '\n')) abort();
}

// Each emitted option is a string of the form the option table reads.
static int take_option(void *context, const char *argument, ErrorMessage *err) {
    (void)err;
    if (!argument || !argument[0]) abort();
    *(int *)context += 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char *argv[OPTIONS_MAX_REPEATS + 2] = {"train"};
    int argc = 1;
    for (char *word = text; word && argc < OPTIONS_MAX_REPEATS + 1;) {
        char *end = strchr(word, '\n');
        if (end) *end = '\0';
        argv[argc++] = word;
        word = end ? end + 1 : NULL;
    }
    argv[argc] = NULL;

    ErrorMessage err = {{0}};
    LightlyArgs translated = {0};
    if (lightly_args_translate(argc, argv, &translated, &err) == 0) {
        if (translated.argc < 1 || translated.argv[translated.argc]) abort();
        for (int i = 0; i < translated.argc; i++)
            if (!translated.argv[i]) abort();
    } else {
        expect_one_line(&err);
    }
    lightly_args_free(&translated);

    static const char *const methods[] = {"dino", "simclr"};
    for (int m = 0; m < 2; m++) {
        int emitted = 0;
        memset(&err, 0, sizeof err);
        if (transform_args_translate((const char *const *)argv + 1, argc - 1, methods[m],
                                     take_option, &emitted, &err) != 0)
            expect_one_line(&err);
    }

    StringList entries = {.count = argc - 1};
    for (int i = 1; i < argc; i++) entries.items[i - 1] = argv[i];
    LoggerSettings loggers;
    memset(&err, 0, sizeof err);
    if (loggers_parse(&entries, &loggers, &err) != 0) expect_one_line(&err);
    CallbackSettings callbacks;
    memset(&err, 0, sizeof err);
    if (callbacks_parse(&entries, &callbacks, &err) != 0) expect_one_line(&err);
    double seconds = 0;
    memset(&err, 0, sizeof err);
    if (max_time_parse(&entries, &seconds, &err) != 0) expect_one_line(&err);
    else if (!(seconds == -1 || (seconds >= 0 && seconds <= 1e15))) abort();
    for (int i = 1; i < argc; i++) {
        BatchLimit limit;
        memset(&err, 0, sizeof err);
        if (batch_limit_parse(argv[i], &limit, &err) != 0) {
            expect_one_line(&err);
            continue;
        }
        const long batches = batch_limit_apply(&limit, 1000, &err);
        if (batches < 0) expect_one_line(&err);
        else if (batches < 1 || batches > 1000) abort();
    }
    MethodSetup setup = {.args = (const char *const *)argv + 1, .arg_count = argc - 1};
    for (int kind = 0; kind < METHOD_KIND_COUNT; kind++) {
        memset(&err, 0, sizeof err);
        if (method_args_check(&setup, method_arg_specs((MethodKind)kind), &err) != 0)
            expect_one_line(&err);
    }
    free(text);
    return 0;
}
