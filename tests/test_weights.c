// Tests of weights by name without the network (src/weights): LightlyTrain's
// names and spellings, hub references and what is refused, what counts as a
// file, the default teachers; the cache folder rules, the Hugging Face
// cache's layout (refs/ and snapshots/), the endpoint, HF_HUB_OFFLINE's
// values, where the token comes from, the download settings; a name that is
// not downloaded; the lock between processes; the download record beside a
// cached file and the checks against it. (The downloads themselves:
// tests/e2e/weights.sh, against a stand-in hub.)
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "weights/cache.h"
#include "weights/download.h"
#include "weights/lock.h"
#include "weights/names.h"
#include "weights/record.h"
#include "weights/resolve.h"
#include "weights/timm_tags.h"
#include "nn/backbone.h"

static char folder[256];  // a fresh temporary folder per test

static const char *const variables[] = {
    "LIGHTLY_TRAIN_CACHE_DIR", "XDG_CACHE_HOME", "HF_HOME", "HF_HUB_CACHE", "HF_ENDPOINT",
    "HF_HUB_OFFLINE", "HF_TOKEN", "HF_TOKEN_PATH", "LIGHTLY_TRAIN_DOWNLOAD_CHUNK_TIMEOUT_SEC",
    "LIGHTLY_TRAIN_DOWNLOAD_RETRIES", "LIGHTLY_TRAIN_DOWNLOAD_BACKOFF_SEC",
    "LIGHTLY_TRAIN_DOWNLOAD_MIN_BYTES_PER_SEC", "LIGHTLY_TRAIN_DOWNLOAD_DEADLINE_SEC",
    "LIGHTLY_TRAIN_GITHUB_ENDPOINT", "LIGHTLY_TRAIN_TORCHVISION_ENDPOINT", "TORCH_HOME"};

static int setup(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof variables / sizeof variables[0]; i++) unsetenv(variables[i]);
    snprintf(folder, sizeof folder, "/tmp/ltc-test-weights-XXXXXX");
    assert_non_null(mkdtemp(folder));
    setenv("HOME", folder, 1);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char command[300];
    snprintf(command, sizeof command, "rm -rf '%s'", folder);
    return system(command) == 0 ? 0 : -1;
}

static void write_file(const char *path, const char *text) {
    char parent[512];
    snprintf(parent, sizeof parent, "mkdir -p \"$(dirname '%s')\"", path);
    assert_int_equal(system(parent), 0);
    FILE *file = fopen(path, "w");
    assert_non_null(file);
    fputs(text, file);
    fclose(file);
}

static void expect_error(int status, const ErrorMessage *err, const char *fragment) {
    assert_int_equal(status, -1);
    if (!strstr(err->text, fragment)) fail_msg("'%s' lacks '%s'", err->text, fragment);
}

static void test_known_names_and_spellings(void **state) {
    (void)state;
    const WeightsEntry *entry = weights_find("dinov2/vitb14");
    assert_non_null(entry);
    assert_string_equal(entry->repo, "timm/vit_base_patch14_reg4_dinov2.lvd142m");
    assert_string_equal(entry->arch, "vit_b14_reg4");  // LightlyTrain's plain names have registers
    assert_string_equal(weights_find("dinov2/vitb14-noreg")->arch, "vit_b14");
    // LightlyTrain's other spellings of the same name.
    assert_ptr_equal(weights_find("dinov2/vitb14_pretrained"), entry);
    assert_ptr_equal(weights_find("dinov2/vitb14-pretrain"), entry);
    assert_ptr_equal(weights_find("dinov2/vitb14_noreg_pretrain"),
                     weights_find("dinov2/vitb14-noreg"));
    assert_string_equal(weights_find("dinov3/vitb16")->licence, "DINOv3 License");
    assert_null(weights_find("dinov2/vitx14"));
    assert_null(weights_find("vitb14"));
    // Every entry names a --model preset and a repository with one '/'.
    int count;
    const WeightsEntry *entries = weights_entries(&count);
    assert_true(count >= 13);
    for (int i = 0; i < count; i++) {
        const char *slash = strchr(entries[i].repo, '/');
        assert_non_null(slash);
        assert_null(strchr(slash + 1, '/'));
        assert_true(entries[i].params_millions > 1);
    }
    assert_string_equal(weights_default_teacher("distillation"), "dinov3/vitb16");
    assert_string_equal(weights_default_teacher("distillationv3"), "dinov3/vitb16");
    assert_string_equal(weights_default_teacher("distillationv1"), "dinov2/vitb14-noreg");
    assert_string_equal(weights_default_teacher("distillationv2"), "dinov2/vitb14-noreg");
    assert_null(weights_default_teacher("simclr"));
}

