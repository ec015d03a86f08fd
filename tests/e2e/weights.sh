#!/usr/bin/env bash
# End-to-end tests of weights by name (src/weights, `lightly-train-c
# weights`, --checkpoint NAME, --method-arg teacher=NAME, LightlyTrain's
# default method) against a stand-in for the Hugging Face Hub on 127.0.0.1
# (fake_hub.py, HF_ENDPOINT): a known name's URL, a redirect chain, a
# truncated transfer resumed with Range, a stall (timeout) resumed by the
# next process, a wrong hash, 404, 401 and the token (never sent to the
# storage), 503 retried, two processes fetching one file (one transfer),
# HF_HUB_OFFLINE, no network, the Hugging Face cache used as it is,
# training and embedding from names, a cached file damaged after its
# download (cut short: refused on use; a changed byte: found by `weights
# fetch`, which downloads both anew), one without a download record, and 2
# MPI ranks on a shared cache (one transfer) and on caches of their own (one
# each); timm's pretrained=True and torchvision's own weights (PyTorch's
# cache, the SHA-256 digits of their file names). Short timeouts through the
# environment keep it to seconds.
set -u
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/mpi.bash"
e2e_init weights
mpi_require
export OMP_WAIT_POLICY=PASSIVE
command -v python3 >/dev/null || { fail "python3 is missing (make deps)"; e2e_finish; }

hub="$work/hub" log="$work/hub.log"
cache_of() { echo "$work/cache/models/hub/models--${1%%/*}--${1#*/}/main/${2:-model.safetensors}"; }
put() {  # put REPO SOURCE [FILE]: the hub serves SOURCE as REPO's FILE
  mkdir -p "$hub/$1"
  cp "$2" "$hub/$1/${3:-model.safetensors}"
}

images="$work/images"
"$build/tests/e2e/make_images" "$images" 16 >/dev/null || fail "make_images"
"$build/tests/e2e/make_backbone" "$work/vit.safetensors" vit_t14 5 56 >/dev/null ||
  fail "make_backbone vit_t14"
"$build/tests/e2e/make_backbone" "$work/resnet.safetensors" resnet18 6 >/dev/null ||
  fail "make_backbone resnet18"
head -c 300000 /dev/urandom >"$work/blob"
blob_sha=$(sha256sum "$work/blob" | cut -d' ' -f1)
put timm/vit_small_patch14_reg4_dinov2.lvd142m "$work/blob"
for repo in chain-blob truncate-blob badhash-blob gated-blob stall-blob flaky-blob slow-blob \
  trickle-blob crawl-blob; do
  put "test/$repo" "$work/blob"
done
put test/gated-blob "$work/blob" second.bin
put test/tiny-vit "$work/vit.safetensors"
put test/tiny-resnet "$work/resnet.safetensors"
put timm/resnet18.tv_in1k "$work/resnet.safetensors"  # torchvision's IMAGENET1K_V1, timm's tag
"$build/tests/e2e/make_backbone" "$work/resnet-a1.safetensors" resnet18 7 >/dev/null ||
  fail "make_backbone resnet18 (a1)"
put timm/resnet18.a1_in1k "$work/resnet-a1.safetensors"  # timm's default tag of resnet18

fake_hub_start "$hub" "$log"
export HF_ENDPOINT="$fake_hub_url"

# fetch_ok NAME: `weights fetch NAME` succeeds and brings the blob.
fetch_ok() {
  local name=$1 output
  output=$("$bin" weights fetch "$name" 2>"$work/err") || fail "fetch $name: $(cat "$work/err")"
  cmp -s "$output" "$work/blob" || fail "fetch $name: $output is not the file served"
  grep -q "SHA-256 $blob_sha verified" "$work/err" || fail "fetch $name: not verified: $(cat "$work/err")"
}
# refused STATUS WHICH PATTERN -- command: exits STATUS and prints one
# error line matching PATTERN: its only line (WHICH "only"), or its last
# line after progress lines (WHICH "last"; the only one starting
# "lightly-train-c").
refused() {
  local status=$1 which=$2 pattern=$3 output got lines
  shift 4
  output=$("$@" 2>&1)
  got=$?
  [ "$got" -eq "$status" ] || fail "'$*' exited $got, expected $status: $output"
  lines=$(printf '%s\n' "$output" | wc -l)
  [ "$which" = last ] && lines=$(printf '%s\n' "$output" | grep -c "^lightly-train-c")
  [ "$lines" -eq 1 ] || fail "'$*' printed more than one error line: $output"
  printf '%s\n' "$output" | tail -n 1 | grep -q -E -- "$pattern" ||
    fail "'$*' last line lacks /$pattern/: $output"
}
one_line() { refused "$1" only "${@:2}"; }
last_line() { refused "$1" last "${@:2}"; }

