#!/usr/bin/env python3
"""Timed steps of a torchvision ResNet, a DINOv2-shaped ViT or a ConvNeXt
(torchvision's, timm's, DINOv3's: --model torchvision/convnext_tiny, ...) in PyTorch, on
the CPU or a GPU: the yardstick for `build/tools/bench_train_step` (same
modes, model, batch, resolution and threads; on a GPU, tools/bench_gpu.sh
runs both):

  --mode step (default): forward, loss = sum(features * fixed weights),
      backward, SGD with momentum 0.9 and weight decay 1e-4;
  --mode teacher: the eval forward under torch.no_grad() of a DINOv2-shaped
      ViT (--model vit_s14, vit_b14, ...) as LightlyTrain runs its teacher:
      the normalised class token and patch tokens; of a ConvNeXt its map
      and pooled features (what embed and a DINOv3 ConvNeXt teacher compute);
      --compile runs the model through torch.compile (compiled in the warm-up);
  --mode distillation: one step of LightlyTrain's DistillationV3 with a
      ResNet student (--model) and a random DINOv2-shaped teacher or DINOv3
      ConvNeXt (--teacher vit_b14, dinov3/convnext-base, ...): mixup, teacher forward (no_grad), student backbone to its
      last stage and pooled features, Linear heads to the teacher's width,
      the map bilinearly resized to the teacher's grid (a ConvNeXt's: its
      last stage, normalised, the global feature its mean), L2
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

ViTs (vit_t16 ... vit_l14, as src/nn/vit_presets.c builds them): timm's
VisionTransformer with DINOv2's block (LayerScale 1e-5, LayerNorm eps 1e-6,
exact GELU, qkv bias, class token with its position) when timm is
importable (PYTHONPATH to a `pip install --target` of timm 1.0.9), else
BuiltinVit below: the same architecture and parameter names written out
with torch alone (GPU nodes often have torch and torchvision but no timm,
and no network to get it). --vit timm|builtin picks one; --check-vit
compares the two on the same weights (needs timm). A training step's
features = the mean of the normalised patch tokens, as ours. timm's and
DINOv3's ConvNeXts are timm's models when timm is importable, else
torchvision's (the same function); RESULT says convnext=timm|torchvision.

--device cuda runs on the GPU: --precision 16-mixed / bf16-mixed as
Lightning runs it (autocast around the forward passes and the loss; for
fp16 a GradScaler, unscaled before clip_grad_norm_), channels-last for the
convolutions (ResNets), the device synchronised only at the ends of the
timed window (queued steps overlap, as in training; the two parts are then
not timed), and the peak memory of PyTorch's allocator.

Prints one line starting with RESULT: images/s, seconds per step (and its
two timed parts: forward and backward; for distillation everything up to
the gradients and the update), CPU seconds per step (user + system of the
process's threads), the peak resident memory of the process (ru_maxrss) and
on a GPU the allocator's peak allocated and reserved MiB.
"""
import argparse
import contextlib
import math
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F
import torchvision

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from distillation_losses import WrittenV3, resize_map, update_queue  # noqa: E402
from compare.pytorch_yolo import SCALES as YOLO_SCALES, yolo_backbone  # noqa: E402

# name: (patch, width, depth, heads), as src/nn/vit.c's presets.
VITS = {"vit_t16": (16, 192, 12, 3), "vit_t14": (14, 192, 12, 3), "vit_s16": (16, 384, 12, 6),
        "vit_s14": (14, 384, 12, 6), "vit_b16": (16, 768, 12, 12), "vit_b14": (14, 768, 12, 12),
        "vit_l16": (16, 1024, 24, 16), "vit_l14": (14, 1024, 24, 16)}
RESNETS = ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"]
# ConvNeXts by our --model names: torchvision's and timm's (features: the mean
# of the last stage, LightlyTrain's wrappers) and DINOv3's (timm's model, the
# final norm on the last stage's map, then the mean: its DINOv3 wrapper).
CONVNEXTS = [f"{family}/convnext_{size}" for family in ("torchvision", "timm")
             for size in ("tiny", "small", "base", "large")] + \
    [f"dinov3/convnext-{size}" for size in ("tiny", "small", "base", "large")]
# Ultralytics YOLO students by our --model names (tools/compare/pytorch_yolo.py).
YOLOS = [f"ultralytics/{family}{size}.yaml" for family in YOLO_SCALES for size in YOLO_SCALES[family]]
QUEUE_SIZE = 8192  # LightlyTrain's queue for a dataset of 20000 images or more


