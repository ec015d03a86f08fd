#!/usr/bin/python3
"""Writes tests/fixtures/convnext.safetensors and tests/fixtures/convnext_dinov3.pth:
torchvision, timm and DINOv3 references for the ConvNeXt backbones
(src/nn/convnext.h), checked by tests/test_convnext.c and
tests/test_convnext_step.c.

    /work/venvs/convnext/bin/python tools/make_convnext_fixtures.py --out tests/fixtures

Needs torch, torchvision and timm (pip; the committed files: torch 2.15,
torchvision 0.29, timm 1.0.31); the safetensors writer and "fixture init"
(tests/fixtures/README.md) come from tools/make_fixtures.py. DINOv3's
ConvNeXt is not imported: its state-dict names (facebookresearch/dinov3's
models/convnext.py: downsample_layers.S.I, stages.S.B.{dwconv, norm,
pwconv1, pwconv2, gamma}, norm, and norms.3 = norm listed again) are
written out in dinov3_name() below, and its features (LightlyTrain's
DINOv3VConvNeXtModelWrapper: the final norm on every position of the last
stage, then the mean) from timm's model, whose blocks compute the same.

Weights are fixture init by timm's names ("stem.0.weight", ...; the other
namings get the value of the same tensor): conv and linear weights (0,
sqrt(3 / fan_in)), their biases (0, 0.1), LayerNorm weight (1, 0.25) and
bias (0, 0.25), gamma (0.5, 0.25) (not 1e-6, so that every branch shows).
Inputs: fixture init "input/convnext/<S>" (0, 1), (2, 3, S, S) NCHW. Every
result is run twice from the same float32 weights and inputs: in float64
(the stored truth) and in float32 (its distance from the truth: f32err).
Maps are stored NHWC (2, h, w, D).

1. Every size at small inputs (tiny at 64 px, small, base and large at 32 px):
    SIZE/timm/features, SIZE/timm/map          timm.create_model("convnext_SIZE",
                                               num_classes=0): forward_features and its mean
    SIZE/torchvision/features, SIZE/torchvision/map
                                               torchvision.models.convnext_SIZE(
                                               stochastic_depth_prob=0): features and avgpool
    SIZE/dinov3/features, SIZE/dinov3/map      the final norm (head.norm) on every position
                                               of timm's map, then the mean
    f32err/...                                 for each (max |float32 - float64|)

2. The training step of torchvision's convnext_tiny at 64 px (train mode,
   stochastic depth 0): loss = sum(features * w), w fixture init
   "loss/convnext/64" (2, 768):
    step/loss                                  () F64
    step/grad/P                                full (flat), parameters of <= 1024
                                               elements (torchvision name P)
    step/grad_sample/P, step/grad_sum/P, step/grad_sumsq/P
                                               the larger ones (tools/make_fixtures.py)
    f32err/step/...                            as tools/make_fixtures.py defines it

3. A small ConvNeXt (depths 1-1-2-1, widths 8-16-24-32, kernel 7), its
   weights fixture init rounded to float16 and stored in each naming:
    small/NAMING.NAME                          F16, NAMING torchvision, timm, dinov3
                                               (dinov3 with norms.3.* = norm.*)
    small/NAMING/S/features, small/NAMING/S/map   at S = 32 and 48 px (dinov3: the
                                               DINOv3 features)
    small/NAMING/48/loss, small/NAMING/48/grad/P   for NAMING timm and dinov3:
                                               loss = sum(features * w) + sum(map * v), w, v
                                               fixture init "loss/small/features",
                                               "loss/small/map"; P in NAMING's names
    convnext_dinov3.pth                        small/dinov3's tensors saved by torch.save
                                               (a state dict as DINOv3 releases them)
    small/dinov3/64/stages3                    (2, 2, 2, 72) at 64 px: LightlyTrain's DINOv3
                                               ConvNeXt wrapper's forward_features with
                                               n_blocks 3 (distillationv2's teacher): stages
                                               1 and 2 as they are, resized bilinearly
                                               (align_corners False) to stage 3's grid, then
                                               stage 3 through the final norm, side by side

4. LightlyTrain's AdamW parameter groups on the small ConvNeXt: the
   parameters from fixture init (float32, not rounded), gradient fixture
   init "adamw/grad/P" (0, 1) with P the timm name, one torch.optim.AdamW
   step (lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.04 on the
   decayed group, 0 on the other) with the groups of LightlyTrain's
   get_weight_decay_parameters (lightly_train/_optim/optimizer_helpers.py,
   written out: no decay for norm layers, 0-D and 1-D parameters, names
   with bias, layer_scale or gamma, ...), computed for each naming's module
   tree and required to agree:
    adamw/decay/P                              () F32: 1 decayed, 0 not (timm name)
    adamw/after/P                              torch shape F32: P after the step

Every file also holds check/u (16,) F32.
"""
import argparse
import math
import os
import re
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import (DTYPE_NAMES, SafeFile, add_check,  # noqa: E402
                           add_gradient_entries, fixture_value)

