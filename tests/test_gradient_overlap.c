// The gradient average overlapped with backward (train/gradient_sync.h):
// - bucket launch order, against a fake communicator that records its
//   calls: buckets start in bucket order, each only once backward reported
//   its whole range final and as soon as it and the buckets before it are;
//   a frozen group's buckets never start; every started bucket is waited
//   for before gradient_sync_finish returns; more buckets than the
//   communicator's request pool still go through;
// - a second backward pass over reported gradients fails at finish unless
//   the pass was held;
// - the reports of the models and methods are true: every gradient a
//   report called final (SimCLR, BYOL, DINO with local crops on a ResNet
//   and a ViT, DINOv2 with local crops) is bit for bit the same when the
//   method's step returns, and each group's reports go strictly down to 0.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "fixture_groups.h"
#include "method_fixture.h"
#include "ssl_methods/method.h"
#include "train/gradient_sync.h"

// ---- a communicator that records ----------------------------------------------------

enum { MAX_CALLS = 1024 };

typedef struct FakeCall {
    int start;            // 1 start, 0 wait
    CommRequest request;
    const float *buffer;  // start
    size_t count;
} FakeCall;

typedef struct FakeLog {
    int calls;
    FakeCall call[MAX_CALLS];
    int max_in_flight;
} FakeLog;

static int in_flight(const Communicator *comm) {
    int n = 0;
    for (int r = 0; r < COMM_MAX_REQUESTS; r++) n += comm->pending[r].in_use;
    return n;
}

static int fake_start(Communicator *comm, CommRequest request, ErrorMessage *err) {
    FakeLog *log = comm->impl;
    assert_true(log->calls < MAX_CALLS);
    log->call[log->calls++] = (FakeCall){.start = 1, .request = request,
                                         .buffer = comm->pending[request].buffer,
                                         .count = comm->pending[request].count};
    if (in_flight(comm) > log->max_in_flight) log->max_in_flight = in_flight(comm);
    return 0;
}

static int fake_wait(Communicator *comm, CommRequest request, ErrorMessage *err) {
    FakeLog *log = comm->impl;
    assert_true(log->calls < MAX_CALLS);
    log->call[log->calls++] = (FakeCall){.start = 0, .request = request};
    return 0;
}

static const CommOps fake_ops = {.all_reduce_start = fake_start, .all_reduce_wait = fake_wait};

static void fake_make(Communicator *comm, FakeLog *log) {
    memset(log, 0, sizeof *log);
    *comm = (Communicator){.name = "fake", .world_size = 2, .ops = &fake_ops, .impl = log};
}

// ---- two groups of host-memory gradients --------------------------------------------

// Group 0: tensors of 10, 7, 33, 20 floats; group 1: 50 and 12.
static void make_groups(Backend *backend, ParameterSet sets[2], MethodGroup groups[2]) {
    static const int sizes[2][FIXTURE_GROUP_TENSORS] = {{10, 7, 33, 20}, {50, 12}};
    fixture_groups_make(backend, sizes, 2, sets, groups);
}

// The buckets [0, n) that may have started once each group g is final
// from final_from[g]: the longest prefix whose ranges are final (frozen
// groups' buckets pass).
static int startable_prefix(const GradientSync *sync, const MethodGroup *groups,
                            const size_t *final_from, long step) {
    int n = 0;
    while (n < sync->bucket_count) {
        const GradientBucket *bucket = &sync->buckets[n];
        if (method_group_active(&groups[bucket->group], step) &&
            bucket->offset < final_from[bucket->group])
            break;
        n++;
    }
    return n;
}

