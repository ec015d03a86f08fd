// The Ultralytics checkpoint writer's heads (see
// ultralytics_export_internal.h): Detect and its task's Segment, Pose, OBB
// (YOLO26's versions too), Classify, YOLO26's SemanticSegment and Depth,
// YOLO-World's WorldDetect (its contrastive heads in ultralytics_export_world.c).

#include "nn/weights.h"
#include "weights/ultralytics_export_internal.h"

// The stride of a model without Detect (SemanticSegmentationModel's, the
// deepest map's; DepthModel's default): [32].
void ux_put_model_stride(Exporter *e) {
    const float stride = 32.0f;
    const int64_t shape[1] = {1};
    pt_put_tensor(&e->w, SAFE_F32, &stride, 1, shape, 0, 0);
}

// The head's strides: 8, 16, 32 (P3 ... P5), 64 too for the P6 models, 4 ... 32 for P2.
void ux_put_stride(Exporter *e) {
    const Yolo *model = e->model;
    const int levels = model->layers[model->layer_count - 1].from_count;
    float strides[4];
    for (int l = 0; l < levels; l++) strides[l] = (float)model->head_strides[l];
    const int64_t shape[1] = {levels};
    pt_put_tensor(&e->w, SAFE_F32, strides, 1, shape, 0, 0);
}

// One head stack (cv2: box, cv3: class) of one level.
static void head_stack(Exporter *e, const char *prefix, int legacy, int last) {
    char name[NAME_SIZE];
    ux_container_begin(e, "Sequential");
    for (int i = 0; i < 2; i++) {
        char index[16];
        ux_text_format(index, sizeof index, "%d", i);
        if (legacy) {
            ux_child_conv(e, prefix, index, "Conv", 1);
            continue;
        }
        ux_text_format(name, sizeof name, "%s.%d", prefix, i);
        ux_conv_pair(e, index, name, "DWConv", 1, "Conv", 1);
    }
    if (last) {  // all but Pose26's keypoint stacks (its Conv2d heads are apart)
        ux_key(e, "2");
        ux_text_format(name, sizeof name, "%s.2", prefix);
        ux_conv2d(e, name, 1, 1, 1);
    }
    ux_container_end(e);
}

// What a head ModuleList holds per level: a stack (head_stack) with or
// without its final Conv2d, or only a biased Conv2d (Pose26's cv4_kpts,
// cv4_sigma and their one2one copies).
typedef enum LevelModule { STACK_WITH_CONV2D, STACK_WITHOUT_CONV2D, CONV2D_ONLY } LevelModule;

// One head ModuleList "<prefix>.<list>", a module per level. copy: one of
// YOLO26's one2one lists, a deep copy with its own one SiLU.
static void head_list_of(Exporter *e, const char *prefix, const YoloModule *layer,
                         const char *list, int legacy, int copy, LevelModule level_module) {
    char name[NAME_SIZE], index[16];
    const int shared_act = e->default_act;
    if (copy) e->default_act = -1;  // the copy's SiLU: made and memoised at its first Conv
    ux_key(e, list);
    ux_container_begin(e, "ModuleList");
    for (int level = 0; level < layer->from_count; level++) {
        ux_text_format(index, sizeof index, "%d", level);
        ux_text_format(name, sizeof name, "%s.%s.%d", prefix, list, level);
        ux_key(e, index);
        if (level_module == CONV2D_ONLY) ux_conv2d(e, name, 1, 1, 1);
        else head_stack(e, name, legacy, level_module == STACK_WITH_CONV2D);
    }
    ux_container_end(e);
    e->default_act = shared_act;
}

static void head_list(Exporter *e, const char *prefix, const YoloModule *layer, const char *list,
                      int legacy, int copy) {
    head_list_of(e, prefix, layer, list, legacy, copy, STACK_WITH_CONV2D);
}

// torch.nn.Linear "<prefix>" (weight (out, in), bias).
void ux_linear(Exporter *e, const char *prefix) {
    char name[NAME_SIZE];
    ux_text_format(name, sizeof name, "%s.weight", prefix);
    const Parameter *weight = ux_find(e, name);
    ux_module_begin(e, "torch.nn.modules.linear", "Linear");
    ux_key_int(e, "in_features", weight ? weight->torch_shape[1] : 0);
    ux_key_int(e, "out_features", weight ? weight->torch_shape[0] : 0);
    ux_parameter_pair(e, prefix, "weight", "bias");
    ux_empty_ordered_dict(e, "_modules");
    pt_object_end(&e->w);
}

