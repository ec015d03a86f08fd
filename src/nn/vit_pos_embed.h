// Resampling of a ViT's position-embedding grid to another patch grid, as
// DINOv2, timm and Hugging Face transformers do it with
// torch.nn.functional.interpolate(mode="bicubic", align_corners=False):
//
// - VIT_POS_INTERP_OFFSET: DINOv2's interpolate_pos_encoding with
//   interpolate_offset 0.1 and no antialias (its default, and what
//   transformers' Dinov2Model does): scale_factor = (n + 0.1) / M, so the
//   sampling positions are src = (dst + 0.5) M / (n + 0.1) - 0.5, with
//   PyTorch's bicubic convolution (a = -0.75) and clamped (replicated) borders.
// - VIT_POS_INTERP_ANTIALIAS: size = (n_h, n_w) with antialias=True: what
//   DINOv2's register models (interpolate_offset 0, interpolate_antialias
//   True) and timm's dynamic_img_size (resample_abs_pos_embed) do: PyTorch's
//   separable antialiased bicubic (PIL's filter, a = -0.5, widened by the
//   scale when shrinking, weights renormalised at the borders).
// - VIT_POS_INTERP_BICUBIC: size = (n_h, n_w), bicubic (a = -0.75) without
//   antialias or offset: what LightlyTrain's interpolate_pos_embed_hook does
//   to a checkpoint whose grid differs from the model's when loading it
//   (vit_weights.c resizes such files this way).
//
// Both are linear maps, separable over the two axes: a (n, M) weight matrix
// per axis, and the grid map is their Kronecker product. The model applies
// it with a GEMM, forward (pos_new = W pos) and backward (dpos += W^T dpos_new).
#ifndef LTC_NN_VIT_POS_EMBED_H
#define LTC_NN_VIT_POS_EMBED_H

#include "util/error.h"

typedef enum VitPosInterpolation {
    VIT_POS_INTERP_OFFSET,
    VIT_POS_INTERP_ANTIALIAS,
    VIT_POS_INTERP_BICUBIC,
} VitPosInterpolation;

// "offset" / "antialias" / "bicubic".
const char *vit_pos_interpolation_name(VitPosInterpolation mode);
int vit_pos_interpolation_parse(const char *name, VitPosInterpolation *mode, ErrorMessage *err);

// weights (out, in) = the weight of input position i in output position o
// along one axis of `in` positions resampled to `out` (double, as PyTorch's
// float64 path computes them).
int vit_pos_axis_weights(VitPosInterpolation mode, int in, int out, double *weights,
                         ErrorMessage *err);

// matrix (out_h * out_w, in * in) = the grid map from a square in x in grid
// (row-major positions, as the patch tokens) to out_h x out_w, as floats.
int vit_pos_grid_matrix(VitPosInterpolation mode, int in, int out_h, int out_w, float *matrix,
                        ErrorMessage *err);

#endif
