// PyTorch .pt state dicts (src/weights/pt_reader.h): the files torch.save
// wrote in tools/make_pt_fixtures.py read through weight_file_read (the path
// every consumer takes) and compared with their safetensors twins; a
// torchvision ResNet-18 layout and a DINOv2-layout ViT loaded as backbones;
// and hostile files (globals, REDUCE, BUILD, opcodes, sizes, offsets, broken
// zips) refused with one line naming the problem.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zip.h>

#include "backend/backend.h"
#include "backend_fixture.h"
#include "pickle_builder.h"
#include "pt_bases.h"
#include "nn/safetensors.h"
#include "nn/state_dict_backbone.h"
#include "train/model_source.h"
#include "util/file.h"
#include "util/half.h"
#include "weights/pt_pickle.h"
#include "weights/pt_reader.h"
#include "weights/weight_file.h"

#define FIXTURES "tests/fixtures/pt/"

// ---- twins -------------------------------------------------------------------------------------

static void read_file(const char *path, SafeTensors *file) {
    ErrorMessage err = {{0}};
    if (weight_file_read(path, file, &err) != 0) fail_msg("%s", err.text);
}

// Every tensor of the twin is in the .pt with the same dtype, shape and bytes.
static void assert_matches_twin(const char *pt_path, const char *twin_path) {
    SafeTensors pt, twin;
    read_file(pt_path, &pt);
    read_file(twin_path, &twin);
    assert_int_equal(pt.count, twin.count);
    for (int i = 0; i < twin.count; i++) {
        const SafeTensor *expected = &twin.tensors[i];
        const SafeTensor *got = safetensors_find(&pt, expected->name);
        if (!got) fail_msg("%s: no tensor \"%s\"", pt_path, expected->name);
        assert_int_equal(got->dtype, expected->dtype);
        assert_int_equal(got->rank, expected->rank);
        for (int d = 0; d < got->rank; d++) assert_int_equal(got->shape[d], expected->shape[d]);
        assert_int_equal(got->size, expected->size);
        if (memcmp(safetensors_data(&pt, got), safetensors_data(&twin, expected), got->size) != 0)
            fail_msg("%s: tensor \"%s\" differs from its twin", pt_path, got->name);
    }
    safetensors_free(&pt);
    safetensors_free(&twin);
}

// The dict's order, which torch.load would give.
static void assert_mixed_order(const char *path) {
    static const char *const order[] = {"conv.weight", "half",    "bf16",    "double",
                                        "count",       "int32",   "mask",    "bytes",
                                        "empty",       "transposed", "slice_a", "slice_b",
                                        "expanded",    "strided", "param"};
    SafeTensors file;
    read_file(path, &file);
    assert_int_equal(file.count, (int)(sizeof order / sizeof order[0]));
    for (int i = 0; i < file.count; i++) assert_string_equal(file.tensors[i].name, order[i]);
    safetensors_free(&file);
}

// Every dtype, a transposed, a sliced (shared storage), an expanded and a
// strided view, a scalar, an empty tensor and an nn.Parameter, in the zip
// format, the legacy format and nested in a protocol-4 training checkpoint.
static void test_mixed_matches_twin(void **state) {
    (void)state;
    assert_matches_twin(FIXTURES "mixed.pt", FIXTURES "mixed.safetensors");
    assert_matches_twin(FIXTURES "mixed_legacy.pt", FIXTURES "mixed.safetensors");
    assert_matches_twin(FIXTURES "nested.pt", FIXTURES "mixed.safetensors");
    assert_mixed_order(FIXTURES "mixed.pt");
    assert_mixed_order(FIXTURES "mixed_legacy.pt");
}

static void test_vit_matches_twin(void **state) {
    (void)state;
    assert_matches_twin(FIXTURES "vit_dinov2.pt", FIXTURES "vit_dinov2.safetensors");
}

// ---- backbones ---------------------------------------------------------------------------------

static void load_backbone(const char *path, int resolution, Backbone *model) {
    ErrorMessage err = {{0}};
    const BackboneInput input = {1, resolution};
    const ModelSourceOptions options = {.part = "backbone", .frozen = 1};
    if (model_source_load_backbone_with(path, &options, fixture_backend, &input, 1, model, NULL,
                                        &err))
        fail_msg("%s", err.text);
}

static float *download_set(const ParameterSet *set) {
    float *values = malloc(set->total * sizeof *values + 1);
    fixture_backend->op.download(fixture_backend, values, set->values, set->total * sizeof *values);
    return values;
}

static double base_sum(const SafeTensor *base, const float *values) {
    double sum = 0;
    for (int64_t i = 0; i < safe_tensor_elements(base); i++) sum += values[i];
    return sum;
}

