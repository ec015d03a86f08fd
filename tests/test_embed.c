// Tests of the embed pieces: the loader's keep_last mode (every image once,
// in order, bad files flagged, not substituted), the resize-only view (the
// plain resize path, no randomness), the embedding writers (npy, csv,
// lightly_csv, safetensors and torch parsed back, quoting and escaping), and
// embed_dataset (equal to resnet_forward on the same normalised images, and
// byte-identical for 1 and 3 workers).
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/augment.h"
#include "augment/resize.h"
#include "backend/backend.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "data/scan.h"
#include "embed/embedder.h"
#include "embed/embedding_writers.h"
#include "fixture_init.h"
#include "image_fixtures.h"
#include "nn/json_scan.h"
#include "nn/resnet.h"
#include "nn/safetensors.h"
#include "pt_bases.h"
#include "util/file.h"
#include "weights/pt_pickle.h"

// 23 PNGs (lossless: the test knows every decoded pixel) and 2 corrupt files;
// batch 4 gives 6 full batches and one of 1.
enum { GOOD_IMAGES = 23, CORRUPT_FILES = 2, BATCH = 4, SIZE = 32 };

typedef struct Fixture {
    char *root;
    Dataset dataset;
    int corrupt[GOOD_IMAGES + CORRUPT_FILES];  // by dataset index
} Fixture;

static Fixture fixture;

static void image_size_of(int i, int *width, int *height) {
    *width = 20 + (i * 37) % 90;
    *height = 20 + (i * 53) % 70;
}

static int setup_folder(void **state) {
    (void)state;
    fixture.root = fixture_tempdir();
    char path[4096];
    uint8_t *rgb = malloc(120 * 120 * 3);
    for (int i = 0; i < GOOD_IMAGES; i++) {
        int width, height;
        image_size_of(i, &width, &height);
        fixture_pattern(rgb, width, height, (uint32_t)i);
        // Nested folders; names sort in creation order (img%02d under d%d/...).
        snprintf(path, sizeof path, "%s/d%d/%simg%02d.png", fixture.root, i % 3,
                 i % 2 ? "sub/" : "", i);
        assert_int_equal(fixture_write_png(path, width, height, rgb), 0);
    }
    free(rgb);
    snprintf(path, sizeof path, "%s/d1/broken.png", fixture.root);
    assert_int_equal(fixture_write_file(path, "\x89PNG not really", 15), 0);
    snprintf(path, sizeof path, "%s/d2/zz_empty.jpg", fixture.root);
    assert_int_equal(fixture_write_file(path, "", 0), 0);
    ErrorMessage err;
    if (dataset_scan(fixture.root, &fixture.dataset, &err) != 0) fail_msg("%s", err.text);
    assert_int_equal(fixture.dataset.count, GOOD_IMAGES + CORRUPT_FILES);
    for (size_t i = 0; i < fixture.dataset.count; i++) {
        const char *name = dataset_path(&fixture.dataset, i);
        fixture.corrupt[i] = strstr(name, "broken") || strstr(name, "empty");
    }
    return 0;
}

static int teardown_folder(void **state) {
    (void)state;
    dataset_free(&fixture.dataset);
    fixture_remove_tree(fixture.root);
    free(fixture.root);
    return 0;
}

// The source image of a dataset entry (its index from the name), or -1.
static int source_index(size_t dataset_index) {
    const char *name = strrchr(dataset_path(&fixture.dataset, dataset_index), '/');
    int i = -1;
    if (!name || sscanf(name, "/img%d.png", &i) != 1) return -1;
    return i;
}

// ---- sampler and loader, keep_last ---------------------------------------------------

static void test_sampler_keep_last_covers_everything_in_order(void **state) {
    (void)state;
    Sampler sampler;
    assert_int_equal(sampler_init_keep_last(&sampler, 43, 8, 0, 1, NULL), 0);
    assert_int_equal(sampler.batches_per_epoch, 6);
    uint32_t indices[8];
    uint32_t expected = 0;
    for (uint32_t epoch = 0; epoch < 2; epoch++, expected = 0) {
        for (size_t b = 0; b < sampler.batches_per_epoch; b++) {
            const int size = sampler_batch_size(&sampler, b);
            assert_int_equal(size, b < 5 ? 8 : 3);
            sampler_batch(&sampler, epoch, b, indices);
            for (int i = 0; i < size; i++) assert_int_equal(indices[i], expected++);
        }
        assert_int_equal(expected, 43);
    }
    sampler_free(&sampler);
    assert_int_equal(sampler_init_keep_last(&sampler, 0, 8, 0, 1, NULL), -1);
}

