// kNN evaluation (see knn.h for the exact arithmetic and tie rules).
//
// Speed: similarities are computed block by block. Bank rows are stored
// transposed in tiles of KNN_TILE rows ((dim, KNN_TILE) per tile) so the
// micro-kernel updates KNN_MICRO x KNN_TILE independent accumulators per
// feature index: the inner loop is a vertical multiply-add the compiler
// vectorises without reordering any sum. Queries go in blocks of
// KNN_QUERY_BLOCK rows so each tile is reused from cache by the whole block.
// Top-k per query is a bounded heap with an early reject against its worst
// element, so selection costs about one compare per bank row.
#include "train/knn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KNN_TILE 8           // bank rows per transposed tile
#define KNN_MICRO 4          // query rows per micro-kernel call
#define KNN_QUERY_BLOCK 64   // query rows sharing one pass over the bank

// ---- labels from folders ------------------------------------------------------

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void knn_labels_free(char **class_names, int class_count) {
    if (!class_names) return;
    for (int c = 0; c < class_count; c++) free(class_names[c]);
    free(class_names);
}

// Length of the top-level folder name of a relative path, or -1 when the
// file sits directly in the root.
static long top_level_length(const char *relative_path) {
    const char *slash = strchr(relative_path, '/');
    return slash ? (long)(slash - relative_path) : -1;
}

// Index of the class named by the first `length` bytes of path, or -1.
static int find_class(char *const *names, int count, const char *path, size_t length) {
    int low = 0, high = count - 1;
    while (low <= high) {
        const int middle = low + (high - low) / 2;
        int order = strncmp(names[middle], path, length);
        if (order == 0 && names[middle][length] != '\0') order = 1;  // name is longer
        if (order == 0) return middle;
        if (order < 0) low = middle + 1;
        else high = middle - 1;
    }
    return -1;
}

int knn_labels_from_folders(const Dataset *dataset, int32_t *labels, char ***class_names,
                            int *class_count, ErrorMessage *err) {
    *class_names = NULL;
    *class_count = 0;
    if (dataset->count == 0) return error_set(err, "knn labels: '%s' holds no images", dataset->root);
    if (dataset->count > INT32_MAX)
        return error_set(err, "knn labels: '%s' holds too many images (%zu)", dataset->root,
                         dataset->count);
    // Paths are strcmp-sorted, so all paths under one top-level folder are
    // contiguous: a new class starts where the prefix changes. (The class
    // order itself still needs a sort: "a-b/x" < "a/x" but "a" < "a-b".)
    int count = 0;
    for (size_t i = 0; i < dataset->count; i++) {
        const char *path = dataset_path(dataset, i);
        const long length = top_level_length(path);
        if (length < 0)
            return error_set(err,
                             "knn labels: '%s' is directly in '%s'; kNN evaluation needs one "
                             "sub-folder per class",
                             path, dataset->root);
        const char *previous = i ? dataset_path(dataset, i - 1) : NULL;
        if (!previous || top_level_length(previous) != length ||
            strncmp(previous, path, (size_t)length) != 0)
            count++;
    }
    char **names = calloc((size_t)count, sizeof *names);
    if (!names) return error_set(err, "knn labels: out of memory for %d class names", count);
    int made = 0;
    for (size_t i = 0; i < dataset->count; i++) {
        const char *path = dataset_path(dataset, i);
        const long length = top_level_length(path);
        const char *previous = i ? dataset_path(dataset, i - 1) : NULL;
        if (previous && top_level_length(previous) == length &&
            strncmp(previous, path, (size_t)length) == 0)
            continue;
        names[made] = strndup(path, (size_t)length);
        if (!names[made]) {
            knn_labels_free(names, made);
            return error_set(err, "knn labels: out of memory for class names");
        }
        made++;
    }
    qsort(names, (size_t)count, sizeof *names, compare_names);
    for (size_t i = 0; i < dataset->count; i++) {
        const char *path = dataset_path(dataset, i);
        labels[i] = find_class(names, count, path, (size_t)top_level_length(path));
    }
    *class_names = names;
    *class_count = count;
    return 0;
}

