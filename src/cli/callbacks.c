// --callbacks entries (see callbacks.h): when checkpoints and exports are
// written, which epoch files stay, the patience stop and the lr scalars.
#include "cli/callbacks.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util/number.h"

CallbackSettings callbacks_default(void) {
    return (CallbackSettings){.checkpoint_every_epochs = 1,
                              .keep_epoch_checkpoints = 1,
                              .export_every_epochs = 1,
                              .log_learning_rate = 1,
                              .device_cpu_stats = -1};
}

static int is_null(const char *value) {
    return strcmp(value, "null") == 0 || strcmp(value, "None") == 0 || strcmp(value, "none") == 0;
}

static int is_true(const char *value) {
    int flag;
    return number_parse_bool(value, &flag) == 0 && flag;
}

// A whole decimal number in [low, high] into *out; an error naming the entry otherwise.
static int integer_value(const char *entry, const char *value, long low, long high, long *out,
                         ErrorMessage *err) {
    double number = 0;
    if (number_parse_decimal(value, &number) || number != floor(number) || number < (double)low ||
        number > (double)high)
        return error_set(err, "--callbacks %.200s: expected a whole number in %ld..%ld", entry,
                         low, high);
    *out = (long)number;
    return 0;
}

// LightlyTrain's other ModelCheckpoint settings: taken where the value is
// what happens here (its verbose prints nothing more: train.log always says
// which epoch files are kept), else refused with why.
// accepted: the values taken, " or "-separated, as the refusal shows them
// ("null": null / None; "true", "false": any spelling of the boolean).
typedef struct FixedSetting {
    const char *key, *accepted, *why;
} FixedSetting;
static const FixedSetting fixed_settings[] = {
    {"verbose", "true or false", ""},
    {"save_weights_only", "false", ": a checkpoint holds the optimizer state --resume needs (the "
                                   "weights alone are exported_models/)"},
    {"save_on_train_epoch_end", "true or null", ": checkpoints are written at the training "
                                                "epoch's end (pretraining has no validation loop)"},
    {"auto_insert_metric_name", "true", ": the epoch files are named epoch=E-step=S.ckpt"},
    {"enable_version_counter", "false", ": an epoch file of the same steps (a resumed run's) is "
                                        "replaced"},
    {"dirpath", "null", ": checkpoints go to --out/checkpoints, where --resume reads them"},
    {"filename", "null or {epoch}-{step}", ": the epoch files are named epoch=E-step=S.ckpt"},
    {"train_time_interval", "null", ": checkpoints go by epochs or by steps"},
};

// 1 when value is one of accepted's.
static int fixed_value_taken(const char *accepted, const char *value) {
    int flag;
    const int boolean = number_parse_bool(value, &flag) == 0;
    for (const char *option = accepted; *option;) {
        const char *next = strstr(option, " or ");
        const size_t length = next ? (size_t)(next - option) : strlen(option);
        if ((length == 4 && !strncmp(option, "null", 4) && is_null(value)) ||
            (length == 4 && !strncmp(option, "true", 4) && boolean && flag) ||
            (length == 5 && !strncmp(option, "false", 5) && boolean && !flag) ||
            (strlen(value) == length && !strncmp(option, value, length)))
            return 1;
        option = next ? next + 4 : option + length;
    }
    return 0;
}

