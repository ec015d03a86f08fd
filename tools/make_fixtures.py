#!/usr/bin/python3
"""Writes the PyTorch reference fixtures of tests/fixtures/ (contract:
tests/fixtures/README.md).

    /usr/bin/python3 tools/make_fixtures.py --out tests/fixtures

Needs torch, torchvision and numpy only (Debian: python3-torch 1.13,
python3-torchvision 0.14). Runs single-threaded with deterministic algorithms;
each ResNet computation runs twice, in float64 (the stored reference values;
its ReLU and max-pool decisions are recorded) and in float32 replaying those
decisions (only to measure f32err), then finds the fragile decisions and
what flipping each does to the gradients (tools/fixture_kinks.py).
Regenerating on the same machine gives the same bytes; on another CPU
PyTorch's kernels sum in another order, so f32err and the last bits of the
float64 values differ (measured: truths within 4e-11 relative).

Model weights, inputs and gradients are not random: both this script and the
C tests compute them with "fixture init" (u and value below, see the README),
so the files hold only outputs and samples.

Every file also holds
    check/u                  (16,) F32   u("check", i) for i = 0..15

resnet18.safetensors, resnet50.safetensors, wide_resnet50_2.safetensors (D =
512, 2048, 2048; the last written by torch 2.15 / torchvision 0.29, the
first two by torch 1.13): the fixture-init
float32 model, input and loss weights, converted exactly to float64, run in
float64 ("F64" below: results of that float64 run)
    input                    (2, 3, 64, 64) F32  fixture init "input" (0, 1)
    loss_weights             (2, D) F32          fixture init "loss_weights" (0, 1)
    init_sample/conv1.weight (16,) F32           first 16 init values of conv1.weight
    features                 (2, D) F64          train-mode pooled features (fc = Identity)
    loss                     () F64              sum(features * loss_weights)
    grad/P                   torch shape, F64    d loss / d P, parameters with <= 4096 elements
    grad_sample/P            (256,) F64          d loss / d P at flat index k * 2654435761 mod numel
    grad_sum/P, grad_sumsq/P () F64              sum and sum of squares of d loss / d P
                                                 (the last three for parameters with > 4096 elements)
    running_mean/B           (C,) F64            BatchNorm B after the train-mode forward
    running_var/B            (C,) F64
    num_batches_tracked/B    () I64              = 1
    features_eval            (2, D) F64          eval-mode features afterwards
    f32err/NAME              () F64              how far PyTorch's float32 result lies from
                                                 the float64 one (a tolerance scale), for
                                                 every NAME above except input,
                                                 loss_weights, init_sample/* and
                                                 num_batches_tracked/*: max |difference|
                                                 over the stored elements (grad_sample/P:
                                                 over the whole gradient of P); for the
                                                 sums, the bound on a sum of the
                                                 per-element errors (see f32_error)
    kinks                    (K, 4) I64          fragile branch decisions (fixture_kinks.py)
    kinkerr/NAME             () F64              for every gradient entry: how far all
                                                 their flips together can move it
  P: every parameter of the model without fc (torchvision names, e.g.
  layer1.0.conv1.weight); B: every BatchNorm module (e.g. layer2.0.downsample.1).

optim.safetensors (parameters w (16, 8), bn.weight (16,), bias (16,))
    init/P                   fixture init of P (the values before step 1)
    RUN/P/t                  P after step t = 1..6 for RUN in sgd, sgd_nesterov,
                             sgd_clip, sgd_accumulate, adamw, lars
    schedule/lr              (100,) F32  CosineWarmupScheduler factor, warmup 10, total 100
    schedule/wd              (100,) F32  cosine from 0.04 to 0.4 over 100 steps

optim.safetensors is all F32. In every file tensors with 8-byte dtypes come first
so their data is 8-byte aligned. The header's __metadata__ holds
the torch, torchvision and numpy versions and the generating command.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torchvision

import fixture_kinks

MASK32 = 0xFFFFFFFF
FULL_GRAD_MAX = 4096      # parameters up to this many elements: full gradient
GRAD_SAMPLES = 256
SAMPLE_STRIDE = 2654435761
BATCH = 2
IMAGE_SIZE = 64
OPTIM_STEPS = 6
OPTIM_WARMUP = 2

# --------------------------------------------------------------------------
# fixture init


def mix32(x):
    """mix32 on a uint64 array holding uint32 values (products masked, so
    numpy never overflows)."""
    x = x.astype(np.uint64)
    x ^= x >> np.uint64(16)
    x = (x * np.uint64(0x7FEB352D)) & np.uint64(MASK32)
    x ^= x >> np.uint64(15)
    x = (x * np.uint64(0x846CA68B)) & np.uint64(MASK32)
    x ^= x >> np.uint64(16)
    return x


def fnv1a32(name):
    h = 2166136261
    for byte in name.encode("utf-8"):
        h ^= byte
        h = (h * 16777619) & MASK32
    return h


def fixture_u(name, count):
    """u(name, i) for i = 0..count-1 as float32, in [-1, 1) and exact."""
    index = np.arange(count, dtype=np.uint64)
    bits = mix32(np.uint64(fnv1a32(name)) ^ mix32(index)) >> np.uint64(8)
    # bits < 2^24, so both the conversion and the scaling are exact in float32
    return bits.astype(np.float32) * np.float32(2.0 ** -23) - np.float32(1.0)


def fixture_value(name, shape, offset, scale):
    """float32(offset + float32(scale * u)) with offset, scale rounded to float32."""
    count = int(np.prod(shape, dtype=np.int64))
    u = fixture_u(name, count)
    scaled = np.float32(scale) * u               # float32 * float32 -> float32
    return (np.float32(offset) + scaled).astype(np.float32).reshape(shape)


def init_rule(model, key, shape):
    """(offset, scale) of a torchvision ResNet state_dict entry, or None for
    num_batches_tracked."""
    module_name, _, leaf = key.rpartition(".")
    module = model.get_submodule(module_name)
    if isinstance(module, torch.nn.Conv2d) and leaf == "weight":
        out_channels, _, kernel_h, kernel_w = shape
        return 0.0, math.sqrt(6.0 / (out_channels * kernel_h * kernel_w))
    if isinstance(module, torch.nn.Linear):
        return 0.0, math.sqrt(1.0 / module.in_features)
    if isinstance(module, torch.nn.BatchNorm2d):
        rules = {
            "weight": (1.0, 0.25),
            "bias": (0.0, 0.25),
            "running_mean": (0.0, 0.1),
            "running_var": (1.0, 0.25),
            "num_batches_tracked": None,
        }
        if leaf in rules:
            return rules[leaf]
    raise ValueError(f"no fixture-init rule for state_dict entry {key!r}")


def fixture_init_model(model):
    state = model.state_dict()
    new_state = {}
    for key, tensor in state.items():
        rule = init_rule(model, key, tuple(tensor.shape))
        if rule is None:
            new_state[key] = torch.zeros_like(tensor)
        else:
            value = fixture_value(key, tuple(tensor.shape), *rule)
            new_state[key] = torch.from_numpy(value)
    model.load_state_dict(new_state)

# --------------------------------------------------------------------------
# safetensors writer


DTYPE_NAMES = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(np.int64): "I64"}


class SafeFile:
    """Collects named numpy arrays and writes them as one safetensors file."""

    def __init__(self):
        self.arrays = {}

    def add(self, name, array):
        array = np.array(array, order="C")  # a copy; np.ascontiguousarray would turn () into (1,)
        if array.dtype not in DTYPE_NAMES:
            raise ValueError(f"{name}: unsupported dtype {array.dtype}")
        if name in self.arrays:
            raise ValueError(f"{name}: written twice")
        self.arrays[name] = array

    def add_torch(self, name, tensor):
        self.add(name, tensor.detach().cpu().numpy())

    def write(self, path, metadata):
        # 8-byte dtypes first (stable), so their data stays 8-byte aligned
        names = sorted(self.arrays, key=lambda n: -self.arrays[n].dtype.itemsize)
        header = {"__metadata__": metadata}
        offset = 0
        for name in names:
            array = self.arrays[name]
            size = array.nbytes
            header[name] = {"dtype": DTYPE_NAMES[array.dtype], "shape": list(array.shape),
                            "data_offsets": [offset, offset + size]}
            offset += size
        header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
        header_bytes += b" " * (-len(header_bytes) % 8)
        temporary = f"{path}.tmp.{os.getpid()}"
        with open(temporary, "wb") as file:
            file.write(struct.pack("<Q", len(header_bytes)))
            file.write(header_bytes)
            for name in names:
                file.write(self.arrays[name].astype(self.arrays[name].dtype.newbyteorder("<")).tobytes())
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
        return os.path.getsize(path)


def add_check(safe):
    safe.add("check/u", fixture_u("check", 16))


def write_fixture(safe, out, filename, command, reference):
    """Writes safe as out/filename with the metadata every fixture file
    carries (the generator is command's script); prints and returns the size."""
    metadata = {
        "generator": command.split()[1],
        "command": command,
        "reference": reference,
        "torch": torch.__version__,
        "numpy": np.__version__,
    }
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, filename)
    size = safe.write(path, metadata)
    print(f"{path}: {len(safe.arrays)} tensors, {size} bytes")
    return size

