#!/usr/bin/python3
"""Input-pipeline throughput of PyTorch's DataLoader with torchvision + Pillow
on a folder of images: the baseline that lightly-train-c's bench-data is
compared with.

    tools/compare/torchvision_data.py --data DIR --method simclr|dino \\
        [--batch-size 64] [--num-workers N] [--steps S] [--image-size 224]

Every image under DIR (recursive, following symlinks; extensions as Pillow
opens them, case-insensitive) is loaded like torchvision's ImageFolder
(PIL open + convert("RGB")) and turned into the views of LightlyTrain's
default transforms (../shared/reference/lightlytrain.md, "View transforms"),
written with torchvision transforms the way lightly builds them:
  simclr: 2 x [RandomResizedCrop(size, scale 0.08-1), flip 0.5,
          ColorJitter(0.8, 0.8, 0.8, 0.2) p 0.8, grey 0.2, blur p 0.5].
  dino:   global 1 [RRC(size, 0.14-1), flip, ColorJitter(0.4, 0.4, 0.2, 0.1)
          p 0.8, grey 0.2, blur p 1.0], global 2 [same, blur p 0.1, solarize
          p 0.2], 6 x local [RRC(96, 0.05-0.14), flip, jitter, grey, blur p 0.5].
  Blur is PIL ImageFilter.GaussianBlur(radius=sigma), sigma uniform 0.1-2,
  as lightly does it; then ToTensor + Normalize(ImageNet mean/std).
Batches are collated into float32 NCHW tensors, as a training loop gets them.

Timing: the first 2 batches are warm-up (worker start, first reads) and not
counted; then --steps batches are timed. images/s counts source images
(batch_size x batches), not views. cpu_s is the CPU time that the main process
and the workers used meanwhile; images_per_cpu_s (images per CPU-second) is
the figure to compare when other jobs share the cores. The last line is the
summary:
    RESULT tool=torchvision method=simclr workers=2 batch=64 steps=50 ... images_per_s=...

Debian bookworm's python3-torchvision 0.14 has everything used here (its
GaussianBlur takes a kernel size, so the PIL blur is written out below, as in
lightly). Run it with Debian's /usr/bin/python3.
"""
import argparse
import os
import random
import sys
import time

import torch
import torch.utils.data
import torchvision
from PIL import Image, ImageFilter, ImageOps
from torchvision import transforms as T

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".ppm", ".pgm",
                    ".pbm", ".pnm", ".gif")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
WARMUP_BATCHES = 2
INTERPOLATIONS = {"bilinear": T.InterpolationMode.BILINEAR,
                  "bicubic": T.InterpolationMode.BICUBIC,
                  "box": T.InterpolationMode.BOX}


class PilGaussianBlur:
    """Blurs with probability p, sigma uniform in sigma_range (lightly's GaussianBlur)."""

    def __init__(self, p, sigma_range=(0.1, 2.0)):
        self.p, self.sigma_range = p, sigma_range

    def __call__(self, image):
        if random.random() < self.p:
            sigma = random.uniform(*self.sigma_range)
            return image.filter(ImageFilter.GaussianBlur(radius=sigma))
        return image


class PilSolarize:
    """Solarizes with probability p at threshold 128 (lightly's RandomSolarization)."""

    def __init__(self, p):
        self.p = p

    def __call__(self, image):
        return ImageOps.solarize(image, threshold=128) if random.random() < self.p else image


