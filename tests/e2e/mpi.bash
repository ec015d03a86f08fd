# Shared set-up of the end-to-end tests that start several ranks with
# mpirun (sourced after lib.bash). A missing mpirun or an MPI-less build is
# a failure, not a skip: `make deps` installs OpenMPI and the build enables
# MPI when it finds it.
#   mpi_run NP command...   mpirun as root, oversubscribed (more ranks than
#                           cores), no core binding, quiet about the
#                           missing fast networks of a test machine; the
#                           ranks inherit this environment (one node)
#   rank_pid MPIRUN_PID RANK   the pid of rank RANK started by that mpirun
mpi_require() {
  if ! command -v mpirun >/dev/null 2>&1; then
    echo "FAIL: mpirun not found: run 'make deps' (installs openmpi-bin)"
    exit 1
  fi
  if ! "$bin" --version | grep -q "MPI: yes"; then
    echo "FAIL: $bin was built without MPI: run 'make deps' and rebuild"
    exit 1
  fi
}

# Under AddressSanitizer (make asan) OpenMPI's own allocations are not
# reported as leaks: tests/lsan_mpi.supp (no effect on other builds).
mpi_suppressions="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/lsan_mpi.supp"

# mpirun with the options and environment every test launch uses; a
# command (not a function), so that `timeout` can run it, and MPMD launches
# (`-np 1 A : -np 1 B`) can follow it.
mpirun_command=(env "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
                "LSAN_OPTIONS=${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$mpi_suppressions"
                mpirun --allow-run-as-root --oversubscribe --bind-to none
                --mca btl self,vader,tcp --mca btl_base_warn_component_unused 0)

mpi_run() {
  local np=$1
  shift
  "${mpirun_command[@]}" -np "$np" "$@"
}

# Ranks are started by mpirun's local daemon: find the process whose
# environment holds OMPI_COMM_WORLD_RANK=RANK among mpirun's descendants.
rank_pid() {
  local root=$1 rank=$2 pid
  for pid in $(pgrep -P "$root") $(for child in $(pgrep -P "$root"); do pgrep -P "$child"; done); do
    if { tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$rank"; then
      echo "$pid"
      return 0
    fi
  done
  return 1
}