# --------------------------------------------------------------------------
# ResNet fixtures


def sample_indices(numel):
    """k * 2654435761 mod numel for k = 0..255, exact (64-bit) arithmetic."""
    return np.array([(k * SAMPLE_STRIDE) % numel for k in range(GRAD_SAMPLES)], dtype=np.int64)


def add_gradient_entries(safe, prefix, double_grads, single_grads, full_max):
    """Stores float64 gradients {parameter: flat array} under prefix/grad/P in
    full (at most full_max elements), else as prefix/grad_sample/P,
    prefix/grad_sum/P and prefix/grad_sumsq/P, each with the f32err of the
    float32 run (single_grads) as f32_error defines it. For the ViT and
    ConvNeXt fixtures (tools/make_vit_fixtures.py, make_convnext_fixtures.py)."""
    for name, exact in double_grads.items():
        error = single_grads[name] - exact
        if exact.size <= full_max:
            safe.add(f"{prefix}/grad/{name}", exact)
            safe.add(f"f32err/{prefix}/grad/{name}", np.float64(np.abs(error).max()))
            continue
        safe.add(f"{prefix}/grad_sample/{name}", exact.ravel()[sample_indices(exact.size)])
        safe.add(f"{prefix}/grad_sum/{name}", np.float64(exact.sum()))
        safe.add(f"{prefix}/grad_sumsq/{name}", np.float64((exact * exact).sum()))
        safe.add(f"f32err/{prefix}/grad_sample/{name}", np.float64(np.abs(error).max()))
        safe.add(f"f32err/{prefix}/grad_sum/{name}", np.float64(np.abs(error).sum()))
        safe.add(f"f32err/{prefix}/grad_sumsq/{name}",
                 np.float64((2.0 * np.abs(exact * error) + error * error).sum()))


