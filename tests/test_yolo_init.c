// The YOLO students' names, their own init and the weight file (src/nn/yolo.h):
// the name parser (sizes, tasks, released weights' names, refusals),
// Ultralytics' initialisation of every head kind (Detect's bias_init, DFL,
// Segment's and Depth's ConvTranspose2d, Pose26's RealNVP, SemanticSegment,
// Depth's calibration and last bias, YOLO-World's neck and WorldDetect) and
// a save/load round trip through the state dict detection
// (yolo_config_from_weights) of every task.
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

#include "backend/backend.h"
#include "backend_fixture.h"
#include "nn/safetensors.h"
#include "nn/weights.h"
#include "nn/yolo.h"

static void test_names(void **state) {
    YoloConfig config;
    int pretrained;
    ErrorMessage err;
    const struct {
        const char *text;
        const char *name;
        int pretrained;
    } good[] = {{"ultralytics/yolov8s.yaml", "yolov8s", 0}, {"yolo11m.yaml", "yolo11m", 0},
                {"ultralytics/yolo11x.pt", "yolo11x", 1}, {"yolov8n", "yolov8n", 0},
                {"ultralytics/yolo26s.pt", "yolo26s", 1}, {"yolo26x.yaml", "yolo26x", 0},
                {"ultralytics/yolo11m-seg.yaml", "yolo11m-seg", 0},
                {"ultralytics/yolo26n-seg.pt", "yolo26n-seg", 1},
                {"yolov8s-pose.yaml", "yolov8s-pose", 0}, {"ultralytics/yolo26l-obb.pt", "yolo26l-obb", 1},
                {"ultralytics/yolov5su.yaml", "yolov5su", 0}, {"yolov5m.yaml", "yolov5m", 0},
                {"ultralytics/yolov5xu.pt", "yolov5xu", 1}, {"yolo12s.yaml", "yolo12s", 0},
                {"ultralytics/yolo12x.pt", "yolo12x", 1},
                {"ultralytics/yolo26m-p6.yaml", "yolo26m-p6", 0}, {"yolo26x-p2", "yolo26x-p2", 0},
                {"ultralytics/yolov8x-pose-p6.pt", "yolov8x-pose-p6", 1},
                {"ultralytics/yolov8s-world.yaml", "yolov8s-world", 0},
                {"ultralytics/yolov8x-worldv2.pt", "yolov8x-worldv2", 1}};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        if (yolo_parse_name(good[i].text, &config, &pretrained, &err)) fail_msg("%s", err.text);
        assert_string_equal(config.name, good[i].name);
        assert_int_equal(pretrained, good[i].pretrained);
    }
    const char *bad[] = {"ultralytics/yolov8q.yaml", "yolov5q.yaml", "ultralytics/yolo11s.yml",
                         "yolo13n.pt", "yolo26q.yaml", "yolo12n-seg.yaml", "yolo11n-det.yaml", "yolo11n-seg-seg",
                         "yolov8n-world.yaml", "yolo11s-world.yaml", "yolov8s-worldv3.pt", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(yolo_parse_name(bad[i], &config, &pretrained, &err), -1);
        assert_non_null(strstr(err.text, "unknown Ultralytics model"));
    }
    // the task's suffix before the levels' (yolov8-pose-p6.yaml's nc: 1)
    if (yolo_parse_name("yolov8x-pose-p6.yaml", &config, &pretrained, &err))
        fail_msg("%s", err.text);
    assert_int_equal(config.family, YOLO_V8_P6);
    assert_int_equal(config.task, YOLO_TASK_POSE);
    assert_int_equal(config.classes, 1);
    // YOLO-World: its own YAMLs, Ultralytics' task detect, the YAML's 80 classes
    if (yolo_parse_name("ultralytics/yolov8m-worldv2.yaml", &config, &pretrained, &err))
        fail_msg("%s", err.text);
    assert_int_equal(config.family, YOLO_V8_WORLDV2);
    assert_int_equal(config.task, YOLO_TASK_DETECT);
    assert_int_equal(config.classes, 80);
    assert_int_equal(config.scale, 'm');
    // Ultralytics released YOLOv5u's weights only, as yolov5nu.pt ...
    assert_int_equal(yolo_parse_name("ultralytics/yolov5s.pt", &config, &pretrained, &err), -1);
    assert_non_null(strstr(err.text, "YOLOv5's are yolov5su.pt"));
    // ... and none of YOLO26-P6 or -P2
    assert_int_equal(yolo_parse_name("ultralytics/yolo26n-p6.pt", &config, &pretrained, &err), -1);
    assert_non_null(
        strstr(err.text, "releases none of YOLO26-P6; train ultralytics/yolo26n-p6.yaml"));
    assert_int_equal(yolo_parse_name("ultralytics/yolov6s.pt", &config, &pretrained, &err), -1);
    assert_non_null(strstr(err.text, "releases none of YOLOv6"));
}

