// The ops of the activation boundary (backend.h): the linear layers' ops,
// iBOT's mask-token ops, act_to_float / float_to_act, act_axpby,
// act_column_sum, zero, and the fp32 twins the losses use. The ref backend
// is checked against what the ops are defined as (host loops, or the fp32
// ops they equal while activations are fp32); the cpu and cuda backends
// against ref (mirror groups, see backend_mirror.h), in fp32 and, for
// cuda, in fp16 and bf16 against ref in the same dtype.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend_mirror.h"
#include "gradcheck.h"
#ifdef LTC_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

// Products summed in double by ref, in other orders by the fast backends.
#define PRODUCT_TOL 1e-5
// fp32 weight gradients from 16-bit inputs: the same products (exact in
// fp32), summed by tensor cores in their own order.
#define TENSOR_CORE_TOL 1e-4

// linear_forward = the product with w^T plus the bias; the backward ops =
// the products of the gradient (what nn/layers.c composed from gemm before).
static void check_linear(int rows, int in, int out, int with_bias, uint64_t seed) {
    const float *x = mirror_random_tensor((size_t)rows * in, -1, 1, seed);
    const float *w = mirror_random_tensor((size_t)out * in, -1, 1, seed + 1);
    const float *bias = with_bias ? mirror_random_tensor(out, -1, 1, seed + 2) : NULL;
    const float *dy = mirror_random_tensor((size_t)rows * out, -1, 1, seed + 3);

    // ref against the fp32 product it is defined by: in 16 bits the bias
    // rounded to the dtype (already so here: test tensors are), the sum once
    float *y = mirror_nan_tensor((size_t)rows * out),
          *expected = mirror_nan_tensor((size_t)rows * out);
    ref->op.linear_forward(ref, rows, in, out, (const Act *)x, (const Act *)w, bias, (Act *)y);
    ref->op.gemm(ref, 0, 1, rows, out, in, 1.0f, x, in, w, in, 0.0f, expected, out);
    if (bias) ref->op.bias_add_f32(ref, (size_t)rows, out, mirror_copy(bias, out), expected);
    mirror_round(expected, (size_t)rows * out);
    mirror_expect_close("ref linear_forward", (size_t)rows * out, y, expected, 0, 0);

    float *y_fast = mirror_nan_tensor((size_t)rows * out);
    fast->op.linear_forward(fast, rows, in, out, DA(x), DA(w), D(bias), DA(y_fast));
    HA(y_fast);
    mirror_expect_close("linear_forward", (size_t)rows * out, y_fast, y,
                        mirror_act_tol(PRODUCT_TOL), mirror_act_tol(PRODUCT_TOL));

    float *dx = mirror_nan_tensor((size_t)rows * in),
          *dx_fast = mirror_nan_tensor((size_t)rows * in);
    ref->op.linear_backward_data(ref, rows, in, out, (const Act *)dy, (const Act *)w, (Act *)dx);
    fast->op.linear_backward_data(fast, rows, in, out, DA(dy), DA(w), DA(dx_fast));
    HA(dx_fast);
    float *dx_expected = mirror_nan_tensor((size_t)rows * in);
    ref->op.gemm(ref, 0, 0, rows, in, out, 1.0f, dy, out, w, in, 0.0f, dx_expected, in);
    mirror_round(dx_expected, (size_t)rows * in);
    mirror_expect_close("ref linear_backward_data", (size_t)rows * in, dx, dx_expected, 0, 0);
    mirror_expect_close("linear_backward_data", (size_t)rows * in, dx_fast, dx,
                        mirror_act_tol(PRODUCT_TOL), mirror_act_tol(PRODUCT_TOL));

    // weight and bias gradients accumulate (+=) onto what is there
    float *dw = mirror_random_tensor((size_t)out * in, -1, 1, seed + 4);
    float *dw_fast = mirror_copy(dw, (size_t)out * in),
          *dw_expected = mirror_copy(dw, (size_t)out * in);
    float *db = with_bias ? mirror_random_tensor(out, -1, 1, seed + 5) : NULL;
    float *db_fast = with_bias ? mirror_copy(db, out) : NULL;
    float *db_expected = with_bias ? mirror_copy(db, out) : NULL;
    ref->op.linear_backward_weights(ref, rows, in, out, (const Act *)x, (const Act *)dy, dw, db);
    fast->op.linear_backward_weights(fast, rows, in, out, DA(x), DA(dy), D(dw_fast), D(db_fast));
    H(dw_fast);
    ref->op.gemm(ref, 1, 0, out, in, rows, 1.0f, dy, out, x, in, 1.0f, dw_expected, in);
    mirror_expect_close("ref linear_backward_weights", (size_t)out * in, dw, dw_expected, 0, 0);
    // dw stays fp32 (never rounded to 16 bits) in every dtype
    const double dw_tol = mirror_dtype == COMPUTE_F32 ? PRODUCT_TOL : TENSOR_CORE_TOL;
    mirror_expect_close("linear_backward_weights", (size_t)out * in, dw_fast, dw, dw_tol, dw_tol);
    if (with_bias) {
        H(db_fast);
        for (int o = 0; o < out; o++) {
            double total = db_expected[o];
            double column = 0.0;
            for (int r = 0; r < rows; r++) column += dy[(size_t)r * out + o];
            db_expected[o] = (float)(total + (float)column);
        }
        mirror_expect_close("ref linear dbias", out, db, db_expected, 1e-6, 1e-6);
        mirror_expect_close("linear dbias", out, db_fast, db, 1e-6, 1e-6);
    }
}

