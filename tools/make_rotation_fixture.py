#!/usr/bin/env python3
"""Writes tests/fixtures/rotation.safetensors: albumentations' Rotate as
LightlyTrain's random_rotation configures it (cv2.INTER_AREA,
cv2.BORDER_REFLECT_101, an angle fixed by limit=(a, a)) on an 8-bit RGB view
and a float view of 2 channels, checked against src/augment/rotate.c by
tests/test_augment_views.c.

    python3 -m venv /tmp/alb && /tmp/alb/bin/pip install albumentations opencv-python-headless safetensors
    /tmp/alb/bin/python tools/make_rotation_fixture.py --out tests/fixtures/rotation.safetensors

Tensors: image_u8 (32, 32, 3) U8 and image_f32 (32, 32, 2) F32 (gradients
with noise, fixed seed); for each angle A in ANGLES (named by index i):
rotated_u8/i, rotated_f32/i; angles (n,) F32. Metadata: the versions of
albumentations and OpenCV.
"""
import argparse

import albumentations
import cv2
import numpy as np
from safetensors.numpy import save_file

ANGLES = [17.0, -37.5, 90.0, 180.0, 5.25, -123.0]
SIZE = 32


def rotate(image, angle):
    transform = albumentations.Rotate(limit=(angle, angle), p=1.0, interpolation=cv2.INTER_AREA,
                                      border_mode=cv2.BORDER_REFLECT_101)
    return transform(image=image)["image"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    out = parser.parse_args().out
    rng = np.random.default_rng(7)
    y, x = np.mgrid[0:SIZE, 0:SIZE]
    gradient = np.stack([x * 7, y * 5, (x + y) * 3], axis=-1) % 200
    image_u8 = (gradient + rng.integers(0, 56, gradient.shape)).astype(np.uint8)
    image_f32 = np.stack([x / SIZE, np.sin(y / 3.0)], axis=-1).astype(np.float32)
    image_f32 += rng.normal(0, 0.05, image_f32.shape).astype(np.float32)
    tensors = {"image_u8": image_u8, "image_f32": image_f32,
               "angles": np.array(ANGLES, dtype=np.float32)}
    for i, angle in enumerate(ANGLES):
        tensors[f"rotated_u8/{i}"] = np.ascontiguousarray(rotate(image_u8, angle))
        tensors[f"rotated_f32/{i}"] = np.ascontiguousarray(rotate(image_f32, angle))
    save_file(tensors, out, metadata={"albumentations": albumentations.__version__,
                                      "opencv": cv2.__version__})


if __name__ == "__main__":
    main()
