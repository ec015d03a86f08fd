#!/usr/bin/env bash
# End-to-end tests of the command line: help, version, bad usage (exit 2 with
# one line naming the problem), bad folders, and bench-data on a generated
# folder with corrupt files.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init cli

expect 0 "^lightly-train-c [0-9]+\.[0-9]+\.[0-9]+ \(MPI: (yes|no), CUDA: (yes|no)\)$" -- "$bin" --version
expect 0 "bench-data" -- "$bin" --help
expect 2 "usage" -- "$bin"
expect 2 "unknown command 'frobnicate'" -- "$bin" frobnicate
expect 0 "--num-workers" -- "$bin" bench-data --help
# "help X" and "--help X": the command's own help, not the global one
expect 0 "^usage: lightly-train-c train --data DIR" -- "$bin" help train
expect 0 "^usage: lightly-train-c export --checkpoint" -- "$bin" --help export
expect 2 "unknown command 'nope'" -- "$bin" help nope
# LightlyTrain's names are parsed (the run then stops at the missing folder)
expect 2 "missing.*does not exist" -- "$bin" train --data "$work/missing" model=torchvision/resnet18 \
  gradient_accumulation_steps=2 resume_interrupted=false strategy=ddp float32_matmul_precision=high
expect 2 "^lightly-train-c train: --strategy: expected one of auto, ddp, ddp_find_unused_parameters_true, got 'fsdp'" -- \
  "$bin" train --data "$work/missing" strategy=fsdp
expect 2 "^lightly-train-c train: --accelerator gpu" -- "$bin" train --data "$work/missing" accelerator=cuda
expect 2 "--version takes no options, got '--foo'" -- "$bin" --version --foo
# list-models / list-methods (LightlyTrain's list_models, list_methods): every
# name --model and --method take, one a line; train takes each listed model.
models=$("$bin" list-models) || fail "list-models exited $?"
[ "$("$bin" list_models)" = "$models" ] || fail "list_models differs from list-models"
for name in resnet18 vit_g14_reg4 dinov3/vith16plus ultralytics/yolo11x.pt timm/convnext_large \
            dinov2/vitb14 dinov2/vits14-noreg-notpretrained dinov3/vitt16-notpretrained \
            dinov3/convnext-tiny-notpretrained timm/resnet50 torchvision/resnet50 \
            torchvision/shufflenet_v2_x2_0 timm/wide_resnet101_2 timm/resnet200 \
            ultralytics/yolo26n-sem.yaml ultralytics/yolo26x-depth.pt; do
  grep -qx "$name" <<<"$models" || fail "list-models lacks $name"
done
[ "$(wc -l <<<"$models")" -eq "$(sort -u <<<"$models" | wc -l)" ] || fail "list-models repeats a name"
# Not dinov3/vitt16: LightlyTrain's name means its own distilled weights (refused).
grep -qx "dinov3/vitt16" <<<"$models" && fail "list-models lists dinov3/vitt16, which train refuses"
while read -r name; do
  "$bin" train --data "$work/missing" --model "$name" 2>&1 | grep -q "does not exist" ||
    fail "train refuses the listed model $name"
done <<<"$models"
[ "$("$bin" list-methods | head -n 1)" = distillation ] || fail "list-methods: the default is not first"
expect 0 "^dinov2$" -- "$bin" list_methods
expect 2 "list-models takes no options, got '--all'" -- "$bin" list-models --all
expect 2 "--data is required" -- "$bin" bench-data
expect 2 "unknown option '--bach-size'.*--batch-size" -- "$bin" bench-data --data x --bach-size 4
expect 2 "--batch-size: expected an integer, got 'many'" -- "$bin" bench-data --data x --batch-size many
expect 2 "--method: expected one of simclr, dino, got 'mae'" -- "$bin" bench-data --data x --method mae
expect 2 "--data needs a value" -- "$bin" bench-data --data
expect 2 "does not exist" -- "$bin" bench-data --data "$work/missing"
touch "$work/a-file"
expect 2 "is not a folder" -- "$bin" bench-data --data "$work/a-file"
mkdir -p "$work/empty"
expect 2 "is empty" -- "$bin" bench-data --data "$work/empty"
mkdir -p "$work/no-images" && echo hi > "$work/no-images/notes.txt"
expect 2 "no images" -- "$bin" bench-data --data "$work/no-images"

# A failure after the report began: the error is the last line, also when
# the output goes to a file (stdout is buffered there, stderr is not).
mkdir -p "$work/all-corrupt"
for i in 1 2 3; do printf '\377\330\377 garbage' >"$work/all-corrupt/b$i.jpg"; done
"$bin" bench-data --data "$work/all-corrupt" --batch-size 2 --image-size 32 --steps 2 \
  --warmup-steps 0 >"$work/bench-fail.log" 2>&1
