#!/usr/bin/python3
"""Writes the PyTorch .pt fixtures of tests/fixtures/pt/, each next to a
safetensors twin holding what the C reader must find in it (read by
tests/test_pt_reader.c; src/weights/pt_reader.h is the reader).

    python3 tools/make_pt_fixtures.py --out tests/fixtures/pt

Needs torch, torchvision and safetensors. Weights are random (seeded); the
files are written by torch.save itself, so they hold exactly the pickle
opcodes, globals, storage layout and zip entries PyTorch produces.

mixed.pt (zip), mixed_legacy.pt (_use_new_zipfile_serialization=False), and
their twin mixed.safetensors (every tensor made contiguous): a plain dict of
    conv.weight  F32 (4, 3, 3, 3)     half  F16 (5, 7)     bf16 BF16 (3, 4)
    double F64 (6,)                   count I64 ()         int32 I32 (2, 3)
    mask BOOL (4,)                    bytes U8 (5,)        empty F32 (0, 3)
    transposed   F32 (5, 3), strides (1, 5)         (a transposed view)
    slice_a      F32 (6,),   offset 2  } two views of one storage
    slice_b      F32 (2, 5), offset 10 }
    expanded     F32 (3, 4), strides (1, 0)         (expand of a (3, 1))
    strided      F32 (4, 3), strides (6, 2)         (every second column)
    param        F32 (2, 2), an nn.Parameter        (torch._utils._rebuild_parameter)
nested.pt (pickle protocol 4: STACK_GLOBAL, MEMOIZE, FRAME, SHORT_BINUNICODE):
    {"epoch": 3, "name": "run", "args": None, "lr": 0.5, "version": (1, 2),
     "model": <mixed's dict>, "optimizer": {"state": {0: {"step": tensor}},
     "param_groups": [{"lr": 0.1, "params": [0]}]}}
  a training checkpoint: no tensor at the top, the state dict under "model"
  (twin: mixed.safetensors).
resnet18_expanded.pt: torchvision's resnet18() state_dict (an OrderedDict
  with _metadata; its exact keys, shapes and order) in which every floating
  tensor of shape (C, ...) is a stride-0 expand of a random (C, 1, ...) base,
  so the file stays small (~60 kB instead of 45 MB); num_batches_tracked
  stays an int64 scalar. Twin resnet18_expanded_bases.safetensors: the bases
  with their (C, 1, ...) shapes (element [c, ...] of the tensor = base[c]).
vit_dinov2.pt, twin vit_dinov2.safetensors: a tiny ViT (width 32, depth 2,
  patch 4, 16 x 16 px, MLP 128) in the state dict layout of
  facebookresearch/dinov2's DinoVisionTransformer (cls_token, pos_embed with
  the class position, mask_token, blocks.N.ls1.gamma, ...), which
  LightlyTrain's dinov2_vit package writes as exported_last.pt, in float16
  as a half-precision export would be.
"""
import argparse
import collections
import os

import torch
import torchvision
from safetensors.torch import save_file


def contiguous(tensors):
    return {name: t.detach().clone().contiguous() for name, t in tensors.items()}


def mixed_tensors(generator):
    def randn(*shape):
        return torch.randn(*shape, generator=generator)

    shared = randn(20)
    tensors = {
        "conv.weight": randn(4, 3, 3, 3),
        "half": randn(5, 7).half(),
        "bf16": randn(3, 4).bfloat16(),
        "double": randn(6).double(),
        "count": torch.tensor(7, dtype=torch.int64),
        "int32": torch.randint(-1000, 1000, (2, 3), generator=generator, dtype=torch.int32),
        "mask": torch.tensor([True, False, False, True]),
        "bytes": torch.randint(0, 256, (5,), generator=generator, dtype=torch.uint8),
        "empty": torch.zeros(0, 3),
        "transposed": randn(3, 5).t(),
        "slice_a": shared[2:8],
        "slice_b": shared[10:20].view(2, 5),
        "expanded": randn(3, 1).expand(3, 4),
        "strided": randn(4, 6)[:, ::2],
        "param": torch.nn.Parameter(randn(2, 2)),
    }
    assert tensors["transposed"].stride() == (1, 5)
    assert tensors["slice_b"].storage_offset() == 10
    assert tensors["expanded"].stride() == (1, 0)
    assert tensors["strided"].stride() == (6, 2)
    return tensors


