#!/usr/bin/env bash
# Data-parallel `train` on GPU ranks, without GPUs: the CUDA emulation's
# program with two emulated devices (LTC_EMU_DEVICES=2) and its NCCL
# (tests/cuda_emu/emu_nccl.c: the ranks are processes that exchange each
# collective through files), so comm_nccl.c's communicator, its all-reduces
# on their own stream and their overlap with the backward (events between
# the compute and communication streams) run here. SimCLR on a ShuffleNetV2
# x0.5 at 32 px with synchronised BatchNorm (convolutions, depthwise ones,
# the channel shuffle; until 2026-12-02 a ResNet-18 at 16 px, whose 11M
# parameters' per-element kernels made each emulated run 2.4x as long,
# 9.4 s against 3.9 s for 5 steps on 2 ranks):
# - one step, 32-true: 2 ranks give the checkpoint of one process with the
#   whole batch (the averaged gradient in the optimizer state), compared by
#   norm as tests/e2e/shufflenet.sh compares CPU ranks (0.05 of a tensor's
#   norm plus a floor of 3e-5 per element for the gradients that are
#   rounding noise around 0: the biases of the norms after a depthwise
#   conv, whose shift the next norm removes; measured 0.2 of the bound on
#   2026-12-02), and the same first loss (2e-5; measured 8.9e-6; at 16 px,
#   where the last stage's norms see 4 values, 5.2e-5). Not vacuous: 2 ranks
#   without synchronised BatchNorm miss the bound 637-fold (measured), and
#   with the emulated all-reduce keeping each rank's own values the run
#   stops ("the ranks diverged") and its first loss is 6% off (seen by hand
#   with the ResNet-18);
# - five steps, bf16-mixed, op by op with the gradient buckets overlapped
#   with the backward (the default), and as CUDA graphs (LTC_CUDA_GRAPHS=on:
#   steps 0 and 1 op by op, 2 and 3 captured with their collectives, 4
#   replayed; train.log says so) with the buckets after the backward
#   (--gradient-overlap false), and overlapped in the emulation's other
#   orders (LTC_EMU_STREAMS=compute-at-once: the compute stream runs its
#   work when it is queued, the communicator's stream waits, with
#   LTC_EMU_BLOCK_ORDER=reverse; and others-at-once: the other way round)
#   give the same checkpoint bytes. Seen failing by hand (comm_nccl.c,
#   before graphs): without a bucket's wait for its gradients
#   (others-at-once), without a queued all-reduce's wait for its input
#   (deferred, others-at-once) or the compute stream's for its result
#   (deferred, compute-at-once);
# - embed --precision bf16-mixed (LightlyTrain's embed precision) runs with
#   16-bit activations, close to 32-true's; refused on the CPU;
# - LightlyTrain's device_stats_monitor logs the device memory the program
#   holds (the 2-rank one-step run);
# - the host does not wait for the device in a step: the op-by-op run's
#   operation log (LTC_EMU_LAUNCH_LOG, both ranks) holds at most 60 device
#   synchronisations, all of them the set-up's and the checkpoints' (with
#   the norms' all-reduces blocking, as before comm_all_reduce_queued, a
#   ResNet-18 step alone made 69 per rank);
# - a rank killed while the steps replay as graphs (two ranks started as
#   torchrun starts them): its peer's collective never completes (the
#   emulated NCCL holds the stream, as a GPU does, until its own timeout,
#   300 s), so the other rank's host, which queues steps without waiting
#   for the device, must bound its own waits for the device (the NCCL
#   communicator's watch on the cuda backend's waits, or a blocking
#   collective's poll): it ends "within 10 s" (--dist-timeout 10), well
#   within a minute, and its last checkpoint loads. Seen failing (by hand):
#   with no bound the rank waits until the emulated NCCL gives up (300 s),
#   and with only the wait for a step's record bounded it did so once in
#   repeated kills (another of its waits);
# - embed on 2 ranks writes the bytes of one process (each rank embeds its
#   share, rank 0 writes them in input order).
set -u
source "$(dirname "$0")/lib.bash"
e2e_init cuda_ranks

emu_require
compare="$build/tests/e2e/compare_weights"
export LTC_EMU_DEVICES=2
export TMPDIR="$work"  # the emulated NCCL's folders
base=(--data tests/fixtures/photos --batch-size 4 --num-workers 1 --accelerator gpu --seed 3
      --model torchvision/shufflenet_v2_x0_5 --image-size 32 --method simclr --log-every 1)

