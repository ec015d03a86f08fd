#!/usr/bin/env bash
# The GPU script as the GPU node runs it (issues 19 and 32), at tiny sizes:
# `make first-light`'s folder (tools/make_first_light.sh, here packed
# without xz and asking for 16 images, which run.sh makes there) is copied
# to a temporary place and run.sh runs there with no build tree on the
# paths (env -i, its own folder as the working directory), a fake $OUT, and
# the system Python (standard library only:
# torch absent, so the PyTorch checks must say skip, not break). The bundle
# carries the CUDA emulation's program and, for the op groups run here, its
# test binaries: versions, op groups and embed take the cuda paths on the
# CPU; the training runs use the cpu backend with the loss scaler on
# (LTC_TEST_LOSS_SCALER), the emulation being too slow for them. Checks:
# every part leaves its records, each a line of JSON; the results files are
# the promised four; a part over its budget is recorded as cut and the
# script goes on; nothing recorded points into the build tree.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init first_light

# First light runs every binary of make test-gpu (tests/gpu_tests.list): its
# op lists and the test-gpu part's binaries name each.
lists=$(awk '/^: "\$\{FIRST_LIGHT_(OPS_FP32|OPS_16|TESTGPU_BINARIES|PATH_TESTS):=/ { on = 1 }
              on { print } on && /}"/ { on = 0 }' tools/first_light.sh)
for test in $(grep -v '^#' tests/gpu_tests.list); do
  grep -q -w "$test" <<<"$lists" || fail "first light runs no cuda group of $test (tests/gpu_tests.list)"
done

emu_require
build_dir=$(cd "$build" && pwd)
python=/usr/bin/python3

# A build folder as the GPU build looks: the program and the test binaries
# of the op groups tried are the emulation's, the rest the native ones.
fake="$work/build"
mkdir -p "$fake/tests/e2e" "$fake/tools"
ln -s "$build_dir/emu/lightly-train-c" "$fake/lightly-train-c"
for test in $(grep -v '^#' tests/gpu_tests.list); do
  if [ -x "$build_dir/emu/tests/$test" ]; then
    ln -s "$build_dir/emu/tests/$test" "$fake/tests/$test"
  else
    ln -s "$build_dir/tests/$test" "$fake/tests/$test"
  fi
done
for helper in make_images compare_weights make_backbone; do
  ln -s "$build_dir/tests/e2e/$helper" "$fake/tests/e2e/$helper"
done
ln -s "$build_dir/tools/bench_train_step" "$build_dir/tools/photo_crops" "$fake/tools/"

FIRST_LIGHT_PACK=tar FIRST_LIGHT_IMAGES=16 FIRST_LIGHT_SIDES="40 64" FIRST_LIGHT_MAX_MB=400 \
  tools/make_first_light.sh "$fake" "$work/made/first-light" >"$work/make.out" 2>&1 ||
  fail "make_first_light.sh failed: $(tail -n 5 "$work/make.out")"
grep -q 'carry=\["first-light"\] timeout_s=480' "$work/make.out" ||
  fail "no device command printed: $(tail -n 3 "$work/make.out")"
[ ! -e "$work/made/first-light/images" ] && grep -q '^FIRST_LIGHT_IMAGES=16$' "$work/made/first-light/images.conf" &&
  grep -q '^FIRST_LIGHT_SIDES="40 64"$' "$work/made/first-light/images.conf" ||
  fail "the folder carries images, or images.conf does not ask for 16 of 40 to 64 px"

# The node: the folder somewhere else, with the tracked files the device
# tool sends beside it that run.sh reads (the fixtures: not in the bundle;
# the photographs it makes the JPEGs from).
node="$work/node"
mkdir -p "$node/out" "$node/tests/fixtures"
cp -r tests/fixtures/photos "$node/tests/fixtures/"
cp -r "$work/made/first-light" "$node/"
! tar -tf "$node/first-light/bundle.tar" | grep -q '^bundle/tests/fixtures/' ||
  fail "the bundle carries a copy of the fixtures"