// ---- input checks and layout ----------------------------------------------------

static int check_set(const float *features, const int32_t *labels, int n, int dim,
                     int class_count, const char *what, ErrorMessage *err) {
    if (!features || !labels) return error_set(err, "knn: %sfeatures or labels are NULL", what);
    for (int i = 0; i < n; i++) {
        if (labels[i] < 0 || labels[i] >= class_count)
            return error_set(err, "knn: %slabel %d of row %d is outside [0, %d)", what,
                             (int)labels[i], i, class_count);
        const float *row = features + (size_t)i * (size_t)dim;
        for (int d = 0; d < dim; d++)
            if (!isfinite(row[d]))
                return error_set(err, "knn: %sfeature %d of row %d is not finite", what, d, i);
    }
    return 0;
}

static int check_parameters(int dim, int class_count, int k, float temperature,
                            ErrorMessage *err) {
    if (dim < 1) return error_set(err, "knn: feature dimension must be >= 1, got %d", dim);
    if (class_count < 1) return error_set(err, "knn: class count must be >= 1, got %d", class_count);
    if (k < 1) return error_set(err, "knn: k must be >= 1, got %d", k);
    if (!(temperature > 0.0f) || !isfinite(temperature))
        return error_set(err, "knn: temperature must be a finite number > 0, got %g",
                         (double)temperature);
    return 0;
}

static size_t round_up(size_t value, size_t multiple) {
    return (value + multiple - 1) / multiple * multiple;
}

// L2-normalised copy, row-major, with zero rows up to padded_rows.
static float *normalise_rows(const float *features, int n, int dim, size_t padded_rows) {
    float *out = calloc(padded_rows * (size_t)dim, sizeof *out);
    if (!out) return NULL;
    for (int i = 0; i < n; i++) {
        const float *row = features + (size_t)i * (size_t)dim;
        double sum_squares = 0.0;
        for (int d = 0; d < dim; d++) sum_squares += (double)row[d] * row[d];
        const double norm = sqrt(sum_squares);
        if (norm == 0.0) continue;  // stays zero
        float *target = out + (size_t)i * (size_t)dim;
        for (int d = 0; d < dim; d++) target[d] = (float)(row[d] / norm);
    }
    return out;
}

// Tiles of KNN_TILE rows, each transposed to (dim, KNN_TILE); rows past n are zero.
static float *tile_rows(const float *rows /* (n, dim) normalised */, int n, int dim) {
    const size_t tiles = round_up((size_t)n, KNN_TILE) / KNN_TILE;
    float *out = calloc(tiles * KNN_TILE * (size_t)dim, sizeof *out);
    if (!out) return NULL;
    for (int i = 0; i < n; i++) {
        float *tile = out + (size_t)(i / KNN_TILE) * KNN_TILE * (size_t)dim;
        const float *row = rows + (size_t)i * (size_t)dim;
        for (int d = 0; d < dim; d++) tile[(size_t)d * KNN_TILE + i % KNN_TILE] = row[d];
    }
    return out;
}

// Four floats as one SSE register (GCC/clang vector extension; element-wise
// arithmetic, so each lane is an ordinary float sum).
typedef float Float4 __attribute__((vector_size(16)));