# run NAME DEVICES args...: train into $work/NAME.
run() {
  local name=$1 devices=$2
  shift 2
  "$emu" train "${base[@]}" --devices "$devices" --out "$work/$name" "$@" \
    >"$work/$name.out" 2>&1 || fail "$name: exit $?: $(tail -n 3 "$work/$name.out")"
}

first_loss() { sed -n 's/^{"step": 0, "train_loss": \([^,}]*\).*/\1/p' "$work/$1/metrics.jsonl"; }

run one 1 --precision 32-true --max-steps 1
run two 2 --precision 32-true --max-steps 1 --callbacks device_stats_monitor
# LightlyTrain's device_stats_monitor on a GPU: the device memory the
# program holds (rank 0's), not the CPU's (Lightning's cpu_stats=None).
stats=$(grep '^{"step": 0, ' "$work/two/metrics.jsonl")
allocated=$(sed -n 's/.*"DeviceStatsMonitor.on_train_batch_end\/allocated_bytes.all.current": \([0-9.e+]*\).*/\1/p' <<<"$stats")
peak=$(sed -n 's/.*"DeviceStatsMonitor.on_train_batch_end\/allocated_bytes.all.peak": \([0-9.e+]*\).*/\1/p' <<<"$stats")
awk -v a="$allocated" -v p="$peak" 'BEGIN { exit !(a > 1e6 && p >= a) }' &&
  ! grep -q cpu_percent <<<"$stats" ||
  fail "device_stats_monitor on the GPU: step 0 logged '$stats'"
grep -q 'data parallel: 2 ranks (nccl, 2 per node)' "$work/two/train.log" ||
  fail "two: train.log does not say 2 NCCL ranks: $(grep 'data parallel' "$work/two/train.log")"
result=$("$compare" --norm --floor 3e-5 "$work/two/checkpoints/last.ckpt" \
  "$work/one/checkpoints/last.ckpt" 0.05) || fail "2 ranks' checkpoint differs from one process's: $result"
echo "2 ranks against one process: $result"
run unsynced 2 --precision 32-true --max-steps 1 --sync-batchnorm false
"$compare" --norm --floor 3e-5 "$work/unsynced/checkpoints/last.ckpt" "$work/one/checkpoints/last.ckpt" \
  0.05 >/dev/null && fail "2 ranks without sync BatchNorm match one process: the check cannot fail"
a=$(first_loss two)
b=$(first_loss one)
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 2e-5 * (b < 0 ? -b : b)) }' ||
  fail "the first loss: 2 ranks $a, one process $b (bound 2e-5 relative)"

bf16=(--precision bf16-mixed --max-steps 5)
LTC_EMU_LAUNCH_LOG="$work/operations.log" run overlapped 2 "${bf16[@]}"
syncs=$(grep -c '^host-wait cudaDeviceSynchronize' "$work/operations.log")
echo "5 steps on 2 ranks: $syncs device synchronisations (bound 60)"
[ "$syncs" -le 60 ] || fail "5 steps on 2 ranks waited for the device $syncs times (bound 60)"
export LTC_CUDA_GRAPHS=on
run after 2 "${bf16[@]}" --gradient-overlap false
LTC_EMU_STREAMS=compute-at-once LTC_EMU_BLOCK_ORDER=reverse run compute_at_once 2 "${bf16[@]}"
LTC_EMU_STREAMS=others-at-once run others_at_once 2 "${bf16[@]}"
for name in after compute_at_once others_at_once; do
  cmp -s "$work/overlapped/checkpoints/last.ckpt" "$work/$name/checkpoints/last.ckpt" ||
    fail "$name: the checkpoint differs from the overlapped run's"
  grep -q 'cuda graphs: 2 step parts op by op, 2 captured, 1 replayed' "$work/$name/train.log" ||
    fail "$name: not replayed as graphs: $(grep 'cuda graphs' "$work/$name/train.log")"
done
grep -q 'overlapped with backward' "$work/overlapped/train.log" ||
  fail "overlapped: train.log does not say so: $(grep 'gradient average' "$work/overlapped/train.log")"
for devices in 1 2; do
  "$emu" embed --data tests/fixtures/photos --checkpoint "$work/one/exported_models/exported_last.safetensors" \
    --out "$work/embed$devices.npy" --image-size 32 --batch-size 4 --num-workers 1 \
    --accelerator gpu --devices "$devices" >"$work/embed$devices.out" 2>&1 ||
    fail "embed on $devices device(s): exit $?: $(tail -n 2 "$work/embed$devices.out")"
