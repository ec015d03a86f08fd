// Tests of the user-facing reporting of `train`: the console progress line
// (terminal overwrite style, redraw throttle, plain lines at an interval, ETA
// arithmetic, unknown totals, messages in between, width limit), train.log
// (timestamped lines, appending, shell quoting that round-trips through sh,
// system information), the end-of-run bottleneck verdict at its thresholds
// and the advice text, and the augmentation image grid (geometry, pixel
// placement, centring of smaller views, limits, argument errors, and that
// tb_add_image takes it as is).
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "logging/image_grid.h"
#include "logging/progress.h"
#include "logging/run_log.h"
#include "logging/run_summary.h"
#include "logging/tb_reader.h"
#include "logging/tb_writer.h"
#include "util/cpu.h"
#include "image_fixtures.h"

// ---- progress ------------------------------------------------------------------

// Output captured in memory; the text is valid after capture_text().
typedef struct Capture {
    FILE *stream;
    char *text;
    size_t length;
} Capture;

static void capture_open(Capture *capture) {
    capture->text = NULL;
    capture->length = 0;
    capture->stream = open_memstream(&capture->text, &capture->length);
    assert_non_null(capture->stream);
}

static const char *capture_text(Capture *capture) {
    fflush(capture->stream);
    return capture->text ? capture->text : "";
}

static void capture_close(Capture *capture) {
    fclose(capture->stream);
    free(capture->text);
}

static int count_char(const char *text, char c) {
    int count = 0;
    for (; *text; text++) count += *text == c;
    return count;
}

static int count_substring(const char *text, const char *needle) {
    int count = 0;
    for (const char *at = strstr(text, needle); at; at = strstr(at + 1, needle)) count++;
    return count;
}

static void test_progress_terminal_overwrites_one_line(void **state) {
    (void)state;
    Capture capture;
    capture_open(&capture);
    Progress *p = progress_create(capture.stream, 1, 100, 10, 10.0);
    assert_non_null(p);
    progress_set_origin(p, 0, 0.0);
    progress_update(p, 0, 10, 1, 2.5f, 100.0, 0.1, 1.0);
    progress_update(p, 0, 10, 2, 2.4f, 100.0, 0.1, 2.0);
    const char *text = capture_text(&capture);
    assert_int_equal(count_char(text, '\r'), 2);    // each update drew the line again
    assert_int_equal(count_char(text, '\n'), 0);    // ... on the same row
    assert_int_equal(count_substring(text, "\033[K"), 2);  // clearing what a longer line left
    assert_non_null(strstr(text, "epoch 1/10"));
    assert_non_null(strstr(text, "step 2/100"));
    progress_finish(p);
    text = capture_text(&capture);
    assert_int_equal(text[strlen(text) - 1], '\n');
    assert_int_equal(count_char(text, '\n'), 1);
    progress_free(p);
    capture_close(&capture);
}

static void test_progress_terminal_redraw_throttle(void **state) {
    (void)state;
    Capture capture;
    capture_open(&capture);
    Progress *p = progress_create(capture.stream, 1, 100, 0, 10.0);
    progress_set_origin(p, 0, 0.0);
    progress_update(p, 0, 1, 1, 1.0f, 10.0, 0.0, 1.0);
    progress_update(p, 0, 1, 2, 1.0f, 10.0, 0.0, 1.1);  // 0.1 s later: held back
    assert_int_equal(count_char(capture_text(&capture), '\r'), 1);
    assert_null(strstr(capture_text(&capture), "step 2/"));
    progress_update(p, 0, 1, 3, 1.0f, 10.0, 0.0, 1.3);  // 0.3 s after the draw
    assert_int_equal(count_char(capture_text(&capture), '\r'), 2);
    progress_update(p, 0, 1, 4, 1.0f, 10.0, 0.0, 1.35);  // held back ...
    assert_int_equal(count_char(capture_text(&capture), '\r'), 2);
    progress_finish(p);  // ... but shown when the run ends
    assert_non_null(strstr(capture_text(&capture), "step 4/100"));
    progress_free(p);
    capture_close(&capture);
}

