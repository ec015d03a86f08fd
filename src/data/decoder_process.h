// A decoder in a child process: how the input pipeline survives a crash
// inside a third-party decoder library (docs/input-pipeline.md, "Decoder
// processes").
//
// Each loader worker owns one DecoderProcess: a copy of this program
// started from /proc/self/exe in a hidden mode (decoder_child.c), a fresh
// process without the parent's threads, MPI or CUDA, that reads, decodes
// and augments one file at a time, writing the views straight into the
// loader's batch slots, which it shares (or, where the slots cannot be
// shared, into a buffer the worker copies from). The probe and decode calls
// (the projector's thumbnails, the --input-depth check) leave the decoded
// pixels in memory files the caller maps. When the child dies while it
// handles a file (a signal, an exit) or gives no answer within the timeout
// (then it is killed), that file fails with the reason (the loader skips it
// and names it once, as any bad file) and the next call starts a new child.
// Memory stays bounded: one child per DecoderProcess, and its buffers only
// grow to the largest image (as a Decoder's do).
//
// One thread uses a DecoderProcess at a time. Results stay valid until the
// next call. The loader keeps the next image's request queued in the child
// (decoder_process_submit_render); probes and decodes go one at a time.
#ifndef LTC_DATA_DECODER_PROCESS_H
#define LTC_DATA_DECODER_PROCESS_H

#include <stdint.h>

#include "augment/augment.h"
#include "decode/decode.h"
#include "util/error.h"

// Render requests a worker may have in flight to its decoder process: the
// next one waits in the socket while the child works on the current one, so
// the child goes on without waiting for the worker thread to be woken and
// scheduled (performance.md, "Decoder processes": that wait cost 5-7% of
// the JPEG path's images/s on a loaded 2-core machine).
#define DECODER_PROCESS_PIPELINE 2
// Files larger than this are refused before they are read.
#define DECODER_PROCESS_MAX_FILE_BYTES ((size_t)1 << 30)
// One file's limit, from the request to the answer: this much, plus one
// second per million pixels the limit allows (149 s at Pillow's limit), so
// that a slow format at the pixel limit on a loaded machine still makes
// it; a decoder caught in an endless loop is killed after it.
#define DECODER_PROCESS_TIMEOUT_BASE 60.0

// The batch slots a loader shares with its decoder processes: a memory
// file of `count` slots of `bytes` each, in loader.c's layout (view after
// view, each `batch_size` samples of the view set's pixel bytes).
typedef struct DecoderSlots {
    int fd;
    int count;
    int batch_size;
    size_t bytes;
} DecoderSlots;

typedef struct DecoderProcessConfig {
    uint64_t max_pixels;  // 0: the decoders' default
    int ignore_exif_orientation;
    int channels;         // decoder_set_channels (0: 8-bit RGB)
    const ViewSet *views;  // for decoder_process_render; NULL when not used
    uint64_t seed;
    // Where decoder_process_render writes the views: these slots, or (NULL)
    // a buffer of one image's views that the caller copies from.
    const DecoderSlots *slots;
    double timeout_seconds;  // 0: the default above
} DecoderProcessConfig;

typedef struct DecoderProcess DecoderProcess;

// Starts no process yet: the first call does (so that several start at
// once, each from its own worker).
DecoderProcess *decoder_process_create(const DecoderProcessConfig *config, ErrorMessage *err);
// Ends the child (SIGKILL: it may be inside a long decode) and frees all.
void decoder_process_destroy(DecoderProcess *process);

// The calls return 0, DECODER_PROCESS_BAD_FILE with the reason in err
// (the decoder's, or how the child died on this file), or
// DECODER_PROCESS_BROKEN when no decoder process can run here (err says
// why; the caller should stop rather than blame every file).
#define DECODER_PROCESS_BAD_FILE (-1)
#define DECODER_PROCESS_BROKEN (-2)

typedef struct DecoderResult {
    ImageInfo info;
    // The pixels, in the worker's read-only mapping of the child's memory.
    DecodedImage decoded;
    double read_seconds, decode_seconds, render_seconds;  // as the child measured them
    ViewGeometry geometry[AUGMENT_MAX_VIEWS];             // a render's views (DecoderReply)
} DecoderResult;

int decoder_process_probe(DecoderProcess *process, const char *path, ImageInfo *info,
                          ErrorMessage *err);
// decoder_decode of `request` (NULL: the whole image at full resolution).
int decoder_process_decode(DecoderProcess *process, const char *path,
                           const DecodeRequest *request, DecoderResult *result,
                           ErrorMessage *err);
// What the loader asks for one image of a batch: the child reads it, plans
// its views (load_plan, from the config's views and seed, this epoch and
// view key), decodes the plan's region and renders the views (data/
// image_renderer.h) into position `position` of slot `slot` of the shared
// slots, or into its views buffer (*views then points at them, view after
// view, until the next call; NULL with shared slots). So the decoded
// pixels are read in the process that wrote them. index: the dataset index
// (for LTC_FAULT's decoder-crash and decoder-hang points, util/fault.h).
typedef struct DecoderRendered {
    ImageFormat format;
    const uint8_t *views;
    double read_seconds, decode_seconds, render_seconds;  // as the child measured them
    const ViewGeometry *geometry;  // (view count) where each view came from; valid until the next collect
} DecoderRendered;
int decoder_process_render(DecoderProcess *process, const char *path, int64_t index,
                           uint32_t epoch, uint64_t view_key, int whole_file, int slot,
                           int position, DecoderRendered *rendered, ErrorMessage *err);

// decoder_process_render in two halves, so that up to
// DECODER_PROCESS_PIPELINE requests are in flight: submit queues a request
// (the child takes it as soon as it is done with the ones before it);
// collect waits for the answer to the oldest one. A crash or a hang fails
// the request the child was working on, which is always the oldest (the
// child answers in order), and the requests queued behind it go to the new
// child unharmed. Submit returns 0, DECODER_PROCESS_BAD_FILE (a path too
// long: nothing queued) or DECODER_PROCESS_BROKEN; it needs
// decoder_process_pending() < DECODER_PROCESS_PIPELINE. Without shared
// slots, rendered->views stays valid until the next submit.
int decoder_process_submit_render(DecoderProcess *process, const char *path, int64_t index,
                                  uint32_t epoch, uint64_t view_key, int whole_file, int slot,
                                  int position, ErrorMessage *err);
int decoder_process_collect_render(DecoderProcess *process, DecoderRendered *rendered,
                                   ErrorMessage *err);
// Requests submitted and not collected yet.
int decoder_process_pending(const DecoderProcess *process);

#endif
