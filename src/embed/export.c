// `lightly-train-c export`: writes one backbone of a checkpoint (or of a
// safetensors state dict) atomically in its architecture's interchange
// format: a ResNet as a torchvision state dict in safetensors (F32, conv
// weights OIHW, BN running stats and num_batches_tracked, no fc), loadable
// with torchvision.models.resnetXX().load_state_dict(
// safetensors.torch.load_file(path), strict=False) (only fc.* missing); a
// ViT as a timm state dict (nn/vit_weights.h: vit_save); a ConvNeXt in its
// naming's (nn/convnext_weights.h: torchvision's, timm's or DINOv3's). With
// --format torch (an --out named *.pt or *.pth) the same state dict as
// torch.save writes it (weights/pt_writer.h), what LightlyTrain's
// exported_last.pt holds, and a YOLO as the Ultralytics checkpoint of its
// whole model (weights/ultralytics_export.h); with --format onnx, an ONNX
// model of the embedding model (embed/onnx_export.h, docs/onnx.md).
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "embed/embedder.h"
#include "embed/embedding_head.h"
#include "embed/onnx_export.h"
#include "nn/backbone.h"
#include "train/model_source.h"
#include "util/output_path.h"
#include "weights/pt_writer.h"
#include "weights/torch_module_export.h"
#include "weights/ultralytics_export.h"

static const char *const part_names[] = {"backbone", "teacher", "student", NULL};
// LightlyTrain's ModelPart values: its model, the wrapper around it and the
// embedding model are one backbone here (an embedding head, --embed-dim, is
// in the ONNX export and in embed's rows, not in a backbone's state dict).
static const char *const part_aliases[] = {"model=backbone", "wrapped_model=backbone",
                                           "embedding_model=backbone", NULL};
// torch_model: LightlyTrain's, the module itself pickled (torchvision's
// models: weights/torch_module_export.h).
static const char *const format_names[] = {"auto", "safetensors", "onnx", "torch", "torch_model",
                                           NULL};
enum { FORMAT_AUTO, FORMAT_SAFETENSORS, FORMAT_ONNX, FORMAT_TORCH, FORMAT_TORCH_MODEL };
// LightlyTrain's other ModelFormat values.
static const char *const format_aliases[] = {"package_default=auto", "torch_state_dict=torch",
                                             NULL};
static const char *const precision_names[] = {"fp32", "fp16", NULL};
// LightlyTrain's ONNXPrecision values.
static const char *const precision_aliases[] = {"32-true=fp32", "16-true=fp16", NULL};
static const char *const vit_pool_names[] = {"auto", "mean", "cls", NULL};

typedef struct ExportArgs {
    const char *checkpoint;
    const char *out;
    int part;       // index into part_names
    int format;     // index into format_names
    int overwrite;
    // ONNX
    int image_size;  // -1: the checkpoint's training size, else 224
    int precision;   // index into precision_names
    int opset;       // -1: ONNX_OPSET_DEFAULT
    int external_data;
    const char *normalize;  // NULL: the checkpoint's, else ImageNet's
    int vit_pool;    // index into vit_pool_names (both formats: the ViT's pooling)
} ExportArgs;

// The extension of path ("." included), or NULL.
static const char *extension_of(const char *path) {
    const char *dot = strrchr(path, '.');
    return dot && !strchr(dot, '/') ? dot : NULL;
}

static int is_torch_extension(const char *extension) {
    return extension && (strcasecmp(extension, ".pt") == 0 || strcasecmp(extension, ".pth") == 0);
}

// An --out whose extension names another format than the one written: its
// extension, else NULL.
static const char *foreign_extension(const char *out, int format) {
    static const char *const others[] = {".pt", ".pth", ".ckpt", ".bin", ".pkl", ".onnx",
                                         ".safetensors", ".npz", ".npy", ".h5"};
    const char *dot = extension_of(out);
    const int own = format == FORMAT_TORCH || format == FORMAT_TORCH_MODEL
                        ? is_torch_extension(dot)
                    : format == FORMAT_ONNX ? dot && strcasecmp(dot, ".onnx") == 0
                                            : dot && strcasecmp(dot, ".safetensors") == 0;
    if (!dot || own) return NULL;
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        if (strcasecmp(dot, others[i]) == 0) return dot;
    return NULL;
}

