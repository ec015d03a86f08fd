#!/usr/bin/env python3
"""Embeddings of LightlyTrain's `embed` against ours from the same checkpoint:
for each model, LightlyTrain trains it one epoch (SimCLR, random
initialisation, nothing downloaded) on --data, then `lightly_train.embed`
of its last.ckpt and `lightly-train-c embed` of its exported_last.pt embed
the same images (224 x 224) into LightlyTrain's default format, torch (both
files read with torch.load(weights_only=True): the same keys, types and
file names, ours sorted, LightlyTrain's in its listing's order); per model,
the smallest cosine similarity of an image's two embeddings and the largest
difference relative to the largest value.

    /work/venvs/yolo/bin/python tools/compare/lightly_train_embed.py --bin build/lightly-train-c --data DIR

Needs lightly-train (checked with 0.18.0), torch, timm, ultralytics. LightlyTrain's
embed decodes at full resolution and resizes with albumentations' Resize,
which is OpenCV's bilinear INTER_LINEAR (no antialiasing); ours resizes an
embedding's images the same way (src/augment/resize.h, RESIZE_BILINEAR), so
what is left are one-level roundings of the fixed-point weights.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

MODELS = ("torchvision/resnet18", "timm/resnet18", "timm/vit_tiny_patch16_224",
          "torchvision/convnext_tiny", "ultralytics/yolov8n.yaml", "ultralytics/yolo26n.yaml")


def read_torch(path):
    """The file's {"filenames", "embeddings"} as {name: row}, checked as LightlyTrain writes it."""
    import torch
    saved = torch.load(path, weights_only=True)
    assert isinstance(saved, dict) and list(saved) == ["filenames", "embeddings"], list(saved)
    names, embeddings = saved["filenames"], saved["embeddings"]
    assert isinstance(names, list) and all(isinstance(name, str) for name in names)
    assert embeddings.dtype == torch.float32 and embeddings.shape[0] == len(names)
    return names, {name: row for name, row in zip(names, embeddings.numpy().astype(np.float64))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", default="build/lightly-train-c")
    parser.add_argument("--data", required=True)
    parser.add_argument("--models", nargs="+", default=MODELS, help="LightlyTrain model names")
    args = parser.parse_args()
    import lightly_train
    print(f"lightly-train {lightly_train.__version__}")
    worst = 1.0
    with tempfile.TemporaryDirectory() as work:
        for index, model in enumerate(args.models):
            out = os.path.join(work, str(index))
            lightly_train.train(out=out, data=args.data, model=model, method="simclr", epochs=1,
                                batch_size=4, num_workers=0, accelerator="cpu", devices=1,
                                precision="32-true", transform_args={"image_size": (64, 64)})
            theirs, ours = os.path.join(work, f"{index}.lt.pth"), os.path.join(work, f"{index}.pth")
            lightly_train.embed(out=theirs, checkpoint=os.path.join(out, "checkpoints", "last.ckpt"),
                                data=args.data, num_workers=0, accelerator="cpu")
            subprocess.run([args.bin, "embed", "--data", args.data, "--checkpoint",
                            os.path.join(out, "exported_models", "exported_last.pt"),
                            "--out", ours], check=True, capture_output=True)
            (their_order, a), (our_order, b) = read_torch(theirs), read_torch(ours)
            assert sorted(a) == sorted(b), "the two embed different files"
            names = sorted(a)
            x, y = np.stack([a[n] for n in names]), np.stack([b[n] for n in names])
            cosine = float(((x * y).sum(1) / np.linalg.norm(x, axis=1) /
                            np.linalg.norm(y, axis=1)).min())
            relative = float(np.abs(x - y).max() / np.abs(x).max())
            worst = min(worst, cosine)
            print(f"RESULT model={model} images={len(names)} dims={x.shape[1]} "
                  f"min_cosine={cosine:.7f} max_relative_difference={relative:.2g}")
    return 0 if worst > 0.999 else 1


if __name__ == "__main__":
    sys.exit(main())
