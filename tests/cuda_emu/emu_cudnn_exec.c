// The CUDA emulation's cuDNN graphs computed on the CPU (emu_cudnn_graph.h):
// operations in an order where each reads only what is written, every
// tensor addressed through its own dimensions and strides (so a reshape
// sees its input's memory through other strides, as cuDNN's does), the
// arithmetic in fp32 (sums in a fixed order; BN_BWD_WEIGHTS's in double),
// each value rounded once to its tensor's type when stored (to nearest
// even: util/half.c), virtual tensors included (a 16-bit virtual tensor,
// such as attention's probabilities before their product, holds 16-bit
// values as cuDNN's kernels do). Tensors with data must lie in emulated
// device memory (by-value scalars: host memory).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_blas.h"
#include "emu_cudnn_graph.h"
#include "util/half.h"

// A tensor's values during one execution.
typedef struct Data {
    const EmuTensor *t;
    void *base;  // element 0 (device memory, host memory for by-value, or ours)
    int owned;   // a virtual tensor's buffer
    int ready;
} Data;

typedef struct Execution {
    Data data[EMU_MAX_GRAPH_TENSORS];
    int count;
} Execution;

static int64_t extent(const EmuTensor *t) {  // elements the strides span
    int64_t last = 0;
    for (int i = 0; i < t->rank; i++) last += (t->dims[i] - 1) * t->strides[i];
    return last + 1;
}


static float load(const Data *d, int64_t offset) {
    switch (d->t->type) {
    case CUDNN_DATA_HALF: return f16_to_float(((const float16 *)d->base)[offset]);
    case CUDNN_DATA_BFLOAT16: return bf16_to_float(((const bfloat16 *)d->base)[offset]);
    default: return ((const float *)d->base)[offset];
    }
}

static void store(Data *d, int64_t offset, float v) {
    switch (d->t->type) {
    case CUDNN_DATA_HALF: ((float16 *)d->base)[offset] = float_to_f16(v); break;
    case CUDNN_DATA_BFLOAT16: ((bfloat16 *)d->base)[offset] = float_to_bf16(v); break;
    default: ((float *)d->base)[offset] = v; break;
    }
}

// The multi-index of element n of t (row-major over its dimensions).
static void index_of(const EmuTensor *t, int64_t n, int64_t *index) {
    for (int i = t->rank - 1; i >= 0; i--) {
        index[i] = n % t->dims[i];
        n /= t->dims[i];
    }
}

// The offset in t of a multi-index of a tensor t broadcasts to.
static int64_t offset_of(const EmuTensor *t, const int64_t *index) {
    int64_t offset = 0;
    for (int i = 0; i < t->rank; i++) offset += (t->dims[i] == 1 ? 0 : index[i]) * t->strides[i];
    return offset;
}

static Data *find(Execution *e, int64_t uid) {
    for (int i = 0; i < e->count; i++)
        if (e->data[i].t->uid == uid) return &e->data[i];
    return NULL;
}


// ---- the operations ------------------------------------------------------------------------

static float pointwise(cudnnPointwiseMode_t mode, float x, float b) {
    switch (mode) {
    case CUDNN_POINTWISE_ADD: return x + b;
    case CUDNN_POINTWISE_SUB: return x - b;
    case CUDNN_POINTWISE_MUL: return x * b;
    case CUDNN_POINTWISE_DIV: return x / b;
    case CUDNN_POINTWISE_MAX: return fmaxf(x, b);
    case CUDNN_POINTWISE_MIN: return fminf(x, b);
    case CUDNN_POINTWISE_EXP: return expf(x);
    case CUDNN_POINTWISE_LOG: return logf(x);
    case CUDNN_POINTWISE_SQRT: return sqrtf(x);
    case CUDNN_POINTWISE_RECIPROCAL: return 1.0f / x;
    case CUDNN_POINTWISE_IDENTITY: return x;
    case CUDNN_POINTWISE_RELU_FWD: return x > 0.0f ? x : 0.0f;
    default: return NAN;
    }
}

