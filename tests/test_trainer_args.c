// Lightning's Trainer settings of `train` (cli/run_limits.h): --max-time as
// Lightning's Timer reads max_time (DD:HH:MM:SS, timedelta's units),
// --limit-train-batches as its limit_train_batches (an int is batches, a
// float a fraction; 1 is one batch, 1.0 all), --min-epochs and --min-steps
// as its min_epochs and min_steps, --fast-dev-run as its fast_dev_run, and
// LightlyTrain's
// trainer_args / loader_args spellings of them (cli/lightly_args.h).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "cli/lightly_args.h"
#include "cli/run_limits.h"

static double max_time_of(const char *const *entries, int count, ErrorMessage *err) {
    StringList list = {.count = count};
    for (int i = 0; i < count; i++) list.items[i] = entries[i];
    double seconds = -2;
    if (max_time_parse(&list, &seconds, err)) return -3;
    return seconds;
}

static void expect_max_time(double seconds, const char *const *entries, int count) {
    ErrorMessage err = {{0}};
    const double got = max_time_of(entries, count, &err);
    if (fabs(got - seconds) > 1e-9) fail_msg("%s...: %.9g, expected %.9g (%s)", entries[0], got,
                                             seconds, err.text);
}

static void expect_max_time_refused(const char *entry, const char *words) {
    ErrorMessage err = {{0}};
    assert_true(max_time_of(&entry, 1, &err) == -3);
    if (!strstr(err.text, words)) fail_msg("%s: '%s' lacks '%s'", entry, err.text, words);
    assert_null(strchr(err.text, '\n'));
}

static void test_max_time(void **state) {
    (void)state;
    expect_max_time(-1, NULL, 0);  // none given
    expect_max_time(12 * 3600.0, (const char *[]){"00:12:00:00"}, 1);
    expect_max_time(3 * 86400.0 + 4 * 3600 + 5 * 60 + 6, (const char *[]){"3:04:05:06"}, 1);
    expect_max_time(123 * 86400.0 + 99 * 3600, (const char *[]){"123:99:00:00"}, 1);
    expect_max_time(0, (const char *[]){"0:00:00:00"}, 1);
    // the last DD:HH:MM:SS wins; none clears
    expect_max_time(60, (const char *[]){"0:01:00:00", "0:00:01:00"}, 2);
    expect_max_time(-1, (const char *[]){"0:01:00:00", "None"}, 2);
    // timedelta's units add up, fractions too
    expect_max_time(2 * 3600.0 + 30 * 60, (const char *[]){"hours=2", "minutes=30"}, 2);
    expect_max_time(2 * 604800.0 + 1.5, (const char *[]){"weeks=2", "seconds=1.5"}, 2);
    expect_max_time(0.25, (const char *[]){"milliseconds=250"}, 1);
    expect_max_time_refused("1:2:3", "expected DD:HH:MM:SS");
    expect_max_time_refused("0:00:00:0", "expected DD:HH:MM:SS");
    expect_max_time_refused(" 0:00:00:00", "expected DD:HH:MM:SS");
    expect_max_time_refused("0:00:00:00x", "expected DD:HH:MM:SS");
    expect_max_time_refused("1234567890:00:00:00", "expected DD:HH:MM:SS");
    expect_max_time_refused("fortnights=1", "UNIT=N (weeks");
    expect_max_time_refused("hours=-1", "hours takes a number from 0");
    expect_max_time_refused("hours=two", "hours takes a number from 0");
    expect_max_time_refused("weeks=1e300", "weeks takes a number from 0");
    ErrorMessage err = {{0}};
    assert_true(max_time_of((const char *[]){"0:01:00:00", "hours=1"}, 2, &err) == -3);
    assert_non_null(strstr(err.text, "not both"));
    char text[32];
    max_time_format(3 * 86400.0 + 4 * 3600 + 5 * 60 + 6.9, text, sizeof text);
    assert_string_equal(text, "3:04:05:06");
}

// The batches an epoch of `batches` runs under --limit-train-batches text.
static long limited(const char *text, long batches) {
    BatchLimit limit;
    ErrorMessage err = {{0}};
    if (batch_limit_parse(text, &limit, &err)) fail_msg("%s: %s", text, err.text);
    const long got = batch_limit_apply(&limit, batches, &err);
    if (got < 0) fail_msg("%s of %ld: %s", text, batches, err.text);
    return got;
}

