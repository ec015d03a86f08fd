// LightlyTrain's nested command-line arguments as train's options (see
// lightly_args.h).
#include "cli/lightly_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/transform_args.h"
#include "util/number.h"

// What an argument NAME.KEY becomes: the option it sets, or nothing (NULL)
// when only `keep` is taken (a value the program has anyway) or any value is
// ignored (`keep` NULL too). A key ending in '.' is a prefix: NAME.KEY.UNIT=N
// sets the option to UNIT=N (a dict of Lightning's, such as max_time's).
typedef struct Translation {
    const char *key;     // "optim_args.lr"
    const char *option;  // "lr", or NULL: dropped
    const char *keep;    // dropped: the one value taken ("true"; "bool": any
                         // boolean; "number": any number), NULL for any
} Translation;

static const Translation translations[] = {
    {"optim_args.lr", "lr", NULL},
    {"optim_args.weight_decay", "weight-decay", NULL},
    {"trainer_args.max_epochs", "epochs", NULL},
    {"trainer_args.max_steps", "max-steps", NULL},
    {"trainer_args.log_every_n_steps", "log-every", NULL},
    {"trainer_args.accumulate_grad_batches", "accumulate-grad-batches", NULL},
    {"trainer_args.max_time", "max-time", NULL},
    {"trainer_args.max_time.", "max-time", NULL},
    {"trainer_args.limit_train_batches", "limit-train-batches", NULL},
    {"trainer_args.min_epochs", "min-epochs", NULL},
    {"trainer_args.fast_dev_run", "fast-dev-run", NULL},
    {"trainer_args.min_steps", "min-steps", NULL},
    {"trainer_args.gradient_clip_val", "gradient-clip-val", NULL},
    {"trainer_args.gradient_clip_algorithm", NULL, "norm"},
    {"trainer_args.enable_progress_bar", "progress-bar", NULL},
    // LightlyTrain sets these from its own parameters; trainer_args' win.
    {"trainer_args.precision", "precision", NULL},
    {"trainer_args.accelerator", "accelerator", NULL},
    {"trainer_args.devices", "devices", NULL},
    {"trainer_args.num_nodes", "num-nodes", NULL},
    {"trainer_args.strategy", "strategy", NULL},
    {"trainer_args.sync_batchnorm", "sync-batchnorm", NULL},
    // Taken at what they do here: runs are reproducible whatever
    // deterministic says (cuDNN's deterministic algorithms by default on
    // the GPU), cuDNN's algorithms are chosen by measuring them once
    // whatever benchmark says, and no model summary is printed.
    {"trainer_args.deterministic", NULL, "bool"},
    {"trainer_args.benchmark", NULL, "bool"},
    {"trainer_args.enable_model_summary", NULL, "bool"},
    // Validation: pretraining has no validation loop (nor has LightlyTrain's),
    // so Lightning's settings of it change nothing.
    {"trainer_args.check_val_every_n_epoch", NULL, "number"},
    {"trainer_args.val_check_interval", NULL, "number"},
    {"trainer_args.num_sanity_val_steps", NULL, "number"},
    {"trainer_args.limit_val_batches", NULL, "number"},
    {"activation_checkpoint_args.enabled", "activation-checkpointing", NULL},
    {"activation_checkpoint_args.every_n_blocks", "activation-checkpointing-every", NULL},
    {"loader_args.batch_size", NULL, NULL},
    {"loader_args.num_workers", NULL, NULL},
    {"loader_args.shuffle", NULL, "true"},
    {"loader_args.drop_last", NULL, "true"},
    // The worker processes live as long as the run, and on the GPU the
    // batches are staged in page-locked memory: whatever these say.
    {"loader_args.pin_memory", NULL, "bool"},
    {"loader_args.persistent_workers", NULL, "bool"},
};

// LightlyTrain's parameters whose default is None: NAME=None (or null), how
// its command line spells that default, is dropped.
static const char *const none_defaults[] = {
    "embed_dim",   "checkpoint",   "model_args", "method_args", "transform_args",
    "loader_args", "trainer_args", "optim_args", "loggers",     "callbacks",
};

static int is_none_text(const char *value) {
    return !strcmp(value, "None") || !strcmp(value, "null") || !strcmp(value, "none");
}

static int is_none_default(const char *name, const char *value) {
    if (!value || !is_none_text(value)) return 0;
    for (size_t i = 0; i < sizeof none_defaults / sizeof *none_defaults; i++)
        if (strcmp(name, none_defaults[i]) == 0) return 1;
    return 0;
}

