// Tests for --callbacks (src/cli/callbacks.c): LightlyTrain's defaults, every
// accepted entry, and each refusal with the words that name it; the K best
// epoch files of a monitored model_checkpoint (src/train/kept_epochs.c).
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "cli/callbacks.h"
#include "train/kept_epochs.h"

// Parses the entries (NULL-terminated) into *settings.
static int parse(CallbackSettings *settings, ErrorMessage *err, ...) {
    StringList list = {0};
    va_list args;
    va_start(args, err);
    for (const char *entry; (entry = va_arg(args, const char *));)
        list.items[list.count++] = entry;
    va_end(args);
    return callbacks_parse(&list, settings, err);
}

static void expect_refused(const char *entry, const char *words) {
    CallbackSettings settings;
    ErrorMessage err = {{0}};
    assert_int_equal(parse(&settings, &err, entry, NULL), -1);
    if (!strstr(err.text, words)) fail_msg("%s: '%s' lacks '%s'", entry, err.text, words);
    assert_non_null(strstr(err.text, entry));  // the entry is named
}

static void test_defaults(void **state) {
    CallbackSettings settings;
    ErrorMessage err = {{0}};
    assert_int_equal(parse(&settings, &err, NULL), 0);
    assert_int_equal(settings.checkpoint_every_epochs, 1);
    assert_int_equal(settings.checkpoint_every_steps, 0);
    assert_int_equal(settings.keep_epoch_checkpoints, 1);
    assert_int_equal(settings.export_every_epochs, 1);
    assert_int_equal(settings.early_stopping_patience, 0);
    assert_int_equal(settings.log_learning_rate, 1);
    // naming a callback with no settings, or {}, keeps its defaults
    assert_int_equal(parse(&settings, &err, "model_checkpoint", "early_stopping={}",
                           "learning_rate_monitor", NULL), 0);
    assert_int_equal(settings.early_stopping_patience, 0);
    assert_int_equal(settings.log_learning_rate, 1);
}

// Lightning's DeviceStatsMonitor: off unless named; cpu_stats None, True,
// False; null turns it off again.
static void test_device_stats_monitor(void **state) {
    CallbackSettings settings;
    ErrorMessage err = {{0}};
    assert_int_equal(parse(&settings, &err, "model_export.every_n_epochs=2", NULL), 0);
    assert_int_equal(settings.device_stats, 0);
    assert_int_equal(parse(&settings, &err, "device_stats_monitor", NULL), 0);
    assert_int_equal(settings.device_stats, 1);
    assert_int_equal(settings.device_cpu_stats, -1);
    assert_int_equal(parse(&settings, &err, "device_stats_monitor.cpu_stats=True", NULL), 0);
    assert_int_equal(settings.device_stats, 1);
    assert_int_equal(settings.device_cpu_stats, 1);
    assert_int_equal(parse(&settings, &err, "device_stats_monitor={}",
                           "device_stats_monitor.cpu_stats=false", NULL), 0);
    assert_int_equal(settings.device_cpu_stats, 0);
    assert_int_equal(parse(&settings, &err, "device_stats_monitor.cpu_stats=None", NULL), 0);
    assert_int_equal(settings.device_cpu_stats, -1);
    assert_int_equal(parse(&settings, &err, "device_stats_monitor", "device_stats_monitor=null",
                           NULL), 0);
    assert_int_equal(settings.device_stats, 0);
}

