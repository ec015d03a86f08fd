// Set-up and tear-down of a `train` run: data, backend, method, optimizers,
// schedules, resume, logs and the end summary (see train_run.h); the
// output folder's checks, lock and layout are train_out.c's.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "embed/embedder.h"
#include "train/knn.h"
#include "train/train_run.h"
#include "util/cpu.h"
#include "util/thread_wait.h"

// Console (through the progress display) and train.log on rank 0; other
// ranks write to stderr with their rank.
static void train_print(TrainRun *run, const char *text) {
    if (run->rank != 0) {
        fprintf(stderr, "rank %d: %s\n", run->rank, text);
        return;
    }
    if (run->progress)
        progress_message(run->progress, text);
    else
        fprintf(stderr, "%s\n", text);
    if (run->log) run_log_line(run->log, "%s", text);
}

int train_stop(TrainRun *run, int status, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(run->final_message, sizeof run->final_message, format, args);
    va_end(args);
    return status;
}

static void train_vprint(TrainRun *run, const char *format, va_list args) {
    char text[2048];
    vsnprintf(text, sizeof text, format, args);
    train_print(run, text);
}

void train_message(TrainRun *run, const char *format, ...) {
    if (run->rank != 0) return;
    va_list args;
    va_start(args, format);
    train_vprint(run, format, args);
    va_end(args);
}

void train_error(TrainRun *run, const char *format, ...) {
    va_list args;
    va_start(args, format);
    train_vprint(run, format, args);
    va_end(args);
}

// Loader warnings (skipped images) come from worker threads: one line each
// to stderr and train.log, both line-buffered appends.
// One write per line: the ranks' stderr meet in one stream (mpirun's), where
// a prefix written apart could land before another rank's line.
static void train_warn(void *context, const char *message) {
    TrainRun *run = context;
    if (run->rank != 0) fprintf(stderr, "rank %d: warning: %s\n", run->rank, message);
    else fprintf(stderr, "warning: %s\n", message);
    if (run->log) run_log_line(run->log, "warning: %s", message);
}

static int rank_cores(const TrainConfig *config) {
    return config->rank_cores > 0 ? config->rank_cores : cpu_usable_cores();
}

static const char *optimizer_display_name(OptimizerKind kind) {
    return kind == OPTIMIZER_SGD ? "SGD" : kind == OPTIMIZER_LARS ? "LARS" : "AdamW";
}

// 8-bit RGB views, or float ones (the deep path) by --input-depth.
static int choose_float_pixels(const TrainRun *run, int *float_pixels, ErrorMessage *err) {
    const TrainConfig *config = run->config;
    const ChannelSettings *channels = &config->channels;
    const int rgb = (channels->channels == 0 || channels->channels == 3) && !channels->keep;
    if (config->input_depth == TRAIN_DEPTH_8 && !rgb)
        return error_set(err, "--input-depth 8 reads 8-bit RGB: --num-channels %d%s needs float "
                              "pixels (--input-depth auto or float)", channels->channels,
                         channels->keep ? " with --channel-drop" : "");
    *float_pixels = config->input_depth == TRAIN_DEPTH_FLOAT ||
                    (config->input_depth == TRAIN_DEPTH_AUTO &&
                     (!rgb || loader_first_image_is_deep(&run->dataset, config->max_pixels)));
    return 0;
}

// DINOv31's views: its PaKA local views' count is a method arg
// (paka_num_local), checked here with the others before it is used.
static int build_dinov31_views(const TrainConfig *config, ViewSet *views, ErrorMessage *err) {
    const MethodSetup setup = {.args = (const char *const *)config->method_args.items,
                               .arg_count = config->method_args.count};
    double paka = 8;
    if (method_args_check(&setup, method_arg_specs(METHOD_DINOV31), err) ||
        method_arg_double(&setup, "paka_num_local", paka, &paka, err))
        return error_prefix(err, "dinov31");
    return view_set_dinov31(views, config->image_size, config->local_image_size,
                            config->local_views, (int)paka, err);
}

static int build_views(const TrainRun *run, ViewSet *views, ErrorMessage *err) {
    const TrainConfig *config = run->config;
    method_default_views(config->method, config->image_size, views);
    if (config->method == METHOD_DINO || config->method == METHOD_DINOV2)
        view_set_multi_crop(views, config->local_image_size, config->local_views);
    if (config->method == METHOD_DINOV31 && build_dinov31_views(config, views, err)) return -1;
    int float_pixels = 0;
    if (channel_settings_check(&config->channels, err) ||
        choose_float_pixels(run, &float_pixels, err))
        return -1;
    view_set_apply_channels(views, &config->channels, float_pixels);
    if (view_set_overrides(views, (const char *const *)config->transforms.items,
                           config->transforms.count, err))
        return error_prefix(err, "--transform"), -1;
    return 0;
}

// LightlyTrain: warmup over min(10 epochs, 10% of the epochs), in steps.
static long warmup_steps_for(long total_steps, long steps_per_epoch) {
    const double epochs = fmax(1.0, ceil((double)total_steps / (double)steps_per_epoch));
    const double warmup_epochs = fmin(10.0, epochs / 10.0);
    const long steps = (long)((double)total_steps / epochs * warmup_epochs);
    return steps < total_steps ? steps : total_steps;
}