# A known name: LightlyTrain's dinov2/vits14 is timm's reg4 copy; its file
# lands in the cache, a progress line per 10% (not a terminal), the licence.
fetch_ok dinov2/vits14
path=$(cache_of timm/vit_small_patch14_reg4_dinov2.lvd142m)
[ -f "$path" ] || fail "dinov2/vits14 is not at $path"
grep -q "resolve timm/vit_small_patch14_reg4_dinov2.lvd142m/model.safetensors" "$log" ||
  fail "dinov2/vits14 was not asked from its repository"
grep -q "licence: Apache-2.0" "$work/err" || fail "the licence is not shown: $(cat "$work/err")"
steps=$(grep -c "^dinov2/vits14: [0-9]*0% (" "$work/err")
[ "$steps" -ge 1 ] && [ "$steps" -le 10 ] || fail "$steps progress lines: $(cat "$work/err")"
grep -q "^dinov2/vits14: 100% (" "$work/err" || fail "no 100% line: $(cat "$work/err")"
[ "$("$bin" weights path dinov2/vits14_pretrained)" = "$path" ] ||
  fail "LightlyTrain's spelling dinov2/vits14_pretrained is not the same file"
"$bin" weights | grep -q "^dinov2/vits14 .* yes$" || fail "weights does not list dinov2/vits14 as cached"
ls "$work/cache/models/hub/"*/main/ | grep -q -E "partial|etag" && fail "partial files were left"
# Beside it, what its download verified (docs/weights.md, "The download record").
printf 'lightly-train-c download record 1\nsha256 %s\nsha256_from X-Linked-Etag\nsize 300000\nsize_from X-Linked-Size\nurl %s\n' \
  "$blob_sha" "$HF_ENDPOINT/timm/vit_small_patch14_reg4_dinov2.lvd142m/resolve/main/model.safetensors" |
  cmp -s - "$path.verified" || fail "the download record is not as documented: $(cat "$path.verified")"
# A second fetch transfers nothing.
before=$(grep -c "^storage timm/vit_small" "$log")
fetch_out=$("$bin" weights fetch dinov2/vits14 2>&1 >/dev/null) || fail "second fetch failed"
[ "$(grep -c "^storage timm/vit_small" "$log")" -eq "$before" ] || fail "a cached file was downloaded again"
[ -z "$fetch_out" ] || fail "a cached fetch printed: $fetch_out"

# A redirect chain (302, 307), and the token never sent to the storage host.
fetch_ok test/chain-blob
grep -q "storage test/chain-blob/model.safetensors attempt=1 range=- auth=no" "$log" ||
  fail "the chain did not reach the storage: $(cat "$log")"

# A transfer cut after half the file continues with a Range request.
fetch_ok test/truncate-blob
grep -q "storage test/truncate-blob/model.safetensors attempt=2 range=bytes=150000-" "$log" ||
  fail "the truncated transfer was not resumed: $(grep truncate "$log")"
grep -q "retrying in" "$work/err" || fail "no retry line: $(cat "$work/err")"

# A stall: no data for LIGHTLY_TRAIN_DOWNLOAD_CHUNK_TIMEOUT_SEC (1 s) fails
# (no retries allowed here) keeping what arrived; the next run continues it.
last_line 2 "test/stall-blob: http://127.0.0.1:[0-9]*/test/stall-blob/resolve/main/model.safetensors: less than 1000 bytes/s for 1 s .*run the command again" -- \
  env LIGHTLY_TRAIN_DOWNLOAD_RETRIES=0 "$bin" weights fetch test/stall-blob
