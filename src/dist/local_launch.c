// Starting and supervising one worker process per GPU (see local_launch.h).
#include "dist/local_launch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// The variables a worker gets from us; the launcher's own values of them
// are dropped so a worker never sees two.
static const char *const launch_variables[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
    "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
};
enum { LAUNCH_VARIABLES = sizeof launch_variables / sizeof launch_variables[0] };
_Static_assert(LAUNCH_VARIABLES == 9, "worker_env_make writes one value per launch variable");

static volatile sig_atomic_t pending_signal;

static void remember_signal(int signal_number) {
    pending_signal = signal_number;
}

static double seconds_now(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

static void sleep_briefly(void) {
    const struct timespec pause = {.tv_sec = 0, .tv_nsec = 20 * 1000 * 1000};
    nanosleep(&pause, NULL);
}

int local_launch_free_port(ErrorMessage *err) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return error_set(err, "local launch: socket: %s", strerror(errno));
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = 0};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (bind(fd, (struct sockaddr *)&address, sizeof address) != 0 ||
        getsockname(fd, (struct sockaddr *)&address, &length) != 0) {
        error_set(err, "local launch: no free TCP port on 127.0.0.1: %s", strerror(errno));
        close(fd);
        return -1;
    }
    close(fd);
    return ntohs(address.sin_port);
}

static int is_launch_variable(const char *entry) {
    for (int i = 0; i < LAUNCH_VARIABLES; i++) {
        const size_t length = strlen(launch_variables[i]);
        if (strncmp(entry, launch_variables[i], length) == 0 && entry[length] == '=') return 1;
    }
    return 0;
}

// A worker's environment: envp without our variables, then ours (held in
// values, in the order of launch_variables).
typedef struct WorkerEnv {
    char **entries;
    char values[LAUNCH_VARIABLES][160];
} WorkerEnv;

static int worker_env_make(WorkerEnv *env, char *const *envp, int rank, int workers, int port,
                           const char *token, ErrorMessage *err) {
    size_t count = 0;
    while (envp && envp[count]) count++;
    env->entries = calloc(count + LAUNCH_VARIABLES + 1, sizeof *env->entries);
    if (!env->entries) return error_set(err, "local launch: out of memory");
    size_t used = 0;
    for (size_t i = 0; i < count; i++)
        if (!is_launch_variable(envp[i])) env->entries[used++] = envp[i];
    const size_t size = sizeof env->values[0];
    snprintf(env->values[0], size, "RANK=%d", rank);
    snprintf(env->values[1], size, "WORLD_SIZE=%d", workers);
    snprintf(env->values[2], size, "LOCAL_RANK=%d", rank);
    snprintf(env->values[3], size, "LOCAL_WORLD_SIZE=%d", workers);
    snprintf(env->values[4], size, "GROUP_RANK=0");
    snprintf(env->values[5], size, "MASTER_ADDR=127.0.0.1");
    snprintf(env->values[6], size, "MASTER_PORT=%d", port);
    snprintf(env->values[7], size, "TORCHELASTIC_RUN_ID=%s", token);
    snprintf(env->values[8], size, "TORCHELASTIC_RESTART_COUNT=0");
    for (int i = 0; i < LAUNCH_VARIABLES; i++) env->entries[used++] = env->values[i];
    env->entries[used] = NULL;
    return 0;
}

static void worker_env_free(WorkerEnv *env) {
    free(env->entries);
}

static int status_code(int wait_status) {
    if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
    if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
    return 1;
}

static void signal_workers(const pid_t *pids, int workers, int signal_number) {
    for (int i = 0; i < workers; i++)
        if (pids[i] > 0) kill(-pids[i], signal_number);  // the worker's process group
}