static void test_entries(void **state) {
    CallbackSettings settings;
    ErrorMessage err = {{0}};
    assert_int_equal(parse(&settings, &err, "model_checkpoint.every_n_epochs=3",
                           "model_checkpoint.save_top_k=-1", "model_checkpoint.save_last=true",
                           "model_export.every_n_epochs=4", "early_stopping.patience=5",
                           "early_stopping.monitor=train_loss", "early_stopping.check_finite=True",
                           "learning_rate_monitor=null", NULL),
                     0);
    assert_int_equal(settings.checkpoint_every_epochs, 3);
    assert_int_equal(settings.keep_epoch_checkpoints, -1);
    assert_int_equal(settings.export_every_epochs, 4);
    assert_int_equal(settings.early_stopping_patience, 5);
    assert_int_equal(settings.log_learning_rate, 0);
    assert_int_equal(parse(&settings, &err, "model_checkpoint.every_n_train_steps=100",
                           "model_checkpoint.save_top_k=0", "model_export=None",
                           "early_stopping.patience=2", "early_stopping=null", NULL),
                     0);
    assert_int_equal(settings.checkpoint_every_steps, 100);
    assert_int_equal(settings.keep_epoch_checkpoints, 0);
    assert_int_equal(settings.export_every_epochs, 0);
    assert_int_equal(settings.early_stopping_patience, 0);  // null after the patience: off
    // LightlyTrain's other ModelCheckpoint settings at what they do here: taken
    const CallbackSettings before = settings;
    assert_int_equal(parse(&settings, &err, "model_checkpoint.every_n_train_steps=100",
                           "model_checkpoint.save_top_k=0", "model_export=None",
                           "early_stopping=null", "model_checkpoint.monitor=None",
                           "model_checkpoint.mode=min", "model_checkpoint.verbose=True",
                           "model_checkpoint.save_weights_only=False",
                           "model_checkpoint.save_on_train_epoch_end=true",
                           "model_checkpoint.auto_insert_metric_name=true",
                           "model_checkpoint.enable_version_counter=false",
                           "model_checkpoint.dirpath=null", "model_checkpoint.filename={epoch}-{step}",
                           "model_checkpoint.train_time_interval=None", NULL),
                     0);
    assert_memory_equal(&settings, &before, sizeof settings);
}

// model_checkpoint.monitor=train_loss: save_top_k K > 1 taken (before or
// after the monitor), mode min (the default) or max; monitor=null again
// refuses K > 1.
static void test_monitor(void **state) {
    CallbackSettings settings;
    ErrorMessage err = {{0}};
    assert_int_equal(parse(&settings, &err, "model_checkpoint.save_top_k=3",
                           "model_checkpoint.monitor=train_loss", NULL), 0);
    assert_int_equal(settings.monitor_loss, 1);
    assert_int_equal(settings.monitor_max, 0);
    assert_int_equal(settings.keep_epoch_checkpoints, 3);
    assert_int_equal(parse(&settings, &err, "model_checkpoint.monitor=train_loss",
                           "model_checkpoint.mode=max", "model_checkpoint.save_top_k=1000", NULL),
                     0);
    assert_int_equal(settings.monitor_max, 1);
    assert_int_equal(settings.keep_epoch_checkpoints, 1000);
    assert_int_equal(parse(&settings, &err, "model_checkpoint.monitor=train_loss", NULL), 0);
    assert_int_equal(settings.keep_epoch_checkpoints, 1);  // LightlyTrain's default K
    assert_int_equal(parse(&settings, &err, "model_checkpoint.monitor=train_loss",
                           "model_checkpoint.save_top_k=2", "model_checkpoint.monitor=null", NULL),
                     -1);
    assert_non_null(strstr(err.text, "model_checkpoint.save_top_k=2: without a monitor"));
}

static void test_refusals(void **state) {
    expect_refused("device_stats_monitor.cpu_stats=maybe", "cpu_stats is true, false or null");
    expect_refused("device_stats_monitor.interval=step", "device_stats_monitor takes cpu_stats");
    expect_refused("device_stats_monitor=1", "expected device_stats_monitor, ");
    expect_refused("wandb", "the callbacks are model_checkpoint");
    expect_refused("model_checkpoint=null", "always written");
    expect_refused("model_checkpoint.save_last=false", "always written");
    expect_refused("model_checkpoint.monitor=val_loss", "the monitored metric is train_loss");
    expect_refused("model_checkpoint.save_weights_only=true", "the optimizer state --resume");
    expect_refused("model_checkpoint.save_on_train_epoch_end=false", "no validation loop");
    expect_refused("model_checkpoint.dirpath=out/custom", "where --resume reads them");
    expect_refused("model_checkpoint.filename=epoch{epoch}", "named epoch=E-step=S.ckpt");
    expect_refused("model_checkpoint.train_time_interval=0:30:00", "by epochs or by steps");
    expect_refused("model_checkpoint.enable_version_counter=true", "is replaced");
    expect_refused("model_checkpoint.auto_insert_metric_name=false", "epoch=E-step=S.ckpt");
    expect_refused("model_checkpoint.mode=median", "mode is min or max");
    expect_refused("model_checkpoint.verbose=loud", "verbose is true or false here");
    expect_refused("model_checkpoint.save_top_k_best=2", "settings here are every_n_epochs");
    // Lightning's rule: K > 1 needs a monitor (whichever comes first)
    expect_refused("model_checkpoint.save_top_k=2", "without a monitor save_top_k is 1");
    expect_refused("model_checkpoint.save_top_k=-2", "a whole number in -1..1000");
    expect_refused("model_checkpoint.save_top_k=1001", "a whole number in -1..1000");
    expect_refused("model_checkpoint.every_n_epochs=0", "a whole number in 1..");
    expect_refused("model_checkpoint.every_n_epochs=1.5", "a whole number in 1..");
    expect_refused("model_checkpoint.every_n_train_steps=x", "a whole number in 1..");
    expect_refused("model_export.every_n_epochs=-1", "a whole number in 1..");
    expect_refused("model_export.dirpath=x", "model_export takes every_n_epochs");
    expect_refused("early_stopping.monitor=val_loss", "the monitored metric is train_loss");
    expect_refused("early_stopping.check_finite=false", "always stops");
    expect_refused("early_stopping.patience=0", "a whole number in 1..");
    expect_refused("early_stopping.mode=max", "monitor (train_loss), patience and check_finite");
    expect_refused("learning_rate_monitor.logging_interval=step", "no settings (only =null)");
    expect_refused("early_stopping.patience", "expected early_stopping.KEY=VALUE with a value");
    expect_refused("model_export=1", "expected model_export, model_export=null");
    CallbackSettings settings;
    ErrorMessage err = {{0}};
    assert_int_equal(parse(&settings, &err, "model_checkpoint.every_n_epochs=2",
                           "model_checkpoint.every_n_train_steps=3", NULL),
                     -1);
    assert_non_null(strstr(err.text, "by epochs or by steps, not both"));
}

