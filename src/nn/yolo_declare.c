// YOLO declaration (see yolo.h): every layer's tables with Ultralytics'
// state_dict names, in its order: the backbone's trainable tensors in
// params, its BatchNorm statistics and every tensor of the neck and head in
// buffers; the backbone's conv units and inner blocks registered for the
// plans, arenas and forward (yolo.c, yolo_layout.c, yolo_blocks.c).
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/yolo_internal.h"

// name (PARAM_MAX_NAME bytes) = the formatted text; a longer one is cut
// (parameter_declare then refuses nothing: Ultralytics' names are short).
void yolo_name_format(char *name, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(name, PARAM_MAX_NAME, format, args);
    va_end(args);
}

typedef struct Declarer {
    Yolo *model;
    ParameterSet *set;  // params for the backbone, buffers for the neck and head
    int trained;
} Declarer;

// A Conv of padding `padding` (Ultralytics' autopad: kernel / 2, declare_conv);
// act 1: the family's default activation (yolo_default_act), 0: none.
static int declare_padded_conv(Declarer *d, YoloConv *unit, const char *prefix, int in_channels,
                               int out_channels, int kernel, int stride, int padding, int act,
                               int depthwise, ErrorMessage *err) {
    Yolo *model = d->model;
    memset(unit, 0, sizeof *unit);
    unit->act = act ? yolo_default_act(model->config.family) : YOLO_ACT_NONE;
    unit->depthwise = depthwise;
    unit->id = -1;
    char name[PARAM_MAX_NAME];
    yolo_name_format(name, "%s.conv.weight", prefix);
    if (depthwise ? conv2d_declare_depthwise(&unit->conv, d->set, name, out_channels, kernel,
                                             stride, padding, err)
                  : conv2d_declare(&unit->conv, d->set, name, in_channels, out_channels, kernel,
                                   stride, padding, err))
        return -1;
    yolo_name_format(name, "%s.bn", prefix);
    if (batchnorm_declare(&unit->bn, d->set, &model->buffers, name, out_channels,
                          model->config.bn_momentum, model->config.bn_eps, err))
        return -1;
    if (d->trained) {
        YoloConv **grown = realloc(model->convs, (size_t)(model->conv_count + 1) * sizeof *grown);
        if (!grown) return error_set(err, "out of memory");
        model->convs = grown;
        unit->id = model->conv_count;
        model->convs[model->conv_count++] = unit;
    }
    return 0;
}

static int declare_conv(Declarer *d, YoloConv *unit, const char *prefix, int in_channels,
                        int out_channels, int kernel, int stride, int act, int depthwise,
                        ErrorMessage *err) {
    return declare_padded_conv(d, unit, prefix, in_channels, out_channels, kernel, stride,
                               kernel / 2, act, depthwise, err);
}

static int declare_bottleneck(Declarer *d, YoloBottleneck *b, const char *prefix, int channels,
                              int kernel1, float expansion, int shortcut, ErrorMessage *err) {
    const int hidden = (int)(channels * expansion);
    char name[PARAM_MAX_NAME];
    b->add = shortcut;  // c1 == c2 in every use here
    yolo_name_format(name, "%s.cv1", prefix);
    if (declare_conv(d, &b->cv1, name, channels, hidden, kernel1, 1, 1, 0, err)) return -1;
    yolo_name_format(name, "%s.cv2", prefix);
    return declare_conv(d, &b->cv2, name, hidden, channels, 3, 1, 1, 0, err);
}

static int register_inner(Declarer *d, YoloInner *inner, ErrorMessage *err) {
    Yolo *model = d->model;
    inner->id = -1;
    if (!d->trained) return 0;
    YoloInner **grown = realloc(model->inners, (size_t)(model->inner_count + 1) * sizeof *grown);
    if (!grown) return error_set(err, "out of memory");
    model->inners = grown;
    inner->id = model->inner_count;
    model->inners[model->inner_count++] = inner;
    return 0;
}

// The CSP block of three Convs: cv1 and cv2 1x1 from the input to `hidden`,
// `count` Bottlenecks (kernel1 x kernel1, 3x3, e=1) on cv1's, cv3 1x1 from
// their concat to out_channels; "<prefix>.cv1" ... "<prefix>.m.<i>".
static int declare_c3_parts(Declarer *d, YoloConv *const units[3], YoloBottleneck **m,
                            const char *prefix, int in_channels, int out_channels, int hidden,
                            int count, int kernel1, int shortcut, ErrorMessage *err) {
    char name[PARAM_MAX_NAME];
    *m = calloc((size_t)count, sizeof **m);
    if (!*m) return error_set(err, "out of memory");
    const char *convs[3] = {"cv1", "cv2", "cv3"};
    for (int i = 0; i < 3; i++) {
        yolo_name_format(name, "%s.%s", prefix, convs[i]);
        if (declare_conv(d, units[i], name, i < 2 ? in_channels : 2 * hidden,
                         i < 2 ? hidden : out_channels, 1, 1, 1, 0, err))
            return -1;
    }
    for (int i = 0; i < count; i++) {
        yolo_name_format(name, "%s.m.%d", prefix, i);
        if (declare_bottleneck(d, &(*m)[i], name, hidden, kernel1, 1.0f, shortcut, err)) return -1;
    }
    return 0;
}

