#!/usr/bin/env python3
"""Writes tests/fixtures/photos/: a few real photographs (public domain or
CC0) from scikit-image's data module, re-encoded as JPEGs of at most 640
pixels a side, with a README naming each one's source and licence. The GPU
script's images (make first-light) are cropped and scaled from them by
tools/photo_crops.c, so nothing is downloaded at build time.

    python3 tools/make_photo_sources.py [--wheel scikit_image-*.whl]

Without --wheel, `pip download scikit-image==0.26.0` fetches the wheel (the
data module is inside it). Needs Pillow. Not part of `make test`.
"""
import argparse
import glob
import io
import os
import subprocess
import sys
import tempfile
import zipfile

from PIL import Image

VERSION = "0.26.0"
LONGEST_SIDE = 640
QUALITY = 90
# name in skimage/data -> (our name, licence as scikit-image's docstrings state it)
PHOTOS = {
    "astronaut.png": ("astronaut", "public domain (NASA: Eileen Collins)"),
    "chelsea.png": ("chelsea", "CC0 (photographer Stefan van der Walt)"),
    "coffee.png": ("coffee", "CC0 (photographer Rachel Michetti)"),
    "hubble_deep_field.jpg": ("hubble_deep_field", "public domain (NASA)"),
    "rocket.jpg": ("rocket", "public domain (SpaceX)"),
    "retina.jpg": ("retina", "CC0 1.0 (Häggström, Mikael)"),
    "ihc.png": ("immunohistochemistry", "no known copyright restrictions"),
    "camera.png": ("camera", "CC0 (photographer Lav Varshney)"),
    "coins.png": ("coins", "no known copyright restrictions (Brooklyn Museum)"),
    "grass.png": ("grass", "CC0 (CC0Textures)"),
    "gravel.png": ("gravel", "CC0 (CC0Textures)"),
    "brick.png": ("brick", "CC0 (CC0Textures)"),
}


def fetch_wheel(folder):
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                    f"scikit-image=={VERSION}", "-d", folder], check=True)
    return glob.glob(os.path.join(folder, "scikit_image-*.whl"))[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", help="a scikit-image wheel (default: pip download)")
    parser.add_argument("--out", default="tests/fixtures/photos")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        wheel = args.wheel or fetch_wheel(folder)
        os.makedirs(args.out, exist_ok=True)
        rows = []
        with zipfile.ZipFile(wheel) as archive:
            for source, (name, licence) in PHOTOS.items():
                image = Image.open(io.BytesIO(archive.read("skimage/data/" + source)))
                image = image.convert("L" if image.mode in ("L", "I", "I;16") else "RGB")
                image.thumbnail((LONGEST_SIDE, LONGEST_SIDE), Image.LANCZOS)
                image.save(os.path.join(args.out, name + ".jpg"), quality=QUALITY)
                rows.append(f"| {name}.jpg | skimage/data/{source} | {image.width}x{image.height} "
                            f"{'grey' if image.mode == 'L' else 'RGB'} | {licence} |")
    with open(os.path.join(args.out, "README.md"), "w") as readme:
        readme.write(
            "# Real photographs for the GPU script\n\n"
            "From scikit-image " + VERSION + "'s data module (`skimage/data/`), public domain\n"
            "or CC0 as its docstrings state; re-encoded by tools/make_photo_sources.py\n"
            f"(longest side {LONGEST_SIDE}, JPEG quality {QUALITY}). `make first-light` crops and\n"
            "scales them into a few hundred JPEGs (tools/photo_crops.c).\n\n"
            "| file | source | size | licence |\n|---|---|---|---|\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
