// The messages between a worker and its decoder process (private to
// decoder_process.c, the worker's side, and decoder_child.c, the child's).
// Both sides are the same binary, so the structs travel as they are: one
// message each over a SOCK_SEQPACKET socket pair, which keeps message
// boundaries and reports the other side's end as a 0-byte read.
//
//   start: parent -> DecoderSettings (+ the DECODER_BUFFERS memory files and,
//          with views, the output's, as SCM_RIGHTS), child -> DecoderReply
//          (status 0: ready)
//   each file: parent -> DecoderRequest (up to the end of its path), child ->
//          DecoderReply. Up to DECODER_PROCESS_PIPELINE requests may wait in
//          the socket; the child answers them in order.
#ifndef LTC_DATA_DECODER_PROTOCOL_H
#define LTC_DATA_DECODER_PROTOCOL_H

#include <stdint.h>

#include "augment/augment.h"
#include "decode/decode.h"
#include "util/error.h"

// The environment variable that makes a start of this program a decoder
// process (its value: the parent's pid), and the child's socket.
#define DECODER_CHILD_ENV "LTC_DECODER_PROCESS"
#define DECODER_CHILD_SOCKET 3

typedef struct DecoderSettings {
    uint64_t max_pixels;
    int32_t apply_exif_orientation;
    int32_t channels;  // decoder_set_channels
    int32_t has_views;
    uint64_t seed;
    ViewSet views;  // DECODER_OP_RENDER plans and renders with these
    // Where DECODER_OP_RENDER writes, the memory file after the buffers':
    // the batch slots (shared_slots: slot_count of slot_bytes, loader.c's
    // layout: view after view, each batch_size samples) or
    // DECODER_PROCESS_PIPELINE views buffers of one image's views each
    // (view after view), one per request that can be in flight.
    int32_t shared_slots;
    int32_t slot_count, batch_size;
    uint64_t slot_bytes;
} DecoderSettings;

typedef enum DecoderOp {
    DECODER_OP_PROBE = 1,  // read + probe
    DECODER_OP_DECODE,     // read + probe + decode `request`
    DECODER_OP_RENDER,     // read + probe + load_plan + decode its request + render the views
} DecoderOp;

typedef struct DecoderRequest {
    int32_t op;
    int32_t whole_file;  // DECODER_OP_RENDER
    uint32_t epoch;
    uint64_t view_key;
    int32_t slot, position;  // DECODER_OP_RENDER into shared slots
    int32_t views_buffer;    // DECODER_OP_RENDER, no shared slots: which views buffer
    int64_t index;  // dataset index for the LTC_FAULT decoder-* points; -1 none
    DecodeRequest request;  // DECODER_OP_DECODE
    char path[4096];
} DecoderRequest;

typedef struct DecoderReply {
    int32_t status;  // 0, or -1 with err
    ErrorMessage err;
    ImageInfo info;
    // DECODER_OP_DECODE's pixels: buffer `buffer` (a memory file) from
    // `offset`, as DecodedImage describes them (native: `samples`, else
    // `image` with pixels NULL).
    int32_t buffer;
    uint64_t offset;
    int32_t native;
    Image image;
    SampleImage samples;
    PixelRect covered;
    uint64_t read_ns, decode_ns, render_ns;
    ViewGeometry geometry[AUGMENT_MAX_VIEWS];  // DECODER_OP_RENDER: where each view came from
} DecoderReply;

// Where view v of one image starts among its views (view after view), and
// (v = count) the bytes of all of them: the layout of a sample in every
// view region of a slot, and of a process's views buffer.
static inline size_t decoder_view_offset(const ViewSet *views, int v) {
    size_t bytes = 0;
    for (int u = 0; u < v; u++)
        bytes += (size_t)views->views[u].size * (size_t)views->views[u].size *
                 view_set_pixel_bytes(views);
    return bytes;
}

// The child's life (decoder_child.c): serves until the parent goes; the
// process's exit status. parent: DECODER_CHILD_ENV's value.
int decoder_child_main(const char *parent);

#endif
