// Tests of the SSL projection/prediction heads (src/ssl_methods/heads.h):
// every lightly head spec against PyTorch (tests/fixtures/heads.safetensors
// from tools/make_head_fixtures.py: lightly's own head classes, weights
// loaded by state_dict name) on the ref and cpu backends, head_backward
// against central finite differences (ref), eval mode, rejection of bad
// specs and row counts, the gradient contract, and initialisation.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_fixture.h"
#include "fixture_tensors.h"
#include "gradcheck.h"
#include "nn/weights.h"
#include "ssl_methods/heads.h"

#define HEADS_FIXTURE "tests/fixtures/heads.safetensors"

// ---- the specs under test ---------------------------------------------------------------

typedef struct Dims {
    int in, hidden, bottleneck, out;
} Dims;

typedef HeadSpec (*SpecMaker)(Dims dims);

static HeadSpec make_simclr(Dims d) { return head_spec_simclr(d.in, d.hidden, d.out); }
static HeadSpec make_byol_projection(Dims d) { return head_spec_byol_projection(d.in, d.hidden, d.out); }
static HeadSpec make_byol_prediction(Dims d) { return head_spec_byol_prediction(d.in, d.hidden, d.out); }
static HeadSpec make_vicreg(Dims d) { return head_spec_vicreg(d.in, d.hidden, d.out); }
static HeadSpec make_barlow_twins(Dims d) { return head_spec_barlow_twins(d.in, d.hidden, d.out); }
static HeadSpec make_dino(Dims d) { return head_spec_dino(d.in, d.hidden, d.bottleneck, d.out); }
static HeadSpec make_linear(Dims d) { return head_spec_linear(d.in, d.out); }
// DINOv2's head (lightly's norm_last_layer=False): weight_g trained
static HeadSpec make_dino_g(Dims d) {
    HeadSpec spec = head_spec_dino(d.in, d.hidden, d.bottleneck, d.out);
    spec.weight_g_trained = 1;
    return spec;
}

// name: the fixture's case name (tools/make_head_fixtures.py CASES)
static const struct {
    const char *name;
    SpecMaker make;
} kinds[] = {
    {"simclr", make_simclr},   {"byol_projection", make_byol_projection},
    {"byol_prediction", make_byol_prediction}, {"vicreg", make_vicreg},
    {"barlow_twins", make_barlow_twins}, {"dino", make_dino},
    {"linear", make_linear},   {"dino_g", make_dino_g},
};
#define KIND_COUNT ((int)(sizeof kinds / sizeof kinds[0]))

// ---- small helpers ------------------------------------------------------------------------

static float *device_floats(Backend *backend, size_t n) {
    float *p = backend->op.alloc(backend, n * sizeof(float));
    assert_non_null(p);
    return p;
}

static float *host_copy(Backend *backend, const float *device, size_t n) {
    float *host = malloc(n * sizeof(float));
    assert_non_null(host);
    backend->op.download(backend, host, device, n * sizeof(float));
    return host;
}

static void create_head(Head *head, Backend *backend, const HeadSpec *spec, const char *name,
                        int max_rows, uint64_t seed) {
    ErrorMessage err = {{0}};
    if (head_create(head, backend, spec, name, max_rows, seed, &err) != 0)
        fail_msg("head_create: %s", err.text);
}

static int spec_has_batch_norm(const HeadSpec *spec) {
    for (int i = 0; i < spec->layer_count; i++)
        if (spec->layers[i].batch_norm) return 1;
    return 0;
}

static void zero_grads(Head *head) {
    parameter_set_zero_grads(&head->params);
    parameter_set_zero_grads(&head->last_layer);
}

// ---- structure ------------------------------------------------------------------------------