static void read_param(const Yolo *model, const char *name, float *out, size_t count) {
    const Parameter *p = parameter_find(&model->params, name);
    if (!p) p = parameter_find(&model->buffers, name);
    if (!p) fail_msg("no %s", name);
    assert_true(p->count <= count);
    model->backend->op.download(model->backend, out, p->value, p->count * sizeof *out);
}

// Model `name` on the fixture backend (1 image of 32 px), initialised as
// Ultralytics does (yolo_init, seed 3).
static void initialised(Yolo *model, const char *name) {
    ErrorMessage err;
    YoloConfig config;
    int pretrained;
    const YoloInputShape shape = {1, 32};
    if (yolo_parse_name(name, &config, &pretrained, &err) ||
        yolo_declare(model, fixture_backend, &config, &err) ||
        yolo_allocate(model, &shape, 1, &err) || yolo_init(model, 3, &err))
        fail_msg("%s: %s", name, err.text);
}

// Ultralytics' start: Detect.bias_init, DFL's 0..15, BatchNorm 1 / 0 / 0 / 1,
// convs uniform in +-1/sqrt(fan_in).
static void test_init(void **state) {
    Yolo model;
    initialised(&model, "yolov8n");
    static float values[64 * 64 * 9];
    read_param(&model, "model.22.cv2.1.2.bias", values, 64);
    for (int i = 0; i < 64; i++) assert_true(values[i] == 2.0f);
    read_param(&model, "model.22.cv3.2.2.bias", values, 80);  // stride 32
    const float class_bias = (float)log(5.0 / 80 / pow(640.0 / 32, 2.0));
    for (int i = 0; i < 80; i++) assert_true(values[i] == class_bias);
    read_param(&model, "model.22.dfl.conv.weight", values, 16);
    for (int i = 0; i < 16; i++) assert_true(values[i] == (float)i);
    read_param(&model, "model.4.m.1.cv2.bn.weight", values, 64);
    assert_true(values[0] == 1.0f);
    read_param(&model, "model.4.m.1.cv2.bn.running_var", values, 64);
    assert_true(values[0] == 1.0f);
    read_param(&model, "model.1.conv.weight", values, 32 * 16 * 9);  // fan_in 16 x 9
    const float bound = (float)(1.0 / sqrt(16.0 * 9));
    float largest = 0.0f;
    for (int i = 0; i < 32 * 16 * 9; i++) {
        assert_true(fabsf(values[i]) <= bound);
        if (fabsf(values[i]) > largest) largest = fabsf(values[i]);
    }
    assert_true(largest > 0.9f * bound);  // spread over the whole range
    yolo_free(&model);
}

