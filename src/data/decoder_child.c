// The decoder process itself (see decoder_process.h): what this program
// does when it was started as one (decoder_process.c's constructor, before
// main, so every binary that links the loader can be its own decoder
// process; nothing else of the program runs there).
//
// The child reads one request at a time from its socket (the worker may
// have queued the next ones there already: it never waits for the worker), reads the file,
// probes and decodes it with one Decoder whose buffers lie in memory files
// its parent can map (decoder_set_buffer_memory), and either answers where
// the pixels are (probe and decode requests) or plans, decodes and renders
// the views into the loader's shared batch slot (render requests). It ends when the parent's end of the socket closes, and with
// the parent (PR_SET_PDEATHSIG). It runs in its own process group, so a
// terminal's Ctrl-C or `timeout` reach the parent, which then ends it,
// rather than killing it under a file it did not fail on.
//
// Decoding runs on a thread with a DECODER_CHILD_STACK_BYTES stack, whatever
// `ulimit -s` says: a library's recursion on a deep but valid file has room;
// an endless one (decode/heif_check.c names one) still ends the process,
// which the parent survives.
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "data/decoder_process.h"
#include "data/decoder_protocol.h"
#include "data/image_renderer.h"
#include "data/load_plan.h"
#include "util/fault.h"
#include "util/file.h"

#define DECODER_CHILD_STACK_BYTES ((size_t)64 << 20)
// Memory files grow by at least this factor, in whole MiB, so that a
// slowly growing image size does not remap both sides every time.
#define DECODER_CHILD_GROWTH 1.25
#define DECODER_CHILD_GRANULE ((size_t)1 << 20)

typedef struct ChildMemory {
    int fd[DECODER_BUFFERS];
    uint8_t *map[DECODER_BUFFERS];
    size_t mapped[DECODER_BUFFERS];
} ChildMemory;

typedef struct Child {
    int socket;
    ChildMemory memory;
    DecoderSettings settings;
    Decoder *decoder;
    ByteBuffer file;
    ImageRenderer *renderer;  // with views
    uint8_t *output;          // the batch slots or the views buffer (DecoderSettings)
    size_t output_bytes;
} Child;

// DecoderBufferMemory.reserve: buffer `which` grown to at least `bytes` in
// its memory file (the parent maps the file again when it sees it larger).
static uint8_t *child_reserve(void *context, int which, size_t bytes, size_t *capacity) {
    ChildMemory *memory = context;
    size_t size = (size_t)((double)memory->mapped[which] * DECODER_CHILD_GROWTH);
    if (size < bytes) size = bytes;
    size = (size + DECODER_CHILD_GRANULE - 1) / DECODER_CHILD_GRANULE * DECODER_CHILD_GRANULE;
    struct stat file;
    if (fstat(memory->fd[which], &file) != 0) return NULL;
    if ((size_t)file.st_size < size && ftruncate(memory->fd[which], (off_t)size) != 0) return NULL;
    if (memory->map[which]) munmap(memory->map[which], memory->mapped[which]);
    memory->map[which] = NULL;
    memory->mapped[which] = 0;
    void *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, memory->fd[which], 0);
    if (map == MAP_FAILED) return NULL;
    memory->map[which] = map;
    memory->mapped[which] = size;
    *capacity = size;
    return map;
}

static uint64_t child_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

// The LTC_FAULT points of the decoder process (util/fault.h): a crash or a
// hang inside a decoder library, at the image of dataset index `index`.
static void child_faults(int64_t index) {
    if (index < 0) return;
    if (fault_fires("decoder-crash", (long)index)) {
        signal(SIGSEGV, SIG_DFL);  // past a sanitizer's handler: the signal's own death
        raise(SIGSEGV);
    }
    if (fault_fires("decoder-hang", (long)index))
        for (;;) pause();
}

// Where the decoded pixels lie, for the parent.
static int child_describe(const Child *child, const DecodedImage *decoded, int native,
                          DecoderReply *reply) {
    const void *pixels = native ? (const void *)decoded->samples.pixels
                                : (const void *)decoded->image.pixels;
    int which;
    size_t offset;
    if (decoder_buffer_find(child->decoder, pixels, &which, &offset) != 0)
        return error_set(&reply->err, "internal error: decoded pixels outside the shared buffers");
    reply->buffer = which;
    reply->offset = offset;
    reply->native = native;
    reply->image = decoded->image;
    reply->samples = decoded->samples;
    reply->image.pixels = NULL;
    reply->samples.pixels = NULL;
    reply->covered = decoded->covered;
    return 0;
}