// Backward in reverse, one tensor at a time: after each report the started
// buckets are exactly the startable prefix (none early, none late), in
// order; finish waits for every one of them.
static void check_launch_order(long step, long frozen_steps, size_t bucket_floats) {
    Backend *backend = backend_create("ref", 1, &(ErrorMessage){{0}});
    ParameterSet sets[2];
    MethodGroup groups[2];
    make_groups(backend, sets, groups);
    groups[0].frozen_steps = frozen_steps;
    Communicator comm;
    static FakeLog log;
    fake_make(&comm, &log);
    GradientSync sync;
    ErrorMessage err = {{0}};
    assert_int_equal(gradient_sync_plan(&sync, groups, 2, 8 * sizeof(float),
                                        bucket_floats * sizeof(float), &err), 0);
    gradient_sync_begin(&sync, &comm, groups, 2, step);
    size_t final_from[2] = {sets[0].total + 1, sets[1].total + 1};
    int starts = 0;
    for (int g = 1; g >= 0; g--)
        for (int i = sets[g].count - 1; i >= 0; i--) {
            parameter_grads_final_from(&sets[g], i);
            final_from[g] = sets[g].params[i].offset;
            starts = 0;
            for (int c = 0; c < log.calls; c++) starts += log.call[c].start;
            const int expected = startable_prefix(&sync, groups, final_from, step);
            int active = 0;  // started buckets among the prefix
            for (int b = 0; b < expected; b++)
                active += method_group_active(&groups[sync.buckets[b].group], step);
            assert_int_equal(starts, active);
        }
    assert_int_equal(gradient_sync_finish(&sync, &err), 0);
    // Starts in bucket order, of the active groups only; every one waited once.
    int b = 0, waits = 0;
    for (int c = 0; c < log.calls; c++) {
        const FakeCall *call = &log.call[c];
        if (!call->start) {
            waits++;
            continue;
        }
        while (!method_group_active(&groups[sync.buckets[b].group], step)) b++;
        assert_ptr_equal(call->buffer, sync.buckets[b].grads);
        assert_int_equal(call->count, sync.buckets[b].count);
        b++;
        int waited = 0;  // later, exactly once
        for (int d = c + 1; d < log.calls; d++)
            waited += !log.call[d].start && log.call[d].request == call->request;
        assert_true(waited >= 1);
    }
    assert_int_equal(waits, starts);
    assert_int_equal(in_flight(&comm), 0);
    assert_true(log.max_in_flight <= COMM_MAX_REQUESTS);
    const int frozen_buckets = step < frozen_steps ? 1 : 0;
    if (frozen_buckets)
        for (int c = 0; c < log.calls; c++)
            assert_true(!log.call[c].start || log.call[c].buffer < sets[0].grads ||
                        log.call[c].buffer >= sets[0].grads + sets[0].total);
    // Not listening any more: a later report reaches nobody.
    assert_null(sets[0].progress);
    gradient_sync_free(&sync);
    for (int g = 0; g < 2; g++) parameter_set_free(&sets[g]);
    backend_destroy(backend);
}

static void test_buckets_start_in_order_when_complete(void **state) {
    check_launch_order(3, 0, 24);
}

static void test_frozen_group_is_left_out(void **state) { check_launch_order(3, 5, 24); }

// One float per bucket: more buckets (132) than requests in the pool.
static void test_more_buckets_than_requests(void **state) { check_launch_order(0, 0, 1); }

// A second pass over reported gradients is refused unless held.
static void test_second_pass_needs_hold(void **state) {
    Backend *backend = backend_create("ref", 1, &(ErrorMessage){{0}});
    ParameterSet sets[2];
    MethodGroup groups[2];
    make_groups(backend, sets, groups);
    Communicator comm;
    static FakeLog log;
    fake_make(&comm, &log);
    GradientSync sync;
    ErrorMessage err = {{0}};
    assert_int_equal(gradient_sync_plan(&sync, groups, 2, 32, 96, &err), 0);
    for (int held = 1; held >= 0; held--) {
        gradient_sync_begin(&sync, &comm, groups, 2, 0);
        parameter_set_hold_progress(&sets[1], held);  // the first pass over group 1
        parameter_grads_final_from(&sets[1], 1);
        parameter_set_grads_final(&sets[1], 0);
        parameter_set_hold_progress(&sets[1], 0);
        parameter_grads_final_from(&sets[1], 1);  // the last pass
        parameter_set_grads_final(&sets[1], 0);
        parameter_set_grads_final(&sets[0], 0);
        const int status = gradient_sync_finish(&sync, &err);
        if (held) {
            assert_int_equal(status, 0);
        } else {
            assert_int_equal(status, -1);
            assert_non_null(strstr(err.text, "group 'group1'"));
            assert_non_null(strstr(err.text, "second backward pass"));
        }
        assert_int_equal(in_flight(&comm), 0);
    }
    gradient_sync_free(&sync);
    for (int g = 0; g < 2; g++) parameter_set_free(&sets[g]);
    backend_destroy(backend);
}

// ---- the reports of real backward passes are true -----------------------------------

enum { MAX_SNAPSHOTS = 256 };

typedef struct Snapshot {
    const ParameterSet *set;
    size_t offset;
    float *copy;  // set->grads[offset, total) when reported
} Snapshot;

typedef struct Witness {
    ParameterProgress progress;
    const Method *method;
    size_t last[METHOD_MAX_GROUPS];
    int reports[METHOD_MAX_GROUPS];
    int count;
    Snapshot snapshot[MAX_SNAPSHOTS];
} Witness;

static void witness_report(void *listener, const ParameterSet *set, size_t offset) {
    Witness *witness = listener;
    int g = 0;
    while (g < witness->method->group_count && witness->method->groups[g].params != set) g++;
    assert_true(g < witness->method->group_count);
    if (witness->reports[g]++ > 0 && offset >= witness->last[g])
        fail_msg("group %s: report from %zu after one from %zu", witness->method->groups[g].name,
                 offset, witness->last[g]);
    witness->last[g] = offset;
    assert_true(witness->count < MAX_SNAPSHOTS);
    Snapshot *snap = &witness->snapshot[witness->count++];
    snap->set = set;
    snap->offset = offset;
    snap->copy = malloc((set->total - offset) * sizeof(float) + 1);
    assert_non_null(snap->copy);
    memcpy(snap->copy, set->grads + offset, (set->total - offset) * sizeof(float));
}