// YOLO26's end-to-end head: one2one_cv2 / one2one_cv3 start as copies of
// cv2 / cv3 (Ultralytics deep-copies them, then bias_init sets both), the
// box convs have 4 outputs (reg_max 1) and there is no DFL conv.
static void test_init_yolo26(void **state) {
    Yolo model;
    initialised(&model, "yolo26n");
    assert_null(parameter_find(&model.buffers, "model.23.dfl.conv.weight"));
    static float a[128 * 128 * 9], b[128 * 128 * 9];
    read_param(&model, "model.23.cv2.2.2.bias", a, 4);
    for (int i = 0; i < 4; i++) assert_true(a[i] == 2.0f);
    const char *pairs[][2] = {{"model.23.cv2.0.0.conv.weight", "model.23.one2one_cv2.0.0.conv.weight"},
                              {"model.23.cv2.1.2.weight", "model.23.one2one_cv2.1.2.weight"},
                              {"model.23.cv2.1.2.bias", "model.23.one2one_cv2.1.2.bias"},
                              {"model.23.cv3.2.1.1.conv.weight", "model.23.one2one_cv3.2.1.1.conv.weight"},
                              {"model.23.cv3.0.2.bias", "model.23.one2one_cv3.0.2.bias"}};
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        const Parameter *p = parameter_find(&model.buffers, pairs[i][0]);
        assert_non_null(p);
        read_param(&model, pairs[i][0], a, sizeof a / sizeof *a);
        read_param(&model, pairs[i][1], b, sizeof b / sizeof *b);
        assert_memory_equal(a, b, p->count * sizeof *a);
    }
    const Parameter *box = parameter_find(&model.buffers, "model.23.cv2.0.2.weight");
    assert_non_null(box);
    assert_int_equal(box->torch_shape[0], 4);
    // the backbone's SPPF: unactivated cv1, shortcut; the neck's last C3k2 with attention
    assert_int_equal(model.layers[9].kind, YOLO_SPPF);
    assert_int_equal(model.layers[9].cv1.act, 0);
    assert_int_equal(model.layers[9].shortcut, 1);
    assert_int_equal(model.layers[22].inner[0].kind, YOLO_INNER_BOTTLENECK_PSA);
    yolo_free(&model);
}

// The Detect head's strides follow the layers it reads (yolo26-p6: P3 ... P6,
// yolo26-p2: P2 ... P5), and so do bias_init's class biases; yolo26-p6's
// SPPF row [1024, 5, 3, False]: an unactivated cv1, no shortcut.
static void test_init_head_levels(void **state) {
    const struct {
        const char *name;
        int detect, classes, strides[4];
    } models[] = {{"yolo26n-p6", 31, 80, {8, 16, 32, 64}}, {"yolo26n-p2", 29, 80, {4, 8, 16, 32}},
                  {"yolov5n6u", 33, 80, {8, 16, 32, 64}}, {"yolo26n", 23, 80, {8, 16, 32, 0}},
                  {"yolov8n-pose-p6", 30, 1, {8, 16, 32, 64}}};
    static float values[80];
    for (size_t m = 0; m < sizeof models / sizeof *models; m++) {
        Yolo model;
        initialised(&model, models[m].name);
        for (int level = 0; level < 4 && models[m].strides[level]; level++) {
            const int stride = models[m].strides[level];
            assert_int_equal(model.head_strides[level], stride);
            char name[64];
            snprintf(name, sizeof name, "model.%d.cv3.%d.2.bias", models[m].detect, level);
            read_param(&model, name, values, 80);
            const int classes = models[m].classes;
            const float class_bias = (float)log(5.0 / classes / pow(640.0 / stride, 2.0));
            for (int i = 0; i < classes; i++) assert_true(values[i] == class_bias);
        }
        if (m == 0) {
            assert_int_equal(model.layers[11].kind, YOLO_SPPF);
            assert_int_equal(model.layers[11].cv1.act, 0);
            assert_int_equal(model.layers[11].shortcut, 0);
            assert_int_equal(model.backbone_layers, 13);
        }
        yolo_free(&model);
    }
}

