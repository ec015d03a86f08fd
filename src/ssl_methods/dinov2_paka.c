// PaKA on top of DINOv2 (see dinov2_paka.h): the pairs' alignment as sparse
// rows built on the host each step, the heads, the loss and its backward.
#include "ssl_methods/dinov2_paka.h"

#include <stdlib.h>
#include <string.h>

#include "backend/staging.h"
#include "ssl_methods/heads.h"
#include "ssl_methods/paka_roi.h"
#include "util/rng.h"

#define PAKA_HIDDEN 2048
#define PAKA_OUT 256
#define PAKA_RNG_STREAM 977  // the tokens drawn when the grid has more than max_tokens
#define PAKA_MAX_CELLS 1024  // local patch grids up to 32 x 32

// Sparse rows (CSR) in backend memory: rows + 1 starts, then the entries,
// at most rows x bound of the student's or teacher's alignment. A step
// uploads that many whatever it used (the same sizes every step of a batch
// size, for CUDA graphs).
typedef struct PakaRows {
    int bound;  // entries per aligned row at most (the transpose: the student's)
    int32_t *start, *index;
    float *weight;
} PakaRows;

struct Dinov2Paka {
    Backend *backend;
    Head student_head, teacher_head;
    Dinov2PakaArgs args;
    uint64_t seed;
    int views, first_view;      // K PaKA local views from view first_view
    int local_views;            // the DINOv2 local views before them (L)
    int max_pairs, cells;       // K max_batch; out_h x out_w = the local grid
    int tokens;                 // aligned tokens per pair: min(cells, max_tokens)
    int grid, global_grid;      // local and global patch grids (square)
    int local_tokens, global_tokens, first_patch;
    int dim;
    PakaRows student, teacher, transpose;  // device; transpose: student's, over token rows
    float *image_weight;                   // (max_pairs) 1 / overlapping pairs, or 0
    Staging staging;
    size_t staging_bytes;
    Act *student_aligned, *teacher_aligned, *dstudent_aligned;  // (max_pairs tokens, D)
    float *dhead;  // (max_pairs tokens, PAKA_OUT)
    float *loss;   // (1) the unweighted mean
    int rows;      // this step's aligned rows (pairs x tokens)
};

static size_t rows_bytes(int rows, size_t entries) {
    return ((size_t)rows + 1) * sizeof(int32_t) + entries * (sizeof(int32_t) + sizeof(float));
}

static int rows_alloc(Backend *backend, PakaRows *rows, int count, size_t entries) {
    rows->start = backend->op.alloc(backend, ((size_t)count + 1) * sizeof(int32_t));
    rows->index = backend->op.alloc(backend, (entries ? entries : 1) * sizeof(int32_t));
    rows->weight = backend->op.alloc(backend, (entries ? entries : 1) * sizeof(float));
    return rows->start && rows->index && rows->weight ? 0 : -1;
}

static void rows_free(Backend *backend, PakaRows *rows) {
    void *device[] = {rows->start, rows->index, rows->weight};
    for (int i = 0; i < 3; i++)
        if (device[i]) backend->op.free(backend, device[i]);
}

// Host views of one CSR in the staging buffer at *cursor.
typedef struct HostRows {
    int32_t *start, *index;
    float *weight;
} HostRows;

static HostRows host_rows(unsigned char **cursor, int rows, size_t entries) {
    HostRows host = {(int32_t *)*cursor, NULL, NULL};
    host.index = host.start + rows + 1;
    host.weight = (float *)(host.index + entries);
    *cursor += rows_bytes(rows, entries);
    return host;
}

static void upload_rows(Staging *staging, const PakaRows *device, const HostRows *host, int rows,
                        size_t entries) {
    staging_upload(staging, device->start, host->start, ((size_t)rows + 1) * sizeof(int32_t));
    staging_upload(staging, device->index, host->index, entries * sizeof(int32_t));
    staging_upload(staging, device->weight, host->weight, entries * sizeof(float));
}