static void expect_limit_refused(const char *text, long batches, const char *words) {
    BatchLimit limit;
    ErrorMessage err = {{0}};
    if (!batch_limit_parse(text, &limit, &err))
        assert_true(batch_limit_apply(&limit, batches, &err) < 0);
    if (!strstr(err.text, words)) fail_msg("%s: '%s' lacks '%s'", text, err.text, words);
}

static void test_limit_train_batches(void **state) {
    (void)state;
    assert_int_equal(limited("1", 10), 1);      // Lightning's int 1: one batch
    assert_int_equal(limited("1.0", 10), 10);   // its float 1.0: all of them
    assert_int_equal(limited("25", 10), 10);    // more than there are: all
    assert_int_equal(limited("3", 10), 3);
    assert_int_equal(limited("0.25", 10), 2);   // floor(2.5)
    assert_int_equal(limited("0.5", 7), 3);
    assert_int_equal(limited("4.0", 10), 4);    // a whole float above 1 is a count
    assert_int_equal(limited("None", 10), 10);  // none: no limit
    BatchLimit zeroed = {0};                    // a TrainConfig without one
    ErrorMessage err = {{0}};
    assert_int_equal(batch_limit_apply(&zeroed, 10, &err), 10);
    expect_limit_refused("0.05", 10, "less than one batch: at least 0.1");
    expect_limit_refused("0", 10, "no batch would be trained");
    expect_limit_refused("0.0", 10, "no batch would be trained");
    expect_limit_refused("1.5", 10, "a fraction is from 0.0 to 1.0");
    expect_limit_refused("-1", 10, "expected a whole number");
    expect_limit_refused("half", 10, "expected a whole number");
    expect_limit_refused("1e40", 10, "too many batches");
}

// Lightning's min_epochs / min_steps (FitLoop._can_stop_early): an early
// stop waits until both are reached; epochs count once complete.
static void test_minimums(void **state) {
    (void)state;
    assert_true(run_minimums_met(0, 0, 0, 3));      // none: any step
    assert_false(run_minimums_met(2, 0, 5, 3));     // epoch 2 not complete at step 5
    assert_true(run_minimums_met(2, 0, 6, 3));
    assert_false(run_minimums_met(0, 4, 3, 3));
    assert_true(run_minimums_met(0, 4, 4, 3));      // mid-epoch: steps alone
    assert_false(run_minimums_met(1, 2, 2, 3));     // both: the epoch too
    assert_true(run_minimums_met(1, 2, 3, 3));
    assert_true(run_minimums_met(3, 7, 9, 3));
    assert_false(run_minimums_met(4, 7, 9, 3));
    // min_epochs auto: 1 with min_steps (Lightning's _parse_loop_limits), else none
    assert_int_equal(run_min_epochs(-1, 0), 0);
    assert_int_equal(run_min_epochs(-1, 5), 1);
    assert_int_equal(run_min_epochs(0, 5), 0);
    assert_int_equal(run_min_epochs(3, 0), 3);
}

static long fast_dev_run_of(const char *text) {
    long batches = -2;
    ErrorMessage err = {{0}};
    if (fast_dev_run_parse(text, &batches, &err)) {
        if (!strstr(err.text, "expected true, false or a number of batches"))
            fail_msg("%s", err.text);
        return -1;
    }
    return batches;
}

// Lightning's fast_dev_run: a bool (True: 1 batch) or an int.
static void test_fast_dev_run(void **state) {
    (void)state;
    assert_int_equal(fast_dev_run_of("True"), 1);
    assert_int_equal(fast_dev_run_of("true"), 1);
    assert_int_equal(fast_dev_run_of("False"), 0);
    assert_int_equal(fast_dev_run_of("0"), 0);
    assert_int_equal(fast_dev_run_of("1"), 1);
    assert_int_equal(fast_dev_run_of("7"), 7);
    assert_int_equal(fast_dev_run_of("-1"), -1);  // refused, as Lightning refuses it
    assert_int_equal(fast_dev_run_of("1.5"), -1);
    assert_int_equal(fast_dev_run_of("yes"), -1);
    assert_int_equal(fast_dev_run_of("99999999999"), -1);
}

