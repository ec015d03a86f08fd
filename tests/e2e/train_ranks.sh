#!/usr/bin/env bash
# Data-parallel `train` and `embed` on CPU ranks under mpirun, against one
# process with the whole batch (sync BatchNorm on, same seed):
# - one step at the default lr, 2 and 3 ranks: the checkpoint (weights,
#   BatchNorm statistics, optimizer state = the step's averaged gradient,
#   DINO's teacher and centre) equals the one-process checkpoint, and
#   without synchronised BatchNorm it does not; the same for DINOv2 on a
#   ViT with Sinkhorn-Knopp centring;
# - two epochs at a small lr, 2 and 3 ranks: the same train_loss at every
#   step, and the same exported backbone;
# - the gradient buckets overlapped with backward (the default) and after
#   it (--gradient-overlap false) give bit-identical checkpoints, SimCLR and
#   DINO with local crops, with and without gradient accumulation;
# - only rank 0 writes (the other ranks get their own --out, which must stay
#   absent) and only rank 0 prints;
# - a killed rank, and a hung rank (SIGSTOP), end the run with a non-zero
#   status within the timeout; the last checkpoint stays intact;
# - a 2-rank run killed and resumed equals the uninterrupted one, and so
#   does one whose rank 1 got SIGTERM (every rank stops at the same step);
# - bad launches (batch not divisible, --devices not matching, no OpenMPI
#   library for the ranks) exit 2;
# - embed on 3 ranks writes the rows of one process, in input order.
#
# Tolerances, derived from what the ranks change: they split sums that one
# process does in one go (BatchNorm statistics, gradient sums, the NT-Xent
# columns). Measured on this configuration (2-core AMD EPYC with AVX-512,
# 2026-11-29: seeds 1-5, oneDNN's own kernels and, as a CPU without AVX2,
# LTC_SIMD=scalar with oneDNN limited to SSE4.1):
# - Rounding: a float32 sum of n terms is off by about sqrt(n) 2^-24 of
#   their magnitude; the gradients' sums run over some 10^5 terms, and after
#   one step 2 and 3 ranks differ from one process by 1.2e-5 to 2.8e-5 of a
#   tensor's norm or largest value. The first logged losses (step 0: the same weights,
#   only the forward's sums split) differ by at most 2.4e-6 relative: bound
#   2e-5.
# - Kinks: the ResNet's ReLUs see ~5e5 inputs a step, so one of them lies
#   within rounding of 0 every few steps; its backward gate flips, and
#   through BatchNorm's backward, which couples every position of a channel,
#   every gradient below it changes: one such flip moved single elements of
#   a gradient by 15% of their tensor's largest value and the norms of all
#   earlier layers' gradients by 1.4-2% (seen after one step in 2 of 15
#   pairs, between two runs on one process as often as between ranks and
#   one process). So one step of a ResNet is compared per tensor by norm,
#   ||a - b|| <= 0.05 ||b|| (2.5x a flip; 2 ranks without synchronised
#   BatchNorm miss it 36-fold), and a ViT (GELU and LayerNorm: no kinks) by
#   element, |a - b| <= 1e-7 + 2e-4 max|b|.
# - Several steps: flips and rounding accumulate in what training changed,
#   not in the weights (a BatchNorm bias that starts at 0 is all update; a
#   weight near 1 moves by a few dozen ulps of 1 in 8 steps at lr 1e-4). The
#   two-epoch runs start from one weights file, and their exported
#   backbones are compared by ||a - b|| <= 4 ulp ||b|| + 0.25 ||b - initial||:
#   2 and 3 ranks against one process reached 0.062 of the update's norm
#   (0.0019 without a flip), one process against one process with other
#   kernels the same; 2 ranks without synchronised BatchNorm 1.87, lr 0 in
#   place of 1e-4 1.0. The later steps' losses within 2e-2 relative:
#   measured at most 7.8e-3 after a flip (1e-6 to 4e-5 without), while the
#   training moves each step's loss by 2-9% against lr 0, and 2 ranks
#   without synchronised BatchNorm by up to 25%.
# The elementwise bound 2e-4 max|b| these checks used before failed on an
# Intel AVX-512 CPU (bn1.bias, ~1e-5, all update: 2.08 of it) and fails
# here under SSE4.1 kernels (1.5 of it).
set -u
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/mpi.bash"
e2e_init train_ranks
mpi_require
export OMP_WAIT_POLICY=PASSIVE  # see train.sh
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$work"' EXIT
compare="$build/tests/e2e/compare_weights"