// An activation module of its own (not Conv's shared SiLU): RealNVP's.
static void activation(Exporter *e, const char *cls, int inplace_attribute) {
    ux_leaf(e, "torch.nn.modules.activation", cls);
    if (inplace_attribute) {
        ux_key(e, "inplace");
        pt_put_bool(&e->w, 0);
    }
    pt_object_end(&e->w);
}

// Pose26's RealNVP (yolo.c, declare_flow): its buffers, then ModuleLists s
// and t of 6 Sequential(Linear, SiLU, Linear, SiLU, Linear (, Tanh)).
static void flow_model(Exporter *e, const char *prefix) {
    char name[NAME_SIZE], index[16];
    ux_module_begin(e, BLOCK_MODULE, "RealNVP");
    ux_empty_ordered_dict(e, "_parameters");
    ux_section_begin(e, "_buffers");
    ux_entry(e, "loc", prefix, 0, 0);
    ux_entry(e, "cov", prefix, 0, 0);
    ux_entry(e, "mask", prefix, 0, 0);
    ux_section_end(e);
    ux_section_begin(e, "_modules");
    for (int net = 0; net < 2; net++) {
        ux_key(e, net ? "t" : "s");
        ux_container_begin(e, "ModuleList");
        for (int i = 0; i < 6; i++) {
            ux_text_format(index, sizeof index, "%d", i);
            ux_key(e, index);
            ux_container_begin(e, "Sequential");
            for (int l = 0; l < 6 - net; l++) {
                ux_text_format(index, sizeof index, "%d", l);
                ux_key(e, index);
                ux_text_format(name, sizeof name, "%s.%c.%d.%d", prefix, "st"[net], i, l);
                if (l % 2 == 0) ux_linear(e, name);
                else if (l == 5) activation(e, "Tanh", 0);
                else activation(e, "SiLU", 1);
            }
            ux_container_end(e);
        }
        ux_container_end(e);
    }
    ux_section_end(e);
    pt_object_end(&e->w);
}

// Segment's mask prototypes: Proto, or YOLO26's Proto26 (yolo.c, declare_segment).
static void proto(Exporter *e, const char *prefix, const YoloModule *layer, int proto26) {
    char name[NAME_SIZE], index[16];
    ux_module_begin(e, BLOCK_MODULE, proto26 ? "Proto26" : "Proto");
    ux_children_begin(e);
    ux_child_conv(e, prefix, "cv1", "Conv", 1);
    ux_key(e, "upsample");
    ux_text_format(name, sizeof name, "%s.upsample", prefix);
    ux_conv_module(e, name, 2, -1, 1, 1, 1);
    ux_child_conv(e, prefix, "cv2", "Conv", 1);
    ux_child_conv(e, prefix, "cv3", "Conv", 1);
    if (proto26) {
        ux_key(e, "feat_refine");
        ux_container_begin(e, "ModuleList");
        ux_text_format(name, sizeof name, "%s.feat_refine", prefix);
        for (int level = 1; level < layer->from_count; level++) {
            ux_text_format(index, sizeof index, "%d", level - 1);
            ux_child_conv(e, name, index, "Conv", 1);
        }
        ux_container_end(e);
        ux_child_conv(e, prefix, "feat_fuse", "Conv", 1);
        ux_key(e, "semseg");
        ux_container_begin(e, "Sequential");
        ux_text_format(name, sizeof name, "%s.semseg", prefix);
        ux_child_conv(e, name, "0", "Conv", 1);
        ux_child_conv(e, name, "1", "Conv", 1);
        ux_key(e, "2");
        ux_text_format(name, sizeof name, "%s.semseg.2", prefix);
        ux_conv2d(e, name, 1, 1, 1);
        ux_container_end(e);
    }
    ux_container_end(e);
}

// The head's class: Detect, Segment, Pose, OBB, or YOLO26's Segment26, Pose26, OBB26.
const char *ux_head_class(const YoloConfig *config) {
    static const char *const classes[2][4] = {{"Detect", "Segment", "Pose", "OBB"},
                                              {"Detect", "Segment26", "Pose26", "OBB26"}};
    return classes[yolo_is_26(config->family)][config->task];
}

// Pose's kpt_shape, [17, 3].
void ux_put_kpt_shape(Exporter *e) {
    pt_list_begin(&e->w);
    pt_put_int(&e->w, YOLO_KEYPOINTS);
    pt_put_int(&e->w, YOLO_KEYPOINT_DIMS);
    pt_list_end(&e->w);
}