// With R ranks, round k's batches in rank order are the next R blocks of the
// scan order: together every image once, in order (the embed gather relies
// on it).
static void test_sampler_keep_last_ranks_cover_everything_in_order(void **state) {
    (void)state;
    for (int world = 2; world <= 3; world++) {
        Sampler samplers[3];
        for (int r = 0; r < world; r++)
            assert_int_equal(sampler_init_keep_last(&samplers[r], 43, 4, r, world, NULL), 0);
        // 11 blocks of 4 (the last of 3): ranks get ceil((11 - r) / R) of them.
        for (int r = 0; r < world; r++)
            assert_int_equal(samplers[r].batches_per_epoch, (size_t)((11 - r + world - 1) / world));
        uint32_t expected = 0, indices[4];
        for (size_t round = 0; expected < 43; round++)
            for (int r = 0; r < world && expected < 43; r++) {
                assert_true(round < samplers[r].batches_per_epoch);
                const int size = sampler_batch_size(&samplers[r], round);
                sampler_batch(&samplers[r], 0, round, indices);
                for (int i = 0; i < size; i++) assert_int_equal(indices[i], expected++);
            }
        for (int r = 0; r < world; r++) sampler_free(&samplers[r]);
    }
}

typedef struct LoaderRun {
    uint8_t *pixels;   // (count, SIZE, SIZE, 3) in delivery order
    uint32_t *indices; // (count)
    uint8_t *failed;   // (count)
    size_t count;
    LoaderStats stats;
} LoaderRun;

static LoaderRun run_keep_last(int workers) {
    LoaderConfig config = {
        .dataset = &fixture.dataset,
        .batch_size = BATCH,
        .num_workers = workers,
        .world_size = 1,
        .keep_last = 1,
    };
    view_set_resize(&config.views, SIZE);
    ErrorMessage err;
    Loader *loader = loader_create(&config, &err);
    if (!loader) fail_msg("%s", err.text);
    assert_int_equal(loader_batches_per_epoch(loader), 7);
    const size_t n = fixture.dataset.count, image_bytes = SIZE * SIZE * 3;
    LoaderRun run = {.pixels = malloc(n * image_bytes), .indices = malloc(n * 4), .failed = malloc(n)};
    for (int b = 0; b < 7; b++) {
        const Batch *batch = loader_next(loader, NULL, &err);
        if (!batch) fail_msg("batch %d: %s", b, err.text);
        assert_int_equal(batch->size, b < 6 ? BATCH : 1);
        memcpy(run.pixels + run.count * image_bytes, batch->views[0],
               (size_t)batch->size * image_bytes);
        memcpy(run.indices + run.count, batch->sample_indices, (size_t)batch->size * 4);
        memcpy(run.failed + run.count, batch->failed, (size_t)batch->size);
        run.count += (size_t)batch->size;
        loader_release(loader, batch);
    }
    assert_null(loader_next(loader, NULL, &err));  // one epoch, then the end
    assert_string_equal(err.text, "");
    run.stats = loader_stats(loader);
    loader_destroy(loader);
    return run;
}

static void loader_run_free(LoaderRun *run) {
    free(run->pixels);
    free(run->indices);
    free(run->failed);
}

static void test_loader_keep_last_every_image_once_in_order(void **state) {
    (void)state;
    LoaderRun one = run_keep_last(1), three = run_keep_last(3);
    assert_int_equal(one.count, fixture.dataset.count);
    const size_t image_bytes = SIZE * SIZE * 3;
    static const uint8_t zeros[SIZE * SIZE * 3];
    for (size_t i = 0; i < one.count; i++) {
        assert_int_equal(one.indices[i], i);
        assert_int_equal(one.failed[i], fixture.corrupt[i]);
        if (fixture.corrupt[i]) assert_memory_equal(one.pixels + i * image_bytes, zeros, image_bytes);
    }
    assert_int_equal(one.stats.skipped_files, CORRUPT_FILES);
    assert_int_equal(one.stats.replacements, 0);
    assert_int_equal(one.stats.images, GOOD_IMAGES);
    // Worker count changes nothing.
    assert_memory_equal(one.pixels, three.pixels, one.count * image_bytes);
    assert_memory_equal(one.indices, three.indices, one.count * 4);
    assert_memory_equal(one.failed, three.failed, one.count);
    loader_run_free(&one);
    loader_run_free(&three);
}

