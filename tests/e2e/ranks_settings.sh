#!/usr/bin/env bash
# Ranks started with other data, settings or weights than rank 0 (mpirun's
# MPMD form: `-np 1 cmd : -np 1 other-cmd`) stop before any work, exit 2,
# the rank that differs naming the setting (dist/rank_settings.h). Without
# the check, `train` with another --data ended in MPI_ERR_TRUNCATE, with
# another --method-arg trained silently, with another --seed was called
# "the ranks diverged"; `embed` with another --data hung or damaged rank 0's
# heap, with another --checkpoint wrote rows of two models with exit 0.
# And embed's failures and warnings from rank 1 carry "rank 1: ".
set -u
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/mpi.bash"
e2e_init ranks_settings
mpi_require
export OMP_WAIT_POLICY=PASSIVE  # see train.sh

"$build/tests/e2e/make_images" "$work/images" 8 >/dev/null || fail "make_images"
"$build/tests/e2e/make_images" "$work/fewer" 4 >/dev/null || fail "make_images"
"$build/tools/resnet_tool" save --model 18 --seed 3 --out "$work/a.safetensors" >/dev/null ||
  fail "resnet_tool save"
"$build/tools/resnet_tool" save --model 18 --seed 4 --out "$work/b.safetensors" >/dev/null ||
  fail "resnet_tool save"

train=(train --out "$work/run" --method simclr --image-size 32 --batch-size 4 --max-steps 1
       --num-workers 1 --threads 1 --method-arg hidden_dim=16 --method-arg output_dim=8
       --dist-timeout 20)
embed=(embed --out "$work/emb.csv" --image-size 32 --batch-size 2 --num-workers 1)

# two_ranks PATTERN -- rank 0's arguments -- rank 1's arguments: exit 2 within
# the timeout, one line from rank 1 matching PATTERN, nothing written.
two_ranks() {
  local pattern=$1 zero=() one=()
  shift 2
  while [ "$1" != -- ]; do zero+=("$1"); shift; done
  shift
  one=("$@")
  local output status
  output=$(timeout 60 "${mpirun_command[@]}" \
    -np 1 "$bin" "${zero[@]}" : -np 1 "$bin" "${one[@]}" 2>&1)
  status=$?
  [ "$status" -eq 2 ] || fail "${one[*]}: exited $status, expected 2: $output"
  printf '%s\n' "$output" | grep -q -E -- "^rank 1: lightly-train-c [a-z]*: this rank was started with $pattern" ||
    fail "${one[*]}: output lacks /$pattern/: $output"
  [ -e "$work/run" ] && fail "${one[*]}: wrote $work/run" && rm -rf "$work/run"
  [ -e "$work/emb.csv" ] && fail "${one[*]}: wrote $work/emb.csv" && rm -f "$work/emb.csv"
}

two_ranks "--data 4 images \(list [0-9a-f]{8}\), rank 0 with 8 images" -- \
  "${train[@]}" --data "$work/images" -- "${train[@]}" --data "$work/fewer"
two_ranks "--seed 5, rank 0 with 0:" -- \
  "${train[@]}" --data "$work/images" -- "${train[@]}" --data "$work/images" --seed 5
two_ranks "--method-arg hidden_dim=16 output_dim=8 temperature=0.3, rank 0 with hidden_dim=16 output_dim=8:" -- \
  "${train[@]}" --data "$work/images" -- "${train[@]}" --data "$work/images" --method-arg temperature=0.3
two_ranks "--gradient-overlap false, rank 0 with true:" -- \
  "${train[@]}" --data "$work/images" -- "${train[@]}" --data "$work/images" --gradient-overlap false
two_ranks "--data 4 images" -- \
  "${embed[@]}" --data "$work/images" --checkpoint "$work/a.safetensors" -- \
  "${embed[@]}" --data "$work/fewer" --checkpoint "$work/a.safetensors"
two_ranks "--checkpoint resnet18 \(weights [0-9a-f]{8}\), rank 0 with resnet18" -- \
  "${embed[@]}" --data "$work/images" --checkpoint "$work/a.safetensors" -- \
  "${embed[@]}" --data "$work/images" --checkpoint "$work/b.safetensors"

