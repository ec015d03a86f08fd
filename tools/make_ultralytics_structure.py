#!/usr/bin/env python3
"""Writes tests/fixtures/ultralytics_structure.txt: the module tree of the
checkpoints Ultralytics saves, which tests/test_ultralytics_export.c compares
the .pt files we write against (weights/ultralytics_export.h), so that our
writer cannot drift from what Ultralytics loads.

    /work/venvs/yolo/bin/python tools/make_ultralytics_structure.py --out tests/fixtures

Needs ultralytics (checked with 8.4.190) and torch. For yolov8n, yolo11n,
yolo11m (C3k), yolo26n (YOLO26's SPPF, attention C3k2 and end-to-end
Detect head) and the -seg, -pose, -obb and -cls models of yolov8n, yolo11n
and yolo26n (Segment, Pose, OBB heads and YOLO26's; Classify) and yolov5nu
(C3 blocks, a stem of padding 2), yolo12n and yolo12l (A2C2f: ABlock pairs
or C3k; the l size's gamma), yolo26n-sem and yolo26n-depth (SemanticSegment,
Depth), yolov8s-world and yolov8s-worldv2 (WorldModel: C2fAttn,
ImagePoolingAttn, WorldDetect with ContrastiveHead / BNContrastiveHead;
LightlyTrain lists no n size of them), each
DetectionModel (its task's model) is built from its YAML, saved with
YOLO.save (what LightlyTrain's export calls) and loaded back with
torch.load; one line per module of the loaded tree, in named_modules()
order:

    <path> <module>.<class> <attribute> <attribute> ...

with the module's __dict__ keys that are not private (nn.Module's own
bookkeeping: _parameters, _buffers, the hook dicts), sorted, then
`|`-separated lists of its parameter and buffer names, and one line
"ckpt <key> ..." with the checkpoint dict's keys. Nothing of the pickle
itself is stored: our writer emits its own.
"""
import argparse
import os
import sys
import tempfile

import torch

MODELS = ("yolov8n", "yolo11n", "yolo11m", "yolo26n", "yolov8n-seg", "yolo11n-seg", "yolo26n-seg",
          "yolov8n-pose", "yolo11n-pose", "yolo26n-pose", "yolov8n-obb", "yolo11n-obb", "yolo26n-obb",
          "yolov8n-cls", "yolo11n-cls", "yolo26n-cls", "yolov5nu", "yolo12n", "yolo12l", "yolov5n6u",
          "yolo26n-p6", "yolo26n-p2", "yolov8n-pose-p6", "yolov6n", "yolo26n-sem", "yolo26n-depth",
          "yolov8s-world", "yolov8s-worldv2")
# Ultralytics 8.4 builds yolov5n6u (the released yolov5n6u.pt's model) from yolov5n-p6.yaml.
YAMLS = {"yolov5n6u": "yolov5n-p6.yaml"}


def describe(name):
    from ultralytics import YOLO
    lines = [f"# {name}"]
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, f"{name}.pt")
        YOLO(YAMLS.get(name, f"{name}.yaml")).save(path)
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
    lines.append("ckpt " + " ".join(sorted(ckpt)))
    for path, module in ckpt["model"].named_modules():
        cls = f"{type(module).__module__}.{type(module).__name__}"
        keys = sorted(k for k in module.__dict__ if not k.startswith("_"))
        params = "|".join(module._parameters)
        buffers = "|".join(module._buffers)
        lines.append(f"{path or '.'} {cls} {' '.join(keys)} params={params} buffers={buffers}")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    import ultralytics
    lines = [f"# ultralytics {ultralytics.__version__}, torch {torch.__version__}: "
             "tools/make_ultralytics_structure.py"]
    for name in MODELS:
        lines += describe(name)
    path = os.path.join(args.out, "ultralytics_structure.txt")
    with open(path, "w") as file:
        file.write("\n".join(lines) + "\n")
    print(f"{path}: {len(lines)} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