// similarities[q * stride + j] = dot(queries[q], tile column j) for a
// KNN_MICRO x KNN_TILE block, each sum in order d = 0 .. dim-1. Written out
// for KNN_MICRO = 4, KNN_TILE = 8 so the 8 accumulators stay in registers.
static void dot_micro(const float *queries /* (KNN_MICRO, dim) */,
                      const float *tile /* (dim, KNN_TILE) */, int dim,
                      float *similarities, size_t stride) {
    const float *q0 = queries, *q1 = q0 + dim, *q2 = q1 + dim, *q3 = q2 + dim;
    Float4 acc00 = {0}, acc01 = {0}, acc10 = {0}, acc11 = {0};
    Float4 acc20 = {0}, acc21 = {0}, acc30 = {0}, acc31 = {0};
    for (int d = 0; d < dim; d++) {
        Float4 low, high;
        memcpy(&low, tile + (size_t)d * KNN_TILE, sizeof low);
        memcpy(&high, tile + (size_t)d * KNN_TILE + 4, sizeof high);
        const Float4 a0 = {q0[d], q0[d], q0[d], q0[d]}, a1 = {q1[d], q1[d], q1[d], q1[d]};
        const Float4 a2 = {q2[d], q2[d], q2[d], q2[d]}, a3 = {q3[d], q3[d], q3[d], q3[d]};
        acc00 += a0 * low, acc01 += a0 * high;
        acc10 += a1 * low, acc11 += a1 * high;
        acc20 += a2 * low, acc21 += a2 * high;
        acc30 += a3 * low, acc31 += a3 * high;
    }
    const Float4 *results[KNN_MICRO][2] = {
        {&acc00, &acc01}, {&acc10, &acc11}, {&acc20, &acc21}, {&acc30, &acc31}};
    for (int q = 0; q < KNN_MICRO; q++) {
        memcpy(similarities + (size_t)q * stride, results[q][0], sizeof(Float4));
        memcpy(similarities + (size_t)q * stride + 4, results[q][1], sizeof(Float4));
    }
}

// ---- top-k and vote -------------------------------------------------------------

typedef struct Neighbour {
    float similarity;
    int index;
} Neighbour;

// Rank order: higher similarity first, then lower index.
static int ranks_before(Neighbour a, Neighbour b) {
    return a.similarity > b.similarity || (a.similarity == b.similarity && a.index < b.index);
}

// Heap whose root is the neighbour that ranks last.
static void sift_down(Neighbour *heap, int size, int position) {
    for (;;) {
        const int left = 2 * position + 1, right = left + 1;
        int last = position;
        if (left < size && ranks_before(heap[last], heap[left])) last = left;
        if (right < size && ranks_before(heap[last], heap[right])) last = right;
        if (last == position) return;
        const Neighbour swap = heap[position];
        heap[position] = heap[last];
        heap[last] = swap;
        position = last;
    }
}

static void sift_up(Neighbour *heap, int position) {
    while (position > 0) {
        const int parent = (position - 1) / 2;
        if (!ranks_before(heap[parent], heap[position])) return;
        const Neighbour swap = heap[position];
        heap[position] = heap[parent];
        heap[parent] = swap;
        position = parent;
    }
}

// Predicted class of one query from its similarity row; `excluded` is the
// bank index left out (the query itself), or -1.
static int predict_one(const float *similarities /* (bank_count) */, int bank_count, int excluded,
                       const int32_t *bank_labels, int class_count, int k, float temperature,
                       Neighbour *heap /* (k) */, double *scores /* (class_count) */) {
    int size = 0;
    for (int j = 0; j < bank_count; j++) {
        if (j == excluded) continue;
        const Neighbour candidate = {similarities[j], j};
        if (size < k) {
            heap[size] = candidate;
            sift_up(heap, size++);
        } else if (ranks_before(candidate, heap[0])) {
            heap[0] = candidate;
            sift_down(heap, size, 0);
        }
    }
    // Pop the last-ranked to the back: heap becomes rank order, best first.
    for (int end = size - 1; end > 0; end--) {
        const Neighbour swap = heap[0];
        heap[0] = heap[end];
        heap[end] = swap;
        sift_down(heap, end, 0);
    }
    memset(scores, 0, (size_t)class_count * sizeof *scores);
    for (int r = 0; r < size; r++)
        scores[bank_labels[heap[r].index]] += exp((double)heap[r].similarity / temperature);
    int best = 0;
    for (int c = 1; c < class_count; c++)
        if (scores[c] > scores[best]) best = c;
    return best;
}

