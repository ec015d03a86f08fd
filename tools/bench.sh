#!/usr/bin/env bash
# Input-pipeline benchmarks, run by `make bench` as: tools/bench.sh BUILD_DIR BENCH_DIR
#
# 1. Makes the benchmark folder BENCH_DIR if it is missing or incomplete
#    (tools/make_bench_images.py; installs python3-pil and the photo packages
#    with apt-get when root and they are missing).
# 2. Runs, each when present: $BUILD/tools/bench_scan, $BUILD/tools/bench_augment,
#    `lightly-train-c bench-data` (SimCLR) for 1 worker and the default
#    worker count, and the same with PyTorch DataLoader + torchvision
#    (tools/compare/torchvision_data.py) when torchvision is importable.
# 3. Prints every command with its output, then a table of the results
#    (exit status, wall time, the RESULT/throughput line of each run).
#
# Environment: BENCH_WORKERS (default "1 N", N = cores capped at 8),
# BENCH_STEPS (bench-data batches, default 50), BENCH_TV_STEPS (torchvision
# batches, default 20), BENCH_COUNT (images, default 2000), BENCH_METHOD
# (simclr | dino, default simclr), PYTHON (default /usr/bin/python3: Debian's,
# whose python3-pil and python3-torchvision the scripts use).
set -u

if [ $# -ne 2 ]; then
    echo "usage: $0 BUILD_DIR BENCH_DIR" >&2
    exit 2
fi
BUILD=$1
BENCH_DIR=$2
TOOLS_DIR=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}
STEPS=${BENCH_STEPS:-50}
TV_STEPS=${BENCH_TV_STEPS:-20}
COUNT=${BENCH_COUNT:-2000}
METHOD=${BENCH_METHOD:-simclr}
CORES=$(nproc)
DEFAULT_WORKERS=$((CORES < 8 ? CORES : 8))
if [ -n "${BENCH_WORKERS:-}" ]; then
    WORKERS=$BENCH_WORKERS
elif [ "$DEFAULT_WORKERS" -eq 1 ]; then
    WORKERS=1
else
    WORKERS="1 $DEFAULT_WORKERS"
fi
PHOTO_PACKAGES="lomiri-wallpapers-16.04 mate-backgrounds"
PHOTO_PROBE=/usr/share/backgrounds/mate/nature/Aqua.jpg

fail() {
    echo "bench.sh: $*" >&2
    exit 1
}

apt_install() {
    if [ "$(id -u)" -ne 0 ]; then
        fail "missing $*; install with: apt-get install $*"
    fi
    echo "bench.sh: installing $* with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >/dev/null ||
        { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -q --no-install-recommends "$@" >/dev/null; } ||
        fail "apt-get install $* failed"
}

# ---- benchmark folder -------------------------------------------------------
[ -x "$PYTHON" ] || fail "$PYTHON not found (set PYTHON=...)"
"$PYTHON" -c 'import PIL' 2>/dev/null || apt_install python3-pil
if [ ! -f "$BENCH_DIR/.bench-images.json" ] && [ ! -f "$PHOTO_PROBE" ]; then
    # shellcheck disable=SC2086  # a list of package names
    apt_install $PHOTO_PACKAGES
fi
"$PYTHON" "$TOOLS_DIR/make_bench_images.py" --out "$BENCH_DIR" --count "$COUNT" ||
    fail "could not make the benchmark folder $BENCH_DIR"

# ---- runs ---------------------------------------------------------------------
LOG_DIR=$(mktemp -d /tmp/ltc-bench.XXXXXX)
trap 'rm -rf "$LOG_DIR"' EXIT
ROW_NAMES=()
ROW_RESULTS=()

# run NAME COMMAND...: prints the command and its output, keeps a table row
# with the exit status, wall time and the output's last line.
run() {
    local name=$1
    shift
    local log="$LOG_DIR/${#ROW_NAMES[@]}.log"
    echo
    echo "== $name"
    echo "\$ $*"
    local start end status
    start=$(date +%s%N)
    "$@" 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    end=$(date +%s%N)
    # The headline: a RESULT or throughput line when there is one, else the last line.
    local headline
    headline=$(grep -E '^(RESULT|throughput:)' "$log" | tail -n 1)
    [ -n "$headline" ] || headline=$(grep -v '^[[:space:]]*$' "$log" | tail -n 1)
    ROW_NAMES+=("$name")
    ROW_RESULTS+=("$(printf 'rc=%d %6.1fs  %s' "$status" \
        "$(awk "BEGIN { print ($end - $start) / 1e9 }")" "$headline")")
}

echo "lightly-train-c input-pipeline benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p'), $CORES cores," \
    "load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "data: $BENCH_DIR; method $METHOD; workers: $WORKERS"

if [ -x "$BUILD/tools/bench_scan" ]; then
    run "scan (200k files)" "$BUILD/tools/bench_scan" --files 200000
else
    echo "bench.sh: $BUILD/tools/bench_scan not built; skipped"
fi
if [ -x "$BUILD/tools/bench_augment" ]; then
    run "augment kernels" "$BUILD/tools/bench_augment"
else
    echo "bench.sh: $BUILD/tools/bench_augment not built; skipped"
fi

HAVE_TORCHVISION=1
if ! "$PYTHON" -c 'import torchvision' 2>/dev/null; then
    HAVE_TORCHVISION=0
    echo "bench.sh: torchvision not importable by $PYTHON; comparison skipped" \
        "(apt-get install python3-torchvision)"
fi
for workers in $WORKERS; do
    if [ -x "$BUILD/lightly-train-c" ]; then
        run "lightly-train-c $METHOD, $workers worker(s)" "$BUILD/lightly-train-c" bench-data \
            --data "$BENCH_DIR" --method "$METHOD" --batch-size 64 --num-workers "$workers" \
            --steps "$STEPS"
    else
        echo "bench.sh: $BUILD/lightly-train-c not built; skipped"
    fi
    if [ "$HAVE_TORCHVISION" -eq 1 ]; then
        run "torchvision $METHOD, $workers worker(s)" "$PYTHON" \
            "$TOOLS_DIR/compare/torchvision_data.py" --data "$BENCH_DIR" --method "$METHOD" \
            --batch-size 64 --num-workers "$workers" --steps "$TV_STEPS"
    fi
done

echo
echo "== summary (exit status, wall time, headline of the output)"
status=0
for i in "${!ROW_NAMES[@]}"; do
    printf '%-36s %s\n' "${ROW_NAMES[$i]}" "${ROW_RESULTS[$i]}"
    case ${ROW_RESULTS[$i]} in rc=0\ *) ;; *) status=1 ;; esac
done
exit $status
