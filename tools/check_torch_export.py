#!/usr/bin/env python3
"""Our torch.save-style state dicts against PyTorch: for each model, a random
backbone (tests/e2e/make_backbone) exported with `export --out NAME.pt`
loads with torch.load(weights_only=True), holds exactly the tensors of the
same backbone's safetensors export, and loads into the PyTorch model it is
named for (torchvision's or timm's; only a classifier missing); and the
exported_last.pt of a one-epoch `train` loads into torchvision's ResNet-18
with LightlyTrain's snippet, load_state_dict(torch.load(path,
weights_only=True)), given strict=False (ours has no fc).

Then `export --format torch_model`: for each of TORCH_MODELS, a random
backbone's torch_model file loads with torch.load(weights_only=False) as
torchvision's own class, its state_dict() holds exactly the tensors of the
same backbone's `--format torch` export (names and values; in torchvision's
order), and in eval mode it computes what torchvision's model with those
weights computes (its classifier an nn.Identity), bit for bit; it also
trains (a train-mode forward and backward) and saves again; the same for
the trained run's checkpoint (format=torch_model part=embedding_model). The
module tree is checked in make test against
tests/fixtures/torchvision_structure.txt by tests/test_torch_module_export.c.

    python tools/check_torch_export.py --build build

Needs torch, torchvision, timm and safetensors (not in make test: the
structure is checked there by tests/test_pt_state_dict.c). Exits 1 on the
first difference.
"""
import argparse
import io
import os
import subprocess
import sys
import tempfile

import safetensors.torch
import timm
import torch
import torchvision

# (our model name, a function making the PyTorch model, keys it may miss)
MODELS = (
    ("resnet18", lambda: torchvision.models.resnet18(), {"fc.weight", "fc.bias"}),
    ("vit_s14", lambda: timm.create_model("vit_small_patch14_dinov2", img_size=224), set()),
    ("torchvision/convnext_tiny", lambda: torchvision.models.convnext_tiny(),
     {"classifier.2.weight", "classifier.2.bias"}),
    ("timm/convnext_tiny", lambda: timm.create_model("convnext_tiny"),
     {"head.fc.weight", "head.fc.bias"}),
    ("timm/vit_small_patch16_224", lambda: timm.create_model("vit_small_patch16_224"),
     {"head.weight", "head.bias"}),
    ("timm/vit_small_patch14_reg4_dinov2",
     lambda: timm.create_model("vit_small_patch14_reg4_dinov2", img_size=224), set()),
)

TORCH_MODELS = ("resnet18", "resnet50", "wide_resnet50_2", "timm/resnet50",
          "torchvision/shufflenet_v2_x0_5", "torchvision/shufflenet_v2_x2_0",
          "torchvision/convnext_tiny")


def run(*command):
    subprocess.run(command, check=True, capture_output=True)


def check_state_dict(pt, reference, make_model, may_miss):
    saved = torch.load(pt, weights_only=True)
    assert type(saved).__name__ == "OrderedDict", type(saved)
    expected = safetensors.torch.load_file(reference)
    assert list(saved) == list(expected), "other names or order than the safetensors"
    for name, tensor in expected.items():
        assert saved[name].dtype == tensor.dtype and torch.equal(saved[name], tensor), name
    result = make_model().load_state_dict(saved, strict=False)
    assert not result.unexpected_keys, result.unexpected_keys
    assert set(result.missing_keys) <= may_miss, result.missing_keys
    return len(saved)


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


def check_torch_models(program, make_backbone, work):
    for index, name in enumerate(TORCH_MODELS):
        source, module, state_dict = (os.path.join(work, f"tm{index}{suffix}") for suffix in
                                      (".safetensors", ".module.pt", ".pt"))
        run(make_backbone, source, name, "3")
        run(program, "export", "--checkpoint", source, "--out", module, "--format", "torch_model")
        run(program, "export", "--checkpoint", source, "--out", state_dict)
        features, count = check(name, module, state_dict)
        print(f"RESULT torch_model model={name} tensors={count} features={features}: "
              "torchvision's class, the state dict's tensors, its outputs, trains")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    args = parser.parse_args()
    program = os.path.join(args.build, "lightly-train-c")
    make_backbone = os.path.join(args.build, "tests", "e2e", "make_backbone")
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, timm {timm.__version__}")
    with tempfile.TemporaryDirectory() as work:
        for index, (name, make_model, may_miss) in enumerate(MODELS):
            source, pt = (os.path.join(work, f"{index}.{kind}") for kind in ("safetensors", "pt"))
            run(make_backbone, source, name, "3")
            run(program, "export", "--checkpoint", source, "--out", pt)
            exported = os.path.join(work, f"{index}.export.safetensors")
            run(program, "export", "--checkpoint", source, "--out", exported)
            count = check_state_dict(pt, exported, make_model, may_miss)
            print(f"RESULT export model={name} tensors={count}: equal to the safetensors, loads")
        out = os.path.join(work, "run")
        photos = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "photos")
        run(program, "train", "--data", photos, "--out", out, "--model", "resnet18", "--method",
            "simclr", "--epochs", "1", "--batch-size", "4", "--image-size", "32")
        exported = os.path.join(out, "exported_models", "exported_last")
        count = check_state_dict(exported + ".pt", exported + ".safetensors", MODELS[0][1],
                                 MODELS[0][2])
        print(f"RESULT train exported_last.pt tensors={count}: equal to the safetensors, loads")
        check_torch_models(program, make_backbone, work)
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
