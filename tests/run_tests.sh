#!/usr/bin/env bash
# Runs every cmocka unit test binary, then every end-to-end shell test, and
# prints one closing line "tests: N passed, N failed, N skipped" (skipped:
# tests this machine cannot run, such as the GPU ones without a GPU). Exit
# status 1 when any test failed.
set -u
build=${1:-build}
passed=0
failed=0
skipped=0
failed_names=()
export LTC_BIN="$build/lightly-train-c"
export LTC_BUILD="$build"
# The cuda backend's file of cuDNN algorithm choices (backend/conv_algorithms.h)
# in the build folder, not the user's cache: the emulation's plans write there.
export LTC_CUDNN_ALGORITHMS="$build/tests/cudnn-algorithms.txt"
all_start=$(date +%s.%N)

# Seconds since START (date +%s.%N), one decimal: each line says what its
# test cost, the figure that keeps make test within its time.
since() { awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'; }

# Adds a test binary's log (name, log file, exit status, start time) to the
# counts and prints its line. A binary may run several cmocka groups: every
# group's summary counts.
count_log() {
  local name=$1 log=$2 status=$3 took ok bad skip
  took=$(since "$4")
  ok=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
  bad=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
  # Skipped: what this machine cannot run (the GPU tests without a GPU),
  # counted apart, never as passed.
  skip=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
  ok=${ok:-0}
  bad=${bad:-0}
  skipped=$((skipped + ${skip:-0}))
  if [ "$status" -ne 0 ] && [ "$bad" -eq 0 ]; then bad=1; fi  # crashed
  passed=$((passed + ok))
  failed=$((failed + bad))
  if [ "$bad" -ne 0 ]; then
    failed_names+=("$name")
    echo "FAIL $name (exit $status, $took s):"
    grep -E 'FAILED|ERROR|Assert|error|Sanitizer|runtime error' "$log" | head -n 30
  else
    if [ "${skip:-0}" -ne 0 ]; then echo "ok   $name ($ok tests, $skip skipped, $took s)"
    else echo "ok   $name ($ok tests, $took s)"; fi
  fi
}

# Every unit test runs with the SIMD kernels the CPU offers (ours and
# oneDNN's), and as a CPU without AVX2 would run it: LTC_SIMD=scalar (our
# portable code) and oneDNN limited to SSE4.1. On an AVX-512 CPU a third
# pass limits oneDNN to AVX2, the kernels of AVX2-only CPUs (AMD EPYC before
# Zen 4), which sum in another order: a test must hold on every x86-64 CPU,
# not only on the one CI happens to get.
passes="native scalar"
grep -qw avx512f /proc/cpuinfo 2>/dev/null && passes="native avx2 scalar"
# Run in the native pass only: whole-step compositions whose kernels the op
# tests already run in every pass (a minute each per pass on 2 cores).
native_only=" test_method_steps "
for pass in $passes; do
# The binaries of today's tests/test_*.c only: a binary left in the build
# folder by a test since deleted or renamed is neither run nor counted.
for source in tests/test_*.c; do
  binary="$build/tests/$(basename "$source" .c)"
  [ -x "$binary" ] || { failed=$((failed + 1)); failed_names+=("$(basename "$binary") (not built)"); continue; }
  name=$(basename "$binary")
  [ "$pass" != native ] && [[ "$native_only" == *" $name "* ]] && continue
  [ "$pass" = native ] || name="$name[$pass]"
  log="$build/tests/$name.log"
  start=$(date +%s.%N)
  case $pass in
    native) "$binary" >"$log" 2>&1 ;;
    avx2) ONEDNN_MAX_CPU_ISA=AVX2 "$binary" >"$log" 2>&1 ;;
    scalar) LTC_SIMD=scalar ONEDNN_MAX_CPU_ISA=SSE41 "$binary" >"$log" 2>&1 ;;
  esac
  count_log "$name" "$log" $? "$start"
done
done

# The cuda groups once more, on the CUDA emulation (tests/cuda_emu): the same
# test sources linked against the cuda backend built for the CPU, so its
# kernels run here, without a GPU, against ref. Built by make test where the
# CUDA headers are (not under sanitizers); otherwise reported as skipped.
for name in $(sed -n 's/^\(test_[a-z0-9_]*\)$/\1/p' tests/cuda_emu/emu_tests.list); do
  label="$name[cuda (CPU emulation)]"
  binary="$build/emu/tests/$name"
  if [ ! -x "$binary" ]; then
    skipped=$((skipped + 1))
    echo "skip $label: not built (no CUDA headers, or a sanitizer build)"
    continue
  fi
  log="$build/emu/tests/$name.log"
  start=$(date +%s.%N)
  LTC_TEST_CUDA_ONLY=1 "$binary" >"$log" 2>&1
  count_log "$label" "$log" $? "$start"
done

# The libFuzzer targets (tests/fuzz), briefly: each over its seeds, then
# ${LTC_FUZZ_SECONDS:-2} s of mutations, so that a harness cannot rot unseen
# (make fuzz runs them for long). Built by make test where clang is (not
# under sanitizers; LTC_FUZZ_BUILT=1 says make test built them, so a missing
# one fails); otherwise reported as skipped.
for source in tests/fuzz/fuzz_*.c; do
  name=$(basename "$source" .c)
  binary="$build/fuzz/$name"
  if [ ! -x "$binary" ] && [ "${LTC_FUZZ_BUILT:-0}" = 1 ]; then
    failed=$((failed + 1))
    failed_names+=("fuzz/$name (not built)")
    echo "FAIL fuzz/$name: not built by make test"
    continue
  fi
  if [ ! -x "$binary" ]; then
    skipped=$((skipped + 1))
    echo "skip fuzz/$name: not built (no clang, or a sanitizer build)"
    continue
  fi
  if result=$(tests/fuzz/run_target.sh "$binary" "${LTC_FUZZ_SECONDS:-2}" 2>&1); then
    passed=$((passed + 1))
    echo "ok   fuzz/$name (${result##*$'\n'})"
  else
    failed=$((failed + 1))
    failed_names+=("fuzz/$name")
    echo "FAIL fuzz/$name:"
    printf '%s\n' "$result" | tail -n 30
  fi
done

for script in tests/e2e/*.sh; do
  [ -f "$script" ] || continue
  name=$(basename "$script" .sh)
  log="$build/tests/e2e-$name.log"
  mkdir -p "$build/tests"
  start=$(date +%s.%N)
  if bash "$script" >"$log" 2>&1; then
    passed=$((passed + 1))
    echo "ok   e2e/$name ($(since "$start") s)"
  else
    failed=$((failed + 1))
    failed_names+=("e2e/$name")
    echo "FAIL e2e/$name ($(since "$start") s):"
    tail -n 30 "$log"
  fi
done

if [ ${#failed_names[@]} -ne 0 ]; then
  echo "failed: ${failed_names[*]}"
fi
echo "tests: $passed passed, $failed failed, $skipped skipped in $(since "$all_start") s"
[ "$failed" -eq 0 ]
