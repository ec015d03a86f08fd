#!/usr/bin/env python3
"""Writes tests/fixtures/yolo.safetensors: Ultralytics' YOLOv5u, YOLOv8, YOLO11,
YOLO12 and YOLO26 detection models (every size, n s m l x) as references for src/nn/yolo*.c,
checked by tests/test_yolo.c.

    /work/venvs/yolo/bin/python tools/make_yolo_fixtures.py --out tests/fixtures

Needs the Ultralytics package (checked with ultralytics==8.4.190, torch
2.15, numpy) and lightly-train 0.18 (only to assert that its backbone cut is
the one written here); the safetensors writer and "fixture init"
(tests/fixtures/README.md) come from tools/make_fixtures.py.

Each model is ultralytics.nn.tasks.DetectionModel(cfg="yolov8s.yaml", ...)
(the YAML's scaling as parse_model applies it), every state_dict tensor then
set by fixture init of its key (rules in init_rule below; num_batches_tracked
0), and run in float64 (the stored truth, rounded to float32) on fixture
init "input/yolo/96" (0, 1) of shape (2, 3, 96, 96). The backbone is what
LightlyTrain 0.18 trains (lightly_train/_models/ultralytics/ultralytics.py,
_get_backbone): YOLOv8's layers 0-8 (up to the C2f before SPPF; YOLOv5u's
up to the C3 before it; YOLO12's up to its last A2C2f, before the first
Upsample), YOLO11's
and YOLO26's layers 0-10 (SPPF and C2PSA included, up to the first
Upsample; YOLO26's SPPF has an unactivated cv1 and a shortcut).

Per model M (yolov5nu ... yolo26x, yolov5n6u ... yolov5x6u (yolov5-p6.yaml:
LightlyTrain's cut is its layers 0-10, the C3 at P6/64 before SPPF),
yolo26n-p6 ... yolo26x-p6 (layers 0-12: a P6/64 stage, SPPF [1024, 5, 3,
False] without the shortcut, C2PSA), yolo26n-p2 ... yolo26x-p2 (yolo26's
backbone; the neck and Detect reach P2/4), yolov8n-pose-p6 ... yolov8x-pose-p6
(layers 0-10, the C2f at P6/64 before SPPF; a neck of C2 blocks and a
4-level Pose head, built as PoseModel), yolov6n ... yolov6x (layers 0-8,
plain Convs with ReLU, rows of n Convs as a Sequential, up to SPPF), and
the -cls models yolov8n-cls ...
yolo26x-cls: YOLOv8's layers 0-8, YOLO11's and YOLO26's 0-9, C2PSA
without SPPF, up to Classify), MAP = train/p3, train/p4, train/p5 (the
train-mode outputs of layers 4, 6 and the backbone's last) and eval/p5 (the
eval-mode last output, with the fixture-init running statistics):
    M/MAP               (2, H, W, C) F32 NHWC   yolov5nu, yolov8n, yolo11n, yolo12n and yolo26n
    M/MAP/sample        (1024,) F32             the others: the map at NHWC flat
                                                index k * 2654435761 mod numel
    M/MAP/sumsq         () F64                  the others: its sum of squares
    M/MAP/f32err        () F64                  how far PyTorch's float32 runs of the same
                                                model lie from the truth (relative L2), the
                                                largest of three summation orders (NCHW,
                                                channels_last, one thread): the scale of a
                                                correct float32 result's error (train-mode
                                                BatchNorm over the 18 values of a P5
                                                channel amplifies it; so do eval-mode
                                                maps that grow through YOLO12's attention,
                                                where the three lie 7e-6 .. 7e-5 apart)
    metadata "M/state_dict"             "key=d0xd1x..;key=..." every state_dict entry
                                        with its torch shape, in order (the structure
                                        the C model declares)
For every "-seg", "-pose" and "-obb" model (yolov8n-seg ... yolo26x-obb:
the same backbone and neck, a Segment, Pose or OBB head; nothing of it
runs), YOLO26's "-sem" and "-depth" models (yolo26n-sem ... yolo26x-depth:
yolo26's backbone, a SemanticSegment head on the neck's P3 and P4, a Depth
head on P3 ... P5), yolov5n ... yolov5x (Ultralytics builds yolov5nu's model from
yolov5n.yaml), yolov8n-oiv7 ... yolov8x-oiv7 (yolov8n.yaml ... with 601
classes, the models of Ultralytics' Open Images V7 weights) and
yolo26n-sem-ade20k ... yolo26x-sem-ade20k (yolo26n-sem.yaml ... with
ADE20K's 150 classes) and YOLO-World, yolov8s-world ... yolov8x-world and
yolov8s-worldv2 ... yolov8x-worldv2 (WorldModel: YOLOv8's backbone, whose
layers 0-8 LightlyTrain's cut keeps, as asserted here; a C2fAttn neck,
v1's ImagePoolingAttn, WorldDetect), only its structure:
    metadata "M/state_dict" as above
For yolov5nu, yolov8n, yolo11n, yolo12n, yolo12l (A2C2f's gamma), yolo26n,
yolo11n-cls and yolov6n (ReLU) also one training step's gradients: loss =
sum(pooled features * loss_weights), loss_weights fixture init
"loss_weights/yolo" (0, 1) of shape (2, C), train mode:
    M/grad_sample/P   (256,) F32  d loss / d P at flat index k * 2654435761 mod numel
                                  (torch layout), every backbone parameter P
    M/grad_sumsq/P    () F64      the sum of squares of the whole gradient of P
    M/running_var/B   (C,) F32    the backbone's first BatchNorm after the step's
                                  forward (momentum 0.03, unbiased batch variance)
"""
import argparse
import copy
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import SafeFile, add_check, fixture_value, sample_indices  # noqa: E402

