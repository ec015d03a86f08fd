// Helpers of the tests that run whole method steps (see method_fixture.h).
#include "method_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/load_plan.h"
#include "util/rng.h"

Backend *method_fixture_backend(const char *name, ComputeDtype dtype) {
    ErrorMessage err = {{0}};
    Backend *backend = backend_create(name, 1, &err);
    if (!backend) {
        if (strcmp(name, "cuda") != 0) fail_msg("%s", err.text);
        fprintf(stderr, "  skipped: %s\n", err.text);
        return NULL;
    }
    if (backend_set_compute_dtype(backend, dtype, &err)) fail_msg("%s", err.text);
    return backend;
}

float *method_fixture_download(Backend *backend, const void *device, size_t n) {
    float *host = malloc(n * sizeof *host);
    assert_non_null(host);
    backend->op.download(backend, host, device, n * sizeof *host);
    return host;
}

double method_fixture_relative_error(const float *a, const float *b, size_t n) {
    double difference = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; i++) {
        difference += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        norm += (double)b[i] * b[i];
    }
    return norm > 0 ? sqrt(difference / norm) : sqrt(difference);
}

double method_fixture_allowed_error(double sixteen_bit_error, double floor) {
    return fmax(3.0 * sixteen_bit_error, floor);
}

double method_fixture_scalar_floor(ComputeDtype dtype) {
    return 16.0 * (dtype == COMPUTE_BF16 ? 0x1p-8 : 0x1p-11);
}

void method_fixture_batch(const Method *method, int size, MethodFixtureBatch *out) {
    memset(out, 0, sizeof *out);
    out->batch.size = size;
    out->batch.view_count = method->views.count;
    for (int v = 0; v < method->views.count; v++) {
        const int side = method->views.views[v].size;
        const size_t bytes = (size_t)size * side * side * 3;
        out->pixels[v] = malloc(bytes);
        assert_non_null(out->pixels[v]);
        Rng rng = rng_make(11, 0, (uint64_t)v, 0);
        for (size_t i = 0; i < bytes; i++) out->pixels[v][i] = (uint8_t)rng_below(&rng, 256);
        out->batch.views[v] = out->pixels[v];
        out->batch.view_size[v] = side;
    }
    out->geometry = calloc((size_t)method->views.count * size, sizeof *out->geometry);
    assert_non_null(out->geometry);
    const ImageInfo info = {.width = 200, .height = 160, .format = IMAGE_FORMAT_PNG};
    for (int b = 0; b < size; b++) {
        LoadPlan plan;
        load_plan(&method->views, 11, 0, (uint64_t)b, &info, 0, &plan);
        for (int v = 0; v < method->views.count; v++)
            out->geometry[(size_t)v * size + b] =
                (ViewGeometry){plan.params[v].crop, info.width, info.height, plan.params[v].flip};
    }
    out->batch.geometry = out->geometry;
}

void method_fixture_batch_free(MethodFixtureBatch *batch) {
    for (int v = 0; v < AUGMENT_MAX_VIEWS; v++) free(batch->pixels[v]);
    free(batch->geometry);
    memset(batch, 0, sizeof *batch);
}

int method_fixture_small_args(MethodKind kind, const char *teacher_arg, const char **args) {
    switch (kind) {
    case METHOD_DINO:
        args[0] = "hidden_dim=32", args[1] = "bottleneck_dim=8", args[2] = "output_dim=24";
        args[3] = "warmup_teacher_temp_steps=0";
        return 4;
    case METHOD_DINOV2:  // KoLeo off: see test_method_steps.c's header
    case METHOD_DINOV31:
        args[0] = "hidden_dim=32", args[1] = "bottleneck_dim=8", args[2] = "output_dim=24";
        args[3] = "koleo_loss_weight=0";
        return 4;
    case METHOD_DISTILLATION:
    case METHOD_DISTILLATION_V1:
        args[0] = teacher_arg, args[1] = "queue_size=12";
        return 2;
    case METHOD_DISTILLATION_V2:
        args[0] = teacher_arg, args[1] = "projection_hidden_dim=32";
        return 2;
    default:
        args[0] = "hidden_dim=32", args[1] = "output_dim=16";
        return 2;
    }
}

int method_fixture_write_teacher(const BackboneSpec *spec, int resolution, char *path,
                                 char *arg) {
    strcpy(path, "/tmp/ltc_test_teacher_XXXXXX.safetensors");
    const int fd = mkstemps(path, (int)strlen(".safetensors"));
    if (fd < 0) return -1;
    close(fd);
    snprintf(arg, 96, "teacher=%s", path);
    ErrorMessage err = {{0}};
    Backend *backend = backend_create("ref", 1, &err);
    Backbone teacher;
    const BackboneInput shape = {1, resolution};
    int status = !backend || backbone_create(&teacher, backend, spec, &shape, 1, 1, &err);
    if (!status) {
        status = backbone_save(&teacher, path, &err);
        backbone_free(&teacher);
    }
    if (backend) backend_destroy(backend);
    if (status) fprintf(stderr, "teacher: %s\n", err.text);
    return status ? -1 : 0;
}
