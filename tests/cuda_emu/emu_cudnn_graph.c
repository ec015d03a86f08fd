// The cuDNN graph (backend) API of the CUDA emulation: descriptors with
// their attributes, checked as cuDNN checks them (an attribute a descriptor
// type does not have, or of the wrong type, is BAD_PARAM when set; a
// missing required one, a tensor with other dimensions than its operation
// needs, a virtual tensor nothing produces is BAD_PARAM at finalize), the
// engine heuristics' results (which graphs get an engine:
// emu_cudnn_heuristics.c, with the patterns it knows and the
// LTC_EMU_CUDNN_GRAPH switch), plans and variant packs; execution computes
// the graph on the CPU (emu_cudnn_exec.c), or on a capturing stream is
// recorded (emu_blas.h) with the variant pack's bindings and by-value
// scalars as they were at the call.
#include "emu_cudnn_graph.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_blas.h"
#include "emu_log.h"

#define EMU_MAGIC 0x636e6e64u

static size_t attribute_type_bytes(cudnnBackendAttributeType_t type) {
    switch (type) {
    case CUDNN_TYPE_HANDLE:
    case CUDNN_TYPE_VOID_PTR:
    case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(void *);
    case CUDNN_TYPE_BOOLEAN: return sizeof(bool);
    case CUDNN_TYPE_INT64:
    case CUDNN_TYPE_DOUBLE: return 8;
    case CUDNN_TYPE_CHAR: return 1;
    default: return 4;  // float, int32 and the enums
    }
}

size_t emu_type_bytes(cudnnDataType_t type) {
    switch (type) {
    case CUDNN_DATA_FLOAT: return 4;
    case CUDNN_DATA_HALF:
    case CUDNN_DATA_BFLOAT16: return 2;
    default: return 0;
    }
}

// ---- what each descriptor type takes ------------------------------------------------------

typedef struct AttrSpec {
    cudnnBackendDescriptorType_t descriptor;
    cudnnBackendAttributeName_t name;
    cudnnBackendAttributeType_t type;
    int required;
} AttrSpec;

#define BD CUDNN_TYPE_BACKEND_DESCRIPTOR
#define WGRAD_OP CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR
#define DGRAD_OP CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR
#define NORM_WGRAD_OP CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR
static const AttrSpec kSpecs[] = {
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 1},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 1},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 0},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 0},
    {CUDNN_BACKEND_POINTWISE_DESCRIPTOR, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1},
    {CUDNN_BACKEND_POINTWISE_DESCRIPTOR, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, BD, 1},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, BD, 0},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, BD, 0},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, BD, 0},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, BD, 0},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, BD, 0},
    // y = mode(alpha1 x, alpha2 b)
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1,
     CUDNN_TYPE_FLOAT, 0},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2,
     CUDNN_TYPE_FLOAT, 0},
    {CUDNN_BACKEND_MATMUL_DESCRIPTOR, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1},
    {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_ATTR_OPERATION_MATMUL_ADESC, BD, 1},
    {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_ATTR_OPERATION_MATMUL_BDESC, BD, 1},
    {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_ATTR_OPERATION_MATMUL_CDESC, BD, 1},
    {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_ATTR_OPERATION_MATMUL_DESC, BD, 1},
    {CUDNN_BACKEND_REDUCTION_DESCRIPTOR, CUDNN_ATTR_REDUCTION_OPERATOR,
     CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1},
    {CUDNN_BACKEND_REDUCTION_DESCRIPTOR, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1},
    {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, BD, 1},
    {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, BD, 1},
    {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, CUDNN_ATTR_OPERATION_REDUCTION_DESC, BD, 1},
    {CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, BD, 1},
    {CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, BD, 1},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_CONV_MODE,
     CUDNN_TYPE_CONVOLUTION_MODE, 1},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 1},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 1},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 1},
    {CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 1},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, BD, 1},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, BD, 1},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, BD, 1},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, BD, 1},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 0},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 0},
    // dw = alpha conv_wgrad(x, dy) + beta dw (ConvBNwgrad)
    {WGRAD_OP, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, BD, 1},
    {WGRAD_OP, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, BD, 1},
    {WGRAD_OP, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, BD, 1},
    {WGRAD_OP, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, BD, 1},
    {WGRAD_OP, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 0},
    {WGRAD_OP, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 0},
    // dx = alpha conv_dgrad(dy, w) + beta dx (DgradDreluBNBwdWeight)
    {DGRAD_OP, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, BD, 1},
    {DGRAD_OP, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, BD, 1},
    {DGRAD_OP, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, BD, 1},
    {DGRAD_OP, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, BD, 1},
    {DGRAD_OP, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 0},
    {DGRAD_OP, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 0},
    // BatchNorm's weight gradient and its data gradient's coefficients
    {NORM_WGRAD_OP, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1},
    {NORM_WGRAD_OP, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_X_DESC, BD, 1},
    {NORM_WGRAD_OP, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DY_DESC, BD, 1},
    {NORM_WGRAD_OP, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MEAN_DESC, BD, 1},
    {NORM_WGRAD_OP, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC, BD, 1},
    {NORM_WGRAD_OP, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC, BD, 1},
    {NORM_WGRAD_OP, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC, BD, 1},
    {NORM_WGRAD_OP, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC, BD, 1},
    {NORM_WGRAD_OP, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC, BD, 1},
    {NORM_WGRAD_OP, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC, BD, 1},
    {NORM_WGRAD_OP, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_BIAS, BD, 1},
    {CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, CUDNN_ATTR_OPERATION_GENSTATS_MODE,
     CUDNN_TYPE_GENSTATS_MODE, 1},
    {CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC,
     CUDNN_TYPE_DATA_TYPE, 1},
    {CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, BD, 1},
    {CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, BD, 1},
    {CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, BD, 1},
    {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1},
    {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_ATTR_OPERATIONGRAPH_OPS, BD, 1},
    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, BD, 1},
    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1},
    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1},
    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, BD, 1},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 1},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
     CUDNN_TYPE_VOID_PTR, 1},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1},
};
#undef BD

