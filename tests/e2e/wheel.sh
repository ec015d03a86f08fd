#!/usr/bin/env bash
# The pip wheel (make wheel, tools/make_wheel.py) of the program already
# built, installed with `pip install --no-index` into a fresh venv that has
# no build tree on its paths (python -I, run from an empty folder):
# - its tag is manylinux_2_X, and the installed program loads no library
#   from the system beyond the manylinux list (ldd);
# - the console script and `python -m lightly_train_c` run the program;
# - a LightlyTrain-style lightly_train_c.train(...) call trains on the CPU,
#   with its arguments mapped to the program's options and the reason for
#   the CPU in train.log;
# - embed_numpy returns the rows and file names of the embed command's .npy
#   (where numpy is importable in the venv, which sees the system's
#   packages: Debian's python3-numpy, `make deps`; otherwise skipped, said
#   in the log);
# - a bad argument raises ProgramError with the program's one-line error and
#   exit status 2; an unknown one TypeError listing the accepted ones;
#   file names that are not UTF-8 come back from embed_numpy as os.listdir
#   gives them;
# - train without method runs distillation (LightlyTrain's default);
# - the package's unit tests (tests/python, in the venv) map arguments to
#   options and refuse wrong values naming the argument;
#   transform_args go to the program, which refuses what it cannot map
#   (exit 2: ProgramError);
# - SIGINT to Python (a notebook's interrupt reaches only the kernel) stops
#   the run with a checkpoint and raises KeyboardInterrupt;
#   resume_interrupted=True finishes it;
# - the launcher puts the nvidia/*/lib folders of NVIDIA's pip packages on
#   LD_LIBRARY_PATH: with a fake package layout in the venv, --version finds
#   cuDNN, cuBLAS and NCCL there.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init wheel
here=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(readlink -f "$bin")
build=$(readlink -f "$build")
# Debian's python3 where there is one: `make deps` installs python3-venv and
# python3-numpy for it (a python3 earlier on PATH, pyenv's say, sees neither).
python=${LTC_PYTHON:-$(command -v /usr/bin/python3 || command -v python3)}
"$python" -c "import venv" 2>/dev/null || { fail "$python has no venv module (make deps: python3-venv)"; e2e_finish; }

version=$("$bin" --version | sed -n '1s/^lightly-train-c \([0-9.]*\) .*/\1/p')
started=$(date +%s.%N)
LTC_WHEEL_COMPRESSION=1 "$python" "$here/tools/make_wheel.py" "$build" "$version" \
  "$work/dist" >"$work/make_wheel.log" 2>&1 || fail "make_wheel.py failed: $(cat "$work/make_wheel.log")"
