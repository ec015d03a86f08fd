#!/usr/bin/env python3
"""The checks of the GPU script (tools/first_light.sh) that read files or ask
PyTorch: each prints one line "STATUS key=value ..." (STATUS pass, fail,
skip or info) and exits 0, so the script records the line whatever it says.
Standard library only, except torch-load and torch-info, which need torch
(torch-load also torchvision and safetensors; on the GPU node: its PyTorch)
and say skip without them.

    first_light_check.py losses METRICS_JSONL
        every train_loss finite, the mean of the last fifth below the first
        fifth's, the loss scales logged, images/s of the steps after the
        first fifth from profiling/batch_time and data_time
    first_light_check.py npy A.npy B.npy BOUND
        the relative L2 distance of two float32 embedding files <= BOUND
    first_light_check.py torch-load SAFETENSORS MODEL
        the export loads into torchvision's MODEL (only fc.* missing) and
        runs a forward pass
    first_light_check.py torch-info
        PyTorch's version, its CUDA, cuDNN and NCCL, the GPU it sees
    first_light_check.py wheel-train PROGRAM PACKAGE_ROOT IMAGES OUT ACCELERATOR
        the wheel's Python API training 2 steps through its launcher (below)
    first_light_check.py wheel-launcher PROGRAM PACKAGE_ROOT
        the pip wheel's search for NVIDIA's pip libraries (lightly_train_c
        under PACKAGE_ROOT) finds them in this Python and PROGRAM loads them
"""
import json
import math
import os
import struct
import subprocess
import sys
from array import array


def fields(pairs):
    return " ".join(f"{key}={value}" for key, value in pairs.items())


def losses(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    steps = [row for row in rows if "train_loss" in row]
    if not steps:
        return "fail", {"reason": "no_train_loss_in_metrics"}
    values = [row["train_loss"] for row in steps]
    finite = all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)
    fifth = max(1, len(values) // 5)
    first, last = sum(values[:fifth]) / fifth, sum(values[-fifth:]) / fifth
    scales = [row["loss_scale"] for row in steps if "loss_scale" in row]
    timed = [row for row in steps[fifth:] if "profiling/batch_time" in row]
    seconds = sum(row["profiling/batch_time"] + row.get("profiling/data_time", 0) for row in timed)
    wait = sum(row.get("profiling/data_time", 0) for row in timed)
    result = {"steps": len(values), "first_loss": f"{values[0]:.5g}", "last_loss": f"{values[-1]:.5g}",
              "first_fifth_mean": f"{first:.5g}", "last_fifth_mean": f"{last:.5g}",
              "finite": int(finite), "falling": int(finite and last < first),
              "loss_scales": ",".join(f"{s:g}" for s in sorted(set(scales))) or "none",
              "last_loss_scale": f"{scales[-1]:g}" if scales else "none"}
    per_step = [row.get("images_per_second") for row in timed if row.get("images_per_second")]
    result["images_per_s"] = f"{sum(per_step) / len(per_step):.1f}" if per_step else "n/a"
    result["data_wait_pct"] = f"{100 * wait / seconds:.1f}" if seconds > 0 else "n/a"
    return ("pass" if finite and last < first else "fail"), result


def read_npy(path):
    with open(path, "rb") as file:
        data = file.read()
    if data[:6] != b"\x93NUMPY":
        raise ValueError(f"{path}: not a .npy file")
    major = data[6]
    header_size = struct.unpack("<H" if major == 1 else "<I", data[8:10] if major == 1 else data[8:12])[0]
    start = (10 if major == 1 else 12) + header_size
    header = data[start - header_size:start].decode("latin1")
    if "'<f4'" not in header:
        raise ValueError(f"{path}: not float32 ({header.strip()})")
    values = array("f")
    values.frombytes(data[start:])
    return values


def npy(path_a, path_b, bound):
    a, b = read_npy(path_a), read_npy(path_b)
    if len(a) != len(b) or not a:
        return "fail", {"reason": "sizes_differ", "a": len(a), "b": len(b)}
    difference = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))
    norm = math.sqrt(sum(y * y for y in b))
    relative = difference / norm if norm > 0 else float("inf")
    worst = max(abs(x - y) for x, y in zip(a, b))
    result = {"values": len(a), "relative_l2": f"{relative:.3g}", "max_abs": f"{worst:.3g}",
              "bound": bound}
    return ("pass" if relative <= float(bound) else "fail"), result


def torch_load(path, model):
    try:
        import torch
        import torchvision
        from safetensors.torch import load_file
    except ImportError as error:
        return "skip", {"reason": f"not_importable:{error.name}"}
    state = load_file(path)
    network = getattr(torchvision.models, model)()
    missing, unexpected = network.load_state_dict(state, strict=False)
    network.eval()
    with torch.no_grad():
        out = network(torch.randn(2, 3, 224, 224))
    ok = set(missing) <= {"fc.weight", "fc.bias"} and not unexpected and bool(torch.isfinite(out).all())
    return ("pass" if ok else "fail"), {"tensors": len(state), "missing": ",".join(missing) or "none",
                                        "unexpected": ",".join(unexpected) or "none",
                                        "torch": torch.__version__}


