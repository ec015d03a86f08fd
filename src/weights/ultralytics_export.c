// A YOLO as Ultralytics' checkpoint (see ultralytics_export.h): the module
// tree emitted module by module from the model's layer table and tensors;
// the model, its YAML dict and the checkpoint here, the modules' writers in
// ultralytics_export_modules.c and ultralytics_export_heads.c.
#include "weights/ultralytics_export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nn/weights.h"
#include "weights/pt_writer.h"
#include "weights/ultralytics_export_internal.h"

// ---- the DetectionModel and the checkpoint ----------------------------------------------------

static const char *module_name(YoloModuleKind kind) {
    static const char *const names[] = {"Conv", "C2f", "C3k2", "SPPF", "C2PSA", "nn.Upsample",
                                        "Concat", "Detect", "Classify", "C3", "A2C2f", "C2",
                                        "nn.ConvTranspose2d", "SemanticSegment", "Depth",
                                        "C2fAttn", "ImagePoolingAttn", "WorldDetect"};
    return names[kind];
}

// parse_model's m.type of a layer (the head's: its class, head_class).
static void type_name(const YoloConfig *config, YoloModuleKind kind, char *out, size_t size) {
    static const char *const names[] = {
        CONV_MODULE ".Conv", BLOCK_MODULE ".C2f", BLOCK_MODULE ".C3k2", BLOCK_MODULE ".SPPF",
        BLOCK_MODULE ".C2PSA", "torch.nn.modules.upsampling.Upsample", CONV_MODULE ".Concat",
        "", "ultralytics.nn.modules.head.Classify", BLOCK_MODULE ".C3", BLOCK_MODULE ".A2C2f",
        BLOCK_MODULE ".C2", "torch.nn.modules.conv.ConvTranspose2d",
        "ultralytics.nn.modules.head.SemanticSegment", "ultralytics.nn.modules.head.Depth",
        BLOCK_MODULE ".C2fAttn", BLOCK_MODULE ".ImagePoolingAttn",
        "ultralytics.nn.modules.head.WorldDetect"};
    if (kind == YOLO_DETECT)
        ux_text_format(out, size, "ultralytics.nn.modules.head.%s", ux_head_class(config));
    else ux_text_format(out, size, "%s", names[kind]);
}

// One YAML line's args list.
static void yaml_args(Exporter *e, const YoloYamlLine *line) {
    pt_list_begin(&e->w);
    switch (line->kind) {
    case YOLO_CONV:
        pt_put_int(&e->w, line->channels), pt_put_int(&e->w, line->kernel);
        pt_put_int(&e->w, line->stride);
        if (line->padding) pt_put_int(&e->w, line->padding);
        break;
    case YOLO_C3:
    case YOLO_C2:
        pt_put_int(&e->w, line->channels);
        if (!line->flag) pt_put_bool(&e->w, 0);  // the neck's [c2, False]
        break;
    case YOLO_A2C2F:  // [c2, a2, area]
        pt_put_int(&e->w, line->channels), pt_put_bool(&e->w, line->flag);
        pt_put_int(&e->w, line->attn);
        break;
    case YOLO_C2F:
        pt_put_int(&e->w, line->channels);
        if (line->flag) pt_put_bool(&e->w, 1);
        break;
    case YOLO_C3K2:
        pt_put_int(&e->w, line->channels), pt_put_bool(&e->w, line->flag);
        if (line->expansion > 0) pt_put_float(&e->w, line->expansion);
        if (line->attn) pt_put_bool(&e->w, 1);
        break;
    case YOLO_SPPF:
        pt_put_int(&e->w, line->channels), pt_put_int(&e->w, line->kernel);
        if (line->flag)  // YOLO26's: n, shortcut
            pt_put_int(&e->w, 3), pt_put_bool(&e->w, line->flag == 1);
        break;
    case YOLO_C2PSA: pt_put_int(&e->w, line->channels); break;
    case YOLO_CONV_TRANSPOSE:  // [c2, k, s, p]
        pt_put_int(&e->w, line->channels), pt_put_int(&e->w, line->kernel);
        pt_put_int(&e->w, line->stride), pt_put_int(&e->w, 0);
        break;
    case YOLO_UPSAMPLE:
        pt_put_str(&e->w, "None"), pt_put_int(&e->w, 2), pt_put_str(&e->w, "nearest");
        break;
    case YOLO_CONCAT: pt_put_int(&e->w, 1); break;
    case YOLO_CLASSIFY:
    case YOLO_SEMANTIC: pt_put_str(&e->w, "nc"); break;
    case YOLO_DEPTH: pt_put_int(&e->w, YOLO_DEPTH_WIDTH); break;
    case YOLO_C2F_ATTN:  // [c2, ec, nh]
        pt_put_int(&e->w, line->channels), pt_put_int(&e->w, line->kernel);
        pt_put_int(&e->w, line->attn);
        break;
    case YOLO_IMAGE_POOLING_ATTN: pt_put_int(&e->w, line->kernel); break;  // [ec]
    case YOLO_WORLD_DETECT:  // [nc, embed, with_bn]
        pt_put_str(&e->w, "nc"), pt_put_int(&e->w, line->kernel);
        pt_put_bool(&e->w, line->flag);
        break;
    case YOLO_DETECT:
        pt_put_str(&e->w, "nc");
        if (e->model->config.task == YOLO_TASK_SEGMENT)  // nm, npr before scaling
            pt_put_int(&e->w, YOLO_MASKS), pt_put_int(&e->w, 256);
        if (e->model->config.task == YOLO_TASK_POSE) pt_put_str(&e->w, "kpt_shape");
        if (e->model->config.task == YOLO_TASK_OBB) pt_put_int(&e->w, 1);  // ne
        break;
    }
    pt_list_end(&e->w);
}

