// `lightly-train-c embed`: features of every image in a folder from a trained
// backbone (a .ckpt of ours or an exported / torchvision / timm / DINOv2 /
// DINOv3 / transformers .safetensors or PyTorch .pt/.pth; ViTs pool the mean
// patch token or the class token, --vit-pool), written as npy, csv,
// lightly_csv, safetensors or torch (LightlyTrain's), or as TensorBoard
// projector files (a folder, embed/projector.h). Unreadable images are
// skipped: a warning each, counted in the summary, and their rows dropped
// from the output together with their filenames (so the two stay aligned).
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/ranks.h"
#include "data/data_list.h"
#include "data/scan.h"
#include "decode/decode.h"
#include "dist/rank_settings.h"
#include "cli/weights_cli.h"
#include "embed/embedder.h"
#include "embed/embedding_head.h"
#include "embed/embedding_writers.h"
#include "embed/onnx_export.h"
#include "embed/projector.h"
#include "train/model_source.h"
#include "util/cpu.h"
#include "util/output_path.h"

#define EMBED_PROGRAM "lightly-train-c embed"

typedef struct EmbedArgs {
    StringList data_given;  // --data
    const char *data_list;  // --data-list FILE or NULL
    DataList data;          // both (data_list_build)
    const char *checkpoint;
    const char *out;
    int format;  // index into format_choices: 0 = from the extension
    int part;    // index into part_choices
    int vit_pool;  // index into vit_pool_choices
    int image_size;
    int batch_size;
    int num_workers;  // -1 = auto
    int accelerator;  // index into accelerator_choices
    int precision;    // index into precision_choices
    const char *devices;  // --devices: auto, N or a GPU list
    int overwrite;
    double max_pixels;
    int exif_orientation;  // index into OPTION_BOOLEAN_CHOICES
    const char *normalize;  // --normalize, or NULL: the checkpoint's (ImageNet's for 3 channels)
    const char *export_onnx;  // --export-onnx FILE, or NULL
    double dist_timeout;    // several ranks: the bound on every collective
} EmbedArgs;

// After "auto", in EmbedFormat's order (args.format - 1 is the EmbedFormat).
static const char *const format_choices[] = {"auto",        "npy",         "csv",   "lightly_csv",
                                             "safetensors", "tensorboard", "torch", NULL};
static const char *const part_choices[] = {"backbone", "student", "teacher", NULL};
// auto: the model's own, as LightlyTrain's wrappers pool: the mean of the
// patch tokens for DINOv2 / timm ViTs, the class token for DINOv3's (or
// what an export's "pool" metadata says).
static const char *const vit_pool_choices[] = {"auto", "mean", "cls", NULL};
static const char *const accelerator_choices[] = {"auto", "cpu", "gpu", NULL};
// LightlyTrain's embed precision (its default 32-true): the mixed ones keep
// the weights in fp32 and the activations in 16 bits, on the GPU.
static const char *const precision_choices[] = {"32-true", "16-mixed", "bf16-mixed", NULL};

// Lines of a rank other than 0 start with "rank N: " (docs/distributed.md),
// each written with one call so that the ranks' lines do not interleave.
static void print_warning(void *context, const char *message) {
    const int rank = comm_rank(context);
    if (rank) fprintf(stderr, "rank %d: warning: %s\n", rank, message);
    else fprintf(stderr, "warning: %s\n", message);
}

// Prints the failure and returns status (2: bad input, 1: a failure).
static int embed_fail(const Communicator *comm, int status, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
static int embed_fail(const Communicator *comm, int status, const char *format, ...) {
    char text[sizeof(ErrorMessage) + 256];
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof text, format, args);
    va_end(args);
    const int rank = comm_rank(comm);
    if (rank) fprintf(stderr, "rank %d: %s: %s\n", rank, EMBED_PROGRAM, text);
    else fprintf(stderr, "%s: %s\n", EMBED_PROGRAM, text);
    return status;
}

