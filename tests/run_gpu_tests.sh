#!/usr/bin/env bash
# The GPU checks (make test-gpu, or run-gpu-tests.sh in a bundle): every
# test that has a cuda variant must pass on the GPU, none may be skipped; then
# a short train + embed + export with --accelerator gpu, under
# compute-sanitizer's memcheck when it is installed: in 16-mixed (the GPU's
# default precision, loss scaler on), and a train + embed in 32-true; an
# NCCL world of one; the loss scaler with injected NaN gradients;
# checkpoints moved between the GPU and the CPU.
#   tests/run_gpu_tests.sh [BUILD_DIR]   (default: build; in a bundle: its own folder)
#   GPU_TESTS=units|runs tests/run_gpu_tests.sh   (one part; both by default)
# Where CUDA's libraries come from a Python environment (no system CUDA),
# LD_LIBRARY_PATH is set to its nvidia/*/lib folders first.
set -u
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -ge 1 ]; then
    build=$1; bin="$build/lightly-train-c"; tests="$build/tests"; fixtures=tests/fixtures
    list=tests/gpu_tests.list
elif [ -x "$here/bin/lightly-train-c" ]; then  # inside a bundle
    build=$here; bin="$here/bin/lightly-train-c"; tests="$here/tests"; fixtures="$here/tests/fixtures"
    list="$here/tests/gpu_tests.list"
else
    build=build; bin=build/lightly-train-c; tests=build/tests; fixtures=tests/fixtures
    list=tests/gpu_tests.list
