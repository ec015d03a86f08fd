// The worker's side of a decoder process (see decoder_process.h): starting
// the child, requests queued to it and their answers in order, telling a
// crash from a bad file (and sending the requests queued behind a crash to
// the next child), and mapping the child's memory files read-only.
//
// The child is started with posix_spawn (glibc's clones without copying the
// address space, safe from a threaded process holding pinned or MPI-
// registered memory) of /proc/self/exe, with DECODER_CHILD_ENV set: a fresh
// copy of this program, whose decoder_child.c constructor serves before
// anything else runs. Every descriptor made here is close-on-exec; the
// child gets only its socket (as DECODER_CHILD_SOCKET) and the memory files
// (passed over it). The memory files belong to the DecoderProcess, not to
// the child: a restarted child grows the same ones, and they are sealed
// against shrinking, so a mapping here never reaches past their end.
#include "data/decoder_process.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/decoder_protocol.h"
#include "util/cpu.h"

extern char **environ;

// A start of this program as a decoder process serves before main runs (in
// whatever binary links the loader: the program, its tests, the tools) and
// ends there.
__attribute__((constructor)) static void decoder_process_enter_child(void) {
    const char *parent = getenv(DECODER_CHILD_ENV);
    if (parent) _exit(decoder_child_main(parent));
}

struct DecoderProcess {
    DecoderSettings settings;
    double timeout_seconds;
    char **environment;  // environ's strings and DECODER_CHILD_ENV=<our pid>
    int memory_fd[DECODER_BUFFERS];
    const uint8_t *map[DECODER_BUFFERS];  // read-only
    size_t mapped[DECODER_BUFFERS];
    // With views: where the child renders them (DecoderSettings): the
    // loader's slots (not owned) or a views buffer, mapped read-only.
    int output_fd;
    const uint8_t *views;
    size_t views_bytes;
    ViewGeometry geometry[AUGMENT_MAX_VIEWS];  // the last collected render's
    pid_t pid;  // 0 while no child runs
    int socket;
    // The requests in flight, oldest first (a ring from pending_first), and
    // how many of them (a prefix) were sent to the running child: a new
    // child gets the others, from the oldest unanswered one on.
    DecoderRequest pending[DECODER_PROCESS_PIPELINE];
    int pending_first, pending_count, delivered;
};

static void free_environment(char **environment) {
    for (size_t i = 0; environment && environment[i]; i++) free(environment[i]);
    free(environment);
}

// environ's strings (copied: the caller may change its own later) without
// DECODER_CHILD_ENV, then DECODER_CHILD_ENV=<this process's id>.
static char **make_environment(void) {
    size_t count = 0;
    while (environ[count]) count++;
    char **environment = calloc(count + 2, sizeof *environment);
    if (!environment) return NULL;
    const size_t name_length = strlen(DECODER_CHILD_ENV);
    size_t kept = 0;
    for (size_t i = 0; i < count; i++) {
        if (strncmp(environ[i], DECODER_CHILD_ENV, name_length) == 0 &&
            environ[i][name_length] == '=')
            continue;
        environment[kept] = strdup(environ[i]);
        if (!environment[kept++]) {
            free_environment(environment);
            return NULL;
        }
    }
    char marker[64];
    snprintf(marker, sizeof marker, "%s=%ld", DECODER_CHILD_ENV, (long)getpid());
    environment[kept] = strdup(marker);
    if (!environment[kept]) {
        free_environment(environment);
        return NULL;
    }
    return environment;
}

