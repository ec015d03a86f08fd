// Activation arena layout (see activations.h).
#include "nn/activations.h"

#define ACTIVATION_ALIGN_FLOATS 16  // 64 bytes

float *activation_take(ActivationArena *arena, size_t floats) {
    float *slice = arena->base ? arena->base + arena->used : NULL;
    arena->used += (floats + ACTIVATION_ALIGN_FLOATS - 1) / ACTIVATION_ALIGN_FLOATS *
                   ACTIVATION_ALIGN_FLOATS;
    return slice;
}

int32_t *activation_take_int32(ActivationArena *arena, size_t count) {
    _Static_assert(sizeof(int32_t) == sizeof(float), "int32 slices share the float arena");
    return (int32_t *)(void *)activation_take(arena, count);
}
