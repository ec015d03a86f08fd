#!/usr/bin/env bash
# Resume equivalence of `train`: a run killed with SIGKILL at a random-ish
# moment after its first checkpoint and continued with --resume must give
# exactly the run that was never interrupted: the same train_loss at every
# step (as printed in metrics.jsonl) and byte-identical exported backbones and
# checkpoints. Done for SimCLR (optimizer state, lr schedule, data position)
# and DINO (EMA teacher, centre, momentum/temperature schedules, the frozen
# last layer thawing mid-run).
set -u
source "$(dirname "$0")/lib.bash"
e2e_init resume
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=PASSIVE  # see train.sh: no spinning threads on a loaded machine

images="$work/images"
"$build/tests/e2e/make_images" "$images" 48 --corrupt 2 || fail "make_images"

# "STEP LOSS" per step, the last line of a step winning (a resumed run logs
# again the steps after its checkpoint), in step order.
losses_by_step() {
  sed -n 's/^{"step": \([0-9]*\), "train_loss": \([^,}]*\).*/\1 \2/p' "$1" |
    awk '{ loss[$1] = $2 } END { for (s in loss) print s, loss[s] }' | sort -n
}

# check_resume NAME STEPS -- train args...: runs A uninterrupted, B killed
# (-9) after its first checkpoint and resumed, and compares them.
check_resume() {
  local name=$1 steps=$2
  shift 3
  local a="$work/$name-a" b="$work/$name-b"
  local output
  output=$("$bin" train --out "$a" "$@" 2>&1) || {
    fail "$name: run A failed: $output"
    return
  }

  "$bin" train --out "$b" "$@" >"$work/$name-b.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  # Wait for the first checkpoint, then for 1 to 3 more logged steps, then a
  # random part of a step: the kill lands anywhere in steps 7 to 10.
  local target=$((6 + 1 + RANDOM % 3))
  for _ in $(seq 1200); do
    kill -0 "$pid" 2>/dev/null || break
    [ -f "$b/checkpoints/last.ckpt" ] && [ "$(wc -l <"$b/metrics.jsonl")" -ge "$target" ] && break
    sleep 0.05
  done
  sleep "0.$((RANDOM % 3))$((RANDOM % 10))"
  kill -9 "$pid" 2>/dev/null
  { wait "$pid"; } 2>/dev/null
  local status=$?
  if [ "$status" -ne 137 ]; then
    fail "$name: run B was not killed (exit $status, finished too early?): $(cat "$work/$name-b.log")"
    return
  fi
  local killed_at
  killed_at=$(tail -n 1 "$b/metrics.jsonl" 2>/dev/null | sed -n 's/^{"step": \([0-9]*\),.*/\1/p')
  output=$("$bin" train --out "$b" --resume "$@" 2>&1) || {
    fail "$name: resumed run B failed: $output"
    return
  }
  local resumed_at
  resumed_at=$(printf '%s\n' "$output" | sed -n 's/.*resuming from .* at step \([0-9]*\) of.*/\1/p')
  [ -n "$resumed_at" ] || fail "$name: the resumed run does not say where it resumed: $output"
  echo "$name: B killed after logging step ${killed_at:-none}, resumed at step $resumed_at"
  # The steps B logged after its checkpoint are done again by the resumed run.
  [ "${killed_at:-0}" -ge "${resumed_at:-0}" ] ||
    fail "$name: B was killed before logging any step after its checkpoint"

  local losses_a losses_b
  losses_a=$(losses_by_step "$a/metrics.jsonl")
  losses_b=$(losses_by_step "$b/metrics.jsonl")
  [ "$(printf '%s\n' "$losses_a" | wc -l)" -eq "$steps" ] ||
    fail "$name: run A logged $(printf '%s\n' "$losses_a" | wc -l) steps, expected $steps"
  if [ "$losses_a" != "$losses_b" ]; then
    local first
    first=$(paste -d ' ' <(printf '%s\n' "$losses_a") <(printf '%s\n' "$losses_b") |
      awk '$1 != $3 || $2 != $4 { print "step " $1 ": A " $2 ", B step " $3 ": " $4; exit }')
    fail "$name: train_loss differs after resuming at step $resumed_at; first difference: $first"$'\n'"A:"$'\n'"$losses_a"$'\n'"B:"$'\n'"$losses_b"
  fi
  cmp -s "$a/exported_models/exported_last.safetensors" "$b/exported_models/exported_last.safetensors" ||
    fail "$name: exported_last.safetensors of A and B differ"
  cmp -s "$a/checkpoints/last.ckpt" "$b/checkpoints/last.ckpt" ||
    fail "$name: checkpoints/last.ckpt of A and B differ"
}

base=(--data "$images" --image-size 32 --batch-size 8 --num-workers 2 --threads 2 --log-every 1
      --method-arg hidden_dim=64 --method-arg output_dim=32)
# 3 epochs x 6 steps; checkpoints after steps 6, 12 and 18.
check_resume simclr 18 -- "${base[@]}" --method simclr --epochs 3 --seed 7
# 2 epochs x 6 steps; the teacher temperature warms up over 8 steps and the
# last layer thaws after 4, so B resumes in the middle of both.
check_resume dino 12 -- "${base[@]}" --method dino --epochs 2 --seed 11 \
  --local-image-size 16 --local-views 2 --method-arg bottleneck_dim=16 \
  --method-arg warmup_teacher_temp_steps=8 --method-arg freeze_last_layer_steps=4

e2e_finish