static void test_linear(void **state) {
    NEED_FAST_BACKEND();
    check_linear(5, 7, 3, 1, 100);
    check_linear(64, 130, 257, 1, 200); // threaded
    check_linear(1, 16, 9, 0, 300); // one row, no bias
    mirror_free(state);  // the mirror's buffer table holds three cases
    check_linear(33, 24, 64, 1, 400); // 4 outputs per thread and load on cuda
    check_linear(7, 16, 32, 0, 500);  // the same without a bias
}

// ---- the bias of a 16-bit linear layer: rounded to the dtype, added once ----------------

// The crafted layer of test_linear_bias_rounded: 3 rows, 2 inputs, 4
// outputs. Row r of x is (1, 2^-r); output channel c has weights (-v_c,
// s_c) and a bias b_c that is v_c plus at most half a unit of fp16's and
// bf16's last place (a half going to the even v_c), so that the 16-bit
// bias is v_c exactly. The product
// is -v_c + s_c 2^-r (exact in fp32 and in both 16-bit dtypes), so y =
// s_c 2^-r exactly under the rounded bias, while the fp32 bias would leave
// its tail (b_c - v_c, which the small y keeps), a bias added twice gives
// about v_c more, a bias left out -v_c: each a different 16-bit value.
enum { CRAFT_ROWS = 3, CRAFT_IN = 2, CRAFT_OUT = 4 };
static const float craft_value[CRAFT_OUT] = {1.0f, -1.0f, 4.0f, -0.5f};
static const float craft_tail[CRAFT_OUT] = {0x1p-12f, -0x1p-12f, 0x1p-9f, 0x1p-13f};
static const float craft_slope[CRAFT_OUT] = {0x1p-8f, -0x1p-8f, 0x1p-6f, 0x1p-7f};

// The layer's inputs as host tensors with device twins; the bias is not
// rounded when made (mirror_tensor), so the op must round it.
static void craft_layer(float **x, float **w, float **bias) {
    *x = mirror_tensor(CRAFT_ROWS * CRAFT_IN);
    *w = mirror_tensor(CRAFT_OUT * CRAFT_IN);
    *bias = mirror_tensor(CRAFT_OUT);
    for (int r = 0; r < CRAFT_ROWS; r++) {
        (*x)[r * CRAFT_IN] = 1.0f;
        (*x)[r * CRAFT_IN + 1] = ldexpf(1.0f, -r);
    }
    for (int c = 0; c < CRAFT_OUT; c++) {
        (*w)[c * CRAFT_IN] = -craft_value[c];
        (*w)[c * CRAFT_IN + 1] = craft_slope[c];
        (*bias)[c] = craft_value[c] + craft_tail[c];
    }
}

static float rounded(float v) {
    mirror_round(&v, 1);
    return v;
}