// The argument groups and what each takes here, for the refusals.
static const char *const groups[][2] = {
    {"optim_args", "takes lr and weight_decay (the rest of each optimizer's settings are the "
                   "method's)"},
    {"trainer_args", "takes max_epochs, max_steps, max_time, min_epochs, min_steps, "
                     "fast_dev_run, limit_train_batches, log_every_n_steps, "
                     "accumulate_grad_batches, gradient_clip_val, "
                     "gradient_clip_algorithm=norm, precision, accelerator, devices, num_nodes, "
                     "strategy, sync_batchnorm, enable_progress_bar, deterministic, benchmark, "
                     "enable_model_summary and the validation settings (the rest is "
                     "Lightning's machinery)"},
    {"activation_checkpoint_args", "takes enabled and every_n_blocks (blocks 0, N, 2N, ... "
                                   "recomputed)"},
    {"loader_args", "takes batch_size and num_workers (ignored, as LightlyTrain does), "
                    "shuffle=true and drop_last=true (what the loader does), pin_memory and "
                    "persistent_workers (whatever they say: the workers persist, GPU batches "
                    "are pinned)"},
};

// An argument without its leading dashes (returned), and its name up to
// '=' with '-' read as '_' (LightlyTrain's names) into name.
static const char *argument_name(const char *argument, char *name, size_t size) {
    while (*argument == '-') argument++;
    size_t n = 0;
    for (; argument[n] && argument[n] != '=' && n + 1 < size; n++)
        name[n] = argument[n] == '-' ? '_' : argument[n];
    name[n] = '\0';
    return argument;
}

