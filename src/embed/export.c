// `lightly-train-c export`: writes one backbone of a checkpoint (or of a
// safetensors state dict) atomically in its architecture's interchange
// format: a ResNet as a torchvision state dict in safetensors (F32, conv
// weights OIHW, BN running stats and num_batches_tracked, no fc), loadable
// with torchvision.models.resnetXX().load_state_dict(
// safetensors.torch.load_file(path), strict=False) (only fc.* missing); a
// ViT as a timm state dict (nn/vit_weights.h: vit_save); a ConvNeXt in its
// naming's (nn/convnext_weights.h: torchvision's, timm's or DINOv3's).
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "nn/backbone.h"
#include "train/model_source.h"
#include "util/output_path.h"

static const char *const part_names[] = {"backbone", "teacher", "student", NULL};
static const char *const format_names[] = {"safetensors", NULL};

typedef struct ExportArgs {
    const char *checkpoint;
    const char *out;
    int part;    // index into part_names
    int format;  // index into format_names
    int overwrite;
} ExportArgs;

// An --out whose extension names another format (torch.load would fail on
// the safetensors written): its extension, else NULL.
static const char *foreign_extension(const char *out) {
    static const char *const others[] = {".pt", ".pth", ".ckpt", ".bin", ".pkl",
                                         ".onnx", ".npz", ".npy", ".h5"};
    const char *dot = strrchr(out, '.');
    if (!dot || strchr(dot, '/')) return NULL;
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        if (strcasecmp(dot, others[i]) == 0) return dot;
    return NULL;
}

static int export_run(const ExportArgs *args) {
    const char *program = "lightly-train-c export";
    ErrorMessage err = {{0}};
    const char *extension = foreign_extension(args->out);
    if (extension) {
        fprintf(stderr, "%s: --out %s: export writes %s, which a %s reader cannot read: name it "
                        "*.safetensors\n",
                program, args->out, format_names[args->format], extension);
        return 2;
    }
    if (output_file_check(args->out, args->overwrite, &err) != 0) {
        fprintf(stderr, "%s: --out: %s\n", program, err.text);
        return 2;
    }
    char note[1300];
    output_files_tidy(&args->out, 1, note, sizeof note);  // what a killed export left
    if (note[0]) printf("%s\n", note);
    Backend *backend = backend_create("ref", 1, &err);  // only moves data: no compute
    if (!backend) {
        fprintf(stderr, "%s: %s\n", program, err.text);
        return 1;
    }
    const BackboneInput unused_slot = {1, 0};  // export runs no forward: the smallest slot
    Backbone model;
    ModelSourceInfo info;
    if (model_source_load_backbone_info(args->checkpoint, part_names[args->part], backend,
                                        &unused_slot, 1, &model, &info, &err) != 0) {
        fprintf(stderr, "%s: --checkpoint: %s\n", program, err.text);
        backend_destroy(backend);
        return 2;
    }
    int status = 0;
    if (backbone_save(&model, args->out, &err) != 0) {
        fprintf(stderr, "%s: %s\n", program, err.text);
        status = 1;
    } else {
        // A checkpoint's "backbone." -> "backbone"; a state dict is its own
        // backbone, whose tensors may sit under a prefix ("module.").
        const size_t length = strlen(info.prefix);
        const int part_named = info.is_checkpoint && length;
        char name[BACKBONE_MAX_NAME];
        backbone_spec_name(&model.spec, name, sizeof name);
        printf("exported %.*s of %s (%zu parameters) from %s%s%s%s to %s\n",
               part_named ? (int)length - 1 : 8, part_named ? info.prefix : "backbone", name,
               parameter_set_elements(model.params), args->checkpoint,
               !info.is_checkpoint && length ? " (its tensors under \"" : "",
               !info.is_checkpoint ? info.prefix : "",
               !info.is_checkpoint && length ? "\")" : "", args->out);
    }
    backbone_free(&model);
    backend_destroy(backend);
    return status;
}

int command_export(int argc, char **argv) {
    ExportArgs args = {0};
    const OptionSpec specs[] = {
        {.name = "checkpoint", .type = OPTION_STRING, .value = &args.checkpoint,
         .metavar = "PATH", .help = "a .ckpt checkpoint or a backbone .safetensors or .pt/.pth",
         .required = 1},
        {.name = "out", .type = OPTION_STRING, .value = &args.out, .metavar = "FILE",
         .help = "the exported state dict", .required = 1},
        {.name = "part", .type = OPTION_CHOICE, .value = &args.part, .metavar = "PART",
         .help = "backbone: the checkpoint's default (the teacher for DINO); teacher or student",
         .choices = part_names},
        {.name = "format", .type = OPTION_CHOICE, .value = &args.format, .metavar = "FORMAT",
         .help = "file format of --out", .choices = format_names},
        {.name = "overwrite", .type = OPTION_FLAG, .value = &args.overwrite,
         .help = "replace an existing --out"},
    };
    const OptionParser parser = {
        .program = "lightly-train-c export",
        .summary = "Writes a backbone of a checkpoint as a torchvision (ResNet), timm (ViT) "
                   "or torchvision / timm / DINOv3 (ConvNeXt, its --model's) state dict in "
                   "safetensors, loadable with load_state_dict (ResNet, torchvision's "
                   "ConvNeXt: strict=False, no classifier).",
        .epilog = EXIT_STATUS_HELP,
        .specs = specs,
        .count = (int)(sizeof specs / sizeof specs[0]),
    };
    int exit_status = 0;
    if (options_parse_command(&parser, argc, argv, &exit_status)) return exit_status;
    return export_run(&args);
}
