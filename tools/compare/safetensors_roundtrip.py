#!/usr/bin/env python3
"""Compatibility of our safetensors reader/writer with the reference package.

Writes files with safetensors.torch.save_file (every dtype we support, ranks
0-4, an empty tensor, escaped and non-ASCII names, metadata, and a torchvision
resnet18 state_dict), then with build/tools/safetensors_tool:
  - `list`: our reader must see the same names, dtypes, shapes and offsets;
  - `copy`: our writer, given the reference's order, must give identical bytes;
  - `copy ... reverse`: another order; safetensors.torch.load_file must read
    it back to equal tensors and metadata, and resnet18 must load it strictly.

Needs Debian's /usr/bin/python3 with python3-torch + python3-torchvision and
the `safetensors` package, e.g.
    pip install --target /tmp/st-pydeps safetensors
    PYTHONPATH=/tmp/st-pydeps /usr/bin/python3 tools/compare/safetensors_roundtrip.py \
        --tool build/tools/safetensors_tool
Not part of `make test` (PyPI package). Exit status 0 when everything matches.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import torch
import torchvision
from safetensors import safe_open
from safetensors.torch import load_file, save_file

DTYPE_NAMES = {
    torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}


def sample_tensors():
    generator = torch.Generator().manual_seed(0)
    tensors = {
        "conv1.weight": torch.randn(4, 3, 3, 3, generator=generator),
        "half": torch.randn(5, generator=generator).half(),
        "brain": torch.randn(2, 3, generator=generator).bfloat16(),
        "double": torch.randn(3, generator=generator).double(),
        "bn1.num_batches_tracked": torch.tensor(12345678901234, dtype=torch.int64),
        "ints": torch.randint(-2**31, 2**31 - 1, (2, 2), generator=generator, dtype=torch.int32),
        "shorts": torch.randint(-2**15, 2**15 - 1, (3,), generator=generator, dtype=torch.int16),
        "bytes": torch.randint(-128, 127, (1, 1, 4), generator=generator, dtype=torch.int8),
        "empty": torch.zeros(0, 3, dtype=torch.uint8),
        "flags": torch.tensor([True, False, True]),
        "scalar.f32": torch.tensor(2.5),
        'quote " backslash \\ unicode \u00e9\u20ac\U0001F600': torch.ones(2),
        "ctrl\u0001\u001fbyte": torch.zeros(1, dtype=torch.int8),
    }
    metadata = {"format": "pt", "note": 'line "quoted" \u00e9', "ctrl\u0002": "v\u0003"}
    return tensors, metadata


def run_tool(tool, *args):
    result = subprocess.run([tool, *args], capture_output=True)
    if result.returncode != 0:
        sys.exit(f"FAIL: {tool} {' '.join(args)}: {result.stderr.decode(errors='replace')}")
    return result.stdout.decode("utf-8")


def read_header(path):
    with open(path, "rb") as file:
        (length,) = struct.unpack("<Q", file.read(8))
        return json.loads(file.read(length))


def check_list(tool, path, failures):
    """Our reader's view against the JSON header as Python parses it."""
    header = read_header(path)
    expected = {name: info for name, info in header.items() if name != "__metadata__"}
    seen = {}
    for line in run_tool(tool, "list", path).rstrip("\n").split("\n"):
        kind, *fields = line.split("\t")
        if kind == "tensor":
            name, dtype, shape, offset, size = fields
            seen[name] = {"dtype": dtype,
                          "shape": [int(d) for d in shape.split(",")] if shape else [],
                          "data_offsets": [int(offset), int(offset) + int(size)]}
    # Names with control bytes cannot cross the line-based listing cleanly.
    for name, info in expected.items():
        if "\u0001" in name:
            continue
        if seen.get(name) != info:
            failures.append(f"list {path}: {name!r}: ours {seen.get(name)} reference {info}")


def check_equal(reference, loaded, label, failures):
    if set(reference) != set(loaded):
        failures.append(f"{label}: names differ: {set(reference) ^ set(loaded)}")
        return
    for name, tensor in reference.items():
        other = loaded[name]
        if other.dtype != tensor.dtype or other.shape != tensor.shape or not torch.equal(other, tensor):
            failures.append(f"{label}: tensor {name!r} differs")


def check_file(tool, workdir, stem, tensors, metadata, failures):
    reference = os.path.join(workdir, f"{stem}.reference.safetensors")
    save_file(tensors, reference, metadata=metadata)
    check_list(tool, reference, failures)

    same_order = os.path.join(workdir, f"{stem}.copy.safetensors")
    run_tool(tool, "copy", reference, same_order)
    with open(reference, "rb") as a, open(same_order, "rb") as b:
        if a.read() != b.read():
            failures.append(f"{stem}: our copy in the reference's order is not byte-identical")

    reversed_order = os.path.join(workdir, f"{stem}.reversed.safetensors")
    run_tool(tool, "copy", reference, reversed_order, "reverse")
    check_equal(tensors, load_file(reversed_order), f"{stem} reversed", failures)
    with safe_open(reversed_order, framework="pt") as file:
        if (file.metadata() or {}) != (metadata or {}):
            failures.append(f"{stem}: metadata {file.metadata()} != {metadata}")
    return reversed_order


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tool", default="build/tools/safetensors_tool")
    parser.add_argument("--workdir", help="keep the files here (default: a temporary folder)")
    args = parser.parse_args()
    failures = []
    with tempfile.TemporaryDirectory() as temporary:
        workdir = args.workdir or temporary
        os.makedirs(workdir, exist_ok=True)
        tensors, metadata = sample_tensors()
        check_file(args.tool, workdir, "dtypes", tensors, metadata, failures)
        print(f"dtypes: {len(tensors)} tensors, {len(DTYPE_NAMES)} dtypes, ranks 0-4, metadata")

        model = torchvision.models.resnet18()
        state = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
        copy = check_file(args.tool, workdir, "resnet18", state, {"format": "pt"}, failures)
        torchvision.models.resnet18().load_state_dict(load_file(copy), strict=True)
        print(f"resnet18: {len(state)} keys, loads strictly from our reversed copy")
    for failure in failures:
        print("FAIL:", failure)
    print("RESULT safetensors_roundtrip", "ok" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
