// Layers (src/nn/layers.c) on the ref backend: central finite differences
// through a small residual chain (a conv-BN-ReLU-add block with a projection
// shortcut, then the pooling and linear head layers), checking the input
// gradient and every parameter gradient, plus the = / += contract.
//
//   x (4, 5, 5, 3) -> conv 3x3 (3->4) -> BN2d -> ReLU -> r
//   x              -> conv 1x1 (3->4)             -> s      (projection shortcut)
//   o = ReLU(r + s) -> maxpool 3x3/2 pad 1 -> (4, 3, 3, 4) -> global avgpool (4, 4)
//   -> linear (4->5, bias) -> z;  loss = <p, z>
//
// (BatchNorm 1d is the same layer with rows = N; on 4 rows it amplifies
// float32 rounding too much for a finite-difference check of the whole
// chain, and the backend's own gradient tests cover the op.)
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "gradcheck.h"
#include "nn/layers.h"
#include "nn/parameters.h"

enum { BATCH = 4, SIZE = 5, IN_CH = 3, CH = 4, POOLED = 3, OUT = 5 };
#define X_COUNT ((size_t)BATCH * SIZE * SIZE * IN_CH)
#define MAP_COUNT ((size_t)BATCH * SIZE * SIZE * CH)
#define POOL_COUNT ((size_t)BATCH * POOLED * POOLED * CH)

typedef struct Chain {
    Backend *backend;
    ParameterSet params, buffers;
    Conv2d conv, shortcut;
    BatchNorm bn2d;
    Linear linear;
    ConvPlan *conv_plan, *shortcut_plan;
    PoolShape pool;
    // backend memory: input, activations kept for backward, gradients
    float *x, *h, *r, *s, *o, *m, *g, *z, *p;
    float *mean2d, *inv_std2d;
    int32_t *argmax;
    float *dz, *dg, *dm, *dsum, *dr, *dh, *dx, *dx_shortcut;
} Chain;

static float *take(Chain *chain, size_t n) {
    float *p = chain->backend->op.alloc(chain->backend, n * sizeof(float));
    assert_non_null(p);
    return p;
}

static void chain_forward(Chain *c) {
    Backend *b = c->backend;
    conv2d_forward(b, &c->conv, c->conv_plan, (const Act *)c->x, (Act *)c->h);
    batchnorm_forward(b, &c->bn2d, 1, (size_t)BATCH * SIZE * SIZE, (const Act *)c->h, (Act *)c->r,
                      c->mean2d, c->inv_std2d);
    relu_forward(b, MAP_COUNT, (const Act *)c->r, (Act *)c->r);
    conv2d_forward(b, &c->shortcut, c->shortcut_plan, (const Act *)c->x, (Act *)c->s);
    b->op.add(b, MAP_COUNT, c->r, c->s, c->o);
    relu_forward(b, MAP_COUNT, (const Act *)c->o, (Act *)c->o);
    maxpool_forward(b, &c->pool, (const Act *)c->o, (Act *)c->m, c->argmax);
    avgpool_forward(b, BATCH, POOLED * POOLED, CH, (const Act *)c->m, (Act *)c->g);
    linear_forward(b, &c->linear, BATCH, (const Act *)c->g, (Act *)c->z);
}

