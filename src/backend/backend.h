// The op interface every model, head, loss and optimizer runs on.
//
// A Backend is a table of ops plus its private state. `ref` (plain loops,
// obviously right) is the oracle every other backend is tested against;
// `cpu` is the optimised CPU backend; `cuda` (a later issue) plugs in behind
// the same table. Pointers passed to ops are backend memory (from
// backend->alloc); on CPU backends that is host memory.
//
// Conventions:
// - Activations and their gradients are `Act` buffers, stored in the
//   backend's compute dtype (Backend.act_element_bytes per element: fp32 on
//   CPU backends, fp16/bf16 or fp32 on the GPU); everything typed float
//   (parameters and their gradients, optimizer state, batch-norm and
//   layer-norm statistics, every loss and the row ops of the heads and
//   losses) is fp32. Compute and accumulation are fp32 in every op. Models
//   never do arithmetic on an `Act *` (the type is incomplete, so it does not
//   compile): slices go through act_at, sizes through act_bytes, and a
//   method turns a head's output into fp32 with act_to_float before its loss.
// - Activations NHWC, conv weights (Cout, KH, KW, Cin) ("OHWI": what cuDNN's
//   NHWC kernels and oneDNN's ohwi format use); torchvision's OIHW appears
//   only at import/export (src/nn).
// - Shapes are written next to every pointer argument.
// - Outputs marked `=` are overwritten; gradients of parameters marked `+=`
//   accumulate (so micro-batches add up); activation gradients are `=`.
// - NaN and infinity propagate as in PyTorch: no op turns a NaN input into
//   a number (relu(NaN) = NaN, a pooling window holding NaN gives NaN, a NaN
//   norm is not clamped), so a diverging run shows in its loss.
// - Ops do not fail once their inputs are valid: shapes are checked when a
//   plan is made (conv) or by the caller. Nothing is allocated inside an op;
//   conv workspace is sized when the plan is made.
#ifndef LTC_BACKEND_BACKEND_H
#define LTC_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend_shapes.h"
#include "util/error.h"

typedef struct Backend Backend;

// An activation buffer in backend memory (see Conventions). Never defined:
// a pointer to it is only passed around, sliced with act_at.
typedef struct Act Act;

// cka_loss (BackendOps): the clamp of the HSIC terms before their square
// roots (lightly's _EPS) and the most tokens an image may have.
#define CKA_EPS 1e-6
#define CKA_MAX_TOKENS 1024

// The dtype activations are stored in: fp32 (32-true), or the 16-bit
// compute dtype of 16-mixed / bf16-mixed.
typedef enum ComputeDtype { COMPUTE_F32, COMPUTE_F16, COMPUTE_BF16 } ComputeDtype;

// A training-mode BatchNorm and ReLU applied to a convolution's input as
// its prologue (conv2d_forward_stats): relu(x scale + shift) per channel,
// scale = gamma inv_std and shift = beta - mean scale, each rounded to the
// activation dtype (the coefficients cuDNN's ConvBNfprop reads, which
// batchnorm_relu_backward recomputes for its mask). Backend memory, (C).
typedef struct NormAffine {
    const float *gamma, *beta, *mean, *inv_std;
} NormAffine;

// conv2d_fusions' bits: the plan's forward emits its BatchNorm statistics;
// it also takes a prologue (forward and weight gradient); its data gradient
// also runs through the prologue (conv2d_backward_data_prologue), its ReLU
// mask the norm's output recomputed in float from its mean, 1/std, gamma
// and beta, not the forward's (the two can differ where the output is
// within rounding of 0).
enum { CONV_FUSES_STATISTICS = 1, CONV_FUSES_PROLOGUE = 2, CONV_FUSES_DATA_PROLOGUE = 4 };

// One tensor of a multi-tensor optimizer update (sgd_update_segments):
// elements [offset, offset + count) of its arena, its lr multiplier and
// whether weight decay applies to it.
typedef struct UpdateSegment {
    uint64_t offset, count;
    float lr_scale;
    int32_t decays;
} UpdateSegment;

// The step gate's layout (floats in backend memory; see the optimizer
// updates and step_gate in BackendOps). A gate with multiplier 1, skip 0
// and applied 1 is open: the plain update.
enum {
    GATE_MULTIPLIER,  // gradient multiplier of this step
    GATE_SKIP,        // 1: skip the update (non-finite gradients)
    GATE_UNIT,        // gate + GATE_UNIT: multiplier 1, the same skip
    GATE_UNIT_SKIP,
    GATE_APPLIED,     // 1 - skip: what a count of applied updates adds
    GATE_FOUND,       // non-finite values counted before closing (loss)
    GATE_SQUARES,     // then one sum of squares of gradients per group
};

// How a training step runs (step_graph_begin in BackendOps).
enum { STEP_GRAPH_EAGER, STEP_GRAPH_CAPTURE, STEP_GRAPH_REPLAY };

// A host slot (see host_slot_create in BackendOps): host memory that results
// are copied into behind the queued work.
typedef struct HostSlot HostSlot;

// A transfer (see transfer_create in BackendOps): host-to-device copies on
// a stream of their own, ordered against the compute work by marks.
typedef struct Transfer Transfer;

// A mark behind the compute work queued so far that the host can test and
// wait for (see fence_create in BackendOps).
typedef struct Fence Fence;

// Marks on the compute stream whose time apart the device measures (see
// timer_create in BackendOps).
typedef struct DeviceTimer DeviceTimer;