static const AttrSpec *spec_of(cudnnBackendDescriptorType_t descriptor,
                               cudnnBackendAttributeName_t name) {
    for (size_t i = 0; i < sizeof kSpecs / sizeof kSpecs[0]; i++)
        if (kSpecs[i].descriptor == descriptor && kSpecs[i].name == name) return &kSpecs[i];
    return NULL;
}

static int known_descriptor_type(cudnnBackendDescriptorType_t type) {
    if (type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR || type == CUDNN_BACKEND_ENGINE_DESCRIPTOR)
        return 1;
    for (size_t i = 0; i < sizeof kSpecs / sizeof kSpecs[0]; i++)
        if (kSpecs[i].descriptor == type) return 1;
    return 0;
}

// ---- descriptors and attributes -----------------------------------------------------------

static EmuDescriptor *of(cudnnBackendDescriptor_t d) {
    EmuDescriptor *e = (EmuDescriptor *)d;
    return e && e->magic == EMU_MAGIC ? e : NULL;
}

const EmuAttr *emu_attr(const EmuDescriptor *d, cudnnBackendAttributeName_t name) {
    for (int i = 0; i < d->attr_count; i++)
        if (d->attrs[i].name == name) return &d->attrs[i];
    return NULL;
}

EmuDescriptor *emu_attr_descriptor(const EmuDescriptor *d, cudnnBackendAttributeName_t name,
                                   int64_t index) {
    const EmuAttr *a = emu_attr(d, name);
    if (!a || a->type != CUDNN_TYPE_BACKEND_DESCRIPTOR || index >= a->count) return NULL;
    return of(((cudnnBackendDescriptor_t *)a->values)[index]);
}

int64_t emu_attr_int(const EmuDescriptor *d, cudnnBackendAttributeName_t name, int64_t fallback) {
    const EmuAttr *a = emu_attr(d, name);
    if (!a || a->count < 1) return fallback;
    switch (a->type) {
    case CUDNN_TYPE_INT64: return ((const int64_t *)a->values)[0];
    case CUDNN_TYPE_BOOLEAN: return ((const bool *)a->values)[0];
    default: return ((const int32_t *)a->values)[0];  // the enums
    }
}

