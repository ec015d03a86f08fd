#!/usr/bin/python3
"""Writes tests/fixtures/distillation.safetensors: PyTorch references for
LightlyTrain's distillation methods (src/ssl_methods/distillation_*.h),
checked by tests/test_distillation.c and tests/test_backend_resize.c.

    /usr/bin/python3 tools/make_distillation_fixtures.py --out tests/fixtures \\
        [--lightly-train /tmp/lightly-train]

--lightly-train names a LightlyTrain source tree (a folder holding
src/lightly_train/_methods/...; e.g. from the mirrored git repository:
git -C REPO archive v0.17.0 src/lightly_train/_methods | tar -x -C /tmp/lightly-train;
the committed file was made from v0.17.0 and is byte-identical when remade).
Its three loss modules (DistillationLoss, DistillationV2Loss,
DistillationV3Loss) are then loaded from their files (they import only torch)
and are the reference; the script always also runs its own written-out
version of each loss and fails when the two disagree. Without the tree it
uses the written-out losses alone (the metadata says which). Everything
around the losses (heads, bilinear resize, L2 normalisation, the teacher
queue) is written here as LightlyTrain's training_step_impl does it.

Feature maps are stored channels-last (B, H, W, C), the C code's layout;
the script permutes them to PyTorch's (B, C, H, W) around F.interpolate.
Every case runs once in float64 on the float32 inputs ("the truth", F64)
and once in float32; f32err/<name> is max |float32 result - float64 result|.

    resize/<case>/x (B,H,W,C) F32, dy (B,OH,OW,C) F32, y (B,OH,OW,C) F64,
        dx (B,H,W,C) F64: F.interpolate(bilinear, align_corners=False) and
        the gradient of <dy, y>
    queue/<case>/before (Q,D), teacher (B,D) F32; after (Q,D) F64:
        LightlyTrain's _update_queue
    v1/<case>/{teacher, student} (B,D), queue (Q,D), temperature F32;
        loss, grad_student F64: DistillationLoss on L2-normalised inputs
    v3/<case>/{teacher_global, student_global} (B,D),
        {teacher_local, student_local} (B,P,D), queue (Q,D),
        temperatures (2,) F32; global_loss, local_loss, grad_global,
        grad_local F64: DistillationV3Loss (gradients of global + local)
    v2/<case>/{teacher, student} (B,P,D) F32; loss, grad_student F64:
        DistillationV2Loss
    pipe_v1/<case>: features (B,C), head.weight (D,C), head.bias (D),
        teacher (B,D) raw, queue_before (Q,D), temperature F32;
        queue_after, loss, grad_features, grad_head.weight, grad_head.bias F64
    pipe_v3/<case>: features (B,C), map (B,h,w,C), global_head.{weight,bias},
        local_head.{weight,bias}, teacher_global (B,D) raw, teacher_local
        (B,th,tw,D) raw, queue_before (Q,D), config (th, tw, temperature
        global, temperature local, local weight) F32; queue_after,
        global_loss, local_loss, loss, grad_features, grad_map,
        grad_<head>.{weight,bias} F64
    pipe_v2/<case>: map (B,h,w,C), head.layers.<k>.{weight,bias} (Linear k;
        LayerNorm k+1 when the head has hidden layers), teacher (B,th,tw,D),
        config (th, tw, layers) F32; loss, grad_map, grad_head.<...> F64
    check/u (16,) F32 as in every fixture file
"""
import argparse
import importlib.util
import os
import sys
import zlib

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from distillation_losses import (  # noqa: E402
    WrittenV1, WrittenV2, WrittenV3, resize_map, update_queue)
from make_fixtures import SafeFile, add_check  # noqa: E402