// Segment's tensors (never run) start as PyTorch's defaults: the prototypes'
// ConvTranspose2d weight (npr, npr, 2, 2) uniform in +-1/sqrt(npr x 4) (its
// fan_in is dim 1), the mask stacks' last biases in +-1/sqrt(fan_in) of their
// weights; the yolo26n-seg Proto26 semantic head's bias alike.
static void expect_uniform(const Yolo *model, const char *name, double fan_in) {
    static float values[128 * 128 * 4];  // the largest head tensor checked (Depth's)
    const Parameter *p = parameter_find(&model->buffers, name);
    if (!p) fail_msg("no %s", name);
    read_param(model, name, values, sizeof values / sizeof *values);
    const float bound = (float)(1.0 / sqrt(fan_in));
    float largest = 0.0f;
    for (size_t i = 0; i < p->count; i++) {
        assert_true(fabsf(values[i]) <= bound);
        if (fabsf(values[i]) > largest) largest = fabsf(values[i]);
    }
    assert_true(largest > 0.8f * bound);
}

// YOLOv6 (activation: torch.nn.ReLU()): every Conv's act ReLU (SPPF's and the
// Detect head's too), a row of n > 1 Convs declared as its Sequential
// ("model.2.0", "model.2.1": yolov6n's 6 x 0.33 -> 2), the neck's
// ConvTranspose2d weight (c1, c2, 2, 2) uniform in +-1/sqrt(c2 x 4) (its
// fan_in is dim 1) and its bias alike, the head's strides 8, 16, 32.
static void test_init_yolov6(void **state) {
    Yolo model;
    initialised(&model, "yolov6n");
    assert_int_equal(model.layers[2].repeats, 2);
    assert_int_equal(model.layers[2].cv1.act, YOLO_ACT_RELU);
    assert_int_equal(model.layers[2].chain[0].act, YOLO_ACT_RELU);
    assert_int_equal(model.layers[9].cv1.act, YOLO_ACT_RELU);
    assert_non_null(parameter_find(&model.params, "model.2.1.conv.weight"));
    assert_null(parameter_find(&model.params, "model.2.conv.weight"));
    assert_non_null(parameter_find(&model.params, "model.3.conv.weight"));  // a row of 1
    const Parameter *up = parameter_find(&model.buffers, "model.11.weight");
    assert_non_null(up);
    assert_int_equal(up->torch_shape[0], 64);  // 256 x 0.25 in and out
    assert_int_equal(up->torch_shape[2], 2);
    expect_uniform(&model, "model.11.weight", 64.0 * 4);
    expect_uniform(&model, "model.11.bias", 64.0 * 4);
    for (int level = 0; level < 3; level++) assert_int_equal(model.head_strides[level], 8 << level);
    yolo_free(&model);
}

static void test_init_segment(void **state) {
    const char *names[2] = {"yolo11n-seg", "yolo26n-seg"};
    for (int m = 0; m < 2; m++) {
        Yolo model;
        initialised(&model, names[m]);
        assert_int_equal(model.config.task, YOLO_TASK_SEGMENT);
        assert_int_equal(model.layers[model.layer_count - 1].hidden, 64);  // npr of n: 256 x 0.25
        char name[64];
        snprintf(name, sizeof name, "model.%d.proto.upsample.weight", model.layer_count - 1);
        expect_uniform(&model, name, 64.0 * 4);
        snprintf(name, sizeof name, "model.%d.cv4.1.2.bias", model.layer_count - 1);
        expect_uniform(&model, name, 32.0);  // c4 = max(64 / 4, 32) inputs, 1 x 1
        if (m == 1) {
            snprintf(name, sizeof name, "model.%d.proto.semseg.2.bias", model.layer_count - 1);
            expect_uniform(&model, name, 64.0);
        }
        yolo_free(&model);
    }
}