// The forward in reverse; dz = p. Parameter gradients +=, dx =.
static void chain_backward(Chain *c) {
    Backend *b = c->backend;
    b->op.copy(b, c->dz, c->p, BATCH * OUT * sizeof(float));
    linear_backward(b, &c->linear, BATCH, (const Act *)c->g, (const Act *)c->dz, (Act *)c->dg);
    avgpool_backward(b, BATCH, POOLED * POOLED, CH, (const Act *)c->dg, (Act *)c->dm);
    maxpool_backward(b, &c->pool, (const Act *)c->dm, c->argmax, (Act *)c->dsum);
    relu_backward(b, MAP_COUNT, (const Act *)c->o, (const Act *)c->dsum,
                  (Act *)c->dsum); // d(r + s), both branches
    conv2d_backward(b, &c->shortcut, c->shortcut_plan, (const Act *)c->x, (const Act *)c->dsum,
                    (Act *)c->dx_shortcut);
    relu_backward(b, MAP_COUNT, (const Act *)c->r, (const Act *)c->dsum, (Act *)c->dr);
    batchnorm_backward(b, &c->bn2d, (size_t)BATCH * SIZE * SIZE, (const Act *)c->h,
                       (const Act *)c->dr, c->mean2d, c->inv_std2d, (Act *)c->dh);
    conv2d_backward(b, &c->conv, c->conv_plan, (const Act *)c->x, (const Act *)c->dh, (Act *)c->dx);
    b->op.axpby(b, X_COUNT, 1.0f, c->dx_shortcut, 1.0f, c->dx);  // residual: dx += shortcut's
}

static void upload(Backend *b, float *device, const float *host, size_t n) {
    b->op.upload(b, device, host, n * sizeof *host);
}

static void chain_setup(Chain *c) {
    ErrorMessage err = {{0}};
    memset(c, 0, sizeof *c);
    c->backend = backend_create("ref", 1, &err);
    assert_non_null(c->backend);
    Backend *b = c->backend;
    parameter_set_init(&c->params, b, 1);
    parameter_set_init(&c->buffers, b, 0);
    assert_int_equal(conv2d_declare(&c->conv, &c->params, "conv.weight", IN_CH, CH, 3, 1, 1, &err), 0);
    assert_int_equal(conv2d_declare(&c->shortcut, &c->params, "shortcut.weight", IN_CH, CH, 1, 1, 0,
                                    &err), 0);
    assert_int_equal(batchnorm_declare(&c->bn2d, &c->params, &c->buffers, "bn2d", CH, 0.1f, 1e-5f,
                                       &err), 0);
    assert_int_equal(linear_declare(&c->linear, &c->params, "linear", CH, OUT, 1, &err), 0);
    assert_int_equal(parameter_set_allocate(&c->params, &err), 0);
    assert_int_equal(parameter_set_allocate(&c->buffers, &err), 0);
    conv2d_bind(&c->conv, &c->params);
    conv2d_bind(&c->shortcut, &c->params);
    batchnorm_bind(&c->bn2d, &c->params, &c->buffers);
    linear_bind(&c->linear, &c->params);

    ConvShape shape;
    assert_int_equal(conv2d_shape(&c->conv, BATCH, SIZE, SIZE, &shape, &err), 0);
    c->conv_plan = b->op.conv2d_plan(b, &shape, &err);
    assert_int_equal(conv2d_shape(&c->shortcut, BATCH, SIZE, SIZE, &shape, &err), 0);
    c->shortcut_plan = b->op.conv2d_plan(b, &shape, &err);
    assert_true(c->conv_plan && c->shortcut_plan);
    assert_int_equal(pool_shape_make(&c->pool, BATCH, SIZE, SIZE, CH, 3, 2, 1, &err), 0);
    assert_int_equal(c->pool.out_height, POOLED);

    c->x = take(c, X_COUNT), c->dx = take(c, X_COUNT), c->dx_shortcut = take(c, X_COUNT);
    c->h = take(c, MAP_COUNT), c->r = take(c, MAP_COUNT), c->s = take(c, MAP_COUNT);
    c->o = take(c, MAP_COUNT), c->dsum = take(c, MAP_COUNT), c->dr = take(c, MAP_COUNT);
    c->dh = take(c, MAP_COUNT), c->m = take(c, POOL_COUNT), c->dm = take(c, POOL_COUNT);
    c->argmax = (int32_t *)(void *)take(c, POOL_COUNT);
    c->g = take(c, BATCH * CH), c->dg = take(c, BATCH * CH);
    c->z = take(c, BATCH * OUT);
    c->dz = take(c, BATCH * OUT), c->p = take(c, BATCH * OUT);
    c->mean2d = take(c, CH), c->inv_std2d = take(c, CH);

    // Values: random weights, BN gammas in [0.5, 1.5) and betas in [1, 1.5):
    // about 10% of the ReLU inputs are negative, few sit near the kink.
    float host[X_COUNT];  // the largest tensor
    for (int i = 0; i < c->params.count; i++) {
        const Parameter *param = &c->params.params[i];
        float low = -0.7f, high = 0.7f;
        if (param->kind == PARAM_NORM && strstr(param->name, ".weight")) low = 0.5f, high = 1.5f;
        if (param->kind == PARAM_NORM && strstr(param->name, ".bias")) low = 1.0f, high = 1.5f;
        gradcheck_fill_uniform(host, param->count, low, high, 100 + (uint64_t)i);
        upload(b, param->value, host, param->count);
    }
    gradcheck_fill_uniform(host, X_COUNT, -1.0f, 1.0f, 1);
    upload(b, c->x, host, X_COUNT);
    gradcheck_fill_uniform(host, BATCH * OUT, -1.0f, 1.0f, 2);
    upload(b, c->p, host, BATCH * OUT);
}

