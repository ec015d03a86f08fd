// torchvision's models as torch.save pickles them (torch_module_export.h):
// the module tree built from the state dict's tensors (their shapes give
// every width, the architecture places the strides), written with
// pt_nn_modules.h's leaves, the tensors borrowed from the state dict the
// backbone's save hands over (the same bytes as `--format torch`).
#include "weights/torch_module_export.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weights/pt_nn_modules.h"
#include "weights/pt_writer.h"

#define NAME_SIZE 160
#define TV_RESNET "torchvision.models.resnet"
#define TV_SHUFFLENET "torchvision.models.shufflenetv2"
#define TV_CONVNEXT "torchvision.models.convnext"

typedef struct Writer {
    PtWriter w;
    const SafeTensorWrite *tensors;
    int count;
    int missing;  // a tensor the tree names that the state dict lacks (a bug): refused
    char first_missing[NAME_SIZE];
} Writer;

// ---- names and tensors ------------------------------------------------------------------------

static const SafeTensorWrite *find(const Writer *m, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
static const SafeTensorWrite *find(const Writer *m, const char *format, ...) {
    char name[NAME_SIZE];
    va_list args;
    va_start(args, format);
    vsnprintf(name, sizeof name, format, args);
    va_end(args);
    for (int i = 0; i < m->count; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
    return NULL;
}

// Dimension axis of tensor prefix.weight (torch layout), 0 when absent.
static int weight_dim(const Writer *m, const char *prefix, int axis) {
    const SafeTensorWrite *t = find(m, "%s.weight", prefix);
    return t && axis < t->rank ? (int)t->shape[axis] : 0;
}

// name (NAME_SIZE bytes) = the formatted text; the state dict's names are short.
static void name_format(char *name, const char *format, ...) __attribute__((format(printf, 2, 3)));
static void name_format(char *name, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(name, NAME_SIZE, format, args);
    va_end(args);
}

static void key(Writer *m, const char *name) { pt_put_str(&m->w, name); }

static void child_key(Writer *m, int index) {
    char text[16];
    snprintf(text, sizeof text, "%d", index);
    key(m, text);
}

// name: tensor prefix.name, a Parameter (requires_grad, as a saved model's)
// or a buffer; None when absent (counted: the export fails).
static void tensor_entry(Writer *m, const char *prefix, const char *name, int parameter) {
    key(m, name);
    const SafeTensorWrite *t = find(m, "%s.%s", prefix, name);
    if (!t) {
        if (!m->missing++)
            snprintf(m->first_missing, sizeof m->first_missing, "%s.%s", prefix, name);
        pt_put_none(&m->w);
    } else if (parameter) {
        pt_put_parameter_borrowed(&m->w, t->dtype, t->data, t->rank, t->shape);
    } else {
        pt_put_tensor_borrowed(&m->w, t->dtype, t->data, t->rank, t->shape);
    }
}

static void section_begin(Writer *m, const char *name) {
    key(m, name);
    pt_ordered_dict_begin(&m->w);
}

// _parameters: prefix.weight and prefix.bias; then an empty _buffers.
static void weight_and_bias(Writer *m, const char *prefix) {
    section_begin(m, "_parameters");
    tensor_entry(m, prefix, "weight", 1);
    tensor_entry(m, prefix, "bias", 1);
    pt_dict_end(&m->w);
    pt_nn_empty_ordered_dict(&m->w, "_buffers");
}

// A module without tensors: its children follow until module_end.
static void children_begin(Writer *m) {
    pt_nn_empty_ordered_dict(&m->w, "_parameters");
    pt_nn_empty_ordered_dict(&m->w, "_buffers");
    section_begin(m, "_modules");
}
static void module_end(Writer *m) {
    pt_dict_end(&m->w);  // _modules
    pt_object_end(&m->w);
}
// A module without tensors or children.
static void leaf_end(Writer *m) {
    children_begin(m);
    module_end(m);
}

static void sequential_begin(Writer *m) {
    pt_nn_module_begin(&m->w, "torch.nn.modules.container", "Sequential");
    children_begin(m);
}

// ---- torch.nn's leaves ------------------------------------------------------------------------

// A Conv2d over prefix.weight (out, in / groups, k, k); depthwise: one
// group per channel.
static void conv2d(Writer *m, const char *prefix, int stride, int padding, int depthwise) {
    const int out = weight_dim(m, prefix, 0), per_group = weight_dim(m, prefix, 1);
    const int groups = depthwise ? out : 1;
    const PtConv2d conv = {.in_channels = per_group * groups,
                           .out_channels = out,
                           .kernel = weight_dim(m, prefix, 2),
                           .stride = stride,
                           .padding = padding,
                           .groups = groups};
    pt_nn_module_begin(&m->w, "torch.nn.modules.conv", "Conv2d");
    pt_nn_conv2d_attributes(&m->w, &conv);
    section_begin(m, "_parameters");
    tensor_entry(m, prefix, "weight", 1);
    if (find(m, "%s.bias", prefix)) {
        tensor_entry(m, prefix, "bias", 1);
    } else {
        key(m, "bias");
        pt_put_none(&m->w);
    }
    pt_dict_end(&m->w);
    pt_nn_empty_ordered_dict(&m->w, "_buffers");
    pt_nn_empty_ordered_dict(&m->w, "_modules");
    pt_object_end(&m->w);
}

static void batchnorm(Writer *m, const char *prefix) {
    pt_nn_module_begin(&m->w, "torch.nn.modules.batchnorm", "BatchNorm2d");
    pt_nn_batchnorm_attributes(&m->w, weight_dim(m, prefix, 0), 1e-5, 0.1);
    section_begin(m, "_parameters");
    tensor_entry(m, prefix, "weight", 1);
    tensor_entry(m, prefix, "bias", 1);
    pt_dict_end(&m->w);
    section_begin(m, "_buffers");
    tensor_entry(m, prefix, "running_mean", 0);
    tensor_entry(m, prefix, "running_var", 0);
    tensor_entry(m, prefix, "num_batches_tracked", 0);
    pt_dict_end(&m->w);
    pt_nn_empty_ordered_dict(&m->w, "_modules");
    pt_object_end(&m->w);
}

static void relu(Writer *m) {
    pt_nn_module_begin(&m->w, "torch.nn.modules.activation", "ReLU");
    key(m, "inplace");
    pt_put_bool(&m->w, 1);
    leaf_end(m);
}

// torchvision's stem pool: 3 x 3, stride 2, padding 1.
static void maxpool(Writer *m) {
    pt_nn_module_begin(&m->w, "torch.nn.modules.pooling", "MaxPool2d");
    pt_nn_key_int(&m->w, "kernel_size", 3);
    pt_nn_key_int(&m->w, "stride", 2);
    pt_nn_key_int(&m->w, "padding", 1);
    pt_nn_key_int(&m->w, "dilation", 1);
    key(m, "return_indices");
    pt_put_bool(&m->w, 0);
    key(m, "ceil_mode");
    pt_put_bool(&m->w, 0);
    leaf_end(m);
}

// output_size 1: (1, 1) as ResNet writes it, or 1 as ConvNeXt does.
static void adaptive_avgpool(Writer *m, int as_pair) {
    pt_nn_module_begin(&m->w, "torch.nn.modules.pooling", "AdaptiveAvgPool2d");
    if (as_pair) pt_nn_key_repeat(&m->w, "output_size", 1, 2);
    else pt_nn_key_int(&m->w, "output_size", 1);
    leaf_end(m);
}

// The classifier's place: the model returns its features.
static void identity(Writer *m) {
    pt_nn_module_begin(&m->w, "torch.nn.modules.linear", "Identity");
    leaf_end(m);
}

// ---- ResNet -----------------------------------------------------------------------------------

// BasicBlock or Bottleneck (the stride on its 3 x 3 conv2, torchvision's
// ResNet v1.5) with its downsample where the state dict has one.
static void resnet_block(Writer *m, const char *prefix, int stride, int bottleneck) {
    char name[NAME_SIZE];
    const int downsample = find(m, "%s.downsample.0.weight", prefix) != NULL;
    pt_nn_module_begin(&m->w, TV_RESNET, bottleneck ? "Bottleneck" : "BasicBlock");
    if (!downsample) {  // None is a plain attribute, a module a child
        key(m, "downsample");
        pt_put_none(&m->w);
    }
    pt_nn_key_int(&m->w, "stride", stride);
    children_begin(m);
    static const char *const basic[] = {"conv1", "bn1", "relu", "conv2", "bn2"};
    static const char *const deep[] = {"conv1", "bn1", "conv2", "bn2", "conv3", "bn3", "relu"};
    const char *const *children = bottleneck ? deep : basic;
    const int count = bottleneck ? 7 : 5;
    for (int i = 0; i < count; i++) {
        key(m, children[i]);
        name_format(name, "%s.%s", prefix, children[i]);
        if (strcmp(children[i], "relu") == 0) relu(m);
        else if (children[i][0] == 'b') batchnorm(m, name);
        else if (strcmp(children[i], "conv2") == 0) conv2d(m, name, bottleneck ? stride : 1, 1, 0);
        else if (strcmp(children[i], "conv1") == 0)
            conv2d(m, name, bottleneck ? 1 : stride, bottleneck ? 0 : 1, 0);
        else conv2d(m, name, 1, 0, 0);  // conv3
    }
    if (downsample) {
        key(m, "downsample");
        sequential_begin(m);
        child_key(m, 0);
        name_format(name, "%s.downsample.0", prefix);
        conv2d(m, name, stride, 0, 0);
        child_key(m, 1);
        name_format(name, "%s.downsample.1", prefix);
        batchnorm(m, name);
        module_end(m);
    }
    module_end(m);
}

static void resnet(Writer *m) {
    const int bottleneck = find(m, "layer1.0.conv3.weight") != NULL;
    int blocks[4] = {0};
    for (int l = 0; l < 4; l++)
        while (find(m, "layer%d.%d.conv1.weight", l + 1, blocks[l])) blocks[l]++;
    char name[NAME_SIZE];
    name_format(name, "layer4.%d.%s", blocks[3] - 1, bottleneck ? "conv3" : "conv2");
    pt_nn_module_begin(&m->w, TV_RESNET, "ResNet");
    key(m, "_norm_layer");
    pt_put_global(&m->w, "torch.nn.modules.batchnorm", "BatchNorm2d");
    pt_nn_key_int(&m->w, "inplanes", weight_dim(m, name, 0));  // as _make_layer leaves it
    pt_nn_key_int(&m->w, "dilation", 1);
    pt_nn_key_int(&m->w, "groups", 1);
    // width_per_group: 64, the wide ResNets' 128 (a Bottleneck's width at 64 planes)
    pt_nn_key_int(&m->w, "base_width", bottleneck ? weight_dim(m, "layer1.0.conv1", 0) : 64);
    children_begin(m);
    key(m, "conv1");
    conv2d(m, "conv1", 2, 3, 0);
    key(m, "bn1");
    batchnorm(m, "bn1");
    key(m, "relu");
    relu(m);
    key(m, "maxpool");
    maxpool(m);
    for (int l = 0; l < 4; l++) {
        name_format(name, "layer%d", l + 1);
        key(m, name);
        sequential_begin(m);
        for (int b = 0; b < blocks[l]; b++) {
            child_key(m, b);
            name_format(name, "layer%d.%d", l + 1, b);
            resnet_block(m, name, l > 0 && b == 0 ? 2 : 1, bottleneck);
        }
        module_end(m);
    }
    key(m, "avgpool");
    adaptive_avgpool(m, 1);
    key(m, "fc");
    identity(m);
    module_end(m);
}

// ---- ShuffleNetV2 -----------------------------------------------------------------------------

// A Sequential of the units under prefix: 'c' a conv (1 x 1), 'd' a
// depthwise 3 x 3 conv at stride, 'b' a BatchNorm, 'r' a ReLU.
static void unit_row(Writer *m, const char *prefix, const char *units, int stride) {
    char name[NAME_SIZE];
    sequential_begin(m);
    for (int i = 0; units[i]; i++) {
        child_key(m, i);
        name_format(name, "%s.%d", prefix, i);
        if (units[i] == 'c') conv2d(m, name, 1, 0, 0);
        else if (units[i] == 'd') conv2d(m, name, stride, 1, 1);
        else if (units[i] == 'b') batchnorm(m, name);
        else relu(m);
    }
    module_end(m);
}

static void inverted_residual(Writer *m, const char *prefix, int stride) {
    char name[NAME_SIZE];
    pt_nn_module_begin(&m->w, TV_SHUFFLENET, "InvertedResidual");
    pt_nn_key_int(&m->w, "stride", stride);
    children_begin(m);
    key(m, "branch1");  // an empty Sequential at stride 1
    name_format(name, "%s.branch1", prefix);
    unit_row(m, name, stride > 1 ? "dbcbr" : "", stride);
    key(m, "branch2");
    name_format(name, "%s.branch2", prefix);
    unit_row(m, name, "cbrdbcbr", stride);
    module_end(m);
}

static void shufflenet(Writer *m) {
    char name[NAME_SIZE];
    pt_nn_module_begin(&m->w, TV_SHUFFLENET, "ShuffleNetV2");
    key(m, "_stage_out_channels");
    pt_list_begin(&m->w);
    pt_put_int(&m->w, weight_dim(m, "conv1.0", 0));
    for (int s = 2; s <= 4; s++) {  // two branches of half the stage's width
        name_format(name, "stage%d.0.branch2.5", s);
        pt_put_int(&m->w, 2 * weight_dim(m, name, 0));
    }
    pt_put_int(&m->w, weight_dim(m, "conv5.0", 0));
    pt_list_end(&m->w);
    children_begin(m);
    key(m, "conv1");
    sequential_begin(m);
    child_key(m, 0);
    conv2d(m, "conv1.0", 2, 1, 0);
    child_key(m, 1);
    batchnorm(m, "conv1.1");
    child_key(m, 2);
    relu(m);
    module_end(m);
    key(m, "maxpool");
    maxpool(m);
    for (int s = 2; s <= 4; s++) {
        name_format(name, "stage%d", s);
        key(m, name);
        sequential_begin(m);
        for (int b = 0; find(m, "stage%d.%d.branch2.0.weight", s, b); b++) {
            child_key(m, b);
            name_format(name, "stage%d.%d", s, b);
            inverted_residual(m, name, b == 0 ? 2 : 1);
        }
        module_end(m);
    }
    key(m, "conv5");
    unit_row(m, "conv5", "cbr", 1);
    key(m, "fc");
    identity(m);
    module_end(m);
}

// ---- ConvNeXt ---------------------------------------------------------------------------------

// LayerNorm over the channels (torchvision's LayerNorm2d, or nn.LayerNorm
// inside a block), eps 1e-6.
static void layernorm(Writer *m, const char *prefix, const char *module, const char *cls) {
    pt_nn_module_begin(&m->w, module, cls);
    key(m, "normalized_shape");
    const int64_t shape[1] = {weight_dim(m, prefix, 0)};
    pt_put_int_tuple(&m->w, shape, 1);
    key(m, "eps");
    pt_put_float(&m->w, 1e-6);
    key(m, "elementwise_affine");
    pt_put_bool(&m->w, 1);
    weight_and_bias(m, prefix);
    pt_nn_empty_ordered_dict(&m->w, "_modules");
    pt_object_end(&m->w);
}

static void layernorm2d(Writer *m, const char *prefix) {
    layernorm(m, prefix, TV_CONVNEXT, "LayerNorm2d");
}

static void linear(Writer *m, const char *prefix) {
    pt_nn_module_begin(&m->w, "torch.nn.modules.linear", "Linear");
    pt_nn_key_int(&m->w, "in_features", weight_dim(m, prefix, 1));
    pt_nn_key_int(&m->w, "out_features", weight_dim(m, prefix, 0));
    weight_and_bias(m, prefix);
    pt_nn_empty_ordered_dict(&m->w, "_modules");
    pt_object_end(&m->w);
}

static void permute(Writer *m, int a, int b, int c, int d) {
    pt_nn_module_begin(&m->w, "torchvision.ops.misc", "Permute");
    key(m, "dims");
    pt_list_begin(&m->w);
    pt_put_int(&m->w, a), pt_put_int(&m->w, b), pt_put_int(&m->w, c), pt_put_int(&m->w, d);
    pt_list_end(&m->w);
    leaf_end(m);
}

static void cn_block(Writer *m, const char *prefix, double drop_probability) {
    char name[NAME_SIZE];
    pt_nn_module_begin(&m->w, TV_CONVNEXT, "CNBlock");
    section_begin(m, "_parameters");
    tensor_entry(m, prefix, "layer_scale", 1);
    pt_dict_end(&m->w);
    pt_nn_empty_ordered_dict(&m->w, "_buffers");
    section_begin(m, "_modules");
    key(m, "block");
    sequential_begin(m);
    child_key(m, 0);
    name_format(name, "%s.block.0", prefix);
    conv2d(m, name, 1, weight_dim(m, name, 2) / 2, 1);
    child_key(m, 1);
    permute(m, 0, 2, 3, 1);
    child_key(m, 2);
    name_format(name, "%s.block.2", prefix);
    layernorm(m, name, "torch.nn.modules.normalization", "LayerNorm");
    child_key(m, 3);
    name_format(name, "%s.block.3", prefix);
    linear(m, name);
    child_key(m, 4);
    pt_nn_module_begin(&m->w, "torch.nn.modules.activation", "GELU");
    key(m, "approximate");
    pt_put_str(&m->w, "none");
    leaf_end(m);
    child_key(m, 5);
    name_format(name, "%s.block.5", prefix);
    linear(m, name);
    child_key(m, 6);
    permute(m, 0, 3, 1, 2);
    module_end(m);
    key(m, "stochastic_depth");
    pt_nn_module_begin(&m->w, "torchvision.ops.stochastic_depth", "StochasticDepth");
    key(m, "p");
    pt_put_float(&m->w, drop_probability);
    key(m, "mode");
    pt_put_str(&m->w, "row");
    leaf_end(m);
    module_end(m);
}

// The float as the shortest decimal that reads back as it, then as a
// double: the value Python held (stochastic_depth_prob=0.1 is 0.1, not
// (double)0.1f).
static double decimal_double(float value) {
    char text[32];
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(text, sizeof text, "%.*g", digits, (double)value);
        if ((float)strtod(text, NULL) == value) break;
    }
    return strtod(text, NULL);
}

static void convnext(Writer *m, float stochastic_depth_prob) {
    char name[NAME_SIZE];
    int depths[4] = {0}, total = 0;
    for (int s = 0; s < 4; s++) {
        while (find(m, "features.%d.%d.block.0.weight", 2 * s + 1, depths[s])) depths[s]++;
        total += depths[s];
    }
    const double probability = decimal_double(stochastic_depth_prob);
    pt_nn_module_begin(&m->w, TV_CONVNEXT, "ConvNeXt");
    children_begin(m);
    key(m, "features");
    sequential_begin(m);
    child_key(m, 0);
    pt_nn_module_begin(&m->w, "torchvision.ops.misc", "Conv2dNormActivation");
    pt_nn_key_int(&m->w, "out_channels", weight_dim(m, "features.0.0", 0));
    children_begin(m);
    child_key(m, 0);
    const int patch = weight_dim(m, "features.0.0", 2);
    conv2d(m, "features.0.0", patch, 0, 0);
    child_key(m, 1);
    layernorm2d(m, "features.0.1");
    module_end(m);
    for (int s = 0, block = 0; s < 4; s++) {
        if (s > 0) {  // the downsampling between stages
            child_key(m, 2 * s);
            sequential_begin(m);
            child_key(m, 0);
            name_format(name, "features.%d.0", 2 * s);
            layernorm2d(m, name);
            child_key(m, 1);
            name_format(name, "features.%d.1", 2 * s);
            conv2d(m, name, 2, 0, 0);
            module_end(m);
        }
        child_key(m, 2 * s + 1);
        sequential_begin(m);
        for (int b = 0; b < depths[s]; b++, block++) {
            child_key(m, b);
            name_format(name, "features.%d.%d", 2 * s + 1, b);
            // torchvision's rate: linear in the block's index over the network
            cn_block(m, name, probability * block / (total - 1.0));
        }
        module_end(m);
    }
    module_end(m);
    key(m, "avgpool");
    adaptive_avgpool(m, 0);
    key(m, "classifier");
    sequential_begin(m);
    child_key(m, 0);
    layernorm2d(m, "classifier.0");
    child_key(m, 1);
    pt_nn_module_begin(&m->w, "torch.nn.modules.flatten", "Flatten");
    pt_nn_key_int(&m->w, "start_dim", 1);
    pt_nn_key_int(&m->w, "end_dim", -1);
    leaf_end(m);
    child_key(m, 2);
    identity(m);
    module_end(m);
    module_end(m);
}

// ---- the file ---------------------------------------------------------------------------------

int torch_module_supported(const BackboneSpec *spec, ErrorMessage *err) {
    if (spec->kind == BACKBONE_RESNET || spec->kind == BACKBONE_SHUFFLENET ||
        (spec->kind == BACKBONE_CONVNEXT && spec->convnext.naming == CONVNEXT_TORCHVISION))
        return 1;
    const char *what = spec->kind == BACKBONE_VIT    ? "a ViT (its class is timm's or "
                                                       "LightlyTrain's)"
                       : spec->kind == BACKBONE_YOLO ? "a YOLO (--format torch writes the "
                                                       "Ultralytics checkpoint YOLO() loads)"
                                                     : "a ConvNeXt of timm's or DINOv3's naming";
    error_set(err, "--format torch_model writes torchvision's ResNets, ShuffleNetV2s and "
                   "ConvNeXts, not %s: --format torch writes its state dict", what);
    return 0;
}

// The backbone save's tensors arrive in a StateDictWrite, which carries no
// context: the model being written waits here (export is one thread).
static const Backbone *writing;

static int write_module(const char *path, const SafeTensorWrite *tensors, int count,
                        const SafeMetadata *metadata, int metadata_count, ErrorMessage *err) {
    (void)metadata, (void)metadata_count;
    Writer m = {.tensors = tensors, .count = count};
    pt_writer_init(&m.w);
    if (writing->spec.kind == BACKBONE_RESNET) resnet(&m);
    else if (writing->spec.kind == BACKBONE_SHUFFLENET) shufflenet(&m);
    else convnext(&m, writing->spec.convnext.drop_path_rate);
    int status = 0;
    if (m.missing)
        status = error_set(err, "torch_model: %d tensors of the module tree are not in the "
                                "state dict (the first: %s)", m.missing, m.first_missing);
    else status = pt_writer_save_as_file(&m.w, path, err);
    pt_writer_free(&m.w);
    return status;
}

int export_torch_module(const Backbone *model, const char *path, ErrorMessage *err) {
    if (!torch_module_supported(&model->spec, err)) return -1;
    writing = model;
    const int status = backbone_save_as(model, path, write_module, err);
    writing = NULL;
    return status;
}
