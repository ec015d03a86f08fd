// Dynamic loss scaling for 16-bit mixed precision, with the semantics of
// PyTorch's torch.amp.GradScaler (the one Lightning's "16-mixed" uses):
// the loss gradient is multiplied by the scale (65536 at the start), the
// gradients are unscaled and checked for NaN/inf, a step with any is
// skipped and halves the scale, and 2000 good steps in a row double it
// (when the doubled scale is finite).
//
// All of it stays in backend memory: the scale, the good-step counter and
// 1/scale are device floats. The unscaling and the check are the step
// gate's (nn/step_gate.h): its multiplier takes 1/scale (no pass over the
// gradients of its own; clipping sees the unscaled norm, as clip_grad_norm_
// after GradScaler.unscale_) and its skip is the NaN/inf verdict the update
// reads. So a GPU step needs no host round trip; the host reads the state
// only to log it and for checkpoints (loss_scaler_read).
//
//   method->loss_scale = loss_scaler_scale(&scaler);   // the backward's seed
//   step_gate_close(&gate, 1.0f / k, loss_scaler_unscale(&scaler), max_norm);
//   optimizer_step(...);                               // skips with the gate
//   loss_scaler_update(&scaler, step_gate_values(&gate) + GATE_SKIP);
#ifndef LTC_NN_LOSS_SCALER_H
#define LTC_NN_LOSS_SCALER_H

#include <stddef.h>

#include "backend/backend.h"
#include "util/error.h"

// A step whose gradients are non-finite at a scale of at most this one has
// diverged: its gradients overflow unscaled (the trainer stops there).
#define LOSS_SCALER_COLLAPSED 1.0f

typedef struct LossScalerConfig {
    float initial_scale;  // 65536 (2^16)
    float growth;         // 2
    float backoff;        // 0.5
    int growth_interval;  // 2000
} LossScalerConfig;

// GradScaler's defaults above.
LossScalerConfig loss_scaler_config_default(void);

typedef struct LossScaler {
    Backend *backend;
    LossScalerConfig config;
    float *state;  // backend memory, 3 floats: scale, good steps, 1/scale
} LossScaler;

int loss_scaler_init(LossScaler *scaler, Backend *backend, const LossScalerConfig *config,
                     ErrorMessage *err);
void loss_scaler_free(LossScaler *scaler);

// The scale, one float in backend memory: what the loss gradient (the seed
// of the backward pass) is multiplied by.
const float *loss_scaler_scale(const LossScaler *scaler);
// 1/scale, one float in backend memory: the step gate's unscale factor.
const float *loss_scaler_unscale(const LossScaler *scaler);
// After the step: back off (found > 0: one float of backend memory, e.g.
// the gate's GATE_SKIP) or count a good step and grow the scale (see the
// top of this file).
void loss_scaler_update(LossScaler *scaler, const float *found);

// Host copies, for logging and checkpoints (a device synchronisation).
typedef struct LossScalerState {
    float scale;
    int good_steps;  // GradScaler's growth tracker
} LossScalerState;
LossScalerState loss_scaler_read(const LossScaler *scaler);
// Restores scale and good steps (a checkpoint's); -1 with err when the scale
// is not a positive finite number or good steps is out of range.
int loss_scaler_restore(LossScaler *scaler, float scale, int good_steps, ErrorMessage *err);

#endif
