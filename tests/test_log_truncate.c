// What a resumed run does to the files a killed one left: the logged tail
// after the checkpoint is dropped from metrics.jsonl and the TensorBoard
// events (the kNN value at the checkpoint and the file_version record stay,
// a partial last record goes), and temporary files of dead writers are
// removed while a live writer's stay.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "image_fixtures.h"
#include "logging/log_truncate.h"
#include "logging/tb_reader.h"
#include "logging/tb_writer.h"
#include "util/file.h"

static char *read_text(const char *path) {
    FILE *file = fopen(path, "rb");
    assert_non_null(file);
    static char text[4096];
    const size_t got = fread(text, 1, sizeof text - 1, file);
    fclose(file);
    text[got] = '\0';
    return text;
}

// Writes lines as metrics.jsonl in the test's folder (its path into path)
// and truncates it to a checkpoint after checkpoint_step steps.
static LogTruncation truncate_metrics(char *path, size_t size, const char *lines,
                                      int64_t checkpoint_step) {
    fixture_temp_path(path, size, "metrics.jsonl");
    assert_int_equal(fixture_write_file(path, lines, strlen(lines)), 0);
    LogTruncation cut = {0};
    ErrorMessage err = {{0}};
    assert_int_equal(metrics_jsonl_truncate(path, checkpoint_step, &cut, &err), 0);
    return cut;
}

static void test_metrics_tail_dropped(void **state) {
    char path[PATH_MAX];
    // Steps 0 and 1 ran before the checkpoint after 2 steps; its kNN value
    // is logged at step 2; steps 2 to 4 ran after it and are lost with the
    // kill (the last line half written).
    const char *lines =
        "{\"step\": 0, \"knn/top1\": 0.25}\n"
        "{\"step\": 0, \"train_loss\": 5}\n"
        "{\"step\": 1, \"train_loss\": 4}\n"
        "{\"step\": 2, \"knn/top1\": 0.5}\n"
        "{\"step\": 2, \"train_loss\": 3}\n"
        "{\"step\": 3, \"train_loss\": 2}\n"
        "{\"step\": 4, \"train_lo";
    LogTruncation cut = truncate_metrics(path, sizeof path, lines, 2);
    assert_string_equal(read_text(path), "{\"step\": 0, \"knn/top1\": 0.25}\n"
                                         "{\"step\": 0, \"train_loss\": 5}\n"
                                         "{\"step\": 1, \"train_loss\": 4}\n"
                                         "{\"step\": 2, \"knn/top1\": 0.5}\n");
    assert_int_equal(cut.dropped, 3);
    assert_int_equal(cut.knn_at_step, 1);
    // Nothing past the step: the file is left as it is.
    cut = (LogTruncation){0};
    ErrorMessage err = {{0}};
    assert_int_equal(metrics_jsonl_truncate(path, 5, &cut, &err), 0);
    assert_int_equal(cut.dropped, 0);
    assert_int_equal(cut.knn_at_step, 0);
    // A missing file is not an error.
    fixture_temp_path(path, sizeof path, "absent.jsonl");
    assert_int_equal(metrics_jsonl_truncate(path, 2, &cut, &err), 0);
}

// Lines that are not a record of a step are dropped; a step is read within
// its own line (sscanf over the whole file's buffer read past its end:
// valgrind saw it).
static void test_metrics_damaged_lines_dropped(void **state) {
    char path[PATH_MAX];
    const char *lines =
        "{\"step\": 0, \"train_loss\": 5}\n"
        "{\"step\": x, \"train_loss\": 5}\n"
        "{\"step\": }\n"
        "{\"step\": -\n"
        "garbage\n"
        "\n"
        "{\"step\": 1\n"
        "{\"step\": 2, \"train_loss\": 3}\n"
        "{\"step\": 1, \"train_loss\": 4}\n";
    const LogTruncation cut = truncate_metrics(path, sizeof path, lines, 2);
    assert_string_equal(read_text(path), "{\"step\": 0, \"train_loss\": 5}\n"
                                         "{\"step\": 1\n"
                                         "{\"step\": 1, \"train_loss\": 4}\n");
    assert_int_equal(cut.dropped, 6);
}