// torchvision's resnet18().state_dict() (its keys, shapes, order, the
// OrderedDict's _metadata), every float tensor a stride-0 expand of a
// (C, 1, ...) base: element [c, ...] equals base[c]. As a backbone (embed's
// and the teacher's path) it is a ResNet-18 whose parameters and BatchNorm
// statistics hold those values, channel by channel.
static void test_resnet18_layout(void **state) {
    (void)state;
    SafeTensors pt, bases;
    read_file(FIXTURES "resnet18_expanded.pt", &pt);
    read_file(FIXTURES "resnet18_expanded_bases.safetensors", &bases);
    assert_string_equal(pt.tensors[0].name, "conv1.weight");
    assert_string_equal(pt.tensors[pt.count - 1].name, "fc.bias");
    assert_int_equal(assert_channel_bases(&pt, &bases), 20);  // one num_batches_tracked a BN

    Backbone model;
    load_backbone(FIXTURES "resnet18_expanded.pt", 32, &model);
    assert_int_equal(model.spec.kind, BACKBONE_RESNET);
    assert_int_equal(model.spec.resnet_depth, 18);
    const ParameterSet *sets[] = {model.params, model.buffers};
    for (int s = 0; s < 2; s++) {
        float *values = download_set(sets[s]);
        for (int i = 0; i < sets[s]->count; i++) {
            const Parameter *p = &sets[s]->params[i];
            const SafeTensor *base = safetensors_find(&bases, p->name);
            if (!base) fail_msg("parameter %s: no base", p->name);
            // Our layout may permute the dimensions: compare sums, each
            // channel's value repeated count / C times.
            const double expected = base_sum(base, safetensors_data(&bases, base)) *
                                    (double)(p->count / (size_t)base->shape[0]);
            double got = 0;
            for (size_t e = 0; e < p->count; e++) got += values[p->offset + e];
            if (!(fabs(got - expected) <= 1e-9 + 1e-12 * fabs(expected)))
                fail_msg("parameter %s sums to %g, its base says %g", p->name, (double)got,
                         (double)expected);
        }
        free(values);
    }
    backbone_free(&model);
    safetensors_free(&pt);
    safetensors_free(&bases);
}

// LightlyTrain's exported_last.pt of a DINOv2 ViT is a plain state dict in
// facebookresearch/dinov2's layout: loaded as a backbone it equals the same
// tensors from safetensors, value for value (both F16).
static void test_vit_backbone_matches_twin(void **state) {
    (void)state;
    Backbone from_pt, from_twin;
    load_backbone(FIXTURES "vit_dinov2.pt", 16, &from_pt);
    load_backbone(FIXTURES "vit_dinov2.safetensors", 16, &from_twin);
    assert_int_equal(from_pt.spec.kind, BACKBONE_VIT);
    assert_int_equal(from_pt.spec.vit.embed_dim, 32);
    assert_int_equal(from_pt.spec.vit.depth, 2);
    assert_int_equal(from_pt.spec.vit.patch_size, 4);
    assert_int_equal(from_pt.params->total, from_twin.params->total);
    float *a = download_set(from_pt.params), *b = download_set(from_twin.params);
    assert_memory_equal(a, b, from_pt.params->total * sizeof *a);
    free(a);
    free(b);
    backbone_free(&from_pt);
    backbone_free(&from_twin);
}

// The tensors of `source` under `prefix`, floats as F64 (DDP's "module.",
// DINOv2's teacher_checkpoint.pth "backbone." with its head beside it), plus
// one `extra` tensor outside the backbone; written to a temporary file.
static void write_wrapped(const char *source, const char *prefix, const char *extra,
                          char *path, size_t size) {
    SafeTensors file;
    read_file(source, &file);
    SafeTensorWrite *writes = calloc((size_t)file.count + 1, sizeof *writes);
    char (*names)[SAFETENSORS_MAX_NAME] = calloc((size_t)file.count, sizeof *names);
    double **wide = calloc((size_t)file.count, sizeof *wide);
    for (int i = 0; i < file.count; i++) {
        const SafeTensor *t = &file.tensors[i];
        snprintf(names[i], sizeof names[i], "%s%s", prefix, t->name);
        writes[i] = (SafeTensorWrite){names[i], t->dtype, t->rank, {0}, safetensors_data(&file, t)};
        memcpy(writes[i].shape, t->shape, sizeof t->shape);
        if (t->dtype != SAFE_F32 && t->dtype != SAFE_F16) continue;
        const size_t n = (size_t)safe_tensor_elements(t);
        float *narrow = malloc(n * sizeof *narrow + 1);
        if (t->dtype == SAFE_F16) convert_f16_to_f32(safetensors_data(&file, t), narrow, n);
        else memcpy(narrow, safetensors_data(&file, t), n * sizeof *narrow);
        wide[i] = malloc(n * sizeof *wide[i] + 1);
        for (size_t k = 0; k < n; k++) wide[i][k] = narrow[k];  // exact: F64 -> F32 gives it back
        free(narrow);
        writes[i].dtype = SAFE_F64;
        writes[i].data = wide[i];
    }
    static const float head[4] = {1, 2, 3, 4};
    writes[file.count] = (SafeTensorWrite){extra, SAFE_F32, 2, {2, 2}, head};
    snprintf(path, size, "/tmp/ltc-test-pt-%d-%s.safetensors", (int)getpid(), prefix);
    ErrorMessage err = {{0}};
    if (safetensors_write(path, writes, file.count + 1, NULL, 0, &err)) fail_msg("%s", err.text);
    for (int i = 0; i < file.count; i++) free(wide[i]);
    free(wide);
    free(names);
    free(writes);
    safetensors_free(&file);
}