// Where view v of this request's image goes: its slot position, or its
// views buffer. NULL when the slot or position lies outside the slots.
static uint8_t *child_view(const Child *child, const DecoderRequest *request, int v) {
    const DecoderSettings *settings = &child->settings;
    const ViewSet *views = &settings->views;
    if (!settings->shared_slots) {
        if (request->views_buffer < 0 || request->views_buffer >= DECODER_PROCESS_PIPELINE)
            return NULL;
        return child->output +
               (size_t)request->views_buffer * decoder_view_offset(views, views->count) +
               decoder_view_offset(views, v);
    }
    if (request->slot < 0 || request->slot >= settings->slot_count || request->position < 0 ||
        request->position >= settings->batch_size)
        return NULL;
    const size_t size = (size_t)views->views[v].size;
    return child->output + (size_t)request->slot * settings->slot_bytes +
           (size_t)settings->batch_size * decoder_view_offset(views, v) +
           (size_t)request->position * size * size * view_set_pixel_bytes(views);
}

// DECODER_OP_RENDER after the probe: the views' plan, the decode of its
// region, the views into their places.
static void child_render(Child *child, const DecoderRequest *request, uint64_t read,
                         DecoderReply *reply) {
    const DecoderSettings *settings = &child->settings;
    uint8_t *out[AUGMENT_MAX_VIEWS];
    for (int v = 0; v < settings->views.count; v++)
        if (!child->renderer || !(out[v] = child_view(child, request, v))) {
            error_set(&reply->err, "internal error: a render request the decoder process cannot "
                                   "place");
            return;
        }
    LoadPlan plan;
    load_plan(&settings->views, settings->seed, request->epoch, request->view_key, &reply->info,
              request->whole_file, &plan);
    for (int v = 0; v < settings->views.count; v++)
        reply->geometry[v] = (ViewGeometry){plan.params[v].crop, reply->info.width,
                                            reply->info.height, plan.params[v].flip};
    child_faults(request->index);
    DecodedImage decoded;
    if (decoder_decode(child->decoder, child->file.data, child->file.size, &plan.request,
                       &decoded, &reply->err) != 0)
        return;
    const uint64_t decoded_at = child_ns();
    reply->decode_ns = decoded_at - read;
    const int check_range = request->whole_file && decoded.samples.type == SAMPLE_F32;
    if (image_renderer_render(child->renderer, plan.params, &decoded, check_range, out,
                              &reply->err) != 0)
        return;
    reply->render_ns = child_ns() - decoded_at;
    reply->status = 0;
}

static void child_handle(Child *child, const DecoderRequest *request, DecoderReply *reply) {
    memset(reply, 0, sizeof *reply);
    reply->status = -1;
    const uint64_t start = child_ns();
    if (file_read_all(request->path, &child->file, DECODER_PROCESS_MAX_FILE_BYTES, &reply->err))
        return;
    const uint64_t read = child_ns();
    reply->read_ns = read - start;
    if (decoder_probe(child->decoder, child->file.data, child->file.size, &reply->info,
                      &reply->err) != 0)
        return;
    if (request->op == DECODER_OP_PROBE) {
        reply->status = 0;
        return;
    }
    if (request->op == DECODER_OP_RENDER) {
        child_render(child, request, read, reply);
        return;
    }
    child_faults(request->index);
    DecodedImage decoded;
    if (decoder_decode(child->decoder, child->file.data, child->file.size, &request->request,
                       &decoded, &reply->err) != 0 ||
        child_describe(child, &decoded, request->request.native, reply) != 0)
        return;
    reply->decode_ns = child_ns() - read;
    reply->status = 0;
}

