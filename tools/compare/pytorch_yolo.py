#!/usr/bin/env python3
"""The backbone LightlyTrain trains of an Ultralytics YOLOv8 / YOLO11 model,
in plain PyTorch: the PyTorch side of first light's YOLO targets (issue 34)
on a GPU node that has PyTorch but not the Ultralytics package (nor network
to install it).

    backbone, channels = yolo_backbone("ultralytics/yolov8s.yaml")

`backbone(x)` is the feature map our student reads (src/nn/yolo.h): YOLOv8's
layers 0-8 (before SPPF), YOLO11's layers 0-10 (SPPF and C2PSA included).
The modules carry Ultralytics' names ("0.conv.weight", "2.m.0.cv1.bn.
running_mean", ...: DetectionModel's "model.<layer>." keys without the
prefix) so that its weights, or ours, load with load_state_dict. The
architecture (Conv = convolution without bias + BatchNorm eps 1e-3 + SiLU;
C2f, C3k2 with Bottleneck or C3k, SPPF, C2PSA's position-sensitive
attention) and the size scaling (depth, width, max channels per size) are
Ultralytics' facts as our C model implements them (src/nn/yolo_config.c).

    /work/venvs/yolo/bin/python tools/compare/pytorch_yolo.py --check

compares every size of both families with Ultralytics' DetectionModel (the
same weights, drawn larger than at initialisation, with random BatchNorm parameters and statistics, eval, fp32 on
the CPU, layer by layer): it needs the ultralytics package (checked with
8.4.190); prints one line per model and exits 1 on a layer whose output
differs by over 1e-5 relative.
"""
import argparse
import math
import sys

import torch
from torch import nn

# Per size: (depth multiple, width multiple, max channels), from the YAMLs.
SCALES = {
    "yolov8": {"n": (0.33, 0.25, 1024), "s": (0.33, 0.50, 1024), "m": (0.67, 0.75, 768),
               "l": (1.00, 1.00, 512), "x": (1.00, 1.25, 512)},
    "yolo11": {"n": (0.50, 0.25, 1024), "s": (0.50, 0.50, 1024), "m": (0.50, 1.00, 512),
               "l": (1.00, 1.00, 512), "x": (1.00, 1.50, 512)},
}
# The backbone rows: (block, repeats, output channels, extra arguments).
YOLOV8_ROWS = [("conv", 1, 64, (3, 2)), ("conv", 1, 128, (3, 2)), ("c2f", 3, 128, (True,)),
               ("conv", 1, 256, (3, 2)), ("c2f", 6, 256, (True,)), ("conv", 1, 512, (3, 2)),
               ("c2f", 6, 512, (True,)), ("conv", 1, 1024, (3, 2)), ("c2f", 3, 1024, (True,))]
YOLO11_ROWS = [("conv", 1, 64, (3, 2)), ("conv", 1, 128, (3, 2)), ("c3k2", 2, 256, (False, 0.25)),
               ("conv", 1, 256, (3, 2)), ("c3k2", 2, 512, (False, 0.25)), ("conv", 1, 512, (3, 2)),
               ("c3k2", 2, 512, (True,)), ("conv", 1, 1024, (3, 2)), ("c3k2", 2, 1024, (True,)),
               ("sppf", 1, 1024, (5,)), ("c2psa", 2, 1024, ())]