def resnet18_expanded(generator):
    state = torchvision.models.resnet18().state_dict()  # OrderedDict with _metadata
    bases = {}
    for name, tensor in state.items():
        if not tensor.is_floating_point():
            continue
        base_shape = (tensor.shape[0],) + (1,) * (tensor.dim() - 1)
        base = torch.randn(base_shape, generator=generator)
        bases[name] = base
        state[name] = base.expand(tensor.shape)
    return state, bases


def vit_dinov2(generator, width=32, depth=2, patch=4, size=16, mlp=128):
    def randn(*shape):
        return torch.randn(*shape, generator=generator) * 0.1

    tokens = (size // patch) ** 2
    state = collections.OrderedDict()
    state["cls_token"] = randn(1, 1, width)
    state["pos_embed"] = randn(1, 1 + tokens, width)
    state["mask_token"] = randn(1, width)
    state["patch_embed.proj.weight"] = randn(width, 3, patch, patch)
    state["patch_embed.proj.bias"] = randn(width)
    for b in range(depth):
        p = f"blocks.{b}."
        state[p + "norm1.weight"] = 1 + randn(width)
        state[p + "norm1.bias"] = randn(width)
        state[p + "attn.qkv.weight"] = randn(3 * width, width)
        state[p + "attn.qkv.bias"] = randn(3 * width)
        state[p + "attn.proj.weight"] = randn(width, width)
        state[p + "attn.proj.bias"] = randn(width)
        state[p + "ls1.gamma"] = randn(width)
        state[p + "norm2.weight"] = 1 + randn(width)
        state[p + "norm2.bias"] = randn(width)
        state[p + "mlp.fc1.weight"] = randn(mlp, width)
        state[p + "mlp.fc1.bias"] = randn(mlp)
        state[p + "mlp.fc2.weight"] = randn(width, mlp)
        state[p + "mlp.fc2.bias"] = randn(width)
        state[p + "ls2.gamma"] = randn(width)
    state["norm.weight"] = 1 + randn(width)
    state["norm.bias"] = randn(width)
    return collections.OrderedDict((k, v.half()) for k, v in state.items())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="tests/fixtures/pt")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    out = lambda name: os.path.join(args.out, name)
    generator = torch.Generator().manual_seed(20)
    metadata = {"torch": torch.__version__, "torchvision": torchvision.__version__,
                "generator": "tools/make_pt_fixtures.py"}

    mixed = mixed_tensors(generator)
    torch.save(mixed, out("mixed.pt"))
    torch.save(mixed, out("mixed_legacy.pt"), _use_new_zipfile_serialization=False)
    save_file(contiguous(mixed), out("mixed.safetensors"), metadata=metadata)

    checkpoint = {
        "epoch": 3, "name": "run", "args": None, "lr": 0.5, "version": (1, 2),
        "model": mixed,
        "optimizer": {"state": {0: {"step": torch.tensor(1.0)}},
                      "param_groups": [{"lr": 0.1, "params": [0]}]},
    }
    torch.save(checkpoint, out("nested.pt"), pickle_protocol=4)

    state, bases = resnet18_expanded(generator)
    torch.save(state, out("resnet18_expanded.pt"))
    save_file(contiguous(bases), out("resnet18_expanded_bases.safetensors"), metadata=metadata)

    vit = vit_dinov2(generator)
    torch.save(vit, out("vit_dinov2.pt"))
    save_file(contiguous(vit), out("vit_dinov2.safetensors"), metadata=metadata)
    for name in sorted(os.listdir(args.out)):
        print(f"{name}: {os.path.getsize(out(name))} bytes")


if __name__ == "__main__":
    main()