static void test_loader_keep_last_needs_sequential_order(void **state) {
    (void)state;
    LoaderConfig config = {
        .dataset = &fixture.dataset, .batch_size = BATCH, .num_workers = 1,
        .world_size = 1, .keep_last = 1, .shuffle = 1,
    };
    view_set_resize(&config.views, SIZE);
    ErrorMessage err;
    assert_null(loader_create(&config, &err));
    assert_non_null(strstr(err.text, "keep_last"));
    config.shuffle = 0;
    config.world_size = 2;
    config.rank = 2;
    assert_null(loader_create(&config, &err));
    assert_non_null(strstr(err.text, "rank 2 is outside a world of 2"));
    // A batch larger than the dataset is fine in keep_last mode: one partial batch.
    config.world_size = 1;
    config.rank = 0;
    config.batch_size = 100;
    Loader *loader = loader_create(&config, &err);
    if (!loader) fail_msg("%s", err.text);
    const Batch *batch = loader_next(loader, NULL, &err);
    assert_non_null(batch);
    assert_int_equal(batch->size, fixture.dataset.count);
    loader_release(loader, batch);
    loader_destroy(loader);
}

// ---- resize-only view ----------------------------------------------------------------

static void test_resize_only_view_is_the_plain_resize(void **state) {
    (void)state;
    ViewSet set;
    view_set_resize(&set, SIZE);
    assert_int_equal(set.count, 1);
    assert_int_equal(view_transform_validate(&set.views[0], NULL), 0);
    enum { W = 97, H = 41 };  // shrinks in x, grows in y: both resize paths
    uint8_t *rgb = malloc(W * H * 3);
    fixture_pattern(rgb, W, H, 7);
    const Image source = {rgb, W, H, W * 3};
    uint8_t expected[SIZE * SIZE * 3], got[SIZE * SIZE * 3];
    ResampleTable columns = {0}, rows = {0};
    ResampleBuffer buffer = {0};
    ErrorMessage err;
    assert_int_equal(resize_rgb(&source, 0, 0, W, H, 0, RESIZE_BILINEAR, SIZE, SIZE, expected, SIZE * 3, &columns,
                                &rows, &buffer, &err),
                     0);
    AugmentScratch *scratch = augment_scratch_create();
    ViewParams first;
    for (uint64_t seed = 0; seed < 20; seed++) {
        Rng rng = rng_make(seed, (uint32_t)seed, seed * 7, RNG_STREAM_VIEW);
        ViewParams params;
        view_sample(&set.views[0], W, H, &rng, &params);
        assert_int_equal(params.crop.x, 0);
        assert_int_equal(params.crop.y, 0);
        assert_int_equal(params.crop.width, W);
        assert_int_equal(params.crop.height, H);
        assert_false(params.flip || params.jitter || params.grey || params.solarize);
        assert_true(params.blur_sigma == 0.0f);
        if (seed == 0) first = params;
        assert_memory_equal(&params, &first, sizeof params);  // nothing random
        assert_int_equal(view_render(&set.views[0], &params, &source, (PixelRect){0, 0, W, H},
                                     got, scratch, &err),
                         0);
        assert_memory_equal(got, expected, sizeof got);
    }
    augment_scratch_destroy(scratch);
    resample_table_free(&columns);
    resample_table_free(&rows);
    resample_buffer_free(&buffer);
    free(rgb);
}

// ---- writers -------------------------------------------------------------------------

enum { ROWS = 3, DIM = 5 };
static const char *const tricky_names[ROWS] = {
    "plain/a.jpg",
    "we\"ird, name\\x.png",
    "caf\xc3\xa9/\xe6\x97\xa5\xe6\x9c\xac.webp",  // "café/日本.webp"
};

static void writer_features(float *features) {
    for (int i = 0; i < ROWS * DIM; i++)  // values that need all 9 digits
        features[i] = (float)((i - 7) * 0.1234567) / 3.0f + (i == 4 ? 1e-30f : 0.0f);
}