static void test_progress_terminal_always_draws_last_step(void **state) {
    (void)state;
    Capture capture;
    capture_open(&capture);
    Progress *p = progress_create(capture.stream, 1, 3, 0, 10.0);
    progress_set_origin(p, 0, 0.0);
    for (int step = 1; step <= 3; step++)
        progress_update(p, 0, 1, step, 1.0f, 10.0, 0.0, 1.0 + 0.01 * step);
    assert_int_equal(count_char(capture_text(&capture), '\r'), 2);  // first and last
    assert_non_null(strstr(capture_text(&capture), "step 3/3 100%"));
    progress_free(p);
    capture_close(&capture);
}

static void test_progress_plain_lines_at_interval(void **state) {
    (void)state;
    Capture capture;
    capture_open(&capture);
    Progress *p = progress_create(capture.stream, 0, 1000, 0, 10.0);
    progress_set_origin(p, 0, 0.0);
    for (int step = 1; step <= 25; step++)
        progress_update(p, 0, 1, step, 1.0f, 10.0, 0.0, (double)step);
    const char *text = capture_text(&capture);
    assert_int_equal(count_char(text, '\r'), 0);
    assert_int_equal(count_char(text, '\033'), 0);  // no terminal control codes in a log
    // The first update, then every 10 s: steps 1, 11 and 21.
    assert_int_equal(count_char(text, '\n'), 3);
    assert_non_null(strstr(text, "step 1/1000"));
    assert_non_null(strstr(text, "step 11/1000"));
    assert_non_null(strstr(text, "step 21/1000"));
    assert_null(strstr(text, "step 12/1000"));
    progress_finish(p);  // the last state (step 25) was not printed yet
    assert_int_equal(count_char(capture_text(&capture), '\n'), 4);
    assert_non_null(strstr(capture_text(&capture), "step 25/1000"));
    progress_free(p);
    capture_close(&capture);

    capture_open(&capture);  // interval 0: a line per update
    p = progress_create(capture.stream, 0, 1000, 0, 0.0);
    for (int step = 1; step <= 5; step++)
        progress_update(p, 0, 1, step, 1.0f, 10.0, 0.0, 0.001 * step);
    progress_finish(p);
    assert_int_equal(count_char(capture_text(&capture), '\n'), 5);
    progress_free(p);
    capture_close(&capture);
}

static void test_progress_eta_and_fields(void **state) {
    (void)state;
    Capture capture;
    capture_open(&capture);
    Progress *p = progress_create(capture.stream, 0, 100, 0, 0.0);
    progress_set_origin(p, 0, 0.0);
    // 50 of 100 steps in 60 s: 50 more at 1.2 s each.
    progress_update(p, 2, 100, 50, 1.23456f, 412.34, 0.123, 60.0);
    const char *text = capture_text(&capture);
    assert_non_null(strstr(text, "epoch 3/100"));
    assert_non_null(strstr(text, "step 50/100  50%"));
    assert_non_null(strstr(text, "elapsed 1:00"));
    assert_non_null(strstr(text, "ETA 1:00"));
    assert_non_null(strstr(text, "loss 1.235"));  // 4 significant digits
    assert_non_null(strstr(text, "412.3 img/s"));
    assert_non_null(strstr(text, "data_wait 12%"));
    progress_free(p);
    capture_close(&capture);

    // A resumed run: the rate counts only this session's steps (4000 -> 4010
    // in 20 s is 2 s per step; 990 steps left).
    capture_open(&capture);
    p = progress_create(capture.stream, 0, 5000, 0, 0.0);
    progress_set_origin(p, 4000, 100.0);
    progress_update(p, 0, 1, 4010, NAN, 1.0, 1.5, 120.0);
    text = capture_text(&capture);
    assert_non_null(strstr(text, "ETA 33:00"));
    assert_non_null(strstr(text, "elapsed 0:20"));
    assert_non_null(strstr(text, "loss nan"));
    assert_non_null(strstr(text, "data_wait 100%"));  // clamped to [0, 1]
    progress_free(p);
    capture_close(&capture);

    // Without an explicit origin: the creation time and the step before the
    // first update (a resumed run's first update is step 4001: 2 s per step,
    // 999 steps left). The clock read here is microseconds after creation,
    // far below the rounding to whole seconds.
    capture_open(&capture);
    p = progress_create(capture.stream, 0, 5000, 0, 0.0);
    const double created = time_now();
    progress_update(p, 0, 1, 4001, 1.0f, 1.0, 0.0, created + 2.0);
    assert_non_null(strstr(capture_text(&capture), "step 4001/5000  80%"));
    assert_non_null(strstr(capture_text(&capture), "elapsed 0:02  ETA 33:18"));
    progress_free(p);
    capture_close(&capture);

    char text_buffer[32];
    progress_format_duration(0, text_buffer, sizeof text_buffer);
    assert_string_equal(text_buffer, "0:00");
    progress_format_duration(59.6, text_buffer, sizeof text_buffer);  // nearest second
    assert_string_equal(text_buffer, "1:00");
    progress_format_duration(3599.4, text_buffer, sizeof text_buffer);
    assert_string_equal(text_buffer, "59:59");
    progress_format_duration(9900, text_buffer, sizeof text_buffer);
    assert_string_equal(text_buffer, "2:45:00");
    progress_format_duration(-1, text_buffer, sizeof text_buffer);
    assert_string_equal(text_buffer, "?");
    progress_format_duration(INFINITY, text_buffer, sizeof text_buffer);
    assert_string_equal(text_buffer, "?");
}

