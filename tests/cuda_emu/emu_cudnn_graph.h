// Private to the CUDA emulation's cuDNN graph API (emu_cudnn_graph.c: the
// descriptors, their attributes and checks, plans; emu_cudnn_heuristics.c:
// which graphs get an engine; emu_cudnn_exec.c: an operation graph
// computed on the CPU).
#ifndef LTC_TESTS_CUDA_EMU_CUDNN_GRAPH_H
#define LTC_TESTS_CUDA_EMU_CUDNN_GRAPH_H

#include <cudnn.h>
#include <stdint.h>

#define EMU_MAX_RANK 8
#define EMU_MAX_ATTRS 24
#define EMU_MAX_OPS 96
#define EMU_MAX_OP_TENSORS 5  // tensors one operation reads, or writes, at most
#define EMU_MAX_GRAPH_TENSORS (2 * EMU_MAX_OP_TENSORS * EMU_MAX_OPS)

typedef struct EmuAttr {
    cudnnBackendAttributeName_t name;
    cudnnBackendAttributeType_t type;
    int64_t count;
    void *values;  // count elements of the type's size
} EmuAttr;

// A finalized tensor's description.
typedef struct EmuTensor {
    int64_t uid;
    cudnnDataType_t type;
    int rank;
    int64_t dims[EMU_MAX_RANK], strides[EMU_MAX_RANK];
    int64_t alignment;  // CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT: what its pointer must be aligned to
    int is_virtual, by_value;
} EmuTensor;

typedef struct EmuDescriptor EmuDescriptor;
struct EmuDescriptor {
    uint32_t magic;
    cudnnBackendDescriptorType_t type;
    int finalized;
    EmuAttr attrs[EMU_MAX_ATTRS];
    int attr_count;
    EmuTensor tensor;            // TENSOR, once finalized
    EmuDescriptor *graph;        // ENGINECFG, ENGINE, EXECUTION_PLAN: the operation graph
    int64_t workspace_bytes;     // ENGINECFG, EXECUTION_PLAN
};

// The attribute `name` of d (NULL when unset), and its descriptor values.
const EmuAttr *emu_attr(const EmuDescriptor *d, cudnnBackendAttributeName_t name);
EmuDescriptor *emu_attr_descriptor(const EmuDescriptor *d, cudnnBackendAttributeName_t name,
                                   int64_t index);
int64_t emu_attr_int(const EmuDescriptor *d, cudnnBackendAttributeName_t name, int64_t fallback);
// A float (or double) attribute's first value, or fallback when unset.
double emu_attr_real(const EmuDescriptor *d, cudnnBackendAttributeName_t name, double fallback);

// The tensor an operation's attribute `name` names, or NULL.
const EmuTensor *emu_tensor_of(const EmuDescriptor *op, cudnnBackendAttributeName_t name);
int64_t emu_tensor_elements(const EmuTensor *t);
// The tensors operation op reads (in) and writes (out), EMU_MAX_OP_TENSORS
// at most each; 0 when op is no operation the emulation knows.
int emu_op_tensors(const EmuDescriptor *op, const EmuTensor **in, int *in_count,
                   const EmuTensor **out, int *out_count);

// A convolution descriptor's 2-d geometry (symmetric padding); -1 for
// what the emulation does not compute.
int emu_conv_geometry(const EmuDescriptor *conv, int64_t *stride, int64_t *pad,
                      int64_t *dilation);

// The operations of a finalized operation graph.
int emu_graph_ops(const EmuDescriptor *graph, EmuDescriptor **ops);

// The engines the emulated cuDNN offers for a finalized operation graph:
// 1 for the patterns cuDNN fuses, else 0 (emu_cudnn_heuristics.c).
int emu_engines_for(const EmuDescriptor *graph);

// Computes a finalized operation graph with the tensors' data as the
// variant pack gives them (count uids and pointers). CUDNN_STATUS_SUCCESS,
// or BAD_PARAM with a message on stderr (a tensor without data, data that
// is not device memory).
cudnnStatus_t emu_graph_execute(const EmuDescriptor *graph, int64_t count, const int64_t *uids,
                                void *const *pointers);

// Bytes of one element of a data type (0: not one the emulation knows).
size_t emu_type_bytes(cudnnDataType_t type);

// 1 when the handle's stream captures and `call` cannot be recorded into
// graphs (an algorithm search): it refuses (emu_cudnn.c,
// ltc_emu_refuse_capture in emu_blas.h).
int emu_cudnn_refuses_capture(const char *call, cudnnHandle_t handle);
// 1 when the handle's stream captures: `run` on a copy of the `bytes` at
// `arguments` is recorded (ltc_emu_capture_call in emu_blas.h); 0: the
// caller runs it now.
int emu_cudnn_capture_call(const char *call, cudnnHandle_t handle, int (*run)(const void *),
                           const void *arguments, size_t bytes);

#endif