// A backbone's parameters and buffers equal those of `expected`.
static void assert_same_backbone(const Backbone *got, const Backbone *expected) {
    assert_int_equal(got->spec.kind, expected->spec.kind);
    const ParameterSet *sets[][2] = {{got->params, expected->params},
                                     {got->buffers, expected->buffers}};
    for (int s = 0; s < 2 && sets[s][0]; s++) {
        assert_int_equal(sets[s][0]->total, sets[s][1]->total);
        float *a = download_set(sets[s][0]), *b = download_set(sets[s][1]);
        assert_memory_equal(a, b, sets[s][0]->total * sizeof *a);
        free(a);
        free(b);
    }
}

// A backbone under a prefix (found as what precedes its class token or
// stem conv) in F64 loads as the bare F32/F16 one; a ResNet's fc under the
// prefix is skipped as without it. Before: refused as "no ViT tokens" /
// "has dtype F64".
static void test_prefixed_f64_state_dicts(void **state) {
    (void)state;
    const struct {
        const char *source, *prefix, *extra;
        int resolution;
    } cases[] = {
        {FIXTURES "vit_dinov2.safetensors", "backbone.", "dino_head.mlp.0.weight", 16},
        {FIXTURES "resnet18_expanded.pt", "module.", "module.fc.extra", 32},
        {FIXTURES "resnet18_expanded.pt", "teacher.backbone.", "teacher.head.weight", 32},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char path[128];
        write_wrapped(cases[c].source, cases[c].prefix, cases[c].extra, path, sizeof path);
        Backbone wrapped, bare;
        ErrorMessage err = {{0}};
        const BackboneInput input = {1, cases[c].resolution};
        const ModelSourceOptions options = {.part = "backbone", .frozen = 1};
        ModelSourceInfo info;
        const int status = model_source_load_backbone_with(path, &options, fixture_backend,
                                                           &input, 1, &wrapped, &info, &err);
        unlink(path);
        if (status) fail_msg("%s", err.text);
        assert_string_equal(info.prefix, cases[c].prefix);
        load_backbone(cases[c].source, cases[c].resolution, &bare);
        assert_same_backbone(&wrapped, &bare);
        backbone_free(&wrapped);
        backbone_free(&bare);
    }
}

// Which prefix state_dict_backbone_prefix finds from names alone.
static void assert_prefix(const char *const *names, int count, const char *expected) {
    SafeTensor tensors[8];
    memset(tensors, 0, sizeof tensors);
    for (int i = 0; i < count; i++) snprintf(tensors[i].name, sizeof tensors[i].name, "%s", names[i]);
    const SafeTensors file = {.count = count, .tensors = tensors};
    char prefix[SAFETENSORS_MAX_NAME] = "unset";
    ErrorMessage err = {{0}};
    const int status = state_dict_backbone_prefix(&file, prefix, sizeof prefix, &err);
    if (expected[0] == '!') {  // an error holding the rest
        assert_int_equal(status, -1);
        if (!strstr(err.text, expected + 1)) fail_msg("\"%s\" lacks \"%s\"", err.text, expected + 1);
        return;
    }
    const int none = strcmp(expected, "-") == 0;  // 1: none found, prefix ""
    assert_int_equal(status, none);
    assert_string_equal(prefix, none ? "" : expected);
}