static KeptEpochs kept_of(int count, const float *scores) {
    KeptEpochs kept = {0};
    for (int i = 0; i < count; i++) kept_epochs_append(&kept, 10 * (i + 1), scores[i]);
    return kept;
}

// Lightning's check_monitor_top_k and _update_best_and_save: room first,
// then strictly better than the worst (the first of equally bad ones),
// NaN the worst of all.
static void test_kept_epochs(void **state) {
    int evict = 7;
    KeptEpochs kept = kept_of(1, (const float[]){5.0f});
    assert_int_equal(kept_epochs_admit(&kept, 2, 0, 9.0f, &evict), 1);  // room: kept
    assert_int_equal(evict, -1);
    kept = kept_of(2, (const float[]){5.0f, 4.0f});
    assert_int_equal(kept_epochs_admit(&kept, 2, 0, 4.5f, &evict), 1);
    assert_int_equal(evict, 0);  // 5.0 goes
    assert_int_equal(kept_epochs_admit(&kept, 2, 0, 6.0f, &evict), 0);
    assert_int_equal(kept_epochs_admit(&kept, 2, 0, 5.0f, &evict), 0);  // a tie is not better
    kept = kept_of(3, (const float[]){5.0f, 3.0f, 5.0f});
    assert_int_equal(kept_epochs_admit(&kept, 3, 0, 4.0f, &evict), 1);
    assert_int_equal(evict, 0);  // the first of the two 5.0s
    // mode max: the highest kept, the lowest goes
    kept = kept_of(3, (const float[]){2.0f, 1.0f, 1.0f});
    assert_int_equal(kept_epochs_admit(&kept, 3, 1, 1.5f, &evict), 1);
    assert_int_equal(evict, 1);
    assert_int_equal(kept_epochs_admit(&kept, 3, 1, 0.5f, &evict), 0);
    // NaN: the worst in either mode
    kept = kept_of(2, (const float[]){3.0f, NAN});
    assert_int_equal(kept_epochs_admit(&kept, 2, 0, 10.0f, &evict), 1);
    assert_int_equal(evict, 1);
    assert_int_equal(kept_epochs_admit(&kept, 2, 1, -10.0f, &evict), 1);
    assert_int_equal(evict, 1);
    assert_int_equal(kept_epochs_admit(&kept, 2, 0, NAN, &evict), 0);
    // a smaller K than kept (a resumed run): the worst one first
    kept = kept_of(4, (const float[]){3.0f, 7.0f, 1.0f, 7.0f});
    assert_int_equal(kept_epochs_worst(&kept, 0), 1);
    assert_int_equal(kept_epochs_worst(&kept, 1), 2);
    // the list keeps its order
    assert_int_equal(kept_epochs_find(&kept, 30), 2);
    kept_epochs_remove(&kept, 1);
    assert_int_equal(kept.count, 3);
    assert_int_equal(kept.steps[1], 30);
    assert_true(kept.scores[2] == 7.0f);
    assert_int_equal(kept_epochs_find(&kept, 20), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_entries),
        cmocka_unit_test(test_device_stats_monitor),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_monitor),
        cmocka_unit_test(test_kept_epochs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