static char *read_text(const char *path, size_t *size) {
    ByteBuffer buffer = {0};
    ErrorMessage err;
    if (file_read_all(path, &buffer, 1 << 20, &err) != 0) fail_msg("%s", err.text);
    char *text = calloc(buffer.size + 1, 1);
    memcpy(text, buffer.data, buffer.size);
    *size = buffer.size;
    byte_buffer_free(&buffer);
    return text;
}

// The writers' table (the tricky names, features in the caller's array)
// written in format as fixture.root/name, that path in path (4096 bytes).
static EmbeddingTable write_table(EmbedFormat format, const char *name, float *features,
                                  char *path) {
    writer_features(features);
    const EmbeddingTable table = {features, ROWS, DIM, tricky_names};
    snprintf(path, 4096, "%s/%s", fixture.root, name);
    ErrorMessage err;
    if (embedding_write(path, format, &table, &err) != 0) fail_msg("%s", err.text);
    return table;
}

static void test_npy_writer(void **state) {
    (void)state;
    float features[ROWS * DIM];
    char path[4096], sidecar[4200];
    write_table(EMBED_FORMAT_NPY, "out.npy", features, path);
    ErrorMessage err;
    size_t size = 0;
    char *bytes = read_text(path, &size);
    assert_memory_equal(bytes, "\x93NUMPY\x01\x00", 8);
    const size_t header_length = (uint8_t)bytes[8] | (size_t)(uint8_t)bytes[9] << 8;
    const size_t data_start = 10 + header_length;
    assert_int_equal(data_start % 64, 0);
    assert_int_equal(bytes[data_start - 1], '\n');
    const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 5), }";
    assert_memory_equal(bytes + 10, dict, strlen(dict));
    for (size_t i = 10 + strlen(dict); i < data_start - 1; i++) assert_int_equal(bytes[i], ' ');
    assert_int_equal(size, data_start + sizeof features);
    assert_memory_equal(bytes + data_start, features, sizeof features);
    free(bytes);
    assert_int_equal(embedding_npy_filenames_path(path, sidecar, sizeof sidecar), 0);
    char *names = read_text(sidecar, &size);
    char expected[512];
    snprintf(expected, sizeof expected, "%s\n%s\n%s\n", tricky_names[0], tricky_names[1],
             tricky_names[2]);
    assert_string_equal(names, expected);
    free(names);
    // A newline in a name cannot go into the one-per-line file.
    const char *const bad[1] = {"a\nb.jpg"};
    const EmbeddingTable bad_table = {features, 1, DIM, bad};
    assert_int_equal(embedding_write(path, EMBED_FORMAT_NPY, &bad_table, &err), -1);
    assert_non_null(strstr(err.text, "newline"));
    // The message names the file, on one line.
    assert_non_null(strstr(err.text, "'a\\nb.jpg'"));
    assert_null(strchr(err.text, '\n'));
}

// Splits one CSV record (RFC 4180) at *cursor into fields; returns the count.
static int csv_record(char **cursor, char fields[][64], int max_fields) {
    int count = 0;
    char *c = *cursor;
    for (;;) {
        char *out = fields[count];
        if (*c == '"') {
            for (c++;; c++) {
                if (*c == '"' && c[1] == '"') *out++ = *c++;
                else if (*c == '"') break;
                else *out++ = *c;
            }
            c++;
        } else {
            while (*c && *c != ',' && *c != '\n') *out++ = *c++;
        }
        *out = '\0';
        count++;
        if (*c != ',' || count == max_fields) break;
        c++;
    }
    assert_int_equal(*c, '\n');
    *cursor = c + 1;
    return count;
}

static void check_csv(EmbedFormat format) {
    const int lightly = format == EMBED_FORMAT_LIGHTLY_CSV;
    float features[ROWS * DIM];
    char path[4096];
    write_table(format, lightly ? "out1.csv" : "out0.csv", features, path);
    size_t size;
    char *text = read_text(path, &size);
    char *cursor = text;
    char fields[16][64];
    assert_int_equal(csv_record(&cursor, fields, 16), 1 + DIM + lightly);
    assert_string_equal(fields[0], lightly ? "filenames" : "filename");
    assert_string_equal(fields[1], "embedding_0");
    assert_string_equal(fields[DIM], "embedding_4");
    if (lightly) assert_string_equal(fields[DIM + 1], "labels");
    for (int r = 0; r < ROWS; r++) {
        assert_int_equal(csv_record(&cursor, fields, 16), 1 + DIM + lightly);
        assert_string_equal(fields[0], tricky_names[r]);
        for (int d = 0; d < DIM; d++)  // %.9g: the exact float comes back
            assert_true(strtof(fields[1 + d], NULL) == features[r * DIM + d]);
        if (lightly) assert_string_equal(fields[DIM + 1], "0");
    }
    assert_int_equal(*cursor, '\0');
    assert_int_equal(strstr(text, "\"we\"\"ird, name\\x.png\"") != NULL, 1);  // RFC 4180 quoting
    free(text);
}

