#!/usr/bin/env python3
"""Writes a folder of ImageNet-sized JPEGs made from noise, for GPU machines
that have Pillow (any PyTorch environment) but not the Debian photos that
tools/make_bench_images.py cuts from.

    python3 tools/compare/make_jpeg_folder.py --out DIR [--count 2048] [--seed 0]

Each image is 500 x 375 (a third of them 375 x 500), baseline JPEG quality
90 with 4:2:0 chroma, like ImageNet's: a smooth random field (a few random
colours, bilinearly enlarged) plus fine noise, so the entropy coder has
work; the files are about 80 kB (ImageNet's average is about 110 kB).
Benchmarks on it say so: decode speed on photos was not compared. Deterministic in
(seed, index); existing files are kept.
"""
import argparse
import os
import random

from PIL import Image


def make_image(rng, width, height):
    coarse = Image.new("RGB", (8, 6))
    coarse.putdata([tuple(rng.randrange(256) for _ in range(3)) for _ in range(48)])
    image = coarse.resize((width, height), Image.BILINEAR)
    noise = Image.effect_noise((width, height), 48).convert("RGB")
    return Image.blend(image, noise, 0.25)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--count", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for index in range(args.count):
        folder = os.path.join(args.out, f"class{index % 10}")
        path = os.path.join(folder, f"image{index:05d}.JPEG")
        if os.path.exists(path):
            continue
        os.makedirs(folder, exist_ok=True)
        rng = random.Random(args.seed * 1_000_003 + index)
        width, height = (375, 500) if index % 3 == 2 else (500, 375)
        temporary = path + ".tmp"
        make_image(rng, width, height).save(temporary, "JPEG", quality=90, subsampling=2)
        os.replace(temporary, path)


if __name__ == "__main__":
    main()