typedef struct BackendOps {
    // ---- memory ----------------------------------------------------------
    void *(*alloc)(Backend *backend, size_t bytes);  // 64-byte aligned; NULL when out of memory
    void (*free)(Backend *backend, void *pointer);
    void (*upload)(Backend *backend, void *device, const void *host, size_t bytes);
    void (*download)(Backend *backend, void *host, const void *device, size_t bytes);
    void (*copy)(Backend *backend, void *dst, const void *src, size_t bytes);
    void (*fill)(Backend *backend, float *x, float value, size_t n);  // x (n) =
    // x (bytes) = 0 bits: zero in every dtype (activation buffers)
    void (*zero)(Backend *backend, void *x, size_t bytes);
    void (*synchronize)(Backend *backend);  // waits for queued work (no-op on CPU)
    // Reading results without waiting for the device: download waits for
    // everything queued; a host slot (pinned host memory and an event on the
    // GPU, plain memory on CPU backends) takes a copy queued behind the work
    // so far, and the host waits only when it reads it, e.g. the record of
    // step N while step N + 1 is already queued. NULL with err when out of
    // memory.
    HostSlot *(*host_slot_create)(Backend *backend, size_t bytes, ErrorMessage *err);
    void (*host_slot_free)(Backend *backend, HostSlot *slot);
    // Queues the copy of bytes (at most the slot's size) of device memory
    // into the slot; returns at once. The slot's memory is not to be read
    // until host_slot_wait.
    void (*host_slot_fill)(Backend *backend, HostSlot *slot, const void *device, size_t bytes);
    // Waits for the last fill to land; its bytes, valid until the next fill.
    const void *(*host_slot_wait)(Backend *backend, HostSlot *slot);

    // ---- data to the device: pinned host memory, copies beside the compute ----
    // (docs/gpu.md "Data to the device".) Host memory that upload_async
    // reads: page-locked on the GPU (the copy then runs by DMA, beside the
    // compute work), 64-byte aligned plain memory on CPU backends. NULL when
    // out of memory. Callable from any thread.
    void *(*host_alloc)(Backend *backend, size_t bytes);
    void (*host_free)(Backend *backend, void *pointer);
    // A transfer: its copies run in order on a copy stream of their own. Two
    // marks order them against the compute work: the copies so far have
    // landed (transfer_device_wait) and the compute work that reads their
    // destination is queued (transfer_consumed). NULL with err when out of
    // memory. transfer_free waits for the copies first.
    Transfer *(*transfer_create)(Backend *backend, ErrorMessage *err);
    void (*transfer_free)(Backend *backend, Transfer *transfer);
    // Queues the copy of bytes of host memory into device memory and
    // returns at once. On the device it starts after the compute work
    // queued before the last transfer_consumed (so it never overwrites a
    // destination that work still reads) and runs beside everything queued
    // since. The host memory is not to be written until transfer_host_wait,
    // the destination not to be read until transfer_device_wait. CPU
    // backends copy before returning.
    void (*upload_async)(Backend *backend, Transfer *transfer, void *device, const void *host,
                         size_t bytes);
    // The compute work queued from now on runs after the transfer's copies
    // so far; the host does not wait. No-op on CPU backends.
    void (*transfer_device_wait)(Backend *backend, Transfer *transfer);
    // Marks the compute work queued so far as the readers of the copies'
    // destinations (see upload_async). No-op on CPU backends.
    void (*transfer_consumed)(Backend *backend, Transfer *transfer);
    // Waits until the transfer's copies so far have read their host memory,
    // which may then be written again. No-op on CPU backends.
    void (*transfer_host_wait)(Backend *backend, Transfer *transfer);
    // The small inputs of a step (drop-path scales, masks, a permutation;
    // see src/backend/staging.h, which keeps the rules): the copy of bytes
    // of host memory (from host_alloc) into device memory queued on the
    // compute stream itself, so it lands after the work queued before it
    // (which may still read the destination) and before the work queued
    // after it; returns at once, the host does not wait. The host memory is
    // not to be written until a fence recorded after the copy has passed.
    // CPU backends copy before returning.
    void (*upload_ordered)(Backend *backend, void *device, const void *host, size_t bytes);
    // A fence: fence_record marks the compute work queued so far (again
    // and again: the last mark counts); fence_passed says, without
    // waiting, whether the device has passed that mark, fence_wait waits
    // for it. A fence never recorded has passed. NULL with err when out of
    // memory. Always passed on CPU backends.
    Fence *(*fence_create)(Backend *backend, ErrorMessage *err);
    void (*fence_free)(Backend *backend, Fence *fence);
    void (*fence_record)(Backend *backend, Fence *fence);
    int (*fence_passed)(Backend *backend, Fence *fence);
    void (*fence_wait)(Backend *backend, Fence *fence);
    // Device time between two marks on the compute stream (a step's
    // batch_time on the GPU), read later without waiting. NULL with err when
    // out of memory.
    DeviceTimer *(*timer_create)(Backend *backend, ErrorMessage *err);
    void (*timer_free)(Backend *backend, DeviceTimer *timer);
    // Records the start (end 0) or the end (end 1) mark behind the work
    // queued so far.
    void (*timer_mark)(Backend *backend, DeviceTimer *timer, int end);
    // Seconds from the last start mark to the last end mark once the device
    // has passed the end mark, else -1 (no wait). Always -1 on CPU
    // backends: there the ops run as they are called, and the host's clock
    // measures them.
    double (*timer_seconds)(Backend *backend, DeviceTimer *timer);
    // The training step as a CUDA graph (docs/gpu.md "CUDA graphs"; NULL
    // on CPU backends). step_graph_begin marks the start of a step's device
    // work of kind `key`: steps of one kind queue the same operations on the
    // same buffers, with only device memory, the per-step scalars and the
    // staged inputs differing. Its first step of a kind runs op by op
    // (STEP_GRAPH_EAGER: plans, staging sites and workspaces are made
    // there), its second is captured (STEP_GRAPH_CAPTURE) and the later ones
    // replayed (STEP_GRAPH_REPLAY): the ops then queue nothing, only their
    // host side runs (per-step scalars, staged inputs). step_graph_end
    // launches the captured or replayed graph (launch 0: a step that failed
    // midway; nothing launched): 0, or -1 with err when a replayed step
    // passed another number of queue points than its capture (then its work
    // is not queued and the run must stop).
    int (*step_graph_begin)(Backend *backend, uint64_t key);
    int (*step_graph_end)(Backend *backend, int launch, ErrorMessage *err);

    // ---- convolution ------------------------------------------------------
    ConvPlan *(*conv2d_plan)(Backend *backend, const ConvShape *shape, ErrorMessage *err);
    void (*conv2d_plan_free)(Backend *backend, ConvPlan *plan);
    // y (N, OH, OW, Cout) = conv(x (N, H, W, Cin), w (Cout, K, K, Cin))
    void (*conv2d_forward)(Backend *backend, const ConvPlan *plan, const Act *x, const Act *w,
                           Act *y);
    // dx (N, H, W, Cin) = conv_transpose(dy (N, OH, OW, Cout), w)
    void (*conv2d_backward_data)(Backend *backend, const ConvPlan *plan, const Act *dy,
                                 const Act *w, Act *dx);
    // dw (Cout, K, K, Cin) += correlation of x (N, H, W, Cin) with dy (N, OH, OW, Cout)
    void (*conv2d_backward_weights)(Backend *backend, const ConvPlan *plan, const Act *x,
                                    const Act *dy, float *dw);

    // ---- depthwise convolution (ConvNeXt, YOLO's PSA position encoding) ------------
    // Weights w (K, K, C): tap (kh, kw) of channel c at [kh][kw][c], in the
    // compute dtype (torch's (C, 1, K, K) appears only at import/export).
    DepthwisePlan *(*depthwise_plan)(Backend *backend, const DepthwiseShape *shape,
                                     ErrorMessage *err);
    void (*depthwise_plan_free)(Backend *backend, DepthwisePlan *plan);
    // y (N, OH, OW, C) = sum over the window of x (N, H, W, C) w (K, K, C),
    // + bias (C) unless NULL (in fp16 / bf16 rounded to the dtype before the
    // add, the sum rounded once, as linear_forward)
    void (*depthwise_forward)(Backend *backend, const DepthwisePlan *plan, const Act *x,
                              const Act *w, const float *bias, Act *y);
    // dx (N, H, W, C) = the transposed convolution of dy (N, OH, OW, C) with w
    void (*depthwise_backward_data)(Backend *backend, const DepthwisePlan *plan, const Act *dy,
                                    const Act *w, Act *dx);
    // dw (K, K, C) += correlation of x (N, H, W, C) with dy (N, OH, OW, C);
    // dbias (C) += the sum of dy over N, OH, OW unless NULL
    void (*depthwise_backward_weights)(Backend *backend, const DepthwisePlan *plan,
                                       const Act *x, const Act *dy, float *dw, float *dbias);
    // Planned linear layers (ConvNeXt's fc1, fc2): linear_forward, then gelu_forward
    // when the plan has `gelu` (forwards that keep no pre-activation: frozen models),
    // each rounded in fp16 / bf16; the cpu backend fuses both into one oneDNN matmul.
    LinearPlan *(*linear_plan)(Backend *backend, int rows, int in, int out, int gelu,
                               ErrorMessage *err);
    void (*linear_plan_free)(Backend *backend, LinearPlan *plan);
    void (*linear_planned_forward)(Backend *backend, const LinearPlan *plan, const Act *x,
                                   const Act *w, const float *bias, Act *y);

    // ---- batch norm over rows: NHWC 2d (rows = N*H*W) and 1d (rows = N) -----
    // Training: batch statistics (biased variance for normalising), saves
    // mean and 1/sqrt(var + eps) for backward, and updates the running stats
    // with momentum (PyTorch: running = (1 - m) running + m batch, running_var
    // takes the unbiased variance).
    // y (rows, C) =; save_mean, save_inv_std (C) =; running_mean, running_var (C) updated
    void (*batchnorm_forward_train)(Backend *backend, size_t rows, int channels, const Act *x,
                                    const float *gamma, const float *beta, float momentum,
                                    float eps, Act *y, float *save_mean, float *save_inv_std,
                                    float *running_mean, float *running_var);
    // Evaluation: y (rows, C) = gamma (x - running_mean) / sqrt(running_var + eps) + beta
    void (*batchnorm_forward_eval)(Backend *backend, size_t rows, int channels, const Act *x,
                                   const float *gamma, const float *beta, const float *running_mean,
                                   const float *running_var, float eps, Act *y);
    // dx (rows, C) =; dgamma, dbeta (C) += ; x is the forward input.
    void (*batchnorm_backward)(Backend *backend, size_t rows, int channels, const Act *x,
                               const Act *dy, const float *gamma, const float *save_mean,
                               const float *save_inv_std, Act *dx, float *dgamma, float *dbeta);

    // ---- batch norm fused with the ReLU (and residual add) after it ---------
    // For conv-BN-ReLU stacks and residual block outputs: one pass over the
    // activations instead of three. residual (rows, C) may be NULL.
    // y (rows, C) = max(bn(x) + residual, 0): batchnorm_forward_train (or
    // _eval), then add, then relu_forward, with the same rounding in fp32
    // (ref: bit for bit); in a 16-bit dtype y is rounded once, after the
    // ReLU (one GPU kernel). y aliases neither x nor residual.
    void (*batchnorm_relu_forward_train)(Backend *backend, size_t rows, int channels, const Act *x,
                                         const Act *residual, const float *gamma, const float *beta,
                                         float momentum, float eps, Act *y, float *save_mean,
                                         float *save_inv_std, float *running_mean,
                                         float *running_var);
    void (*batchnorm_relu_forward_eval)(Backend *backend, size_t rows, int channels, const Act *x,
                                        const Act *residual, const float *gamma, const float *beta,
                                        const float *running_mean, const float *running_var,
                                        float eps, Act *y);
    // Backward of batchnorm_relu_forward_train through its ReLU, the mask
    // taken from its output y (rows, C): with dz = y > 0 ? dy : 0,
    // dx (rows, C) = batchnorm_backward's dx for dz; dgamma, dbeta (C) +=;
    // dresidual (rows, C) = dz (the residual's gradient) unless NULL.
    // dresidual may alias dy; dx aliases neither. y NULL: the ReLU was a
    // convolution's input prologue (conv2d_forward_stats) and y was never
    // stored; the mask is x scale + shift > 0 with the prologue's
    // coefficients (NormAffine), so beta is read only then.
    void (*batchnorm_relu_backward)(Backend *backend, size_t rows, int channels, const Act *x,
                                    const Act *y, const Act *dy, const float *gamma,
                                    const float *beta, const float *save_mean,
                                    const float *save_inv_std, Act *dx, float *dgamma,
                                    float *dbeta, Act *dresidual);

    // ---- batch norm fused with the SiLU after it (Ultralytics' Conv) --------
    // y (rows, C) = silu(bn(x)): batchnorm_forward_train (or _eval), then
    // silu_forward, in one pass over y; the norm's output a = bn(x) is not
    // kept (the backward recomputes it from x and the statistics). y aliases
    // not x.
    void (*batchnorm_silu_forward_train)(Backend *backend, size_t rows, int channels, const Act *x,
                                         const float *gamma, const float *beta, float momentum,
                                         float eps, Act *y, float *save_mean, float *save_inv_std,
                                         float *running_mean, float *running_var);
    void (*batchnorm_silu_forward_eval)(Backend *backend, size_t rows, int channels, const Act *x,
                                        const float *gamma, const float *beta,
                                        const float *running_mean, const float *running_var,
                                        float eps, Act *y);
    // Backward of batchnorm_silu_forward_train: with a = (x - save_mean)
    // save_inv_std gamma + beta, dz (rows, C) = dy silu'(a) (silu_backward),
    // dx (rows, C) = batchnorm_backward's dx for dz; dgamma, dbeta (C) +=.
    // dz is written (scratch); dx, dz, dy and x are four buffers.
    void (*batchnorm_silu_backward)(Backend *backend, size_t rows, int channels, const Act *x,
                                    const Act *dy, const float *gamma, const float *beta,
                                    const float *save_mean, const float *save_inv_std, Act *dz,
                                    Act *dx, float *dgamma, float *dbeta);

    // ---- batch norm over several ranks (synchronised BatchNorm) -------------
    // The training forward and backward above, split where the ranks'
    // per-channel sums are all-reduced (nn/batchnorm_sync.c):
    //   forward:  column_sum -> all-reduce -> mean; centered_squares ->
    //             all-reduce -> finish_statistics; forward_apply
    //   backward: backward_reduce -> all-reduce -> backward_apply
    // rows: on this rank; total_rows: over all ranks. relu_out (rows, C) may
    // be NULL (no ReLU after the norm); otherwise the gradient reaching the
    // norm is dz = dy where relu_out > 0, else 0.
    // squares (C) = sum over rows of (x (rows, C) - mean (C))^2
    void (*batchnorm_centered_squares)(Backend *backend, size_t rows, int channels, const Act *x,
                                       const float *mean, float *squares);
    // From the mean (C) and the squares (C) of total_rows rows:
    // squares_to_inv_std (C) = 1 / sqrt(squares / total_rows + eps) (in place);
    // running_mean, running_var (C) updated as batchnorm_forward_train does.
    void (*batchnorm_finish_statistics)(Backend *backend, int channels, size_t total_rows,
                                        float momentum, float eps, const float *mean,
                                        float *squares_to_inv_std, float *running_mean,
                                        float *running_var);
    // y (rows, C) = (x - mean) inv_std gamma + beta (+ residual (rows, C) unless
    // NULL), then max(., 0) when relu; y aliases neither x nor residual.
    void (*batchnorm_forward_apply)(Backend *backend, size_t rows, int channels, const Act *x,
                                    const Act *residual, int relu, const float *gamma,
                                    const float *beta, const float *mean, const float *inv_std,
                                    Act *y);
    // This rank's sums (2, C) = [sum dz, sum dz xhat], xhat = (x - mean) inv_std;
    // dbeta += sums[0], dgamma += sums[1]; dz_out (rows, C) = dz unless NULL
    // (may alias dy).
    void (*batchnorm_backward_reduce)(Backend *backend, size_t rows, int channels, const Act *x,
                                      const Act *relu_out, const Act *dy, Act *dz_out,
                                      const float *mean, const float *inv_std, float *dgamma,
                                      float *dbeta, float *sums);
    // dx (rows, C) = gamma inv_std (dz - sums[0] / total_rows - xhat sums[1] /
    // total_rows) with sums (2, C) over all ranks; dx aliases nothing.
    void (*batchnorm_backward_apply)(Backend *backend, size_t rows, size_t total_rows, int channels,
                                     const Act *x, const Act *relu_out, const Act *dy,
                                     const float *gamma, const float *mean, const float *inv_std,
                                     const float *sums, Act *dx);

    // ---- convolution fused with BatchNorm's statistics ------------------------
    // (cuDNN's ConvBNfprop; layers.c conv_batchnorm_forward, resnet_blocks.c.)
    // y (N, OH, OW, Cout) = conv2d_forward's y, and sums (2, Cout) = [sum
    // over rows of y, sum of y^2], of y as stored, where the plan has a fused
    // path: returns 1. Otherwise writes nothing and returns 0 (the caller
    // takes conv2d_forward and the norm's own statistics). With a prologue,
    // x is the previous BatchNorm's input and the convolution reads
    // relu(x scale + shift) per input channel, never stored (NormAffine);
    // 0 where the plan has no such path. NULL where a backend has no fused
    // path (ref, cpu).
    int (*conv2d_forward_stats)(Backend *backend, const ConvPlan *plan, const Act *x,
                                const NormAffine *prologue, const Act *w, Act *y, float *sums);
    // Which of the fused paths above the plan has (ConvFusions bits); NULL
    // with conv2d_forward_stats. For laying out activations ahead (a norm
    // output that a prologue replaces needs no memory of its own).
    int (*conv2d_fusions)(Backend *backend, const ConvPlan *plan);
    // conv2d_backward_weights of relu(x scale + shift) (the prologue's input,
    // never stored), for a plan whose conv2d_forward_stats took a prologue
    // (cuDNN's ConvBNwgrad); NULL with conv2d_forward_stats.
    void (*conv2d_backward_weights_prologue)(Backend *backend, const ConvPlan *plan,
                                             const Act *x, const NormAffine *prologue,
                                             const Act *dy, float *dw);
    // conv2d_backward_data through the same prologue's ReLU, with that
    // norm's reduction (cuDNN's DgradDreluBNBwdWeight): dz (N, H, W, Cin) =
    // conv2d_backward_data's dx where the norm's output ((x - mean) inv_std)
    // gamma + beta > 0 in float (the forward's mask up to rounding at 0),
    // else 0; then batchnorm_backward_reduce's outputs for dz: sums
    // (2, Cin) = [sum dz, sum dz xhat] with xhat = (x - mean) inv_std, and
    // prologue->gamma's and beta's gradients dgamma, dbeta (Cin) +=. Returns
    // 1; 0 where the plan has no such path (nothing written: the caller
    // takes conv2d_backward_data and batchnorm_relu_backward). NULL with
    // conv2d_forward_stats.
    int (*conv2d_backward_data_prologue)(Backend *backend, const ConvPlan *plan, const Act *dy,
                                         const Act *w, const Act *x, const NormAffine *prologue,
                                         Act *dz, float *dgamma, float *dbeta, float *sums);
    // mean (C) = sums[0] / total_rows and squares (C) = the sum of squared
    // deviations, sums[1] - sums[0] mean (at least 0), from the (2, C) sums
    // of total_rows rows: what batchnorm_finish_statistics takes.
    void (*batchnorm_statistics_from_sums)(Backend *backend, int channels, size_t total_rows,
                                           const float *sums, float *mean, float *squares);

    // ---- elementwise --------------------------------------------------------
    void (*relu_forward)(Backend *backend, size_t n, const Act *x,
                         Act *y); // y = max(x, 0); may alias
    // dx (n) = dy * (y > 0); y is the forward output; dx may alias dy
    void (*relu_backward)(Backend *backend, size_t n, const Act *y, const Act *dy, Act *dx);
    // y (n) = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)): the exact GELU (torch.nn.GELU()
    // default, not the tanh approximation); elementwise: y may alias x
    void (*gelu_forward)(Backend *backend, size_t n, const Act *x, Act *y);
    // dx (n) = dy (Phi(x) + x phi(x)), phi the standard normal density; x is the
    // forward input; dx may alias dy
    void (*gelu_backward)(Backend *backend, size_t n, const Act *x, const Act *dy, Act *dx);
    void (*add)(Backend *backend, size_t n, const float *a, const float *b, float *y);  // y = a + b
    // y (n) = alpha * x + beta * y  (beta = 0: y is not read)
    void (*axpby)(Backend *backend, size_t n, float alpha, const float *x, float beta, float *y);
    void (*mul)(Backend *backend, size_t n, const float *a, const float *b, float *y);  // y = a * b
    // The same on activations (residual gradient sums): y (n) = alpha x +
    // beta y (beta = 0: y is not read)
    void (*act_axpby)(Backend *backend, size_t n, float alpha, const Act *x, float beta, Act *y);
    // The fp32 boundary between a model and its loss: y (n) = x (n) in the
    // other type (to the compute dtype: rounded to nearest even).
    void (*act_to_float)(Backend *backend, size_t n, const Act *x, float *y);
    void (*float_to_act)(Backend *backend, size_t n, const float *x, Act *y);

    // ---- pooling ------------------------------------------------------------
    // y (N, OH, OW, C) = max over the window; argmax (N, OH, OW, C) = flat
    // input index (within the sample) of the max, for backward
    void (*maxpool_forward)(Backend *backend, const PoolShape *shape, const Act *x, Act *y,
                            int32_t *argmax);
    // dx (N, H, W, C) = scatter of dy (N, OH, OW, C) to argmax (sums where windows overlap)
    void (*maxpool_backward)(Backend *backend, const PoolShape *shape, const Act *dy,
                             const int32_t *argmax, Act *dx);
    // y (N, C) = mean over H*W of x (N, H*W, C)
    void (*avgpool_forward)(Backend *backend, int batch, int pixels, int channels, const Act *x,
                            Act *y);
    // dx (N, H*W, C) = dy (N, C) / pixels
    void (*avgpool_backward)(Backend *backend, int batch, int pixels, int channels, const Act *dy,
                             Act *dx);

    // ---- matrix products (row-major) -------------------------------------------
    // C (M, N) = alpha * op(A) op(B) + beta * C, op(A) (M, K), op(B) (K, N);
    // A is (M, K) or, transposed, (K, M); leading dimensions are row strides.
    void (*gemm)(Backend *backend, int transpose_a, int transpose_b, int m, int n, int k,
                 float alpha, const float *a, int lda, const float *b, int ldb, float beta,
                 float *c, int ldc);
    // Fully connected layers on activations (gemm stays the fp32 product of
    // the losses): weights w (out, in) as PyTorch's nn.Linear, in the compute
    // dtype; rows of x and y contiguous.
    // y (rows, out) = x (rows, in) w^T + bias (out; NULL: none); in fp16 /
    // bf16 the bias is rounded to the dtype before the add and the sum
    // rounded once (PyTorch autocast's order; cuBLASLt's bias epilogue's)
    void (*linear_forward)(Backend *backend, int rows, int in, int out, const Act *x, const Act *w,
                           const float *bias, Act *y);
    // dx (rows, in) = dy (rows, out) w
    void (*linear_backward_data)(Backend *backend, int rows, int in, int out, const Act *dy,
                                 const Act *w, Act *dx);
    // dw (out, in) += dy^T x; dbias (out) += sum over rows of dy (NULL: none)
    void (*linear_backward_weights)(Backend *backend, int rows, int in, int out, const Act *x,
                                    const Act *dy, float *dw, float *dbias);
    // y (rows, C) += bias (C) broadcast over rows
    void (*bias_add)(Backend *backend, size_t rows, int channels, const float *bias, Act *y);
    // dbias (C) += sum over rows of dy (rows, C)
    void (*bias_backward)(Backend *backend, size_t rows, int channels, const Act *dy, float *dbias);

    // ---- row-wise ops for heads and losses ---------------------------------------
    // y (rows, D) = x / max(||x||_2, eps), norm (rows) = ||x||_2
    void (*l2_normalize_forward)(Backend *backend, int rows, int dim, const float *x, float eps,
                                 float *y, float *norm);
    // dx (rows, D) = (dy - y <y, dy>) / max(norm, eps)
    void (*l2_normalize_backward)(Backend *backend, int rows, int dim, const float *y,
                                  const float *norm, const float *dy, float eps, float *dx);
    // y (rows, D) = softmax(x * scale) or log_softmax(x * scale) per row
    void (*softmax_forward)(Backend *backend, int rows, int dim, const float *x, float scale,
                            float *y);
    void (*log_softmax_forward)(Backend *backend, int rows, int dim, const float *x, float scale,
                                float *y);
    // dx (rows, D) = scale * y * (dy - <dy, y>)          (y = softmax output)
    void (*softmax_backward)(Backend *backend, int rows, int dim, const float *y, const float *dy,
                             float scale, float *dx);
    // dx (rows, D) = scale * (dy - softmax * sum(dy))   (y = log_softmax output)
    void (*log_softmax_backward)(Backend *backend, int rows, int dim, const float *y,
                                 const float *dy, float scale, float *dx);

    // ---- reductions (result written to backend memory, one float) -----------------
    void (*sum)(Backend *backend, size_t n, const float *x, float *result);          // = sum x
    void (*sum_squares)(Backend *backend, size_t n, const float *x, float *result);  // = sum x^2
    // = sum a*b
    void (*dot)(Backend *backend, size_t n, const float *a, const float *b, float *result);
    // y (C) = sum over rows of x (rows, C)
    void (*column_sum)(Backend *backend, size_t rows, int channels, const float *x, float *y);
    // The same over activations (synchronised batch norm's sums): y (C) fp32
    void (*act_column_sum)(Backend *backend, size_t rows, int channels, const Act *x, float *y);
    // result (one float) += the number of NaN and infinite values in x (n),
    // exact below 2^24: the divergence check over the parameter and gradient
    // arenas, several of them into one result without a host round trip.
    void (*count_nonfinite)(Backend *backend, size_t n, const float *x, float *result);
    // Scalar arithmetic where the scalars live (a loss from its sums, a mean
    // over micro-batches), so the host reads nothing back:
    // y = (alpha a + beta b) / divisor, each one float of backend memory,
    // evaluated in double and rounded to float once (b NULL: the beta term
    // is left out, not added as 0). A single float operation (a + b, alpha
    // a, a / divisor, with alpha and beta 1 or -1 where not the operation)
    // so gives exactly its float result (double has over twice float's
    // precision); a longer float expression takes one call per operation.
    // y may alias a or b.
    void (*scalar_combine)(Backend *backend, float alpha, const float *a, float beta,
                           const float *b, float divisor, float *y);

    // ---- optimizer updates (in place, fp32 master weights and state) ---------------
    // Every update reads a step gate (backend memory, see step_gate below):
    // gate[GATE_SKIP] != 0 leaves param and state untouched (a non-finite
    // step); otherwise the gradient used is gate[GATE_MULTIPLIER] * grad
    // (1/k of accumulation, the clipping coefficient). The host never reads
    // the decision, so a GPU step does not wait for it.
    // SGD (PyTorch semantics): g = m * grad + wd * param; buf = momentum *
    // buf + g (buf = g on the first step); step = nesterov ? g + momentum *
    // buf : buf; param -= lr * step
    void (*sgd_update)(Backend *backend, size_t n, float *param, const float *grad,
                       const float *gate, float *momentum_buffer, float lr, float momentum,
                       float weight_decay, int nesterov, int first_step);
    // AdamW (PyTorch semantics), g = m * grad: param *= 1 - lr * wd; m = b1 m
    // + (1-b1) g; v = b2 v + (1-b2) g^2; param -= lr * (m / (1 - b1^t)) /
    // (sqrt(v / (1 - b2^t)) + eps). t = *step, one float of backend memory
    // (an integer >= 1, exact below 2^24): the count of applied updates kept
    // on the device, so a skipped step does not count (as PyTorch's AdamW,
    // whose step GradScaler skips).
    void (*adamw_update)(Backend *backend, size_t n, float *param, const float *grad,
                         const float *gate, float *m, float *v, float lr, double beta1,
                         double beta2, float eps, float weight_decay, const float *step);
    // The same two updates over many tensors of one parameter arena in one
    // pass (one launch on the GPU: the multi-tensor update): segments (count,
    // backend memory) name the tensors by their offset in params, grads and
    // the state slabs (momentum; m and v), each updated as sgd_update /
    // adamw_update with lr = lr * lr_scale (a float product) and weight
    // decay = decays ? weight_decay : 0: the same results, bit for bit.
    void (*sgd_update_segments)(Backend *backend, int count, const UpdateSegment *segments,
                                float *params, const float *grads, const float *gate,
                                float *momentum_buffers, float lr, float momentum,
                                float weight_decay, int nesterov, int first_step);
    void (*adamw_update_segments)(Backend *backend, int count, const UpdateSegment *segments,
                                  float *params, const float *grads, const float *gate, float *m,
                                  float *v, float lr, double beta1, double beta2, float eps,
                                  float weight_decay, const float *step);
    // LARS direction of one weight (lightly's formulation), its ratio computed
    // where the data lives: sums (2 floats, backend memory) = sum param^2,
    // sum grad^2 (of the raw grad); with g = m * grad from the gate and both
    // norms > 0, out = ratio * (weight_decay * param + g) with ratio = trust
    // * p / (|g| + p * weight_decay + eps), otherwise out = g. The SGD step on
    // out then takes gate + GATE_UNIT (same skip, multiplier 1). out (n) may
    // not alias param or grad; on a skipped step out is unspecified.
    void (*lars_direction)(Backend *backend, size_t n, const float *param, const float *grad,
                           const float *gate, const float *sums, float weight_decay,
                           float trust, float eps, float *out);
    // Closes the gate of a step (scalar_rules.h step_gate_rule): from
    // gate[GATE_FOUND] (non-finite values seen, e.g. a NaN loss) and
    // gate[GATE_SQUARES + g] (sum of squares of group g's gradients, g <
    // groups), writes multiplier, skip and applied (+ the unit gate): skip
    // when anything is non-finite, else multiplier = scale (1/k) times
    // *unscale (one float of backend memory: 1/loss scale; NULL: 1), times
    // the clipping coefficient max_norm / (norm + 1e-6) when max_norm > 0
    // and that is below 1, the norm of the multiplied gradients
    // (torch.nn.utils.clip_grad_norm_ after GradScaler's unscale_).
    void (*step_gate)(Backend *backend, float *gate, int groups, float scale,
                      const float *unscale, float max_norm);
    // target = momentum * target + (1 - momentum) * source  (EMA teacher)
    void (*ema_update)(Backend *backend, size_t n, float *target, const float *source,
                       float momentum);

    // ---- fp32 twins for the losses --------------------------------------------------
    // The ops of the same name without _f32 on fp32 buffers (every value
    // typed float, never rounded to the compute dtype): Barlow Twins' and
    // VICReg's column normalisation and hinge, the centring of DINO's
    // teacher logits.
    void (*relu_forward_f32)(Backend *backend, size_t n, const float *x, float *y);
    void (*relu_backward_f32)(Backend *backend, size_t n, const float *y, const float *dy,
                              float *dx);
    void (*batchnorm_forward_train_f32)(Backend *backend, size_t rows, int channels, const float *x,
                                        const float *gamma, const float *beta, float momentum,
                                        float eps, float *y, float *save_mean, float *save_inv_std,
                                        float *running_mean, float *running_var);
    void (*batchnorm_backward_f32)(Backend *backend, size_t rows, int channels, const float *x,
                                   const float *dy, const float *gamma, const float *save_mean,
                                   const float *save_inv_std, float *dx, float *dgamma,
                                   float *dbeta);
    void (*bias_add_f32)(Backend *backend, size_t rows, int channels, const float *bias, float *y);

    // ---- dynamic loss scaling (PyTorch's GradScaler, all on the device) ----------
    // state (3 floats): scale, growth tracker (good steps since the last
    // change), 1/scale. Unscaling and the NaN/inf check are the step gate's
    // (state + 2 is its unscale factor; found its skip).
    // After the step's checks: found > 0: scale *= backoff, tracker = 0;
    // otherwise tracker += 1 and, when it reaches growth_interval, scale *=
    // growth (if that stays finite) and tracker = 0; state[2] = 1/scale.
    void (*amp_update)(Backend *backend, float *state, const float *found, int growth_interval,
                       float growth, float backoff);

    // ---- transformer ops ------------------------------------------------------------
    // Layer norm over the channels of each row (PyTorch's nn.LayerNorm on the
    // last dim): y (rows, C) = (x - mean) inv_std gamma + beta with the biased
    // variance and inv_std = 1 / sqrt(var + eps); mean, inv_std (rows) = the
    // row statistics (fp32), kept for backward. y may not alias x.
    void (*layernorm_forward)(Backend *backend, size_t rows, int channels, const Act *x,
                              const float *gamma, const float *beta, float eps, Act *y, float *mean,
                              float *inv_std);
    // dx (rows, C) = (+= when accumulate: the residual stream's gradient
    // takes the norm's in the same pass, rounded once); dgamma, dbeta (C)
    // +=; x is the forward input, mean and inv_std its saved statistics. dx
    // may not alias dy or x.
    void (*layernorm_backward)(Backend *backend, size_t rows, int channels, const Act *x,
                               const Act *dy, const float *gamma, const float *mean,
                               const float *inv_std, Act *dx, int accumulate, float *dgamma,
                               float *dbeta);

    // Scaled dot-product attention, per (b, h): softmax(scale q k^T) v over
    // the tokens. q, k, v are read where a fused qkv Linear writes them:
    // qkv (B, T, 3, H, Dh) (token-major; [.., 0, h, :] is q of head h, 1 k, 2 v),
    // and out (B, T, H, Dh) is what the output projection reads. Only the
    // per-row log-sum-exp is kept for backward, which recomputes the
    // probabilities: no (T, T) matrix lives between the two (what a fused GPU
    // kernel does). lse (B, H, T) = log sum_j exp(scale q_i . k_j).
    AttentionPlan *(*attention_plan)(Backend *backend, const AttentionShape *shape,
                                     ErrorMessage *err);
    void (*attention_plan_free)(Backend *backend, AttentionPlan *plan);
    // out (B, T, H, Dh) =, lse (B, H, T) =
    void (*attention_forward)(Backend *backend, const AttentionPlan *plan, const Act *qkv,
                              float scale, Act *out, float *lse);
    // dqkv (B, T, 3, H, Dh) = the gradients of q, k and v, given the forward's
    // qkv, out and lse and dout (B, T, H, Dh). dqkv aliases nothing.
    void (*attention_backward)(Backend *backend, const AttentionPlan *plan, const Act *qkv,
                               const Act *out, const Act *dout, const float *lse, float scale,
                               Act *dqkv);

    // ViT token sequence: tokens (B, 1 + R + P, D) = [cls + cls_pos,
    // registers[0 .. R-1], patches[p] + patch_pos[p]] per sample: the class
    // token, R register tokens (no position), then the P patch embeddings
    // (B, P, D) with their positions (P, D). cls_pos (D) may be NULL (no
    // position on the class token); registers (R, D) is NULL when R = 0;
    // patch_pos is NULL for a model without learned positions (DINOv3's
    // RoPE): the patches are copied as they are.
    void (*vit_tokens_forward)(Backend *backend, int batch, int registers, int patches,
                               int channels, const Act *patch_embeddings, const float *cls,
                               const float *cls_pos, const float *register_tokens,
                               const float *patch_pos, Act *tokens);
    // dpatches (B, P, D) =; dcls, dcls_pos (D), dregisters (R, D) and
    // dpatch_pos (P, D) += the sums over the batch. Pointers NULL in the
    // forward are NULL here (dcls_pos may also be NULL when cls_pos is not,
    // dpatch_pos when patch_pos is not).
    void (*vit_tokens_backward)(Backend *backend, int batch, int registers, int patches,
                                int channels, const Act *dtokens, Act *dpatch_embeddings,
                                float *dcls, float *dcls_pos, float *dregister_tokens,
                                float *dpatch_pos);
    // Residual add with LayerScale and drop path:
    // y (B, T, C) = x + sample_scale[b] * gamma[c] * branch (B, T, C), where
    // gamma (C) may be NULL (1) and sample_scale (B) may be NULL (1; drop
    // path: 0 for a dropped sample, 1 / keep probability for a kept one).
    // y may alias x.
    void (*residual_scale_add_forward)(Backend *backend, int batch, size_t rows_per_sample,
                                       int channels, const Act *x, const Act *branch,
                                       const float *gamma, const float *sample_scale, Act *y);
    // residual_scale_add_forward into y, then layernorm_forward of y (as
    // stored) into norm_out with ln_gamma, ln_beta, eps and the row
    // statistics mean, inv_std (rows): a ViT block's residual add and the
    // norm after it, in one pass over y where the backend fuses them. y may
    // alias x; norm_out may alias branch (a row of branch is read before
    // that row of norm_out is written), not x or y.
    void (*residual_layernorm_forward)(Backend *backend, int batch, size_t rows_per_sample,
                                       int channels, const Act *x, const Act *branch,
                                       const float *gamma, const float *sample_scale, Act *y,
                                       const float *ln_gamma, const float *ln_beta, float eps,
                                       Act *norm_out, float *mean, float *inv_std);
    // dbranch (B, T, C) = sample_scale[b] gamma[c] dy; dgamma (C) += sum over
    // rows of sample_scale[b] dy branch (when gamma is not NULL). The
    // gradient of x is dy itself.
    void (*residual_scale_add_backward)(Backend *backend, int batch, size_t rows_per_sample,
                                        int channels, const Act *branch, const Act *dy,
                                        const float *gamma, const float *sample_scale, Act *dbranch,
                                        float *dgamma);
    // Token pooling: y (B, C) = mean of x[b, first .. first + count - 1, :]
    // over x (B, T, C) (count 1: the token itself, e.g. the class token).
    void (*token_pool_forward)(Backend *backend, int batch, int tokens, int channels, int first,
                               int count, const Act *x, Act *y);
    // dx (B, T, C) = dy[b] / count on the pooled tokens, 0 on the others.
    void (*token_pool_backward)(Backend *backend, int batch, int tokens, int channels, int first,
                                int count, const Act *dy, Act *dx);

    // ---- DINOv3 ViTs: rotary positions, SwiGLU --------------------------------------
    // DINOv3's RoPE, in place on the fused qkv buffer (B, T, 3, H, Dh), Dh
    // even: for the query and the key of every token t >= prefix (patch p
    // = t - prefix, P = T - prefix) and every head, each pair (x_i,
    // x_{i + Dh/2}), i < Dh/2, is rotated by the angle of (p, i):
    //   x_i' = x_i cos - x_{i + Dh/2} sin,  x_{i + Dh/2}' = x_{i + Dh/2} cos + x_i sin
    // with sin, cos (P, Dh/2) (rope_apply with rotate_half). The values and
    // the first `prefix` tokens (class, registers) are left as they are.
    void (*rope_forward)(Backend *backend, int batch, int tokens, int heads, int head_dim,
                         int prefix, const float *sin, const float *cos, Act *qkv);
    // Its backward, in place on dqkv (B, T, 3, H, Dh): the query and key
    // gradients rotated back (the transposed rotation, by -angle), so dqkv
    // becomes the gradient of the unrotated q and k; value gradients stay.
    void (*rope_backward)(Backend *backend, int batch, int tokens, int heads, int head_dim,
                          int prefix, const float *sin, const float *cos, Act *dqkv);
    // SwiGLU on a packed gate | value projection x (rows, 2H):
    // y (rows, H) = silu(x[:, :H]) x[:, H:], silu(a) = a / (1 + exp(-a)).
    // y may not alias x.
    void (*swiglu_forward)(Backend *backend, size_t rows, int hidden, const Act *x, Act *y);
    // dx (rows, 2H) =: d gate = dy value silu'(gate), d value = dy silu(gate),
    // silu'(a) = s (1 + a (1 - s)), s = 1 / (1 + exp(-a)). x is the forward
    // input, dy (rows, H); dx aliases neither.
    void (*swiglu_backward)(Backend *backend, size_t rows, int hidden, const Act *x, const Act *dy,
                            Act *dx);

    // ---- distillation: feature-map resize, mixup, strided copies ----------------------
    // Bilinear resize of a feature map as PyTorch's F.interpolate(mode="bilinear",
    // align_corners=False) given an output size. Per output row i (columns
    // alike), in fp32: scale = in_h / out_h, s = max(scale (i + 0.5) - 0.5, 0),
    // i0 = floor(s), i1 = i0 + (i0 < in_h - 1), w1 = s - i0, w0 = 1 - w1;
    // y = w0 (v0 x[i0, j0] + v1 x[i0, j1]) + w1 (v0 x[i1, j0] + v1 x[i1, j1]).
    // x (B, in_h, in_w, C), y (B, out_h, out_w, C) =.
    void (*resize_bilinear_forward)(Backend *backend, int batch, int in_height, int in_width,
                                    int channels, const Act *x, int out_height, int out_width,
                                    Act *y);
    // dx (B, in_h, in_w, C) = the adjoint of the forward applied to dy
    // (B, out_h, out_w, C): each input pixel gets the sum of its weights
    // times the output gradients (no atomics: the sum order is fixed).
    void (*resize_bilinear_backward)(Backend *backend, int batch, int in_height, int in_width,
                                     int channels, const Act *dy, int out_height, int out_width,
                                     Act *dx);
    // Mixup of samples of `sample` floats: y[b] = lambda x[b] + (1 - lambda)
    // x[permutation[b]] (1 - lambda in fp32), permutation (B) int32 in
    // backend memory. x (B, sample), y (B, sample) =; y may not alias x.
    void (*mixup)(Backend *backend, int batch, size_t sample, const Act *x,
                  const int32_t *permutation, float lambda, Act *y);
    // Strided copy of a (rows, cols) matrix (cudaMemcpy2D): y[r y_stride + c]
    // = x[r x_stride + c]; strides in elements, >= cols; x and y do not overlap.
    void (*copy_2d)(Backend *backend, size_t rows, size_t cols, const Act *x, size_t x_stride,
                    Act *y, size_t y_stride);
    // ShuffleNetV2's channel shuffle (torchvision's channel_shuffle) on
    // (rows, channels) NHWC rows: y[r, k groups + g] = x[r, g (channels /
    // groups) + k] for g < groups, k < channels / groups. groups divides
    // channels. Its inverse, the backward, is the same op with channels /
    // groups groups. A pure permutation: every dtype's values exactly. y
    // does not alias x.
    void (*channel_shuffle)(Backend *backend, size_t rows, int channels, int groups,
                            const Act *x, Act *y);
    // ---- DINOv2: masked tokens, Sinkhorn-Knopp, KoLeo ------------------------------
    // iBOT's masked patches: y (rows, C) = token (C) where mask[r] != 0, else
    // x (rows, C); mask (rows) is 0 or 1. y may alias x.
    void (*mask_tokens_forward)(Backend *backend, size_t rows, int channels, const Act *x,
                                const float *mask, const float *token, Act *y);
    // dtoken (C) += the sum of the masked rows of dy (rows, C); dx (rows, C)
    // = dy with the masked rows 0. dx may alias dy.
    void (*mask_tokens_backward)(Backend *backend, size_t rows, int channels, const float *mask,
                                 const Act *dy, Act *dx, float *dtoken);
    // y (rows, C) = x (rows, C) * scale[r] per row, scale (rows): iBOT's
    // per-patch weights, loss gradients times the loss scale. y may alias x.
    void (*scale_rows)(Backend *backend, size_t rows, int channels, const float *x,
                       const float *scale, float *y);
    // y (count, C) = the rows index[0 .. count-1] of x (any rows, C); index
    // (count) int32 in backend memory, each in range.
    void (*gather_rows)(Backend *backend, int count, int channels, const int32_t *index,
                        const Act *x, Act *y);
    // dx[index[i]] (C) += dy[i] for i < count: gather_rows' backward. The
    // indices must be distinct (every row of dx is written by at most one i).
    void (*scatter_add_rows)(Backend *backend, int count, int channels, const int32_t *index,
                             const Act *dy, Act *dx);
    // A sparse (CSR) matrix times rows: y[r] (C) = the sum over t in
    // [row_start[r], row_start[r + 1]) of weight[t] x[index[t]] for r < rows,
    // x (any rows, C), y (rows, C) =. DINOv31's ROI-align (each output row a
    // weighted sum of a few token rows) and, with the transposed matrix built
    // on the host, its backward: no scatter. The sum runs in fp32 in t order
    // and is rounded once to the activation dtype (the same bits on every
    // run); an empty row gives 0. row_start (rows + 1) int32, index and
    // weight (row_start[rows]) in backend memory, every index in range; y may
    // not alias x. The launch depends on rows and C only (CUDA graphs).
    void (*combine_rows)(Backend *backend, int rows, int channels, const int32_t *row_start,
                         const int32_t *index, const float *weight, const Act *x, Act *y);
    // Sinkhorn-Knopp assignment of samples (rows) to prototypes (columns),
    // DINOv2's sinkhorn_knopp_teacher, in steps so that the samples may lie
    // on several ranks: the caller all-reduces the per-column results
    // between the steps (src/ssl_methods/dinov2_loss.c):
    //   column_max -> all-reduce max -> sinkhorn_exp, then per iteration
    //   column_sum -> all-reduce sum -> sinkhorn_normalize.
    // After the last iteration every row of q is a distribution. DINOv2
    // also divides q by its total first, each column by K and each row by
    // the global sample count B, and multiplies by B at the end; those
    // scalars, and the per-column shift by the maximum here, multiply whole
    // columns or the whole matrix and cancel exactly in the next column or
    // row normalisation (or the final x B), so only rounding differs and
    // nothing overflows. No gradient (the teacher's targets).
    // max (C) = the largest value of each column of x (rows, C); NaN where
    // the column holds one; -inf when rows is 0.
    void (*column_max)(Backend *backend, size_t rows, int channels, const float *x, float *max);
    // q (rows, C) = exp(scale (x - max[c])) for scale > 0, max (C) the
    // column maxima of every rank's x (so q <= 1). q may not alias x.
    void (*sinkhorn_exp)(Backend *backend, int rows, int channels, const float *x, float scale,
                         const float *max, float *q);
    // One iteration on q (rows, C) in place, column_sum (C) the column sums
    // of every rank's q: each entry divided by its column's sum (rounded to
    // fp32), then each row by its own sum; a sum of 0 gives zeros (a row
    // of padding zeroed after sinkhorn_exp stays zero, not NaN).
    void (*sinkhorn_normalize)(Backend *backend, int rows, int channels, const float *column_sum,
                               float *q);
    // KoLeo's nearest neighbours of L2-normalised rows y (rows, D) (lightly's
    // KoLeoLoss): neighbor[i] (int32) = the first j != i with the largest
    // <y_i, y_j> (i itself when rows is 1); distance[i] = ||y_i -
    // y_neighbor + eps||_2 (PyTorch's PairwiseDistance adds eps to the
    // difference); log_distance[i] = log(distance[i] + eps). All (rows) =.
    void (*koleo_forward)(Backend *backend, int rows, int dim, const float *y, float eps,
                          int32_t *neighbor, float *distance, float *log_distance);
    // dy (rows, D) = the gradient of dlog * sum_i log_distance[i] through the
    // distances of koleo_forward (neighbours fixed): row i gets g_i diff_i
    // and its neighbour -g_i diff_i, with diff_i = y_i - y_neighbor + eps and
    // g_i = dlog / ((distance_i + eps) distance_i) (0 where distance_i = 0).
    void (*koleo_backward)(Backend *backend, int rows, int dim, const float *y,
                           const int32_t *neighbor, const float *distance, float eps, float dlog,
                           float *dy);
    // DINOv31's PaKA loss, lightly's PatchKernelAlignmentLoss with every
    // token valid, per image i of student and teacher (images, tokens, D):
    // K = Z Z^T (tokens, tokens), A = H K_s H and B = H K_t H (double
    // centring: K_jk - row mean j - column mean k + total mean), hsic_st =
    // <A, B>_F, hsic_ss = <A, A>_F, hsic_tt = <B, B>_F, na = sqrt(max(hsic_ss,
    // CKA_EPS)), nb likewise, cka_i = hsic_st / (na nb).
    // loss[0] (one float, =) = the sum of image_weight[i] (1 - cka_i) in a
    // fixed image order; dstudent (images, tokens, D) = its gradient,
    // image_weight[i] -2 G Z_s with G = B / (na nb) - hsic_st A / (na^3 nb),
    // the second term 0 where hsic_ss < CKA_EPS (the clamp holds na constant;
    // PyTorch's clamp passes the gradient at equality). The teacher gets no
    // gradient. An image of weight 0 is skipped (its rows are not read, its
    // dstudent rows are 0): padding images give no NaN. image_weight
    // (images) in backend memory; 1 <= tokens <= CKA_MAX_TOKENS. Deterministic:
    // the same bits on every run.
    void (*cka_loss)(Backend *backend, int images, int tokens, int dim, const float *student,
                     const float *teacher, const float *image_weight, float *loss,
                     float *dstudent);

    // ---- YOLO (Ultralytics): SiLU -------------------------------------------------
    // y (n) = x sigmoid(x) = x / (1 + exp(-x)) (torch.nn.SiLU); y may alias x
    // (element by element).
    void (*silu_forward)(Backend *backend, size_t n, const Act *x, Act *y);
    // dx (n) = dy s (1 + x (1 - s)), s = sigmoid(x), x the forward input; dx may
    // alias dy or x.
    void (*silu_backward)(Backend *backend, size_t n, const Act *x, const Act *dy, Act *dx);

    // ---- input ---------------------------------------------------------------------
    // y (n_pixels, 3) = (x / 255 - mean[c]) / std[c], x uint8 (n_pixels, 3) in backend memory
    void (*normalize_u8)(Backend *backend, size_t pixels, const uint8_t *x, const float mean[3],
                         const float std[3], Act *y);
    // y (n_pixels, C) = (x - mean[c]) / std[c], x float (n_pixels, C) in backend memory (the
    // deep path's views: docs/input-pipeline.md "Depth and channels"); mean, std: host
    // arrays of C <= 64 values
    void (*normalize_f32)(Backend *backend, size_t pixels, int channels, const float *x,
                          const float *mean, const float *std, Act *y);

    // ---- reporting -----------------------------------------------------------------
    // One line for train.log on which of its paths the plans made so far
    // take where a backend has several (cuda: cuDNN's fused graphs or their
    // fallbacks, and why); NULL where there is one path.
    void (*describe_paths)(const Backend *backend, char *text, size_t size);
    // The device memory the program holds (what alloc gave out and the
    // plans' workspace), now and at most so far, in bytes (the
    // device_stats_monitor's scalars); NULL where memory is the host's.
    void (*memory_counts)(const Backend *backend, size_t *allocated, size_t *peak);
} BackendOps;