// Waits for every worker; after the first failure the others get SIGTERM,
// then SIGKILL once grace_seconds have passed.
static int supervise(pid_t *pids, int workers, double grace_seconds) {
    int running = workers, first_failure = 0;
    double kill_at = 0.0;
    while (running > 0) {
        if (pending_signal) {
            signal_workers(pids, workers, pending_signal);
            pending_signal = 0;
        }
        for (int i = 0; i < workers; i++) {
            int wait_status;
            if (pids[i] <= 0 || waitpid(pids[i], &wait_status, WNOHANG) != pids[i]) continue;
            pids[i] = 0;
            running--;
            const int code = status_code(wait_status);
            if (code != 0 && first_failure == 0) {
                first_failure = code;
                signal_workers(pids, workers, SIGTERM);
                kill_at = seconds_now() + grace_seconds;
            }
        }
        if (kill_at > 0.0 && seconds_now() >= kill_at) {
            signal_workers(pids, workers, SIGKILL);
            kill_at = 0.0;
        }
        if (running > 0) sleep_briefly();
    }
    return first_failure;
}

int local_launch_run(const LocalLaunch *launch, int *exit_status, ErrorMessage *err) {
    *exit_status = 1;
    if (launch->workers < 1) return error_set(err, "local launch: %d workers", launch->workers);
    const int port = local_launch_free_port(err);
    if (port < 0) return -1;
    char token[64];
    snprintf(token, sizeof token, "ltc-local-%ld-%ld-%d", (long)getpid(), (long)time(NULL), port);

    pid_t *pids = calloc((size_t)launch->workers, sizeof *pids);
    if (!pids) return error_set(err, "local launch: out of memory");
    struct sigaction forward = {0}, saved[3];
    const int forwarded[3] = {SIGINT, SIGTERM, SIGHUP};
    forward.sa_handler = remember_signal;
    sigemptyset(&forward.sa_mask);
    pending_signal = 0;
    for (int i = 0; i < 3; i++) sigaction(forwarded[i], &forward, &saved[i]);
    // Blocked while workers are forked: a child holds the handler above
    // until it restores the old one, and a SIGTERM to it in between (the
    // first failure's, when a sibling fails at once) would be taken by that
    // handler and lost, leaving the worker to the SIGKILL after the grace
    // period. Blocked, it waits and arrives once the child has restored it.
    sigset_t forwarded_set, old_mask;
    sigemptyset(&forwarded_set);
    for (int i = 0; i < 3; i++) sigaddset(&forwarded_set, forwarded[i]);
    sigprocmask(SIG_BLOCK, &forwarded_set, &old_mask);

    int started = 0, failed = 0;
    for (; started < launch->workers; started++) {
        WorkerEnv env;
        if (worker_env_make(&env, launch->envp, started, launch->workers, port, token, err)) {
            failed = 1;
            break;
        }
        fflush(NULL);  // nothing buffered is written twice
        const pid_t pid = fork();
        if (pid == 0) {
            setpgid(0, 0);
            for (int i = 0; i < 3; i++) sigaction(forwarded[i], &saved[i], NULL);
            sigprocmask(SIG_SETMASK, &old_mask, NULL);
            execve(launch->program, launch->argv, env.entries);
            fprintf(stderr, "local launch: cannot run %s: %s\n", launch->program,
                    strerror(errno));
            _exit(127);
        }
        worker_env_free(&env);
        if (pid < 0) {
            error_set(err, "local launch: fork of worker %d: %s", started, strerror(errno));
            failed = 1;
            break;
        }
        setpgid(pid, pid);  // also here: no race with an early signal
        pids[started] = pid;
    }
    sigprocmask(SIG_SETMASK, &old_mask, NULL);  // a signal that came meanwhile arrives now
    if (failed) {
        signal_workers(pids, started, SIGKILL);
        for (int i = 0; i < started; i++) waitpid(pids[i], NULL, 0);
    } else {
        *exit_status = supervise(pids, launch->workers, launch->grace_seconds);
    }
    for (int i = 0; i < 3; i++) sigaction(forwarded[i], &saved[i], NULL);
    free(pids);
    return failed ? -1 : 0;
}
