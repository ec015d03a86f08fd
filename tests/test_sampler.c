// Tests of epoch sampling: every index at most once per epoch over all ranks
// (exactly once when sizes divide), equal batch counts per rank, seeded and
// epoch-dependent order.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "data/sampler.h"
#include "util/cpu.h"

// Runs one epoch over `world` ranks; returns how often each index was seen.
static int *epoch_counts(size_t n, int batch, int world, uint64_t seed, uint32_t epoch,
                         size_t *batches_per_rank) {
    int *seen = calloc(n, sizeof *seen);
    uint32_t *indices = calloc((size_t)batch, sizeof *indices);
    for (int rank = 0; rank < world; rank++) {
        Sampler sampler;
        assert_int_equal(sampler_init(&sampler, n, batch, rank, world, seed, 1, NULL), 0);
        if (rank == 0) *batches_per_rank = sampler.batches_per_epoch;
        assert_int_equal(sampler.batches_per_epoch, *batches_per_rank);
        for (size_t b = 0; b < sampler.batches_per_epoch; b++) {
            sampler_batch(&sampler, epoch, b, indices);
            for (int i = 0; i < batch; i++) {
                assert_true(indices[i] < n);
                seen[indices[i]]++;
            }
        }
        sampler_free(&sampler);
    }
    free(indices);
    return seen;
}

static void test_exactly_once_when_divisible(void **state) {
    (void)state;
    for (int world = 1; world <= 4; world++) {
        const size_t n = (size_t)world * 5 * 7;  // 7 batches of 5 per rank
        size_t per_rank = 0;
        int *seen = epoch_counts(n, 5, world, 11, 3, &per_rank);
        assert_int_equal(per_rank, 7);
        for (size_t i = 0; i < n; i++) assert_int_equal(seen[i], 1);
        free(seen);
    }
}

static void test_at_most_once_with_drop_last(void **state) {
    (void)state;
    for (int world = 1; world <= 5; world++) {
        const size_t n = 103;
        size_t per_rank = 0;
        int *seen = epoch_counts(n, 4, world, 0, 0, &per_rank);
        assert_int_equal(per_rank, (n / (size_t)world) / 4);
        size_t total = 0;
        for (size_t i = 0; i < n; i++) {
            assert_true(seen[i] <= 1);
            total += (size_t)seen[i];
        }
        assert_int_equal(total, per_rank * 4 * (size_t)world);
        free(seen);
    }
}

static void test_order_depends_on_seed_and_epoch(void **state) {
    (void)state;
    const size_t n = 1000;
    Sampler a, b;
    assert_int_equal(sampler_init(&a, n, 10, 0, 1, 1, 1, NULL), 0);
    assert_int_equal(sampler_init(&b, n, 10, 0, 1, 1, 1, NULL), 0);
    uint32_t x[10], y[10];
    sampler_batch(&a, 0, 0, x);
    sampler_batch(&b, 0, 0, y);
    assert_memory_equal(x, y, sizeof x);  // same seed, same epoch
    sampler_batch(&b, 1, 0, y);
    assert_memory_not_equal(x, y, sizeof x);  // next epoch reshuffles
    sampler_free(&b);
    assert_int_equal(sampler_init(&b, n, 10, 0, 1, 2, 1, NULL), 0);
    sampler_batch(&b, 0, 0, y);
    assert_memory_not_equal(x, y, sizeof x);  // other seed
    // Going back to an earlier epoch reproduces it (resume).
    sampler_batch(&a, 5, 3, x);
    sampler_batch(&a, 0, 0, y);
    sampler_batch(&a, 5, 3, y);
    assert_memory_equal(x, y, sizeof x);
    sampler_free(&a);
    sampler_free(&b);
}

static void test_no_shuffle_is_identity(void **state) {
    (void)state;
    Sampler sampler;
    assert_int_equal(sampler_init(&sampler, 20, 4, 1, 2, 9, 0, NULL), 0);
    uint32_t indices[4];
    sampler_batch(&sampler, 0, 1, indices);
    // Rank 1 of 2 owns odd positions; batch 1 holds its local positions 4..7.
    const uint32_t expected[4] = {9, 11, 13, 15};
    assert_memory_equal(indices, expected, sizeof expected);
    sampler_free(&sampler);
}

static void test_rejects_impossible_configurations(void **state) {
    (void)state;
    Sampler sampler;
    ErrorMessage err;
    assert_int_equal(sampler_init(&sampler, 10, 8, 0, 2, 0, 1, &err), -1);
    assert_non_null(strstr(err.text, "fewer than the batch size"));
    assert_int_equal(sampler_init(&sampler, 10, 2, 2, 2, 0, 1, &err), -1);
    assert_int_equal(sampler_init(&sampler, 10, 0, 0, 1, 0, 1, &err), -1);
}

// Data parallel with R ranks of batch b is one rank of batch R b: at every
// step the ranks' batches together are exactly the one rank's batch (as
// sets), each image on one rank only, and the epochs have as many steps.
static void test_ranks_split_the_global_batch(void **state) {
    (void)state;
    const size_t n = 103;
    for (int world = 2; world <= 3; world++) {
        const int per_rank = 4, global = per_rank * world;
        Sampler whole;
        assert_int_equal(sampler_init(&whole, n, global, 0, 1, 5, 1, NULL), 0);
        Sampler ranks[3];
        for (int r = 0; r < world; r++) {
            assert_int_equal(sampler_init(&ranks[r], n, per_rank, r, world, 5, 1, NULL), 0);
            assert_int_equal(ranks[r].batches_per_epoch, whole.batches_per_epoch);
        }
        uint32_t expected[12], got[12];
        for (uint32_t epoch = 0; epoch < 2; epoch++)
            for (size_t b = 0; b < whole.batches_per_epoch; b++) {
                sampler_batch(&whole, epoch, b, expected);
                for (int r = 0; r < world; r++) sampler_batch(&ranks[r], epoch, b, got + r * per_rank);
                int seen[103] = {0};
                for (int i = 0; i < global; i++) seen[got[i]]++;
                for (int i = 0; i < global; i++) assert_int_equal(seen[expected[i]], 1);
            }
        sampler_free(&whole);
        for (int r = 0; r < world; r++) sampler_free(&ranks[r]);
    }
}

static void test_default_workers_rule(void **state) {
    (void)state;
    // (cores - devices) / devices, at least 1.
    assert_int_equal(cpu_default_workers(16, 1), 15);
    assert_int_equal(cpu_default_workers(16, 8), 1);
    assert_int_equal(cpu_default_workers(64, 4), 15);
    assert_int_equal(cpu_default_workers(2, 1), 1);
    assert_int_equal(cpu_default_workers(1, 1), 1);
    assert_true(cpu_usable_cores() >= 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exactly_once_when_divisible),
        cmocka_unit_test(test_at_most_once_with_drop_last),
        cmocka_unit_test(test_order_depends_on_seed_and_epoch),
        cmocka_unit_test(test_no_shuffle_is_identity),
        cmocka_unit_test(test_rejects_impossible_configurations),
        cmocka_unit_test(test_ranks_split_the_global_batch),
        cmocka_unit_test(test_default_workers_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