METHODS = "src/lightly_train/_methods"


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder (tests/fixtures)")
    parser.add_argument("--lightly-train", help="a LightlyTrain source tree (optional)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    return args


def load_module(root, relative, name):
    path = os.path.join(root, METHODS, relative)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Losses:
    """The reference losses: LightlyTrain's modules when its tree is given,
    each checked against the written-out version; else the written-out ones."""

    def __init__(self, root):
        self.modules = None
        if root:
            self.modules = (
                load_module(root, "distillation/distillation_loss.py", "lt_distillation_loss"),
                load_module(root, "distillationv2/distillationv2_loss.py", "lt_distillationv2_loss"),
                load_module(root, "distillationv3/distillationv3_loss.py", "lt_distillationv3_loss"),
            )
        self.name = ("LightlyTrain DistillationLoss / DistillationV2Loss / DistillationV3Loss"
                     if root else "written out (no LightlyTrain tree given)")

    def v1(self, temperature):
        if not self.modules:
            return WrittenV1(temperature)
        return self.modules[0].DistillationLoss(temperature=temperature)

    def v2(self):
        return self.modules[1].DistillationV2Loss() if self.modules else WrittenV2()

    def v3(self, temperature_global, temperature_local):
        if not self.modules:
            return WrittenV3(temperature_global, temperature_local)
        return self.modules[2].DistillationV3Loss(temperature_global=temperature_global,
                                                  temperature_local=temperature_local)


def agree(name, reference, written):
    """Fails when the reference and the written-out results differ (float64)."""
    for key, value in reference.items():
        difference = float(np.max(np.abs(value - written[key])))
        if difference > 1e-10 * max(1.0, float(np.max(np.abs(value)))):
            raise SystemExit(f"{name}/{key}: written-out formula differs from the reference "
                             f"by {difference:g}")


# ---- helpers ---------------------------------------------------------------------------

def rng_for(name):
    """A generator seeded by the case name (CRC-32), so each case's inputs are fixed."""
    return np.random.RandomState(zlib.crc32(name.encode("utf-8")))


def uniform(rng, shape, low=-1.0, high=1.0):
    return rng.uniform(low, high, size=shape).astype(np.float32)


def normalized(rng, shape):
    x = torch.from_numpy(uniform(rng, shape))
    return F.normalize(x, dim=-1).numpy().astype(np.float32)


def leaf(array, dtype):
    return torch.tensor(array, dtype=dtype, requires_grad=True)


def const(array, dtype):
    return torch.tensor(array, dtype=dtype)


def numpy64(tensor):
    return tensor.detach().to(torch.float64).numpy()


def record(safe, prefix, inputs, run):
    """Stores inputs (F32), the float64 outputs and f32err of run(dtype)."""
    for key, value in inputs.items():
        safe.add(f"{prefix}/{key}", np.asarray(value, dtype=np.float32))
    truth, single = run(torch.float64), run(torch.float32)
    for key, value in truth.items():
        safe.add(f"{prefix}/{key}", value)
        safe.add(f"f32err/{prefix}/{key}", np.float64(np.max(np.abs(single[key] - value))))
    print(f"{prefix}: " + ", ".join(f"{k} {float(np.max(np.abs(v))):.3g}"
                                    for k, v in truth.items()))
    return truth


# ---- cases ---------------------------------------------------------------------------

# (B, H, W, C, OH, OW): up and down sampling, non-integer factors, 1 x 1 both ways, identity.
RESIZE_CASES = [(2, 3, 5, 3, 7, 4), (1, 7, 7, 5, 16, 16), (2, 16, 16, 2, 7, 7),
                (1, 5, 5, 4, 5, 5), (3, 1, 1, 2, 3, 3), (1, 2, 3, 3, 1, 1), (2, 4, 6, 3, 9, 10)]


def make_resize(safe):
    for b, h, w, c, oh, ow in RESIZE_CASES:
        name = f"resize/b{b}_{h}x{w}_c{c}_to_{oh}x{ow}"
        rng = rng_for(name)
        inputs = {"x": uniform(rng, (b, h, w, c)), "dy": uniform(rng, (b, oh, ow, c))}

        def run(dtype, inputs=inputs, oh=oh, ow=ow):
            x = leaf(inputs["x"], dtype)
            y = resize_map(x, oh, ow)
            (y * const(inputs["dy"], dtype)).sum().backward()
            return {"y": numpy64(y), "dx": numpy64(x.grad)}
        record(safe, name, inputs, run)


# (B, Q, D): the queue longer than the batch, equal, shorter.
QUEUE_CASES = [(3, 8, 5), (4, 4, 3), (6, 4, 3)]


def make_queue(safe):
    for b, q, d in QUEUE_CASES:
        name = f"queue/b{b}_q{q}_d{d}"
        rng = rng_for(name)
        inputs = {"before": uniform(rng, (q, d)), "teacher": uniform(rng, (b, d))}

        def run(dtype, inputs=inputs):
            return {"after": numpy64(update_queue(const(inputs["before"], dtype),
                                                  const(inputs["teacher"], dtype)))}
        record(safe, name, inputs, run)


# (B, D, Q, temperature): LightlyTrain's 0.07 and another, a queue with zero rows.
V1_CASES = [(4, 8, 16, 0.07), (5, 12, 10, 0.2), (3, 6, 7, 0.07)]


def make_v1(safe, losses):
    for b, d, q, t in V1_CASES:
        name = f"v1/b{b}_d{d}_q{q}_t{t:g}"
        rng = rng_for(name)
        queue = normalized(rng, (q, d))
        queue[q - 2:] = 0  # the queue starts as zeros: rows not yet filled
        inputs = {"teacher": normalized(rng, (b, d)), "student": normalized(rng, (b, d)),
                  "queue": queue, "temperature": np.float32(t)}

        def run(dtype, inputs=inputs, t=t, written=False):
            student = leaf(inputs["student"], dtype)
            loss_fn = WrittenV1(t) if written else losses.v1(t)
            loss = loss_fn(const(inputs["teacher"], dtype), student, const(inputs["queue"], dtype))
            loss.backward()
            return {"loss": numpy64(loss), "grad_student": numpy64(student.grad)}
        truth = record(safe, name, inputs, run)
        agree(name, truth, run(torch.float64, written=True))


# (B, P, D, Q, temperature global, temperature local)
V3_CASES = [(3, 6, 8, 12, 0.07, 0.07), (2, 9, 5, 4, 0.1, 0.05), (4, 4, 16, 6, 0.07, 0.2)]


def make_v3(safe, losses):
    for b, p, d, q, tg, tl in V3_CASES:
        name = f"v3/b{b}_p{p}_d{d}_q{q}"
        rng = rng_for(name)
        inputs = {"teacher_global": normalized(rng, (b, d)),
                  "student_global": normalized(rng, (b, d)),
                  "teacher_local": normalized(rng, (b, p, d)),
                  "student_local": normalized(rng, (b, p, d)),
                  "queue": normalized(rng, (q, d)),
                  "temperatures": np.array([tg, tl], dtype=np.float32)}

        def run(dtype, inputs=inputs, tg=tg, tl=tl, written=False):
            student_global = leaf(inputs["student_global"], dtype)
            student_local = leaf(inputs["student_local"], dtype)
            loss_fn = WrittenV3(tg, tl) if written else losses.v3(tg, tl)
            global_loss, local_loss = loss_fn(
                teacher_features_global=const(inputs["teacher_global"], dtype),
                teacher_features_local=const(inputs["teacher_local"], dtype),
                student_features_global=student_global, student_features_local=student_local,
                queue=const(inputs["queue"], dtype))
            (global_loss + local_loss).backward()
            return {"global_loss": numpy64(global_loss), "local_loss": numpy64(local_loss),
                    "grad_global": numpy64(student_global.grad),
                    "grad_local": numpy64(student_local.grad)}
        truth = record(safe, name, inputs, run)
        agree(name, truth, run(torch.float64, written=True))


V2_CASES = [(2, 6, 8), (3, 4, 5)]  # (B, P, D)


def make_v2(safe, losses):
    for b, p, d in V2_CASES:
        name = f"v2/b{b}_p{p}_d{d}"
        rng = rng_for(name)
        inputs = {"teacher": uniform(rng, (b, p, d), -2, 2), "student": uniform(rng, (b, p, d))}

        def run(dtype, inputs=inputs, written=False):
            student = leaf(inputs["student"], dtype)
            loss_fn = WrittenV2() if written else losses.v2()
            loss = loss_fn(teacher_features=const(inputs["teacher"], dtype),
                           student_features=student)
            loss.backward()
            return {"loss": numpy64(loss), "grad_student": numpy64(student.grad)}
        truth = record(safe, name, inputs, run)
        agree(name, truth, run(torch.float64, written=True))


# ---- the student side after the backbone, as LightlyTrain's training_step_impl ------------

def linear_inputs(rng, prefix, in_dim, out_dim):
    return {f"{prefix}.weight": uniform(rng, (out_dim, in_dim), -0.3, 0.3),
            f"{prefix}.bias": uniform(rng, (out_dim,), -0.3, 0.3)}


def leaves(inputs, names, dtype):
    return {name: leaf(inputs[name], dtype) for name in names}


def grads(tensors):
    return {f"grad_{name}": numpy64(t.grad) for name, t in tensors.items()}


# (B, C, D, Q, temperature)
PIPE_V1_CASES = [(4, 6, 8, 10, 0.07), (5, 5, 7, 3, 0.07)]


def make_pipe_v1(safe, losses):
    for b, c, d, q, t in PIPE_V1_CASES:
        name = f"pipe_v1/b{b}_c{c}_d{d}_q{q}"
        rng = rng_for(name)
        inputs = {"features": uniform(rng, (b, c)), "teacher": uniform(rng, (b, d), -2, 2),
                  "queue_before": normalized(rng, (q, d)), "temperature": np.float32(t)}
        inputs.update(linear_inputs(rng, "head", c, d))

        def run(dtype, inputs=inputs, t=t):
            x = leaves(inputs, ["features", "head.weight", "head.bias"], dtype)
            teacher = F.normalize(const(inputs["teacher"], dtype), dim=-1)
            student = F.normalize(F.linear(x["features"], x["head.weight"], x["head.bias"]),
                                  dim=-1)
            queue = update_queue(const(inputs["queue_before"], dtype), teacher)
            loss = losses.v1(t)(teacher_features=teacher, student_features=student, queue=queue)
            loss.backward()
            return {"queue_after": numpy64(queue), "loss": numpy64(loss), **grads(x)}
        record(safe, name, inputs, run)


# (B, C, h, w, D, th, tw, Q, local weight): a ResNet-like 2 x 2 map up to a 3 x 4
# grid, a ViT-like 4 x 4 map down to 3 x 3; a batch longer than the queue.
PIPE_V3_CASES = [(3, 5, 2, 2, 6, 3, 4, 8, 1.0), (2, 4, 4, 4, 5, 3, 3, 2, 0.5)]


def make_pipe_v3(safe, losses):
    for b, c, h, w, d, th, tw, q, weight in PIPE_V3_CASES:
        name = f"pipe_v3/b{b}_c{c}_{h}x{w}_d{d}_{th}x{tw}_q{q}"
        rng = rng_for(name)
        inputs = {"features": uniform(rng, (b, c)), "map": uniform(rng, (b, h, w, c)),
                  "teacher_global": uniform(rng, (b, d), -2, 2),
                  "teacher_local": uniform(rng, (b, th, tw, d), -2, 2),
                  "queue_before": normalized(rng, (q, d)),
                  "config": np.array([th, tw, 0.07, 0.07, weight], dtype=np.float32)}
        inputs.update(linear_inputs(rng, "global_head", c, d))
        inputs.update(linear_inputs(rng, "local_head", c, d))
        trained = ["features", "map", "global_head.weight", "global_head.bias",
                   "local_head.weight", "local_head.bias"]

        def run(dtype, inputs=inputs, th=th, tw=tw, weight=weight, trained=trained):
            x = leaves(inputs, trained, dtype)
            teacher_global = F.normalize(const(inputs["teacher_global"], dtype), dim=-1)
            teacher_local = F.normalize(const(inputs["teacher_local"], dtype).flatten(1, 2),
                                        dim=-1)
            student_global = F.normalize(
                F.linear(x["features"], x["global_head.weight"], x["global_head.bias"]), dim=-1)
            local = F.linear(x["map"], x["local_head.weight"], x["local_head.bias"])
            student_local = F.normalize(resize_map(local, th, tw).flatten(1, 2), dim=-1)
            queue = update_queue(const(inputs["queue_before"], dtype), teacher_global)
            global_loss, local_loss = losses.v3(0.07, 0.07)(
                teacher_features_global=teacher_global, teacher_features_local=teacher_local,
                student_features_global=student_global, student_features_local=student_local,
                queue=queue)
            loss = global_loss + weight * local_loss
            loss.backward()
            return {"queue_after": numpy64(queue), "global_loss": numpy64(global_loss),
                    "local_loss": numpy64(local_loss), "loss": numpy64(loss), **grads(x)}
        record(safe, name, inputs, run)


# (B, C, h, w, D, th, tw, layers, hidden): one Linear (LightlyTrain's default) and
# Linear-LayerNorm-GELU-Linear.
PIPE_V2_CASES = [(2, 5, 2, 3, 6, 4, 4, 1, 0), (3, 4, 3, 3, 5, 2, 2, 2, 7)]


def make_pipe_v2(safe, losses):
    for b, c, h, w, d, th, tw, layers, hidden in PIPE_V2_CASES:
        name = f"pipe_v2/b{b}_c{c}_{h}x{w}_d{d}_{th}x{tw}_l{layers}"
        rng = rng_for(name)
        inputs = {"map": uniform(rng, (b, h, w, c)), "teacher": uniform(rng, (b, th, tw, d), -2, 2),
                  "config": np.array([th, tw, layers], dtype=np.float32)}
        if layers == 1:
            inputs.update(linear_inputs(rng, "head.layers.0", c, d))
        else:
            inputs.update(linear_inputs(rng, "head.layers.0", c, hidden))
            inputs["head.layers.1.weight"] = uniform(rng, (hidden,), 0.5, 1.5)
            inputs["head.layers.1.bias"] = uniform(rng, (hidden,), -0.5, 0.5)
            inputs.update(linear_inputs(rng, "head.layers.3", hidden, d))
        trained = [k for k in inputs if k == "map" or k.startswith("head.")]

        def run(dtype, inputs=inputs, th=th, tw=tw, layers=layers, trained=trained):
            x = leaves(inputs, trained, dtype)
            y = F.linear(x["map"], x["head.layers.0.weight"], x["head.layers.0.bias"])
            if layers == 2:
                y = F.layer_norm(y, (y.shape[-1],), x["head.layers.1.weight"],
                                 x["head.layers.1.bias"], eps=1e-5)
                y = F.gelu(y)
                y = F.linear(y, x["head.layers.3.weight"], x["head.layers.3.bias"])
            student = resize_map(y, th, tw).flatten(1, 2)
            teacher = const(inputs["teacher"], dtype).flatten(1, 2)
            loss = losses.v2()(teacher_features=teacher, student_features=student)
            loss.backward()
            return {"loss": numpy64(loss), **grads(x)}
        record(safe, name, inputs, run)


def main():
    args = parse_args()
    losses = Losses(args.lightly_train)
    safe = SafeFile()
    add_check(safe)
    make_resize(safe)
    make_queue(safe)
    make_v1(safe, losses)
    make_v3(safe, losses)
    make_v2(safe, losses)
    make_pipe_v1(safe, losses)
    make_pipe_v3(safe, losses)
    make_pipe_v2(safe, losses)
    metadata = {
        "generator": "tools/make_distillation_fixtures.py",
        "command": "/usr/bin/python3 tools/make_distillation_fixtures.py --out tests/fixtures "
                   "--lightly-train /tmp/lightly-train",
        "reference": losses.name,
        "torch": torch.__version__,
        "numpy": np.__version__,
    }
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "distillation.safetensors")
    size = safe.write(path, metadata)
    print(f"{path}: {len(safe.arrays)} tensors, {size} bytes ({losses.name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
