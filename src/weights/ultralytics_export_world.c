// The Ultralytics checkpoint writer's YOLO-World modules (see
// ultralytics_export_internal.h): WorldModel's txt_feats, C2fAttn's
// MaxSigmoidAttnBlock, ImagePoolingAttn and WorldDetect's contrastive heads,
// as YOLO.save pickles them (yolo_declare.c declares their tensors).
#include "util/rng.h"
#include "weights/ultralytics_export_internal.h"

// WorldModel.txt_feats: the class names' text embeddings (1, nc, 512), a
// plain tensor outside the state dict. A model built from its YAML holds
// torch.randn values until set_classes (which runs CLIP) replaces them;
// ours are standard normal too, from a fixed stream, so that an export
// does not depend on anything but the model. export_ultralytics sizes the
// scratch for them.
void ux_put_text_features(Exporter *e) {
    const int classes = e->model->config.classes;
    const size_t count = (size_t)classes * YOLO_WORLD_EMBED;
    Rng rng = rng_make(0, 0, 0, 0);
    for (size_t i = 0; i < count; i++) e->torch[i] = rng_normal(&rng);
    const int64_t shape[3] = {1, classes, YOLO_WORLD_EMBED};
    pt_put_tensor(&e->w, SAFE_F32, e->torch, 3, shape, 0, 0);
}

// MaxSigmoidAttnBlock (yolo_declare.c, declare_max_sigmoid_attn): nh, hc,
// no ec Conv (None), scale 1.0 (no learnable scale); its bias, then gl and
// proj_conv (a Conv without activation).
void ux_max_sigmoid_attn(Exporter *e, const char *prefix, const YoloModule *layer) {
    char name[NAME_SIZE];
    ux_text_format(name, sizeof name, "%s.attn", prefix);
    ux_module_begin(e, BLOCK_MODULE, "MaxSigmoidAttnBlock");
    ux_key_int(e, "nh", layer->heads);
    ux_key_int(e, "hc", layer->hidden / layer->heads);
    ux_key(e, "ec");
    pt_put_none(&e->w);
    ux_key(e, "scale");
    pt_put_float(&e->w, 1.0);
    ux_section_begin(e, "_parameters");
    ux_entry(e, "bias", name, 1, 1);
    ux_section_end(e);
    ux_empty_ordered_dict(e, "_buffers");
    ux_section_begin(e, "_modules");
    ux_key(e, "gl");
    char child[NAME_SIZE];
    ux_text_format(child, sizeof child, "%s.gl", name);
    ux_linear(e, child);
    ux_child_conv(e, name, "proj_conv", "Conv", 0);
    ux_section_end(e);
    pt_object_end(&e->w);
}

// torch.nn.LayerNorm over the last `width` values (eps 1e-5, affine).
static void layer_norm(Exporter *e, const char *prefix, int width) {
    const int64_t shape[1] = {width};
    ux_module_begin(e, "torch.nn.modules.normalization", "LayerNorm");
    ux_key(e, "normalized_shape");
    pt_put_int_tuple(&e->w, shape, 1);
    ux_key(e, "eps");
    pt_put_float(&e->w, 1e-5);
    ux_key(e, "elementwise_affine");
    pt_put_bool(&e->w, 1);
    ux_parameter_pair(e, prefix, "weight", "bias");
    ux_empty_ordered_dict(e, "_modules");
    pt_object_end(&e->w);
}

// ImagePoolingAttn (yolo_declare.c, declare_image_pooling_attn): its
// attributes (scale 1.0: no learnable scale), query / key / value as
// Sequential(LayerNorm, Linear), proj, projections (1x1 Conv2d with bias
// per level) and im_pools (a k x k adaptive max pool per level).
void ux_image_pooling_attn(Exporter *e, const char *prefix, const YoloModule *layer,
                           const LayerInfo *info) {
    const int ec = layer->kernel, levels = layer->from_count;
    char name[NAME_SIZE], index[16];
    ux_module_begin(e, BLOCK_MODULE, "ImagePoolingAttn");
    ux_key(e, "scale");
    pt_put_float(&e->w, 1.0);
    ux_key_int(e, "ec", ec);
    ux_key_int(e, "nh", YOLO_WORLD_POOL_HEADS);
    ux_key_int(e, "nf", levels);
    ux_key_int(e, "hc", ec / YOLO_WORLD_POOL_HEADS);
    ux_key_int(e, "k", YOLO_WORLD_POOL_GRID);
    ux_layer_attributes(e, info);
    ux_children_begin(e);
    static const char *const parts[3] = {"query", "key", "value"};
    for (int p = 0; p < 3; p++) {
        ux_key(e, parts[p]);
        ux_container_begin(e, "Sequential");
        ux_key(e, "0");
        ux_text_format(name, sizeof name, "%s.%s.0", prefix, parts[p]);
        layer_norm(e, name, p ? ec : YOLO_WORLD_EMBED);
        ux_key(e, "1");
        ux_text_format(name, sizeof name, "%s.%s.1", prefix, parts[p]);
        ux_linear(e, name);
        ux_container_end(e);
    }
    ux_key(e, "proj");
    ux_text_format(name, sizeof name, "%s.proj", prefix);
    ux_linear(e, name);
    ux_key(e, "projections");
    ux_container_begin(e, "ModuleList");
    for (int level = 0; level < levels; level++) {
        ux_text_format(index, sizeof index, "%d", level);
        ux_key(e, index);
        ux_text_format(name, sizeof name, "%s.projections.%d", prefix, level);
        ux_conv2d(e, name, 1, 1, 1);
    }
    ux_container_end(e);
    ux_key(e, "im_pools");
    ux_container_begin(e, "ModuleList");
    const int64_t grid[2] = {YOLO_WORLD_POOL_GRID, YOLO_WORLD_POOL_GRID};
    for (int level = 0; level < levels; level++) {
        ux_text_format(index, sizeof index, "%d", level);
        ux_key(e, index);
        ux_leaf(e, "torch.nn.modules.pooling", "AdaptiveMaxPool2d");
        ux_key(e, "output_size");
        pt_put_int_tuple(&e->w, grid, 2);
        ux_key(e, "return_indices");
        pt_put_bool(&e->w, 0);
        pt_object_end(&e->w);
    }
    ux_container_end(e);
    ux_container_end(e);
}

// WorldDetect's cv4 (yolo_declare.c, declare_contrastive): a ContrastiveHead
// per level (bias, logit_scale), or yolov8-worldv2's BNContrastiveHead (the
// same, then norm).
void ux_contrastive_heads(Exporter *e, const char *prefix, const YoloModule *layer) {
    const int with_bn = e->model->config.family == YOLO_V8_WORLDV2;
    char name[NAME_SIZE], index[16];
    ux_key(e, "cv4");
    ux_container_begin(e, "ModuleList");
    for (int level = 0; level < layer->from_count; level++) {
        ux_text_format(index, sizeof index, "%d", level);
        ux_text_format(name, sizeof name, "%s.cv4.%d", prefix, level);
        ux_key(e, index);
        ux_module_begin(e, BLOCK_MODULE, with_bn ? "BNContrastiveHead" : "ContrastiveHead");
        ux_parameter_pair(e, name, "bias", "logit_scale");
        ux_section_begin(e, "_modules");
        if (with_bn) {
            char norm[NAME_SIZE];
            ux_text_format(norm, sizeof norm, "%s.norm", name);
            ux_key(e, "norm");
            ux_batchnorm(e, norm);
        }
        ux_section_end(e);
        pt_object_end(&e->w);
    }
    ux_container_end(e);
}