// Parameter kinds and output widths; the names are checked against
// lightly's state_dicts by the fixture test (strict loading).
static void test_spec_structure(void **state) {
    const Dims d = {6, 10, 4, 7};
    for (int k = 0; k < KIND_COUNT; k++) {
        const HeadSpec spec = kinds[k].make(d);
        assert_int_equal(head_spec_output_dim(&spec), 7);
        Head head;
        create_head(&head, fixture_ref, &spec, kinds[k].name, 4, 1);
        for (int i = 0; i < head.params.count; i++) {
            // Linear weights are rank 2; BN weight/bias and Linear biases rank 1
            const Parameter *p = &head.params.params[i];
            if (p->rank == 2) assert_int_equal(p->kind, PARAM_WEIGHT);
            else assert_true(p->kind == PARAM_BIAS || p->kind == PARAM_NORM);
        }
        int batch_norms = 0;
        for (int i = 0; i < spec.layer_count; i++) batch_norms += spec.layers[i].batch_norm;
        assert_int_equal(head.buffers.count, 2 * batch_norms);
        assert_int_equal(head.last_layer.count,
                         spec.weight_norm_out > 0 ? 1 + spec.weight_g_trained : 0);
        head_free(&head);
    }
    // SimCLR: both Linears without bias (each has a BN after it), both BNs
    const HeadSpec simclr = head_spec_simclr(6, 10, 5);
    Head head;
    create_head(&head, fixture_ref, &simclr, "projection_head", 4, 1);
    const char *names[] = {"layers.0.weight", "layers.1.weight", "layers.1.bias",
                           "layers.3.weight", "layers.4.weight", "layers.4.bias"};
    assert_int_equal(head.params.count, 6);
    for (int i = 0; i < 6; i++) assert_string_equal(head.params.params[i].name, names[i]);
    assert_non_null(parameter_find(&head.buffers, "layers.4.running_var"));
    head_free(&head);
    // DINO: last_layer.weight_v (out, bottleneck), its own table
    const HeadSpec dino = head_spec_dino(6, 10, 4, 7);
    create_head(&head, fixture_ref, &dino, "projection_head", 4, 1);
    assert_string_equal(head.last_layer.params[0].name, "last_layer.weight_v");
    assert_int_equal(head.last_layer.params[0].shape[0], 7);
    assert_int_equal(head.last_layer.params[0].shape[1], 4);
    assert_non_null(parameter_find(&head.params, "layers.4.bias"));
    assert_int_equal(head.buffers.count, 0);
    head_free(&head);
    // with a trained g: last_layer.weight_g (out, 1) after weight_v, a weight, all 1 at start
    const HeadSpec dino_g = make_dino_g((Dims){6, 10, 4, 7});
    create_head(&head, fixture_ref, &dino_g, "projection_head", 4, 1);
    const Parameter *g = &head.last_layer.params[1];
    assert_string_equal(g->name, "last_layer.weight_g");
    assert_int_equal(g->rank, 2);
    assert_int_equal(g->torch_shape[0], 7);
    assert_int_equal(g->torch_shape[1], 1);
    assert_int_equal(g->kind, PARAM_WEIGHT);
    for (size_t i = 0; i < g->count; i++) assert_true(g->value[i] == 1.0f);
    head_free(&head);
}

// ---- against lightly / PyTorch ----------------------------------------------------------------

#define FIXTURE_ROWS 8
static const Dims fixture_dims = {6, 10, 4, 5};       // tools/make_head_fixtures.py
static const Dims fixture_dino_dims = {6, 10, 4, 7};

// Compares device values (n) with the float64 truth "C/suffix": within
// 4 f32err + 1e-6 max|truth| (gradcheck.h: PyTorch's own float32 rounding
// level, 4x for margin, as the other fixture tests).
static void expect_truth(const SafeTensors *file, Backend *backend, const char *kind,
                         const char *suffix, const float *device, size_t n) {
    char key[160], label[200];
    snprintf(key, sizeof key, "%s/%s", kind, suffix);
    const double *truth = safetensors_data(file, fixture_find_tensor(file, key, SAFE_F64, (int64_t)n));
    double *aligned = malloc(n * sizeof(double));  // the data may be unaligned: copy
    assert_non_null(aligned);
    memcpy(aligned, truth, n * sizeof(double));
    snprintf(key, sizeof key, "f32err/%s/%s", kind, suffix);
    const double f32err = fixture_read_f64(file, key);
    float *ours = host_copy(backend, device, n);
    snprintf(label, sizeof label, "%s %s %s", backend->name, kind, suffix);
    assert_int_equal(gradcheck_count_outside_truth(label, n, ours, aligned, f32err), 0);
    free(ours);
    free(aligned);
}