done
cmp -s "$work/embed1.npy" "$work/embed2.npy" || fail "embed on 2 ranks: other bytes than one process"
# LightlyTrain's embed precision: bf16-mixed holds the activations in 16
# bits (the summary says so; within 0.02 of 32-true's by norm, measured
# 0.006, and not 32-true's own values: above 1e-4 of them); on the CPU it
# is refused.
for precision in 32-true bf16-mixed; do
  "$emu" embed --data tests/fixtures/photos --checkpoint "$work/one/exported_models/exported_last.safetensors" \
    --out "$work/embed-$precision.safetensors" --image-size 32 --batch-size 4 --num-workers 1 \
    --accelerator gpu --devices 1 --precision "$precision" >"$work/embed-$precision.out" 2>&1 ||
    fail "embed --precision $precision: exit $?: $(tail -n 2 "$work/embed-$precision.out")"
  grep -q "workers, cuda $precision, 1 rank(s)" "$work/embed-$precision.out" ||
    fail "embed --precision $precision: $(tail -n 1 "$work/embed-$precision.out")"
done
result=$("$compare" --norm "$work/embed-bf16-mixed.safetensors" "$work/embed-32-true.safetensors" 0.02) ||
  fail "embed bf16-mixed against 32-true: $result"
"$compare" --norm "$work/embed-bf16-mixed.safetensors" "$work/embed-32-true.safetensors" 1e-4 >/dev/null &&
  fail "embed bf16-mixed gave 32-true's values: $result"
expect_only 2 "--precision bf16-mixed needs a GPU; on the CPU embed runs in 32-true" -- \
  "$bin" embed --data tests/fixtures/photos --checkpoint "$work/one/exported_models/exported_last.safetensors" \
  --out "$work/embed-cpu.npy" --accelerator cpu precision=bf16-mixed
grep -q '2 rank(s)' "$work/embed2.out" || fail "embed: not 2 ranks: $(tail -n 1 "$work/embed2.out")"
# A rank killed while the steps replay: the other ends at its own timeout.
long=("${base[@]}" --precision bf16-mixed --max-steps 200 --dist-timeout 10 --out "$work/killed")
port=$((20000 + RANDOM % 20000))
mkdir -p "$work/killed-nccl"
pids=()
for rank in 0 1; do
  # (the dead rank's communicator folder stays: apart from the check below)
  TMPDIR="$work/killed-nccl" RANK=$rank WORLD_SIZE=2 LOCAL_RANK=$rank LOCAL_WORLD_SIZE=2 \
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$emu" train "${long[@]}" >"$work/killed$rank.out" 2>&1 &
  pids+=($!)
done
trap 'kill -9 "${pids[@]}" 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 600); do  # step 5 logged: steps 4 and on replay
  logged=$(grep -c '"train_loss"' "$work/killed/metrics.jsonl" 2>/dev/null)
  [ "${logged:-0}" -ge 6 ] && break
  kill -0 "${pids[0]}" 2>/dev/null || break
  sleep 0.1
done
kill -9 "${pids[1]}"
wait "${pids[1]}" 2>/dev/null  # (bash's "Killed" line)
start=$(date +%s)
for _ in $(seq 600); do kill -0 "${pids[0]}" 2>/dev/null || break; sleep 0.1; done
if kill -0 "${pids[0]}" 2>/dev/null; then
  fail "killed: rank 0 still runs 60 s after rank 1 was killed"
else
  wait "${pids[0]}"
  status=$?
  echo "killed: rank 1 killed, rank 0 ended with status $status after $(($(date +%s) - start)) s"
  [ "$status" -ne 0 ] || fail "killed: rank 0 ended with status 0"
  grep -q 'within 10 s (a rank died' "$work/killed0.out" ||
    fail "killed: not the timeout: $(tail -n 3 "$work/killed0.out")"
  grep -q 'cuda graphs: on' "$work/killed/train.log" || fail "killed: not run as graphs"
  "$emu" export --checkpoint "$work/killed/checkpoints/last.ckpt" --out "$work/killed.safetensors" \
    >/dev/null 2>&1 || fail "killed: last.ckpt does not load after the failure"
fi
unset LTC_CUDA_GRAPHS

# Every rank left its communicator: no folder of the emulated NCCL stays.
leftover=$(find "$work" -maxdepth 1 -name 'ltc-emu-nccl-*' | head -n 1)
[ -z "$leftover" ] || fail "a communicator's folder stayed: $leftover"
e2e_finish
