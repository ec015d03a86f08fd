// Ops whose implementation is the same for every backend that keeps its
// tensors in host memory (ref and cpu): small state updates where a second
// copy would only be a twin. The data-dependent scalars come from
// scalar_rules.h, shared with the CUDA kernels. Signatures and semantics as in backend.h.
#ifndef LTC_BACKEND_HOST_OPS_H
#define LTC_BACKEND_HOST_OPS_H

#include "backend/backend.h"

void host_lars_direction(Backend *backend, size_t n, const float *param, const float *grad,
                         const float *gate, const float *sums, float weight_decay, float trust,
                         float eps, float *out);
void host_step_gate(Backend *backend, float *gate, int groups, float scale, float max_norm);
void host_amp_unscale(Backend *backend, size_t n, float *grad, const float *state, float *found);
void host_amp_update(Backend *backend, float *state, const float *found, int growth_interval,
                     float growth, float backoff);

#endif