wheel=$(ls "$work"/dist/*.whl 2>/dev/null)
[[ "$(basename "$wheel")" =~ ^lightly_train_c-$version-py3-none-manylinux_2_[0-9]+_x86_64\.whl$ ]] ||
  fail "wheel name: '$wheel'"
head -n 2 "$work/make_wheel.log"
echo "wheel built in $(echo "$(date +%s.%N) - $started" | bc) s"

# A venv without pip of its own (creating one with pip takes 5 to 20 s): a
# pip that takes --python (pip >= 23.1: this python's, else python3's on
# PATH) installs into it when there is one, else the venv gets pip.
mkdir "$work/cwd"
cd "$work/cwd" || exit 1
venv="$work/venv"
pip_started=$(date +%s.%N)
pip_host=
for candidate in "$python" python3; do
  if "$candidate" -m pip --help 2>/dev/null | grep -q -- "--python <python>"; then
    pip_host=$candidate
    break
  fi
done
if [ -n "$pip_host" ]; then
  "$python" -m venv --without-pip --system-site-packages "$venv" || fail "venv"
  pip=("$pip_host" -m pip --python "$venv/bin/python")
else
  "$python" -m venv --system-site-packages "$venv" || fail "venv with pip"
  pip=("$venv/bin/python" -m pip)
fi
"${pip[@]}" install --no-index --no-deps --disable-pip-version-check -q "$wheel" ||
  fail "pip install $wheel"
py=("$venv/bin/python" -I)
package=$("${py[@]}" -c "import lightly_train_c, os; print(os.path.dirname(lightly_train_c.__file__))")
[[ "$package" == "$venv"/* ]] || fail "lightly_train_c imported from '$package', not the venv"

# Self-contained: every library the installed program loads is the wheel's
# or on every manylinux system.
missing=$(ldd "$package/bin/lightly-train-c" | awk '/=> / { print $1, $3 }' |
  while read -r name path; do
    [[ "$(readlink -f "$path")" == "$package/lib/"* ]] && continue
    grep -qxF "$name" "$here/tools/manylinux_libs.txt" || echo "$name ($path)"
  done)
[ -z "$missing" ] || fail "the installed program loads libraries from outside the wheel: $missing"

expect 0 "^lightly-train-c $version \(MPI: (yes|no), CUDA: (yes|no)\)$" -- "$venv/bin/lightly-train-c" --version
expect 0 "^usage: lightly-train-c train --data DIR" -- "${py[@]}" -m lightly_train_c train --help

# ---- train through the API, the way LightlyTrain is called -----------------------
"$build/tests/e2e/make_images" "$work/images" 8 >/dev/null || fail "make_images"
cat >"$work/train.py" <<EOF
import time, lightly_train_c as lightly_train
started = time.time()
lightly_train.train(
    out="$work/run", data="$work/images", model="torchvision/resnet18", method="simclr",
    method_args={"temperature": 0.2}, epochs=1, batch_size=4, num_workers=1,
    transform_args={"image_size": (32, 32), "random_resize": {"min_scale": 0.3},
                    "color_jitter": {"prob": 0.5}, "random_gray_scale": 0.1},
    threads=1)
print(f"train returned after {time.time() - started:.2f} s")
EOF
output=$("${py[@]}" "$work/train.py" 2>&1) || fail "train through the API: $output"
first_step=$(date +%s.%N)
printf '%s\n' "$output" | grep -q "^epoch 1/1  step 2/2" || fail "train: no progress streamed: $output"
log="$work/run/train.log"
grep -q "command: train data=$work/images out=$work/run model=resnet18 method=simclr method_arg=temperature=0.2 epochs=1 batch_size=4 num_workers=1 'transform_args.image_size=\\[32,32\\]' transform_args.random_resize.min_scale=0.3 transform_args.color_jitter.prob=0.5 transform_args.random_gray_scale=0.1 threads=1$" "$log" ||
  fail "train: the options in train.log: $(grep command: "$log")"
grep -q "accelerator: cpu (--accelerator auto: " "$log" ||
  fail "train: no reason for the CPU in train.log: $(grep accelerator: "$log")"
[ -s "$work/run/exported_models/exported_last.safetensors" ] || fail "train: no exported backbone"
echo "pip install to the end of a 2-step run: $(echo "$first_step - $pip_started" | bc) s"

# LightlyTrain's default method, the program's too: distillation (here from
# a small random ViT teacher file; without method_args the teacher is
# dinov3/vitb16, fetched by name: tests/e2e/weights.sh).
"$build/tests/e2e/make_backbone" "$work/vit_t14.safetensors" vit_t14 5 56 >/dev/null ||
  fail "make_backbone vit_t14"
output=$("${py[@]}" -c "import lightly_train_c
lightly_train_c.train(out='$work/default', data='$work/images', batch_size=4, max_steps=1,
                      accelerator='cpu', image_size=56, num_workers=1, threads=1,
                      method_args={'teacher': '$work/vit_t14.safetensors'})" 2>&1) ||
  fail "train without method: $output"
grep -q "train: resnet18, distillation, " "$work/default/train.log" ||
  fail "train without method did not run distillation: $(grep ' train: ' "$work/default/train.log")"

# ---- the package's unit tests (tests/python): arguments to options, wrong ones ---------
output=$("${py[@]}" -m unittest discover -s "$here/tests/python" 2>&1) ||
  fail "tests/python: $output"
printf '%s\n' "$output" | tail -n 1 | grep -q "^OK" || fail "tests/python: $output"
printf '%s\n' "$output" | grep "^Ran "

# ---- embed_numpy = the embed command's .npy ------------------------------------------
model="$work/run/exported_models/exported_last.safetensors"
"$venv/bin/lightly-train-c" embed --data "$work/images" --checkpoint "$model" --out "$work/e.npy" \
  --image-size 32 --num-workers 1 >/dev/null 2>&1 || fail "embed command"
if "${py[@]}" -c "import numpy" 2>/dev/null; then
  cat >"$work/embed.py" <<EOF
import numpy, lightly_train_c
rows, names = lightly_train_c.embed_numpy(data="$work/images", checkpoint="$model",
                                          image_size=32, batch_size=3, num_workers=1)
expected = numpy.load("$work/e.npy")
assert rows.dtype == numpy.float32 and rows.shape == expected.shape, (rows.shape, expected.shape)
assert numpy.array_equal(rows, expected), abs(rows - expected).max()
assert list(names) == open("$work/e.npy.filenames.txt").read().splitlines(), names
print("embed_numpy:", rows.shape)
EOF
  output=$("${py[@]}" "$work/embed.py" 2>&1) || fail "embed_numpy: $output"
  # File names that are not UTF-8 come back as os.listdir gives them.
  cat >"$work/embed_names.py" <<EOF
import os, shutil, lightly_train_c
images, folder = b"$work/images/class0/", b"$work/names/"
os.mkdir(folder)
names = [b"latin1_\xe9.jpg", b"utf8_\xc3\xa9.jpg"]
for source, name in zip(sorted(os.listdir(images)), names):
    shutil.copy(images + source, folder + name)
rows, found = lightly_train_c.embed_numpy(data=folder, checkpoint="$model", image_size=32,
                                          num_workers=1)
assert sorted(found) == sorted(os.listdir(os.fsdecode(folder))), found
assert sorted(map(os.fsencode, found)) == names and len(rows) == 2, (found, rows.shape)
EOF
  output=$("${py[@]}" "$work/embed_names.py" 2>&1) || fail "embed_numpy, non-UTF-8 names: $output"
else
  echo "skipped: embed_numpy (numpy is not importable in the venv; Debian: python3-numpy)"
fi

# ---- errors ----------------------------------------------------------------------------
cat >"$work/errors.py" <<EOF
import lightly_train_c
try:
    lightly_train_c.train(out="$work/bad", data="$work/images", model="resnet99")
except lightly_train_c.ProgramError as error:
    print(f"ProgramError {error.exit_status}: {error.message}")
try:
    lightly_train_c.train(out="$work/bad", data="$work/images", modle="resnet18")
except TypeError as error:
    print(f"TypeError: {error}")
# transform_args the program cannot map: refused by it, naming the argument
# (the mapping itself: tests/test_transform_args.c).
for bad in ({"color_jitter": {"brightness": 0.4}}, {"image_size": (32, 64)},
            {"random_rotation": {"prob": 0.5, "degrees": "x"}}):
    try:
        lightly_train_c.train(out="$work/bad", data="$work/images", model="resnet18",
                              method="simclr", transform_args=bad)
        print(f"accepted: {bad}")
    except lightly_train_c.ProgramError as error:
        if error.exit_status != 2 or "transform_args." not in error.message:
            print(f"accepted: {bad}: {error.message}")
print("transform_args mapped")
EOF
output=$("${py[@]}" "$work/errors.py" 2>/dev/null)
printf '%s\n' "$output" | grep -q "^ProgramError 2: lightly-train-c train: --model: expected one of resnet18, .*got 'resnet99'$" ||
  fail "a bad model: $output"
printf '%s\n' "$output" | grep -q "^TypeError: train() got unknown argument(s) 'modle'; accepted: .*max_steps, max_time, method, .*transform_args" ||
  fail "an unknown argument: $output"
printf '%s\n' "$output" | grep -q "^transform_args mapped$" || fail "transform_args: $output"
printf '%s\n' "$output" | grep -q "^accepted: " && fail "transform_args took what it cannot map: $output"
[ -e "$work/bad" ] && fail "a refused run wrote its out folder"

# ---- Ctrl-C: SIGINT to Python only, as a notebook's interrupt --------------------------
cat >"$work/interrupt.py" <<EOF
import signal, sys, lightly_train_c
signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job ignores SIGINT
arguments = dict(out="$work/stop", data="$work/images", method="simclr", batch_size=4, num_workers=1, threads=1,
                 max_steps=12, log_every=1, image_size=32)
try:
    lightly_train_c.train(**arguments)
except KeyboardInterrupt as interrupt:
    print(f"KeyboardInterrupt: {interrupt}")
lightly_train_c.train(**arguments, resume_interrupted=True)
EOF
"${py[@]}" "$work/interrupt.py" >"$work/interrupt.log" 2>&1 &
pid=$!
for _ in $(seq 300); do
  [ -s "$work/stop/metrics.jsonl" ] || ! kill -0 "$pid" 2>/dev/null && break
  sleep 0.1
done
kill -INT "$pid"
wait "$pid" || fail "the interrupted and resumed run failed: $(cat "$work/interrupt.log")"
grep -q "^KeyboardInterrupt: interrupted (SIGINT) after step [0-9]*: checkpoint written" \
  "$work/interrupt.log" || fail "SIGINT: no KeyboardInterrupt with the checkpoint: $(cat "$work/interrupt.log")"
grep -q "resuming from .* at step [0-9]* of 12" "$work/interrupt.log" ||
  fail "resume_interrupted: not resumed: $(cat "$work/interrupt.log")"
[ "$(tail -n 1 "$work/stop/metrics.jsonl" | sed -n 's/^{"step": \([0-9]*\),.*/\1/p')" = 11 ] ||
  fail "resume_interrupted did not reach the last step"

# ---- the launcher finds NVIDIA's pip packages -------------------------------------------
if "$bin" --version | grep -q "CUDA: yes"; then
  site=$("${py[@]}" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  for library in cudnn/lib/libcudnn.so.9 cu13/lib/libcublas.so.13 nccl/lib/libnccl.so.2; do
    mkdir -p "$site/nvidia/$(dirname "$library")"
    cc -shared -o "$site/nvidia/$library" -x c /dev/null || fail "cc $library"
  done
  output=$("$venv/bin/lightly-train-c" --version)
  for library in "cuDNN   $site/nvidia/cudnn/lib/libcudnn.so.9" \
                 "cuBLAS  $site/nvidia/cu13/lib/libcublas.so.13" \
                 "NCCL    $site/nvidia/nccl/lib/libnccl.so.2"; do
    printf '%s\n' "$output" | grep -qxF "  $library" || fail "not found in the venv: $library: $output"
  done
  dirs=$("${py[@]}" -c "import lightly_train_c; print(*lightly_train_c.nvidia_library_dirs()[:3])")
  [ "$dirs" = "$site/nvidia/cu13/lib $site/nvidia/cudnn/lib $site/nvidia/nccl/lib" ] ||
    fail "nvidia_library_dirs: $dirs"
fi

e2e_finish
