#!/usr/bin/env python3
"""Writes tests/fixtures/dinov3.safetensors: transformers DINOv3ViTModel and
timm (Eva, vit_*_dinov3) references for the DINOv3 ViTs (src/nn/vit.h,
config.rope), checked by tests/test_vit_dinov3.c.

    PYTHONPATH=/work/pyref3 python3 tools/make_dinov3_fixtures.py --out tests/fixtures

DINOv3 needs transformers >= 4.56 and timm >= 1.0.20, which need a newer
torch than Debian's 1.13; CPU is enough:

    python3 -m pip install --target /work/pyref3 "torch>=2.4" "transformers>=4.56" \\
        "timm>=1.0.20" safetensors numpy
    (measured with torch 2.15.0, transformers 5.23.0, timm 1.0.31, numpy 2.4.6;
    PyPI's torch wheel; https://download.pytorch.org/whl/cpu was not reachable)

The safetensors writer, "fixture init" and gradient sampling come from
tools/make_fixtures.py, the weight-init rules from tools/make_vit_fixtures.py
(tests/fixtures/README.md).

Two tiny models M, batch 2, patch 8, width 32, 2 blocks, 2 heads (head width
16: 4 RoPE periods), 4 registers, LayerScale, LayerNorm eps 1e-5, RoPE base
100, a query and a value bias (no key bias):
  gelu:   GELU MLP 64
  swiglu: SwiGLU MLP, hidden 48 (gate and value 48 each)
Weights are fixture init of our (timm) parameter names under "dinov3_M."
(the rules of make_vit_fixtures.py), rounded to float16 so that the F16
files below hold them exactly; every reference is loaded from them.

Per model M, size S in (32, 56) for gelu (grid 4, the native one of
image_size 32, and 7), (32, 48) for swiglu, reference R:
    M/R/S/tokens     (2, 5 + P, 32) F64  normalised tokens: class, registers, patches
    f32err/M/R/S/tokens () F64          max |float32 run - float64 run|
with R =
  hf:     transformers DINOv3ViTModel (eager attention, eval mode: no RoPE
          rescale), its periods from rope_theta;
  timm:   timm.create_model("vit_small_patch16_dinov3_qkvb" (gelu) /
          "vit_small_plus_patch16_dinov3_qkvb" (swiglu), embed_dim=32, depth=2,
          num_heads=2, patch_size=8, mlp_ratio=2 / 1.5, num_classes=0),
          forward_features;
  dinov3: transformers with inv_freq = 1 / the DINOv3 file's periods
          (base^(4j/Dh) rounded to bfloat16, as DINOv3's released checkpoints
          store them): what DINOv3's own model computes from that file.
Gradients of loss = sum(tokens * w), w fixture init "loss/dinov3_M/S" (0, 1),
from the hf reference at S = 56 (gelu) and 48 (swiglu), under our parameter
names (torch shapes; attn.qkv.* stacks q, k, v with a zero key-bias
gradient, a SwiGLU mlp.fc1 stacks gate over value):
    M/hf/S/loss, M/hf/S/grad/P, M/hf/S/grad_sample/P, grad_sum/P, grad_sumsq/P,
    and their f32err/... as tools/make_vit_fixtures.py defines them.
Inputs: fixture init "input/dinov3_M/S" (0, 1), (2, 3, S, S) NCHW.
Weight files, all F16 (periods F32):
    M/dinov3.<DINOv3 name>  facebookresearch/dinov3 naming: storage_tokens,
                            mask_token, rope_embed.periods, qkv.bias with a
                            non-zero key part that qkv.bias_mask (1, 0, 1)
                            removes, mlp.fc1/fc2 or mlp.w1/w2/w3
    M/hf.<name>             transformers' naming: gelu as 4.56 saves it
                            (layer.N.), swiglu as 5.x does (model.layer.N.)
    M/timm.<name>           timm's Eva naming (q_bias, v_bias, gamma_1, fc1_g ...)
    check/u                 (16,) F32
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import DTYPE_NAMES, fixture_value  # noqa: E402
from make_vit_fixtures import (add_outputs, init_rule, start_fixture,  # noqa: E402
                               write_fixture)

import timm  # noqa: E402
import transformers  # noqa: E402

BATCH = 2
DIM, DEPTH, HEADS, PATCH, REGISTERS = 32, 2, 2, 8, 4
HEAD_DIM = DIM // HEADS
ROPE_BASE = 100.0
DTYPE_NAMES[np.dtype(np.float16)] = "F16"

MODELS = {
    # name: (swiglu, hidden, sizes, gradient size)
    "gelu": (False, 64, (32, 56), 56),
    "swiglu": (True, 48, (32, 48), 48),
}

# --------------------------------------------------------------------------
# weights in our naming


def our_shapes(swiglu, hidden):
    fc1_rows = 2 * hidden if swiglu else hidden
    shapes = {"cls_token": (1, 1, DIM), "reg_token": (1, REGISTERS, DIM),
              "patch_embed.proj.weight": (DIM, 3, PATCH, PATCH), "patch_embed.proj.bias": (DIM,)}
    for b in range(DEPTH):
        p = f"blocks.{b}."
        shapes.update({
            p + "norm1.weight": (DIM,), p + "norm1.bias": (DIM,),
            p + "attn.qkv.weight": (3 * DIM, DIM), p + "attn.qkv.bias": (3 * DIM,),
            p + "attn.proj.weight": (DIM, DIM), p + "attn.proj.bias": (DIM,),
            p + "ls1.gamma": (DIM,), p + "norm2.weight": (DIM,), p + "norm2.bias": (DIM,),
            p + "mlp.fc1.weight": (fc1_rows, DIM), p + "mlp.fc1.bias": (fc1_rows,),
            p + "mlp.fc2.weight": (DIM, hidden), p + "mlp.fc2.bias": (DIM,),
            p + "ls2.gamma": (DIM,)})
    shapes.update({"norm.weight": (DIM,), "norm.bias": (DIM,)})
    return shapes


def our_weights(model, swiglu, hidden):
    """{our name: float32 array}: fixture init, float16-exact, key bias 0."""
    weights = {}
    for name, shape in our_shapes(swiglu, hidden).items():
        value = fixture_value(f"dinov3_{model}.{name}", shape, *init_rule(name, shape))
        value = value.astype(np.float16).astype(np.float32)
        if name.endswith("attn.qkv.bias"):
            value[DIM:2 * DIM] = 0.0  # DINOv3's mask_k_bias: no key bias
        weights[name] = value
    return weights


def periods(dtype=np.float64):
    j = np.arange(HEAD_DIM // 4, dtype=np.float64)
    return (ROPE_BASE ** (4.0 * j / HEAD_DIM)).astype(dtype)


def bf16_round(values):
    """float32 values rounded to bfloat16 (round to nearest even), as float32."""
    return torch.from_numpy(values.astype(np.float32)).to(torch.bfloat16).float().numpy()


# --------------------------------------------------------------------------
# the three namings


def split_rows(value, parts):
    return np.split(value, parts, axis=0)


def hf_names(swiglu, blocks):
    """[(our name, [transformers names of its row blocks])]: stacked along
    dim 0 into ours (None: a part transformers does not have, the key bias)."""
    pairs = [("cls_token", ["embeddings.cls_token"]),
             ("reg_token", ["embeddings.register_tokens"]),
             ("patch_embed.proj.weight", ["embeddings.patch_embeddings.weight"]),
             ("patch_embed.proj.bias", ["embeddings.patch_embeddings.bias"]),
             ("norm.weight", ["norm.weight"]), ("norm.bias", ["norm.bias"])]
    for b in range(DEPTH):
        ours, theirs = f"blocks.{b}.", f"{blocks}{b}."
        a = theirs + "attention."
        pairs += [(ours + "attn.qkv.weight", [a + "q_proj.weight", a + "k_proj.weight",
                                              a + "v_proj.weight"]),
                  (ours + "attn.qkv.bias", [a + "q_proj.bias", None, a + "v_proj.bias"]),
                  (ours + "attn.proj.weight", [a + "o_proj.weight"]),
                  (ours + "attn.proj.bias", [a + "o_proj.bias"]),
                  (ours + "ls1.gamma", [theirs + "layer_scale1.lambda1"]),
                  (ours + "ls2.gamma", [theirs + "layer_scale2.lambda1"]),
                  (ours + "mlp.fc2.weight", [theirs + "mlp.down_proj.weight"]),
                  (ours + "mlp.fc2.bias", [theirs + "mlp.down_proj.bias"])]
        for norm in ("norm1", "norm2"):
            pairs += [(ours + f"{norm}.{leaf}", [theirs + f"{norm}.{leaf}"])
                      for leaf in ("weight", "bias")]
        for leaf in ("weight", "bias"):
            fc1 = (["mlp.gate_proj.", "mlp.up_proj."] if swiglu else ["mlp.up_proj."])
            pairs.append((ours + "mlp.fc1." + leaf, [theirs + name + leaf for name in fc1]))
    return pairs


def to_hf(weights, swiglu, blocks):
    out = {"embeddings.mask_token": np.zeros((1, 1, DIM), np.float32)}
    for ours, theirs in hf_names(swiglu, blocks):
        for name, part in zip(theirs, split_rows(weights[ours], len(theirs))):
            if name is not None:
                out[name] = part
    return out


def to_timm(weights, swiglu):
    out = {}
    for name, value in weights.items():
        if name.endswith("attn.qkv.bias"):
            q, _, v = split_rows(value, 3)
            out[name.replace("qkv.bias", "q_bias")] = q
            out[name.replace("qkv.bias", "v_bias")] = v
        elif swiglu and ".mlp.fc1." in name:
            gate, x = split_rows(value, 2)
            out[name.replace("mlp.fc1.", "mlp.fc1_g.")] = gate
            out[name.replace("mlp.fc1.", "mlp.fc1_x.")] = x
        else:
            out[name.replace("ls1.gamma", "gamma_1").replace("ls2.gamma", "gamma_2")] = value
    return out


def to_dinov3(model, weights, swiglu, file_periods):
    out = {"mask_token": np.zeros((1, DIM), np.float32),
           "rope_embed.periods": file_periods.astype(np.float32)}
    for name, value in weights.items():
        if name == "reg_token":
            out["storage_tokens"] = value
        elif name.endswith("attn.qkv.bias"):
            garbage = fixture_value(f"dinov3_{model}.{name}.key", (DIM,), 0.0, 0.5)
            value = value.copy()
            value[DIM:2 * DIM] = garbage.astype(np.float16).astype(np.float32)
            out[name] = value  # the mask below removes the key part
            mask = np.ones(3 * DIM, np.float32)
            mask[DIM:2 * DIM] = 0.0
            out[name + "_mask"] = mask
        elif swiglu and ".mlp.fc1." in name:
            gate, x = split_rows(value, 2)
            out[name.replace("mlp.fc1.", "mlp.w1.")] = gate
            out[name.replace("mlp.fc1.", "mlp.w2.")] = x
        elif swiglu and ".mlp.fc2." in name:
            out[name.replace("mlp.fc2.", "mlp.w3.")] = value
        else:
            out[name] = value
    return out


# --------------------------------------------------------------------------
# references


def hf_model(swiglu, hidden):
    config = transformers.DINOv3ViTConfig(
        hidden_size=DIM, intermediate_size=hidden, num_hidden_layers=DEPTH,
        num_attention_heads=HEADS, num_register_tokens=REGISTERS, patch_size=PATCH,
        image_size=32, layerscale_value=1.0, layer_norm_eps=1e-5, rope_theta=ROPE_BASE,
        query_bias=True, key_bias=False, value_bias=True, use_gated_mlp=swiglu,
        hidden_act="silu" if swiglu else "gelu", attn_implementation="eager")
    return transformers.DINOv3ViTModel(config)


def timm_model(swiglu):
    name = "vit_small_plus_patch16_dinov3_qkvb" if swiglu else "vit_small_patch16_dinov3_qkvb"
    return timm.create_model(name, pretrained=False, num_classes=0, embed_dim=DIM, depth=DEPTH,
                             num_heads=HEADS, patch_size=PATCH, img_size=32,
                             mlp_ratio=1.5 if swiglu else 2.0)


def load(model, state):
    tensors = {k: torch.from_numpy(np.asarray(v, np.float32)) for k, v in state.items()}
    model.load_state_dict(tensors, strict=True)


def build(reference, model_name, dtype):
    swiglu, hidden = MODELS[model_name][:2]
    weights = our_weights(model_name, swiglu, hidden)
    if reference == "timm":
        model = timm_model(swiglu)
        load(model, to_timm(weights, swiglu))
    else:
        model = hf_model(swiglu, hidden)
        load(model, to_hf(weights, swiglu, "model.layer."))
    model = model.to(dtype).eval()
    if reference == "dinov3":  # the file's periods (bfloat16 values) instead of rope_theta's
        file_periods = torch.from_numpy(bf16_round(periods()).astype(np.float64))
        model.rope_embeddings.inv_freq = (1.0 / file_periods).to(dtype)
    return model


def tokens_of(reference, model, image):
    if reference == "timm":
        return model.forward_features(image)
    return model(pixel_values=image).last_hidden_state


def hf_gradients_as_ours(model, swiglu):
    """{our name: flat float64 gradient} from a transformers model's grads
    (the key bias part, which transformers does not have: 0)."""
    grads = {k: p.grad.detach().numpy().astype(np.float64) for k, p in model.named_parameters()
             if p.grad is not None}  # the mask token has none
    out = {}
    for ours, theirs in hf_names(swiglu, "model.layer."):
        parts = [grads[name] if name is not None else np.zeros(DIM) for name in theirs]
        out[ours] = np.concatenate(parts).ravel()
    return out


def run(reference, model_name, dtype):
    """The fixture computation in dtype: ({name: array}, {our param: flat grad})."""
    swiglu, _, sizes, grad_size = MODELS[model_name]
    model = build(reference, model_name, dtype)
    results, grads = {}, {}
    for size in sizes:
        image = torch.from_numpy(fixture_value(f"input/dinov3_{model_name}/{size}",
                                               (BATCH, 3, size, size), 0.0, 1.0)).to(dtype)
        model.zero_grad()
        tokens = tokens_of(reference, model, image)
        results[f"{model_name}/{reference}/{size}/tokens"] = tokens.detach().numpy()
        if reference != "hf" or size != grad_size:
            continue
        weights = torch.from_numpy(fixture_value(f"loss/dinov3_{model_name}/{size}",
                                                 tuple(tokens.shape), 0.0, 1.0)).to(dtype)
        loss = (tokens * weights).sum()
        loss.backward()
        results[f"{model_name}/hf/{size}/loss"] = loss.detach().numpy()
        grads = hf_gradients_as_ours(model, swiglu)
    return results, grads


def add_reference(safe, reference, model_name):
    double, double_grads = run(reference, model_name, torch.float64)
    single, single_grads = run(reference, model_name, torch.float32)
    prefix = f"{model_name}/hf/{MODELS[model_name][3]}"
    return add_outputs(safe, double, single, prefix, double_grads, single_grads)


def add_weight_files(safe, model_name):
    swiglu, hidden = MODELS[model_name][:2]
    weights = our_weights(model_name, swiglu, hidden)
    hf_blocks = "model.layer." if swiglu else "layer."
    files = {"hf": to_hf(weights, swiglu, hf_blocks), "timm": to_timm(weights, swiglu),
             "dinov3": to_dinov3(model_name, weights, swiglu, bf16_round(periods()))}
    for naming, state in files.items():
        for name, value in state.items():
            stored = value if name.endswith("periods") else value.astype(np.float16)
            safe.add(f"{model_name}/{naming}.{name}", stored)


def main():
    args, safe = start_fixture(__doc__.splitlines()[0])
    summary = {}
    for model_name in MODELS:
        for reference in ("hf", "timm", "dinov3"):
            summary.update(add_reference(safe, reference, model_name))
        add_weight_files(safe, model_name)
    write_fixture(safe, os.path.join(args.out, "dinov3.safetensors"),
                  "tools/make_dinov3_fixtures.py",
                  "PYTHONPATH=/work/pyref3 python3 tools/make_dinov3_fixtures.py "
                  "--out tests/fixtures", summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