// y = x w^T + round(bias), rounded, on the host (the sums are exact); and
// the check that the wrong orders give other values everywhere.
static void craft_expected(const float *x, const float *w, const float *bias, float *y) {
    for (int r = 0; r < CRAFT_ROWS; r++)
        for (int c = 0; c < CRAFT_OUT; c++) {
            const float product =
                x[r * CRAFT_IN] * w[c * CRAFT_IN] + x[r * CRAFT_IN + 1] * w[c * CRAFT_IN + 1];
            const float b = rounded(bias[c]);
            const float right = rounded(product + b);
            y[r * CRAFT_OUT + c] = right;
            assert_true(right == craft_slope[c] * ldexpf(1.0f, -r) +
                                     (mirror_dtype == COMPUTE_F32 ? craft_tail[c] : 0.0f));
            if (mirror_dtype != COMPUTE_F32) assert_true(rounded(product + bias[c]) != right);
            assert_true(rounded(product + 2.0f * b) != right);
            assert_true(rounded(product) != right);
        }
}

#ifdef LTC_WITH_CUDA
static int fast_is_cuda(void) { return strcmp(fast->name, "cuda") == 0; }

// Whether `fast` runs 16-bit layers with a bias fused: on the emulation,
// whose cuBLASLt has an algorithm for every shape, unless the run asked
// for the separate pass (LTC_CUDA_LINEAR_BIAS=separate, as tests may be run
// to check it); on a GPU it depends on its cuBLASLt (printed, not checked).
static int fast_fuses(void) {
    const char *asked = getenv("LTC_CUDA_LINEAR_BIAS");
    return mirror_emulated() && mirror_dtype != COMPUTE_F32 &&
           !(asked && strcmp(asked, "separate") == 0);
}

static long linear_bias_calls(Backend *backend, int fused) {
    long counts[2];
    cuda_linear_bias_counts(backend, &counts[0], &counts[1]);
    return counts[fused ? 0 : 1];
}
#endif

// linear_forward in 16 bits adds the bias rounded to the dtype to the
// fp32 product and rounds the sum once (PyTorch autocast's order; in fp32
// the bias as it is): ref against the host, the fast backend against
// both, exactly. Fails for a bias left fp32, added twice or left out.
static void test_linear_bias_rounded(void **state) {
    NEED_FAST_BACKEND();
    float *x, *w, *bias;
    craft_layer(&x, &w, &bias);
    float expected[CRAFT_ROWS * CRAFT_OUT];
    craft_expected(x, w, bias, expected);
    float *y = mirror_nan_tensor(CRAFT_ROWS * CRAFT_OUT);
    float *y_fast = mirror_nan_tensor(CRAFT_ROWS * CRAFT_OUT);
    ref->op.linear_forward(ref, CRAFT_ROWS, CRAFT_IN, CRAFT_OUT, (const Act *)x, (const Act *)w,
                           bias, (Act *)y);
    mirror_expect_close("ref linear_forward's bias", CRAFT_ROWS * CRAFT_OUT, y, expected, 0, 0);
#ifdef LTC_WITH_CUDA
    const long fused_before = fast_is_cuda() ? linear_bias_calls(fast, 1) : 0;
#endif
    fast->op.linear_forward(fast, CRAFT_ROWS, CRAFT_IN, CRAFT_OUT, DA(x), DA(w), D(bias),
                            DA(y_fast));
    HA(y_fast);
    mirror_expect_close("linear_forward's bias", CRAFT_ROWS * CRAFT_OUT, y_fast, y, 0, 0);
#ifdef LTC_WITH_CUDA
    if (fast_is_cuda() && fast_fuses())
        assert_int_equal(linear_bias_calls(fast, 1), fused_before + 1);
#endif
}

#ifdef LTC_WITH_CUDA
// A cuda backend like `fast`, made with LTC_CUDA_LINEAR_BIAS=linear_bias
// (NULL: as the environment has it).
static Backend *cuda_made_with(const char *linear_bias) {
    const char *had = getenv("LTC_CUDA_LINEAR_BIAS");
    char saved[64];
    snprintf(saved, sizeof saved, "%s", had ? had : "");
    if (linear_bias) setenv("LTC_CUDA_LINEAR_BIAS", linear_bias, 1);
    ErrorMessage err = {{0}};
    Backend *backend = backend_create("cuda", 0, &err);
    if (had)
        setenv("LTC_CUDA_LINEAR_BIAS", saved, 1);
    else
        unsetenv("LTC_CUDA_LINEAR_BIAS");
    if (!backend) fail_msg("%s", err.text);
    assert_int_equal(backend_set_compute_dtype(backend, mirror_dtype, &err), 0);
    return backend;
}

