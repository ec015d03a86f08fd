#!/usr/bin/env python3
"""Per-kernel totals of an Nsight Compute CSV: the PROFILE lines of
tools/profile_gpu.sh for our side.

    ncu --nvtx --nvtx-include timed/ --metrics gpu__time_duration.sum \\
        --csv --page raw --print-units base --log-file ours.csv <command>
    python3 tools/compare/ncu_kernels.py ours.csv --steps 2 --top 30

Reads the row whose cells include "Kernel Name" as the header, skips the
units row under it, sums gpu__time_duration.sum (nanoseconds with
--print-units base; a units row saying usecond or msecond is honoured) per
kernel name with its template and argument lists cut off (so the fp16 and
bf16 instances of one kernel template count apart only by name), and
prints, largest first:
    PROFILE tool=lightly-train-c kernels=K us_per_step=T
    PROFILE tool=lightly-train-c us_per_step=X calls_per_step=C share_pct=S kernel=NAME
"""
import argparse
import csv
import sys

METRIC = "gpu__time_duration.sum"
UNIT_TO_MICROS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3,
                  "ms": 1e3, "second": 1e6, "s": 1e6, "": 1e-3}


def short_name(name):
    """void foo<__half, 4>(int, float const*) -> foo<__half, 4>; a cuDNN or
    cuBLAS name stays whole up to its argument list."""
    name = name.strip()
    if name.startswith("void "):
        name = name[5:]
    depth = 0
    for i, c in enumerate(name):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            return name[:i]
    return name


def read_kernels(path):
    """[(name, microseconds)] of every kernel launch in the CSV."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = next((i for i, r in enumerate(rows) if "Kernel Name" in r and METRIC in r), None)
    if header is None:
        sys.exit(f"ncu_kernels.py: {path}: no header row with 'Kernel Name' and {METRIC}")
    names = rows[header]
    name_col, time_col = names.index("Kernel Name"), names.index(METRIC)
    scale = UNIT_TO_MICROS[""]
    launches = []
    for row in rows[header + 1:]:
        if len(row) <= max(name_col, time_col):
            continue
        value = row[time_col].replace(",", "")
        try:
            launches.append((short_name(row[name_col]), float(value) * scale))
        except ValueError:  # the units row
            scale = UNIT_TO_MICROS.get(value.strip(), scale)
    return launches


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv")
    parser.add_argument("--steps", type=int, default=1, help="steps the profile covers")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--tool", default="lightly-train-c")
    args = parser.parse_args()
    launches = read_kernels(args.csv)
    if not launches:
        sys.exit(f"ncu_kernels.py: {args.csv}: no kernel rows (was the NVTX range found?)")
    totals = {}
    for name, micros in launches:
        total, calls = totals.get(name, (0.0, 0))
        totals[name] = (total + micros, calls + 1)
    overall = sum(t for t, _ in totals.values()) or 1.0
    print(f"PROFILE tool={args.tool} kernels={len(totals)} "
          f"us_per_step={overall / args.steps:.1f}")
    for name, (micros, calls) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"PROFILE tool={args.tool} us_per_step={micros / args.steps:.1f} "
              f"calls_per_step={calls / args.steps:g} share_pct={100 * micros / overall:.1f} "
              f"kernel={name}")


if __name__ == "__main__":
    main()