static void test_csv_writers(void **state) {
    (void)state;
    check_csv(EMBED_FORMAT_CSV);
    check_csv(EMBED_FORMAT_LIGHTLY_CSV);
}

static void test_safetensors_writer_round_trip(void **state) {
    (void)state;
    float features[ROWS * DIM];
    char path[4096];
    write_table(EMBED_FORMAT_SAFETENSORS, "out.safetensors", features, path);
    ErrorMessage err;
    SafeTensors file;
    if (safetensors_read(path, &file, &err) != 0) fail_msg("%s", err.text);
    const SafeTensor *tensor = safetensors_find(&file, "embeddings");
    assert_non_null(tensor);
    assert_int_equal(tensor->dtype, SAFE_F32);
    assert_int_equal(tensor->rank, 2);
    assert_int_equal(tensor->shape[0], ROWS);
    assert_int_equal(tensor->shape[1], DIM);
    assert_memory_equal(safetensors_data(&file, tensor), features, sizeof features);
    const char *json = safetensors_metadata(&file, "filenames");
    assert_non_null(json);
    JsonScanner scanner;
    json_scanner_init(&scanner, json, strlen(json));
    assert_int_equal(json_expect(&scanner, '[', &err), 0);
    for (int r = 0; r < ROWS; r++) {
        char name[256];
        if (json_read_string(&scanner, name, sizeof name, &err) != 0) fail_msg("%s", err.text);
        assert_string_equal(name, tricky_names[r]);
        assert_int_equal(json_next_item(&scanner, ']', &err), r + 1 < ROWS);
    }
    assert_int_equal(json_expect_end(&scanner, &err), 0);
    safetensors_free(&file);
    // Bytes that are not UTF-8 cannot go into JSON metadata: refused up front.
    const char *const bad[1] = {"bad\xff.jpg"};
    assert_int_equal(embedding_check_filenames(EMBED_FORMAT_SAFETENSORS, bad, 1, &err), -1);
    assert_non_null(strstr(err.text, "'bad\\xff.jpg'"));  // printable, the byte named
    assert_int_equal(embedding_check_filenames(EMBED_FORMAT_CSV, bad, 1, &err), 0);
}

// The string item of a pickled list, as a C string.
static const char *pickled_string(const PtValue *value) {
    assert_int_equal(value->kind, PT_STRING);
    return value->as.string.bytes;
}

// The torch file read back with the restricted unpickler: LightlyTrain's
// dict, the names in order, the features byte for byte in storage "0".
static void check_torch_file(const char *path, const EmbeddingTable *table) {
    PtPickle pickle;
    pt_zip_pickle(path, "embeddings/data.pkl", &pickle);
    const PtValue *root = pickle.root;
    assert_int_equal(root->kind, PT_DICT);
    assert_int_equal(root->as.items.count, 4);  // two keys, two values
    assert_string_equal(pickled_string(root->as.items.items[0]), "filenames");
    const PtValue *names = pt_dict_get(root, "filenames");
    assert_non_null(names);
    assert_int_equal(names->kind, PT_LIST);
    assert_int_equal(names->as.items.count, table->count);
    for (size_t i = 0; i < table->count; i++)
        assert_string_equal(pickled_string(names->as.items.items[i]), table->filenames[i]);
    const PtValue *embeddings = pt_dict_get(root, "embeddings");
    assert_non_null(embeddings);
    assert_int_equal(embeddings->kind, PT_TENSOR);
    const PtTensor *tensor = embeddings->as.tensor;
    assert_int_equal(tensor->rank, 2);
    assert_int_equal(tensor->shape[0], (int64_t)table->count);
    assert_int_equal(tensor->shape[1], table->dim);
    assert_int_equal(tensor->stride[0], table->dim);
    assert_int_equal(tensor->stride[1], 1);
    assert_int_equal(tensor->offset, 0);
    assert_int_equal(tensor->storage->as.storage->dtype, SAFE_F32);
    assert_string_equal(tensor->storage->as.storage->key, "0");
    pt_pickle_free(&pickle);
    size_t size;
    uint8_t *data = pt_zip_entry(path, "embeddings/data/0", &size);
    assert_int_equal(size, table->count * (size_t)table->dim * sizeof(float));
    if (size) assert_memory_equal(data, table->features, size);
    free(data);
    free(pt_zip_entry(path, "embeddings/version", &size));
}

