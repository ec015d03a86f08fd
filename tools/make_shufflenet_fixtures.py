#!/usr/bin/python3
"""Writes tests/fixtures/shufflenet.safetensors: torchvision's ShuffleNetV2
as the reference for src/nn/shufflenet.h, checked by tests/test_shufflenet.c.

    /tmp/yolo-venv/bin/python -P tools/make_shufflenet_fixtures.py --out tests/fixtures

Needs torch, torchvision and numpy (the committed file: torch 2.15,
torchvision 0.29). Fixture init, the float64 truth with its float32 f32err,
the fragile branch decisions and the gradient entries are those of
tools/make_fixtures.py and tools/fixture_kinks.py (contract:
tests/fixtures/README.md), on torchvision.models.shufflenet_v2_x0_5 with fc
replaced by Identity (what LightlyTrain's ShuffleNetV2ModelWrapper pools:
conv5's map, averaged):

    check/u                    (16,) F32   u("check", i)
    input                      (2, 3, 64, 64) F32  fixture init "input" (0, 1)
    loss_weights               (2, 1024) F32       fixture init "loss_weights" (0, 1)
    features                   (2, 1024) F64       train-mode features
    loss                       () F64              sum(features * loss_weights)
    grad/P, grad_sample/P, grad_sum/P, grad_sumsq/P   as make_fixtures.py's
    running_mean/B, running_var/B   (C,) F64        every BatchNorm B after that forward
    features_eval              (2, 1024) F64       eval-mode features afterwards
    f32err/NAME                () F64              as make_fixtures.py's
    kinkerr/NAME               () F64              for the gradient entries: what all
                                                   fragile decisions flipped together move
    kinks                      () I64              how many fragile decisions there are
    parameters/SIZE            () I64   parameter count of shufflenet_v2_SIZE without fc
    keys/SIZE                  () I64   its state-dict keys without fc.*
for SIZE in x0_5, x1_0, x1_5, x2_0.
"""
import argparse
import os
import sys

import numpy as np
import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_kinks  # noqa: E402
import make_fixtures as mf  # noqa: E402

SIZES = ("x0_5", "x1_0", "x1_5", "x2_0")
FEATURES = 1024


def run(dtype, input_array, loss_weights_array, decisions):
    """The fixture computation in dtype; ReLUs and the max pool through
    decisions (recorded by the float64 run, replayed by the float32 one)."""
    model = torchvision.models.shufflenet_v2_x0_5()
    mf.fixture_init_model(model)
    model.fc = torch.nn.Identity()
    model = model.to(dtype)
    fixture_kinks.install(model, decisions)
    images = torch.from_numpy(input_array).to(dtype)
    loss_weights = torch.from_numpy(loss_weights_array).to(dtype)
    model.train()
    features = model(images)
    loss = (features * loss_weights).sum()
    loss.backward(retain_graph=True)
    outputs = {"features": features.detach().numpy().copy(), "loss": loss.detach().numpy().copy()}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            outputs[f"running_mean/{name}"] = module.running_mean.numpy().copy()
            outputs[f"running_var/{name}"] = module.running_var.numpy().copy()
    grads = {name: p.grad.detach().numpy().reshape(-1).astype(np.float64)
             for name, p in model.named_parameters()}
    model.eval()
    with torch.no_grad():
        recording, decisions.mode = decisions.mode, "off"
        outputs["features_eval"] = model(images).numpy().copy()
        decisions.mode = recording
    return outputs, grads, list(model.named_parameters())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder (tests/fixtures)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    safe = mf.SafeFile()
    mf.add_check(safe)
    input_array = mf.fixture_value("input", (mf.BATCH, 3, mf.IMAGE_SIZE, mf.IMAGE_SIZE), 0.0, 1.0)
    loss_weights_array = mf.fixture_value("loss_weights", (mf.BATCH, FEATURES), 0.0, 1.0)
    safe.add("input", input_array)
    safe.add("loss_weights", loss_weights_array)

    recorded = fixture_kinks.Decisions("record")
    double, double_grads, parameters = run(torch.float64, input_array, loss_weights_array, recorded)
    replayed = fixture_kinks.Decisions("replay", recorded)
    single, single_grads, _ = run(torch.float32, input_array, loss_weights_array, replayed)
    kinks = fixture_kinks.kink_errors(recorded, replayed, parameters, double_grads)
    for name, value in double.items():
        safe.add(name, np.asarray(value, dtype=np.float64))
        error = np.abs(single[name].astype(np.float64) - value).max()
        safe.add(f"f32err/{name}", np.float64(error))
    mf.add_gradient_entries(safe, "step", double_grads, single_grads, mf.FULL_GRAD_MAX)
    # the gradient entries without the "step/" prefix, as make_fixtures.py names them
    for name in [n for n in safe.arrays if "step/" in n]:
        bare = name.replace("step/", "", 1)
        safe.arrays[bare] = safe.arrays.pop(name)
        if bare.startswith(("grad/", "grad_sample/", "grad_sum/", "grad_sumsq/")):
            safe.add(f"kinkerr/{bare}", np.float64(kinks.of(bare)))
    safe.add("kinks", np.int64(len(kinks.decisions)))

    for size in SIZES:
        model = getattr(torchvision.models, f"shufflenet_v2_{size}")()
        state = {k: v for k, v in model.state_dict().items() if not k.startswith("fc.")}
        count = sum(p.numel() for n, p in model.named_parameters() if not n.startswith("fc."))
        safe.add(f"parameters/{size}", np.int64(count))
        safe.add(f"keys/{size}", np.int64(len(state)))

    command = "/tmp/yolo-venv/bin/python -P tools/make_shufflenet_fixtures.py --out tests/fixtures"
    mf.write_fixture(safe, args.out, "shufflenet.safetensors", command,
                     f"torchvision {torchvision.__version__} shufflenet_v2_x0_5")
    print(f"loss {float(double['loss']):.6f}, fragile decisions {len(kinks.decisions)}, "
          f"features f32err {float(safe.arrays['f32err/features']):.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
