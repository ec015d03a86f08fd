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
// - DgradDreluBNBwdWeight (a pre-compiled engine, 7 operations, as cuDNN's
//   documentation gives it): a backward-data convolution of dy and w into a
//   virtual float d; dz = RELU_BWD of d where the norm's output ((x0 -
//   mean) inv_std) scale + bias > 0, written; BN_BWD_WEIGHTS of x0 and dz,
//   its other tensors fp32 with data. The norm's output: ADD with alpha2 -1
//   (the documented subtraction; not SUB), MUL, MUL, ADD into virtual
//   floats, on BN_BWD_WEIGHTS' own mean, inv_std and scale ("the inputs on
//   the left and right are exactly the same") and a bias, the four (1, C,
//   1, 1) float with data. (An H200's cuDNN took a chain on tensors of its
//   own and gave a wrong mask: docs/gpu-runs/2026-11-30-a7cdfb0-2.jsonl:4.)
// In each, every tensor with data other than the statistics (fp32) is
// 16-bit (in DgradDreluBNBwdWeight of one type) and the channel counts C
// and K are multiples of 8. So fp32 graphs get no engine, as on a GPU, and neither
// does a lone backward filter, backward data or BN_BWD_WEIGHTS.
//
// LTC_EMU_CUDNN_GRAPH picks another cuDNN, so the tests reach the backend's
// fallbacks: `no-engine`, one without an engine for any graph;
// `no-prologue`, one that fuses the statistics and attention but not the
// prologues (ConvBNfprop, ConvBNwgrad and DgradDreluBNBwdWeight get none),
// as on GPUs whose cuDNN lacks those engines (sm89; sm80 for wgrad);
// `no-dgrad`, one without DgradDreluBNBwdWeight only, as cuDNN before 9.8.
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

// The pointwise operation of the graph that writes t (its y; RELU_BWD's
// dx) with `mode`, or NULL.
static const EmuDescriptor *pointwise_writer(const EmuTensor *t, cudnnPointwiseMode_t mode,
                                             EmuDescriptor *const *ops, int count) {
    const cudnnBackendAttributeName_t output = mode == CUDNN_POINTWISE_RELU_BWD
                                                   ? CUDNN_ATTR_OPERATION_POINTWISE_DXDESC
                                                   : CUDNN_ATTR_OPERATION_POINTWISE_YDESC;
    for (int i = 0; i < count; i++) {
        if (ops[i]->type != CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR) continue;
        const EmuTensor *y = emu_tensor_of(ops[i], output);
        const EmuDescriptor *pw =
            emu_attr_descriptor(ops[i], CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, 0);
        if (y && y->uid == t->uid && emu_attr_int(pw, CUDNN_ATTR_POINTWISE_MODE, -1) == mode)
            return ops[i];
    }
    return NULL;
}

// The input x0 of a chain of pointwise operations with per-channel second
// operands that writes `out`: modes[0] writes out, modes[1] its x, and so
// on, every result virtual float; x0 (N, C, H, W) 16-bit with data, C a
// multiple of 8; each operand (1, C, 1, 1) with data, of x0's type
// (params_float 0) or float, into params[i] (the operand of modes[i]);
// every alpha 1 but the alpha2 of the operation on x0 (modes[length - 1]),
// which is first_alpha2. NULL when out is not written so.
static const EmuTensor *chain_input(const EmuTensor *out, const cudnnPointwiseMode_t *modes,
                                    int length, int params_float, double first_alpha2,
                                    EmuDescriptor *const *ops, int count,
                                    const EmuTensor **params) {
    for (int i = 0; i < length; i++) {
        const EmuDescriptor *op = out->is_virtual && out->type == CUDNN_DATA_FLOAT
                                      ? pointwise_writer(out, modes[i], ops, count)
                                      : NULL;
        const double alpha2 = i == length - 1 ? first_alpha2 : 1.0;
        if (!op || emu_attr_real(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, 1.0) != 1.0 ||
            emu_attr_real(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, 1.0) != alpha2)
            return NULL;
        params[i] = emu_tensor_of(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC);
        out = emu_tensor_of(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC);
    }
    const EmuTensor *input = out;
    if (input->is_virtual || !sixteen_bit(input->type) || input->rank != 4 ||
        input->dims[1] % 8 != 0)
        return NULL;
    for (int i = 0; i < length; i++) {
        const EmuTensor *p = params[i];
        if (!p || p->is_virtual || p->type != (params_float ? CUDNN_DATA_FLOAT : input->type) ||
            p->rank != 4 || p->dims[0] != 1 || p->dims[1] != input->dims[1] || p->dims[2] != 1 ||
            p->dims[3] != 1)
            return NULL;
    }
    return input;
}

// The input of a scale and bias: biased = x0 s + b, the ADD of (the MUL of
// x0 and s) and b, s and b of x0's type.
static const EmuTensor *scale_bias_input(const EmuTensor *biased, EmuDescriptor *const *ops,
                                         int count) {
    const cudnnPointwiseMode_t modes[2] = {CUDNN_POINTWISE_ADD, CUDNN_POINTWISE_MUL};
    const EmuTensor *params[2];
    return chain_input(biased, modes, 2, 0, 1.0, ops, count, params);
}

