// The engine heuristics of the CUDA emulation's cuDNN graph API
// (emu_cudnn_graph.h): which finalized operation graphs get an engine. One
// engine for the graphs cuDNN fuses and none for the rest, as cuDNN does
// for the patterns the backend builds:
// - attention (graphs with matmuls): every tensor with data that feeds a
//   matmul (directly or through a reshape) 16-bit, the head dim (the inner
//   dimension of a product of two such tensors) a multiple of 8 up to 128.
// - a forward convolution with statistics generation on its output
//   (ConvBNfprop's conv + genstats, 2 operations): 16-bit, channels
//   multiples of 8.
// - the same with its input prologue (ConvBNfprop, cudnn-frontend's
//   "SBRCS" sample, 5 operations): the convolution's x is relu(x0 s + b),
//   pointwise MUL then ADD then RELU_FWD into virtual tensors, x0 (N, C, H,
//   W) with data, s and b (1, C, 1, 1) of x0's type.
// - a backward-filter convolution behind the same prologue (ConvBNwgrad,
//   the "scale-bias-relu-wgrad" sample, 4 operations).
// In each, every tensor with data other than the statistics (fp32) is
// 16-bit and the channel counts C and K are multiples of 8. So fp32 graphs
// get no engine, as on a GPU, and neither does a lone backward filter.
//
// LTC_EMU_CUDNN_GRAPH picks another cuDNN, so the tests reach the backend's
// fallbacks: `no-engine`, one without an engine for any graph;
// `no-prologue`, one that fuses the statistics and attention but not the
// prologues (ConvBNfprop and ConvBNwgrad get none), as on GPUs whose cuDNN
// lacks those engines (sm89; sm80 for wgrad).
#include <stdlib.h>
#include <string.h>

#include "emu_cudnn_graph.h"

static int graph_switch_is(const char *mode) {
    const char *value = getenv("LTC_EMU_CUDNN_GRAPH");
    return value && strcmp(value, mode) == 0;
}

// The tensor with data behind t: t itself, or what a reshape made t from.
static const EmuTensor *source_of(const EmuTensor *t, EmuDescriptor *const *ops, int count) {
    for (int hops = 0; t->is_virtual && hops < count; hops++) {
        const EmuTensor *from = NULL;
        for (int i = 0; i < count && !from; i++)
            if (ops[i]->type == CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR &&
                emu_tensor_of(ops[i], CUDNN_ATTR_OPERATION_RESHAPE_YDESC)->uid == t->uid)
                from = emu_tensor_of(ops[i], CUDNN_ATTR_OPERATION_RESHAPE_XDESC);
        if (!from) return t;
        t = from;
    }
    return t;
}

static int sixteen_bit(cudnnDataType_t type) {
    return type == CUDNN_DATA_HALF || type == CUDNN_DATA_BFLOAT16;
}

// Attention: the tensors with data that the products read are 16-bit; a
// product of two of them (the scores) has an inner dimension that is a
// multiple of 8 up to 128.
static int attention_fusable(EmuDescriptor *const *ops, int count) {
    for (int i = 0; i < count; i++) {
        if (ops[i]->type != CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR) continue;
        const EmuTensor *direct = emu_tensor_of(ops[i], CUDNN_ATTR_OPERATION_MATMUL_ADESC);
        const EmuTensor *a = source_of(direct, ops, count);
        const EmuTensor *b =
            source_of(emu_tensor_of(ops[i], CUDNN_ATTR_OPERATION_MATMUL_BDESC), ops, count);
        if ((!a->is_virtual && !sixteen_bit(a->type)) || (!b->is_virtual && !sixteen_bit(b->type)))
            return 0;
        const int64_t inner = direct->dims[direct->rank - 1];
        if (!a->is_virtual && !b->is_virtual && (inner % 8 != 0 || inner > 128)) return 0;
    }
    return 1;
}

// The pointwise operation of the graph that writes t with `mode`, or NULL.
static const EmuDescriptor *pointwise_writer(const EmuTensor *t, cudnnPointwiseMode_t mode,
                                             EmuDescriptor *const *ops, int count) {
    for (int i = 0; i < count; i++) {
        if (ops[i]->type != CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) continue;
        const EmuTensor *y = emu_tensor_of(ops[i], CUDNN_ATTR_OPERATION_POINTWISE_YDESC);
        const EmuDescriptor *pw =
            emu_attr_descriptor(ops[i], CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, 0);
        if (y && y->uid == t->uid && emu_attr_int(pw, CUDNN_ATTR_POINTWISE_MODE, -1) == mode)
            return ops[i];
    }
    return NULL;
}