def torch_info():
    try:
        import torch
        import torch.backends.cudnn
    except ImportError as error:
        return "skip", {"reason": f"not_importable:{error.name}"}
    result = {"torch": torch.__version__, "cuda": torch.version.cuda,
              "cudnn": torch.backends.cudnn.version(), "gpu": "none"}
    if torch.cuda.is_available():
        result["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        result["gpu"] = torch.cuda.get_device_name(0).replace(" ", "_")
    return "info", result


def wheel_launcher(program, package_root):
    """The pip wheel's launcher (python/lightly_train_c, carried beside this
    script) in this Python: it finds NVIDIA's pip packages on sys.path, and the
    program started in its environment (no LD_LIBRARY_PATH of ours) loads
    cuDNN and cuBLAS from them, as `pip install lightly-train-c[cuda]` would."""
    sys.path.insert(0, package_root)
    from lightly_train_c._program import nvidia_library_dirs, program_environment
    dirs = nvidia_library_dirs()
    if not dirs:
        return "skip", {"reason": "no_NVIDIA_pip_packages_on_sys.path"}
    saved = os.environ.pop("LD_LIBRARY_PATH", None)
    try:
        environment = program_environment()
    finally:
        if saved is not None:
            os.environ["LD_LIBRARY_PATH"] = saved
    run = subprocess.run([program, "--version"], env=environment, capture_output=True,
                         text=True, timeout=60)
    lines = (run.stdout + run.stderr).splitlines()
    loaded = [line.split(": ", 1)[1] for line in lines if line.startswith("GPU libraries: ")]
    unusable = [line for line in lines if line.startswith("GPU libraries unusable: ")]
    from_packages = bool(loaded) and any(d + "/libcudnn" in loaded[0] for d in dirs)
    status = "pass" if run.returncode == 0 and from_packages and not unusable else "fail"
    return status, {"folders": len(dirs), "exit": run.returncode,
                    "loaded": (loaded[0] if loaded else "none").replace(" ", "_")[:300],
                    "unusable": (unusable[0] if unusable else "none").replace(" ", "_")[:200]}


def wheel_train(program, package_root, images, out, accelerator):
    """The wheel's Python API on this node: a copy of the package (carried
    beside this script) with PROGRAM as its bin/lightly-train-c, imported
    with no LD_LIBRARY_PATH of ours, trains 2 steps of SimCLR ResNet-18 with
    `lightly_train_c.train(...)` (a LightlyTrain-style call) on ACCELERATOR;
    on the GPU, train.log must name cuDNN from NVIDIA's pip packages."""
    import shutil
    import tempfile
    staging = tempfile.mkdtemp(prefix="wheel-train-")
    package = os.path.join(staging, "lightly_train_c")
    shutil.copytree(os.path.join(package_root, "lightly_train_c"), package)
    os.makedirs(os.path.join(package, "bin"))
    os.symlink(os.path.abspath(program), os.path.join(package, "bin", "lightly-train-c"))
    sys.path.insert(0, staging)
    import lightly_train_c
    dirs = lightly_train_c._program.nvidia_library_dirs()
    if accelerator == "gpu" and not dirs:
        return "skip", {"reason": "no_NVIDIA_pip_packages_on_sys.path"}
    os.environ.pop("LD_LIBRARY_PATH", None)
    lightly_train_c.train(out=out, data=images, model="resnet18", method="simclr", epochs=1,
                          batch_size=32, accelerator=accelerator, overwrite=True,
                          image_size=64, max_steps=2)
    log = open(os.path.join(out, "train.log")).read().splitlines()
    chosen = [line.split("accelerator: ", 1)[1] for line in log if "accelerator: " in line]
    libraries = [line.split("GPU libraries: ", 1)[1] for line in log if "GPU libraries: " in line]
    backend = "cuda" if accelerator == "gpu" else "cpu"
    from_packages = bool(libraries) and any(d + "/libcudnn" in libraries[0] for d in dirs)
    ok = bool(chosen) and chosen[0].startswith(backend) and (accelerator != "gpu" or from_packages)
    return ("pass" if ok else "fail"), {
        "accelerator": (chosen[0] if chosen else "none").replace(" ", "_")[:120],
        "cudnn_from_pip": int(from_packages)}


def main():
    command, arguments = sys.argv[1], sys.argv[2:]
    checks = {"losses": losses, "npy": npy, "torch-load": torch_load, "torch-info": torch_info,
              "wheel-launcher": wheel_launcher, "wheel-train": wheel_train}
    try:
        status, result = checks[command](*arguments)
    except Exception as error:  # a broken file is a failed check, reported as such
        status, result = "fail", {"error": f"{type(error).__name__}:{error}".replace(" ", "_")}
    print(status, fields(result))


if __name__ == "__main__":
    main()
