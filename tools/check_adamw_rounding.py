#!/usr/bin/env python3
"""How close AdamW's update as the backends write it (src/backend/scalar_rules.h
adamw_corrections_rule, ref_update.c, cpu_elementwise.c) comes to
torch.optim.AdamW on the CPU, element for element: the same float32
operations in the same order, emulated with NumPy, the division of sqrt(v)
by the second bias correction's root once in float32 (PyTorch's: a float32
tensor divided by a Python float) and once in double (ours until
2026-12-02), and once in PyTorch's own order (the first moment by lerp_,
1 - beta rounded from the double betas, where the backends form
beta1 m + (1 - beta1) g from float32 betas). Prints the share of elements
equal bit for bit after STEPS steps. None is all of them: PyTorch's
vectorised lerp_ uses a fused multiply-add. A reference script (docs/performance.md), never run by
make test: it needs PyTorch (the reference venv)."""
import argparse

import numpy as np
import torch


def ours(param, grads, lr, beta1, beta2, eps, weight_decay, divide_in_float, torch_order=False):
    f32 = np.float32
    p = param.copy()
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    for t, g in enumerate(grads, 1):
        correction1 = 1.0 - beta1 ** t  # double, as Python floats
        correction2_sqrt = (1.0 - beta2 ** t) ** 0.5
        step_size = f32(lr / correction1)
        p = p * f32(1.0 - lr * weight_decay)
        if torch_order:  # lerp_(g, 1 - beta1), mul_(beta2).addcmul_(g, g, 1 - beta2)
            m = m + f32(1.0 - beta1) * (g - m)
            v = v * f32(beta2) + (f32(1.0 - beta2) * g) * g
        else:  # the backends: betas as float32, 1 - beta in float32
            m = f32(beta1) * m + (f32(1.0) - f32(beta1)) * g
            v = f32(beta2) * v + ((f32(1.0) - f32(beta2)) * g) * g
        if divide_in_float:
            root = np.sqrt(v) / f32(correction2_sqrt)
        else:
            root = (np.sqrt(v).astype(np.float64) / correction2_sqrt).astype(f32)
        p = p - step_size * (m / (root + f32(eps)))
    return p


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--elements", type=int, default=1 << 20)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--lr", type=float, default=4e-3)
    parser.add_argument("--weight-decay", type=float, default=0.05)
    args = parser.parse_args()
    torch.manual_seed(0)
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    start = torch.randn(args.elements)
    grads = [torch.randn(args.elements) * 1e-2 for _ in range(args.steps)]
    param = start.clone().requires_grad_(True)
    optimizer = torch.optim.AdamW([param], lr=args.lr, betas=(beta1, beta2), eps=eps,
                                  weight_decay=args.weight_decay, foreach=False)
    for g in grads:
        param.grad = g.clone()
        optimizer.step()
    theirs = param.detach().numpy()
    numpy_grads = [g.numpy() for g in grads]
    print(f"torch {torch.__version__}, {args.elements} elements, {args.steps} steps")
    for label, in_float, torch_order in (
            ("the backends, division in float ", True, False),
            ("the backends, division in double", False, False),
            ("PyTorch's order (lerp_, 1 - beta in double), no FMA", True, True)):
        mine = ours(start.numpy(), numpy_grads, args.lr, beta1, beta2, eps, args.weight_decay,
                    in_float, torch_order)
        print(f"{label}: {100 * np.mean(mine == theirs):.2f}% of the elements equal bit for bit, "
              f"largest difference {np.max(np.abs(mine - theirs)):.3g}")


if __name__ == "__main__":
    main()
