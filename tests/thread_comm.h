// A communicator for tests: W threads of one process play W ranks over
// host memory, so multi-rank code (distributed losses, synchronised batch
// norm) can be checked against a single rank with the whole batch inside a
// unit test, without MPI. Reductions add the ranks' buffers in rank order
// (every rank gets bit-identical results, as MPI's in practice).
//
//   thread_comm_run(world, body, contexts): starts `world` threads, thread r
//   calls body(comm_r, contexts[r]) with a communicator of rank r; joins them.
#ifndef LTC_TESTS_THREAD_COMM_H
#define LTC_TESTS_THREAD_COMM_H

#include "dist/comm.h"

#define THREAD_COMM_MAX_RANKS 8

typedef void (*ThreadCommBody)(Communicator *comm, void *context);

void thread_comm_run(int world, ThreadCommBody body, void *const *contexts);

#endif