static float *upload_fixture(const SafeTensors *file, Backend *backend, const char *kind,
                             const char *suffix, size_t n) {
    char key[160];
    snprintf(key, sizeof key, "%s/%s", kind, suffix);
    const SafeTensor *tensor = fixture_find_tensor(file, key, SAFE_F32, (int64_t)n);
    float *device = device_floats(backend, n);
    backend->op.upload(backend, device, safetensors_data(file, tensor), n * sizeof(float));
    return device;
}

// Loads the case's weights strictly: every key under "C." is one of our
// tables' names (lightly's state_dict names) and every name is in the file.
static void load_fixture_weights(const SafeTensors *file, Head *head, const char *kind) {
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s.", kind);
    int file_keys = 0;
    for (int t = 0; t < file->count; t++)
        file_keys += strncmp(file->tensors[t].name, prefix, strlen(prefix)) == 0;
    assert_int_equal(file_keys, weights_key_count(&head->params, &head->buffers) +
                                    head->last_layer.count);
    ErrorMessage err = {{0}};
    // the last layer's key is the only one the first load does not know
    WeightsLoadOptions options = {.key_prefix = prefix,
                                  .allow_unexpected = head->last_layer.count > 0};
    head->num_batches_tracked = -1;
    if (weights_load_from(file, &head->params, &head->buffers, &head->num_batches_tracked,
                          &options, &err))
        fail_msg("%s: %s", kind, err.text);
    if (head->last_layer.count > 0) {
        options.allow_unexpected = 1;
        if (weights_load_from(file, &head->last_layer, NULL, NULL, &options, &err))
            fail_msg("%s last layer: %s", kind, err.text);
    }
}

static void check_fixture_case(const SafeTensors *file, Backend *backend, int k) {
    const char *kind = kinds[k].name;
    const int dino = strncmp(kind, "dino", 4) == 0;
    const HeadSpec spec = kinds[k].make(dino ? fixture_dino_dims : fixture_dims);
    const int in = spec.layers[0].in_features, out = head_spec_output_dim(&spec);
    const int rows = FIXTURE_ROWS;
    Head head;
    // max_rows above rows: results must not depend on the capacity
    create_head(&head, backend, &spec, "projection_head", rows + 3, 5);
    load_fixture_weights(file, &head, kind);
    const int batch_norm = spec_has_batch_norm(&spec);
    if (batch_norm) assert_int_equal(head.num_batches_tracked, 0);

    float *x = upload_fixture(file, backend, kind, "x", (size_t)rows * in);
    float *dout = upload_fixture(file, backend, kind, "dout", (size_t)rows * out);
    float *dx = device_floats(backend, (size_t)rows * in);
    ErrorMessage err = {{0}};
    const float *y = head_forward(&head, rows, (const Act *)x, 1, &err);
    if (!y) fail_msg("%s: %s", kind, err.text);
    expect_truth(file, backend, kind, "out", y, (size_t)rows * out);

    zero_grads(&head);
    if (head_backward(&head, dout, (Act *)dx, &err)) fail_msg("%s: %s", kind, err.text);
    expect_truth(file, backend, kind, "dx", dx, (size_t)rows * in);
    char suffix[PARAM_MAX_NAME + 16];
    const ParameterSet *sets[2] = {&head.params, &head.last_layer};
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < sets[s]->count; i++) {
            const Parameter *p = &sets[s]->params[i];
            snprintf(suffix, sizeof suffix, "grad/%s", p->name);
            expect_truth(file, backend, kind, suffix, p->grad, p->count);
        }
    for (int i = 0; i < head.buffers.count; i++) {
        const Parameter *p = &head.buffers.params[i];
        snprintf(suffix, sizeof suffix, "running/%s", p->name);
        expect_truth(file, backend, kind, suffix, p->value, p->count);
    }
    if (batch_norm) assert_int_equal(head.num_batches_tracked, 1);
    // dout is not modified
    char key[64];
    snprintf(key, sizeof key, "%s/dout", kind);
    float *dout_after = host_copy(backend, dout, (size_t)rows * out);
    assert_memory_equal(dout_after, safetensors_data(file, safetensors_find(file, key)),
                        (size_t)rows * out * sizeof(float));
    free(dout_after);

    y = head_forward(&head, rows, (const Act *)x, 0, &err);
    if (!y) fail_msg("%s: %s", kind, err.text);
    expect_truth(file, backend, kind, "out_eval", y, (size_t)rows * out);
    if (batch_norm) assert_int_equal(head.num_batches_tracked, 1);  // eval does not count

    backend->op.free(backend, x);
    backend->op.free(backend, dout);
    backend->op.free(backend, dx);
    head_free(&head);
}