// linear_forward of host x (rows, in), w (out, in) and bias (out) on
// `backend` (cuda, in mirror_dtype), y back on the host, widened to fp32.
static void linear_on(Backend *backend, int rows, int in, int out, const float *x,
                      const float *w, const float *bias, float *y) {
    const size_t sizes[4] = {(size_t)rows * in, (size_t)out * in, (size_t)out, (size_t)rows * out};
    const float *host[4] = {x, w, bias, y};
    float *floats[4];
    Act *acts[4];
    for (int i = 0; i < 4; i++) {
        floats[i] = backend->op.alloc(backend, sizes[i] * sizeof(float));
        acts[i] = backend->op.alloc(backend, act_bytes(backend, sizes[i]));
        assert_true(floats[i] && acts[i]);
        if (i == 3) break;
        backend->op.upload(backend, floats[i], host[i], sizes[i] * sizeof(float));
        backend->op.float_to_act(backend, sizes[i], floats[i], acts[i]);
    }
    backend->op.linear_forward(backend, rows, in, out, acts[0], acts[1], floats[2], acts[3]);
    backend->op.act_to_float(backend, sizes[3], acts[3], floats[3]);
    backend->op.download(backend, y, floats[3], sizes[3] * sizeof(float));
    for (int i = 0; i < 4; i++) {
        backend->op.free(backend, floats[i]);
        backend->op.free(backend, acts[i]);
    }
}
#endif

// The two cuda paths of a 16-bit linear layer with a bias agree: the fused
// cuBLASLt epilogue of `fast` and the separate pass of a backend made with
// LTC_CUDA_LINEAR_BIAS=separate (the emulation computes both alike: equal
// bits; a GPU's kernels sum in their own orders), and the separate pass
// equals ref exactly on the crafted layer. On the emulation, a cuBLASLt
// that finds no algorithm, or whose matmul says CUBLAS_STATUS_NOT_SUPPORTED
// (LTC_EMU_CUBLASLT), sends the layer to the separate pass with the same
// result. In fp32 neither path runs (cublasSgemm and the bias kernel, as
// before): the same bits with either setting.
static void test_linear_bias_paths(void **state) {
    NEED_FAST_BACKEND();
#ifdef LTC_WITH_CUDA
    if (!fast_is_cuda()) skip();  // the cpu group: one path
    enum { ROWS = 70, IN = 40, OUT = 72 };
    const float *x = mirror_random_tensor(ROWS * IN, -1, 1, 700);
    const float *w = mirror_random_tensor(OUT * IN, -1, 1, 701);
    float *bias = mirror_tensor(OUT);
    gradcheck_fill_uniform(bias, OUT, -1, 1, 702);  // not rounded: the op rounds it
    float *y_fused = mirror_nan_tensor(ROWS * OUT), *y_separate = mirror_nan_tensor(ROWS * OUT);
    Backend *separate = cuda_made_with("separate");
    linear_on(fast, ROWS, IN, OUT, x, w, bias, y_fused);
    linear_on(separate, ROWS, IN, OUT, x, w, bias, y_separate);
    if (mirror_dtype == COMPUTE_F32) {
        mirror_expect_close("fp32 with either setting", ROWS * OUT, y_fused, y_separate, 0, 0);
        for (int fused = 0; fused < 2; fused++) {
            assert_int_equal(linear_bias_calls(fast, fused), 0);
            assert_int_equal(linear_bias_calls(separate, fused), 0);
        }
        backend_destroy(separate);
        return;
    }
    const double tol = mirror_emulated() ? 0.0 : mirror_act_tol(PRODUCT_TOL);
    mirror_expect_close("fused against separate", ROWS * OUT, y_fused, y_separate, tol, tol);

    float *cx, *cw, *cbias;
    craft_layer(&cx, &cw, &cbias);
    float expected[CRAFT_ROWS * CRAFT_OUT], y_craft[CRAFT_ROWS * CRAFT_OUT];
    craft_expected(cx, cw, cbias, expected);
    linear_on(separate, CRAFT_ROWS, CRAFT_IN, CRAFT_OUT, cx, cw, cbias, y_craft);
    mirror_expect_close("the separate pass's bias", CRAFT_ROWS * CRAFT_OUT, y_craft, expected, 0,
                        0);
    assert_int_equal(linear_bias_calls(separate, 1), 0);
    assert_int_equal(linear_bias_calls(separate, 0), 2);
    backend_destroy(separate);
    long fused = linear_bias_calls(fast, 1), separated = linear_bias_calls(fast, 0);
    print_message("  %s: %ld layers fused, %ld separate\n", fast->device, fused, separated);
    if (!mirror_emulated()) return;
    if (fast_fuses()) assert_true(fused > 0 && separated == 0);

    const char *refusals[] = {"no-algorithm", "not-supported"};
    for (int i = 0; i < 2; i++) {
        setenv("LTC_EMU_CUBLASLT", refusals[i], 1);
        Backend *refused = cuda_made_with(NULL);
        for (int call = 0; call < 2; call++) {
            linear_on(refused, ROWS, IN, OUT, x, w, bias, y_separate);
            mirror_expect_close(refusals[i], ROWS * OUT, y_fused, y_separate, 0, 0);
        }
        unsetenv("LTC_EMU_CUBLASLT");
        assert_int_equal(linear_bias_calls(refused, 1), 0);
        assert_int_equal(linear_bias_calls(refused, 0), 2);
        backend_destroy(refused);
    }
#else
    skip();
#endif
}