static void test_progress_unknown_total(void **state) {
    (void)state;
    Capture capture;
    capture_open(&capture);
    Progress *p = progress_create(capture.stream, 0, 0, 0, 0.0);
    progress_set_origin(p, 0, 0.0);
    progress_update(p, 0, 0, 7, 0.5f, 10.0, 0.0, 5.0);
    const char *text = capture_text(&capture);
    assert_non_null(strstr(text, "epoch 1  step 7  elapsed 0:05"));
    assert_null(strstr(text, "ETA"));
    assert_null(strstr(text, "step 7/"));
    progress_free(p);
    capture_close(&capture);

    // Total unknown but steps per epoch known: epochs * steps_per_epoch.
    capture_open(&capture);
    p = progress_create(capture.stream, 0, 0, 20, 0.0);
    progress_set_origin(p, 0, 0.0);
    progress_update(p, 0, 5, 10, 0.5f, 10.0, 0.0, 5.0);
    assert_non_null(strstr(capture_text(&capture), "step 10/100  10%"));
    assert_non_null(strstr(capture_text(&capture), "ETA 0:45"));
    progress_free(p);
    capture_close(&capture);
}

static void test_progress_message(void **state) {
    (void)state;
    Capture capture;
    capture_open(&capture);
    Progress *p = progress_create(capture.stream, 1, 100, 0, 10.0);
    progress_set_origin(p, 0, 0.0);
    progress_update(p, 0, 1, 1, 1.0f, 10.0, 0.0, 1.0);
    const size_t before = strlen(capture_text(&capture));
    progress_message(p, "checkpoint saved");
    const char *after = capture_text(&capture) + before;
    // Clear the row, the message on its own line, then the progress line again.
    const char *prefix = "\r\033[Kcheckpoint saved\n\r";
    assert_memory_equal(after, prefix, strlen(prefix));
    assert_non_null(strstr(after + strlen(prefix), "step 1/100"));
    assert_int_equal(count_char(after, '\n'), 1);
    progress_free(p);
    capture_close(&capture);

    capture_open(&capture);  // plain: just the line
    p = progress_create(capture.stream, 0, 100, 0, 10.0);
    progress_update(p, 0, 1, 1, 1.0f, 10.0, 0.0, 1.0);
    const size_t plain_before = strlen(capture_text(&capture));
    progress_message(p, "hello");
    assert_string_equal(capture_text(&capture) + plain_before, "hello\n");
    progress_free(p);
    capture_close(&capture);
}

static void test_progress_width_limit(void **state) {
    (void)state;
    // A long line: huge step counts and values. Printed plain, it is longer
    // than the default width; on a (non-tty) "terminal" it is cut to width - 1.
    Capture capture;
    capture_open(&capture);
    Progress *p = progress_create(capture.stream, 0, 123456789012L, 0, 0.0);
    progress_set_origin(p, 0, 0.0);
    progress_update(p, 12344, 99999, 12345678901L, 1234.5f, 123456789.0, 0.5, 100.0);
    assert_true(strlen(capture_text(&capture)) - 1 > PROGRESS_DEFAULT_WIDTH - 1);
    progress_free(p);
    capture_close(&capture);

    capture_open(&capture);
    p = progress_create(capture.stream, 1, 123456789012L, 0, 0.0);
    progress_set_origin(p, 0, 0.0);
    progress_update(p, 12344, 99999, 12345678901L, 1234.5f, 123456789.0, 0.5, 100.0);
    const char *text = capture_text(&capture);
    const char *end = strstr(text, "\033[K");
    assert_non_null(end);
    assert_int_equal(end - (text + 1), PROGRESS_DEFAULT_WIDTH - 1);
    progress_free(p);
    capture_close(&capture);
}

