// Ops whose implementation is the same for every backend that keeps its
// tensors in host memory (ref and cpu): small state updates where a second
// copy would only be a twin, and host slots (plain host memory: the data is
// there when the op returns). The data-dependent scalars come from
// scalar_rules.h, shared with the CUDA kernels. Signatures and semantics as
// in backend.h.
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

HostSlot *host_slot_create(Backend *backend, size_t bytes, ErrorMessage *err);
void host_slot_free(Backend *backend, HostSlot *slot);
void host_slot_fill(Backend *backend, HostSlot *slot, const void *device, size_t bytes);
const void *host_slot_wait(Backend *backend, HostSlot *slot);

#endif
