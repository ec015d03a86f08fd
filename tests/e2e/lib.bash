# Shared set-up of the end-to-end shell tests (sourced, not run: the test
# runner only runs tests/e2e/*.sh). After `e2e_init NAME`:
#   $bin     the program under test ($LTC_BIN, default build/lightly-train-c)
#   $build   the build folder ($LTC_BUILD, default build)
#   $work    a fresh temporary folder (under $LTC_TEST_TMP, default /tmp:
#            tests/run_tests.sh picks /dev/shm where it has room), removed
#            on exit; weights by name
#            offline (HF_HUB_OFFLINE=1) with empty caches under it
#   fail MESSAGE               count a failure and print it
#   expect STATUS PATTERN -- command...
#                              the command's exit status and a line of its
#                              output (stdout and stderr) matching PATTERN
#   expect_only STATUS PATTERN -- command...
#                              as expect, and that line is all the output
#   refuse_distillation PATTERN method-args...
#                              a resnet18 `distillation` run (with the
#                              caller's ${common[@]}) must print one line
#                              matching PATTERN, exit 2 and write nothing
#   e2e_finish                 prints the verdict and exits 1 on failures
#   fake_hub_start ROOT LOG    the stand-in hub and GitHub (fake_hub.py) serving ROOT,
#                              a line per request in LOG; sets $fake_hub_url
#   emu_require                sets $emu, the CUDA emulation's program, or skips
#                              (exit 0) without one
#   learning_require           for the learning checks: skips (exit 0) without
#                              Debian's dataset-fashion-mnist or under a sanitizer
#                              build, fails without the converter; sets $tool
bin=${LTC_BIN:-build/lightly-train-c}
build=${LTC_BUILD:-build}
failures=0
e2e_name=e2e

e2e_init() {
  e2e_name=$1
  work=$(mktemp -d "${LTC_TEST_TMP:-/tmp}/ltc-e2e-$1-XXXXXX")
  trap 'rm -rf "$work"' EXIT
  # Weights by name never reach the network nor the user's caches here
  # (tests/e2e/weights.sh serves them from a stand-in hub).
  export HF_HUB_OFFLINE=1 LIGHTLY_TRAIN_CACHE_DIR="$work/weights-cache" HF_HOME="$work/hf-home"
}

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

expect() { expect_output any "$@"; }
expect_only() { expect_output only "$@"; }

# expect and expect_only: LINES is "any" or "only" (the line is all the output).
expect_output() {
  local lines=$1 status=$2 pattern=$3
  shift 4
  local output
  output=$("$@" 2>&1)
  local got=$?
  [ "$got" -eq "$status" ] || fail "'$*' exited $got, expected $status; output: $output"
  [ "$lines" = any ] || [ "$(printf '%s\n' "$output" | wc -l)" -eq 1 ] ||
    fail "'$*' printed more than one line: $output"
  printf '%s\n' "$output" | grep -q -E -- "$pattern" || fail "'$*' output lacks /$pattern/: $output"
}

refuse_distillation() {
  local pattern=$1 output status
  shift
  output=$("$bin" train "${common[@]}" --out "$work/refused" --model resnet18 \
    --method distillation "$@" --max-steps 1 2>&1)
  status=$?
  [ "$status" -eq 2 ] || fail "'$*' exited $status, expected 2: $output"
  [ "$(printf '%s\n' "$output" | wc -l)" -eq 1 ] || fail "'$*' printed more than one line: $output"
  printf '%s\n' "$output" | grep -q -E -- "$pattern" || fail "'$*' output lacks /$pattern/: $output"
  [ -e "$work/refused" ] && fail "'$*' wrote $work/refused" && rm -rf "$work/refused"
}

# Sets $emu to the CUDA emulation's program, or skips (exit 0) where none
# was built (no CUDA headers).
emu_require() {
  emu="$build/emu/lightly-train-c"
  [ -x "$emu" ] && return 0
  echo "skipped: no CUDA emulation build ($emu; CUDA headers missing)"
  exit 0
}

learning_require() {
  tool="$build/tools/fashion_mnist_folder"
  local source_dir=/usr/share/datasets/fashion-mnist
  if [ ! -f "$source_dir/train-images-idx3-ubyte.gz" ] ||
     [ ! -f "$source_dir/t10k-images-idx3-ubyte.gz" ]; then
    echo "skipped: dataset-fashion-mnist not installed (make deps installs it)"
    exit 0
  fi
  if grep -qa __asan_init "$bin" 2>/dev/null; then
    echo "skipped: sanitizer build (a training run takes too long under ASan)"
    exit 0
  fi
  [ -x "$tool" ] || { echo "FAIL: $tool is not built (make tools)"; exit 1; }
}

# The weights caches under $work, no proxy, token or offline switch from
# the caller, short download timeouts (seconds, not minutes), and the
# stand-in server (stopped on exit).
fake_hub_start() {
  export LIGHTLY_TRAIN_CACHE_DIR="$work/cache" HF_HOME="$work/hf"
  unset HF_HUB_OFFLINE HF_TOKEN HF_TOKEN_PATH HF_HUB_CACHE XDG_CACHE_HOME http_proxy https_proxy \
    HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy
  export LIGHTLY_TRAIN_DOWNLOAD_CHUNK_TIMEOUT_SEC=1 LIGHTLY_TRAIN_DOWNLOAD_RETRIES=2 \
    LIGHTLY_TRAIN_DOWNLOAD_BACKOFF_SEC=0.05
  python3 "$(dirname "${BASH_SOURCE[0]}")/fake_hub.py" "$1" "$work/port" "$2" &
  fake_hub_pid=$!
  trap 'kill $fake_hub_pid 2>/dev/null; rm -rf "$work"' EXIT
  for _ in $(seq 50); do [ -s "$work/port" ] && break; sleep 0.1; done
  fake_hub_url="http://127.0.0.1:$(cat "$work/port")"
}

e2e_finish() {
  if [ "$failures" -ne 0 ]; then
    echo "$failures failure(s)"
    exit 1
  fi
  echo "$e2e_name: all checks passed"
}