// The pair's output cells: all of them, or max_tokens drawn without
// replacement (lightly subsamples tokens per image before the kernels).
static void pair_cells(const Dinov2Paka *paka, long step, int pair, int *cells) {
    int order[PAKA_MAX_CELLS];
    for (int c = 0; c < paka->cells; c++) order[c] = c;
    if (paka->tokens < paka->cells) {
        Rng rng = rng_make(paka->seed, (uint32_t)step, (uint64_t)pair, PAKA_RNG_STREAM);
        for (int i = 0; i < paka->tokens; i++) {
            const int j = i + (int)rng_below(&rng, (uint32_t)(paka->cells - i));
            const int swap = order[i];
            order[i] = order[j];
            order[j] = swap;
        }
    }
    memcpy(cells, order, (size_t)paka->tokens * sizeof *cells);
}

// A pair's crops (image pixels) and whether it counts: both crops
// rendered (a failed position's geometry is empty) and sharing a region.
static int pair_boxes(const Dinov2Paka *paka, const Method *method, int pair, int batch,
                      PakaBox *student, PakaBox *teacher, int *flips) {
    const int view = paka->first_view + pair / batch, image = pair % batch;
    const ViewGeometry *local = &method->geometry[(size_t)view * method->max_batch + image];
    const int parent = method->views.views[view].parent;
    const ViewGeometry *global = &method->geometry[(size_t)parent * method->max_batch + image];
    PakaBox region;
    const PakaBox local_crop = paka_crop_box(local), global_crop = paka_crop_box(global);
    const int overlap = paka_shared_region(local_crop, global_crop, paka->grid, paka->grid,
                                           &region);
    *student = paka_grid_box(local_crop, region, paka->grid, paka->grid);
    *teacher = paka_grid_box(global_crop, region, paka->global_grid, paka->global_grid);
    flips[0] = local->flip, flips[1] = global->flip;
    return overlap && local->crop.width > 0 && local->crop.height > 0 &&
           global->crop.width > 0 && global->crop.height > 0;
}

// Appends the taps of output cell `cell` of a box on a (grid x grid) map
// resampled to the local grid: entries relative to the region's first token
// row (image `image` of token_rows tokens each, patches from first_patch).
static void append_cell(HostRows *rows, size_t *used, PakaBox box, int grid, int out, int cell,
                        int flip, int image, int token_rows, int first_patch) {
    int32_t index[PAKA_ROI_MAX_TAPS];
    float weight[PAKA_ROI_MAX_TAPS];
    const int count = paka_roi_cell(box, grid, grid, out, out, cell / out, cell % out, flip,
                                    index, weight);
    for (int t = 0; t < count; t++) {
        rows->index[*used] = image * token_rows + first_patch + index[t];
        rows->weight[(*used)++] = weight[t];
    }
}

// The student's alignment transposed: rows over the PaKA views' token rows
// (pairs x local_tokens), each entry an aligned row, in aligned-row order.
static void transpose_rows(const HostRows *student, int aligned_rows, int token_rows,
                           int32_t *cursor, HostRows *transpose) {
    memset(transpose->start, 0, ((size_t)token_rows + 1) * sizeof(int32_t));
    const int entries = student->start[aligned_rows];
    for (int e = 0; e < entries; e++) transpose->start[student->index[e] + 1]++;
    for (int r = 0; r < token_rows; r++) {
        transpose->start[r + 1] += transpose->start[r];
        cursor[r] = transpose->start[r];
    }
    for (int row = 0; row < aligned_rows; row++)
        for (int e = student->start[row]; e < student->start[row + 1]; e++) {
            const int at = cursor[student->index[e]]++;
            transpose->index[at] = row;
            transpose->weight[at] = student->weight[e];
        }
}

