// The known weight names and the parsing of hub references (see names.h).
#include "weights/names.h"

#include <stdio.h>
#include <string.h>

#define APACHE "Apache-2.0"
#define APACHE_URL "https://www.apache.org/licenses/LICENSE-2.0"
#define DINOV3 "DINOv3 License"
#define DINOV3_URL "https://ai.meta.com/resources/models-and-libraries/dinov3-license"
#define AGPL "AGPL-3.0"
#define AGPL_URL "https://ultralytics.com/license"
#define BSD3 "BSD-3-Clause"
#define BSD3_URL "https://github.com/pytorch/vision/blob/main/LICENSE"

// Ultralytics' released weights, as ultralytics 8.4.190 downloads them
// (ultralytics/utils/downloads.py: attempt_download_asset(file,
// repo="ultralytics/assets", release="v8.4.0") fetches
// https://github.com/ultralytics/assets/releases/download/v8.4.0/<file> for
// the names of GITHUB_ASSETS_NAMES, yolov8{n,s,m,l,x}.pt, yolov8{n,...}-oiv7.pt,
// yolo11{n,s,m,l,x}.pt, yolo12{n,s,m,l,x}.pt, yolo26{n,s,m,l,x}.pt, yolov5{n,s,m,l,x}{,6}u.pt
// yolov8x-pose-p6.pt, yolo26{n,...}-sem.pt, -sem-ade20k.pt and -depth.pt,
// yolov8{s,m,l,x}-world.pt and -worldv2.pt among them), after
// looking for <file> in the working
// directory. LightlyTrain 0.18 passes "ultralytics/yolo11s.pt" to
// ultralytics.YOLO("yolo11s.pt") (_models/ultralytics/ultralytics_package.py),
// so this is its source too. No SHA-256 is published for these assets that
// could be looked up here: the size the server sends is checked, and the
// download records the SHA-256 received. Sizes: the whole model's
// parameters (docs/models.md) at 2 bytes each (the files hold F16).
#define ULTRALYTICS_RELEASE "v8.4.0"
#define HUB WEIGHTS_HUGGING_FACE, NULL, NULL
#define ULTRALYTICS(stem, params, size)                                                      \
    {"ultralytics/" stem ".pt", stem, "ultralytics/assets", AGPL, AGPL_URL, params, size, NULL, \
     WEIGHTS_GITHUB_RELEASE, ULTRALYTICS_RELEASE, stem ".pt"}

// torchvision's ImageNet weights of the models it alone has here (its
// ConvNeXts and ShuffleNetV2s; its ResNets' are timm's copies on the hub,
// cli/model_weights.c), as torchvision 0.29.2's weights enums name them
// (ConvNeXt_Tiny_Weights.IMAGENET1K_V1, their DEFAULT) and
// load_state_dict_from_url downloads them: https://download.pytorch.org/
// models/FILE, the SHA-256's first hex digits in FILE. Sizes: the enums'
// _file_size (MB).
#define TORCHVISION(model, file, params, size)                                              \
    {"torchvision/" model ".IMAGENET1K_V1", "torchvision/" model, "pytorch/vision", BSD3,    \
     BSD3_URL, params, size, NULL, WEIGHTS_TORCHVISION, NULL, file}

