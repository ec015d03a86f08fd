// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3").
#include "util/rng.h"

#include <math.h>

static void philox_round(uint32_t c[4], const uint32_t k[2]) {
    const uint64_t p0 = (uint64_t)0xD2511F53u * c[0];
    const uint64_t p1 = (uint64_t)0xCD9E8D57u * c[2];
    const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t out[4] = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    c[0] = out[0]; c[1] = out[1]; c[2] = out[2]; c[3] = out[3];
}

void philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c[4] = {counter[0], counter[1], counter[2], counter[3]};
    uint32_t k[2] = {key[0], key[1]};
    for (int round = 0; round < 10; round++) {
        philox_round(c, k);
        k[0] += 0x9E3779B9u;
        k[1] += 0xBB67AE85u;
    }
    for (int i = 0; i < 4; i++) out[i] = c[i];
}

Rng rng_make(uint64_t seed, uint32_t epoch, uint64_t sample_index, uint32_t stream) {
    Rng rng = {
        .key = {(uint32_t)seed, (uint32_t)(seed >> 32)},
        .counter = {0, stream, (uint32_t)sample_index,
                    epoch ^ ((uint32_t)(sample_index >> 32) * 0x85EBCA6Bu)},
        .used = 4,
    };
    return rng;
}

uint32_t rng_u32(Rng *rng) {
    if (rng->used == 4) {
        philox4x32_10(rng->counter, rng->key, rng->block);
        rng->counter[0]++;
        rng->used = 0;
    }
    return rng->block[rng->used++];
}

float rng_uniform(Rng *rng) { return (float)(rng_u32(rng) >> 8) * (1.0f / 16777216.0f); }

float rng_range(Rng *rng, float low, float high) {
    return low + (high - low) * rng_uniform(rng);
}

uint32_t rng_below(Rng *rng, uint32_t n) {
    // Lemire's multiply-shift with rejection of the biased low range.
    uint64_t m = (uint64_t)rng_u32(rng) * n;
    uint32_t low = (uint32_t)m;
    if (low < n) {
        const uint32_t threshold = (uint32_t)(-n) % n;
        while (low < threshold) {
            m = (uint64_t)rng_u32(rng) * n;
            low = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

int rng_bernoulli(Rng *rng, float p) { return rng_uniform(rng) < p; }

void rng_normal_pair(Rng *rng, float pair[2]) {
    // u1 in (0, 1] so the log is finite; computed in double for the tails.
    const double u1 = ((double)(rng_u32(rng) >> 8) + 1.0) * (1.0 / 16777216.0);
    const double u2 = (double)(rng_u32(rng) >> 8) * (1.0 / 16777216.0);
    const double radius = sqrt(-2.0 * log(u1)), angle = 6.283185307179586 * u2;
    pair[0] = (float)(radius * cos(angle));
    pair[1] = (float)(radius * sin(angle));
}

float rng_normal(Rng *rng) {
    float pair[2];
    rng_normal_pair(rng, pair);
    return pair[0];
}