void ux_detect(Exporter *e, const char *prefix, const YoloModule *layer,
               const LayerInfo *info) {
    const YoloConfig *config = &e->model->config;
    const YoloFamily family = config->family;
    const int classes = config->classes, reg_max = yolo_reg_max(family);
    const int segment = config->task == YOLO_TASK_SEGMENT;
    const int world = layer->kind == YOLO_WORLD_DETECT;
    char name[NAME_SIZE];
    ux_module_begin(e, "ultralytics.nn.modules.head", world ? "WorldDetect" : ux_head_class(config));
    ux_key_int(e, "nc", classes);
    ux_key_int(e, "nl", layer->from_count);
    ux_key_int(e, "reg_max", reg_max);
    ux_key_int(e, "no", classes + 4 * reg_max);
    ux_key(e, "stride");
    ux_put_stride(e);
    const float none = 0.0f;
    const int64_t empty[1] = {0};
    ux_key(e, "anchors");  // made by the first inference; empty until then
    pt_put_tensor(&e->w, SAFE_F32, &none, 1, empty, 0, 0);
    ux_key(e, "strides");
    pt_put_tensor(&e->w, SAFE_F32, &none, 1, empty, 0, 0);
    if (segment) {
        ux_key_int(e, "nm", YOLO_MASKS);
        ux_key_int(e, "npr", layer->hidden);
    } else if (config->task == YOLO_TASK_POSE) {
        ux_key(e, "kpt_shape");
        ux_put_kpt_shape(e);
        ux_key_int(e, "nk", YOLO_KEYPOINTS * YOLO_KEYPOINT_DIMS);
        if (yolo_is_26(family)) ux_key_int(e, "nk_sigma", 2 * YOLO_KEYPOINTS);
    } else if (config->task == YOLO_TASK_OBB) {
        ux_key_int(e, "ne", 1);
    }
    ux_layer_attributes(e, info);
    ux_key(e, "inplace");
    pt_put_bool(&e->w, 1);
    ux_children_begin(e);
    head_list(e, prefix, layer, "cv2", 1, 0);
    head_list(e, prefix, layer, "cv3", yolo_legacy_head(family), 0);
    ux_key(e, "dfl");
    if (reg_max > 1) {
        ux_module_begin(e, BLOCK_MODULE, "DFL");
        ux_key_int(e, "c1", reg_max);
        ux_children_begin(e);
        ux_key(e, "conv");
        ux_text_format(name, sizeof name, "%s.dfl.conv", prefix);
        ux_conv2d(e, name, 1, 0, 0);  // fixed (requires_grad False, as Ultralytics' DFL)
        ux_container_end(e);
    } else {
        ux_leaf(e, "torch.nn.modules.linear", "Identity");
        pt_object_end(&e->w);
    }
    if (world) ux_contrastive_heads(e, prefix, layer);  // WorldDetect's cv4
    // YOLO26's end-to-end head: its one-to-one copies of both stacks
    if (yolo_end2end(family)) {
        head_list(e, prefix, layer, "one2one_cv2", 1, 1);
        head_list(e, prefix, layer, "one2one_cv3", 0, 1);
    }
    if (segment) {
        ux_key(e, "proto");
        ux_text_format(name, sizeof name, "%s.proto", prefix);
        proto(e, name, layer, yolo_is_26(family));
        head_list(e, prefix, layer, "cv4", 1, 0);
        if (yolo_end2end(family)) head_list(e, prefix, layer, "one2one_cv4", 1, 1);
    } else if (config->task == YOLO_TASK_POSE || config->task == YOLO_TASK_OBB) {
        const int pose26 = config->task == YOLO_TASK_POSE && yolo_is_26(family);
        const LevelModule cv4 = pose26 ? STACK_WITHOUT_CONV2D : STACK_WITH_CONV2D;
        head_list_of(e, prefix, layer, "cv4", 1, 0, cv4);
        if (yolo_end2end(family)) head_list_of(e, prefix, layer, "one2one_cv4", 1, 1, cv4);
        if (pose26) {
            ux_key(e, "flow_model");
            ux_text_format(name, sizeof name, "%s.flow_model", prefix);
            flow_model(e, name);
            const char *const lists[4] = {"cv4_kpts", "cv4_sigma", "one2one_cv4_kpts",
                                          "one2one_cv4_sigma"};
            for (int i = 0; i < 4; i++) head_list_of(e, prefix, layer, lists[i], 1, 0, CONV2D_ONLY);
        }
    }
    ux_container_end(e);
}