// Pose26's RealNVP starts as Ultralytics': loc 0, cov the identity, mask
// rows (0, 1), (1, 0), ...; Linear weights xavier_uniform with gain 0.01,
// biases +-1/sqrt(fan_in). yolov8-pose.yaml's nc is 1, the others' 80.
static void test_init_pose(void **state) {
    ErrorMessage err;
    YoloConfig config;
    int pretrained;
    Yolo model;
    if (yolo_parse_name("yolov8n-pose", &config, &pretrained, &err)) fail_msg("%s", err.text);
    assert_int_equal(config.classes, 1);
    initialised(&model, "yolo26n-pose");
    assert_int_equal(model.config.classes, 80);
    float values[64 * 64];
    read_param(&model, "model.23.flow_model.cov", values, 4);
    assert_true(values[0] == 1.0f && values[1] == 0.0f && values[2] == 0.0f && values[3] == 1.0f);
    read_param(&model, "model.23.flow_model.mask", values, 12);
    for (int row = 0; row < 6; row++) {
        assert_true(values[2 * row] == (float)(row % 2));
        assert_true(values[2 * row + 1] == (float)(1 - row % 2));
    }
    expect_uniform(&model, "model.23.flow_model.t.5.2.weight", 1.0 / (0.0001 * 6.0 / 128.0));
    expect_uniform(&model, "model.23.flow_model.s.0.0.bias", 2.0);
    expect_uniform(&model, "model.23.cv4_sigma.1.bias", 85.0);  // c4 = max(64 / 4, 17 x 5)
    yolo_free(&model);
}

// yolo26-sem.yaml's model: yolo26's backbone (layers 0-10, trained), its neck
// up to P3, SemanticSegment on P3 (64 wide at n) and P4 (128): classifier
// and aux_head a 3x3 Conv to 64, then a Conv2d to the 19 classes (biases
// +-1/sqrt(64)); ADE20K's weights name the same model with 150 classes.
static void test_init_semantic(void **state) {
    ErrorMessage err;
    YoloConfig config;
    int pretrained;
    if (yolo_parse_name("ultralytics/yolo26s-sem-ade20k.pt", &config, &pretrained, &err))
        fail_msg("%s", err.text);
    assert_string_equal(config.name, "yolo26s-sem");
    assert_int_equal(config.task, YOLO_TASK_SEMANTIC);
    assert_int_equal(config.classes, 150);
    assert_int_equal(pretrained, 1);
    Yolo model;
    initialised(&model, "yolo26n-sem");
    assert_int_equal(model.config.classes, 19);
    assert_int_equal(model.layer_count, 18);
    assert_int_equal(model.layers[17].kind, YOLO_SEMANTIC);
    assert_int_equal(model.backbone_layers, 11);
    assert_int_equal(model.feature_dim, 256);
    const Parameter *aux = parameter_find(&model.buffers, "model.17.aux_head.0.conv.weight");
    assert_non_null(aux);
    assert_int_equal(aux->torch_shape[0], 64);
    assert_int_equal(aux->torch_shape[1], 128);
    expect_uniform(&model, "model.17.classifier.1.bias", 64.0);
    expect_uniform(&model, "model.17.aux_head.1.weight", 64.0);
    assert_null(parameter_find(&model.buffers, "model.17.cv2.0.0.conv.weight"));  // no Detect
    yolo_free(&model);
}

