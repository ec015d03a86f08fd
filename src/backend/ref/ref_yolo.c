// Reference ops of Ultralytics' YOLO models (backend.h): SiLU (C2PSA's
// position encoding runs on the depthwise ops). Plain loops in double,
// every output rounded to the compute dtype once (ref_round_acts).
#include <math.h>

#include "backend/ref/ref_ops.h"

static double sigmoid(double a) { return 1.0 / (1.0 + exp(-a)); }

void ref_silu_forward(Backend *backend, size_t n, const Act *x_act, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    for (size_t i = 0; i < n; i++) y[i] = (float)(x[i] * sigmoid(x[i]));
    ref_round_acts(backend, y_act, n);
}

void ref_silu_backward(Backend *backend, size_t n, const Act *x_act, const Act *dy_act,
                       Act *dx_act) {
    const float *x = (const float *)x_act;
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    for (size_t i = 0; i < n; i++) {
        const double a = x[i], s = sigmoid(a);
        dx[i] = (float)(dy[i] * s * (1.0 + a * (1.0 - s)));
    }
    ref_round_acts(backend, dx_act, n);
}