static int run_pointwise(Execution *e, const EmuDescriptor *op) {
    const EmuDescriptor *pw = emu_attr_descriptor(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, 0);
    const cudnnPointwiseMode_t mode =
        (cudnnPointwiseMode_t)emu_attr_int(pw, CUDNN_ATTR_POINTWISE_MODE, -1);
    int64_t index[EMU_MAX_RANK];
    if (mode == CUDNN_POINTWISE_RELU_BWD) {  // dx = dy where x > 0, else 0
        Data *x = find(e, emu_tensor_of(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC)->uid);
        Data *dy = find(e, emu_tensor_of(op, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC)->uid);
        Data *dx = find(e, emu_tensor_of(op, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC)->uid);
        for (int64_t n = 0; n < emu_tensor_elements(dx->t); n++) {
            index_of(dx->t, n, index);
            const float g = load(dy, offset_of(dy->t, index));
            store(dx, offset_of(dx->t, index), load(x, offset_of(x->t, index)) > 0.0f ? g : 0.0f);
        }
        return 0;
    }
    Data *x = find(e, emu_tensor_of(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC)->uid);
    const EmuTensor *bt = emu_tensor_of(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC);
    Data *b = bt ? find(e, bt->uid) : NULL;
    Data *y = find(e, emu_tensor_of(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC)->uid);
    const float alpha1 = (float)emu_attr_real(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, 1.0);
    const float alpha2 = (float)emu_attr_real(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, 1.0);
    for (int64_t n = 0; n < emu_tensor_elements(y->t); n++) {
        index_of(y->t, n, index);
        const float bv = b ? load(b, b->t->by_value ? 0 : offset_of(b->t, index)) : 0.0f;
        const float xv = load(x, offset_of(x->t, index));
        store(y, offset_of(y->t, index), pointwise(mode, alpha1 * xv, alpha2 * bv));
    }
    return 0;
}

static int run_matmul(Execution *e, const EmuDescriptor *op) {
    Data *a = find(e, emu_tensor_of(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC)->uid);
    Data *b = find(e, emu_tensor_of(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC)->uid);
    Data *c = find(e, emu_tensor_of(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC)->uid);
    const int r = c->t->rank;
    const int64_t k_count = a->t->dims[r - 1];
    int64_t index[EMU_MAX_RANK], ai[EMU_MAX_RANK], bi[EMU_MAX_RANK];
    for (int64_t n = 0; n < emu_tensor_elements(c->t); n++) {
        index_of(c->t, n, index);
        memcpy(ai, index, sizeof ai);
        memcpy(bi, index, sizeof bi);
        float sum = 0.0f;
        for (int64_t k = 0; k < k_count; k++) {
            ai[r - 1] = k;  // a [.., m, k]
            bi[r - 2] = k;  // b [.., k, n]
            sum += load(a, offset_of(a->t, ai)) * load(b, offset_of(b->t, bi));
        }
        store(c, offset_of(c->t, index), sum);
    }
    return 0;
}

static int run_reduction(Execution *e, const EmuDescriptor *op) {
    const EmuDescriptor *red = emu_attr_descriptor(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, 0);
    const cudnnReduceTensorOp_t mode =
        (cudnnReduceTensorOp_t)emu_attr_int(red, CUDNN_ATTR_REDUCTION_OPERATOR, -1);
    if (mode != CUDNN_REDUCE_TENSOR_ADD && mode != CUDNN_REDUCE_TENSOR_MAX) return -1;
    Data *x = find(e, emu_tensor_of(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC)->uid);
    Data *y = find(e, emu_tensor_of(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC)->uid);
    const int64_t outputs = emu_tensor_elements(y->t);
    float *acc = malloc((size_t)outputs * sizeof *acc);
    if (!acc) return -1;
    for (int64_t i = 0; i < outputs; i++) acc[i] = mode == CUDNN_REDUCE_TENSOR_MAX ? -INFINITY : 0.0f;
    int64_t index[EMU_MAX_RANK];
    for (int64_t n = 0; n < emu_tensor_elements(x->t); n++) {  // in order: a fixed summation order
        index_of(x->t, n, index);
        int64_t slot = 0;
        for (int i = 0; i < y->t->rank; i++)
            slot = slot * y->t->dims[i] + (y->t->dims[i] == 1 ? 0 : index[i]);
        const float v = load(x, offset_of(x->t, index));
        acc[slot] = mode == CUDNN_REDUCE_TENSOR_MAX ? fmaxf(acc[slot], v) : acc[slot] + v;
    }
    for (int64_t n = 0; n < outputs; n++) {
        index_of(y->t, n, index);
        store(y, offset_of(y->t, index), acc[n]);
    }
    free(acc);
    return 0;
}