def resnet_outputs(arch, dtype, input_array, loss_weights_array, decisions):
    """Runs the fixture computation in dtype (torch.float32 or float64), its
    ReLUs and max pool through `decisions` (fixture_kinks: the float64 run
    records them, the float32 run replays them). Returns ({stored name:
    numpy array} in header order, {parameter name: full gradient, flat},
    [(name, parameter)]); the graph is kept for fixture_kinks.kink_errors."""
    model = getattr(torchvision.models, arch)()
    fixture_init_model(model)
    model.fc = torch.nn.Identity()
    model = model.to(dtype)
    fixture_kinks.install(model, decisions)
    images = torch.from_numpy(input_array).to(dtype)
    loss_weights = torch.from_numpy(loss_weights_array).to(dtype)
    outputs = {"init_sample/conv1.weight": model.conv1.weight.detach().reshape(-1)[:16].numpy().copy()}
    full_grads = {}

    model.train()
    features = model(images)
    if features.shape != loss_weights.shape:
        raise RuntimeError(f"{arch}: features {tuple(features.shape)}, expected {tuple(loss_weights.shape)}")
    loss = (features * loss_weights).sum()
    loss.backward(retain_graph=True)
    outputs["features"] = features.detach().numpy()
    outputs["loss"] = loss.detach().numpy()

    for name, parameter in model.named_parameters():
        grad = parameter.grad.detach().numpy()
        full_grads[name] = grad.reshape(-1).copy()
        if grad.size <= FULL_GRAD_MAX:
            outputs[f"grad/{name}"] = grad
        else:
            flat = grad.reshape(-1)
            outputs[f"grad_sample/{name}"] = flat[sample_indices(flat.size)]
            as_double = flat.astype(np.float64)
            outputs[f"grad_sum/{name}"] = np.array(as_double.sum(), dtype=np.float64)
            outputs[f"grad_sumsq/{name}"] = np.array((as_double * as_double).sum(), dtype=np.float64)

    for name, module in model.named_modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            outputs[f"running_mean/{name}"] = module.running_mean.numpy()
            outputs[f"running_var/{name}"] = module.running_var.numpy()
            outputs[f"num_batches_tracked/{name}"] = module.num_batches_tracked.numpy()

    model.eval()
    with torch.no_grad():
        recording, decisions.mode = decisions.mode, "off"
        outputs["features_eval"] = model(images).numpy()
        decisions.mode = recording
    return ({name: np.array(value) for name, value in outputs.items()}, full_grads,
            list(model.named_parameters()))