// yolo26-depth.yaml's model: yolo26's layers 0-22, then Depth (c_mid 256 at
// every size) on P3 ... P5: cal_a 1, cal_b 0, proj 1x1 Convs from 64, 128,
// 256 channels, refine after two fusions, the head's ConvTranspose2d
// (128, 128, 2, 2) uniform in +-1/sqrt(128 x 4), its last bias 0.182.
static void test_init_depth(void **state) {
    Yolo model;
    initialised(&model, "yolo26n-depth");
    assert_int_equal(model.config.task, YOLO_TASK_DEPTH);
    assert_int_equal(model.layer_count, 24);
    assert_int_equal(model.backbone_layers, 11);
    float values[128 * 128 * 4];
    read_param(&model, "model.23.cal_a", values, 1);
    assert_true(values[0] == 1.0f);
    read_param(&model, "model.23.cal_b", values, 1);
    assert_true(values[0] == 0.0f);
    read_param(&model, "model.23.head.3.bias", values, 1);
    assert_true(values[0] == 0.182f);
    const int widths[3] = {64, 128, 256};
    for (int level = 0; level < 3; level++) {
        char name[64];
        snprintf(name, sizeof name, "model.23.proj.%d.conv.weight", level);
        const Parameter *proj = parameter_find(&model.buffers, name);
        assert_non_null(proj);
        assert_int_equal(proj->torch_shape[0], YOLO_DEPTH_WIDTH);
        assert_int_equal(proj->torch_shape[1], widths[level]);
    }
    assert_non_null(parameter_find(&model.buffers, "model.23.refine.1.1.bn.weight"));
    assert_null(parameter_find(&model.buffers, "model.23.refine.2.0.conv.weight"));
    expect_uniform(&model, "model.23.head.1.weight", 128.0 * 4);
    expect_uniform(&model, "model.23.head.1.bias", 128.0 * 4);
    expect_uniform(&model, "model.23.head.3.weight", 64.0);
    yolo_free(&model);
}

