#!/usr/bin/env python3
"""One training step of the YOLO backbone LightlyTrain trains, in PyTorch:
the counterpart of `build/tools/bench_train_step --model
ultralytics/<name>.yaml` (docs/performance.md, issue 34).

    /work/venvs/yolo/bin/python tools/compare/pytorch_yolo_step.py yolov8s 96 96 3

Arguments: model, image size, batch, timed steps. Forward in train mode of
nn.Sequential(*DetectionModel("<name>.yaml").model[:cut]) (cut 9 for
YOLOv8, 11 for YOLO11: LightlyTrain's backbone), loss = sum of the pooled
features, backward, SGD (momentum 0.9, weight decay 1e-4);
torch.set_num_threads(2), 2 warm-up steps. Needs ultralytics and torch.
"""
import resource
import sys
import time

import torch
from ultralytics.nn.tasks import DetectionModel


def main():
    name, size, batch, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(2)
    model = DetectionModel(f"{name}.yaml", verbose=False)
    cut = 9 if name.startswith("yolov8") else 11
    backbone = torch.nn.Sequential(*model.model[:cut]).train()
    optimizer = torch.optim.SGD(backbone.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    x = torch.rand(batch, 3, size, size)
    times = []
    for _ in range(steps + 2):
        start = time.perf_counter()
        loss = backbone(x).mean((2, 3)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    seconds = sum(times[2:]) / steps
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"pytorch {name} {size} px batch {batch}: {batch / seconds:.2f} images/s, "
          f"{seconds:.3f} s per step, peak {peak:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
