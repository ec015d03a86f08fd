#!/usr/bin/env python3
"""Timed steps of a torchvision ResNet or a timm ViT on CPU in PyTorch: the
yardstick for `build/tools/bench_train_step` (same modes, model, batch,
resolution and threads):

  --mode step (default): forward, loss = sum(features * fixed weights),
      backward, SGD with momentum 0.9 and weight decay 1e-4;
  --mode teacher: the eval forward under torch.no_grad() of a DINOv2-shaped
      ViT (--model vit_s14, vit_b14, ...) as LightlyTrain runs its teacher:
      the normalised class token and patch tokens;
  --mode distillation: one step of LightlyTrain's DistillationV3 with a
      ResNet student (--model) and a random DINOv2-shaped teacher
      (--teacher): mixup, teacher forward (no_grad), student backbone to its
      last stage and pooled features, Linear heads to the teacher's width,
      the map bilinearly resized to the teacher's patch grid, L2
      normalisation, queue of 8192 teacher class tokens, the v3 loss (the
      written-out DistillationV3Loss of tools/make_distillation_fixtures.py,
      checked there against LightlyTrain's module), backward, gradient
      clipping at norm 1, LARS (lightly's) with LightlyTrain's lr 1.8 x
      sqrt(batch / 1536) and weight decay 1e-6.

    /usr/bin/python3 tools/compare/pytorch_train_step.py --model resnet18 \
        --image-size 64 --batch-size 32 --steps 10 --threads 2
    PYTHONPATH=/work/pyref /usr/bin/python3 tools/compare/pytorch_train_step.py \
        --model vit_s16 --image-size 224 --batch-size 16 --steps 5 --threads 2
    PYTHONPATH=/work/pyref /usr/bin/python3 tools/compare/pytorch_train_step.py \
        --mode distillation --model resnet18 --teacher vit_s14 --image-size 224 \
        --batch-size 16 --steps 3 --threads 2

ViTs (vit_t16 ... vit_l14, as src/nn/vit.h builds them) are timm's
VisionTransformer with DINOv2's block (LayerScale 1e-5, LayerNorm eps 1e-6,
exact GELU); a training step's features = the mean of the normalised patch
tokens, as ours. They need timm (PYTHONPATH to a `pip install --target` of
timm 1.0.9).

Prints one line starting with RESULT: images/s, seconds per step (and its
two timed parts: forward and backward; for distillation everything up to
the gradients and the update), CPU seconds per step (user + system of the
process's threads) and the peak resident memory of the process (ru_maxrss).
"""
import argparse
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F
import torchvision

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from make_distillation_fixtures import WrittenV3, resize_map, update_queue  # noqa: E402

# name: (patch, width, depth, heads), as src/nn/vit.c's presets.
VITS = {"vit_t16": (16, 192, 12, 3), "vit_t14": (14, 192, 12, 3), "vit_s16": (16, 384, 12, 6),
        "vit_s14": (14, 384, 12, 6), "vit_b16": (16, 768, 12, 12), "vit_b14": (14, 768, 12, 12),
        "vit_l16": (16, 1024, 24, 16), "vit_l14": (14, 1024, 24, 16)}
RESNETS = ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"]
QUEUE_SIZE = 8192  # LightlyTrain's queue for a dataset of 20000 images or more


def timm_vit(name, image_size):
    """timm's VisionTransformer with DINOv2's block, no classifier."""
    from timm.models.vision_transformer import VisionTransformer
    patch, width, depth, heads = VITS[name]
    return VisionTransformer(img_size=image_size, patch_size=patch, embed_dim=width, depth=depth,
                             num_heads=heads, mlp_ratio=4.0, init_values=1e-5, num_classes=0,
                             global_pool="")


class MeanPatchTokens(torch.nn.Module):
    """A timm ViT whose features are the mean of its normalised patch tokens."""

    def __init__(self, name, image_size):
        super().__init__()
        self.vit = timm_vit(name, image_size)
        self.feature_dim = VITS[name][1]

    def forward(self, images):
        tokens = self.vit.forward_features(images)
        return tokens[:, self.vit.num_prefix_tokens:].mean(dim=1)


