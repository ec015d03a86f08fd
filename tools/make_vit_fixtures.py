#!/usr/bin/python3
"""Writes tests/fixtures/vit.safetensors: timm and Hugging Face transformers
references for the ViT backbones (src/nn/vit.h), checked by tests/test_vit.c.

    PYTHONPATH=/work/pyref /usr/bin/python3 tools/make_vit_fixtures.py --out tests/fixtures

Needs timm and transformers next to Debian's torch 1.13
(`/usr/bin/python3 -m pip install --target /work/pyref timm==1.0.9
transformers==4.44.2 safetensors tqdm ...`); the safetensors writer and
"fixture init" (tests/fixtures/README.md) come from tools/make_fixtures.py.

Three tiny models, each run twice from the same float32 weights and inputs:
in float64 (the stored truth) and in float32 (to measure f32err):

  timm_p16: timm.create_model("vit_small_patch14_dinov2", patch_size=16,
            embed_dim=64, depth=2, num_heads=2, img_size=64,
            dynamic_img_size=True): DINOv2's block (LayerScale, LayerNorm eps
            1e-6, exact GELU), 4 x 4 position grid. Other sizes resample the
            grid as timm's dynamic_img_size does (antialiased bicubic).
  timm_p14_reg4: the same from "vit_small_patch14_reg4_dinov2" (4 registers,
            no_embed_class), patch 14, img_size 56.
  hf_p14:   transformers.Dinov2Model(hidden_size 32, 2 layers, 2 heads,
            intermediate 128, patch 14, image 56): other sizes resample with
            DINOv2's offset bicubic (scale factor (n + 0.1) / M).

Weights of the timm models are fixture init of their state_dict names
(rules below), so they are not stored; hf_p14's are stored (transformers'
names, F16: the fixture-init values rounded to float16, which the reference
uses too) so its loader is tested. Rules (offset, scale): Linear and conv
weights (0, sqrt(3 / fan_in)), their biases (0, 0.1), LayerNorm weight
(1, 0.25) and bias (0, 0.25), LayerScale gammas (0.5, 0.25), cls_token,
reg_token (0, 1), pos_embed (0, 0.5); transformers' names get the rule of the
same tensor ("lambda1" as gamma, "position_embeddings" as pos_embed, ...).
Inputs: fixture init "input/<model>/<size>" (0, 1), (2, 3, S, S) NCHW.

Per model M and size S (px):
    M/S/tokens             (2, T, D) F64  the normalised tokens (timm:
                                          forward_features; transformers:
                                          last_hidden_state): class token,
                                          registers, patches
    f32err/M/S/tokens      () F64         max |float32 run - float64 run|
For the gradient runs (timm_p16 at 80 px, timm_p14_reg4 at 56 px): loss =
sum(tokens * w) with w fixture init "loss/M/S" (0, 1) (2, T, D) F32 over
every token;
    M/S/loss               () F64
    M/S/grad/P             F64            d loss / d P (timm name, torch shape)
                                          for parameters with <= 1024 elements
    M/S/grad_sample/P      (256,) F64     at flat indices k * 2654435761 mod numel
    M/S/grad_sum/P, M/S/grad_sumsq/P () F64   (the larger parameters)
    f32err/...             for each, as tools/make_fixtures.py defines it
Resampling matrices (torch.nn.functional.interpolate on the identity, float64):
    interp/offset/I_O, interp/antialias/I_O, interp/bicubic/I_O
                           (O, I) F64     one axis, I -> O positions: DINOv2's
                                          scale_factor (O + 0.1) / I; size O with
                                          antialias; size O without (LightlyTrain's
                                          load-time resize)
hf_p14's weights: hf_p14.<transformers name> F16 (mask_token included: a
loader must skip it).
    check/u                (16,) F32      as in every fixture file
"""
import argparse
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import (DTYPE_NAMES, SafeFile, add_check,  # noqa: E402
                           add_gradient_entries, fixture_value)

import timm  # noqa: E402
import transformers  # noqa: E402
from transformers.models.dinov2 import modeling_dinov2  # noqa: E402

BATCH = 2
FULL_GRAD_MAX = 1024  # parameters up to this many elements: full gradient (a small file)
DTYPE_NAMES[np.dtype(np.float16)] = "F16"

# --------------------------------------------------------------------------
# fixture-init weights


