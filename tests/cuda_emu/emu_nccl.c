// NCCL, emulated for the CUDA emulation's program (the functions
// src/dist/nccl_library.c forwards, which the emulation build leaves out):
// so that several ranks of `train --accelerator gpu` run here, each a
// process with its emulated device, and the cuda backend's gradient
// synchronisation (comm_nccl.c: all-reduces on their own stream, overlapped
// with the backward through events) is tested without GPUs.
//
// A communicator is a folder named by rank 0's unique id (under TMPDIR or
// /tmp). A collective is queued on its stream like any other work
// (emu_streams.cpp; or captured into a CUDA graph) and, when it runs, takes
// the communicator's next number (its stream runs them in the order every
// rank queued them), writes this rank's input
// to a file of the folder named by the collective's number and the rank
// (written whole, then renamed), and once every rank's file of that number
// is there computes its output from them in rank order, so every rank gets
// the same bits. Until then it is not ready (emu_streams.cpp): its stream
// stays on it, a query of the stream or of an event behind it says not
// ready, a synchronisation waits, as on GPUs, where a collective whose peer
// has not come holds its stream. A rank deletes its file of collective k
// when it writes k + 2 (by then every rank has written k + 1, so read k);
// the last rank to leave removes the folder. A peer that never writes its
// file fails the collective after LTC_EMU_NCCL_TIMEOUT seconds (300) with
// ncclRemoteError, which ncclCommGetAsyncError reports. Set it above the
// program's --dist-timeout to see the program's own timeout, below it to
// see NCCL's error.
#include <dirent.h>
#include <errno.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dist/nccl_library.h"
#include "emu_blas.h"

struct ncclComm {
    char folder[200];
    int rank, ranks;
    uint64_t next;         // the number of the next collective to run
    int aborted;           // its queued collectives fail at once
    ncclResult_t async;    // a queued collective's failure
    char last_error[256];
};

int nccl_library_open(ErrorMessage *err) {
    (void)err;
    return 0;
}

const char *nccl_library_file(void) { return "NCCL (CPU emulation)"; }

void nccl_library_path(char *path, size_t size) { snprintf(path, size, "CPU emulation"); }

const char *ncclGetErrorString(ncclResult_t result) {
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument (NCCL emulation)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclSystemError: return "unhandled system error (NCCL emulation)";
    default: return "NCCL error (NCCL emulation)";
    }
}

ncclResult_t ncclGetVersion(int *version) {
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

const char *ncclGetLastError(ncclComm_t comm) { return comm ? comm->last_error : ""; }

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "ltc-emu-nccl-%ld-%lld-%ld", (long)getpid(),
             (long long)now.tv_sec, now.tv_nsec);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int ranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config) {
    (void)config;
    *out = NULL;
    if (ranks < 1 || rank < 0 || rank >= ranks || strncmp(id.internal, "ltc-emu-nccl-", 13) != 0)
        return ncclInvalidArgument;
    ncclComm_t comm = calloc(1, sizeof *comm);
    if (!comm) return ncclSystemError;
    const char *tmp = getenv("TMPDIR");
    snprintf(comm->folder, sizeof comm->folder, "%s/%.100s", tmp && *tmp ? tmp : "/tmp",
             id.internal);
    if (mkdir(comm->folder, 0700) != 0 && errno != EEXIST) {
        free(comm);
        return ncclSystemError;
    }
    comm->rank = rank;
    comm->ranks = ranks;
    *out = comm;
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *error) {
    *error = comm->async;
    return ncclSuccess;
}

static void file_of(const struct ncclComm *comm, uint64_t number, int rank, char *path,
                    size_t size) {
    snprintf(path, size, "%s/%llu.%d", comm->folder, (unsigned long long)number, rank);
}

static int write_file(const char *path, const void *data, size_t bytes) {
    char partial[256];
    snprintf(partial, sizeof partial, "%s.partial", path);
    FILE *f = fopen(partial, "wb");
    if (!f) return -1;
    const int ok = fwrite(data, 1, bytes, f) == bytes;
    if (fclose(f) != 0 || !ok) return -1;
    return rename(partial, path);
}

