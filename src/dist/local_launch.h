// One node, several GPUs, no launcher: the program starts one worker
// process per GPU itself and supervises them (docs/distributed.md says why
// processes, not threads).
//
// Each worker is the same program with the same arguments and the
// torchrun-style variables of its place in the run (RANK = LOCAL_RANK = i,
// WORLD_SIZE = LOCAL_WORLD_SIZE = workers, GROUP_RANK = 0, MASTER_ADDR =
// 127.0.0.1, MASTER_PORT = a port free when the launch began,
// TORCHELASTIC_RUN_ID = a token of this launch), so a worker goes through
// the same path as a rank torchrun started (dist/launch_env.h,
// dist/rendezvous.h): nothing is special about a self-launched rank.
//
// Supervision: the launcher waits for every worker. When one fails (exits
// non-zero or is killed) the others get SIGTERM (the trainer then stops
// like a signalled run) and, after grace_seconds, SIGKILL; the launch ends
// with the first failure's status. SIGINT, SIGTERM and SIGHUP sent to the
// launcher are passed on to every worker, which stop as they would alone.
// Each worker leads its own process group, so a signal reaches whatever it
// started too.
#ifndef LTC_DIST_LOCAL_LAUNCH_H
#define LTC_DIST_LOCAL_LAUNCH_H

#include "util/error.h"

typedef struct LocalLaunch {
    int workers;             // processes to start, >= 1
    const char *program;     // the executable (e.g. "/proc/self/exe")
    char *const *argv;       // the workers' argv, NULL-terminated
    char *const *envp;       // the environment they inherit, before our variables
    double grace_seconds;    // SIGTERM to SIGKILL once a worker failed
} LocalLaunch;

// Starts and waits for the workers. Returns 0 with *exit_status = 0 when
// all succeeded, or the first failing worker's exit status (128 + signal
// when it was killed). Returns -1 with a message when the workers could
// not be started (the ones already started are stopped first).
int local_launch_run(const LocalLaunch *launch, int *exit_status, ErrorMessage *err);

// A TCP port on 127.0.0.1 that was free just now (the kernel's choice), or
// -1 with a message.
int local_launch_free_port(ErrorMessage *err);

#endif