double emu_attr_real(const EmuDescriptor *d, cudnnBackendAttributeName_t name, double fallback) {
    const EmuAttr *a = emu_attr(d, name);
    if (!a || a->count < 1) return fallback;
    return a->type == CUDNN_TYPE_DOUBLE ? ((const double *)a->values)[0]
                                        : ((const float *)a->values)[0];
}

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type,
                                           cudnnBackendDescriptor_t *descriptor) {
    if (!known_descriptor_type(type)) return CUDNN_STATUS_NOT_SUPPORTED;
    EmuDescriptor *d = calloc(1, sizeof *d);
    if (!d) return CUDNN_STATUS_ALLOC_FAILED;
    d->magic = EMU_MAGIC;
    d->type = type;
    *descriptor = d;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
    EmuDescriptor *d = of(descriptor);
    if (!d) return CUDNN_STATUS_BAD_PARAM;
    ltc_emu_streams_flush();  // a queued execution may still read its graph
    for (int i = 0; i < d->attr_count; i++) free(d->attrs[i].values);
    d->magic = 0;
    free(d);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count,
                                       const void *values) {
    EmuDescriptor *d = of(descriptor);
    if (!d || d->finalized || count < 1 || !values) return CUDNN_STATUS_BAD_PARAM;
    const AttrSpec *spec = spec_of(d->type, name);
    if (!spec || spec->type != type) {
        fprintf(stderr, "cuda emulation: cuDNN: attribute %d (type %d) is not one descriptor "
                        "type %d takes\n", (int)name, (int)type, (int)d->type);
        return CUDNN_STATUS_BAD_PARAM;
    }
    if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR)
        for (int64_t i = 0; i < count; i++) {
            EmuDescriptor *value = of(((const cudnnBackendDescriptor_t *)values)[i]);
            if (!value || !value->finalized) return CUDNN_STATUS_BAD_PARAM;
        }
    EmuAttr *a = (EmuAttr *)emu_attr(d, name);
    if (!a) {
        if (d->attr_count == EMU_MAX_ATTRS) return CUDNN_STATUS_NOT_SUPPORTED;
        a = &d->attrs[d->attr_count++];
    } else {
        free(a->values);
    }
    const size_t bytes = (size_t)count * attribute_type_bytes(type);
    a->name = name, a->type = type, a->count = count;
    a->values = malloc(bytes);
    if (!a->values) return CUDNN_STATUS_ALLOC_FAILED;
    memcpy(a->values, values, bytes);
    return CUDNN_STATUS_SUCCESS;
}

// ---- finalize: the checks ------------------------------------------------------------------

static cudnnStatus_t finalize_tensor(EmuDescriptor *d) {
    EmuTensor *t = &d->tensor;
    const EmuAttr *dims = emu_attr(d, CUDNN_ATTR_TENSOR_DIMENSIONS);
    const EmuAttr *strides = emu_attr(d, CUDNN_ATTR_TENSOR_STRIDES);
    if (dims->count != strides->count || dims->count > EMU_MAX_RANK)
        return CUDNN_STATUS_BAD_PARAM;
    t->uid = emu_attr_int(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, 0);
    t->type = (cudnnDataType_t)emu_attr_int(d, CUDNN_ATTR_TENSOR_DATA_TYPE, -1);
    t->rank = (int)dims->count;
    t->is_virtual = (int)emu_attr_int(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, 0);
    t->by_value = (int)emu_attr_int(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, 0);
    t->alignment = emu_attr_int(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 0);
    if (t->alignment < 1 || (t->alignment & (t->alignment - 1))) return CUDNN_STATUS_BAD_PARAM;
    if (!emu_type_bytes(t->type)) return CUDNN_STATUS_NOT_SUPPORTED;
    for (int i = 0; i < t->rank; i++) {
        t->dims[i] = ((const int64_t *)dims->values)[i];
        t->strides[i] = ((const int64_t *)strides->values)[i];
        if (t->dims[i] < 1 || t->strides[i] < 1) return CUDNN_STATUS_BAD_PARAM;
    }
    return CUDNN_STATUS_SUCCESS;
}

const EmuTensor *emu_tensor_of(const EmuDescriptor *op, cudnnBackendAttributeName_t name) {
    const EmuDescriptor *t = emu_attr_descriptor(op, name, 0);
    return t && t->type == CUDNN_BACKEND_TENSOR_DESCRIPTOR ? &t->tensor : NULL;
}

// from broadcasts to `to`: the same rank, each dimension equal or 1.
static int broadcasts(const EmuTensor *from, const EmuTensor *to) {
    if (from->rank != to->rank) return 0;
    for (int i = 0; i < to->rank; i++)
        if (from->dims[i] != to->dims[i] && from->dims[i] != 1) return 0;
    return 1;
}

static int unary_mode(cudnnPointwiseMode_t mode) {
    return mode == CUDNN_POINTWISE_EXP || mode == CUDNN_POINTWISE_LOG ||
           mode == CUDNN_POINTWISE_IDENTITY || mode == CUDNN_POINTWISE_RELU_FWD ||
           mode == CUDNN_POINTWISE_SQRT || mode == CUDNN_POINTWISE_RECIPROCAL;
}