// An existing --out needs --overwrite; its folder must exist and be
// writable; it must not be the model file read (by any path or hard link:
// --overwrite would replace the model with its embeddings). Checked before
// any work so that a long run never ends in a refused write.
static int check_output(const Communicator *comm, const EmbedArgs *args, EmbedFormat format) {
    ErrorMessage err = {{0}};
    struct stat out_info, model_info;
    if (stat(args->out, &out_info) == 0 && stat(args->checkpoint, &model_info) == 0 &&
        out_info.st_dev == model_info.st_dev && out_info.st_ino == model_info.st_ino)
        return embed_fail(comm, 2,
                          "--out '%s' is the --checkpoint file: embed does not write over the "
                          "model it reads",
                          args->out);
    if ((format == EMBED_FORMAT_TENSORBOARD
             ? projector_check_output(args->out, args->overwrite, &err)
             : output_file_check(args->out, args->overwrite, &err)) != 0)
        return embed_fail(comm, 2, "--out: %s", err.text);
    if (!args->export_onnx) return 0;
    if (strcmp(args->export_onnx, args->out) == 0 ||
        strcmp(args->export_onnx, args->checkpoint) == 0)
        return embed_fail(comm, 2, "--export-onnx '%s' is the --%s file", args->export_onnx,
                          strcmp(args->export_onnx, args->out) == 0 ? "out" : "checkpoint");
    if (output_file_check(args->export_onnx, args->overwrite, &err) != 0)
        return embed_fail(comm, 2, "--export-onnx: %s", err.text);
    return 0;
}

// Removes the temporary files an embed into the same --out left when it
// was killed (the npy names file's too; the projector's files inside its
// folder), saying so.
static void tidy_output(const char *out, EmbedFormat format) {
    static const char *const projector_files[] = {PROJECTOR_TENSORS, PROJECTOR_METADATA,
                                                  PROJECTOR_SPRITE, PROJECTOR_CONFIG};
    char files[4][4200], note[1300];
    const char *const paths[4] = {files[0], files[1], files[2], files[3]};
    int count = 1;
    snprintf(files[0], sizeof files[0], "%s", out);
    if (format == EMBED_FORMAT_TENSORBOARD) {
        for (count = 0; count < 4; count++)
            snprintf(files[count], sizeof files[count], "%s/%s", out, projector_files[count]);
    } else if (format == EMBED_FORMAT_NPY &&
               embedding_npy_filenames_path(out, files[1], sizeof files[1]) == 0) {
        count = 2;
    }
    output_files_tidy(paths, count, note, sizeof note);
    if (note[0]) printf("%s\n", note);
}

// Drops the rows (and names) of files that failed; returns the rows kept.
static size_t drop_failed_rows(float *features, const char **filenames, const uint8_t *failed,
                               const Dataset *dataset, int dim) {
    size_t kept = 0;
    for (size_t i = 0; i < dataset->count; i++) {
        if (failed[i]) continue;
        if (kept != i)
            memmove(features + kept * (size_t)dim, features + i * (size_t)dim,
                    (size_t)dim * sizeof *features);
        filenames[kept++] = dataset_path(dataset, i);
    }
    return kept;
}

typedef struct EmbedRun {
    Communicator *comm;     // the ranks (several under a launcher); rank 0 writes
    int rank_cores;
    const char *accelerator;  // where this rank runs (cli/ranks.h)
    int gpu;
    int embedded;           // embed_dataset returned: all ranks are past it alike
    int agreed;             // the settings check failed on every rank alike (they differ)
    Dataset dataset;
    Backend *backend;
    Backbone model;
    int model_loaded;
    EmbeddingHead head;     // the checkpoint's embedding head (--embed-dim), or out 0
    float *features;        // (dataset.count, D)
    uint8_t *failed;        // (dataset.count)
    const char **filenames; // (dataset.count)
} EmbedRun;

static void embed_run_free(EmbedRun *run) {
    if (run->model_loaded) backbone_free(&run->model);
    embedding_head_free(&run->head);
    backend_destroy(run->backend);
    dataset_free(&run->dataset);
    free(run->features);
    free(run->failed);
    free(run->filenames);
}