static void test_backbone_prefix_found(void **state) {
    (void)state;
    const char *const resnet[] = {"module.conv1.weight", "module.layer1.0.conv1.weight",
                                  "module.fc.weight"};
    assert_prefix(resnet, 3, "module.");
    const char *const bare[] = {"layer1.0.conv1.weight", "conv1.weight"};
    assert_prefix(bare, 2, "");
    const char *const block_only[] = {"layer1.0.conv1.weight"};  // a block's conv1: no stem
    assert_prefix(block_only, 1, "-");
    const char *const transformers[] = {"dinov2.embeddings.cls_token"};
    assert_prefix(transformers, 1, "");  // not "dinov2." nor "dinov2.embeddings."
    const char *const dinov2[] = {"dino_head.last_layer.weight", "backbone.cls_token",
                                  "backbone.blocks.0.norm1.weight"};
    assert_prefix(dinov2, 3, "backbone.");
    const char *const two[] = {"student.backbone.cls_token", "teacher.backbone.cls_token"};
    assert_prefix(two, 2, "!backbones under 2 prefixes (\"student.backbone.\", "
                          "\"teacher.backbone.\")");
    const char *const none[] = {"encoder.weight"};
    assert_prefix(none, 1, "-");
}

// A ResNet at the root of an unsupported layout (one block in layer1) is
// found there: the error says the layout, not that no stem is under any
// prefix (as it did when "" also meant none found).
static void test_root_resnet_unsupported_layout(void **state) {
    (void)state;
    static float stem[64 * 3 * 7 * 7], block[64 * 64 * 3 * 3];
    const SafeTensorWrite writes[] = {
        {"conv1.weight", SAFE_F32, 4, {64, 3, 7, 7}, stem},
        {"layer1.0.conv1.weight", SAFE_F32, 4, {64, 64, 3, 3}, block},
    };
    char path[128];
    snprintf(path, sizeof path, "/tmp/ltc-test-pt-%d-root.safetensors", (int)getpid());
    ErrorMessage err = {{0}};
    if (safetensors_write(path, writes, 2, NULL, 0, &err)) fail_msg("%s", err.text);
    const ModelSourceOptions options = {.part = "backbone"};
    const BackboneInput input = {1, 0};
    Backbone model;
    assert_int_equal(model_source_load_backbone_with(path, &options, fixture_backend, &input, 1,
                                                     &model, NULL, &err), -1);
    unlink(path);
    if (!strstr(err.text, "match none of resnet18") || strstr(err.text, "any prefix"))
        fail_msg("%s", err.text);
}

// ---- hostile pickles ---------------------------------------------------------------------------


// A reader's status and message: a failure, in one line holding `expected`.
static void assert_error(int status, SafeTensors *out, const ErrorMessage *err,
                         const char *expected) {
    if (status == 0) {
        safetensors_free(out);
        fail_msg("accepted; expected \"%s\"", expected);
    }
    if (!strstr(err->text, expected)) fail_msg("\"%s\" does not say \"%s\"", err->text, expected);
    if (strchr(err->text, '\n')) fail_msg("not one line: %s", err->text);
}

// pt_parse of these bytes fails with one line holding `expected`.
static void assert_bytes_refused(const uint8_t *bytes, size_t size, const char *expected) {
    uint8_t *copy = malloc(size ? size : 1);  // pt_parse takes it
    memcpy(copy, bytes, size);
    SafeTensors out;
    ErrorMessage err = {{0}};
    assert_error(pt_parse(copy, size, &out, &err), &out, &err, expected);
}

// The same for a legacy file around `object`.
static void assert_refused(const PickleBytes *object, int64_t numel, const char *expected) {
    size_t size = 0;
    uint8_t *file = pickle_legacy_file(object, numel, &size);
    assert_bytes_refused(file, size, expected);
    free(file);
}

// The builders make a file the reader takes: the hostile cases below fail
// for their own reason, not for a mistake of the builder.
// The strided view (offset 2) of the builders' file reads as it should.
static void assert_legacy_reads(uint8_t *file, size_t size) {
    SafeTensors out;
    ErrorMessage err = {{0}};
    if (pt_parse(file, size, &out, &err) != 0) fail_msg("%s", err.text);
    assert_int_equal(out.count, 1);
    const float *w = safetensors_data(&out, &out.tensors[0]);
    const float expected[6] = {2, 4, 6, 3, 5, 7};  // [i][j] = storage[2 + i + 2 j]
    assert_memory_equal(w, expected, sizeof expected);
    safetensors_free(&out);
}

static void test_builder_file_reads(void **state) {
    (void)state;
    PickleBytes b = {0};
    pickle_state_dict(&b, &(PickleTensor){"w", 8, 2, 2, {2, 3}, {1, 2}});  // strided, offset 2
    size_t size = 0;
    uint8_t *file = pickle_legacy_file(&b, 8, &size);
    assert_legacy_reads(file, size);
}

