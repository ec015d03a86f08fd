// The LARS, step gate, loss-scaling and scalar ops, the host slots and the
// data-to-the-device ops of the host-memory backends (see host_ops.h): the elementwise work goes
// through the backend's own ops (axpby), so the cpu backend keeps its
// threads.
#include "backend/host_ops.h"

#include <stdlib.h>
#include <string.h>

#include "backend/scalar_rules.h"

void host_lars_direction(Backend *backend, size_t n, const float *param, const float *grad,
                         const float *gate, const float *sums, float weight_decay, float trust,
                         float eps, float *out) {
    if (gate[GATE_SKIP] != 0.0f) return;
    const float multiplier = gate[GATE_MULTIPLIER];
    float ratio = 0;
    backend->op.axpby(backend, n, multiplier, grad, 0.0f, out);
    if (!lars_ratio_rule(sums, multiplier, weight_decay, trust, eps, &ratio)) return;
    backend->op.axpby(backend, n, weight_decay, param, 1.0f, out);
    // In place (x = y): axpby is elementwise, so aliasing is safe.
    backend->op.axpby(backend, n, ratio, out, 0.0f, out);
}

void host_amp_update(Backend *backend, float *state, const float *found, int growth_interval,
                     float growth, float backoff) {
    amp_update_rule(state, *found, growth_interval, growth, backoff);
}

void host_step_gate(Backend *backend, float *gate, int groups, float scale, const float *unscale,
                    float max_norm) {
    step_gate_rule(gate, groups, unscale ? scale * *unscale : scale, max_norm);
}

void host_scalar_combine(Backend *backend, float alpha, const float *a, float beta,
                         const float *b, float divisor, float *y) {
    *y = scalar_combine_rule(alpha, *a, beta, b, divisor);
}

void host_batchnorm_statistics_from_sums(Backend *backend, int channels, size_t total_rows,
                                         const float *sums, float *mean, float *squares) {
    for (int c = 0; c < channels; c++)
        batchnorm_sums_rule(sums[c], sums[channels + c], total_rows, &mean[c], &squares[c]);
}

void host_sgd_update_segments(Backend *backend, int count, const UpdateSegment *segments,
                              float *params, const float *grads, const float *gate,
                              float *momentum_buffers, float lr, float momentum,
                              float weight_decay, int nesterov, int first_step) {
    for (int i = 0; i < count; i++) {
        const UpdateSegment *s = &segments[i];
        backend->op.sgd_update(backend, s->count, params + s->offset, grads + s->offset, gate,
                               momentum_buffers + s->offset, lr * s->lr_scale, momentum,
                               s->decays ? weight_decay : 0.0f, nesterov, first_step);
    }
}

void host_adamw_update_segments(Backend *backend, int count, const UpdateSegment *segments,
                                float *params, const float *grads, const float *gate, float *m,
                                float *v, float lr, double beta1, double beta2, float eps,
                                float weight_decay, const float *step) {
    for (int i = 0; i < count; i++) {
        const UpdateSegment *s = &segments[i];
        backend->op.adamw_update(backend, s->count, params + s->offset, grads + s->offset, gate,
                                 m + s->offset, v + s->offset, lr * s->lr_scale, beta1, beta2,
                                 eps, s->decays ? weight_decay : 0.0f, step);
    }
}

// ---- host slots: the copy is done when fill returns -----------------------------------

struct HostSlot {
    size_t bytes;
    unsigned char data[];
};

HostSlot *host_slot_create(Backend *backend, size_t bytes, ErrorMessage *err) {
    HostSlot *slot = malloc(sizeof *slot + (bytes ? bytes : 1));
    if (!slot) {
        error_set(err, "out of host memory for a %zu-byte host slot", bytes);
        return NULL;
    }
    slot->bytes = bytes;
    return slot;
}

void host_slot_free(Backend *backend, HostSlot *slot) { free(slot); }

void host_slot_fill(Backend *backend, HostSlot *slot, const void *device, size_t bytes) {
    memcpy(slot->data, device, bytes < slot->bytes ? bytes : slot->bytes);
}

const void *host_slot_wait(Backend *backend, HostSlot *slot) { return slot->data; }

// ---- data to the device: the copy is done when upload_async returns ----------------

void *host_alloc(Backend *backend, size_t bytes) {
    const size_t rounded = (bytes + 63) & ~(size_t)63;  // aligned_alloc wants a multiple
    return aligned_alloc(64, rounded ? rounded : 64);
}

void host_free(Backend *backend, void *pointer) { free(pointer); }

// Nothing to hold: every copy is complete, so the marks order nothing.
struct Transfer {
    int unused;  // (a C struct needs a member)
};

Transfer *host_transfer_create(Backend *backend, ErrorMessage *err) {
    Transfer *transfer = calloc(1, sizeof *transfer);
    if (!transfer) error_set(err, "out of host memory for a transfer");
    return transfer;
}

void host_transfer_free(Backend *backend, Transfer *transfer) { free(transfer); }

void host_upload_async(Backend *backend, Transfer *transfer, void *device, const void *host,
                       size_t bytes) {
    if (bytes) memcpy(device, host, bytes);
}

// transfer_device_wait, transfer_consumed, transfer_host_wait: the copies
// are complete and the compute ops ran when they returned.
void host_transfer_mark(Backend *backend, Transfer *transfer) {}

void host_upload_ordered(Backend *backend, void *device, const void *host, size_t bytes) {
    if (bytes) memcpy(device, host, bytes);
}

// The ops ran when they returned: every fence has passed.
struct Fence {
    int unused;  // (a C struct needs a member)
};

Fence *host_fence_create(Backend *backend, ErrorMessage *err) {
    Fence *fence = calloc(1, sizeof *fence);
    if (!fence) error_set(err, "out of host memory for a fence");
    return fence;
}

void host_fence_free(Backend *backend, Fence *fence) { free(fence); }

// fence_record and fence_wait: nothing to mark or wait for.
void host_fence_mark(Backend *backend, Fence *fence) {}

int host_fence_passed(Backend *backend, Fence *fence) { return 1; }

struct DeviceTimer {
    int unused;  // (a C struct needs a member)
};

DeviceTimer *host_timer_create(Backend *backend, ErrorMessage *err) {
    DeviceTimer *timer = calloc(1, sizeof *timer);
    if (!timer) error_set(err, "out of host memory for a timer");
    return timer;
}

void host_timer_free(Backend *backend, DeviceTimer *timer) { free(timer); }

void host_timer_mark(Backend *backend, DeviceTimer *timer, int end) {}

double host_timer_seconds(Backend *backend, DeviceTimer *timer) { return -1.0; }