static void test_matches_pytorch(void **state) {
    SafeTensors file;
    ErrorMessage err = {{0}};
    if (safetensors_read(HEADS_FIXTURE, &file, &err)) fail_msg("%s", err.text);
    for (int k = 0; k < KIND_COUNT; k++) {
        check_fixture_case(&file, fixture_ref, k);
        check_fixture_case(&file, fixture_cpu, k);
    }
    safetensors_free(&file);
}

// ---- finite differences ------------------------------------------------------------------------

typedef struct FdProblem {
    Head *head;
    int rows;
    float *x;           // (rows, in)
    float *projection;  // (rows, out): loss = <projection, head(x)>
    size_t out_count;
} FdProblem;

// Every perturbed vector (x or a parameter) is read by the forward in place.
static double fd_loss(void *context, const float *unused) {
    FdProblem *p = context;
    ErrorMessage err = {{0}};
    const float *y = head_forward(p->head, p->rows, (const Act *)p->x, 1, &err);
    if (!y) fail_msg("%s", err.text);
    return gradcheck_project(p->out_count, y, p->projection);
}

// Smooth except at ReLU kinks (random inputs lie > h from them with high
// probability; the seeds are fixed): h = 1e-3 keeps the O(h^2) truncation
// error ~1e-6, the fp32 rounding of a loss of ~25 O(1) terms (~5e-7) / 2h
// stays ~3e-4, under atol 1e-3 (the same as test_backend_ref_grad.c's
// SMOOTH_TOLERANCE).
static const GradcheckTolerance HEAD_TOLERANCE = {.step = 1e-3f, .rtol = 1e-2, .atol = 1e-3};

static void check_finite_differences(int k, uint64_t seed) {
    const Dims dims = {4, 6, 3, 5};
    const HeadSpec spec = kinds[k].make(dims);
    const int rows = 5, in = spec.layers[0].in_features, out = head_spec_output_dim(&spec);
    Head head;
    create_head(&head, fixture_backend, &spec, "projection_head", rows, seed);
    // Parameters of order 1 (DINO's init is std 0.02: GELU would stay linear).
    ParameterSet *sets[2] = {&head.params, &head.last_layer};
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < sets[s]->count; i++)
            gradcheck_fill_uniform(sets[s]->params[i].value, sets[s]->params[i].count, -1.0f,
                                   1.0f, seed + 100 * s + i);
    FdProblem p = {&head, rows, fixture_random_tensor((size_t)rows * in, -1.5f, 1.5f, seed + 1),
                   fixture_random_tensor((size_t)rows * out, -1, 1, seed + 2), (size_t)rows * out};
    float *dx = fixture_tensor((size_t)rows * in);
    zero_grads(&head);
    fd_loss(&p, NULL);
    ErrorMessage err = {{0}};
    if (head_backward(&head, p.projection, (Act *)dx, &err)) fail_msg("%s", err.text);
    char label[160];
    snprintf(label, sizeof label, "%s dx", kinds[k].name);
    assert_int_equal(gradcheck_compare(label, fd_loss, &p, p.x, (size_t)rows * in, dx,
                                       HEAD_TOLERANCE),
                     0);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < sets[s]->count; i++) {
            Parameter *param = &sets[s]->params[i];
            snprintf(label, sizeof label, "%s d%s", kinds[k].name, param->name);
            assert_int_equal(gradcheck_compare(label, fd_loss, &p, param->value, param->count,
                                               param->grad, HEAD_TOLERANCE),
                             0);
        }
    head_free(&head);
}