// A memory file sealed against shrinking (and, of `size` bytes, against
// growing): a mapping of it never reaches past its end.
static int memory_file(size_t size) {
    const int fd = memfd_create("ltc-decoded", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return -1;
    const int seals = size ? F_SEAL_SHRINK | F_SEAL_GROW : F_SEAL_SHRINK;
    if ((size && ftruncate(fd, (off_t)size) != 0) || fcntl(fd, F_ADD_SEALS, seals) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

// Where the child renders the views: the loader's slots, or one buffer of
// one image's views per request in flight, mapped here read-only.
static int output_setup(DecoderProcess *process, const DecoderProcessConfig *config,
                        ErrorMessage *err) {
    DecoderSettings *settings = &process->settings;
    if (config->slots) {
        settings->shared_slots = 1;
        settings->slot_count = config->slots->count;
        settings->batch_size = config->slots->batch_size;
        settings->slot_bytes = config->slots->bytes;
        process->output_fd = fcntl(config->slots->fd, F_DUPFD_CLOEXEC, 0);
    } else {
        process->views_bytes =
            DECODER_PROCESS_PIPELINE * decoder_view_offset(config->views, config->views->count);
        process->output_fd = memory_file(process->views_bytes);
        void *map = process->output_fd < 0 ? MAP_FAILED
                                           : mmap(NULL, process->views_bytes, PROT_READ,
                                                  MAP_SHARED, process->output_fd, 0);
        process->views = map == MAP_FAILED ? NULL : map;
        if (!process->views) process->views_bytes = 0;
    }
    if (process->output_fd < 0 || (!config->slots && !process->views))
        return error_set(err, "cannot create the decoder process's views memory: %s",
                         strerror(errno));
    return 0;
}

DecoderProcess *decoder_process_create(const DecoderProcessConfig *config, ErrorMessage *err) {
    DecoderProcess *process = calloc(1, sizeof *process);
    if (!process) {
        error_set(err, "out of memory for a decoder process");
        return NULL;
    }
    for (int i = 0; i < DECODER_BUFFERS; i++) process->memory_fd[i] = -1;
    process->socket = -1;
    process->output_fd = -1;
    process->settings = (DecoderSettings){
        .max_pixels = config->max_pixels,
        .apply_exif_orientation = !config->ignore_exif_orientation,
        .channels = config->channels,
        .has_views = config->views != NULL,
        .seed = config->seed,
    };
    if (config->views) process->settings.views = *config->views;
    const uint64_t limit = config->max_pixels ? config->max_pixels : DECODE_DEFAULT_MAX_PIXELS;
    process->timeout_seconds = config->timeout_seconds > 0
                                   ? config->timeout_seconds
                                   : DECODER_PROCESS_TIMEOUT_BASE + (double)limit * 1e-6;
    process->environment = make_environment();
    if (!process->environment) {
        error_set(err, "out of memory for a decoder process");
        decoder_process_destroy(process);
        return NULL;
    }
    for (int i = 0; i < DECODER_BUFFERS; i++) {
        process->memory_fd[i] = memory_file(0);
        if (process->memory_fd[i] < 0) {
            error_set(err, "cannot create the decoder process's memory: %s", strerror(errno));
            decoder_process_destroy(process);
            return NULL;
        }
    }
    if (config->views && output_setup(process, config, err) != 0) {
        decoder_process_destroy(process);
        return NULL;
    }
    return process;
}

// Ends the child (SIGKILL: it may be busy, or caught in a loop; a child
// that died already keeps its own status) and reaps it; *wait_status gets
// how it ended (0 when unknown).
static void process_stop(DecoderProcess *process, int *wait_status) {
    if (wait_status) *wait_status = 0;
    if (process->socket >= 0) close(process->socket);
    process->socket = -1;
    process->delivered = 0;  // what it was sent is lost with it
    if (process->pid <= 0) return;
    kill(process->pid, SIGKILL);
    int status = 0;
    while (waitpid(process->pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (wait_status) *wait_status = status;
    process->pid = 0;
}

void decoder_process_destroy(DecoderProcess *process) {
    if (!process) return;
    process_stop(process, NULL);
    for (int i = 0; i < DECODER_BUFFERS; i++) {
        if (process->map[i]) munmap((void *)process->map[i], process->mapped[i]);
        if (process->memory_fd[i] >= 0) close(process->memory_fd[i]);
    }
    if (process->views) munmap((void *)process->views, process->views_bytes);
    if (process->output_fd >= 0) close(process->output_fd);
    free_environment(process->environment);
    free(process);
}

// How a child ended: "died of SIGSEGV (signal 11)", "exited with status 1".
static void describe_status(int wait_status, char *text, size_t size) {
    if (WIFSIGNALED(wait_status)) {
        const char *name = sigabbrev_np(WTERMSIG(wait_status));
        snprintf(text, size, "died of SIG%s (signal %d)", name ? name : "?", WTERMSIG(wait_status));
    } else if (WIFEXITED(wait_status)) {
        snprintf(text, size, "exited with status %d", WEXITSTATUS(wait_status));
    } else {
        snprintf(text, size, "ended");
    }
}

// How the child ended on a file, as the reason the file is skipped.
static int describe_end(int wait_status, int timed_out, double timeout, ErrorMessage *err) {
    if (timed_out)
        return error_set(err,
                         "decoder did not finish within %.0f s (its process was killed; a "
                         "decoder library caught in a loop?)",
                         timeout);
    char how[64];
    describe_status(wait_status, how, sizeof how);
    return error_set(err,
                     "decoder crashed: its process %s on this file (the worker goes on with a "
                     "new one)",
                     how);
}

static int set_timeout(int socket, double seconds) {
    struct timeval limit = {(time_t)seconds, (suseconds_t)((seconds - (double)(time_t)seconds) * 1e6)};
    return setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
}

// recv of one whole message: its size, 0 when the child's end closed, -1
// with errno (EAGAIN: the timeout passed). A signal's interruption waits on.
static ssize_t receive(int socket, void *message, size_t size) {
    ssize_t got;
    while ((got = recv(socket, message, size, 0)) < 0 && errno == EINTR) {
    }
    return got;
}

// The settings and the memory files (with views, the output's last) to a
// new child.
static int send_settings(DecoderProcess *process) {
    int fds[DECODER_BUFFERS + 1];
    memcpy(fds, process->memory_fd, sizeof process->memory_fd);
    const int files = DECODER_BUFFERS + (process->settings.has_views != 0);
    fds[DECODER_BUFFERS] = process->output_fd;
    char control[CMSG_SPACE((DECODER_BUFFERS + 1) * sizeof(int))];
    memset(control, 0, sizeof control);
    struct iovec part = {&process->settings, sizeof process->settings};
    struct msghdr message = {.msg_iov = &part, .msg_iovlen = 1, .msg_control = control,
                             .msg_controllen = CMSG_SPACE((size_t)files * sizeof(int))};
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN((size_t)files * sizeof(int));
    memcpy(CMSG_DATA(header), fds, (size_t)files * sizeof(int));
    return sendmsg(process->socket, &message, MSG_NOSIGNAL) == (ssize_t)sizeof process->settings
               ? 0
               : -1;
}

static int spawn_child(DecoderProcess *process, int child_socket, ErrorMessage *err) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attributes);
    posix_spawn_file_actions_adddup2(&actions, child_socket, DECODER_CHILD_SOCKET);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attributes, &none);
    posix_spawnattr_setpgroup(&attributes, 0);  // its own group (decoder_child.c says why)
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
    char name[] = "lightly-train-c-decoder";
    char *argv[] = {name, NULL};
    const int status = posix_spawn(&process->pid, "/proc/self/exe", &actions, &attributes, argv,
                                   process->environment);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    if (status != 0) {
        process->pid = 0;
        return error_set(err, "cannot start a decoder process (/proc/self/exe): %s",
                         strerror(status));
    }
    return 0;
}

static int process_start(DecoderProcess *process, ErrorMessage *err) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
        return error_set(err, "cannot create a decoder process's socket: %s", strerror(errno));
    // Above the child's number, so that the child's dup2 never meets itself.
    const int child_socket = fcntl(pair[1], F_DUPFD_CLOEXEC, DECODER_CHILD_SOCKET + 1);
    close(pair[1]);
    process->socket = pair[0];
    if (child_socket < 0) {
        error_set(err, "cannot create a decoder process's socket: %s", strerror(errno));
        process_stop(process, NULL);
        return -1;
    }
    const int spawned = spawn_child(process, child_socket, err);
    close(child_socket);
    if (spawned != 0) {
        process_stop(process, NULL);
        return -1;
    }
    DecoderReply ready;
    ssize_t got = -1;
    if (set_timeout(process->socket, process->timeout_seconds) == 0 &&
        send_settings(process) == 0) {
        got = receive(process->socket, &ready, sizeof ready);
        if (got == (ssize_t)sizeof ready && ready.status == 0) return 0;
    }
    if (got == (ssize_t)sizeof ready) {  // it said why
        ready.err.text[sizeof ready.err.text - 1] = '\0';
        *err = ready.err;
        process_stop(process, NULL);
        return -1;
    }
    const int timed_out = got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    int wait_status;
    process_stop(process, &wait_status);
    char how[64];
    describe_status(wait_status, how, sizeof how);
    return error_set(err, "a decoder process (/proc/self/exe) did not start: it %s",
                     timed_out ? "gave no answer" : how);
}

// Maps the memory file of buffer `which` (again) when it holds `end` bytes
// more than the current mapping covers. -1 when the file is shorter.
static int map_buffer(DecoderProcess *process, int which, uint64_t end) {
    if (end <= process->mapped[which]) return 0;
    struct stat file;
    if (fstat(process->memory_fd[which], &file) != 0 || (uint64_t)file.st_size < end) return -1;
    if (process->map[which]) munmap((void *)process->map[which], process->mapped[which]);
    process->map[which] = NULL;
    process->mapped[which] = 0;
    void *map = mmap(NULL, (size_t)file.st_size, PROT_READ, MAP_SHARED, process->memory_fd[which], 0);
    if (map == MAP_FAILED) return -1;
    process->map[which] = map;
    process->mapped[which] = (size_t)file.st_size;
    return 0;
}

// The child's answer checked (it may come from a damaged process) and its
// pixels located in the mapping. 0, or -1 with the reason.
static int accept_reply(DecoderProcess *process, const DecoderReply *reply, int op,
                        DecoderResult *result, ErrorMessage *err) {
    const ImageInfo *info = &reply->info;
    if (info->width <= 0 || info->height <= 0 || info->width > DECODE_MAX_SIDE ||
        info->height > DECODE_MAX_SIDE || info->format <= IMAGE_FORMAT_UNKNOWN ||
        info->format >= IMAGE_FORMAT_COUNT)
        return error_set(err, "decoder process: an answer with a %d x %d image", info->width,
                         info->height);
    memset(result, 0, sizeof *result);
    result->info = *info;
    result->read_seconds = 1e-9 * (double)reply->read_ns;
    result->decode_seconds = 1e-9 * (double)reply->decode_ns;
    result->render_seconds = 1e-9 * (double)reply->render_ns;
    memcpy(result->geometry, reply->geometry, sizeof result->geometry);
    if (op != DECODER_OP_DECODE) return 0;  // no pixels to locate
    const int native = reply->native != 0;
    const SampleImage *samples = &reply->samples;
    const int width = native ? samples->width : reply->image.width;
    const int height = native ? samples->height : reply->image.height;
    const size_t stride = native ? samples->stride : reply->image.stride;
    const int channels = native ? samples->channels : 3;
    const int typed = !native || samples->type == SAMPLE_U8 || samples->type == SAMPLE_U16 ||
                      samples->type == SAMPLE_F32;
    const PixelRect *covered = &reply->covered;
    if (reply->buffer < 0 || reply->buffer >= DECODER_BUFFERS || !typed || width <= 0 ||
        height <= 0 || channels <= 0 || channels > SAMPLES_MAX_CHANNELS || covered->width < width ||
        covered->height < height || covered->x < 0 || covered->y < 0)
        return error_set(err, "decoder process: an answer with a damaged image description");
    const uint64_t row = (uint64_t)width * (uint64_t)channels *
                         (native ? sample_type_bytes(samples->type) : 1);
    const uint64_t end = reply->offset + (uint64_t)(height - 1) * stride + row;
    if (stride < row || reply->offset > end || map_buffer(process, reply->buffer, end) != 0)
        return error_set(err, "decoder process: an answer with pixels outside its memory");
    uint8_t *pixels = (uint8_t *)process->map[reply->buffer] + reply->offset;
    result->decoded.covered = *covered;
    if (native) {
        result->decoded.samples = *samples;
        result->decoded.samples.pixels = pixels;
    } else {
        result->decoded.image = reply->image;
        result->decoded.image.pixels = pixels;
    }
    return 0;
}

static DecoderRequest *pending_request(DecoderProcess *process, int i) {
    return &process->pending[(process->pending_first + i) % DECODER_PROCESS_PIPELINE];
}

// Sends the running child the requests in flight it was not sent yet, in
// order. -1 with errno when a send fails (the child ended).
static int deliver(DecoderProcess *process) {
    while (process->delivered < process->pending_count) {
        const DecoderRequest *request = pending_request(process, process->delivered);
        // Up to the path's end: 4 KiB less to copy per file.
        const size_t length = offsetof(DecoderRequest, path) + strlen(request->path) + 1;
        if (send(process->socket, request, length, MSG_NOSIGNAL) != (ssize_t)length) return -1;
        process->delivered++;
    }
    return 0;
}

// The oldest request in flight delivered to a running child. A child that
// ended between two files (it was sent nothing it has not answered, and a
// send fails) is replaced once without blaming a file.
static int deliver_oldest(DecoderProcess *process, ErrorMessage *err) {
    int send_error = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (process->pid <= 0 && process_start(process, err) != 0) return DECODER_PROCESS_BROKEN;
        if (deliver(process) == 0 || process->delivered > 0) return 0;
        send_error = errno;
        process_stop(process, NULL);
    }
    error_set(err, "cannot send a file to a decoder process: %s", strerror(send_error));
    return DECODER_PROCESS_BROKEN;
}