// Classifies query rows against bank rows (both already normalised);
// leave_one_out: queries are the bank and query i skips bank row i.
static int classify(const float *bank_rows /* (bank_count, dim) */, const int32_t *bank_labels,
                    int bank_count, const float *query_rows /* (round_up(query_count, KNN_MICRO), dim) */,
                    const int32_t *query_labels, int query_count, int dim, int class_count, int k,
                    float temperature, int leave_one_out, double *top1, ErrorMessage *err) {
    const int available = leave_one_out ? bank_count - 1 : bank_count;
    if (k > available) k = available;
    const size_t bank_padded = round_up((size_t)bank_count, KNN_TILE);
    float *tiles = tile_rows(bank_rows, bank_count, dim);
    float *similarities = malloc((size_t)KNN_QUERY_BLOCK * bank_padded * sizeof *similarities);
    Neighbour *heap = malloc((size_t)k * sizeof *heap);
    double *scores = malloc((size_t)class_count * sizeof *scores);
    if (!tiles || !similarities || !heap || !scores) {
        free(tiles);
        free(similarities);
        free(heap);
        free(scores);
        return error_set(err, "knn: out of memory for %d x %d features", bank_count, dim);
    }
    long correct = 0;
    for (int block = 0; block < query_count; block += KNN_QUERY_BLOCK) {
        const int rows = query_count - block < KNN_QUERY_BLOCK ? query_count - block : KNN_QUERY_BLOCK;
        for (size_t tile = 0; tile < bank_padded / KNN_TILE; tile++)
            for (int q = 0; q < rows; q += KNN_MICRO)
                dot_micro(query_rows + (size_t)(block + q) * (size_t)dim,
                          tiles + tile * KNN_TILE * (size_t)dim, dim,
                          similarities + (size_t)q * bank_padded + tile * KNN_TILE, bank_padded);
        for (int q = 0; q < rows; q++) {
            const int query = block + q;
            const int predicted = predict_one(similarities + (size_t)q * bank_padded, bank_count,
                                              leave_one_out ? query : -1, bank_labels,
                                              class_count, k, temperature, heap, scores);
            correct += predicted == query_labels[query];
        }
    }
    free(tiles);
    free(similarities);
    free(heap);
    free(scores);
    *top1 = (double)correct / query_count;
    return 0;
}

// ---- public entry points -----------------------------------------------------------

int knn_leave_one_out_top1(const float *features, const int32_t *labels, int n, int dim,
                           int class_count, int k, float temperature, double *top1,
                           ErrorMessage *err) {
    *top1 = 0.0;
    if (check_parameters(dim, class_count, k, temperature, err) != 0) return -1;
    if (n < 2) return error_set(err, "knn: leave-one-out needs at least 2 rows, got %d", n);
    if (check_set(features, labels, n, dim, class_count, "", err) != 0) return -1;
    float *rows = normalise_rows(features, n, dim, round_up((size_t)n, KNN_MICRO));
    if (!rows) return error_set(err, "knn: out of memory for %d x %d features", n, dim);
    const int status = classify(rows, labels, n, rows, labels, n, dim, class_count, k,
                                temperature, 1, top1, err);
    free(rows);
    return status;
}

int knn_top1(const float *train_features, const int32_t *train_labels, int train_count,
             const float *val_features, const int32_t *val_labels, int val_count, int dim,
             int class_count, int k, float temperature, double *top1, ErrorMessage *err) {
    *top1 = 0.0;
    if (check_parameters(dim, class_count, k, temperature, err) != 0) return -1;
    if (train_count < 1) return error_set(err, "knn: needs at least 1 train row, got %d", train_count);
    if (val_count < 1) return error_set(err, "knn: needs at least 1 val row, got %d", val_count);
    if (check_set(train_features, train_labels, train_count, dim, class_count, "train ", err) != 0 ||
        check_set(val_features, val_labels, val_count, dim, class_count, "val ", err) != 0)
        return -1;
    float *bank = normalise_rows(train_features, train_count, dim, (size_t)train_count);
    float *queries = normalise_rows(val_features, val_count, dim, round_up((size_t)val_count, KNN_MICRO));
    int status = -1;
    if (!bank || !queries)
        error_set(err, "knn: out of memory for %d + %d rows of %d features", train_count,
                  val_count, dim);
    else
        status = classify(bank, train_labels, train_count, queries, val_labels, val_count, dim,
                          class_count, k, temperature, 0, top1, err);
    free(bank);
    free(queries);
    return status;
}
