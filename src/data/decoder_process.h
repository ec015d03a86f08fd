// A decoder in a child process: how the input pipeline survives a crash
// inside a third-party decoder library (docs/input-pipeline.md, "Decoder
// processes").
//
// Each loader worker owns one DecoderProcess: a copy of this program
// started from /proc/self/exe in a hidden mode (decoder_child.c), a fresh
// process without the parent's threads, MPI or CUDA, that reads, probes and
// decodes one file at a time into memory files the worker maps, so decoded
// pixels reach the worker without a copy. When the child dies while it
// handles a file (a signal, an exit) or gives no answer within the timeout
// (then it is killed), that file fails with the reason (the loader skips it
// and names it once, as any bad file) and the next call starts a new child.
// Memory stays bounded: one child per DecoderProcess, and its buffers only
// grow to the largest image (as a Decoder's do).
//
// One thread uses a DecoderProcess at a time. Results stay valid until the
// next call.
#ifndef LTC_DATA_DECODER_PROCESS_H
#define LTC_DATA_DECODER_PROCESS_H

#include <stdint.h>

#include "augment/augment.h"
#include "data/load_plan.h"
#include "decode/decode.h"
#include "util/error.h"

// Files larger than this are refused before they are read.
#define DECODER_PROCESS_MAX_FILE_BYTES ((size_t)1 << 30)
// One file's limit, from the request to the answer: this much, plus one
// second per million pixels the limit allows (149 s at Pillow's limit), so
// that a slow format at the pixel limit on a loaded machine still makes
// it; a decoder caught in an endless loop is killed after it.
#define DECODER_PROCESS_TIMEOUT_BASE 60.0

typedef struct DecoderProcessConfig {
    uint64_t max_pixels;  // 0: the decoders' default
    int ignore_exif_orientation;
    int channels;         // decoder_set_channels (0: 8-bit RGB)
    const ViewSet *views;  // for decoder_process_views; NULL when not used
    uint64_t seed;
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
    double read_seconds, decode_seconds;  // as the child measured them
} DecoderResult;

int decoder_process_probe(DecoderProcess *process, const char *path, ImageInfo *info,
                          ErrorMessage *err);
// decoder_decode of `request` (NULL: the whole image at full resolution).
int decoder_process_decode(DecoderProcess *process, const char *path,
                           const DecodeRequest *request, DecoderResult *result,
                           ErrorMessage *err);
// What the loader asks for one image of a batch: the child plans the views
// (load_plan, from the config's views and seed, this epoch and view key)
// and decodes the plan's region; `plan` receives the same plan made here,
// from the size the child reports, and the decoded pixels are checked to
// cover its crops. index: the dataset index (for LTC_FAULT's decoder-crash
// and decoder-hang points, util/fault.h).
int decoder_process_views(DecoderProcess *process, const char *path, int64_t index,
                          uint32_t epoch, uint64_t view_key, int whole_file, LoadPlan *plan,
                          DecoderResult *result, ErrorMessage *err);

#endif