// Rows where mask is 1 become the token; backward sends those rows'
// gradient to the token and zeros there.
static void test_mask_tokens(void **state) {
    NEED_FAST_BACKEND();
    const size_t rows = 37;
    const int c = 24;
    const size_t n = rows * c;
    float *mask = mirror_tensor(rows);
    for (size_t r = 0; r < rows; r++) mask[r] = r % 3 == 1 ? 1.0f : 0.0f;
    const float *x = mirror_random_tensor(n, -1, 1, 400);
    const float *token = mirror_random_tensor(c, -1, 1, 401);
    float *y = mirror_nan_tensor(n), *y_fast = mirror_nan_tensor(n);
    ref->op.mask_tokens_forward(ref, rows, c, (const Act *)x, mask, token, (Act *)y);
    for (size_t r = 0; r < rows; r++)
        for (int ch = 0; ch < c; ch++)
            assert_true(y[r * c + ch] == (mask[r] != 0.0f ? token[ch] : x[r * c + ch]));
    fast->op.mask_tokens_forward(fast, rows, c, DA(x), D(mask), D(token), DA(y_fast));
    HA(y_fast);
    mirror_expect_close("mask_tokens_forward", n, y_fast, y, 0, 0);

    // in place, as the ViT runs it
    const float *dy = mirror_random_tensor(n, -1, 1, 402);
    float *dx = mirror_copy(dy, n), *dx_fast = mirror_copy(dy, n);
    float *dtoken = mirror_random_tensor(c, -1, 1, 403);
    float *dtoken_fast = mirror_copy(dtoken, c), *dtoken_expected = mirror_copy(dtoken, c);
    ref->op.mask_tokens_backward(ref, rows, c, mask, (const Act *)dx, (Act *)dx, dtoken);
    Act *dx_device = DA(dx_fast);
    fast->op.mask_tokens_backward(fast, rows, c, D(mask), dx_device, dx_device, D(dtoken_fast));
    HA(dx_fast);
    H(dtoken_fast);
    for (int ch = 0; ch < c; ch++) {
        double total = 0.0;
        for (size_t r = 0; r < rows; r++)
            if (mask[r] != 0.0f) total += dy[r * c + ch];
        dtoken_expected[ch] += (float)total;
    }
    for (size_t r = 0; r < rows; r++)
        for (int ch = 0; ch < c; ch++)
            assert_true(dx[r * c + ch] == (mask[r] != 0.0f ? 0.0f : dy[r * c + ch]));
    mirror_expect_close("ref mask token gradient", c, dtoken, dtoken_expected, 0, 0);
    mirror_expect_close("mask_tokens_backward dx", n, dx_fast, dx, 0, 0);
    mirror_expect_close("mask_tokens_backward dtoken", c, dtoken_fast, dtoken, 1e-6, 1e-6);
}

