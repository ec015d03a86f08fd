#!/usr/bin/env python3
"""`lightly-train-c embed` written in PyTorch + timm, for the CPU benchmark of
docs/performance.md ("ConvNeXt-T on CPU"): every image of --data decoded
with Pillow, resized to --image-size x --image-size (no crop; torchvision's
Resize, bilinear with antialiasing), ImageNet
normalisation, a DataLoader with --num-workers worker processes, then in
batches under torch.no_grad() the model's features: timm's ConvNeXt (or
torchvision's: --model torchvision/convnext_tiny) with LightlyTrain's
pooling, the mean of the last stage. The embeddings are written to --out
(.npy, rows in file-name order) so the run does what ours does.

    python3 tools/compare/pytorch_embed.py --data DIR --out emb.npy \\
        --model timm/convnext_tiny --weights model.safetensors --threads 2

--weights: a safetensors file in the model's own naming (e.g. ours
exported with `lightly-train-c export --format timm`); without it, random
weights. Prints one line starting with RESULT: images, wall seconds, images/s,
CPU seconds of the process and its workers (user + system), the peak
resident memory of the main process.
"""
import argparse
import os
import resource
import time

import numpy as np
import torch
import torchvision
from PIL import Image
from torchvision import transforms

EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".bmp")


class Folder(torch.utils.data.Dataset):
    def __init__(self, root, size):
        self.files = sorted(os.path.join(d, f) for d, _, names in os.walk(root) for f in names
                            if f.lower().endswith(EXTENSIONS))
        self.transform = transforms.Compose([
            transforms.Resize((size, size)), transforms.ToTensor(),
            transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])

    def __len__(self):
        return len(self.files)

    def __getitem__(self, index):
        with Image.open(self.files[index]) as image:
            return self.transform(image.convert("RGB"))


def make_model(name, weights):
    family, _, size = name.partition("/")
    if family == "torchvision":
        model = getattr(torchvision.models, size)()
        trunk = model.features
    else:
        import timm
        model = timm.create_model(size, num_classes=0)
        trunk = model.forward_features
    if weights:
        from safetensors.torch import load_file
        missing, unexpected = model.load_state_dict(load_file(weights), strict=False)
        if unexpected or any(not k.startswith(("classifier", "head")) for k in missing):
            raise SystemExit(f"{weights}: missing {missing}, unexpected {unexpected}")
    model.eval().requires_grad_(False).to(memory_format=torch.channels_last)
    return lambda images: trunk(images).mean(dim=(2, 3))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", default="timm/convnext_tiny")
    parser.add_argument("--weights")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--num-workers", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    cpu_start = resource.getrusage(resource.RUSAGE_SELF)
    dataset = Folder(args.data, args.image_size)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size,
                                         num_workers=args.num_workers)
    forward = make_model(args.model, args.weights)
    rows = []
    with torch.no_grad():
        for images in loader:
            rows.append(forward(images.contiguous(memory_format=torch.channels_last)))
    np.save(args.out, torch.cat(rows).numpy())
    seconds = time.perf_counter() - start
    own, workers = resource.getrusage(resource.RUSAGE_SELF), \
        resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (own.ru_utime + own.ru_stime - cpu_start.ru_utime - cpu_start.ru_stime +
           workers.ru_utime + workers.ru_stime)
    print(f"RESULT tool=pytorch mode=embed model={args.model} images={len(dataset)} "
          f"image_size={args.image_size} batch={args.batch_size} workers={args.num_workers} "
          f"threads={args.threads} seconds={seconds:.2f} images_per_s={len(dataset) / seconds:.2f} "
          f"cpu_s={cpu:.2f} peak_rss_mb={own.ru_maxrss / 1024:.0f}")


if __name__ == "__main__":
    main()
