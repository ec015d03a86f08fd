#!/usr/bin/env python3
"""SimCLR, DINO and DINOv2 training throughput in PyTorch on the CPU or a
GPU: the baseline that `make bench-gpu` (tools/bench_gpu.sh) and first
light's targets put next to ours.

The recipe of our methods (src/ssl_methods/): torchvision ResNet (or
ConvNeXt: --model torchvision/convnext_tiny; or an Ultralytics YOLO's
backbone in plain PyTorch: --model ultralytics/yolov8s.yaml), and
  simclr: 2 views, lightly's SimCLRProjectionHead structure, NT-Xent (0.1),
          SGD (momentum 0.9, weight decay 1e-4);
  dino:   2 global + 6 local views (LightlyTrain's transforms), DINOHead
          (hidden 2048, bottleneck 256, weight-normalised last layer of
          --prototypes outputs), an EMA teacher on the global views, the
          centred teacher softmax (0.04) against the student log-softmax
          (0.1), AdamW;
  dinov2: a timm ViT (--model vit_b14, ...), 2 global + 8 local views of
          98 px, LightlyTrain's DINOv2 (tools/compare/pytorch_dinov2.py).
Mixed precision as Lightning's "16-mixed" / "bf16-mixed" does it: autocast
around forward and loss, GradScaler for fp16. --channels-last stores
activations NHWC (what cuDNN's fast fp16 kernels want). --synthetic feeds
random batches already on the device (the model-bound figure); otherwise a
DataLoader with LightlyTrain's transforms (tools/compare/torchvision_data.py).
--profile prints, after RESULT, a per-kernel profile of the timed steps
(torch.profiler: the GPU kernels on cuda, the operators on the CPU) as
PROFILE lines, the format of tools/profile_gpu.sh.
--compile runs the networks through torch.compile (default mode) from the
second step on: the first step runs eager to count the FLOPs (hooks do not
survive compilation), the compilation happens in the untimed warm-up
(at least 2 warm-up steps are required).

Timing: --warmup untimed steps, then --steps timed ones; the device is
synchronised only at the ends of the timed window, so queued work overlaps
as in a training run. data_wait_pct is the share of the window spent
waiting for the next batch on the host. Model FLOPs are counted with
forward hooks on every Conv2d and Linear (2 x multiply-adds) during the
first step: training = 3 x the student's forward + 1 x the teacher's; mfu
divides the achieved FLOP/s by the GPU's dense datasheet peak for the
precision (or --peak-tflops). One line starting with RESULT.

    python3 tools/compare/pytorch_ssl_train.py --method simclr --model resnet50 \\
        --device cuda --precision 16-mixed --channels-last --synthetic \\
        --image-size 224 --batch-size 256 --steps 50
"""
import argparse
import contextlib
import os
import sys
import time

import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_dinov2 import DinoHead, Dinov2  # noqa: E402
from pytorch_simclr_train import nt_xent, projection_head  # noqa: E402
from pytorch_yolo import yolo_backbone  # noqa: E402
from torchvision_data import (  # noqa: E402
    INTERPOLATIONS, EndlessShuffle, ImageViews, list_images, method_views, seed_worker)

# Dense datasheet peaks in TFLOP/s: (fp16/bf16 tensor cores, fp32 without TF32).
PEAK_TFLOPS = [("H200", 989.4, 66.9), ("H100 PCIe", 756.0, 51.2), ("H100", 989.4, 66.9),
               ("A100", 312.0, 19.5), ("L40S", 362.1, 91.6), ("RTX 4090", 165.2, 82.6)]
LOCAL_SIZES = {"dino": 96, "dinov2": 98}


class FlopCounter:
    """2 x multiply-adds of every Conv2d and Linear run while it is enabled."""

    def __init__(self, modules):
        self.flops, self.enabled = 0, True
        self.handles = [m.register_forward_hook(self.hook) for m in modules
                        if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]

    def hook(self, module, inputs, output):
        if not self.enabled:
            return
        if isinstance(module, torch.nn.Conv2d):
            per_output = module.in_channels // module.groups
            per_output *= module.kernel_size[0] * module.kernel_size[1]
        else:
            per_output = module.in_features
        self.flops += 2 * output.numel() * per_output

    def close(self):
        for handle in self.handles:
            handle.remove()


