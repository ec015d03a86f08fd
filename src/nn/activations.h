// Activation arena layout: a model lays out every tensor its backward needs
// (and its forward scratch) by taking consecutive, 64-byte aligned slices of
// one backend allocation. The layout code runs twice: first with no base
// (a sizing pass: slices are NULL, only the size is counted), then with the
// allocated base (the same calls now return the real pointers). One
// function thus both sizes and wires the arena, so the two cannot drift.
#ifndef LTC_NN_ACTIVATIONS_H
#define LTC_NN_ACTIVATIONS_H

#include <stddef.h>
#include <stdint.h>

typedef struct ActivationArena {
    float *base;  // NULL during the sizing pass
    size_t used;  // floats taken so far (each slice rounded up to 16 floats)
} ActivationArena;

static inline ActivationArena activation_arena_begin(float *base) {
    return (ActivationArena){.base = base, .used = 0};
}

// Takes `floats` floats; NULL in the sizing pass.
float *activation_take(ActivationArena *arena, size_t floats);
// Takes `count` int32 values (same size as floats: the arena is untyped backend memory).
int32_t *activation_take_int32(ActivationArena *arena, size_t count);

#endif