// y's element at multi-index i is x's memory at y's offset of i.
static int run_reshape(Execution *e, const EmuDescriptor *op) {
    Data *x = find(e, emu_tensor_of(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC)->uid);
    Data *y = find(e, emu_tensor_of(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC)->uid);
    if (extent(y->t) > extent(x->t)) return -1;
    int64_t index[EMU_MAX_RANK];
    for (int64_t n = 0; n < emu_tensor_elements(y->t); n++) {
        index_of(y->t, n, index);
        const int64_t offset = offset_of(y->t, index);
        store(y, offset, load(x, offset));
    }
    return 0;
}

// The data of the tensor that operation op's attribute `name` names.
static Data *operand(Execution *e, const EmuDescriptor *op, cudnnBackendAttributeName_t name) {
    return find(e, emu_tensor_of(op, name)->uid);
}

// A convolution operation's alpha and beta (1 and 0 unless set) and its
// descriptor's geometry.
typedef struct ConvParams {
    float alpha, beta;
    int64_t stride[2], pad[2], dilation[2];
} ConvParams;

static ConvParams conv_params(const EmuDescriptor *op, cudnnBackendAttributeName_t alpha,
                              cudnnBackendAttributeName_t beta, cudnnBackendAttributeName_t conv) {
    const EmuAttr *alpha_attr = emu_attr(op, alpha), *beta_attr = emu_attr(op, beta);
    ConvParams p = {
        .alpha = alpha_attr ? *(const float *)alpha_attr->values : 1.0f,
        .beta = beta_attr ? *(const float *)beta_attr->values : 0.0f,
    };
    emu_conv_geometry(emu_attr_descriptor(op, conv, 0), p.stride, p.pad, p.dilation);
    return p;
}

// out[at] = alpha sum + beta out[at], out not read when beta is 0.
static void store_scaled(Data *out, int64_t at, const ConvParams *p, float sum) {
    store(out, at, p->beta == 0.0f ? p->alpha * sum : p->alpha * sum + p->beta * load(out, at));
}

// Where tap t of position o reads along one axis (0: rows, 1: columns) of
// a tensor of `size` there, -1 outside it. Forward: the input position o
// stride - pad + t dilation; transposed (backward data, o an input
// position): the output position whose tap t reads o.
static int64_t tap_position(const ConvParams *p, int axis, int transposed, int64_t o, int64_t t,
                            int64_t size) {
    if (!transposed) {
        const int64_t i = o * p->stride[axis] - p->pad[axis] + t * p->dilation[axis];
        return i >= 0 && i < size ? i : -1;
    }
    const int64_t strided = o + p->pad[axis] - t * p->dilation[axis];
    return strided >= 0 && strided % p->stride[axis] == 0 && strided / p->stride[axis] < size
               ? strided / p->stride[axis]
               : -1;
}

// The attributes of the operations run_correlation runs: what they read
// (a, w) and write, alpha, beta and the convolution descriptor.
typedef struct CorrelationAttrs {
    cudnnBackendAttributeName_t a, w, out, alpha, beta, conv;
} CorrelationAttrs;
static const CorrelationAttrs kCorrelations[2] = {
    {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC},
    {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC},
};