class DinoV2Teacher(torch.nn.Module):
    """A frozen DINOv2-shaped ViT giving what LightlyTrain's teacher gives:
    the normalised class token (B, D) and patch tokens (B, h, w, D)."""

    def __init__(self, name, image_size):
        super().__init__()
        self.vit = timm_vit(name, image_size)
        self.grid = image_size // VITS[name][0]
        self.dim = VITS[name][1]
        self.eval()
        self.requires_grad_(False)

    def forward(self, images):
        tokens = self.vit.forward_features(images)
        patches = tokens[:, self.vit.num_prefix_tokens:]
        return tokens[:, 0], patches.reshape(-1, self.grid, self.grid, self.dim)


class Lars(torch.optim.Optimizer):
    """lightly's LARS: weights get (grad + wd w) x trust ||w|| / (||g|| + wd
    ||w|| + eps); biases and norm parameters (1-d) plain momentum SGD."""

    def __init__(self, params, lr, weight_decay, momentum=0.9, trust=0.001, eps=1e-8):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, momentum=momentum,
                                      trust=trust, eps=eps))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                direction = p.grad
                if p.ndim > 1:
                    p_norm, g_norm = torch.norm(p), torch.norm(p.grad)
                    if p_norm > 0 and g_norm > 0:
                        wd = group["weight_decay"]
                        ratio = group["trust"] * p_norm / (g_norm + wd * p_norm + group["eps"])
                        direction = (p.grad + wd * p) * ratio
                state = self.state[p]
                if "momentum" not in state:
                    state["momentum"] = direction.clone()
                else:
                    state["momentum"].mul_(group["momentum"]).add_(direction)
                p.add_(state["momentum"], alpha=-group["lr"])


class DistillationV3Step:
    """One DistillationV3 step: ResNet student, DINOv2-shaped teacher."""

    def __init__(self, student, teacher, image_size, batch):
        resnet = getattr(torchvision.models, student)()
        self.student = torch.nn.Sequential(*list(resnet.children())[:-2])  # up to the last stage
        self.student = self.student.to(memory_format=torch.channels_last).train()
        self.teacher = DinoV2Teacher(teacher, image_size)
        width = 2048 if student in ("resnet50", "resnet101", "resnet152") else 512
        self.global_head = torch.nn.Linear(width, self.teacher.dim)
        self.local_head = torch.nn.Linear(width, self.teacher.dim)
        self.queue = torch.zeros(QUEUE_SIZE, self.teacher.dim)
        self.loss = WrittenV3(0.07, 0.07)
        self.params = [*self.student.parameters(), *self.global_head.parameters(),
                       *self.local_head.parameters()]
        self.optimizer = Lars(self.params, lr=1.8 * (batch / 1536) ** 0.5, weight_decay=1e-6)

    def __call__(self, images, times):
        self.optimizer.zero_grad(set_to_none=False)
        before = time.perf_counter()
        mix = torch.rand(()).item()  # LightlyTrain's _mixup_data
        images = mix * images + (1.0 - mix) * images[torch.randperm(images.shape[0])]
        with torch.no_grad():
            teacher_global, teacher_map = self.teacher(images)
            teacher_global = F.normalize(teacher_global, dim=-1)
            teacher_local = F.normalize(teacher_map.flatten(1, 2), dim=-1)
            self.queue = update_queue(self.queue, teacher_global)
        feature_map = self.student(images).permute(0, 2, 3, 1)  # (B, h, w, C)
        student_global = F.normalize(self.global_head(feature_map.mean(dim=(1, 2))), dim=-1)
        grid = self.teacher.grid
        student_local = resize_map(self.local_head(feature_map), grid, grid).flatten(1, 2)
        student_local = F.normalize(student_local, dim=-1)
        global_loss, local_loss = self.loss(teacher_global, teacher_local, student_global,
                                            student_local, self.queue)
        (global_loss + local_loss).backward()
        middle = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        times[0] += middle - before
        times[1] += time.perf_counter() - middle