static int setup_data(TrainRun *run, ErrorMessage *err) {
    const TrainConfig *config = run->config;
    if (dataset_scan_many(config->data.items, config->data.count, &run->dataset, err)) return -1;
    run->dataset_ready = 1;
    const int world = run->world_size;
    if (config->batch_size % world != 0)
        return error_set(err, "--batch-size %d is not divisible by the %d ranks (devices x "
                              "nodes): the global batch is split evenly", config->batch_size,
                         world);
    run->batch_size = config->batch_size / world;
    const size_t per_rank = run->dataset.count / (size_t)world;  // each rank's share
    if ((size_t)run->batch_size > per_rank) {
        snprintf(run->settings_warning, sizeof run->settings_warning,
                 "warning: batch size %d is larger than the dataset (%zu images); using %zu",
                 config->batch_size, run->dataset.count, per_rank * (size_t)world);
        run->batch_size = (int)per_rank;
    }
    if (run->batch_size < 2)
        return error_set(err, "the dataset has %zu image(s): SSL needs at least 2 per batch "
                              "on each of the %d rank(s)", run->dataset.count, world);
    run->accumulate = config->accumulate_grad_batches;
    const long batches = batch_limit_apply(&config->limit_train_batches,
                                           (long)(per_rank / (size_t)run->batch_size), err);
    if (batches < 0) return -1;
    run->epoch_batches = batches;
    run->steps_per_epoch = batches / run->accumulate;
    if (run->steps_per_epoch < 1)
        return error_set(err, "--accumulate-grad-batches %d needs %d batches of %d images, the "
                              "dataset has %zu images", run->accumulate, run->accumulate,
                         run->batch_size, run->dataset.count);
    run->epochs = config->epochs >= 0 ? config->epochs
                                      : method_default_epochs(config->method, run->dataset.count,
                                                              config->batch_size);
    run->total_steps = config->max_steps > 0 ? config->max_steps
                                             : run->epochs * run->steps_per_epoch;
    // (cores - devices) / devices of the node: the rank's cores less its own.
    run->num_workers = config->num_workers >= 0 ? config->num_workers
                                                : cpu_default_workers(rank_cores(config), 1);
    return 0;
}

// "a b c" from a list (for the resume check), cut at size.
static const char *join_list(const StringList *list, char *out, size_t size) {
    out[0] = '\0';
    for (int i = 0; i < list->count; i++) {
        if (i) strncat(out, " ", size - strlen(out) - 1);
        strncat(out, list->items[i], size - strlen(out) - 1);
    }
    return out;
}

// --precision on the chosen device: auto is 16-mixed on the GPU (issue 9's
// default: fp16 activations, fp32 weights, the loss scaler on) and 32-true
// on the CPU. 16-mixed and bf16-mixed run on the cuda backend (2-byte
// activations) and on ref (tests: it rounds every activation to the 16-bit
// dtype as the GPU stores them, so a whole mixed-precision run, loss scaler
// included, has a CPU oracle), not on cpu.
static int choose_precision(TrainRun *run, ErrorMessage *err) {
    const char *asked = run->config->precision;
    const int gpu = strcmp(run->backend->name, "cuda") == 0;
    const int mixed_ok = gpu || strcmp(run->backend->name, "ref") == 0;
    const int f16 = strcmp(asked, "16-mixed") == 0 || (gpu && strcmp(asked, "auto") == 0);
    const int bf16 = strcmp(asked, "bf16-mixed") == 0;
    if ((f16 || bf16) && !mixed_ok)
        return error_set(err, "--precision %s needs a GPU; on CPU training runs in 32-true",
                         asked);
    run->precision = f16 ? "16-mixed" : bf16 ? "bf16-mixed" : "32-true";
    return backend_set_compute_dtype(run->backend,
                                     f16 ? COMPUTE_F16 : bf16 ? COMPUTE_BF16 : COMPUTE_F32, err);
}

// The backend first: the ranks agree through its memory, even on bad input.
// Returns 0, 2 (bad --accelerator or --precision) or 1.
static int setup_backend(TrainRun *run, ErrorMessage *err) {
    const TrainConfig *config = run->config;
    const int threads = config->threads > 0 ? config->threads : rank_cores(config);
    run->backend = backend_choose(config->accelerator, config->backend_name, config->gpu, threads,
                                  run->accelerator_note, sizeof run->accelerator_note, err);
    if (!run->backend) return 2;
    if (comm_attach_backend(run->comm, run->backend, err)) return 1;
    if (choose_precision(run, err)) return 2;
    run->agreed = run->backend->op.alloc(run->backend,
                                         ((size_t)run->world_size + 2) * sizeof(float));
    if (!run->agreed) return error_set(err, "out of memory"), 1;
    const int status = train_record_setup(run, err);
    if (status) return status;
    return step_gate_create(&run->gate, run->backend, METHOD_MAX_GROUPS, err) ? 1 : 0;
}