static void test_backward_finite_differences(void **state) {
    for (int k = 0; k < KIND_COUNT; k++) check_finite_differences(k, 700 + 10 * (uint64_t)k);
}

// ---- gradient contract ---------------------------------------------------------------------------

// Parameter grads accumulate (+=: two backwards give exactly twice one, as
// t + t is exact), dx is overwritten (=), dx NULL skips it only, and a
// second backward of the same forward sees the same saved state.
static void test_gradient_contract(void **state) {
    // SimCLR (BN), DINO (GELU, last layer), DINO with a trained g
    const int kinds_checked[] = {0, 5, 7};
    for (int c = 0; c < 3; c++) {
        const int k = kinds_checked[c];
        const HeadSpec spec = kinds[k].make(fixture_dino_dims);
        const int rows = 6, in = spec.layers[0].in_features, out = head_spec_output_dim(&spec);
        Head head;
        create_head(&head, fixture_backend, &spec, "projection_head", rows, 3);
        float *x = fixture_random_tensor((size_t)rows * in, -1, 1, 50);
        float *dout = fixture_random_tensor((size_t)rows * out, -1, 1, 51);
        float *dx_once = fixture_tensor((size_t)rows * in), *dx_twice = fixture_tensor((size_t)rows * in);
        ErrorMessage err = {{0}};
        assert_non_null(head_forward(&head, rows, (const Act *)x, 1, &err));
        zero_grads(&head);
        assert_int_equal(head_backward(&head, dout, (Act *)dx_once, &err), 0);
        float *once = host_copy(fixture_backend, head.params.grads, head.params.total);
        float *once_last = host_copy(fixture_backend, head.last_layer.grads, head.last_layer.total);
        for (size_t i = 0; i < (size_t)rows * in; i++) dx_twice[i] = 7.0f;  // garbage
        assert_int_equal(head_backward(&head, dout, (Act *)dx_twice, &err), 0);
        assert_memory_equal(dx_once, dx_twice, (size_t)rows * in * sizeof(float));
        for (size_t i = 0; i < head.params.total; i++)
            assert_true(head.params.grads[i] == 2.0f * once[i]);
        for (size_t i = 0; i < head.last_layer.total; i++)
            assert_true(head.last_layer.grads[i] == 2.0f * once_last[i]);
        // without dx: the same parameter gradients
        zero_grads(&head);
        assert_int_equal(head_backward(&head, dout, NULL, &err), 0);
        assert_memory_equal(head.params.grads, once, head.params.total * sizeof(float));
        free(once);
        free(once_last);
        head_free(&head);
    }
}

// ---- eval mode ----------------------------------------------------------------------------------

