// Fast backend against ref, buffer twins and the per-backend test groups
// (see backend_mirror.h).
#include "backend_mirror.h"

#include <stdarg.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck.h"
#include "util/half.h"

Backend *fast, *ref;
ComputeDtype mirror_dtype = COMPUTE_F32;
const NormCase norm_cases[NORM_CASE_COUNT] = {{70, 13},   {1, 5},     {324, 64}, {37, 100},
                                              {150, 200}, {1001, 67}, {45, 300}, {19, 1100}};
static int fast_shares_memory;  // cpu: the twins are the host buffers themselves
static char fast_missing[600];  // why the backend of this group is not there

// Every buffer a test allocates, with its twin (and in 16 bits its
// activation twin, made by the first DA).
typedef struct Mirror {
    char *host, *device, *act;
    size_t bytes;
} Mirror;
static Mirror mirrors[64];
static int mirror_count;

void *mirror_buffer(size_t bytes) {
    assert_true(mirror_count < 64);
    Mirror *m = &mirrors[mirror_count];
    m->host = ref->op.alloc(ref, bytes);
    assert_non_null(m->host);
    m->device = fast_shares_memory ? m->host : fast->op.alloc(fast, bytes);
    assert_non_null(m->device);
    m->bytes = bytes;
    m->act = NULL;
    mirror_count++;
    return m->host;
}

// The mirror holding host address p (which may point inside a buffer).
static const Mirror *mirror_of(const void *p) {
    for (int i = 0; i < mirror_count; i++)
        if (p == mirrors[i].host ||  // an empty buffer (k = 0 products) too
            ((const char *)p > mirrors[i].host &&
             (const char *)p < mirrors[i].host + mirrors[i].bytes))
            return &mirrors[i];
    fail_msg("pointer %p is not a test buffer", p);
    return NULL;
}

void *D(const void *p) {
    if (!p || fast_shares_memory) return (void *)p;
    const Mirror *m = mirror_of(p);
    fast->op.upload(fast, m->device, m->host, m->bytes);
    return m->device + ((const char *)p - m->host);
}

void H(const void *p) {
    if (fast_shares_memory) return;
    const Mirror *m = mirror_of(p);
    fast->op.download(fast, m->host, m->device, m->bytes);
}

void mirror_round(float *x, size_t n) {
    if (mirror_dtype == COMPUTE_F16)
        for (size_t i = 0; i < n; i++) x[i] = f16_to_float(float_to_f16(x[i]));
    else if (mirror_dtype == COMPUTE_BF16)
        for (size_t i = 0; i < n; i++) x[i] = bf16_to_float(float_to_bf16(x[i]));
}

double mirror_act_tol(double fp32_tol) {
    return fp32_tol + (mirror_dtype == COMPUTE_F16    ? 0x1p-10
                       : mirror_dtype == COMPUTE_BF16 ? 0x1p-7
                                                      : 0.0);
}

Act *DA(const void *p) {
    if (!p || mirror_dtype == COMPUTE_F32) return D(p);
    Mirror *m = (Mirror *)mirror_of(p);
    const size_t n = m->bytes / sizeof(float);
    if (!m->act) {
        m->act = fast->op.alloc(fast, act_bytes(fast, n));
        assert_non_null(m->act);
    }
    uint16_t *bits = malloc(n * sizeof *bits);
    assert_non_null(bits);
    if (mirror_dtype == COMPUTE_F16)
        convert_f32_to_f16((const float *)m->host, bits, n);
    else
        convert_f32_to_bf16((const float *)m->host, bits, n);
    fast->op.upload(fast, m->act, bits, n * sizeof *bits);
    free(bits);
    return act_at(fast, (Act *)m->act, (size_t)((const char *)p - m->host) / sizeof(float));
}

void HA(const void *p) {
    if (mirror_dtype == COMPUTE_F32) {
        H(p);
        return;
    }
    const Mirror *m = mirror_of(p);
    assert_non_null(m->act);  // DA made the twin the op wrote
    const size_t n = m->bytes / sizeof(float);
    uint16_t *bits = malloc(n * sizeof *bits);
    assert_non_null(bits);
    fast->op.download(fast, bits, m->act, n * sizeof *bits);
    if (mirror_dtype == COMPUTE_F16)
        convert_f16_to_f32(bits, (float *)m->host, n);
    else
        convert_bf16_to_f32(bits, (float *)m->host, n);
    free(bits);
}

float *mirror_tensor(size_t n) { return mirror_buffer(n * sizeof(float)); }

void mirror_prologue_input(size_t rows, int channels, const float *x, const float *gamma,
                           const float *beta, const float *mean, const float *inv_std,
                           float *out) {
    for (int c = 0; c < channels; c++) {
        float scale = (float)((double)gamma[c] * inv_std[c]);
        mirror_round(&scale, 1);
        float shift = (float)((double)beta[c] - (double)mean[c] * scale);
        mirror_round(&shift, 1);
        for (size_t r = 0; r < rows; r++)
            out[r * channels + c] = fmaf(x[r * channels + c], scale, shift);
    }
}