static cudnnStatus_t finalize_pointwise_op(const EmuDescriptor *d) {
    const EmuDescriptor *pw = emu_attr_descriptor(d, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, 0);
    if (!pw || pw->type != CUDNN_BACKEND_POINTWISE_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
    const cudnnPointwiseMode_t mode =
        (cudnnPointwiseMode_t)emu_attr_int(pw, CUDNN_ATTR_POINTWISE_MODE, -1);
    const EmuTensor *x = emu_tensor_of(d, CUDNN_ATTR_OPERATION_POINTWISE_XDESC);
    const EmuTensor *b = emu_tensor_of(d, CUDNN_ATTR_OPERATION_POINTWISE_BDESC);
    const EmuTensor *y = emu_tensor_of(d, CUDNN_ATTR_OPERATION_POINTWISE_YDESC);
    const EmuTensor *dy = emu_tensor_of(d, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC);
    const EmuTensor *dx = emu_tensor_of(d, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC);
    if (mode == CUDNN_POINTWISE_RELU_BWD)  // dx = dy where x > 0
        return x && dy && dx && broadcasts(x, dx) && broadcasts(dy, dx) ? CUDNN_STATUS_SUCCESS
                                                                         : CUDNN_STATUS_BAD_PARAM;
    if (!x || !y || !broadcasts(x, y)) return CUDNN_STATUS_BAD_PARAM;
    if (unary_mode(mode)) return b ? CUDNN_STATUS_BAD_PARAM : CUDNN_STATUS_SUCCESS;
    return b && broadcasts(b, y) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

// C [.., M, N] = A [.., M, K] B [.., K, N], the batch dimensions broadcast.
static cudnnStatus_t finalize_matmul_op(const EmuDescriptor *d) {
    const EmuTensor *a = emu_tensor_of(d, CUDNN_ATTR_OPERATION_MATMUL_ADESC);
    const EmuTensor *b = emu_tensor_of(d, CUDNN_ATTR_OPERATION_MATMUL_BDESC);
    const EmuTensor *c = emu_tensor_of(d, CUDNN_ATTR_OPERATION_MATMUL_CDESC);
    if (!a || !b || !c || a->rank != c->rank || b->rank != c->rank || c->rank < 3)
        return CUDNN_STATUS_BAD_PARAM;
    const int r = c->rank;
    if (a->dims[r - 1] != b->dims[r - 2] || a->dims[r - 2] != c->dims[r - 2] ||
        b->dims[r - 1] != c->dims[r - 1])
        return CUDNN_STATUS_BAD_PARAM;
    for (int i = 0; i < r - 2; i++)
        if ((a->dims[i] != c->dims[i] && a->dims[i] != 1) ||
            (b->dims[i] != c->dims[i] && b->dims[i] != 1))
            return CUDNN_STATUS_BAD_PARAM;
    return CUDNN_STATUS_SUCCESS;
}

static cudnnStatus_t finalize_reduction_op(const EmuDescriptor *d) {
    const EmuTensor *x = emu_tensor_of(d, CUDNN_ATTR_OPERATION_REDUCTION_XDESC);
    const EmuTensor *y = emu_tensor_of(d, CUDNN_ATTR_OPERATION_REDUCTION_YDESC);
    return x && y && broadcasts(y, x) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

int64_t emu_tensor_elements(const EmuTensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= t->dims[i];
    return n;
}

static cudnnStatus_t finalize_reshape_op(const EmuDescriptor *d) {
    const EmuTensor *x = emu_tensor_of(d, CUDNN_ATTR_OPERATION_RESHAPE_XDESC);
    const EmuTensor *y = emu_tensor_of(d, CUDNN_ATTR_OPERATION_RESHAPE_YDESC);
    return x && y && y->is_virtual && emu_tensor_elements(x) == emu_tensor_elements(y) ? CUDNN_STATUS_SUCCESS
                                                                 : CUDNN_STATUS_BAD_PARAM;
}

int emu_conv_geometry(const EmuDescriptor *conv, int64_t *stride, int64_t *pad, int64_t *dilation) {
    const EmuAttr *s = emu_attr(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES);
    const EmuAttr *pre = emu_attr(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS);
    const EmuAttr *post = emu_attr(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS);
    const EmuAttr *d = emu_attr(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS);
    if (emu_attr_int(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, 0) != 2 || s->count != 2 ||
        pre->count != 2 || post->count != 2 || d->count != 2 ||
        emu_attr_int(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, -1) != CUDNN_CROSS_CORRELATION)
        return -1;
    for (int i = 0; i < 2; i++) {
        stride[i] = ((const int64_t *)s->values)[i];
        pad[i] = ((const int64_t *)pre->values)[i];
        dilation[i] = ((const int64_t *)d->values)[i];
        // the backend pads symmetrically; the emulation computes only that
        if (pad[i] != ((const int64_t *)post->values)[i] || stride[i] < 1 || dilation[i] < 1 ||
            pad[i] < 0)
            return -1;
    }
    return 0;
}

// The shapes of a convolution agree: y [N, K, OH, OW] = conv(x [N, C, H,
// W], w [K, C, R, S]) with the geometry of conv (a convolution descriptor
// the emulation computes). Forward: x, w, y; backward filter: x, dw, dy;
// backward data: dx, w, dy.
static int conv_shapes_agree(const EmuTensor *x, const EmuTensor *w, const EmuTensor *y,
                             const EmuDescriptor *conv) {
    int64_t stride[2], pad[2], dilation[2];
    if (!x || !w || !y || !conv || conv->type != CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR ||
        emu_conv_geometry(conv, stride, pad, dilation) || x->rank != 4 || w->rank != 4 ||
        y->rank != 4 || x->dims[1] != w->dims[1] || y->dims[0] != x->dims[0] ||
        y->dims[1] != w->dims[0])
        return 0;
    for (int i = 0; i < 2; i++) {
        const int64_t out =
            (x->dims[2 + i] + 2 * pad[i] - dilation[i] * (w->dims[2 + i] - 1) - 1) / stride[i] + 1;
        if (y->dims[2 + i] != out) return 0;
    }
    return 1;
}

// A convolution operation whose tensors (attributes x, w, y as
// conv_shapes_agree takes them) agree with its convolution descriptor.
static cudnnStatus_t finalize_conv_op(const EmuDescriptor *d, cudnnBackendAttributeName_t x,
                                      cudnnBackendAttributeName_t w, cudnnBackendAttributeName_t y,
                                      cudnnBackendAttributeName_t conv) {
    return conv_shapes_agree(emu_tensor_of(d, x), emu_tensor_of(d, w), emu_tensor_of(d, y),
                             emu_attr_descriptor(d, conv, 0))
               ? CUDNN_STATUS_SUCCESS
               : CUDNN_STATUS_BAD_PARAM;
}

// t is (1, C, 1, 1) for x (N, C, H, W).
static int per_channel(const EmuTensor *t, const EmuTensor *x) {
    return t && t->rank == 4 && x->rank == 4 && t->dims[0] == 1 && t->dims[1] == x->dims[1] &&
           t->dims[2] == 1 && t->dims[3] == 1;
}

// sum, sqsum [1, K, 1, 1] of x [N, K, H, W].
static cudnnStatus_t finalize_genstats_op(const EmuDescriptor *d) {
    const EmuTensor *x = emu_tensor_of(d, CUDNN_ATTR_OPERATION_GENSTATS_XDESC);
    const EmuTensor *sum = emu_tensor_of(d, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC);
    const EmuTensor *sqsum = emu_tensor_of(d, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC);
    return emu_attr_int(d, CUDNN_ATTR_OPERATION_GENSTATS_MODE, -1) == CUDNN_GENSTATS_SUM_SQSUM &&
                   x && per_channel(sum, x) && per_channel(sqsum, x) &&
                   sum->type == CUDNN_DATA_FLOAT && sqsum->type == CUDNN_DATA_FLOAT
               ? CUDNN_STATUS_SUCCESS
               : CUDNN_STATUS_BAD_PARAM;
}

// BN_BWD_WEIGHTS: x and dy (N, C, H, W) alike; mean, inv_std, scale and
// the five outputs (1, C, 1, 1).
static cudnnStatus_t finalize_norm_wgrad_op(const EmuDescriptor *d) {
    static const cudnnBackendAttributeName_t per_channel_names[] = {
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MEAN_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC,
        CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_BIAS,
    };
    const EmuTensor *x = emu_tensor_of(d, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_X_DESC);
    const EmuTensor *dy = emu_tensor_of(d, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DY_DESC);
    if (!x || !dy || x->rank != 4 || dy->rank != 4) return CUDNN_STATUS_BAD_PARAM;
    for (int i = 0; i < 4; i++)
        if (dy->dims[i] != x->dims[i]) return CUDNN_STATUS_BAD_PARAM;
    for (size_t i = 0; i < sizeof per_channel_names / sizeof per_channel_names[0]; i++)
        if (!per_channel(emu_tensor_of(d, per_channel_names[i]), x)) return CUDNN_STATUS_BAD_PARAM;
    return CUDNN_STATUS_SUCCESS;
}

// The tensors each operation type reads and writes, by attribute.
static const struct {
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t name;
    int output;
} kRoles[] = {
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, 0},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, 0},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, 0},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, 1},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, 1},
    {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_ATTR_OPERATION_MATMUL_ADESC, 0},
    {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_ATTR_OPERATION_MATMUL_BDESC, 0},
    {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, CUDNN_ATTR_OPERATION_MATMUL_CDESC, 1},
    {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, 0},
    {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, 1},
    {CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, 0},
    {CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, 1},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, 0},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, 0},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, 1},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, 0},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, 0},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, 1},
    {CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, 0},
    {CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, 1},
    {CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, 1},
    {DGRAD_OP, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, 0},
    {DGRAD_OP, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, 0},
    {DGRAD_OP, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, 1},
    {NORM_WGRAD_OP, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_X_DESC, 0},
    {NORM_WGRAD_OP, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DY_DESC, 0},
    {NORM_WGRAD_OP, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MEAN_DESC, 0},
    {NORM_WGRAD_OP, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC, 0},
    {NORM_WGRAD_OP, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC, 0},
    {NORM_WGRAD_OP, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC, 1},
    {NORM_WGRAD_OP, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC, 1},
    {NORM_WGRAD_OP, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC, 1},
    {NORM_WGRAD_OP, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC, 1},
    {NORM_WGRAD_OP, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_BIAS, 1},
};
#undef WGRAD_OP
#undef DGRAD_OP
#undef NORM_WGRAD_OP