// ---- train.log --------------------------------------------------------------------

static char *read_whole_file(const char *path) {
    FILE *file = fopen(path, "rb");
    assert_non_null(file);
    char *text = NULL;
    size_t capacity = 0, length = 0;
    for (;;) {
        if (length + 4096 + 1 > capacity) {
            capacity = (length + 4096 + 1) * 2;
            text = realloc(text, capacity);
            assert_non_null(text);
        }
        const size_t got = fread(text + length, 1, 4096, file);
        length += got;
        if (got == 0) break;
    }
    fclose(file);
    text[length] = '\0';
    return text;
}

// Every line matches "YYYY-MM-DD HH:MM:SS <text>".
static int count_timestamped_lines(const char *text) {
    regex_t pattern;
    assert_int_equal(regcomp(&pattern, "^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} [^\n]+$",
                             REG_EXTENDED | REG_NOSUB),
                     0);
    int lines = 0;
    char *copy = strdup(text);
    char *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (regexec(&pattern, line, 0, NULL, 0) != 0) fail_msg("not timestamped: '%s'", line);
        lines++;
    }
    free(copy);
    regfree(&pattern);
    return lines;
}

static void test_run_log_lines_append_and_flush(void **state) {
    (void)state;
    char path[512];
    fixture_temp_path(path, sizeof path, "train.log");
    ErrorMessage err = {{0}};
    RunLog *log = NULL;
    assert_int_equal(run_log_open(&log, path, &err), 0);
    run_log_line(log, "hello %d", 42);
    char *text = read_whole_file(path);  // flushed right away, before close
    assert_non_null(strstr(text, " hello 42\n"));
    free(text);
    run_log_close(log);

    assert_int_equal(run_log_open(&log, path, &err), 0);  // a resumed run appends
    run_log_line(log, "resumed");
    run_log_close(log);
    text = read_whole_file(path);
    assert_int_equal(count_timestamped_lines(text), 2);
    assert_true(strstr(text, "hello 42") < strstr(text, "resumed"));
    free(text);

    assert_int_equal(run_log_open(&log, "/nonexistent-dir-ltc/train.log", &err), -1);
    assert_null(log);
    assert_non_null(strstr(err.text, "/nonexistent-dir-ltc/train.log"));
    assert_non_null(strstr(err.text, "No such file"));
    run_log_close(NULL);
}

// Runs `printf '%s\0' <quoted args>` through sh and compares what comes back.
static void check_quoting_round_trip(int argc, char *const *argv) {
    char *quoted = NULL;
    size_t quoted_length = 0;
    FILE *memory = open_memstream(&quoted, &quoted_length);
    shell_quote_args(memory, argc, argv);
    fclose(memory);
    char *command = NULL;
    assert_true(asprintf(&command, "printf '%%s\\0' %s", quoted) > 0);
    FILE *shell = popen(command, "r");
    assert_non_null(shell);
    char output[4096];
    const size_t length = fread(output, 1, sizeof output, shell);
    assert_int_equal(pclose(shell), 0);
    size_t at = 0;
    for (int i = 0; i < argc; i++) {
        assert_true(at < length);
        assert_string_equal(output + at, argv[i]);
        at += strlen(argv[i]) + 1;
    }
    assert_int_equal(at, length);
    free(command);
    free(quoted);
}