// The boundary is exact for values of the dtype (the test tensors are);
// act_axpby over n values equals the fp32 axpby rounded once (the same
// float expression); with beta 0 a NaN in y is not read.
static void check_act_axpby(size_t n, float beta, uint64_t seed) {
    const float *x = mirror_random_tensor(n, -3, 3, seed);
    float *y = mirror_random_tensor(n, -1, 1, seed + 1);
    if (beta == 0.0f) y[n / 2] = NAN;
    float *y_act = mirror_copy(y, n), *y_fast = mirror_copy(y, n);
    ref->op.axpby(ref, n, 0.5f, x, beta, y);
    mirror_round(y, n);
    ref->op.act_axpby(ref, n, 0.5f, (const Act *)x, beta, (Act *)y_act);
    fast->op.act_axpby(fast, n, 0.5f, DA(x), beta, DA(y_fast));
    HA(y_fast);
    mirror_expect_close("ref act_axpby", n, y_act, y, 0, 0);
    mirror_expect_close("act_axpby", n, y_fast, y, 0, 0);
}

// act_axpby and act_column_sum equal their fp32 ops (rounded once in 16
// bits); zero clears whole bytes.
static void test_boundary_and_sums(void **state) {
    NEED_FAST_BACKEND();
    const size_t rows = 41;
    const int c = 19;
    const size_t n = rows * c;
    const float *x = mirror_random_tensor(n, -3, 3, 500);
    for (Backend *b = ref; b; b = b == ref ? fast : NULL) {
        float *act = mirror_nan_tensor(n), *back = mirror_nan_tensor(n);
        b->op.float_to_act(b, n, b == ref ? x : D(x), b == ref ? (void *)act : DA(act));
        if (b != ref) HA(act);  // DA below uploads the host copy: bring the result there first
        b->op.act_to_float(b, n, b == ref ? (void *)act : DA(act), b == ref ? back : D(back));
        if (b != ref) H(back);
        mirror_expect_close("float_to_act then act_to_float", n, back, x, 0, 0);
    }

    check_act_axpby(n, -2.0f, 501);  // 779 values: one per load on cuda
    check_act_axpby(1024, 1.0f, 502);  // 16 bytes per load
    check_act_axpby(1024, 0.0f, 503);  // y not read

    float *sums = mirror_nan_tensor(c), *act_sums = mirror_nan_tensor(c);
    float *fast_sums = mirror_nan_tensor(c);
    ref->op.column_sum(ref, rows, c, x, sums);
    ref->op.act_column_sum(ref, rows, c, (const Act *)x, act_sums);
    fast->op.act_column_sum(fast, rows, c, DA(x), D(fast_sums));
    H(fast_sums);
    mirror_expect_close("ref act_column_sum", c, act_sums, sums, 0, 0);
    mirror_expect_close("act_column_sum", c, fast_sums, sums, 1e-6, 1e-6);

    float *cleared = mirror_copy(x, n);
    fast->op.zero(fast, DA(cleared), act_bytes(fast, n));
    HA(cleared);
    for (size_t i = 0; i < n; i++) assert_true(cleared[i] == 0.0f && !signbit(cleared[i]));
}