// The settings and the memory files, then a Decoder of them and, with
// views, a renderer and the output mapped.
static int child_start(Child *child, DecoderReply *reply) {
    char control[CMSG_SPACE((DECODER_BUFFERS + 1) * sizeof(int))];
    struct iovec part = {&child->settings, sizeof child->settings};
    struct msghdr message = {.msg_iov = &part, .msg_iovlen = 1, .msg_control = control,
                             .msg_controllen = sizeof control};
    const ssize_t got = recvmsg(child->socket, &message, MSG_CMSG_CLOEXEC);
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    const DecoderSettings *settings = &child->settings;
    const int files = DECODER_BUFFERS + (settings->has_views != 0);
    if (got != (ssize_t)sizeof child->settings || !header || header->cmsg_type != SCM_RIGHTS ||
        header->cmsg_len != CMSG_LEN((size_t)files * sizeof(int)))
        return error_set(&reply->err, "decoder process: no settings from the worker");
    int fds[DECODER_BUFFERS + 1];
    memcpy(fds, CMSG_DATA(header), (size_t)files * sizeof(int));
    memcpy(child->memory.fd, fds, sizeof child->memory.fd);
    child->decoder = decoder_create(settings->max_pixels);
    if (!child->decoder) return error_set(&reply->err, "decoder process: out of memory");
    decoder_set_exif_orientation(child->decoder, settings->apply_exif_orientation);
    decoder_set_channels(child->decoder, settings->channels);
    const DecoderBufferMemory memory = {child_reserve, &child->memory};
    decoder_set_buffer_memory(child->decoder, &memory);
    if (!settings->has_views) return 0;
    child->renderer = image_renderer_create(&settings->views);
    child->output_bytes = settings->shared_slots
                              ? (size_t)settings->slot_count * settings->slot_bytes
                              : DECODER_PROCESS_PIPELINE *
                                    decoder_view_offset(&settings->views, settings->views.count);
    // Mapped in full now (MAP_POPULATE): faulting each page in on first
    // write, in this process and again in the loader's, cost 3 to 6% of
    // bench-data's images/s (docs/performance.md, decoder processes).
    void *output = mmap(NULL, child->output_bytes, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_POPULATE, fds[DECODER_BUFFERS], 0);
    close(fds[DECODER_BUFFERS]);
    if (!child->renderer || output == MAP_FAILED)
        return error_set(&reply->err, "decoder process: cannot map where the views go");
    child->output = output;
    return 0;
}

static void *child_serve(void *arg) {
    Child *child = arg;
    DecoderReply reply = {0};
    reply.status = child_start(child, &reply);
    if (send(child->socket, &reply, sizeof reply, MSG_NOSIGNAL) != (ssize_t)sizeof reply ||
        reply.status != 0)
        return NULL;
    DecoderRequest request;
    for (;;) {
        // The request up to its path's end; none: the worker is gone.
        const ssize_t got = recv(child->socket, &request, sizeof request, 0);
        if (got <= (ssize_t)offsetof(DecoderRequest, path)) return NULL;
        request.path[(size_t)got - offsetof(DecoderRequest, path) - 1] = '\0';
        child_handle(child, &request, &reply);
        if (send(child->socket, &reply, sizeof reply, MSG_NOSIGNAL) != (ssize_t)sizeof reply)
            return NULL;
    }
}

int decoder_child_main(const char *parent) {
    unsetenv(DECODER_CHILD_ENV);
    if (fault_fires("decoder-start", 0)) return 1;  // a child that cannot run
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct stat socket_stat;
    if (getppid() != (pid_t)strtol(parent, NULL, 10) ||
        fstat(DECODER_CHILD_SOCKET, &socket_stat) != 0 || !S_ISSOCK(socket_stat.st_mode)) {
        fprintf(stderr, "lightly-train-c: %s is set only for the decoder processes it starts\n",
                DECODER_CHILD_ENV);
        return 2;
    }
    // Its own process group (the parent's spawn) does not reach the
    // terminal's signals; these keep a stray group signal from killing it
    // under the wrong file, and writing to a terminal from the background
    // from stopping it.
    const int ignored[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTTOU, SIGTTIN, SIGPIPE};
    for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++) signal(ignored[i], SIG_IGN);
    static Child child;
    child.socket = DECODER_CHILD_SOCKET;
    pthread_attr_t attributes;
    pthread_t thread;
    if (pthread_attr_init(&attributes) != 0 ||
        pthread_attr_setstacksize(&attributes, DECODER_CHILD_STACK_BYTES) != 0 ||
        pthread_create(&thread, &attributes, child_serve, &child) != 0) {
        fprintf(stderr, "lightly-train-c: decoder process: cannot start its thread\n");
        return 1;
    }
    pthread_join(thread, NULL);
    return 0;
}