// model_name_is MODEL WEIGHTS: LightlyTrain's --model name text builds our
// preset MODEL from the weights named WEIGHTS (NULL: randomly initialised).
static void model_name_is(const char *text, const char *model, const char *weights) {
    char preset[64] = "";
    const WeightsEntry *entry = NULL;
    ErrorMessage err = {{0}};
    if (weights_model_name(text, preset, sizeof preset, &entry, &err) != 1)
        fail_msg("%s: not a LightlyTrain model name (%s)", text, err.text);
    if (strcmp(preset, model) != 0) fail_msg("%s builds %s, not %s", text, preset, model);
    if (!weights != !entry || (weights && strcmp(entry->name, weights) != 0))
        fail_msg("%s starts from %s, not %s", text, entry ? entry->name : "random",
                 weights ? weights : "random");
}

// LightlyTrain's DINOv2 and DINOv3 model names: pretrained unless
// -notpretrained, in its spellings; the names whose weights are LightlyTrain's
// own are refused; anything else is left to the presets.
static void test_lightly_train_model_names(void **state) {
    (void)state;
    model_name_is("dinov2/vitb14", "vit_b14_reg4", "dinov2/vitb14");
    model_name_is("dinov2/vitb14_pretrained", "vit_b14_reg4", "dinov2/vitb14");
    model_name_is("dinov2/vits14-notpretrained", "vit_s14_reg4", NULL);
    model_name_is("dinov2/vitl14-noreg", "vit_l14", "dinov2/vitl14-noreg");
    model_name_is("dinov2/vitg14_noreg_notpretrained", "vit_g14", NULL);
    model_name_is("dinov3/vitb16", "dinov3/vitb16", "dinov3/vitb16");
    model_name_is("dinov3/vith16plus-notpretrained", "dinov3/vith16plus", NULL);
    model_name_is("dinov3/convnext_small-pretrain", "dinov3/convnext-small",
                  "dinov3/convnext-small");
    model_name_is("dinov3/convnext-tiny-notpretrained", "dinov3/convnext-tiny", NULL);
    model_name_is("dinov3/vitt16-notpretrained", "dinov3/vitt16", NULL);
    char preset[64];
    const WeightsEntry *entry;
    ErrorMessage err = {{0}};
    expect_error(weights_model_name("dinov3/vitt16plus", preset, sizeof preset, &entry, &err),
                 &err, "dinov3_vitt16plus_distillationv2.pth), which are not downloadable by "
                       "name here; --model dinov3/vitt16plus-notpretrained");
    expect_error(weights_model_name("dinov3/vitt16_pretrained", preset, sizeof preset, &entry,
                                    &err),
                 &err, "--model dinov3/vitt16-notpretrained");
    // LightlyTrain's other weights of the same architectures: refused naming it.
    expect_error(weights_model_name("dinov3/vitb16-eupe", preset, sizeof preset, &entry, &err),
                 &err, "LightlyTrain's EUPE weights of dinov3/vitb16 are not downloadable by "
                       "name here; --model dinov3/vitb16-notpretrained");
    assert_string_equal(preset, "dinov3/vitb16");
    expect_error(weights_model_name("dinov3/vitt16plus-distillationv1", preset, sizeof preset,
                                    &entry, &err),
                 &err, "distillation v1 weights of dinov3/vitt16plus");
    const char *others[] = {"dinov3/vitl16plus", "dinov3/vit7b16", "vit_b14_reg4", "resnet50",
                            "ultralytics/yolo11s.pt", "torchvision/convnext_tiny",
                            "timm/convnext_tiny", "dinov2/vitb14.pt"};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++)
        if (weights_model_name(others[i], preset, sizeof preset, &entry, &err) != 0)
            fail_msg("%s taken for a LightlyTrain name", others[i]);
}

