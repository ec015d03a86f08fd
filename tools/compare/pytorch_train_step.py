#!/usr/bin/env python3
"""One training step of a torchvision ResNet on CPU in PyTorch, timed: the
yardstick for `build/tools/bench_train_step` (same model, batch, resolution,
threads and step: forward, loss = sum(features * fixed weights), backward,
SGD with momentum 0.9 and weight decay 1e-4).

    /usr/bin/python3 tools/compare/pytorch_train_step.py --model resnet18 \
        --image-size 64 --batch-size 32 --steps 10 --threads 2

Prints one line starting with RESULT: images/s, seconds per step and the
peak resident memory of the process (ru_maxrss).
"""
import argparse
import resource
import time

import torch
import torchvision


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet18",
                        choices=["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"])
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--channels-last", type=int, default=1,
                        help="1: NHWC memory format (what lightly-train-c uses)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = getattr(torchvision.models, args.model)()
    model.fc = torch.nn.Identity()
    model.train()
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format)
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    images = images.contiguous(memory_format=memory_format)
    features_dim = 2048 if args.model in ("resnet50", "resnet101", "resnet152") else 512
    loss_weights = torch.randn(args.batch_size, features_dim)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)

    def step():
        optimizer.zero_grad(set_to_none=False)
        loss = (model(images) * loss_weights).sum()
        loss.backward()
        optimizer.step()
        return loss

    for _ in range(args.warmup):
        step()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rate = args.batch_size * args.steps / seconds
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, "
          f"{torch.get_num_threads()} thread(s), mkldnn {torch.backends.mkldnn.is_available()}")
    print(f"RESULT tool=pytorch model={args.model} image_size={args.image_size} "
          f"batch={args.batch_size} threads={args.threads} steps={args.steps} "
          f"images_per_s={rate:.2f} seconds_per_step={seconds / args.steps:.4f} "
          f"peak_rss_mb={peak_mb:.0f}")


if __name__ == "__main__":
    main()
