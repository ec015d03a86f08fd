#!/usr/bin/env python3
"""Writes tests/fixtures/adapt_input_conv.safetensors, the fixture of
tests/test_input_adapt.c: a random 3-channel first-layer weight (OIHW,
non-square kernel) and timm's adapt_input_conv of it for several channel
counts, the rule our initial weights follow when --num-channels is not 3
(nn/input_adapt.h):

    python3 tools/make_adapt_conv_fixture.py --out tests/fixtures/adapt_input_conv.safetensors

Tensors: "weight" (5, 3, 3, 2) F32 and "adapted_N" (5, N, 3, 2) for N in
CHANNELS. Needs torch, timm and safetensors; the test needs none of them.
"""
import argparse

import torch
from safetensors.torch import save_file
from timm.models._manipulate import adapt_input_conv

CHANNELS = (1, 2, 4, 5, 8)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(21)
    weight = torch.randn(5, 3, 3, 2, generator=generator, dtype=torch.float32)
    tensors = {"weight": weight}
    for channels in CHANNELS:
        tensors[f"adapted_{channels}"] = adapt_input_conv(channels, weight.clone()).contiguous()
    save_file(tensors, args.out, metadata={"generator": "tools/make_adapt_conv_fixture.py"})


if __name__ == "__main__":
    main()