// "STEP:TAG" of every summary event, in file order, and the record count.
static void event_list(const char *path, char *out, size_t size, size_t *records) {
    TbReader *reader = NULL;
    ErrorMessage err = {{0}};
    assert_int_equal(tb_reader_open(&reader, path, &err), 0);
    out[0] = '\0';
    TbEvent event;
    int got;
    while ((got = tb_reader_next(reader, &event, &err)) == 1)
        for (size_t v = 0; v < event.value_count; v++)
            snprintf(out + strlen(out), size - strlen(out), "%lld:%s ", (long long)event.step,
                     event.values[v].tag);
    assert_int_equal(got, 0);
    *records = tb_reader_record_count(reader);
    tb_reader_close(reader);
}

static void test_events_tail_dropped(void **state) {
    char dir[PATH_MAX];
    fixture_temp_path(dir, sizeof dir, "events");
    TbWriter *writer = NULL;
    ErrorMessage err = {{0}};
    assert_int_equal(tb_writer_open(&writer, dir, &err), 0);
    for (int step = 0; step < 5; step++) {
        assert_int_equal(tb_add_scalar(writer, "train_loss", step, 1.0f / (float)(step + 1), &err), 0);
        if (step == 3) assert_int_equal(tb_add_scalar(writer, "knn/top1", 3, 0.5f, &err), 0);
    }
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", tb_writer_path(writer));
    assert_int_equal(tb_writer_close(writer, &err), 0);
    // A record cut in half at the end, as a kill while writing leaves it.
    FILE *file = fopen(path, "ab");
    assert_non_null(file);
    fwrite("\x20\x00\x00\x00\x00\x00", 1, 6, file);
    fclose(file);

    LogTruncation cut = {0};
    assert_int_equal(tb_events_truncate(dir, 3, &cut, &err), 0);
    char list[512];
    size_t records = 0;
    event_list(path, list, sizeof list, &records);
    assert_string_equal(list, "0:train_loss 1:train_loss 2:train_loss 3:knn/top1 ");
    assert_int_equal(records, 5);  // with the file_version record
    assert_int_equal(cut.dropped, 3);  // steps 3 and 4, and the cut record
    assert_int_equal(cut.knn_at_step, 1);
}

static void test_stale_temporaries_removed(void **state) {
    char dir[PATH_MAX], path[PATH_MAX + 128];
    fixture_temp_path(dir, sizeof dir, "outputs");
    // A process that has exited (and been reaped): its pid is free.
    const pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0);
    const char *names[3];
    char dead[64], alive[64];
    snprintf(dead, sizeof dead, "last.ckpt.tmp.%ld", (long)child);
    snprintf(alive, sizeof alive, "export.safetensors.tmp.%ld", (long)getpid());
    names[0] = dead, names[1] = alive, names[2] = "notes.tmp.txt";
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        assert_int_equal(fixture_write_file(path, "x", 1), 0);
    }
    char removed[512] = "";
    const char *const ours[] = {"last.ckpt", "export.safetensors", NULL};
    assert_int_equal(file_remove_stale_temporaries(dir, ours, removed, sizeof removed), 1);
    assert_non_null(strstr(removed, dead));
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        assert_int_equal(access(path, F_OK) == 0, i != 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_metrics_tail_dropped, fixture_tempdir_setup,
                                        fixture_tempdir_teardown),
        cmocka_unit_test_setup_teardown(test_metrics_damaged_lines_dropped, fixture_tempdir_setup,
                                        fixture_tempdir_teardown),
        cmocka_unit_test_setup_teardown(test_events_tail_dropped, fixture_tempdir_setup,
                                        fixture_tempdir_teardown),
        cmocka_unit_test_setup_teardown(test_stale_temporaries_removed, fixture_tempdir_setup,
                                        fixture_tempdir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