// by_epochs, by_steps: the entries that set either cadence (Lightning takes one).
// top_k: the save_top_k entry (checked against the monitor once all are read).
static int model_checkpoint_entry(CallbackSettings *s, const char *entry, const char *key,
                                  const char *value, const char **by_epochs,
                                  const char **by_steps, const char **top_k, ErrorMessage *err) {
    long number = 0;
    if (strcmp(key, "every_n_epochs") == 0) {
        if (integer_value(entry, value, 1, 1000000000L, &number, err)) return -1;
        s->checkpoint_every_epochs = number;
        *by_epochs = entry;
    } else if (strcmp(key, "every_n_train_steps") == 0) {
        if (integer_value(entry, value, 1, 1000000000L, &number, err)) return -1;
        s->checkpoint_every_steps = number;
        *by_steps = entry;
    } else if (strcmp(key, "save_top_k") == 0) {
        if (integer_value(entry, value, -1, CALLBACKS_TOP_K_MAX, &number, err)) return -1;
        s->keep_epoch_checkpoints = (int)number;
        *top_k = entry;
    } else if (strcmp(key, "monitor") == 0) {
        if (!is_null(value) && strcmp(value, "train_loss") != 0)
            return error_set(err, "--callbacks %.200s: the monitored metric is train_loss (or "
                                  "null: the epoch files kept by recency)", entry);
        s->monitor_loss = !is_null(value);
    } else if (strcmp(key, "mode") == 0) {
        if (strcmp(value, "min") != 0 && strcmp(value, "max") != 0)
            return error_set(err, "--callbacks %.200s: mode is min or max", entry);
        s->monitor_max = strcmp(value, "max") == 0;
    } else if (strcmp(key, "save_last") == 0) {
        if (!is_true(value))
            return error_set(err, "--callbacks %.200s: checkpoints/last.ckpt is what --resume "
                                  "and a stopped run continue from: it is always written",
                             entry);
    } else {
        for (size_t i = 0; i < sizeof fixed_settings / sizeof *fixed_settings; i++) {
            const FixedSetting *f = &fixed_settings[i];
            if (strcmp(key, f->key) != 0) continue;
            if (fixed_value_taken(f->accepted, value)) return 0;
            return error_set(err, "--callbacks %.200s: %s is %s here%s", entry, key, f->accepted,
                             f->why);
        }
        return error_set(err, "--callbacks %.200s: model_checkpoint's settings here are "
                              "every_n_epochs, every_n_train_steps, save_top_k, monitor, mode "
                              "and save_last (and LightlyTrain's others at what they do here: "
                              "dirpath=null, filename=null, ...; docs/training.md)", entry);
    }
    return 0;
}

static int early_stopping_entry(CallbackSettings *s, const char *entry, const char *key,
                                const char *value, ErrorMessage *err) {
    long number = 0;
    if (strcmp(key, "patience") == 0) {
        if (integer_value(entry, value, 1, 1000000000000L, &number, err)) return -1;
        s->early_stopping_patience = number;
    } else if (strcmp(key, "monitor") == 0) {
        if (strcmp(value, "train_loss") != 0)
            return error_set(err, "--callbacks %.200s: the monitored metric is train_loss",
                             entry);
    } else if (strcmp(key, "check_finite") == 0) {
        if (!is_true(value))
            return error_set(err, "--callbacks %.200s: a NaN or infinite loss always stops "
                                  "the run (exit 1, the last checkpoint kept)", entry);
    } else {
        return error_set(err, "--callbacks %.200s: early_stopping's settings here are monitor "
                              "(train_loss), patience and check_finite", entry);
    }
    return 0;
}

// One CALLBACK=VALUE or CALLBACK (no key): null turns it off where that is
// possible, {} or nothing keeps its defaults.
static int whole_entry(CallbackSettings *s, const char *entry, const char *name,
                       const char *value, ErrorMessage *err) {
    const int off = value && is_null(value);
    if (value && !off && strcmp(value, "{}") != 0)
        return error_set(err, "--callbacks %.200s: expected %s, %s=null or %s.KEY=VALUE", entry,
                         name, name, name);
    if (strcmp(name, "model_checkpoint") == 0 && off)
        return error_set(err, "--callbacks %.200s: checkpoints/last.ckpt is what --resume and a "
                              "stopped run continue from: it is always written "
                              "(model_checkpoint.save_top_k=0 keeps no epoch files)", entry);
    if (strcmp(name, "model_export") == 0) s->export_every_epochs = off ? 0 : 1;
    if (strcmp(name, "early_stopping") == 0 && off) s->early_stopping_patience = 0;
    if (strcmp(name, "learning_rate_monitor") == 0) s->log_learning_rate = !off;
    if (strcmp(name, "device_stats_monitor") == 0) s->device_stats = !off;
    return 0;
}

