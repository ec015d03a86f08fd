// Compares the tensors of two weight files (safetensors or our .ckpt):
//   compare_weights A B ATOL RTOL
// Every F32 tensor of A must be in B with the same shape and
// |a - b| <= ATOL + RTOL max|b| elementwise, max over the tensor: gradients
// and weights are sums of many terms, so rounding scales with the size of
// what was summed, not with each (possibly cancelled) result. Other dtypes
// must be equal bytewise; B may not hold tensors A lacks. ATOL and RTOL
// both 0 ask for the same bits. Prints the
// largest difference relative to its tensor's scale and the element
// closest to (or past) its bound, and exits 1 when a bound is broken or the
// files do not match up.
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

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: compare_weights A B ATOL RTOL\n");
        return 2;
    }
    const double atol = atof(argv[3]), rtol = atof(argv[4]);
    WeightFile a, b;
    if (open_weights(argv[1], &a) || open_weights(argv[2], &b)) return 1;
    int problems = 0;
    double largest = 0, worst_ratio = 0;
    char worst[640] = "none";
    if (a.tensors.count != b.tensors.count) {
        fprintf(stderr, "%d tensors in %s, %d in %s\n", a.tensors.count, argv[1],
                b.tensors.count, argv[2]);
        problems++;
    }
    for (int i = 0; i < a.tensors.count; i++) {
        const SafeTensor *x = &a.tensors.tensors[i];
        const SafeTensor *y = safetensors_find(&b.tensors, x->name);
        if (!y || y->dtype != x->dtype || y->size != x->size) {
            fprintf(stderr, "%s: missing or different shape/dtype in %s\n", x->name, argv[2]);
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
        double scale = 0;
        for (size_t e = 0; e < n; e++) {
            float v;
            memcpy(&v, (const char *)yd + e * sizeof v, sizeof v);
            if (fabs(v) > scale) scale = fabs(v);
        }
        for (size_t e = 0; e < n; e++) {
            float u, v;
            memcpy(&u, (const char *)xd + e * sizeof u, sizeof u);
            memcpy(&v, (const char *)yd + e * sizeof v, sizeof v);
            const double difference = fabs((double)u - v);
            const double bound = atol + rtol * scale;
            // A bound of 0 (ATOL and RTOL 0, or an all-zero tensor with ATOL 0): the same bits.
            const double ratio = bound > 0 ? difference / bound
                                 : memcmp(&u, &v, sizeof u) != 0 ? INFINITY : 0.0;
            if (difference / (scale + 1e-30) > largest || isnan(difference))
                largest = difference / (scale + 1e-30);
            if (ratio > worst_ratio || isnan(ratio)) {
                worst_ratio = ratio;
                snprintf(worst, sizeof worst, "%s[%zu]: %.9g vs %.9g", x->name, e, u, v);
            }
        }
    }
    printf("largest difference %.3g of its tensor's scale; closest to the bound (%.3g of it): "
           "%s\n", largest, worst_ratio, worst);
    if (worst_ratio > 1 || isnan(worst_ratio)) problems++;
    if (a.is_checkpoint) checkpoint_free(&a.checkpoint); else safetensors_free(&a.tensors);
    if (b.is_checkpoint) checkpoint_free(&b.checkpoint); else safetensors_free(&b.tensors);
    return problems ? 1 : 0;
}