// lightly_args_translate of one argument after the command name: the
// arguments it becomes, space-separated ("" when dropped), or "refused: ...".
static const char *translated(const char *argument) {
    static char out[1024];
    char *argv[] = {"train", (char *)argument, NULL};
    LightlyArgs args;
    ErrorMessage err = {{0}};
    if (lightly_args_translate(2, argv, &args, &err)) {
        snprintf(out, sizeof out, "refused: %s", err.text);
        return out;
    }
    out[0] = '\0';
    for (int i = 1; i < args.argc; i++)
        snprintf(out + strlen(out), sizeof out - strlen(out), "%s%s", i > 1 ? " " : "",
                 args.argv[i]);
    lightly_args_free(&args);
    return out;
}

static void test_lightning_spellings(void **state) {
    (void)state;
    assert_string_equal(translated("trainer_args.max_time=00:12:00:00"), "max-time=00:12:00:00");
    assert_string_equal(translated("trainer_args.max_time.hours=2"), "max-time=hours=2");
    assert_string_equal(translated("--trainer-args.max-time.minutes=5"), "max-time=minutes=5");
    assert_string_equal(translated("trainer_args.limit_train_batches=0.5"),
                        "limit-train-batches=0.5");
    assert_string_equal(translated("trainer_args.gradient_clip_val=1.0"),
                        "gradient-clip-val=1.0");
    assert_string_equal(translated("trainer_args.enable_progress_bar=False"),
                        "progress-bar=False");
    assert_string_equal(translated("trainer_args.precision=bf16-mixed"), "precision=bf16-mixed");
    assert_string_equal(translated("trainer_args.num_nodes=2"), "num-nodes=2");
    assert_string_equal(translated("trainer_args.min_epochs=1"), "min-epochs=1");
    assert_string_equal(translated("trainer_args.min_steps=100"), "min-steps=100");
    assert_string_equal(translated("trainer_args.min_steps=None"), "");
    assert_string_equal(translated("trainer_args.fast_dev_run=True"), "fast-dev-run=True");
    assert_string_equal(translated("trainer_args.sync_batchnorm=true"), "sync-batchnorm=true");
    // taken at what they do here
    assert_string_equal(translated("trainer_args.gradient_clip_algorithm=norm"), "");
    assert_string_equal(translated("trainer_args.deterministic=True"), "");
    assert_string_equal(translated("trainer_args.benchmark=false"), "");
    assert_string_equal(translated("trainer_args.enable_model_summary=0"), "");
    assert_string_equal(translated("loader_args.pin_memory=True"), "");
    assert_string_equal(translated("loader_args.persistent_workers=false"), "");
    assert_string_equal(translated("trainer_args.check_val_every_n_epoch=5"), "");
    assert_string_equal(translated("trainer_args.val_check_interval=0.25"), "");
    assert_string_equal(translated("trainer_args.num_sanity_val_steps=0"), "");
    assert_string_equal(translated("trainer_args.limit_val_batches=1.0"), "");
    // None: the default
    assert_string_equal(translated("trainer_args.max_time=None"), "");
    assert_string_equal(translated("trainer_args.gradient_clip_val=null"), "");
    assert_string_equal(translated("loader_args.pin_memory=None"), "");
    // refused, naming why
    assert_non_null(strstr(translated("trainer_args.gradient_clip_algorithm=value"),
                           "taken only as trainer_args.gradient_clip_algorithm=norm"));
    assert_non_null(strstr(translated("trainer_args.deterministic=warn"),
                           "expected true or false"));
    assert_non_null(strstr(translated("loader_args.pin_memory=yes"), "expected true or false"));
    assert_non_null(strstr(translated("trainer_args.val_check_interval=often"),
                           "expected a number"));
    assert_non_null(strstr(translated("trainer_args.reload_dataloaders_every_n_epochs=1"),
                           "max_time"));
    assert_non_null(strstr(translated("loader_args.prefetch_factor=4"), "persistent_workers"));
    // a prefix key needs its unit
    assert_non_null(strstr(translated("trainer_args.max_time.=3"), "refused"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_max_time),
        cmocka_unit_test(test_limit_train_batches),
        cmocka_unit_test(test_minimums),
        cmocka_unit_test(test_fast_dev_run),
        cmocka_unit_test(test_lightning_spellings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