static double seconds_now(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

// This rank's bytes of collective `number` into its file; -1 on failure.
static int post(ncclComm_t comm, uint64_t number, const void *mine, size_t bytes) {
    char path[256];
    file_of(comm, number, comm->rank, path, sizeof path);
    if (write_file(path, mine, bytes) != 0) {
        snprintf(comm->last_error, sizeof comm->last_error, "could not write %.200s", path);
        return -1;
    }
    if (number >= 2) {
        file_of(comm, number - 2, comm->rank, path, sizeof path);
        unlink(path);
    }
    return 0;
}

// Every rank's bytes of collective `number` into all (ranks x bytes, rank
// order): 0 once they are all there, LTC_EMU_NOT_READY while a rank's file
// is missing (posted `since`), -1 past the timeout or on a short file.
static int gather(ncclComm_t comm, uint64_t number, size_t bytes, double since,
                  unsigned char *all) {
    char path[256];
    for (int r = 0; r < comm->ranks; r++) {
        file_of(comm, number, r, path, sizeof path);
        if (access(path, F_OK) == 0) continue;
        const char *limit = getenv("LTC_EMU_NCCL_TIMEOUT");
        const double timeout = limit && *limit ? atof(limit) : 300.0;
        if (seconds_now() - since <= timeout) return LTC_EMU_NOT_READY;
        snprintf(comm->last_error, sizeof comm->last_error,
                 "rank %d never joined collective %llu (%g s)", r, (unsigned long long)number,
                 timeout);
        return -1;
    }
    for (int r = 0; r < comm->ranks; r++) {
        file_of(comm, number, r, path, sizeof path);
        FILE *f = fopen(path, "rb");
        if (!f) {
            snprintf(comm->last_error, sizeof comm->last_error, "could not read %.200s", path);
            return -1;
        }
        const size_t got = fread(all + (size_t)r * bytes, 1, bytes, f);
        fclose(f);
        if (got != bytes) {
            snprintf(comm->last_error, sizeof comm->last_error,
                     "rank %d gave %zu bytes to collective %llu, this rank %zu", r, got,
                     (unsigned long long)number, bytes);
            return -1;
        }
    }
    return 0;
}

typedef enum { ALL_REDUCE, ALL_GATHER, BROADCAST } Kind;

typedef struct Collective {
    ncclComm_t comm;
    Kind kind;
    const void *send;
    void *recv;
    size_t count, bytes;  // elements; bytes of this rank's input
    ncclRedOp_t op;
    int root;
    // Progress of the run under way: posted as collective `number` at
    // `since` (a graph's copy serves each launch in turn).
    int posted;
    uint64_t number;
    double since;
} Collective;

// 0 done, LTC_EMU_NOT_READY (a peer's file is missing), 1 failed.
static int run_collective(const void *arguments) {
    Collective *c = (Collective *)arguments;  // the queue's own copy: it keeps the progress
    ncclComm_t comm = c->comm;
    if (comm->aborted) return c->posted = 0, 1;
    if (!c->posted) {
        c->number = comm->next++;
        c->since = seconds_now();
        c->posted = 1;
        if (post(comm, c->number, c->send, c->bytes) != 0) {
            c->posted = 0;
            comm->async = ncclRemoteError;
            fprintf(stderr, "nccl emulation: rank %d: %s\n", comm->rank, comm->last_error);
            return 1;
        }
    }
    unsigned char *all = malloc(c->bytes * (size_t)comm->ranks + 1);
    const int gathered = all ? gather(comm, c->number, c->bytes, c->since, all) : -1;
    if (gathered == LTC_EMU_NOT_READY) {
        free(all);
        return LTC_EMU_NOT_READY;
    }
    c->posted = 0;
    if (gathered != 0) {
        free(all);
        comm->async = ncclRemoteError;
        fprintf(stderr, "nccl emulation: rank %d: %s\n", comm->rank, comm->last_error);
        return 1;
    }
    if (c->kind == ALL_GATHER) {
        memcpy(c->recv, all, c->bytes * (size_t)comm->ranks);
    } else if (c->kind == BROADCAST) {
        memcpy(c->recv, all + (size_t)c->root * c->bytes, c->bytes);
    } else {
        const float *values = (const float *)all;
        float *out = c->recv;
        for (size_t i = 0; i < c->count; i++) {
            float v = values[i];
            for (int r = 1; r < comm->ranks; r++) {
                const float x = values[(size_t)r * c->count + i];
                v = c->op == ncclMax ? (x > v ? x : v) : v + x;
            }
            out[i] = c->op == ncclAvg ? v / (float)comm->ranks : v;
        }
    }
    free(all);
    return 0;
}

// Checked now, queued on the stream (run now where the stream runs its work at once).
static ncclResult_t submit(const char *call, Collective *c, size_t recv_bytes,
                           cudaStream_t stream) {
    if (!c->comm || (c->bytes && (!ltc_emu_device_range(c->send, c->bytes) ||
                                  !ltc_emu_device_range(c->recv, recv_bytes)))) {
        fprintf(stderr, "nccl emulation: %s: a buffer that is not device memory\n", call);
        return ncclInvalidArgument;
    }
    if (ltc_emu_capture_call(stream, call, run_collective, c, sizeof *c)) return ncclSuccess;
    int status;
    while ((status = run_collective(c)) == LTC_EMU_NOT_READY) usleep(200);  // runs now: until done
    return status == 0 ? ncclSuccess : ncclRemoteError;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    if (type != ncclFloat32 || (op != ncclSum && op != ncclAvg && op != ncclMax))
        return ncclInvalidArgument;  // what comm_nccl.c asks for, nothing more
    Collective c = {.comm = comm, .kind = ALL_REDUCE, .send = send, .recv = recv, .count = count,
                    .bytes = count * sizeof(float), .op = op};
    return submit("ncclAllReduce", &c, c.bytes, stream);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
    if (type != ncclFloat32 || !comm) return ncclInvalidArgument;
    Collective c = {.comm = comm, .kind = ALL_GATHER, .send = send, .recv = recv, .count = count,
                    .bytes = count * sizeof(float), .op = ncclSum};
    return submit("ncclAllGather", &c, c.bytes * (size_t)comm->ranks, stream);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
    if ((type != ncclUint8 && type != ncclInt8) || !comm || root < 0 || root >= comm->ranks)
        return ncclInvalidArgument;
    Collective c = {.comm = comm, .kind = BROADCAST, .send = send, .recv = recv, .count = count,
                    .bytes = count, .op = ncclSum, .root = root};
    return submit("ncclBroadcast", &c, c.bytes, stream);
}

// The last rank to leave removes the folder (every file in it is read by then).
static void leave(ncclComm_t comm) {
    char path[256];
    snprintf(path, sizeof path, "%s/left.%d", comm->folder, comm->rank);
    if (write_file(path, "", 0) != 0) return;
    for (int r = 0; r < comm->ranks; r++) {
        snprintf(path, sizeof path, "%s/left.%d", comm->folder, r);
        if (access(path, F_OK) != 0) return;
    }
    DIR *dir = opendir(comm->folder);
    if (!dir) return;
    for (struct dirent *entry; (entry = readdir(dir));) {
        if (entry->d_name[0] == '.') continue;
        char file[512];
        snprintf(file, sizeof file, "%s/%s", comm->folder, entry->d_name);
        unlink(file);
    }
    closedir(dir);
    rmdir(comm->folder);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    ltc_emu_streams_flush();  // what it queued runs first
    return comm->async;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    ltc_emu_streams_flush();
    leave(comm);
    free(comm);
    return ncclSuccess;
}

// Kept, not freed: collectives still queued on its stream point at it (and
// fail at once); the process is about to end.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm || comm->aborted) return ncclSuccess;
    comm->aborted = 1;
    comm->async = ncclRemoteError;
    leave(comm);
    return ncclSuccess;
}