images="$work/images"
"$build/tests/e2e/make_images" "$images" 48 || fail "make_images"
# 48 images, global batch 12: 4 steps per epoch with 1, 2 or 3 ranks.
base=(--data "$images" --image-size 32 --batch-size 12 --num-workers 1 --threads 1
      --log-every 1 --seed 3 --method-arg hidden_dim=64 --method-arg output_dim=32)
simclr=(--method simclr)
dino=(--method dino --local-image-size 16 --local-views 2 --method-arg bottleneck_dim=16
      --method-arg freeze_last_layer_steps=0 --method-arg warmup_teacher_temp_steps=3)

# "STEP LOSS" per logged step.
losses() { sed -n 's/^{"step": \([0-9]*\), "train_loss": \([^,}]*\).*/\1 \2/p' "$1"; }

# run NP OUT args...: train on NP ranks (NP 1: without mpirun).
run() {
  local np=$1 out=$2
  shift 2
  if [ "$np" -eq 1 ]; then
    "$bin" train --out "$out" "$@" >"$out.log" 2>&1
  else
    mpi_run "$np" "$bin" train --out "$out" "$@" >"$out.log" 2>&1
  fi
}

# equivalence NAME KIND -- train args...: 1, 2 and 3 ranks give the same
# checkpoint after one step, compared by KIND: norm (a model with kinks)
# or element (without); and the same step-1 loss.
equivalence() {
  local name=$1 kind=$2
  shift 3
  local one="$work/$name-1"
  run 1 "$one" "$@" || { fail "$name: one process failed: $(cat "$one.log")"; return; }
  for np in 2 3; do
    local many="$work/$name-$np"
    run "$np" "$many" "$@" || { fail "$name: $np ranks failed: $(cat "$many.log")"; continue; }
    local result
    if [ "$kind" = element ]; then
      result=$("$compare" "$many/checkpoints/last.ckpt" "$one/checkpoints/last.ckpt" 1e-7 2e-4)
    else
      result=$("$compare" --norm "$many/checkpoints/last.ckpt" "$one/checkpoints/last.ckpt" 0.05)
    fi || fail "$name: $np ranks' checkpoint differs: $result"
    echo "$name, $np ranks, checkpoint: $result"
    local ours theirs
    ours=$(losses "$many/metrics.jsonl")
    theirs=$(losses "$one/metrics.jsonl")
    [ "$(printf '%s\n' "$ours" | wc -l)" -eq "$(printf '%s\n' "$theirs" | wc -l)" ] ||
      fail "$name: $np ranks logged other steps:"$'\n'"$ours"$'\n'"one process:"$'\n'"$theirs"
    local worst
    worst=$(paste -d ' ' <(printf '%s\n' "$ours") <(printf '%s\n' "$theirs") | awk '
      { d = $2 - $4; if (d < 0) d = -d; r = d / ($4 < 0 ? -$4 : $4); if (r > w) { w = r; s = $1 } }
      END { printf "%.3g %d", w, s }')
    echo "$name, $np ranks: largest relative train_loss difference ${worst% *} (step ${worst#* })"
    awk -v w="${worst% *}" 'BEGIN { exit !(w <= 2e-5) }' ||
      fail "$name: $np ranks' train_loss differs by ${worst% *} at step ${worst#* } (bound 2e-5)"
  done
}

# One step at the default lr: the averaged gradient in the optimizer state.
equivalence simclr-step norm -- "${base[@]}" "${simclr[@]}" --max-steps 1
equivalence dino-step norm -- "${base[@]}" "${dino[@]}" --max-steps 1
# DINOv2 with Sinkhorn-Knopp centring: the ranks' teacher outputs are
# assigned together (column maxima and sums all-reduced), so one step on 2
# and 3 ranks equals one process. The ViT's LayerScale starts at 0.5
# (make_backbone) so that the class tokens differ between images: at
# DINOv2's 1e-5 every image gets nearly the same teacher output and any
# split assigns uniformly. iBOT masks are on: the ranks mask the global
# batch as one process does (dinov2_masks_make_rank). No KoLeo: its
# neighbours lie within the rank's batch, as in DINOv2. Not vacuous: with
# the column sums left per rank, 2 ranks miss the checkpoint bound
# 1000-fold, and with every rank taking rank 0's crops' masks 2800-fold
# (measured). With softmax centring the checkpoint holds the
# centers after the step: the patch center is the ranks' summed masked
# patches over the global count.
"$build/tests/e2e/make_backbone" "$work/vit_t16.safetensors" vit_t16 7 64 0.5 ||
  fail "make_backbone vit_t16"
dinov2=(--data "$images" --image-size 64 --local-image-size 32 --local-views 2 --batch-size 12
        --num-workers 1 --threads 1 --log-every 1 --seed 3 --model vit_t16
        --checkpoint "$work/vit_t16.safetensors" --method dinov2 --method-arg hidden_dim=64
        --method-arg bottleneck_dim=16 --method-arg output_dim=32
        --method-arg koleo_loss_weight=0)
equivalence dinov2-sinkhorn-step element -- "${dinov2[@]}" --method-arg center_method=sinkhorn_knopp \
  --max-steps 1
equivalence dinov2-softmax-step element -- "${dinov2[@]}" --max-steps 1
# Not vacuous: without synchronised BatchNorm, 2 ranks normalise 6 images
# each and the same step lands far outside the bound.
run 2 "$work/unsynced" "${base[@]}" "${simclr[@]}" --max-steps 1 --sync-batchnorm false ||
  fail "unsynced run failed: $(cat "$work/unsynced.log")"
grep -q "BatchNorm per rank" "$work/unsynced/train.log" || fail "unsynced: train.log does not say so"
"$compare" --norm "$work/unsynced/checkpoints/last.ckpt" "$work/simclr-step-1/checkpoints/last.ckpt" \
  0.05 >/dev/null && fail "2 ranks without sync BatchNorm match one process: the check cannot fail"

# Two epochs at a small lr from one weights file: losses at every step and
# the exported backbone against what training changed (bounds above).
"$build/tests/e2e/make_backbone" "$work/resnet18.safetensors" resnet18 3 32 ||
  fail "make_backbone resnet18"
initial=(--checkpoint "$work/resnet18.safetensors")
# epoch_check NAME ONE MANY: MANY's run against ONE's.
epoch_check() {
  local name=$1 one=$2 many=$3 result worst
  result=$("$compare" --norm "$many/exported_models/exported_last.safetensors" \
    "$one/exported_models/exported_last.safetensors" 4.8e-7 "$work/resnet18.safetensors" 0.25) ||
    fail "$name: exported backbone differs: $result"
  echo "$name, exported backbone: $result"
  worst=$(paste -d ' ' <(losses "$many/metrics.jsonl") <(losses "$one/metrics.jsonl") | awk '
    $1 != $3 { print "steps differ"; exit }
    { d = $2 - $4; if (d < 0) d = -d; r = d / ($4 < 0 ? -$4 : $4) / ($1 == 0 ? 2e-5 : 2e-2)
      if (r > w) { w = r; s = $1 } }
    END { printf "%.3g %d", w, s }')
  echo "$name: train_loss closest to its bound at step ${worst#* } (${worst% *} of it)"
  awk -v w="${worst% *}" 'BEGIN { exit !(w <= 1) }' ||
    fail "$name: train_loss differs at step ${worst#* }: ${worst% *} of the bound (2e-5 at the first step, step 0, then 2e-2)"
  [ "$(losses "$many/metrics.jsonl" | wc -l)" -eq 8 ] || fail "$name: did not log 8 steps"
}
for method in simclr dino; do
  if [ "$method" = simclr ]; then args=("${simclr[@]}"); else args=("${dino[@]}"); fi
  one="$work/$method-epochs-1"
  run 1 "$one" "${base[@]}" "${args[@]}" "${initial[@]}" --epochs 2 --lr 1e-4 ||
    { fail "$method epochs: one process failed: $(cat "$one.log")"; continue; }
  for np in 2 3; do
    many="$work/$method-epochs-$np"
    run "$np" "$many" "${base[@]}" "${args[@]}" "${initial[@]}" --epochs 2 --lr 1e-4 ||
      { fail "$method epochs: $np ranks failed: $(cat "$many.log")"; continue; }
    epoch_check "$method, 2 epochs, $np ranks" "$one" "$many"
  done
done
# Not vacuous: 2 ranks without synchronised BatchNorm miss both bounds.
run 2 "$work/unsynced-epochs" "${base[@]}" "${simclr[@]}" "${initial[@]}" --epochs 2 --lr 1e-4 \
  --sync-batchnorm false || fail "unsynced epochs failed: $(cat "$work/unsynced-epochs.log")"
unsynced=$(epoch_check unsynced "$work/simclr-epochs-1" "$work/unsynced-epochs")
[ "$(printf '%s\n' "$unsynced" | grep -c '^FAIL')" -eq 2 ] ||
  fail "2 ranks without sync BatchNorm pass a two-epoch bound: the check cannot fail: $unsynced"

# ---- gradient overlap: the same bits as the buckets after backward ------------------
# The 2-rank epoch runs above overlap the buckets with backward (the
# default). The same runs with --gradient-overlap false must give the same
# checkpoint bit for bit (the same buckets reduced by the same calls; DINO
# runs backward twice per step, over its global and local crops, and a
# bucket started after the first pass would differ), and so must a run with
# gradient accumulation (only the last micro-batch overlaps).
for method in simclr dino; do
  if [ "$method" = simclr ]; then args=("${simclr[@]}"); else args=("${dino[@]}"); fi
  overlapped="$work/$method-epochs-2"
  after="$work/$method-epochs-2-after"
  run 2 "$after" "${base[@]}" "${args[@]}" "${initial[@]}" --epochs 2 --lr 1e-4 --gradient-overlap false ||
    { fail "$method: --gradient-overlap false failed: $(cat "$after.log")"; continue; }
  grep -q "overlapped with backward (--gradient-overlap true)" "$overlapped/train.log" ||
    fail "$method: train.log does not say the gradients overlap backward"
  grep -q "after backward (--gradient-overlap false)" "$after/train.log" ||
    fail "$method: train.log does not say the gradients are averaged after backward"
  grep -q '"profiling/comm_wait_time": ' "$overlapped/metrics.jsonl" ||
    fail "$method: no profiling/comm_wait_time in metrics.jsonl"
  result=$("$compare" "$overlapped/checkpoints/last.ckpt" "$after/checkpoints/last.ckpt" 0 0) ||
    fail "$method: overlap on and off differ: $result"
  echo "$method, 2 ranks, overlap on against off: $result"
done
for overlap in true false; do
  run 2 "$work/accumulate-$overlap" "${base[@]}" "${simclr[@]}" --max-steps 2 \
    --accumulate-grad-batches 2 --gradient-overlap "$overlap" ||
    fail "accumulate, overlap $overlap failed: $(cat "$work/accumulate-$overlap.log")"
done
result=$("$compare" "$work/accumulate-true/checkpoints/last.ckpt" \
  "$work/accumulate-false/checkpoints/last.ckpt" 0 0) ||
  fail "accumulated steps: overlap on and off differ: $result"

# ---- only rank 0 writes and prints -------------------------------------------------
# Each rank gets its own --out (it is not part of the run's identity): rank
# 1's must never appear; the working folder stays empty.
mkdir -p "$work/cwd"
bin_path=$(realpath "$bin")
# (The data workers left to auto: the pool per device is checked below.)
auto_workers=()
for ((i = 0; i < ${#base[@]}; i++)); do
  if [ "${base[i]}" = --num-workers ]; then i=$((i + 1)); else auto_workers+=("${base[i]}"); fi
done
(cd "$work/cwd" && mpi_run 2 bash -c '
  out="$1"; [ "$OMPI_COMM_WORLD_RANK" = 0 ] || out="$1-rank$OMPI_COMM_WORLD_RANK"
  shift; exec "$@" --out "$out"' _ "$work/writer" "$bin_path" train "${auto_workers[@]}" \
  "${simclr[@]}" --max-steps 2) >"$work/writer.log" 2>&1 ||
  fail "rank-0 writer run failed: $(cat "$work/writer.log")"
[ -e "$work/writer-rank1" ] && fail "rank 1 created its --out: $(ls -R "$work/writer-rank1")"
[ -z "$(ls -A "$work/cwd")" ] || fail "files appeared in the working folder: $(ls -A "$work/cwd")"
for file in checkpoints/last.ckpt exported_models/exported_last.safetensors metrics.jsonl train.log; do
  [ -s "$work/writer/$file" ] || fail "rank 0 did not write $file"
done
grep -q "^rank 1" "$work/writer.log" && fail "rank 1 printed: $(grep "^rank 1" "$work/writer.log")"
[ "$(grep -c "^run summary" "$work/writer.log")" -eq 1 ] || fail "not exactly one run summary"
grep -q "data parallel: 2 ranks (mpi, 2 per node), global batch 12 = 6 per rank, BatchNorm synchronised" \
  "$work/writer/train.log" || fail "train.log does not describe the ranks"

# ---- the data worker pool per device: (cores - devices) / devices --------------------
# One process gets the usable cores C for its device, each of 2 ranks C / 2;
# the pool is that less 1 (at least 1), and train.log says so.
"$bin" train "${auto_workers[@]}" "${simclr[@]}" --max-steps 1 --out "$work/one-auto" \
  >"$work/one-auto.log" 2>&1 || fail "one-process run (auto workers): $(cat "$work/one-auto.log")"
pool() {  # "WORKERS CORES" of the auto pool line of a train.log
  local line='data workers: \([0-9]*\) per device (auto: (cores - devices) \/ devices, here'
  sed -n "s/.*$line \\([0-9]*\\) cores per device.*/\\1 \\2/p" "$1"
}
read -r workers1 cores1 <<<"$(pool "$work/one-auto/train.log")"
read -r workers2 cores2 <<<"$(pool "$work/writer/train.log")"
if [ -z "${cores1:-}" ] || [ -z "${cores2:-}" ]; then
  fail "train.log does not give the data worker pool:" \
    "$(grep -h "data workers" "$work/one-auto/train.log" "$work/writer/train.log")"
else
  [ "$cores2" -eq $((cores1 / 2)) ] || fail "2 ranks: $cores2 cores per device, not $cores1 / 2"
  [ "$workers1" -eq $((cores1 > 1 ? cores1 - 1 : 1)) ] ||
    fail "1 device: $workers1 workers for $cores1 cores"
  [ "$workers2" -eq $((cores2 > 1 ? cores2 - 1 : 1)) ] ||
    fail "2 devices: $workers2 workers for $cores2 cores"
fi

# ---- bad launches --------------------------------------------------------------------
small=(--data "$images" --image-size 32 --num-workers 1 --threads 1 --method simclr)
expect 2 "--batch-size 8 is not divisible by the 3 ranks" -- \
  mpi_run 3 "$bin" train --out "$work/bad1" "${small[@]}" --batch-size 8
expect 2 "--devices 2, but OpenMPI \(mpirun\) started 3 process\(es\) on this node" -- \
  mpi_run 3 "$bin" train --out "$work/bad2" "${base[@]}" --devices 2
# OpenMPI is opened at run time (src/dist/mpi_library.h): ranks that cannot
# load it (as the pip wheel's program where no OpenMPI is installed) stop
# with one line saying so, before any work.
export LTC_MPI_LIBRARY=libmpi-absent.so.40
expect 2 "^lightly-train-c train: 2 CPU ranks: cannot load OpenMPI: libmpi-absent\.so\.40: .*several CPU ranks need OpenMPI" -- \
  mpi_run 2 -x LTC_MPI_LIBRARY "$bin" train --out "$work/bad3" "${small[@]}" --batch-size 8
unset LTC_MPI_LIBRARY
[ -e "$work/bad1" ] || [ -e "$work/bad2" ] || [ -e "$work/bad3" ] &&
  fail "a refused run created its --out"

# ---- a rank that dies or hangs -----------------------------------------------------
# start_ranks NAME NP args...: starts a long run in the background, waits for
# its first checkpoint; sets $mpirun_pid.
start_ranks() {
  local name=$1 np=$2
  shift 2
  mpi_run "$np" "$bin" train --out "$work/$name" "$@" >"$work/$name.log" 2>&1 &
  mpirun_pid=$!
  pids+=("$mpirun_pid")
  for _ in $(seq 1200); do
    [ -f "$work/$name/checkpoints/last.ckpt" ] && return 0
    kill -0 "$mpirun_pid" 2>/dev/null || break
    sleep 0.05
  done
  fail "$name: no checkpoint appeared: $(cat "$work/$name.log")"
  return 1
}

# wait_for PID SECONDS: the exit status, or 124 when still running then.
wait_for() {
  local pid=$1 limit=$2
  for _ in $(seq $((limit * 20))); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid"; return $?; }
    sleep 0.05
  done
  return 124
}

long=("${base[@]}" "${simclr[@]}" --epochs 200 --dist-timeout 5)
for mode in kill stop; do
  if start_ranks "$mode" 3 "${long[@]}"; then
    victim=$(rank_pid "$mpirun_pid" 1) || fail "$mode: rank 1 not found"
    cp "$work/$mode/checkpoints/last.ckpt" "$work/$mode.before" 2>/dev/null
    start=$(date +%s)
    if [ "$mode" = kill ]; then kill -9 "$victim"; else kill -STOP "$victim"; fi
    wait_for "$mpirun_pid" 60
    status=$?
    echo "$mode: rank 1 ($victim) -> the run ended with status $status after $(($(date +%s) - start)) s"
    [ "$status" -ne 0 ] && [ "$status" -ne 124 ] || fail "$mode: the run did not end with an error (status $status)"
    if [ "$mode" = stop ]; then
      grep -q "got no answer from the other ranks within 5 s" "$work/$mode.log" ||
        fail "stop: no timeout message: $(tail -n 20 "$work/$mode.log")"
      kill -9 "$victim" 2>/dev/null
    fi
    # The last checkpoint is whole: the run continues from it.
    "$bin" export --checkpoint "$work/$mode/checkpoints/last.ckpt" --out "$work/$mode.safetensors" \
      >/dev/null 2>&1 || fail "$mode: last.ckpt does not load after the failure"
  fi
done

# ---- killed and resumed = uninterrupted (2 ranks) --------------------------------------
resume_args=("${base[@]}" "${simclr[@]}" --epochs 3)
run 2 "$work/resume-a" "${resume_args[@]}" || fail "resume: run A failed: $(cat "$work/resume-a.log")"
if start_ranks resume-b 2 "${resume_args[@]}"; then
  for _ in $(seq 400); do  # a step or two past the first checkpoint
    [ "$(wc -l <"$work/resume-b/metrics.jsonl")" -ge $((6 + RANDOM % 3)) ] && break
    sleep 0.05
  done
  for rank in 0 1; do kill -9 "$(rank_pid "$mpirun_pid" "$rank")" 2>/dev/null; done
  wait_for "$mpirun_pid" 30 >/dev/null
  killed_at=$(tail -n 1 "$work/resume-b/metrics.jsonl" | sed -n 's/^{"step": \([0-9]*\),.*/\1/p')
  mpi_run 2 "$bin" train --out "$work/resume-b" --resume "${resume_args[@]}" >"$work/resume-b2.log" 2>&1 ||
    fail "resume: the resumed run failed: $(cat "$work/resume-b2.log")"
  resumed_at=$(sed -n 's/.*resuming from .* at step \([0-9]*\) of.*/\1/p' "$work/resume-b2.log")
  echo "resume: B killed after logging step $killed_at, resumed at step $resumed_at"
  [ -n "$resumed_at" ] || fail "resume: the resumed run does not say where it resumed"
  last_losses() { losses "$1" | awk '{ loss[$1] = $2 } END { for (s in loss) print s, loss[s] }' | sort -n; }
  [ "$(last_losses "$work/resume-a/metrics.jsonl")" = "$(last_losses "$work/resume-b/metrics.jsonl")" ] ||
    fail "resume: train_loss differs from the uninterrupted run"
  cmp -s "$work/resume-a/checkpoints/last.ckpt" "$work/resume-b/checkpoints/last.ckpt" ||
    fail "resume: last.ckpt differs from the uninterrupted run's"
  cmp -s "$work/resume-a/exported_models/exported_last.safetensors" \
    "$work/resume-b/exported_models/exported_last.safetensors" ||
    fail "resume: the exported backbone differs from the uninterrupted run's"
fi
# The 2-rank checkpoint resumed by one process: refused naming the rank
# count, not the per-rank batch size that follows from it.
expect 2 "the interrupted run has ranks=2, this one 1 " -- \
  "$bin" train --out "$work/resume-a" --resume "${resume_args[@]}"

# ---- SIGTERM to one rank: every rank stops at the same step -----------------------------
# The ranks agree on the request in the step record of the step it arrived
# in and stop after the next one (docs/distributed.md): a checkpoint of that
# step, the interrupt message from rank 0, and a resume that ends as the
# uninterrupted run.
if start_ranks term 2 "${resume_args[@]}"; then
  kill -TERM "$(rank_pid "$mpirun_pid" 1)"
  wait_for "$mpirun_pid" 60
  status=$?
  [ "$status" -ne 0 ] && [ "$status" -ne 124 ] || fail "term: the run did not stop (status $status)"
  grep -q -E "^interrupted \(a signal to another rank\) after step [0-9]+: checkpoint written" \
    "$work/term.log" || fail "term: rank 0 does not say it stopped: $(tail -n 5 "$work/term.log")"
  mpi_run 2 "$bin" train --out "$work/term" --resume "${resume_args[@]}" >"$work/term2.log" 2>&1 ||
    fail "term: the resumed run failed: $(cat "$work/term2.log")"
  echo "term: $(grep -o "interrupted (.*) after step [0-9]*" "$work/term.log")"
  cmp -s "$work/resume-a/checkpoints/last.ckpt" "$work/term/checkpoints/last.ckpt" ||
    fail "term: last.ckpt differs from the uninterrupted run's"
fi

# ---- embed on 3 ranks ------------------------------------------------------------------
model="$work/simclr-step-1/exported_models/exported_last.safetensors"
"$bin" embed --data "$images" --checkpoint "$model" --out "$work/embed1.npy" --image-size 32 \
  --batch-size 5 >/dev/null 2>&1 || fail "embed on one process failed"
output=$(mpi_run 3 "$bin" embed --data "$images" --checkpoint "$model" --out "$work/embed3.npy" \
  --image-size 32 --batch-size 5 2>&1) || fail "embed on 3 ranks failed: $output"
[ "$(printf '%s\n' "$output" | grep -c "^embedded 48 images")" -eq 1 ] ||
  fail "embed on 3 ranks: not one summary line: $output"
cmp -s "$work/embed1.npy.filenames.txt" "$work/embed3.npy.filenames.txt" ||
  fail "embed on 3 ranks: file names differ"
# Rows in input order: the same bytes as one process (eval mode: each row
# depends only on its image).
cmp -s "$work/embed1.npy" "$work/embed3.npy" || fail "embed on 3 ranks: the rows differ"

e2e_finish