// LightlyTrain's names (its dinov2_vit and dinov3 packages) -> timm's copies
// on the Hugging Face Hub, whose safetensors files this program reads
// (nn/vit_names.h: timm and timm Eva naming; nn/convnext_names.h). LightlyTrain itself downloads
// .pth files from dl.fbaipublicfiles.com (DINOv2) and its own S3 bucket
// (DINOv3): the same weights, in a container this table does not use.
// DINOv2's plain names have 4 registers, as LightlyTrain's do ("-noreg":
// none). timm's DINOv3 copies are ungated (docs/weights.md).
static const WeightsEntry entries[] = {
    {"dinov2/vits14", "vit_s14_reg4", "timm/vit_small_patch14_reg4_dinov2.lvd142m", APACHE,
     APACHE_URL, 21.6, "88.2 MB", NULL, HUB},
    {"dinov2/vitb14", "vit_b14_reg4", "timm/vit_base_patch14_reg4_dinov2.lvd142m", APACHE,
     APACHE_URL, 85.7, NULL, NULL, HUB},
    {"dinov2/vitl14", "vit_l14_reg4", "timm/vit_large_patch14_reg4_dinov2.lvd142m", APACHE,
     APACHE_URL, 303.2, "1.22 GB", NULL, HUB},
    {"dinov2/vitg14", "vit_g14_reg4", "timm/vit_giant_patch14_reg4_dinov2.lvd142m", APACHE,
     APACHE_URL, 1130, "4.55 GB", NULL, HUB},
    {"dinov2/vits14-noreg", "vit_s14", "timm/vit_small_patch14_dinov2.lvd142m", APACHE,
     APACHE_URL, 21.6, "88.2 MB", NULL, HUB},
    {"dinov2/vitb14-noreg", "vit_b14", "timm/vit_base_patch14_dinov2.lvd142m", APACHE,
     APACHE_URL, 85.7, "346 MB",
     "55cbb5d887b336d430e649c277b85a1429e724871f9d02ac16203235886d8c7b", HUB},
    {"dinov2/vitl14-noreg", "vit_l14", "timm/vit_large_patch14_dinov2.lvd142m", APACHE,
     APACHE_URL, 303.2, "1.22 GB", NULL, HUB},
    {"dinov2/vitg14-noreg", "vit_g14", "timm/vit_giant_patch14_dinov2.lvd142m", APACHE,
     APACHE_URL, 1130, "4.55 GB", NULL, HUB},
    {"dinov3/vits16", "dinov3/vits16", "timm/vit_small_patch16_dinov3.lvd1689m", DINOV3,
     DINOV3_URL, 21.6, "86.4 MB", NULL, HUB},
    {"dinov3/vits16plus", "dinov3/vits16plus", "timm/vit_small_plus_patch16_dinov3.lvd1689m",
     DINOV3, DINOV3_URL, 28.7, "115 MB", NULL, HUB},
    {"dinov3/vitb16", "dinov3/vitb16", "timm/vit_base_patch16_dinov3.lvd1689m", DINOV3,
     DINOV3_URL, 85.7, NULL, NULL, HUB},
    {"dinov3/vitl16", "dinov3/vitl16", "timm/vit_large_patch16_dinov3.lvd1689m", DINOV3,
     DINOV3_URL, 303.2, NULL, NULL, HUB},
    {"dinov3/vith16plus", "dinov3/vith16plus", "timm/vit_huge_plus_patch16_dinov3.lvd1689m",
     DINOV3, DINOV3_URL, 840.6, "3.36 GB", NULL, HUB},
    // DINOv3's ConvNeXts: timm's copies in timm's names, loaded into DINOv3's
    // (the name's architecture: nn/convnext_weights.h translates)
    {"dinov3/convnext-tiny", "dinov3/convnext-tiny", "timm/convnext_tiny.dinov3_lvd1689m", DINOV3,
     DINOV3_URL, 27.8, NULL, NULL, HUB},
    {"dinov3/convnext-small", "dinov3/convnext-small", "timm/convnext_small.dinov3_lvd1689m",
     DINOV3, DINOV3_URL, 49.5, NULL, NULL, HUB},
    {"dinov3/convnext-base", "dinov3/convnext-base", "timm/convnext_base.dinov3_lvd1689m", DINOV3,
     DINOV3_URL, 87.6, NULL, NULL, HUB},
    {"dinov3/convnext-large", "dinov3/convnext-large", "timm/convnext_large.dinov3_lvd1689m",
     DINOV3, DINOV3_URL, 196.2, NULL, NULL, HUB},
    TORCHVISION("convnext_tiny", "convnext_tiny-983f1562.pth", 28.59, "109 MB"),
    TORCHVISION("convnext_small", "convnext_small-0c510722.pth", 50.22, "192 MB"),
    TORCHVISION("convnext_base", "convnext_base-6075fbad.pth", 88.59, "338 MB"),
    TORCHVISION("convnext_large", "convnext_large-ea097f82.pth", 197.77, "755 MB"),
    TORCHVISION("shufflenet_v2_x0_5", "shufflenetv2_x0.5-f707e7126e.pth", 1.37, "5.3 MB"),
    TORCHVISION("shufflenet_v2_x1_0", "shufflenetv2_x1-5666bf0f80.pth", 2.28, "8.8 MB"),
    TORCHVISION("shufflenet_v2_x1_5", "shufflenetv2_x1_5-3c479a10.pth", 3.50, "13.6 MB"),
    TORCHVISION("shufflenet_v2_x2_0", "shufflenetv2_x2_0-8be3c8ee.pth", 7.39, "28.4 MB"),
    ULTRALYTICS("yolov8n", 3.16, "~6 MB"),   ULTRALYTICS("yolov8s", 11.17, "~22 MB"),
    ULTRALYTICS("yolov8m", 25.90, "~52 MB"), ULTRALYTICS("yolov8l", 43.69, "~87 MB"),
    ULTRALYTICS("yolov8x", 68.23, "~136 MB"), ULTRALYTICS("yolo11n", 2.62, "~5 MB"),
    ULTRALYTICS("yolo11s", 9.46, "~19 MB"),  ULTRALYTICS("yolo11m", 20.11, "~40 MB"),
    ULTRALYTICS("yolo11l", 25.37, "~51 MB"), ULTRALYTICS("yolo11x", 56.97, "~114 MB"),
    ULTRALYTICS("yolo26n", 2.57, "~5 MB"),   ULTRALYTICS("yolo26s", 10.01, "~20 MB"),
    ULTRALYTICS("yolo26m", 21.90, "~44 MB"), ULTRALYTICS("yolo26l", 26.30, "~53 MB"),
    ULTRALYTICS("yolo26x", 58.99, "~118 MB"),
    ULTRALYTICS("yolov8n-seg", 3.41, "~7 MB"), ULTRALYTICS("yolov8s-seg", 11.82, "~24 MB"),
    ULTRALYTICS("yolov8m-seg", 27.29, "~55 MB"), ULTRALYTICS("yolov8l-seg", 46.00, "~92 MB"),
    ULTRALYTICS("yolov8x-seg", 71.83, "~144 MB"),
    ULTRALYTICS("yolo11n-seg", 2.88, "~6 MB"), ULTRALYTICS("yolo11s-seg", 10.11, "~20 MB"),
    ULTRALYTICS("yolo11m-seg", 22.42, "~45 MB"), ULTRALYTICS("yolo11l-seg", 27.68, "~55 MB"),
    ULTRALYTICS("yolo11x-seg", 62.14, "~124 MB"),
    ULTRALYTICS("yolo26n-seg", 3.13, "~6 MB"), ULTRALYTICS("yolo26s-seg", 11.51, "~23 MB"),
    ULTRALYTICS("yolo26m-seg", 27.11, "~54 MB"), ULTRALYTICS("yolo26l-seg", 31.52, "~63 MB"),
    ULTRALYTICS("yolo26x-seg", 70.69, "~141 MB"),
    ULTRALYTICS("yolov8n-pose", 3.30, "~7 MB"), ULTRALYTICS("yolov8s-pose", 11.63, "~23 MB"),
    ULTRALYTICS("yolov8m-pose", 26.46, "~53 MB"), ULTRALYTICS("yolov8l-pose", 44.49, "~89 MB"),
    ULTRALYTICS("yolov8x-pose", 69.49, "~139 MB"), ULTRALYTICS("yolo11n-pose", 2.91, "~6 MB"),
    ULTRALYTICS("yolo11s-pose", 9.95, "~20 MB"), ULTRALYTICS("yolo11m-pose", 20.97, "~42 MB"),
    ULTRALYTICS("yolo11l-pose", 26.23, "~52 MB"), ULTRALYTICS("yolo11x-pose", 58.89, "~118 MB"),
    ULTRALYTICS("yolo26n-pose", 3.75, "~7 MB"), ULTRALYTICS("yolo26s-pose", 11.87, "~24 MB"),
    ULTRALYTICS("yolo26m-pose", 24.34, "~49 MB"), ULTRALYTICS("yolo26l-pose", 28.75, "~57 MB"),
    ULTRALYTICS("yolo26x-pose", 62.91, "~126 MB"), ULTRALYTICS("yolov8n-obb", 3.23, "~6 MB"),
    ULTRALYTICS("yolov8s-obb", 11.45, "~23 MB"), ULTRALYTICS("yolov8m-obb", 26.46, "~53 MB"),
    ULTRALYTICS("yolov8l-obb", 44.54, "~89 MB"), ULTRALYTICS("yolov8x-obb", 69.56, "~139 MB"),
    ULTRALYTICS("yolo11n-obb", 2.70, "~5 MB"), ULTRALYTICS("yolo11s-obb", 9.74, "~19 MB"),
    ULTRALYTICS("yolo11m-obb", 20.96, "~42 MB"), ULTRALYTICS("yolo11l-obb", 26.22, "~52 MB"),
    ULTRALYTICS("yolo11x-obb", 58.88, "~118 MB"), ULTRALYTICS("yolo26n-obb", 2.72, "~5 MB"),
    ULTRALYTICS("yolo26s-obb", 10.58, "~21 MB"), ULTRALYTICS("yolo26m-obb", 23.59, "~47 MB"),
    ULTRALYTICS("yolo26l-obb", 28.00, "~56 MB"), ULTRALYTICS("yolo26x-obb", 62.81, "~126 MB"),
    ULTRALYTICS("yolov8n-cls", 2.72, "~5 MB"), ULTRALYTICS("yolov8s-cls", 6.36, "~13 MB"),
    ULTRALYTICS("yolov8m-cls", 17.05, "~34 MB"), ULTRALYTICS("yolov8l-cls", 37.48, "~75 MB"),
    ULTRALYTICS("yolov8x-cls", 57.42, "~115 MB"), ULTRALYTICS("yolo11n-cls", 2.81, "~6 MB"),
    ULTRALYTICS("yolo11s-cls", 6.72, "~13 MB"), ULTRALYTICS("yolo11m-cls", 11.63, "~23 MB"),
    ULTRALYTICS("yolo11l-cls", 14.12, "~28 MB"), ULTRALYTICS("yolo11x-cls", 29.64, "~59 MB"),
    ULTRALYTICS("yolo26n-cls", 2.81, "~6 MB"), ULTRALYTICS("yolo26s-cls", 6.72, "~13 MB"),
    ULTRALYTICS("yolo26m-cls", 11.63, "~23 MB"), ULTRALYTICS("yolo26l-cls", 14.12, "~28 MB"),
    ULTRALYTICS("yolo26x-cls", 29.64, "~59 MB"), ULTRALYTICS("yolov5nu", 2.65, "~5 MB"),
    ULTRALYTICS("yolov5su", 9.15, "~18 MB"), ULTRALYTICS("yolov5mu", 25.11, "~50 MB"),
    ULTRALYTICS("yolov5lu", 53.23, "~106 MB"), ULTRALYTICS("yolov5xu", 97.28, "~195 MB"),
    ULTRALYTICS("yolo12n", 2.60, "~5 MB"), ULTRALYTICS("yolo12s", 9.28, "~19 MB"),
    ULTRALYTICS("yolo12m", 20.20, "~40 MB"), ULTRALYTICS("yolo12l", 26.45, "~53 MB"),
    ULTRALYTICS("yolo12x", 59.21, "~118 MB"),
    // YOLOv8 trained on Open Images V7: yolov8n.yaml ... with 601 classes
    ULTRALYTICS("yolov8n-oiv7", 3.50, "~7 MB"), ULTRALYTICS("yolov8s-oiv7", 11.37, "~23 MB"),
    ULTRALYTICS("yolov8m-oiv7", 26.20, "~52 MB"), ULTRALYTICS("yolov8l-oiv7", 44.09, "~88 MB"),
    ULTRALYTICS("yolov8x-oiv7", 68.73, "~137 MB"),
    // YOLOv5u-P6 (yolov5-p6.yaml: a P6/64 stage, Detect over P3 ... P6)
    ULTRALYTICS("yolov5n6u", 4.33, "~9 MB"), ULTRALYTICS("yolov5s6u", 15.31, "~31 MB"),
    ULTRALYTICS("yolov5m6u", 41.22, "~82 MB"), ULTRALYTICS("yolov5l6u", 86.10, "~172 MB"),
    ULTRALYTICS("yolov5x6u", 155.54, "~311 MB"),
    // YOLOv8-pose-P6 (yolov8-pose-p6.yaml: a P6/64 stage, Pose over P3 ... P6)
    ULTRALYTICS("yolov8x-pose-p6", 99.18, "~198 MB"),
    // YOLO26's semantic segmentation (Cityscapes' 19 classes; -ade20k: ADE20K's 150)
    // and depth models
    ULTRALYTICS("yolo26n-sem", 1.63, "~3 MB"), ULTRALYTICS("yolo26s-sem", 6.50, "~13 MB"),
    ULTRALYTICS("yolo26m-sem", 14.32, "~29 MB"), ULTRALYTICS("yolo26l-sem", 17.87, "~36 MB"),
    ULTRALYTICS("yolo26x-sem", 40.16, "~80 MB"),
    ULTRALYTICS("yolo26n-sem-ade20k", 1.65, "~3 MB"),
    ULTRALYTICS("yolo26s-sem-ade20k", 6.54, "~13 MB"),
    ULTRALYTICS("yolo26m-sem-ade20k", 14.39, "~29 MB"),
    ULTRALYTICS("yolo26l-sem-ade20k", 17.93, "~36 MB"),
    ULTRALYTICS("yolo26x-sem-ade20k", 40.26, "~81 MB"),
    ULTRALYTICS("yolo26n-depth", 5.17, "~10 MB"), ULTRALYTICS("yolo26s-depth", 12.04, "~24 MB"),
    ULTRALYTICS("yolo26m-depth", 22.10, "~44 MB"), ULTRALYTICS("yolo26l-depth", 26.50, "~53 MB"),
    ULTRALYTICS("yolo26x-depth", 55.84, "~112 MB"),
    // YOLO-World (open-vocabulary detection: yolov8-world.yaml, yolov8-worldv2.yaml;
    // the files also hold the COCO classes' text embeddings, 80 KB)
    ULTRALYTICS("yolov8s-world", 13.38, "~27 MB"), ULTRALYTICS("yolov8m-world", 29.07, "~58 MB"),
    ULTRALYTICS("yolov8l-world", 47.55, "~95 MB"), ULTRALYTICS("yolov8x-world", 73.69, "~147 MB"),
    ULTRALYTICS("yolov8s-worldv2", 12.76, "~26 MB"),
    ULTRALYTICS("yolov8m-worldv2", 28.38, "~57 MB"),
    ULTRALYTICS("yolov8l-worldv2", 46.83, "~94 MB"),
    ULTRALYTICS("yolov8x-worldv2", 72.89, "~146 MB"),
};
enum { ENTRY_COUNT = sizeof entries / sizeof entries[0] };

