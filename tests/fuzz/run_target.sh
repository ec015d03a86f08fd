#!/usr/bin/env bash
# Runs one libFuzzer target over its seeds, then mutates for SECONDS:
#   tests/fuzz/run_target.sh BINARY SECONDS [CORPUS]
# Seeds: tests/fuzz/seeds/<name without fuzz_>/, else tests/fuzz/seeds/decode/
# (the per-format decoder targets share it). CORPUS (kept between runs, for
# `make fuzz`) receives what the run finds; without it a temporary folder is
# used and removed (`make test`). A crash, a leak, a sanitizer report or a
# timeout of one input fails with the end of libFuzzer's log; the input is
# saved as <build>/fuzz/crash-* (or leak-*, timeout-*) next to BINARY.
# Success prints libFuzzer's last line (runs, coverage).
set -u
binary=$1
seconds=$2
corpus=${3:-}
name=$(basename "$binary")
here=$(dirname "$0")
seeds="$here/seeds/${name#fuzz_}"
[ -d "$seeds" ] || seeds="$here/seeds/decode"
# make test's runs mutate from a fixed seed: the same inputs in the same
# order on every machine (a faster one gets further along the same list), so
# a library bug that random mutation might hit one day does not turn CI red
# at random; `make fuzz` (with CORPUS) draws a new seed each run.
seed_option=()
if [ -z "$corpus" ]; then
  corpus=$(mktemp -d "/tmp/ltc-fuzz-$name-XXXXXX")
  trap 'rm -rf "$corpus"' EXIT
  seed_option=(-seed="${LTC_FUZZ_SEED:-1}")
fi
mkdir -p "$corpus"
log="$(dirname "$binary")/$name.log"
if ! "$binary" "${seed_option[@]}" -artifact_prefix="$(dirname "$binary")/" -max_total_time="$seconds" \
  -rss_limit_mb=2048 -max_len=1048576 -timeout=20 "$corpus" "$seeds" >"$log" 2>&1; then
  echo "$name failed (log: $log):"
  tail -n 40 "$log"
  exit 1
fi
tail -n 1 "$log"