// torch.save(..., _use_new_zipfile_serialization=False, pickle_protocol=3
// or 4): the magic number's pickle starts PROTO 3 (4: and a FRAME). Before,
// such files fell through to the safetensors reader ("header length ...").
static void test_legacy_protocols_read(void **state) {
    (void)state;
    PickleBytes b = {0};
    pickle_state_dict(&b, &(PickleTensor){"w", 8, 2, 2, {2, 3}, {1, 2}});
    size_t size = 0;
    uint8_t *file = pickle_legacy_file(&b, 8, &size);
    file[1] = 3;
    uint8_t *framed = malloc(size + 9);  // PROTO 4, FRAME of 13 bytes, the rest
    memcpy(framed, "\x80\x04\x95\x0d\0\0\0\0\0\0\0", 11);
    memcpy(framed + 11, file + 2, size - 2);
    assert_int_equal(pt_sniff(file, size), PT_FORMAT_LEGACY);
    assert_int_equal(pt_sniff(framed, size + 9), PT_FORMAT_LEGACY);
    assert_legacy_reads(file, size);
    assert_legacy_reads(framed, size + 9);
}

static void test_unknown_globals_refused(void **state) {
    (void)state;
    PickleBytes b = {0};  // os.system("ls") as pickle writes it
    PICKLE_OPS(&b, "\x80\x02");
    pickle_global(&b, "posix", "system");
    pickle_str(&b, "ls");
    PICKLE_OPS(&b, "\x85R.");
    assert_refused(&b, 0, "global posix.system is not allowed");

    PickleBytes model = {0};  // torch.save(model) of a class of no allowed library
    PICKLE_OPS(&model, "\x80\x02");
    pickle_global(&model, "mylibrary.models", "Net");
    PICKLE_OPS(&model, ")\x81.");
    assert_refused(&model, 0, "global mylibrary.models.Net is not allowed");

    PickleBytes stacked = {0};  // protocol 4's STACK_GLOBAL
    PICKLE_OPS(&stacked, "\x80\x04");
    pickle_str(&stacked, "builtins");
    pickle_str(&stacked, "eval");
    PICKLE_OPS(&stacked, "\x93.");
    assert_refused(&stacked, 0, "global builtins.eval is not allowed");
}

static void test_reduce_and_build_refused(void **state) {
    (void)state;
    PickleBytes storage_call = {0};  // REDUCE of an allowed global that is no callable
    PICKLE_OPS(&storage_call, "\x80\x02");
    pickle_global(&storage_call, "torch", "FloatStorage");
    PICKLE_OPS(&storage_call, ")R.");
    assert_refused(&storage_call, 0, "REDUCE of a storage type");

    PickleBytes dict_call = {0};  // REDUCE of a dict value (not a global)
    PICKLE_OPS(&dict_call, "\x80\x02})R.");
    assert_refused(&dict_call, 0, "REDUCE of a dict");

    PickleBytes ordered_args = {0};  // OrderedDict([...]) with arguments
    PICKLE_OPS(&ordered_args, "\x80\x02");
    pickle_global(&ordered_args, "collections", "OrderedDict");
    PICKLE_OPS(&ordered_args, "]\x85R.");
    assert_refused(&ordered_args, 0, "OrderedDict called with arguments");

    PickleBytes build = {0};  // BUILD sets the state of a list
    PICKLE_OPS(&build, "\x80\x02]}b.");
    assert_refused(&build, 0, "BUILD on a list");

    // (NEWOBJ is allowed on a module's class: tests/test_pt_modules.c)
    const uint8_t opcodes[] = {'i' /* INST */, 'o' /* OBJ */, 0x82 /* EXT1 */,
                               'P' /* PERSID */, 'S' /* STRING */, 0x92 /* NEWOBJ_EX */};
    const char *const names[] = {"INST", "OBJ", "EXT1", "PERSID", "STRING", "NEWOBJ_EX"};
    for (size_t i = 0; i < sizeof opcodes; i++) {
        PickleBytes b = {0};
        PICKLE_OPS(&b, "\x80\x02)");
        pickle_op(&b, opcodes[i]);
        pickle_op(&b, '.');
        char expected[64];
        snprintf(expected, sizeof expected, "offset 48, %s (0x%02x): opcode not allowed", names[i],
                 opcodes[i]);
        assert_refused(&b, 0, expected);  // offsets count from the file's start
    }
}