static void test_hub_references(void **state) {
    (void)state;
    WeightsRef ref;
    ErrorMessage err = {{0}};
    assert_int_equal(weights_parse("timm/resnet50.tv2_in1k", &ref, &err), 0);
    assert_string_equal(ref.repo, "timm/resnet50.tv2_in1k");
    assert_string_equal(ref.revision, "main");
    assert_string_equal(ref.filename, "model.safetensors");
    assert_null(ref.entry);
    assert_int_equal(weights_parse("org/name@v1.0:sub/dir/w.safetensors", &ref, &err), 0);
    assert_string_equal(ref.repo, "org/name");
    assert_string_equal(ref.revision, "v1.0");
    assert_string_equal(ref.filename, "sub/dir/w.safetensors");
    assert_null(ref.sha256);
    assert_int_equal(weights_parse("dinov2/vitb14-noreg", &ref, &err), 0);
    assert_string_equal(ref.sha256,  // as the hub's file page documents it
                        "55cbb5d887b336d430e649c277b85a1429e724871f9d02ac16203235886d8c7b");
    assert_int_equal(weights_parse("dinov3/vits16plus", &ref, &err), 0);
    assert_non_null(ref.entry);
    assert_string_equal(ref.repo, "timm/vit_small_plus_patch16_dinov3.lvd1689m");
    expect_error(weights_parse("dinov2/vitx14", &ref, &err), &err,
                 "unknown weights name 'dinov2/vitx14' (known: dinov2/vits14, ");
    expect_error(weights_parse("org/name@bad rev", &ref, &err), &err, "the revision after '@'");
    expect_error(weights_parse("org/name:../up", &ref, &err), &err, "the file after ':'");
    expect_error(weights_parse("org/na--me", &ref, &err), &err, "Hugging Face repository id");
    expect_error(weights_parse("a/b/c", &ref, &err), &err, "Hugging Face repository id");
    // What is meant as weights by name, and what as a (missing) file.
    assert_true(weights_is_reference("dinov2/vitb14"));
    assert_true(weights_is_reference("dinov2/unknown"));  // refused by name, not as a file
    assert_true(weights_is_reference("timm/resnet50.tv2_in1k"));
    assert_true(weights_is_reference("org/name:weights.bin"));
    assert_false(weights_is_reference("runs/model.safetensors"));
    assert_false(weights_is_reference("out/last.ckpt"));
    assert_false(weights_is_reference("/abs/path"));
    assert_false(weights_is_reference("./dir/file"));
    assert_false(weights_is_reference("file"));
    assert_false(weights_is_reference("a/b/c"));
}

// timm's default pretrained tags (model_args pretrained=True): every
// "timm/ARCH" model has one and the table holds no other architecture; each
// default is a hub reference timm/ARCH.TAG; the tag of a timm model name.
static void test_timm_default_tags(void **state) {
    (void)state;
    int timm_models = 0, table = 0;
    for (int i = 0; backbone_model_names[i]; i++) {
        if (strncmp(backbone_model_names[i], "timm/", 5) != 0) continue;
        timm_models++;
        const char *tag = timm_default_tag(backbone_model_names[i] + 5);
        assert_non_null(tag);
        if (!*tag) continue;  // timm has no weights (resnet200)
        char reference[160];
        snprintf(reference, sizeof reference, "%s.%s", backbone_model_names[i], tag);
        WeightsRef ref;
        ErrorMessage err = {{0}};
        assert_int_equal(weights_parse(reference, &ref, &err), 0);
        assert_string_equal(ref.repo, reference);
    }
    while (timm_tag_architecture(table)) table++;
    assert_int_equal(table, timm_models);
    assert_string_equal(timm_default_tag("resnet50"), "a1_in1k");
    assert_string_equal(timm_default_tag("resnet200"), "");
    assert_null(timm_default_tag("resnet51"));
    char model[64];
    const char *tag = NULL;
    assert_int_equal(timm_split_tag("timm/resnet50.a1_in1k", model, sizeof model, &tag), 1);
    assert_string_equal(model, "timm/resnet50");
    assert_string_equal(tag, "a1_in1k");
    assert_int_equal(timm_split_tag("timm/resnet50", model, sizeof model, &tag), 0);
    assert_int_equal(timm_split_tag("timm/resnet50.", model, sizeof model, &tag), 0);
    assert_int_equal(timm_split_tag("timm/.a1", model, sizeof model, &tag), 0);
    assert_int_equal(timm_split_tag("timm/resnet50.A1", model, sizeof model, &tag), 0);
    assert_int_equal(timm_split_tag("resnet50.a1_in1k", model, sizeof model, &tag), 0);
    assert_int_equal(timm_split_tag("timm/vit_base_patch16_224.augreg2_in21k_ft_in1k", model, 16,
                                    &tag), 0);  // too long for the buffer
}

