#!/usr/bin/env python3
"""SimCLR training throughput in PyTorch: the baseline of `lightly-train-c train`.

The same work per step as our SimCLR (src/ssl_methods/simclr.c): two views
per image from a DataLoader with LightlyTrain's SimCLR transforms
(torchvision_data.py's, run in worker processes), the views concatenated
through a torchvision ResNet, lightly's SimCLRProjectionHead structure
(Linear without bias, BatchNorm1d, ReLU, Linear without bias, BatchNorm1d),
NT-Xent (temperature 0.1), backward and an SGD step (momentum 0.9, weight
decay 1e-4). Reported: source images per second over the timed steps (the
wall time of each step including the wait for its batch), after warm-up.

    /usr/bin/python3 tools/compare/pytorch_simclr_train.py --data DIR \\
        --image-size 64 --batch-size 32 --steps 10 --num-workers 1 --threads 2
"""
import argparse
import os
import sys
import time

import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchvision_data import (  # noqa: E402
    INTERPOLATIONS, EndlessShuffle, ImageViews, list_images, method_views, seed_worker)


def projection_head(dim, hidden, out):
    return torch.nn.Sequential(
        torch.nn.Linear(dim, hidden, bias=False), torch.nn.BatchNorm1d(hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, out, bias=False), torch.nn.BatchNorm1d(out))


def nt_xent(z0, z1, temperature):
    z = torch.nn.functional.normalize(torch.cat([z0, z1]), dim=1)
    n = z0.shape[0]
    logits = z @ z.T / temperature
    logits.fill_diagonal_(float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(logits.device)
    return torch.nn.functional.cross_entropy(logits, targets)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10, help="timed steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--num-workers", type=int, default=1)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--hidden-dim", type=int, default=2048)
    parser.add_argument("--output-dim", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    paths = list_images(args.data)
    views = method_views("simclr", args.image_size, INTERPOLATIONS["bilinear"])
    loader = torch.utils.data.DataLoader(
        ImageViews(paths, views), batch_size=args.batch_size, drop_last=True,
        sampler=EndlessShuffle(len(paths), 0), num_workers=args.num_workers,
        worker_init_fn=seed_worker)
    backbone = getattr(torchvision.models, args.model)()
    dim = backbone.fc.in_features
    backbone.fc = torch.nn.Identity()
    head = projection_head(dim, args.hidden_dim, args.output_dim)
    parameters = list(backbone.parameters()) + list(head.parameters())
    optimizer = torch.optim.SGD(parameters, lr=0.3 * args.batch_size / 256, momentum=0.9,
                                weight_decay=1e-4)
    batches = iter(loader)
    seconds = 0.0
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        view0, view1 = next(batches)
        z0, z1 = head(backbone(torch.cat([view0, view1]))).chunk(2)
        loss = nt_xent(z0, z1, 0.1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step >= args.warmup:
            seconds += time.perf_counter() - start
    images = args.batch_size * args.steps
    print(f"RESULT tool=pytorch model={args.model} image_size={args.image_size} "
          f"batch={args.batch_size} steps={args.steps} workers={args.num_workers} "
          f"threads={args.threads} images_per_s={images / seconds:.1f} loss={loss.item():.4f}")


if __name__ == "__main__":
    main()