class Conv(nn.Module):
    """Convolution (no bias, 'same' padding) + BatchNorm + SiLU (or none)."""

    def __init__(self, c_in, c_out, kernel=1, stride=1, groups=1, act=True):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(c_out, eps=1e-3, momentum=0.03)
        self.act = nn.SiLU() if act else nn.Identity()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c_in, c_out, shortcut, kernel=3, expansion=0.5):
        super().__init__()
        hidden = int(c_out * expansion)
        self.cv1 = Conv(c_in, hidden, kernel)
        self.cv2 = Conv(hidden, c_out, kernel)
        self.add = shortcut and c_in == c_out

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C3k(nn.Module):
    """C3 with n Bottlenecks of kernel 3 and expansion 1 on half the channels."""

    def __init__(self, c_in, c_out, repeats=2, shortcut=True):
        super().__init__()
        hidden = int(c_out * 0.5)
        self.cv1 = Conv(c_in, hidden)
        self.cv2 = Conv(c_in, hidden)
        self.cv3 = Conv(2 * hidden, c_out)
        self.m = nn.Sequential(*(Bottleneck(hidden, hidden, shortcut, 3, 1.0) for _ in range(repeats)))

    def forward(self, x):
        return self.cv3(torch.cat((self.m(self.cv1(x)), self.cv2(x)), 1))


class C2f(nn.Module):
    """Split in two, a chain of blocks on the second half, every output
    concatenated. c3k2: YOLO11's C3k2 (C3k blocks, or Bottlenecks of
    expansion 0.5); else YOLOv8's C2f (Bottlenecks of expansion 1)."""

    def __init__(self, c_in, c_out, repeats, shortcut=True, expansion=0.5, c3k2=False, c3k=False):
        super().__init__()
        self.c = int(c_out * expansion)
        self.cv1 = Conv(c_in, 2 * self.c)
        self.cv2 = Conv((2 + repeats) * self.c, c_out)
        if c3k2:
            blocks = (C3k(self.c, self.c, 2, shortcut) if c3k else Bottleneck(self.c, self.c, shortcut)
                      for _ in range(repeats))
        else:
            blocks = (Bottleneck(self.c, self.c, shortcut, 3, 1.0) for _ in range(repeats))
        self.m = nn.ModuleList(blocks)

    def forward(self, x):
        outputs = list(self.cv1(x).chunk(2, 1))
        for block in self.m:
            outputs.append(block(outputs[-1]))
        return self.cv2(torch.cat(outputs, 1))


