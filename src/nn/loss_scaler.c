// Dynamic loss scaling (see loss_scaler.h): the state around the backend's
// amp_update op.
#include "nn/loss_scaler.h"

#include <math.h>

enum { STATE_SCALE, STATE_GOOD_STEPS, STATE_INVERSE, STATE_FLOATS };

LossScalerConfig loss_scaler_config_default(void) {
    return (LossScalerConfig){
        .initial_scale = 65536.0f, .growth = 2.0f, .backoff = 0.5f, .growth_interval = 2000};
}

static void upload_state(LossScaler *scaler, float scale, int good_steps) {
    const float host[STATE_FLOATS] = {scale, (float)good_steps, (float)(1.0 / (double)scale)};
    scaler->backend->op.upload(scaler->backend, scaler->state, host, sizeof host);
}

int loss_scaler_init(LossScaler *scaler, Backend *backend, const LossScalerConfig *config,
                     ErrorMessage *err) {
    *scaler = (LossScaler){.backend = backend, .config = *config};
    if (!(config->initial_scale > 0 && isfinite(config->initial_scale)) ||
        !(config->growth > 1) || !(config->backoff > 0 && config->backoff < 1) ||
        config->growth_interval < 1) {
        error_set(err, "loss scaler: invalid configuration (scale %g, growth %g, backoff %g, "
                       "interval %d)",
                  config->initial_scale, config->growth, config->backoff,
                  config->growth_interval);
        return -1;
    }
    scaler->state = backend->op.alloc(backend, STATE_FLOATS * sizeof(float));
    if (!scaler->state) {
        error_set(err, "loss scaler: out of %s memory", backend->name);
        return -1;
    }
    upload_state(scaler, config->initial_scale, 0);
    return 0;
}

void loss_scaler_free(LossScaler *scaler) {
    if (scaler->state) scaler->backend->op.free(scaler->backend, scaler->state);
    scaler->state = NULL;
}

const float *loss_scaler_scale(const LossScaler *scaler) {
    return scaler->state + STATE_SCALE;
}

const float *loss_scaler_unscale(const LossScaler *scaler) {
    return scaler->state + STATE_INVERSE;
}

void loss_scaler_update(LossScaler *scaler, const float *found) {
    scaler->backend->op.amp_update(scaler->backend, scaler->state, found,
                                   scaler->config.growth_interval, scaler->config.growth,
                                   scaler->config.backoff);
}

LossScalerState loss_scaler_read(const LossScaler *scaler) {
    float host[STATE_FLOATS];
    scaler->backend->op.download(scaler->backend, host, scaler->state, sizeof host);
    return (LossScalerState){.scale = host[STATE_SCALE],
                             .good_steps = (int)host[STATE_GOOD_STEPS]};
}

int loss_scaler_restore(LossScaler *scaler, float scale, int good_steps, ErrorMessage *err) {
    if (!(scale > 0 && isfinite(scale)) || good_steps < 0 ||
        good_steps >= scaler->config.growth_interval) {
        error_set(err, "loss scaler: checkpoint state out of range (scale %g, good steps %d)",
                  scale, good_steps);
        return -1;
    }
    upload_state(scaler, scale, good_steps);
    return 0;
}