// --export-onnx: the model as this embed runs it (its --image-size, ViT
// pooling and normalisation) as an ONNX file, written on rank 0 before the
// embedding (a failure shows at once). 0, or the exit status.
static int export_onnx(const EmbedArgs *args, EmbedRun *run, const EmbedConfig *input) {
    if (!args->export_onnx || comm_rank(run->comm) != 0) return 0;
    ErrorMessage err = {{0}};
    float mean[AUGMENT_MAX_CHANNELS], std[AUGMENT_MAX_CHANNELS];
    embed_config_normalization(input, mean, std);
    const OnnxExportOptions options = {.image_size = args->image_size, .precision = ONNX_FP32,
                                       .opset = ONNX_OPSET_DEFAULT, .channels = input->channels,
                                       .mean = mean, .std = std, .head = &run->head};
    if (onnx_export_check(&run->model, &options, &err))
        return embed_fail(run->comm, 2, "--export-onnx: %s", err.text);
    const char *paths[2] = {args->export_onnx, NULL};
    char data_path[4200], note[1300];
    snprintf(data_path, sizeof data_path, "%s.data", args->export_onnx);
    paths[1] = data_path;
    output_files_tidy(paths, 2, note, sizeof note);
    if (note[0]) printf("%s\n", note);
    OnnxExportSummary summary;
    if (onnx_export_backbone(&run->model, &options, args->export_onnx, &summary, &err))
        return embed_fail(run->comm, 1, "--export-onnx: %s", err.text);
    printf("wrote the embedding model as ONNX (opset %d, fp32, input images (batch, %d, %d, %d), "
           "output embeddings (batch, %d)) to '%s'%s%s\n",
           summary.opset, input->channels, args->image_size, args->image_size,
           summary.embedding_dim, args->export_onnx,
           summary.write.data_bytes ? ", weights in " : "",
           summary.write.data_bytes ? data_path : "");
    return 0;
}

// The features through the checkpoint's embedding head: run->features
// becomes (count, head.out). -1: out of memory.
static int apply_embedding_head(EmbedRun *run, size_t count) {
    float *embeddings = malloc(count * (size_t)run->head.out * sizeof *embeddings);
    if (!embeddings) return -1;
    embedding_head_apply(&run->head, run->features, count, embeddings);
    free(run->features);
    run->features = embeddings;
    return 0;
}

// Several ranks: each embeds a share of rank 0's image list with rank 0's
// model and input, or rank 0 writes rows of other images under its names
// (dist/rank_settings.h). Returns 0, or 2 on every rank (the rank that
// differs says which setting); a failed exchange ends every rank.
static int check_rank_settings(const EmbedArgs *args, EmbedRun *run, const EmbedConfig *config,
                               const char *model_name) {
    if (comm_world_size(run->comm) == 1) return 0;
    RankSetting settings[8];
    int count = 0;
    rank_setting_data(&settings[count++], &run->dataset, (const char *const *)args->data.items,
                      args->data.count);
    // The weights, and the model they are in.
    char text[BACKBONE_MAX_NAME + 64];  // cut to RANK_SETTING_SHOWN when shown
    const ParameterSet *params = run->model.params, *buffers = run->model.buffers;
    uint64_t hash = rank_hash_values(run->backend, params->values, params->total, RANK_HASH_START);
    hash = rank_hash_values(run->backend, buffers->values, buffers->total, hash);
    snprintf(text, sizeof text, "%s (weights %08x)", model_name, (unsigned)hash);
    rank_setting_text(&settings[count++], "--checkpoint", text);
    snprintf(text, sizeof text, "%s, %s", part_choices[args->part],
             run->model.spec.kind == BACKBONE_VIT
                 ? vit_pool_name(run->model.model.vit.config.pool) : "no pool");
    rank_setting_text(&settings[count++], "--part/--vit-pool", text);
    snprintf(text, sizeof text, "%d px, batch %d", config->image_size, config->batch_size);
    rank_setting_text(&settings[count++], "--image-size/--batch-size", text);
    snprintf(text, sizeof text, "%d channels, %s pixels", config->channels,
             config->float_pixels ? "float" : "8-bit");
    rank_setting_text(&settings[count++], "the input", text);
    // The normalisation as numbers (exactly) and as the first channels' text.
    const int shown_channels = config->channels < 3 ? config->channels : 3;
    size_t length = 0;
    if (config->normalize_count == 0) snprintf(text, sizeof text, "ImageNet's");
    for (int c = 0; config->normalize_count > 0 && c < 2 * shown_channels; c++)
        length += (size_t)snprintf(text + length, sizeof text - length, "%s%.4g",
                                   c == 0 ? "" : c == shown_channels ? ":" : ",",
                                   (double)(c < shown_channels ? config->mean[c]
                                                               : config->std[c - shown_channels]));
    rank_setting_text(&settings[count++], "--normalize", text);
    settings[count - 1].hash = rank_hash_bytes(
        rank_hash_bytes(RANK_HASH_START, config->mean, sizeof config->mean), config->std,
        sizeof config->std);
    snprintf(text, sizeof text, "%llu, exif %d", (unsigned long long)config->max_pixels,
             !config->ignore_exif_orientation);
    rank_setting_text(&settings[count++], "--max-pixels/--exif-orientation", text);
    ErrorMessage err = {{0}};
    const int status = rank_settings_check(run->comm, run->backend, settings, count, &err);
    if (status < 0) {
        embed_fail(run->comm, 1, "%s", err.text);
        comm_abort(run->comm, 1);  // the ranks are out of step: ends them all
        return 1;
    }
    if (err.text[0]) embed_fail(run->comm, 2, "%s", err.text);
    run->agreed = status != 0;
    return status ? 2 : 0;
}

