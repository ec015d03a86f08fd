# Helpers of the GPU benchmark (tools/bench_gpu.sh and the section files it
# sources): the peak GPU memory of a process, one measured side of a pair
# and the fields and ratios of RESULT lines, the CUDA libraries of a pip
# PyTorch on the library path. Uses device and work (set by tools/bench_gpu.sh
# and tools/profile_gpu.sh).
#
# shellcheck disable=SC2154  # device, work: set by tools/bench_gpu.sh
# shellcheck disable=SC2034  # read by the section files
step_threads=$(nproc)

# Puts the CUDA libraries of python $1's pip `nvidia` packages (cuDNN,
# cuBLAS, NCCL, the runtime: what PyTorch brings) on LD_LIBRARY_PATH, where
# a GPU node has no system packages.
use_python_cuda_libraries() {
    local nv
    if nv=$("$1" -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null); then
        LD_LIBRARY_PATH=$(find "$nv" -mindepth 2 -maxdepth 2 -type d -name lib | sort |
                          paste -sd:)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        export LD_LIBRARY_PATH
    fi
}

# Peak GPU memory (MiB) of process $1 while it runs, from nvidia-smi: the
# process's used_memory; where nvidia-smi lists no process with that id (a
# container with its own process ids) the growth of the first GPU's
# memory.used over its value when sampling began. Prints "MIB process" or
# "MIB device" (the second: a shared GPU's other jobs count too).
sample_memory() {
    local pid=$1 peak=0 device_peak=0 used base total
    base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -n 1)
    while kill -0 "$pid" 2>/dev/null; do
        used=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
               awk -F', ' -v pid="$pid" '$1 == pid { print $2 }')
        [ -n "$used" ] && [ "$used" -gt "$peak" ] && peak=$used
        total=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -n 1)
        [ -n "$total" ] && [ -n "$base" ] && [ $((total - base)) -gt "$device_peak" ] &&
            device_peak=$((total - base))
        sleep 0.2
    done
    if [ "$peak" -gt 0 ]; then echo "$peak process"; else echo "$device_peak device"; fi
}

# The value of field $1 in RESULT line $2 (- when absent).
result_field() {
    local value
    value=$(sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2")
    echo "${value:--}"
}

# Runs "$@" with its output in $work/pair.out; prints the peak GPU memory in
# MiB nvidia-smi saw for it and how (sample_memory: "MIB process|device";
# "n/a none" on the CPU or without nvidia-smi). Status: the command's.
run_measured() {
    "$@" >"$work/pair.out" 2>&1 &
    local pid=$! memory="n/a none"
    if [ "$device" = cuda ] && command -v nvidia-smi >/dev/null; then
        memory=$(sample_memory "$pid")
    fi
    wait "$pid" || return
    echo "$memory"
}

# One side of a pair: its header lines and its RESULT line with
# gpu_memory_mib and gpu_memory_source appended, into the named variable $1;
# "" when it failed.
measure_side() {
    local -n into=$1
    shift
    local memory source
    into=""
    if ! memory=$(run_measured "$@"); then
        echo "failed: $*"
        tail -n 15 "$work/pair.out"
        return 1
    fi
    grep -v '^RESULT' "$work/pair.out" | grep -E '^(backend|torch) '
    read -r memory source <<<"$memory"
    into="$(grep '^RESULT' "$work/pair.out") gpu_memory_mib=$memory gpu_memory_source=$source"
    echo "$into"
}

# ours / pytorch of field $1, or n/a.
ratio_of() {
    local a b
    a=$(result_field "$1" "$2")
    b=$(result_field "$1" "$3")
    awk -v a="$a" -v b="$b" 'BEGIN {
        if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a / b; else print "n/a" }'
}

