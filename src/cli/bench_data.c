// `lightly-train-c bench-data`: runs the input pipeline alone (scan, read,
// decode, augment into batches, no model) and reports images/s, where worker
// time goes, skipped files and what would bound training.
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "augment/augment.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "data/loader.h"
#include "data/scan.h"
#include "util/cpu.h"

static volatile sig_atomic_t interrupted;  // the signal number, 0 while running

static void on_interrupt(int signal_number) { interrupted = signal_number; }

static void print_warning(void *context, const char *message) {
    (void)context;
    fprintf(stderr, "warning: %s\n", message);
}

typedef struct BenchDataArgs {
    const char *data;
    int method;  // index into method_names
    int batch_size;
    int num_workers;  // -1 = auto
    int image_size;
    int local_size;
    int local_views;
    int steps;
    int warmup_steps;
    int seed;
    double max_pixels;
    int exif_orientation;  // index into OPTION_BOOLEAN_CHOICES
    StringList transform_overrides;  // "KEY=VALUE" for view_set_override
    int num_channels;  // --num-channels: other than 3 reads float pixels
    int input_depth;   // index into depth_names
} BenchDataArgs;

static const char *const method_names[] = {"simclr", "dino", NULL};
static const char *const depth_names[] = {"auto", "8", "float", NULL};  // as train's

static void print_scan_summary(const Dataset *dataset, double seconds) {
    char skipped[2048];
    scan_summary_describe(&dataset->summary, skipped, sizeof skipped);
    printf("dataset: %zu images in '%s' (listed in %.2f s)%s%s\n", dataset->count, dataset->root,
           seconds, skipped[0] ? "; " : "", skipped);
}

// One line per format read: its share of the images and what one worker
// makes of it (read + decode + augment), the figure to compare formats by.
static void print_formats(const LoaderStats *stats) {
    for (int f = 0; f < IMAGE_FORMAT_COUNT; f++) {
        if (stats->format_images[f] == 0 || stats->format_seconds[f] <= 0) continue;
        printf("format %s: %llu images, %.1f images/s per worker (%.2f ms each)\n",
               image_format_name((ImageFormat)f), (unsigned long long)stats->format_images[f],
               (double)stats->format_images[f] / stats->format_seconds[f],
               1e3 * stats->format_seconds[f] / (double)stats->format_images[f]);
    }
}

// The verdict: which resource bounds the pipeline, with what would help.
static void print_verdict(const LoaderStats *stats, int workers, double wall_seconds,
                          double images_per_second) {
    const double busy = stats->read_seconds + stats->decode_seconds + stats->augment_seconds;
    if (busy <= 0.0) return;
    const double read_share = stats->read_seconds / busy;
    const double per_worker = images_per_second / workers;
    const double utilisation = busy / (wall_seconds * workers);
    if (read_share > 0.5) {
        printf("verdict: I/O-bound: reading files takes %.0f%% of worker time; faster storage "
               "(local SSD, files in page cache) helps more than more workers\n",
               100.0 * read_share);
    } else {
        printf("verdict: CPU-bound: decode + augment take %.0f%% of worker time (workers %.0f%% "
               "busy); each worker adds about %.0f images/s, so more cores/workers help\n",
               100.0 * (1.0 - read_share), 100.0 * utilisation, per_worker);
    }
}