// --format auto: ONNX for an --out named *.onnx, torch for *.pt and *.pth,
// else safetensors.
static int resolved_format(const ExportArgs *args) {
    if (args->format != FORMAT_AUTO) return args->format;
    const char *dot = extension_of(args->out);
    return dot && strcasecmp(dot, ".onnx") == 0 ? FORMAT_ONNX
           : is_torch_extension(dot)           ? FORMAT_TORCH
                                               : FORMAT_SAFETENSORS;
}

// The options that only --format onnx reads, refused with safetensors:
// the first one given, else NULL.
static const char *onnx_only_option(const ExportArgs *args) {
    if (args->image_size != -1) return "--image-size";
    if (args->precision != 0) return "--precision";
    if (args->opset != -1) return "--opset";
    if (args->external_data) return "--external-data";
    if (args->normalize) return "--normalize";
    return NULL;
}

// The ONNX file of model: options from the arguments and the checkpoint
// (its training size, its normalisation). 2: bad input, 1: a failure.
static int export_onnx(const ExportArgs *args, const Backbone *model,
                       const ModelSourceInfo *info, OnnxExportSummary *summary, int *size) {
    const char *program = "lightly-train-c export";
    ErrorMessage err = {{0}};
    EmbedConfig input = {0};
    if (embed_config_input(model, info->pixels, args->normalize ? args->normalize : info->normalize,
                           &input, &err)) {
        fprintf(stderr, "%s: %s\n", program, err.text);
        return 2;
    }
    // The embedding model embed runs: the part's embedding head (--embed-dim) too.
    EmbeddingHead head = {0};
    if (embedding_head_read(args->checkpoint, info->prefix, model->feature_dim, info->embed_dim,
                            &head, &err)) {
        fprintf(stderr, "%s: --checkpoint: %s\n", program, err.text);
        return 2;
    }
    float mean[AUGMENT_MAX_CHANNELS], std[AUGMENT_MAX_CHANNELS];
    embed_config_normalization(&input, mean, std);
    *size = args->image_size > 0       ? args->image_size
            : info->image_size > 0     ? info->image_size
                                       : EMBED_DEFAULT_IMAGE_SIZE;
    const OnnxExportOptions options = {
        .image_size = *size,
        .precision = args->precision == 1 ? ONNX_FP16 : ONNX_FP32,
        .opset = args->opset > 0 ? args->opset : ONNX_OPSET_DEFAULT,
        .external_data = args->external_data,
        .channels = input.channels,
        .mean = mean,
        .std = std,
        .head = &head,
    };
    int status = 0;
    char data_path[4200];
    snprintf(data_path, sizeof data_path, "%s.data", args->out);
    if (onnx_export_check(model, &options, &err)) {
        fprintf(stderr, "%s: %s%s\n", program, err.text,
                args->image_size > 0 ? "" : " (pass --image-size)");
        status = 2;
    } else if (onnx_export_external(model, &options) &&
               output_file_check(data_path, args->overwrite, &err) != 0) {
        fprintf(stderr, "%s: the external data file: %s\n", program, err.text);
        status = 2;
    } else if (onnx_export_backbone(model, &options, args->out, summary, &err) != 0) {
        fprintf(stderr, "%s: %s\n", program, err.text);
        status = 1;
    }
    embedding_head_free(&head);
    return status;
}

// The backbone's state dict at path: safetensors, or as torch.save writes it
// (a YOLO: Ultralytics' checkpoint of its whole model, what YOLO() loads).
static int export_state_dict(const Backbone *model, const char *path, int torch,
                             ErrorMessage *err) {
    if (!torch) return backbone_save(model, path, err);
    if (model->spec.kind == BACKBONE_YOLO)
        return export_ultralytics(&model->model.yolo, path, err);
    return backbone_save_as(model, path, pt_state_dict_write, err);
}

