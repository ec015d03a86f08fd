// Counter-based random numbers (Philox4x32-10). A stream is keyed by
// (seed, epoch, sample index, stream id); every draw is a pure function of
// that key and the draw counter, so results never depend on which thread
// draws them or when, and a resumed run reproduces the same numbers.
#ifndef LTC_UTIL_RNG_H
#define LTC_UTIL_RNG_H

#include <stdint.h>

typedef struct Rng {
    uint32_t key[2];
    uint32_t counter[4];  // [0] advances per block of 4 draws
    uint32_t block[4];
    int used;  // draws taken from block (4 = empty)
} Rng;

// Stream ids used by the input pipeline (views use RNG_STREAM_VIEW + view).
enum {
    RNG_STREAM_SHUFFLE = 0,
    RNG_STREAM_REPLACE = 1,
    RNG_STREAM_VIEW = 16,
};

// The raw Philox4x32-10 block function (exposed for known-answer tests).
void philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);

Rng rng_make(uint64_t seed, uint32_t epoch, uint64_t sample_index, uint32_t stream);
uint32_t rng_u32(Rng *rng);
// Uniform in [0, 1) with 24 random bits (exactly representable floats).
float rng_uniform(Rng *rng);
// Uniform in [low, high).
float rng_range(Rng *rng, float low, float high);
// Uniform integer in [0, n) without modulo bias; n > 0.
uint32_t rng_below(Rng *rng, uint32_t n);
// True with probability p.
int rng_bernoulli(Rng *rng, float p);
// Standard normal (Box-Muller from two draws; the second variate is not kept).
float rng_normal(Rng *rng);
// Two independent standard normals from the same two draws (both Box-Muller
// variates; pair[0] equals what rng_normal would return).
void rng_normal_pair(Rng *rng, float pair[2]);

#endif