int emu_op_tensors(const EmuDescriptor *op, const EmuTensor **in, int *in_count,
                   const EmuTensor **out, int *out_count) {
    *in_count = *out_count = 0;
    for (size_t i = 0; i < sizeof kRoles / sizeof kRoles[0]; i++) {
        if (kRoles[i].type != op->type) continue;
        const EmuTensor *t = emu_tensor_of(op, kRoles[i].name);
        if (!t) continue;
        if (kRoles[i].output) out[(*out_count)++] = t;
        else in[(*in_count)++] = t;
    }
    return *out_count > 0;
}

int emu_graph_ops(const EmuDescriptor *graph, EmuDescriptor **ops) {
    const EmuAttr *a = emu_attr(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS);
    const int count = a && a->count <= EMU_MAX_OPS ? (int)a->count : 0;
    for (int i = 0; i < count; i++) ops[i] = emu_attr_descriptor(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, i);
    return count;
}

static int same_tensor(const EmuTensor *a, const EmuTensor *b) {
    if (a->type != b->type || a->rank != b->rank || a->is_virtual != b->is_virtual) return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i] || a->strides[i] != b->strides[i]) return 0;
    return 1;
}

// Every operation is one; one description per unique id; every virtual
// tensor written by exactly one operation and read only after; no tensor
// with data written twice.
static cudnnStatus_t finalize_graph(const EmuDescriptor *graph) {
    EmuDescriptor *ops[EMU_MAX_OPS];
    const int count = emu_graph_ops(graph, ops);
    if (count < 1) return CUDNN_STATUS_BAD_PARAM;
    const EmuTensor *seen[EMU_MAX_GRAPH_TENSORS];
    int seen_count = 0, writes[EMU_MAX_GRAPH_TENSORS] = {0};
    for (int i = 0; i < count; i++) {
        if (!ops[i]) return CUDNN_STATUS_BAD_PARAM;
        const EmuTensor *in[EMU_MAX_OP_TENSORS], *out[EMU_MAX_OP_TENSORS];
        int in_count, out_count;
        if (!emu_op_tensors(ops[i], in, &in_count, out, &out_count))
            return CUDNN_STATUS_BAD_PARAM;  // not an operation
        for (int k = 0; k < in_count + out_count; k++) {
            const EmuTensor *t = k < in_count ? in[k] : out[k - in_count];
            int j = 0;
            while (j < seen_count && seen[j]->uid != t->uid) j++;
            if (j == seen_count) seen[seen_count++] = t;
            else if (!same_tensor(seen[j], t)) return CUDNN_STATUS_BAD_PARAM;
            if (k >= in_count && ++writes[j] > 1) return CUDNN_STATUS_BAD_PARAM;
        }
    }
    for (int j = 0; j < seen_count; j++)
        if (seen[j]->is_virtual && writes[j] != 1) return CUDNN_STATUS_BAD_PARAM;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor) {
    EmuDescriptor *d = of(descriptor);
    if (!d || d->finalized) return CUDNN_STATUS_BAD_PARAM;
    for (size_t i = 0; i < sizeof kSpecs / sizeof kSpecs[0]; i++)
        if (kSpecs[i].descriptor == d->type && kSpecs[i].required && !emu_attr(d, kSpecs[i].name))
            return CUDNN_STATUS_BAD_PARAM;
    cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
    switch (d->type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: status = finalize_tensor(d); break;
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: status = finalize_pointwise_op(d); break;
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: status = finalize_matmul_op(d); break;
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: status = finalize_reduction_op(d); break;
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR: status = finalize_reshape_op(d); break;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR:
        status = finalize_conv_op(d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC);
        break;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR:
        status = finalize_conv_op(d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC);
        break;
    case CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR:
        status = finalize_conv_op(d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
                                  CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC);
        break;
    case CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR: status = finalize_genstats_op(d); break;
    case CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR:
        status = finalize_norm_wgrad_op(d);
        break;
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: status = finalize_graph(d); break;
    case CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: {
        const EmuDescriptor *g = emu_attr_descriptor(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, 0);
        if (!g || g->type != CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR) status = CUDNN_STATUS_BAD_PARAM;
        break;
    }
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR: {
        const EmuDescriptor *config =
            emu_attr_descriptor(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, 0);
        if (!config || config->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR || !config->graph)
            status = CUDNN_STATUS_BAD_PARAM;
        else
            d->graph = config->graph, d->workspace_bytes = config->workspace_bytes;
        break;
    }
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR:
        if (emu_attr(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS)->count !=
            emu_attr(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS)->count)
            status = CUDNN_STATUS_BAD_PARAM;
        break;
    default: break;
    }
    if (status == CUDNN_STATUS_SUCCESS) d->finalized = 1;
    return status;
}