// torchvision's own weights (its ConvNeXts and ShuffleNetV2s): the names as
// its enums spell them, the URL torchvision downloads (or the endpoint's),
// our cache's folder, PyTorch's cache used as it is, the SHA-256 digits of
// the file name (torch.hub's check).
static void test_torchvision_names(void **state) {
    (void)state;
    WeightsRef ref;
    ErrorMessage err = {{0}};
    char text[1024];
    assert_int_equal(weights_parse("torchvision/convnext_tiny.IMAGENET1K_V1", &ref, &err), 0);
    assert_int_equal(ref.source, WEIGHTS_TORCHVISION);
    assert_string_equal(ref.entry->arch, "torchvision/convnext_tiny");
    assert_string_equal(ref.filename, "convnext_tiny-983f1562.pth");
    assert_int_equal(weights_url(&ref, text, sizeof text, &err), 0);
    assert_string_equal(text, "https://download.pytorch.org/models/convnext_tiny-983f1562.pth");
    setenv("LIGHTLY_TRAIN_TORCHVISION_ENDPOINT", "http://mirror:9/", 1);
    assert_int_equal(weights_url(&ref, text, sizeof text, &err), 0);
    assert_string_equal(text, "http://mirror:9/models/convnext_tiny-983f1562.pth");
    setenv("LIGHTLY_TRAIN_CACHE_DIR", "/shared/cache", 1);
    assert_int_equal(weights_cache_path(&ref, text, sizeof text, &err), 0);
    assert_string_equal(text, "/shared/cache/models/torchvision/convnext_tiny-983f1562.pth");
    assert_int_equal(weights_parse("torchvision/shufflenet_v2_x0_5.IMAGENET1K_V1", &ref, &err), 0);
    assert_string_equal(ref.filename, "shufflenetv2_x0.5-f707e7126e.pth");
    // PyTorch's cache: $TORCH_HOME/hub/checkpoints, else ~/.cache/torch.
    char torch_file[600];
    assert_false(weights_torch_cached_path(&ref, text, sizeof text));
    snprintf(torch_file, sizeof torch_file,
             "%s/.cache/torch/hub/checkpoints/shufflenetv2_x0.5-f707e7126e.pth", folder);
    write_file(torch_file, "weights");
    assert_true(weights_torch_cached_path(&ref, text, sizeof text));
    assert_string_equal(text, torch_file);
    setenv("TORCH_HOME", "/nowhere", 1);
    assert_false(weights_torch_cached_path(&ref, text, sizeof text));
    WeightsRef hub_ref;  // never for other sources
    assert_int_equal(weights_parse("timm/resnet50.tv2_in1k", &hub_ref, &err), 0);
    assert_false(weights_torch_cached_path(&hub_ref, text, sizeof text));
    // torch.hub's hash prefix: the hex digits between the last '-' and the next '.'.
    char prefix[65];
    assert_true(weights_hash_prefix("convnext_tiny-983f1562.pth", prefix, sizeof prefix));
    assert_string_equal(prefix, "983f1562");
    assert_true(weights_hash_prefix("shufflenetv2_x0.5-f707e7126e.pth", prefix, sizeof prefix));
    assert_string_equal(prefix, "f707e7126e");
    assert_false(weights_hash_prefix("model.safetensors", prefix, sizeof prefix));
    assert_false(weights_hash_prefix("a-xyz.pth", prefix, sizeof prefix));
    assert_false(weights_hash_prefix("a-ABCD.pth", prefix, sizeof prefix));
    assert_false(weights_hash_prefix("a-1234", prefix, sizeof prefix));
    // Every torchvision entry's file name carries digits to check.
    int count;
    const WeightsEntry *entries = weights_entries(&count);
    int torchvision = 0;
    for (int i = 0; i < count; i++) {
        if (entries[i].source != WEIGHTS_TORCHVISION) continue;
        torchvision++;
        assert_true(weights_hash_prefix(entries[i].file, prefix, sizeof prefix));
        assert_true(strlen(prefix) >= 8);
    }
    assert_int_equal(torchvision, 8);
}

