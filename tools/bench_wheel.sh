#!/usr/bin/env bash
# The time from `pip install` of the wheel to the first training step, the
# figure docs/performance.md ("The pip wheel") reports. Run as:
#   tools/bench_wheel.sh WHEEL BUILD_DIR [REPEATS]
# Each repeat: a fresh venv with its own pip (python3 -m venv, as a user
# makes one; not timed), `pip install --no-index WHEEL` (timed), then
# lightly_train_c.train(...) on 64 generated 64 px JPEGs (resnet18, SimCLR,
# batch 32, the CPU) until the program prints its first step (timed from
# the call), and the same run started as the command (the installed
# program, no Python) for comparison. Prints one line per repeat and the
# wheel's size.
set -eu
if [ $# -lt 2 ]; then
    echo "usage: $0 WHEEL BUILD_DIR [REPEATS]" >&2
    exit 2
fi
wheel=$(readlink -f "$1")
build=$(readlink -f "$2")
repeats=${3:-3}
work=$(mktemp -d /tmp/ltc-bench-wheel-XXXXXX)
trap 'rm -rf "$work"' EXIT
"$build/tests/e2e/make_images" "$work/images" 64 >/dev/null
echo "wheel: $(basename "$wheel"), $(du -m "$wheel" | cut -f1) MB ($(stat -c %s "$wheel") bytes)"
# first_step.py api|command: seconds from the start to the first step.
cat >"$work/first_step.py" <<EOF
import os, sys, time, subprocess
api = [sys.executable, "-c", """
import lightly_train_c
lightly_train_c.train(out='$work/run', data='$work/images', model='torchvision/resnet18',
                      method='simclr', batch_size=32, epochs=1, overwrite=True,
                      transform_args={'image_size': 64})
"""]
command = [os.path.join(os.path.dirname(sys.executable), "lightly-train-c"), "train",
           "--out", "$work/run", "--data", "$work/images", "--model", "resnet18",
           "--method", "simclr", "--batch-size", "32", "--epochs", "1", "--overwrite",
           "--image-size", "64"]
started = time.time()
child = subprocess.Popen(api if sys.argv[1] == "api" else command, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
lines = []
for line in child.stdout:
    if line.startswith("epoch 1/1  step 1/"):
        print(f"{time.time() - started:.2f}")
        break
    lines.append(line)
else:
    sys.exit(f"{sys.argv[1]}: no first step; its output ended with: {''.join(lines[-3:])}")
child.kill()
child.wait()
EOF
for repeat in $(seq "$repeats"); do
    rm -rf "$work/venv"
    python3 -m venv "$work/venv"
    started=$(date +%s.%N)
    "$work/venv/bin/python" -m pip install --no-index --no-deps --disable-pip-version-check -q "$wheel"
    installed=$(date +%s.%N)
    api=$("$work/venv/bin/python" "$work/first_step.py" api)
    command=$("$work/venv/bin/python" "$work/first_step.py" command)
    echo "repeat $repeat: pip install $(echo "$installed - $started" | bc | cut -c1-5) s," \
         "train() to the first step $api s (the command: $command s)"
done