// YOLO-World (yolov8-world.yaml, yolov8-worldv2.yaml): YOLOv8's trained
// layers 0-8; C2fAttn's cv2 from (3 + n) c, its MaxSigmoidAttnBlock's heads
// scaled (s: 8, 4, 16 -> 4, 2, 8; m: 6, 3, 9; x: 10, 5, 10) with bias 0 and
// gl from the 512-wide text embeddings; v1's ImagePoolingAttn (LayerNorms 1 /
// 0, projections' biases +-1/sqrt(fan_in)); WorldDetect.bias_init's box
// biases 1.0, its class stacks ending in 512 embeddings with PyTorch's
// default bias, ContrastiveHead bias -10, logit_scale log(1 / 0.07) (v2's
// BNContrastiveHead: -1, then its BatchNorm).
static void test_init_world(void **state) {
    const char *names[2] = {"yolov8s-world", "yolov8s-worldv2"};
    static float values[512];
    for (int m = 0; m < 2; m++) {
        Yolo model;
        initialised(&model, names[m]);
        const int head = model.layer_count - 1;
        assert_int_equal(model.layer_count, m ? 23 : 24);
        assert_int_equal(model.backbone_layers, 9);
        assert_int_equal(model.feature_dim, 512);
        assert_int_equal(model.layers[head].kind, YOLO_WORLD_DETECT);
        const int heads[3] = {4, 2, 8}, attn_layers[3] = {12, 15, m ? 21 : 22};
        for (int i = 0; i < 3; i++) {
            assert_int_equal(model.layers[attn_layers[i]].kind, YOLO_C2F_ATTN);
            assert_int_equal(model.layers[attn_layers[i]].heads, heads[i]);
        }
        const Parameter *cv2 = parameter_find(&model.buffers, "model.12.cv2.conv.weight");
        assert_non_null(cv2);
        assert_int_equal(cv2->torch_shape[1], 4 * 128);  // (3 + n) c, n 1, c 128
        read_param(&model, "model.12.attn.bias", values, 4);
        for (int i = 0; i < 4; i++) assert_true(values[i] == 0.0f);
        expect_uniform(&model, "model.15.attn.gl.weight", 512.0);
        char name[64];
        for (int level = 0; level < 3; level++) {
            snprintf(name, sizeof name, "model.%d.cv2.%d.2.bias", head, level);
            read_param(&model, name, values, 64);
            for (int i = 0; i < 64; i++) assert_true(values[i] == 1.0f);
            snprintf(name, sizeof name, "model.%d.cv3.%d.2.bias", head, level);
            expect_uniform(&model, name, 128.0);  // c3 = max(128, min(80, 100))
            snprintf(name, sizeof name, "model.%d.cv4.%d.bias", head, level);
            read_param(&model, name, values, 1);
            assert_true(values[0] == -10.0f);
            snprintf(name, sizeof name, "model.%d.cv4.%d.logit_scale", head, level);
            read_param(&model, name, values, 1);
            assert_true(values[0] == (m ? -1.0f : logf((float)(1.0 / 0.07))));
            snprintf(name, sizeof name, "model.%d.cv4.%d.norm.running_var", head, level);
            const Parameter *norm = parameter_find(&model.buffers, name);
            if (!m) {
                assert_null(norm);
                continue;
            }
            assert_non_null(norm);
            assert_int_equal(norm->torch_shape[0], YOLO_WORLD_EMBED);
            read_param(&model, name, values, YOLO_WORLD_EMBED);
            assert_true(values[0] == 1.0f && values[YOLO_WORLD_EMBED - 1] == 1.0f);
        }
        snprintf(name, sizeof name, "model.%d.cv3.0.2.weight", head);
        const Parameter *embed = parameter_find(&model.buffers, name);
        assert_non_null(embed);
        assert_int_equal(embed->torch_shape[0], YOLO_WORLD_EMBED);
        if (!m) {  // ImagePoolingAttn (layer 16) on P3, P4, P5: 128, 256, 512 channels
            read_param(&model, "model.16.query.0.weight", values, 512);
            assert_true(values[0] == 1.0f && values[511] == 1.0f);
            read_param(&model, "model.16.key.0.bias", values, 256);
            assert_true(values[0] == 0.0f && values[255] == 0.0f);
            expect_uniform(&model, "model.16.projections.2.bias", 512.0);
            expect_uniform(&model, "model.16.proj.bias", 256.0);
        } else {
            assert_null(parameter_find(&model.buffers, "model.16.query.0.weight"));
        }
        yolo_free(&model);
    }
    // the heads at the other sizes (parse_model: min(nh, max_channels // 64) * width)
    const struct {
        const char *name;
        int heads[3];
    } sizes[] = {{"yolov8m-world", {6, 3, 9}}, {"yolov8x-worldv2", {10, 5, 10}}};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        ErrorMessage err;
        YoloConfig config;
        int pretrained;
        Yolo model;
        if (yolo_parse_name(sizes[i].name, &config, &pretrained, &err) ||
            yolo_declare(&model, NULL, &config, &err))
            fail_msg("%s: %s", sizes[i].name, err.text);
        const int attn_layers[3] = {12, 15, config.family == YOLO_V8_WORLD ? 22 : 21};
        for (int l = 0; l < 3; l++)
            assert_int_equal(model.layers[attn_layers[l]].heads, sizes[i].heads[l]);
        yolo_free(&model);
    }
}