// Ultralytics' released weights (LightlyTrain's ultralytics/<name>.pt):
// every YOLOv8 and YOLO11 size, from the GitHub release ultralytics 8.4.190
// downloads from (its URL, our cache's folder, no hub cache, no SHA-256);
// yolo11s.pt in the working directory is the name's file, as Ultralytics
// takes it; a .yaml is no weights name, an unknown .pt lists the family's.
static void test_ultralytics_names(void **state) {
    (void)state;
    static const char *const families[][2] = {
        {"yolov8", ""}, {"yolo11", ""}, {"yolo12", ""}, {"yolo26", ""}, {"yolov5", "u"}};
    char name[64], stem[32], text[4096];
    ErrorMessage err = {{0}};
    WeightsRef ref;
    for (int f = 0; f < 5; f++)
        for (const char *size = "nsmlx"; *size; size++) {
            snprintf(stem, sizeof stem, "%s%c%s", families[f][0], *size, families[f][1]);
            snprintf(name, sizeof name, "ultralytics/%s.pt", stem);
            const WeightsEntry *entry = weights_find(name);
            assert_non_null(entry);
            assert_string_equal(entry->arch, stem);
            assert_int_equal(entry->source, WEIGHTS_GITHUB_RELEASE);
            assert_true(weights_is_reference(name));
        }
    assert_int_equal(weights_parse("ultralytics/yolo11s.pt", &ref, &err), 0);
    assert_int_equal(ref.source, WEIGHTS_GITHUB_RELEASE);
    assert_null(ref.sha256);
    assert_int_equal(weights_url(&ref, text, sizeof text, &err), 0);
    assert_string_equal(text,
                        "https://github.com/ultralytics/assets/releases/download/v8.4.0/yolo11s.pt");
    setenv("HF_ENDPOINT", "http://hub-mirror", 1);  // the hub's mirror is not GitHub's
    setenv("LIGHTLY_TRAIN_GITHUB_ENDPOINT", "http://mirror:9/", 1);
    assert_int_equal(weights_url(&ref, text, sizeof text, &err), 0);
    assert_string_equal(text, "http://mirror:9/ultralytics/assets/releases/download/v8.4.0/yolo11s.pt");
    setenv("LIGHTLY_TRAIN_CACHE_DIR", "/shared/cache", 1);
    assert_int_equal(weights_cache_path(&ref, text, sizeof text, &err), 0);
    assert_string_equal(text, "/shared/cache/models/github/releases--ultralytics--assets/v8.4.0/"
                              "yolo11s.pt");
    // Never looked for in the Hugging Face cache, even where such a folder exists.
    char hf_file[600];
    snprintf(hf_file, sizeof hf_file, "%s/.cache/huggingface/hub/models--ultralytics--assets/"
                                      "snapshots/0123456789abcdef0123456789abcdef01234567/yolo11s.pt",
             folder);
    write_file(hf_file, "weights");
    snprintf(hf_file, sizeof hf_file, "%s/.cache/huggingface/hub/models--ultralytics--assets/refs/"
                                      "v8.4.0", folder);
    write_file(hf_file, "0123456789abcdef0123456789abcdef01234567");
    assert_false(weights_hf_cached_path(&ref, text, sizeof text));
    expect_error(weights_local_path("ultralytics/yolo11s.pt", text, sizeof text, &err), &err,
                 "ultralytics/yolo11s.pt is not downloaded");
    // The working directory's yolo11s.pt is the name's file.
    char here[4096];
    assert_non_null(getcwd(here, sizeof here));
    assert_int_equal(chdir(folder), 0);
    write_file("yolo11s.pt", "weights");
    assert_int_equal(weights_local_path("ultralytics/yolo11s.pt", text, sizeof text, &err), 0);
    assert_string_equal(text, "yolo11s.pt");
    assert_int_equal(chdir(here), 0);
    // A .yaml is a --model, not weights; unknown .pt names list the family's names only.
    assert_null(weights_find("ultralytics/yolo11s.yaml"));
    expect_error(weights_parse("ultralytics/yolo13n.pt", &ref, &err), &err,
                 "unknown weights name 'ultralytics/yolo13n.pt' (known: ultralytics/yolov8n.pt, ");
    assert_null(strstr(err.text, "dinov2"));
    expect_error(weights_parse("dinov2/vitx14", &ref, &err), &err, "(known: dinov2/vits14, ");
    assert_null(strstr(err.text, "ultralytics"));
}

static void test_cache_folders(void **state) {
    (void)state;
    char path[4096], expected[4096];
    ErrorMessage err = {{0}};
    WeightsRef ref;
    assert_int_equal(weights_parse("dinov2/vits14", &ref, &err), 0);
    assert_int_equal(weights_cache_root(path, sizeof path, &err), 0);
    snprintf(expected, sizeof expected, "%s/.cache/lightly-train-c", folder);
    assert_string_equal(path, expected);
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    assert_int_equal(weights_cache_root(path, sizeof path, &err), 0);
    assert_string_equal(path, "/xdg/lightly-train-c");
    setenv("LIGHTLY_TRAIN_CACHE_DIR", "/shared/cache", 1);
    assert_int_equal(weights_cache_path(&ref, path, sizeof path, &err), 0);
    assert_string_equal(path, "/shared/cache/models/hub/models--timm--vit_small_patch14_reg4_"
                              "dinov2.lvd142m/main/model.safetensors");
    unsetenv("LIGHTLY_TRAIN_CACHE_DIR");
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    expect_error(weights_cache_root(path, sizeof path, &err), &err, "LIGHTLY_TRAIN_CACHE_DIR");
    setenv("HOME", folder, 1);
}

