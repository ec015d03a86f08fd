// Tests of what a kill leaves of the program's output files (issue 22):
// an embedding write killed at every step of it (LTC_FAULT=kill-in-write@K
// in a forked child, K = 1, 2, ... until the write completes) leaves the
// previous output or the new one, and never a .npy beside the names of
// another write (npy: the .npy may be missing); what the killed writer left
// is then removed by output_files_tidy. And the stale-temporary cleanup
// removes only the names it is given, of dead processes.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "embed/embedding_writers.h"
#include "image_fixtures.h"
#include "util/file.h"
#include "util/output_path.h"

#define DIM 4

// A file's bytes, or absent.
typedef struct Contents {
    uint8_t *data;
    size_t size;
    int present;
} Contents;

static Contents read_contents(const char *path) {
    Contents contents = {0};
    ByteBuffer buffer = {0};
    ErrorMessage err;
    if (access(path, F_OK) != 0) return contents;
    if (file_read_all(path, &buffer, 1 << 20, &err) != 0) fail_msg("%s: %s", path, err.text);
    contents.data = buffer.data;  // owned now
    contents.size = buffer.size;
    contents.present = 1;
    return contents;
}

static int same(const Contents *a, const Contents *b) {
    return a->present == b->present && a->size == b->size &&
           (!a->present || memcmp(a->data, b->data, a->size) == 0);
}

static void copy_into(const Contents *contents, const char *path) {
    unlink(path);
    if (contents->present) assert_int_equal(fixture_write_file(path, contents->data, contents->size), 0);
}

// The table of one write: `rows` rows named "<tag><row>.jpg".
typedef struct Table {
    float features[8 * DIM];
    char storage[8][32];
    const char *names[8];
    EmbeddingTable table;
} Table;

static void make_table(Table *t, int rows, const char *tag) {
    for (int r = 0; r < rows; r++) {
        snprintf(t->storage[r], sizeof t->storage[r], "%s%d.jpg", tag, r);
        t->names[r] = t->storage[r];
        for (int d = 0; d < DIM; d++) t->features[r * DIM + d] = (float)(r * 10 + d) + tag[0];
    }
    t->table = (EmbeddingTable){t->features, (size_t)rows, DIM, t->names};
}

// embedding_write in a child that LTC_FAULT kills at its step-th write
// step (0: never): 1 when it was killed, 0 when the write completed.
static int write_killed_at(const char *path, EmbedFormat format, const EmbeddingTable *table,
                           long step) {
    const pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        char fault[64];
        snprintf(fault, sizeof fault, "kill-in-write@%ld", step);
        setenv("LTC_FAULT", fault, 1);
        ErrorMessage err;
        _exit(embedding_write(path, format, table, &err) == 0 ? 0 : 3);
    }
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) return 1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail_msg("the write failed: %d", status);
    return 0;
}

static int temporaries_in(const char *dir) {
    DIR *handle = opendir(dir);
    int count = 0;
    for (struct dirent *entry; handle && (entry = readdir(handle));)
        count += strstr(entry->d_name, ".tmp.") != NULL;
    if (handle) closedir(handle);
    return count;
}

