// LightlyTrain's nested command-line arguments as train's options (see
// lightly_args.h).
#include "cli/lightly_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// What an argument NAME.KEY becomes: the option it sets, or nothing (NULL)
// when only `keep` is taken (a value the program has anyway) or any value is
// ignored (`keep` NULL too).
typedef struct Translation {
    const char *key;     // "optim_args.lr"
    const char *option;  // "lr", or NULL: dropped
    const char *keep;    // dropped: the one value taken ("true"), NULL for any
} Translation;

static const Translation translations[] = {
    {"optim_args.lr", "lr", NULL},
    {"optim_args.weight_decay", "weight-decay", NULL},
    {"trainer_args.max_epochs", "epochs", NULL},
    {"trainer_args.max_steps", "max-steps", NULL},
    {"trainer_args.log_every_n_steps", "log-every", NULL},
    {"trainer_args.accumulate_grad_batches", "accumulate-grad-batches", NULL},
    {"activation_checkpoint_args.enabled", "activation-checkpointing", NULL},
    {"activation_checkpoint_args.every_n_blocks", NULL, "1"},
    {"loader_args.batch_size", NULL, NULL},
    {"loader_args.num_workers", NULL, NULL},
    {"loader_args.shuffle", NULL, "true"},
    {"loader_args.drop_last", NULL, "true"},
};

// The argument groups and what each takes here, for the refusals.
static const char *const groups[][2] = {
    {"optim_args", "takes lr and weight_decay (the rest of each optimizer's settings are the "
                   "method's)"},
    {"trainer_args", "takes max_epochs, max_steps, log_every_n_steps and "
                     "accumulate_grad_batches (the rest is Lightning's machinery)"},
    {"activation_checkpoint_args", "takes enabled and every_n_blocks=1 (every block is "
                                   "recomputed)"},
    {"loader_args", "takes batch_size and num_workers (ignored, as LightlyTrain does), "
                    "shuffle=true and drop_last=true (what the loader does)"},
    {"transform_args", "is the Python API's (it maps it); on the command line "
                       "--transform [SCOPE.]KEY=VALUE and --image-size set the views "
                       "(docs/commands.md)"},
};

// text up to '=' with '-' read as '_' (LightlyTrain's names), into out.
static void argument_name(const char *text, char *out, size_t size) {
    size_t n = 0;
    for (; text[n] && text[n] != '=' && n + 1 < size; n++) out[n] = text[n] == '-' ? '_' : text[n];
    out[n] = '\0';
}

static int is_true(const char *value) {
    return !strcmp(value, "true") || !strcmp(value, "True") || !strcmp(value, "1");
}

// The translation of argument (its name in name), or NULL with err set when
// it belongs to a group but is none of its keys, or NULL and err untouched
// when it is no group's.
static const Translation *translation_of(const char *argument, const char *name,
                                         ErrorMessage *err) {
    for (size_t i = 0; i < sizeof translations / sizeof translations[0]; i++)
        if (strcmp(name, translations[i].key) == 0) return &translations[i];
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        const size_t length = strlen(groups[g][0]);
        if (strncmp(name, groups[g][0], length) == 0 && name[length] == '.') {
            error_set(err, "%.200s: LightlyTrain's %s here %s", argument, groups[g][0],
                      groups[g][1]);
            return NULL;
        }
    }
    return NULL;
}

int lightly_args_translate(int argc, char **argv, LightlyArgs *args, ErrorMessage *err) {
    memset(args, 0, sizeof *args);
    size_t bytes = 0;
    for (int i = 0; i < argc; i++) bytes += strlen(argv[i]) + 2;  // "--" and NUL at most
    args->argv = calloc((size_t)argc + 1, sizeof *args->argv);
    args->storage = malloc(bytes + 1);
    if (!args->argv || !args->storage) {
        lightly_args_free(args);
        return error_set(err, "out of memory");
    }
    char *next = args->storage;
    for (int i = 0; i < argc; i++) {
        const char *argument = argv[i], *bare = argument;
        while (*bare == '-') bare++;
        const char *equals = strchr(bare, '=');
        char name[128];
        argument_name(bare, name, sizeof name);
        err->text[0] = '\0';
        const Translation *t = i > 0 && strchr(name, '.') ? translation_of(argument, name, err)
                                                           : NULL;
        if (!t && err->text[0]) {
            lightly_args_free(args);
            return -1;
        }
        if (!t) {
            args->argv[args->argc++] = argv[i];
            continue;
        }
        if (!equals || !equals[1]) {
            lightly_args_free(args);
            return error_set(err, "%.200s: expected %s=VALUE", argument, t->key);
        }
        const char *value = equals + 1;
        if (!t->option) {  // dropped: any value, or the one the program has anyway
            if (t->keep && !(strcmp(t->keep, "true") == 0 ? is_true(value)
                                                           : strcmp(value, t->keep) == 0)) {
                lightly_args_free(args);
                return error_set(err, "%.200s: taken only as %s=%s (what the program does)",
                                 argument, t->key, t->keep);
            }
            continue;
        }
        const int written = sprintf(next, "%s=%s", t->option, value);
        args->argv[args->argc++] = next;
        next += written + 1;
    }
    return 0;
}

void lightly_args_free(LightlyArgs *args) {
    free(args->argv);
    free(args->storage);
    memset(args, 0, sizeof *args);
}