// Queues a request; the child gets it at once when it runs (a failed send
// is left to collect, which learns from the answers which file the child
// ended on).
static int submit(DecoderProcess *process, const DecoderRequest *request, ErrorMessage *err) {
    if (process->pending_count >= DECODER_PROCESS_PIPELINE) {
        error_set(err, "internal error: a decoder process's queue is full");
        return DECODER_PROCESS_BROKEN;
    }
    *pending_request(process, process->pending_count++) = *request;
    if (process->pid <= 0 && process_start(process, err) != 0) return DECODER_PROCESS_BROKEN;
    (void)deliver(process);
    return 0;
}

// The answer to the oldest request in flight (its op: *op). When the child
// ends before it answers, that request fails (the child answers in order,
// so it ended on that file) and the ones behind it go to the next child.
static int collect(DecoderProcess *process, DecoderResult *result, int *op, ErrorMessage *err) {
    if (process->pending_count == 0) {
        error_set(err, "internal error: no request in flight to a decoder process");
        return DECODER_PROCESS_BROKEN;
    }
    if (deliver_oldest(process, err) != 0) return DECODER_PROCESS_BROKEN;
    const DecoderRequest *request = pending_request(process, 0);
    *op = request->op;
    process->pending_first = (process->pending_first + 1) % DECODER_PROCESS_PIPELINE;
    process->pending_count--;
    process->delivered--;
    DecoderReply reply;
    const ssize_t got = receive(process->socket, &reply, sizeof reply);
    if (got != (ssize_t)sizeof reply) {
        const int timed_out = got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
        int wait_status;
        process_stop(process, &wait_status);
        describe_end(wait_status, timed_out, process->timeout_seconds, err);
        return DECODER_PROCESS_BAD_FILE;
    }
    reply.err.text[sizeof reply.err.text - 1] = '\0';
    if (reply.status != 0) {
        *err = reply.err;
        return DECODER_PROCESS_BAD_FILE;
    }
    if (accept_reply(process, &reply, *op, result, err) != 0) {
        process_stop(process, NULL);  // not trusted with another file
        return DECODER_PROCESS_BAD_FILE;
    }
    return 0;
}