// The model's input as the run's identity records it (train_state.h), so
// that a resume with other channels, pixels, normalisation or ChannelDrop
// is refused naming them. 1 when it is the input of every run before
// these settings existed (RGB, 8-bit, ImageNet's normalisation).
static int describe_input(TrainRun *run) {
    const ViewSet *views = &run->method.views;
    const ChannelSettings *channels = &run->config->channels;
    char normalize[2 * AUGMENT_MAX_CHANNELS * 18], imagenet[sizeof normalize];
    char drop[AUGMENT_MAX_CHANNELS * 18] = "none";
    channel_normalize_format(views, normalize, sizeof normalize);
    ViewSet plain = *views;
    plain.normalize_count = 0;  // the default: ImageNet's
    channel_normalize_format(&plain, imagenet, sizeof imagenet);
    if (channels->keep) {
        size_t used = (size_t)snprintf(drop, sizeof drop, "%d:", channels->keep);
        for (int c = 0; c < channels->drop_count && used < sizeof drop; c++)
            used += (size_t)snprintf(drop + used, sizeof drop - used, "%s%.9g", c ? "," : "",
                                     (double)channels->drop_weights[c]);
    }
    const int input = view_input_channels(&views->views[0]), output = view_set_channels_out(views);
    snprintf(run->identity_input, sizeof run->identity_input,
             "channels=%d/%d pixels=%s normalize=%s channel_drop=%s", input, output,
             views->float_pixels ? "float" : "uint8", normalize, drop);
    return input == 3 && output == 3 && !views->float_pixels && !channels->keep &&
           strcmp(normalize, imagenet) == 0;
}

// --limit-train-batches as the checkpoint keeps it: a count "2", a fraction
// always with a point ("0.5", "1.0": Lightning tells them apart by type);
// NULL for none.
static const char *describe_batch_limit(const BatchLimit *limit, char *text, size_t size) {
    if (limit->value <= 0) return NULL;
    if (!limit->fraction) snprintf(text, size, "%.0f", limit->value);
    else if (limit->value == floor(limit->value)) snprintf(text, size, "%.1f", limit->value);
    else snprintf(text, size, "%.17g", limit->value);
    return text;
}

static int setup_method(TrainRun *run, ErrorMessage *err) {
    const TrainConfig *config = run->config;
    ViewSet views;
    if (build_views(run, &views, err)) return -1;
    MethodSetup setup = {
        .backend = run->backend,
        .batch = run->batch_size,
        .dataset_size = run->dataset.count,
        .total_steps = run->total_steps,
        .seed = config->seed,
        .initial_weights = config->checkpoint,
        .shape_weights = config->checkpoint ? config->checkpoint
                         : config->resume   ? run->checkpoint_path
                                            : NULL,
        .args = config->method_args.items,
        .arg_count = config->method_args.count,
        .comm = run->comm,
        .sync_batchnorm = config->sync_batchnorm,
        .embed_dim = config->embed_dim,
    };
    if (backbone_spec_parse(config->model, config->image_size, &setup.backbone, err))
        return error_prefix(err, "--model"), -1;
    for (int i = 0; i < config->model_args.count; i++)
        if (backbone_spec_apply_arg(&setup.backbone, config->model_args.items[i], err)) return -1;
    setup.backbone.in_channels = view_set_channels_out(&views);
    setup.backbone.activation_checkpointing =
        config->activation_checkpointing
            ? (config->activation_checkpointing_every > 0 ? config->activation_checkpointing_every
                                                          : 1)
            : 0;
    setup.backbone.batchnorm_synchronised = config->sync_batchnorm && run->world_size > 1;
    if (method_create(&run->method, config->method, &setup, &views, err)) return -1;
    run->method_ready = 1;
    if (run->scaler_on) run->method.loss_scale = loss_scaler_scale(&run->scaler);
    // Lightning's gradient_clip_val, where the method has not set its own.
    if (config->gradient_clip_val >= 0 && !run->method.defaults.grad_clip_fixed)
        run->method.defaults.grad_clip = (float)config->gradient_clip_val;
    const MethodDefaults *defaults = &run->method.defaults;
    const OptimizerKind kind = config->optimizer_auto ? defaults->optimizer : config->optimizer;
    const OptimizerConfig optimizer_config = optimizer_config_default(kind);
    for (int g = 0; g < run->method.group_count; g++) {
        run->optimizers[g] =
            optimizer_create(run->backend, run->method.groups[g].params, &optimizer_config, err);
        if (!run->optimizers[g] ||
            method_group_configure(&run->method.groups[g], run->optimizers[g], err))
            return error_prefix(err, "optimizer"), -1;
    }
    const double global_batch = (double)run->batch_size * run->world_size;
    // Another optimizer than the method's gets the method's second tuned
    // one when it has it (distillation), else LightlyTrain's generic
    // defaults for it (its *Args classes), not the method's tuned lr.
    double default_lr = defaults->base_lr, default_weight_decay = defaults->weight_decay;
    if (kind != defaults->optimizer && kind == defaults->other_optimizer) {
        default_lr = defaults->other_lr;
        default_weight_decay = defaults->other_weight_decay;
    } else if (kind != defaults->optimizer) {
        default_lr = kind == OPTIMIZER_LARS ? 0.3 : 1e-3;
        default_weight_decay = kind == OPTIMIZER_ADAMW ? 1e-2 : kind == OPTIMIZER_SGD ? 1e-4 : 0;
    }
    const double lr = config->lr >= 0 ? config->lr : default_lr;
    run->base_lr = lr * method_lr_scale(defaults, global_batch);
    run->weight_decay = config->weight_decay >= 0 ? config->weight_decay : default_weight_decay;
    // DINOv2: the weight decay follows a cosine to weight_decay_end, the lr
    // ends at min_lr (LightlyTrain: end_value = min_lr / lr)
    run->weight_decay_end = defaults->weight_decay_schedule ? defaults->weight_decay_end
                                                            : run->weight_decay;
    run->lr_end_factor = defaults->min_lr > 0 && run->base_lr > 0
                             ? defaults->min_lr / run->base_lr : 0.001;
    for (int g = 0; g < run->method.group_count; g++) {
        // via a local buffer: gcc -O1 cannot tell that the tag and the group
        // name, both inside *run, do not overlap (-Werror=restrict)
        char tag[sizeof run->lr_tags[g]];
        snprintf(tag, sizeof tag, "lr-%s/%s", optimizer_display_name(kind),
                 run->method.groups[g].name);
        memcpy(run->lr_tags[g], tag, sizeof tag);
    }
    run->warmup_steps = warmup_steps_for(run->total_steps, run->steps_per_epoch);
    if (defaults->warmup_steps > 0)  // at most total - 1 (LightlyTrain, for lightly's scheduler)
        run->warmup_steps = defaults->warmup_steps < run->total_steps - 1
                                ? defaults->warmup_steps : run->total_steps - 1;
    run->log_every = config->log_every > 0 ? config->log_every
                                           : (int)(run->steps_per_epoch < 50 ? run->steps_per_epoch
                                                                             : 50);
    backbone_spec_name(&setup.backbone, run->model_name, sizeof run->model_name);
    run->identity = (RunIdentity){
        .model = run->model_name,
        .method = method_kind_name(config->method),
        .ranks = run->world_size,
        .batch_size = run->batch_size,
        .image_size = config->image_size,
        .total_steps = run->total_steps,
        .dataset_size = (long)run->dataset.count,
        .seed = (long)config->seed,
        .accumulate = run->accumulate,
        .optimizer = optimizer_display_name(kind),
        .lr = run->base_lr,
        .weight_decay = run->weight_decay,
        .method_args = join_list(&config->method_args, run->identity_method_args,
                                 sizeof run->identity_method_args),
        .transforms = join_list(&config->transforms, run->identity_transforms,
                                sizeof run->identity_transforms),
        .input = run->identity_input,
        .input_is_default = describe_input(run),
        .embed_dim = config->embed_dim,
        .batch_limit = describe_batch_limit(&config->limit_train_batches, run->identity_batch_limit,
                                            sizeof run->identity_batch_limit),
        .steps_per_epoch = run->steps_per_epoch,
    };
    return 0;
}