// An emulated engine's workspace: a little, so that the backend's
// reservation and the pointer it passes are exercised.
enum { EMU_ENGINE_WORKSPACE = 256 };

cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
                                       cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested,
                                       int64_t *count, void *values) {
    EmuDescriptor *d = of(descriptor);
    if (!d || !count) return CUDNN_STATUS_BAD_PARAM;
    if (d->type == CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR && name == CUDNN_ATTR_ENGINEHEUR_RESULTS) {
        if (!d->finalized || type != CUDNN_TYPE_BACKEND_DESCRIPTOR) return CUDNN_STATUS_BAD_PARAM;
        EmuDescriptor *graph = emu_attr_descriptor(d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, 0);
        *count = emu_engines_for(graph);
        if (requested > 0 && *count > 0) {
            EmuDescriptor *config = of(((cudnnBackendDescriptor_t *)values)[0]);
            if (!config || config->type != CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)
                return CUDNN_STATUS_BAD_PARAM;
            config->graph = graph;
            config->workspace_bytes = EMU_ENGINE_WORKSPACE;
            config->finalized = 1;
        }
        return CUDNN_STATUS_SUCCESS;
    }
    if (d->type == CUDNN_BACKEND_ENGINECFG_DESCRIPTOR && name == CUDNN_ATTR_ENGINECFG_ENGINE) {
        EmuDescriptor *engine = requested > 0 ? of(((cudnnBackendDescriptor_t *)values)[0]) : NULL;
        if (!d->graph || !engine || engine->type != CUDNN_BACKEND_ENGINE_DESCRIPTOR)
            return CUDNN_STATUS_BAD_PARAM;
        engine->graph = d->graph;
        engine->finalized = 1;
        *count = 1;
        return CUDNN_STATUS_SUCCESS;
    }
    if (d->type == CUDNN_BACKEND_ENGINE_DESCRIPTOR && name == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE) {
        *count = 0;  // deterministic, no other notes
        return d->graph ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
    }
    if (d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR &&
        name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE) {
        if (!d->finalized || type != CUDNN_TYPE_INT64 || requested < 1) return CUDNN_STATUS_BAD_PARAM;
        *(int64_t *)values = d->workspace_bytes;
        *count = 1;
        return CUDNN_STATUS_SUCCESS;
    }
    return CUDNN_STATUS_NOT_SUPPORTED;
}