// One request and its answer, with nothing else in flight.
static int process_call(DecoderProcess *process, const DecoderRequest *request,
                        DecoderResult *result, ErrorMessage *err) {
    if (process->pending_count != 0) {
        error_set(err, "internal error: a decoder process call behind queued renders");
        return DECODER_PROCESS_BROKEN;
    }
    int op;
    const int status = submit(process, request, err);
    return status != 0 ? status : collect(process, result, &op, err);
}

static int set_path(DecoderRequest *request, const char *path, ErrorMessage *err) {
    const size_t length = strlen(path);
    if (length >= sizeof request->path) return error_set(err, "path too long");
    memcpy(request->path, path, length + 1);
    return 0;
}

int decoder_process_probe(DecoderProcess *process, const char *path, ImageInfo *info,
                          ErrorMessage *err) {
    DecoderRequest request = {.op = DECODER_OP_PROBE, .index = -1};
    if (set_path(&request, path, err) != 0) return DECODER_PROCESS_BAD_FILE;
    DecoderResult result;
    const int status = process_call(process, &request, &result, err);
    if (status == 0) *info = result.info;
    return status;
}

int decoder_process_decode(DecoderProcess *process, const char *path,
                           const DecodeRequest *request, DecoderResult *result,
                           ErrorMessage *err) {
    DecoderRequest message = {.op = DECODER_OP_DECODE, .index = -1};
    if (set_path(&message, path, err) != 0) return DECODER_PROCESS_BAD_FILE;
    // NULL: the whole image (decode_clamp_region clamps the region to it).
    message.request = request ? *request : (DecodeRequest){.region = {0, 0, INT32_MAX, INT32_MAX}};
    return process_call(process, &message, result, err);
}

