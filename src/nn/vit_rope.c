// DINOv3's RoPE periods, coordinates and sin / cos tables (see vit_rope.h).
#include "nn/vit_rope.h"

#include <math.h>
#include <string.h>

#include "util/rng.h"

// The rescale draws' stream (drop path uses 0x445000xx).
#define VIT_ROPE_RESCALE_STREAM 0x52500000u

void vit_rope_periods(double base, int head_dim, float *periods) {
    const int count = head_dim / 4;
    for (int j = 0; j < count; j++)
        periods[j] = (float)pow(base, 2.0 * j / (head_dim / 2.0));
}

void vit_rope_tables(const float *periods, int head_dim, int grid_h, int grid_w, double scale,
                     float *sin_table, float *cos_table) {
    const int quarter = head_dim / 4, half = head_dim / 2;
    const double two_pi = 2.0 * M_PI;
    for (int y = 0; y < grid_h; y++)
        for (int x = 0; x < grid_w; x++) {
            const double coordinate[2] = {scale * (2.0 * (y + 0.5) / grid_h - 1.0),
                                          scale * (2.0 * (x + 0.5) / grid_w - 1.0)};
            const size_t row = ((size_t)y * grid_w + x) * half;
            for (int i = 0; i < half; i++) {
                const double angle = two_pi * coordinate[i / quarter] / periods[i % quarter];
                sin_table[row + i] = (float)sin(angle);
                cos_table[row + i] = (float)cos(angle);
            }
        }
}

double vit_rope_rescale_draw(uint64_t seed, int64_t forward, int block, double rescale) {
    Rng rng = rng_make(seed, (uint32_t)forward, (uint64_t)block, VIT_ROPE_RESCALE_STREAM);
    const double u = 2.0 * rng_uniform(&rng) - 1.0;
    return exp(u * log(rescale));
}

// ---- a RoPE model's slots ------------------------------------------------------------

size_t vit_rope_slot_floats(const Vit *model, const VitSlot *slot) {
    const VitConfig *c = &model->config;
    return (size_t)slot->grid * slot->grid * (c->embed_dim / c->heads / 2);
}

// Builds the slot's tables in staging memory and queues their copies: one unscaled
// table, or (rescaled) one per block with the block's draw.
static void upload_tables(Vit *model, VitSlot *slot, int rescaled) {
    const VitConfig *c = &model->config;
    const size_t floats = vit_rope_slot_floats(model, slot);
    const int tables = rescaled ? c->depth : 1;
    float *sin_host = staging_take(&model->rope_staging);
    float *cos_host = sin_host + (size_t)tables * floats;
    for (int t = 0; t < tables; t++) {
        const double scale =
            rescaled ? vit_rope_rescale_draw(model->seed, model->training_forwards, t,
                                             c->rope_rescale)
                     : 1.0;
        vit_rope_tables(model->rope_periods, c->embed_dim / c->heads, slot->grid, slot->grid,
                        scale, sin_host + t * floats, cos_host + t * floats);
    }
    staging_upload(&model->rope_staging, slot->rope_sin, sin_host,
                   (size_t)tables * floats * sizeof(float));
    staging_upload(&model->rope_staging, slot->rope_cos, cos_host,
                   (size_t)tables * floats * sizeof(float));
}

void vit_rope_upload_eval(Vit *model, VitSlot *slot) {
    upload_tables(model, slot, 0);
    slot->rope_scaled = 0;
}

// Periods (Dh / 4 of them) into the host copy, and every slot's eval tables
// rebuilt from them.
static void use_periods(Vit *model, const float *periods) {
    const VitConfig *c = &model->config;
    memcpy(model->rope_periods, periods, (size_t)(c->embed_dim / c->heads / 4) * sizeof(float));
    for (int i = 0; i < model->slot_count; i++) vit_rope_upload_eval(model, &model->slots[i]);
}

void vit_rope_prepare_forward(Vit *model, VitSlot *slot, int training) {
    const VitConfig *c = &model->config;
    // The periods buffer may have been written since (a weights or
    // checkpoint load, a copy from another model): the tables follow it. Read
    // back only then (a host wait), not at every forward.
    if (model->buffers.writes != model->periods_writes_seen) {
        const Parameter *buffer = &model->buffers.params[model->periods_index];
        model->backend->op.download(model->backend, model->rope_periods_seen, buffer->value,
                                    buffer->count * sizeof(float));
        if (memcmp(model->rope_periods_seen, model->rope_periods, buffer->count * sizeof(float)))
            use_periods(model, model->rope_periods_seen);
        model->periods_writes_seen = model->buffers.writes;
    }
    if (!training || c->rope_rescale <= 0.0f || slot->rope_tables < c->depth) {
        if (slot->rope_scaled) vit_rope_upload_eval(model, slot);
        return;
    }
    upload_tables(model, slot, 1);
    slot->rope_scaled = 1;
}

void vit_rope_block_tables(const Vit *model, const VitSlot *slot, int block,
                           const float **sin_table, const float **cos_table) {
    const size_t offset = slot->rope_scaled ? (size_t)block * vit_rope_slot_floats(model, slot) : 0;
    *sin_table = slot->rope_sin + offset;
    *cos_table = slot->rope_cos + offset;
}

int vit_set_rope_periods(Vit *model, const float *periods, ErrorMessage *err) {
    const VitConfig *c = &model->config;
    if (!c->rope) return error_set(err, "%s has no RoPE periods", c->name);
    const int count = c->embed_dim / c->heads / 4;
    for (int j = 0; j < count; j++)
        if (!(periods[j] > 0.0f && isfinite(periods[j])))
            return error_set(err, "RoPE period %d is %g (positive and finite needed)", j,
                             (double)periods[j]);
    const Parameter *buffer = &model->buffers.params[model->periods_index];
    model->backend->op.upload(model->backend, buffer->value, periods, count * sizeof(float));
    use_periods(model, periods);
    return 0;
}
