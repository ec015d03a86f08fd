#!/usr/bin/env python3
"""Checks lightly-train-c's YOLO export against the Ultralytics package, as
a LightlyTrain user would use it (LightlyTrain's export writes the same
exported_models/exported_last.pt with Ultralytics' YOLO.save):

    /work/venvs/yolo/bin/python tools/check_ultralytics_export.py --bin build/lightly-train-c

For yolov8n, yolo11n, yolo26n and their -seg, -pose, -obb and -cls models,
yolov5nu, yolo12n, yolo26n-sem and yolo26n-depth (or those given with
--models, e.g. yolo26n-p6, yolo26n-p2, yolov8n-pose-p6, yolov8s-world,
yolov8s-worldv2)
(fine-tuned on polygons, 17 keypoints, oriented boxes, a class folder, PNG
class masks of 2 classes, PNG depth maps):
`lightly-train-c train` (2 steps of distillation
from a random vit_t14 teacher made by build/tests/e2e/make_backbone, on 8
generated images), then
  1. ultralytics.YOLO(exported_last.pt) loads it: a DetectionModel, task
     detect, its state_dict equal to exported_last.safetensors (bit for bit);
  2. the same weights as ours: YOLO("<model>.yaml") given the safetensors
     state dict computes the same eval-mode outputs as the loaded model,
     and the loaded model's yaml dict and strides are YOLO("<model>.yaml")'s;
  3. it fine-tunes: YOLO(exported_last.pt).train() one epoch on a tiny
     labelled set (4 images, one box each, 1 class: the Detect head is
     rebuilt for it as in any fine-tuning) runs, and changes the backbone;
  4. our reader reads a checkpoint Ultralytics itself saved (YOLO.save):
     `lightly-train-c export` of it equals its state_dict;
  5. and the checkpoint its fine-tuning of step 3 left (runs/.../last.pt:
     stripped as Ultralytics' released weights are, a Detect head of the
     labelled set's 1 class, its last input shape a torch.Size): export of
     it equals its state_dict, and `train --checkpoint` starts from it and
     exports its 1-class head unchanged, in an exported_last.pt that
     ultralytics.YOLO loads.
YOLO-World (yolov8s-world, yolov8s-worldv2: a WorldModel, task detect):
step 2 gives YOLO("<model>.yaml") the loaded model's txt_feats (the class
names' text embeddings, no state_dict tensor; each build draws them at
random); steps 3 and 5's fine-tuning are skipped with the reason printed
(Ultralytics' WorldTrainer encodes the class names with the CLIP text model
clip:ViT-B/32, a download), and step 5's `train --checkpoint` starts from
step 4's checkpoint instead (its WorldDetect head exported unchanged, nc 80:
no state_dict tensor holds a world model's class count).
Prints one line per check and exits 1 on the first failure. Checked with
ultralytics 8.4.190 and torch 2.15 (docs/models.md).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

MODELS = tuple(f"{name}{task}" for task in ("", "-seg", "-pose", "-obb", "-cls")
               for name in ("yolov8n", "yolo11n", "yolo26n")) + (
    "yolov5nu", "yolo12n", "yolo26n-sem", "yolo26n-depth")
LEVELS = ("-p6", "-p2")  # yolo26n-p6, yolo26n-p2, yolov8n-pose-p6: a 4-level head
TASKS = {"": ("detect", "DetectionModel"), "-seg": ("segment", "SegmentationModel"),
         "-pose": ("pose", "PoseModel"), "-obb": ("obb", "OBBModel"),
         "-cls": ("classify", "ClassificationModel"),
         "-sem": ("semantic", "SemanticSegmentationModel"), "-depth": ("depth", "DepthModel"),
         "-world": ("detect", "WorldModel"), "-worldv2": ("detect", "WorldModel")}
WORLD_SKIP = ("Ultralytics' WorldTrainer encodes the class names with the CLIP text model "
              "clip:ViT-B/32 (the clip package and its weights, both downloads; offline, "
              "8.4.190's train() stops at `import clip`)")


def write_images(folder, count, size, seed):
    from PIL import Image
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(count):
        pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
        path = os.path.join(folder, f"{i}.jpg")
        Image.fromarray(pixels).save(path)
        paths.append(path)
    return paths


LABELS = {"detect": "0 0.5 0.5 0.4 0.4",
          "segment": "0 0.3 0.3 0.7 0.3 0.7 0.7 0.3 0.7",
          "pose": "0 0.5 0.5 0.4 0.4 " + " ".join(
              f"{0.35 + 0.3 * (k % 5) / 4:.3f} {0.35 + 0.3 * (k // 5) / 3:.3f} 2" for k in range(17)),
          "obb": "0 0.3 0.3 0.7 0.35 0.65 0.7 0.25 0.65"}


def labelled_set(root, task="detect"):
    """A 1-class set of the task in Ultralytics' layout: 4 images, one box,
    polygon, person (17 keypoints) or oriented box each; classify: the
    images in train/ and val/ folders of their class."""
    if task == "classify":
        for split in ("train", "val"):
            write_images(os.path.join(root, split, "thing"), 4, 64, 1)
        return root
    images = write_images(os.path.join(root, "images", "train"), 4, 64, 1)
    if task in ("semantic", "depth"):  # a PNG per image: class ids, or depth in mm
        from PIL import Image
        folder = os.path.join(root, "masks" if task == "semantic" else "depth", "train")
        os.makedirs(folder)
        for path in images:
            name = os.path.splitext(os.path.basename(path))[0]
            pixels = np.zeros((64, 64), np.uint8 if task == "semantic" else np.uint16)
            pixels[:, 32:] = 1  # the right half "thing" (class 1 of background and thing)
            if task == "depth":
                pixels = (1000 + 2000 * np.arange(64)[None, :] + 0 * pixels).astype(np.uint16)
            Image.fromarray(pixels).save(os.path.join(folder, f"{name}.png"))
        data = os.path.join(root, "data.yaml")
        with open(data, "w") as file:
            file.write(f"path: {root}\ntrain: images/train\nval: images/train\n")
            file.write("masks_dir: masks\nnames:\n  0: background\n  1: thing\n" if task == "semantic"
                       else "nc: 1\nnames:\n  0: depth\ndepth_scale: 1000\n")
        return data
    labels = os.path.join(root, "labels", "train")
    os.makedirs(labels)
    for path in images:
        name = os.path.splitext(os.path.basename(path))[0]
        with open(os.path.join(labels, f"{name}.txt"), "w") as file:
            file.write(LABELS[task] + "\n")
    data = os.path.join(root, "data.yaml")
    with open(data, "w") as file:
        file.write(f"path: {root}\ntrain: images/train\nval: images/train\nnames:\n  0: thing\n")
        if task == "pose":
            file.write("kpt_shape: [17, 3]\n")
    return data


def tensors(output):
    """Every tensor of a model's output (nested tuples, lists, dicts), in order."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, dict):
        output = list(output.values())
    return [t for item in output for t in tensors(item)]