import timm  # noqa: E402
import torchvision  # noqa: E402
from torchvision.models.convnext import CNBlockConfig  # noqa: E402

BATCH = 2
SIZE_INPUTS = {"tiny": 64, "small": 32, "base": 32, "large": 32}
FULL_GRAD_MAX = 1024
SMALL_DEPTHS, SMALL_DIMS = (1, 1, 2, 1), (8, 16, 24, 32)
DTYPE_NAMES[np.dtype(np.float16)] = "F16"

# --------------------------------------------------------------------------
# names


def torchvision_name(timm_name):
    """torchvision's name of the tensor timm calls timm_name."""
    n = timm_name
    n = re.sub(r"^stem\.(\d)\.", r"features.0.\1.", n)
    n = re.sub(r"^stages\.(\d)\.downsample\.(\d)\.",
               lambda m: f"features.{2 * int(m[1])}.{m[2]}.", n)
    m = re.match(r"^stages\.(\d)\.blocks\.(\d+)\.(.*)$", n)
    if m:
        part = {"conv_dw": "block.0", "norm": "block.2", "mlp.fc1": "block.3",
                "mlp.fc2": "block.5", "gamma": "layer_scale"}
        module, _, leaf = m[3].rpartition(".") if m[3] != "gamma" else ("gamma", "", "")
        n = f"features.{2 * int(m[1]) + 1}.{m[2]}.{part[module]}" + (f".{leaf}" if leaf else "")
    return n.replace("head.norm.", "classifier.0.")


def dinov3_name(timm_name):
    """DINOv3's name (facebookresearch/dinov3 ConvNeXt) of the tensor timm calls timm_name."""
    n = timm_name
    n = re.sub(r"^stem\.(\d)\.", r"downsample_layers.0.\1.", n)
    n = re.sub(r"^stages\.(\d)\.downsample\.(\d)\.", r"downsample_layers.\1.\2.", n)
    n = re.sub(r"^stages\.(\d)\.blocks\.(\d+)\.", r"stages.\1.\2.", n)
    n = n.replace("conv_dw", "dwconv").replace("mlp.fc1", "pwconv1").replace("mlp.fc2", "pwconv2")
    return n.replace("head.norm.", "norm.")


def rename(state, naming):
    """{timm name: array} in `naming`'s names (torchvision's layer scale (C, 1, 1);
    DINOv3's final norm also as norms.3)."""
    out = {}
    for name, value in state.items():
        if naming == "torchvision":
            out[torchvision_name(name)] = value.reshape(-1, 1, 1) if name.endswith("gamma") \
                else value
        elif naming == "dinov3":
            out[dinov3_name(name)] = value
            if name.startswith("head.norm."):
                out["norms.3." + name.rsplit(".", 1)[1]] = value
        else:
            out[name] = value
    return out

# --------------------------------------------------------------------------
# models and fixture-init weights