// The losses' fp32 twins give what the activation ops give while
// activations are fp32; in 16 bits the activation ops' outputs are the
// twins' rounded once (the same arithmetic, one rounding at the store).
static void test_f32_twins(void **state) {
    NEED_FAST_BACKEND();
    const size_t rows = 33;
    const int c = 20;
    const size_t n = rows * c;
    const float *x = mirror_random_tensor(n, -1, 1, 600);
    const float *dy = mirror_random_tensor(n, -1, 1, 601);
    const float *gamma = mirror_random_tensor(c, 0.5f, 1.5f, 602);
    const float *beta = mirror_random_tensor(c, -1, 1, 603);
    for (Backend *b = ref; b; b = b == ref ? fast : NULL) {
        // ref works on the host buffers, the fast backend on their device twins
        void *(*at)(const void *) = b == ref ? NULL : D;
#define ON(p) (at ? at(p) : (void *)(p))
#define ONA(p) (at ? (void *)DA(p) : (void *)(p))
        float *r_act = mirror_nan_tensor(n), *r_f32 = mirror_nan_tensor(n);
        b->op.relu_forward(b, n, ONA(x), ONA(r_act));
        b->op.relu_forward_f32(b, n, ON(x), ON(r_f32));
        // An output a later op reads comes back to the host first: D and DA
        // upload the host buffer over its twin.
        if (at) HA(r_act), H(r_f32);
        float *g_act = mirror_nan_tensor(n), *g_f32 = mirror_nan_tensor(n);
        b->op.relu_backward(b, n, ONA(r_act), ONA(dy), ONA(g_act));
        b->op.relu_backward_f32(b, n, ON(r_f32), ON(dy), ON(g_f32));
        float *biased = mirror_copy(x, n), *biased_f32 = mirror_copy(x, n);
        b->op.bias_add(b, rows, c, ON(beta), ONA(biased));
        b->op.bias_add_f32(b, rows, c, ON(beta), ON(biased_f32));
        float *bn[2], *stats[2][4], *dx[2], *dgamma[2], *dbeta[2];
        for (int k = 0; k < 2; k++) {
            bn[k] = mirror_nan_tensor(n);
            dx[k] = mirror_nan_tensor(n);
            dgamma[k] = mirror_random_tensor(c, -1, 1, 610);
            dbeta[k] = mirror_random_tensor(c, -1, 1, 611);
            for (int s = 0; s < 4; s++) stats[k][s] = mirror_random_tensor(c, 0.5f, 1, 620 + s);
        }
        b->op.batchnorm_forward_train(b, rows, c, ONA(x), ON(gamma), ON(beta), 0.1f, 1e-5f,
                                      ONA(bn[0]), ON(stats[0][0]), ON(stats[0][1]),
                                      ON(stats[0][2]), ON(stats[0][3]));
        b->op.batchnorm_forward_train_f32(b, rows, c, ON(x), ON(gamma), ON(beta), 0.1f, 1e-5f,
                                          ON(bn[1]), ON(stats[1][0]), ON(stats[1][1]),
                                          ON(stats[1][2]), ON(stats[1][3]));
        if (at)
            for (int k = 0; k < 2; k++) H(stats[k][0]), H(stats[k][1]);
        b->op.batchnorm_backward(b, rows, c, ONA(x), ONA(dy), ON(gamma), ON(stats[0][0]),
                                 ON(stats[0][1]), ONA(dx[0]), ON(dgamma[0]), ON(dbeta[0]));
        b->op.batchnorm_backward_f32(b, rows, c, ON(x), ON(dy), ON(gamma), ON(stats[1][0]),
                                     ON(stats[1][1]), ON(dx[1]), ON(dgamma[1]), ON(dbeta[1]));
#undef ON
#undef ONA
        float *outputs[][2] = {{r_act, r_f32}, {g_act, g_f32}, {biased, biased_f32},
                               {bn[0], bn[1]}, {dx[0], dx[1]}, {dgamma[0], dgamma[1]},
                               {dbeta[0], dbeta[1]}, {stats[0][3], stats[1][3]}};
        const size_t counts[] = {n, n, n, n, n, c, c, c};
        for (size_t k = 0; k < sizeof counts / sizeof *counts; k++) {
            const int is_act = k < 5;  // the first five are activations
            if (at) {
                if (is_act) HA(outputs[k][0]);
                else H(outputs[k][0]);
                H(outputs[k][1]);
            }
            if (is_act) mirror_round(outputs[k][1], counts[k]);
            mirror_expect_close(b->name, counts[k], outputs[k][1], outputs[k][0], 0, 0);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_linear, mirror_free),
        cmocka_unit_test_teardown(test_linear_bias_rounded, mirror_free),
        cmocka_unit_test_teardown(test_linear_bias_paths, mirror_free),
        cmocka_unit_test_teardown(test_mask_tokens, mirror_free),
        cmocka_unit_test_teardown(test_boundary_and_sums, mirror_free),
        cmocka_unit_test_teardown(test_f32_twins, mirror_free),
    };
    return mirror_run_groups_16bit(tests, sizeof tests / sizeof tests[0]);
}
