// Weights by name: the names lightly-train-c knows (LightlyTrain's names of
// the DINOv2 and DINOv3 backbones, e.g. "dinov2/vitb14", and of Ultralytics'
// released YOLO weights, e.g. "ultralytics/yolo11s.pt") and how a name or a
// Hugging Face Hub reference ("timm/resnet50.tv2_in1k", with an optional
// "@revision" and ":file") becomes one file of a hub repository or of a
// GitHub release. Where each file comes from, and why that source:
// docs/weights.md.
#ifndef LTC_WEIGHTS_NAMES_H
#define LTC_WEIGHTS_NAMES_H

#include "util/error.h"

// Where a name's file is downloaded from.
typedef enum WeightsSource {
    WEIGHTS_HUGGING_FACE,    // a Hugging Face Hub repository's file (HF_ENDPOINT)
    WEIGHTS_GITHUB_RELEASE,  // an asset of a GitHub release (LIGHTLY_TRAIN_GITHUB_ENDPOINT):
                             // Ultralytics' weights; the file of that name in the working
                             // directory comes first, as Ultralytics' YOLO("yolo11s.pt") takes it
    WEIGHTS_TORCHVISION,     // a file of torchvision's (LIGHTLY_TRAIN_TORCHVISION_ENDPOINT):
                             // ENDPOINT/models/FILE, FILE naming the first hex digits of its
                             // SHA-256, checked as torch.hub checks them; PyTorch's own cache
                             // ($TORCH_HOME/hub/checkpoints/FILE) is used as it is
} WeightsSource;

// One known name.
typedef struct WeightsEntry {
    const char *name;         // LightlyTrain's: "dinov2/vitb14"
    const char *arch;         // the --model preset the file holds: "vit_b14_reg4"
    const char *repo;         // its Hugging Face Hub repository (file model.safetensors), or
                              // the GitHub repository of its release
    const char *licence;      // "Apache-2.0", "DINOv3 License"
    const char *licence_url;
    double params_millions;   // parameters (docs/commands.md's model table): the F32 file is ~4 bytes each
    const char *hub_size;     // the file's size as the hub's file list shows it, or NULL
    const char *sha256;       // the SHA-256 the hub's file page documents, or NULL (then the
                              // hub's X-Linked-Etag at download time is the only check)
    WeightsSource source;
    const char *release;      // GITHUB_RELEASE: the release's tag ("v8.4.0"); else NULL (main)
    const char *file;         // GITHUB_RELEASE: the asset ("yolo11s.pt"); TORCHVISION: the
                              // file ("convnext_tiny-983f1562.pth"); else NULL
                              // (model.safetensors)
} WeightsEntry;

// The known names, in listing order; *count gets their number.
const WeightsEntry *weights_entries(int *count);

// The entry of a name, accepting LightlyTrain's spellings of it
// ("dinov2/vitb14_pretrained", "dinov2/vitb14-pretrain"); NULL when unknown.
const WeightsEntry *weights_find(const char *name);

// LightlyTrain's --model names of the DINOv2 and DINOv3 backbones (its
// dinov2_vit and dinov3 packages), in any of its spellings (weights_find's):
// "dinov2/vitb14" and "dinov3/vitb16" are the architecture started from the
// pretrained weights of that name, "dinov2/vitb14-notpretrained" the same
// architecture randomly initialised. Returns 1 for such a name, with the
// --model preset in model ("vit_b14_reg4") and *weights the entry of its
// weights (NULL: a random initialisation); -1 with err (model still filled)
// for a name LightlyTrain starts from weights this program cannot download
// ("dinov3/vitt16": its own distilled weights; "dinov3/vitb16-eupe" ...:
// other weights of the same architecture); 0 for any other text
// (our presets, "dinov3/vitl16plus" among them, are random initialisations).
int weights_model_name(const char *text, char *model, size_t size, const WeightsEntry **weights,
                       ErrorMessage *err);

#define WEIGHTS_REPO_MAX 200
#define WEIGHTS_REVISION_MAX 128
#define WEIGHTS_FILENAME_MAX 256

// One file of a hub repository (or of a GitHub release), and the name it
// was asked for by.
typedef struct WeightsRef {
    char name[WEIGHTS_REPO_MAX + WEIGHTS_REVISION_MAX + WEIGHTS_FILENAME_MAX];
    const WeightsEntry *entry;  // the known name's entry, NULL for a plain repository id
    WeightsSource source;       // HUGGING_FACE for every plain repository id
    char repo[WEIGHTS_REPO_MAX];              // "org/name"
    char revision[WEIGHTS_REVISION_MAX];      // "main" unless "@REVISION" was given; a
                                              // release's tag
    char filename[WEIGHTS_FILENAME_MAX];      // "model.safetensors" unless ":FILE" was given
    const char *sha256;                       // the entry's documented SHA-256, or NULL
} WeightsRef;

// 1 when text, which names no existing file, is meant as weights by name: a
// known name, anything under LightlyTrain's "dinov2/" and "dinov3/" (and
// "ultralytics/...pt"), or a
// hub reference ORG/NAME[@REVISION][:FILE] (without ":FILE", not ending in
// a weights file's extension: that is taken for a missing file). 0 for
// anything else.
int weights_is_reference(const char *text);

// Parses a known name or a hub reference into ref. An unknown name under
// "dinov2/", "dinov3/" (or "ultralytics/...pt") fails listing the known ones
// of that family; a malformed reference
// fails saying what is wrong.
int weights_parse(const char *text, WeightsRef *ref, ErrorMessage *err);

// LightlyTrain's default teacher of a distillation method ("distillation" is
// v3: dinov3/vitb16; "distillationv1" and "distillationv2": dinov2/vitb14-noreg),
// NULL for other methods.
const char *weights_default_teacher(const char *method);

#endif