// The Hugging Face cache: refs/<revision> holds the commit, the file is
// under snapshots/<commit>/; a commit revision is looked up directly.
static void test_hugging_face_cache(void **state) {
    (void)state;
    const char *commit = "0123456789abcdef0123456789abcdef01234567";
    char repo[512], path[4096], found[4096];
    snprintf(repo, sizeof repo, "%s/.cache/huggingface/hub/models--org--name", folder);
    snprintf(path, sizeof path, "%s/snapshots/%s/model.safetensors", repo, commit);
    write_file(path, "weights");
    WeightsRef ref;
    ErrorMessage err = {{0}};
    assert_int_equal(weights_parse("org/name", &ref, &err), 0);
    assert_false(weights_hf_cached_path(&ref, found, sizeof found));  // no refs/main yet
    char refs[600];
    snprintf(refs, sizeof refs, "%s/refs/main", repo);
    write_file(refs, commit);
    assert_true(weights_hf_cached_path(&ref, found, sizeof found));
    assert_string_equal(found, path);
    assert_int_equal(weights_local_path("org/name", found, sizeof found, &err), 0);
    assert_string_equal(found, path);
    assert_int_equal(weights_parse("org/name@0123456789abcdef0123456789abcdef01234567", &ref,
                                   &err), 0);
    assert_true(weights_hf_cached_path(&ref, found, sizeof found));
    assert_int_equal(weights_parse("org/name@other", &ref, &err), 0);
    assert_false(weights_hf_cached_path(&ref, found, sizeof found));
    // HF_HOME moves it, HF_HUB_CACHE more precisely.
    setenv("HF_HOME", "/nowhere", 1);
    assert_int_equal(weights_parse("org/name", &ref, &err), 0);
    assert_false(weights_hf_cached_path(&ref, found, sizeof found));
    char hub[512];
    snprintf(hub, sizeof hub, "%s/.cache/huggingface/hub", folder);
    setenv("HF_HUB_CACHE", hub, 1);
    assert_true(weights_hf_cached_path(&ref, found, sizeof found));
    // Not downloaded: the message says how to fetch it.
    expect_error(weights_local_path("org/other", found, sizeof found, &err), &err,
                 "org/other is not downloaded");
    assert_non_null(strstr(err.text, "lightly-train-c weights fetch org/other"));
    // A file is itself, whatever its name looks like.
    assert_int_equal(weights_local_path("missing.safetensors", found, sizeof found, &err), 0);
    assert_string_equal(found, "missing.safetensors");
}

// The record a download leaves beside its file (record.h): written and read
// back; a later version's keys ignored, a later version's format read as no
// record, a malformed one refused; the checks: a size that differs (every
// use, weights_local_path's message), a changed byte of the same size (only
// when hashed), no record at all (used as it is).
// The SHA-256 of "0123456789".
#define TEN_DIGITS_SHA256 "84d89877f0d4041efb6bf91a16f0248f2fd573e6af05c19f96bedb9f882f7882"