static int export_run(const ExportArgs *args) {
    const char *program = "lightly-train-c export";
    ErrorMessage err = {{0}};
    const int format = resolved_format(args);
    const char *extension = foreign_extension(args->out, format);
    if (extension) {
        fprintf(stderr, "%s: --out %s: export writes %s, which a %s reader cannot read: name it "
                        "*.%s\n",
                program, args->out, format_names[format], extension,
                format == FORMAT_TORCH || format == FORMAT_TORCH_MODEL ? "pt"
                                                                       : format_names[format]);
        return 2;
    }
    const char *onnx_option = format == FORMAT_ONNX ? NULL : onnx_only_option(args);
    if (onnx_option) {
        fprintf(stderr, "%s: %s applies to --format onnx (an --out named *.onnx), not to %s\n",
                program, onnx_option, format_names[format]);
        return 2;
    }
    if (output_file_check(args->out, args->overwrite, &err) != 0) {
        fprintf(stderr, "%s: --out: %s\n", program, err.text);
        return 2;
    }
    char data_path[4200], note[1300];
    snprintf(data_path, sizeof data_path, "%s.data", args->out);
    const char *written[2] = {args->out, data_path};
    // What a killed export left.
    output_files_tidy(written, format == FORMAT_ONNX ? 2 : 1, note, sizeof note);
    if (note[0]) printf("%s\n", note);
    Backend *backend = backend_create("ref", 1, &err);  // only moves data: no compute
    if (!backend) {
        fprintf(stderr, "%s: %s\n", program, err.text);
        return 1;
    }
    const BackboneInput unused_slot = {1, 0};  // export runs no forward: the smallest slot
    const ModelSourceOptions source = {.part = part_names[args->part], .frozen = 1};
    Backbone model;
    ModelSourceInfo info;
    if (model_source_load_backbone_with(args->checkpoint, &source, backend, &unused_slot, 1,
                                        &model, &info, &err) != 0) {
        fprintf(stderr, "%s: --checkpoint: %s\n", program, err.text);
        backend_destroy(backend);
        return 2;
    }
    int status = 0;
    if (format == FORMAT_TORCH_MODEL && !torch_module_supported(&model.spec, &err)) {
        fprintf(stderr, "%s: %s\n", program, err.text);
        status = 2;
    }
    if (status == 0 && model.spec.kind == BACKBONE_VIT && args->vit_pool > 0 &&
        vit_pool_parse(vit_pool_names[args->vit_pool], &model.model.vit.config.pool, &err))
        status = 2;  // the choices are the pool names: not reached
    OnnxExportSummary onnx = {0};
    int size = 0;
    if (status == 0 && format == FORMAT_ONNX)
        status = export_onnx(args, &model, &info, &onnx, &size);
    if (status == 0 && format == FORMAT_TORCH_MODEL &&
        export_torch_module(&model, args->out, &err) != 0) {
        fprintf(stderr, "%s: %s\n", program, err.text);
        status = 1;
    }
    if (status == 0 && (format == FORMAT_SAFETENSORS || format == FORMAT_TORCH) &&
        export_state_dict(&model, args->out, format == FORMAT_TORCH, &err) != 0) {
        fprintf(stderr, "%s: %s\n", program, err.text);
        status = 1;
    }
    if (status == 0) {
        // A checkpoint's "backbone." -> "backbone"; a state dict is its own
        // backbone, whose tensors may sit under a prefix ("module.").
        const size_t length = strlen(info.prefix);
        const int part_named = info.is_checkpoint && length;
        char name[BACKBONE_MAX_NAME];
        backbone_spec_name(&model.spec, name, sizeof name);
        printf("exported %.*s of %s (%zu parameters) from %s%s%s%s to %s",
               part_named ? (int)length - 1 : 8, part_named ? info.prefix : "backbone", name,
               parameter_set_elements(model.params), args->checkpoint,
               !info.is_checkpoint && length ? " (its tensors under \"" : "",
               !info.is_checkpoint ? info.prefix : "",
               !info.is_checkpoint && length ? "\")" : "", args->out);
        if (format == FORMAT_ONNX)
            printf(" as ONNX (opset %d, %s, input images (batch, %d, %d, %d), output embeddings "
                   "(batch, %d)%s%s)",
                   onnx.opset, precision_names[args->precision],
                   backbone_input_layer(&model)->torch_shape[1], size, size, onnx.embedding_dim,
                   onnx.write.data_bytes ? "; weights in " : "",
                   onnx.write.data_bytes ? data_path : "");
        if (format == FORMAT_TORCH_MODEL)
            printf(" as a torchvision module (torch.load(path, weights_only=False))");
        printf("\n");
    }
    backbone_free(&model);
    backend_destroy(backend);
    return status;
}