def init_rule(name, shape):
    """(offset, scale) of a parameter by its (timm or transformers) name."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf in ("cls_token", "reg_token", "register_tokens", "mask_token"):
        return 0.0, 1.0
    if leaf in ("pos_embed", "position_embeddings"):
        return 0.0, 0.5
    if leaf in ("gamma", "lambda1"):
        return 0.5, 0.25
    if "norm" in name and leaf in ("weight", "bias"):
        return (1.0, 0.25) if leaf == "weight" else (0.0, 0.25)
    if leaf == "weight" and len(shape) in (2, 4):
        fan_in = int(np.prod(shape[1:]))
        return 0.0, math.sqrt(3.0 / fan_in)
    if leaf == "bias":
        return 0.0, 0.1
    raise ValueError(f"no fixture-init rule for {name} {shape}")


def fixture_weights(model, dtype=np.float32):
    """Sets every parameter of model by fixture init of its name, rounded to
    dtype; returns {name: array of dtype}."""
    state = {}
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            rule = init_rule(name, parameter.shape)
            value = fixture_value(name, tuple(parameter.shape), *rule).astype(dtype)
            parameter.copy_(torch.from_numpy(value.astype(np.float32)))
            state[name] = value
    return state


# --------------------------------------------------------------------------
# models


def timm_model(kind):
    common = dict(pretrained=False, num_classes=0, embed_dim=64, depth=2, num_heads=2,
                  dynamic_img_size=True)
    if kind == "timm_p16":
        return timm.create_model("vit_small_patch14_dinov2", patch_size=16, img_size=64, **common)
    return timm.create_model("vit_small_patch14_reg4_dinov2", img_size=56, **common)


def hf_model():
    config = transformers.Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                       intermediate_size=128, image_size=56, patch_size=14,
                                       layerscale_value=1.0, layer_norm_eps=1e-6,
                                       hidden_act="gelu", qkv_bias=True, use_swiglu_ffn=False)
    return modeling_dinov2.Dinov2Model(config)


def interpolate_keeping_dtype(self, embeddings, height, width):
    """transformers 4.44's Dinov2Embeddings.interpolate_pos_encoding without its
    cast to float32, so the float64 run stays float64 (same arguments:
    scale_factor (n + 0.1) / M, bicubic, align_corners False)."""
    num_patches = embeddings.shape[1] - 1
    num_positions = self.position_embeddings.shape[1] - 1
    if num_patches == num_positions and height == width:
        return self.position_embeddings
    class_pos = self.position_embeddings[:, 0]
    patch_pos = self.position_embeddings[:, 1:]
    dim = embeddings.shape[-1]
    side = int(math.sqrt(num_positions))
    new_h = height // self.config.patch_size + 0.1
    new_w = width // self.config.patch_size + 0.1
    patch_pos = patch_pos.reshape(1, side, side, dim).permute(0, 3, 1, 2)
    patch_pos = F.interpolate(patch_pos, scale_factor=(float(new_h / side), float(new_w / side)),
                              mode="bicubic", align_corners=False)
    patch_pos = patch_pos.permute(0, 2, 3, 1).view(1, -1, dim)
    return torch.cat((class_pos.unsqueeze(0), patch_pos), dim=1)


def tokens_of(kind, model, image):
    if kind.startswith("hf_"):
        return model(pixel_values=image).last_hidden_state
    return model.forward_features(image)


def run(kind, dtype, sizes, grad_size, hf_weights=None):
    """The fixture computation in dtype. Returns ({name: array}, {param: flat grad})."""
    model = hf_model() if kind == "hf_p14" else timm_model(kind)
    if kind == "hf_p14":
        model.embeddings.interpolate_pos_encoding = \
            interpolate_keeping_dtype.__get__(model.embeddings)
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                parameter.copy_(torch.from_numpy(hf_weights[name].astype(np.float32)))
    else:
        fixture_weights(model)
    return run_model(kind, model.to(dtype).train(), dtype, sizes, grad_size)


def run_model(kind, model, dtype, sizes, grad_size):
    """The tokens of `model` (dtype, train mode) on fixture inputs
    "input/<kind>/<size>", and at grad_size the gradients of sum(tokens * w).
    Returns ({name: array}, {param: flat grad})."""
    results, grads = {}, {}
    for size in sizes:
        image = torch.from_numpy(fixture_value(f"input/{kind}/{size}", (BATCH, 3, size, size),
                                               0.0, 1.0)).to(dtype)
        model.zero_grad()
        tokens = tokens_of(kind, model, image)
        results[f"{kind}/{size}/tokens"] = tokens.detach().numpy()
        if size != grad_size:
            continue
        weights = torch.from_numpy(fixture_value(f"loss/{kind}/{size}", tuple(tokens.shape),
                                                 0.0, 1.0)).to(dtype)
        loss = (tokens * weights).sum()
        loss.backward()
        results[f"{kind}/{size}/loss"] = loss.detach().numpy()
        for name, parameter in model.named_parameters():
            grads[name] = parameter.grad.detach().numpy().astype(np.float64).ravel()
    return results, grads


def add_outputs(safe, double, single, prefix, double_grads, single_grads):
    """Stores the float64 results with their f32err (the float32 run's
    distance), and the gradients under prefix/grad... (the docstring's
    contract); returns a summary line per result."""
    summary = {}
    for name, value in double.items():
        safe.add(name, value)
        error = float(np.abs(single[name].astype(np.float64) - value).max())
        safe.add(f"f32err/{name}", np.float64(error))
        summary[name] = f"f32err {error:.3g} of max |truth| {np.abs(value).max():.3g}"
    add_gradient_entries(safe, prefix, double_grads, single_grads, FULL_GRAD_MAX)
    return summary


def add_model(safe, kind, sizes, grad_size, hf_weights=None):
    double, double_grads = run(kind, torch.float64, sizes, grad_size, hf_weights)
    single, single_grads = run(kind, torch.float32, sizes, grad_size, hf_weights)
    return add_outputs(safe, double, single, f"{kind}/{grad_size}", double_grads, single_grads)


def start_fixture(description):
    """The --out argument, single-threaded deterministic torch, and a file
    holding check/u."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", required=True, help="output folder (tests/fixtures)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    safe = SafeFile()
    add_check(safe)
    return args, safe