static const char *const name_families[] = {"dinov2/", "dinov3/", "ultralytics/"};
// Extensions of weight files: a reference ending in one (without ":FILE") is
// a missing file.
static const char *const file_extensions[] = {".safetensors", ".ckpt", ".pt", ".pth", ".bin"};

const WeightsEntry *weights_entries(int *count) {
    *count = ENTRY_COUNT;
    return entries;
}

static int has_prefix(const char *text, const char *prefix) {
    return strncmp(text, prefix, strlen(prefix)) == 0;
}

static int has_suffix(const char *text, const char *suffix) {
    const size_t n = strlen(text), m = strlen(suffix);
    return n >= m && strcmp(text + n - m, suffix) == 0;
}

// The family of names text belongs to ("dinov2/", ...), or NULL. Under
// "ultralytics/" only the released weights' spelling ("...pt", no ":FILE")
// is a name: a .yaml is a --model, not weights.
static const char *name_family(const char *text) {
    for (size_t i = 0; i < sizeof name_families / sizeof name_families[0]; i++)
        if (has_prefix(text, name_families[i]) &&
            (strcmp(name_families[i], "ultralytics/") != 0 ||
             (has_suffix(text, ".pt") && !strchr(text, ':'))))
            return name_families[i];
    return NULL;
}