static void test_torch_writer_round_trip(void **state) {
    (void)state;
    float features[ROWS * DIM];
    char path[4096];
    const EmbeddingTable table = write_table(EMBED_FORMAT_TORCH, "out.pth", features, path);
    ErrorMessage err;
    check_torch_file(path, &table);
    // No images left: an empty (0, D) tensor and no names.
    const EmbeddingTable empty = {NULL, 0, DIM, NULL};
    if (embedding_write(path, EMBED_FORMAT_TORCH, &empty, &err) != 0) fail_msg("%s", err.text);
    check_torch_file(path, &empty);
    // A pickled str is UTF-8: other bytes are refused up front.
    const char *const bad[1] = {"bad\xff.jpg"};
    const EmbeddingTable bad_table = {features, 1, DIM, bad};
    assert_int_equal(embedding_write(path, EMBED_FORMAT_TORCH, &bad_table, &err), -1);
    assert_non_null(strstr(err.text, "'bad\\xff.jpg' is not valid UTF-8"));
    check_torch_file(path, &empty);  // the previous file is untouched
}

static void test_format_from_extension(void **state) {
    (void)state;
    assert_int_equal(embed_format_from_path("a/b.NPY"), EMBED_FORMAT_NPY);
    assert_int_equal(embed_format_from_path("a/b.csv"), EMBED_FORMAT_CSV);
    assert_int_equal(embed_format_from_path("x.Safetensors"), EMBED_FORMAT_SAFETENSORS);
    assert_int_equal(embed_format_from_path("dir.csv/emb"), EMBED_FORMAT_NPY);
    assert_int_equal(embed_format_from_path("emb.pt"), EMBED_FORMAT_TORCH);
    assert_int_equal(embed_format_from_path("a.b/emb.PTH"), EMBED_FORMAT_TORCH);
    assert_int_equal(embed_format_from_path("emb.pth.npy"), EMBED_FORMAT_NPY);
}

// ---- embed_dataset -------------------------------------------------------------------

static const float imagenet_mean[3] = {0.485f, 0.456f, 0.406f};
static const float imagenet_std[3] = {0.229f, 0.224f, 0.225f};

// Slot 0: the embedder's (BATCH, SIZE); slot 1: one image at a time.
static void make_model(Backend *backend, Backbone *model) {
    const BackboneSpec spec = {.kind = BACKBONE_RESNET, .resnet_depth = 18};
    const BackboneInput inputs[2] = {{BATCH, SIZE}, {1, SIZE}};
    ErrorMessage err;
    if (backbone_create(model, backend, &spec, inputs, 2, 0, &err) != 0) fail_msg("%s", err.text);
    // Non-trivial running statistics, so eval mode differs from batch statistics.
    if (fixture_init_table(model->params, &err) || fixture_init_table(model->buffers, &err))
        fail_msg("%s", err.text);
}

static float *embed_with_workers(Backbone *model, int workers, uint8_t *failed) {
    const EmbedConfig config = {
        .image_size = SIZE, .batch_size = BATCH, .num_workers = workers, .failed = failed,
    };
    float *features = malloc(fixture.dataset.count * (size_t)model->feature_dim * sizeof(float));
    LoaderStats stats;
    ErrorMessage err;
    if (embed_dataset(model, 0, &fixture.dataset, &config, features, &stats, &err) != 0)
        fail_msg("%s", err.text);
    assert_int_equal(stats.skipped_files, CORRUPT_FILES);
    return features;
}

