#!/usr/bin/env bash
# The MPI communicator across 2 and 3 ranks on this machine: every
# collective gives what was computed locally; a rank that hangs makes the
# others stop with a timeout message and a non-zero status within the
# timeout (plus start-up), never a hang; a rank that dies ends the run
# non-zero.
set -u
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/mpi.bash"
e2e_init comm_mpi
mpi_require
check="$build/tests/e2e/comm_check"

for np in 2 3; do
  output=$(mpi_run "$np" "$check" 2>&1)
  status=$?
  [ "$status" -eq 0 ] || fail "$np ranks: comm_check exited $status: $output"
  oks=$(printf '%s\n' "$output" | grep -c ": ok$")
  [ "$oks" -eq "$np" ] || fail "$np ranks: $oks of $np ranks said ok: $output"
  printf '%s\n' "$output" | grep -q "rank 0 of $np (local 0 of $np)" ||
    fail "$np ranks: rank 0 does not know the world and node sizes: $output"
done

# A hung rank: the others time out after 2 s and abort the whole run.
start=$(date +%s%N)
output=$(timeout 60 "${mpirun_command[@]}" -np 3 "$check" --timeout 2 --hang-rank 1 2>&1)
status=$?
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] ||
  fail "hung rank: exit status $status (124: nobody stopped it): $output"
printf '%s\n' "$output" | grep -q "got no answer from the other ranks within 2 s" ||
  fail "hung rank: no timeout message: $output"
echo "hung rank: the run ended with status $status after $elapsed_ms ms"
[ "$elapsed_ms" -lt 20000 ] || fail "hung rank: took $elapsed_ms ms with a 2 s timeout"

# A rank that dies: the run ends non-zero (mpirun ends the others).
output=$(timeout 60 "${mpirun_command[@]}" -np 3 "$check" --timeout 30 --die-rank 2 2>&1)
status=$?
[ "$status" -ne 0 ] && [ "$status" -ne 124 ] ||
  fail "dead rank: exit status $status (124: nobody stopped it): $output"

e2e_finish