float *mirror_random_tensor(size_t n, float low, float high, uint64_t seed) {
    float *p = mirror_tensor(n);
    gradcheck_fill_uniform(p, n, low, high, seed);
    mirror_round(p, n);
    return p;
}

float *mirror_copy(const float *x, size_t n) {
    float *p = mirror_tensor(n);
    memcpy(p, x, n * sizeof(float));
    mirror_round(p, n);
    return p;
}

float *mirror_nan_tensor(size_t n) {
    float *p = mirror_tensor(n);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

int mirror_free(void **state) {
    for (int i = 0; i < mirror_count; i++) {
        if (!fast_shares_memory) fast->op.free(fast, mirrors[i].device);
        if (mirrors[i].act) fast->op.free(fast, mirrors[i].act);
        ref->op.free(ref, mirrors[i].host);
    }
    mirror_count = 0;
    return 0;
}

void mirror_expect_close(const char *label, size_t n, const float *actual, const float *expected,
                         double rtol, double atol) {
    assert_int_equal(gradcheck_count_mismatches(label, n, actual, expected, rtol, atol), 0);
}

int mirror_emulated(void) {
    return fast && strstr(fast->device, "CUDA emulation") != NULL;
}

int mirror_emulation_skips(const char *what) {
    if (!mirror_emulated()) return 0;
    fprintf(stderr, "  not run on the CUDA emulation (too slow there; runs on a GPU): %s\n", what);
    return 1;
}

void mirror_need_fast_backend(void) {
    if (fast) return;
    fprintf(stderr, "  skipped: %s\n", fast_missing);
    skip();
}

static int create_backends(const char *name, int threads, ComputeDtype dtype) {
    ErrorMessage err = {{0}};
    mirror_dtype = dtype;
    ref = backend_create("ref", 1, &err);
    if (!ref || backend_set_compute_dtype(ref, dtype, &err)) return -1;
    fast = backend_create(name, threads, &err);
    if (fast && backend_set_compute_dtype(fast, dtype, &err)) {
        backend_destroy(fast);
        fast = NULL;
    }
    fast_shares_memory = fast && strcmp(fast->name, "cpu") == 0;
    snprintf(fast_missing, sizeof fast_missing, "%s backend (%s): %s", name,
             compute_dtype_name(dtype), err.text);
    return 0;
}

static int create_cpu(void **state) { return create_backends("cpu", 2, COMPUTE_F32); }
static int create_cuda(void **state) { return create_backends("cuda", 0, COMPUTE_F32); }
static int create_cuda_f16(void **state) { return create_backends("cuda", 0, COMPUTE_F16); }
static int create_cuda_bf16(void **state) { return create_backends("cuda", 0, COMPUTE_BF16); }

static int destroy_backends(void **state) {
    if (fast) backend_destroy(fast);
    backend_destroy(ref);
    fast = ref = NULL;
    mirror_dtype = COMPUTE_F32;
    return 0;
}

// 1 when group `name` is to run: LTC_TEST_GROUPS, when set, lists the groups
// (comma or space separated: cpu, cuda, cuda-fp16, cuda-bf16), so that the
// GPU script (tools/first_light.sh) runs every binary's fp32 group before
// any 16-bit one; LTC_TEST_CUDA_ONLY=1 (run_tests.sh, for the CUDA
// emulation's copies of the binaries) leaves out the cpu group, which the
// native binary runs.
static int group_wanted(const char *name) {
    const char *cuda_only = getenv("LTC_TEST_CUDA_ONLY");
    if (strcmp(name, "cpu") == 0 && cuda_only && strcmp(cuda_only, "1") == 0) return 0;
    const char *groups = getenv("LTC_TEST_GROUPS");
    if (!groups || !*groups) return 1;
    const size_t length = strlen(name);
    for (const char *at = groups; (at = strstr(at, name)) != NULL; at += length) {
        const int starts = at == groups || at[-1] == ',' || at[-1] == ' ';
        const int ends = at[length] == '\0' || at[length] == ',' || at[length] == ' ';
        if (starts && ends) return 1;
    }
    return 0;
}

static int run_group(const char *name, const struct CMUnitTest *tests, size_t count,
                     CMFixtureFunction setup) {
    return group_wanted(name)
               ? _cmocka_run_group_tests(name, tests, count, setup, destroy_backends)
               : 0;
}

int mirror_run_groups(const struct CMUnitTest *tests, size_t count) {
    return run_group("cpu", tests, count, create_cpu) +
           run_group("cuda", tests, count, create_cuda);
}

int mirror_run_16bit_groups(const struct CMUnitTest *tests, size_t count) {
    return run_group("cuda-fp16", tests, count, create_cuda_f16) +
           run_group("cuda-bf16", tests, count, create_cuda_bf16);
}

int mirror_run_groups_16bit(const struct CMUnitTest *tests, size_t count) {
    return mirror_run_groups(tests, count) + mirror_run_16bit_groups(tests, count);
}
