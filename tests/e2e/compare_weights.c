// Compares the tensors of two weight files (safetensors or our .ckpt):
//   compare_weights A B ATOL RTOL
//   compare_weights --norm [--floor F] A B RTOL [INIT UTOL]
// Every F32 tensor of A must be in B with the same shape; other dtypes must
// be equal bytewise; B may not hold tensors A lacks.
// Elementwise (the default): |a - b| <= ATOL + RTOL max|b| for every
// element: gradients and weights are sums of many terms, so rounding scales
// with the size of what was summed, not with each (possibly cancelled)
// result. ATOL and RTOL both 0 ask for the same bits.
// --norm: per tensor, ||a - b|| <= RTOL ||b|| + UTOL ||b - init|| (L2
// norms; INIT the weights both runs started from). For runs whose
// backward may take another branch at a kink (a ReLU input within rounding
// of 0): one such flip moves single elements of the gradient by up to 15%
// of their tensor's largest value but the tensor's norm by about 2%
// (tests/e2e/train_ranks.sh), and after several steps what two runs differ
// by is a part of what training changed (UTOL), not of the weights.
// --floor F adds F sqrt(n) to each bound (an RMS of F per element): for
// tensors that are rounding noise around 0, such as the running mean of a
// BatchNorm after a bias-free 1x1 convolution of a normalised input (zero
// in exact arithmetic), where any relative bound fails.
// Prints the largest difference relative to its tensor's scale (largest
// element, or norm) and the tensor closest to (or past) its bound, and
// exits 1 when a bound is broken or the files do not match up.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/safetensors.h"
#include "train/checkpoint.h"

typedef struct WeightFile {
    SafeTensors tensors;
    Checkpoint checkpoint;
    int is_checkpoint;
} WeightFile;

static int open_weights(const char *path, WeightFile *file) {
    ErrorMessage err = {{0}};
    file->is_checkpoint = checkpoint_is_checkpoint_file(path);
    if (file->is_checkpoint ? checkpoint_read(path, &file->checkpoint, &err)
                            : safetensors_read(path, &file->tensors, &err)) {
        fprintf(stderr, "compare_weights: %s\n", err.text);
        return -1;
    }
    if (file->is_checkpoint) file->tensors = file->checkpoint.tensors;
    return 0;
}

static void close_weights(WeightFile *file) {
    if (file->is_checkpoint) checkpoint_free(&file->checkpoint);
    else safetensors_free(&file->tensors);
}

static float element(const void *data, size_t e) {
    float v;
    memcpy(&v, (const char *)data + e * sizeof v, sizeof v);
    return v;
}

// What one F32 tensor pair came to: its worst ratio to the bound (and
// where), its difference relative to its scale.
typedef struct Verdict {
    double ratio, relative;
    char where[640];
} Verdict;

// a, b, init: (n) floats; init may be NULL.
static Verdict compare_elementwise(const char *name, const void *a, const void *b, size_t n,
                                   double atol, double rtol) {
    Verdict verdict = {0, 0, ""};
    double scale = 0;
    for (size_t e = 0; e < n; e++) scale = fmax(scale, fabs(element(b, e)));
    for (size_t e = 0; e < n; e++) {
        const float u = element(a, e), v = element(b, e);
        const double difference = fabs((double)u - v), bound = atol + rtol * scale;
        // A bound of 0 (ATOL and RTOL 0, or an all-zero tensor with ATOL 0): the same bits.
        const double ratio = bound > 0 ? difference / bound
                             : memcmp(&u, &v, sizeof u) != 0 ? INFINITY : 0.0;
        if (difference / (scale + 1e-30) > verdict.relative || isnan(difference))
            verdict.relative = difference / (scale + 1e-30);
        if (ratio > verdict.ratio || isnan(ratio)) {
            verdict.ratio = ratio;
            snprintf(verdict.where, sizeof verdict.where, "%s[%zu]: %.9g vs %.9g", name, e, u, v);
        }
    }
    return verdict;
}

