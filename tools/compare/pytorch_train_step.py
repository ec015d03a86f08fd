#!/usr/bin/env python3
"""One training step of a torchvision ResNet or a timm ViT on CPU in
PyTorch, timed: the yardstick for `build/tools/bench_train_step` (same
model, batch, resolution, threads and step: forward, loss = sum(features *
fixed weights), backward, SGD with momentum 0.9 and weight decay 1e-4).

    /usr/bin/python3 tools/compare/pytorch_train_step.py --model resnet18 \
        --image-size 64 --batch-size 32 --steps 10 --threads 2
    PYTHONPATH=/work/pyref /usr/bin/python3 tools/compare/pytorch_train_step.py \
        --model vit_s16 --image-size 224 --batch-size 16 --steps 5 --threads 2

ViTs (vit_t16 ... vit_l14, as src/nn/vit.h builds them) are timm's
VisionTransformer with DINOv2's block (LayerScale 1e-5, LayerNorm eps 1e-6,
exact GELU); features = the mean of the normalised patch tokens, as ours.
They need timm (PYTHONPATH to a `pip install --target` of timm 1.0.9).

Prints one line starting with RESULT: images/s, seconds per step (and its
forward and backward parts), CPU seconds per step (user + system of the
process's threads) and the peak resident memory of the process (ru_maxrss).
"""
import argparse
import resource
import time

import torch
import torchvision

# name: (patch, width, depth, heads), as src/nn/vit.c's presets.
VITS = {"vit_t16": (16, 192, 12, 3), "vit_t14": (14, 192, 12, 3), "vit_s16": (16, 384, 12, 6),
        "vit_s14": (14, 384, 12, 6), "vit_b16": (16, 768, 12, 12), "vit_b14": (14, 768, 12, 12),
        "vit_l16": (16, 1024, 24, 16), "vit_l14": (14, 1024, 24, 16)}


class MeanPatchTokens(torch.nn.Module):
    """A timm ViT whose features are the mean of its normalised patch tokens."""

    def __init__(self, name, image_size):
        super().__init__()
        from timm.models.vision_transformer import VisionTransformer
        patch, width, depth, heads = VITS[name]
        self.vit = VisionTransformer(img_size=image_size, patch_size=patch, embed_dim=width,
                                     depth=depth, num_heads=heads, mlp_ratio=4.0,
                                     init_values=1e-5, num_classes=0, global_pool="")
        self.feature_dim = width

    def forward(self, images):
        tokens = self.vit.forward_features(images)
        return tokens[:, self.vit.num_prefix_tokens:].mean(dim=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet18",
                        choices=["resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
                                 *VITS])
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
    times = [0.0, 0.0]  # forward, backward of the timed steps

    def step():
        optimizer.zero_grad(set_to_none=False)
        before = time.perf_counter()
        loss = (model(images) * loss_weights).sum()
        middle = time.perf_counter()
        loss.backward()
        times[0] += middle - before
        times[1] += time.perf_counter() - middle
        optimizer.step()
        return loss

    for _ in range(args.warmup):
        step()
    times[0] = times[1] = 0.0
    cpu_start = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    seconds = time.perf_counter() - start
    cpu = sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) - cpu_start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rate = args.batch_size * args.steps / seconds
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, "
          f"{torch.get_num_threads()} thread(s), mkldnn {torch.backends.mkldnn.is_available()}")
    print(f"RESULT tool=pytorch model={args.model} image_size={args.image_size} "
          f"batch={args.batch_size} threads={args.threads} steps={args.steps} "
          f"images_per_s={rate:.2f} seconds_per_step={seconds / args.steps:.4f} "
          f"forward_s={times[0] / args.steps:.4f} backward_s={times[1] / args.steps:.4f} "
          f"cpu_s_per_step={cpu / args.steps:.4f} peak_rss_mb={peak_mb:.0f}")


if __name__ == "__main__":
    main()