static int bench_data_run(const BenchDataArgs *args) {
    ErrorMessage err = {{0}};
    // Line by line even into a file or pipe: the report (stdout) and an
    // error (stderr) keep their order, so an error is the last line.
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGINT, on_interrupt);  // before any work: a signal while scanning stops cleanly
    signal(SIGTERM, on_interrupt);
    ViewSet views;
    if (args->method == 0)
        view_set_simclr(&views, args->image_size);
    else
        view_set_dino(&views, args->image_size, args->local_size, args->local_views);
    if (view_set_overrides(&views, (const char *const *)args->transform_overrides.items,
                           args->transform_overrides.count, &err) != 0) {
        fprintf(stderr, "lightly-train-c bench-data: --transform: %s\n", err.text);
        return 2;
    }
    Dataset dataset;
    const double scan_start = time_now();
    if (dataset_scan(args->data, &dataset, &err) != 0) {
        fprintf(stderr, "lightly-train-c bench-data: %s\n", err.text);
        return 2;
    }
    print_scan_summary(&dataset, time_now() - scan_start);
    // train's rule: float pixels for other than 3 channels, for --input-depth
    // float, and (auto) when the first image has more than 8 bits.
    if (args->input_depth == 1 && args->num_channels != 3) {
        fprintf(stderr, "lightly-train-c bench-data: --input-depth 8 reads 8-bit RGB: "
                        "--num-channels %d needs float pixels\n", args->num_channels);
        dataset_free(&dataset);
        return 2;
    }
    const ChannelSettings channels = {.channels = args->num_channels};
    const int float_pixels = args->input_depth == 2 ||
                             (args->input_depth == 0 &&
                              (args->num_channels != 3 ||
                               loader_first_image_is_deep(&dataset, (uint64_t)args->max_pixels)));
    view_set_apply_channels(&views, &channels, float_pixels);
    if (float_pixels)  // the 8-bit RGB report stays as it was
        printf("input: %d channel(s), float pixels\n", args->num_channels);

    LoaderConfig config = {
        .dataset = &dataset,
        .batch_size = args->batch_size,
        .seed = (uint64_t)args->seed,
        .rank = 0,
        .world_size = 1,
        .shuffle = 1,
        .total_batches = (uint64_t)(args->steps + args->warmup_steps),
        .max_pixels = (uint64_t)args->max_pixels,
        .ignore_exif_orientation = args->exif_orientation != 0,
        .warn = print_warning,
    };
    config.views = views;
    const int cores = cpu_usable_cores();
    config.num_workers =
        args->num_workers > 0 ? args->num_workers : cpu_default_workers(cores, 1);
    if ((size_t)config.batch_size > dataset.count) {
        fprintf(stderr, "warning: batch size %d is larger than the dataset; using %zu\n",
                config.batch_size, dataset.count);
        config.batch_size = (int)dataset.count;
    }

    printf("pipeline: %s, %d view(s) (", method_names[args->method], config.views.count);
    for (int v = 0; v < config.views.count; v++)
        printf("%s%d", v ? " " : "", config.views.views[v].size);
    printf(" px), batch %d, %d worker(s) (%d usable core(s)), SIMD %s, %d steps after %d "
           "warm-up\n",
           config.batch_size, config.num_workers, cores, cpu_has_avx2() ? "AVX2" : "scalar",
           args->steps, args->warmup_steps);

    Loader *loader = loader_create(&config, &err);
    if (!loader) {
        fprintf(stderr, "lightly-train-c bench-data: %s\n", err.text);
        dataset_free(&dataset);
        return 2;
    }

    // The workers start with the loader: what they made before the clock
    // starts is not measured, warm-up or not.
    LoaderStats at_start = loader_stats(loader);
    double start = time_now();
    int measured = 0, status = 0;
    for (int step = 0; step < args->steps + args->warmup_steps && !interrupted; step++) {
        const Batch *batch = loader_next(loader, NULL, &err);
        if (!batch) {  // reported after the summary, as the last line
            if (!err.text[0]) error_set(&err, "loader stopped");
            status = 1;
            break;
        }
        loader_release(loader, batch);
        if (step + 1 == args->warmup_steps) {
            at_start = loader_stats(loader);
            start = time_now();
        }
        if (step >= args->warmup_steps) measured++;
    }
    const double wall = time_now() - start;
    LoaderStats stats = loader_stats(loader);
    loader_destroy(loader);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);

    stats.read_seconds -= at_start.read_seconds;
    stats.decode_seconds -= at_start.decode_seconds;
    stats.augment_seconds -= at_start.augment_seconds;
    for (int f = 0; f < IMAGE_FORMAT_COUNT; f++) {
        stats.format_seconds[f] -= at_start.format_seconds[f];
        stats.format_images[f] -= at_start.format_images[f];
    }
    // The workers run ahead of the consumer (the loader's ring), so batches
    // taken in the window may have been made during warm-up: the rate is the
    // images the workers made in the window over its length, and a window
    // whose batches were all made before it measured nothing.
    const double produced = (double)(stats.images - at_start.images);
    if (measured > 0 && produced == 0)
        printf("throughput: not measured: the %d measured batch(es) were made during warm-up "
               "(the workers run ahead of the steps); use more --steps\n", measured);
    if (measured > 0 && wall > 0 && produced > 0) {
        const double rate = produced / wall;
        const double busy = stats.read_seconds + stats.decode_seconds + stats.augment_seconds;
        printf("throughput: %.1f images/s (%.1f per worker), %.1f views/s: %.0f images made in "
               "%.2f s (%d batches measured)\n",
               rate, rate / config.num_workers, rate * config.views.count, produced, wall,
               measured);
        if (busy > 0)
            printf("worker time: read %.1f%%, decode %.1f%%, augment %.1f%% (per image: read "
                   "%.2f ms, decode %.2f ms, augment %.2f ms)\n",
                   100 * stats.read_seconds / busy, 100 * stats.decode_seconds / busy,
                   100 * stats.augment_seconds / busy, 1e3 * stats.read_seconds / produced,
                   1e3 * stats.decode_seconds / produced, 1e3 * stats.augment_seconds / produced);
        print_verdict(&stats, config.num_workers, wall, rate);
        print_formats(&stats);
    }
    printf("skipped files: %llu (batch positions substituted: %llu)\n",
           (unsigned long long)stats.skipped_files, (unsigned long long)stats.replacements);
    if (interrupted) {
        printf("interrupted after %d measured batches\n", measured);
        status = 128 + interrupted;  // the shell's convention: 130 SIGINT, 143 SIGTERM
    }
    if (status == 1) fprintf(stderr, "lightly-train-c bench-data: %s\n", err.text);
    dataset_free(&dataset);
    return status;
}