def check(condition, message):
    print(("ok    " if condition else "FAIL  ") + message)
    if not condition:
        sys.exit(1)


def run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        print(result.stdout[-2000:], result.stderr[-2000:])
        sys.exit(f"failed: {' '.join(command)}")


def reads_back(binary, checkpoint):
    """`export` of an Ultralytics checkpoint: its tensor count when it equals
    the model's state_dict (values as stored), else 0."""
    from safetensors.torch import load_file
    theirs = torch.load(checkpoint, map_location="cpu", weights_only=False)["model"].state_dict()
    converted = checkpoint + ".safetensors"
    run([binary, "export", "--checkpoint", checkpoint, "--out", converted])
    read = load_file(converted)
    same = set(read) == set(theirs) and all(
        torch.equal(read[k].to(theirs[k].dtype), theirs[k]) for k in theirs)
    return len(theirs) if same else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", default="build/lightly-train-c")
    parser.add_argument("--build", default="build")
    parser.add_argument("--models", nargs="+", default=MODELS,
                        help="Ultralytics model stems (yolo12l, ...); default: the list above")
    args = parser.parse_args()
    from safetensors.torch import load_file
    from ultralytics import YOLO
    import ultralytics
    print(f"ultralytics {ultralytics.__version__}, torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as work:
        write_images(os.path.join(work, "unlabelled"), 8, 64, 0)
        teacher = os.path.join(work, "vit_t14.safetensors")
        run([os.path.join(args.build, "tests/e2e/make_backbone"), teacher, "vit_t14", "5", "56"])
        sets = {task: labelled_set(os.path.join(work, f"labelled_{task}"), task)
                for task in dict.fromkeys(task for task, _ in TASKS.values())}  # each task once
        for name in args.models:
            suffix = name[name.index("-"):] if "-" in name else ""
            if suffix.endswith(LEVELS):  # "-p6", "-pose-p6"
                suffix = suffix[:-3]
            task, model_class = TASKS[suffix]
            world = model_class == "WorldModel"
            data = sets[task]
            out = os.path.join(work, name)
            run([args.bin, "train", "--data", os.path.join(work, "unlabelled"), "--out", out,
                 "--model", f"ultralytics/{name}.yaml", "--method-arg", f"teacher={teacher}",
                 "--batch-size", "4", "--image-size", "56", "--max-steps", "2", "--threads", "2"])
            pt = os.path.join(out, "exported_models", "exported_last.pt")
            state = load_file(os.path.join(out, "exported_models", "exported_last.safetensors"))

            model = YOLO(pt)
            loaded = model.model.state_dict()
            check(type(model.model).__name__ == model_class and model.task == task,
                  f"{name}: YOLO(exported_last.pt) is a {model_class} for {task}")
            same = set(loaded) == set(state) and all(torch.equal(loaded[k], state[k]) for k in state)
            check(same, f"{name}: its state_dict equals exported_last.safetensors "
                        f"({len(state)} tensors)")

            reference = YOLO(f"{name}.yaml")
            reference.model.load_state_dict(state)
            if world:  # the text embeddings the outputs score against: not in the state_dict
                reference.model.txt_feats = model.model.txt_feats.clone()
            image = torch.rand(1, 3, 64, 64)
            with torch.no_grad():
                ours = tensors(model.model.eval()(image))
                theirs = tensors(reference.model.eval()(image))
            check(len(ours) == len(theirs) and all(torch.equal(a, b) for a, b in zip(ours, theirs)),
                  f"{name}: YOLO('{name}.yaml') with our weights computes the same outputs")
            differ = sorted(k for k in set(model.model.yaml) | set(reference.model.yaml)
                            if model.model.yaml.get(k) != reference.model.yaml.get(k))
            check(not differ and torch.equal(model.model.stride, reference.model.stride),
                  f"{name}: its yaml dict and strides {model.model.stride.tolist()} are "
                  f"Ultralytics' (differing: {differ})")

            if world:
                print(f"skip  {name}: YOLO(exported_last.pt).train(): {WORLD_SKIP}")
            else:
                before = {k: v.clone() for k, v in model.model.state_dict().items()}
                model.train(data=data, epochs=1, imgsz=64, batch=2, workers=0, device="cpu",
                            plots=False, val=False, amp=False, project=os.path.join(work, "runs"),
                            name=name, verbose=False)
                after = model.model.state_dict()
                changed = not torch.equal(before["model.0.conv.weight"].float(),
                                          after["model.0.conv.weight"].float())
                check(changed, f"{name}: YOLO(exported_last.pt).train() fine-tuned it "
                               "(one epoch, 2 steps; the backbone's first conv changed)")

            saved = os.path.join(work, f"{name}_ultralytics.pt")
            YOLO(f"{name}.yaml").save(saved)
            count = reads_back(args.bin, saved)
            check(count, f"{name}: our reader reads Ultralytics' own checkpoint "
                         f"({count} tensors, F16 as saved)")

            if world:  # step 4's checkpoint stands in for the fine-tuned one
                print(f"skip  {name}: reading the checkpoint of that fine-tuning (none); "
                      "train --checkpoint starts from Ultralytics' own checkpoint instead")
                tuned = saved
            else:
                tuned = os.path.join(work, "runs", name, "weights", "last.pt")
                count = reads_back(args.bin, tuned)
                check(count, f"{name}: our reader reads the checkpoint Ultralytics' fine-tuning "
                             f"wrote ({count} tensors)")
            theirs = torch.load(tuned, map_location="cpu", weights_only=False)["model"].state_dict()
            again = os.path.join(work, f"{name}_again")
            run([args.bin, "train", "--data", os.path.join(work, "unlabelled"), "--out", again,
                 "--model", f"ultralytics/{name}.yaml", "--checkpoint", tuned, "--method", "simclr",
                 "--batch-size", "4", "--image-size", "56", "--max-steps", "1", "--threads", "2"])
            state = load_file(os.path.join(again, "exported_models", "exported_last.safetensors"))
            detect = f"model.{len(model.model.model) - 1}."
            head = [k for k in theirs if k.startswith(detect)]
            same = all(torch.equal(state[k].to(theirs[k].dtype), theirs[k]) for k in head)
            # the labelled sets' classes: 1, the semantic one's 2 (background, thing);
            # Depth has none (its one output); a WorldModel's YAML 80, in no tensor
            wanted = 80 if world else 2 if task == "semantic" else 1
            if world:
                check(same, f"{name}: train --checkpoint of it keeps its WorldDetect head "
                            f"({len(head)} tensors)")
            else:
                class_bias = {"classify": "linear.bias", "semantic": "classifier.1.bias",
                              "depth": "head.3.bias"}.get(task, "cv3.0.2.bias")
                classes = state[detect + class_bias].shape[0]
                check(same and classes == wanted, f"{name}: train --checkpoint of it keeps its "
                                                  f"{wanted}-class head ({len(head)} tensors)")
            loaded = YOLO(os.path.join(again, "exported_models", "exported_last.pt")).model
            head = loaded.model[-1]
            head_classes = (head.linear.out_features if task == "classify"
                            else 1 if task == "depth" else head.nc)
            same = head_classes == wanted and all(torch.equal(loaded.state_dict()[k], state[k])
                                               for k in state)
            check(same, f"{name}: and YOLO() loads that run's exported_last.pt (nc {wanted}, "
                        "its state_dict the safetensors)")
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