fi
if nv=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null); then
    LD_LIBRARY_PATH=$(ls -d "$nv"/*/lib 2>/dev/null | paste -sd:)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LD_LIBRARY_PATH
fi
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
finish() {
    if [ "$failures" -ne 0 ]; then
        echo "gpu tests: $failures failure(s)"
        exit 1
    fi
    echo "gpu tests: all passed (${parts// /, })"
    exit 0
}
# GPU_TESTS: the parts to run, "units" (the test binaries of gpu_tests.list)
# and "runs" (the program's runs), both by default; apart they each fit a
# 10-minute slot.
parts=${GPU_TESTS:-units runs}
for part in $parts; do
    case $part in units | runs) ;;
    *) echo "run_gpu_tests.sh: unknown part '$part' in GPU_TESTS (units, runs)" >&2; exit 2 ;;
    esac
done

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
# The fixtures are read from tests/fixtures/ relative to the working folder.
work=$(mktemp -d /tmp/ltc-gpu-XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/tests" && ln -s "$(cd "$(dirname "$fixtures")" && pwd)/fixtures" "$work/tests/fixtures"

[[ " $parts " == *" units "* ]] || list=/dev/null
for test in $(grep -v '^#' "$list"); do
    log="$work/$test.log"
    (cd "$work" && "$tests/$test") >"$log" 2>&1
    status=$?
    skipped=$(grep -c '^\[  SKIPPED \] test' "$log")
    # test_backend_fast's cpu-only check (default threads) skips in the cuda group.
    allowed=0
    # (in each of its three cuda groups: fp32, fp16, bf16)
    [ "$test" = test_backend_fast ] && allowed=6
    if [ "$status" -ne 0 ] || [ "$skipped" -gt "$allowed" ]; then
        fail "$test (exit $status, $skipped skipped lines):"
        grep -E 'FAILED|ERROR|skipped:|error|mismatch' "$log" | head -n 30
    else
        echo "ok   $test"
    fi
    grep -E '^  resnet(18|50) on cuda' -A 7 "$log"
done

# End to end on the GPU: train, embed, export.
[[ " $parts " == *" runs "* ]] || finish
"$tests/e2e/make_images" "$work/images" 64 >/dev/null || fail "make_images"
sanitizer=()
command -v compute-sanitizer >/dev/null &&
    sanitizer=(compute-sanitizer --tool memcheck --leak-check no --error-exitcode 99)
run() { "${sanitizer[@]}" "$bin" "$@"; }
common=(--data "$work/images" --image-size 64 --batch-size 16 --num-workers 4 --accelerator gpu
        --method simclr)
run train "${common[@]}" --out "$work/run" --max-steps 8 --method-arg hidden_dim=128 \
    --method-arg output_dim=64 >"$work/train.log" 2>&1 || fail "train on the GPU: $(tail -n 20 "$work/train.log")"
grep -q "backend cuda" "$work/train.log" || fail "train did not run on the cuda backend: $(head -n 5 "$work/train.log")"
grep -q "precision 16-mixed" "$work/run/train.log" ||
    fail "train on the GPU did not default to 16-mixed: $(head -n 8 "$work/run/train.log")"
grep -q "loss scaling: on" "$work/run/train.log" || fail "16-mixed without the loss scaler"
tail -n 12 "$work/train.log"
run embed --data "$work/images" --checkpoint "$work/run/exported_models/exported_last.safetensors" \
    --image-size 64 --accelerator gpu --out "$work/emb.npy" >"$work/embed.log" 2>&1 ||
    fail "embed on the GPU: $(tail -n 20 "$work/embed.log")"
grep -q "workers, cuda 32-true, " "$work/embed.log" || fail "embed did not run on the cuda backend: $(cat "$work/embed.log")"
# (export runs on the CPU: compute-sanitizer refuses a program that never calls CUDA)
"$bin" export --checkpoint "$work/run/checkpoints/last.ckpt" --out "$work/export.safetensors" \
    >"$work/export.log" 2>&1 || fail "export: $(cat "$work/export.log")"

# The same in 32-true (fp32 activations, no loss scaler).
run train "${common[@]}" --out "$work/run32" --max-steps 8 --precision 32-true \
    --method-arg hidden_dim=128 --method-arg output_dim=64 >"$work/train32.log" 2>&1 ||
    fail "train on the GPU in 32-true: $(tail -n 20 "$work/train32.log")"
grep -q "precision 32-true" "$work/run32/train.log" ||
    fail "--precision 32-true not taken: $(head -n 8 "$work/run32/train.log")"
run embed --data "$work/images" --checkpoint "$work/run32/exported_models/exported_last.safetensors" \
    --image-size 64 --accelerator gpu --out "$work/emb32.npy" >"$work/embed32.log" 2>&1 ||
    fail "embed on the GPU (32-true run): $(tail -n 20 "$work/embed32.log")"

# NCCL on one GPU (issue 10): a torchrun-style rank of a world of one opens
# an NCCL communicator and averages its gradient buckets through it; the
# result must equal the run without a launcher (NCCL's average over one rank
# is the value itself; the tolerance covers cuDNN algorithm choice, in
# 32-true: cuDNN picks algorithms by timing, and another one moves fp16
# activations by more).
short=(--data "$work/images" --image-size 64 --batch-size 16 --num-workers 4 --accelerator gpu
       --max-steps 4 --seed 5 --precision 32-true --method simclr --method-arg hidden_dim=128
       --method-arg output_dim=64)
"$bin" train "${short[@]}" --out "$work/alone" >"$work/alone.log" 2>&1 ||
    fail "train without a launcher: $(tail -n 20 "$work/alone.log")"
RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29611 \
    "$bin" train "${short[@]}" --out "$work/nccl1" >"$work/nccl1.log" 2>&1 ||
    fail "train as an NCCL world of one: $(tail -n 20 "$work/nccl1.log")"
grep -q "data parallel: 1 ranks (nccl" "$work/nccl1/train.log" ||
    fail "the launched rank did not use NCCL: $(head -n 5 "$work/nccl1/train.log")"
"$tests/e2e/compare_weights" "$work/alone/checkpoints/last.ckpt" "$work/nccl1/checkpoints/last.ckpt" \
    1e-6 1e-5 || fail "NCCL world of one differs from the run without a launcher"
# The same rank with the buckets after backward instead of overlapped with
# it (communication stream, events): the same weights; both runs' exposed
# communication time per step (profiling/comm_wait_time, measured with CUDA
# events on the compute stream) is printed, a measurement, not a check.
grep -q "overlapped with backward (--gradient-overlap true)" "$work/nccl1/train.log" ||
    fail "the NCCL rank did not overlap: $(grep 'gradient average' "$work/nccl1/train.log")"
RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29612 \
    "$bin" train "${short[@]}" --out "$work/nccl1-after" --gradient-overlap false \
    >"$work/nccl1-after.log" 2>&1 ||
    fail "NCCL world of one, --gradient-overlap false: $(tail -n 20 "$work/nccl1-after.log")"
"$tests/e2e/compare_weights" "$work/nccl1/checkpoints/last.ckpt" \
    "$work/nccl1-after/checkpoints/last.ckpt" 1e-6 1e-5 ||
    fail "NCCL world of one: overlap on and off differ"
# Which of them moved, when they differ: the run without a launcher again
# (a check: a GPU run repeats within the tolerance above), and the
# overlapped rank with every launch synchronous (CUDA_LAUNCH_BLOCKING=1: if
# that one equals the run without a launcher, the streams race; printed).
"$bin" train "${short[@]}" --out "$work/alone2" >"$work/alone2.log" 2>&1 ||
    fail "train without a launcher, again: $(tail -n 20 "$work/alone2.log")"
"$tests/e2e/compare_weights" "$work/alone/checkpoints/last.ckpt" "$work/alone2/checkpoints/last.ckpt" \
    1e-6 1e-5 || fail "two runs without a launcher differ: a GPU run does not repeat"
CUDA_LAUNCH_BLOCKING=1 RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=29613 "$bin" train "${short[@]}" --out "$work/nccl1-blocking" \
    >"$work/nccl1-blocking.log" 2>&1 || fail "NCCL world of one, launches blocking: $(tail -n 5 "$work/nccl1-blocking.log")"
for other in alone nccl1; do
    if "$tests/e2e/compare_weights" "$work/$other/checkpoints/last.ckpt" \
        "$work/nccl1-blocking/checkpoints/last.ckpt" 1e-6 1e-5 >/dev/null 2>&1; then
        echo "nccl1 with blocking launches: equal to $other"
    else
        echo "nccl1 with blocking launches: differs from $other"
    fi
done
for run_dir in nccl1 nccl1-after; do
    sed -n 's/.*"profiling\/comm_wait_time": \([^,}]*\).*/\1/p' "$work/$run_dir/metrics.jsonl" |
        awk -v name="$run_dir" '{ s += $1; n++ } END { if (n) printf "%s: comm_wait_time mean %.6f s over %d steps\n", name, s / n, n; else print name ": no comm_wait_time logged" }'
done

# The loss scaler on the GPU with injected NaN gradients (as
# tests/e2e/train_loss_scaling.sh on the CPU): one at step 3 is skipped and
# backs the scale off as GradScaler does; NaN at every step collapses the
# scale to 1 and stops the run with its last checkpoint untouched.
scaling=(--data "$work/images" --image-size 64 --batch-size 16 --num-workers 4 --accelerator gpu
         --max-steps 6 --log-every 1 --method simclr --method-arg hidden_dim=128
         --method-arg output_dim=64)
LTC_FAULT=nan-gradient@3 LTC_TEST_LOSS_SCALER=1024:2 "$bin" train "${scaling[@]}" \
    --out "$work/skip" >"$work/skip.log" 2>&1 || fail "loss scaler skip: $(tail -n 5 "$work/skip.log")"
grep -q "step 3: NaN or infinite gradients at loss scale 2048: update skipped" "$work/skip/train.log" ||
    fail "loss scaler skip: train.log does not report the skipped step"
scales=$(sed -n 's|^{"step": \([0-9]*\),.*"loss_scale": \([^,}]*\).*|\1 \2|p' \
         "$work/skip/metrics.jsonl" | tr '\n' ' ')
[ "$scales" = "0 1024 1 1024 2 2048 3 2048 4 1024 5 1024 " ] ||
    fail "loss scaler skip: the scale per step is not GradScaler's: $scales"
cp -r "$work/skip" "$work/collapse"
before=$(cksum <"$work/collapse/checkpoints/last.ckpt")
LTC_FAULT=nan-gradient LTC_TEST_LOSS_SCALER=4:2000 "$bin" train "${scaling[@]}" \
    --out "$work/collapse" --overwrite >"$work/collapse.log" 2>&1
status=$?
[ "$status" -eq 1 ] && tail -n 1 "$work/collapse.log" | grep -q "^stopping: .* loss scale down to 1" ||
    fail "loss scaler collapse: exit $status, last line: $(tail -n 1 "$work/collapse.log")"
[ "$(cksum <"$work/collapse/checkpoints/last.ckpt")" = "$before" ] ||
    fail "loss scaler collapse: the checkpoint changed"

# Checkpoints between the GPU and the CPU (tests/e2e/resume_across.bash):
# written on the GPU, resumed on the CPU and the other way in 32-true (the
# loss at the resumed step within 1e-4 of the uninterrupted run's), and
# resumed on the GPU in 16-mixed (loss scaler state included): the same
# final checkpoint as the uninterrupted run, byte for byte.
e2e_lib=$here/e2e
[ -d "$here/tests/e2e" ] && e2e_lib=$here/tests/e2e
# shellcheck source=tests/e2e/resume_across.bash
. "$e2e_lib/resume_across.bash"
moving=(--data "$work/images" --image-size 64 --batch-size 16 --num-workers 4 --max-steps 6
        --seed 5 --method simclr --method-arg hidden_dim=128 --method-arg output_dim=64)
resume_across gpu-to-cpu "--accelerator gpu --precision 32-true" "--accelerator cpu" 4 -- "${moving[@]}"
resume_across cpu-to-gpu "--accelerator cpu" "--accelerator gpu --precision 32-true" 4 -- "${moving[@]}"
resume_across gpu-16-mixed "--accelerator gpu" "--accelerator gpu" 4 -- "${moving[@]}"

finish
