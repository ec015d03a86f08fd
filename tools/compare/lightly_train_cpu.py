#!/usr/bin/env python3
"""lightly-train-c against LightlyTrain itself on the same model, the same
machine and the same data, on the CPU: whole `train` runs (YOLO students with
DINO and distillation v3, LightlyTrain's default; a ViT with DINOv31),
images/s and peak memory (docs/performance.md).

    /work/venvs/yolo/bin/python tools/compare/lightly_train_cpu.py --bin build/lightly-train-c
    /tmp/yolo-venv/bin/python tools/compare/lightly_train_cpu.py --methods dinov31 \
        --model dinov2/vits14-notpretrained --image-size 112 --local-size 56 --batch 8

Needs lightly-train 0.18 and ultralytics (checked: lightly-train 0.18.0,
ultralytics 8.4.190, torch 2.15). Both sides: model ultralytics/yolov8s.yaml
(--model: another YAML stem both take, e.g. yolo26s, or a model name with
a slash both take, e.g. dinov2/vits14-notpretrained; random init), 48
generated 256 px JPEGs, batch 16 (--batch), 2 epochs (6 steps at batch 16),
2 data workers, float32 on the CPU, LightlyTrain's default views (224 px;
DINO: 2 global + 6 local 96 px; --image-size and --local-size set both
sides' global and local view sizes). The distillation teacher is a DINOv2
ViT-S/14 without registers with random weights on both sides (nothing can
be downloaded here): LightlyTrain's own DINOv2 package with
load_weights=False, ours build/tests/e2e/make_backbone vit_s14. Each run is
a child process; images/s = batch / the median of the logged
profiling/batch_time of steps 1..5 (step 0 warms up), both sides logging it
the same way (forward, backward and optimizer of a step); peak memory = the
child's ru_maxrss (LightlyTrain's data workers are processes of their own,
not counted; ours are threads of the one process, counted). Prints a
markdown table.

--repeats N runs each method N times as pairs, ours then LightlyTrain's,
and prints a row per pair with the load average (1 min) before each run,
then the medians and the median of the pairs' ratios. Both sides run with
the environment given (each with its own default thread waiting: ours
passive, PyTorch's libgomp spinning); --passive sets OMP_WAIT_POLICY=PASSIVE
for both.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile

LIGHTLY_TRAIN = r'''
import sys
import lightly_train
method, out, data, model = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
batch, size, local = int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
transform_args = {}
if size:
    transform_args["image_size"] = (size, size)
if local:
    transform_args["local_view"] = {"view_size": (local, local)}
method_args = {}
if method == "distillation":
    from lightly_train._models.dinov2_vit.dinov2_vit_package import DINOv2ViTPackage
    teacher = DINOv2ViTPackage.get_model("vits14-noreg", load_weights=False)
    method_args["teacher"] = DINOv2ViTPackage.get_model_wrapper(teacher)
lightly_train.pretrain(out=out, data=data, model=model, method=method,
                       method_args=method_args, transform_args=transform_args, epochs=2,
                       batch_size=batch, num_workers=2,
                       accelerator="cpu", devices=1, precision="32-true", overwrite=True,
                       seed=0, loggers={"jsonl": {"flush_logs_every_n_steps": 1}},
                       trainer_args={"log_every_n_steps": 1})
'''


def write_images(folder):
    import numpy as np
    from PIL import Image
    os.makedirs(folder)
    rng = np.random.default_rng(0)
    for i in range(48):
        small = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
        Image.fromarray(small).resize((256, 256), Image.BILINEAR).save(
            os.path.join(folder, f"{i}.jpg"), quality=90)


# Runs the command as its child and prints that child's peak RSS (kB) last,
# so that each measured run has a parent of its own.
WRAPPER = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)")


def run(command, env=None):
    """Runs command in a child; its peak RSS (MB)."""
    result = subprocess.run([sys.executable, "-c", WRAPPER, *command], capture_output=True,
                            text=True, env=env)
    if result.returncode != 0:
        print(result.stdout[-3000:], result.stderr[-3000:])
        sys.exit(f"failed: {' '.join(command[:4])} ...")
    return int(result.stdout.strip().splitlines()[-1]) / 1024.0


def images_per_second(metrics, batch):
    times = []
    with open(metrics) as file:
        for line in file:
            record = json.loads(line)
            if "profiling/batch_time" in record and record.get("step", 0) >= 1:
                times.append(record["profiling/batch_time"])
    return batch / statistics.median(times), len(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", default="build/lightly-train-c")
    parser.add_argument("--build", default="build")
    parser.add_argument("--methods", default="dino,distillation")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--passive", action="store_true")
    parser.add_argument("--model", default="yolov8s",
                        help="a YAML's stem (yolov8s, yolo26s, ...) or a name with a slash")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=0, help="0: the method's default")
    parser.add_argument("--local-size", type=int, default=0, help="0: the method's default")
    args = parser.parse_args()
    model = args.model if "/" in args.model else f"ultralytics/{args.model}.yaml"
    sizes = []
    if args.image_size:
        sizes += ["--image-size", str(args.image_size)]
    if args.local_size:
        sizes += ["--local-image-size", str(args.local_size)]
    import lightly_train
    import torch
    try:
        import ultralytics
        ultralytics_version = ultralytics.__version__
    except ImportError:  # a ViT comparison needs none
        ultralytics_version = "absent"
    env = dict(os.environ)
    if args.passive:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    print(f"lightly-train {lightly_train.__version__}, ultralytics {ultralytics_version}, "
          f"torch {torch.__version__}, {os.cpu_count()} cores, OMP_WAIT_POLICY "
          f"{env.get('OMP_WAIT_POLICY', 'unset')}")
    rows = []
    with tempfile.TemporaryDirectory() as work:
        data = os.path.join(work, "images")
        write_images(data)
        teacher = os.path.join(work, "vit_s14.safetensors")
        subprocess.run([os.path.join(args.build, "tests/e2e/make_backbone"), teacher, "vit_s14",
                        "1", "224"], check=True, capture_output=True)
        script = os.path.join(work, "lightly_train_run.py")
        with open(script, "w") as file:
            file.write(LIGHTLY_TRAIN)
        for repeat in range(args.repeats):
            for method in args.methods.split(","):
                out = os.path.join(work, f"ours_{method}_{repeat}")
                extra = ["--method-arg", f"teacher={teacher}"] if method == "distillation" else []
                ours_load = os.getloadavg()[0]
                ours_peak = run([args.bin, "train", "--data", data, "--out", out, "--model",
                                 model, "--method", method, "--batch-size", str(args.batch),
                                 "--epochs", "2", "--num-workers", "2", "--threads", "2",
                                 "--seed", "0", "--log-every", "1", *sizes, *extra], env)
                ours, ours_steps = images_per_second(os.path.join(out, "metrics.jsonl"),
                                                     args.batch)
                out = os.path.join(work, f"lightly_train_{method}_{repeat}")
                theirs_load = os.getloadavg()[0]
                theirs_peak = run([sys.executable, script, method, out, data, model,
                                   str(args.batch), str(args.image_size), str(args.local_size)],
                                  env)
                theirs, theirs_steps = images_per_second(os.path.join(out, "metrics.jsonl"),
                                                         args.batch)
                rows.append((method, repeat, ours, theirs, ours_peak, theirs_peak, ours_steps,
                             theirs_steps, ours_load, theirs_load))
                print(f"  {method} pair {repeat + 1}: ours {ours:.2f} images/s (load "
                      f"{ours_load:.2f}), LightlyTrain {theirs:.2f} (load {theirs_load:.2f})",
                      flush=True)
    print("| method | pair | lightly-train-c images/s | LightlyTrain images/s | ratio "
          "| peak RSS ours / LightlyTrain | load before ours / theirs |")
    print("|---|---|---|---|---|---|---|")
    for method, repeat, ours, theirs, ours_peak, theirs_peak, a, b, la, lb in rows:
        print(f"| {method} ({args.model}, batch {args.batch}, steps from 1: {a} / {b} timed) "
              f"| {repeat + 1} "
              f"| {ours:.2f} | {theirs:.2f} | {ours / theirs:.2f}x "
              f"| {ours_peak:.0f} / {theirs_peak:.0f} MB | {la:.2f} / {lb:.2f} |")
    if args.repeats > 1:
        for method in args.methods.split(","):
            mine = [r for r in rows if r[0] == method]
            ours = statistics.median(r[2] for r in mine)
            theirs = statistics.median(r[3] for r in mine)
            ratio = statistics.median(r[2] / r[3] for r in mine)
            print(f"| {method}: median of {len(mine)} | | {ours:.2f} | {theirs:.2f} "
                  f"| {ratio:.2f}x (median of the pairs' ratios) "
                  f"| {statistics.median(r[4] for r in mine):.0f} / "
                  f"{statistics.median(r[5] for r in mine):.0f} MB | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