// LightlyTrain's spellings (its DINOv2 package's parse_model_name): "_" for
// "-" after the family, and a "-pretrained" / "-pretrain" suffix.
static void normalize_name(const char *name, char *out, size_t size) {
    snprintf(out, size, "%s", name);
    const char *slash = strchr(out, '/');
    for (char *c = slash ? (char *)slash + 1 : out; *c; c++)
        if (*c == '_') *c = '-';
    static const char *const suffixes[] = {"-pretrained", "-pretrain"};
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++)
        if (has_suffix(out, suffixes[i])) {
            out[strlen(out) - strlen(suffixes[i])] = '\0';
            break;
        }
}

const WeightsEntry *weights_find(const char *name) {
    char normal[128];
    if (strlen(name) >= sizeof normal) return NULL;
    for (int i = 0; i < ENTRY_COUNT; i++)  // as written: torchvision's keep their "_"
        if (strcmp(entries[i].name, name) == 0) return &entries[i];
    normalize_name(name, normal, sizeof normal);
    for (int i = 0; i < ENTRY_COUNT; i++)
        if (strcmp(entries[i].name, normal) == 0) return &entries[i];
    return NULL;
}

// LightlyTrain's DINOv3 names whose weights are its own (its S3 bucket's
// distillations of DINOv3 ViT-L/16), not published where this program downloads.
static const char *const lightly_train_only_weights[][2] = {
    {"dinov3/vitt16", "dinov3_vitt16_distillationv2.pth"},
    {"dinov3/vitt16plus", "dinov3_vitt16plus_distillationv2.pth"},
};

