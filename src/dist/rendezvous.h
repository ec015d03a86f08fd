// TCP rendezvous: rank 0 hands a small payload (NCCL's 128-byte unique id)
// to every other rank when no MPI is there to broadcast it (torchrun-style
// or SLURM launches of GPU ranks).
//
// Rank 0 listens on `port` (all interfaces); the others connect to
// host:port, retrying (rank 0 may start later) until the deadline, and say
// who they are: rank, world size, payload size and the run token. Rank 0
// answers a peer of another run (different token) with a refusal and keeps
// waiting; once all world_size - 1 ranks have arrived it sends the payload
// to each. So a stale rank 0 still listening from an earlier run never hands
// out its old id: its token differs, the peers refuse its answer, and the
// new rank 0 reports the port as in use.
//
// Every failure is bounded by timeout_seconds and names what is missing:
// rank 0 lists the ranks that did not arrive (and tells those that did),
// the others say whom they could not reach and the last socket error.
#ifndef LTC_DIST_RENDEZVOUS_H
#define LTC_DIST_RENDEZVOUS_H

#include <stddef.h>

#include "util/error.h"

#define RENDEZVOUS_MAX_TOKEN 255
#define RENDEZVOUS_MAX_PAYLOAD 4096

typedef struct RendezvousConfig {
    const char *host;       // rank 0's address or name (MASTER_ADDR); unused on rank 0
    int port;               // 1..65535
    int rank, world_size;
    const char *token;      // this run's identity (may be ""), at most RENDEZVOUS_MAX_TOKEN bytes
    double timeout_seconds;
} RendezvousConfig;

// Rank 0: sends payload (size bytes) to every other rank; the others:
// receive it into payload (size bytes, which must match rank 0's).
int rendezvous_share(const RendezvousConfig *config, void *payload, size_t size,
                     ErrorMessage *err);

#endif