static int embed_run(const EmbedArgs *args, EmbedRun *run) {
    ErrorMessage err = {{0}};
    const EmbedFormat format = args->format == 0 ? embed_format_from_path(args->out)
                                                 : (EmbedFormat)(args->format - 1);
    if (check_output(run->comm, args, format) != 0) return 2;
    if (comm_rank(run->comm) == 0) tidy_output(args->out, format);
    if (dataset_scan_many(args->data.items, args->data.count, &run->dataset, &err) != 0)
        return embed_fail(run->comm, 2, "%s", err.text);
    const Dataset *dataset = &run->dataset;
    run->filenames = malloc(dataset->count * sizeof *run->filenames);
    if (!run->filenames) return embed_fail(run->comm, 2, "out of memory for the file list");
    for (size_t i = 0; i < dataset->count; i++) run->filenames[i] = dataset_path(dataset, i);
    if (embedding_check_filenames(format, run->filenames, dataset->count, &err) != 0)
        return embed_fail(run->comm, 2, "%s", err.text);
    // Weights by name (e.g. dinov2/vits14) are fetched once --data and --out
    // are known to be good, before any work. A rank whose own cache lacks it
    // may fail alone: it ends the others (command_embed).
    if (weights_cli_prepare(EMBED_PROGRAM, args->checkpoint, NULL)) return 2;

    const int batch_size = (size_t)args->batch_size > dataset->count ? (int)dataset->count
                                                                     : args->batch_size;
    const int workers =
        args->num_workers >= 0 ? args->num_workers : cpu_default_workers(run->rank_cores, 1);
    char accelerator_note[400];
    run->backend = backend_choose(run->accelerator, "cpu", run->gpu, run->rank_cores,
                                  accelerator_note, sizeof accelerator_note, &err);
    if (!run->backend) return embed_fail(run->comm, 2, "%s", err.text);
    if (args->precision != 0 && strcmp(run->backend->name, "cuda") != 0)
        return embed_fail(run->comm, 2, "--precision %s needs a GPU; on the CPU embed runs in "
                                        "32-true", precision_choices[args->precision]);
    if (backend_set_compute_dtype(run->backend,
                                  args->precision == 1   ? COMPUTE_F16
                                  : args->precision == 2 ? COMPUTE_BF16
                                                         : COMPUTE_F32,
                                  &err))
        return embed_fail(run->comm, 2, "--precision: %s", err.text);
    const BackboneInput shape = {batch_size, args->image_size};
    // Eval forwards only: no gradients, nothing kept for a backward (vit.h, resnet.h: frozen).
    const ModelSourceOptions source = {.part = part_choices[args->part], .frozen = 1};
    ModelSourceInfo info;
    if (model_source_load_backbone_with(args->checkpoint, &source, run->backend, &shape, 1,
                                        &run->model, &info, &err) != 0)
        return embed_fail(run->comm, 2, "--checkpoint: %s", err.text);
    run->model_loaded = 1;
    if (embedding_head_read(args->checkpoint, info.prefix, run->model.feature_dim,
                            info.embed_dim, &run->head, &err))
        return embed_fail(run->comm, 2, "--checkpoint: %s", err.text);
    if (run->head.out && comm_rank(run->comm) == 0)
        printf("the checkpoint's embedding head (train's --embed-dim): %d features to %d\n",
               run->head.in, run->head.out);
    EmbedConfig config = {0};
    if (embed_config_input(&run->model, info.pixels,
                           args->normalize ? args->normalize : info.normalize, &config, &err))
        return embed_fail(run->comm, 2, "%s", err.text);
    if (run->model.spec.kind == BACKBONE_VIT && args->vit_pool > 0 &&
        vit_pool_parse(vit_pool_choices[args->vit_pool], &run->model.model.vit.config.pool, &err))
        return embed_fail(run->comm, 2, "--vit-pool: %s", err.text);
    config.image_size = args->image_size;
    const int onnx_status = export_onnx(args, run, &config);
    if (onnx_status) return onnx_status;
    char model_name[BACKBONE_MAX_NAME];
    backbone_spec_name(&run->model.spec, model_name, sizeof model_name);
    const int features_dim = run->model.feature_dim;
    const int writer = comm_rank(run->comm) == 0;  // the others only embed their share
    run->features =
        writer ? malloc(dataset->count * (size_t)features_dim * sizeof *run->features) : NULL;
    run->failed = writer ? calloc(dataset->count, 1) : NULL;
    if (writer && (!run->features || !run->failed)) {
        return embed_fail(run->comm, 1, "out of memory for %zu x %d features", dataset->count,
                          features_dim);
    }

    config.image_size = args->image_size;
    config.batch_size = batch_size;
    config.num_workers = workers;
    config.max_pixels = (uint64_t)args->max_pixels;
    config.ignore_exif_orientation = args->exif_orientation != 0;
    config.warn = print_warning;
    config.warn_context = run->comm;
    config.failed = run->failed;
    config.comm = run->comm;
    const int settings_status = check_rank_settings(args, run, &config, model_name);
    if (settings_status) return settings_status;
    // What the scan left out, said as train says it once every check passed
    // (other files, hidden ones, named pipes and devices, unreadable entries).
    char skipped[2048];
    scan_summary_describe(&dataset->summary, skipped, sizeof skipped);
    if (skipped[0] && writer) fprintf(stderr, "dataset: %s\n", skipped);
    LoaderStats stats = {0};
    const double start = time_now();
    const int embed_status = embed_dataset(&run->model, 0, dataset, &config, run->features,
                                           &stats, &err);
    run->embedded = 1;
    if (embed_status != 0) {
        return embed_fail(run->comm, 1, "%s", err.text);
    }
    if (!writer) return 0;
    if (run->head.out && apply_embedding_head(run, dataset->count) != 0)
        return embed_fail(run->comm, 1, "out of memory for %zu x %d embeddings", dataset->count,
                          run->head.out);
    const int dim = run->head.out ? run->head.out : run->model.feature_dim;
    const double seconds = time_now() - start;
    const size_t kept = drop_failed_rows(run->features, run->filenames, run->failed, dataset, dim);
    if (kept == 0) {
        return embed_fail(run->comm, 1,
                          "none of the %zu images in '%s'%s could be read; nothing written",
                          dataset->count, args->data.items[0],
                          args->data.count > 1 ? " and the other folders" : "");
    }
    const EmbeddingTable table = {run->features, kept, dim, run->filenames};
    const ProjectorOptions projector = {dataset->root, (uint64_t)args->max_pixels};
    ProjectorSummary sprite = {0};
    if ((format == EMBED_FORMAT_TENSORBOARD
             ? projector_write(args->out, &table, &projector, &sprite, &err)
             : embedding_write(args->out, format, &table, &err)) != 0) {
        return embed_fail(run->comm, 1, "%s", err.text);
    }
    printf("embedded %zu images x %d dims (%s, %d px, batch %d, %d workers, %s %s, %d rank(s)) "
           "as %s to '%s' in %.2f s (%.1f images/s); skipped files: %llu (rows dropped)\n",
           kept, dim, model_name, args->image_size, batch_size, workers, run->backend->name,
           precision_choices[args->precision], comm_world_size(run->comm),
           embed_format_names[format], args->out, seconds,
           seconds > 0 ? (double)dataset->count / seconds : 0.0,
           (unsigned long long)stats.skipped_files);
    if (format == EMBED_FORMAT_TENSORBOARD && sprite.cell > 0)
        printf("projector: %d px thumbnails, %d per row (%zu unreadable, grey)\n", sprite.cell,
               sprite.columns, sprite.unreadable);
    if (format == EMBED_FORMAT_TENSORBOARD && sprite.cell == 0)
        printf("projector: no thumbnails (more than %d images per sprite row)\n",
               PROJECTOR_SPRITE_MAX / PROJECTOR_MIN_CELL);
    char logdir[4096];
    projector_logdir(args->out, logdir, sizeof logdir);
    if (format == EMBED_FORMAT_TENSORBOARD)
        printf("view with: tensorboard --logdir '%s'\n", logdir);
    return 0;
}