// This step's alignment and pair weights into the staging buffer, queued to
// the device.
static void upload_alignment(Dinov2Paka *paka, const Method *method, long step, int batch) {
    const int pairs = paka->views * batch, rows = pairs * paka->tokens;
    const int token_rows = pairs * paka->local_tokens;
    const size_t student_entries = (size_t)rows * paka->student.bound;
    const size_t teacher_entries = (size_t)rows * paka->teacher.bound;
    unsigned char *cursor = staging_take(&paka->staging);
    HostRows student = host_rows(&cursor, rows, student_entries);
    HostRows teacher = host_rows(&cursor, rows, teacher_entries);
    HostRows transpose = host_rows(&cursor, token_rows, student_entries);
    float *weights = (float *)cursor;
    int32_t *fill = (int32_t *)(weights + paka->max_pairs);
    int cells[PAKA_MAX_CELLS];
    size_t student_used = 0, teacher_used = 0;
    int counted = 0;
    for (int pair = 0; pair < pairs; pair++) {
        PakaBox student_box, teacher_box;
        int flips[2];
        const int k = pair / batch, image = pair % batch;
        weights[pair] = (float)pair_boxes(paka, method, pair, batch, &student_box, &teacher_box,
                                          flips);
        counted += weights[pair] != 0.0f;
        pair_cells(paka, step, pair, cells);
        const int parent = method->views.views[paka->first_view + k].parent;
        for (int t = 0; t < paka->tokens; t++) {
            const int row = pair * paka->tokens + t;
            student.start[row] = (int32_t)student_used;
            teacher.start[row] = (int32_t)teacher_used;
            append_cell(&student, &student_used, student_box, paka->grid, paka->grid, cells[t],
                        flips[0], pair, paka->local_tokens, paka->first_patch);
            append_cell(&teacher, &teacher_used, teacher_box, paka->global_grid, paka->grid,
                        cells[t], flips[1], parent * batch + image, paka->global_tokens,
                        paka->first_patch);
        }
    }
    student.start[rows] = (int32_t)student_used;
    teacher.start[rows] = (int32_t)teacher_used;
    transpose_rows(&student, rows, token_rows, fill, &transpose);
    const int active = step >= paka->args.start_step && paka->tokens >= 2 && counted > 0;
    for (int pair = 0; pair < pairs; pair++)
        weights[pair] = active && weights[pair] != 0.0f ? 1.0f / (float)counted : 0.0f;
    upload_rows(&paka->staging, &paka->student, &student, rows, student_entries);
    upload_rows(&paka->staging, &paka->teacher, &teacher, rows, teacher_entries);
    upload_rows(&paka->staging, &paka->transpose, &transpose, token_rows, student_entries);
    staging_upload(&paka->staging, paka->image_weight, weights, (size_t)pairs * sizeof *weights);
    paka->rows = rows;
}

int dinov2_paka_forward(Dinov2Paka *paka, Method *method, long step, int batch,
                        const Vit *student, const Vit *teacher, int scalar, ErrorMessage *err) {
    Backend *backend = method->backend;
    upload_alignment(paka, method, step, batch);
    const int rows = paka->rows, dim = paka->dim;
    // the PaKA views' token rows of each model: after the DINOv2 local views
    // (student, slot 1) and after the two augmented global views (teacher, slot 0)
    const Act *student_tokens =
        act_at_const(backend, vit_tokens(student, 1),
                     (size_t)paka->local_views * batch * paka->local_tokens * dim);
    const Act *teacher_tokens = act_at_const(backend, vit_tokens(teacher, 0),
                                             (size_t)2 * batch * paka->global_tokens * dim);
    backend->op.combine_rows(backend, rows, dim, paka->student.start, paka->student.index,
                             paka->student.weight, student_tokens, paka->student_aligned);
    backend->op.combine_rows(backend, rows, dim, paka->teacher.start, paka->teacher.index,
                             paka->teacher.weight, teacher_tokens, paka->teacher_aligned);
    const float *student_out = head_forward(&paka->student_head, rows, paka->student_aligned, 1,
                                            err);
    if (!student_out) return -1;
    const float *teacher_out = head_forward(&paka->teacher_head, rows, paka->teacher_aligned, 0,
                                            err);
    if (!teacher_out) return -1;
    const int pairs = paka->views * batch;
    backend->op.cka_loss(backend, pairs, paka->tokens, PAKA_OUT, student_out, teacher_out,
                         paka->image_weight, paka->loss, paka->dhead);
    backend->op.axpby(backend, 1, (float)paka->args.weight, paka->loss, 1.0f,
                      method_loss(method));
    backend->op.copy(backend, method_scalar(method, scalar), paka->loss, sizeof(float));
    const size_t n = (size_t)rows * PAKA_OUT;
    backend->op.axpby(backend, n, (float)paka->args.weight, paka->dhead, 0.0f, paka->dhead);
    method_scale_loss_gradient(method, n, paka->dhead);
    return 0;
}

