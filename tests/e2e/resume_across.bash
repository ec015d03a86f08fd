# A checkpoint written by one backend and resumed by another (sourced by
# tests/e2e/train_resume_backends.sh, ref <-> cpu, and by
# tests/run_gpu_tests.sh, GPU <-> CPU). Needs bin, work and fail (lib.bash,
# or the GPU script's own).
#
#   resume_across NAME "FIRST ARGS" "SECOND ARGS" STEP -- train args...
#
# Runs `train ARGS FIRST ARGS` twice: once to the end, once killed right
# after its checkpoint at step STEP (LTC_FAULT=kill-before-export@STEP, an
# epoch's end), then resumes the second with `--resume SECOND ARGS`. The
# resumed run must finish, say it resumed at STEP, and its loss at STEP,
# computed by the second backend from the weights, batch position and
# statistics the first one saved, must equal the uninterrupted run's loss
# at STEP within 1e-4 relative: the two backends' fp32 losses from the same
# state agree to about 1e-6 (test_method_steps), while a state that did not
# survive the trip (weights, data position) moves the loss far more. Later
# steps are not compared: a train-mode BatchNorm over a small batch makes
# each step's gradients ill-conditioned, so two backends drift apart by a
# percent per step. With FIRST and SECOND the same, the final checkpoints
# must be byte-identical too.
# shellcheck disable=SC2154  # bin, work: set by the sourcing script
resume_across() {
  local name=$1 first=$2 second=$3 step=$4
  shift 5
  local whole="$work/$name-whole" parts="$work/$name-parts"
  # shellcheck disable=SC2086  # FIRST and SECOND are word lists
  "$bin" train "$@" $first --out "$whole" --log-every 1 >"$work/$name-whole.log" 2>&1 ||
    { fail "$name: the uninterrupted run failed: $(tail -n 5 "$work/$name-whole.log")"; return; }
  # shellcheck disable=SC2086
  { LTC_FAULT=kill-before-export@$step "$bin" train "$@" $first --out "$parts" --log-every 1 \
      >"$work/$name-first.log" 2>&1; } 2>/dev/null
  local status=$?
  [ "$status" -eq 137 ] ||
    { fail "$name: the first part was not killed (exit $status): $(tail -n 5 "$work/$name-first.log")"; return; }
  # shellcheck disable=SC2086
  "$bin" train "$@" $second --out "$parts" --log-every 1 --resume >"$work/$name-second.log" 2>&1 ||
    { fail "$name: the resumed run failed: $(tail -n 5 "$work/$name-second.log")"; return; }
  grep -q "resuming from .* at step $step of" "$parts/train.log" ||
    fail "$name: train.log does not say it resumed at step $step: $(grep -i resum "$parts/train.log")"
  local expected got
  expected=$(sed -n "s/^{\"step\": $step, \"train_loss\": \([^,}]*\).*/\1/p" "$whole/metrics.jsonl")
  got=$(sed -n "s/^{\"step\": $step, \"train_loss\": \([^,}]*\).*/\1/p" "$parts/metrics.jsonl")
  awk -v a="$got" -v b="$expected" 'BEGIN { d = a - b; if (d < 0) d = -d;
      exit !(a != "" && b != "" && d <= 1e-4 * (b < 0 ? -b : b)) }' ||
    fail "$name: the loss at step $step after the move is $got, the uninterrupted run's $expected"
  # The same backend on both sides: the resumed run ends where the
  # uninterrupted one does, bit for bit.
  if [ "$first" = "$second" ]; then
    cmp -s "$whole/checkpoints/last.ckpt" "$parts/checkpoints/last.ckpt" ||
      fail "$name: resumed on the same backend, the final checkpoint differs from the uninterrupted run's"
  fi
  echo "$name: loss at step $step: uninterrupted $expected, resumed $got"
}
