// The NCCL communicator: GPU ranks, device memory, one GPU per process.
// Built in CUDA builds (LTC_WITH_CUDA). NOT YET RUN ON A GPU: it compiles
// and links, but no GPU has executed it (the CUDA backend that would use it
// is a later issue); treat it as a design to test, not as working code.
//
// Bootstrap (NCCL's 128-byte unique id from rank 0 to every rank): through
// `bootstrap` (a host-memory communicator, i.e. MPI, under mpirun) or, when
// that is NULL, through the TCP rendezvous (dist/rendezvous.h) at
// host:port with the run token (torchrun-style or SLURM launches).
//
// Communicators are non-blocking (ncclConfig_t.blocking = 0): set-up and
// every collective are polled against the timeout, and a timeout or an
// asynchronous NCCL error aborts the NCCL communicator (ncclCommAbort) and
// fails with the call, file, line, rank and device.
#ifndef LTC_DIST_COMM_NCCL_H
#define LTC_DIST_COMM_NCCL_H

#include "dist/comm.h"

typedef struct NcclSetup {
    int rank, world_size;
    int local_rank, local_world_size;
    int device;                 // CUDA device of this rank
    Communicator *bootstrap;    // host-memory communicator for the id, or NULL
    const char *host;           // rendezvous (bootstrap NULL): rank 0's address
    int port;
    const char *token;          // this run's identity
    double timeout_seconds;
} NcclSetup;

// NULL with a message in builds without CUDA, or where the NCCL loaded is
// one comm_nccl_version refuses.
Communicator *comm_nccl_create(const NcclSetup *setup, ErrorMessage *err);

// The NCCL this process loaded, for logs and --version: "NCCL 2.28.9
// (/path/libnccl.so.2)". -1 with one line naming it and what this build
// needs when it cannot use it: NCCL 2 (the major version built with), 2.14
// or newer (ncclCommInitRankConfig, ncclCommFinalize). CPU builds: "none
// (CPU build)", 0.
int comm_nccl_version(char *text, size_t size, ErrorMessage *err);

#endif
