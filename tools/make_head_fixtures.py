#!/usr/bin/python3
"""Writes tests/fixtures/heads.safetensors: PyTorch references for the SSL
projection and prediction heads (src/ssl_methods/heads.h), checked by
tests/test_heads.c.

    /usr/bin/python3 tools/make_head_fixtures.py --out tests/fixtures --lightly /tmp/lightly

Needs lightly (`pip install --no-deps --target /tmp/lightly lightly`): the
heads are lightly's own classes, so module structure, bias placement and
state_dict names are theirs. Safetensors writing comes from
tools/make_fixtures.py.

Each case C builds one lightly head with small widths and deterministic
weights (torch.manual_seed per case; PyTorch's init, then BatchNorm
weight/bias/running statistics and DINO's MLP weights and biases set to
random non-default values so every term matters), runs a train-mode
forward on x, backward of a fixed dout, then an eval-mode forward on the
same x (with the updated running statistics). Everything runs twice from
the same float32 weights and inputs: in float64 (the truth) and in float32
(to measure f32err).

    C.<state_dict name>          F32 / I64   the weights before the step (lightly's
                                             state_dict names; DINO's last_layer.weight_g
                                             is left out: it is fixed to 1; dino_g, the
                                             head with norm_last_layer=False as DINOv2's,
                                             keeps it, set away from 1)
    C/x                          (rows, in) F32
    C/dout                       (rows, out) F32
    C/out                        (rows, out) F64   train-mode output
    C/dx                         (rows, in) F64
    C/grad/<param name>          F64   d <dout, out> / d param (every trainable
                                       parameter, last_layer.weight_v included)
    C/running/<buffer name>      F64   running_mean / running_var after the step
    C/out_eval                   (rows, out) F64   eval-mode output afterwards
    f32err/C/<name>              () F64   max |float32 result - float64 result|
                                          for every F64 tensor above
    check/u                      (16,) F32   as in every fixture file
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import SafeFile, add_check, write_fixture  # noqa: E402
from make_loss_fixtures import parse_fixture_args, require_lightly  # noqa: E402

ROWS = 8
IN, HIDDEN, OUT = 6, 10, 5
BOTTLENECK, DINO_OUT = 4, 7
# DINO's MLP weights: lightly's trunc_normal_(std 0.02) times this, so the
# GELUs see inputs of order 1 (their nonlinear range) instead of ~0.05.
DINO_WEIGHT_SCALE = 30.0


def make_head(case):
    """lightly's head for one case name."""
    from lightly.models.modules import heads
    if case == "simclr":
        return heads.SimCLRProjectionHead(IN, HIDDEN, OUT, num_layers=2, batch_norm=True)
    if case == "byol_projection":
        return heads.BYOLProjectionHead(IN, HIDDEN, OUT)
    if case == "byol_prediction":
        return heads.BYOLPredictionHead(IN, HIDDEN, OUT)
    if case == "vicreg":
        return heads.VICRegProjectionHead(IN, HIDDEN, OUT, num_layers=3)
    if case == "barlow_twins":
        return heads.BarlowTwinsProjectionHead(IN, HIDDEN, OUT)
    if case in ("dino", "dino_g"):
        return heads.DINOProjectionHead(IN, HIDDEN, BOTTLENECK, DINO_OUT, batch_norm=False,
                                        norm_last_layer=case == "dino")
    if case == "linear":
        return heads.ProjectionHead([(IN, OUT, None, None)])
    raise ValueError(case)


CASES = ["simclr", "byol_projection", "byol_prediction", "vicreg", "barlow_twins", "dino",
         "linear", "dino_g"]


