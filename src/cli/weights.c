// `lightly-train-c weights`: the known weight names (list), downloading them
// ahead (fetch: on a cluster's login node, into the cache its compute nodes
// share) and where one is (path); and the download display of every command
// that fetches weights (see weights_cli.h).
#include "cli/weights_cli.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/commands.h"
#include "logging/progress.h"
#include "weights/cache.h"
#include "weights/names.h"
#include "weights/resolve.h"

#define WEIGHTS_PROGRAM "lightly-train-c weights"
#define BAR_WIDTH 24

// ---- the download display: a bar on a terminal, a line per 10% otherwise ----------------

typedef struct Display {
    int terminal;
    int decile;    // plain lines: the last 10% step printed
    double drawn;  // terminal: when the bar was last drawn (event seconds), -1: never
    int open;      // a bar is on screen without its newline
} Display;

static void format_bytes(int64_t bytes, char *out, size_t size) {
    if (bytes >= 1000000000) snprintf(out, size, "%.2f GB", (double)bytes / 1e9);
    else snprintf(out, size, "%.1f MB", (double)bytes / 1e6);
}

static void end_bar(Display *display) {
    if (display->open) fputc('\n', stderr);
    display->open = 0;
}

static void draw_bar(Display *display, const WeightsEvent *event, double rate) {
    char done[32], total[32], eta[32], bar[BAR_WIDTH + 1];
    format_bytes(event->done, done, sizeof done);
    if (event->total > 0) {
        const int filled = (int)((double)BAR_WIDTH * (double)event->done / (double)event->total);
        for (int i = 0; i < BAR_WIDTH; i++) bar[i] = i < filled ? '#' : '.';
        bar[BAR_WIDTH] = '\0';
        format_bytes(event->total, total, sizeof total);
        progress_format_duration(rate > 0 ? (double)(event->total - event->done) / rate : -1,
                                 eta, sizeof eta);
        fprintf(stderr, "\r  %s / %s %3d%% [%s] %.1f MB/s ETA %s\033[K", done, total,
                (int)(100 * event->done / event->total), bar, rate / 1e6, eta);
    } else {
        fprintf(stderr, "\r  %s %.1f MB/s\033[K", done, rate / 1e6);
    }
    display->open = 1;
    display->drawn = event->seconds;
}

static void print_start(Display *display, const WeightsEvent *event) {
    char total[32] = "size unknown", resumed[64] = "";
    if (event->total >= 0) format_bytes(event->total, total, sizeof total);
    if (event->resumed_from > 0) {
        char bytes[32];
        format_bytes(event->resumed_from, bytes, sizeof bytes);
        snprintf(resumed, sizeof resumed, ", continuing after %s", bytes);
    }
    const WeightsEntry *entry = weights_find(event->name);
    fprintf(stderr, "downloading %s (%s%s) from %s\n", event->name, total, resumed, event->url);
    if (entry) fprintf(stderr, "  licence: %s, %s\n", entry->licence, entry->licence_url);
    display->decile = event->total > 0 ? (int)(10 * event->done / event->total) : 0;
    display->drawn = -1;
}