static int setup_loader(TrainRun *run, ErrorMessage *err) {
    // The batches still to come: a resumed run's loader ends where the run
    // does (not total_steps batches after its start step). A complete run
    // takes none; 0 would mean endless, so it is given one it never takes.
    const uint64_t remaining = run->total_steps > run->start_step
                                   ? (uint64_t)(run->total_steps - run->start_step)
                                   : 1;
    LoaderConfig loader = {
        .dataset = &run->dataset,
        .views = run->method.views,
        .batch_size = run->batch_size,
        .seed = run->config->seed,
        .rank = run->rank,
        .world_size = run->world_size,
        .shuffle = 1,
        .start_batch = (uint64_t)run->start_step * (uint64_t)run->accumulate,
        .total_batches = remaining * (uint64_t)run->accumulate,
        .epoch_batches = (uint64_t)run->epoch_batches,
        .max_pixels = run->config->max_pixels,
        .ignore_exif_orientation = run->config->ignore_exif_orientation,
        .warn = train_warn,
        .warn_context = run,
    };
    loader_set_workers(&loader, run->num_workers);
    // Slots in the backend's host memory (pinned on the GPU), copied to the
    // device one batch ahead (train/batch_feed.h).
    batch_feed_loader_memory(&loader, run->backend);
    run->loader = loader_create(&loader, err);
    if (!run->loader) return -1;
    run->feed_ready = 1;  // batch_feed_free is safe after a failed init
    return batch_feed_init(&run->feed, run->backend, run->loader, &run->method.views,
                           run->batch_size, err);
}

static int setup_logs(TrainRun *run, int argc, char **argv, ErrorMessage *err) {
    const TrainConfig *config = run->config;
    char path[PATH_MAX];
    train_path_join(path, sizeof path, config->out, "train.log");
    if (run_log_open(&run->log, path, err)) return -1;
    run_log_line(run->log, "%s run", config->resume ? "resumed" : "new");
    run_log_command_line(run->log, argc, argv);
    run_log_system_info(run->log);
    return 0;
}