static void test_download_record(void **state) {
    (void)state;
    char path[512], record_file[600], why[300], found[4096];
    ErrorMessage err = {{0}};
    WeightsCheck check;
    setenv("LIGHTLY_TRAIN_CACHE_DIR", folder, 1);
    snprintf(path, sizeof path, "%s/models/hub/models--org--name/main/model.safetensors", folder);
    snprintf(record_file, sizeof record_file, "%s.verified", path);
    write_file(path, "0123456789");
    assert_int_equal(weights_record_check(path, 1, &check, why, sizeof why, &err), 0);
    assert_int_equal(check, WEIGHTS_CHECK_UNRECORDED);
    assert_int_equal(weights_local_path("org/name", found, sizeof found, &err), 0);

    const WeightsRecord written = {
        .sha256 = TEN_DIGITS_SHA256,
        .sha256_from = "X-Linked-Etag", .size = 10, .size_from = "X-Linked-Size",
        .url = "http://hub/org/name/resolve/main/model.safetensors"};
    assert_int_equal(weights_record_write(path, &written, &err), 0);
    WeightsRecord read;
    assert_int_equal(weights_record_read(path, &read, &err), 1);
    assert_string_equal(read.sha256, written.sha256);
    assert_string_equal(read.sha256_from, "X-Linked-Etag");
    assert_int_equal(read.size, 10);
    assert_string_equal(read.size_from, "X-Linked-Size");
    assert_string_equal(read.url, written.url);
    for (int hash = 0; hash <= 1; hash++) {
        assert_int_equal(weights_record_check(path, hash, &check, why, sizeof why, &err), 0);
        assert_int_equal(check, WEIGHTS_CHECK_MATCHES);
    }

    // One byte changed, the size the same: only the SHA-256 sees it.
    write_file(path, "0123456788");
    assert_int_equal(weights_record_check(path, 0, &check, why, sizeof why, &err), 0);
    assert_int_equal(check, WEIGHTS_CHECK_MATCHES);
    assert_int_equal(weights_record_check(path, 1, &check, why, sizeof why, &err), 0);
    assert_int_equal(check, WEIGHTS_CHECK_DAMAGED);
    assert_string_equal(why, "has SHA-256 f76ecd51c0db..., not the 84d89877f0d4... its "
                             "download verified");
    // Cut short: the size says it, and a use by name is refused saying what to do.
    write_file(path, "01234");
    assert_int_equal(weights_record_check(path, 0, &check, why, sizeof why, &err), 0);
    assert_int_equal(check, WEIGHTS_CHECK_DAMAGED);
    assert_string_equal(why, "has 5 bytes, not the 10 its download verified");
    expect_error(weights_local_path("org/name", found, sizeof found, &err), &err,
                 "org/name: the cached file ");
    char expected[1024];
    snprintf(expected, sizeof expected, "%s has 5 bytes, not the 10 its download verified: "
             "delete it (with its .verified record) or run 'lightly-train-c weights fetch org/name' again", path);
    if (!strstr(err.text, expected)) fail_msg("'%s' lacks '%s'", err.text, expected);

    // A later version's keys are ignored; a later version's format is no record.
    write_file(path, "0123456789");
    write_file(record_file, "lightly-train-c download record 1\nsize 10\nnew_key what\n"
                            "sha256 " TEN_DIGITS_SHA256 "\n");
    assert_int_equal(weights_record_read(path, &read, &err), 1);
    assert_string_equal(read.sha256_from, "");
    write_file(record_file, "lightly-train-c download record 2\nsize 99\n");
    assert_int_equal(weights_record_read(path, &read, &err), 0);
    // A record without its SHA-256, or not a record: damaged (fetch downloads anew).
    write_file(record_file, "lightly-train-c download record 1\nsize 10\n");
    expect_error(weights_record_read(path, &read, &err), &err, "no sha256 or size");
    write_file(record_file, "10 bytes\n");
    expect_error(weights_record_read(path, &read, &err), &err, "not a download record");
    assert_int_equal(weights_record_check(path, 0, &check, why, sizeof why, &err), 0);
    assert_int_equal(check, WEIGHTS_CHECK_DAMAGED);
    assert_non_null(strstr(why, "has a damaged download record"));
}