// C3k(c, c, 2, shortcut, e=0.5, k=3): bottlenecks of two 3x3 Convs.
static int declare_c3k(Declarer *d, YoloInner *inner, const char *prefix, int channels,
                       ErrorMessage *err) {
    inner->kind = YOLO_INNER_C3K;
    inner->hidden = channels / 2;
    inner->count = 2;
    YoloConv *const units[3] = {&inner->cv1, &inner->cv2, &inner->cv3};
    return declare_c3_parts(d, units, &inner->m, prefix, channels, channels, inner->hidden, 2, 3,
                            1, err);
}

// An attention block of PSABlock's layout under prefix: attn.qkv (1x1 to
// the heads' q, k, v), attn.proj, attn.pe (a depthwise pe_kernel conv),
// then "<mlp>.0" (SiLU, to `hidden`) and "<mlp>.1"; inner->heads, key_dim
// and head_dim set by the caller.
static int declare_attention_block(Declarer *d, YoloInner *inner, const char *prefix,
                                   int channels, int pe_kernel, const char *mlp, int hidden,
                                   ErrorMessage *err) {
    const int qkv = channels + 2 * inner->key_dim * inner->heads;
    char name[PARAM_MAX_NAME], mlp0[16], mlp1[16];
    snprintf(mlp0, sizeof mlp0, "%s.0", mlp);
    snprintf(mlp1, sizeof mlp1, "%s.1", mlp);
    struct {
        const char *path;
        YoloConv *unit;
        int in, out, kernel, act, depthwise;
    } units[] = {
        {"attn.qkv", &inner->qkv, channels, qkv, 1, 0, 0},
        {"attn.proj", &inner->proj, channels, channels, 1, 0, 0},
        {"attn.pe", &inner->pe, channels, channels, pe_kernel, 0, 1},
        {mlp0, &inner->ffn0, channels, hidden, 1, 1, 0},
        {mlp1, &inner->ffn1, hidden, channels, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
        yolo_name_format(name, "%s.%s", prefix, units[i].path);
        if (declare_conv(d, units[i].unit, name, units[i].in, units[i].out, units[i].kernel, 1,
                         units[i].act, units[i].depthwise, err))
            return -1;
    }
    return 0;
}

// PSABlock(c, attn_ratio 0.5, heads max(c / 64, 1)): key_dim head_dim / 2,
// pe 3x3, ffn to 2c.
static int declare_psa(Declarer *d, YoloInner *inner, const char *prefix, int channels,
                       ErrorMessage *err) {
    inner->kind = YOLO_INNER_PSA;
    inner->heads = channels / 64 > 1 ? channels / 64 : 1;
    inner->head_dim = channels / inner->heads;
    inner->key_dim = inner->head_dim / 2;
    inner->area = 1;
    return declare_attention_block(d, inner, prefix, channels, 3, "ffn", 2 * channels, err);
}

// ABlock(c, c / 32 heads, mlp_ratio, area): AAttn (q, k, v of head_dim
// each, pe 7x7), mlp to int(c * mlp_ratio).
static int declare_area_block(Declarer *d, YoloInner *inner, const char *prefix, int channels,
                              int area, float mlp_ratio, ErrorMessage *err) {
    inner->kind = YOLO_INNER_AREA;
    inner->heads = channels / 32;
    inner->head_dim = inner->key_dim = 32;
    inner->area = area;
    return declare_attention_block(d, inner, prefix, channels, 7, "mlp",
                                   (int)(channels * mlp_ratio), err);
}

// YOLO26's C3k2 inner block: Sequential(Bottleneck(c, c, shortcut, e 0.5),
// PSABlock(c, attn_ratio 0.5, heads max(c / 64, 1))) as "<prefix>.0", ".1".
static int declare_bottleneck_psa(Declarer *d, YoloInner *inner, const char *prefix, int channels,
                                  ErrorMessage *err) {
    char name[PARAM_MAX_NAME];
    yolo_name_format(name, "%s.0", prefix);
    if (declare_bottleneck(d, &inner->bottleneck, name, channels, 3, 0.5f, 1, err)) return -1;
    yolo_name_format(name, "%s.1", prefix);
    if (declare_psa(d, inner, name, channels, err)) return -1;
    inner->kind = YOLO_INNER_BOTTLENECK_PSA;
    return 0;
}

// A Conv2d with bias (never run) "<name>.weight" (out, in, k, k) and "<name>.bias".
static int declare_biased_conv(Declarer *d, const char *name, int in, int out, int kernel,
                               int stride, ErrorMessage *err) {
    char key[PARAM_MAX_NAME];
    Conv2d conv;
    yolo_name_format(key, "%s.weight", name);
    if (conv2d_declare(&conv, d->set, key, in, out, kernel, stride, 0, err)) return -1;
    const int bias_shape[1] = {out};
    yolo_name_format(key, "%s.bias", name);
    return parameter_declare(d->set, key, PARAM_BIAS, 1, bias_shape, NULL, err) < 0 ? -1 : 0;
}

// A torch Linear (never run) "<name>.weight" (out, in) and "<name>.bias" (out).
static int declare_linear(Declarer *d, const char *name, int in, int out, ErrorMessage *err) {
    char key[PARAM_MAX_NAME];
    const int weight_shape[2] = {out, in};
    yolo_name_format(key, "%s.weight", name);
    if (parameter_declare(d->set, key, PARAM_WEIGHT, 2, weight_shape, NULL, err) < 0) return -1;
    yolo_name_format(key, "%s.bias", name);
    return parameter_declare(d->set, key, PARAM_BIAS, 1, &out, NULL, err) < 0 ? -1 : 0;
}

// One head stack of one level under "<prefix>.<head>.<level>": two 3x3 Convs
// (box; YOLOv8's class stack too) or two DWConv + 1x1 Conv pairs (class),
// then a plain Conv2d with bias of `last` outputs.
static int declare_head_stack(Declarer *d, const char *prefix, const char *head, int level,
                              int in, int width, int last, int legacy, ErrorMessage *err) {
    char name[PARAM_MAX_NAME];
    YoloConv unused;
    for (int i = 0; i < 2; i++) {
        const int x = i ? width : in;
        if (legacy) {
            yolo_name_format(name, "%s.%s.%d.%d", prefix, head, level, i);
            if (declare_conv(d, &unused, name, x, width, 3, 1, 1, 0, err)) return -1;
            continue;
        }
        yolo_name_format(name, "%s.%s.%d.%d.0", prefix, head, level, i);
        if (declare_conv(d, &unused, name, x, x, 3, 1, 1, 1, err)) return -1;
        yolo_name_format(name, "%s.%s.%d.%d.1", prefix, head, level, i);
        if (declare_conv(d, &unused, name, x, width, 1, 1, 1, 0, err)) return -1;
    }
    yolo_name_format(name, "%s.%s.%d.2", prefix, head, level);
    return declare_biased_conv(d, name, width, last, 1, 1, err);
}

// Segment's additions to Detect (never run), in the order of its state_dict:
// the mask prototypes (Proto: cv1 3x3 from P3 to npr, a 2x2 stride-2
// ConvTranspose2d, cv2 3x3, cv3 1x1 to the 32 masks; YOLO26's Proto26: cv1
// from npr, after feat_refine (a 1x1 Conv from each coarser level to P3's
// width) and feat_fuse (3x3 to npr), with its semantic head semseg: two 3x3
// Convs and a 1x1 Conv2d to the classes), then the mask coefficient
// stacks cv4 (two 3x3 Convs to max(ch0 / 4, 32), a Conv2d to 32) and
// YOLO26's one2one_cv4 copy. ConvTranspose2d's weight is (in, out, 2, 2) in
// torch's layout, declared as a conv of in = out channels.
static int declare_segment(Declarer *d, YoloModule *layer, const char *prefix, ErrorMessage *err) {
    Yolo *model = d->model;
    const int proto26 = yolo_is_26(model->config.family), npr = layer->hidden;
    const int ch0 = model->layers[layer->from[0]].out_channels;
    char name[PARAM_MAX_NAME];
    YoloConv unused;
    yolo_name_format(name, "%s.proto.cv1", prefix);
    if (declare_conv(d, &unused, name, proto26 ? npr : ch0, npr, 3, 1, 1, 0, err)) return -1;
    yolo_name_format(name, "%s.proto.upsample", prefix);
    if (declare_biased_conv(d, name, npr, npr, 2, 2, err)) return -1;
    yolo_name_format(name, "%s.proto.cv2", prefix);
    if (declare_conv(d, &unused, name, npr, npr, 3, 1, 1, 0, err)) return -1;
    yolo_name_format(name, "%s.proto.cv3", prefix);
    if (declare_conv(d, &unused, name, npr, YOLO_MASKS, 1, 1, 1, 0, err)) return -1;
    if (proto26) {
        for (int level = 1; level < layer->from_count; level++) {
            yolo_name_format(name, "%s.proto.feat_refine.%d", prefix, level - 1);
            if (declare_conv(d, &unused, name, model->layers[layer->from[level]].out_channels,
                             ch0, 1, 1, 1, 0, err))
                return -1;
        }
        yolo_name_format(name, "%s.proto.feat_fuse", prefix);
        if (declare_conv(d, &unused, name, ch0, npr, 3, 1, 1, 0, err)) return -1;
        for (int i = 0; i < 2; i++) {
            yolo_name_format(name, "%s.proto.semseg.%d", prefix, i);
            if (declare_conv(d, &unused, name, i ? npr : ch0, npr, 3, 1, 1, 0, err)) return -1;
        }
        yolo_name_format(name, "%s.proto.semseg.2", prefix);
        if (declare_biased_conv(d, name, npr, model->config.classes, 1, 1, err)) return -1;
    }
    const int c4 = ch0 / 4 > YOLO_MASKS ? ch0 / 4 : YOLO_MASKS;
    static const char *const stacks[2] = {"cv4", "one2one_cv4"};
    for (int copy = 0; copy <= yolo_end2end(model->config.family); copy++)
        for (int level = 0; level < layer->from_count; level++)
            if (declare_head_stack(d, prefix, stacks[copy], level,
                                   model->layers[layer->from[level]].out_channels, c4, YOLO_MASKS,
                                   1, err))
                return -1;
    return 0;
}

// RealNVP (Pose26's flow_model, never run): the buffers loc (2), cov (2, 2)
// and mask (6, 2), then 6 coupling layers' scale nets s.i and translation
// nets t.i, each Linear(2, 64), SiLU, Linear(64, 64), SiLU, Linear(64, 2)
// (s: then Tanh), their Linears at Sequential indices 0, 2, 4.
static int declare_flow(Declarer *d, const char *prefix, ErrorMessage *err) {
    char name[PARAM_MAX_NAME];
    const int shapes[3][2] = {{2, 0}, {2, 2}, {6, 2}};
    const char *buffers[3] = {"loc", "cov", "mask"};
    for (int b = 0; b < 3; b++) {
        yolo_name_format(name, "%s.flow_model.%s", prefix, buffers[b]);
        if (parameter_declare(d->set, name, PARAM_BIAS, b ? 2 : 1, shapes[b], NULL, err) < 0)
            return -1;
    }
    const int sizes[4] = {2, 64, 64, 2};
    for (int net = 0; net < 2; net++)
        for (int i = 0; i < 6; i++)
            for (int l = 0; l < 3; l++) {
                const int weight_shape[2] = {sizes[l + 1], sizes[l]};
                yolo_name_format(name, "%s.flow_model.%c.%d.%d.weight", prefix, "st"[net], i,
                                 2 * l);
                if (parameter_declare(d->set, name, PARAM_WEIGHT, 2, weight_shape, NULL, err) < 0)
                    return -1;
                yolo_name_format(name, "%s.flow_model.%c.%d.%d.bias", prefix, "st"[net], i, 2 * l);
                if (parameter_declare(d->set, name, PARAM_BIAS, 1, &sizes[l + 1], NULL, err) < 0)
                    return -1;
            }
    return 0;
}

// Pose's and OBB's additions to Detect (never run), in the order of their
// state_dicts: per level a cv4 stack (two 3x3 Convs to c4, a Conv2d to the
// 51 keypoint values or the 1 angle; c4 = max(ch0 / 4, outputs)) and
// YOLO26's one2one_cv4 copy. Pose26's cv4 ends after its two Convs (c4 =
// max(ch0 / 4, 17 x 5)), one2one_cv4, the flow_model, then per level
// Conv2d heads cv4_kpts (51) and cv4_sigma (34) and their one2one copies.
static int declare_keypoints_or_angle(Declarer *d, YoloModule *layer, const char *prefix,
                                      ErrorMessage *err) {
    Yolo *model = d->model;
    const int pose = model->config.task == YOLO_TASK_POSE;
    const int pose26 = pose && yolo_is_26(model->config.family);
    const int ch0 = model->layers[layer->from[0]].out_channels;
    const int outputs = pose ? YOLO_KEYPOINTS * YOLO_KEYPOINT_DIMS : 1;
    const int wanted = pose26 ? YOLO_KEYPOINTS * (YOLO_KEYPOINT_DIMS + 2) : outputs;
    const int c4 = ch0 / 4 > wanted ? ch0 / 4 : wanted;
    const int copies = yolo_end2end(model->config.family);
    static const char *const stacks[2] = {"cv4", "one2one_cv4"};
    char name[PARAM_MAX_NAME];
    YoloConv unused;
    for (int copy = 0; copy <= copies; copy++)
        for (int level = 0; level < layer->from_count; level++) {
            const int x = model->layers[layer->from[level]].out_channels;
            if (!pose26) {
                if (declare_head_stack(d, prefix, stacks[copy], level, x, c4, outputs, 1, err))
                    return -1;
                continue;
            }
            for (int i = 0; i < 2; i++) {
                yolo_name_format(name, "%s.%s.%d.%d", prefix, stacks[copy], level, i);
                if (declare_conv(d, &unused, name, i ? c4 : x, c4, 3, 1, 1, 0, err)) return -1;
            }
        }
    if (!pose26) return 0;
    if (declare_flow(d, prefix, err)) return -1;
    static const char *const heads[4] = {"cv4_kpts", "cv4_sigma", "one2one_cv4_kpts",
                                         "one2one_cv4_sigma"};
    for (int h = 0; h < 4; h++)
        for (int level = 0; level < layer->from_count; level++) {
            yolo_name_format(name, "%s.%s.%d", prefix, heads[h], level);
            if (declare_biased_conv(d, name, c4, h % 2 ? 2 * YOLO_KEYPOINTS : outputs, 1, 1, err))
                return -1;
        }
    return 0;
}

// WorldDetect's cv4 (never run): per level a ContrastiveHead, its bias (1)
// and logit_scale (a 0-d Parameter), and for yolov8-worldv2.yaml's
// with_bn a BNContrastiveHead: those two then norm, a BatchNorm2d of the
// embeddings' width (its own parameters first, as its state_dict lists them).
static int declare_contrastive(Declarer *d, YoloModule *layer, const char *prefix,
                               ErrorMessage *err) {
    Yolo *model = d->model;
    const int one = 1, with_bn = model->config.family == YOLO_V8_WORLDV2;
    char name[PARAM_MAX_NAME];
    for (int level = 0; level < layer->from_count; level++) {
        yolo_name_format(name, "%s.cv4.%d.bias", prefix, level);
        if (parameter_declare(d->set, name, PARAM_BIAS, 1, &one, NULL, err) < 0) return -1;
        yolo_name_format(name, "%s.cv4.%d.logit_scale", prefix, level);
        if (parameter_declare(d->set, name, PARAM_BIAS, 0, NULL, NULL, err) < 0) return -1;
        if (!with_bn) continue;
        BatchNorm norm;
        yolo_name_format(name, "%s.cv4.%d.norm", prefix, level);
        if (batchnorm_declare(&norm, d->set, &model->buffers, name, YOLO_WORLD_EMBED,
                              model->config.bn_momentum, model->config.bn_eps, err))
            return -1;
    }
    return 0;
}

// The Detect head (never run): per level, cv2 (box, 4 x reg_max outputs)
// and cv3 (class) stacks, the DFL conv when reg_max > 1, and with end2end
// (YOLO26) the one-to-one copies one2one_cv2 and one2one_cv3, in the order
// of Ultralytics' state_dict. WorldDetect (YOLO-World): its class stacks
// end in the text embeddings' width, then cv4, the contrastive heads.
static int declare_detect(Declarer *d, YoloModule *layer, const char *prefix, ErrorMessage *err) {
    Yolo *model = d->model;
    const YoloFamily family = model->config.family;
    const int legacy = yolo_legacy_head(family), classes = model->config.classes;
    const int world = layer->kind == YOLO_WORLD_DETECT;
    const int reg_max = yolo_reg_max(family);
    const int ch0 = model->layers[layer->from[0]].out_channels;
    int box = ch0 / 4 > 4 * reg_max ? ch0 / 4 : 4 * reg_max;  // max(16, ch0 / 4, 4 reg_max)
    if (box < 16) box = 16;
    const int cls = model->config.class_width ? model->config.class_width
                    : ch0 > (classes < 100 ? classes : 100) ? ch0
                                                             : (classes < 100 ? classes : 100);
    static const char *const heads[2][2] = {{"cv2", "cv3"}, {"one2one_cv2", "one2one_cv3"}};
    for (int copy = 0; copy <= yolo_end2end(family); copy++) {
        for (int stack = 0; stack < 2; stack++)
            for (int level = 0; level < layer->from_count; level++) {
                const int x = model->layers[layer->from[level]].out_channels;
                if (declare_head_stack(d, prefix, heads[copy][stack], level, x,
                                       stack == 0 ? box : cls,
                                       stack == 0 ? 4 * reg_max
                                       : world    ? YOLO_WORLD_EMBED
                                                  : classes,
                                       stack == 0 || legacy, err))
                    return -1;
            }
        if (copy == 0 && reg_max > 1) {
            char name[PARAM_MAX_NAME];
            yolo_name_format(name, "%s.dfl.conv.weight", prefix);
            Conv2d dfl;
            if (conv2d_declare(&dfl, d->set, name, reg_max, 1, 1, 1, 0, err)) return -1;
        }
    }
    if (world) return declare_contrastive(d, layer, prefix, err);
    switch (model->config.task) {
    case YOLO_TASK_DETECT:
    case YOLO_TASK_CLASSIFY:  // (the -cls, -sem and -depth YAMLs have their own heads)
    case YOLO_TASK_SEMANTIC:
    case YOLO_TASK_DEPTH: return 0;
    case YOLO_TASK_SEGMENT: return declare_segment(d, layer, prefix, err);
    case YOLO_TASK_POSE:
    case YOLO_TASK_OBB: return declare_keypoints_or_angle(d, layer, prefix, err);
    }
    return 0;
}

// SemanticSegment (never run) on P3 and P4: classifier, a 3x3 Conv at P3's
// width then a Conv2d with bias to the classes; aux_head the same from P4.
static int declare_semantic(Declarer *d, YoloModule *layer, const char *prefix,
                            ErrorMessage *err) {
    Yolo *model = d->model;
    const int width = model->layers[layer->from[0]].out_channels;
    static const char *const heads[2] = {"classifier", "aux_head"};
    char name[PARAM_MAX_NAME];
    YoloConv unused;
    for (int h = 0; h < 2; h++) {
        yolo_name_format(name, "%s.%s.0", prefix, heads[h]);
        if (declare_conv(d, &unused, name, model->layers[layer->from[h]].out_channels, width, 3,
                         1, 1, 0, err))
            return -1;
        yolo_name_format(name, "%s.%s.1", prefix, heads[h]);
        if (declare_biased_conv(d, name, width, model->config.classes, 1, 1, err)) return -1;
    }
    return 0;
}

// Depth (never run), c_mid = YOLO_DEPTH_WIDTH: its calibration buffers
// cal_a and cal_b (1) first, as its state_dict lists them; proj, a 1x1 Conv
// from each level to c_mid; refine, two 3x3 Convs after each fusion but the
// coarsest level's; head: a 3x3 Conv to c_mid / 2, a 2x2 stride-2
// ConvTranspose2d, a 3x3 Conv to c_mid / 4, a Conv2d with bias to 1.
static int declare_depth(Declarer *d, YoloModule *layer, const char *prefix, ErrorMessage *err) {
    Yolo *model = d->model;
    const int c = YOLO_DEPTH_WIDTH, one = 1;
    char name[PARAM_MAX_NAME];
    YoloConv unused;
    static const char *const calibration[2] = {"cal_a", "cal_b"};
    for (int i = 0; i < 2; i++) {
        yolo_name_format(name, "%s.%s", prefix, calibration[i]);
        if (parameter_declare(d->set, name, PARAM_BIAS, 1, &one, NULL, err) < 0) return -1;
    }
    for (int level = 0; level < layer->from_count; level++) {
        yolo_name_format(name, "%s.proj.%d", prefix, level);
        if (declare_conv(d, &unused, name, model->layers[layer->from[level]].out_channels, c, 1,
                         1, 1, 0, err))
            return -1;
    }
    for (int level = 0; level + 1 < layer->from_count; level++)
        for (int i = 0; i < 2; i++) {
            yolo_name_format(name, "%s.refine.%d.%d", prefix, level, i);
            if (declare_conv(d, &unused, name, c, c, 3, 1, 1, 0, err)) return -1;
        }
    yolo_name_format(name, "%s.head.0", prefix);
    if (declare_conv(d, &unused, name, c, c / 2, 3, 1, 1, 0, err)) return -1;
    yolo_name_format(name, "%s.head.1", prefix);
    if (declare_biased_conv(d, name, c / 2, c / 2, 2, 2, err)) return -1;
    yolo_name_format(name, "%s.head.2", prefix);
    if (declare_conv(d, &unused, name, c / 2, c / 4, 3, 1, 1, 0, err)) return -1;
    yolo_name_format(name, "%s.head.3", prefix);
    return declare_biased_conv(d, name, c / 4, 1, 1, 1, err);
}

// Classify (never run): conv, a Conv to 1280 (k 1); linear, a Linear
// (classes, 1280) with bias. Its pool and dropout have no tensors.
static int declare_classify(Declarer *d, const char *prefix, int in_channels,
                            ErrorMessage *err) {
    char name[PARAM_MAX_NAME];
    YoloConv unused;
    yolo_name_format(name, "%s.conv", prefix);
    if (declare_conv(d, &unused, name, in_channels, YOLO_CLASSIFY_HIDDEN, 1, 1, 1, 0, err))
        return -1;
    yolo_name_format(name, "%s.linear", prefix);
    return declare_linear(d, name, YOLO_CLASSIFY_HIDDEN, d->model->config.classes, err);
}

// C2fAttn's MaxSigmoidAttnBlock(c, c, nh, ec = c, gc = 512) (never run):
// bias (nh; its own parameter, listed first), gl (Linear from the text
// embeddings to ec), proj_conv (a 3x3 Conv without activation). parse_model
// sets ec to the block's width, so there is no ec Conv (c1 == ec).
static int declare_max_sigmoid_attn(Declarer *d, const YoloModule *layer, const char *prefix,
                                    ErrorMessage *err) {
    const int c = layer->hidden;
    char name[PARAM_MAX_NAME];
    YoloConv unused;
    yolo_name_format(name, "%s.attn.bias", prefix);
    if (parameter_declare(d->set, name, PARAM_BIAS, 1, &layer->heads, NULL, err) < 0) return -1;
    yolo_name_format(name, "%s.attn.gl", prefix);
    if (declare_linear(d, name, YOLO_WORLD_EMBED, c, err)) return -1;
    yolo_name_format(name, "%s.attn.proj_conv", prefix);
    return declare_conv(d, &unused, name, c, c, 3, 1, 0, 0, err);
}

// ImagePoolingAttn(ec, ch, ct = 512, nh 8, k 3) (never run; ec its row's,
// in the layer's kernel): query, key and value each Sequential(LayerNorm,
// Linear) (from ct, ec, ec to ec), proj (Linear ec to ct), projections (a
// Conv2d with bias from each level to ec); its max pools have no tensors.
static int declare_image_pooling_attn(Declarer *d, const YoloModule *layer, const char *prefix,
                                      ErrorMessage *err) {
    const int ec = layer->kernel, ct = YOLO_WORLD_EMBED;
    static const char *const parts[3] = {"query", "key", "value"};
    char name[PARAM_MAX_NAME];
    for (int p = 0; p < 3; p++) {
        const int in = p ? ec : ct;
        yolo_name_format(name, "%s.%s.0.weight", prefix, parts[p]);
        if (parameter_declare(d->set, name, PARAM_NORM, 1, &in, NULL, err) < 0) return -1;
        yolo_name_format(name, "%s.%s.0.bias", prefix, parts[p]);
        if (parameter_declare(d->set, name, PARAM_NORM, 1, &in, NULL, err) < 0) return -1;
        yolo_name_format(name, "%s.%s.1", prefix, parts[p]);
        if (declare_linear(d, name, in, ec, err)) return -1;
    }
    yolo_name_format(name, "%s.proj", prefix);
    if (declare_linear(d, name, ec, ct, err)) return -1;
    for (int level = 0; level < layer->from_count; level++) {
        yolo_name_format(name, "%s.projections.%d", prefix, level);
        if (declare_biased_conv(d, name, d->model->layers[layer->from[level]].out_channels, ec,
                                1, 1, err))
            return -1;
    }
    return 0;
}

// A2C2f(c1, c2, n, a2, area, residual, mlp_ratio): gamma (c2; the l and x
// sizes' attention layers: the state_dict lists a module's own parameters
// first), cv1 (to c), cv2 (from (1 + n) c), m: n Sequential(ABlock,
// ABlock) ("m.<i>.0", ".1") or n C3k ("m.<i>").
static int declare_a2c2f(Declarer *d, YoloModule *layer, const char *prefix, ErrorMessage *err) {
    const int c = layer->hidden, n = layer->repeats;
    char name[PARAM_MAX_NAME];
    if (layer->shortcut) {  // parse_model's residual=True for the l and x sizes
        yolo_name_format(name, "%s.gamma", prefix);
        layer->gamma_index = parameter_declare(d->set, name, PARAM_EMBEDDING, 1,
                                               &layer->out_channels, NULL, err);
        if (layer->gamma_index < 0) return -1;
    }
    yolo_name_format(name, "%s.cv1", prefix);
    if (declare_conv(d, &layer->cv1, name, layer->in_channels, c, 1, 1, 1, 0, err)) return -1;
    yolo_name_format(name, "%s.cv2", prefix);
    if (declare_conv(d, &layer->cv2, name, (1 + n) * c, layer->out_channels, 1, 1, 1, 0, err))
        return -1;
    layer->inner_count = n * layer->inner_group;
    layer->inner = calloc((size_t)layer->inner_count, sizeof *layer->inner);
    if (!layer->inner) return error_set(err, "out of memory");
    for (int i = 0; i < layer->inner_count; i++) {
        YoloInner *inner = &layer->inner[i];
        inner->channels = c;
        int status;
        if (layer->area) {
            yolo_name_format(name, "%s.m.%d.%d", prefix, i / 2, i % 2);
            status = declare_area_block(d, inner, name, c, layer->area, layer->mlp_ratio, err);
        } else {
            yolo_name_format(name, "%s.m.%d", prefix, i);
            status = declare_c3k(d, inner, name, c, err);
        }
        if (status || register_inner(d, inner, err)) return -1;
    }
    return 0;
}

// A Conv row: one Conv, or for n > 1 a Sequential of n ("<prefix>.<i>"):
// cv1 the first, chain the others.
static int declare_conv_row(Declarer *d, YoloModule *layer, const char *prefix,
                            ErrorMessage *err) {
    const int n = layer->repeats, c1 = layer->in_channels, c2 = layer->out_channels;
    if (n <= 1)
        return declare_padded_conv(d, &layer->cv1, prefix, c1, c2, layer->kernel, layer->stride,
                                   layer->padding, 1, 0, err);
    char name[PARAM_MAX_NAME];
    layer->chain = calloc((size_t)n - 1, sizeof *layer->chain);
    if (!layer->chain) return error_set(err, "out of memory");
    for (int i = 0; i < n; i++) {
        yolo_name_format(name, "%s.%d", prefix, i);
        if (declare_padded_conv(d, i ? &layer->chain[i - 1] : &layer->cv1, name, c1, c2,
                                layer->kernel, layer->stride, layer->padding, 1, 0, err))
            return -1;
    }
    return 0;
}

// nn.ConvTranspose2d(c1, c2, 2, 2, 0) (never runs): weight (c1, c2, 2, 2) in
// torch's layout, declared as a conv from c2 to c1 (its dim 1 is PyTorch's
// fan_in for both), bias (c2).
static int declare_conv_transpose(Declarer *d, const YoloModule *layer, const char *prefix,
                                  ErrorMessage *err) {
    char key[PARAM_MAX_NAME];
    Conv2d conv;
    yolo_name_format(key, "%s.weight", prefix);
    if (conv2d_declare(&conv, d->set, key, layer->out_channels, layer->in_channels,
                       layer->kernel, layer->stride, 0, err))
        return -1;
    yolo_name_format(key, "%s.bias", prefix);
    return parameter_declare(d->set, key, PARAM_BIAS, 1, &layer->out_channels, NULL, err) < 0
               ? -1
               : 0;
}

static int declare_layer(Yolo *model, int index, ErrorMessage *err) {
    YoloModule *layer = &model->layers[index];
    Declarer d = {model, layer->trained ? &model->params : &model->buffers, layer->trained};
    char prefix[PARAM_MAX_NAME], name[PARAM_MAX_NAME];
    yolo_name_format(prefix, "model.%d", index);
    const int c1 = layer->in_channels, c2 = layer->out_channels, c = layer->hidden;
    switch (layer->kind) {
    case YOLO_CONV: return declare_conv_row(&d, layer, prefix, err);
    case YOLO_CONV_TRANSPOSE: return declare_conv_transpose(&d, layer, prefix, err);
    case YOLO_C3: {  // C3(c1, c2, n, shortcut, e=0.5): Bottlenecks of a 1x1 and a 3x3 Conv
        YoloConv *const units[3] = {&layer->cv1, &layer->cv2, &layer->cv3};
        return declare_c3_parts(&d, units, &layer->m, prefix, c1, c2, c, layer->repeats, 1,
                                layer->shortcut, err);
    }
    case YOLO_SPPF:
        yolo_name_format(name, "%s.cv1", prefix);
        if (declare_conv(&d, &layer->cv1, name, c1, c, 1, 1, !layer->plain_cv1, 0, err))
            return -1;
        yolo_name_format(name, "%s.cv2", prefix);
        return declare_conv(&d, &layer->cv2, name, 4 * c, c2, 1, 1, 1, 0, err);
    case YOLO_C2F:
    case YOLO_C3K2:
    case YOLO_C2PSA:
    case YOLO_C2F_ATTN:
    case YOLO_C2: {  // C2: cv2 reads cv1's two halves (the first through m), not every output
        const int halves = layer->kind == YOLO_C2PSA || layer->kind == YOLO_C2, n = layer->repeats;
        const int attn = layer->kind == YOLO_C2F_ATTN;  // C2fAttn: cv2 reads the attn's output too
        yolo_name_format(name, "%s.cv1", prefix);
        if (declare_conv(&d, &layer->cv1, name, c1, 2 * c, 1, 1, 1, 0, err)) return -1;
        yolo_name_format(name, "%s.cv2", prefix);
        if (declare_conv(&d, &layer->cv2, name, halves ? 2 * c : (2 + n + attn) * c, c2, 1, 1, 1,
                         0, err))
            return -1;
        layer->inner = calloc((size_t)n, sizeof *layer->inner);
        if (!layer->inner) return error_set(err, "out of memory");
        layer->inner_count = n;
        for (int i = 0; i < n; i++) {
            YoloInner *inner = &layer->inner[i];
            inner->channels = c;
            yolo_name_format(name, "%s.m.%d", prefix, i);
            int status;
            if (layer->kind == YOLO_C2PSA) status = declare_psa(&d, inner, name, c, err);
            else if (layer->attn) status = declare_bottleneck_psa(&d, inner, name, c, err);
            else if (layer->kind == YOLO_C3K2 && layer->c3k) status = declare_c3k(&d, inner, name, c, err);
            else {
                inner->kind = YOLO_INNER_BOTTLENECK;  // C2f, C2, C2fAttn: e=1 3x3; C3k2: e=0.5
                status = declare_bottleneck(&d, &inner->bottleneck, name, c, 3,
                                            layer->kind == YOLO_C3K2 ? 0.5f : 1.0f,
                                            layer->shortcut, err);
            }
            if (status || register_inner(&d, inner, err)) return -1;
        }
        return attn ? declare_max_sigmoid_attn(&d, layer, prefix, err) : 0;
    }
    case YOLO_A2C2F: return declare_a2c2f(&d, layer, prefix, err);
    case YOLO_IMAGE_POOLING_ATTN: return declare_image_pooling_attn(&d, layer, prefix, err);
    case YOLO_DETECT:
    case YOLO_WORLD_DETECT: return declare_detect(&d, layer, prefix, err);
    case YOLO_CLASSIFY: return declare_classify(&d, prefix, c1, err);
    case YOLO_SEMANTIC: return declare_semantic(&d, layer, prefix, err);
    case YOLO_DEPTH: return declare_depth(&d, layer, prefix, err);
    case YOLO_UPSAMPLE:
    case YOLO_CONCAT: return 0;
    }
    return 0;
}

int yolo_declare(Yolo *model, Backend *backend, const YoloConfig *config, ErrorMessage *err) {
    memset(model, 0, sizeof *model);
    model->backend = backend;
    model->config = *config;
    parameter_set_init(&model->params, backend, 1);
    parameter_set_init(&model->buffers, backend, 0);
    if (yolo_build_layers(model, err)) return error_prefix(err, "%s", config->name);
    for (int i = 0; i < model->layer_count; i++)
        if (declare_layer(model, i, err)) return error_prefix(err, "%s layer %d", config->name, i);
    return 0;
}
