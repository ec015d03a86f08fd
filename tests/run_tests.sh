#!/usr/bin/env bash
# Runs every cmocka unit test binary, the CUDA emulation's tests, the fuzz
# targets briefly and every end-to-end shell test, three at a time
# (LTC_TEST_JOBS; 1 runs them one by one), and prints one closing line
# "tests: N passed, N failed, N skipped" (skipped: tests this machine cannot
# run, such as the GPU ones without a GPU). Exit status 1 when any test
# failed.
set -u
build=${1:-build}
passed=0
failed=0
skipped=0
failed_names=()
export LTC_BIN="$build/lightly-train-c"
export LTC_BUILD="$build"
# The test environment's Python (tools/test_venv.sh: ONNX Runtime, MLflow).
export LTC_TEST_PYTHON="$build/test-venv/bin/python"
# The cuda backend's file of cuDNN algorithm choices (backend/conv_algorithms.h)
# in the build folder, not the user's cache: the emulation's plans write there.
# Emptied first: what the emulation refused before a change to it is no
# verdict on the emulation now.
export LTC_CUDNN_ALGORITHMS="$build/tests/cudnn-algorithms.txt"
rm -f "$LTC_CUDNN_ALGORITHMS"
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

# The tests run as jobs, LTC_TEST_JOBS (default 3) at a time, each job's
# line printed when it ends: a 2-core machine stays busy, where one test at
# a time left a core idle in every single-threaded stretch (the learning
# check's minutes at one thread above all). The learning check is queued
# first (the longest job), then the end-to-end tests, then the short unit
# tests that fill the end. OpenMP threads sleep instead of spinning while
# they wait: beside another job, spinning threads make a step up to ~10x
# slower (measured: test_methods took 217 s beside another make test, 33 s
# alone).
# Three on two cores: the end-to-end scripts wait a good part of their
# time (process starts, mpirun, Python, polls for a signal's moment), which
# a third job fills. Measured on the 2-core AMD EPYC VM, fresh clone of
# 8f39b40, the same tests: 2 jobs 861.7 s, 3 jobs 720.5 s (each job slower,
# the cores busier; all passed in both).
jobs_max=${LTC_TEST_JOBS:-3}
# The end-to-end tests' working folders (tests/e2e/lib.bash: LTC_TEST_TMP)
# in memory (/dev/shm) where it has room, else /tmp. Their runs write a
# checkpoint, an epoch file's link and two exports each (180 MB for a
# ResNet-18), which on ext4 the kernel then writes back to disk on the same
# cores: measured on the 2-core AMD EPYC VM (2026-12-01), e2e/train_resume
# 27.7 s on /tmp against 23.3-25.5 s on /dev/shm (machine busy time 3435-3473
# against 3007-3256 ticks), e2e/train_ranks 109-113 s against 104 s. Its
# largest folder (train_ranks) peaked at 5.9 GB; three jobs at once stay
# within the 12 GB asked for here.
if [ -z "${LTC_TEST_TMP:-}" ]; then
  shm_free_kb=$(df -k --output=avail /dev/shm 2>/dev/null | tail -n 1)
  mem_free_kb=$(sed -n 's/^MemAvailable: *\([0-9]*\) kB/\1/p' /proc/meminfo 2>/dev/null)
  if [ -w /dev/shm ] && [ "${shm_free_kb:-0}" -ge 12000000 ] && [ "${mem_free_kb:-0}" -ge 16000000 ]; then
    export LTC_TEST_TMP=/dev/shm
  fi
fi
echo "end-to-end tests' working folders in ${LTC_TEST_TMP:-/tmp}"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
job_kinds=()
job_names=()
job_paths=()
# add_job KIND NAME PATH: KIND is unit-native, unit-avx2, unit-scalar, emu, emu-compute, emu-others,
# fuzz or e2e; PATH the binary or script.
add_job() {
  job_kinds+=("$1")
  job_names+=("$2")
  job_paths+=("$3")
}

# The learning check first: one thread for minutes, the longest job, so it
# runs beside the others rather than after them. Its result does not depend
# on the load (one compute thread, fixed seeds): only its time does.
learning=tests/e2e/learning_fashion_mnist.sh
[ -f "$learning" ] && add_job e2e learning_fashion_mnist "$learning"