// The model's input: channels, pixels, normalisation, ChannelDrop, and the
// initial weights' first layer when it was adapted to the channels.
static void log_input(TrainRun *run) {
    const ViewSet *views = &run->method.views;
    const ChannelSettings *channels = &run->config->channels;
    char normalize[2 * AUGMENT_MAX_CHANNELS * 18];
    channel_normalize_format(views, normalize, sizeof normalize);
    run_log_line(run->log, "input: %d channel(s) from images of %d, %s pixels (--input-depth "
                           "%s), normalize %s%s", view_set_channels_out(views),
                 view_input_channels(&views->views[0]),
                 views->float_pixels ? "float" : "8-bit",
                 (const char *[]){"auto", "8", "float"}[run->config->input_depth], normalize,
                 channels->keep ? " (ChannelDrop)" : "");
    const Parameter *first = backbone_input_layer(&run->method.backbone);
    if (run->method.adapted_input_layers && first)
        train_message(run, "--checkpoint: %s adapted from 3 to %d input channels (timm's "
                           "adapt_input_conv)", first->name, first->torch_shape[1]);
}

static void log_configuration(TrainRun *run) {
    const TrainConfig *config = run->config;
    const Method *method = &run->method;
    if (run->rank != 0) return;
    const int global_batch = run->batch_size * run->world_size;
    if (run->comm && strcmp(run->comm->name, "single") != 0)
        train_message(run, "data parallel: %d ranks (%s, %d per node), global batch %d = %d per "
                           "rank, BatchNorm %s", run->world_size, run->comm->name,
                      run->comm->local_world_size, global_batch, run->batch_size,
                      run->method.batchnorm_sync ? "synchronised" : "per rank");
    if (run->comm && strcmp(run->comm->name, "single") != 0)
        train_message(run, "gradient average: %d buckets (%zu MB, the first %zu MB), %s",
                      run->gradient_sync.bucket_count, GRADIENT_BUCKET_BYTES >> 20,
                      GRADIENT_FIRST_BUCKET_BYTES >> 20,
                      run->gradient_overlap ? "overlapped with backward (--gradient-overlap true)"
                                            : "after backward (--gradient-overlap false)");
    train_message(run,
                  "train: %s, %s, %zu images, batch %d x %d accumulated, %ld steps/epoch, %ld "
                  "steps, %d workers, backend %s, precision %s",
                  run->model_name, method_kind_name(config->method), run->dataset.count,
                  run->batch_size, run->accumulate, run->steps_per_epoch, run->total_steps,
                  run->num_workers, run->backend->name, run->precision);
    char skipped[2048];  // what the scan left out: other files, hidden ones, unreadable links
    scan_summary_describe(&run->dataset.summary, skipped, sizeof skipped);
    if (skipped[0]) train_message(run, "dataset: %s", skipped);
    run_log_line(run->log, "accelerator: %s", run->accelerator_note);
    if (config->max_steps > 0)
        run_log_line(run->log, "length: %ld steps (--max-steps)", run->total_steps);
    else if (config->epochs >= 0)
        run_log_line(run->log, "length: %ld epochs (--epochs)", run->epochs);
    else if (method_default_steps(config->method))
        run_log_line(run->log, "length: %ld epochs (auto, LightlyTrain's for %s: ceil(%ld steps "
                               "x batch %d / %zu images))", run->epochs,
                     method_kind_name(config->method), method_default_steps(config->method),
                     config->batch_size, run->dataset.count);
    else
        run_log_line(run->log, "length: %ld epochs (auto)", run->epochs);
    if (config->limit_train_batches.value > 0)
        run_log_line(run->log, "epochs: %ld batches each (--limit-train-batches %g)",
                     run->epoch_batches, config->limit_train_batches.value);
    if (config->max_time_seconds >= 0) {
        char limit[32], spent[32];
        max_time_format(config->max_time_seconds, limit, sizeof limit);
        max_time_format(run->timer_offset, spent, sizeof spent);
        run_log_line(run->log, "time limit: --max-time %s (training time so far %s)", limit,
                     spent);
    }
    if (config->fast_dev_run)
        train_message(run, "fast_dev_run %d: %ld step(s), one epoch, then the checkpoint and the "
                           "export; no TensorBoard, metrics.jsonl or MLflow logs, no epoch files, "
                           "no early stopping (Lightning's)", config->fast_dev_run,
                      run->total_steps);
    if (config->min_epochs || config->min_steps)
        run_log_line(run->log, "early stops (--max-time, early_stopping) wait for --min-epochs %d "
                               "and --min-steps %d", config->min_epochs, config->min_steps);
    if (config->gradient_clip_val >= 0 && method->defaults.grad_clip_fixed)
        run_log_line(run->log, "--gradient-clip-val %g: not taken, %s clips at %g as "
                               "LightlyTrain's does", config->gradient_clip_val,
                     method_kind_name(config->method), (double)method->defaults.grad_clip);
    if (run->callbacks.device_stats && !run->device_stats.cpu && !run->device_stats.backend)
        run_log_line(run->log, "device_stats_monitor: nothing to log (cpu_stats=false, no GPU)");
    else if (run->callbacks.device_stats)
        run_log_line(run->log, "device_stats_monitor: %s%s%s with every logged step",
                     run->device_stats.cpu ? "the CPU's use, memory and swap" : "",
                     run->device_stats.cpu && run->device_stats.backend ? " and " : "",
                     run->device_stats.backend ? "the device memory the program holds" : "");
    run_log_line(run->log, "compute threads wait: %s", thread_wait_describe());
    // The pool per device of the design: (cores - devices) / devices over
    // the node, i.e. each rank's share of the cores less one for its device.
    if (config->num_workers == 0)
        run_log_line(run->log, "data workers: 0 (--num-workers): each batch is decoded when the "
                               "step asks for it, by one decoder process");
    else if (config->num_workers > 0)
        run_log_line(run->log, "data workers: %d per device (--num-workers)", run->num_workers);
    else
        run_log_line(run->log, "data workers: %d per device (auto: (cores - devices) / devices, "
                               "here %d cores per device less 1%s)", run->num_workers,
                     rank_cores(config), rank_cores(config) < 2 ? ", at least 1" : "");
    if (run->scaler_on)
        run_log_line(run->log, "loss scaling: on%s (start scale %g, growth interval %d)",
                     strcmp(run->precision, "16-mixed") == 0 ? "" : " (LTC_TEST_LOSS_SCALER, tests only)",
                     (double)run->scaler.config.initial_scale, run->scaler.config.growth_interval);
    run_log_line(run->log,
                 "config: lr %.6g (base %.6g at batch %d, %s-scaled to batch %d), weight "
                 "decay %.6g, warmup %ld steps, cosine to step %ld, grad clip %.3g, log every "
                 "%d steps, seed %llu, views %d (%d px global, %d px local)",
                 run->base_lr, run->base_lr / method_lr_scale(&method->defaults, global_batch),
                 method->defaults.reference_batch,
                 method->defaults.sqrt_lr_scaling ? "sqrt" : "linearly", global_batch,
                 run->weight_decay,
                 run->warmup_steps, run->total_steps, (double)method->defaults.grad_clip,
                 run->log_every, (unsigned long long)config->seed, method->views.count,
                 method->global_size, method->local_size);
    for (int g = 0; g < method->group_count; g++) {
        const MethodGroup *group = &method->groups[g];
        float low = 1.0f, high = 1.0f;  // the group's lr multipliers
        for (int i = 0; group->lr_scales && i < group->params->count; i++) {
            if (i == 0 || group->lr_scales[i] < low) low = group->lr_scales[i];
            if (i == 0 || group->lr_scales[i] > high) high = group->lr_scales[i];
        }
        run_log_line(run->log, "group %s: %zu parameters, frozen for %ld steps%s, lr x %.4g..%.4g",
                     group->name, parameter_set_elements(group->params), group->frozen_steps,
                     group->frozen_at_zero_lr && group->frozen_steps > 0 ? " (at lr 0)" : "",
                     low, high);
    }
    for (int i = 0; i < config->method_args.count; i++)
        run_log_line(run->log, "method arg: %s", config->method_args.items[i]);
    // A LightlyTrain model name may have chosen them (--model dinov2/vitb14).
    if (config->checkpoint) run_log_line(run->log, "initial weights: %s", config->checkpoint);
    else if (!config->resume)
        run_log_line(run->log, "initial weights: none (a random initialisation, seed %llu)",
                     (unsigned long long)config->seed);
    char paths[1024] = "";
    if (run->backend->op.describe_paths)
        run->backend->op.describe_paths(run->backend, paths, sizeof paths);
    if (paths[0]) run_log_line(run->log, "backend paths: %s", paths);
    if (run->backend->op.step_graph_begin || getenv("LTC_CUDA_GRAPHS"))
        run_log_line(run->log, "cuda graphs: %s", run->step_graphs_note);
    if (config->activation_checkpointing && config->activation_checkpointing_every > 1)
        run_log_line(run->log, "activation checkpointing: on (blocks 0, %d, %d, ... recomputed in "
                               "the backward)", config->activation_checkpointing_every,
                     2 * config->activation_checkpointing_every);
    else if (config->activation_checkpointing)
        run_log_line(run->log, "activation checkpointing: on (blocks recomputed in the backward)");
    if (method->embed.enabled)
        run_log_line(run->log, "embedding head: %d features to %d (--embed-dim; not in the "
                               "exported backbone, applied by embed)",
                     method->backbone.feature_dim, method->embed.dim);
    for (int i = 0; i < config->model_args.count; i++)
        run_log_line(run->log, "model arg: %s", config->model_args.items[i]);
    log_input(run);
}