// Eval mode uses the running statistics: a row's output does not depend on
// the batch around it (with batch statistics one row alone would give BN's
// bias), running statistics and num_batches_tracked stay unchanged, and
// there is nothing to backpropagate.
static void test_eval_uses_running_stats(void **state) {
    for (int k = 0; k < KIND_COUNT; k++) {
        const HeadSpec spec = kinds[k].make(fixture_dino_dims);
        const int rows = 6, in = spec.layers[0].in_features, out = head_spec_output_dim(&spec);
        Head head;
        create_head(&head, fixture_backend, &spec, "projection_head", rows, 9);
        float *x = fixture_random_tensor((size_t)rows * in, -2, 2, 60 + k);
        ErrorMessage err = {{0}};
        // one training step so the running statistics are not the 0 / 1 init
        assert_non_null(head_forward(&head, rows, (const Act *)x, 1, &err));
        const int64_t tracked = head.num_batches_tracked;
        float *buffers = host_copy(fixture_backend, head.buffers.values, head.buffers.total);
        const float *y = head_forward(&head, rows, (const Act *)x, 0, &err);
        assert_non_null(y);
        float *batch_out = host_copy(fixture_backend, y, (size_t)rows * out);
        assert_memory_equal(head.buffers.values, buffers, head.buffers.total * sizeof(float));
        assert_int_equal(head.num_batches_tracked, tracked);
        assert_int_equal(head_backward(&head, batch_out, NULL, &err), -1);
        assert_non_null(strstr(err.text, "projection_head"));
        y = head_forward(&head, 1, (const Act *)(x + 3 * in), 0, &err);  // row 3 alone
        assert_non_null(y);
        // the same per-row arithmetic (ref: double accumulation): identical
        assert_int_equal(gradcheck_count_mismatches(kinds[k].name, (size_t)out, y,
                                                    batch_out + 3 * out, 1e-6, 1e-7),
                         0);
        free(buffers);
        free(batch_out);
        head_free(&head);
    }
}

// ---- rejection ----------------------------------------------------------------------------------

static void expect_create_fails(HeadSpec spec, int max_rows, const char *fragment) {
    Head head;
    ErrorMessage err = {{0}};
    assert_int_equal(head_create(&head, fixture_ref, &spec, "my_head", max_rows, 1, &err), -1);
    if (!strstr(err.text, "my_head") || !strstr(err.text, fragment))
        fail_msg("message '%s' lacks 'my_head' or '%s'", err.text, fragment);
    head_free(&head);  // safe after a failed create
}

static void test_rejects_bad_specs_and_rows(void **state) {
    HeadSpec spec = head_spec_simclr(6, 10, 5);
    spec.layer_count = 0;
    expect_create_fails(spec, 4, "layers");
    spec.layer_count = HEAD_MAX_LAYERS + 1;
    expect_create_fails(spec, 4, "layers");
    spec = head_spec_simclr(6, 10, 5);
    spec.layers[1].out_features = 0;
    expect_create_fails(spec, 4, "features");
    spec = head_spec_vicreg(6, 10, 5);
    spec.layers[2].in_features = 9;  // layer 1 gives 10
    expect_create_fails(spec, 4, "layer 2 takes 9");
    spec = head_spec_dino(6, 10, 4, 7);
    spec.layers[0].activation = (HeadActivation)7;
    expect_create_fails(spec, 4, "activation");
    spec = head_spec_dino(6, 10, 4, 7);
    spec.weight_norm_out = -1;
    expect_create_fails(spec, 4, "weight_norm_out");
    spec = head_spec_linear(6, 5);
    spec.weight_g_trained = 1;
    expect_create_fails(spec, 4, "weight_g");
    expect_create_fails(head_spec_linear(6, 5), 0, "max_rows");

    Head head;
    ErrorMessage err = {{0}};
    const HeadSpec simclr = head_spec_simclr(6, 10, 5);
    create_head(&head, fixture_ref, &simclr, "my_head", 4, 1);
    float *x = fixture_random_tensor(5 * 6, -1, 1, 70);
    assert_null(head_forward(&head, 0, (const Act *)x, 0, &err));
    assert_non_null(strstr(err.text, "0 rows"));
    assert_null(head_forward(&head, 5, (const Act *)x, 1, &err));
    assert_non_null(strstr(err.text, "5 rows"));
    assert_null(head_forward(&head, 1, (const Act *)x, 1, &err));  // BN in training, one row
    assert_non_null(strstr(err.text, "at least 2 rows"));
    assert_non_null(strstr(err.text, "my_head"));
    assert_int_equal(head_backward(&head, x, NULL, &err), -1);  // no training forward
    assert_non_null(head_forward(&head, 1, (const Act *)x, 0, &err));       // eval: one row is fine
    assert_non_null(head_forward(&head, 4, (const Act *)x, 1, &err));
    head_free(&head);
    // Without BN a single training row is fine (DINO with one image per view).
    const HeadSpec dino = head_spec_dino(6, 10, 4, 7);
    create_head(&head, fixture_ref, &dino, "my_head", 4, 1);
    assert_non_null(head_forward(&head, 1, (const Act *)x, 1, &err));
    assert_int_equal(head_backward(&head, x, NULL, &err), 0);
    head_free(&head);
}