// The translation of argument (its name in name), or NULL with err set when
// it belongs to a group but is none of its keys, or NULL and err untouched
// when it is no group's.
static const Translation *translation_of(const char *argument, const char *name,
                                         ErrorMessage *err) {
    for (size_t i = 0; i < sizeof translations / sizeof translations[0]; i++) {
        const char *key = translations[i].key;
        const size_t length = strlen(key);
        if (key[length - 1] == '.' ? strncmp(name, key, length) == 0 && name[length]
                                   : strcmp(name, key) == 0)
            return &translations[i];
    }
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

// Appends argument to args->argv, growing it; the string is args' own.
static int append_owned(LightlyArgs *args, const char *argument, ErrorMessage *err) {
    if (args->argc + 1 >= args->capacity) {
        char **bigger = realloc(args->argv, (size_t)args->capacity * 2 * sizeof *bigger);
        char **owned = realloc(args->owned, (size_t)args->capacity * 2 * sizeof *owned);
        if (bigger) args->argv = bigger;
        if (owned) args->owned = owned;
        if (!bigger || !owned) return error_set(err, "out of memory");
        args->capacity *= 2;
    }
    char *copy = strdup(argument);
    if (!copy) return error_set(err, "out of memory");
    args->owned[args->owned_count++] = copy;
    args->argv[args->argc++] = copy;
    args->argv[args->argc] = NULL;
    return 0;
}

// The value of the option name ("method") in argv, in any of its spellings
// (--method X, --method=X, method=X), the last one given; NULL when absent.
static const char *option_value(int argc, char **argv, const char *name) {
    const char *value = NULL;
    const size_t length = strlen(name);
    for (int i = 1; i < argc; i++) {
        char given[128];
        const char *bare = argument_name(argv[i], given, sizeof given);
        if (strlen(given) != length || strncmp(given, name, length) != 0) continue;
        if (bare[length] == '=') value = bare + length + 1;
        else if (bare != argv[i] && i + 1 < argc) value = argv[i + 1];
    }
    return value;
}

// The method arg key=N given in argv (--method-arg key=N, method_args.key=N),
// the last one; NULL when absent.
static const char *method_arg_value(int argc, char **argv, const char *key) {
    const char *value = NULL;
    const size_t length = strlen(key);
    for (int i = 1; i < argc; i++) {
        char name[160];
        const char *bare = argument_name(argv[i], name, sizeof name);
        const char *entry = NULL;
        if (!strcmp(name, "method_arg") || !strcmp(name, "method_args"))
            entry = bare[strlen(name)] == '=' ? bare + strlen(name) + 1
                    : i + 1 < argc          ? argv[i + 1]
                                            : NULL;
        else if (!strncmp(name, "method_args.", 12) || !strncmp(name, "method_arg.", 11))
            entry = strchr(bare, '.') + 1;
        if (entry && !strncmp(entry, key, length) && entry[length] == '=')
            value = entry + length + 1;
    }
    return value;
}

typedef struct EmitContext {
    LightlyArgs *args;
    const char *paka_num_local;  // given as a method arg too, or NULL
} EmitContext;

// transform_args' options into argv; dinov31's paka_num_local given as a
// method arg too must be the same number (LightlyTrain's rule) and is kept once.
static int emit_option(void *context, const char *argument, ErrorMessage *err) {
    EmitContext *c = context;
    static const char paka[] = "method-arg=paka_num_local=";
    if (c->paka_num_local && !strncmp(argument, paka, sizeof paka - 1)) {
        if (atoi(c->paka_num_local) == atoi(argument + sizeof paka - 1) &&
            strspn(c->paka_num_local, "0123456789") == strlen(c->paka_num_local))
            return 0;
        return error_set(err, "paka_num_local: method_args has %s, transform_args %s: "
                              "LightlyTrain needs them equal", c->paka_num_local,
                         argument + sizeof paka - 1);
    }
    return append_owned(c->args, argument, err);
}

// "PATH=VALUE" of a transform_args.PATH=VALUE argument, PATH with '-' read
// as '_'; allocated.
static char *transform_entry(const char *bare) {
    const char *path = bare + strlen("transform_args.");
    char *entry = strdup(path);
    if (!entry) return NULL;
    for (char *c = entry; *c && *c != '='; c++)
        if (*c == '-') *c = '_';
    return entry;
}

int lightly_args_translate(int argc, char **argv, LightlyArgs *args, ErrorMessage *err) {
    memset(args, 0, sizeof *args);
    args->capacity = argc + 16;
    args->argv = calloc((size_t)args->capacity, sizeof *args->argv);
    args->owned = calloc((size_t)args->capacity, sizeof *args->owned);
    char **transforms = calloc((size_t)argc + 1, sizeof *transforms);
    int transform_count = 0, status = -1;
    if (!args->argv || !args->owned || !transforms) {
        error_set(err, "out of memory");
        goto done;
    }
    for (int i = 0; i < argc; i++) {
        const char *argument = argv[i];
        char name[128];
        const char *bare = argument_name(argument, name, sizeof name);
        const char *equals = strchr(bare, '=');
        if (i > 0 && !strncmp(name, "transform_args.", 15)) {
            if (!(transforms[transform_count++] = transform_entry(bare))) {
                error_set(err, "out of memory");
                goto done;
            }
            continue;
        }
        if (i > 0 && is_none_default(name, equals ? equals + 1 : NULL)) continue;
        err->text[0] = '\0';
        const Translation *t = i > 0 && strchr(name, '.') ? translation_of(argument, name, err)
                                                           : NULL;
        if (!t && err->text[0]) goto done;
        if (!t) {
            args->argv[args->argc++] = argv[i];
            continue;
        }
        if (!equals || !equals[1]) {
            error_set(err, "%.200s: expected %s=VALUE", argument, t->key);
            goto done;
        }
        const char *value = equals + 1;
        // Lightning's and PyTorch's None for these keys is their default.
        if ((!strncmp(name, "trainer_args.", 13) || !strncmp(name, "loader_args.", 12)) &&
            is_none_text(value))
            continue;
        if (!t->option) {  // dropped: any value, or the one the program has anyway
            int flag = 0;
            const char *keep = t->keep ? t->keep : "";
            double number = 0;
            const int kept = !strcmp(keep, "true")     ? number_parse_bool(value, &flag) == 0 && flag
                             : !strcmp(keep, "bool")   ? number_parse_bool(value, &flag) == 0
                             : !strcmp(keep, "number") ? number_parse_decimal(value, &number) == 0
                                                       : !t->keep || strcmp(value, t->keep) == 0;
            if (!kept) {
                if (!strcmp(keep, "bool") || !strcmp(keep, "number"))
                    error_set(err, "%.200s: expected %s", argument,
                              !strcmp(keep, "bool") ? "true or false" : "a number");
                else
                    error_set(err, "%.200s: taken only as %s=%s (what the program does)",
                              argument, t->key, t->keep);
                goto done;
            }
            continue;
        }
        char option[1024];
        // a prefix key: NAME.KEY.UNIT=N sets the option to UNIT=N
        const size_t key_length = strlen(t->key);
        const char *unit = t->key[key_length - 1] == '.' ? bare + key_length : NULL;
        const int unit_length = unit ? (int)(equals - unit) : 0;
        if ((unit ? snprintf(option, sizeof option, "%s=%.*s=%s", t->option, unit_length, unit,
                             value)
                  : snprintf(option, sizeof option, "%s=%s", t->option, value)) >=
            (int)sizeof option) {
            error_set(err, "%.200s: value too long", argument);
            goto done;
        }
        if (append_owned(args, option, err)) goto done;
    }
    EmitContext context = {args, method_arg_value(argc, argv, "paka_num_local")};
    status = transform_args_translate((const char *const *)transforms, transform_count,
                                      option_value(argc, argv, "method"), emit_option, &context,
                                      err);
done:
    for (int i = 0; i < transform_count; i++) free(transforms[i]);
    free(transforms);
    if (status) lightly_args_free(args);
    return status;
}

void lightly_args_free(LightlyArgs *args) {
    for (int i = 0; i < args->owned_count; i++) free(args->owned[i]);
    free(args->owned);
    free(args->argv);
    memset(args, 0, sizeof *args);
}
