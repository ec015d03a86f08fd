#!/usr/bin/env python3
"""Checks a train run's TensorBoard events against its metrics.jsonl.

Reads the run folder's event file(s) with tensorboard's own EventAccumulator
(what `tensorboard --logdir` shows) and checks that
  - the scalar tags are exactly the keys of metrics.jsonl (without "step"),
  - every tag has an event at exactly the steps metrics.jsonl lists,
  - every value equals metrics.jsonl's value rounded to float32 (events store
    float32, metrics.jsonl the same number as a double), NaN/inf included
    (metrics.jsonl writes them as null),
  - there is one "augmentations" image, at step 0.
Prints one line per problem and exits 1 if there is any, else prints a
summary and exits 0. For a resumed run, metrics.jsonl's last line per step
wins (a resumed run rewrites the steps after its checkpoint), as it does in
TensorBoard.

Used by tests/e2e/train.sh when `import tensorboard` works; needs the
`tensorboard` package, e.g.
    pip install --target /tmp/tbpkg tensorboard
    PYTHONPATH=/tmp/tbpkg python3 tools/compare/tensorboard_check.py out/run1
"""
import argparse
import json
import math
import os
import struct
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def float32(value):
    """value rounded to the nearest float32, as a Python float."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


def read_metrics(path):
    """{tag: {step: value}} from metrics.jsonl, the last line of a step winning."""
    metrics = {}
    with open(path) as lines:
        for line in lines:
            record = json.loads(line)
            step = record.pop("step")
            for tag, value in record.items():
                metrics.setdefault(tag, {})[step] = math.nan if value is None else value
    return metrics


def same_value(event_value, metric_value):
    expected = float32(metric_value) if math.isfinite(metric_value) else metric_value
    if math.isnan(expected):
        return math.isnan(event_value)
    return event_value == expected


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a train --out folder")
    args = parser.parse_args()

    metrics = read_metrics(os.path.join(args.run, "metrics.jsonl"))
    # 0: keep every event (the default keeps a reservoir sample of 10000).
    accumulator = EventAccumulator(args.run, size_guidance={"scalars": 0, "images": 0})
    accumulator.Reload()
    tags = accumulator.Tags()

    problems = []
    if set(tags["scalars"]) != set(metrics):
        problems.append(f"scalar tags {sorted(tags['scalars'])} differ from metrics.jsonl's "
                        f"{sorted(metrics)}")
    compared = 0
    for tag in sorted(set(tags["scalars"]) & set(metrics)):
        events = {event.step: event.value for event in accumulator.Scalars(tag)}
        if sorted(events) != sorted(metrics[tag]):
            problems.append(f"{tag}: event steps {sorted(events)} differ from metrics.jsonl's "
                            f"{sorted(metrics[tag])}")
            continue
        for step, value in sorted(metrics[tag].items()):
            compared += 1
            if not same_value(events[step], value):
                problems.append(f"{tag} step {step}: event {events[step]!r}, metrics.jsonl "
                                f"{value!r} (float32 {float32(value)!r})")
    images = accumulator.Images("augmentations") if "augmentations" in tags["images"] else []
    if [image.step for image in images] != [0]:
        problems.append(f"augmentations: expected one image at step 0, read steps "
                        f"{[image.step for image in images]}")

    for problem in problems:
        print(f"MISMATCH {problem}")
    if problems:
        return 1
    print(f"ok: {len(metrics)} scalar tags, {compared} values equal to metrics.jsonl, "
          f"augmentations image {images[0].width}x{images[0].height} at step 0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
