#!/usr/bin/env bash
# tools/launch_census.sh, cheaply: (1) its arithmetic against a stand-in
# emulation program that logs a known number of operations per step on top
# of set-up and tear-down lines (a real ResNet census takes a minute or
# more on the emulation); (2) the emulation's own log (LTC_EMU_LAUNCH_LOG):
# an emulated op test writes a line per kernel launch naming its site, and
# nothing without the variable.
set -u
source "$(dirname "$0")/lib.bash"
e2e_init launch_census

# (1) A build folder whose emulation program logs, per run: 5 set-up
# kernels, then per step 3 launches at one site, 2 convolutions, a copy and
# a host wait (not an operation: counted apart), then a tear-down memset.
# One step is 6 operations.
fake="$work/build"
mkdir -p "$fake/emu" "$fake/tools"
ln -s "$(cd "$build" && pwd)/tools/photo_crops" "$fake/tools/photo_crops"
cat >"$fake/emu/lightly-train-c" <<'EOF'
#!/usr/bin/env bash
steps=0
while [ $# -gt 0 ]; do
  [ "$1" = --max-steps ] && steps=$2
  shift
done
{
  for _ in 1 2 3 4 5; do echo "kernel src/setup.cu:1"; done
  for ((s = 0; s < steps; s++)); do
    printf '%s\n' "kernel src/step.cu:10" "kernel src/step.cu:10" "kernel src/step.cu:10" \
      "cudnn cudnnConvolutionForward" "cudnn cudnnConvolutionForward" \
      "copy cudaMemcpyAsync device-to-host 100 bytes" "host-wait cudaEventSynchronize"
  done
  echo "memset cudaMemsetAsync"
} >>"$LTC_EMU_LAUNCH_LOG"
EOF
chmod +x "$fake/emu/lightly-train-c"
output=$(LTC_BUILD="$fake" tools/launch_census.sh dino resnet34 2>&1) || fail "the census failed: $output"
grep -qx 'CENSUS method=dino model=resnet34 total=6 kernel=3 cudnn=2 cublas=0 copy=1 memset=0 host_wait=1' \
  <<<"$output" || fail "wrong census line: $output"
grep -qx '3 kernel src/step.cu:10' <<<"$output" || fail "no per-site line for the step's kernel: $output"
grep -q 'setup\|cudaMemsetAsync' <<<"$output" && fail "set-up or tear-down counted as the step's: $output"

expect 2 'no CUDA emulation build' -- env LTC_BUILD="$work/none" tools/launch_census.sh

# (2) The emulation's log.
unit="$build/emu/tests/test_backend_fast_norm"
if [ -x "$unit" ]; then
  LTC_TEST_CUDA_ONLY=1 LTC_EMU_LAUNCH_LOG="$work/unit.log" "$unit" >"$work/unit.out" 2>&1 ||
    fail "$unit failed with the log on: $(tail -n 3 "$work/unit.out")"
  grep -qE '^kernel src/backend/cuda/cuda_norm\.cu:[0-9]+$' "$work/unit.log" ||
    fail "no batch-norm launch in the log: $(head -n 3 "$work/unit.log")"
  grep -qE '^copy cudaMemcpyAsync host-to-device [0-9]+ bytes$' "$work/unit.log" ||
    fail "no upload in the log"
  grep -qx 'host-wait cudaMalloc' "$work/unit.log" || fail "no allocation in the log"
else
  echo "skipped part 2: no CUDA emulation build"
fi
e2e_finish