// Classify: conv (a Conv to 1280), pool (global), drop (p 0), linear.
void ux_classify_head(Exporter *e, const char *prefix, const LayerInfo *info) {
    char name[NAME_SIZE];
    ux_module_begin(e, "ultralytics.nn.modules.head", "Classify");
    ux_layer_attributes(e, info);
    ux_children_begin(e);
    ux_child_conv(e, prefix, "conv", "Conv", 1);
    ux_key(e, "pool");
    ux_leaf(e, "torch.nn.modules.pooling", "AdaptiveAvgPool2d");
    ux_key_int(e, "output_size", 1);
    pt_object_end(&e->w);
    ux_key(e, "drop");
    ux_leaf(e, "torch.nn.modules.dropout", "Dropout");
    ux_key(e, "p");
    pt_put_float(&e->w, 0.0);
    ux_key(e, "inplace");
    pt_put_bool(&e->w, 1);
    pt_object_end(&e->w);
    ux_key(e, "linear");
    ux_text_format(name, sizeof name, "%s.linear", prefix);
    ux_linear(e, name);
    ux_container_end(e);
}

// A Sequential of a 3x3 Conv unit ("0") and a Conv2d with bias ("1").
static void conv_then_conv2d(Exporter *e, const char *prefix, const char *child) {
    char name[NAME_SIZE];
    ux_key(e, child);
    ux_container_begin(e, "Sequential");
    ux_text_format(name, sizeof name, "%s.%s", prefix, child);
    ux_child_conv(e, name, "0", "Conv", 1);
    ux_key(e, "1");
    ux_text_format(name, sizeof name, "%s.%s.1", prefix, child);
    ux_conv2d(e, name, 1, 1, 1);
    ux_container_end(e);
}

// SemanticSegment (yolo_declare.c, declare_semantic): nc, nl, its stride
// (the model's deepest, 32), classifier and aux_head.
void ux_semantic_head(Exporter *e, const char *prefix, const YoloModule *layer,
                      const LayerInfo *info) {
    ux_module_begin(e, "ultralytics.nn.modules.head", "SemanticSegment");
    ux_key_int(e, "nc", e->model->config.classes);
    ux_key_int(e, "nl", layer->from_count);
    ux_key(e, "stride");
    ux_put_model_stride(e);
    ux_layer_attributes(e, info);
    ux_children_begin(e);
    conv_then_conv2d(e, prefix, "classifier");
    conv_then_conv2d(e, prefix, "aux_head");
    ux_container_end(e);
}

// Depth (yolo_declare.c, declare_depth): nl, its calibration buffers, then
// proj (a Conv per level), refine (Sequential(Conv, Conv) per fusion) and
// head (Conv, ConvTranspose2d, Conv, Conv2d).
void ux_depth_head(Exporter *e, const char *prefix, const YoloModule *layer,
                   const LayerInfo *info) {
    char name[NAME_SIZE], index[16];
    ux_module_begin(e, "ultralytics.nn.modules.head", "Depth");
    ux_key_int(e, "nl", layer->from_count);
    ux_layer_attributes(e, info);
    ux_empty_ordered_dict(e, "_parameters");
    ux_section_begin(e, "_buffers");
    ux_entry(e, "cal_a", prefix, 0, 0);
    ux_entry(e, "cal_b", prefix, 0, 0);
    ux_section_end(e);
    ux_section_begin(e, "_modules");
    ux_key(e, "proj");
    ux_container_begin(e, "ModuleList");
    ux_text_format(name, sizeof name, "%s.proj", prefix);
    for (int level = 0; level < layer->from_count; level++) {
        ux_text_format(index, sizeof index, "%d", level);
        ux_child_conv(e, name, index, "Conv", 1);
    }
    ux_container_end(e);
    ux_key(e, "refine");
    ux_container_begin(e, "ModuleList");
    for (int level = 0; level + 1 < layer->from_count; level++) {
        ux_text_format(index, sizeof index, "%d", level);
        ux_text_format(name, sizeof name, "%s.refine.%d", prefix, level);
        ux_conv_pair(e, index, name, "Conv", 1, "Conv", 1);
    }
    ux_container_end(e);
    ux_key(e, "head");
    ux_container_begin(e, "Sequential");
    ux_text_format(name, sizeof name, "%s.head", prefix);
    ux_child_conv(e, name, "0", "Conv", 1);
    ux_key(e, "1");
    ux_text_format(name, sizeof name, "%s.head.1", prefix);
    ux_conv_module(e, name, 2, -1, 1, 1, 1);
    ux_text_format(name, sizeof name, "%s.head", prefix);
    ux_child_conv(e, name, "2", "Conv", 1);
    ux_key(e, "3");
    ux_text_format(name, sizeof name, "%s.head.3", prefix);
    ux_conv2d(e, name, 1, 1, 1);
    ux_container_end(e);
    ux_section_end(e);
    pt_object_end(&e->w);
}
