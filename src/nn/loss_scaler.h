// Dynamic loss scaling for 16-bit mixed precision, with the semantics of
// PyTorch's torch.amp.GradScaler (the one Lightning's "16-mixed" uses):
// the loss gradient is multiplied by the scale (65536 at the start), the
// gradients are unscaled and checked for NaN/inf in one pass, a step with
// any is skipped and halves the scale, and 2000 good steps in a row double
// it (when the doubled scale is finite).
//
// All of it stays in backend memory: the scale, the good-step counter and
// the NaN/inf count are device floats, so a GPU step needs no host round
// trip; the host reads them back only to log (loss_scaler_read).
#ifndef LTC_NN_LOSS_SCALER_H
#define LTC_NN_LOSS_SCALER_H

#include <stddef.h>

#include "backend/backend.h"
#include "util/error.h"

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
    float *state;  // backend memory, 4 floats: scale, good steps, 1/scale, NaN/inf count
} LossScaler;

int loss_scaler_init(LossScaler *scaler, Backend *backend, const LossScalerConfig *config,
                     ErrorMessage *err);
void loss_scaler_free(LossScaler *scaler);

// The scale, one float in backend memory: what the loss gradient (the seed
// of the backward pass) is multiplied by.
const float *loss_scaler_scale(const LossScaler *scaler);
// Before a step's first unscale: the NaN/inf count back to zero.
void loss_scaler_begin_step(LossScaler *scaler);
// grad (n floats) /= scale, counting its NaN/inf values; once per gradient
// tensor (or arena) of the step.
void loss_scaler_unscale(LossScaler *scaler, size_t n, float *grad);
// The NaN/inf count of the step so far, one float in backend memory: a
// fused optimizer step skips its update when it is > 0.
const float *loss_scaler_found(const LossScaler *scaler);
// After the step: back off or grow the scale (see the top of this file).
void loss_scaler_update(LossScaler *scaler);

// Host copies, for logging and checkpoints (a device synchronisation).
typedef struct LossScalerState {
    float scale;
    int good_steps;  // GradScaler's growth tracker
    int skipped;     // the last step held NaN/inf gradients (its update was skipped)
} LossScalerState;
LossScalerState loss_scaler_read(const LossScaler *scaler);
// Restores scale and good steps (a checkpoint's); -1 with err when the scale
// is not a positive finite number or good steps is out of range.
int loss_scaler_restore(LossScaler *scaler, float scale, int good_steps, ErrorMessage *err);

#endif