static void yaml_lines(Exporter *e, const YoloYamlLine *lines, int first, int end) {
    pt_list_begin(&e->w);
    for (int i = first; i < end; i++) {
        const YoloYamlLine *line = &lines[i];
        pt_list_begin(&e->w);
        if (line->from_count == 1) pt_put_int(&e->w, line->from[0]);
        else {
            pt_list_begin(&e->w);
            for (int f = 0; f < line->from_count; f++) pt_put_int(&e->w, line->from[f]);
            pt_list_end(&e->w);
        }
        pt_put_int(&e->w, line->repeats);
        pt_put_str(&e->w, line->kind == YOLO_DETECT ? ux_head_class(&e->model->config)
                                                    : module_name(line->kind));
        yaml_args(e, line);
        pt_list_end(&e->w);
    }
    pt_list_end(&e->w);
}

// The YAML Ultralytics builds the model from: the model's name, but
// yolov5n-p6.yaml for yolov5n6u (Ultralytics 8.4 resolves no yolov5n6u.yaml).
static void yaml_file_name(const YoloConfig *config, char *out, size_t size) {
    if (config->family == YOLO_V5_P6) ux_text_format(out, size, "yolov5%c-p6.yaml", config->scale);
    else ux_text_format(out, size, "%s.yaml", config->name);
}

// DetectionModel.yaml: the family's YAML as Ultralytics' yaml_model_load reads it.
static void yaml_dict(Exporter *e, const YoloYamlLine *lines, int count) {
    const YoloConfig *config = &e->model->config;
    const YoloScale *scales = yolo_yaml_scales(config->family, config->task);
    char text[32];
    pt_dict_begin(&e->w);
    ux_key_int(e, "nc", config->classes);
    if (yolo_default_act(config->family) == YOLO_ACT_RELU) {  // YOLOv6's, as its YAML writes it
        ux_key(e, "activation");
        pt_put_str(&e->w, "torch.nn.ReLU()");
    }
    if (yolo_end2end(config->family) && config->task != YOLO_TASK_CLASSIFY &&
        config->task != YOLO_TASK_SEMANTIC && config->task != YOLO_TASK_DEPTH) {  // yolo26.yaml's
        ux_key(e, "end2end");
        pt_put_bool(&e->w, 1);
        ux_key_int(e, "reg_max", yolo_reg_max(config->family));
    }
    if (config->task == YOLO_TASK_POSE) {
        ux_key(e, "kpt_shape");
        ux_put_kpt_shape(e);
    }
    ux_key(e, "scales");
    pt_dict_begin(&e->w);
    for (int s = 0; s < 5; s++) {
        ux_text_format(text, sizeof text, "%c", scales[s].scale);
        ux_key(e, text);
        pt_list_begin(&e->w);
        pt_put_float(&e->w, scales[s].depth), pt_put_float(&e->w, scales[s].width);
        pt_put_int(&e->w, scales[s].max_channels);
        pt_list_end(&e->w);
    }
    pt_dict_end(&e->w);
    // the YAML's backbone section ends with SPPF (v5, v8), C2PSA (11, 26) or A2C2f (12)
    const int backbone = config->task == YOLO_TASK_CLASSIFY
                             ? count - 1  // all but Classify
                             : yolo_yaml_backbone_rows(config->family);
    ux_key(e, "backbone");
    yaml_lines(e, lines, 0, backbone);
    ux_key(e, "head");
    yaml_lines(e, lines, backbone, count);
    ux_key(e, "scale");
    ux_text_format(text, sizeof text, "%c", config->scale);
    pt_put_str(&e->w, text);
    ux_key(e, "yaml_file");
    yaml_file_name(config, text, sizeof text);
    pt_put_str(&e->w, text);
    ux_key_int(e, "channels", 3);
    pt_dict_end(&e->w);
}