int dinov2_paka_backward(Dinov2Paka *paka, Method *method, Act *dtokens, ErrorMessage *err) {
    Backend *backend = method->backend;
    if (head_backward(&paka->student_head, paka->dhead, paka->dstudent_aligned, err)) return -1;
    const int token_rows = paka->rows / paka->tokens * paka->local_tokens;
    backend->op.combine_rows(backend, token_rows, paka->dim, paka->transpose.start,
                             paka->transpose.index, paka->transpose.weight,
                             paka->dstudent_aligned, dtokens);
    return 0;
}

const Act *dinov2_paka_aligned(const Dinov2Paka *paka, int teacher) {
    return teacher ? paka->teacher_aligned : paka->student_aligned;
}

void dinov2_paka_after_update(Dinov2Paka *paka, Method *method, float momentum) {
    method_ema_update(method->backend, &paka->teacher_head.params, &paka->student_head.params,
                      momentum);
}

static const char teacher_prefix[] = "teacher_paka_head.";

int dinov2_paka_save(Dinov2Paka *paka, CheckpointWriter *writer, ErrorMessage *err) {
    return checkpoint_add_parameters(writer, teacher_prefix, &paka->teacher_head.params, NULL, 0,
                                     err);
}

int dinov2_paka_load(Dinov2Paka *paka, const Checkpoint *checkpoint, ErrorMessage *err) {
    return checkpoint_load_parameters(checkpoint, teacher_prefix, &paka->teacher_head.params,
                                      NULL, NULL, err);
}

void dinov2_paka_free(Dinov2Paka *paka) {
    if (!paka) return;
    Backend *backend = paka->backend;
    head_free(&paka->student_head);
    head_free(&paka->teacher_head);
    if (paka->staging.backend) staging_free(&paka->staging);
    if (backend) {
        rows_free(backend, &paka->student);
        rows_free(backend, &paka->teacher);
        rows_free(backend, &paka->transpose);
        void *device[] = {paka->image_weight, paka->student_aligned, paka->teacher_aligned,
                          paka->dstudent_aligned, paka->dhead, paka->loss};
        for (size_t i = 0; i < sizeof device / sizeof device[0]; i++)
            if (device[i]) backend->op.free(backend, device[i]);
    }
    free(paka);
}

// The PaKA local views: the coupled-inside views, the last local views.
int dinov2_paka_view_count(const ViewSet *views) {
    int count = 0;
    while (count < views->count - views->global_count &&
           views->views[views->count - 1 - count].coupling == VIEW_COUPLING_INSIDE)
        count++;
    return count;
}

static int find_views(Dinov2Paka *paka, const Method *method, ErrorMessage *err) {
    const ViewSet *views = &method->views;
    paka->views = dinov2_paka_view_count(views);
    paka->first_view = views->count - paka->views;
    paka->local_views = paka->first_view - views->global_count;
    if (paka->views < 1 || method->teacher_views != 2)
        return error_set(err, "PaKA needs its local views (paka_num_local >= 1) and the two "
                              "clean global views");
    for (int v = paka->first_view; v < views->count; v++)
        if (views->views[v].parent > 1)
            return error_set(err, "PaKA view %d lies inside view %d, not a global view", v,
                             views->views[v].parent);
    return 0;
}