static void chain_teardown(Chain *c) {
    Backend *b = c->backend;
    float *buffers[] = {c->x, c->h, c->r, c->s, c->o, c->m, c->g, c->z, c->p, c->mean2d,
                        c->inv_std2d, (float *)(void *)c->argmax, c->dz, c->dg, c->dm, c->dsum, c->dr, c->dh, c->dx,
                        c->dx_shortcut};
    for (size_t i = 0; i < sizeof buffers / sizeof *buffers; i++) b->op.free(b, buffers[i]);
    b->op.conv2d_plan_free(b, c->conv_plan);
    b->op.conv2d_plan_free(b, c->shortcut_plan);
    parameter_set_free(&c->params);
    parameter_set_free(&c->buffers);
    backend_destroy(b);
}

// The loss as a function of one tensor (the input or a parameter), and the
// "kink pattern" of the evaluation: the ReLU signs and max-pool winners.
typedef struct Probe {
    Chain *chain;
    float *target;  // backend memory, set from the host copy
    size_t count;
} Probe;

static uint64_t kink_pattern(Chain *c) {
    float r[MAP_COUNT], o[MAP_COUNT];
    int32_t argmax[POOL_COUNT];
    c->backend->op.download(c->backend, r, c->r, sizeof r);
    c->backend->op.download(c->backend, o, c->o, sizeof o);
    c->backend->op.download(c->backend, argmax, c->argmax, sizeof argmax);
    uint64_t hash = 14695981039346656037ull;  // FNV-1a over the pattern
    for (size_t i = 0; i < MAP_COUNT; i++) hash = (hash ^ (uint64_t)(r[i] > 0.0f)) * 1099511628211ull;
    for (size_t i = 0; i < MAP_COUNT; i++) hash = (hash ^ (uint64_t)(o[i] > 0.0f)) * 1099511628211ull;
    for (size_t i = 0; i < POOL_COUNT; i++) hash = (hash ^ (uint64_t)argmax[i]) * 1099511628211ull;
    return hash;
}

static double probe_loss(Probe *probe, const float *values, uint64_t *pattern) {
    Chain *c = probe->chain;
    upload(c->backend, probe->target, values, probe->count);
    chain_forward(c);
    float z[BATCH * OUT], p[BATCH * OUT];
    c->backend->op.download(c->backend, z, c->z, sizeof z);
    c->backend->op.download(c->backend, p, c->p, sizeof p);
    *pattern = kink_pattern(c);
    return gradcheck_project(BATCH * OUT, z, p);
}

