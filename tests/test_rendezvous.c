// Tests of the TCP rendezvous on this machine's loopback, one thread per
// rank: the payload reaches every rank (also when the others start before
// rank 0), a missing rank or a missing rank 0 times out with a message that
// names it, a port in use is reported, and a peer or rank 0 of another run
// (other token) is refused, so no stale id is accepted. The same across two
// network namespaces: tests/e2e/rendezvous_netns.sh.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dist/rendezvous.h"
#include "util/cpu.h"

#define ID_BYTES 128
#define MAX_RANKS 8

typedef struct RankRun {
    RendezvousConfig config;
    uint8_t payload[ID_BYTES];
    double start_delay;  // seconds before this rank starts
    int status;
    double seconds;      // how long rendezvous_share took
    ErrorMessage err;
    pthread_t thread;
} RankRun;

static void *run_rank(void *arg) {
    RankRun *run = arg;
    struct timespec pause = {0, (long)(run->start_delay * 1e9)};
    nanosleep(&pause, NULL);
    const double start = time_now();
    run->status = rendezvous_share(&run->config, run->payload, ID_BYTES, &run->err);
    run->seconds = time_now() - start;
    return NULL;
}

// A port nobody listens on right now (the kernel's choice for port 0).
static int free_port(void) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    assert_int_equal(bind(fd, (struct sockaddr *)&address, sizeof address), 0);
    socklen_t length = sizeof address;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&address, &length), 0);
    close(fd);
    return ntohs(address.sin_port);
}

static void setup_ranks(RankRun *runs, int count, int world, int port, const char *token,
                        double timeout) {
    memset(runs, 0, (size_t)count * sizeof *runs);
    for (int r = 0; r < count; r++) {
        runs[r].config = (RendezvousConfig){.host = "127.0.0.1", .port = port, .rank = r,
                                            .world_size = world, .token = token,
                                            .timeout_seconds = timeout};
        if (r == 0)
            for (int i = 0; i < ID_BYTES; i++) runs[0].payload[i] = (uint8_t)(i * 37 + port);
    }
}

static void run_all(RankRun *runs, int count) {
    for (int r = 0; r < count; r++)
        assert_int_equal(pthread_create(&runs[r].thread, NULL, run_rank, &runs[r]), 0);
    for (int r = 0; r < count; r++) pthread_join(runs[r].thread, NULL);
}

static void assert_contains(const char *text, const char *fragment) {
    if (!strstr(text, fragment)) fail_msg("'%s' lacks '%s'", text, fragment);
}

static void test_id_reaches_every_rank(void **state) {
    (void)state;
    RankRun runs[4];
    setup_ranks(runs, 4, 4, free_port(), "run-1", 10.0);
    runs[0].start_delay = 0.5;  // the others start first and must retry
    run_all(runs, 4);
    for (int r = 0; r < 4; r++) {
        if (runs[r].status) fail_msg("rank %d: %s", r, runs[r].err.text);
        assert_memory_equal(runs[r].payload, runs[0].payload, ID_BYTES);
    }
}

static void test_missing_rank_times_out(void **state) {
    (void)state;
    RankRun runs[2];
    setup_ranks(runs, 2, 3, free_port(), "run-2", 1.0);  // rank 2 never comes
    run_all(runs, 2);
    assert_int_equal(runs[0].status, -1);
    assert_contains(runs[0].err.text, "2 of 3 ranks arrived");
    assert_contains(runs[0].err.text, "missing ranks 2");
    assert_int_equal(runs[1].status, -1);  // told by rank 0, not left waiting
    assert_contains(runs[1].err.text, "rank 0 gave up");
    for (int r = 0; r < 2; r++) assert_true(runs[r].seconds < 4.0);
}

static void test_missing_rank_zero_times_out(void **state) {
    (void)state;
    RankRun runs[2];
    const int port = free_port();
    setup_ranks(runs, 2, 2, port, "run-3", 0.8);
    run_rank(&runs[1]);
    assert_int_equal(runs[1].status, -1);
    char where[64];
    snprintf(where, sizeof where, "from rank 0 at 127.0.0.1:%d within 0.8 s", port);
    assert_contains(runs[1].err.text, where);
    assert_contains(runs[1].err.text, "Connection refused");
    assert_true(runs[1].seconds < 3.0);
}