def f32_error(name, single, double, single_grads, double_grads):
    """The f32err of stored entry `name`: how far a float32 result lands from
    the float64 one. Per element: max |float32 - float64|, over the whole
    gradient for a grad_sample/ entry (the error level of the tensor, not
    just of the 256 stored values), over the stored elements otherwise. For
    the sums over a gradient, the bound on the sum of the per-element errors
    e_i whatever their signs: sum |e_i| for grad_sum, sum (2 |g_i e_i| +
    e_i^2) for grad_sumsq (g: the float64 gradient). Not the standard
    deviation of a sum of independent errors: the errors of one gradient
    share their causes (a BatchNorm's float32 1/std scales a whole channel,
    measured up to 5e-5 relative on resnet50, so PyTorch's own sum of
    squares lands 60-100 such deviations off)."""
    kind, _, parameter = name.partition("/")
    if kind in ("grad_sample", "grad_sum", "grad_sumsq"):
        exact = double_grads[parameter]
        error = single_grads[parameter].astype(np.float64) - exact
        if kind == "grad_sample":
            return float(np.abs(error).max())
        if kind == "grad_sum":
            return float(np.abs(error).sum())
        return float((2.0 * np.abs(exact * error) + error * error).sum())
    return float(np.abs(single[name].astype(np.float64) - double[name]).max())


