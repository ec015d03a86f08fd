// Writes checkpoints for the end-to-end tests and the fuzz seed corpus:
//   make_checkpoint OUT --depth N [--teacher] [--method NAME] [--export-part PART]
//       a checkpoint laid out as training writes one: "backbone." = a
//       resnetN initialised with seed 1 (teacher: "teacher_backbone." with
//       seed 2), an optimizer slab, a step counter and RNG bytes. Exporting
//       a part gives the bytes of `resnet_tool save --model N --seed 1` (2).
//   make_checkpoint OUT --tiny
//       a small checkpoint with one entry of every kind (the fuzz seed
//       tests/fuzz/seeds/checkpoint/tiny.ckpt).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "nn/resnet.h"
#include "train/checkpoint.h"

static int add_backbone(CheckpointWriter *writer, Backend *backend, int depth, uint64_t seed,
                        const char *prefix, int with_slab, ErrorMessage *err) {
    const ResnetConfig config = resnet_config_default(depth);
    const ResnetInputShape unused_slot = {1, 32};
    Resnet model;
    if (resnet_create(&model, backend, &config, &unused_slot, 1, seed, err) != 0) return -1;
    int status = checkpoint_add_parameters(writer, prefix, &model.params, &model.buffers,
                                           model.num_batches_tracked, err);
    // The values arena stands in for an optimizer's momentum slab.
    if (status == 0 && with_slab)
        status = checkpoint_add_state_slab(writer, "optimizer.backbone.0.", &model.params, backend,
                                           model.params.values, err);
    resnet_free(&model);
    return status;
}

static int write_tiny(CheckpointWriter *writer, const char *out, ErrorMessage *err) {
    const float center[4] = {0.5f, -1.0f, 2.0f, 0.0f};
    const unsigned char rng_state[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    if (checkpoint_set_meta(writer, "method", "dino", err) ||
        checkpoint_set_meta(writer, "export_part", "teacher_backbone", err) ||
        checkpoint_add_host_floats(writer, "dino.center", center, 4, err) ||
        checkpoint_add_i64(writer, "step", 12, err) ||
        checkpoint_add_bytes(writer, "rng", rng_state, sizeof rng_state, err))
        return -1;
    return checkpoint_write(writer, out, err);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: make_checkpoint OUT (--depth N [--teacher] [--method NAME] "
                        "[--export-part PART] | --tiny)\n");
        return 2;
    }
    const char *out = argv[1], *method = "simclr", *export_part = "backbone";
    int depth = 0, teacher = 0, tiny = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--teacher") == 0) teacher = 1;
        else if (strcmp(argv[i], "--tiny") == 0) tiny = 1;
        else if (strcmp(argv[i], "--depth") == 0 && i + 1 < argc) depth = atoi(argv[++i]);
        else if (strcmp(argv[i], "--method") == 0 && i + 1 < argc) method = argv[++i];
        else if (strcmp(argv[i], "--export-part") == 0 && i + 1 < argc) export_part = argv[++i];
        else {
            fprintf(stderr, "make_checkpoint: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    ErrorMessage err = {{0}};
    CheckpointWriter *writer = checkpoint_writer_create();
    Backend *backend = backend_create("ref", 1, &err);
    if (!writer || !backend) {
        fprintf(stderr, "make_checkpoint: %s\n", backend ? "out of memory" : err.text);
        return 1;
    }
    int status;
    if (tiny) {
        status = write_tiny(writer, out, &err);
    } else {
        char model[32];
        snprintf(model, sizeof model, "resnet%d", depth);
        status = add_backbone(writer, backend, depth, 1, "backbone.", 1, &err);
        if (status == 0 && teacher)
            status = add_backbone(writer, backend, depth, 2, "teacher_backbone.", 0, &err);
        if (status == 0)
            status = checkpoint_set_meta(writer, "model", model, &err) ||
                     checkpoint_set_meta(writer, "method", method, &err) ||
                     checkpoint_set_meta(writer, "export_part", export_part, &err) ||
                     checkpoint_add_i64(writer, "step", 100, &err) ||
                     checkpoint_write(writer, out, &err);
    }
    if (status != 0) fprintf(stderr, "make_checkpoint: %s\n", err.text);
    checkpoint_writer_free(writer);
    backend_destroy(backend);
    return status == 0 ? 0 : 1;
}
