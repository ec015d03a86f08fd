// DINOv3's rotary position embedding (RoPE) for the ViT (vit.h): the
// periods, the patch coordinates and the sin / cos tables that the backend's
// rope_forward / rope_backward read. As DINOv3's RopePositionEmbedding
// (normalize_coords "separate", no shift or jitter), transformers'
// DINOv3ViTRopePositionEmbedding and timm's RotaryEmbeddingDinoV3:
//
//   periods (Dh / 4): base^(4 j / Dh), j = 0 .. Dh/4 - 1 (transformers:
//     1 / inv_freq), or the periods a DINOv3 checkpoint stores;
//   patch (y, x) of an h x w grid: coordinates cy = 2 (y + 0.5) / h - 1,
//     cx = 2 (x + 0.5) / w - 1 in [-1, 1], both times a scale s (1 in eval;
//     DINOv3's training-only rescale_coords draws s log-uniform in [1/r, r]);
//   angle of pair i < Dh/2: 2 pi s cy / periods[i] for i < Dh/4, and
//     2 pi s cx / periods[i - Dh/4] after (DINOv3 tiles these Dh/2 angles
//     twice: pair (i, i + Dh/2) shares one).
//
// Tables are computed in double and rounded once (DINOv3 computes in fp32:
// they agree to a few fp32 ulps).
#ifndef LTC_NN_VIT_ROPE_H
#define LTC_NN_VIT_ROPE_H

#include <stddef.h>
#include <stdint.h>

#include "nn/vit.h"

// periods (head_dim / 4) from the base; head_dim a multiple of 4.
void vit_rope_periods(double base, int head_dim, float *periods);

// sin, cos (h w, head_dim / 2) = the tables of an h x w patch grid (patches
// row-major), coordinates times scale.
void vit_rope_tables(const float *periods, int head_dim, int grid_h, int grid_w, double scale,
                     float *sin_table, float *cos_table);

// DINOv3's rescale draw for one block of one training forward: exp(u ln r)
// with u uniform in [-1, 1), keyed by (seed, forward, block).
double vit_rope_rescale_draw(uint64_t seed, int64_t forward, int block, double rescale);

// ---- a RoPE model's slots (vit.c, vit_blocks.c) ----

// Floats of one table (sin or cos) of the slot: grid^2 (Dh / 2).
size_t vit_rope_slot_floats(const Vit *model, const VitSlot *slot);
// Table 0 = the unscaled (eval) table, uploaded; the slot's tables are then
// those of an eval forward.
void vit_rope_upload_eval(Vit *model, VitSlot *slot);
// The tables a forward of the slot reads, first rebuilt everywhere when the
// periods buffer changed (a checkpoint loaded into it): unscaled for an
// eval forward (or without rope_rescale); for a training forward one table per block, each
// with its rescale draw keyed by (seed, training_forwards (vit_set_draw_key),
// block).
// Call before the forward counts itself.
void vit_rope_prepare_forward(Vit *model, VitSlot *slot, int training);
// Block `block`'s tables of the slot's last forward (its backward reads the same).
// (vit_set_rope_periods, vit.h, writes the buffer and rebuilds the tables.)
void vit_rope_block_tables(const Vit *model, const VitSlot *slot, int block,
                           const float **sin_table, const float **cos_table);

#endif
