#!/usr/bin/python3
"""Weight interop between our ResNets (tools/resnet_tool) and torchvision.

    make tools && /usr/bin/python3 tools/compare/torchvision_interop.py --build build

For resnet18 and resnet50:
1. our freshly initialised backbone (resnet_tool save) loads into
   torchvision.models.resnetXX() with load_state_dict(strict=False), and
   only fc.weight and fc.bias are reported missing (nothing unexpected);
2. a torchvision state dict (torchvision's own random init, running
   statistics moved off 0/1 so eval-mode BN is not the identity) saved as
   safetensors loads into our backbone, and our eval-mode features on a
   random input match torchvision's (fc = Identity); prints max abs and max
   relative difference (relative to max |features|) per backend.

Needs PyTorch, torchvision and numpy (Debian's python3-torch 1.13 and
python3-torchvision 0.14); not part of `make test`. Exits 1 when a check fails.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torchvision

# Features pass ~50 layers in float32 with other summation orders than
# PyTorch's: differences of ~1e-5 of max |features| are rounding; a wrong
# layout or a missed tensor gives O(1).
MAX_RELATIVE_DIFFERENCE = 1e-4
DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64}


def read_safetensors(path):
    with open(path, "rb") as file:
        data = file.read()
    header_size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + header_size])
    header.pop("__metadata__", None)
    body = data[8 + header_size:]
    tensors = {}
    for name, entry in header.items():
        start, end = entry["data_offsets"]
        array = np.frombuffer(body[start:end], dtype=np.dtype(DTYPES[entry["dtype"]]).newbyteorder("<"))
        tensors[name] = array.reshape(entry["shape"]).copy()
    return tensors


def write_safetensors(path, arrays):
    names = sorted(arrays, key=lambda n: -arrays[n].dtype.itemsize)  # 8-byte dtypes first
    header, offset = {}, 0
    for name in names:
        dtype = {np.dtype(v): k for k, v in DTYPES.items()}[arrays[name].dtype]
        header[name] = {"dtype": dtype, "shape": list(arrays[name].shape),
                        "data_offsets": [offset, offset + arrays[name].nbytes]}
        offset += arrays[name].nbytes
    header_bytes = json.dumps(header).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", len(header_bytes)) + header_bytes)
        for name in names:
            file.write(np.ascontiguousarray(arrays[name]).tobytes())


def run_tool(tool, *arguments):
    result = subprocess.run([tool, *arguments], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{tool} {' '.join(arguments)}: {result.stderr.strip()}")


def check_our_init_loads(tool, depth, folder):
    path = os.path.join(folder, f"ours{depth}.safetensors")
    run_tool(tool, "save", "--model", str(depth), "--seed", "0", "--out", path)
    state = {name: torch.from_numpy(array) for name, array in read_safetensors(path).items()}
    model = getattr(torchvision.models, f"resnet{depth}")()
    result = model.load_state_dict(state, strict=False)
    ok = sorted(result.missing_keys) == ["fc.bias", "fc.weight"] and not result.unexpected_keys
    std = model.layer4[-1].conv1.weight.std().item()
    print(f"resnet{depth}: our init ({len(state)} keys) into torchvision: missing {result.missing_keys}, "
          f"unexpected {result.unexpected_keys}; layer4[-1].conv1.weight std {std:.4g} -> "
          f"{'ok' if ok else 'FAILED'}")
    return ok


def check_torchvision_weights_run(tool, depth, folder, backends):
    torch.manual_seed(depth)
    model = getattr(torchvision.models, f"resnet{depth}")()
    with torch.no_grad():  # running statistics and BN affine away from the init values
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.2, 0.2)
    weights = os.path.join(folder, f"torchvision{depth}.safetensors")
    write_safetensors(weights, {name: tensor.numpy() for name, tensor in model.state_dict().items()})
    images = torch.randn(2, 3, 64, 64)
    inputs = os.path.join(folder, "input.safetensors")
    write_safetensors(inputs, {"input": images.numpy()})
    model.fc = torch.nn.Identity()
    model.eval()
    with torch.no_grad():
        expected = model(images).numpy()
    ok = True
    for backend in backends:
        out = os.path.join(folder, f"features{depth}-{backend}.safetensors")
        run_tool(tool, "features", "--model", str(depth), "--weights", weights, "--input", inputs,
                 "--out", out, "--backend", backend)
        ours = read_safetensors(out)["features"]
        difference = np.abs(ours.astype(np.float64) - expected)
        relative = difference.max() / np.abs(expected).max()
        passed = ours.shape == expected.shape and relative <= MAX_RELATIVE_DIFFERENCE
        ok &= passed
        print(f"resnet{depth}: torchvision weights, eval features {tuple(ours.shape)} on {backend}: "
              f"max abs diff {difference.max():.3g}, max |features| {np.abs(expected).max():.3g}, "
              f"max diff / max |features| {relative:.3g} -> {'ok' if passed else 'FAILED'}")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build", help="build folder holding tools/resnet_tool")
    parser.add_argument("--backends", default="ref,cpu", help="comma-separated backends to run")
    args = parser.parse_args()
    tool = os.path.join(args.build, "tools", "resnet_tool")
    torch.set_num_threads(1)
    ok = True
    with tempfile.TemporaryDirectory(prefix="ltc-interop-") as folder:
        for depth in (18, 50):
            ok &= check_our_init_loads(tool, depth, folder)
            ok &= check_torchvision_weights_run(tool, depth, folder, args.backends.split(","))
    print("all interop checks passed" if ok else "SOME INTEROP CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
