#!/usr/bin/env python3
"""How close the backends' AdamW update comes to torch.optim.AdamW
(foreach=False: the single-tensor path PyTorch takes on the CPU), element
for element: both take the same STEPS steps from the same parameters and
gradients, and the script prints the share of parameters equal bit for
bit and the largest difference, per backend and per build:

    python3 tools/check_adamw_rounding.py [--tool build/tools/adamw_steps ...]
        [--backends ref cpu] [--elements N] [--steps S] [--lr LR]

Each --tool is a build's tools/adamw_steps (another checkout's to compare
builds). A reference script (docs/performance.md), never run by make test:
it needs PyTorch (the reference venv)."""
import argparse
import os
import struct
import subprocess
import tempfile

import numpy as np
import torch


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tool", action="append", default=None,
                        help="a build's adamw_steps (default build/tools/adamw_steps)")
    parser.add_argument("--backends", nargs="+", default=["ref", "cpu"])
    parser.add_argument("--elements", type=int, default=1 << 20)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--lr", type=float, default=4e-3)
    parser.add_argument("--weight-decay", type=float, default=0.05)
    args = parser.parse_args()
    tools = args.tool or ["build/tools/adamw_steps"]
    beta1, beta2, eps = 0.9, 0.999, 1e-8

    torch.manual_seed(0)
    start = torch.randn(args.elements)
    grads = [torch.randn(args.elements) * 1e-2 for _ in range(args.steps)]
    param = start.clone().requires_grad_(True)
    optimizer = torch.optim.AdamW([param], lr=args.lr, betas=(beta1, beta2), eps=eps,
                                  weight_decay=args.weight_decay, foreach=False)
    for g in grads:
        param.grad = g.clone()
        optimizer.step()
    theirs = param.detach().numpy()
    print(f"torch {torch.__version__}: {args.elements} elements, {args.steps} steps, "
          f"lr {args.lr}, weight decay {args.weight_decay}")

    with tempfile.TemporaryDirectory() as folder:
        data = os.path.join(folder, "in.bin")
        with open(data, "wb") as f:
            f.write(struct.pack("<iifffdd", args.elements, args.steps, args.lr, eps,
                                args.weight_decay, beta1, beta2))
            f.write(start.numpy().astype("<f4").tobytes())
            for g in grads:
                f.write(g.numpy().astype("<f4").tobytes())
        out = os.path.join(folder, "out.bin")
        for tool in tools:
            for backend in args.backends:
                subprocess.run([tool, backend, data, out], check=True)
                ours = np.fromfile(out, dtype="<f4")
                print(f"{tool} {backend}: {100 * np.mean(ours == theirs):.2f}% equal bit for bit, "
                      f"largest difference {np.max(np.abs(ours - theirs)):.3g}")


if __name__ == "__main__":
    main()