def view_transform(size, scale, jitter, blur_p, solarize_p, interpolation):
    steps = [
        T.RandomResizedCrop(size, scale=scale, ratio=(3 / 4, 4 / 3), interpolation=interpolation),
        T.RandomHorizontalFlip(p=0.5),
        T.RandomApply([T.ColorJitter(*jitter)], p=0.8),
        T.RandomGrayscale(p=0.2),
        PilGaussianBlur(blur_p),
    ]
    if solarize_p > 0:
        steps.append(PilSolarize(solarize_p))
    steps += [T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    return T.Compose(steps)


def method_views(method, image_size, interpolation):
    if method == "simclr":
        one = view_transform(image_size, (0.08, 1.0), (0.8, 0.8, 0.8, 0.2), 0.5, 0.0, interpolation)
        return [one, one]
    # dino: 2 global crops of scale (0.14, 1) + 6 local of 96 px; dinov2 (LightlyTrain's
    # DINOv2 transform): (0.32, 1) + 8 local of 98 px (a multiple of the patch size 14)
    jitter = (0.4, 0.4, 0.2, 0.1)
    split, local_size, local_views = (0.32, 98, 8) if method == "dinov2" else (0.14, 96, 6)
    global_1 = view_transform(image_size, (split, 1.0), jitter, 1.0, 0.0, interpolation)
    global_2 = view_transform(image_size, (split, 1.0), jitter, 0.1, 0.2, interpolation)
    local = view_transform(local_size, (0.05, split), jitter, 0.5, 0.0, interpolation)
    return [global_1, global_2] + [local] * local_views


class ImageViews(torch.utils.data.Dataset):
    def __init__(self, paths, views):
        self.paths, self.views = paths, views

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        with open(self.paths[index], "rb") as f:  # as torchvision's pil_loader
            image = Image.open(f).convert("RGB")
        return [view(image) for view in self.views]


class EndlessShuffle(torch.utils.data.Sampler):
    """A new random permutation each pass, without end: no epoch boundary
    (and no worker restart) inside the timed window."""

    def __init__(self, count, seed):
        self.count, self.seed = count, seed

    def __iter__(self):
        generator = torch.Generator()
        generator.manual_seed(self.seed)
        while True:
            yield from torch.randperm(self.count, generator=generator).tolist()


def list_images(top):
    if not os.path.isdir(top):
        sys.exit(f"torchvision_data: --data {top}: not a directory")
    paths = []
    for root, _, files in os.walk(top, followlinks=True):
        paths += [os.path.join(root, f) for f in files if f.lower().endswith(IMAGE_EXTENSIONS)]
    if not paths:
        sys.exit(f"torchvision_data: --data {top}: no images found")
    return sorted(paths)


def cpu_seconds(pids):
    """User + system CPU time of the given processes (Linux /proc), so that a
    result can be judged on a machine where other work competes for cores."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # the name may hold spaces
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total


def seed_worker(worker_id):
    random.seed(torch.initial_seed() % 2**32)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--method", choices=["simclr", "dino"], default="simclr")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--num-workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--steps", type=int, default=50, help="timed batches (after 2 warm-up)")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--interpolation", choices=sorted(INTERPOLATIONS), default="bilinear",
                        help="RandomResizedCrop resampling (PIL; box is closest to cv2 area)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.batch_size < 1 or args.steps < 1 or args.num_workers < 0:
        sys.exit("torchvision_data: --batch-size and --steps must be >= 1, --num-workers >= 0")

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    paths = list_images(args.data)
    views = method_views(args.method, args.image_size, INTERPOLATIONS[args.interpolation])
    loader = torch.utils.data.DataLoader(
        ImageViews(paths, views), batch_size=args.batch_size, drop_last=True,
        sampler=EndlessShuffle(len(paths), args.seed), num_workers=args.num_workers,
        worker_init_fn=seed_worker)
    batches = iter(loader)
    for _ in range(WARMUP_BATCHES):
        next(batches)
    # _workers is a private attribute of the DataLoader iterator (torch 1.x, 2.x).
    pids = [os.getpid()] + [w.pid for w in getattr(batches, "_workers", [])]
    cpu_start = cpu_seconds(pids)
    start = time.perf_counter()
    for _ in range(args.steps):
        next(batches)
    seconds = time.perf_counter() - start
    cpu = cpu_seconds(pids) - cpu_start

    images = args.batch_size * args.steps
    per_s = images / seconds
    workers = max(1, args.num_workers)  # 0 workers: the main process does the work
    print(f"torchvision {torchvision.__version__}, torch {torch.__version__}, "
          f"{len(paths)} images in {args.data}, {len(views)} views/image")
    print(f"RESULT tool=torchvision method={args.method} workers={args.num_workers} "
          f"batch={args.batch_size} steps={args.steps} image_size={args.image_size} "
          f"images={images} seconds={seconds:.2f} images_per_s={per_s:.1f} "
          f"images_per_s_per_worker={per_s / workers:.1f} cpu_s={cpu:.2f} "
          f"images_per_cpu_s={images / cpu:.1f}")


if __name__ == "__main__":
    main()
