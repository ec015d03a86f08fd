#!/usr/bin/python3
"""Writes tests/fixtures/dinov2_loss.safetensors: PyTorch references for
DINOv2's loss (src/ssl_methods/dinov2_loss.h), checked by
tests/test_dinov2_loss.c.

    /usr/bin/python3 tools/make_dinov2_fixtures.py --out tests/fixtures

The reference is LightlyTrain's DINOv2 loss code written out here line for
line (lightly_train/_methods/dinov2: DINOLoss.forward with its
softmax_center_teacher / sinkhorn_knopp_teacher and lazy center update,
IBOTPatchLoss.forward_masked with its own center, lightly's KoLeoLoss, and
DINOv2.training_step_impl's combination: the teacher class tokens swapped
so view 0 meets view 1, the global loss x 2 / (n_global_terms +
n_local_terms), the local loss over the chunks, KoLeo per global view, the
weights). lightly_train itself needs Lightning and is not importable here.

Every case runs STEPS steps on one loss object (the centers carry over).
For every case C and step S:
    C/config              (9,) F32   B, L, K, D, P, student_temp, center_momentum,
                                     sinkhorn (0/1), koleo/ibot/dino weights -> see CONFIG
    C/S/teacher_temp      () F32
    C/S/teacher_cls       (2B, K) F32   global view 0's rows, then view 1's
    C/S/student_cls       ((2+L)B, K) F32
    C/S/student_features  (2B, D) F32   student class tokens before the head
    C/S/masks             (2B, P) F32   1 where a patch is masked
    C/S/teacher_patches   (M, K) F32    head outputs of the masked patches, in
    C/S/student_patches   (M, K) F32    mask order (crop-major, patch order)
    C/S/patch_weights     (M,) F32      1 / (masked patches of the crop)
    C/S/terms             (5,) F64      dino_global, dino_local, ibot, koleo, total
    C/S/grad_cls, grad_patches, grad_features   F64  d total / d the student inputs
    C/S/cls_center, patch_center  (K,) F64  centers after step S (softmax only)
    f32err/C/S/<each output>  () F64    max |float32 run - float64 run|
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import SafeFile, add_check, fixture_value  # noqa: E402
from make_loss_fixtures import parse_fixture_args  # noqa: E402

# (B, L, K, D, patches per crop, teacher temps per step, sinkhorn, weights (dino, ibot, koleo))
CASES = [
    (3, 2, 17, 8, 6, (0.04, 0.05), False, (1.0, 1.0, 0.1)),
    (3, 2, 17, 8, 6, (0.04, 0.07), True, (1.0, 1.0, 0.1)),
    (4, 0, 9, 5, 4, (0.07, 0.07), False, (0.5, 2.0, 0.3)),
    (2, 3, 33, 12, 9, (0.05, 0.04), True, (1.0, 1.0, 0.1)),
]
STEPS = 2
STUDENT_TEMP = 0.1
CENTER_MOMENTUM = 0.9


def case_name(c):
    batch, local, k, d, p, _, sinkhorn, _ = c
    return f"b{batch}_l{local}_k{k}_d{d}_p{p}_{'sk' if sinkhorn else 'softmax'}"


class DINOLoss:
    """LightlyTrain's DINOLoss (one process)."""

    def __init__(self, out_dim, dtype):
        self.center = torch.zeros(1, out_dim, dtype=dtype)
        self.updated = True

    def softmax_center_teacher(self, teacher_output, teacher_temp):
        self.apply_center_update()
        return F.softmax((teacher_output - self.center) / teacher_temp, dim=-1)

    def sinkhorn_knopp_teacher(self, teacher_output, teacher_temp, n_iterations=3,
                               n_samples=None):
        """DINOLoss's; IBOTPatchLoss's is the same with B = n_masked_patches."""
        Q = torch.exp(teacher_output / teacher_temp).t()
        B = Q.shape[1] if n_samples is None else n_samples
        K = Q.shape[0]
        Q = Q / torch.sum(Q)
        for _ in range(n_iterations):
            Q = Q / torch.sum(Q, dim=1, keepdim=True)
            Q = Q / K
            Q = Q / torch.sum(Q, dim=0, keepdim=True)
            Q = Q / B
        Q = Q * B
        return Q.t()

    def forward(self, student_output_list, teacher_list):
        total_loss = 0.0
        for s in student_output_list:
            lsm = F.log_softmax(s / STUDENT_TEMP, dim=-1)
            for t in teacher_list:
                total_loss = total_loss - torch.sum(t * lsm, dim=-1).mean()
        return total_loss

    def update_center(self, teacher_output):
        self.updated = False
        self.len_teacher_output = teacher_output.shape[0]
        self.async_batch_center = torch.sum(teacher_output, dim=0, keepdim=True)

    def apply_center_update(self):
        if not self.updated:
            t = self.async_batch_center / self.len_teacher_output
            self.center = self.center * CENTER_MOMENTUM + t * (1 - CENTER_MOMENTUM)
            self.updated = True