// Central differences with h = 1e-3 (float32 forward, loss in double):
// rounding adds ~1e-4 to a difference quotient and the h^2 term ~1e-6, so
// |analytic - numeric| <= 1e-3 + 1e-2 |numeric|, while a wrong backward
// (errors O(gradient)) fails. An element whose +-h evaluations change a ReLU
// sign or a max-pool winner straddles a kink, where the quotient means
// nothing: it is skipped, and at most 5% of elements may be.
#define FD_STEP 1e-3f
#define FD_RTOL 1e-2
#define FD_ATOL 1e-3

static void check_against_finite_differences(Chain *c, const char *label, float *target,
                                             const float *analytic_device, size_t count) {
    float *values = malloc(count * sizeof *values), *analytic = malloc(count * sizeof *analytic);
    c->backend->op.download(c->backend, values, target, count * sizeof *values);
    c->backend->op.download(c->backend, analytic, analytic_device, count * sizeof *analytic);
    Probe probe = {c, target, count};
    uint64_t base_pattern, plus_pattern, minus_pattern;
    probe_loss(&probe, values, &base_pattern);
    size_t skipped = 0, failures = 0;
    for (size_t i = 0; i < count; i++) {
        const float original = values[i];
        const float plus = original + FD_STEP, minus = original - FD_STEP;
        values[i] = plus;
        const double loss_plus = probe_loss(&probe, values, &plus_pattern);
        values[i] = minus;
        const double loss_minus = probe_loss(&probe, values, &minus_pattern);
        values[i] = original;
        if (plus_pattern != base_pattern || minus_pattern != base_pattern) {
            skipped++;
            continue;
        }
        const double numeric = (loss_plus - loss_minus) / ((double)plus - (double)minus);
        const double error = fabs((double)analytic[i] - numeric);
        if (!(error <= FD_ATOL + FD_RTOL * fabs(numeric))) {
            if (failures++ < 5)
                fprintf(stderr, "  %s[%zu]: analytic %.7g, numeric %.7g\n", label, i,
                        analytic[i], numeric);
        }
    }
    upload(c->backend, target, values, count);  // restore
    free(values), free(analytic);
    if (getenv("GRADCHECK_VERBOSE"))
        fprintf(stderr, "  %s: %zu of %zu elements straddle a kink (skipped)\n", label, skipped,
                count);
    assert_int_equal(failures, 0);
    assert_true(skipped * 5 <= count);
}

static void test_chain_backward_matches_finite_differences(void **state) {
    Chain chain;
    chain_setup(&chain);
    parameter_set_zero_grads(&chain.params);
    chain_forward(&chain);
    chain_backward(&chain);
    check_against_finite_differences(&chain, "input", chain.x, chain.dx, X_COUNT);
    for (int i = 0; i < chain.params.count; i++) {
        const Parameter *param = &chain.params.params[i];
        check_against_finite_differences(&chain, param->name, param->value, param->grad,
                                         param->count);
    }
    chain_teardown(&chain);
}

// Parameter gradients accumulate (a second backward doubles them);
// activation gradients are overwritten (dx stays the same).
static void test_gradient_contract(void **state) {
    Chain chain;
    chain_setup(&chain);
    Backend *b = chain.backend;
    const size_t total = chain.params.total;
    float *once = malloc(total * sizeof *once), *twice = malloc(total * sizeof *twice);
    float dx_once[X_COUNT], dx_twice[X_COUNT];
    parameter_set_zero_grads(&chain.params);
    chain_forward(&chain);
    chain_backward(&chain);
    b->op.download(b, once, chain.params.grads, total * sizeof *once);
    b->op.download(b, dx_once, chain.dx, sizeof dx_once);
    chain_backward(&chain);
    b->op.download(b, twice, chain.params.grads, total * sizeof *twice);
    b->op.download(b, dx_twice, chain.dx, sizeof dx_twice);
    for (size_t i = 0; i < total; i++) assert_true(twice[i] == 2.0f * once[i]);  // exact: x + x
    assert_memory_equal(dx_once, dx_twice, sizeof dx_once);
    free(once), free(twice);
    chain_teardown(&chain);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_backward_matches_finite_differences),
        cmocka_unit_test(test_gradient_contract),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
