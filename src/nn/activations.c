// Activation arena layout (see activations.h).
#include "nn/activations.h"

#define ACTIVATION_ALIGN_BYTES 64

static void *take_bytes(ActivationArena *arena, size_t bytes) {
    void *slice = arena->base ? arena->base + arena->used : NULL;
    arena->used += (bytes + ACTIVATION_ALIGN_BYTES - 1) / ACTIVATION_ALIGN_BYTES *
                   ACTIVATION_ALIGN_BYTES;
    return slice;
}

Act *activation_take(ActivationArena *arena, size_t elements) {
    return take_bytes(arena, elements * arena->act_element_bytes);
}

float *activation_take_float(ActivationArena *arena, size_t count) {
    return take_bytes(arena, count * sizeof(float));
}

int32_t *activation_take_int32(ActivationArena *arena, size_t count) {
    return take_bytes(arena, count * sizeof(int32_t));
}