int command_embed(int argc, char **argv) {
    EmbedArgs args = {
        .image_size = EMBED_DEFAULT_IMAGE_SIZE,
        .batch_size = EMBED_DEFAULT_BATCH_SIZE,
        .num_workers = -1,
        .devices = "auto",
        .max_pixels = (double)DECODE_DEFAULT_MAX_PIXELS,
        .dist_timeout = DIST_DEFAULT_TIMEOUT,
    };
    const OptionSpec specs[] = {
        {.name = "data", .type = OPTION_STRING, .value = &args.data_given, .metavar = "DIR|FILE",
         .help = "folder of images (searched recursively), or an image file; repeated: all "
                 "of them (required, unless --data-list)", .repeatable = 1, .in_usage = 1},
        {.name = "data-list", .type = OPTION_STRING, .value = &args.data_list, .metavar = "FILE",
         .help = "a text file of more --data entries, one per line"},
        {.name = "checkpoint", .type = OPTION_STRING, .value = &args.checkpoint,
         .metavar = "PATH|NAME",
         .help = "a .ckpt of train, a backbone .safetensors or PyTorch .pt/.pth state dict "
                 "(export, LightlyTrain, torchvision, timm, DINOv2, DINOv3, transformers), "
                 "or weights by name (lightly-train-c weights)",
         .required = 1},
        {.name = "out", .type = OPTION_STRING, .value = &args.out, .metavar = "FILE",
         .help = "embedding file to write (tensorboard: a folder)", .required = 1},
        {.name = "format", .type = OPTION_CHOICE, .value = &args.format, .metavar = "NAME",
         .help = "file format (auto: from the --out extension .npy/.csv/.safetensors/.pt/.pth, "
                 "else npy); torch: LightlyTrain's, {filenames, embeddings} for torch.load; "
                 "tensorboard: projector files for tensorboard --logdir OUT",
         .choices = format_choices},
        {.name = "part", .type = OPTION_CHOICE, .value = &args.part, .metavar = "NAME",
         .help = "which backbone of a .ckpt (backbone: the one export uses)",
         .choices = part_choices},
        {.name = "vit-pool", .type = OPTION_CHOICE, .value = &args.vit_pool, .metavar = "NAME",
         .help = "ViT features: mean of the patch tokens (mean), the class token (cls), or "
                 "the model's (auto: mean for DINOv2, cls for DINOv3)",
         .choices = vit_pool_choices},
        {.name = "image-size", .type = OPTION_INT, .value = &args.image_size, .metavar = "N",
         .help = "images are resized to N x N (no crop; ViTs: a multiple of the patch size)",
         .min = 16, .max = 4096},
        {.name = "batch-size", .type = OPTION_INT, .value = &args.batch_size, .metavar = "N",
         .help = "images per forward pass (reduced to the dataset size)", .min = 1,
         .max = 65536},
        {.name = "num-workers", .type = OPTION_INT, .value = &args.num_workers,
         .metavar = "N|auto", .help = "data loading threads (auto: usable cores - 1; 0: each "
         "batch decoded when it is asked for, as PyTorch's 0)", .min = 0, .max = 1024,
         .allow_auto = 1},
        {.name = "accelerator", .type = OPTION_CHOICE, .value = &args.accelerator,
         .metavar = "NAME", .help = "where the model runs (gpu needs the CUDA backend; "
                                    "LightlyTrain's cuda is gpu)",
         .choices = accelerator_choices, .value_aliases = OPTION_ACCELERATOR_ALIASES},
        {.name = "precision", .type = OPTION_CHOICE, .value = &args.precision,
         .metavar = "NAME", .help = "32-true, or on the GPU 16-mixed / bf16-mixed: 16-bit "
                                    "activations, fp32 weights (LightlyTrain's embed precision)",
         .choices = precision_choices, .value_aliases = OPTION_PRECISION_ALIASES,
         .value_refusals = OPTION_PRECISION_REFUSALS},
        {.name = "devices", .type = OPTION_STRING, .value = &args.devices,
         .metavar = "N|LIST|auto", .help = "GPUs to embed on, one process each, or GPU indices "
                                           "such as 0,2 (1, for GPU 1 alone) (auto: every "
                                           "visible GPU)"},
        {.name = "overwrite", .type = OPTION_FLAG, .value = &args.overwrite,
         .help = "replace an existing --out"},
        DIST_TIMEOUT_OPTION(&args.dist_timeout),
        MAX_PIXELS_OPTION(&args.max_pixels),
        EXIF_ORIENTATION_OPTION(&args.exif_orientation),
        {.name = "normalize", .type = OPTION_STRING, .value = &args.normalize,
         .metavar = "MEAN,...:STD,...", .help = "per-channel mean and std of the model's input "
                                                "(default: the checkpoint's, or ImageNet's)"},
        {.name = "export-onnx", .type = OPTION_STRING, .value = &args.export_onnx,
         .metavar = "FILE", .help = "also write the embedding model as run here (--image-size, "
                                    "--vit-pool, normalisation) as ONNX (docs/onnx.md)"},
    };
    const OptionParser parser = {
        .program = EMBED_PROGRAM,
        .summary = "Computes the embedding of every image in --data with a trained backbone "
                   "(plain resize, ImageNet normalisation, pooled features) and writes them "
                   "with their file names. Unreadable images are skipped and left out.",
        .epilog = EXIT_STATUS_HELP,
        .specs = specs,
        .count = (int)(sizeof specs / sizeof specs[0]),
    };
    int exit_status = 0;
    if (options_parse_command(&parser, argc, argv, &exit_status)) return exit_status;
    ErrorMessage err = {{0}};
    if (data_list_build(args.data_given.items, args.data_given.count, args.data_list, &args.data,
                        &err)) {
        fprintf(stderr, "%s: %s\n", EMBED_PROGRAM, err.text);
        return 2;
    }
    // Several ranks (a launcher's, or one per GPU) embed a share of the
    // images each (data parallel).
    const RankRequest request = {.accelerator = accelerator_choices[args.accelerator],
                                 .devices = args.devices, .num_nodes = -1,
                                 .timeout_seconds = args.dist_timeout};
    RankPlace place;
    int launch_status = 0;
    const int started = ranks_start(&request, argv, &place, &launch_status, &err);
    if (started < 0 || started == RANKS_LAUNCHED) {
        if (started < 0) fprintf(stderr, "%s: %s\n", EMBED_PROGRAM, err.text);
        data_list_free(&args.data);
        return started < 0 ? 2 : launch_status;
    }
    const DistRun dist = place.dist;
    EmbedRun run = {.comm = dist.comm, .rank_cores = dist_cores_per_rank(&dist),
                    .accelerator = place.accelerator, .gpu = place.gpu};
    int status = embed_run(&args, &run);
    embed_run_free(&run);
    // A rank that failed before the (agreed) embedding must not leave the
    // others waiting in it: bad input may be its own (its --data, its
    // cache), while the others wait in the settings check. Ends every rank
    // with this rank's status (a world of one just returns). Not when every
    // rank stops at the settings check: they end together, and the abort of
    // the first could kill the rank that differs before it said why.
    if (status != 0 && !run.embedded && !run.agreed) comm_abort(dist.comm, status);
    comm_destroy(dist.comm);
    data_list_free(&args.data);
    return status;
}
