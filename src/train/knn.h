// kNN evaluation of embeddings, the online quality signal of a training run:
// a temperature-weighted cosine kNN classifier as in lightly's benchmarks
// (lightly/utils/benchmarking/knn.py, knn_predict), and labels read from a
// class-per-sub-folder tree. Host memory, plain C, no backend needed.
//
// The classifier, for one query q against a bank of labelled rows:
//   1. every row is L2-normalised: x / ||x|| with the norm computed in double
//      and each element rounded to float (a zero row stays zero, like
//      torch.nn.functional.normalize);
//   2. similarity(q, b) = the float dot product of the normalised rows, summed
//      in order d = 0 .. dim-1 (one float accumulator per pair, no
//      reassociation, so the value does not depend on blocking);
//   3. the k most similar bank rows are taken; among equal similarities the
//      lower bank index ranks first (lightly's topk leaves this open);
//   4. each neighbour adds exp(similarity / temperature) (double) to the
//      score of its class, in rank order;
//   5. the prediction is the class with the highest score; among equal
//      scores the lowest class index wins.
// k is clamped to the number of bank rows available (n - 1 for leave-one-out).
// Defaults: k = 20 (lightly's benchmark uses 200), temperature = 0.1.
#ifndef LTC_TRAIN_KNN_H
#define LTC_TRAIN_KNN_H

#include <stdint.h>

#include "data/scan.h"
#include "util/error.h"

#define KNN_DEFAULT_K 20
#define KNN_DEFAULT_TEMPERATURE 0.1f

// Labels from a class-per-sub-folder tree: for every image of the dataset the
// label is the index of its top-level sub-folder name (the first component
// of its relative path; deeper folders belong to their top-level class) in
// the strcmp-sorted list of class names. An image directly in the root is an
// error naming it. On success *class_names holds *class_count malloc'ed
// names (free with knn_labels_free); on failure nothing is left allocated.
int knn_labels_from_folders(const Dataset *dataset, int32_t *labels /* (dataset->count) */,
                            char ***class_names, int *class_count, ErrorMessage *err);
// Frees what knn_labels_from_folders allocated; safe on NULL.
void knn_labels_free(char **class_names, int class_count);

// Leave-one-out over one labelled set: each row is classified by all the
// others (itself excluded). *top1 = fraction classified correctly, in [0, 1].
// Fails on n < 2, dim < 1, class_count < 1, k < 1, temperature <= 0 or not
// finite, a label outside [0, class_count), or a non-finite feature.
int knn_leave_one_out_top1(const float *features /* (n, dim), not normalised */,
                           const int32_t *labels /* (n) */, int n, int dim, int class_count,
                           int k, float temperature, double *top1, ErrorMessage *err);

// Train/val split: each val row is classified by the train rows.
int knn_top1(const float *train_features /* (train_count, dim) */,
             const int32_t *train_labels /* (train_count) */, int train_count,
             const float *val_features /* (val_count, dim) */,
             const int32_t *val_labels /* (val_count) */, int val_count, int dim,
             int class_count, int k, float temperature, double *top1, ErrorMessage *err);

#endif