static int setup_knn(TrainRun *run, ErrorMessage *err) {
    if (!run->config->knn_data) return 0;
    if (dataset_scan(run->config->knn_data, &run->knn_dataset, err))
        return error_prefix(err, "--knn-data"), -1;
    run->knn_labels = malloc(run->knn_dataset.count * sizeof *run->knn_labels);
    if (!run->knn_labels) return error_set(err, "out of memory");
    char **names = NULL;
    if (knn_labels_from_folders(&run->knn_dataset, run->knn_labels, &names, &run->knn_classes,
                                err))
        return error_prefix(err, "--knn-data"), -1;
    knn_labels_free(names, run->knn_classes);
    run->knn_enabled = 1;
    return 0;
}

// Bad input (folders, settings, resume): exit 2, before anything is
// written into --out. Every check, then one agreement of all ranks.
static int setup_checks(TrainRun *run, ErrorMessage *err) {
    const TrainConfig *config = run->config;
    // The lock first: a folder in use is named as such, and no run can end
    // and leave it filled between the checks and the lock.
    if (train_out_lock(run, err) || train_out_prepare(run, err) || setup_data(run, err) ||
        setup_knn(run, err) || setup_method(run, err) || train_graphs_decide(run, err))
        return 2;
    if (!config->resume) return 0;
    if (train_state_load(run->checkpoint_path, &run->method, run->optimizers,
                         run->scaler_on ? &run->scaler : NULL, &run->identity, &run->start_step,
                         &run->callback_state, err))
        return error_prefix(err, "--resume"), 2;
    run->timer_offset = run->callback_state.train_seconds;
    // a run resumed without a monitor keeps its epoch files by recency
    if (!run->callbacks.monitor_loss) run->callback_state.kept.count = 0;
    run->complete = run->start_step >= run->total_steps;
    return 0;
}