def backbone_for(model):
    """torchvision's ResNet (resnet50) or ConvNeXt (torchvision/convnext_tiny,
    our name; its features: the mean of the last stage, as LightlyTrain's
    wrapper and ours; drop path at torchvision's default, as ours), or an
    Ultralytics YOLO's backbone (ultralytics/yolov8s.yaml: the mean of its
    feature map, as LightlyTrain's wrapper and ours)."""
    if model.startswith("ultralytics/"):
        backbone, dim = yolo_backbone(model)
        return torch.nn.Sequential(backbone, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(1)), dim
    if model.startswith("torchvision/convnext_"):
        backbone = getattr(torchvision.models, model.partition("/")[2])()
        dim = backbone.classifier[-1].in_features
        backbone.classifier = torch.nn.Flatten(1)  # after its average pool
        return backbone, dim
    backbone = getattr(torchvision.models, model)()
    dim = backbone.fc.in_features
    backbone.fc = torch.nn.Identity()
    return backbone, dim


class SimCLR:
    def __init__(self, args, device):
        backbone, dim = backbone_for(args.model)
        self.student = torch.nn.Sequential(backbone, projection_head(dim, 2048, 128)).to(device)
        self.teacher = None
        self.optimizer = torch.optim.SGD(self.student.parameters(), lr=0.3 * args.batch_size / 256,
                                         momentum=0.9, weight_decay=1e-4)

    def loss(self, views):
        z0, z1 = self.student(torch.cat(views)).float().chunk(2)
        return nt_xent(z0, z1, 0.1)

    def after_step(self):
        pass


class Dino:
    def __init__(self, args, device):
        def network():
            backbone, dim = backbone_for(args.model)
            return torch.nn.Sequential(backbone, DinoHead(dim, args.prototypes)).to(device)
        self.student, self.teacher = network(), network()  # weight_norm defeats deepcopy
        self.teacher.load_state_dict(self.student.state_dict())
        for p in self.teacher.parameters():
            p.requires_grad = False
        self.center = torch.zeros(1, args.prototypes, device=device)
        self.optimizer = torch.optim.AdamW(
            [p for p in self.student.parameters() if p.requires_grad], lr=5e-4, weight_decay=0.04)

    def loss(self, views):
        global_views, local_views = torch.cat(views[:2]), torch.cat(views[2:])
        with torch.no_grad():
            teacher_out = self.teacher(global_views).float()
            targets = torch.softmax((teacher_out - self.center) / 0.04, dim=-1).chunk(2)
            self.center.mul_(0.9).add_(0.1 * teacher_out.mean(dim=0, keepdim=True))
        student_out = torch.cat([self.student(global_views), self.student(local_views)]).float()
        log_probs = torch.log_softmax(student_out / 0.1, dim=-1).chunk(len(views))
        total, terms = 0.0, 0
        for t, target in enumerate(targets):
            for s, log_prob in enumerate(log_probs):
                if s != t:
                    total = total + (-(target * log_prob).sum(dim=-1).mean())
                    terms += 1
        return total / terms

    @torch.no_grad()
    def after_step(self):
        for t, s in zip(self.teacher.parameters(), self.student.parameters()):
            t.mul_(0.996).add_(s.detach(), alpha=0.004)


def synthetic_batches(args, device, view_count):
    sizes = [args.image_size] * 2 + [LOCAL_SIZES.get(args.method, 0)] * (view_count - 2)
    views = [torch.randn(args.batch_size, 3, s, s, device=device) for s in sizes]
    while True:
        yield views


def loader_batches(args, device, views):
    paths = list_images(args.data)
    loader = torch.utils.data.DataLoader(
        ImageViews(paths, views), batch_size=args.batch_size, drop_last=True,
        sampler=EndlessShuffle(len(paths), 0), num_workers=args.num_workers,
        worker_init_fn=seed_worker, pin_memory=device.type == "cuda",
        persistent_workers=args.num_workers > 0)
    for batch in loader:
        yield [v.to(device, non_blocking=True) for v in batch]


def peak_tflops(args, device):
    if args.peak_tflops > 0:
        return args.peak_tflops
    if device.type != "cuda":
        return 0.0
    name = torch.cuda.get_device_name(device)
    for key, half, single in PEAK_TFLOPS:
        if key in name:
            return single if args.precision == "32-true" else half
    return 0.0


def start_profiler(device):
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    profiler = torch.profiler.profile(activities=activities)
    profiler.start()
    return profiler


