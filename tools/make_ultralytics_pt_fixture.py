#!/usr/bin/env python3
"""Writes tests/fixtures/pt/yolov8n_finetuned.pt: a checkpoint as
Ultralytics' own training leaves it, for tests/test_pt_reader.c (and the
fuzzer's seeds), with its twin yolov8n_finetuned_bases.safetensors.

    /work/venvs/yolo/bin/python tools/make_ultralytics_pt_fixture.py --out tests/fixtures/pt

Needs ultralytics (checked with 8.4.190), torch and safetensors. What a
user's `best.pt` holds and a checkpoint from YOLO.save does not: the
trainer's dict (train_args, train_metrics, train_results, git, ... after
Ultralytics' strip_optimizer), the Detect head's last input shape (a
torch.Size) and its anchors and strides (tensors that are no parameters),
a head for the dataset's classes (here 1) on the class-stack width of the
80-class model it was fine-tuned from (80). Made the way a user makes it:
YOLO("yolov8n.yaml") saved, then YOLO(that file).train() for one epoch on a
4-image, 1-class set at 64 px. So that the file stays small (~0.2 MB, not
6 MB), each floating tensor of shape (C, ...) is then replaced by a
stride-0 expand of a random (C, 1, ...) F16 base and the dict saved again
with torch.save (as strip_optimizer saves it); the twin holds the bases
(element [c, ...] of a tensor = base[c]).
"""
import argparse
import os
import sys
import tempfile

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_ultralytics_export import labelled_set  # noqa: E402


def finetuned_checkpoint(work):
    from ultralytics import YOLO
    base = os.path.join(work, "yolov8n.pt")
    YOLO("yolov8n.yaml").save(base)
    model = YOLO(base)
    model.train(data=labelled_set(os.path.join(work, "labelled")), epochs=1, imgsz=64, batch=2,
                workers=0, device="cpu", plots=False, val=False, amp=False,
                project=os.path.join(work, "runs"), name="tuned", verbose=False, seed=0)
    return torch.load(os.path.join(work, "runs", "tuned", "weights", "last.pt"),
                      map_location="cpu", weights_only=False)


def expand_to_bases(model, generator):
    """Every floating parameter and buffer made an expand of its channel base."""
    bases = {}
    for name, module in model.named_modules():
        for kind in ("_parameters", "_buffers"):
            for key, tensor in getattr(module, kind).items():
                if tensor is None or not tensor.is_floating_point():
                    continue
                full = f"{name}.{key}" if name else key
                shape = (tensor.shape[0],) + (1,) * (tensor.dim() - 1)
                base = torch.randn(shape, generator=generator).to(tensor.dtype)
                bases[full] = base
                if kind == "_parameters":
                    tensor.data = base.expand(tensor.shape)
                else:
                    getattr(module, kind)[key] = base.expand(tensor.shape)
    return bases


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="tests/fixtures/pt")
    args = parser.parse_args()
    import ultralytics
    with tempfile.TemporaryDirectory() as work:
        checkpoint = finetuned_checkpoint(work)
    model = checkpoint["model"]
    detect = model.model[-1]
    assert checkpoint["ema"] is None and detect.nc == 1 and isinstance(detect.shape, torch.Size)
    bases = expand_to_bases(model, torch.Generator().manual_seed(34))
    path = os.path.join(args.out, "yolov8n_finetuned.pt")
    torch.save(checkpoint, path)
    metadata = {"ultralytics": ultralytics.__version__, "torch": torch.__version__,
                "generator": "tools/make_ultralytics_pt_fixture.py"}
    twin = os.path.join(args.out, "yolov8n_finetuned_bases.safetensors")
    save_file({k: v.contiguous() for k, v in bases.items()}, twin, metadata=metadata)
    for name in (path, twin):
        print(f"{name}: {os.path.getsize(name)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