# The same command on both ranks still runs (the check lets it through).
mpi_run 2 "$bin" "${embed[@]}" --data "$work/images" --checkpoint "$work/a.safetensors" \
  >"$work/same.log" 2>&1 || fail "2 ranks, same embed: $(cat "$work/same.log")"
[ "$(wc -l <"$work/emb.csv")" -eq 9 ] || fail "2 ranks, same embed: not 8 rows"

# What may differ between ranks: the paths of the --data folders (the same
# images under other paths, several folders too), --num-workers, --out.
ln -s "$work/images" "$work/images-link"
ln -s "$work/fewer" "$work/fewer-link"
output=$(timeout 60 "${mpirun_command[@]}" \
  -np 1 "$bin" "${embed[@]}" --data "$work/images" --data "$work/fewer" --checkpoint "$work/a.safetensors" --overwrite : \
  -np 1 "$bin" embed --out "$work/elsewhere.csv" --image-size 32 --batch-size 2 --num-workers 2 \
  --data "$work/images-link/" --data "$work/fewer-link" --checkpoint "$work/a.safetensors" 2>&1) ||
  fail "2 ranks, the same folders under other paths: $output"
[ "$(wc -l <"$work/emb.csv")" -eq 13 ] || fail "2 ranks, the same folders under other paths: not 12 rows"

# Bad input of every rank: exit 2 with the line (the first rank to fail
# ends the others, so the other's own line may not come).
output=$(mpi_run 2 "$bin" "${embed[@]}" --data "$work/absent" --checkpoint "$work/a.safetensors" \
  --overwrite 2>&1)
status=$?
[ "$status" -eq 2 ] || fail "2 ranks, absent --data: exited $status, expected 2: $output"
printf '%s\n' "$output" | grep -q -E -x -- "(rank 1: )?lightly-train-c embed: data folder '$work/absent' does not exist" ||
  fail "2 ranks, absent --data: no line 'lightly-train-c embed: data folder ...': $output"
# Bad input of rank 1 alone ends rank 0 too, at once, with exit 2 and rank 1's
# line prefixed "rank 1: " (before: rank 0 waited in the settings check for
# --dist-timeout and the run exited 1; and every rank printed unprefixed).
start=$(date +%s)
output=$(timeout 60 "${mpirun_command[@]}" \
  -np 1 "$bin" "${embed[@]}" --data "$work/images" --checkpoint "$work/a.safetensors" --overwrite --dist-timeout 50 : \
  -np 1 "$bin" "${embed[@]}" --data "$work/absent" --checkpoint "$work/a.safetensors" --overwrite --dist-timeout 50 2>&1)
status=$?
elapsed=$(($(date +%s) - start))
[ "$status" -eq 2 ] || fail "rank 1's --data absent: exited $status, expected 2: $output"
[ "$elapsed" -lt 30 ] || fail "rank 1's --data absent: took $elapsed s (rank 0 waited for the timeout)"
printf '%s\n' "$output" | grep -q -x -- "rank 1: lightly-train-c embed: data folder '$work/absent' does not exist" ||
  fail "rank 1's --data absent: no line 'rank 1: lightly-train-c embed: ...': $output"
"$build/tests/e2e/make_images" "$work/corrupt" 4 --corrupt 4 >/dev/null || fail "make_images --corrupt"
mpi_run 2 "$bin" "${embed[@]}" --data "$work/corrupt" --checkpoint "$work/a.safetensors" \
  --overwrite >"$work/corrupt.log" 2>&1 || fail "2 ranks, corrupt files: $(cat "$work/corrupt.log")"
warnings=$(grep -c "warning: skipping '$work/corrupt/corrupt/" "$work/corrupt.log")
[ "$warnings" -eq 4 ] || fail "2 ranks, corrupt files: $warnings warnings, expected 4: $(cat "$work/corrupt.log")"
grep -q "^rank 1: warning: skipping '$work/corrupt/corrupt/" "$work/corrupt.log" ||
  fail "2 ranks, corrupt files: rank 1's warnings unprefixed: $(cat "$work/corrupt.log")"

e2e_finish