// One step of `method` (host-memory backend) under the witness.
static void check_reports_are_final(Method *method, Backend *backend) {
    static Witness witness;
    memset(&witness, 0, sizeof witness);
    witness.progress = (ParameterProgress){.report = witness_report, .listener = &witness};
    witness.method = method;
    MethodFixtureBatch batch;
    method_fixture_batch(method, 2, &batch);
    ErrorMessage err = {{0}};
    for (int g = 0; g < method->group_count; g++) {
        parameter_set_zero_grads(method->groups[g].params);
        method->groups[g].params->progress = &witness.progress;
    }
    assert_int_equal(method_upload_views(method, &batch.batch, &err), 0);
    if (method->ops->step(method, 0, batch.batch.size, &err)) fail_msg("%s", err.text);
    backend->op.synchronize(backend);
    for (int g = 0; g < method->group_count; g++) {
        method->groups[g].params->progress = NULL;
        if (witness.reports[g] == 0) fail_msg("group %s: no report", method->groups[g].name);
        assert_int_equal(witness.last[g], 0);
    }
    for (int s = 0; s < witness.count; s++) {
        const Snapshot *snap = &witness.snapshot[s];
        if (memcmp(snap->copy, snap->set->grads + snap->offset,
                   (snap->set->total - snap->offset) * sizeof(float)) != 0)
            fail_msg("report %d: gradients from %zu changed after they were reported final", s,
                     snap->offset);
        free(snap->copy);
    }
    method_fixture_batch_free(&batch);
}

static BackboneSpec tiny_vit(void) {
    BackboneSpec spec = {.kind = BACKBONE_VIT};
    spec.vit = (VitConfig){.patch_size = 4, .embed_dim = 16, .depth = 3, .heads = 2,
                           .mlp_hidden = 32, .class_pos = 1, .pos_grid = 4, .layer_scale = 1,
                           .layer_scale_init = 0.1f, .norm_eps = 1e-6f,
                           .pos_interpolation = VIT_POS_INTERP_OFFSET, .pool = VIT_POOL_MEAN};
    vit_config_name(&spec.vit);
    return spec;
}

// ResNets on 32 px (16 px local crops), the ViT on its 16 px grid (8 px local).
static void check_method(MethodKind kind, BackboneSpec spec, int local_views) {
    ErrorMessage err = {{0}};
    Backend *backend = backend_create("cpu", 1, &err);
    assert_non_null(backend);
    const int image = spec.kind == BACKBONE_VIT ? 16 : 32;
    ViewSet views;
    if (local_views)
        view_set_dino(&views, image, image / 2, local_views);
    else
        method_default_views(kind, image, &views);
    const char *args[] = {"hidden_dim=16", "bottleneck_dim=8", "output_dim=12",
                          kind == METHOD_DINO ? "freeze_last_layer_steps=0"
                                              : "student_freeze_last_layer_steps=0"};
    const int arg_count = kind == METHOD_DINO || kind == METHOD_DINOV2 ? 4 : 2;
    const char *small[] = {"hidden_dim=16", "output_dim=12"};
    const MethodSetup setup = {.backend = backend, .backbone = spec, .batch = 2,
                               .dataset_size = 10, .total_steps = 10, .seed = 5,
                               .args = arg_count == 4 ? args : small, .arg_count = arg_count};
    Method method;
    if (method_create(&method, kind, &setup, &views, &err)) fail_msg("%s", err.text);
    check_reports_are_final(&method, backend);
    method_free(&method);
    backend_destroy(backend);
}

static const BackboneSpec resnet18 = {.kind = BACKBONE_RESNET, .resnet_depth = 18};

static void test_simclr_reports(void **state) { check_method(METHOD_SIMCLR, resnet18, 0); }
static void test_byol_reports(void **state) { check_method(METHOD_BYOL, resnet18, 0); }
static void test_dino_multi_crop_reports(void **state) { check_method(METHOD_DINO, resnet18, 2); }
static void test_dino_vit_multi_crop_reports(void **state) {
    check_method(METHOD_DINO, tiny_vit(), 2);
}
static void test_dinov2_multi_crop_reports(void **state) {
    check_method(METHOD_DINOV2, tiny_vit(), 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buckets_start_in_order_when_complete),
        cmocka_unit_test(test_frozen_group_is_left_out),
        cmocka_unit_test(test_more_buckets_than_requests),
        cmocka_unit_test(test_second_pass_needs_hold),
        cmocka_unit_test(test_simclr_reports),
        cmocka_unit_test(test_byol_reports),
        cmocka_unit_test(test_dino_multi_crop_reports),
        cmocka_unit_test(test_dino_vit_multi_crop_reports),
        cmocka_unit_test(test_dinov2_multi_crop_reports),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
