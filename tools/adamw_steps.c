// AdamW steps of one backend on float32 data from a file, for comparing the
// update with torch.optim.AdamW element for element
// (tools/check_adamw_rounding.py writes the file and reads the result):
//   adamw_steps BACKEND IN OUT
// IN: int32 N, int32 STEPS, float32 lr, eps, weight_decay, float64 beta1,
// beta2, then N initial parameters and STEPS x N gradients (float32,
// little-endian). OUT: the N parameters after the steps. BACKEND: cpu,
// ref, or cuda where a GPU is. The gradients' multiplier is 1 and no step
// is skipped.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"

typedef struct Header {
    int32_t count, steps;
    float lr, eps, weight_decay;
    double beta1, beta2;
} Header;

static int read_all(FILE *file, void *data, size_t bytes) {
    return fread(data, 1, bytes, file) == bytes ? 0 : -1;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: adamw_steps BACKEND IN OUT\n");
        return 2;
    }
    FILE *in = fopen(argv[2], "rb");
    if (!in) {
        perror(argv[2]);
        return 1;
    }
    Header h;
    if (read_all(in, &h.count, 4) || read_all(in, &h.steps, 4) || read_all(in, &h.lr, 4) ||
        read_all(in, &h.eps, 4) || read_all(in, &h.weight_decay, 4) || read_all(in, &h.beta1, 8) ||
        read_all(in, &h.beta2, 8) || h.count <= 0 || h.steps <= 0) {
        fprintf(stderr, "adamw_steps: %s: not a header of N, STEPS and the settings\n", argv[2]);
        return 1;
    }
    const size_t n = (size_t)h.count, bytes = n * sizeof(float);
    float *host = malloc(bytes), *grads = malloc(bytes * (size_t)h.steps);
    if (!host || !grads || read_all(in, host, bytes) || read_all(in, grads, bytes * h.steps)) {
        fprintf(stderr, "adamw_steps: %s: short file, or out of memory\n", argv[2]);
        return 1;
    }
    fclose(in);

    ErrorMessage err = {{0}};
    Backend *backend = backend_create(argv[1], 1, &err);
    if (!backend) {
        fprintf(stderr, "adamw_steps: %s\n", err.text);
        return 1;
    }
    float *param = backend->op.alloc(backend, bytes), *grad = backend->op.alloc(backend, bytes);
    float *m = backend->op.alloc(backend, bytes), *v = backend->op.alloc(backend, bytes);
    float *gate = backend->op.alloc(backend, GATE_FOUND * sizeof(float));
    float *step = backend->op.alloc(backend, sizeof(float));
    if (!param || !grad || !m || !v || !gate || !step) {
        fprintf(stderr, "adamw_steps: out of backend memory\n");
        return 1;
    }
    const float open_gate[GATE_FOUND] = {[GATE_MULTIPLIER] = 1.0f, [GATE_UNIT] = 1.0f};
    backend->op.upload(backend, gate, open_gate, sizeof open_gate);
    backend->op.upload(backend, param, host, bytes);
    backend->op.fill(backend, m, 0.0f, n);
    backend->op.fill(backend, v, 0.0f, n);
    for (int t = 0; t < h.steps; t++) {
        const float count = (float)(t + 1);  // the count of applied updates, as PyTorch's step
        backend->op.upload(backend, step, &count, sizeof count);
        backend->op.upload(backend, grad, grads + (size_t)t * n, bytes);
        backend->op.adamw_update(backend, n, param, grad, gate, m, v, h.lr, h.beta1, h.beta2,
                                 h.eps, h.weight_decay, step);
    }
    backend->op.download(backend, host, param, bytes);
    FILE *out = fopen(argv[3], "wb");
    if (!out || fwrite(host, 1, bytes, out) != bytes || fclose(out) != 0) {
        perror(argv[3]);
        return 1;
    }
    return 0;
}