def init_rule(model, name, shape):
    module = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "gamma":
        return 0.5, 0.25
    if "Norm" in type(module).__name__:
        return (1.0, 0.25) if leaf == "weight" else (0.0, 0.25)
    if leaf == "weight":
        return 0.0, math.sqrt(3.0 / int(np.prod(shape[1:])))
    if leaf == "bias":
        return 0.0, 0.1
    raise ValueError(f"no fixture-init rule for {name} {shape}")


def timm_convnext(size=None):
    if size:
        return timm.create_model(f"convnext_{size}", pretrained=False, num_classes=0,
                                 drop_path_rate=0.0)
    return timm.models.convnext.ConvNeXt(depths=SMALL_DEPTHS, dims=SMALL_DIMS, num_classes=0)


def torchvision_convnext(size=None):
    if size:
        return getattr(torchvision.models, f"convnext_{size}")(stochastic_depth_prob=0.0)
    settings = [CNBlockConfig(SMALL_DIMS[s], SMALL_DIMS[s + 1] if s < 3 else None,
                              SMALL_DEPTHS[s]) for s in range(4)]
    return torchvision.models.ConvNeXt(settings, stochastic_depth_prob=0.0)


def fixture_state(size=None, dtype=np.float32):
    """{timm name: fixture-init value rounded to dtype} of a model."""
    model = timm_convnext(size)
    return {name: fixture_value(name, tuple(p.shape), *init_rule(model, name, p.shape))
            .astype(dtype) for name, p in model.named_parameters()}


def load(model, state):
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name in state:
                parameter.copy_(torch.from_numpy(np.asarray(state[name], np.float32))
                                .reshape(parameter.shape))
    return model


def image(size, dtype):
    return torch.from_numpy(fixture_value(f"input/convnext/{size}", (BATCH, 3, size, size),
                                          0.0, 1.0)).to(dtype)


def outputs(naming, model, x, head_norm):
    """(features (B, D), map (B, h, w, D)) as LightlyTrain's wrappers give them."""
    if naming == "torchvision":
        feature_map = model.features(x)
    else:
        feature_map = model.forward_features(x)
    feature_map = feature_map.permute(0, 2, 3, 1)
    if naming == "dinov3":
        feature_map = F.layer_norm(feature_map, feature_map.shape[-1:], head_norm.weight,
                                   head_norm.bias, head_norm.eps)
    return feature_map.mean(dim=(1, 2)), feature_map


def make_model(naming, size, state, dtype):
    """The reference model of naming in dtype with the timm-named state loaded."""
    if naming == "torchvision":
        model = load(torchvision_convnext(size), rename(state, "torchvision"))
    else:
        model = load(timm_convnext(size), state)
    return model.to(dtype)


def head_norm_of(naming, model):
    return model.classifier[0] if naming == "torchvision" else model.head.norm

# --------------------------------------------------------------------------
# stored results


def add_with_error(safe, summary, name, double, single):
    safe.add(name, double)
    error = float(np.abs(single.astype(np.float64) - double).max())
    safe.add(f"f32err/{name}", np.float64(error))
    summary[name] = f"f32err {error:.3g} of max |truth| {np.abs(double).max():.3g}"


def add_gradients(safe, prefix, double_grads, single_grads):
    """prefix/grad... as tools/make_fixtures.py stores them (its f32err rules)."""
    add_gradient_entries(safe, prefix, {n: g.ravel() for n, g in double_grads.items()},
                         {n: g.ravel() for n, g in single_grads.items()}, FULL_GRAD_MAX)


def add_sizes(safe, summary):
    for size, pixels in SIZE_INPUTS.items():
        state = fixture_state(size)
        for naming in ("timm", "torchvision", "dinov3"):
            results = {}
            for dtype in (torch.float64, torch.float32):
                model = make_model(naming, size, state, dtype).eval()
                with torch.no_grad():
                    features, feature_map = outputs(naming, model, image(pixels, dtype),
                                                    head_norm_of(naming, model))
                results[dtype] = (features.numpy(), feature_map.numpy())
            for i, what in enumerate(("features", "map")):
                add_with_error(safe, summary, f"{size}/{naming}/{what}",
                               results[torch.float64][i], results[torch.float32][i])