# Then every other end-to-end test: they run beside the learning check, two
# at a time until it ends (and each beside at most two other jobs after).
for script in tests/e2e/*.sh; do
  [ -f "$script" ] || continue
  [ "$script" = "$learning" ] && continue
  add_job e2e "$(basename "$script" .sh)" "$script"
done

# Every unit test runs with the SIMD kernels the CPU offers (ours and
# oneDNN's), and as a CPU without AVX2 would run it: LTC_SIMD=scalar (our
# portable code) and oneDNN limited to SSE4.1. On an AVX-512 CPU a third
# pass limits oneDNN to AVX2, the kernels of AVX2-only CPUs (AMD EPYC before
# Zen 4), which sum in another order: a test must hold on every x86-64 CPU,
# not only on the one CI happens to get.
passes="native scalar"
grep -qw avx512f /proc/cpuinfo 2>/dev/null && passes="native avx2 scalar"
# Run in the native pass only: whole-step compositions whose kernels the op
# tests already run in every pass (a minute each per pass on 2 cores; on
# 2026-11-28 test_methods took 54 s native and 86 s scalar, the largest unit
# job after test_method_steps, beside the 15-minute budget of make test),
# and tests that run no SIMD kernel at all, whose passes could only repeat
# the same instructions: the ref backend's (test_ref_precision,
# test_staging: 85 s of the avx2 and scalar passes on 2026-11-29) and the
# loopback rendezvous.
native_only=" test_method_steps test_methods test_ref_precision test_staging test_rendezvous "
native_only+="test_dinov31_paka "  # a whole DINOv31 step (its ops: test_backend_paka_ops)
# Whole method steps with an embedding head (a head block: test_heads in every
# pass): 86 s of the avx2 and scalar passes on 2026-12-01.
native_only+="test_embed_head "
# Every size of every YOLO family against Ultralytics (its convs, norms,
# pools and attention: the op tests, in every pass; test_resnet keeps a
# whole-model composition in every pass): 52 s of the avx2 and scalar
# passes on 2026-12-01.
native_only+="test_yolo "
# Host code only (model tables, pickles, state-dict files: no compute kernel),
# 28 s of the avx2 and scalar passes on 2026-12-01.
native_only+="test_yolo_init test_ultralytics_export test_pt_state_dict test_pt_reader "
native_only+="test_torch_module_export "
# Host code with no kernel the SIMD passes switch (file scans, launchers, the
# MLflow client, state-dict and event files, names, arguments): ~16 s of
# the avx2 and scalar passes on 2026-12-01.
native_only+="test_scan test_local_launch test_mlflow test_safetensors test_weights "
native_only+="test_pt_memory test_output_writes test_decode_libraries test_tensorboard "
native_only+="test_transform_args test_options test_trainer_args test_callbacks test_device_stats "
# Whole-model and whole-step compositions again (models loaded from files
# and their features, the gradient reports of every method's step, the
# ConvNeXts against torchvision; their ops run in every pass, and
# test_resnet keeps a whole model there) and the decoder processes (the same
# decoder in and out of a child): 38 s of the avx2 and scalar passes on
# 2026-12-01, when a fresh clone's make test reached 902 s.
native_only+="test_model_source test_gradient_overlap test_convnext test_decoder_process "
for pass in $passes; do
# The binaries of today's tests/test_*.c only: a binary left in the build
# folder by a test since deleted or renamed is neither run nor counted.
for source in tests/test_*.c; do
  binary="$build/tests/$(basename "$source" .c)"
  [ -x "$binary" ] || { failed=$((failed + 1)); failed_names+=("$(basename "$binary") (not built)"); continue; }
  name=$(basename "$binary")
  [ "$pass" != native ] && [[ "$native_only" == *" $name "* ]] && continue
  [ "$pass" = native ] || name="$name[$pass]"
  add_job "unit-$pass" "$name" "$binary"
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
  add_job emu "$label" "$binary"
done
# Those that move data between the copy and compute streams twice more, in
# the emulation's other schedules (emu_streams.cpp): the compute stream
# runs its work when it is queued, so a kernel that does not wait for a
# copy reads what was there before, with each launch's blocks last to
# first (a kernel whose blocks depend on each other's order changes); and
# the other streams run theirs when queued, so a copy that does not wait
# for the kernels still reading its destination overwrites it.
for name in $(sed -n 's/^other-schedules \(test_[a-z0-9_]*\)$/\1/p' tests/cuda_emu/emu_tests.list); do
  binary="$build/emu/tests/$name"
  [ -x "$binary" ] || continue  # counted as skipped above
  add_job emu-compute "$name[cuda (CPU emulation, compute stream at once, blocks reversed)]" "$binary"
  add_job emu-others "$name[cuda (CPU emulation, copy stream at once)]" "$binary"
done

# The libFuzzer targets (tests/fuzz), briefly: each over its seeds, then
# ${LTC_FUZZ_SECONDS:-1} s of mutations, so that a harness cannot rot unseen
# (make fuzz runs them for long). Built by make test where clang is (not
# under sanitizers; LTC_FUZZ_BUILT=1 says make test built them, so a missing
# one fails); otherwise reported as skipped. (1 s, not 2, since 2026-12-02:
# the 17 targets' jobs took ~3 s each.)
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
  add_job fuzz "fuzz/$name" "$binary"
done

mkdir -p "$build/tests"

# The log of job I.
job_log() {
  case ${job_kinds[$1]} in
    unit-*) echo "$build/tests/${job_names[$1]}.log" ;;
    emu) echo "$build/emu/tests/$(basename "${job_paths[$1]}").log" ;;
    emu-compute) echo "$build/emu/tests/$(basename "${job_paths[$1]}")-compute-at-once.log" ;;
    emu-others) echo "$build/emu/tests/$(basename "${job_paths[$1]}")-others-at-once.log" ;;
    fuzz) echo "$build/fuzz/$(basename "${job_paths[$1]}").result" ;;
    e2e) echo "$build/tests/e2e-${job_names[$1]}.log" ;;
  esac
}

# Runs job I (in the background); its exit status is the job's.
run_job() {
  local path=${job_paths[$1]} log
  log=$(job_log "$1")
  case ${job_kinds[$1]} in
    unit-native) "$path" >"$log" 2>&1 ;;
    unit-avx2) ONEDNN_MAX_CPU_ISA=AVX2 "$path" >"$log" 2>&1 ;;
    unit-scalar) LTC_SIMD=scalar ONEDNN_MAX_CPU_ISA=SSE41 "$path" >"$log" 2>&1 ;;
    emu) LTC_TEST_CUDA_ONLY=1 "$path" >"$log" 2>&1 ;;
    emu-compute) LTC_EMU_STREAMS=compute-at-once LTC_EMU_BLOCK_ORDER=reverse LTC_TEST_CUDA_ONLY=1 \
      "$path" >"$log" 2>&1 ;;
    emu-others) LTC_EMU_STREAMS=others-at-once LTC_TEST_CUDA_ONLY=1 "$path" >"$log" 2>&1 ;;
    fuzz) tests/fuzz/run_target.sh "$path" "${LTC_FUZZ_SECONDS:-1}" >"$log" 2>&1 ;;
    e2e) bash "$path" >"$log" 2>&1 ;;
  esac
}

# Counts a fuzz target's or an end-to-end script's run and prints its line:
# count_run LABEL STATUS LOG SUMMARY (SUMMARY: what the ok line says).
count_run() {
  if [ "$2" -eq 0 ]; then
    passed=$((passed + 1))
    echo "ok   $1 ($4)"
  else
    failed=$((failed + 1))
    failed_names+=("$1")
    echo "FAIL $1 (exit $2, $4):"
    tail -n 30 "$3"
  fi
}

# Counts job I, ended with STATUS, started at START, and prints its line.
finish_job() {
  local i=$1 status=$2 start=$3 name=${job_names[$1]} log
  log=$(job_log "$i")
  case ${job_kinds[$i]} in
    unit-* | emu*) count_log "$name" "$log" "$status" "$start" ;;
    fuzz) count_run "$name" "$status" "$log" "$(tail -n 1 "$log")" ;;
    e2e) count_run "e2e/$name" "$status" "$log" "$(since "$start") s" ;;
  esac
}

# Starts the jobs in queue order, LTC_TEST_JOBS at a time, and counts each
# one when it ends.
declare -A running_job=() running_start=()
next=0
while [ "$next" -lt ${#job_kinds[@]} ] || [ ${#running_job[@]} -gt 0 ]; do
  if [ "$next" -lt ${#job_kinds[@]} ] && [ ${#running_job[@]} -lt "$jobs_max" ]; then
    start=$(date +%s.%N)
    run_job "$next" &
    running_job[$!]=$next
    running_start[$!]=$start
    next=$((next + 1))
    continue
  fi
  ended=''
  wait -n -p ended
  status=$?
  if [ -n "$ended" ] && [ -n "${running_job[$ended]+set}" ]; then
    finish_job "${running_job[$ended]}" "$status" "${running_start[$ended]}"
    unset "running_job[$ended]" "running_start[$ended]"
    continue
  fi
  # wait -n named no job of ours (bash 5.2 once gave a pid it did not start
  # here, at the end of a make test on a loaded 2-core VM): collect any of
  # our jobs that has ended by its pid, and wait again for the others.
  for pid in "${!running_job[@]}"; do
    kill -0 "$pid" 2>/dev/null && continue
    wait "$pid"
    status=$?
    finish_job "${running_job[$pid]}" "$status" "${running_start[$pid]}"
    unset "running_job[$pid]" "running_start[$pid]"
  done
  sleep 0.1
done

if [ ${#failed_names[@]} -ne 0 ]; then
  echo "failed: ${failed_names[*]}"
fi
echo "tests: $passed passed, $failed failed, $skipped skipped in $(since "$all_start") s"
[ "$failed" -eq 0 ]