def make_resnet(arch, feature_dim):
    safe = SafeFile()
    add_check(safe)
    input_array = fixture_value("input", (BATCH, 3, IMAGE_SIZE, IMAGE_SIZE), 0.0, 1.0)
    loss_weights_array = fixture_value("loss_weights", (BATCH, feature_dim), 0.0, 1.0)
    safe.add("input", input_array)
    safe.add("loss_weights", loss_weights_array)

    # The reference values are the float64 run (the truth a float32
    # implementation approximates); the float32 run only measures f32err.
    recorded = fixture_kinks.Decisions("record")
    double, double_grads, parameters = resnet_outputs(arch, torch.float64, input_array,
                                                      loss_weights_array, recorded)
    replayed = fixture_kinks.Decisions("replay", recorded)
    single, single_grads, _ = resnet_outputs(arch, torch.float32, input_array,
                                             loss_weights_array, replayed)
    kinks = fixture_kinks.kink_errors(recorded, replayed, parameters, double_grads)
    for name, value in double.items():
        if name.startswith("init_sample/"):
            value = single[name]  # the float32 init values (exact in both runs)
        safe.add(name, value)
    safe.add("kinks", np.array(kinks.decisions, dtype=np.int64).reshape(-1, 4))
    # How far PyTorch's float32 result is from the same computation in
    # float64: the scale of rounding error a float32 implementation shows.
    ratios = []
    for name, value in single.items():
        if value.dtype != np.int64 and not name.startswith("init_sample/"):
            error = f32_error(name, single, double, single_grads, double_grads)
            safe.add(f"f32err/{name}", np.array(error, dtype=np.float64))
            if name.startswith(("grad/", "grad_sample/", "grad_sum/", "grad_sumsq/")):
                safe.add(f"kinkerr/{name}", np.array(kinks.of(name), dtype=np.float64))
            if name.startswith(("grad/", "grad_sample/")):
                ratios.append((error / max(float(np.abs(double[name]).max()), 1e-30), name))
    ratios.sort()
    summary = {
        "loss": float(double["loss"]),
        "features[0,:4]": double["features"][0, :4].tolist(),
        "features f32err / max|features|": float(safe.arrays["f32err/features"]) / float(np.abs(double["features"]).max()),
        "median gradient f32err / max|grad|": ratios[len(ratios) // 2],
        "worst gradient f32err / max|grad|": ratios[-1],
        "fragile decisions (ReLU, max pool)": (kinks.counts["relu"], kinks.counts["maxpool"]),
    }
    return safe, summary

# --------------------------------------------------------------------------
# optimizer fixtures


OPTIM_PARAMS = {  # name: (shape, offset, scale)
    "w": ((16, 8), 0.0, 1.0),
    "bn.weight": ((16,), 1.0, 0.25),
    "bias": ((16,), 0.0, 1.0),
}


def cosine_warmup_factor(step, warmup, total, start=1.0, end=0.0):
    """LightlyTrain's CosineWarmupScheduler factor at 0-based step (double)."""
    if step < warmup:
        return (step + 1) / warmup
    span = total - warmup
    if span == 1:
        return end
    return cosine_schedule(step - warmup, span, start, end)


def cosine_schedule(step, steps, start, end):
    """Cosine from start (step 0) to end (step steps - 1), in double."""
    return end - (end - start) * (math.cos(math.pi * step / (steps - 1)) + 1) / 2


class LARS(torch.optim.Optimizer):
    """LARS as in the lightly library: layer-wise adaptation for parameter
    groups with weight decay, plain momentum SGD for the others."""

    def __init__(self, params, lr, momentum=0.9, weight_decay=0.0, trust_coefficient=0.001, eps=1e-8):
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay,
                        trust_coefficient=trust_coefficient, eps=eps)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            weight_decay = group["weight_decay"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                update = param.grad
                if weight_decay != 0:
                    param_norm = torch.norm(param)
                    grad_norm = torch.norm(param.grad)
                    if param_norm != 0 and grad_norm != 0:
                        trust = param_norm / (grad_norm + param_norm * weight_decay + group["eps"])
                        trust *= group["trust_coefficient"]
                        update = update.add(param, alpha=weight_decay)
                        update *= trust
                state = self.state[param]
                if "momentum_buffer" not in state:
                    buffer = state["momentum_buffer"] = torch.clone(update).detach()
                else:
                    buffer = state["momentum_buffer"]
                    buffer.mul_(group["momentum"]).add_(update)
                param.add_(buffer, alpha=-group["lr"])


def optim_gradient(name, step, micro=None):
    shape = OPTIM_PARAMS[name][0]
    key = f"optim/grad/{name}/{step}" if micro is None else f"optim/grad/{name}/{step}/{micro}"
    return torch.from_numpy(fixture_value(key, shape, 0.0, 1.0))


def run_optimizer(run):
    params = {}
    for name, (shape, offset, scale) in OPTIM_PARAMS.items():
        params[name] = torch.nn.Parameter(torch.from_numpy(fixture_value(f"optim/{name}", shape, offset, scale)))
    decayed = [params["w"]]
    plain = [params["bn.weight"], params["bias"]]
    if run in ("sgd", "sgd_nesterov", "sgd_clip", "sgd_accumulate"):
        base_lr = 0.3
        optimizer = torch.optim.SGD([{"params": decayed, "weight_decay": 1e-4},
                                     {"params": plain, "weight_decay": 0.0}],
                                    lr=base_lr, momentum=0.9, nesterov=(run == "sgd_nesterov"))
    elif run == "adamw":
        base_lr = 1e-3
        optimizer = torch.optim.AdamW([{"params": decayed, "weight_decay": 0.05},
                                       {"params": plain, "weight_decay": 0.0}],
                                      lr=base_lr, betas=(0.9, 0.999), eps=1e-8)
    elif run == "lars":
        base_lr = 0.3
        optimizer = LARS([{"params": decayed, "weight_decay": 1e-6},
                          {"params": plain, "weight_decay": 0.0}], lr=base_lr, momentum=0.9)
    else:
        raise ValueError(run)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: cosine_warmup_factor(s, OPTIM_WARMUP, OPTIM_STEPS))

    trajectory = {}
    for step in range(1, OPTIM_STEPS + 1):
        for name, param in params.items():
            if run == "sgd_accumulate":
                # two backward passes of loss / 2 accumulate into .grad
                param.grad = optim_gradient(name, step, 0) * 0.5
                param.grad += optim_gradient(name, step, 1) * 0.5
            else:
                param.grad = optim_gradient(name, step)
        if run == "sgd_clip":
            torch.nn.utils.clip_grad_norm_(list(params.values()), max_norm=1.0)
        optimizer.step()
        scheduler.step()
        for name, param in params.items():
            trajectory[f"{run}/{name}/{step}"] = param.detach().clone().numpy()
    return trajectory