int decoder_process_pending(const DecoderProcess *process) {
    return process->pending_count;
}

int decoder_process_submit_render(DecoderProcess *process, const char *path, int64_t index,
                                  uint32_t epoch, uint64_t view_key, int whole_file, int slot,
                                  int position, ErrorMessage *err) {
    if (!process->settings.has_views) {
        error_set(err, "internal error: decoder process without views");
        return DECODER_PROCESS_BROKEN;
    }
    // Without shared slots, each request in flight renders into its own
    // views buffer: the one of its place in the ring.
    const int views_buffer =
        (process->pending_first + process->pending_count) % DECODER_PROCESS_PIPELINE;
    DecoderRequest request = {.op = DECODER_OP_RENDER, .whole_file = whole_file, .epoch = epoch,
                              .view_key = view_key, .index = index, .slot = slot,
                              .position = position, .views_buffer = views_buffer};
    if (set_path(&request, path, err) != 0) return DECODER_PROCESS_BAD_FILE;
    return submit(process, &request, err);
}

int decoder_process_collect_render(DecoderProcess *process, DecoderRendered *rendered,
                                   ErrorMessage *err) {
    const int views_buffer = process->pending_first;
    DecoderResult result;
    int op = 0;
    const int status = collect(process, &result, &op, err);
    if (status != 0) return status;
    if (op != DECODER_OP_RENDER) {
        error_set(err, "internal error: a render collected for another request");
        return DECODER_PROCESS_BROKEN;
    }
    const size_t views_bytes = process->views_bytes / DECODER_PROCESS_PIPELINE;
    memcpy(process->geometry, result.geometry, sizeof process->geometry);
    *rendered = (DecoderRendered){
        .geometry = process->geometry,
        .format = result.info.format,
        .views = process->settings.shared_slots
                     ? NULL
                     : process->views + (size_t)views_buffer * views_bytes,
        .read_seconds = result.read_seconds,
        .decode_seconds = result.decode_seconds,
        .render_seconds = result.render_seconds,
    };
    return 0;
}

int decoder_process_render(DecoderProcess *process, const char *path, int64_t index,
                           uint32_t epoch, uint64_t view_key, int whole_file, int slot,
                           int position, DecoderRendered *rendered, ErrorMessage *err) {
    const int status = decoder_process_submit_render(process, path, index, epoch, view_key,
                                                     whole_file, slot, position, err);
    return status != 0 ? status : decoder_process_collect_render(process, rendered, err);
}
