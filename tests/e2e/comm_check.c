// Exercises the MPI communicator under mpirun (tests/e2e/comm_mpi.sh):
//   comm_check [--timeout S] [--hang-rank R] [--die-rank R]
// Without options every rank checks the non-blocking all_reduce (three in
// flight), all_reduce (sum, mean, max), all_gather
// (separate and in-place), broadcast from each root and barrier against
// values computed locally, prints "rank R of N: ok" and exits 0; any
// mismatch prints it and exits 1. --hang-rank R: rank R sleeps instead of
// joining the collectives, so the others must time out after S seconds and
// abort the run (exit 1, message on stderr). --die-rank R: rank R exits 3 at
// once without finalising MPI.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/comm_mpi.h"

static int failures;

static void check(int condition, int rank, const char *what, size_t index, double got,
                  double expected) {
    if (condition) return;
    if (failures++ < 10)
        fprintf(stderr, "rank %d: %s[%zu] = %.9g, expected %.9g\n", rank, what, index, got,
                expected);
}

// Rank r's value at i: exact in float, different on every rank.
static float value_of(int rank, size_t i) { return (float)(rank + 1) * 0.5f + (float)(i % 97); }

// The expected all-reduce of value_of over the ranks at i: 0 sum, 1 mean, 2 max.
static double reduced(int op, int world, size_t i) {
    double sum = 0;
    for (int r = 0; r < world; r++) sum += value_of(r, i);
    return op == 0 ? sum : op == 1 ? sum / world : value_of(world - 1, i);
}

// The non-blocking all-reduce: three in flight at once, progressed, waited
// for in reverse order. First, so that a hung rank (--hang-rank) makes the
// others time out in its bounded wait.
static int check_non_blocking(Communicator *comm, size_t count, ErrorMessage *err) {
    const CommReduce ops[3] = {COMM_SUM, COMM_MEAN, COMM_MAX};
    float *buffers[3];
    CommRequest requests[3];
    for (int o = 0; o < 3; o++) {
        buffers[o] = malloc(count * sizeof(float));
        if (!buffers[o]) return error_set(err, "out of memory");
        for (size_t i = 0; i < count; i++) buffers[o][i] = value_of(comm->rank, i);
        if (comm_all_reduce_start(comm, buffers[o], count, ops[o], &requests[o], err) ||
            comm_progress(comm, err))
            return -1;
    }
    for (int o = 2; o >= 0; o--) {
        if (comm_all_reduce_wait(comm, requests[o], err)) return -1;
        for (size_t i = 0; i < count; i++) {
            const double expected = reduced(o, comm->world_size, i);
            check(fabs(buffers[o][i] - expected) <= 1e-6 * fabs(expected), comm->rank,
                  "non-blocking all_reduce", i, buffers[o][i], expected);
        }
        free(buffers[o]);
    }
    return 0;
}

static int check_collectives(Communicator *comm, ErrorMessage *err) {
    const int rank = comm->rank, world = comm->world_size;
    const size_t count = 100003;  // odd, not a multiple of anything MPI picks
    if (check_non_blocking(comm, count, err)) return -1;
    float *buffer = malloc(count * sizeof *buffer);
    float *gathered = malloc(count * (size_t)world * sizeof *gathered);
    if (!buffer || !gathered) return error_set(err, "out of memory");
    const CommReduce ops[3] = {COMM_SUM, COMM_MEAN, COMM_MAX};
    const char *names[3] = {"sum", "mean", "max"};
    for (int o = 0; o < 3; o++) {
        for (size_t i = 0; i < count; i++) buffer[i] = value_of(rank, i);
        if (comm_all_reduce(comm, buffer, count, ops[o], err)) return -1;
        for (size_t i = 0; i < count; i++) {
            const double expected = reduced(o, world, i);
            check(fabs(buffer[i] - expected) <= 1e-6 * fabs(expected), rank, names[o], i,
                  buffer[i], expected);
        }
    }
    for (size_t i = 0; i < count; i++) buffer[i] = value_of(rank, i);
    if (comm_all_gather(comm, buffer, gathered, count, err)) return -1;
    for (int r = 0; r < world; r++)
        for (size_t i = 0; i < count; i++)
            check(gathered[(size_t)r * count + i] == value_of(r, i), rank, "all_gather",
                  (size_t)r * count + i, gathered[(size_t)r * count + i], value_of(r, i));
    // In place: this rank's block already sits in the receive buffer.
    memset(gathered, 0, count * (size_t)world * sizeof *gathered);
    for (size_t i = 0; i < count; i++) gathered[(size_t)rank * count + i] = value_of(rank, i);
    if (comm_all_gather(comm, gathered + (size_t)rank * count, gathered, count, err)) return -1;
    for (int r = 0; r < world; r++)
        check(gathered[(size_t)r * count + 5] == value_of(r, 5), rank, "in-place all_gather",
              (size_t)r * count + 5, gathered[(size_t)r * count + 5], value_of(r, 5));
    for (int root = 0; root < world; root++) {
        char text[64];
        snprintf(text, sizeof text, "rank %d says hello", rank);
        if (comm_broadcast(comm, text, sizeof text, root, err)) return -1;
        char expected[64];
        snprintf(expected, sizeof expected, "rank %d says hello", root);
        if (strcmp(text, expected) != 0 && failures++ < 10)
            fprintf(stderr, "rank %d: broadcast from %d gave '%s'\n", rank, root, text);
    }
    if (comm_barrier(comm, err)) return -1;
    free(buffer);
    free(gathered);
    return 0;
}

int main(int argc, char **argv) {
    double timeout = 60;
    int hang_rank = -1, die_rank = -1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--timeout") == 0) timeout = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--hang-rank") == 0) hang_rank = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--die-rank") == 0) die_rank = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: comm_check [--timeout S] [--hang-rank R] [--die-rank R]\n");
            return 2;
        }
    }
    ErrorMessage err = {{0}};
    Communicator *comm = comm_mpi_create(timeout, &err);
    if (!comm) {
        fprintf(stderr, "comm_check: %s\n", err.text);
        return 1;
    }
    if (comm->rank == die_rank) _exit(3);
    if (comm->rank == hang_rank) {
        sleep(600);  // never answers; the others must abort the run
        return 0;
    }
    if (check_collectives(comm, &err)) {
        fprintf(stderr, "comm_check: %s\n", err.text);
        comm_abort(comm, 1);
        return 1;
    }
    printf("rank %d of %d (local %d of %d): %s\n", comm->rank, comm->world_size,
           comm->local_rank, comm->local_world_size, failures ? "MISMATCH" : "ok");
    comm_destroy(comm);
    return failures ? 1 : 0;
}