def have_timm():
    try:
        import timm  # noqa: F401
        return True
    except ImportError:
        return False


def timm_vit(name, image_size):
    """timm's VisionTransformer with DINOv2's block, no classifier."""
    from timm.models.vision_transformer import VisionTransformer
    patch, width, depth, heads = VITS[name]
    return VisionTransformer(img_size=image_size, patch_size=patch, embed_dim=width, depth=depth,
                             num_heads=heads, mlp_ratio=4.0, init_values=1e-5, num_classes=0,
                             global_pool="")


class BuiltinBlock(torch.nn.Module):
    """timm's pre-norm Block with LayerScale: x + ls1(attn(norm1(x))), then
    x + ls2(mlp(norm2(x))); attention through scaled_dot_product_attention
    (timm's fused path) where torch has it."""

    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(width, eps=1e-6)
        self.attn = torch.nn.Module()
        self.attn.qkv = torch.nn.Linear(width, 3 * width)
        self.attn.proj = torch.nn.Linear(width, width)
        self.ls1 = torch.nn.Module()
        self.ls1.gamma = torch.nn.Parameter(torch.full((width,), 1e-5))
        self.norm2 = torch.nn.LayerNorm(width, eps=1e-6)
        self.mlp = torch.nn.Module()
        self.mlp.fc1 = torch.nn.Linear(width, 4 * width)
        self.mlp.fc2 = torch.nn.Linear(4 * width, width)
        self.ls2 = torch.nn.Module()
        self.ls2.gamma = torch.nn.Parameter(torch.full((width,), 1e-5))

    def attention(self, x):
        batch, tokens, width = x.shape
        q, k, v = self.attn.qkv(x).reshape(batch, tokens, 3, self.heads, width // self.heads) \
            .permute(2, 0, 3, 1, 4).unbind(0)
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v)
        else:  # torch < 2.0
            y = torch.softmax(q * (width // self.heads) ** -0.5 @ k.transpose(-2, -1), dim=-1) @ v
        return self.attn.proj(y.transpose(1, 2).reshape(batch, tokens, width))

    def forward(self, x):
        x = x + self.ls1.gamma * self.attention(self.norm1(x))
        return x + self.ls2.gamma * self.mlp.fc2(F.gelu(self.mlp.fc1(self.norm2(x))))


class BuiltinVit(torch.nn.Module):
    """A DINOv2-shaped ViT in torch alone, parameter for parameter timm's
    VisionTransformer(init_values=1e-5, num_classes=0) (its state_dict loads
    strictly): patch_embed.proj, cls_token, pos_embed over the class token
    and the patches, blocks.<i>, norm. forward_features: (B, 1 + N, D)."""

    num_prefix_tokens = 1

    def __init__(self, name, image_size):
        super().__init__()
        patch, width, depth, heads = VITS[name]
        self.patch_embed = torch.nn.Module()
        self.patch_embed.proj = torch.nn.Conv2d(3, width, patch, stride=patch)
        self.cls_token = torch.nn.Parameter(1e-6 * torch.randn(1, 1, width))
        grid = image_size // patch
        self.pos_embed = torch.nn.Parameter(0.02 * torch.randn(1, 1 + grid * grid, width))
        self.blocks = torch.nn.Sequential(*[BuiltinBlock(width, heads) for _ in range(depth)])
        self.norm = torch.nn.LayerNorm(width, eps=1e-6)
        for module in self.modules():  # timm's trunc_normal(0.02) on the Linear weights
            if isinstance(module, torch.nn.Linear):
                torch.nn.init.trunc_normal_(module.weight, std=0.02)
                torch.nn.init.zeros_(module.bias)

    def forward_features(self, images):
        x = self.patch_embed.proj(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        return self.norm(self.blocks(x))


def make_vit(name, image_size, kind):
    return timm_vit(name, image_size) if kind == "timm" else BuiltinVit(name, image_size)


def check_builtin_vit(args):
    """max |builtin - timm| / max |timm| of forward_features on timm's weights."""
    reference = timm_vit(args.model, args.image_size).eval()
    builtin = BuiltinVit(args.model, args.image_size).eval()
    builtin.load_state_dict(reference.state_dict(), strict=True)
    images = torch.randn(2, 3, args.image_size, args.image_size)
    with torch.no_grad():
        want, got = reference.forward_features(images), builtin.forward_features(images)
    error = ((got - want).abs().max() / want.abs().max()).item()
    print(f"CHECK builtin ViT vs timm: model={args.model} image_size={args.image_size} "
          f"relative_error={error:.3g}")
    return error


class MeanPatchTokens(torch.nn.Module):
    """A timm ViT whose features are the mean of its normalised patch tokens."""

    def __init__(self, name, image_size, kind):
        super().__init__()
        self.vit = make_vit(name, image_size, kind)
        self.feature_dim = VITS[name][1]

    def forward(self, images):
        tokens = self.vit.forward_features(images)
        return tokens[:, self.vit.num_prefix_tokens:].mean(dim=1)


class ConvNeXtFeatures(torch.nn.Module):
    """A ConvNeXt of CONVNEXTS with LightlyTrain's pooled features, and its
    map (B, h, w, D) (DINOv3: normalised). timm's and DINOv3's from timm
    when `library` is "timm", else torchvision's (the same function: the
    GPU bench needs only torchvision; the final norm is its classifier's)."""

    def __init__(self, name, library="timm"):
        super().__init__()
        family, _, size = name.replace("-", "_").partition("/")
        self.family = family
        self.library = "torchvision" if family == "torchvision" else library
        if self.library == "torchvision":
            self.model = getattr(torchvision.models, size)(stochastic_depth_prob=0.0)
            self.feature_dim = self.model.classifier[-1].in_features
            self.norm = self.model.classifier[0]
        else:
            import timm
            self.model = timm.create_model(size, num_classes=0)
            self.feature_dim = self.model.num_features
            self.norm = self.model.head.norm

    def forward_map(self, images):
        if self.library == "torchvision":
            feature_map = self.model.features(images).permute(0, 2, 3, 1)
        else:
            feature_map = self.model.forward_features(images).permute(0, 2, 3, 1)
        if self.family == "dinov3":
            feature_map = F.layer_norm(feature_map, (self.feature_dim,), self.norm.weight,
                                       self.norm.bias, self.norm.eps)
        return feature_map

    def forward(self, images):
        return self.forward_map(images).mean(dim=(1, 2))


class ConvNeXtTeacher(torch.nn.Module):
    """A frozen DINOv3 ConvNeXt as LightlyTrain's teacher: the mean of the
    normalised last-stage map (B, D) and the map (B, h, w, D)."""

    def __init__(self, name, image_size, library):
        super().__init__()
        self.convnext = ConvNeXtFeatures(name, library)
        self.grid = image_size // 32
        self.dim = self.convnext.feature_dim
        self.eval()
        self.requires_grad_(False)

    def forward(self, images):
        feature_map = self.convnext.forward_map(images)
        return feature_map.mean(dim=(1, 2)), feature_map


class DinoV2Teacher(torch.nn.Module):
    """A frozen DINOv2-shaped ViT giving what LightlyTrain's teacher gives:
    the normalised class token (B, D) and patch tokens (B, h, w, D)."""

    def __init__(self, name, image_size, kind):
        super().__init__()
        self.vit = make_vit(name, image_size, kind)
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


class Precision:
    """Lightning's --precision: autocast around the forward passes and the
    loss; for 16-mixed on a GPU a GradScaler (a pass-through otherwise)."""

    def __init__(self, name, device):
        self.dtype = {"16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}.get(name)
        self.device = device
        enabled = name == "16-mixed" and device.type == "cuda"
        if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
            self.scaler = torch.amp.GradScaler("cuda", enabled=enabled)
        else:  # torch < 2.3
            self.scaler = torch.cuda.amp.GradScaler(enabled=enabled)

    def autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def backward(self, loss):
        self.scaler.scale(loss).backward()

    def step(self, optimizer, params=None, max_norm=None):
        """Unscale, clip_grad_norm_ (when max_norm), optimizer step, scale update."""
        if max_norm is not None:
            self.scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(params, max_norm)
        self.scaler.step(optimizer)
        self.scaler.update()


class DistillationV3Step:
    """One DistillationV3 step: a ResNet or YOLO student, a DINOv2-shaped
    ViT or a DINOv3 ConvNeXt teacher."""

    def __init__(self, args, device, precision):
        if args.model in YOLOS:
            student, width = yolo_backbone(args.model)  # its feature map, as ours reads it
        else:
            resnet = getattr(torchvision.models, args.model)()
            student = torch.nn.Sequential(*list(resnet.children())[:-2])  # up to the last stage
            width = 2048 if args.model in ("resnet50", "resnet101", "resnet152") else 512
        memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
        self.student = student.to(device, memory_format=memory_format).train()
        if args.teacher in CONVNEXTS:
            self.teacher = ConvNeXtTeacher(args.teacher, args.image_size, args.convnext)
            self.teacher = self.teacher.to(device, memory_format=memory_format)
        else:
            self.teacher = DinoV2Teacher(args.teacher, args.image_size, args.vit).to(device)
        self.global_head = torch.nn.Linear(width, self.teacher.dim).to(device)
        self.local_head = torch.nn.Linear(width, self.teacher.dim).to(device)
        self.queue = torch.zeros(QUEUE_SIZE, self.teacher.dim, device=device)
        self.loss = WrittenV3(0.07, 0.07)
        self.params = [*self.student.parameters(), *self.global_head.parameters(),
                       *self.local_head.parameters()]
        self.optimizer = Lars(self.params, lr=1.8 * math.sqrt(args.batch_size / 1536),
                              weight_decay=1e-6)
        self.precision = precision

    def __call__(self, images, times):
        self.optimizer.zero_grad(set_to_none=False)
        before = time.perf_counter()
        with self.precision.autocast():
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
        self.precision.backward(global_loss + local_loss)
        middle = time.perf_counter()
        self.precision.step(self.optimizer, self.params, 1.0)
        times[0] += middle - before
        times[1] += time.perf_counter() - middle


def backbone_step_function(args, device, precision):
    """The plain training step (--mode step) and its RESULT fields."""
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    if args.model in VITS:
        model = MeanPatchTokens(args.model, args.image_size, args.vit)
        memory_format = torch.contiguous_format  # a ViT's patch conv is its only NCHW op
        features_dim = model.feature_dim
    elif args.model in CONVNEXTS:
        model = ConvNeXtFeatures(args.model)
        features_dim = model.feature_dim
    else:
        model = getattr(torchvision.models, args.model)()
        model.fc = torch.nn.Identity()
        features_dim = 2048 if args.model in ("resnet50", "resnet101", "resnet152") else 512
    model = model.to(device, memory_format=memory_format).train()
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    images = images.contiguous(memory_format=memory_format)
    loss_weights = torch.randn(args.batch_size, features_dim, device=device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)

    def step(times):
        optimizer.zero_grad(set_to_none=False)
        before = time.perf_counter()
        with precision.autocast():
            loss = (model(images).float() * loss_weights).sum()
        middle = time.perf_counter()
        precision.backward(loss)
        times[0] += middle - before
        times[1] += time.perf_counter() - middle
        precision.step(optimizer)

    return step, f"model={args.model}", ("forward_s", "backward_s")


def teacher_step_function(args, device, precision):
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    what = f"mode=teacher model={args.model}" + (" compile=1" if args.compile else "")
    if args.model in CONVNEXTS:  # the eval forward of embed and of a DINOv3 ConvNeXt teacher
        model = ConvNeXtFeatures(args.model, args.convnext).to(device).eval()
        model.requires_grad_(False)
        if args.channels_last:
            model = model.to(memory_format=torch.channels_last)
            images = images.contiguous(memory_format=torch.channels_last)
        forward_map = torch.compile(model.forward_map) if args.compile else model.forward_map

        def forward(times):
            before = time.perf_counter()
            with torch.no_grad(), precision.autocast():
                forward_map(images).mean(dim=(1, 2))
            times[0] += time.perf_counter() - before

        return forward, what, ("forward_s", None)
    teacher = DinoV2Teacher(args.model, args.image_size, args.vit).to(device)
    run = torch.compile(teacher) if args.compile else teacher

    def step(times):
        before = time.perf_counter()
        with torch.no_grad(), precision.autocast():
            teacher_global, teacher_map = run(images)
            F.normalize(teacher_global, dim=-1)
            F.normalize(teacher_map, dim=-1)
        times[0] += time.perf_counter() - before

    return step, what, ("forward_s", None)


def distillation_step_function(args, device, precision):
    distill = DistillationV3Step(args, device, precision)
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    if args.channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    return (lambda times: distill(images, times),
            f"mode=distillation model={args.model} teacher={args.teacher}",
            ("method_step_s", "update_s"))


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", default="step", choices=["step", "teacher", "distillation"])
    parser.add_argument("--model", default="resnet18", choices=[*RESNETS, *VITS, *CONVNEXTS, *YOLOS])
    dinov3_convnexts = [name for name in CONVNEXTS if name.startswith("dinov3/")]
    parser.add_argument("--teacher", default="vit_s14", choices=[*VITS, *dinov3_convnexts],
                        help="--mode distillation: the teacher (a ViT or a DINOv3 ConvNeXt)")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--channels-last", type=int, default=1,
                        help="1: NHWC memory format for the convolutions (what lightly-train-c "
                             "uses)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--precision", default="32-true",
                        choices=["32-true", "16-mixed", "bf16-mixed"])
    parser.add_argument("--vit", default="auto", choices=["auto", "timm", "builtin"],
                        help="the ViT: timm's, or BuiltinVit (auto: timm when importable)")
    parser.add_argument("--compile", action="store_true",
                        help="--mode teacher: the model through torch.compile (compiled in the "
                             "warm-up, which must be at least 1 step)")
    parser.add_argument("--check-vit", action="store_true",
                        help="compare BuiltinVit with timm's ViT on --model and exit")
    args = parser.parse_args()
    if args.mode == "teacher" and args.model not in VITS and args.model not in CONVNEXTS:
        parser.error("--mode teacher: --model must be a ViT or a ConvNeXt")
    if args.compile and (args.mode != "teacher" or args.warmup < 1):
        parser.error("--compile: only with --mode teacher and --warmup of at least 1")
    if args.mode == "distillation" and args.model not in RESNETS and args.model not in YOLOS:
        parser.error("--mode distillation: --model must be a ResNet or YOLO student")
    if args.mode != "distillation" and args.model in YOLOS:
        parser.error("a YOLO --model: only with --mode distillation")
    if args.vit == "auto":
        args.vit = "timm" if have_timm() else "builtin"
    elif args.vit == "timm" and not have_timm():
        parser.error("--vit timm: timm is not importable (PYTHONPATH?)")
    # timm's and DINOv3's ConvNeXts: timm's model when importable, else torchvision's.
    args.convnext = "timm" if have_timm() else "torchvision"
    return args


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.check_vit:
        sys.exit(0 if check_builtin_vit(args) < 1e-5 else 1)
    device = torch.device(args.device)
    gpu = device.type == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False  # 32-true means fp32, as ours
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    precision = Precision(args.precision, device)
    make = {"step": backbone_step_function, "teacher": teacher_step_function,
            "distillation": distillation_step_function}[args.mode]
    step, what, part_names = make(args, device, precision)
    times = [0.0, 0.0]  # the two timed parts of the counted steps (not on a GPU)
    for _ in range(args.warmup):
        step(times)
    if gpu:
        torch.cuda.synchronize(device)
    times[0] = times[1] = 0.0
    cpu_start = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
    start = time.perf_counter()
    for _ in range(args.steps):
        step(times)
    if gpu:
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    cpu = sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) - cpu_start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rate = args.batch_size * args.steps / seconds
    parts = "".join(f" {name}={value / args.steps:.4f}"
                    for name, value in zip(part_names, times) if name and not gpu)
    memory = ""
    if gpu:
        memory = (f" gpu_peak_allocated_mib={torch.cuda.max_memory_allocated(device) / 2**20:.0f}"
                  f" gpu_peak_reserved_mib={torch.cuda.max_memory_reserved(device) / 2**20:.0f}")
    teacher = args.teacher if args.mode == "distillation" else None
    vit = f" vit={args.vit}" if args.model in VITS or teacher in VITS else ""
    if args.model in CONVNEXTS or teacher in CONVNEXTS:
        vit = f" convnext={args.convnext}"
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, "
          f"{torch.get_num_threads()} thread(s), mkldnn {torch.backends.mkldnn.is_available()}"
          + (f", {torch.cuda.get_device_name(device)}" if gpu else ""))
    print(f"RESULT tool=pytorch {what} device={args.device} precision={args.precision}{vit} "
          f"image_size={args.image_size} batch={args.batch_size} threads={args.threads} "
          f"steps={args.steps} images_per_s={rate:.2f} seconds_per_step={seconds / args.steps:.4f}"
          f"{parts} cpu_s_per_step={cpu / args.steps:.4f} peak_rss_mb={peak_mb:.0f}{memory}")


if __name__ == "__main__":
    main()