static void on_event(void *user, const WeightsEvent *event) {
    Display *display = user;
    const double rate = event->seconds > 0
                            ? (double)(event->done - event->resumed_from) / event->seconds : 0;
    switch (event->kind) {
    case WEIGHTS_WAITING:
        end_bar(display);
        fprintf(stderr, "%s: another process is downloading it; waiting for it (%s.lock)\n",
                event->name, event->path);
        break;
    case WEIGHTS_START:
        end_bar(display);
        print_start(display, event);
        break;
    case WEIGHTS_PROGRESS:
        if (display->terminal) {
            if (display->drawn < 0 || event->seconds - display->drawn >= PROGRESS_REDRAW_SECONDS ||
                event->done == event->total)
                draw_bar(display, event, rate);
        } else if (event->total > 0 && 10 * event->done / event->total > display->decile) {
            char done[32], total[32];
            display->decile = (int)(10 * event->done / event->total);
            format_bytes(event->done, done, sizeof done);
            format_bytes(event->total, total, sizeof total);
            fprintf(stderr, "%s: %d%% (%s of %s, %.1f MB/s)\n", event->name,
                    display->decile * 10, done, total, rate / 1e6);
        }
        break;
    case WEIGHTS_RETRY:
        end_bar(display);
        fprintf(stderr, "%s: %s; retrying in %.0f s\n", event->name, event->detail, event->wait);
        break;
    case WEIGHTS_DONE:
        end_bar(display);
        fprintf(stderr, "%s: %s; saved as %s\n", event->name, event->detail, event->path);
        break;
    case WEIGHTS_DAMAGED:
        end_bar(display);
        fprintf(stderr, "%s: the cached file %s %s; downloading it again\n", event->name,
                event->path, event->detail);
        break;
    case WEIGHTS_UNVERIFIED:
        fprintf(stderr, "%s: %s has no download record this version reads (an earlier or a later "
                        "version's download, or put there by hand): used without checking its "
                        "size or SHA-256\n",
                event->name, event->path);
        break;
    }
    fflush(stderr);
}

// repair: `weights fetch`, which re-hashes a cached file and downloads a
// damaged one anew; the other commands check its size only.
static int fetch(const char *text, int repair, char *path, size_t size, ErrorMessage *err) {
    Display display = {.terminal = isatty(STDERR_FILENO), .drawn = -1};
    const int status = weights_fetch(text, repair, on_event, &display, path, size, NULL, err);
    end_bar(&display);
    return status;
}

int weights_cli_prepare(const char *program, const char *text, const char *hint) {
    char path[4096];
    ErrorMessage err = {{0}};
    if (fetch(text, 0, path, sizeof path, &err) == 0) return 0;
    fprintf(stderr, "%s: %s%s\n", program, err.text, hint ? hint : "");
    return 2;
}

// ---- the command ---------------------------------------------------------------------

static void print_help(FILE *out) {
    fprintf(out,
            "usage: lightly-train-c weights [list]\n"
            "       lightly-train-c weights fetch NAME...\n"
            "       lightly-train-c weights path NAME\n"
            "\n"
            "Pretrained weights by name, for --method-arg teacher=NAME, --checkpoint NAME\n"
            "(train, embed). list: the known names (LightlyTrain's), their size, licence,\n"
            "source and whether they are cached. fetch: downloads them now (e.g. on a\n"
            "cluster's login node, into a cache the compute nodes share; run the job with\n"
            "HF_HUB_OFFLINE=1); a file already cached is checked against the SHA-256 its\n"
            "download verified and downloaded again when it differs. path: prints the\n"
            "cached file. Besides the names, any Hugging Face repository\n"
            "ORG/NAME[@REVISION][:FILE] whose safetensors file holds a ResNet or ViT in a\n"
            "naming this program reads (default FILE: model.safetensors). Ultralytics'\n"
            "weights (ultralytics/yolo11s.pt) come from its GitHub release, as Ultralytics\n"
            "downloads them, unless the working directory holds yolo11s.pt, which is used.\n"
            "torchvision's weights (torchvision/convnext_tiny.IMAGENET1K_V1) come from\n"
            "download.pytorch.org, checked against the SHA-256 digits in their file names.\n"
            "\n"
            "Cache: $LIGHTLY_TRAIN_CACHE_DIR, else $XDG_CACHE_HOME/lightly-train-c, else\n"
            "~/.cache/lightly-train-c; files the Hugging Face libraries downloaded\n"
            "($HF_HUB_CACHE, $HF_HOME/hub) and PyTorch's ($TORCH_HOME/hub/checkpoints)\n"
            "are used as they are. HF_ENDPOINT selects a mirror, HF_TOKEN (or\n"
            "$HF_HOME/token) opens gated repositories; LIGHTLY_TRAIN_GITHUB_ENDPOINT\n"
            "(https://github.com) selects GitHub's, LIGHTLY_TRAIN_TORCHVISION_ENDPOINT\n"
            "(https://download.pytorch.org) torchvision's. A download slower than\n"
            "LIGHTLY_TRAIN_DOWNLOAD_MIN_BYTES_PER_SEC (1000) for\n"
            "LIGHTLY_TRAIN_DOWNLOAD_CHUNK_TIMEOUT_SEC (180) is retried\n"
            "LIGHTLY_TRAIN_DOWNLOAD_RETRIES (5) times; one not complete within\n"
            "LIGHTLY_TRAIN_DOWNLOAD_DEADLINE_SEC (21600) fails, its part kept. See\n"
            "docs/weights.md and docs/commands.md.\n"
            "\n" EXIT_STATUS_HELP "\n");
}