int command_export(int argc, char **argv) {
    ExportArgs args = {.image_size = -1, .opset = -1};
    const OptionSpec specs[] = {
        {.name = "checkpoint", .type = OPTION_STRING, .value = &args.checkpoint,
         .metavar = "PATH", .help = "a .ckpt checkpoint or a backbone .safetensors or .pt/.pth",
         .required = 1},
        {.name = "out", .type = OPTION_STRING, .value = &args.out, .metavar = "FILE",
         .help = "the exported state dict or ONNX model", .required = 1},
        {.name = "part", .type = OPTION_CHOICE, .value = &args.part, .metavar = "PART",
         .help = "backbone: the checkpoint's default (the teacher for DINO; also LightlyTrain's "
                 "model, wrapped_model, embedding_model); teacher or student",
         .choices = part_names, .value_aliases = part_aliases},
        {.name = "format", .type = OPTION_CHOICE, .value = &args.format, .metavar = "FORMAT",
         .help = "file format of --out (auto: onnx for *.onnx, torch for *.pt and *.pth, else "
                 "safetensors); torch: the state dict as torch.save writes it (LightlyTrain's "
                 "exported_last.pt), a YOLO's as Ultralytics' checkpoint of the whole model; "
                 "torch_model: the torchvision module itself (ResNet, ShuffleNetV2, ConvNeXt; "
                 "torch.load(path, weights_only=False))",
         .choices = format_names, .value_aliases = format_aliases},
        {.name = "overwrite", .type = OPTION_FLAG, .value = &args.overwrite,
         .help = "replace an existing --out"},
        {.name = "vit-pool", .type = OPTION_CHOICE, .value = &args.vit_pool, .metavar = "NAME",
         .help = "a ViT's embedding: mean of the patch tokens (mean), the class token (cls), or "
                 "the model's (auto)",
         .choices = vit_pool_names},
        {.name = "image-size", .type = OPTION_INT, .value = &args.image_size, .metavar = "N|auto",
         .help = "onnx: the input's height and width (auto: the checkpoint's training size, else "
                 "224; ViTs: a multiple of the patch size)",
         .min = 1, .max = 8192, .allow_auto = 1},
        {.name = "precision", .type = OPTION_CHOICE, .value = &args.precision, .metavar = "NAME",
         .help = "onnx: fp32, or fp16 weights, activations, input and output",
         .choices = precision_names, .value_aliases = precision_aliases},
        {.name = "opset", .type = OPTION_INT, .value = &args.opset, .metavar = "N|auto",
         .help = "onnx: the ONNX operator set (auto: 25, what TensorRT 11 and ONNX Runtime read; "
                 "18..28)",
         .min = ONNX_OPSET_MIN, .max = ONNX_OPSET_MAX, .allow_auto = 1, .alias = "opset-version"},
        {.name = "external-data", .type = OPTION_FLAG, .value = &args.external_data,
         .help = "onnx: weights in OUT.data beside the model (automatic above 2 GB)"},
        {.name = "normalize", .type = OPTION_STRING, .value = &args.normalize,
         .metavar = "MEAN,...:STD,...",
         .help = "onnx: the input normalisation recorded in the model's metadata (default: the "
                 "checkpoint's, or ImageNet's)"},
    };
    const OptionParser parser = {
        .program = "lightly-train-c export",
        .summary = "Writes a backbone of a checkpoint as a torchvision (ResNet), timm (ViT) "
                   "or torchvision / timm / DINOv3 (ConvNeXt, its --model's) state dict in "
                   "safetensors or, --out NAME.pt, as torch.save writes it, loadable with "
                   "load_state_dict (ResNet, torchvision's ConvNeXt: strict=False, no "
                   "classifier); a YOLO's .pt is the Ultralytics checkpoint of its whole model "
                   "that ultralytics.YOLO loads; or as an ONNX model of its embedding "
                   "(docs/onnx.md).",
        .epilog = EXIT_STATUS_HELP,
        .specs = specs,
        .count = (int)(sizeof specs / sizeof specs[0]),
    };
    int exit_status = 0;
    if (options_parse_command(&parser, argc, argv, &exit_status)) return exit_status;
    return export_run(&args);
}
