// Tests of the one-node launcher (dist/local_launch.h) with shell scripts as
// workers: every worker gets its own torchrun-style place in the run and the
// rest of the environment; the first failure stops the others (SIGTERM, then
// SIGKILL for one that ignores it) and is the launch's status; a signal sent
// to the launcher reaches every worker; each launch has its own token.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dist/launch_env.h"
#include "dist/local_launch.h"
#include "util/cpu.h"

extern char **environ;

static char work_dir[] = "/tmp/ltc-local-launch-XXXXXX";

static int setup(void **state) {
    (void)state;
    if (!mkdtemp(work_dir)) return -1;
    return setenv("LAUNCH_TEST_DIR", work_dir, 1);
}

static int teardown(void **state) {
    (void)state;
    char command[128];
    snprintf(command, sizeof command, "rm -rf '%s'", work_dir);
    return system(command) == 0 ? 0 : -1;
}

// Runs `workers` copies of `sh -c script`; returns the launch's status.
static int launch_script(int workers, const char *script, double grace_seconds) {
    char *argv[] = {"sh", "-c", (char *)script, NULL};
    const LocalLaunch launch = {.workers = workers, .program = "/bin/sh", .argv = argv,
                                .envp = environ, .grace_seconds = grace_seconds};
    int status = -1;
    ErrorMessage err = {{0}};
    assert_int_equal(local_launch_run(&launch, &status, &err), 0);
    return status;
}

static void read_worker_file(const char *name, char *text, size_t size) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", work_dir, name);
    FILE *file = fopen(path, "r");
    assert_non_null(file);
    const size_t got = fread(text, 1, size - 1, file);
    text[got] = 0;
    fclose(file);
}

// Every worker's environment goes through launch_env_detect as a
// torchrun-started rank would.
static void test_workers_get_their_place(void **state) {
    (void)state;
    setenv("RANK", "7", 1);  // the launcher's own value must not leak through
    setenv("LAUNCH_TEST_KEEP", "kept", 1);
    const int status = launch_script(
        3, "env > \"$LAUNCH_TEST_DIR/env.$LOCAL_RANK\"", 10.0);
    unsetenv("RANK");
    assert_int_equal(status, 0);
    char ports[3][16] = {{0}}, tokens[3][128] = {{0}};
    for (int rank = 0; rank < 3; rank++) {
        char name[32], text[16384];
        snprintf(name, sizeof name, "env.%d", rank);
        read_worker_file(name, text, sizeof text);
        assert_non_null(strstr(text, "LAUNCH_TEST_KEEP=kept\n"));
        // Split into lines: launch_env_detect reads NAME=VALUE strings.
        char *entries[512];
        int count = 0;
        for (char *line = strtok(text, "\n"); line && count < 511; line = strtok(NULL, "\n"))
            entries[count++] = line;
        entries[count] = NULL;
        LaunchEnv env;
        ErrorMessage err = {{0}};
        assert_int_equal(launch_env_detect(entries, &env, &err), 0);
        assert_int_equal(env.kind, LAUNCH_TORCHRUN);
        assert_int_equal(env.rank, rank);
        assert_int_equal(env.local_rank, rank);
        assert_int_equal(env.world_size, 3);
        assert_int_equal(env.local_world_size, 3);
        assert_int_equal(env.num_nodes, 1);
        assert_string_equal(env.master_addr, "127.0.0.1");
        assert_true(env.master_port > 0 && env.master_port < 65536);
        snprintf(ports[rank], sizeof ports[rank], "%d", env.master_port);
        snprintf(tokens[rank], sizeof tokens[rank], "%s", env.run_token);
        assert_true(strlen(env.run_token) > 0);
        for (int i = 0; i < count; i++) assert_false(strcmp(entries[i], "RANK=7") == 0);
    }
    for (int rank = 1; rank < 3; rank++) {
        assert_string_equal(ports[rank], ports[0]);
        assert_string_equal(tokens[rank], tokens[0]);
    }
    // A second launch is another run: another token.
    assert_int_equal(launch_script(1, "echo \"$TORCHELASTIC_RUN_ID\" > \"$LAUNCH_TEST_DIR/token\"",
                                   10.0), 0);
    char second[128];
    read_worker_file("token", second, sizeof second);
    second[strcspn(second, "\n")] = 0;
    assert_string_not_equal(second, tokens[0]);
}