def randomize(head, case):
    """Non-default values where PyTorch's init leaves constants (float32)."""
    with torch.no_grad():
        for module in head.modules():
            if isinstance(module, torch.nn.BatchNorm1d):
                width = module.num_features
                module.weight.copy_(1.0 + 0.25 * (2 * torch.rand(width) - 1))
                module.bias.copy_(0.25 * (2 * torch.rand(width) - 1))
                module.running_mean.copy_(0.1 * (2 * torch.rand(width) - 1))
                module.running_var.copy_(1.0 + 0.25 * (2 * torch.rand(width) - 1))
        if case in ("dino", "dino_g"):
            for module in head.layers:
                if isinstance(module, torch.nn.Linear):
                    module.weight.mul_(DINO_WEIGHT_SCALE)
                    module.bias.copy_(0.1 * torch.randn(module.bias.shape))
        if case == "dino_g":  # a trained g: rows scaled by values in [0.5, 1.5)
            head.last_layer.weight_g.copy_(0.5 + torch.rand(head.last_layer.weight_g.shape))


def weights_of(head, case):
    """The state_dict to store (weight_g left out unless trained) as numpy arrays."""
    stored = {}
    for key, tensor in head.state_dict().items():
        if key.endswith("weight_g") and case != "dino_g":
            if not torch.all(tensor == 1):
                raise SystemExit(f"{key} is not 1")
            continue
        stored[key] = tensor.detach().clone().numpy()
    return stored


def run(case, state, x, dout, dtype):
    """Train-mode forward + backward, then eval forward, in dtype, on a fresh
    head loaded with the float32 state. Returns {name: float64 numpy array}."""
    head = make_head(case)
    head.load_state_dict(state)
    head = head.to(dtype)
    head.train()
    xt = torch.from_numpy(x).to(dtype).requires_grad_(True)
    out = head(xt)
    out.backward(torch.from_numpy(dout).to(dtype))
    results = {"out": out, "dx": xt.grad}
    for name, param in head.named_parameters():
        if param.requires_grad:
            results[f"grad/{name}"] = param.grad
    for name, buffer in head.named_buffers():
        if name.endswith("running_mean") or name.endswith("running_var"):
            results[f"running/{name}"] = buffer
    head.eval()
    with torch.no_grad():
        results["out_eval"] = head(xt.detach())
    return {name: value.detach().double().numpy() for name, value in results.items()}


def main():
    args = parse_fixture_args(__doc__)
    lightly = require_lightly()
    safe = SafeFile()
    add_check(safe)
    for index, case in enumerate(CASES):
        torch.manual_seed(1000 + index)
        head = make_head(case)
        randomize(head, case)
        in_dim = IN
        out_dim = DINO_OUT if case in ("dino", "dino_g") else OUT
        x = torch.randn(ROWS, in_dim).numpy()
        dout = torch.randn(ROWS, out_dim).numpy()
        for key, value in weights_of(head, case).items():
            safe.add(f"{case}.{key}", value)
        safe.add(f"{case}/x", x)
        safe.add(f"{case}/dout", dout)
        state = {key: value.detach().clone() for key, value in head.state_dict().items()}
        truth = run(case, state, x, dout, torch.float64)
        single = run(case, state, x, dout, torch.float32)
        if set(truth) != set(single):
            raise SystemExit(f"{case}: float32 and float64 runs differ in their outputs")
        for name, value in truth.items():
            safe.add(f"{case}/{name}", value)
            safe.add(f"f32err/{case}/{name}", np.float64(np.max(np.abs(single[name] - value))))
        worst = max(float(np.max(np.abs(single[n] - truth[n]))) / max(1e-30, float(np.max(np.abs(truth[n]))))
                    for n in truth)
        print(f"{case}: {len(truth)} reference tensors, worst f32err / max|truth| {worst:.3g}")
    write_fixture(safe, args.out, "heads.safetensors",
                  "/usr/bin/python3 tools/make_head_fixtures.py --out tests/fixtures "
                  "--lightly /tmp/lightly", f"lightly {lightly.__version__} heads")
    return 0


if __name__ == "__main__":
    sys.exit(main())