static void test_embed_dataset_matches_manual_forward(void **state) {
    (void)state;
    ErrorMessage err;
    Backend *backend = backend_create("cpu", 2, &err);
    if (!backend) fail_msg("%s", err.text);
    Backbone model;
    make_model(backend, &model);
    const size_t n = fixture.dataset.count, dim = (size_t)model.feature_dim;
    uint8_t *failed = malloc(n);
    float *one = embed_with_workers(&model, 1, failed);
    float *three = embed_with_workers(&model, 3, NULL);
    assert_memory_equal(one, three, n * dim * sizeof(float));  // worker count changes nothing

    // Manually: the known pixels, resized, normalised on the host, one image per forward.
    uint8_t pixels[SIZE * SIZE * 3];
    float host_input[SIZE * SIZE * 3];
    float *input = backend->op.alloc(backend, sizeof host_input);
    float *expected = malloc(dim * sizeof(float));
    uint8_t *rgb = malloc(120 * 120 * 3);
    ResampleTable columns = {0}, rows = {0};
    ResampleBuffer buffer = {0};
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(failed[i], fixture.corrupt[i]);
        if (fixture.corrupt[i]) {
            for (size_t d = 0; d < dim; d++) assert_true(one[i * dim + d] == 0.0f);
            continue;
        }
        const int source = source_index(i);
        assert_true(source >= 0);
        int width, height;
        image_size_of(source, &width, &height);
        fixture_pattern(rgb, width, height, (uint32_t)source);
        const Image image = {rgb, width, height, (size_t)width * 3};
        assert_int_equal(resize_rgb(&image, 0, 0, width, height, 0, RESIZE_BILINEAR, SIZE, SIZE, pixels, SIZE * 3,
                                    &columns, &rows, &buffer, &err),
                         0);
        for (int p = 0; p < SIZE * SIZE * 3; p++)
            host_input[p] = (pixels[p] / 255.0f - imagenet_mean[p % 3]) / imagenet_std[p % 3];
        backend->op.upload(backend, input, host_input, sizeof host_input);
        assert_int_equal(backbone_forward(&model, 1, 1, (const Act *)input, 0, &err), 0);
        backend->op.download(backend, expected, backbone_features(&model, 1),
                             dim * sizeof(float));
        for (size_t d = 0; d < dim; d++) {
            // Batch 4 vs batch 1 may block the convolutions differently and the
            // host normalisation may round differently from the backend's:
            // float32 summation-order noise (measured below 1e-6 relative).
            const float want = expected[d], got = one[i * dim + d];
            if (!(fabsf(got - want) <= 1e-5f + 1e-5f * fabsf(want)))
                fail_msg("image %zu feature %zu: %g vs %g", i, d, (double)got, (double)want);
        }
    }
    resample_table_free(&columns);
    resample_table_free(&rows);
    resample_buffer_free(&buffer);
    free(rgb);
    free(expected);
    backend->op.free(backend, input);
    free(one);
    free(three);
    free(failed);
    backbone_free(&model);
    backend_destroy(backend);
}

static void test_embed_dataset_rejects_mismatched_slot(void **state) {
    (void)state;
    ErrorMessage err;
    Backend *backend = backend_create("cpu", 1, &err);
    Backbone model;
    make_model(backend, &model);
    float *features = malloc(fixture.dataset.count * 512 * sizeof(float));
    EmbedConfig config = {.image_size = 64, .batch_size = BATCH, .num_workers = 1};
    assert_int_equal(embed_dataset(&model, 0, &fixture.dataset, &config, features, NULL, &err), -1);
    assert_non_null(strstr(err.text, "image size"));
    config.image_size = SIZE;
    config.batch_size = BATCH + 1;
    assert_int_equal(embed_dataset(&model, 0, &fixture.dataset, &config, features, NULL, &err), -1);
    assert_non_null(strstr(err.text, "batch size"));
    free(features);
    backbone_free(&model);
    backend_destroy(backend);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sampler_keep_last_covers_everything_in_order),
        cmocka_unit_test(test_loader_keep_last_every_image_once_in_order),
        cmocka_unit_test(test_loader_keep_last_needs_sequential_order),
        cmocka_unit_test(test_sampler_keep_last_ranks_cover_everything_in_order),
        cmocka_unit_test(test_resize_only_view_is_the_plain_resize),
        cmocka_unit_test(test_npy_writer),
        cmocka_unit_test(test_csv_writers),
        cmocka_unit_test(test_safetensors_writer_round_trip),
        cmocka_unit_test(test_torch_writer_round_trip),
        cmocka_unit_test(test_format_from_extension),
        cmocka_unit_test(test_embed_dataset_matches_manual_forward),
        cmocka_unit_test(test_embed_dataset_rejects_mismatched_slot),
    };
    return cmocka_run_group_tests(tests, setup_folder, teardown_folder);
}