def run_loss(model, naming, x, head_norm, weights):
    """(loss, {name: flat float64 gradient}) of sum(features * w) [+ sum(map * v)]."""
    model.zero_grad()
    features, feature_map = outputs(naming, model, x, head_norm)
    loss = (features * weights[0]).sum()
    if len(weights) > 1:
        loss = loss + (feature_map * weights[1]).sum()
    loss.backward()
    grads = {name: p.grad.detach().numpy().astype(np.float64).reshape(p.shape)
             for name, p in model.named_parameters() if p.grad is not None}
    return loss.detach().numpy(), grads


def add_step(safe, summary):
    state = fixture_state("tiny")
    runs = {}
    for dtype in (torch.float64, torch.float32):
        model = make_model("torchvision", "tiny", state, dtype).train()
        weights = [torch.from_numpy(fixture_value("loss/convnext/64", (BATCH, 768), 0.0, 1.0))
                   .to(dtype)]
        runs[dtype] = run_loss(model, "torchvision", image(64, dtype), None, weights)
    add_with_error(safe, summary, "step/loss", runs[torch.float64][0], runs[torch.float32][0])
    add_gradients(safe, "step", runs[torch.float64][1], runs[torch.float32][1])


def add_small(safe, summary):
    state = fixture_state(None, np.float16)
    for naming in ("torchvision", "timm", "dinov3"):
        for name, value in rename(state, naming).items():
            safe.add(f"small/{naming}.{name}", value)
    dinov3 = {name: torch.from_numpy(value) for name, value in rename(state, "dinov3").items()}
    for size in (32, 48):
        for naming in ("torchvision", "timm", "dinov3"):
            results = {}
            for dtype in (torch.float64, torch.float32):
                model = make_model(naming, None, state, dtype).train()
                head = head_norm_of(naming, model)
                x = image(size, dtype)
                if size == 48 and naming != "torchvision":
                    with torch.no_grad():
                        features, feature_map = outputs(naming, model, x, head)
                    weights = [torch.from_numpy(fixture_value(f"loss/small/{what}", tuple(t.shape),
                                                              0.0, 1.0)).to(dtype)
                               for what, t in (("features", features), ("map", feature_map))]
                    loss, grads = run_loss(model, naming, x, head, weights)
                    results[dtype] = (features.numpy(), feature_map.numpy(), loss, grads)
                    continue
                with torch.no_grad():
                    features, feature_map = outputs(naming, model, x, head)
                results[dtype] = (features.numpy(), feature_map.numpy())
            prefix = f"small/{naming}/{size}"
            for i, what in enumerate(("features", "map")):
                add_with_error(safe, summary, f"{prefix}/{what}", results[torch.float64][i],
                               results[torch.float32][i])
            if len(results[torch.float64]) > 2:
                add_with_error(safe, summary, f"{prefix}/loss", results[torch.float64][2],
                               results[torch.float32][2])
                rename_grad = (lambda n: dinov3_name(n)) if naming == "dinov3" else (lambda n: n)
                add_gradients(safe, prefix,
                              {rename_grad(n): g for n, g in results[torch.float64][3].items()},
                              {rename_grad(n): g for n, g in results[torch.float32][3].items()})
    add_stage_features(safe, summary, state)
    return dinov3


def add_stage_features(safe, summary, state):
    results = {}
    for dtype in (torch.float64, torch.float32):
        model = make_model("timm", None, state, dtype).eval()
        with torch.no_grad():
            x = model.stem(image(64, dtype))
            outputs_ = []
            for stage in model.stages:
                x = stage(x)
                outputs_.append(x)
            last = F.layer_norm(outputs_[3].permute(0, 2, 3, 1), (outputs_[3].shape[1],),
                                model.head.norm.weight, model.head.norm.bias,
                                model.head.norm.eps).permute(0, 3, 1, 2)
            parts = [F.interpolate(o, size=last.shape[-2:], mode="bilinear", align_corners=False)
                     for o in outputs_[1:3]] + [last]
            results[dtype] = torch.cat(parts, dim=1).permute(0, 2, 3, 1).numpy()
    add_with_error(safe, summary, "small/dinov3/64/stages3", results[torch.float64],
                   results[torch.float32])