cp tests/fixtures/*.safetensors "$node/tests/fixtures/"
rm -rf "$work/made" "$fake"
start=$(date +%s)
(cd "$node" && env -i PATH=/usr/bin:/bin HOME="$node" TMPDIR="$node" OUT="$node/out" \
  PYTHON="$python" LTC_TEST_LOSS_SCALER=default \
  FIRST_LIGHT_SECONDS=360 FIRST_LIGHT_PARTS="versions paths targets ops train bench test-gpu profile" \
  FIRST_LIGHT_BUDGETS="versions=30 paths=120 targets=60 ops=60 train=180 bench=60 profile=30 test-gpu=6" \
  FIRST_LIGHT_PATH_TESTS="test_backend_yolo_ops:cuda-fp16:0" FIRST_LIGHT_TEST_LIMIT=150 \
  FIRST_LIGHT_TARGETS="simclr teacher distillation compile convnext convnext-teacher yolo-distillation yolo-dino" \
  FIRST_LIGHT_TARGET_WARMUP=1 FIRST_LIGHT_TARGET_CONVNEXT="torchvision/convnext_tiny 32 2 1" \
  FIRST_LIGHT_TARGET_CONVNEXT_TEACHER="dinov3/convnext-tiny 32 2 1" \
  FIRST_LIGHT_TARGET_YOLO_DISTILLATION="ultralytics/yolov8n.yaml vit_t14 28 2 1" \
  FIRST_LIGHT_TARGET_YOLO_DINO="ultralytics/yolo11n.yaml 32 2 1" \
  FIRST_LIGHT_TARGET_SIMCLR="resnet18 28 2 1" FIRST_LIGHT_TARGET_TEACHER="vit_t14 28 2 1" \
  FIRST_LIGHT_TARGET_DISTILLATION="resnet18 vit_t14 28 2 1" \
  FIRST_LIGHT_ACCELERATOR=cpu FIRST_LIGHT_PRECISION=32-true FIRST_LIGHT_EMBED_ACCELERATOR=gpu \
  FIRST_LIGHT_MODEL=resnet18 FIRST_LIGHT_SIZE=28 FIRST_LIGHT_BATCH=8 FIRST_LIGHT_STEPS=4 \
  FIRST_LIGHT_RESUME_AT=2 FIRST_LIGHT_TEACHER=vit_t14 FIRST_LIGHT_DISTILL_BATCH=8 \
  FIRST_LIGHT_DISTILL_STEPS=1 FIRST_LIGHT_EMBED_IMAGES=8 \
  FIRST_LIGHT_OPS_FP32=test_backend_act_ops FIRST_LIGHT_OPS_16=test_backend_act_ops \
  FIRST_LIGHT_BENCH_CONFIG="simclr resnet18 28 2 1" FIRST_LIGHT_BENCH_DEVICE=cpu \
  FIRST_LIGHT_BENCH_WARMUP=1 FIRST_LIGHT_BENCH_COMPILE=0 \
  bash first-light/run.sh) >"$work/run.out" 2>&1
status=$?
wall=$(($(date +%s) - start))
echo "run.sh: exit $status in $wall s"
cat "$node/out/first_light_summary.md"
[ "$status" -eq 0 ] || fail "run.sh exited $status: $(tail -n 5 "$work/run.out")"

results="$node/out/first_light.jsonl"
[ "$(ls "$node/out" | sort | tr '\n' ' ')" = \
  "first_light.jsonl first_light_console.log first_light_logs.tar.gz first_light_summary.md " ] ||
  fail "the results are not the four files: $(ls "$node/out")"
"$python" -c 'import json, sys
for line in open(sys.argv[1]): json.loads(line)' "$results" || fail "a result line is not JSON"

# has PART CHECK STATUS [PATTERN]: a record of that check with that status
# (and matching PATTERN).
has() {
  grep -E "\"part\": \"$1\", \"check\": \"$(sed 's/[][]/\\&/g' <<<"$2")\", \"status\": \"$3\"" "$results" |
    grep -q -E -- "${4:-.}" || fail "no $3 record of $1/$2${4:+ matching /$4/}"
}
has setup unpack pass '"images": 16, "image_sides": "40-64"'
has setup libraries pass
has versions gpus pass
has versions gpu-libraries pass 'cuDNN [0-9.]+ for CUDA'
has versions nccl pass 'NCCL 2\.'
has versions ldd pass
has versions pytorch skip 'not_importable:torch'
has versions wheel-launcher skip 'no_NVIDIA_pip_packages'
has paths 'test_backend_yolo_ops[paths]' pass '"failed": 0'
# The targets: ours and each fallback measured (no fused path on the cpu
# backend, so only the mechanics are checked; DINOv2's eight 98 px local
# views take minutes on this CPU: left out), PyTorch's sides skipped with
# the reason, a ratio record per target.
has targets simclr-ours info '"images_per_s": [0-9.]+'
has targets simclr-fallback info 'LTC_CUDA_CONV_FUSION=off'
has targets simclr-dgrad info 'LTC_CUDA_CONV_FUSION=dgrad'
has targets simclr-prologue info 'LTC_CUDA_CONV_FUSION=prologue'
has targets simclr-graphs info 'LTC_CUDA_GRAPHS=on'
has targets simclr-eager skip "No module named 'torch'"
has targets simclr-compile skip "No module named 'torch'"
has targets teacher-ours info '"images_per_s": [0-9.]+'
has targets teacher-fallback info 'LTC_CUDA_ATTENTION=math'
has targets teacher-pytorch skip "No module named 'torch'"
has targets distillation-fallback info '"images_per_s": [0-9.]+'
has targets distillation-ratio info '"images_per_s_ours_over_fallback": [0-9.]+'
has targets distillation-graphs info 'LTC_CUDA_GRAPHS=on'
has targets distillation-ratio info '"images_per_s_ours_over_graphs": [0-9.]+'
has targets convnext-ours info '"images_per_s": [0-9.]+'
has targets convnext-eager skip "No module named 'torch'"
has targets convnext-teacher-ours info '"images_per_s": [0-9.]+'
has targets convnext-teacher-pytorch skip "No module named 'torch'"
has targets yolo-distillation-ours info '"images_per_s": [0-9.]+'
has targets yolo-distillation-pytorch skip "No module named 'torch'"
has targets yolo-dino-ours info 'dino ultralytics/yolo11n.yaml 32px'
has targets yolo-dino-eager skip "No module named 'torch'"
has targets part pass
has ops 'test_backend_act_ops[fp32]' pass '"seconds": [0-9.]+'
has ops 'test_backend_act_ops[16bit]' pass '"failed": 0'
has train graphs-nccl skip 'needs the GPU'
has train simclr-setup pass
# (four steps of a tiny run need not lower the loss: finite and scaled only)
has train simclr-losses '(pass|fail)' '"steps": 4, .*"finite": 1, .*"loss_scales": "?65536'
has train simclr-files pass
has train distillation-setup pass
has train distillation-losses '(pass|fail)' '"finite": 1'
has train distillation-files pass
has train embed-gpu-vs-cpu pass '"values": 4096'
has train embed-bf16-vs-cpu pass '"values": 4096'
has train export-torchvision skip 'not_importable'
has train wheel-train pass '"accelerator": "cpu'
has train resume pass '"within_1e-5": 1'
has bench step-ours info '"images_per_s": [0-9.]+'
has bench step-eager skip "No module named 'torch'"
has profile lightly-train-c-total skip 'no ncu'
has profile pytorch-total skip "No module named 'torch'"
has test-gpu part cut
has all total info
# Nothing a part started outlives it: the cut test-gpu part's emulated
# `train` once ran on for 2 minutes after the last record, holding the
# console's tee open (on the GPU it would hold the GPU through the next part).
total=$(sed -n 's/.*"check": "total".*"seconds": \([0-9]*\).*/\1/p' "$results")
[ "$wall" -le $((total + 20)) ] ||
  fail "run.sh ended ${wall}s after its start, its last record at ${total}s: a part's process outlived it"
