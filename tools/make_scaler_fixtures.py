#!/usr/bin/python3
"""Writes tests/fixtures/loss_scaler.safetensors: PyTorch's dynamic loss
scaling (torch.amp.GradScaler) with AdamW and SGD on a tiny model, an inf
and a NaN gradient injected, checked by tests/test_loss_scaler.c against
our loss scaler + step gate + optimizer (src/nn/loss_scaler.h).

    PYTHONPATH=<torch >= 2.3> /usr/bin/python3 tools/make_scaler_fixtures.py --out tests/fixtures

GradScaler runs on the CPU only from torch 2.3 ("cpu" device); Debian's
1.13 has the CUDA one only, so the script needs a newer torch on its path
(e.g. `pip install --target DIR torch`). Safetensors writing and fixture
init come from tools/make_fixtures.py.

The model: a weight w (4, 3) (weight decay) and a bias b (4,) (none), and
the loss of step t is sum(w * Gw_t) + sum(b * Gb_t), so the gradient of
step t is G_t (fixture init "scaler/grad/<w|b>/<t>", offset 0, scale 1)
and scaler.scale(loss).backward() leaves S * G_t (exact: S is a power of
two). One step as Lightning's 16-mixed does it: scaler.unscale_(opt),
clip_grad_norm_(max_norm 1), scaler.step(opt), scaler.update(). The runs:
    adamw: lr 1e-2, betas (0.9, 0.999), eps 1e-8, weight decay 0.05 on w;
           G_3 holds an inf, G_7 a NaN
    sgd:   lr 0.1, momentum 0.9, weight decay 1e-4 on w; G_1 holds an inf
           (the first step is skipped: the momentum buffer starts at step 2)
both with init_scale 1024, growth_interval 2 (backoff 0.5, growth 2), for
steps t = 1..8. Tensors (F32):
    init/w (4, 3), init/b (4,)      = fixture init "scaler/w", "scaler/b"
                                      (offset 0, scale 0.5)
    <run>/w/<t>, <run>/b/<t>        parameters after step t
    <run>/scale/<t> ()              scaler.get_scale() after step t's update
    <run>/tracker/<t> ()            the growth tracker after it
    <run>/skipped/<t> ()            1 when step t's update was skipped
    check/u (16,)                   as in every fixture file
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import SafeFile, add_check, fixture_value  # noqa: E402

STEPS = 8
INIT_SCALE = 1024.0
GROWTH_INTERVAL = 2
MAX_NORM = 1.0
SHAPES = {"w": (4, 3), "b": (4,)}
RUNS = {"adamw": {3: ("w", 5, float("inf")), 7: ("b", 2, float("nan"))},
        "sgd": {1: ("w", 0, float("inf"))}}


def gradient(name, step, run):
    value = fixture_value(f"scaler/grad/{name}/{step}", SHAPES[name], 0.0, 1.0).copy()
    injected = RUNS[run].get(step)
    if injected and injected[0] == name:
        value.reshape(-1)[injected[1]] = injected[2]
    return torch.from_numpy(value)


def run_scaler(run):
    params = {name: torch.nn.Parameter(torch.from_numpy(
        fixture_value(f"scaler/{name}", shape, 0.0, 0.5))) for name, shape in SHAPES.items()}
    if run == "adamw":
        optimizer = torch.optim.AdamW([{"params": [params["w"]], "weight_decay": 0.05},
                                       {"params": [params["b"]], "weight_decay": 0.0}],
                                      lr=1e-2, betas=(0.9, 0.999), eps=1e-8)
    else:
        optimizer = torch.optim.SGD([{"params": [params["w"]], "weight_decay": 1e-4},
                                     {"params": [params["b"]], "weight_decay": 0.0}],
                                    lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", init_scale=INIT_SCALE, growth_factor=2.0,
                                  backoff_factor=0.5, growth_interval=GROWTH_INTERVAL)
    out = {}
    for step in range(1, STEPS + 1):
        optimizer.zero_grad()
        loss = sum((params[name] * gradient(name, step, run)).sum() for name in SHAPES)
        scaler.scale(loss).backward()
        scale_before = scaler.get_scale()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(list(params.values()), max_norm=MAX_NORM)
        scaler.step(optimizer)
        scaler.update()
        skipped = scaler.get_scale() < scale_before
        for name, param in params.items():
            out[f"{run}/{name}/{step}"] = param.detach().clone().numpy()
        out[f"{run}/scale/{step}"] = np.float32(scaler.get_scale())
        out[f"{run}/tracker/{step}"] = np.float32(scaler._get_growth_tracker())
        out[f"{run}/skipped/{step}"] = np.float32(1.0 if skipped else 0.0)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder (tests/fixtures)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    safe = SafeFile()
    add_check(safe)
    for name, shape in SHAPES.items():
        safe.add(f"init/{name}", fixture_value(f"scaler/{name}", shape, 0.0, 0.5))
    for run in RUNS:
        trajectory = run_scaler(run)
        for key, value in trajectory.items():
            safe.add(key, value)
        scales = [float(trajectory[f"{run}/scale/{t}"]) for t in range(1, STEPS + 1)]
        skipped = [int(trajectory[f"{run}/skipped/{t}"]) for t in range(1, STEPS + 1)]
        print(f"{run}: scale after each step {scales}, skipped {skipped}")
    metadata = {
        "generator": "tools/make_scaler_fixtures.py",
        "command": "PYTHONPATH=<torch >= 2.3> /usr/bin/python3 tools/make_scaler_fixtures.py "
                   "--out tests/fixtures",
        "torch": torch.__version__,
        "numpy": np.__version__,
        "contract": "tools/make_scaler_fixtures.py",
    }
    path = os.path.join(args.out, "loss_scaler.safetensors")
    size = safe.write(path, metadata)
    print(f"{path}: {len(safe.arrays)} tensors, {size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