static void test_sizes_and_offsets_refused(void **state) {
    (void)state;
    const int64_t huge = (int64_t)1 << 40;
    const struct {
        PickleTensor tensor;
        int64_t numel_in_file;
        const char *expected;
    } cases[] = {
        {{"w", 6, 0, 3, {huge, huge, huge}, {1, 1, 1}}, 6, "a tensor size that overflows"},
        {{"w", 6, 0, 2, {2, 3}, {3, 1}}, 5, "storage \"0\" holds 20 bytes"},
        {{"w", 6, 0, 1, {7}, {1}}, 6, "reaching element 6 of storage \"0\", which holds 6"},
        {{"w", 6, 4, 1, {3}, {1}}, 6, "reaching element 6"},
        {{"w", 6, 0, 2, {2, 3}, {5, 1}}, 6, "reaching element 7"},
        {{"w", 6, 0, 1, {2}, {-1}}, 6, "a negative size or stride"},
        {{"w", 6, -1, 1, {2}, {1}}, 6, "storage offset is not a non-negative int"},
        {{"w", (int64_t)1 << 50, 0, 1, {(int64_t)1 << 50}, {1}}, 6,
         "storage \"0\" holds 24 bytes, its tensors' type and size need 4503599627370496"},
        {{"w", huge, 0, 2, {huge / 2, 2}, {2, 0}}, huge, "runs past the end of the file"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        PickleBytes b = {0};
        pickle_state_dict(&b, &cases[i].tensor);
        // The last case claims 2^40 elements after the keys: the file has
        // none of them (legacy_file writes what it is told, up to 6).
        const int64_t numel = cases[i].numel_in_file;
        if (numel > 1000) {
            size_t size = 0;
            uint8_t *file = pickle_legacy_file(&b, 0, &size);
            memcpy(file + size - 8, &numel, 8);
            assert_bytes_refused(file, size, cases[i].expected);
            free(file);
            continue;
        }
        assert_refused(&b, numel, cases[i].expected);
    }
}

static void test_malformed_pickles_refused(void **state) {
    (void)state;
    PickleBytes memo = {0};
    PICKLE_OPS(&memo, "\x80\x02h\x07.");
    assert_refused(&memo, 6, "memo index never stored");

    PickleBytes list = {0};
    PICKLE_OPS(&list, "\x80\x02].");
    assert_refused(&list, 6, "the pickle holds a list, not a dict");

    PickleBytes twice = {0};
    PICKLE_OPS(&twice, "\x80\x02}(");
    pickle_tensor_entry(&twice, &PICKLE_GOOD);
    pickle_tensor_entry(&twice, &PICKLE_GOOD);
    PICKLE_OPS(&twice, "u.");
    assert_refused(&twice, 6, "the key \"w\" appears twice");

    PickleBytes no_tensors = {0};
    PICKLE_OPS(&no_tensors, "\x80\x02}");
    pickle_str(&no_tensors, "epoch");
    pickle_int(&no_tensors, 3);
    PICKLE_OPS(&no_tensors, "s.");
    assert_refused(&no_tensors, 6, "no tensors in the top-level dict (keys: epoch)");

    PickleBytes wide = {0};
    PICKLE_OPS(&wide, "\x80\x02\x8a\x09");
    for (int i = 0; i < 9; i++) pickle_op(&wide, 1);
    pickle_op(&wide, '.');
    assert_refused(&wide, 6, "an integer wider than 64 bits");
}

// Millions of one-byte opcodes that each make a value (NONE) or a stack
// entry (DUP): refused once PT_MAX_PICKLE_MEMORY is reached, long before the
// end (before the cap, 3 M NONEs took ~600 MB and were read; 12 M DUPs need
// 96 MB of stack, past the cap).
static void assert_flood_capped(uint8_t code, size_t count) {
    uint8_t *bytes = malloc(count + 4);
    memcpy(bytes, "\x80\x02N", 3);
    memset(bytes + 3, code, count);
    bytes[count + 3] = '.';
    PtPickle pickle;
    size_t consumed = 0;
    ErrorMessage err = {{0}};
    const int status = pt_pickle_load(bytes, count + 4, 0, &pickle, &consumed, &err);
    free(bytes);
    if (status == 0) pt_pickle_free(&pickle);
    assert_int_equal(status, -1);
    if (!strstr(err.text, "MiB of values")) fail_msg("%s", err.text);
    size_t offset = 0;
    assert_int_equal(sscanf(err.text, "pickle offset %zu", &offset), 1);
    // Each opcode costs at least a stack entry (8 bytes), so the cap is met
    // within PT_MAX_PICKLE_MEMORY / 8 opcodes.
    assert_true(offset <= PT_MAX_PICKLE_MEMORY / 8);
}

static void test_pickle_memory_capped(void **state) {
    (void)state;
    assert_flood_capped('N', 3u << 20);
    assert_flood_capped('2', 12u << 20);
}

// ---- broken zips -------------------------------------------------------------------------------

// Truncated anywhere (the central directory is at the end) or with a
// storage byte flipped (its CRC), mixed.pt is refused.
static void test_damaged_zip_refused(void **state) {
    (void)state;
    ByteBuffer buffer = {0};
    ErrorMessage err = {{0}};
    if (file_read_all(FIXTURES "mixed.pt", &buffer, 1 << 20, &err)) fail_msg("%s", err.text);
    uint8_t *bytes = buffer.data;
    const size_t size = buffer.size;
    const size_t cuts[] = {4, 100, size / 2, size - 22, size - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++)
        assert_bytes_refused(bytes, cuts[i], "zip: ");
    // Flip a bit inside the first storage (conv.weight's, found by its
    // values in the twin).
    SafeTensors twin;
    read_file(FIXTURES "mixed.safetensors", &twin);
    const SafeTensor *conv = safetensors_find(&twin, "conv.weight");
    uint8_t *data = memmem(bytes, size, safetensors_data(&twin, conv), conv->size);
    assert_non_null(data);
    data[100] ^= 0x40;
    safetensors_free(&twin);
    assert_bytes_refused(bytes, size, "CRC");
    byte_buffer_free(&buffer);
}

typedef struct ZipEntry {
    const char *name;
    const void *data;
    size_t size;
} ZipEntry;

static void write_zip(const char *path, const ZipEntry *entries, int count) {
    int code = 0;
    zip_t *zip = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &code);
    assert_non_null(zip);
    for (int i = 0; i < count; i++) {
        zip_source_t *source = zip_source_buffer(zip, entries[i].data, entries[i].size, 0);
        assert_true(zip_file_add(zip, entries[i].name, source, ZIP_FL_OVERWRITE) >= 0);
        zip_set_file_compression(zip, (zip_uint64_t)i, ZIP_CM_STORE, 0);
    }
    assert_int_equal(zip_close(zip), 0);
}

