// The Ultralytics checkpoint we write (weights/ultralytics_export.h) against
// the structure of the ones Ultralytics 8.4.190 saves
// (tests/fixtures/ultralytics_structure.txt, tools/make_ultralytics_structure.py):
// for yolov8n, yolo11n, yolo11m, yolo26n, the -seg, -pose, -obb and -cls
// models of the three families, yolov5nu, yolo12n and yolo12l, the other
// heads (-sem, -depth, YOLO-World's), the checkpoint's keys and,
// module by module in named_modules() order, its class, its public attributes, and
// its parameter and buffer names, read back from our file with the
// restricted reader (weights/pt_pickle.h). Then the tensors read back
// (weight_file_read) equal our tables bit for bit. That ultralytics.YOLO
// loads and fine-tunes the file is tools/check_ultralytics_export.py's.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend_fixture.h"
#include "nn/weights.h"
#include "nn/yolo.h"
#include "pt_bases.h"
#include "pt_structure.h"
#include "weights/pt_pickle.h"
#include "weights/ultralytics_export.h"
#include "weights/weight_file.h"

#define FIXTURE "tests/fixtures/ultralytics_structure.txt"

// Our file's structure lines (its data.pkl read with the restricted reader).
static void our_structure(const char *path, Lines *out) {
    PtPickle pickle;
    pt_zip_pickle(path, "exported_last/data.pkl", &pickle);
    const PtValue *root = pickle.root;
    assert_int_equal(root->kind, PT_DICT);
    const char *keys[32];
    int count = 0;
    for (size_t i = 0; i + 1 < root->as.items.count && count < 32; i += 2)
        keys[count++] = root->as.items.items[i]->as.string.bytes;
    qsort(keys, (size_t)count, sizeof *keys, compare_strings);
    char line[PT_STRUCTURE_LINE_BYTES] = "ckpt";
    for (int i = 0; i < count; i++) {
        const size_t used = strlen(line);
        snprintf(line + used, sizeof line - used, " %s", keys[i]);
    }
    lines_add(out, line);
    pt_structure_describe(pt_dict_get(root, "model"), "", 0, out);
    pt_pickle_free(&pickle);
}

// The tensors read back equal the tables.
static void expect_round_trip(const Yolo *model, const char *path) {
    SafeTensors file;
    ErrorMessage err;
    if (weight_file_read(path, &file, &err)) fail_msg("%s", err.text);
    assert_int_equal(file.count, weights_key_count(&model->params, &model->buffers));
    const ParameterSet *sets[2] = {&model->params, &model->buffers};
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < sets[s]->count; i++) {
            const Parameter *p = &sets[s]->params[i];
            const SafeTensor *t = safetensors_find(&file, p->name);
            if (!t) fail_msg("%s not in the file", p->name);
            float *ours = malloc(p->count * sizeof *ours), *torch = malloc(p->count * sizeof *torch);
            model->backend->op.download(model->backend, ours, p->value, p->count * sizeof *ours);
            weights_to_torch_layout(p, ours, torch);
            assert_int_equal(t->dtype, SAFE_F32);
            if (memcmp(torch, safetensors_data(&file, t), p->count * sizeof *torch))
                fail_msg("%s differs", p->name);
            free(ours);
            free(torch);
        }
    safetensors_free(&file);
}

static void check_model(const char *name) {
    ErrorMessage err;
    YoloConfig config;
    int pretrained;
    Yolo model;
    const YoloInputShape shape = {1, 32};
    if (yolo_parse_name(name, &config, &pretrained, &err) ||
        yolo_declare(&model, fixture_backend, &config, &err) ||
        yolo_allocate(&model, &shape, 1, &err) || yolo_init(&model, 7, &err))
        fail_msg("%s: %s", name, err.text);
    char path[64];
    snprintf(path, sizeof path, "/tmp/ltc-test-ultralytics-%d.pt", (int)getpid());
    if (export_ultralytics(&model, path, &err)) fail_msg("%s", err.text);
    Lines expected = {0}, ours = {0};
    fixture_section(FIXTURE, name, &expected);
    our_structure(path, &ours);
    pt_structure_expect(name, &expected, &ours);
    expect_round_trip(&model, path);
    unlink(path);
    lines_free(&expected);
    lines_free(&ours);
    yolo_free(&model);
}

static void test_structure_matches_ultralytics(void **state) {
    check_model("yolov8n");
    check_model("yolo11n");
    check_model("yolo11m");
    check_model("yolo26n");
    check_model("yolov8n-seg");  // Segment: Proto (a ConvTranspose2d), cv4
    check_model("yolo11n-seg");
    check_model("yolo26n-seg");  // Segment26: Proto26, one2one_cv4
    check_model("yolov8n-pose");  // Pose: cv4 of 51 keypoint values
    check_model("yolo11n-pose");
    check_model("yolo26n-pose");  // Pose26: cv4 without its Conv2d, RealNVP, cv4_kpts, cv4_sigma
    check_model("yolov8n-obb");   // OBB: cv4 of 1 angle
    check_model("yolo11n-obb");
    check_model("yolo26n-obb");
    check_model("yolov8n-cls");   // ClassificationModel: no SPPF, no neck; Classify
    check_model("yolo11n-cls");
    check_model("yolo26n-cls");
    check_model("yolov5nu");      // C3 blocks, the 6x6 stem's padding 2
    check_model("yolo12n");       // A2C2f: ABlock pairs (AAttn), C3k; gamma None
    check_model("yolo12l");       // A2C2f's gamma Parameter
    check_model("yolov5n6u");     // yolov5-p6.yaml: a P6 stage, a 4-level Detect
    check_model("yolo26n-p6");    // a P6 stage, SPPF without its shortcut, Detect over P3 ... P6
    check_model("yolo26n-p2");    // Detect over P2 ... P5 (strides 4 ... 32)
    check_model("yolov8n-pose-p6");  // a neck of C2 blocks, Pose over P3 ... P6
    check_model("yolov6n");       // ReLU, rows of Convs as a Sequential, ConvTranspose2d
    check_model("yolo26n-sem");   // SemanticSegmentationModel: SemanticSegment on P3, P4
    check_model("yolo26n-depth");  // DepthModel: Depth, its calibration buffers
    // WorldModel (txt_feats, clip_model): C2fAttn, ImagePoolingAttn, WorldDetect's
    // ContrastiveHeads (v1) or BNContrastiveHeads (v2)
    check_model("yolov8s-world");
    check_model("yolov8s-worldv2");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_structure_matches_ultralytics),
    };
    return cmocka_run_group_tests(tests, fixture_backend_create_ref, fixture_backend_destroy);
}