class SPPF(nn.Module):
    def __init__(self, c_in, c_out, kernel=5):
        super().__init__()
        hidden = c_in // 2
        self.cv1 = Conv(c_in, hidden)
        self.cv2 = Conv(hidden * 4, c_out)
        self.m = nn.MaxPool2d(kernel, 1, kernel // 2)

    def forward(self, x):
        outputs = [self.cv1(x)]
        for _ in range(3):
            outputs.append(self.m(outputs[-1]))
        return self.cv2(torch.cat(outputs, 1))


class Attention(nn.Module):
    """Multi-head attention over the positions of a feature map with keys of
    half a head's width, plus a depthwise 3x3 convolution of the values."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.key_dim = int(self.head_dim * 0.5)
        self.scale = self.key_dim ** -0.5
        self.qkv = Conv(dim, dim + 2 * self.key_dim * heads, act=False)
        self.proj = Conv(dim, dim, act=False)
        self.pe = Conv(dim, dim, 3, groups=dim, act=False)

    def forward(self, x):
        batch, channels, height, width = x.shape
        qkv = self.qkv(x).view(batch, self.heads, 2 * self.key_dim + self.head_dim, height * width)
        q, k, v = qkv.split([self.key_dim, self.key_dim, self.head_dim], dim=2)
        weights = ((q.transpose(-2, -1) @ k) * self.scale).softmax(dim=-1)
        y = (v @ weights.transpose(-2, -1)).view(batch, channels, height, width)
        return self.proj(y + self.pe(v.reshape(batch, channels, height, width)))


class PSABlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attn = Attention(dim, heads)
        self.ffn = nn.Sequential(Conv(dim, 2 * dim), Conv(2 * dim, dim, act=False))

    def forward(self, x):
        x = x + self.attn(x)
        return x + self.ffn(x)


class C2PSA(nn.Module):
    def __init__(self, channels, repeats):
        super().__init__()
        self.c = channels // 2
        self.cv1 = Conv(channels, 2 * self.c)
        self.cv2 = Conv(2 * self.c, channels)
        self.m = nn.Sequential(*(PSABlock(self.c, self.c // 64) for _ in range(repeats)))

    def forward(self, x):
        a, b = self.cv1(x).split((self.c, self.c), dim=1)
        return self.cv2(torch.cat((a, self.m(b)), 1))


def parse_name(model):
    """'ultralytics/yolo11s.yaml' (or .pt) -> ('yolo11', 's')."""
    stem = model.rpartition("/")[2].partition(".")[0]
    for family in SCALES:
        if stem.startswith(family) and stem[len(family):] in SCALES[family]:
            return family, stem[len(family):]
    raise ValueError(f"not a YOLOv8 / YOLO11 detection model: {model}")


def yolo_backbone(model):
    """(nn.Sequential of the backbone's layers, the feature map's channels)."""
    family, size = parse_name(model)
    depth, width, max_channels = SCALES[family][size]
    rows = YOLOV8_ROWS if family == "yolov8" else YOLO11_ROWS
    layers, c_in = [], 3
    for block, repeats, channels, extra in rows:
        repeats = max(round(repeats * depth), 1) if repeats > 1 else repeats
        c_out = math.ceil(min(channels, max_channels) * width / 8) * 8
        if block == "conv":
            layers.append(Conv(c_in, c_out, *extra))
        elif block == "c2f":
            layers.append(C2f(c_in, c_out, repeats, *extra))
        elif block == "c3k2":
            c3k = extra[0] or size in "mlx"  # Ultralytics forces C3k blocks for m, l, x
            expansion = extra[1] if len(extra) > 1 else 0.5
            layers.append(C2f(c_in, c_out, repeats, True, expansion, c3k2=True, c3k=c3k))
        elif block == "sppf":
            layers.append(SPPF(c_in, c_out, *extra))
        else:
            layers.append(C2PSA(c_in, repeats))
            c_out = c_in
        c_in = c_out
    return nn.Sequential(*layers), c_in


def check_against_ultralytics():
    from ultralytics.nn.tasks import DetectionModel

    worst = 0.0
    torch.manual_seed(0)
    for family in SCALES:
        for size in SCALES[family]:
            name = f"{family}{size}"
            reference = DetectionModel(f"{name}.yaml", verbose=False).eval()
            ours, channels = yolo_backbone(f"ultralytics/{name}.yaml")
            cut = len(ours)
            for module in reference.modules():  # larger weights and non-trivial norms,
                if isinstance(module, nn.Conv2d):  # so attention is far from uniform
                    fan_in = module.weight[0].numel()
                    module.weight.data.normal_(0.0, 1.5 / math.sqrt(fan_in))
                if isinstance(module, nn.BatchNorm2d):
                    module.weight.data.uniform_(0.5, 1.5)
                    module.bias.data.uniform_(-0.2, 0.2)
                    module.running_mean.uniform_(-0.2, 0.2)
                    module.running_var.uniform_(0.5, 1.5)
            ours.load_state_dict(reference.model[:cut].state_dict(), strict=True)
            ours.eval()
            # Layer by layer, each from the same input: a block's own error is
            # not diluted by the layers after it.
            x = torch.randn(2, 3, 128, 128)
            relative = 0.0
            with torch.no_grad():
                for index in range(cut):
                    expected = reference.model[index](x)
                    got = ours[index](x)
                    relative = max(relative, ((got - expected).norm() / expected.norm()).item())
                    x = expected
            worst = max(worst, relative)
            ok = got.shape[1] == channels and relative <= 1e-5
            print(f"{'PASS' if ok else 'FAIL'}  {name}: feature map {tuple(got.shape)}, "
                  f"largest relative difference of a layer {relative:.2e}")
            if not ok:
                return 1
    print(f"every size of both families within {worst:.2e} of Ultralytics")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the ultralytics package")
    args = parser.parse_args()
    if args.check:
        return check_against_ultralytics()
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
