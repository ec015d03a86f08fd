#!/usr/bin/python3
"""Writes tests/fixtures/dinov2_groups.safetensors: PyTorch references for
LightlyTrain DINOv2's optimizer parameter groups and a few AdamW steps
under them (src/ssl_methods/dinov2_param_groups.h, the groups' lr
multipliers and lr-0 freezing in src/ssl_methods/method.h), checked by
tests/test_dinov2_groups.c.

    /usr/bin/python3 tools/make_dinov2_groups_fixtures.py --out tests/fixtures --lightly /tmp/lightly

Needs lightly (`pip install --no-deps --target /tmp/lightly lightly==1.6.0`):
the lr scheduler (CosineWarmupScheduler), the weight-decay schedule
(cosine_schedule) and update_param_groups are lightly's own, as
LightlyTrain imports them. LightlyTrain itself needs Lightning and torch 2
and is not importable here, so its code is written out below line for
line: get_vit_lr_decay_rate, get_optimizer_with_decay and
get_fused_param_groups (lightly_train/_methods/dinov2/utils.py), the
optimizer and scheduler of DINOv2.configure_optimizers, the weight decay
schedule and the lr-0 freezing of DINOv2.on_before_optimizer_step, and
Lightning's norm clipping (clip_grad_norm_ over the optimizer's
parameters) before each step.

The model is a tiny DinoVisionTransformer (patch 4, width 8, 2 blocks, 2
registers, LayerScale, a 2 x 2 position grid) and the DINOv2 head (hidden
12, bottleneck 6, output 10, trained weight_g), by their parameter names
and sizes: the optimizer works element by element, so only names (for the
groups), sizes and values matter; the values and gradients come from the
fixture init (tools/make_fixtures.py fixture_value), which the C test
computes too. Every parameter is listed under this program's group and
name (its MethodGroup and ParameterSet names; LightlyTrain's name in
NAMES).

For every case C, with P = <group>/<name> of each parameter:
    C/config                 (8,) F64  lr, warmup_steps, steps, min_lr, weight_decay,
                                       weight_decay_end, layerwise_decay,
                                       patch_embed_lr_multiplier
    C/freeze                 (2,) F64  student_freeze_last_layer_steps,
                                       student_freeze_backbone_steps
    C/lr_scale/P             () F64    LightlyTrain's group lr / lr (the multiplier)
    C/weight_decay/P         () F64    the group's weight decay (0 or weight_decay)
    C/step/<t>/P             F32       the parameter after step t (1..steps)
    C/clip/<t>               () F64    Lightning's total gradient norm at step t
    grad_scale               (steps,) F32  GRAD_SCALE
Values: init "dinov2_groups/P" (offset, scale) by INIT_RULE; the gradient
of step t "dinov2_groups/grad/<t>/P" at scale GRAD_SCALE[t-1].
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import SafeFile, add_check, fixture_value, write_fixture  # noqa: E402
from make_loss_fixtures import parse_fixture_args, require_lightly  # noqa: E402

PATCH, DIM, DEPTH, MLP, REGISTERS, GRID = 4, 8, 2, 32, 2, 2
HIDDEN, BOTTLENECK, OUT = 12, 6, 10
STEPS = 6
# total gradient norms 1.2 .. 4.2: clipped at 3 in the last three steps only
GRAD_SCALE = [0.04, 0.06, 0.08, 0.10, 0.12, 0.14]

# (name, lr, warmup, min_lr, wd, wd_end, layerwise_decay, patch_mult, freeze_last, freeze_backbone)
CASES = [
    ("defaults", 0.01, 2, 1e-4, 0.04, 0.4, 0.9, 0.2, 3, 0),
    ("frozen_backbone", 0.02, 3, 1e-3, 0.05, 0.3, 0.7, 0.5, 2, 4),
]


def vit_names():
    """(group, our name, LightlyTrain's name, shape) of the backbone and mask
    token: DinoVisionTransformer's parameters (block_chunks=0), timm's names."""
    tokens = 1 + GRID * GRID
    names = [
        ("backbone", "cls_token", "cls_token", (1, 1, DIM)),
        ("backbone", "reg_token", "register_tokens", (1, REGISTERS, DIM)),
        ("backbone", "pos_embed", "pos_embed", (1, tokens, DIM)),
        ("mask_token", "mask_token", "mask_token", (1, DIM)),
        ("backbone", "patch_embed.proj.weight", "patch_embed.proj.weight", (DIM, 3, PATCH, PATCH)),
        ("backbone", "patch_embed.proj.bias", "patch_embed.proj.bias", (DIM,)),
    ]
    for b in range(DEPTH):
        block = [
            ("norm1.weight", (DIM,)), ("norm1.bias", (DIM,)),
            ("attn.qkv.weight", (3 * DIM, DIM)), ("attn.qkv.bias", (3 * DIM,)),
            ("attn.proj.weight", (DIM, DIM)), ("attn.proj.bias", (DIM,)),
            ("ls1.gamma", (DIM,)),
            ("norm2.weight", (DIM,)), ("norm2.bias", (DIM,)),
            ("mlp.fc1.weight", (MLP, DIM)), ("mlp.fc1.bias", (MLP,)),
            ("mlp.fc2.weight", (DIM, MLP)), ("mlp.fc2.bias", (DIM,)),
            ("ls2.gamma", (DIM,)),
        ]
        names += [("backbone", f"blocks.{b}.{n}", f"blocks.{b}.{n}", s) for n, s in block]
    names += [("backbone", "norm.weight", "norm.weight", (DIM,)),
              ("backbone", "norm.bias", "norm.bias", (DIM,))]
    return names


def head_names():
    """The student head (DINOv2Head.dino_head, shared with ibot_head):
    DINOv2ProjectionHead's mlp and its parametrized last layer."""
    names = []
    widths = [(DIM, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, BOTTLENECK)]
    for i, (fan_in, fan_out) in enumerate(widths):
        names.append(("projection_head", f"layers.{2 * i}.weight",
                      f"dino_head.mlp.{2 * i}.weight", (fan_out, fan_in)))
        names.append(("projection_head", f"layers.{2 * i}.bias",
                      f"dino_head.mlp.{2 * i}.bias", (fan_out,)))
    names += [("last_layer", "last_layer.weight_v",
               "dino_head.last_layer.parametrizations.weight.original1", (OUT, BOTTLENECK)),
              ("last_layer", "last_layer.weight_g",
               "dino_head.last_layer.parametrizations.weight.original0", (OUT, 1))]
    return names


def init_rule(name):
    """(offset, scale) of a parameter's fixture init."""
    if name.endswith("weight_g") or ("norm" in name and name.endswith("weight")):
        return 1.0, 0.25
    return 0.0, 0.5


# ---- LightlyTrain, written out (lightly_train/_methods/dinov2/utils.py) -----------------


def get_vit_lr_decay_rate(name, lr_decay_rate, num_layers=12, chunked_blocks=False):
    layer_id = num_layers + 1
    if (
        "pos_embed" in name
        or "patch_embed" in name
        or "mask_token" in name
        or "cls_token" in name
        or "register_tokens" in name
    ):
        layer_id = 0
    elif ".blocks." in name and ".residual." not in name:
        layer_id = int(name[name.find(".blocks."):].split(".")[2]) + 1
    elif chunked_blocks and "blocks." in name and "residual." not in name:
        layer_id = int(name[name.find("blocks."):].split(".")[2]) + 1
    elif "blocks." in name and "residual." not in name:
        layer_id = int(name[name.find("blocks."):].split(".")[1]) + 1
    return lr_decay_rate ** (num_layers + 1 - layer_id)


def get_optimizer_with_decay(lr, weight_decay, modules, layerwise_decay,
                             patch_embed_lr_multiplier):
    """modules: [(is_backbone, [(name, param)])]; AdamW as DINOv2AdamWViTArgs."""
    all_param_groups = []
    for is_backbone, named_parameters in modules:
        for name, param in named_parameters:
            decay_rate = 1.0
            if is_backbone:
                decay_rate = get_vit_lr_decay_rate(name=name, lr_decay_rate=layerwise_decay,
                                                   num_layers=DEPTH, chunked_blocks=False)
            d = {"name": name, "params": [param], "lr": lr * decay_rate,
                 "weight_decay": weight_decay, "foreach": True}
            if name.endswith(".bias") or "norm" in name or "gamma" in name:
                d.update({"weight_decay": 0.0})
            if "patch_embed" in name:
                d.update({"lr": d["lr"] * patch_embed_lr_multiplier})
            all_param_groups.append(d)
    fused_param_groups = get_fused_param_groups(all_param_groups)
    return torch.optim.AdamW(fused_param_groups, lr=lr, betas=(0.9, 0.999), eps=1e-8,
                             weight_decay=weight_decay)


def get_fused_param_groups(param_groups):
    fused = {}
    for group in param_groups:
        ids = {k: v for k, v in group.items() if k not in ["params", "name"]}
        ids["head"] = "head" in group["name"]
        ids["last_layer"] = "last_layer" in group["name"]
        group_id = "_".join(f"{k}={v}" for k, v in ids.items())
        if group_id not in fused:
            fused[group_id] = group
        else:
            fused[group_id]["params"].extend(group["params"])
    return list(fused.values())


def on_before_optimizer_step(optimizer, step, total, wd, wd_end, freeze_last, freeze_backbone):
    from lightly.utils.optim import update_param_groups
    from lightly.utils.scheduler import cosine_schedule
    weight_decay = cosine_schedule(step=step, max_steps=total, start_value=wd, end_value=wd_end)
    updates = []
    for group in optimizer.param_groups:
        update = {}
        if group["weight_decay"] != 0.0:
            update["weight_decay"] = weight_decay
        if step < freeze_backbone and "head" not in group["name"]:
            update["lr"] = 0.0
        if step < freeze_last and "last_layer" in group["name"]:
            update["lr"] = 0.0
        if update:
            update["name"] = group["name"]
            updates.append(update)
    update_param_groups(optimizer, updates=updates)


# ---- one case ----------------------------------------------------------------------------


def run_case(safe, case):
    from lightly.utils.scheduler import CosineWarmupScheduler
    name, lr, warmup, min_lr, wd, wd_end, decay, patch_mult, freeze_last, freeze_backbone = case
    entries = vit_names() + head_names()
    params = {}
    for group, ours, _, shape in entries:
        key = f"{group}/{ours}"
        params[key] = torch.nn.Parameter(torch.from_numpy(
            fixture_value(f"dinov2_groups/{key}", shape, *init_rule(ours))))
    backbone = [(theirs, params[f"{group}/{ours}"]) for group, ours, theirs, _ in vit_names()]
    head = [(theirs, params[f"{group}/{ours}"]) for group, ours, theirs, _ in head_names()]
    optimizer = get_optimizer_with_decay(lr, wd, [(True, backbone), (False, head)], decay,
                                         patch_mult)
    scheduler = CosineWarmupScheduler(optimizer=optimizer, warmup_epochs=warmup,
                                      max_epochs=STEPS, end_value=min_lr / lr)
    # the groups each parameter landed in (their lr before the schedule's factor)
    for group in optimizer.param_groups:
        for param in group["params"]:
            key = next(k for k, p in params.items() if p is param)
            safe.add(f"{name}/lr_scale/{key}", np.float64(group["initial_lr"] / lr))
            safe.add(f"{name}/weight_decay/{key}", np.float64(group["weight_decay"]))
    safe.add(f"{name}/config", np.array([lr, warmup, STEPS, min_lr, wd, wd_end, decay,
                                         patch_mult], dtype=np.float64))
    safe.add(f"{name}/freeze", np.array([freeze_last, freeze_backbone], dtype=np.float64))
    all_params = [p for group in optimizer.param_groups for p in group["params"]]
    for step in range(STEPS):
        for key, param in params.items():
            param.grad = torch.from_numpy(fixture_value(f"dinov2_groups/grad/{step + 1}/{key}",
                                                        tuple(param.shape), 0.0,
                                                        np.float32(GRAD_SCALE[step])))
        on_before_optimizer_step(optimizer, step, STEPS, wd, wd_end, freeze_last,
                                 freeze_backbone)
        norm = torch.nn.utils.clip_grad_norm_(all_params, max_norm=3.0)
        safe.add(f"{name}/clip/{step + 1}", np.float64(norm.item()))
        optimizer.step()
        scheduler.step()
        for key, param in params.items():
            safe.add(f"{name}/step/{step + 1}/{key}", param.detach().numpy().copy())
    print(f"{name}: {len(params)} parameters, {len(optimizer.param_groups)} fused groups")


def main():
    args = parse_fixture_args(__doc__)
    lightly = require_lightly()
    safe = SafeFile()
    add_check(safe)
    safe.add("grad_scale", np.array(GRAD_SCALE, dtype=np.float32))
    for case in CASES:
        run_case(safe, case)
    write_fixture(safe, args.out, "dinov2_groups.safetensors",
                  "/usr/bin/python3 tools/make_dinov2_groups_fixtures.py --out tests/fixtures "
                  "--lightly /tmp/lightly",
                  f"LightlyTrain DINOv2 param groups (written out), lightly "
                  f"{lightly.__version__} schedulers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