// Failures while setting up (exit 1): the output files (rank 0), the loader
// and the gradient buckets; --out taken by another run (2).
static int setup_run(TrainRun *run, int argc, char **argv, ErrorMessage *err) {
    const TrainConfig *config = run->config;
    if (run->rank == 0) {
        char path[PATH_MAX];
        train_path_join(path, sizeof path, config->out, "metrics.jsonl");
        const int status = train_out_create(run, err);
        if (status) return status;
        if (setup_logs(run, argc, argv, err) || train_out_tidy(run, err) ||
            ((!config->loggers || config->loggers->tensorboard) &&
             tb_writer_open(&run->events, run->events_dir, err)) ||
            ((!config->loggers || config->loggers->jsonl) &&
             metrics_jsonl_open(&run->metrics, path, config->resume != 0, err)))
            return 1;
    }
    // What rank 0 read from the logs decides collective work (a kNN
    // evaluation lost with a killed run): every rank takes its value.
    if (run->world_size > 1) {
        int64_t knn_logged = run->knn_logged_at_start;
        run->backend->op.upload(run->backend, run->agreed, &knn_logged, sizeof knn_logged);
        if (comm_broadcast(run->comm, run->agreed, sizeof knn_logged, 0, err)) return 1;
        run->backend->op.download(run->backend, &knn_logged, run->agreed, sizeof knn_logged);
        run->knn_logged_at_start = (int)knn_logged;
    }
    if (setup_loader(run, err) ||
        gradient_sync_plan(&run->gradient_sync, run->method.groups, run->method.group_count,
                           GRADIENT_FIRST_BUCKET_BYTES, GRADIENT_BUCKET_BYTES, err))
        return 1;
    return 0;
}

int train_setup(TrainRun *run, const TrainConfig *config, int argc, char **argv) {
    memset(run, 0, sizeof *run);
    run->config = config;
    run->callbacks = config->callbacks ? *config->callbacks : callbacks_default();
    run->comm = config->comm;
    run->gradient_overlap = config->gradient_overlap;
    run->rank = comm_rank(config->comm);
    run->world_size = comm_world_size(config->comm);
    ErrorMessage err = {{0}};
    // The backend first: without its memory the ranks cannot agree, so a
    // failure here ends them all (alike on every rank for bad flags).
    int status = setup_backend(run, &err);
    if (status) {
        train_error(run, "lightly-train-c train: %s", err.text);
        comm_abort(run->comm, status);
        return status;
    }
    if (run->callbacks.device_stats)  // (rank 0 logs them)
        device_stats_init(&run->device_stats, run->backend, run->callbacks.device_cpu_stats);
    status = setup_checks(run, &err);
    char message[sizeof err.text + 32];
    snprintf(message, sizeof message, "lightly-train-c train: %s", err.text);
    if (status) train_message(run, "%s", message);
    if ((status = train_agree(run, status, message))) return status;
    if ((status = train_check_settings(run))) return status;
    if (run->settings_warning[0]) train_message(run, "%s", run->settings_warning);
    status = setup_run(run, argc, argv, &err);
    snprintf(message, sizeof message, "lightly-train-c train: %s", err.text);
    if (status) train_message(run, "%s", message);
    if ((status = train_agree(run, status, message))) return status;
    if (run->rank == 0 && config->progress_bar)
        run->progress = progress_create(stderr, isatty(STDERR_FILENO), run->total_steps,
                                        run->steps_per_epoch, 10.0);
    log_configuration(run);
    if (run->start_step > 0 && !run->complete)
        train_message(run, "resuming from %s at step %ld of %ld", run->checkpoint_path,
                      run->start_step, run->total_steps);
    // The same weights everywhere from the start (a rank that read another
    // --checkpoint or last.ckpt would silently train something else).
    return train_check_replicas(run, run->start_step);
}