static void test_run_log_command_line_quoting(void **state) {
    (void)state;
    char *const argv[] = {"lightly-train-c", "train", "--data", "/tmp/my images",
                          "--out=run 1",     "it's",  "say \"hi\"", "",
                          "$HOME",           "a;b|c", "tab\there", "new\nline",
                          "'",               "*",     "x=1,y=2"};
    const int argc = (int)(sizeof argv / sizeof argv[0]);
    check_quoting_round_trip(argc, argv);

    char path[512];
    fixture_temp_path(path, sizeof path, "command.log");
    ErrorMessage err = {{0}};
    RunLog *log = NULL;
    assert_int_equal(run_log_open(&log, path, &err), 0);
    run_log_command_line(log, 5, (char **)argv);
    run_log_close(log);
    char *text = read_whole_file(path);
    // Plain words stay bare; a word with a space is single-quoted.
    assert_non_null(strstr(text, "command: lightly-train-c train --data '/tmp/my images' '--out=run 1'\n"));
    assert_int_equal(count_timestamped_lines(text), 1);
    free(text);
}

static void test_run_log_system_info(void **state) {
    (void)state;
    char path[512];
    fixture_temp_path(path, sizeof path, "system.log");
    ErrorMessage err = {{0}};
    RunLog *log = NULL;
    assert_int_equal(run_log_open(&log, path, &err), 0);
    run_log_system_info(log);
    run_log_close(log);
    char *text = read_whole_file(path);
    assert_true(count_timestamped_lines(text) >= 9);
    assert_non_null(strstr(text, " host: "));
    assert_non_null(strstr(text, " OS: Linux "));
    assert_non_null(strstr(text, " CPU: "));
    assert_non_null(strstr(text, " CPU cores: "));
    assert_non_null(strstr(text, " logical, "));
    assert_non_null(strstr(text, " AVX2: "));
    assert_non_null(strstr(text, " memory: "));
    assert_non_null(strstr(text, " compiler: "));
    assert_non_null(strstr(text, "lightly-train-c version: " LTC_VERSION "\n"));
    assert_non_null(strstr(text, " libraries: libjpeg"));
    assert_non_null(strstr(text, ", libpng 1."));
    assert_non_null(strstr(text, ", libwebp "));
    assert_non_null(strstr(text, ", oneDNN "));
    assert_non_null(strstr(text, ", protobuf-c 1."));
    assert_non_null(strstr(text, " GPU"));
#ifndef LTC_WITH_CUDA
    assert_non_null(strstr(text, "GPUs: none (CPU build)"));
#endif
    printf("%s", text);  // for the test log: what a user's train.log shows
    free(text);

    char model[256];
    system_info_cpu_model(model, sizeof model);
    assert_true(strlen(model) > 0);
    assert_null(strchr(model, '\n'));
    assert_true(system_info_total_memory() > (64ull << 20));  // any machine running this
}

// ---- summary ----------------------------------------------------------------------

static RunTotals make_totals(double batch_seconds, double data_seconds, const char *device,
                             const char *precision) {
    RunTotals totals = {
        .wall_seconds = 10.0,
        .batch_seconds = batch_seconds,
        .data_seconds = data_seconds,
        .steps = 100,
        .images = 1000,
        .skipped_files = 3,
        .num_workers = 4,
        .batch_size = 64,
        .precision = precision,
        .device = device,
    };
    return totals;
}

static void test_bottleneck_thresholds(void **state) {
    (void)state;
    RunTotals totals;
    // 1 / (4 + 1) is exactly the double nearest 0.2, as is the threshold
    // constant: the boundary itself is balanced (strict comparison).
    totals = make_totals(4.0, 1.0, "cpu", "32-true");
    assert_int_equal(run_bottleneck(&totals), BOTTLENECK_BALANCED);
    totals = make_totals(4.0, 1.001, "cpu", "32-true");
    assert_int_equal(run_bottleneck(&totals), BOTTLENECK_DATA);
    totals = make_totals(19.0, 1.0, "cpu", "32-true");  // exactly 0.05
    assert_int_equal(run_bottleneck(&totals), BOTTLENECK_BALANCED);
    totals = make_totals(19.0, 0.999, "cpu", "32-true");
    assert_int_equal(run_bottleneck(&totals), BOTTLENECK_COMPUTE);
    totals = make_totals(1.0, 0.0, "cpu", "32-true");
    assert_int_equal(run_bottleneck(&totals), BOTTLENECK_COMPUTE);
    totals = make_totals(0.0, 1.0, "cpu", "32-true");
    assert_int_equal(run_bottleneck(&totals), BOTTLENECK_DATA);
    totals = make_totals(0.0, 0.0, "cpu", "32-true");  // nothing measured
    assert_int_equal(run_bottleneck(&totals), BOTTLENECK_BALANCED);
    totals = make_totals(NAN, 1.0, "cpu", "32-true");
    assert_int_equal(run_bottleneck(&totals), BOTTLENECK_BALANCED);
}

