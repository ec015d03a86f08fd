// Activation arena layout: a model lays out every tensor its backward needs
// (and its forward scratch) by taking consecutive, 64-byte aligned slices of
// one backend allocation. The layout code runs twice: first with no base
// (a sizing pass: slices are NULL, only the size is counted), then with the
// allocated base (the same calls now return the real pointers). One
// function thus both sizes and wires the arena, so the two cannot drift.
//
// Slices are typed: activations (Act, the backend's compute dtype, see
// backend.h), fp32 (saved statistics) and int32 (max-pool argmax).
#ifndef LTC_NN_ACTIVATIONS_H
#define LTC_NN_ACTIVATIONS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

typedef struct ActivationArena {
    char *base;                // NULL during the sizing pass
    size_t used;               // bytes taken so far (each slice rounded up to 64 bytes)
    size_t act_element_bytes;  // the backend's
} ActivationArena;

static inline ActivationArena activation_arena_begin(const Backend *backend, void *base) {
    return (ActivationArena){.base = base, .used = 0,
                             .act_element_bytes = backend->act_element_bytes};
}

// Takes `elements` activations; NULL in the sizing pass.
Act *activation_take(ActivationArena *arena, size_t elements);
// Takes `count` floats (fp32 whatever the compute dtype).
float *activation_take_float(ActivationArena *arena, size_t count);
// Takes `count` int32 values.
int32_t *activation_take_int32(ActivationArena *arena, size_t count);

#endif