static void assert_zip_refused(const ZipEntry *entries, int count, const char *expected) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/ltc-test-pt-%d.pt", (int)getpid());
    write_zip(path, entries, count);
    SafeTensors out;
    ErrorMessage err = {{0}};
    const int status = weight_file_read(path, &out, &err);
    unlink(path);
    assert_error(status, &out, &err, expected);
}

static void test_zip_layout_refused(void **state) {
    (void)state;
    PickleBytes pickle = {0};
    pickle_state_dict(&pickle, &PICKLE_GOOD);
    const float storage[6] = {0};
    const ZipEntry good_pickle = {"a/data.pkl", pickle.data, pickle.size};
    {
        const ZipEntry entries[] = {good_pickle, {"a/data/0", storage, sizeof storage}};
        char path[64];
        snprintf(path, sizeof path, "/tmp/ltc-test-pt-%d.pt", (int)getpid());
        write_zip(path, entries, 2);
        SafeTensors out;
        ErrorMessage err = {{0}};
        if (weight_file_read(path, &out, &err) != 0) fail_msg("%s", err.text);  // the base case
        safetensors_free(&out);
        unlink(path);
    }
    const ZipEntry truncated[] = {{"a/data.pkl", pickle.data, pickle.size - 2},  // no u, no .
                                  {"a/data/0", storage, sizeof storage}};
    assert_zip_refused(truncated, 2, "ends before its STOP");
    const ZipEntry missing[] = {good_pickle};
    assert_zip_refused(missing, 1, "storage \"0\": no entry a/data/0 in the archive");
    const ZipEntry short_storage[] = {good_pickle, {"a/data/0", storage, 20}};
    assert_zip_refused(short_storage, 2, "storage \"0\" holds 20 bytes, its 6 F32 elements");
    const ZipEntry big_endian[] = {good_pickle, {"a/byteorder", "big", 3},
                                   {"a/data/0", storage, sizeof storage}};
    assert_zip_refused(big_endian, 3, "byte order \"big\"");
    const ZipEntry no_pickle[] = {{"a/data/0", storage, sizeof storage}};
    assert_zip_refused(no_pickle, 1, "a zip archive without <name>/data.pkl");
    const ZipEntry torchscript[] = {good_pickle, {"a/constants.pkl", pickle.data, pickle.size}};
    assert_zip_refused(torchscript, 2, "a TorchScript archive");

    // Lightning's checkpoint: Python objects beside the weights, said so.
    PickleBytes lightning = {0};
    PICKLE_OPS(&lightning, "\x80\x02}");
    pickle_str(&lightning, "pytorch-lightning_version");
    pickle_str(&lightning, "2.4.0");
    PICKLE_OPS(&lightning, "s");
    pickle_str(&lightning, "hyper_parameters");
    pickle_global(&lightning, "argparse", "Namespace");
    PICKLE_OPS(&lightning, ")Rs.");
    const ZipEntry lightning_zip[] = {{"a/data.pkl", lightning.data, lightning.size}};
    assert_zip_refused(lightning_zip, 1, "a PyTorch Lightning checkpoint (Python objects beside");

    uint8_t tar[512] = {0};
    memcpy(tar + 257, "ustar", 5);
    assert_bytes_refused(tar, sizeof tar, "a tar archive");
}