// One format: an old output (3 rows) replaced by a new one (5 rows), killed
// at every step.
static void check_kills(EmbedFormat format, const char *file) {
    char dir[4096], path[4200], sidecar[4300], scratch[4200], scratch_sidecar[4300];
    fixture_temp_path(dir, sizeof dir, "kills");
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    snprintf(scratch, sizeof scratch, "%s/expected-%s", dir, file);
    const int npy = format == EMBED_FORMAT_NPY;
    assert_int_equal(embedding_npy_filenames_path(path, sidecar, sizeof sidecar), 0);
    assert_int_equal(embedding_npy_filenames_path(scratch, scratch_sidecar, sizeof scratch_sidecar),
                     0);
    Table old_table, new_table;
    make_table(&old_table, 3, "old");
    make_table(&new_table, 5, "new");
    // The two versions' bytes (the main file, and the names file of npy).
    Contents versions[2][2];
    const Table *tables[2] = {&old_table, &new_table};
    for (int v = 0; v < 2; v++) {
        // In a child too: the step count is the process's, so this process writes nothing.
        assert_int_equal(write_killed_at(scratch, format, &tables[v]->table, 0), 0);
        versions[v][0] = read_contents(scratch);
        versions[v][1] = npy ? read_contents(scratch_sidecar) : (Contents){0};
        unlink(scratch), unlink(scratch_sidecar);
    }
    int seen_missing = 0, seen_old = 0, steps = 0;
    for (long step = 1;; step++) {
        copy_into(&versions[0][0], path);  // the previous run's output
        if (npy) copy_into(&versions[0][1], sidecar);
        const int killed = write_killed_at(path, format, &new_table.table, step);
        const Contents now[2] = {read_contents(path), npy ? read_contents(sidecar) : (Contents){0}};
        int version = -1;
        for (int v = 0; v < 2; v++)
            if (same(&now[0], &versions[v][0]) && (!npy || same(&now[1], &versions[v][1])))
                version = v;
        if (!now[0].present && npy) seen_missing = 1;
        else if (version < 0)
            fail_msg("%s killed at write step %ld: the output is neither the old nor the new "
                     "one%s", file, step, npy ? " (or a .npy beside other names)" : "");
        seen_old |= version == 0;
        for (int i = 0; i < 2; i++) free(now[i].data);
        const char *const paths[2] = {path, sidecar};
        char note[2048];
        output_files_tidy(paths, npy ? 2 : 1, note, sizeof note);
        assert_int_equal(temporaries_in(dir), 0);  // what the killed writer left is gone
        if (!killed) {
            assert_int_equal(version, 1);
            assert_string_equal(note, "");
            steps = (int)step - 1;
            break;
        }
        assert_true(step < 20);
    }
    // Every step was a kill point: temporary created, complete (each file),
    // npy: the old .npy removed, each rename.
    assert_int_equal(steps, npy ? 7 : 3);
    assert_true(seen_old);
    assert_int_equal(seen_missing, npy);
    for (int v = 0; v < 2; v++)
        for (int i = 0; i < 2; i++) free(versions[v][i].data);
}

static void test_npy_pair_under_kills(void **state) {
    (void)state;
    check_kills(EMBED_FORMAT_NPY, "e.npy");
}

static void test_single_files_under_kills(void **state) {
    (void)state;
    check_kills(EMBED_FORMAT_CSV, "e.csv");
    check_kills(EMBED_FORMAT_LIGHTLY_CSV, "e_lightly.csv");
    check_kills(EMBED_FORMAT_SAFETENSORS, "e.safetensors");
}

// Only the given names' temporaries of dead processes go: a user's file of
// the same shape, a live writer's file and other names stay.
static void test_stale_temporaries_only_ours(void **state) {
    (void)state;
    char dir[4096], path[4300];
    fixture_temp_path(dir, sizeof dir, "stale");
    const pid_t child = fork();  // a process that has exited (and been reaped)
    assert_true(child >= 0);
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0);
    char ours[64], events[96], user[64], live[64];
    snprintf(ours, sizeof ours, "last.ckpt.tmp.%ld", (long)child);
    snprintf(events, sizeof events, "events.out.tfevents.1700000000.host.7.0.tmp.%ld", (long)child);
    snprintf(user, sizeof user, "notes.txt.tmp.%ld", (long)child);
    snprintf(live, sizeof live, "last.ckpt.tmp.%ld", (long)getpid());
    const char *names[5] = {ours, events, user, live, "last.ckpt.tmp.x"};
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        assert_int_equal(fixture_write_file(path, "x", 1), 0);
    }
    const char *const patterns[] = {"last.ckpt", "events.out.tfevents.*", NULL};
    char removed[1024] = "";
    assert_int_equal(file_remove_stale_temporaries(dir, patterns, removed, sizeof removed), 2);
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        assert_int_equal(access(path, F_OK) == 0, i >= 2);
    }
    assert_non_null(strstr(removed, ours));
    // One output path: only "<its name>.tmp.<dead pid>".
    snprintf(path, sizeof path, "%s/%s", dir, ours);
    assert_int_equal(fixture_write_file(path, "x", 1), 0);
    snprintf(path, sizeof path, "%s/notes.txt", dir);
    removed[0] = '\0';
    assert_int_equal(file_remove_stale_temporaries_of(path, removed, sizeof removed), 1);
    snprintf(path, sizeof path, "%s/%s", dir, user);
    assert_int_equal(access(path, F_OK), -1);
    snprintf(path, sizeof path, "%s/%s", dir, ours);
    assert_int_equal(access(path, F_OK), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_npy_pair_under_kills),
        cmocka_unit_test(test_single_files_under_kills),
        cmocka_unit_test(test_stale_temporaries_only_ours),
    };
    return cmocka_run_group_tests(tests, fixture_tempdir_setup, fixture_tempdir_teardown);
}