// An execution as cudnnBackendExecute was handed it: the operation graph
// (its plan must outlive a graph that recorded it, as the backend's plans
// do), the variant pack's uids and pointers, and the by-value scalars'
// values, copied at the call (a capture keeps them so, as cuDNN's kernels
// take them as parameters).
enum { EXECUTE_MAX_TENSORS = 24, BY_VALUE_MAX_BYTES = 16 };
typedef struct ExecuteCall {
    const EmuDescriptor *graph;
    int64_t count;
    int64_t uids[EXECUTE_MAX_TENSORS];
    void *pointers[EXECUTE_MAX_TENSORS];
    int by_value[EXECUTE_MAX_TENSORS];  // 1: the data is values[i]
    unsigned char values[EXECUTE_MAX_TENSORS][BY_VALUE_MAX_BYTES];
} ExecuteCall;

static int run_execute(const void *arguments) {
    const ExecuteCall *call = arguments;
    void *pointers[EXECUTE_MAX_TENSORS];
    for (int64_t i = 0; i < call->count; i++)
        pointers[i] = call->by_value[i] ? (void *)call->values[i] : call->pointers[i];
    return emu_graph_execute(call->graph, call->count, call->uids, pointers);
}

// The by-value tensor of the graph with this uid, or NULL.
static const EmuTensor *by_value_tensor(const EmuDescriptor *graph, int64_t uid) {
    EmuDescriptor *ops[EMU_MAX_OPS];
    const int count = emu_graph_ops(graph, ops);
    for (int i = 0; i < count; i++) {
        const EmuTensor *in[EMU_MAX_OP_TENSORS], *out[EMU_MAX_OP_TENSORS];
        int in_count, out_count;
        emu_op_tensors(ops[i], in, &in_count, out, &out_count);
        for (int k = 0; k < in_count; k++)
            if (in[k]->uid == uid && in[k]->by_value) return in[k];
    }
    return NULL;
}