# --------------------------------------------------------------------------
# LightlyTrain's parameter groups


def _contains_key(keys, name, any_pos=False):
    if any_pos:
        return any(key in name for key in keys)
    return any(name == key or name.endswith(f".{key}") or name.startswith(f"{key}.")
               or f".{key}." in name for key in keys)


def decays(model):
    """{name: 1 decayed, 0 not} by LightlyTrain's get_weight_decay_parameters rules."""
    owner = {}
    for module in model.modules():
        for p in module.parameters(recurse=False):
            owner[id(p)] = module
    flags = {}
    for name, p in model.named_parameters():
        module = owner[id(p)]
        no_decay = (isinstance(module, (torch.nn.LayerNorm, torch.nn.GroupNorm,
                                        torch.nn.modules.batchnorm._NormBase))
                    or "Norm" in type(module).__name__
                    or isinstance(module, (torch.nn.Embedding, torch.nn.EmbeddingBag))
                    or p.ndim <= 1
                    or _contains_key(["bias", "bias_v", "bias_k"], name)
                    or _contains_key(["cls_token", "mask_token", "storage_token",
                                      "register_token", "queries", "query", "pos_embed",
                                      "position_embedding", "positional_embedding",
                                      "relative_position", "relative_pos", "rel_pos", "rpb",
                                      "bias_table"], name, any_pos=True)
                    or _contains_key(["logit_scale", "temperature", "tau"], name)
                    or _contains_key(["layer_scale", "layerscale", "res_scale", "rezero",
                                      "gamma"], name))
        flags[name] = 0 if no_decay else 1
    return flags


def add_adamw(safe):
    state = fixture_state(None)
    timm_model = load(timm_convnext(), state)
    flags = decays(timm_model)
    tv_flags = decays(torchvision_convnext())
    for name in flags:  # the same groups in torchvision's names
        assert tv_flags[torchvision_name(name)] == flags[name], name
    groups = [{"params": [], "weight_decay": 0.04}, {"params": [], "weight_decay": 0.0}]
    for name, p in timm_model.named_parameters():
        p.grad = torch.from_numpy(fixture_value(f"adamw/grad/{name}", tuple(p.shape), 0.0, 1.0))
        groups[0 if flags[name] else 1]["params"].append(p)
        safe.add(f"adamw/decay/{name}", np.float32(flags[name]))
    optimizer = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    optimizer.step()
    for name, p in timm_model.named_parameters():
        safe.add(f"adamw/after/{name}", p.detach().numpy().copy())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder (tests/fixtures)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    safe = SafeFile()
    add_check(safe)
    summary = {}
    add_sizes(safe, summary)
    add_step(safe, summary)
    dinov3 = add_small(safe, summary)
    add_adamw(safe)
    path = os.path.join(args.out, "convnext.safetensors")
    metadata = {
        "generator": "tools/make_convnext_fixtures.py",
        "command": "/work/venvs/convnext/bin/python tools/make_convnext_fixtures.py "
                   "--out tests/fixtures",
        "torch": torch.__version__, "torchvision": torchvision.__version__,
        "timm": timm.__version__, "numpy": np.__version__,
        "contract": "tools/make_convnext_fixtures.py docstring, tests/fixtures/README.md",
    }
    size = safe.write(path, metadata)
    print(f"{path}: {len(safe.arrays)} tensors, {size} bytes")
    pth = os.path.join(args.out, "convnext_dinov3.pth")
    torch.save(dinov3, pth)
    print(f"{pth}: {len(dinov3)} tensors")
    for key, value in summary.items():
        print(f"  {key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