static int allocate(Dinov2Paka *paka, Backend *backend, ErrorMessage *err) {
    const size_t aligned = (size_t)paka->max_pairs * paka->tokens;
    const int token_rows = paka->max_pairs * paka->local_tokens;
    const size_t student_entries = aligned * paka->student.bound;
    const size_t teacher_entries = aligned * paka->teacher.bound;
    paka->staging_bytes = 2 * rows_bytes((int)aligned, 0) + rows_bytes(token_rows, 0) +
                          (2 * student_entries + teacher_entries) *
                              (sizeof(int32_t) + sizeof(float)) +
                          (size_t)paka->max_pairs * sizeof(float) +
                          (size_t)token_rows * sizeof(int32_t);
    if (staging_init(&paka->staging, backend, paka->staging_bytes, err))
        return error_prefix(err, "PaKA alignment");
    if (rows_alloc(backend, &paka->student, (int)aligned, student_entries) ||
        rows_alloc(backend, &paka->teacher, (int)aligned, teacher_entries) ||
        rows_alloc(backend, &paka->transpose, token_rows, student_entries))
        return error_set(err, "out of memory for PaKA's alignment of %zu rows", aligned);
    paka->image_weight = backend->op.alloc(backend, (size_t)paka->max_pairs * sizeof(float));
    paka->student_aligned = backend->op.alloc(backend, act_bytes(backend, aligned * paka->dim));
    paka->teacher_aligned = backend->op.alloc(backend, act_bytes(backend, aligned * paka->dim));
    paka->dstudent_aligned = backend->op.alloc(backend, act_bytes(backend, aligned * paka->dim));
    paka->dhead = backend->op.alloc(backend, aligned * PAKA_OUT * sizeof(float));
    paka->loss = backend->op.alloc(backend, sizeof(float));
    if (!paka->image_weight || !paka->student_aligned || !paka->teacher_aligned ||
        !paka->dstudent_aligned || !paka->dhead || !paka->loss)
        return error_set(err, "out of memory for PaKA's %zu aligned rows", aligned);
    return 0;
}

Dinov2Paka *dinov2_paka_create(Method *method, const VitConfig *vit, const Dinov2PakaArgs *args,
                               uint64_t seed, ErrorMessage *err) {
    Dinov2Paka *paka = calloc(1, sizeof *paka);
    if (!paka) return error_set(err, "out of memory"), NULL;
    paka->backend = method->backend;
    paka->args = *args;
    paka->seed = seed;
    paka->dim = method->backbone.feature_dim;
    if (find_views(paka, method, err)) goto fail;
    paka->grid = method->local_size / vit->patch_size;
    paka->global_grid = method->global_size / vit->patch_size;
    paka->first_patch = 1 + vit->register_tokens;
    paka->local_tokens = paka->first_patch + paka->grid * paka->grid;
    paka->global_tokens = paka->first_patch + paka->global_grid * paka->global_grid;
    paka->cells = paka->grid * paka->grid;
    paka->tokens = paka->cells < args->max_tokens ? paka->cells : args->max_tokens;
    paka->max_pairs = paka->views * method->max_batch;
    paka->student.bound = paka_roi_cell_bound(paka->grid, paka->grid, paka->grid, paka->grid);
    paka->teacher.bound =
        paka_roi_cell_bound(paka->global_grid, paka->global_grid, paka->grid, paka->grid);
    if (paka->teacher.bound > PAKA_ROI_MAX_TAPS || paka->cells > PAKA_MAX_CELLS) {
        error_set(err, "PaKA aligns a %d x %d global grid onto a %d x %d local one: at most %d "
                       "taps a cell and %d local patches", paka->global_grid, paka->global_grid,
                  paka->grid, paka->grid, PAKA_ROI_MAX_TAPS, PAKA_MAX_CELLS);
        goto fail;
    }
    const HeadSpec spec = head_spec_paka(paka->dim, PAKA_HIDDEN, PAKA_OUT);
    const int rows = paka->max_pairs * paka->tokens;
    if (head_create(&paka->student_head, method->backend, &spec, "student_paka_head", rows, seed,
                    err) ||
        head_create(&paka->teacher_head, method->backend, &spec, "teacher_paka_head", rows, seed,
                    err))
        goto fail;
    method_copy_parameters(method->backend, &paka->teacher_head.params,
                           &paka->student_head.params);
    if (allocate(paka, method->backend, err) ||
        method_add_group(method, "student_paka_head", &paka->student_head.params, NULL, NULL,
                         args->start_step, err))
        goto fail;
    return paka;
fail:
    dinov2_paka_free(paka);
    return NULL;
}