class IBOTPatchLoss(DINOLoss):
    """LightlyTrain's IBOTPatchLoss (one process); center (1, 1, K)."""

    def __init__(self, out_dim, dtype):
        super().__init__(out_dim, dtype)
        self.center = torch.zeros(1, 1, out_dim, dtype=dtype)

    def forward_masked(self, s, t, masks, masks_weight):
        loss = torch.sum(t * F.log_softmax(s / STUDENT_TEMP, dim=-1), dim=-1)
        loss = loss * masks_weight
        return -loss.sum() / masks.shape[0]

    def update_center(self, teacher_patch_tokens):
        self.updated = False
        self.len_teacher_output = len(teacher_patch_tokens)
        self.async_batch_center = torch.sum(teacher_patch_tokens.mean(1), dim=0, keepdim=True)


def koleo(x, eps=1e-8):
    """lightly's KoLeoLoss."""
    x = F.normalize(x, p=2, dim=-1, eps=eps)
    cos_sim = torch.mm(x, x.t())
    cos_sim.fill_diagonal_(-2)
    nn_idx = cos_sim.argmax(dim=1)
    nn_dist = F.pairwise_distance(x, x[nn_idx], p=2, eps=eps)
    return -(nn_dist + eps).log().mean()


def step_loss(state, inputs, c, teacher_temp, dtype):
    """DINOv2.training_step_impl's loss from head outputs; returns (terms, grads)."""
    batch, local, k, d, p, _, sinkhorn, (w_dino, w_ibot, w_koleo) = c
    dino_loss, ibot_loss = state
    t_cls = torch.from_numpy(inputs["teacher_cls"]).to(dtype)
    s_cls = torch.from_numpy(inputs["student_cls"]).to(dtype).requires_grad_(True)
    s_feat = torch.from_numpy(inputs["student_features"]).to(dtype).requires_grad_(True)
    t_patch = torch.from_numpy(inputs["teacher_patches"]).to(dtype)
    s_patch = torch.from_numpy(inputs["student_patches"]).to(dtype).requires_grad_(True)
    masks = torch.from_numpy(inputs["masks"]).bool()
    weights = torch.from_numpy(inputs["patch_weights"]).to(dtype)
    n_global_terms = 2
    n_local_terms = max(local * 2, 1)
    # _forward_teacher: class tokens swapped so A meets B
    cls_swapped = torch.cat((t_cls[batch:], t_cls[:batch]))
    if sinkhorn:
        cls_centered = dino_loss.sinkhorn_knopp_teacher(cls_swapped, teacher_temp).view(2, -1, k)
        patch_centered = ibot_loss.sinkhorn_knopp_teacher(t_patch, teacher_temp,
                                                          n_samples=t_patch.shape[0])
    else:
        cls_centered = dino_loss.softmax_center_teacher(cls_swapped, teacher_temp).view(2, -1, k)
        dino_loss.update_center(cls_swapped)
        patch3 = t_patch.unsqueeze(0)
        patch_centered = ibot_loss.softmax_center_teacher(patch3, teacher_temp).squeeze(0)
        ibot_loss.update_center(patch3)
    s_global = s_cls[: 2 * batch]
    dino_global = dino_loss.forward([s_global], [cls_centered.flatten(0, 1)]) * 2 / (
        n_global_terms + n_local_terms)
    dino_local = torch.zeros_like(dino_global)
    if local > 0:
        s_local = s_cls[2 * batch:]
        dino_local = dino_loss.forward(s_local.chunk(local), cls_centered) / (
            n_global_terms + n_local_terms)
    ibot = ibot_loss.forward_masked(s_patch, patch_centered, masks, weights)
    koleo_loss = sum(koleo(x) for x in s_feat.chunk(2))
    total = w_dino * dino_global + w_dino * dino_local + w_ibot * ibot + w_koleo * koleo_loss
    total.backward()
    terms = np.array([float(dino_global), float(dino_local), float(ibot), float(koleo_loss),
                      float(total)], dtype=np.float64)
    grads = {name: x.grad.double().numpy() for name, x in
             (("grad_cls", s_cls), ("grad_patches", s_patch), ("grad_features", s_feat))}
    # centers after the step (lightly applies them lazily at the next forward)
    dino_loss.apply_center_update()
    ibot_loss.apply_center_update()
    grads["cls_center"] = dino_loss.center.reshape(-1).double().numpy().copy()
    grads["patch_center"] = ibot_loss.center.reshape(-1).double().numpy().copy()
    return terms, grads