// LightlyTrain's other weights for the same DINOv3 architectures (its dinov3
// package builds them with the plain name's builder): EUPE's (Meta), LingBot's
// (Robbyant), its own first distillation of the ViT-T; not downloadable here.
static const char *const other_weights_suffixes[][2] = {
    {"-eupe", "EUPE"}, {"-lingbot", "LingBot"}, {"-distillationv1", "distillation v1"},
};

int weights_model_name(const char *text, char *model, size_t size, const WeightsEntry **weights,
                       ErrorMessage *err) {
    *weights = NULL;
    char normal[128];
    if ((!has_prefix(text, "dinov2/") && !has_prefix(text, "dinov3/")) ||
        strlen(text) >= sizeof normal)
        return 0;
    normalize_name(text, normal, sizeof normal);
    const int not_pretrained = has_suffix(normal, "-notpretrained");
    if (not_pretrained) normal[strlen(normal) - strlen("-notpretrained")] = '\0';
    for (size_t i = 0; i < sizeof other_weights_suffixes / sizeof *other_weights_suffixes; i++)
        if (has_prefix(normal, "dinov3/") && has_suffix(normal, other_weights_suffixes[i][0])) {
            normal[strlen(normal) - strlen(other_weights_suffixes[i][0])] = '\0';
            snprintf(model, size, "%s", normal);
            return error_set(err, "--model %s: LightlyTrain's %s weights of %s are not "
                                  "downloadable by name here; --model %s-notpretrained starts "
                                  "from a random initialisation (add --checkpoint FILE for those "
                                  "weights)",
                             text, other_weights_suffixes[i][1], normal, normal);
        }
    const WeightsEntry *entry = weights_find(normal);
    if (entry) {
        snprintf(model, size, "%s", entry->arch);
        *weights = not_pretrained ? NULL : entry;
        return 1;
    }
    snprintf(model, size, "%s", normal);
    if (not_pretrained) return 1;
    for (size_t i = 0; i < sizeof lightly_train_only_weights / sizeof *lightly_train_only_weights;
         i++)
        if (strcmp(normal, lightly_train_only_weights[i][0]) == 0)
            return error_set(err, "--model %s: LightlyTrain starts it from its own distilled "
                                  "weights (%s), which are not downloadable by name here; "
                                  "--model %s-notpretrained starts from a random "
                                  "initialisation (add --checkpoint FILE for those weights)",
                             text, lightly_train_only_weights[i][1], normal);
    return 0;
}

