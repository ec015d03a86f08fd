#!/usr/bin/python3
"""Writes tests/fixtures/vit_giant.safetensors: timm and Hugging Face
transformers references for DINOv2's ViT-g architecture (vit_g14: a SwiGLU
MLP packed in one projection) at a reduced size, checked by
tests/test_vit_giant.c.

    PYTHONPATH=/work/pyref /usr/bin/python3 tools/make_vit_giant_fixtures.py --out tests/fixtures

Needs what tools/make_vit_fixtures.py needs (timm 1.0.9, transformers 4.44.2
next to Debian's torch 1.13); its helpers (fixture-init rules, the float64 /
float32 runs and f32err, the writer) are reused, so the contract of every
result below is that script's.

DINOv2's ViT-g MLP (facebookresearch/dinov2 layers/swiglu_ffn.py, timm's
SwiGLUPacked, transformers' Dinov2SwiGLUFFN): x12 = fc1(x) with 2 H rows,
x1, x2 = x12.chunk(2): the first half goes through SiLU, fc2(silu(x1) x2);
H = int(2/3 * 4 D) rounded up to a multiple of 8. Here D = 32: H = 88
(timm's mlp_ratio = 2 H / D = 5.5), 2 blocks, 2 heads, patch 14, LayerScale,
LayerNorm eps 1e-6, batch 2. Three models M:

  timm_g:        timm.create_model("vit_giant_patch14_dinov2", embed_dim=32,
                 depth=2, num_heads=2, mlp_ratio=5.5, img_size=56,
                 dynamic_img_size=True, num_classes=0): no registers, the
                 class token's position in pos_embed[0]; weights fixture
                 init of its names (not stored: the C test computes them);
                 sizes 56 (native) and 42 (antialiased resampling); the
                 gradients of sum(tokens * w) at 56.
  hf_g:          transformers.Dinov2Model(hidden_size 32, 2 layers, 2 heads,
                 mlp_ratio 4, use_swiglu_ffn=True, image 56, patch 14):
                 mlp.weights_in / mlp.weights_out; sizes 56 and 70 (DINOv2's
                 offset resampling). Weights stored: hf_g.<transformers name>
                 F16 (fixture init of those names rounded to float16, the
                 values the reference runs with).
  dinov2_g_reg4: a DINOv2 state dict (facebookresearch/dinov2 names, as its
                 hub checkpoint dinov2_vitg14_reg4 holds them: cls_token,
                 register_tokens, mask_token, pos_embed with the class
                 token's row, blocks.N.mlp.w12 / w3), fixture init of those
                 names rounded to float16 and stored as
                 dinov2_g_reg4.<DINOv2 name> F16; the reference is
                 timm.create_model("vit_giant_patch14_reg4_dinov2", the same
                 overrides) with the state dict timm's own
                 checkpoint_filter_fn makes of that file (w12 -> fc1, w3 ->
                 fc2, cls_token + pos_embed[0], registers); sizes 56 and 42.

Results per model M, size S: M/S/tokens (2, T, D) F64 and f32err/M/S/tokens;
timm_g/56/loss, timm_g/56/grad/P (parameters up to 1024 elements),
timm_g/56/grad_sample|grad_sum|grad_sumsq/P (larger ones) and their f32err
(tools/make_vit_fixtures.py's docstring). Inputs: fixture init
"input/<M>/<S>" (0, 1), (2, 3, S, S) NCHW. Also check/u (16,) F32.
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import fixture_value  # noqa: E402
from make_vit_fixtures import (add_outputs, fixture_weights, init_rule,  # noqa: E402
                               interpolate_keeping_dtype, run_model, start_fixture,
                               write_fixture)

import timm  # noqa: E402
import transformers  # noqa: E402
from timm.models.vision_transformer import checkpoint_filter_fn  # noqa: E402
from transformers.models.dinov2 import modeling_dinov2  # noqa: E402

DIM, DEPTH, HEADS, PATCH, SIZE, REGISTERS = 32, 2, 2, 14, 56, 4
HIDDEN = (int(4 * DIM * 2 / 3) + 7) // 8 * 8  # DINOv2's SwiGLUFFNFused width: 88


def timm_giant(registers):
    name = "vit_giant_patch14_reg4_dinov2" if registers else "vit_giant_patch14_dinov2"
    return timm.create_model(name, pretrained=False, num_classes=0, embed_dim=DIM, depth=DEPTH,
                             num_heads=HEADS, mlp_ratio=2 * HIDDEN / DIM, img_size=SIZE,
                             dynamic_img_size=True)


def hf_giant():
    config = transformers.Dinov2Config(hidden_size=DIM, num_hidden_layers=DEPTH,
                                       num_attention_heads=HEADS, mlp_ratio=4, image_size=SIZE,
                                       patch_size=PATCH, layerscale_value=1.0,
                                       layer_norm_eps=1e-6, qkv_bias=True, use_swiglu_ffn=True)
    model = modeling_dinov2.Dinov2Model(config)
    model.embeddings.interpolate_pos_encoding = interpolate_keeping_dtype.__get__(model.embeddings)
    return model


def dinov2_state_names():
    """{name: shape} of a DINOv2 ViT-g-style state dict (unchunked blocks, as
    the hub checkpoints): what facebookresearch/dinov2's DinoVisionTransformer
    with ffn_layer="swiglufused" and 4 registers names its tensors."""
    shapes = {
        "cls_token": (1, 1, DIM), "register_tokens": (1, REGISTERS, DIM),
        "mask_token": (1, DIM), "pos_embed": (1, 1 + (SIZE // PATCH) ** 2, DIM),
        "patch_embed.proj.weight": (DIM, 3, PATCH, PATCH), "patch_embed.proj.bias": (DIM,),
    }
    for block in range(DEPTH):
        for name, shape in (("norm1.weight", (DIM,)), ("norm1.bias", (DIM,)),
                            ("attn.qkv.weight", (3 * DIM, DIM)), ("attn.qkv.bias", (3 * DIM,)),
                            ("attn.proj.weight", (DIM, DIM)), ("attn.proj.bias", (DIM,)),
                            ("ls1.gamma", (DIM,)), ("norm2.weight", (DIM,)),
                            ("norm2.bias", (DIM,)), ("mlp.w12.weight", (2 * HIDDEN, DIM)),
                            ("mlp.w12.bias", (2 * HIDDEN,)), ("mlp.w3.weight", (DIM, HIDDEN)),
                            ("mlp.w3.bias", (DIM,)), ("ls2.gamma", (DIM,))):
            shapes[f"blocks.{block}.{name}"] = shape
    shapes["norm.weight"], shapes["norm.bias"] = (DIM,), (DIM,)
    return shapes


def dinov2_weights():
    """The DINOv2 state dict: fixture init of its names (make_vit_fixtures.py's
    rules) rounded to float16."""
    return {name: fixture_value(name, shape, *init_rule(name, shape)).astype(np.float16)
            for name, shape in dinov2_state_names().items()}


def build(kind, dtype, stored):
    if kind == "hf_g":
        model = hf_giant()
        state = {name: torch.from_numpy(value.astype(np.float32))
                 for name, value in stored.items()}
        model.load_state_dict(state, strict=True)
    elif kind == "dinov2_g_reg4":
        model = timm_giant(REGISTERS)
        # timm's converter in float64 for the float64 run (its cls_token +
        # pos_embed[0] sum is then exact), as the file would be loaded.
        state = {name: torch.from_numpy(value.astype(np.float64)).to(dtype)
                 for name, value in stored.items()}
        converted = checkpoint_filter_fn(state, model)
        model = model.to(dtype)
        model.load_state_dict(converted, strict=True)
        return model
    else:
        model = timm_giant(0)
        fixture_weights(model)
    return model.to(dtype)


def run(kind, dtype, sizes, grad_size, stored=None):
    """The fixture computation in dtype: ({name: array}, {param: flat grad})."""
    return run_model(kind, build(kind, dtype, stored).train(), dtype, sizes, grad_size)


def add_model(safe, kind, sizes, grad_size, stored=None):
    double, double_grads = run(kind, torch.float64, sizes, grad_size, stored)
    single, single_grads = run(kind, torch.float32, sizes, grad_size, stored)
    return add_outputs(safe, double, single, f"{kind}/{grad_size}", double_grads, single_grads)


def check_geometry():
    """The reduced models have the packed SwiGLU of the width DINOv2's formula gives."""
    timm_fc1 = timm_giant(0).blocks[0].mlp.fc1.weight.shape
    hf_in = hf_giant().encoder.layer[0].mlp.weights_in.weight.shape
    if tuple(timm_fc1) != (2 * HIDDEN, DIM) or tuple(hf_in) != (2 * HIDDEN, DIM):
        raise ValueError(f"SwiGLU widths: timm fc1 {tuple(timm_fc1)}, transformers weights_in "
                         f"{tuple(hf_in)}, DINOv2 ({2 * HIDDEN}, {DIM})")


def main():
    args, safe = start_fixture(__doc__.splitlines()[0])
    check_geometry()
    summary = {}
    summary.update(add_model(safe, "timm_g", (56, 42), 56))
    hf_weights = fixture_weights(hf_giant(), np.float16)
    for name, value in hf_weights.items():
        safe.add(f"hf_g.{name}", value)
    summary.update(add_model(safe, "hf_g", (56, 70), None, hf_weights))
    dinov2 = dinov2_weights()
    for name, value in dinov2.items():
        safe.add(f"dinov2_g_reg4.{name}", value)
    summary.update(add_model(safe, "dinov2_g_reg4", (56, 42), None, dinov2))
    script = "tools/make_vit_giant_fixtures.py"
    command = f"PYTHONPATH=/work/pyref /usr/bin/python3 {script} --out tests/fixtures"
    write_fixture(safe, os.path.join(args.out, "vit_giant.safetensors"), script, command, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
