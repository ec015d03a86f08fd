// Threads as ranks (see thread_comm.h): every collective posts this rank's
// pointer, waits for all ranks, reads what it needs, waits again before
// anyone writes (buffers are in place), then writes its own result.
#include "thread_comm.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct ThreadWorld {
    int size;
    pthread_barrier_t barrier;
    const void *posted[THREAD_COMM_MAX_RANKS];  // each rank's buffer of the current collective
} ThreadWorld;

typedef struct ThreadRank {
    Communicator comm;
    ThreadWorld *world;
    ThreadCommBody body;
    void *context;
    pthread_t thread;
} ThreadRank;

static ThreadWorld *world_of(Communicator *comm) { return ((ThreadRank *)comm->impl)->world; }

static void post_and_wait(Communicator *comm, const void *pointer) {
    ThreadWorld *world = world_of(comm);
    world->posted[comm->rank] = pointer;
    pthread_barrier_wait(&world->barrier);
}

static int thread_all_reduce(Communicator *comm, float *buffer, size_t count, CommReduce op,
                             ErrorMessage *err) {
    ThreadWorld *world = world_of(comm);
    float *result = malloc(count * sizeof *result + 1);
    post_and_wait(comm, buffer);
    for (size_t i = 0; i < count; i++) {
        float value = ((const float *)world->posted[0])[i];
        for (int r = 1; r < world->size; r++) {
            const float other = ((const float *)world->posted[r])[i];
            value = op == COMM_MAX ? (other > value ? other : value) : value + other;
        }
        result[i] = op == COMM_MEAN ? value / (float)world->size : value;
    }
    pthread_barrier_wait(&world->barrier);  // everyone has read every buffer
    memcpy(buffer, result, count * sizeof *result);
    free(result);
    pthread_barrier_wait(&world->barrier);
    return 0;
}

static int thread_all_gather(Communicator *comm, const float *send, float *recv, size_t count,
                             ErrorMessage *err) {
    ThreadWorld *world = world_of(comm);
    float *result = malloc(count * (size_t)world->size * sizeof *result + 1);
    post_and_wait(comm, send);
    for (int r = 0; r < world->size; r++)
        memcpy(result + (size_t)r * count, world->posted[r], count * sizeof *result);
    pthread_barrier_wait(&world->barrier);
    memcpy(recv, result, count * (size_t)world->size * sizeof *result);
    free(result);
    pthread_barrier_wait(&world->barrier);
    return 0;
}

static int thread_broadcast(Communicator *comm, void *buffer, size_t bytes, int root,
                            ErrorMessage *err) {
    ThreadWorld *world = world_of(comm);
    post_and_wait(comm, buffer);
    if (comm->rank != root) memcpy(buffer, world->posted[root], bytes);
    pthread_barrier_wait(&world->barrier);
    return 0;
}

static int thread_barrier(Communicator *comm, ErrorMessage *err) {
    pthread_barrier_wait(&world_of(comm)->barrier);
    return 0;
}

// Threads have no engine to run a reduction in the background: it is done
// at the start (still in every rank's order), the wait has nothing left.
static int thread_all_reduce_start(Communicator *comm, CommRequest request, ErrorMessage *err) {
    const CommPending *pending = &comm->pending[request];
    return thread_all_reduce(comm, pending->buffer, pending->count, pending->op, err);
}

static int thread_all_reduce_wait(Communicator *comm, CommRequest request, ErrorMessage *err) {
    return 0;
}

static void thread_abort(Communicator *comm, int exit_status) { abort(); }

static void thread_destroy(Communicator *comm) {}

static const CommOps thread_ops = {
    .all_reduce = thread_all_reduce,
    .all_gather = thread_all_gather,
    .broadcast = thread_broadcast,
    .barrier = thread_barrier,
    .all_reduce_start = thread_all_reduce_start,
    .all_reduce_wait = thread_all_reduce_wait,
    .abort = thread_abort,
    .destroy = thread_destroy,
};

static void *thread_main(void *arg) {
    ThreadRank *rank = arg;
    rank->body(&rank->comm, rank->context);
    return NULL;
}

void thread_comm_run(int world_size, ThreadCommBody body, void *const *contexts) {
    if (world_size < 1 || world_size > THREAD_COMM_MAX_RANKS) abort();
    ThreadWorld world = {.size = world_size};
    pthread_barrier_init(&world.barrier, NULL, (unsigned)world_size);
    ThreadRank ranks[THREAD_COMM_MAX_RANKS];
    for (int r = 0; r < world_size; r++) {
        ranks[r] = (ThreadRank){
            .comm = {.name = "threads", .rank = r, .world_size = world_size, .local_rank = r,
                     .local_world_size = world_size, .timeout_seconds = 60, .ops = &thread_ops},
            .world = &world,
            .body = body,
            .context = contexts[r],
        };
        ranks[r].comm.impl = &ranks[r];
    }
    for (int r = 0; r < world_size; r++)
        pthread_create(&ranks[r].thread, NULL, thread_main, &ranks[r]);
    for (int r = 0; r < world_size; r++) pthread_join(ranks[r].thread, NULL);
    pthread_barrier_destroy(&world.barrier);
}
