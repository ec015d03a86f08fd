#!/usr/bin/python3
"""Interop of our ConvNeXts with torchvision, timm and DINOv3, end to end
through the commands, for each naming (torchvision/, timm/, dinov3/):

1. Ours to theirs: `lightly-train-c train --model NAMING/convnext_SIZE
   --method simclr` for a few steps on random images, `export` of the
   checkpoint, the file loaded with load_state_dict into
   torchvision.models.convnext_SIZE() (strict=False: only classifier.2.*, the
   classifier's linear layer, may be missing), timm.create_model(
   "convnext_SIZE", num_classes=0) (strict) and DINOv3's own ConvNeXt
   (strict, as its released checkpoints load); then `embed` of the images
   against the same model's features (torchvision: the mean of
   model.features; timm: of forward_features; DINOv3: of its
   x_norm_patchtokens, LightlyTrain's wrappers): max |ours - theirs| / max
   |theirs|.
2. Theirs to ours: a randomly initialised model of each library saved as
   safetensors (and DINOv3's also with torch.save, as its .pth releases),
   `embed --checkpoint` of that file against the model's own features.

    /work/venvs/convnext/bin/python tools/compare/convnext_interop.py \\
        --bin build/lightly-train-c --dinov3-source DIR/dinov3/models/convnext.py

Needs torch, torchvision, timm, safetensors, numpy, Pillow (pip) and
facebookresearch/dinov3's dinov3/models/convnext.py (imported from the given
path, no other part of that repository). Not part of `make test`. Exits 1
when a check fails.
"""
import argparse
import importlib.util
import os
import sys
import tempfile

import numpy as np
import torch
import torchvision
from PIL import Image
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vit_timm_interop import run  # noqa: E402

import timm  # noqa: E402

SIZES = {"tiny": ([3, 3, 9, 3], [96, 192, 384, 768])}
TOLERANCE = 1e-5


def dinov3_class(path):
    spec = importlib.util.spec_from_file_location("dinov3_convnext", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ConvNeXt


def model_of(naming, size, dinov3):
    if naming == "torchvision":
        return getattr(torchvision.models, f"convnext_{size}")()
    if naming == "timm":
        return timm.create_model(f"convnext_{size}", num_classes=0)
    depths, dims = SIZES[size]
    model = dinov3(depths=depths, dims=dims)
    model.init_weights()
    return model


def features(naming, model, batch):
    """LightlyTrain's pooled features of the model (eval mode)."""
    model.eval()
    with torch.no_grad():
        if naming == "torchvision":
            return model.features(batch).mean(dim=(2, 3)).numpy()
        if naming == "timm":
            return model.forward_features(batch).mean(dim=(2, 3)).numpy()
        out = model.forward_features(batch)
        return out["x_norm_patchtokens"].mean(dim=1).numpy()


def compare(label, ours, theirs):
    relative = float(np.abs(ours - theirs).max() / np.abs(theirs).max())
    ok = relative <= TOLERANCE
    print(f"{label}: max |ours - theirs| / max |theirs| = {relative:.2e}"
          f"{'' if ok else '  FAIL'}")
    return 0 if ok else 1


def model_name(naming, size):
    # train's --model: LightlyTrain's DINOv3 name would start from DINOv3's weights
    return (f"dinov3/convnext-{size}-notpretrained" if naming == "dinov3"
            else f"{naming}/convnext_{size}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", default="build/lightly-train-c")
    parser.add_argument("--dinov3-source", required=True,
                        help="facebookresearch/dinov3's dinov3/models/convnext.py")
    parser.add_argument("--size", default="tiny", choices=sorted(SIZES))
    parser.add_argument("--image-size", type=int, default=64)
    args = parser.parse_args()
    torch.manual_seed(0)
    dinov3 = dinov3_class(args.dinov3_source)
    failures = 0
    with tempfile.TemporaryDirectory() as work:
        images = os.path.join(work, "images")
        os.makedirs(images)
        rng = np.random.default_rng(0)
        pixels = rng.integers(0, 256, (8, args.image_size, args.image_size, 3), dtype=np.uint8)
        for i, image in enumerate(pixels):
            Image.fromarray(image).save(os.path.join(images, f"{i}.png"))
        mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
        std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
        batch = (torch.from_numpy(pixels).permute(0, 3, 1, 2).float() / 255 - mean) / std
        size = str(args.image_size)

        def embed(checkpoint, name):
            out = os.path.join(work, f"{name}.npy")
            run([args.bin, "embed", "--data", images, "--checkpoint", checkpoint, "--out", out,
                 "--image-size", size, "--num-workers", "1"])
            return np.load(out)

        for naming in ("torchvision", "timm", "dinov3"):
            # 1. ours -> theirs
            out = os.path.join(work, f"run_{naming}")
            run([args.bin, "train", "--data", images, "--out", out, "--model",
                 model_name(naming, args.size), "--method", "simclr", "--image-size", size,
                 "--batch-size", "4", "--max-steps", "3", "--num-workers", "1",
                 "--method-arg", "hidden_dim=64", "--method-arg", "output_dim=32"])
            exported = os.path.join(work, f"{naming}.safetensors")
            run([args.bin, "export", "--checkpoint", os.path.join(out, "checkpoints/last.ckpt"),
                 "--out", exported])
            model = model_of(naming, args.size, dinov3)
            result = model.load_state_dict(load_file(exported), strict=naming != "torchvision")
            print(f"{naming}: load_state_dict of our export: {result}")
            if naming == "torchvision" and (result.unexpected_keys or sorted(result.missing_keys)
                                            != ["classifier.2.bias", "classifier.2.weight"]):
                print("FAIL: keys other than classifier.2.* differ")
                failures += 1
            failures += compare(f"{naming}: our export, embed vs their features",
                                embed(exported, f"ours_{naming}"), features(naming, model, batch))
            # 2. theirs -> ours
            model = model_of(naming, args.size, dinov3)
            # (clones: DINOv3's norm and norms.3 share their tensors)
            state = {k: v.clone().contiguous() for k, v in model.state_dict().items()}
            theirs = features(naming, model, batch)
            path = os.path.join(work, f"theirs_{naming}.safetensors")
            save_file(state, path)
            failures += compare(f"{naming}: their safetensors, our embed", embed(path, naming),
                                theirs)
            if naming == "dinov3":
                pth = os.path.join(work, "theirs_dinov3.pth")
                torch.save(state, pth)
                failures += compare("dinov3: their torch.save .pth, our embed",
                                    embed(pth, "pth"), theirs)
    print("interop: " + ("ok" if not failures else f"{failures} check(s) FAILED"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