// The hub's rules for a repository name part: letters, digits, '-', '_',
// '.', 1..96 characters, no "--" or "..", not starting or ending with '-'
// or '.'.
static int valid_repo_part(const char *part, size_t length) {
    if (length == 0 || length > 96) return 0;
    if (part[0] == '-' || part[0] == '.' || part[length - 1] == '-' || part[length - 1] == '.')
        return 0;
    for (size_t i = 0; i < length; i++) {
        const char c = part[i];
        const int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '-' || c == '_' || c == '.';
        if (!ok) return 0;
        if (i > 0 && (c == '-' || c == '.') && part[i - 1] == c) return 0;
    }
    return 1;
}

// Letters, digits and "-_." (a revision: a branch, a tag or a commit), plus
// '/' inside a file path; never "..".
static int valid_chars(const char *text, int allow_slash) {
    if (!*text || strstr(text, "..")) return 0;
    for (const char *c = text; *c; c++) {
        const int ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                       (*c >= '0' && *c <= '9') || *c == '-' || *c == '_' || *c == '.' ||
                       (allow_slash && *c == '/' && c != text && c[1] != '\0' && c[1] != '/');
        if (!ok) return 0;
    }
    return 1;
}

// ORG/NAME[@REVISION][:FILE] into ref; 0 or -1 with err.
static int parse_hub_reference(const char *text, WeightsRef *ref, ErrorMessage *err) {
    char repo_part[WEIGHTS_REPO_MAX + WEIGHTS_REVISION_MAX];
    const char *colon = strchr(text, ':');
    const size_t repo_length = colon ? (size_t)(colon - text) : strlen(text);
    if (repo_length >= sizeof repo_part)
        return error_set(err, "'%s' is too long for a Hugging Face repository id", text);
    memcpy(repo_part, text, repo_length);
    repo_part[repo_length] = '\0';
    snprintf(ref->filename, sizeof ref->filename, "%s", colon ? colon + 1 : "model.safetensors");
    if (!valid_chars(ref->filename, 1) || strlen(ref->filename) >= sizeof ref->filename - 1)
        return error_set(err, "'%s': the file after ':' must be a path inside the repository "
                              "(letters, digits, '-', '_', '.', '/')", text);
    char *at = strchr(repo_part, '@');
    if (at) *at = '\0';
    snprintf(ref->revision, sizeof ref->revision, "%s", at ? at + 1 : "main");
    if (!valid_chars(ref->revision, 0))
        return error_set(err, "'%s': the revision after '@' must be a branch, tag or commit "
                              "(letters, digits, '-', '_', '.')", text);
    const char *slash = strchr(repo_part, '/');
    if (!slash || !valid_repo_part(repo_part, (size_t)(slash - repo_part)) ||
        !valid_repo_part(slash + 1, strlen(slash + 1)))
        return error_set(err, "'%s' is neither a file nor a Hugging Face repository id "
                              "(ORG/NAME[@REVISION][:FILE])", text);
    if (snprintf(ref->repo, sizeof ref->repo, "%s", repo_part) >= (int)sizeof ref->repo)
        return error_set(err, "'%s': repository id too long", text);
    return 0;
}