def write_fixture(safe, path, script, command, summary):
    """Writes the file (metadata: the generating script and command, the
    library versions) and prints what it holds and each result's f32err."""
    metadata = {
        "generator": script, "command": command,
        "torch": torch.__version__, "timm": timm.__version__,
        "transformers": transformers.__version__, "numpy": np.__version__,
        "contract": f"{script} docstring, tests/fixtures/README.md",
    }
    size = safe.write(path, metadata)
    print(f"{path}: {len(safe.arrays)} tensors, {size} bytes")
    for key, value in summary.items():
        print(f"  {key}: {value}")


def add_interpolation(safe):
    for inputs, outputs in ((3, 5), (5, 3), (4, 7), (7, 4), (16, 37), (37, 16), (4, 3), (4, 5)):
        basis = torch.eye(inputs, dtype=torch.float64).reshape(inputs, 1, 1, inputs)
        offset = F.interpolate(basis, scale_factor=(1.0, (outputs + 0.1) / inputs),
                               mode="bicubic", align_corners=False)
        antialias = F.interpolate(basis, size=(1, outputs), mode="bicubic", align_corners=False,
                                  antialias=True)
        bicubic = F.interpolate(basis, size=(1, outputs), mode="bicubic", align_corners=False)
        safe.add(f"interp/bicubic/{inputs}_{outputs}", bicubic.reshape(inputs, outputs).T.numpy())
        safe.add(f"interp/offset/{inputs}_{outputs}", offset.reshape(inputs, outputs).T.numpy())
        safe.add(f"interp/antialias/{inputs}_{outputs}",
                 antialias.reshape(inputs, outputs).T.numpy())


def main():
    args, safe = start_fixture(__doc__.splitlines()[0])
    add_interpolation(safe)
    summary = {}
    summary.update(add_model(safe, "timm_p16", (64, 80, 48), 80))
    summary.update(add_model(safe, "timm_p14_reg4", (56, 42), 56))
    hf_weights = fixture_weights(hf_model(), np.float16)
    for name, value in hf_weights.items():
        safe.add(f"hf_p14.{name}", value)
    summary.update(add_model(safe, "hf_p14", (56, 70), None, hf_weights))
    write_fixture(safe, os.path.join(args.out, "vit.safetensors"), "tools/make_vit_fixtures.py",
                  "PYTHONPATH=/work/pyref /usr/bin/python3 tools/make_vit_fixtures.py "
                  "--out tests/fixtures", summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
