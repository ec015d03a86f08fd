#!/usr/bin/python3
"""Writes tests/fixtures/paka_cka.safetensors: PyTorch references for the
cka_loss backend op (DINOv31's PaKA loss, src/backend/backend.h), checked by
tests/test_backend_paka_ops.c.

    /tmp/yolo-venv/bin/python tools/make_paka_fixtures.py --out tests/fixtures

(torch and lightly >= 1.6, whose lightly.loss has PatchKernelAlignmentLoss).
Run from /tmp with `python -P` and absolute paths, so that no file of the
repository can shadow a package, it writes the same bytes.

The reference is lightly's PatchKernelAlignmentLoss: the mean over the
images with at least two valid tokens of 1 - CKA of the centred linear
kernels of the student and teacher tokens. An image of the op's weight 0 is
one whose tokens lightly's mask hides entirely; the others are every token
valid with weight 1 / (valid images), so the op's weighted sum is lightly's
mean. The truth is lightly's own forward run in float64 on the float32
inputs: PatchKernelAlignmentLoss.forward casts to float32, so its steps
(_prepare_features, _linear_kernel, _double_center, _reduce_per_image, _EPS
of lightly.loss.dense_relational_utils and patch_kernel_alignment_loss)
are called here without the casts; the script stops unless that forward in
float32 gives PatchKernelAlignmentLoss's loss and gradient exactly. For
every case C:

    C/student, C/teacher   (I, N, D) F32   seeded inputs (see CASES)
    C/image_weight         (I,) F32        1 / (valid images), 0 for a masked image
    C/loss                 () F64          the loss (float64 truth)
    C/grad                 (I, N, D) F64   d loss / d student (float64 truth)
    f32err/C/loss, f32err/C/grad  () F64   max |lightly's float32 result - truth|
    check/u                (16,) F32       the fixture-init check values
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import SafeFile, add_check, write_fixture  # noqa: E402
from make_loss_fixtures import parse_fixture_args  # noqa: E402

import lightly  # noqa: E402
from lightly.loss import PatchKernelAlignmentLoss  # noqa: E402
from lightly.loss import patch_kernel_alignment_loss as paka  # noqa: E402
from lightly.loss.dense_relational_utils import (  # noqa: E402
    _double_center,
    _linear_kernel,
    _prepare_features,
    _reduce_per_image,
)

COMMAND = "/tmp/yolo-venv/bin/python tools/make_paka_fixtures.py --out tests/fixtures"

# name, (images, tokens, dim), masked images, kind of input, seed:
#   normal   student and teacher independent N(0, 1)
#   offset   2 + 0.5 N(0, 1): a large common mean, so the centring matters
#   aligned  teacher = 3 student Q + 0.05 N(0, 1), Q orthogonal: CKA near 1
#   zeros    as normal, the masked image's rows all zero (padding)
CASES = [
    ("i3_n49_d32", (3, 49, 32), [1], "normal", 1),
    ("i4_n7_d5_offset", (4, 7, 5), [3], "offset", 2),
    ("i2_n16_d8_aligned", (2, 16, 8), [], "aligned", 3),
    ("i3_n20_d96_zeros", (3, 20, 96), [0], "zeros", 4),
]


def make_inputs(shape, masked, kind, seed):
    generator = torch.Generator().manual_seed(seed)
    images, tokens, dim = shape
    student = torch.randn(shape, generator=generator)
    teacher = torch.randn(shape, generator=generator)
    if kind == "offset":
        student, teacher = 2 + 0.5 * student, 2 + 0.5 * teacher
    elif kind == "aligned":
        q, _ = torch.linalg.qr(torch.randn((dim, dim), generator=generator, dtype=torch.float64))
        teacher = (3 * student.double() @ q).float() + 0.05 * teacher
    elif kind == "zeros":
        student[masked], teacher[masked] = 0.0, 0.0
    mask = torch.zeros((images, tokens), dtype=torch.bool)
    mask[masked] = True
    valid = images - len(masked)
    weight = torch.full((images,), 1.0 / valid)
    weight[masked] = 0.0
    return student, teacher, mask, weight


def lightly_forward(student, teacher, mask):
    """PatchKernelAlignmentLoss.forward (max_tokens None) in the inputs' dtype."""
    s, t, valid = _prepare_features(student, teacher, mask, None)
    valid_f = valid.to(s.dtype)
    k_s = _double_center(_linear_kernel(s), valid_f)
    k_t = _double_center(_linear_kernel(t), valid_f)
    hsic_st = (k_s * k_t).sum(dim=(1, 2))
    hsic_ss = (k_s * k_s).sum(dim=(1, 2))
    hsic_tt = (k_t * k_t).sum(dim=(1, 2))
    denom = hsic_ss.clamp_min(paka._EPS).sqrt() * hsic_tt.clamp_min(paka._EPS).sqrt()
    loss_per_image = 1.0 - hsic_st / denom
    return _reduce_per_image(loss_per_image, valid.sum(dim=-1) >= 2, student)


def loss_and_grad(loss_fn, student, teacher, mask):
    student = student.clone().requires_grad_(True)
    loss = loss_fn(student, teacher, mask)
    loss.backward()
    return loss.detach(), student.grad.detach()


def main():
    args = parse_fixture_args(__doc__)
    safe = SafeFile()
    add_check(safe)
    for name, shape, masked, kind, seed in CASES:
        student, teacher, mask, weight = make_inputs(shape, masked, kind, seed)
        loss32, grad32 = loss_and_grad(PatchKernelAlignmentLoss(), student, teacher, mask)
        mine32, mine_grad32 = loss_and_grad(lightly_forward, student, teacher, mask)
        if not (torch.equal(loss32, mine32) and torch.equal(grad32, mine_grad32)):
            sys.exit(f"{name}: the float64 forward here is not PatchKernelAlignmentLoss's")
        loss, grad = loss_and_grad(lightly_forward, student.double(), teacher.double(), mask)
        safe.add_torch(f"{name}/student", student)
        safe.add_torch(f"{name}/teacher", teacher)
        safe.add_torch(f"{name}/image_weight", weight)
        safe.add_torch(f"{name}/loss", loss)
        safe.add_torch(f"{name}/grad", grad)
        loss_err = abs(loss32.double() - loss).item()
        grad_err = (grad32.double() - grad).abs().max().item()
        safe.add(f"f32err/{name}/loss", np.float64(loss_err))
        safe.add(f"f32err/{name}/grad", np.float64(grad_err))
        print(f"{name}: loss {loss.item():.9g} (f32err {loss_err:.3g}), "
              f"max |grad| {grad.abs().max().item():.3g} (f32err {grad_err:.3g})")
    write_fixture(safe, args.out, "paka_cka.safetensors", COMMAND,
                  f"lightly {lightly.__version__} PatchKernelAlignmentLoss (float64 truth from "
                  "its own steps, their float32 run checked equal to the module's)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