int weights_is_reference(const char *text) {
    if (weights_find(text) || name_family(text)) return 1;
    for (size_t i = 0; i < sizeof file_extensions / sizeof file_extensions[0]; i++)
        if (!strchr(text, ':') && has_suffix(text, file_extensions[i])) return 0;
    WeightsRef ref;
    return parse_hub_reference(text, &ref, NULL) == 0;
}

// The known names of a family, ", " between them; of a family of more than
// LISTED_NAMES the first LISTED_NAMES - 1, "...", the last and the count
// (a one-line message: `weights` lists them all).
#define LISTED_NAMES 8
static void list_names(const char *family, char *out, size_t size) {
    int count = 0, last = -1;
    for (int i = 0; i < ENTRY_COUNT; i++)
        if (has_prefix(entries[i].name, family)) count++, last = i;
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0, listed = 0; i < ENTRY_COUNT && used < size; i++) {
        if (!has_prefix(entries[i].name, family)) continue;
        if (count > LISTED_NAMES && listed == LISTED_NAMES - 1) {
            snprintf(out + used, size - used, ", ..., %s: %d names", entries[last].name, count);
            return;
        }
        used += (size_t)snprintf(out + used, size - used, "%s%s", used ? ", " : "",
                                 entries[i].name);
        listed++;
    }
}

int weights_parse(const char *text, WeightsRef *ref, ErrorMessage *err) {
    memset(ref, 0, sizeof *ref);
    if (strlen(text) >= sizeof ref->name)
        return error_set(err, "weights name too long (%zu characters)", strlen(text));
    const WeightsEntry *entry = weights_find(text);
    if (entry) {
        snprintf(ref->name, sizeof ref->name, "%s", entry->name);
        ref->entry = entry;
        ref->source = entry->source;
        snprintf(ref->repo, sizeof ref->repo, "%s", entry->repo);
        snprintf(ref->revision, sizeof ref->revision, "%s",
                 entry->release ? entry->release : "main");
        snprintf(ref->filename, sizeof ref->filename, "%s",
                 entry->file ? entry->file : "model.safetensors");
        ref->sha256 = entry->sha256;
        return 0;
    }
    const char *family = name_family(text);
    if (family) {
        char names[400];
        list_names(family, names, sizeof names);
        return error_set(err, "unknown weights name '%s' (known: %s; lightly-train-c weights "
                              "lists them)", text, names);
    }
    snprintf(ref->name, sizeof ref->name, "%s", text);
    return parse_hub_reference(text, ref, err);
}

const char *weights_default_teacher(const char *method) {
    if (strcmp(method, "distillation") == 0 || strcmp(method, "distillationv3") == 0)
        return "dinov3/vitb16";
    if (strcmp(method, "distillationv1") == 0 || strcmp(method, "distillationv2") == 0)
        return "dinov2/vitb14-noreg";
    return NULL;
}