// The input of a BatchNorm's output as DgradDreluBNBwdWeight takes it:
// ((x0 - mean) inv_std) scale + bias, ADD (alpha2 -1, alpha1 1), MUL, MUL,
// ADD (no alphas but 1), the four float, into operands: bias, scale,
// inv_std, mean.
static const EmuTensor *norm_output_input(const EmuTensor *normalized, EmuDescriptor *const *ops,
                                          int count, const EmuTensor **operands) {
    const cudnnPointwiseMode_t modes[4] = {CUDNN_POINTWISE_ADD, CUDNN_POINTWISE_MUL,
                                           CUDNN_POINTWISE_MUL, CUDNN_POINTWISE_ADD};
    return chain_input(normalized, modes, 4, 1, -1.0, ops, count, operands);
}

// Whether the chain's mean, inv_std and scale are the norm's own tensors.
static int chain_on_norm_tensors(const EmuTensor *const *operands, const EmuDescriptor *norm) {
    const cudnnBackendAttributeName_t own[3] = {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC,
                                                CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC,
                                                CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MEAN_DESC};
    for (int i = 0; i < 3; i++)
        if (operands[i + 1]->uid != emu_tensor_of(norm, own[i])->uid) return 0;
    return 1;
}

// The input of a scale-bias-relu prologue: x = relu(x0 s + b), RELU_FWD of
// a scale and bias into a virtual tensor. NULL when x is not such a tensor.
static const EmuTensor *prologue_input(const EmuTensor *x, EmuDescriptor *const *ops, int count) {
    const EmuDescriptor *relu =
        x->is_virtual ? pointwise_writer(x, CUDNN_POINTWISE_RELU_FWD, ops, count) : NULL;
    return relu ? scale_bias_input(emu_tensor_of(relu, CUDNN_ATTR_OPERATION_POINTWISE_XDESC), ops,
                                   count)
                : NULL;
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

// DgradDreluBNBwdWeight: dz = RELU_BWD(the norm's output, the backward
// data of dy and w) written, and the BN_BWD_WEIGHTS of x0 and dz (7
// operations); dy, w, dz and x0 of one 16-bit type, the backward data's
// output virtual float, the norm's output norm_output_input's chain on the
// norm's own mean, inv_std and scale, the norm's other tensors float with
// data, channel counts multiples of 8.
static int dgrad_fusable(EmuDescriptor *const *ops, int count) {
    const EmuDescriptor *dgrad = NULL, *norm = NULL;
    for (int i = 0; i < count; i++) {
        if (ops[i]->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR)
            dgrad = ops[i];
        else if (ops[i]->type == CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR) norm = ops[i];
    }
    if (!dgrad || !norm || count != 7) return 0;
    const EmuTensor *dy = emu_tensor_of(dgrad, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY);
    const EmuTensor *w = emu_tensor_of(dgrad, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W);
    const EmuTensor *d = emu_tensor_of(dgrad, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX);
    const EmuTensor *dz = emu_tensor_of(norm, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DY_DESC);
    const EmuDescriptor *relu = pointwise_writer(dz, CUDNN_POINTWISE_RELU_BWD, ops, count);
    if (!relu || emu_tensor_of(relu, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC)->uid != d->uid)
        return 0;
    const EmuTensor *operands[4];
    const EmuTensor *x0 = norm_output_input(
        emu_tensor_of(relu, CUDNN_ATTR_OPERATION_POINTWISE_XDESC), ops, count, operands);
    const EmuTensor *norm_x = emu_tensor_of(norm, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_X_DESC);
    if (!x0 || norm_x->uid != x0->uid || !d->is_virtual || d->type != CUDNN_DATA_FLOAT ||
        dy->dims[1] % 8 != 0)
        return 0;
    if (!chain_on_norm_tensors(operands, norm)) return 0;
    const EmuTensor *sixteen_bit_operands[3] = {dy, w, dz};
    for (int i = 0; i < 3; i++)
        if (sixteen_bit_operands[i]->is_virtual || sixteen_bit_operands[i]->type != x0->type)
            return 0;
    const EmuTensor *in[EMU_MAX_OP_TENSORS], *out[EMU_MAX_OP_TENSORS];
    int in_count, out_count;
    emu_op_tensors(norm, in, &in_count, out, &out_count);
    for (int k = 0; k < in_count + out_count; k++) {
        const EmuTensor *t = k < in_count ? in[k] : out[k - in_count];
        if (t->uid != norm_x->uid && t->uid != dz->uid &&
            (t->is_virtual || t->type != CUDNN_DATA_FLOAT))
            return 0;
    }
    return 1;
}

int emu_engines_for(const EmuDescriptor *graph) {
    if (graph_switch_is("no-engine")) return 0;
    const int prologues = !graph_switch_is("no-prologue");
    EmuDescriptor *ops[EMU_MAX_OPS];
    const int count = emu_graph_ops(graph, ops);
    int matmuls = 0, wgrads = 0, dgrad_pattern_ops = 0;
    for (int i = 0; i < count; i++) {
        const cudnnBackendDescriptorType_t type = ops[i]->type;
        matmuls += type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR;
        wgrads += type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR;
        dgrad_pattern_ops += type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR ||
                             type == CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR;
    }
    if (matmuls > 0) return attention_fusable(ops, count);
    if (dgrad_pattern_ops > 0)
        return prologues && !graph_switch_is("no-dgrad") && dgrad_fusable(ops, count);
    return wgrads > 0 ? wgrad_fusable(ops, count, prologues)
                      : conv_stats_fusable(ops, count, prologues);
}