partial=$(ls "$(dirname "$(cache_of test/stall-blob)")"/*.partial 2>/dev/null)
[ "$(stat -c %s "$partial" 2>/dev/null)" = 150000 ] || fail "the stalled transfer kept no half file"
fetch_ok test/stall-blob
grep -q "storage test/stall-blob/model.safetensors attempt=2 range=bytes=150000-" "$log" ||
  fail "the next run did not continue the stalled file: $(grep stall "$log")"

# A server that sends a few bytes and then a byte every 0.2 s, on every
# connection: below the minimum rate (1000 bytes/s) each attempt fails
# within the chunk timeout (1 s) and, having brought less than a timeout's
# worth at that rate, uses up a retry: the fetch ends after the 2 retries,
# in seconds (it retried for ever: any byte reset the count, and 1 byte/s
# was no stall).
started=$(date +%s)
last_line 2 "test/trickle-blob: http://.*: less than 1000 bytes/s for 1 s \(LIGHTLY_TRAIN_DOWNLOAD_MIN_BYTES_PER_SEC, LIGHTLY_TRAIN_DOWNLOAD_CHUNK_TIMEOUT_SEC\) \(after 2 retries\): run the command again" -- \
  timeout 60 "$bin" weights fetch test/trickle-blob
[ $(($(date +%s) - started)) -le 20 ] || fail "the trickling server took $(($(date +%s) - started)) s"
[ "$(grep -c "^storage test/trickle-blob" "$log")" -eq 3 ] ||
  fail "not 3 attempts at the trickling server: $(grep trickle "$log")"
# The deadline: a transfer above the minimum rate that is not done within
# LIGHTLY_TRAIN_DOWNLOAD_DEADLINE_SEC fails with the part kept; the next run
# continues it.
last_line 2 "test/crawl-blob: http://.*: not complete within 1 s \(LIGHTLY_TRAIN_DOWNLOAD_DEADLINE_SEC\): [0-9]+ of 300000 bytes received; run the command again" -- \
  env LIGHTLY_TRAIN_DOWNLOAD_DEADLINE_SEC=1 timeout 60 "$bin" weights fetch test/crawl-blob
one_line 2 "LIGHTLY_TRAIN_DOWNLOAD_DEADLINE_SEC=0: expected a number from 1 to" -- \
  env LIGHTLY_TRAIN_DOWNLOAD_DEADLINE_SEC=0 "$bin" weights fetch test/crawl-blob
fetch_ok test/crawl-blob
grep -q "storage test/crawl-blob/model.safetensors attempt=2 range=bytes=[1-9]" "$log" ||
  fail "the run after the deadline did not continue the file: $(grep crawl "$log")"

# 503 twice, then the file.
fetch_ok test/flaky-blob
[ "$(grep -c "HTTP 503; retrying" "$work/err")" -eq 2 ] || fail "503 not retried twice: $(cat "$work/err")"

# A wrong hash: refused, nothing kept.
last_line 2 "test/badhash-blob: http://.*: SHA-256 mismatch .*the file was removed" -- \
  "$bin" weights fetch test/badhash-blob
ls "$(dirname "$(cache_of test/badhash-blob)")" 2>/dev/null | grep -v lock | grep -q . &&
  fail "the bad download left files: $(ls "$(dirname "$(cache_of test/badhash-blob)")")"

# A name whose SHA-256 the hub's file page documents: a server announcing
# another one is refused before anything is kept.
put timm/vit_base_patch14_dinov2.lvd142m "$work/blob"
last_line 2 "dinov2/vitb14-noreg: http://.*/timm/vit_base_patch14_dinov2.lvd142m/resolve/main/model.safetensors: the server announces SHA-256 $(echo "$blob_sha" | cut -c1-12)\.\.\., not the 55cbb5d887b3\.\.\. documented" -- \
  "$bin" weights fetch dinov2/vitb14-noreg
ls "$(dirname "$(cache_of timm/vit_base_patch14_dinov2.lvd142m)")" 2>/dev/null | grep -v lock | grep -q . &&
  fail "the refused download left files"

# 404, an unknown name, a missing file.
one_line 2 "test/missing: http://.*/test/missing/resolve/main/model.safetensors: not found \(HTTP 404\)" -- \
  "$bin" weights fetch test/missing
one_line 2 "unknown weights name 'dinov2/vitx14' \(known: dinov2/vits14, " -- "$bin" weights fetch dinov2/vitx14
one_line 2 "nothing.safetensors: no such file, and not a weights name" -- \
  "$bin" weights path "$work/nothing.safetensors"

# 401 without the token; HF_TOKEN, then the token file, open it. :FILE picks a file.
one_line 2 "test/gated-blob: .*access denied \(HTTP 401\).*HF_TOKEN" -- "$bin" weights fetch test/gated-blob
HF_TOKEN=secret fetch_ok test/gated-blob
mkdir -p "$work/hf" && echo secret >"$work/hf/token"
fetch_ok test/gated-blob:second.bin
[ -f "$(cache_of test/gated-blob second.bin)" ] || fail ":second.bin not cached under its name"
grep "storage test/gated-blob" "$log" | grep -q "auth=yes" && fail "the token reached the storage"
rm "$work/hf/token"

# Two processes want one file: one transfer, the other waits and reads it.
"$bin" weights fetch test/slow-blob >"$work/a.out" 2>"$work/a.err" &
first=$!
"$bin" weights fetch test/slow-blob >"$work/b.out" 2>"$work/b.err" || fail "second process failed"
wait $first || fail "first process failed: $(cat "$work/a.err")"
[ "$(grep -c "^storage test/slow-blob" "$log")" -eq 1 ] || fail "not one transfer: $(grep slow "$log")"
cat "$work/a.err" "$work/b.err" | grep -q "another process is downloading it; waiting" ||
  fail "no process waited: $(cat "$work/a.err" "$work/b.err")"
cmp -s "$(cat "$work/a.out")" "$work/blob" && cmp -s "$(cat "$work/b.out")" "$work/blob" ||
  fail "the two processes do not both have the file"

# On a terminal: a bar with bytes, rate and ETA, redrawn in place.
if script -qec "'$bin' weights fetch test/tiny-resnet" /dev/null >"$work/tty.out" 2>&1; then
  grep -a -q -E $'\r''  .* MB / .* MB +[0-9]+% \[#+\.*\] .* MB/s ETA' "$work/tty.out" ||
    fail "no progress bar on a terminal: $(cat -v "$work/tty.out")"
else
  fail "fetch on a terminal failed: $(cat "$work/tty.out")"
fi

# HF_HUB_OFFLINE: the cache only; no request for a missing file.
HF_HUB_OFFLINE=1 "$bin" weights path dinov2/vits14 >/dev/null || fail "offline path of a cached name"
one_line 2 "test/not-cached is not downloaded and HF_HUB_OFFLINE forbids the network: run 'lightly-train-c weights fetch test/not-cached'" -- \
  env HF_HUB_OFFLINE=1 "$bin" weights fetch test/not-cached
grep -q "not-cached" "$log" && fail "HF_HUB_OFFLINE still asked the hub"
one_line 2 "is not downloaded .*lightly-train-c weights fetch test/not-cached" -- "$bin" weights path test/not-cached
# No network at all (nothing listens on port 1): one line, no retries.
one_line 2 "test/x: http://127.0.0.1:1/test/x/resolve/main/model.safetensors: no network .*weights fetch test/x" -- \
  env HF_ENDPOINT=http://127.0.0.1:1 "$bin" weights fetch test/x

# A file the Hugging Face libraries downloaded is used as it is, offline.
hf_repo="$work/hf/hub/models--test--hf-only" commit=0123456789abcdef0123456789abcdef01234567
vit_sha=$(sha256sum "$work/vit.safetensors" | cut -d' ' -f1)
mkdir -p "$hf_repo/blobs" "$hf_repo/refs" "$hf_repo/snapshots/$commit"
cp "$work/vit.safetensors" "$hf_repo/blobs/$vit_sha"
ln -s "../../blobs/$vit_sha" "$hf_repo/snapshots/$commit/model.safetensors"
echo "$commit" >"$hf_repo/refs/main"
[ "$(HF_HUB_OFFLINE=1 "$bin" weights path test/hf-only)" = "$hf_repo/snapshots/$commit/model.safetensors" ] ||
  fail "the Hugging Face cache's file is not used"
output=$(HF_HUB_OFFLINE=1 "$bin" embed --data "$images" --checkpoint test/hf-only --image-size 28 \
  --batch-size 8 --num-workers 1 --out "$work/hf.npy" 2>&1) || fail "embed from the HF cache: $output"
printf '%s\n' "$output" | grep -q "embedded 16 images x 192 dims" || fail "embed from the HF cache: $output"

# Training from names: the teacher and the initial weights fetched, then
# the same run offline from the cache; embed --checkpoint NAME.
common=(--data "$images" --batch-size 8 --image-size 28 --num-workers 1 --threads 2 --max-steps 1
        --model resnet18 --method distillation --method-arg teacher=test/tiny-vit
        --checkpoint test/tiny-resnet)
output=$("$bin" train "${common[@]}" --out "$work/run" 2>&1) || fail "train from names: $output"
grep -q "teacher=test/tiny-vit" "$work/run/train.log" || fail "train.log does not name the teacher"
output=$(HF_HUB_OFFLINE=1 "$bin" train "${common[@]}" --out "$work/run" --overwrite 2>&1) ||
  fail "train offline from the cache: $output"
output=$("$bin" embed --data "$images" --checkpoint test/tiny-vit --image-size 28 --batch-size 8 \
  --num-workers 1 --out "$work/vit.npy" 2>&1) || fail "embed --checkpoint NAME: $output"

# A cached file damaged after its download. Cut short (a full disk, a copy
# stopped): every use by name checks its size against its record and stops
# before any work with one line saying what to do; `weights fetch` repairs it.
vit_cached=$(cache_of test/tiny-vit) vit_size=$(stat -c %s "$work/vit.safetensors")
vit_transfers() { grep -c "^storage test/tiny-vit" "$log"; }
truncate -s 5000 "$vit_cached"
damaged="test/tiny-vit: the cached file $vit_cached has 5000 bytes, not the $vit_size its download verified"
one_line 2 "^lightly-train-c train: $damaged: delete it \(with its .verified record\) or run 'lightly-train-c weights fetch test/tiny-vit' again$" -- \
  "$bin" train "${common[@]}" --out "$work/damaged"
[ -e "$work/damaged" ] && fail "the run with a damaged teacher wrote $work/damaged"
one_line 2 "^lightly-train-c weights path: $damaged: delete it" -- "$bin" weights path test/tiny-vit
one_line 2 "test/tiny-vit is damaged in the cache and HF_HUB_OFFLINE forbids the network" -- \
  env HF_HUB_OFFLINE=1 "$bin" weights fetch test/tiny-vit
before=$(vit_transfers)
"$bin" weights fetch test/tiny-vit >"$work/out" 2>"$work/err" || fail "fetch of a cut file: $(cat "$work/err")"
grep -q "^$damaged; downloading it again$" "$work/err" || fail "the repair is not announced: $(cat "$work/err")"
grep -q "SHA-256 $vit_sha verified" "$work/err" || fail "the repair is not verified: $(cat "$work/err")"
[ "$(vit_transfers)" -eq $((before + 1)) ] || fail "the cut file was not downloaded again"
cmp -s "$vit_cached" "$work/vit.safetensors" || fail "the cut file was not repaired"
# One byte changed, the size the same: the size check on use lets it pass,
# `weights fetch` hashes it and downloads it anew.
python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(-1, 2); b = f.read(1); f.seek(-1, 2); f.write(bytes([b[0] ^ 1]))' "$vit_cached"
cmp -s "$vit_cached" "$work/vit.safetensors" && fail "the byte was not changed"
[ "$("$bin" weights path test/tiny-vit 2>&1)" = "$vit_cached" ] || fail "the size check refused a file of the right size"
before=$(vit_transfers)
"$bin" weights fetch test/tiny-vit >"$work/out" 2>"$work/err" || fail "fetch of a changed file: $(cat "$work/err")"
grep -q "^test/tiny-vit: the cached file $vit_cached has SHA-256 [0-9a-f]\{12\}\.\.\., not the ${vit_sha:0:12}\.\.\. its download verified; downloading it again$" "$work/err" ||
  fail "the changed byte is not reported: $(cat "$work/err")"
[ "$(vit_transfers)" -eq $((before + 1)) ] || fail "the changed file was not downloaded again"
cmp -s "$vit_cached" "$work/vit.safetensors" || fail "the changed file was not repaired"
# Without a record (an earlier version's download, or a file put there by
# hand): used as before, said once; `weights fetch` keeps it.
rm "$vit_cached.verified"
before=$(vit_transfers)
output=$("$bin" embed --data "$images" --checkpoint test/tiny-vit --image-size 28 --batch-size 8 \
  --num-workers 1 --out "$work/unrecorded.npy" 2>&1) || fail "embed from a file without a record: $output"
cmp -s "$work/unrecorded.npy" "$work/vit.npy" || fail "the file without a record embeds differently"
[ "$(printf '%s\n' "$output" | grep -c "^test/tiny-vit: $vit_cached has no download record .*: used without checking its size or SHA-256$")" -eq 1 ] ||
  fail "a file without a record is not said once: $output"
"$bin" weights fetch test/tiny-vit >/dev/null 2>"$work/err" || fail "fetch of a file without a record: $(cat "$work/err")"
[ "$(vit_transfers)" -eq "$before" ] || fail "a file without a record was downloaded again"

# LightlyTrain's default: no --method is distillation from dinov3/vitb16.
# Offline with nothing cached: one line saying how to fetch it or to train
# without a teacher, nothing written.
one_line 2 "dinov3/vitb16 is not downloaded .*weights fetch dinov3/vitb16.*--method simclr" -- \
  env HF_HUB_OFFLINE=1 "$bin" train --data "$images" --out "$work/default" --image-size 56
[ -e "$work/default" ] && fail "the refused default run wrote $work/default"
# Online it fetches timm's dinov3/vitb16 (here the stand-in's vit_t14,
# which the name's architecture check refuses before any training).
put timm/vit_base_patch16_dinov3.lvd1689m "$work/vit.safetensors"
output=$("$bin" train --data "$images" --out "$work/default" --image-size 56 --max-steps 1 2>&1)
status=$?
[ "$status" -eq 2 ] || fail "default run with a wrong teacher exited $status: $output"
printf '%s\n' "$output" | grep -q "dinov3/vitb16 does not match the file" ||
  fail "the default teacher is not dinov3/vitb16 from timm's repository: $output"
[ -e "$work/default/checkpoints/last.ckpt" ] && fail "the refused default run trained"
# Bad input that needs no weights is reported before any download: a used
# --out of train, a missing --data of embed; the hub is not asked.
put test/not-asked "$work/vit.safetensors"
mkdir -p "$work/used" && touch "$work/used/notes.txt"
one_line 2 "^lightly-train-c train: --out $work/used is not empty" -- \
  "$bin" train --data "$images" --out "$work/used" --method distillation \
  --method-arg teacher=test/not-asked
one_line 2 "^lightly-train-c embed: data folder '$work/missing' does not exist" -- \
  "$bin" embed --data "$work/missing" --checkpoint test/not-asked --out "$work/not-asked.npy"
grep -q "not-asked" "$log" && fail "bad --out / --data still downloaded the weights first"
# Ranks (mpirun, 2 CPU ranks, embed --checkpoint NAME): each resolves the
# name before any work; on one shared cache a single transfer serves both,
# with a cache of its own each rank fetches its own.
put test/ranks-shared "$work/vit.safetensors"
put test/ranks-own "$work/vit.safetensors"
embed_ranks() {  # embed_ranks NAME OUT [ROOT: a cache per rank under it]
  mpi_run 2 bash -c 'if [ -n "$5" ]; then export LIGHTLY_TRAIN_CACHE_DIR="$5/$OMPI_COMM_WORLD_RANK"; fi
    exec "$1" embed --data "$2" --checkpoint "$3" --image-size 28 --batch-size 8 --num-workers 1 \
      --out "$4"' _ "$bin" "$images" "$1" "$2" "${3:-}" >"$work/ranks.log" 2>&1 ||
    fail "embed on 2 ranks from $1: $(cat "$work/ranks.log")"
}
embed_ranks test/ranks-shared "$work/shared.npy"
[ "$(grep -c "^storage test/ranks-shared" "$log")" -eq 1 ] ||
  fail "2 ranks on one cache: not one transfer: $(grep ranks-shared "$log")"
embed_ranks test/ranks-own "$work/own.npy" "$work/rank-caches"
[ "$(grep -c "^storage test/ranks-own" "$log")" -eq 2 ] ||
  fail "2 ranks with a cache each: not one transfer each: $(grep ranks-own "$log")"
for rank in 0 1; do
  cmp -s "$work/rank-caches/$rank/models/hub/models--test--ranks-own/main/model.safetensors" \
    "$work/vit.safetensors" || fail "rank $rank has no copy of its own"
done
cmp -s "$work/shared.npy" "$work/own.npy" || fail "the two rank runs embedded differently"
# LightlyTrain's torchvision model_args weights=IMAGENET1K_V1: timm's copy
# of torchvision's weights by name; --epochs 0 exports them untouched.
output=$("$bin" train --data "$images" --out "$work/tv" --model torchvision/resnet18 --method simclr \
  --image-size 32 --epochs 0 --model-arg weights=IMAGENET1K_V1 2>&1) ||
  fail "--model-arg weights=IMAGENET1K_V1: $output"
"$build/tests/e2e/compare_weights" "$work/resnet.safetensors" \
  "$work/tv/exported_models/exported_last.safetensors" 0 0 >/dev/null ||
  fail "--model-arg weights=IMAGENET1K_V1 did not start from timm/resnet18.tv_in1k"
grep -q "^storage timm/resnet18.tv_in1k\|timm/resnet18.tv_in1k" "$log" ||
  fail "weights=IMAGENET1K_V1 fetched no timm/resnet18.tv_in1k"
# timm's model_args pretrained=True: timm's default tag (resnet18: a1_in1k),
# or the tag of the model's name; checkpoint_path=FILE: that file.
starts_from() {  # starts_from WHAT WEIGHTS OUT -- train options: --epochs 0 exports WEIGHTS
  local what=$1 weights=$2 out=$3 output
  shift 4
  output=$("$bin" train --data "$images" --out "$work/$out" --method simclr --image-size 32 \
    --epochs 0 "$@" 2>&1) || fail "$what: $output"
  "$build/tests/e2e/compare_weights" "$weights" \
    "$work/$out/exported_models/exported_last.safetensors" 0 0 >/dev/null ||
    fail "$what did not start from $weights"
}
starts_from "pretrained=True" "$work/resnet-a1.safetensors" timm-default -- \
  --model timm/resnet18 --model-arg pretrained=True
grep -q "timm/resnet18.a1_in1k" "$log" || fail "pretrained=True fetched no timm/resnet18.a1_in1k"
starts_from "timm/resnet18.tv_in1k pretrained=True" "$work/resnet.safetensors" timm-tag -- \
  --model timm/resnet18.tv_in1k --model-arg pretrained=True
starts_from "checkpoint_path=FILE" "$work/resnet-a1.safetensors" timm-file -- \
  --model timm/resnet18 --model-arg checkpoint_path="$work/resnet-a1.safetensors"
# torchvision's own weights (ConvNeXts, ShuffleNetV2s) from
# download.pytorch.org: a file PyTorch downloaded ($TORCH_HOME/hub/
# checkpoints) is used as it is; a download whose SHA-256 does not begin
# with the digits of its file name is refused and removed.
export LIGHTLY_TRAIN_TORCHVISION_ENDPOINT="$fake_hub_url"
shufflenet=(--data "$images" --method simclr --image-size 32 --epochs 0
            --model torchvision/shufflenet_v2_x0_5)
output=$("$bin" train "${shufflenet[@]}" --out "$work/tv-source" --seed 1 2>&1) ||
  fail "shufflenet --epochs 0: $output"
mkdir -p "$work/torch/hub/checkpoints"
cp "$work/tv-source/exported_models/exported_last.pt" \
  "$work/torch/hub/checkpoints/shufflenetv2_x0.5-f707e7126e.pth"
output=$(TORCH_HOME="$work/torch" "$bin" train "${shufflenet[@]}" --out "$work/tv-torch" --seed 2 \
  --model-arg weights=DEFAULT 2>&1) || fail "weights=DEFAULT from PyTorch's cache: $output"
"$build/tests/e2e/compare_weights" "$work/tv-source/exported_models/exported_last.safetensors" \
  "$work/tv-torch/exported_models/exported_last.safetensors" 0 0 >/dev/null ||
  fail "weights=DEFAULT did not start from PyTorch's cached shufflenetv2_x0.5-f707e7126e.pth"
mkdir -p "$hub/torchvision/models"
cp "$work/blob" "$hub/torchvision/models/shufflenetv2_x1-5666bf0f80.pth"
last_line 2 "SHA-256 mismatch \(received .*, the file name gives 5666bf0f80.*the file was removed" \
  -- "$bin" weights fetch torchvision/shufflenet_v2_x1_0.IMAGENET1K_V1
grep -q "^storage torchvision/models/shufflenetv2_x1-5666bf0f80.pth" "$log" ||
  fail "torchvision's file was not asked at /models/FILE"
ls "$work/cache/models/torchvision" 2>/dev/null | grep -v lock | grep -q . &&
  fail "the mismatched torchvision file was kept: $(ls "$work/cache/models/torchvision")"
e2e_finish