struct Backend {
    const char *name;  // "ref", "cpu", "cuda"
    char device[160];  // what it runs on, for logs: "GPU 0: NVIDIA H100 80GB HBM3"; "" for CPUs
    BackendOps op;
    ComputeDtype compute_dtype; // COMPUTE_F32 unless backend_set_compute_dtype changed it
    size_t act_element_bytes; // bytes of one Act element: 4 (fp32) or 2 (fp16, bf16)
    int threads;       // CPU threads the backend may use
    long staging_steps; // steps marked by staging_step_begin (backend/staging.h); 0: none
    void *impl;        // backend-private state
    void (*destroy)(Backend *backend);
};

// name: "ref" or "cpu" (and "cuda" in CUDA builds). threads <= 0: all usable
// cores. NULL with a message when the backend is unknown or unavailable.
Backend *backend_create(const char *name, int threads, ErrorMessage *err);
void backend_destroy(Backend *backend);
// Sets the dtype activations are stored in, before anything is allocated
// on the backend. `ref` takes every dtype: it keeps fp32 storage and rounds
// each value an op writes into an Act to the dtype (round to nearest even,
// fp16 overflow to infinity, subnormals kept), the oracle of a 16-bit GPU
// step; `cuda` every dtype, storing fp16 / bf16 activations in 2 bytes
// (act_element_bytes 2); `cpu` fp32 only: -1 with a message otherwise.
int backend_set_compute_dtype(Backend *backend, ComputeDtype dtype, ErrorMessage *err);
// "fp32", "fp16", "bf16".
const char *compute_dtype_name(ComputeDtype dtype);

