#!/usr/bin/env python3
"""Reads our TensorBoard event files with tensorboard's own EventAccumulator.

Prints, per scalar tag, the number of events and the first and last
(step, value); per image tag, the number of images and their size. With
--expect TAG=COUNT (repeatable) it exits 1 unless TAG has exactly COUNT
scalar events, since TensorBoard silently stops at a bad record instead of
raising.

Needs the `tensorboard` package (not part of `make test`), e.g.
    pip install --target /tmp/tbpkg tensorboard
    PYTHONPATH=/tmp/tbpkg python3 tools/compare/tensorboard_read.py out/run1 \
        --expect train_loss=100
"""
import argparse
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="log directory or one events.out.tfevents.* file")
    parser.add_argument("--expect", action="append", default=[], metavar="TAG=COUNT")
    args = parser.parse_args()

    # 0: keep every event (the default keeps a reservoir sample of 10000).
    accumulator = EventAccumulator(args.path, size_guidance={"scalars": 0, "images": 0})
    accumulator.Reload()
    tags = accumulator.Tags()
    counts = {}
    for tag in sorted(tags["scalars"]):
        events = accumulator.Scalars(tag)
        counts[tag] = len(events)
        first, last = events[0], events[-1]
        print(f"scalar {tag}: {len(events)} events, first (step {first.step}, {first.value!r}),"
              f" last (step {last.step}, {last.value!r})")
    for tag in sorted(tags["images"]):
        images = accumulator.Images(tag)
        sizes = sorted({(image.width, image.height) for image in images})
        print(f"image {tag}: {len(images)} images, sizes {sizes}")

    failed = False
    for expectation in args.expect:
        tag, _, count = expectation.partition("=")
        if counts.get(tag, 0) != int(count):
            print(f"MISMATCH {tag}: expected {count} scalar events, read {counts.get(tag, 0)}")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