has train part '(pass|fail)' '"failed_checks": [012],'
# The wheel-launcher check itself, where the toolkit has cuDNN and cuBLAS:
# NVIDIA's pip layout made of links to them passes; the same layout without
# cuDNN (the program then finds the toolkit's by its run path) fails.
cuda_lib=/usr/local/cuda/lib64
if [ -e "$cuda_lib/libcudnn.so.9" ] && [ -e "$cuda_lib/libcublas.so.13" ]; then
  site="$work/site"
  mkdir -p "$site/nvidia/cudnn/lib" "$site/nvidia/cu13/lib"
  ln -s "$cuda_lib"/libcudnn*.so.9 "$site/nvidia/cudnn/lib/"
  ln -s "$cuda_lib"/libcublas*.so.13 "$site/nvidia/cu13/lib/"
  launcher() { PYTHONPATH="$site" "$python" tools/first_light_check.py wheel-launcher "$bin" python; }
  launcher | grep -q '^pass folders=2 ' || fail "wheel-launcher on NVIDIA's layout: $(launcher)"
  rm "$site"/nvidia/cudnn/lib/*
  launcher | grep -q '^fail ' || fail "wheel-launcher without cuDNN in the layout: $(launcher)"
fi
grep '"status": "fail"' "$results" | grep -E -v -q '"check": "((simclr|distillation)-losses|part)"' &&
  fail "a check failed: $(grep '"status": "fail"' "$results")"
tar -tzf "$node/out/first_light_logs.tar.gz" | grep -q 'logs/train/simclr.train.log' ||
  fail "the logs lack the SimCLR train.log"
grep -q -F "$build_dir" "$results" "$node/out/first_light_summary.md" &&
  fail "a record points into the build tree: $(grep -F "$build_dir" "$results" | head -n 2)"

# A call that gives the test-gpu part to the binaries alone (as docs/gpu.md's
# next-window plan may): no runs; test_staging passes beside
# test_method_steps' sets, one process and one record each (the sets here
# match no case, so each of those fails at once: the cases themselves take
# minutes on the emulation).
mkdir -p "$node/out2"
(cd "$node" && env -i PATH=/usr/bin:/bin HOME="$node" TMPDIR="$node" OUT="$node/out2" \
  PYTHON="$python" FIRST_LIGHT_PARTS=test-gpu FIRST_LIGHT_BUDGETS=test-gpu=120 \
  FIRST_LIGHT_TESTGPU_RUNS=0 FIRST_LIGHT_STEP_SETS="no_case_a* no_case_b*,no_case_c*" \
  bash first-light/run.sh) >"$work/run2.out" 2>&1 || fail "test-gpu alone: $(tail -n 3 "$work/run2.out")"
results="$node/out2/first_light.jsonl"
has test-gpu 'test_staging[all]' pass '"failed": 0'
has test-gpu 'test_method_steps[cases1]' fail 'no_case_a\* matches no case'
has test-gpu 'test_method_steps[cases2]' fail '"exit": 1'
has test-gpu part fail '"failed_checks": 2,'
grep -q '"check": "runs"' "$results" && fail "FIRST_LIGHT_TESTGPU_RUNS=0 ran the runs"
e2e_finish