BATCH = 2
# 96 px: P5 is 3 x 3, so a train-mode BatchNorm there normalises 18 values
# per channel (at 64 px, 8: PyTorch's own float32 result then lies 3e-5 from
# the truth, above the 1e-5 bound).
IMAGE_SIZE = 96
FULL_MAPS = ("yolov5nu", "yolov8n", "yolo11n", "yolo12n", "yolo26n")  # the others' maps as samples (file size)
MAP_SAMPLES = 1024
TASK_MODELS = [f"{family}{size}" for family in ("yolov8", "yolo11", "yolo26") for size in "nsmlx"]
# YOLOv5u-P6 (the released yolov5n6u.pt ...): yolov5-p6.yaml, a P6/64 stage, a 4-level Detect
P6_MODELS = [f"yolov5{size}6u" for size in "nsmlx"]
# yolo26-p6.yaml and yolo26-p2.yaml: a 4-level Detect over P3 ... P6 or P2 ... P5;
# yolov8-pose-p6.yaml (the released yolov8x-pose-p6.pt): a P6/64 stage, C2 neck, 4-level Pose
LEVEL_MODELS = ([f"yolo26{size}-{levels}" for levels in ("p6", "p2") for size in "nsmlx"]
                + [f"yolov8{size}-pose-p6" for size in "nsmlx"])
# yolov6.yaml: plain Convs with ReLU (rows of n as a Sequential), ConvTranspose2d in the neck
YOLOV6_MODELS = [f"yolov6{size}" for size in "nsmlx"]
MODELS = (TASK_MODELS + [f"yolov5{size}u" for size in "nsmlx"]
          + [f"yolo12{size}" for size in "nsmlx"] + P6_MODELS + LEVEL_MODELS + YOLOV6_MODELS)
# The -cls models: other YAMLs (no SPPF, no neck; Classify), trained up to Classify.
CLASSIFY_MODELS = [f"{name}-cls" for name in TASK_MODELS]
GRADIENT_MODELS = ("yolov5nu", "yolov8n", "yolo11n", "yolo12n", "yolo12l", "yolo26n", "yolo11n-cls",
                   "yolov6n")
HEAD_MODELS = ([f"{name}-{task}" for task in ("seg", "pose", "obb") for name in TASK_MODELS]
               + [f"yolo26{size}-{task}" for task in ("sem", "depth") for size in "nsmlx"])
SAME_MODELS = [f"yolov5{size}" for size in "nsmlx"]  # yolov5nu's models under their YAMLs' names
# YOLOv8 trained on Open Images V7 (yolov8n-oiv7.pt ...): yolov8n.yaml ... with 601 classes
OPEN_IMAGES_MODELS = [f"yolov8{size}-oiv7" for size in "nsmlx"]
# YOLO26-sem trained on ADE20K (yolo26n-sem-ade20k.pt ...): yolo26n-sem.yaml ... with 150 classes
ADE20K_MODELS = [f"yolo26{size}-sem-ade20k" for size in "nsmlx"]
# YOLO-World (WorldModel) as LightlyTrain 0.18 lists it: sizes s ... x of both YAMLs
WORLD_MODELS = [f"yolov8{size}-{version}" for version in ("world", "worldv2") for size in "smlx"]
# The layers whose outputs are stored: P3/8, P4/16 and the backbone's last.
MAP_LAYERS = {"yolov5": (4, 6, 8), "yolov6": (4, 6, 8), "yolov5-p6": (4, 6, 10), "yolov8": (4, 6, 8), "yolo12": (4, 6, 8), "yolo11": (4, 6, 10), "yolo26": (4, 6, 10),
              "yolo26-p6": (4, 6, 12), "yolo26-p2": (4, 6, 10), "yolov8-p6": (4, 6, 10),
              "yolov8-cls": (4, 6, 8), "yolo11-cls": (4, 6, 9), "yolo26-cls": (4, 6, 9)}