[ $? -eq 1 ] || fail "bench-data on unreadable images: expected exit 1: $(cat "$work/bench-fail.log")"
tail -n 1 "$work/bench-fail.log" | grep -q "^lightly-train-c bench-data: no readable image found" ||
  fail "bench-data: the error is not the last line: $(cat "$work/bench-fail.log")"

# A real run: 48 images + 2 corrupt files, SimCLR and DINO views.
"$build/tests/e2e/make_images" "$work/images" 48 --corrupt 2 || fail "make_images"
# A hidden file and a dangling link named like an image: skipped, and said so.
printf '\377\330 a macOS resource fork' >"$work/images/._photo.jpg"
ln -s /nonexistent "$work/images/dangling.jpg"
out=$("$bin" bench-data --data "$work/images" --batch-size 8 --num-workers 2 --image-size 64 --steps 12 2>&1)
status=$?
[ "$status" -eq 0 ] || fail "bench-data exited $status: $out"
for pattern in "dataset: 50 images" "skipped 1 other file" "throughput: [0-9.]+ images/s" \
               "worker time: read" "verdict: (CPU|I/O)-bound" "skipped files: 2" \
               "warning: skipping '.*broken0.jpg'" "skipped 1 hidden entry" \
               "1 entry could not be read: dangling.jpg \(No such file or directory\)"; do
  printf '%s\n' "$out" | grep -q -E -- "$pattern" || fail "bench-data output lacks /$pattern/: $out"
done
# Too few steps: the measured batches were made during warm-up (the workers
# run ahead), which must not read as a throughput (it once gave millions of
# images/s); with enough steps the rate counts only images made while measuring.
out=$("$bin" bench-data --data "$work/images" --batch-size 8 --num-workers 1 --image-size 32 \
  --steps 2 --warmup-steps 2 2>&1)
[ $? -eq 0 ] || fail "bench-data --steps 2 failed: $out"
# How many were made in time is up to the threads: either none ("not
# measured") or between 1 and the 16 taken, with the worker-time line.
made=$(printf '%s\n' "$out" | sed -n 's/^throughput: [0-9.]* images\/s .*: \([0-9]*\) images made in .*/\1/p')
if [ -n "$made" ]; then
  [ "$made" -ge 1 ] && [ "$made" -le 16 ] && printf '%s\n' "$out" | grep -q "^worker time: read" ||
    fail "bench-data --steps 2: a rate from $made images: $out"
else
  printf '%s\n' "$out" | grep -q "throughput: not measured: the 2 measured batch(es) were made during warm-up" ||
    fail "bench-data --steps 2 reports a throughput of prefetched batches: $out"
fi
# LightlyTrain's key=value spelling and DINO multi-crop.
out=$("$bin" bench-data data="$work/images" method=dino batch_size=4 num_workers=auto image_size=64 local_size=32 steps=3 2>&1)
[ $? -eq 0 ] || fail "bench-data dino (key=value) failed: $out"
printf '%s\n' "$out" | grep -q "8 view(s) (64 64 32 32 32 32 32 32 px)" || fail "dino views: $out"

# Transform overrides: applied (a run with them works) and checked (bad ones exit 2).
out=$("$bin" bench-data --data "$work/images" --batch-size 4 --num-workers 1 --image-size 64 --steps 2 \
  --transform blur_p=0 --transform view1.solarize_p=1 2>&1)
[ $? -eq 0 ] || fail "bench-data with --transform failed: $out"
expect 2 "--transform: unknown transform parameter 'blurp'" -- "$bin" bench-data --data "$work/images" --transform blurp=1
expect 2 "--transform: .*flip_p" -- "$bin" bench-data --data "$work/images" --transform flip_p=2

# SIGINT mid-run: the workers are stopped and joined, the partial result printed.
"$bin" bench-data --data "$work/images" --batch-size 4 --num-workers 2 --image-size 64 \
  --steps 100000000 >"$work/interrupt.log" 2>&1 &
pid=$!
for _ in $(seq 50); do grep -q "^pipeline:" "$work/interrupt.log" && break; sleep 0.1; done
sleep 0.5
kill -INT "$pid"
wait "$pid"
status=$?
[ "$status" -eq 130 ] || fail "interrupted bench-data exited $status, expected 130: $(cat "$work/interrupt.log")"
grep -q "interrupted after [0-9]* measured batches" "$work/interrupt.log" || fail "no interrupt message: $(cat "$work/interrupt.log")"

e2e_finish
