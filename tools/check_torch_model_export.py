#!/usr/bin/env python3
"""`export --format torch_model` against PyTorch: for each model, a random
backbone (tests/e2e/make_backbone) exported as torch_model loads with
torch.load(weights_only=False) as torchvision's own class, its state_dict()
holds exactly the tensors of the same backbone's `--format torch` export
(names and values; in torchvision's order), and in eval mode it computes what torchvision's model
with those weights computes (its classifier an nn.Identity), bit for bit;
it also trains (a train-mode forward and backward) and saves again. Then the
same for the checkpoint of a one-epoch `train`.

    python tools/check_torch_model_export.py --build build

Needs torch and torchvision (not in make test: the module tree is checked
there against tests/fixtures/torchvision_structure.txt by
tests/test_torch_module_export.c). Exits 1 on the first difference.
"""
import argparse
import io
import os
import subprocess
import sys
import tempfile

import torch
import torchvision

MODELS = ("resnet18", "resnet50", "wide_resnet50_2", "timm/resnet50",
          "torchvision/shufflenet_v2_x0_5", "torchvision/shufflenet_v2_x2_0",
          "torchvision/convnext_tiny")


def run(*command):
    subprocess.run(command, check=True, capture_output=True)


def reference_model(name, state_dict):
    """torchvision's model of that name with the weights, classifier Identity."""
    builder = name.split("/")[-1]
    model = getattr(torchvision.models, builder)()
    if hasattr(model, "fc"):
        model.fc = torch.nn.Identity()
    else:
        model.classifier[2] = torch.nn.Identity()
    result = model.load_state_dict(state_dict, strict=True)
    assert not result.missing_keys and not result.unexpected_keys, result
    return model


def check(name, module_path, state_dict_path, channels=3):
    model = torch.load(module_path, weights_only=False)
    saved = torch.load(state_dict_path, weights_only=True)
    ours = model.state_dict()
    assert set(ours) == set(saved), f"{name}: other names than the state dict"
    for key, tensor in saved.items():
        assert ours[key].dtype == tensor.dtype and torch.equal(ours[key], tensor), f"{name}: {key}"
    reference = reference_model(name, saved)
    assert list(ours) == list(reference.state_dict()), f"{name}: not torchvision's order"
    assert type(model) is type(reference), (type(model), type(reference))
    model.eval(), reference.eval()
    images = torch.randn(2, channels, 64, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got, want = model(images), reference(images)
    assert got.shape == want.shape and torch.equal(got, want), f"{name}: other outputs"
    model.train()
    model(images).square().mean().backward()
    assert all(p.grad is not None for p in model.parameters()), f"{name}: a parameter got no grad"
    torch.save(model, io.BytesIO())
    return got.shape[1], len(saved)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    args = parser.parse_args()
    program = os.path.join(args.build, "lightly-train-c")
    make_backbone = os.path.join(args.build, "tests", "e2e", "make_backbone")
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}")
    with tempfile.TemporaryDirectory() as work:
        for index, name in enumerate(MODELS):
            source, module, state_dict = (os.path.join(work, f"{index}{suffix}") for suffix in
                                          (".safetensors", ".module.pt", ".pt"))
            run(make_backbone, source, name, "3")
            run(program, "export", "--checkpoint", source, "--out", module,
                "--format", "torch_model")
            run(program, "export", "--checkpoint", source, "--out", state_dict)
            features, count = check(name, module, state_dict)
            print(f"RESULT torch_model model={name} tensors={count} features={features}: "
                  "torchvision's class, the state dict's tensors, its outputs, trains")
        out = os.path.join(work, "run")
        photos = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "photos")
        run(program, "train", "--data", photos, "--out", out, "--model", "resnet18", "--method",
            "simclr", "--epochs", "1", "--batch-size", "4", "--image-size", "32")
        checkpoint = os.path.join(out, "checkpoints", "last.ckpt")
        module, state_dict = os.path.join(work, "run.module.pt"), os.path.join(work, "run.pt")
        run(program, "export", "--checkpoint", checkpoint, "--out", module,
            "format=torch_model", "part=embedding_model")
        run(program, "export", "--checkpoint", checkpoint, "--out", state_dict)
        features, count = check("resnet18", module, state_dict)
        print(f"RESULT train checkpoint torch_model tensors={count} features={features}: the same")
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