static void test_summary_advice(void **state) {
    (void)state;
    char text[4096];
    RunTotals totals = make_totals(5.0, 5.0, "gpu", "32-true");
    run_summary_format(&totals, 16, text, sizeof text);
    assert_non_null(strstr(text, "total time      0:10"));
    assert_non_null(strstr(text, "steps           100\n"));
    assert_non_null(strstr(text, "1000 (100.0 images/s)"));
    assert_non_null(strstr(text, "compute 50%, waiting for data 50%"));
    assert_non_null(strstr(text, "skipped files   3\n"));
    assert_non_null(strstr(text, "data-bound"));
    assert_non_null(strstr(text, "more workers (--num-workers, now 4; this machine has 16 cores)"));
    assert_non_null(strstr(text, "faster storage / smaller images on disk"));
    assert_null(strstr(text, "every core"));
    assert_null(strstr(text, "larger batch"));
    assert_int_equal(text[strlen(text) - 1], '\n');
    printf("%s", text);

    run_summary_format(&totals, 4, text, sizeof text);  // workers already fill the cores
    assert_non_null(strstr(text, "this machine has 4 cores"));
    assert_non_null(strstr(text, "every core"));

    totals = make_totals(9.9, 0.1, "gpu", "32-true");
    run_summary_format(&totals, 16, text, sizeof text);
    assert_non_null(strstr(text, "compute-bound"));
    assert_non_null(strstr(text, "a larger batch if memory allows (--batch-size, now 64)"));
    assert_non_null(strstr(text, "mixed precision (--precision 16-mixed / bf16-mixed on GPU)"));
    assert_null(strstr(text, "more workers"));
    printf("%s", text);

    totals = make_totals(9.9, 0.1, "gpu", "bf16-mixed");  // already mixed
    run_summary_format(&totals, 16, text, sizeof text);
    assert_non_null(strstr(text, "a larger batch if memory allows"));
    assert_null(strstr(text, "mixed precision ("));

    totals = make_totals(9.9, 0.1, "cpu", "32-true");
    run_summary_format(&totals, 2, text, sizeof text);
    assert_non_null(strstr(text, "limited by compute on the CPU: a GPU or more cores would help"));
    assert_null(strstr(text, "mixed precision ("));
    printf("%s", text);

    totals = make_totals(9.0, 1.0, "cpu", "32-true");
    run_summary_format(&totals, 2, text, sizeof text);
    assert_non_null(strstr(text, "balanced"));
    assert_null(strstr(text, "more workers"));
    assert_null(strstr(text, "larger batch"));

    // A short buffer is cut, never overrun.
    char small[24];
    memset(small, 'x', sizeof small);
    run_summary_format(&totals, 2, small, 16);
    assert_int_equal(strlen(small), 15);
    assert_int_equal(small[16], 'x');
}

// ---- image grid --------------------------------------------------------------------

// A pixel value that names its view, sample, row, column and channel, never
// the grey background (128) or the white gaps (255).
static uint8_t pattern_value(int view, int sample, int y, int x, int c) {
    return (uint8_t)(1 + (view * 37 + sample * 23 + y * 7 + x * 3 + c) % 120);
}

static uint8_t *make_view(int view, int batch, int size) {  // (batch, size, size, 3)
    uint8_t *pixels = malloc((size_t)batch * size * size * 3);
    for (int s = 0; s < batch; s++)
        for (int y = 0; y < size; y++)
            for (int x = 0; x < size; x++)
                for (int c = 0; c < 3; c++)
                    pixels[(((size_t)s * size + y) * size + x) * 3 + c] = pattern_value(view, s, y, x, c);
    return pixels;
}

static const uint8_t *grid_pixel(const uint8_t *rgb, int width, int x, int y) {
    return rgb + ((size_t)y * width + x) * 3;
}

