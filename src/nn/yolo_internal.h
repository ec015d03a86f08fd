// What yolo.c (structure, memory) and yolo_blocks.c (forward, backward)
// share: the per-slot state of the backbone's convs, inner blocks and
// layers (yolo.h).
#ifndef LTC_NN_YOLO_INTERNAL_H
#define LTC_NN_YOLO_INTERNAL_H

#include "nn/yolo.h"

// name (PARAM_MAX_NAME bytes) = the formatted text, cut where longer
// (yolo_declare.c).
void yolo_name_format(char *name, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

struct YoloConvState {
    const Act *input;        // the last forward's input (backward reads it)
    Act *conv_out;           // (N, H, W, Cout): the norm's input
    Act *out;                // the unit's output: silu(bn(conv_out)), or bn(conv_out) (the
                             // norm's output alone is not kept: the fused backward recomputes it)
    float *mean, *inv_std;   // (Cout) the norm's batch statistics
    int height, width;       // output size
};

struct YoloInnerState {
    int height, width;
    Act *cat;                // C3k: (N, H, W, 2 hidden)
    Act *packed;             // PSA, ABlock: (N, H W, 3, heads, head_dim), q and k zero-padded
    Act *attention_out;      // PSA: (N, H W, C)
    Act *v;                  // PSA: (N, H, W, C) the values as an image (pe's input)
    float *lse;              // PSA: (N, heads, H W)
    Act *grad[6];            // backward arena, by block kind (yolo_blocks.c)
};

struct YoloModuleState {
    int height, width;       // output size
    Act *cat;                // C2f / C3k2 / SPPF / C2PSA: the concat before cv2 (C3: cv3)
    Act *split;              // C2f / C3k2 / C2PSA: cv1's second half, contiguous
    Act *pool[3];            // SPPF: the three max pools' outputs
    int32_t *argmax[3];
    Act *residual;           // A2C2f with gamma: x + gamma * cv2's output
    Act *out;                // the layer's output (a conv's out)
    Act *grad[5];            // backward arena, by layer kind (yolo_blocks.c)
};

#endif
