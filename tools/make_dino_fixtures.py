#!/usr/bin/python3
"""Writes tests/fixtures/dino_loss.safetensors: PyTorch references for DINO's
loss and center update (src/ssl_methods/dino_loss.h), checked by
tests/test_dino_loss.c.

    /usr/bin/python3 tools/make_dino_fixtures.py --out tests/fixtures [--lightly /tmp/lightly]

The reference is lightly's DINOLoss when the lightly package can be imported
(e.g. `pip install --no-deps --target /tmp/lightly lightly`, passed with
--lightly); the script always also runs its own written-out version of the
same formula and fails when the two disagree. Without lightly it uses the
written-out version alone (the metadata says which). Safetensors writing and
fixture init come from tools/make_fixtures.py.

Every case runs two steps on one loss object: step 1 with the center at 0,
then the center update (lightly does it inside forward), step 2 with new
inputs and the updated center, then the second update. For every case C
(named n<N>_k<K>_g<G>_v<V>) and step S in 1, 2:
    C/config                 (6,) F32    N, K, G, V, student_temp, center_momentum
    C/S/teacher_temp         () F32
    C/S/teacher<g>           (N, K) F32  teacher output of global view g (fixture
                                         init "dino/C/S/teacher<g>", offset 0, scale 1)
    C/S/student<v>           (N, K) F32  student output of view v (fixture init
                                         "dino/C/S/student<v>", offset 0, scale 1)
    C/S/loss                 () F64      loss of the float32 inputs, in float64
    C/S/grad<v>              (N, K) F64  d loss / d student<v>
    C/S/center               (K,) F64    center after step S's update
    f32err/C/S/loss, f32err/C/S/grad<v>, f32err/C/S/center  () F64
                                         max |float32 result - float64 result|
    check/u                  (16,) F32   as in every fixture file
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import SafeFile, add_check, fixture_value  # noqa: E402
from make_loss_fixtures import lightly_loss, parse_fixture_args  # noqa: E402

# (N, K, G, V, teacher temperature per step, student_temp, center_momentum):
# N = 1, two views only, multi-crop (2 global + 4 local), one global view,
# odd sizes, DINO's defaults (student 0.1, momentum 0.9) and others.
CASES = [
    (1, 8, 2, 2, (0.04, 0.05), 0.1, 0.9),
    (3, 17, 2, 4, (0.04, 0.07), 0.1, 0.9),
    (8, 64, 2, 6, (0.07, 0.07), 0.1, 0.9),
    (5, 33, 1, 3, (0.05, 0.1), 0.2, 0.5),
]
STEPS = 2


def case_name(batch, dim, global_views, total_views):
    return f"n{batch}_k{dim}_g{global_views}_v{total_views}"


class WrittenOutDino:
    """The formula of src/ssl_methods/dino_loss.h written out in torch."""

    def __init__(self, dim, student_temp, momentum, dtype):
        self.center = torch.zeros(dim, dtype=dtype)
        self.student_temp = student_temp
        self.momentum = momentum

    def __call__(self, teacher, student, teacher_temp):
        total = 0.0
        pairs = 0
        for g, t in enumerate(teacher):
            probs = torch.softmax((t - self.center) / teacher_temp, dim=-1)
            for v, s in enumerate(student):
                if v == g:
                    continue
                log_probs = torch.log_softmax(s / self.student_temp, dim=-1)
                total = total - (probs * log_probs).sum(dim=-1).mean()
                pairs += 1
        with torch.no_grad():
            mean = torch.stack(teacher).mean(dim=(0, 1))
            self.center = self.momentum * self.center + (1 - self.momentum) * mean
        return total / pairs


def student_grad(x):
    """d loss / d x; zeros where x took no part (G = 1: student view 0 pairs with nothing)."""
    return (x.grad if x.grad is not None else torch.zeros_like(x)).double().numpy()


def run_steps(make_loss, inputs, teacher_temps, dtype):
    """[(loss, grads, center)] per step for one loss object."""
    loss_fn = make_loss(dtype)
    results = []
    for (teacher, student), teacher_temp in zip(inputs, teacher_temps):
        t = [torch.from_numpy(x).to(dtype) for x in teacher]
        s = [torch.from_numpy(x).to(dtype).requires_grad_(True) for x in student]
        loss = loss_fn(t, s, teacher_temp)
        loss.backward()
        center = loss_fn.center.detach().reshape(-1).double().numpy().copy()
        results.append((loss.detach().double().numpy(), [student_grad(x) for x in s],
                        center))
    return results


def main():
    args = parse_fixture_args(__doc__)
    dino_class, version = lightly_loss("DINOLoss")
    reference_name = ("written out (lightly not importable)" if dino_class is None
                      else f"lightly {version} DINOLoss")

    safe = SafeFile()
    add_check(safe)
    for batch, dim, global_views, total_views, teacher_temps, student_temp, momentum in CASES:
        name = case_name(batch, dim, global_views, total_views)
        inputs = []
        for step in range(1, STEPS + 1):
            teacher = [fixture_value(f"dino/{name}/{step}/teacher{g}", (batch, dim), 0.0, 1.0)
                       for g in range(global_views)]
            student = [fixture_value(f"dino/{name}/{step}/student{v}", (batch, dim), 0.0, 1.0)
                       for v in range(total_views)]
            inputs.append((teacher, student))

        def written(dtype, dim=dim, student_temp=student_temp, momentum=momentum):
            return WrittenOutDino(dim, student_temp, momentum, dtype)

        def reference_with_center(dtype):
            # lightly's module keeps the center; expose it like the written-out one
            if dino_class is None:
                return written(dtype)
            module = dino_class(output_dim=dim, student_temp=student_temp,
                                  center_momentum=momentum).to(dtype)

            class Wrapped:
                def __call__(self, t, s, teacher_temp):
                    return module(t, s, teacher_temp=teacher_temp)

                @property
                def center(self):
                    return module.center
            return Wrapped()

        truth = run_steps(reference_with_center, inputs, teacher_temps, torch.float64)
        single = run_steps(reference_with_center, inputs, teacher_temps, torch.float32)
        check = run_steps(written, inputs, teacher_temps, torch.float64)
        for step in range(STEPS):
            a, b = truth[step], check[step]
            differences = [abs(float(a[0] - b[0])), float(np.max(np.abs(a[2] - b[2])))]
            differences += [float(np.max(np.abs(x - y))) for x, y in zip(a[1], b[1])]
            # lightly divides by a float32 teacher temperature; ours by the float64 one
            if max(differences) > 1e-6:
                raise SystemExit(f"{name} step {step + 1}: written-out formula differs from "
                                 f"the reference by {max(differences):g}")

        safe.add(f"{name}/config", np.array([batch, dim, global_views, total_views,
                                             student_temp, momentum], dtype=np.float32))
        for step in range(STEPS):
            prefix = f"{name}/{step + 1}"
            teacher, student = inputs[step]
            safe.add(f"{prefix}/teacher_temp", np.float32(teacher_temps[step]))
            for g, x in enumerate(teacher):
                safe.add(f"{prefix}/teacher{g}", x)
            for v, x in enumerate(student):
                safe.add(f"{prefix}/student{v}", x)
            loss, grads, center = truth[step]
            loss32, grads32, center32 = single[step]
            safe.add(f"{prefix}/loss", loss)
            safe.add(f"f32err/{prefix}/loss", np.float64(abs(loss32 - loss)))
            for v, (grad, grad32) in enumerate(zip(grads, grads32)):
                safe.add(f"{prefix}/grad{v}", grad)
                safe.add(f"f32err/{prefix}/grad{v}", np.float64(np.max(np.abs(grad32 - grad))))
            safe.add(f"{prefix}/center", center)
            safe.add(f"f32err/{prefix}/center", np.float64(np.max(np.abs(center32 - center))))
            print(f"{prefix}: loss {float(loss):.9f}, max |grad| "
                  f"{max(np.abs(g).max() for g in grads):.3g}, f32err loss "
                  f"{float(abs(loss32 - loss)):.3g}")

    metadata = {
        "generator": "tools/make_dino_fixtures.py",
        "command": "/usr/bin/python3 tools/make_dino_fixtures.py --out tests/fixtures "
                   "--lightly /tmp/lightly",
        "reference": reference_name,
        "torch": torch.__version__,
        "numpy": np.__version__,
    }
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "dino_loss.safetensors")
    size = safe.write(path, metadata)
    print(f"{path}: {len(safe.arrays)} tensors, {size} bytes ({reference_name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