static int list_names(void) {
    int count;
    const WeightsEntry *entries = weights_entries(&count);
    char root[4096];
    ErrorMessage err = {{0}};
    if (weights_cache_root(root, sizeof root, &err)) snprintf(root, sizeof root, "(%s)", err.text);
    int name_width = 20, model_width = 18;  // the columns' widths: the longest entries'
    for (int i = 0; i < count; i++) {
        const int name = (int)strlen(entries[i].name), model = (int)strlen(entries[i].arch);
        if (name >= name_width) name_width = name + 1;
        if (model >= model_width) model_width = model + 1;
    }
    printf("%-*s %-*s %-10s %-15s %-44s %s\n", name_width, "name", model_width, "model", "size",
           "licence", "source: Hugging Face repository, GitHub release, torchvision", "cached");
    for (int i = 0; i < count; i++) {
        const WeightsEntry *entry = &entries[i];
        char path[4096], size[32] = "", cached[8] = "no", source[300];
        if (entry->source == WEIGHTS_GITHUB_RELEASE)
            snprintf(source, sizeof source, "%s %s", entry->repo, entry->release);
        else if (entry->source == WEIGHTS_TORCHVISION)
            snprintf(source, sizeof source, "download.pytorch.org %s", entry->file);
        else
            snprintf(source, sizeof source, "%s", entry->repo);
        struct stat info;
        if (weights_local_path(entry->name, path, sizeof path, NULL) == 0 &&
            stat(path, &info) == 0) {
            format_bytes((int64_t)info.st_size, size, sizeof size);
            snprintf(cached, sizeof cached, "yes");
        } else if (entry->hub_size) {
            snprintf(size, sizeof size, "%s", entry->hub_size);
        } else {  // F32: 4 bytes a parameter
            snprintf(size, sizeof size, "~%.0f MB", entry->params_millions * 4);
        }
        printf("%-*s %-*s %-10s %-15s %-44s %s\n", name_width, entry->name, model_width,
               entry->arch, size, entry->licence, source, cached);
    }
    printf("\nDefault teachers (LightlyTrain's): distillation %s, distillationv1 and v2 %s.\n"
           "Also any Hugging Face repository ORG/NAME[@REVISION][:FILE], e.g. "
           "timm/resnet50.tv2_in1k.\nCache: %s (lightly-train-c weights --help)\n",
           weights_default_teacher("distillation"), weights_default_teacher("distillationv1"),
           root);
    return 0;
}

int command_weights(int argc, char **argv) {
    const char *verb = argc > 1 ? argv[1] : "list";
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            print_help(stdout);
            return 0;
        }
    if (strcmp(verb, "list") == 0 && argc <= 2) return list_names();
    const int fetching = strcmp(verb, "fetch") == 0, locating = strcmp(verb, "path") == 0;
    if ((!fetching && !locating) || argc < 3 || (locating && argc != 3)) {
        fprintf(stderr, "%s: expected 'list', 'fetch NAME...' or 'path NAME' (see --help)\n",
                WEIGHTS_PROGRAM);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        char path[4096];
        ErrorMessage err = {{0}};
        int status = fetching ? fetch(argv[i], 1, path, sizeof path, &err)
                              : weights_local_path(argv[i], path, sizeof path, &err);
        struct stat info;
        if (status == 0 && stat(path, &info) != 0)
            status = error_set(&err, "%s: no such file, and not a weights name", argv[i]);
        if (status != 0) {
            fprintf(stderr, "%s %s: %s\n", WEIGHTS_PROGRAM, verb, err.text);
            return 2;
        }
        printf("%s\n", path);
    }
    return 0;
}