def backbone_step_function(args):
    """The plain training step (--mode step) and its RESULT fields."""
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    if args.model in VITS:
        model = MeanPatchTokens(args.model, args.image_size)
        memory_format = torch.contiguous_format  # a ViT's patch conv is its only NCHW op
        features_dim = model.feature_dim
    else:
        model = getattr(torchvision.models, args.model)()
        model.fc = torch.nn.Identity()
        features_dim = 2048 if args.model in ("resnet50", "resnet101", "resnet152") else 512
    model.train()
    model = model.to(memory_format=memory_format)
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    images = images.contiguous(memory_format=memory_format)
    loss_weights = torch.randn(args.batch_size, features_dim)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)

    def step(times):
        optimizer.zero_grad(set_to_none=False)
        before = time.perf_counter()
        loss = (model(images) * loss_weights).sum()
        middle = time.perf_counter()
        loss.backward()
        times[0] += middle - before
        times[1] += time.perf_counter() - middle
        optimizer.step()

    return step, f"model={args.model}", ("forward_s", "backward_s")


def teacher_step_function(args):
    teacher = DinoV2Teacher(args.model, args.image_size)
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size)

    def step(times):
        before = time.perf_counter()
        with torch.no_grad():
            teacher_global, teacher_map = teacher(images)
            F.normalize(teacher_global, dim=-1)
            F.normalize(teacher_map, dim=-1)
        times[0] += time.perf_counter() - before

    return step, f"mode=teacher model={args.model}", ("forward_s", None)


def distillation_step_function(args):
    distill = DistillationV3Step(args.model, args.teacher, args.image_size, args.batch_size)
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    images = images.contiguous(memory_format=torch.channels_last)
    return (lambda times: distill(images, times),
            f"mode=distillation model={args.model} teacher={args.teacher}",
            ("method_step_s", "update_s"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", default="step", choices=["step", "teacher", "distillation"])
    parser.add_argument("--model", default="resnet18", choices=[*RESNETS, *VITS])
    parser.add_argument("--teacher", default="vit_s14", choices=list(VITS),
                        help="--mode distillation: the teacher ViT")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--channels-last", type=int, default=1,
                        help="1: NHWC memory format (what lightly-train-c uses)")
    args = parser.parse_args()
    if args.mode == "teacher" and args.model not in VITS:
        parser.error("--mode teacher: --model must be a ViT")
    if args.mode == "distillation" and args.model not in RESNETS:
        parser.error("--mode distillation: --model must be a ResNet student")

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    make = {"step": backbone_step_function, "teacher": teacher_step_function,
            "distillation": distillation_step_function}[args.mode]
    step, what, part_names = make(args)
    times = [0.0, 0.0]  # the two timed parts of the counted steps
    for _ in range(args.warmup):
        step(times)
    times[0] = times[1] = 0.0
    cpu_start = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
    start = time.perf_counter()
    for _ in range(args.steps):
        step(times)
    seconds = time.perf_counter() - start
    cpu = sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) - cpu_start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rate = args.batch_size * args.steps / seconds
    parts = "".join(f" {name}={value / args.steps:.4f}"
                    for name, value in zip(part_names, times) if name)
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, "
          f"{torch.get_num_threads()} thread(s), mkldnn {torch.backends.mkldnn.is_available()}")
    print(f"RESULT tool=pytorch {what} image_size={args.image_size} "
          f"batch={args.batch_size} threads={args.threads} steps={args.steps} "
          f"images_per_s={rate:.2f} seconds_per_step={seconds / args.steps:.4f}{parts} "
          f"cpu_s_per_step={cpu / args.steps:.4f} peak_rss_mb={peak_mb:.0f}")


if __name__ == "__main__":
    main()