def print_profile(profiler, device, steps, top):
    """PROFILE lines: the kernels (cuda) or operators (CPU) by self time."""
    rows = []
    for event in profiler.key_averages():
        if device.type == "cuda":
            if "CUDA" not in str(getattr(event, "device_type", "")):
                continue  # host-side entries; the kernels carry the device time
            micros = getattr(event, "self_device_time_total", None)
            if micros is None:
                micros = event.self_cuda_time_total
        else:
            micros = event.self_cpu_time_total
        if micros > 0:
            rows.append((micros, event.count, event.key))
    total = sum(r[0] for r in rows) or 1.0
    rows.sort(reverse=True)
    print(f"PROFILE tool=pytorch kernels={len(rows)} us_per_step={total / steps:.1f}")
    for micros, count, name in rows[:top]:
        print(f"PROFILE tool=pytorch us_per_step={micros / steps:.1f} "
              f"calls_per_step={count / steps:g} share_pct={100 * micros / total:.1f} "
              f"kernel={name}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", choices=["simclr", "dino", "dinov2"], default="simclr")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--data", help="image folder (not needed with --synthetic)")
    parser.add_argument("--synthetic", action="store_true")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--precision", choices=["32-true", "16-mixed", "bf16-mixed"],
                        default="16-mixed")
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--prototypes", type=int, default=65536, help="DINO head outputs")
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    parser.add_argument("--num-workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--peak-tflops", type=float, default=0.0)
    parser.add_argument("--compile", action="store_true", help="torch.compile the networks")
    parser.add_argument("--profile", action="store_true",
                        help="per-kernel profile of the timed steps (PROFILE lines)")
    parser.add_argument("--profile-top", type=int, default=30, help="PROFILE lines printed")
    args = parser.parse_args()
    if not args.synthetic and not args.data:
        parser.error("--data DIR or --synthetic")
    if args.compile and (args.warmup < 2 or not hasattr(torch, "compile")):
        parser.error("--compile needs --warmup 2 or more and torch 2 (torch.compile)")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False  # 32-true means fp32, as ours
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    method = {"simclr": SimCLR, "dino": Dino, "dinov2": Dinov2}[args.method](args, device)
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    for net in (method.student, method.teacher):
        if net is not None:
            net.to(memory_format=memory_format)
    views = method_views(args.method, args.image_size, INTERPOLATIONS["bilinear"])
    batches = (synthetic_batches(args, device, len(views)) if args.synthetic
               else loader_batches(args, device, views))
    autocast_dtype = {"16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}.get(args.precision)
    scaler = torch.cuda.amp.GradScaler(enabled=args.precision == "16-mixed" and
                                       device.type == "cuda")
    counters = [FlopCounter(method.student.modules())]
    if method.teacher is not None:
        counters.append(FlopCounter(method.teacher.modules()))
    data_wait, start, profiler = 0.0, None, None
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
            if args.profile:
                profiler = start_profiler(device)
            start, data_wait = time.perf_counter(), 0.0
        before = time.perf_counter()
        batch = [v.contiguous(memory_format=memory_format) for v in next(batches)]
        data_wait += time.perf_counter() - before
        with (torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype
              else contextlib.nullcontext()):
            loss = method.loss(batch)
        method.optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        if getattr(method, "clip_norm", 0):
            scaler.unscale_(method.optimizer)
            torch.nn.utils.clip_grad_norm_(method.student.parameters(), method.clip_norm)
        scaler.step(method.optimizer)
        scaler.update()
        method.after_step()
        if step == 0:
            for counter in counters:
                counter.enabled = False
                counter.close()
            if args.compile:
                method.student = torch.compile(method.student)
                if method.teacher is not None:
                    method.teacher = torch.compile(method.teacher)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    if profiler is not None:
        profiler.stop()
    flops_per_step = 3 * counters[0].flops + (counters[1].flops if len(counters) > 1 else 0)
    images_per_s = args.batch_size * args.steps / seconds
    peak = peak_tflops(args, device)
    mfu = flops_per_step * args.steps / seconds / (peak * 1e12) if peak > 0 else 0.0
    memory = (torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else 0.0)
    print(f"RESULT tool=pytorch method={args.method} model={args.model} device={args.device} "
          f"precision={args.precision} channels_last={int(args.channels_last)} "
          f"compile={int(args.compile)} "
          f"synthetic={int(args.synthetic)} image_size={args.image_size} batch={args.batch_size} "
          f"steps={args.steps} images_per_s={images_per_s:.1f} "
          f"data_wait_pct={100 * data_wait / seconds:.1f} "
          f"gflops_per_image={flops_per_step / args.batch_size / 1e9:.2f} mfu_pct={100 * mfu:.1f} "
          f"peak_allocated_mib={memory:.0f} loss={loss.item():.4f}")
    if profiler is not None:
        print_profile(profiler, device, args.steps, args.profile_top)


if __name__ == "__main__":
    main()