// A forward convolution, y[n, k, oh, ow] = alpha sum over r, s, c of x[n,
// c, ih, iw] w[k, c, r, s] (+ beta y), or a backward data (transposed),
// dx[n, c, ih, iw] = alpha sum over r, s, k of dy[n, k, oh, ow] w[k, c, r,
// s] (+ beta dx): out[n, o, i, j] from a[n, ch, i', j'] where taps (r, s)
// of (i, j) read (tap_position), in the order r, s, ch.
static int run_correlation(Execution *e, const EmuDescriptor *op) {
    const int transposed =
        op->type == CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR;
    const CorrelationAttrs *attrs = &kCorrelations[transposed];
    const ConvParams p = conv_params(op, attrs->alpha, attrs->beta, attrs->conv);
    Data *a = operand(e, op, attrs->a), *w = operand(e, op, attrs->w);
    Data *out = operand(e, op, attrs->out);
    int64_t oi[4], ai[4], wi[4];
    for (int64_t n = 0; n < emu_tensor_elements(out->t); n++) {
        index_of(out->t, n, oi);
        float sum = 0.0f;
        for (int64_t r = 0; r < w->t->dims[2]; r++)
            for (int64_t s = 0; s < w->t->dims[3]; s++) {
                const int64_t i = tap_position(&p, 0, transposed, oi[2], r, a->t->dims[2]);
                const int64_t j = tap_position(&p, 1, transposed, oi[3], s, a->t->dims[3]);
                if (i < 0 || j < 0) continue;
                for (int64_t ch = 0; ch < a->t->dims[1]; ch++) {
                    ai[0] = oi[0], ai[1] = ch, ai[2] = i, ai[3] = j;
                    wi[0] = transposed ? ch : oi[1], wi[1] = transposed ? oi[1] : ch;
                    wi[2] = r, wi[3] = s;
                    sum += load(a, offset_of(a->t, ai)) * load(w, offset_of(w->t, wi));
                }
            }
        store_scaled(out, offset_of(out->t, oi), &p, sum);
    }
    return 0;
}

// dw[k, c, r, s] = alpha sum over n, oh, ow of dy[n, k, oh, ow] x[n, c, ih, iw]
// (+ beta dw), ih = oh stride - pad + r dilation, outside x: 0.
static int run_conv_wgrad(Execution *e, const EmuDescriptor *op) {
    Data *x = operand(e, op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X);
    Data *dy = operand(e, op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY);
    Data *dw = operand(e, op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW);
    const ConvParams p = conv_params(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                                     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
                                     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC);
    int64_t wi[4], xi[4], yi[4];
    for (int64_t n = 0; n < emu_tensor_elements(dw->t); n++) {
        index_of(dw->t, n, wi);
        float sum = 0.0f;
        for (int64_t b = 0; b < dy->t->dims[0]; b++)
            for (int64_t oh = 0; oh < dy->t->dims[2]; oh++)
                for (int64_t ow = 0; ow < dy->t->dims[3]; ow++) {
                    const int64_t ih = oh * p.stride[0] - p.pad[0] + wi[2] * p.dilation[0];
                    const int64_t iw = ow * p.stride[1] - p.pad[1] + wi[3] * p.dilation[1];
                    if (ih < 0 || iw < 0 || ih >= x->t->dims[2] || iw >= x->t->dims[3]) continue;
                    yi[0] = b, yi[1] = wi[0], yi[2] = oh, yi[3] = ow;
                    xi[0] = b, xi[1] = wi[1], xi[2] = ih, xi[3] = iw;
                    sum += load(dy, offset_of(dy->t, yi)) * load(x, offset_of(x->t, xi));
                }
        store_scaled(dw, offset_of(dw->t, wi), &p, sum);
    }
    return 0;
}

// sum, sqsum [1, K, 1, 1] over x [N, K, H, W] as stored, in element order.
static int run_genstats(Execution *e, const EmuDescriptor *op) {
    Data *x = find(e, emu_tensor_of(op, CUDNN_ATTR_OPERATION_GENSTATS_XDESC)->uid);
    Data *sum = find(e, emu_tensor_of(op, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC)->uid);
    Data *sqsum = find(e, emu_tensor_of(op, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC)->uid);
    const int64_t channels = x->t->dims[1];
    float *totals = calloc(2 * (size_t)channels, sizeof *totals);
    if (!totals) return -1;
    int64_t index[4];
    for (int64_t n = 0; n < emu_tensor_elements(x->t); n++) {
        index_of(x->t, n, index);
        const float v = load(x, offset_of(x->t, index));
        totals[index[1]] += v;
        totals[channels + index[1]] += v * v;
    }
    for (int64_t c = 0; c < channels; c++) {
        index[0] = 0, index[1] = c, index[2] = 0, index[3] = 0;
        store(sum, offset_of(sum->t, index), totals[c]);
        store(sqsum, offset_of(sqsum->t, index), totals[channels + c]);
    }
    free(totals);
    return 0;
}