int callbacks_parse(const StringList *entries, CallbackSettings *settings, ErrorMessage *err) {
    *settings = callbacks_default();
    static const char *const names[] = {"model_checkpoint", "model_export", "early_stopping",
                                        "learning_rate_monitor", "device_stats_monitor"};
    const char *by_epochs = NULL, *by_steps = NULL;  // Lightning: one or the other
    const char *top_k = NULL;
    for (int i = 0; i < entries->count; i++) {
        const char *entry = entries->items[i];
        char name[64] = "", key[64] = "";
        const size_t name_length = strcspn(entry, ".=");
        const char *value = strchr(entry, '=') ? strchr(entry, '=') + 1 : NULL;
        if (name_length < sizeof name) memcpy(name, entry, name_length);
        int known = 0;
        for (size_t n = 0; n < sizeof names / sizeof *names; n++) known |= !strcmp(name, names[n]);
        if (!known)
            return error_set(err, "--callbacks %.200s: the callbacks are model_checkpoint, "
                                  "model_export, early_stopping, learning_rate_monitor and "
                                  "device_stats_monitor", entry);
        if (entry[name_length] != '.') {
            if (whole_entry(settings, entry, name, value, err)) return -1;
            continue;
        }
        const char *key_start = entry + name_length + 1;
        const size_t key_length = value ? (size_t)(value - 1 - key_start) : strlen(key_start);
        if (key_length < sizeof key) memcpy(key, key_start, key_length);
        if (!value || !value[0])
            return error_set(err, "--callbacks %.200s: expected %s.KEY=VALUE with a value", entry,
                             name);
        int status = 0;
        if (strcmp(name, "model_checkpoint") == 0)
            status = model_checkpoint_entry(settings, entry, key, value, &by_epochs, &by_steps,
                                            &top_k, err);
        else if (strcmp(name, "early_stopping") == 0)
            status = early_stopping_entry(settings, entry, key, value, err);
        else if (strcmp(name, "device_stats_monitor") == 0 && strcmp(key, "cpu_stats") == 0) {
            int flag = 0;
            settings->device_stats = 1;
            if (is_null(value)) settings->device_cpu_stats = -1;
            else if (number_parse_bool(value, &flag) == 0) settings->device_cpu_stats = flag;
            else status = error_set(err, "--callbacks %.200s: cpu_stats is true, false or null",
                                    entry);
        } else if (strcmp(name, "model_export") == 0 && strcmp(key, "every_n_epochs") == 0) {
            long number = 0;
            status = integer_value(entry, value, 1, 1000000000L, &number, err);
            settings->export_every_epochs = number;
        } else
            status = error_set(err, "--callbacks %.200s: %s takes %s", entry, name,
                               strcmp(name, "model_export") == 0 ? "every_n_epochs"
                               : strcmp(name, "device_stats_monitor") == 0
                                   ? "cpu_stats"
                                   : "no settings (only =null)");
        if (status) return -1;
    }
    if (by_epochs && by_steps)
        return error_set(err, "--callbacks %.100s and %.100s: checkpoints go by epochs or by "
                              "steps, not both", by_epochs, by_steps);
    // Lightning's rule: without a monitor the files go by recency, so only
    // the latest one, all or none can be kept.
    if (top_k && !settings->monitor_loss && settings->keep_epoch_checkpoints > 1)
        return error_set(err, "--callbacks %.200s: without a monitor save_top_k is 1 (the "
                              "latest epoch file), -1 (all of them) or 0 (none); with "
                              "model_checkpoint.monitor=train_loss the K best are kept", top_k);
    return 0;
}