// Fills `call` from the pack; -1 (with a message) for a pack too large to record.
static int execute_call(const EmuDescriptor *graph, const EmuAttr *uids, const EmuAttr *pointers,
                        ExecuteCall *call) {
    if (uids->count > EXECUTE_MAX_TENSORS || pointers->count < uids->count) {
        fprintf(stderr, "cuda emulation: cudnnBackendExecute: a variant pack of %lld tensors "
                        "(the emulation records %d)\n", (long long)uids->count,
                EXECUTE_MAX_TENSORS);
        return -1;
    }
    memset(call, 0, sizeof *call);
    call->graph = graph;
    call->count = uids->count;
    for (int64_t i = 0; i < uids->count; i++) {
        call->uids[i] = ((const int64_t *)uids->values)[i];
        call->pointers[i] = ((void *const *)pointers->values)[i];
        const EmuTensor *t = by_value_tensor(graph, call->uids[i]);
        if (!t || !call->pointers[i]) continue;
        const size_t bytes = (size_t)emu_tensor_elements(t) * emu_type_bytes(t->type);
        if (bytes > BY_VALUE_MAX_BYTES) {
            fprintf(stderr, "cuda emulation: cudnnBackendExecute: a by-value tensor of %zu "
                            "bytes (the emulation records %d)\n", bytes, BY_VALUE_MAX_BYTES);
            return -1;
        }
        memcpy(call->values[i], call->pointers[i], bytes);
        call->by_value[i] = 1;
    }
    return 0;
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan_descriptor,
                                  cudnnBackendDescriptor_t pack_descriptor) {
    ltc_emu_log("cudnn", "cudnnBackendExecute", 0);
    const EmuDescriptor *plan = of(plan_descriptor), *pack = of(pack_descriptor);
    if (!handle || !plan || !pack || !plan->finalized || !pack->finalized ||
        plan->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR ||
        pack->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
        return CUDNN_STATUS_BAD_PARAM;
    void *workspace = *(void **)emu_attr(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE)->values;
    if (plan->workspace_bytes > 0 && !ltc_emu_device_range(workspace, (size_t)plan->workspace_bytes)) {
        fprintf(stderr, "cuda emulation: cudnnBackendExecute: the workspace (%lld bytes at %p) is "
                        "not device memory\n", (long long)plan->workspace_bytes, workspace);
        return CUDNN_STATUS_BAD_PARAM;
    }
    const EmuAttr *uids = emu_attr(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
    const EmuAttr *pointers = emu_attr(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
    ExecuteCall call;
    if (execute_call(plan->graph, uids, pointers, &call)) return CUDNN_STATUS_NOT_SUPPORTED;
    if (emu_cudnn_capture_call("cudnnBackendExecute", handle, run_execute, &call, sizeof call))
        return CUDNN_STATUS_SUCCESS;
    return (cudnnStatus_t)run_execute(&call);
}