// The backend for --accelerator: "cpu" gives `cpu_backend` ("cpu", or "ref"
// for tests); "gpu" the cuda backend on GPU `gpu` (0-based among the visible
// ones), or NULL with the reason (no usable GPU, a build without CUDA);
// "auto" the cuda backend when that GPU works, else `cpu_backend`. `why` (size bytes) says what was chosen and
// why, for train.log ("GPU 0: NVIDIA H100 80GB HBM3", "no usable GPU:
// CUDA driver version is insufficient ...").
Backend *backend_choose(const char *accelerator, const char *cpu_backend, int gpu, int threads,
                        char *why, size_t size, ErrorMessage *err);
// The number of usable GPUs (CUDA_VISIBLE_DEVICES honoured); 0 with the
// reason in `why` (no driver, no device, GPU libraries this build cannot
// use, a build without CUDA).
int backend_gpu_count(char *why, size_t size);

// The GPU libraries this process loads, in one line for logs and --version
// (versions and files: cuda_backend.h cuda_libraries_describe); -1 with
// one line naming what was loaded and what this build needs when it cannot
// use them (then `text` still describes them where they could be read).
// CPU builds: "none (CPU build)", 0.
int backend_gpu_libraries(char *text, size_t size, ErrorMessage *err);

// Bytes of n activation elements.
static inline size_t act_bytes(const Backend *backend, size_t n) {
    return n * backend->act_element_bytes;
}
// The activation `elements` elements after base.
static inline Act *act_at(const Backend *backend, Act *base, size_t elements) {
    return (Act *)((char *)base + act_bytes(backend, elements));
}
static inline const Act *act_at_const(const Backend *backend, const Act *base, size_t elements) {
    return (const Act *)((const char *)base + act_bytes(backend, elements));
}

// Reads one float result of a reduction back to the host.
float backend_read_scalar(Backend *backend, const float *device_value);
// 1 when this build has the cuda backend (it may still find no GPU at run time).
int backend_cuda_built(void);
// The libraries the cuda backend opens at run time (it links none of them):
// up to `max` pairs of a name ("cuDNN") and a soname ("libcudnn.so.9");
// returns how many (0 in a build without the cuda backend).
int backend_cuda_libraries(const char **names, const char **files, int max);

#endif
