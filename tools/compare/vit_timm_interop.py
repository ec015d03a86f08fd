#!/usr/bin/python3
"""Interop of our ViT exports with timm, end to end through the commands:

1. `lightly-train-c train --model MODEL --method simclr` for a few steps on
   random images (so the weights are not the initial ones),
2. `lightly-train-c export` of its checkpoint: the file must load into timm's
   VisionTransformer (DINOv2's block: LayerScale, eps 1e-6; registers with
   no_embed_class; ViT-g's SwiGLUPacked MLP) with load_state_dict(strict=True),
3. `lightly-train-c embed` at the training size (no resampling of the
   images: each is already that size) and, with timm, the mean of the
   normalised patch tokens of the same images after ImageNet normalisation:
   prints the largest difference relative to max |embedding|.

    make && PYTHONPATH=/work/pyref /usr/bin/python3 tools/compare/vit_timm_interop.py \\
        --bin build/lightly-train-c --model vit_t16

Needs torch, numpy, PIL (Debian's python3-torch, python3-pil) and timm
(pip install --target /work/pyref timm==1.0.9 safetensors); not part of
`make test`. Exits 1 when a check fails.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
from PIL import Image


def read_safetensors(path):
    """{name: float32 tensor}, metadata of a safetensors file (F32 only)."""
    with open(path, "rb") as file:
        size = struct.unpack("<Q", file.read(8))[0]
        header = json.loads(file.read(size))
        data = file.read()
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, entry in header.items():
        if entry["dtype"] != "F32":
            raise ValueError(f"{name}: {entry['dtype']}")
        begin, end = entry["data_offsets"]
        array = np.frombuffer(data[begin:end], dtype="<f4").reshape(entry["shape"])
        tensors[name] = torch.from_numpy(array.copy())
    return tensors, metadata


def timm_model(tensors, metadata):
    """timm's VisionTransformer with the file's geometry."""
    from timm.layers import SwiGLUPacked
    from timm.models.vision_transformer import VisionTransformer
    width = tensors["cls_token"].shape[2]
    patch = tensors["patch_embed.proj.weight"].shape[2]
    depth = 1 + max(int(name.split(".")[1]) for name in tensors if name.startswith("blocks."))
    registers = tensors["reg_token"].shape[1] if "reg_token" in tensors else 0
    positions = tensors["pos_embed"].shape[1] - (0 if registers else 1)
    grid = int(round(positions ** 0.5))
    hidden = tensors["blocks.0.mlp.fc1.weight"].shape[0]
    # DINOv2's ViT-g: a SwiGLU MLP packed in fc1 (2 H rows, fc2 reads H), as
    # timm's vit_giant_patch14_dinov2 builds it.
    swiglu = hidden == 2 * tensors["blocks.0.mlp.fc2.weight"].shape[1]
    mlp = dict(mlp_layer=SwiGLUPacked, act_layer=torch.nn.SiLU) if swiglu else {}
    return VisionTransformer(img_size=grid * patch, patch_size=patch, embed_dim=width, depth=depth,
                             num_heads=int(metadata["num_heads"]), mlp_ratio=hidden / width,
                             init_values=1e-5, num_classes=0, global_pool="",
                             reg_tokens=registers, no_embed_class=registers > 0,
                             **mlp), grid * patch


def run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: exit {result.returncode}: {result.stderr}")
    return result.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", default="build/lightly-train-c")
    parser.add_argument("--model", default="vit_t16")
    parser.add_argument("--image-size", type=int, default=32)
    args = parser.parse_args()
    failures = 0
    with tempfile.TemporaryDirectory() as work:
        images = os.path.join(work, "images")
        os.makedirs(images)
        rng = np.random.default_rng(0)
        pixels = rng.integers(0, 256, (8, args.image_size, args.image_size, 3), dtype=np.uint8)
        for i, image in enumerate(pixels):
            Image.fromarray(image).save(os.path.join(images, f"{i}.png"))
        out = os.path.join(work, "run")
        run([args.bin, "train", "--data", images, "--out", out, "--model", args.model,
             "--method", "simclr", "--image-size", str(args.image_size), "--batch-size", "4",
             "--max-steps", "3", "--num-workers", "1", "--method-arg", "hidden_dim=64",
             "--method-arg", "output_dim=32"])
        exported = os.path.join(work, "vit.safetensors")
        run([args.bin, "export", "--checkpoint", os.path.join(out, "checkpoints/last.ckpt"),
             "--out", exported])
        tensors, metadata = read_safetensors(exported)
        model, native = timm_model(tensors, metadata)
        result = model.load_state_dict(tensors, strict=True)
        print(f"timm load_state_dict(strict=True): {result}")
        embeddings = os.path.join(work, "emb.npy")
        run([args.bin, "embed", "--data", images, "--checkpoint", exported, "--out", embeddings,
             "--image-size", str(args.image_size)])
        ours = np.load(embeddings)
        mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
        std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
        batch = (torch.from_numpy(pixels).permute(0, 3, 1, 2).float() / 255 - mean) / std
        model.eval()
        if args.image_size != native:
            model.dynamic_img_size = True  # timm's antialiased resampling: ours matches it
        with torch.no_grad():
            tokens = model.forward_features(batch)
        theirs = tokens[:, model.num_prefix_tokens:].mean(dim=1).numpy()
        relative = float(np.abs(ours - theirs).max() / np.abs(theirs).max())
        print(f"{args.model} at {args.image_size} px: embeddings of 8 images, max |ours - timm| "
              f"/ max |timm| = {relative:.2e}")
        if relative > 1e-5:
            print("FAIL: embeddings differ")
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
