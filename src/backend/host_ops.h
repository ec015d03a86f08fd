// Ops whose implementation is the same for every backend that keeps its
// tensors in host memory (ref and cpu): small state updates where a second
// copy would only be a twin, host slots (plain host memory: the data is
// there when the op returns) and the data-to-the-device ops (the same). The
// data-dependent scalars come from scalar_rules.h, shared with the CUDA
// kernels. Signatures and semantics as in backend.h.
#ifndef LTC_BACKEND_HOST_OPS_H
#define LTC_BACKEND_HOST_OPS_H

#include "backend/backend.h"

void host_lars_direction(Backend *backend, size_t n, const float *param, const float *grad,
                         const float *gate, const float *sums, float weight_decay, float trust,
                         float eps, float *out);
void host_step_gate(Backend *backend, float *gate, int groups, float scale, const float *unscale,
                    float max_norm);
void host_amp_update(Backend *backend, float *state, const float *found, int growth_interval,
                     float growth, float backoff);
void host_scalar_combine(Backend *backend, float alpha, const float *a, float beta,
                         const float *b, float divisor, float *y);
void host_batchnorm_statistics_from_sums(Backend *backend, int channels, size_t total_rows,
                                         const float *sums, float *mean, float *squares);
// The multi-tensor updates as a loop over the segments (in host memory) of
// the backend's own sgd_update / adamw_update.
void host_sgd_update_segments(Backend *backend, int count, const UpdateSegment *segments,
                              float *params, const float *grads, const float *gate,
                              float *momentum_buffers, float lr, float momentum,
                              float weight_decay, int nesterov, int first_step);
void host_adamw_update_segments(Backend *backend, int count, const UpdateSegment *segments,
                                float *params, const float *grads, const float *gate, float *m,
                                float *v, float lr, double beta1, double beta2, float eps,
                                float weight_decay, const float *step);

HostSlot *host_slot_create(Backend *backend, size_t bytes, ErrorMessage *err);
void host_slot_free(Backend *backend, HostSlot *slot);
void host_slot_fill(Backend *backend, HostSlot *slot, const void *device, size_t bytes);
const void *host_slot_wait(Backend *backend, HostSlot *slot);

// Data to the device on a backend whose device memory is host memory: the
// copy happens in upload_async, so the marks and waits have nothing to order.
void *host_alloc(Backend *backend, size_t bytes);
void host_free(Backend *backend, void *pointer);
Transfer *host_transfer_create(Backend *backend, ErrorMessage *err);
void host_transfer_free(Backend *backend, Transfer *transfer);
void host_upload_async(Backend *backend, Transfer *transfer, void *device, const void *host,
                       size_t bytes);
void host_transfer_mark(Backend *backend, Transfer *transfer);
void host_upload_ordered(Backend *backend, void *device, const void *host, size_t bytes);
Fence *host_fence_create(Backend *backend, ErrorMessage *err);
void host_fence_free(Backend *backend, Fence *fence);
void host_fence_mark(Backend *backend, Fence *fence);
int host_fence_passed(Backend *backend, Fence *fence);
DeviceTimer *host_timer_create(Backend *backend, ErrorMessage *err);
void host_timer_free(Backend *backend, DeviceTimer *timer);
void host_timer_mark(Backend *backend, DeviceTimer *timer, int end);
double host_timer_seconds(Backend *backend, DeviceTimer *timer);
// Their entries in a BackendOps initializer.
#define HOST_OPS_DATA_TO_DEVICE                                                               \
    .host_alloc = host_alloc, .host_free = host_free, .transfer_create = host_transfer_create, \
    .transfer_free = host_transfer_free, .upload_async = host_upload_async,                   \
    .transfer_device_wait = host_transfer_mark, .transfer_consumed = host_transfer_mark,       \
    .transfer_host_wait = host_transfer_mark, .upload_ordered = host_upload_ordered,           \
    .fence_create = host_fence_create, .fence_free = host_fence_free,                         \
    .fence_record = host_fence_mark, .fence_passed = host_fence_passed,                       \
    .fence_wait = host_fence_mark, .timer_create = host_timer_create,                         \
    .timer_free = host_timer_free, .timer_mark = host_timer_mark,                             \
    .timer_seconds = host_timer_seconds

#endif