// Channel c's value of a (1, C, 1, 1) tensor.
static double channel_value(const Data *d, int64_t c) {
    const int64_t index[4] = {0, c, 0, 0};
    return load(d, offset_of(d->t, index));
}

static void store_channel(Data *d, int64_t c, double v) {
    const int64_t index[4] = {0, c, 0, 0};
    store(d, offset_of(d->t, index), (float)v);
}

// BN_BWD_WEIGHTS over x and dy (N, C, H, W) as stored, per channel c: with
// xhat = (x - mean) inv_std, dbias = sum dy and dscale = sum dy xhat (in
// double, in element order); with M = N H W, eq_dy_scale = scale inv_std,
// eq_x_scale = -scale inv_std^2 dscale / M and eq_bias = scale inv_std
// (inv_std dscale mean - dbias) / M, so that BatchNorm's data gradient is
// eq_dy_scale dy + eq_x_scale x + eq_bias. Each result rounded once.
static int run_norm_wgrad(Execution *e, const EmuDescriptor *op) {
    Data *x = operand(e, op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_X_DESC);
    Data *dy = operand(e, op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DY_DESC);
    Data *mean = operand(e, op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MEAN_DESC);
    Data *inv_std = operand(e, op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC);
    Data *scale = operand(e, op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC);
    const int64_t channels = x->t->dims[1];
    const double count = (double)(emu_tensor_elements(x->t) / channels);
    double *sums = calloc(2 * (size_t)channels, sizeof *sums);  // dbias, then dscale
    if (!sums) return -1;
    int64_t index[4];
    for (int64_t n = 0; n < emu_tensor_elements(x->t); n++) {
        index_of(x->t, n, index);
        const int64_t c = index[1];
        const double g = load(dy, offset_of(dy->t, index));
        const double xhat =
            (load(x, offset_of(x->t, index)) - channel_value(mean, c)) * channel_value(inv_std, c);
        sums[c] += g;
        sums[channels + c] += g * xhat;
    }
    static const cudnnBackendAttributeName_t outputs[5] = {
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_BIAS,
    };
    for (int64_t c = 0; c < channels; c++) {
        const double dbias = sums[c], dscale = sums[channels + c];
        const double m = channel_value(mean, c), s = channel_value(inv_std, c);
        const double gamma_s = channel_value(scale, c) * s;
        const double values[5] = {dscale, dbias, gamma_s, -gamma_s * s * dscale / count,
                                  gamma_s * (s * dscale * m - dbias) / count};
        for (int i = 0; i < 5; i++) store_channel(operand(e, op, outputs[i]), c, values[i]);
    }
    free(sums);
    return 0;
}

// ---- the graph -----------------------------------------------------------------------------

typedef int (*Runner)(Execution *, const EmuDescriptor *);

static Runner runner_of(const EmuDescriptor *op) {
    switch (op->type) {
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: return run_pointwise;
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: return run_matmul;
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: return run_reduction;
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR: return run_reshape;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR: return run_correlation;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR: return run_conv_wgrad;
    case CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR: return run_genstats;
    case CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR: return run_norm_wgrad;
    default: return NULL;
    }
}

// Whether an operation of the graph writes t.
static int writes(EmuDescriptor *const *ops, int count, const EmuTensor *t) {
    for (int i = 0; i < count; i++) {
        const EmuTensor *in[EMU_MAX_OP_TENSORS], *out[EMU_MAX_OP_TENSORS];
        int in_count, out_count;
        emu_op_tensors(ops[i], in, &in_count, out, &out_count);
        for (int k = 0; k < out_count; k++)
            if (out[k]->uid == t->uid) return 1;
    }
    return 0;
}