int command_bench_data(int argc, char **argv) {
    BenchDataArgs args = {
        .method = 0,
        .batch_size = 128,
        .num_workers = -1,
        .image_size = 224,
        .local_size = 96,
        .local_views = 6,
        .steps = 50,
        .warmup_steps = 2,
        .seed = 0,
        .max_pixels = (double)DECODE_DEFAULT_MAX_PIXELS,
        .num_channels = 3,
    };
    const OptionSpec specs[] = {
        {.name = "data", .type = OPTION_STRING, .value = &args.data, .metavar = "DIR",
         .help = "folder of images (searched recursively)", .required = 1},
        {.name = "method", .type = OPTION_CHOICE, .value = &args.method, .metavar = "NAME",
         .help = "view transforms of this SSL method", .choices = method_names},
        {.name = "batch-size", .type = OPTION_INT, .value = &args.batch_size, .metavar = "N",
         .help = "images per batch", .min = 1, .max = 65536},
        {.name = "num-workers", .type = OPTION_INT, .value = &args.num_workers,
         .metavar = "N|auto", .help = "worker threads (auto: usable cores - 1)", .min = 1,
         .max = 1024, .allow_auto = 1},
        {.name = "image-size", .type = OPTION_INT, .value = &args.image_size, .metavar = "N",
         .help = "side of the (global) views in pixels", .min = 8, .max = 4096},
        {.name = "local-size", .type = OPTION_INT, .value = &args.local_size, .metavar = "N",
         .alias = "local-image-size", .help = "dino: side of the local views (train's "
                                              "--local-image-size)", .min = 8, .max = 4096},
        {.name = "local-views", .type = OPTION_INT, .value = &args.local_views, .metavar = "N",
         .help = "dino: number of local views", .min = 0, .max = AUGMENT_MAX_VIEWS - 2},
        {.name = "steps", .type = OPTION_INT, .value = &args.steps, .metavar = "N",
         .help = "batches to measure", .min = 1, .max = 1000000000},
        {.name = "warmup-steps", .type = OPTION_INT, .value = &args.warmup_steps, .metavar = "N",
         .help = "batches run before measuring", .min = 0, .max = 1000000},
        {.name = "seed", .type = OPTION_INT, .value = &args.seed, .metavar = "N",
         .help = "random seed", .min = 0, .max = 2147483647},
        MAX_PIXELS_OPTION(&args.max_pixels),
        EXIF_ORIENTATION_OPTION(&args.exif_orientation),
        {.name = "transform", .type = OPTION_STRING, .value = &args.transform_overrides,
         .metavar = "[SCOPE.]KEY=VALUE", .repeatable = 1,
         .help = "change a view parameter, e.g. blur_p=0.2 or local.scale_max=0.2"},
        {.name = "num-channels", .type = OPTION_INT, .value = &args.num_channels,
         .metavar = "N", .help = "channels the images are read with (as train's)", .min = 1,
         .max = AUGMENT_MAX_CHANNELS},
        {.name = "input-depth", .type = OPTION_CHOICE, .value = &args.input_depth,
         .metavar = "auto|8|float", .help = "8-bit RGB or float pixels (as train's)",
         .choices = depth_names},
    };
    const OptionParser parser = {
        .program = "lightly-train-c bench-data",
        .summary = "Runs the input pipeline alone (read, decode, augment; no model) and "
                   "reports images/s, where worker time goes and what bounds training.",
        .epilog = EXIT_STATUS_HELP,
        .specs = specs,
        .count = (int)(sizeof specs / sizeof specs[0]),
    };
    int exit_status = 0;
    if (options_parse_command(&parser, argc, argv, &exit_status)) return exit_status;
    return bench_data_run(&args);
}