static void test_endpoint_offline_token_settings(void **state) {
    (void)state;
    char text[4096];
    ErrorMessage err = {{0}};
    WeightsRef ref;
    assert_int_equal(weights_parse("org/name@v2:a/b.safetensors", &ref, &err), 0);
    assert_int_equal(weights_url(&ref, text, sizeof text, &err), 0);
    assert_string_equal(text, "https://huggingface.co/org/name/resolve/v2/a/b.safetensors");
    setenv("HF_ENDPOINT", "http://mirror:8080/", 1);
    assert_int_equal(weights_url(&ref, text, sizeof text, &err), 0);
    assert_string_equal(text, "http://mirror:8080/org/name/resolve/v2/a/b.safetensors");

    assert_false(weights_offline());
    const char *truths[] = {"1", "ON", "yes", "True"}, *falsehoods[] = {"0", "off", "no", ""};
    for (int i = 0; i < 4; i++) {
        setenv("HF_HUB_OFFLINE", truths[i], 1);
        assert_true(weights_offline());
        setenv("HF_HUB_OFFLINE", falsehoods[i], 1);
        assert_false(weights_offline());
    }

    // The token: HF_TOKEN, else HF_TOKEN_PATH, else $HF_HOME/token, else
    // ~/.cache/huggingface/token.
    assert_false(weights_token(text, sizeof text));
    char file[512];
    snprintf(file, sizeof file, "%s/.cache/huggingface/token", folder);
    write_file(file, "hf_default\n");
    assert_true(weights_token(text, sizeof text));
    assert_string_equal(text, "hf_default");
    char home[300];
    snprintf(home, sizeof home, "%s/hf", folder);
    snprintf(file, sizeof file, "%s/token", home);
    write_file(file, "  hf_home  \n");
    setenv("HF_HOME", home, 1);
    assert_true(weights_token(text, sizeof text));
    assert_string_equal(text, "hf_home");
    snprintf(file, sizeof file, "%s/elsewhere", folder);
    write_file(file, "hf_path");
    setenv("HF_TOKEN_PATH", file, 1);
    assert_true(weights_token(text, sizeof text));
    assert_string_equal(text, "hf_path");
    setenv("HF_TOKEN", "hf_env", 1);
    assert_true(weights_token(text, sizeof text));
    assert_string_equal(text, "hf_env");

    DownloadSettings settings;
    assert_int_equal(weights_download_settings(&settings, &err), 0);
    assert_true(settings.stall_seconds == 180 && settings.retries == 5 &&
                settings.backoff_seconds == 1 && settings.min_rate == 1000 &&
                settings.deadline_seconds == 21600);
    setenv("LIGHTLY_TRAIN_DOWNLOAD_MIN_BYTES_PER_SEC", "2500", 1);
    setenv("LIGHTLY_TRAIN_DOWNLOAD_DEADLINE_SEC", "60", 1);
    assert_int_equal(weights_download_settings(&settings, &err), 0);
    assert_true(settings.min_rate == 2500 && settings.deadline_seconds == 60);
    setenv("LIGHTLY_TRAIN_DOWNLOAD_MIN_BYTES_PER_SEC", "0", 1);
    expect_error(weights_download_settings(&settings, &err), &err,
                 "LIGHTLY_TRAIN_DOWNLOAD_MIN_BYTES_PER_SEC=0: expected a number from 1");
    unsetenv("LIGHTLY_TRAIN_DOWNLOAD_MIN_BYTES_PER_SEC");
    unsetenv("LIGHTLY_TRAIN_DOWNLOAD_DEADLINE_SEC");
    setenv("LIGHTLY_TRAIN_DOWNLOAD_RETRIES", "many", 1);
    expect_error(weights_download_settings(&settings, &err), &err,
                 "LIGHTLY_TRAIN_DOWNLOAD_RETRIES=many: expected a number");
    unsetenv("LIGHTLY_TRAIN_DOWNLOAD_RETRIES");
    setenv("LIGHTLY_TRAIN_DOWNLOAD_CHUNK_TIMEOUT_SEC", "0", 1);
    expect_error(weights_download_settings(&settings, &err), &err,
                 "LIGHTLY_TRAIN_DOWNLOAD_CHUNK_TIMEOUT_SEC=0");
}

static void note_waiting(void *user) { *(int *)user = 1; }

// A second process finds the lock held, says so once, and gets it when the
// first lets go.
static void test_lock_between_processes(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/file.lock", folder);
    ErrorMessage err = {{0}};
    WeightsLock held;
    assert_int_equal(weights_lock_take(&held, path, NULL, NULL, &err), 0);
    const pid_t child = fork();
    if (child == 0) {
        int waited = 0;
        WeightsLock lock;
        const int status = weights_lock_take(&lock, path, note_waiting, &waited, &err);
        _exit(status == 0 && waited ? 0 : 1);
    }
    // The child is blocked on the lock while the parent holds it.
    usleep(200 * 1000);
    int child_status;
    assert_int_equal(waitpid(child, &child_status, WNOHANG), 0);
    weights_lock_release(&held);
    assert_int_equal(waitpid(child, &child_status, 0), child);
    assert_true(WIFEXITED(child_status) && WEXITSTATUS(child_status) == 0);
    // Free again: taken at once, without the waiting call.
    int waited = 0;
    assert_int_equal(weights_lock_take(&held, path, note_waiting, &waited, &err), 0);
    assert_false(waited);
    weights_lock_release(&held);
}

// HTTPS certificates: the variables first (CURL_CA_BUNDLE over
// SSL_CERT_FILE), else a readable system bundle, never a missing file.
static void test_ca_bundle(void **state) {
    (void)state;
    unsetenv("CURL_CA_BUNDLE");
    unsetenv("SSL_CERT_FILE");
    const char *found = weights_ca_bundle();
    if (found) assert_int_equal(access(found, R_OK), 0);
    setenv("SSL_CERT_FILE", "/some/where/certs.pem", 1);
    assert_string_equal(weights_ca_bundle(), "/some/where/certs.pem");
    setenv("CURL_CA_BUNDLE", "/else/where/bundle.crt", 1);
    assert_string_equal(weights_ca_bundle(), "/else/where/bundle.crt");
    unsetenv("CURL_CA_BUNDLE");
    unsetenv("SSL_CERT_FILE");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_known_names_and_spellings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lightly_train_model_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hub_references, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timm_default_tags, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torchvision_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ultralytics_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_folders, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hugging_face_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_download_record, setup, teardown),
        cmocka_unit_test_setup_teardown(test_endpoint_offline_token_settings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lock_between_processes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ca_bundle, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