// The state dict written reads back into a model detected from the file
// (yolo_config_from_weights), every tensor equal: COCO's 80 classes, a
// head of 3 (a user's fine-tuned model) whose count the file gives, and one
// of 3 classes on the 80-wide class stack it was fine-tuned from
// (Ultralytics 8.4 keeps it).
static void save_load(const char *name, int classes, int class_width) {
    ErrorMessage err;
    YoloConfig config;
    int pretrained;
    Yolo model, loaded;
    const YoloInputShape shape = {1, 32};
    char path[64];
    snprintf(path, sizeof path, "/tmp/ltc-test-yolo-%d.safetensors", (int)getpid());
    if (yolo_parse_name(name, &config, &pretrained, &err)) fail_msg("%s", err.text);
    config.classes = classes;
    config.class_width = class_width;
    if (yolo_declare(&model, fixture_backend, &config, &err) ||
        yolo_allocate(&model, &shape, 1, &err) || yolo_init(&model, 5, &err) ||
        yolo_save(&model, path, NULL, &err))
        fail_msg("%s", err.text);
    SafeTensors file;
    if (safetensors_read(path, &file, &err)) fail_msg("%s", err.text);
    YoloConfig found;
    if (yolo_config_from_weights(&file, "", &found, &err)) fail_msg("%s", err.text);
    assert_string_equal(found.name, name);
    assert_int_equal(found.classes, classes);
    const int ch0 = 64;  // P3 of yolov8n and yolo11n
    const int rule = ch0 > (classes < 100 ? classes : 100) ? ch0 : (classes < 100 ? classes : 100);
    // no class stacks, or (YOLO-World) none whose width a file tells: Ultralytics' rule
    if (found.task == YOLO_TASK_CLASSIFY || found.task == YOLO_TASK_SEMANTIC ||
        found.task == YOLO_TASK_DEPTH || yolo_is_world(found.family))
        assert_int_equal(found.class_width, 0);
    else assert_int_equal(found.class_width, class_width ? class_width : rule);
    if (yolo_declare(&loaded, fixture_backend, &found, &err) ||
        yolo_allocate(&loaded, &shape, 1, &err) ||
        weights_load_from(&file, &loaded.params, &loaded.buffers, &loaded.num_batches_tracked,
                          NULL, &err))
        fail_msg("%s", err.text);
    for (int s = 0; s < 2; s++) {
        const ParameterSet *a = s ? &model.buffers : &model.params;
        const ParameterSet *b = s ? &loaded.buffers : &loaded.params;
        float *x = malloc(a->total * sizeof *x), *y = malloc(b->total * sizeof *y);
        fixture_backend->op.download(fixture_backend, x, a->values, a->total * sizeof *x);
        fixture_backend->op.download(fixture_backend, y, b->values, b->total * sizeof *y);
        assert_int_equal(a->total, b->total);
        assert_memory_equal(x, y, a->total * sizeof *x);
        free(x);
        free(y);
    }
    safetensors_free(&file);
    unlink(path);
    yolo_free(&model);
    yolo_free(&loaded);
}

static void test_save_load(void **state) {
    save_load("yolo11n", 80, 0);
    save_load("yolo26n", 80, 0);
    save_load("yolov5nu", 80, 0);  // its released name (yolov5n.yaml's is the same model)
    save_load("yolo12n", 80, 0);
    save_load("yolo26n", 3, 0);
    save_load("yolo11n-seg", 80, 0);  // told from yolo11n by its prototypes
    save_load("yolo26n-seg", 5, 0);
    save_load("yolo11n-pose", 80, 0);  // told apart by cv4's 51 or 1 outputs
    save_load("yolo26n-pose", 1, 0);   // by its cv4_kpts
    save_load("yolo11n-obb", 80, 0);
    save_load("yolo26n-obb", 15, 0);
    save_load("yolo11n-cls", 1000, 0);  // told apart by Classify's linear
    save_load("yolov8n-cls", 7, 0);
    save_load("yolov8n", 3, 0);
    save_load("yolov8n", 3, 80);
    save_load("yolo26n-sem", 19, 0);  // told apart by SemanticSegment's classifier
    save_load("yolo26n-sem", 150, 0);  // ADE20K's
    save_load("yolo26n-depth", 1, 0);  // by Depth's calibration
    save_load("yolov8s-world", 80, 0);  // told from yolov8s by its C2fAttn neck
    save_load("yolov8s-worldv2", 80, 0);  // from v1 by its head's layer and BNContrastiveHead
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_init_yolo26),
        cmocka_unit_test(test_init_head_levels),
        cmocka_unit_test(test_init_yolov6),
        cmocka_unit_test(test_init_segment),
        cmocka_unit_test(test_init_pose),
        cmocka_unit_test(test_init_semantic),
        cmocka_unit_test(test_init_depth),
        cmocka_unit_test(test_init_world),
        cmocka_unit_test(test_save_load),
    };
    return cmocka_run_group_tests(tests, fixture_backend_create_cpu, fixture_backend_destroy);
}