// Files that are no weights, said for what they are (they got the
// safetensors parser's words: "header length ... above the limit", "file
// of 0 bytes is too short for the 8-byte header length").
static void test_other_files_named(void **state) {
    (void)state;
    char path[64];
    snprintf(path, sizeof path, "/tmp/ltc-test-pt-%d-other.pt", (int)getpid());
    PickleBytes protocol4 = {0};  // pickle.dump({"w": 1.5}, f, protocol=4)
    PICKLE_OPS(&protocol4, "\x80\x04\x95\x0d\0\0\0\0\0\0\0}\x94\x8c\x01w\x94G?\xf8\0\0\0\0\0\0s.");
    PickleBytes protocol2 = {0};
    pickle_state_dict(&protocol2, &PICKLE_GOOD);  // a state dict's pickle, without torch.save's zip
    const struct {
        const void *bytes;
        size_t size;
        const char *expected;
    } files[] = {
        {"", 0, "an empty file (0 bytes), not weights (safetensors or PyTorch)"},
        {protocol4.data, protocol4.size, "a bare pickle (pickle.dump), not a PyTorch file"},
        {protocol2.data, protocol2.size, "save the weights with torch.save(model.state_dict(), "
                                         "PATH) or as safetensors"},
        {"hello world, no weights", 23, "not weights: neither a safetensors file (a header "
                                        "length, then '{') nor a PyTorch one"},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        FILE *file = fopen(path, "wb");
        assert_non_null(file);
        assert_int_equal(fwrite(files[i].bytes, 1, files[i].size, file), files[i].size);
        assert_int_equal(fclose(file), 0);
        SafeTensors out;
        ErrorMessage err = {{0}};
        assert_error(weight_file_read(path, &out, &err), &out, &err, files[i].expected);
        if (strncmp(err.text, path, strlen(path)) != 0)
            fail_msg("the path is not named: %s", err.text);
    }
    // A safetensors header of 640 bytes starts 80 02, as a protocol 2 pickle
    // does: read as safetensors (an empty table).
    uint8_t table[8 + 640];
    memset(table, ' ', sizeof table);
    const uint64_t length = 640;
    memcpy(table, &length, 8);
    table[8] = '{';
    table[sizeof table - 1] = '}';
    FILE *file = fopen(path, "wb");
    assert_non_null(file);
    assert_int_equal(fwrite(table, 1, sizeof table, file), sizeof table);
    assert_int_equal(fclose(file), 0);
    SafeTensors out;
    ErrorMessage err = {{0}};
    if (weight_file_read(path, &out, &err) != 0) fail_msg("%s", err.text);
    assert_int_equal(out.count, 0);
    safetensors_free(&out);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest files[] = {
        cmocka_unit_test(test_mixed_matches_twin),
        cmocka_unit_test(test_vit_matches_twin),
        cmocka_unit_test(test_builder_file_reads),
        cmocka_unit_test(test_legacy_protocols_read),
        cmocka_unit_test(test_unknown_globals_refused),
        cmocka_unit_test(test_reduce_and_build_refused),
        cmocka_unit_test(test_sizes_and_offsets_refused),
        cmocka_unit_test(test_malformed_pickles_refused),
        cmocka_unit_test(test_pickle_memory_capped),
        cmocka_unit_test(test_damaged_zip_refused),
        cmocka_unit_test(test_zip_layout_refused),
        cmocka_unit_test(test_other_files_named),
    };
    const struct CMUnitTest backbones[] = {
        cmocka_unit_test(test_resnet18_layout),
        cmocka_unit_test(test_vit_backbone_matches_twin),
        cmocka_unit_test(test_prefixed_f64_state_dicts),
        cmocka_unit_test(test_backbone_prefix_found),
        cmocka_unit_test(test_root_resnet_unsupported_layout),
    };
    int failed = cmocka_run_group_tests_name("pt files", files, NULL, NULL);
    failed += cmocka_run_group_tests_name("pt backbones", backbones, fixture_backend_create_cpu,
                                          fixture_backend_destroy);
    return failed;
}
