#!/usr/bin/python3
"""Writes tests/fixtures/nt_xent.safetensors: PyTorch references for SimCLR's
NT-Xent loss (src/ssl_methods/nt_xent.h), checked by tests/test_nt_xent.c.

    /usr/bin/python3 tools/make_loss_fixtures.py --out tests/fixtures [--lightly /tmp/lightly]

The reference is lightly's NTXentLoss (memory bank off, one device) when the
lightly package can be imported (e.g. `pip install --no-deps --target
/tmp/lightly lightly`, passed with --lightly); the script always also runs its
own written-out version of the same formula and fails when the two disagree.
Without lightly it uses the written-out version alone (the metadata says
which). Safetensors writing and fixture init come from tools/make_fixtures.py.

For every case C (named n<N>_d<D>_t<temperature>):
    C/out0, C/out1       (N, D) F32   the two views' projections (fixture init
                                      "nt_xent/C/out0" and "nt_xent/C/out1";
                                      in correlated cases out1 = out0 + 0.8 u)
    C/temperature        () F32
    C/loss               () F64       loss of the float32 inputs computed in float64
    C/grad0, C/grad1     (N, D) F64   d loss / d out0, d out1 (float64)
    f32err/C/loss, f32err/C/grad0, f32err/C/grad1  () F64
                                      max |float32 result - float64 result|: the
                                      rounding error of a correct float32 run
    check/u              (16,) F32    as in every fixture file
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import SafeFile, add_check, fixture_value  # noqa: E402

# (N, D, temperature, correlated views): N = 1 (loss 0: one logit per row),
# odd sizes, SimCLR's default t = 0.1 and others.
CASES = [
    (1, 8, 0.1, False),
    (2, 5, 0.1, False),
    (8, 16, 0.1, True),
    (6, 33, 0.5, False),
    (24, 40, 0.07, True),
]


def case_name(batch, dim, temperature):
    return f"n{batch}_d{dim}_t{temperature:g}"


def nt_xent_written_out(out0, out1, temperature):
    """The formula of src/ssl_methods/nt_xent.h written out in torch."""
    batch = out0.shape[0]
    z = torch.cat([torch.nn.functional.normalize(out0, dim=1),
                   torch.nn.functional.normalize(out1, dim=1)], dim=0)
    logits = z @ z.t() / temperature
    eye = torch.eye(2 * batch, dtype=torch.bool)
    logits = logits.masked_fill(eye, float("-inf"))
    labels = (torch.arange(2 * batch) + batch) % (2 * batch)
    log_probs = torch.log_softmax(logits, dim=1)
    return -log_probs[torch.arange(2 * batch), labels].mean()


def loss_and_grads(loss_fn, out0, out1, dtype):
    a = torch.from_numpy(out0).to(dtype).requires_grad_(True)
    b = torch.from_numpy(out1).to(dtype).requires_grad_(True)
    loss = loss_fn(a, b)
    loss.backward()
    return loss.detach().double().numpy(), a.grad.double().numpy(), b.grad.double().numpy()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder (tests/fixtures)")
    parser.add_argument("--lightly", help="folder holding the lightly package (optional)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    reference_name = "written out (lightly not importable)"
    lightly_loss = None
    if args.lightly:
        sys.path.insert(0, args.lightly)
    try:
        import lightly
        from lightly.loss import NTXentLoss
        lightly_loss = NTXentLoss
        reference_name = f"lightly {lightly.__version__} NTXentLoss"
    except ImportError as error:
        print(f"lightly not importable ({error}); using the written-out formula", file=sys.stderr)

    safe = SafeFile()
    add_check(safe)
    for batch, dim, temperature, correlated in CASES:
        name = case_name(batch, dim, temperature)
        out0 = fixture_value(f"nt_xent/{name}/out0", (batch, dim), 0.0, 1.0)
        out1 = fixture_value(f"nt_xent/{name}/out1", (batch, dim), 0.0, 1.0)
        if correlated:
            out1 = (out0 + np.float32(0.8) * out1).astype(np.float32)
        written = lambda a, b, t=temperature: nt_xent_written_out(a, b, t)  # noqa: E731
        reference = written
        if lightly_loss is not None:
            reference = lightly_loss(temperature=temperature)
        truth = loss_and_grads(reference, out0, out1, torch.float64)
        single = loss_and_grads(reference, out0, out1, torch.float32)
        check = loss_and_grads(written, out0, out1, torch.float64)
        for label, a, b in zip(("loss", "grad0", "grad1"), truth, check):
            difference = float(np.max(np.abs(a - b)))
            if difference > 1e-12:
                raise SystemExit(f"{name}/{label}: written-out formula differs from the "
                                 f"reference by {difference:g}")
        safe.add(f"{name}/out0", out0)
        safe.add(f"{name}/out1", out1)
        safe.add(f"{name}/temperature", np.float32(temperature))
        for label, value, value32 in zip(("loss", "grad0", "grad1"), truth, single):
            safe.add(f"{name}/{label}", value)
            safe.add(f"f32err/{name}/{label}", np.float64(np.max(np.abs(value32 - value))))
        print(f"{name}: loss {float(truth[0]):.9f}, max |grad| "
              f"{max(np.abs(truth[1]).max(), np.abs(truth[2]).max()):.3g}, f32err loss "
              f"{float(np.abs(single[0] - truth[0])):.3g}")

    metadata = {
        "generator": "tools/make_loss_fixtures.py",
        "command": "/usr/bin/python3 tools/make_loss_fixtures.py --out tests/fixtures "
                   "--lightly /tmp/lightly",
        "reference": reference_name,
        "torch": torch.__version__,
        "numpy": np.__version__,
    }
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "nt_xent.safetensors")
    size = safe.write(path, metadata)
    print(f"{path}: {len(safe.arrays)} tensors, {size} bytes ({reference_name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