// The input of a scale-bias-relu prologue: x = relu(x0 s + b), written by
// RELU_FWD of the ADD of (the MUL of x0 and s) and b, each result virtual,
// x0 (N, C, H, W) 16-bit with data, s and b (1, C, 1, 1) of x0's type with
// data, C a multiple of 8. NULL when x is not such a tensor.
static const EmuTensor *prologue_input(const EmuTensor *x, EmuDescriptor *const *ops, int count) {
    if (!x->is_virtual) return NULL;
    const EmuDescriptor *relu = pointwise_writer(x, CUDNN_POINTWISE_RELU_FWD, ops, count);
    if (!relu) return NULL;
    const EmuTensor *biased = emu_tensor_of(relu, CUDNN_ATTR_OPERATION_POINTWISE_XDESC);
    const EmuDescriptor *add =
        biased->is_virtual ? pointwise_writer(biased, CUDNN_POINTWISE_ADD, ops, count) : NULL;
    if (!add) return NULL;
    const EmuTensor *scaled = emu_tensor_of(add, CUDNN_ATTR_OPERATION_POINTWISE_XDESC);
    const EmuDescriptor *mul =
        scaled->is_virtual ? pointwise_writer(scaled, CUDNN_POINTWISE_MUL, ops, count) : NULL;
    if (!mul) return NULL;
    const EmuTensor *input = emu_tensor_of(mul, CUDNN_ATTR_OPERATION_POINTWISE_XDESC);
    const EmuTensor *channel_params[2] = {
        emu_tensor_of(mul, CUDNN_ATTR_OPERATION_POINTWISE_BDESC),
        emu_tensor_of(add, CUDNN_ATTR_OPERATION_POINTWISE_BDESC),
    };
    if (input->is_virtual || !sixteen_bit(input->type) || input->rank != 4 ||
        input->dims[1] % 8 != 0)
        return NULL;
    for (int i = 0; i < 2; i++) {
        const EmuTensor *p = channel_params[i];
        if (p->is_virtual || p->type != input->type || p->rank != 4 || p->dims[0] != 1 ||
            p->dims[1] != input->dims[1] || p->dims[2] != 1 || p->dims[3] != 1)
            return NULL;
    }
    return input;
}

// ConvBNfprop: one forward convolution whose output (with data) one
// statistics generation reads, w and y 16-bit, channel counts multiples of
// 8; x either has data and is 16-bit (conv + genstats, 2 operations) or is
// the output of a scale-bias-relu prologue (5 operations, unless
// `prologues` is 0).
static int conv_stats_fusable(EmuDescriptor *const *ops, int count, int prologues) {
    const EmuDescriptor *conv = NULL, *stats = NULL;
    for (int i = 0; i < count; i++) {
        if (ops[i]->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR) conv = ops[i];
        else if (ops[i]->type == CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR) stats = ops[i];
    }
    if (!conv || !stats) return 0;
    const EmuTensor *x = emu_tensor_of(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X);
    const EmuTensor *w = emu_tensor_of(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W);
    const EmuTensor *y = emu_tensor_of(conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y);
    if (emu_tensor_of(stats, CUDNN_ATTR_OPERATION_GENSTATS_XDESC)->uid != y->uid ||
        y->is_virtual || !sixteen_bit(w->type) || !sixteen_bit(y->type) || x->dims[1] % 8 != 0 ||
        y->dims[1] % 8 != 0)
        return 0;
    if (count == 2) return !x->is_virtual && sixteen_bit(x->type);
    // the 3 other operations are the prologue: each writes a different tensor of its chain
    return count == 5 && prologues && prologue_input(x, ops, count) != NULL;
}

// ConvBNwgrad: a backward-filter convolution whose x is the output of a
// scale-bias-relu prologue (4 operations), dy and dw 16-bit with data,
// channel counts multiples of 8.
static int wgrad_fusable(EmuDescriptor *const *ops, int count, int prologues) {
    const EmuDescriptor *wgrad = NULL;
    for (int i = 0; i < count; i++)
        if (ops[i]->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR)
            wgrad = ops[i];
    if (!wgrad || count != 4 || !prologues) return 0;
    const EmuTensor *x = emu_tensor_of(wgrad, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X);
    const EmuTensor *dy = emu_tensor_of(wgrad, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY);
    const EmuTensor *dw = emu_tensor_of(wgrad, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW);
    return !dy->is_virtual && !dw->is_virtual && sixteen_bit(dy->type) &&
           sixteen_bit(dw->type) && dy->dims[1] % 8 == 0 && prologue_input(x, ops, count) != NULL;
}

int emu_engines_for(const EmuDescriptor *graph) {
    if (graph_switch_is("no-engine")) return 0;
    const int prologues = !graph_switch_is("no-prologue");
    EmuDescriptor *ops[EMU_MAX_OPS];
    const int count = emu_graph_ops(graph, ops);
    int matmuls = 0, wgrads = 0;
    for (int i = 0; i < count; i++) {
        matmuls += ops[i]->type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR;
        wgrads += ops[i]->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR;
    }
    if (matmuls > 0) return attention_fusable(ops, count);
    return wgrads > 0 ? wgrad_fusable(ops, count, prologues)
                      : conv_stats_fusable(ops, count, prologues);
}
