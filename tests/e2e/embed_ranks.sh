#!/usr/bin/env bash
# `embed` on 2 CPU ranks whose rank 1 hangs (SIGSTOP) while the images are
# embedded: the run ends within --dist-timeout with rank 0 naming the
# collective that got no answer, exit 1, nothing written. Before embed had
# --dist-timeout it waited the fixed 600 s.
set -u
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/mpi.bash"
e2e_init embed_ranks
mpi_require
export OMP_WAIT_POLICY=PASSIVE  # see train.sh
victim=""
trap '[ -n "$victim" ] && kill -9 "$victim" 2>/dev/null; rm -rf "$work"' EXIT

# A corrupt file first in the scan order: rank 0 warns about it at its first
# image, so both ranks are then past the start-up, in the embedding, with
# ~100 images each to go (about 3 s on one core).
"$build/tests/e2e/make_images" "$work/images" 200 >/dev/null || fail "make_images"
printf 'not an image' >"$work/images/0first.jpg"
"$build/tools/resnet_tool" save --model 18 --seed 3 --out "$work/r18.safetensors" >/dev/null ||
  fail "resnet_tool save"

mpi_run 2 "$bin" embed --data "$work/images" --checkpoint "$work/r18.safetensors" \
  --out "$work/emb.csv" --image-size 96 --batch-size 4 --num-workers 1 --dist-timeout 2 \
  >"$work/log" 2>&1 &
mpirun_pid=$!
for _ in $(seq 600); do
  grep -q "warning: skipping '$work/images/0first.jpg'" "$work/log" && break
  kill -0 "$mpirun_pid" 2>/dev/null || break
  sleep 0.05
done
victim=$(rank_pid "$mpirun_pid" 1) || fail "rank 1 not found: $(cat "$work/log")"
[ -n "$victim" ] && kill -STOP "$victim"
start=$(date +%s)
status=124
for _ in $(seq 400); do  # 20 s at most
  if ! kill -0 "$mpirun_pid" 2>/dev/null; then
    wait "$mpirun_pid"
    status=$?
    break
  fi
  sleep 0.05
done
took=$(($(date +%s) - start))
[ "$status" -eq 124 ] && kill -9 "$mpirun_pid" 2>/dev/null
[ "$status" -eq 1 ] || fail "a stopped rank: exit $status after $took s, expected 1: $(cat "$work/log")"
grep -q "^lightly-train-c embed: rank 0 of 2: .* got no answer from the other ranks within 2 s" "$work/log" ||
  fail "a stopped rank: no timeout message: $(cat "$work/log")"
[ -e "$work/emb.csv" ] && fail "a stopped rank: $work/emb.csv written"
echo "stopped rank 1: the run ended with status $status after $took s"

e2e_finish