int train_knn_evaluate(TrainRun *run, double *top1, ErrorMessage *err) {
    Method *method = &run->method;
    // The backbone that is exported (DINO's teacher, else the student).
    Backbone *model = strcmp(method->export_part, "teacher_backbone") == 0 &&
                              method->ops->teacher
                          ? method->ops->teacher(method)
                          : &method->backbone;
    // Every rank embeds its share; rank 0 gets all rows and votes.
    const size_t count = run->knn_dataset.count, dim = (size_t)model->feature_dim;
    const int voter = run->rank == 0;
    float *features = voter ? malloc(count * dim * sizeof *features) : NULL;
    int32_t *labels = voter ? malloc(count * sizeof *labels) : NULL;
    uint8_t *failed = voter ? calloc(count, 1) : NULL;
    int status = 0;
    if (voter && (!features || !labels || !failed))
        status = error_set(err, "out of memory for %zu embeddings", count);
    status = train_agree(run, status ? 1 : 0, err->text) ? -1 : 0;
    EmbedConfig embed = {
        .image_size = method->global_size,
        .batch_size = method->max_batch,
        .num_workers = run->num_workers,
        .max_pixels = run->config->max_pixels,
        .ignore_exif_orientation = run->config->ignore_exif_orientation,
        .failed = failed,
        .comm = run->comm,
        .channels = view_set_channels_out(&method->views),
        .float_pixels = method->views.float_pixels,
        .normalize_count = method->views.normalize_count,
    };
    memcpy(embed.mean, method->views.mean, sizeof embed.mean);
    memcpy(embed.std, method->views.std, sizeof embed.std);
    if (!status) status = embed_dataset(model, 0, &run->knn_dataset, &embed, features, NULL, err);
    // Unreadable images (zero rows) are left out of the vote.
    size_t kept = 0;
    for (size_t i = 0; voter && !status && i < count; i++) {
        if (failed[i]) continue;
        memmove(features + kept * dim, features + i * dim, dim * sizeof *features);
        labels[kept++] = run->knn_labels[i];
    }
    if (voter && !status)
        status = knn_leave_one_out_top1(features, labels, (int)kept, (int)dim, run->knn_classes,
                                        run->config->knn_k, 0.1f, top1, err);
    free(features);
    free(labels);
    free(failed);
    return status;
}

void train_finish(TrainRun *run, RunTotals *totals, int status) {
    if (run->rank != 0) return;
    const LoaderStats stats = loader_stats(run->loader);
    totals->skipped_files = stats.skipped_files;
    totals->num_workers = run->num_workers;
    totals->batch_size = run->batch_size * run->world_size;
    totals->precision = run->precision ? run->precision : "32-true";
    totals->device = run->backend && strcmp(run->backend->name, "cuda") == 0 ? "gpu" : "cpu";
    char summary[4096];
    run_summary_format(totals, cpu_usable_cores(), summary, sizeof summary);
    fprintf(stderr, "%s", summary);
    run_log_line(run->log, "%s", summary);
    if (run->step_graphs)
        run_log_line(run->log, "cuda graphs: %ld step parts op by op, %ld captured, %ld replayed",
                     run->graph_steps[STEP_GRAPH_EAGER], run->graph_steps[STEP_GRAPH_CAPTURE],
                     run->graph_steps[STEP_GRAPH_REPLAY]);
    train_mlflow_end(run, status);
    if (status == 0) {
        fprintf(stderr, "checkpoint: %s\nexported backbone: %s (and %s for torch.load)\n%s",
                run->checkpoint_path, run->export_path, run->export_pt_path,
                run->events ? "tensorboard --logdir " : "");
        if (run->events) {  // the folder as a shell reads it, spaces and all
            shell_quote_args(stderr, 1, (char *const[]){(char *)run->config->out});
            fputc('\n', stderr);
        }
        run_log_line(run->log, "done: %s, %s", run->checkpoint_path, run->export_path);
    }
    if (run->final_message[0]) train_message(run, "%s", run->final_message);
}

void train_loader_free(TrainRun *run) {
    if (run->feed_ready) batch_feed_free(&run->feed);  // its copies read the loader's slots
    run->feed_ready = 0;
    if (run->loader) loader_destroy(run->loader);
    run->loader = NULL;
}

void train_teardown(TrainRun *run) {
    ErrorMessage err = {{0}};
    train_loader_free(run);
    for (int g = 0; g < METHOD_MAX_GROUPS; g++)
        if (run->optimizers[g]) optimizer_free(run->optimizers[g]);
    if (run->method_ready) method_free(&run->method);
    train_record_free(run);
    step_gate_free(&run->gate);
    gradient_sync_free(&run->gradient_sync);
    if (run->agreed) run->backend->op.free(run->backend, run->agreed);
    if (run->backend) backend_destroy(run->backend);
    if (run->dataset_ready) dataset_free(&run->dataset);
    if (run->knn_enabled || run->knn_labels) {
        free(run->knn_labels);
        if (run->knn_dataset.count) dataset_free(&run->knn_dataset);
    }
    if (run->events && tb_writer_close(run->events, &err))
        fprintf(stderr, "warning: %s\n", err.text);
    if (run->metrics && metrics_jsonl_close(run->metrics, &err))
        fprintf(stderr, "warning: %s\n", err.text);
    if (run->progress) progress_free(run->progress);
    if (run->log) run_log_close(run->log);
    if (run->out_lock_held && run->out_lock_fd >= 0) close(run->out_lock_fd);
    memset(run, 0, sizeof *run);
}