// ---- initialisation -------------------------------------------------------------------------------

static int tables_equal(const ParameterSet *a, const ParameterSet *b) {
    return a->total == b->total && memcmp(a->values, b->values, a->total * sizeof(float)) == 0;
}

// Every weight tensor differs (a name or seed that did not reach the draws
// of some tensor would leave it equal).
static void expect_all_weights_differ(const ParameterSet *a, const ParameterSet *b) {
    for (int i = 0; i < a->count; i++)
        if (a->params[i].kind == PARAM_WEIGHT)
            assert_memory_not_equal(a->params[i].value, b->params[i].value,
                                    a->params[i].count * sizeof(float));
}

// Same spec, name and seed: identical (on either backend); another name or
// seed: different.
static void test_init_keyed_by_name_and_seed(void **state) {
    const HeadSpec specs[2] = {head_spec_byol_projection(16, 32, 8),
                               head_spec_dino(16, 32, 8, 24)};
    for (int s = 0; s < 2; s++) {
        Head a, same, cpu_same, other_name, other_seed;
        create_head(&a, fixture_ref, &specs[s], "projection_head", 4, 42);
        create_head(&same, fixture_ref, &specs[s], "projection_head", 4, 42);
        create_head(&cpu_same, fixture_cpu, &specs[s], "projection_head", 4, 42);
        create_head(&other_name, fixture_ref, &specs[s], "prediction_head", 4, 42);
        create_head(&other_seed, fixture_ref, &specs[s], "projection_head", 4, 43);
        assert_true(tables_equal(&a.params, &same.params));
        assert_true(tables_equal(&a.last_layer, &same.last_layer));
        assert_true(tables_equal(&a.params, &cpu_same.params));
        assert_true(tables_equal(&a.last_layer, &cpu_same.last_layer));
        expect_all_weights_differ(&a.params, &other_name.params);
        expect_all_weights_differ(&a.last_layer, &other_name.last_layer);
        expect_all_weights_differ(&a.params, &other_seed.params);
        expect_all_weights_differ(&a.last_layer, &other_seed.last_layer);
        head_free(&a);
        head_free(&same);
        head_free(&cpu_same);
        head_free(&other_name);
        head_free(&other_seed);
    }
}

typedef struct Moments {
    double mean, std, max_abs, beyond_2std;  // beyond_2std: fraction with |v - mean| > 2 std
} Moments;

static Moments moments_of(const float *v, size_t n) {
    Moments m = {0};
    double sum = 0, squares = 0;
    for (size_t i = 0; i < n; i++) {
        sum += v[i];
        squares += (double)v[i] * v[i];
        m.max_abs = fmax(m.max_abs, fabs(v[i]));
    }
    m.mean = sum / n;
    m.std = sqrt(squares / n - m.mean * m.mean);
    size_t beyond = 0;
    for (size_t i = 0; i < n; i++) beyond += fabs(v[i] - m.mean) > 2 * m.std;
    m.beyond_2std = (double)beyond / n;
    return m;
}

static int all_equal(const float *v, size_t n, float value) {
    for (size_t i = 0; i < n; i++)
        if (v[i] != value) return 0;
    return 1;
}