def make_inputs(name, step, c):
    batch, local, k, d, p, _, _, _ = c
    crops = 2 * batch
    u = fixture_value(f"dinov2/{name}/{step}/masks", (crops, p), 0.0, 1.0)
    masks = (u > 0.2).astype(np.float32)
    masks[0, :] = 0.0  # a crop without masked patches
    masks[1, :] = 1.0  # and one with all of them
    m = int(masks.sum())
    counts = np.maximum(masks.sum(axis=1), 1.0)
    weights = np.repeat((1.0 / counts).astype(np.float32), masks.sum(axis=1).astype(int))
    return {
        "teacher_cls": fixture_value(f"dinov2/{name}/{step}/teacher_cls", (crops, k), 0.0, 1.0),
        "student_cls": fixture_value(f"dinov2/{name}/{step}/student_cls", ((2 + local) * batch, k),
                                     0.0, 1.0),
        "student_features": fixture_value(f"dinov2/{name}/{step}/student_features", (crops, d),
                                          0.0, 2.0),
        "masks": masks,
        "teacher_patches": fixture_value(f"dinov2/{name}/{step}/teacher_patches", (m, k), 0.0, 1.0),
        "student_patches": fixture_value(f"dinov2/{name}/{step}/student_patches", (m, k), 0.0, 1.0),
        "patch_weights": weights.astype(np.float32),
    }


def run_case(c, inputs, dtype):
    k = c[2]
    state = (DINOLoss(k, dtype), IBOTPatchLoss(k, dtype))
    return [step_loss(state, inputs[s], c, c[5][s], dtype) for s in range(STEPS)]


def main():
    args = parse_fixture_args(__doc__)
    safe = SafeFile()
    add_check(safe)
    for c in CASES:
        name = case_name(c)
        batch, local, k, d, p, temps, sinkhorn, (w_dino, w_ibot, w_koleo) = c
        inputs = [make_inputs(name, s + 1, c) for s in range(STEPS)]
        truth = run_case(c, inputs, torch.float64)
        single = run_case(c, inputs, torch.float32)
        safe.add(f"{name}/config", np.array([batch, local, k, d, p, STUDENT_TEMP, CENTER_MOMENTUM,
                                             float(sinkhorn), w_dino, w_ibot, w_koleo],
                                            dtype=np.float32))
        for s in range(STEPS):
            prefix = f"{name}/{s + 1}"
            safe.add(f"{prefix}/teacher_temp", np.float32(temps[s]))
            for key, value in inputs[s].items():
                safe.add(f"{prefix}/{key}", value)
            terms, outputs = truth[s]
            terms32, outputs32 = single[s]
            safe.add(f"{prefix}/terms", terms)
            safe.add(f"f32err/{prefix}/terms", np.float64(np.max(np.abs(terms32 - terms))))
            for key, value in outputs.items():
                safe.add(f"{prefix}/{key}", value)
                safe.add(f"f32err/{prefix}/{key}",
                         np.float64(np.max(np.abs(outputs32[key] - value))))
            print(f"{prefix}: terms {terms}, f32err {np.max(np.abs(terms32 - terms)):.3g}")
    metadata = {
        "generator": "tools/make_dinov2_fixtures.py",
        "command": "/usr/bin/python3 tools/make_dinov2_fixtures.py --out tests/fixtures",
        "reference": "LightlyTrain's DINOv2 loss code written out (lightly_train not importable)",
        "torch": torch.__version__,
        "numpy": np.__version__,
    }
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "dinov2_loss.safetensors")
    size = safe.write(path, metadata)
    print(f"{path}: {len(safe.arrays)} tensors, {size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