def family_of(name):
    if name in P6_MODELS:
        return "yolov5-p6"
    if name in LEVEL_MODELS:
        return name[:6] + name[-3:]  # "yolo26-p6", "yolo26-p2", "yolov8-p6"
    return name[:6] + ("-cls" if name.endswith("-cls") else "")  # "yolov8", "yolo11-cls", ...


def yaml_of(name):
    """The YAML Ultralytics builds name from (8.4 resolves no yolov5n6u.yaml)."""
    return f"yolov5{name[6]}-p6.yaml" if name in P6_MODELS else f"{name}.yaml"


def init_rule(model, key, shape):
    """(offset, scale) of a DetectionModel state_dict entry, or None for
    num_batches_tracked."""
    module_name, _, leaf = key.rpartition(".")
    module = model.get_submodule(module_name)
    if isinstance(module, (torch.nn.Conv2d, torch.nn.ConvTranspose2d)):  # YOLOv6's neck
        if leaf == "weight":
            out_channels, _, kernel_h, kernel_w = shape
            return 0.0, math.sqrt(6.0 / (out_channels * kernel_h * kernel_w))
        if leaf == "bias":
            return 0.0, 0.1
    if leaf == "gamma":  # YOLO12's A2C2f residual scale (Ultralytics: 0.01)
        return 0.5, 0.25
    if isinstance(module, torch.nn.Linear):  # Classify's (it does not run here)
        return 0.0, math.sqrt(6.0 / shape[0]) if leaf == "weight" else 0.1
    if isinstance(module, torch.nn.BatchNorm2d):
        rules = {"weight": (1.0, 0.25), "bias": (0.0, 0.25), "running_mean": (0.0, 0.1),
                 "running_var": (1.0, 0.25), "num_batches_tracked": None}
        if leaf in rules:
            return rules[leaf]
    raise ValueError(f"no fixture-init rule for state_dict entry {key!r}")


def build(name):
    from ultralytics.nn.tasks import ClassificationModel, DetectionModel, PoseModel
    model_class = (ClassificationModel if name.endswith("-cls")
                   else PoseModel if "-pose" in name else DetectionModel)
    model = model_class(cfg=yaml_of(name), ch=3, verbose=False)
    state = model.state_dict()
    new_state = {}
    for key, tensor in state.items():
        rule = init_rule(model, key, tuple(tensor.shape))
        new_state[key] = (torch.zeros_like(tensor) if rule is None
                          else torch.from_numpy(fixture_value(key, tuple(tensor.shape), *rule)))
    model.load_state_dict(new_state)
    return model


def check_backbone_cut(name, model, last):
    """LightlyTrain's own cut of this model ends where ours does."""
    from lightly_train._models.ultralytics.ultralytics import _get_backbone

    class Holder:  # what _get_backbone reads: YOLO.model.model
        pass
    holder = Holder()
    holder.model = model
    backbone, feature_dim = _get_backbone(holder)
    if len(backbone) != last + 1:
        raise SystemExit(f"{name}: LightlyTrain's backbone has {len(backbone)} layers, not {last + 1}")
    return feature_dim


def run_backbone(model, last, keep, x):
    outputs = {}
    for index in range(last + 1):
        x = model.model[index](x)
        if index in keep:
            outputs[index] = x
    return outputs


def nhwc32(tensor):
    return tensor.detach().permute(0, 2, 3, 1).contiguous().numpy().astype(np.float32)


def float32_runs(model, last, keep, image, training):
    """The maps of PyTorch's float32 runs of model in three summation orders:
    NCHW on 2 threads, channels_last, NCHW on 1 thread."""
    runs = []
    for layout, threads in ((torch.contiguous_format, 2), (torch.channels_last, 2),
                            (torch.contiguous_format, 1)):
        single = copy.deepcopy(model).float().to(memory_format=layout)
        single.train(training)
        torch.set_num_threads(threads)
        with torch.no_grad():
            runs.append(run_backbone(single, last, keep, image.contiguous(memory_format=layout)))
    torch.set_num_threads(2)
    return runs


def add_map(safe, name, label, tensor, singles):
    """The float64 map (tensor) and how far PyTorch's float32 runs (singles) lie from it:
    the largest of their errors."""
    error = max(torch.linalg.norm(single.detach().double() - tensor.detach())
                for single in singles) / torch.linalg.norm(tensor.detach())
    safe.add(f"{name}/{label}/f32err", np.float64(error.item()))
    nhwc = tensor.detach().permute(0, 2, 3, 1).contiguous().numpy()
    if name in FULL_MAPS:
        safe.add(f"{name}/{label}", nhwc.astype(np.float32))
        return
    flat = nhwc.reshape(-1)
    index = np.array([(k * 2654435761) % flat.size for k in range(MAP_SAMPLES)], dtype=np.int64)
    safe.add(f"{name}/{label}/sample", flat[index].astype(np.float32))
    safe.add(f"{name}/{label}/sumsq", np.float64(np.sum(flat * flat)))