// parse_model's m.np: the elements of the layer's parameters.
static int64_t layer_parameters(const Yolo *model, int layer) {
    char prefix[32];
    ux_text_format(prefix, sizeof prefix, "model.%d.", layer);
    const ParameterSet *sets[2] = {&model->params, &model->buffers};
    int64_t total = 0;
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < sets[s]->count; i++) {
            const char *name = sets[s]->params[i].name;
            if (strncmp(name, prefix, strlen(prefix)) || strstr(name, ".running_") ||
                strstr(name, ".cal_"))  // buffers (Depth's calibration)
                continue;
            total += (int64_t)sets[s]->params[i].count;
        }
    return total;
}

static void detection_model(Exporter *e) {
    const Yolo *model = e->model;
    int count;
    const YoloYamlLine *lines = yolo_yaml_lines(model->config.family, model->config.task, &count);
    static const char *const tasks[7] = {"detect", "segment", "pose", "obb",
                                         "classify", "semantic", "depth"};
    static const char *const models[7] = {"DetectionModel", "SegmentationModel", "PoseModel",
                                          "OBBModel", "ClassificationModel",
                                          "SemanticSegmentationModel", "DepthModel"};
    const int classify = model->config.task == YOLO_TASK_CLASSIFY;
    const int world = yolo_is_world(model->config.family);  // a WorldModel, task detect
    const char *task = tasks[model->config.task];
    ux_module_begin(e, "ultralytics.nn.tasks", world ? "WorldModel" : models[model->config.task]);
    // WorldModel's class names' text embeddings: random normal, as YOLO("<name>.yaml")
    // starts them (fine-tuning sets them from the dataset's names through CLIP); no
    // CLIP model. A released -world.pt's COCO embeddings are not carried over.
    if (world) {
        ux_key(e, "txt_feats");
        ux_put_text_features(e);
        ux_key(e, "clip_model");
        pt_put_none(&e->w);
    }
    ux_key(e, "yaml");
    yaml_dict(e, lines, count);
    // parse_model's save list: every layer a row reads by number, once per
    // reading (a layer read by several rows is listed as often), sorted
    ux_key(e, "save");
    pt_list_begin(&e->w);
    for (int i = 0; i < count; i++)
        for (int j = 0; j < count; j++)
            for (int f = 0; f < lines[j].from_count; f++)
                if (lines[j].from[f] == i) pt_put_int(&e->w, i);
    pt_list_end(&e->w);
    ux_key(e, "names");
    pt_dict_begin(&e->w);
    for (int c = 0; c < model->config.classes; c++) {
        char text[16];
        ux_text_format(text, sizeof text, "%d", c);
        pt_put_int(&e->w, c);
        pt_put_str(&e->w, text);
    }
    pt_dict_end(&e->w);
    if (!classify) {  // ClassificationModel has no inplace, and a stride of 1
        ux_key(e, "inplace");
        pt_put_bool(&e->w, 1);
    }
    ux_key(e, "stride");
    if (classify) {
        const float one = 1.0f;
        const int64_t shape[1] = {1};
        pt_put_tensor(&e->w, SAFE_F32, &one, 1, shape, 0, 0);
    } else if (model->config.task == YOLO_TASK_SEMANTIC || model->config.task == YOLO_TASK_DEPTH) {
        ux_put_model_stride(e);
    } else {
        ux_put_stride(e);
    }
    if (model->config.task == YOLO_TASK_POSE) {  // PoseModel keeps its YAML's kpt_shape
        ux_key(e, "kpt_shape");
        ux_put_kpt_shape(e);
    }
    ux_key(e, "task");
    pt_put_str(&e->w, task);
    ux_key(e, "args");  // Ultralytics' loader merges its defaults under these
    pt_dict_begin(&e->w);
    ux_key(e, "task");
    pt_put_str(&e->w, task);
    ux_key(e, "model");
    char yaml[32];
    yaml_file_name(&model->config, yaml, sizeof yaml);
    pt_put_str(&e->w, yaml);
    pt_dict_end(&e->w);
    ux_children_begin(e);
    ux_key(e, "model");
    ux_container_begin(e, "Sequential");
    for (int i = 0; i < model->layer_count; i++) {
        const YoloModule *layer = &model->layers[i];
        char type[96];
        type_name(&model->config, layer->kind, type, sizeof type);
        const LayerInfo info = {i, &lines[i], type, layer_parameters(model, i)};
        char index[16], prefix[32];
        ux_text_format(index, sizeof index, "%d", i);
        ux_text_format(prefix, sizeof prefix, "model.%d", i);
        ux_key(e, index);
        switch (layer->kind) {
        case YOLO_CONV:
            if (layer->repeats > 1) ux_conv_row(e, prefix, layer, &info);
            else ux_conv_unit(e, prefix, "Conv", layer->stride, layer->padding, 1, &info);
            break;
        case YOLO_CONV_TRANSPOSE: ux_conv_transpose_layer(e, prefix, layer->stride, &info); break;
        case YOLO_C3: ux_c3_block(e, prefix, "C3", layer->repeats, layer->shortcut, &info); break;
        case YOLO_A2C2F: ux_a2c2f(e, prefix, layer, &info); break;
        case YOLO_C2F:
        case YOLO_C3K2:
        case YOLO_C2PSA:
        case YOLO_C2F_ATTN:
        case YOLO_C2: ux_csp(e, prefix, layer, &info); break;
        case YOLO_IMAGE_POOLING_ATTN: ux_image_pooling_attn(e, prefix, layer, &info); break;
        case YOLO_SPPF: ux_sppf(e, prefix, layer, &info); break;
        case YOLO_UPSAMPLE:
            ux_leaf(e, "torch.nn.modules.upsampling", "Upsample");
            ux_key(e, "name");
            pt_put_str(&e->w, "Upsample");
            ux_key(e, "size");
            pt_put_none(&e->w);
            ux_key(e, "scale_factor");
            pt_put_float(&e->w, 2.0);
            ux_key(e, "mode");
            pt_put_str(&e->w, "nearest");
            ux_key(e, "align_corners");
            pt_put_none(&e->w);
            ux_key(e, "recompute_scale_factor");
            pt_put_none(&e->w);
            ux_layer_attributes(e, &info);
            pt_object_end(&e->w);
            break;
        case YOLO_CONCAT:
            ux_leaf(e, CONV_MODULE, "Concat");
            ux_key_int(e, "d", 1);
            ux_layer_attributes(e, &info);
            pt_object_end(&e->w);
            break;
        case YOLO_DETECT:
        case YOLO_WORLD_DETECT: ux_detect(e, prefix, layer, &info); break;
        case YOLO_CLASSIFY: ux_classify_head(e, prefix, &info); break;
        case YOLO_SEMANTIC: ux_semantic_head(e, prefix, layer, &info); break;
        case YOLO_DEPTH: ux_depth_head(e, prefix, layer, &info); break;
        }
    }
    ux_container_end(e);
    ux_container_end(e);
}