// Binds tensor t: its data from the variant pack, or a buffer of our own;
// ready unless an operation writes it.
static int bind(Execution *e, const EmuTensor *t, int written, int64_t count,
                const int64_t *uids, void *const *pointers) {
    if (find(e, t->uid)) return 0;
    Data *d = &e->data[e->count++];
    d->t = t;
    if (t->is_virtual) {
        d->base = calloc((size_t)extent(t), emu_type_bytes(t->type));
        d->owned = 1;
        return d->base ? 0 : -1;
    }
    for (int64_t i = 0; i < count && !d->base; i++)
        if (uids[i] == t->uid) d->base = pointers[i];
    const size_t bytes = (size_t)extent(t) * emu_type_bytes(t->type);
    if (!d->base || (!t->by_value && !ltc_emu_device_range(d->base, bytes))) {
        fprintf(stderr, "cuda emulation: cudnnBackendExecute: tensor %lld (%zu bytes at %p) %s\n",
                (long long)t->uid, bytes, d->base,
                d->base ? "is not device memory (or runs past its allocation)"
                        : "has no pointer in the variant pack");
        return -1;
    }
    // cuDNN's kernels take the declared alignment as given (vector loads);
    // on a GPU an allocation starts 256-byte aligned, so the offset counts
    if (!t->by_value && t->alignment <= 256 &&
        ltc_emu_device_offset(d->base) % t->alignment != 0) {
        fprintf(stderr, "cuda emulation: cudnnBackendExecute: tensor %lld at %p (offset %lld in "
                        "its allocation) is not aligned to its declared %lld bytes\n",
                (long long)t->uid, d->base, ltc_emu_device_offset(d->base),
                (long long)t->alignment);
        return -1;
    }
    d->ready = !written;
    return 0;
}

cudnnStatus_t emu_graph_execute(const EmuDescriptor *graph, int64_t count, const int64_t *uids,
                                void *const *pointers) {
    EmuDescriptor *ops[EMU_MAX_OPS];
    const int op_count = emu_graph_ops(graph, ops);
    Execution *e = calloc(1, sizeof *e);
    if (!e) return CUDNN_STATUS_ALLOC_FAILED;
    int status = 0, done[EMU_MAX_OPS] = {0};
    for (int i = 0; i < op_count && !status; i++) {
        const EmuTensor *in[EMU_MAX_OP_TENSORS], *out[EMU_MAX_OP_TENSORS];
        int in_count, out_count;
        emu_op_tensors(ops[i], in, &in_count, out, &out_count);
        for (int k = 0; k < in_count + out_count && !status; k++)
            status = bind(e, k < in_count ? in[k] : out[k - in_count],
                          writes(ops, op_count, k < in_count ? in[k] : out[k - in_count]), count,
                          uids, pointers);
    }
    // run whatever has its inputs, until all ran (the graph is acyclic: finalize checked
    // that each virtual tensor has one writer)
    for (int progress = 1; progress && !status;) {
        progress = 0;
        for (int i = 0; i < op_count && !status; i++) {
            if (done[i]) continue;
            const EmuTensor *in[EMU_MAX_OP_TENSORS], *out[EMU_MAX_OP_TENSORS];
            int in_count, out_count, ready = 1;
            emu_op_tensors(ops[i], in, &in_count, out, &out_count);
            for (int k = 0; k < in_count; k++) ready &= find(e, in[k]->uid)->ready;
            if (!ready) continue;
            const Runner run = runner_of(ops[i]);
            status = run ? run(e, ops[i]) : -1;
            for (int k = 0; k < out_count; k++) find(e, out[k]->uid)->ready = 1;
            done[i] = progress = 1;
        }
    }
    for (int i = 0; i < op_count && !status; i++)
        if (!done[i]) status = -1;  // an input nothing writes
    for (int i = 0; i < e->count; i++)
        if (e->data[i].owned) free(e->data[i].base);
    free(e);
    return status ? CUDNN_STATUS_BAD_PARAM : CUDNN_STATUS_SUCCESS;
}