static Verdict compare_norms(const char *name, const void *a, const void *b, const void *init,
                             size_t n, double rtol, double utol, double floor) {
    double difference = 0, scale = 0, update = 0;
    for (size_t e = 0; e < n; e++) {
        const double u = element(a, e), v = element(b, e), w = init ? element(init, e) : v;
        difference += (u - v) * (u - v);
        scale += v * v;
        update += (v - w) * (v - w);
    }
    difference = sqrt(difference), scale = sqrt(scale), update = sqrt(update);
    const double bound = rtol * scale + utol * update + floor * sqrt((double)n);
    Verdict verdict = {bound > 0 ? difference / bound : difference > 0 ? INFINITY : 0,
                       difference / (scale + 1e-30), ""};
    if (isnan(difference)) verdict.ratio = verdict.relative = NAN;
    snprintf(verdict.where, sizeof verdict.where,
             "%s: ||a - b|| %.3g, ||b|| %.3g, ||b - initial|| %.3g", name, difference, scale,
             update);
    return verdict;
}

int main(int argc, char **argv) {
    const int norm = argc > 1 && strcmp(argv[1], "--norm") == 0;
    double floor = 0;
    if (norm && argc > 3 && strcmp(argv[2], "--floor") == 0) {
        floor = atof(argv[3]);
        argv[3] = argv[1];  // drop "--floor F": the rest reads as without it
        argv += 2;
        argc -= 2;
    }
    if (norm ? argc != 5 && argc != 7 : argc != 5) {
        fprintf(stderr, "usage: compare_weights A B ATOL RTOL\n"
                        "       compare_weights --norm [--floor F] A B RTOL [INIT UTOL]\n");
        return 2;
    }
    char **files = argv + 1 + norm;
    const double atol = norm ? 0 : atof(argv[3]), rtol = atof(argv[4]);
    const double utol = norm && argc == 7 ? atof(argv[6]) : 0;
    WeightFile a, b, init = {0};
    const int has_init = norm && argc == 7;
    if (open_weights(files[0], &a) || open_weights(files[1], &b)) return 1;
    if (has_init && open_weights(argv[5], &init)) return 1;
    int problems = 0;
    Verdict worst = {0, 0, "none"};
    double largest = 0;
    if (a.tensors.count != b.tensors.count) {
        fprintf(stderr, "%d tensors in %s, %d in %s\n", a.tensors.count, files[0],
                b.tensors.count, files[1]);
        problems++;
    }
    for (int i = 0; i < a.tensors.count; i++) {
        const SafeTensor *x = &a.tensors.tensors[i];
        const SafeTensor *y = safetensors_find(&b.tensors, x->name);
        if (!y || y->dtype != x->dtype || y->size != x->size) {
            fprintf(stderr, "%s: missing or different shape/dtype in %s\n", x->name, files[1]);
            problems++;
            continue;
        }
        const void *xd = safetensors_data(&a.tensors, x), *yd = safetensors_data(&b.tensors, y);
        if (x->dtype != SAFE_F32) {
            if (memcmp(xd, yd, x->size) != 0) {
                fprintf(stderr, "%s (%s) differs\n", x->name, safe_dtype_name(x->dtype));
                problems++;
            }
            continue;
        }
        const size_t n = x->size / sizeof(float);
        // Tensors INIT lacks (or holds in another shape) get no update term.
        const SafeTensor *z = has_init ? safetensors_find(&init.tensors, x->name) : NULL;
        const void *zd = z && z->dtype == SAFE_F32 && z->size == x->size
                             ? safetensors_data(&init.tensors, z) : NULL;
        const Verdict verdict = norm ? compare_norms(x->name, xd, yd, zd, n, rtol, utol, floor)
                                     : compare_elementwise(x->name, xd, yd, n, atol, rtol);
        if (verdict.relative > largest || isnan(verdict.relative)) largest = verdict.relative;
        if (verdict.ratio > worst.ratio || isnan(verdict.ratio)) worst = verdict;
    }
    printf("largest difference %.3g of its tensor's %s; closest to the bound (%.3g of it): %s\n",
           largest, norm ? "norm" : "scale", worst.ratio, worst.where);
    if (worst.ratio > 1 || isnan(worst.ratio)) problems++;
    close_weights(&a);
    close_weights(&b);
    if (has_init) close_weights(&init);
    return problems ? 1 : 0;
}