// Distributions on layers big enough for tight statistics (n >= 65536: a
// std estimate is within ~0.3% (1 sigma), a mean within std / 256, a tail
// fraction of 4.55% within ~0.1%): tolerances of several sigma.
static void test_init_distributions(void **state) {
    // DINO: MLP weights normal(0, 0.02) truncated at +-2 (absolute, lightly's
    // a=-2, b=2: never reached), biases 0; weight_v PyTorch's default
    // uniform(+-1/sqrt(bottleneck)).
    const HeadSpec dino = head_spec_dino(512, 256, 64, 1024);
    Head head;
    create_head(&head, fixture_ref, &dino, "projection_head", 2, 11);
    for (int i = 0; i < head.params.count; i++) {
        const Parameter *p = &head.params.params[i];
        if (p->kind == PARAM_BIAS) {
            assert_true(all_equal(p->value, p->count, 0.0f));
            continue;
        }
        const Moments m = moments_of(p->value, p->count);
        const double sigma = 1.0 / sqrt((double)p->count);
        assert_true(fabs(m.mean) < 5 * 0.02 * sigma);
        assert_true(fabs(m.std / 0.02 - 1) < 5 * sigma + 0.005);
        assert_true(m.max_abs <= 2.0);
        // normal: P(|z| > 2) = 4.55% (a uniform with this std has none)
        if (p->count >= 65536) assert_true(fabs(m.beyond_2std - 0.0455) < 0.004);
    }
    const Parameter *v = &head.last_layer.params[0];
    const double bound = 1.0 / sqrt(64.0);
    const Moments mv = moments_of(v->value, v->count);
    assert_true(mv.max_abs <= bound);
    assert_true(fabs(mv.std / (bound / sqrt(3.0)) - 1) < 0.01);
    assert_true(mv.beyond_2std == 0.0);  // uniform: |v| <= 1.73 std
    head_free(&head);

    // SimCLR: Linear weights uniform(+-1/sqrt(in)); BN weight 1, bias 0,
    // running mean 0, running var 1.
    const HeadSpec simclr = head_spec_simclr(512, 256, 128);
    create_head(&head, fixture_ref, &simclr, "projection_head", 2, 11);
    const Parameter *w0 = parameter_find(&head.params, "layers.0.weight");
    const Moments m0 = moments_of(w0->value, w0->count);
    assert_true(m0.max_abs <= 1.0 / sqrt(512.0));
    assert_true(fabs(m0.std / (1.0 / sqrt(512.0) / sqrt(3.0)) - 1) < 0.01);
    const Parameter *w3 = parameter_find(&head.params, "layers.3.weight");
    assert_true(moments_of(w3->value, w3->count).max_abs <= 1.0 / sqrt(256.0));
    assert_true(all_equal(parameter_find(&head.params, "layers.1.weight")->value, 256, 1.0f));
    assert_true(all_equal(parameter_find(&head.params, "layers.4.bias")->value, 128, 0.0f));
    assert_true(all_equal(parameter_find(&head.buffers, "layers.1.running_mean")->value, 256, 0.0f));
    assert_true(all_equal(parameter_find(&head.buffers, "layers.4.running_var")->value, 128, 1.0f));
    head_free(&head);
}

// ---- main -----------------------------------------------------------------------------------------

// Both backends; fixture_backend (for fixture_tensor) is ref.
static int setup_backends(void **state) {
    if (fixture_backends_create(state)) return -1;
    fixture_backend = fixture_ref;
    return 0;
}

static int teardown_backends(void **state) {
    fixture_backend = NULL;
    return fixture_backends_destroy(state);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_spec_structure, fixture_tensors_free),
        cmocka_unit_test_teardown(test_matches_pytorch, fixture_tensors_free),
        cmocka_unit_test_teardown(test_backward_finite_differences, fixture_tensors_free),
        cmocka_unit_test_teardown(test_gradient_contract, fixture_tensors_free),
        cmocka_unit_test_teardown(test_eval_uses_running_stats, fixture_tensors_free),
        cmocka_unit_test_teardown(test_rejects_bad_specs_and_rows, fixture_tensors_free),
        cmocka_unit_test_teardown(test_init_keyed_by_name_and_seed, fixture_tensors_free),
        cmocka_unit_test_teardown(test_init_distributions, fixture_tensors_free),
    };
    return cmocka_run_group_tests(tests, setup_backends, teardown_backends);
}