def make_optim():
    safe = SafeFile()
    add_check(safe)
    for name, (shape, offset, scale) in OPTIM_PARAMS.items():
        safe.add(f"init/{name}", fixture_value(f"optim/{name}", shape, offset, scale))
    summary = {}
    for run in ("sgd", "sgd_nesterov", "sgd_clip", "sgd_accumulate", "adamw", "lars"):
        trajectory = run_optimizer(run)
        for key, value in trajectory.items():
            safe.add(key, value)
        summary[f"{run}/w/6[0,:3]"] = trajectory[f"{run}/w/6"][0, :3].tolist()
    safe.add("schedule/lr", np.array([cosine_warmup_factor(s, 10, 100) for s in range(100)], dtype=np.float32))
    safe.add("schedule/wd", np.array([cosine_schedule(s, 100, 0.04, 0.4) for s in range(100)], dtype=np.float32))
    return safe, summary

# --------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder (tests/fixtures)")
    parser.add_argument("--only", help="comma-separated stems to write (default: all), e.g. "
                        "wide_resnet50_2: the others' committed files keep their bytes")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)  # nothing random is used; set anyway
    metadata = {
        "generator": "tools/make_fixtures.py",
        "command": " ".join([os.path.basename(sys.executable), "tools/make_fixtures.py"] + sys.argv[1:]),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "numpy": np.__version__,
        "contract": "tests/fixtures/README.md",
    }

    print("check/u (u(\"check\", i), i = 0..15):")
    for i, value in enumerate(fixture_u("check", 16)):
        print(f"  u(check, {i:2d}) = {value:+.9f}  ({float(value).hex()})")
    for name, i in (("input", 0), ("input", 1), ("conv1.weight", 0)):
        print(f"  u({name}, {i}) = {float(fixture_u(name, i + 1)[i]):+.9f}")

    jobs = [("resnet18", lambda: make_resnet("resnet18", 512)),
            ("resnet50", lambda: make_resnet("resnet50", 2048)),
            ("wide_resnet50_2", lambda: make_resnet("wide_resnet50_2", 2048)),
            ("optim", make_optim)]
    if args.only:
        wanted = args.only.split(",")
        jobs = [(stem, job) for stem, job in jobs if stem in wanted]
    total = 0
    for stem, job in jobs:
        safe, summary = job()
        path = os.path.join(args.out, f"{stem}.safetensors")
        size = safe.write(path, metadata)
        total += size
        print(f"{path}: {len(safe.arrays)} tensors, {size} bytes")
        for key, value in summary.items():
            print(f"  {key} = {value}")
    print(f"total {total} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
