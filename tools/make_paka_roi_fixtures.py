#!/usr/bin/python3
"""Writes tests/fixtures/paka_roi.safetensors: LightlyTrain's DINOv31 view
alignment (DINOv31._align_cross_view_pair and _roi_align_view over lightly's
roi_resample_to_grid, torchvision's roi_align) for src/ssl_methods/paka_roi.h,
checked by tests/test_paka_roi.c.

    cd /tmp && /path/to/venv/bin/python -P /path/to/repo/tools/make_paka_roi_fixtures.py \
        --out /path/to/repo/tests/fixtures

Needs torch, torchvision, lightly and lightly_train (0.18: the dinov31
method); the two methods are called on a stand-in for the method object,
in float32 as LightlyTrain runs them on fp32 tokens.

For every case C:
    C/config          (6,) I64   student grid, teacher grid, channels, pairs (B), student
                                 flip, teacher flip
    C/student_geom    (B, 8) F32  x0, y0, x1, y1, image w, image h, hflip, vflip (pixels)
    C/teacher_geom    (B, 8) F32
    C/student_tokens  (B, Ns, C) F32   random, Ns = student grid^2
    C/teacher_tokens  (B, Nt, C) F32
    C/student_aligned (B, Ns, C) F32   out grid = the student grid
    C/teacher_aligned (B, Ns, C) F32
    C/valid           (B,) F32  1 where the crops share a region
"""
import argparse
import os
import sys
import types

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import SafeFile  # noqa: E402

from lightly_train._methods.dinov31.dinov31 import DINOv31  # noqa: E402

# (name, student grid, teacher grid, channels, boxes as (student, teacher)
# crops in image pixels, student flip, teacher flip, image size)
CASES = [
    ("inside", 7, 16, 5, [((40, 30, 140, 110), (10, 5, 300, 260)),
                          ((120, 60, 171, 131), (100, 40, 260, 200)),
                          ((0, 0, 64, 64), (0, 0, 224, 224))], 0, 0, (320, 280)),
    ("flipped", 7, 16, 4, [((40, 30, 140, 110), (10, 5, 300, 260)),
                           ((150, 90, 190, 140), (100, 40, 260, 200))], 1, 1, (320, 280)),
    ("partial", 4, 6, 3, [((200, 150, 310, 270), (10, 5, 260, 230)),
                          ((0, 0, 50, 60), (30, 40, 200, 220)),
                          ((250, 10, 300, 60), (10, 5, 180, 150))], 1, 0, (320, 280)),
    ("large_teacher", 7, 37, 3, [((300, 200, 420, 330), (50, 40, 600, 560))], 0, 1, (640, 600)),
]


def geometry(box, image, flip):
    x0, y0, x1, y1 = box
    return [float(x0), float(y0), float(x1), float(y1), float(image[0]), float(image[1]),
            float(flip), 0.0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder of the fixture file")
    args = parser.parse_args()
    torch.manual_seed(20261130)
    method = types.SimpleNamespace()
    method._roi_align_view = lambda *a, **k: DINOv31._roi_align_view(method, *a, **k)
    out = SafeFile()
    for name, s_grid, t_grid, channels, boxes, s_flip, t_flip, image in CASES:
        pairs = len(boxes)
        s_geom = torch.tensor([geometry(s, image, s_flip) for s, _ in boxes])
        t_geom = torch.tensor([geometry(t, image, t_flip) for _, t in boxes])
        s_tokens = torch.randn(pairs, s_grid * s_grid, channels)
        t_tokens = torch.randn(pairs, t_grid * t_grid, channels)
        s_al, t_al, valid = DINOv31._align_cross_view_pair(
            method, student_tokens=s_tokens, student_geom=s_geom, student_h=s_grid,
            student_w=s_grid, teacher_tokens=t_tokens, teacher_geom=t_geom, teacher_h=t_grid,
            teacher_w=t_grid, out_h=s_grid, out_w=s_grid)
        out.add(f"{name}/config",
                torch.tensor([s_grid, t_grid, channels, pairs, s_flip, t_flip],
                             dtype=torch.int64).numpy())
        for key, value in [("student_geom", s_geom), ("teacher_geom", t_geom),
                           ("student_tokens", s_tokens), ("teacher_tokens", t_tokens),
                           ("student_aligned", s_al), ("teacher_aligned", t_al),
                           ("valid", valid[:, 0].float())]:
            out.add_torch(f"{name}/{key}", value.float().contiguous())
    out.write(os.path.join(args.out, "paka_roi.safetensors"),
              {"source": "tools/make_paka_roi_fixtures.py",
               "cases": ",".join(c[0] for c in CASES)})


if __name__ == "__main__":
    main()