static void test_port_in_use(void **state) {
    (void)state;
    const int port = free_port();
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                  .sin_addr.s_addr = htonl(INADDR_ANY)};
    assert_int_equal(bind(fd, (struct sockaddr *)&address, sizeof address), 0);
    assert_int_equal(listen(fd, 4), 0);
    RankRun runs[1];
    setup_ranks(runs, 1, 2, port, "run-4", 1.0);
    run_rank(&runs[0]);
    close(fd);
    assert_int_equal(runs[0].status, -1);
    char expected[64];
    snprintf(expected, sizeof expected, "port %d is in use", port);
    assert_contains(runs[0].err.text, expected);
}

// A rank 0 left over from an earlier run: the new run's rank 1 must refuse
// its id and fail saying so; the old rank 0 reports the refused peer.
static void test_stale_rank_zero_is_refused(void **state) {
    (void)state;
    const int port = free_port();
    RankRun old_run[1], new_run[2];
    setup_ranks(old_run, 1, 2, port, "run-old", 1.5);
    setup_ranks(new_run, 2, 2, port, "run-new", 1.0);
    memset(new_run[1].payload, 0xee, ID_BYTES);
    new_run[1].start_delay = 0.2;
    assert_int_equal(pthread_create(&old_run[0].thread, NULL, run_rank, &old_run[0]), 0);
    assert_int_equal(pthread_create(&new_run[1].thread, NULL, run_rank, &new_run[1]), 0);
    pthread_join(new_run[1].thread, NULL);
    pthread_join(old_run[0].thread, NULL);
    assert_int_equal(new_run[1].status, -1);
    assert_contains(new_run[1].err.text, "belongs to another run ('run-old'; ours is 'run-new')");
    for (int i = 0; i < ID_BYTES; i++) assert_int_equal(new_run[1].payload[i], 0xee);
    assert_int_equal(old_run[0].status, -1);
    assert_contains(old_run[0].err.text, "refused peers");
}

// A peer of an earlier run knocking on the new run's rank 0 is refused and
// the new run completes.
static void test_stale_peer_does_not_disturb(void **state) {
    (void)state;
    const int port = free_port();
    RankRun runs[3], stale[1];
    setup_ranks(runs, 3, 3, port, "run-7", 10.0);
    runs[2].start_delay = 0.6;
    setup_ranks(stale, 1, 3, port, "run-6", 0.8);
    stale[0].config.rank = 2;
    stale[0].start_delay = 0.2;
    assert_int_equal(pthread_create(&stale[0].thread, NULL, run_rank, &stale[0]), 0);
    run_all(runs, 3);
    pthread_join(stale[0].thread, NULL);
    for (int r = 0; r < 3; r++) {
        if (runs[r].status) fail_msg("rank %d: %s", r, runs[r].err.text);
        assert_memory_equal(runs[r].payload, runs[0].payload, ID_BYTES);
    }
    assert_int_equal(stale[0].status, -1);
    assert_contains(stale[0].err.text, "another run");
}

static void test_bad_arguments(void **state) {
    (void)state;
    uint8_t payload[ID_BYTES] = {0};
    ErrorMessage err;
    RendezvousConfig config = {.host = "127.0.0.1", .port = 0, .rank = 0, .world_size = 2,
                               .token = "", .timeout_seconds = 1};
    assert_int_equal(rendezvous_share(&config, payload, ID_BYTES, &err), -1);
    assert_contains(err.text, "port 0 is not a port");
    config.port = 1234;
    config.rank = 2;
    assert_int_equal(rendezvous_share(&config, payload, ID_BYTES, &err), -1);
    assert_contains(err.text, "rank 2 outside a world of 2");
    config.rank = 1;
    config.host = "";
    assert_int_equal(rendezvous_share(&config, payload, ID_BYTES, &err), -1);
    assert_contains(err.text, "MASTER_ADDR");
    config.world_size = 1;  // nothing to share
    config.rank = 0;
    assert_int_equal(rendezvous_share(&config, payload, ID_BYTES, &err), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_id_reaches_every_rank),
        cmocka_unit_test(test_missing_rank_times_out),
        cmocka_unit_test(test_missing_rank_zero_times_out),
        cmocka_unit_test(test_port_in_use),
        cmocka_unit_test(test_stale_rank_zero_is_refused),
        cmocka_unit_test(test_stale_peer_does_not_disturb),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
