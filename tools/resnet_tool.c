// resnet_tool: our ResNet backbones from the command line, for the interop
// check against torchvision (tools/compare/torchvision_interop.py).
//   resnet_tool save --model 18 --seed 0 --out FILE [--backend ref]
//       writes a freshly initialised backbone (resnet_init) with resnet_save
//   resnet_tool features --model 18 --weights FILE --input IN --out OUT [--backend ref]
//       loads FILE (a torchvision state dict as safetensors), runs eval-mode
//       features on IN's F32 tensor "input" (N, 3, H, H), NCHW as in PyTorch,
//       and writes OUT with the F32 tensor "features" (N, D)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "nn/resnet.h"
#include "nn/safetensors.h"

typedef struct ToolOptions {
    const char *command;  // "save" or "features"
    int depth;
    unsigned long long seed;
    const char *backend;
    const char *weights;
    const char *input;
    const char *out;
} ToolOptions;

static int usage(const char *program) {
    fprintf(stderr,
            "usage: %s save --model DEPTH --seed N --out FILE [--backend NAME]\n"
            "       %s features --model DEPTH --weights FILE --input IN.safetensors --out OUT "
            "[--backend NAME]\n",
            program, program);
    return 2;
}

// Returns 0 when the options are complete for the command, -1 otherwise.
static int parse_options(int argc, char **argv, ToolOptions *options) {
    *options = (ToolOptions){.backend = "ref"};
    if (argc < 2) return -1;
    options->command = argv[1];
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *key = argv[i], *value = argv[i + 1];
        if (strcmp(key, "--model") == 0) options->depth = atoi(value);
        else if (strcmp(key, "--seed") == 0) options->seed = strtoull(value, NULL, 10);
        else if (strcmp(key, "--backend") == 0) options->backend = value;
        else if (strcmp(key, "--weights") == 0) options->weights = value;
        else if (strcmp(key, "--input") == 0) options->input = value;
        else if (strcmp(key, "--out") == 0) options->out = value;
        else return -1;
    }
    if (argc % 2 != 0 || options->depth == 0 || !options->out) return -1;
    if (strcmp(options->command, "save") == 0) return 0;
    if (strcmp(options->command, "features") == 0 && options->weights && options->input) return 0;
    return -1;
}

static int save_initialised(Backend *backend, const ToolOptions *options, ErrorMessage *err) {
    const ResnetConfig config = resnet_config_default(options->depth);
    const ResnetInputShape shape = {1, 32};  // activations are not used; the smallest sensible slot
    Resnet model;
    int status = resnet_create(&model, backend, &config, &shape, 1, options->seed, err);
    if (status == 0) status = resnet_save(&model, options->out, NULL, err);
    resnet_free(&model);
    return status;
}

// The (N, 3, H, H) input of `file` as NHWC host floats; NULL on error.
static float *read_input_nhwc(const SafeTensors *file, ResnetInputShape *shape,
                              ErrorMessage *err) {
    const SafeTensor *tensor = safetensors_find(file, "input");
    if (!tensor) {
        error_set(err, "no tensor \"input\"");
        return NULL;
    }
    if (tensor->dtype != SAFE_F32 || tensor->rank != 4 || tensor->shape[1] != 3 ||
        tensor->shape[2] != tensor->shape[3] || tensor->shape[0] < 1) {
        error_set(err, "\"input\" must be F32 (N, 3, H, H), got %s of rank %d",
                  safe_dtype_name(tensor->dtype), tensor->rank);
        return NULL;
    }
    const size_t batch = (size_t)tensor->shape[0];
    const size_t pixels = (size_t)(tensor->shape[2] * tensor->shape[3]);
    const float *nchw = safetensors_data(file, tensor);
    float *nhwc = malloc(batch * pixels * 3 * sizeof *nhwc);
    if (!nhwc) {
        error_set(err, "out of memory for the input");
        return NULL;
    }
    for (size_t n = 0; n < batch; n++)
        for (size_t c = 0; c < 3; c++)
            for (size_t p = 0; p < pixels; p++) {
                float value;  // the data may be unaligned: copy bytes
                memcpy(&value, &nchw[(n * 3 + c) * pixels + p], sizeof value);
                nhwc[(n * pixels + p) * 3 + c] = value;
            }
    shape->batch = (int)batch;
    shape->resolution = (int)tensor->shape[2];
    return nhwc;
}

static int write_features(Backend *backend, const Resnet *model, int batch, const char *path,
                          ErrorMessage *err) {
    const size_t count = (size_t)batch * model->feature_dim;
    float *features = malloc(count * sizeof *features);
    if (!features) return error_set(err, "out of memory for the features");
    backend->op.download(backend, features, resnet_features(model, 0), count * sizeof *features);
    const SafeTensorWrite tensor = {"features", SAFE_F32, 2, {batch, model->feature_dim}, features};
    const int status = safetensors_write(path, &tensor, 1, NULL, 0, err);
    free(features);
    return status;
}

static int run_features(Backend *backend, const ToolOptions *options, ErrorMessage *err) {
    SafeTensors file;
    if (safetensors_read(options->input, &file, err)) return -1;
    ResnetInputShape shape;
    float *host_input = read_input_nhwc(&file, &shape, err);
    safetensors_free(&file);
    if (!host_input) return error_prefix(err, "%s", options->input);

    const ResnetConfig config = resnet_config_default(options->depth);
    const size_t input_bytes =
        (size_t)shape.batch * shape.resolution * shape.resolution * 3 * sizeof(float);
    float *input = backend->op.alloc(backend, input_bytes);
    Resnet model;
    int status = input ? 0 : error_set(err, "out of backend memory for the input");
    if (status == 0) {
        backend->op.upload(backend, input, host_input, input_bytes);
        if (resnet_declare(&model, backend, &config, err) ||
            resnet_allocate(&model, &shape, 1, err) || resnet_load(&model, options->weights, err) ||
            resnet_forward(&model, 0, shape.batch, (const Act *)input, 0, err) ||
            write_features(backend, &model, shape.batch, options->out, err))
            status = -1;
        resnet_free(&model);  // also after a failed declare (it leaves the model freeable)
    }
    if (input) backend->op.free(backend, input);
    free(host_input);
    return status;
}

int main(int argc, char **argv) {
    ToolOptions options;
    if (parse_options(argc, argv, &options)) return usage(argv[0]);
    ErrorMessage err = {{0}};
    Backend *backend = backend_create(options.backend, 0, &err);
    if (!backend) {
        fprintf(stderr, "error: %s\n", err.text);
        return 1;
    }
    const int status = strcmp(options.command, "save") == 0
                           ? save_initialised(backend, &options, &err)
                           : run_features(backend, &options, &err);
    if (status != 0) fprintf(stderr, "error: %s\n", err.text);
    backend_destroy(backend);
    return status == 0 ? 0 : 1;
}