static void test_image_grid_geometry_and_pixels(void **state) {
    (void)state;
    uint8_t *views[2] = {make_view(0, 3, 4), make_view(1, 3, 4)};
    const int sizes[2] = {4, 4};
    uint8_t *rgb = NULL;
    int width = 0, height = 0;
    ErrorMessage err = {{0}};
    assert_int_equal(image_grid_make((const uint8_t *const *)views, sizes, 2, 3, 3, &rgb, &width,
                                     &height, &err),
                     0);
    assert_int_equal(width, 2 * 4 + 2);   // two cells, one gap
    assert_int_equal(height, 3 * 4 + 2 * 2);  // three cells, two gaps
    // Hand-placed: cell (row 1, view 1) starts at x = 4 + 2, y = 4 + 2; its
    // pixel (x 0, y 1) is at (6, 7).
    assert_memory_equal(grid_pixel(rgb, width, 6, 7),
                        ((uint8_t[3]){pattern_value(1, 1, 1, 0, 0), pattern_value(1, 1, 1, 0, 1),
                                      pattern_value(1, 1, 1, 0, 2)}),
                        3);
    for (int y = 0; y < height; y++) {
        for (int x = 0; x < width; x++) {
            const int in_gap_x = x % 6 >= 4, in_gap_y = y % 6 >= 4;
            for (int c = 0; c < 3; c++) {
                const uint8_t got = grid_pixel(rgb, width, x, y)[c];
                if (in_gap_x || in_gap_y)
                    assert_int_equal(got, IMAGE_GRID_GAP_VALUE);
                else
                    assert_int_equal(got, pattern_value(x / 6, y / 6, y % 6, x % 6, c));
            }
        }
    }
    free(rgb);
    free(views[0]);
    free(views[1]);
}

static void test_image_grid_rows_limited(void **state) {
    (void)state;
    uint8_t *view = make_view(0, 20, 3);
    const int size = 3;
    uint8_t *rgb = NULL;
    int width = 0, height = 0;
    ErrorMessage err = {{0}};
    const uint8_t *const views[1] = {view};
    assert_int_equal(image_grid_make(views, &size, 1, 20, 20, &rgb, &width, &height, &err), 0);
    assert_int_equal(width, 3);
    assert_int_equal(height, IMAGE_GRID_MAX_ROWS * 3 + (IMAGE_GRID_MAX_ROWS - 1) * 2);
    free(rgb);
    // More images asked than the batch has: the batch.
    assert_int_equal(image_grid_make(views, &size, 1, 2, 5, &rgb, &width, &height, &err), 0);
    assert_int_equal(height, 2 * 3 + 2);
    free(rgb);
    free(view);
}

static void test_image_grid_mixed_sizes_centred(void **state) {
    (void)state;
    // DINO-like: a large global view and a small local one (6 and 3 pixels):
    // the small one sits at offset (6 - 3) / 2 = 1 on grey.
    uint8_t *views[2] = {make_view(0, 2, 6), make_view(1, 2, 3)};
    const int sizes[2] = {6, 3};
    uint8_t *rgb = NULL;
    int width = 0, height = 0;
    ErrorMessage err = {{0}};
    assert_int_equal(image_grid_make((const uint8_t *const *)views, sizes, 2, 2, 2, &rgb, &width,
                                     &height, &err),
                     0);
    assert_int_equal(width, 6 + 2 + 6);
    assert_int_equal(height, 6 + 2 + 6);
    for (int row = 0; row < 2; row++) {
        const int cell_x = 8, cell_y = row * 8;
        for (int y = 0; y < 6; y++) {
            for (int x = 0; x < 6; x++) {
                const int inside = x >= 1 && x < 4 && y >= 1 && y < 4;
                for (int c = 0; c < 3; c++) {
                    const uint8_t got = grid_pixel(rgb, width, cell_x + x, cell_y + y)[c];
                    assert_int_equal(got, inside ? pattern_value(1, row, y - 1, x - 1, c)
                                                 : IMAGE_GRID_BACKGROUND);
                }
            }
        }
        // The large view fills its cell.
        assert_int_equal(grid_pixel(rgb, width, 5, cell_y + 5)[2], pattern_value(0, row, 5, 5, 2));
    }
    free(rgb);
    free(views[0]);
    free(views[1]);
}