int export_ultralytics(const Yolo *model, const char *path, ErrorMessage *err) {
    Exporter e = {.model = model, .default_act = -1};
    size_t largest = 1;
    const ParameterSet *sets[2] = {&model->params, &model->buffers};
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < sets[s]->count; i++)
            if (sets[s]->params[i].count > largest) largest = sets[s]->params[i].count;
    const size_t text_features = (size_t)model->config.classes * YOLO_WORLD_EMBED;  // txt_feats
    if (yolo_is_world(model->config.family) && text_features > largest) largest = text_features;
    e.host = malloc(largest * sizeof *e.host);
    e.torch = malloc(largest * sizeof *e.torch);
    if (!e.host || !e.torch) {
        free(e.host);
        free(e.torch);
        return error_set(err, "out of memory exporting %s", model->config.name);
    }
    pt_writer_init(&e.w);
    char date[32];
    const time_t now = time(NULL);
    struct tm utc;
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", gmtime_r(&now, &utc));
    pt_dict_begin(&e.w);
    ux_key(&e, "date");
    pt_put_str(&e.w, date);
    ux_key(&e, "version");
    pt_put_str(&e.w, ULTRALYTICS_CHECKED_VERSION);
    ux_key(&e, "license");
    pt_put_str(&e.w, "AGPL-3.0 License (https://ultralytics.com/license)");
    ux_key(&e, "docs");
    pt_put_str(&e.w, "https://docs.ultralytics.com");
    ux_key(&e, "ema");
    pt_put_none(&e.w);
    ux_key(&e, "modelopt");
    pt_put_none(&e.w);
    ux_key(&e, "model");
    detection_model(&e);
    pt_dict_end(&e.w);
    int status = 0;
    if (e.missing)
        status = error_set(err, "%s: %d tensors missing from the model, the first %s", path,
                           e.missing, e.first_missing);
    else
        status = pt_writer_save(&e.w, path, "exported_last", err);
    pt_writer_free(&e.w);
    free(e.host);
    free(e.torch);
    return status;
}