// Worker 1 fails at once; the others would sleep a minute but are stopped
// by SIGTERM, and the launch returns worker 1's status.
static void test_first_failure_stops_the_others(void **state) {
    (void)state;
    const double start = time_now();
    const int status = launch_script(
        3, "if [ \"$RANK\" = 1 ]; then exit 3; fi; exec sleep 60", 10.0);
    assert_int_equal(status, 3);
    assert_true(time_now() - start < 10.0);
}

// A worker that ignores SIGTERM is killed once the grace period is over;
// the status is still the first failure's, not the killed worker's.
static void test_stubborn_worker_is_killed(void **state) {
    (void)state;
    const double start = time_now();
    const int status = launch_script(
        2, "if [ \"$RANK\" = 0 ]; then sleep 0.2; exit 5; fi; trap '' TERM; "
           "while :; do sleep 0.1; done", 1.0);
    const double seconds = time_now() - start;
    assert_int_equal(status, 5);
    assert_true(seconds >= 1.0 && seconds < 8.0);
}

// A worker killed by a signal makes the launch report 128 + the signal.
static void test_killed_worker_status(void **state) {
    (void)state;
    assert_int_equal(launch_script(2, "if [ \"$RANK\" = 1 ]; then kill -KILL $$; fi; sleep 0.1",
                                   5.0),
                     128 + SIGKILL);
}

// SIGTERM to the launcher reaches every worker; they exit as a stopped
// trainer does (143) and the launcher returns that.
static void test_signal_is_forwarded(void **state) {
    (void)state;
    const pid_t launcher = fork();
    assert_true(launcher >= 0);
    if (launcher == 0) {
        const int status = launch_script(
            2, "trap 'touch \"$LAUNCH_TEST_DIR/term.$RANK\"; exit 143' TERM; touch "
               "\"$LAUNCH_TEST_DIR/up.$RANK\"; while :; do sleep 0.1; done", 5.0);
        _exit(status);
    }
    char up[2][256];
    for (int rank = 0; rank < 2; rank++)
        snprintf(up[rank], sizeof up[rank], "%s/up.%d", work_dir, rank);
    const double start = time_now();
    while ((access(up[0], F_OK) != 0 || access(up[1], F_OK) != 0) && time_now() - start < 10.0)
        usleep(20000);
    kill(launcher, SIGTERM);
    int wait_status = 0;
    assert_int_equal(waitpid(launcher, &wait_status, 0), launcher);
    assert_true(WIFEXITED(wait_status));
    assert_int_equal(WEXITSTATUS(wait_status), 143);
    for (int rank = 0; rank < 2; rank++) {
        char path[256];
        snprintf(path, sizeof path, "%s/term.%d", work_dir, rank);
        assert_int_equal(access(path, F_OK), 0);
    }
}

// A program that cannot be started is a worker failing with 127.
static void test_missing_program(void **state) {
    (void)state;
    char *argv[] = {"nothing", NULL};
    const LocalLaunch launch = {.workers = 2, .program = "/nonexistent/program", .argv = argv,
                                .envp = environ, .grace_seconds = 1.0};
    int status = 0;
    ErrorMessage err = {{0}};
    assert_int_equal(local_launch_run(&launch, &status, &err), 0);
    assert_int_equal(status, 127);
    const LocalLaunch none = {.workers = 0, .program = "/bin/sh", .argv = argv, .envp = environ};
    assert_int_equal(local_launch_run(&none, &status, &err), -1);
    assert_non_null(strstr(err.text, "0 workers"));
}

static void test_free_port(void **state) {
    (void)state;
    ErrorMessage err = {{0}};
    const int port = local_launch_free_port(&err);
    assert_true(port > 0 && port < 65536);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_workers_get_their_place),
        cmocka_unit_test(test_first_failure_stops_the_others),
        cmocka_unit_test(test_stubborn_worker_is_killed),
        cmocka_unit_test(test_killed_worker_status),
        cmocka_unit_test(test_signal_is_forwarded),
        cmocka_unit_test(test_missing_program),
        cmocka_unit_test(test_free_port),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