static void test_image_grid_bad_arguments(void **state) {
    (void)state;
    uint8_t *view = make_view(0, 2, 4);
    const uint8_t *const views[2] = {view, NULL};
    const int sizes[2] = {4, 4};
    const int bad_sizes[1] = {0};
    uint8_t *rgb = (uint8_t *)1;
    int width = 1, height = 1;
    ErrorMessage err = {{0}};
    assert_int_equal(image_grid_make(views, sizes, 0, 2, 2, &rgb, &width, &height, &err), -1);
    assert_non_null(strstr(err.text, "view count 0"));
    assert_null(rgb);
    assert_int_equal(width, 0);
    assert_int_equal(image_grid_make(views, sizes, 2, 2, 2, &rgb, &width, &height, &err), -1);
    assert_non_null(strstr(err.text, "view 1 has no pixels"));
    assert_int_equal(image_grid_make(views, bad_sizes, 1, 2, 2, &rgb, &width, &height, &err), -1);
    assert_non_null(strstr(err.text, "size 0"));
    assert_int_equal(image_grid_make(views, sizes, 1, 0, 2, &rgb, &width, &height, &err), -1);
    assert_non_null(strstr(err.text, "batch 0"));
    assert_int_equal(image_grid_make(views, sizes, 1, 2, 0, &rgb, &width, &height, &err), -1);
    assert_non_null(strstr(err.text, "images 0"));
    assert_int_equal(image_grid_make(NULL, sizes, 1, 2, 2, &rgb, &width, &height, &err), -1);
    assert_null(rgb);
    free(view);
}

static void test_image_grid_feeds_tensorboard(void **state) {
    (void)state;
    uint8_t *views[2] = {make_view(0, 4, 8), make_view(1, 4, 5)};
    const int sizes[2] = {8, 5};
    uint8_t *rgb = NULL;
    int width = 0, height = 0;
    ErrorMessage err = {{0}};
    assert_int_equal(image_grid_make((const uint8_t *const *)views, sizes, 2, 4, 4, &rgb, &width,
                                     &height, &err),
                     0);
    char dir[512], path[1024];
    fixture_temp_path(dir, sizeof dir, "tb-grid");
    TbWriter *writer = NULL;
    assert_int_equal(tb_writer_open(&writer, dir, &err), 0);
    assert_int_equal(tb_add_image(writer, "augmentations", 0, width, height, rgb, &err), 0);
    snprintf(path, sizeof path, "%s", tb_writer_path(writer));
    assert_int_equal(tb_writer_close(writer, &err), 0);
    TbReader *reader = NULL;
    assert_int_equal(tb_reader_open(&reader, path, &err), 0);
    TbEvent event;
    int images = 0;
    while (tb_reader_next(reader, &event, &err) == 1) {
        for (size_t i = 0; i < event.value_count; i++) {
            if (event.values[i].kind != TB_VALUE_IMAGE) continue;
            assert_string_equal(event.values[i].tag, "augmentations");
            assert_int_equal(event.values[i].image_width, 8 + 2 + 8);
            assert_int_equal(event.values[i].image_height, 4 * 8 + 3 * 2);
            images++;
        }
    }
    assert_int_equal(images, 1);
    tb_reader_close(reader);
    free(rgb);
    free(views[0]);
    free(views[1]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_progress_terminal_overwrites_one_line),
        cmocka_unit_test(test_progress_terminal_redraw_throttle),
        cmocka_unit_test(test_progress_terminal_always_draws_last_step),
        cmocka_unit_test(test_progress_plain_lines_at_interval),
        cmocka_unit_test(test_progress_eta_and_fields),
        cmocka_unit_test(test_progress_unknown_total),
        cmocka_unit_test(test_progress_message),
        cmocka_unit_test(test_progress_width_limit),
        cmocka_unit_test(test_run_log_lines_append_and_flush),
        cmocka_unit_test(test_run_log_command_line_quoting),
        cmocka_unit_test(test_run_log_system_info),
        cmocka_unit_test(test_bottleneck_thresholds),
        cmocka_unit_test(test_summary_advice),
        cmocka_unit_test(test_image_grid_geometry_and_pixels),
        cmocka_unit_test(test_image_grid_rows_limited),
        cmocka_unit_test(test_image_grid_mixed_sizes_centred),
        cmocka_unit_test(test_image_grid_bad_arguments),
        cmocka_unit_test(test_image_grid_feeds_tensorboard),
    };
    return cmocka_run_group_tests(tests, fixture_tempdir_setup, fixture_tempdir_teardown);
}