def state_dict_entries(model):
    """Every state_dict entry of model with its torch shape, "key=d0xd1;..."."""
    return ";".join(f"{key}={'x'.join(str(d) for d in tensor.shape)}"
                    for key, tensor in model.state_dict().items())


def add_model(safe, metadata, name):
    family = family_of(name)
    keep = MAP_LAYERS[family]
    last = keep[-1]
    model = build(name)
    feature_dim = check_backbone_cut(name, model, last)
    metadata[f"{name}/state_dict"] = state_dict_entries(model)
    side = IMAGE_SIZE
    image = torch.from_numpy(fixture_value(f"input/yolo/{side}", (BATCH, 3, side, side), 0.0, 1.0))
    eval_singles = float32_runs(model, last, keep, image, False)
    train_singles = float32_runs(model, last, keep, image, True)
    double = model.double()

    double.eval()
    with torch.no_grad():
        outputs = run_backbone(double, last, keep, image.double())
    add_map(safe, name, "eval/p5", outputs[last], [run[last] for run in eval_singles])

    double.train()
    x = image.double()
    outputs = run_backbone(double, last, keep, x)
    for label, index in zip(("p3", "p4", "p5"), keep):
        add_map(safe, name, f"train/{label}", outputs[index], [run[index] for run in train_singles])
    if name in GRADIENT_MODELS:
        pooled = outputs[last].mean(dim=(2, 3))
        weights = torch.from_numpy(fixture_value("loss_weights/yolo", (BATCH, feature_dim), 0.0, 1.0))
        loss = (pooled * weights.double()).sum()
        loss.backward()
        for key, parameter in double.named_parameters():
            if int(key.split(".")[1]) > last or parameter.grad is None:
                continue
            gradient = parameter.grad.detach().reshape(-1).numpy()
            safe.add(f"{name}/grad_sample/{key}",
                     gradient[sample_indices(gradient.size)].astype(np.float32))
            safe.add(f"{name}/grad_sumsq/{key}", np.float64(np.sum(gradient * gradient)))
        bn = double.model[0].bn
        safe.add(f"{name}/running_var/model.0.bn", bn.running_var.detach().numpy().astype(np.float32))
    print(f"{name}: feature dim {feature_dim}, "
          f"{sum(t.numel() for t in model.state_dict().values())} state_dict elements")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output folder (tests/fixtures)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    import ultralytics
    safe = SafeFile()
    add_check(safe)
    metadata = {"ultralytics": ultralytics.__version__}
    for name in MODELS + CLASSIFY_MODELS:
        add_model(safe, metadata, name)
    from ultralytics.nn.tasks import (DepthModel, DetectionModel, OBBModel, PoseModel,
                                      SegmentationModel, SemanticSegmentationModel, WorldModel)
    classes = {"seg": SegmentationModel, "pose": PoseModel, "obb": OBBModel,
               "sem": SemanticSegmentationModel, "depth": DepthModel}
    for name in HEAD_MODELS + SAME_MODELS + OPEN_IMAGES_MODELS + ADE20K_MODELS + WORLD_MODELS:
        if name in OPEN_IMAGES_MODELS:
            model = DetectionModel(cfg=f"{name[:7]}.yaml", ch=3, nc=601, verbose=False)
        elif name in ADE20K_MODELS:
            model = SemanticSegmentationModel(cfg=f"{name[:11]}.yaml", ch=3, nc=150, verbose=False)
        elif name in WORLD_MODELS:
            model = WorldModel(cfg=f"{name}.yaml", ch=3, verbose=False)
            check_backbone_cut(name, model, MAP_LAYERS["yolov8"][-1])  # YOLOv8's layers 0-8
        else:
            model_class = classes[name.rpartition("-")[2]] if "-" in name else DetectionModel
            model = model_class(cfg=f"{name}.yaml", ch=3, verbose=False)
        metadata[f"{name}/state_dict"] = state_dict_entries(model)
    metadata.update({"generator": "tools/make_yolo_fixtures.py",
                     "command": "python tools/make_yolo_fixtures.py --out tests/fixtures",
                     "reference": f"ultralytics {ultralytics.__version__} DetectionModel",
                     "torch": torch.__version__, "numpy": np.__version__})
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "yolo.safetensors")
    size = safe.write(path, metadata)
    print(f"{path}: {len(safe.arrays)} tensors, {size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
