#!/usr/bin/env bash
# End-to-end tests of Ultralytics' released YOLO weights by name
# (ultralytics/yolo11n.pt: src/weights/names.c) against a stand-in for
# GitHub's release downloads on 127.0.0.1 (fake_hub.py,
# LIGHTLY_TRAIN_GITHUB_ENDPOINT): `weights fetch` brings the asset into the
# cache (GitHub publishes no SHA-256: the size is checked, the SHA-256
# received recorded), `weights` lists it, `train --model
# ultralytics/yolo11n.pt` starts from it (then offline, from the cache), a
# yolo11n.pt in the working directory wins as it does for Ultralytics, the
# hub's token never goes to GitHub, and a missing asset, HF_HUB_OFFLINE, an
# unknown name and a file that is not the name's model are refused in one
# line. The served file is a random yolo11n written by our own export
# (Ultralytics' checkpoint layout, tests/test_ultralytics_export.c).
set -u
source "$(dirname "$0")/lib.bash"
e2e_init weights_ultralytics
export OMP_WAIT_POLICY=PASSIVE
command -v python3 >/dev/null || { fail "python3 is missing (make deps)"; e2e_finish; }
# Absolute: the tests below run in other working directories.
bin=$(realpath "$bin") build=$(realpath "$build")

hub="$work/hub" log="$work/hub.log"
release="$hub/ultralytics/assets/v8.4.0"
cached="$work/cache/models/github/releases--ultralytics--assets/v8.4.0"
tool="$build/tools/safetensors_tool"
compare="$build/tests/e2e/compare_weights"

# yolo_pt SEED OUT: a random yolo11n as Ultralytics' checkpoint (.pt).
yolo_pt() {
  "$build/tests/e2e/make_backbone" "$work/seed$1.safetensors" ultralytics/yolo11n.yaml "$1" 64 \
    >/dev/null && "$bin" export --checkpoint "$work/seed$1.safetensors" --out "$2" >/dev/null ||
    fail "a yolo11n .pt of seed $1"
}
mkdir -p "$release" "$work/elsewhere" "$work/local"
yolo_pt 7 "$release/yolo11n.pt"
cp "$release/yolo11n.pt" "$release/yolov8s.pt"  # a yolo11n under another name
yolo_pt 8 "$work/local/yolo11n.pt"
served_sha=$(sha256sum "$release/yolo11n.pt" | cut -d' ' -f1)
served_size=$(stat -c %s "$release/yolo11n.pt")

fake_hub_start "$hub" "$log"
export LIGHTLY_TRAIN_GITHUB_ENDPOINT="$fake_hub_url"
url="$LIGHTLY_TRAIN_GITHUB_ENDPOINT/ultralytics/assets/releases/download/v8.4.0"

# refused STATUS PATTERN -- command: exits STATUS, its last line matches
# PATTERN and it is the only line starting "lightly-train-c".
refused() {
  local status=$1 pattern=$2 output got
  shift 3
  output=$("$@" 2>&1)
  got=$?
  [ "$got" -eq "$status" ] || fail "'$*' exited $got, expected $status: $output"
  [ "$(printf '%s\n' "$output" | grep -c "^lightly-train-c")" -eq 1 ] ||
    fail "'$*' printed more than one error line: $output"
  printf '%s\n' "$output" | tail -n 1 | grep -q -E -- "$pattern" ||
    fail "'$*' last line lacks /$pattern/: $output"
}

# `weights fetch` by name, from the working directory elsewhere (no
# yolo11n.pt there): the release asset into the cache, checked for its
# size, its SHA-256 recorded as received; the hub's token stays home.
cd "$work/elsewhere" || exit 1
path=$(HF_TOKEN=secret "$bin" weights fetch ultralytics/yolo11n.pt 2>"$work/err") ||
  fail "weights fetch ultralytics/yolo11n.pt: $(cat "$work/err")"
[ "$path" = "$cached/yolo11n.pt" ] || fail "fetched to '$path', not the cache's $cached/yolo11n.pt"
cmp -s "$path" "$release/yolo11n.pt" || fail "the fetched file is not the release's"
grep -q "^downloading ultralytics/yolo11n.pt .* from $url/yolo11n.pt$" "$work/err" ||
  fail "not downloaded from the release URL: $(cat "$work/err")"
grep -q "licence: AGPL-3.0" "$work/err" || fail "the licence is not shown: $(cat "$work/err")"
grep -q "SHA-256 $served_sha (the server published none to check)" "$work/err" ||
  fail "the SHA-256 received is not said: $(cat "$work/err")"
grep -q "^storage ultralytics/assets/v8.4.0/yolo11n.pt attempt=1 range=- auth=no" "$log" ||
  fail "the storage got no request, or the token: $(cat "$log")"
printf 'lightly-train-c download record 1\nsha256 %s\nsha256_from received\nsize %s\nsize_from Content-Length\nurl %s\n' \
  "$served_sha" "$served_size" "$url/yolo11n.pt" | cmp -s - "$path.verified" ||
  fail "the download record is not as documented: $(cat "$path.verified")"
"$bin" weights | grep -q "^ultralytics/yolo11n.pt .* AGPL-3.0 .* ultralytics/assets v8.4.0 .* yes$" ||
  fail "weights does not list ultralytics/yolo11n.pt as cached: $("$bin" weights)"
before=$(grep -c "^storage" "$log")
"$bin" weights fetch ultralytics/yolo11n.pt >/dev/null 2>&1 || fail "second fetch"
[ "$(grep -c "^storage" "$log")" -eq "$before" ] || fail "a cached asset was downloaded again"

# train --model ultralytics/yolo11n.pt starts from that file, offline from
# the cache: the export's Detect head (never trained) is the file's.
common=(--data "$work/images" --batch-size 4 --image-size 32 --num-workers 1 --threads 2
        --max-steps 1 --method simclr)
"$build/tests/e2e/make_images" "$work/images" 8 >/dev/null || fail "make_images"
head_of() {  # head_of WEIGHTS OUT [LAYER]: the Detect head's tensors (model.23.) of a .pt or safetensors
  local file=$1
  case $file in
    *.pt) "$bin" export --checkpoint "$file" --out "$2.full.safetensors" >/dev/null 2>&1 || fail "export $file"
          file="$2.full.safetensors" ;;
  esac
  "$tool" extract "$file" "model.${3:-23}." "$2" >/dev/null || fail "extract the head of $1"
}
head_of "$release/yolo11n.pt" "$work/served.head"
head_of "$work/local/yolo11n.pt" "$work/local.head"
output=$(HF_HUB_OFFLINE=1 "$bin" train "${common[@]}" --model ultralytics/yolo11n.pt \
  --out "$work/run" 2>&1) || fail "train --model ultralytics/yolo11n.pt: $output"
head_of "$work/run/exported_models/exported_last.safetensors" "$work/run.head"
"$compare" "$work/run.head" "$work/served.head" 0 0 >/dev/null ||
  fail "the run did not start from the release's yolo11n.pt"
# A yolo11n.pt in the working directory wins, as for Ultralytics' YOLO("yolo11n.pt").
cd "$work/local" || exit 1
[ "$("$bin" weights path ultralytics/yolo11n.pt)" = yolo11n.pt ] ||
  fail "the working directory's yolo11n.pt is not the name's file"
output=$("$bin" train "${common[@]}" --model ultralytics/yolo11n.pt --out "$work/run_local" 2>&1) ||
  fail "train from the working directory's yolo11n.pt: $output"
head_of "$work/run_local/exported_models/exported_last.safetensors" "$work/run_local.head"
"$compare" "$work/run_local.head" "$work/local.head" 0 0 >/dev/null ||
  fail "the run did not start from the working directory's yolo11n.pt"
cd "$work/elsewhere" || exit 1

# yolov8n-oiv7.pt (yolov8n trained on Open Images V7: 601 classes) likewise;
# its 601-class Detect head (model.22) goes to the export unchanged.
"$build/tests/e2e/make_backbone" "$work/oiv7.safetensors" ultralytics/yolov8n-oiv7.pt 9 64 \
  >/dev/null && "$bin" export --checkpoint "$work/oiv7.safetensors" \
  --out "$release/yolov8n-oiv7.pt" >/dev/null || fail "a yolov8n-oiv7 .pt"
head_of "$release/yolov8n-oiv7.pt" "$work/oiv7_served.head" 22
output=$("$bin" train "${common[@]}" --model ultralytics/yolov8n-oiv7.pt --out "$work/run_oiv7" \
  2>&1) || fail "train --model ultralytics/yolov8n-oiv7.pt: $output"
grep -q "^train: yolov8n, simclr" <<<"$output" || fail "the oiv7 run is not a yolov8n: $output"
head_of "$work/run_oiv7/exported_models/exported_last.safetensors" "$work/oiv7_run.head" 22
"$compare" "$work/oiv7_run.head" "$work/oiv7_served.head" 0 0 >/dev/null ||
  fail "the run did not start from the release's yolov8n-oiv7.pt"
"$tool" list "$work/oiv7_run.head" | grep -q -P "^tensor\tcv3.2.2.weight\tF32\t601,100,1,1" ||
  fail "the oiv7 head has not 601 classes: $("$tool" list "$work/oiv7_run.head" | grep cv3.2.2)"

# yolov5n6u.pt (yolov5-p6.yaml: a P6/64 stage) likewise; its Detect head
# (model.33) has a fourth level, which comes out unchanged.
"$build/tests/e2e/make_backbone" "$work/p6.safetensors" ultralytics/yolov5n6u.pt 10 64 \
  >/dev/null && "$bin" export --checkpoint "$work/p6.safetensors" \
  --out "$release/yolov5n6u.pt" >/dev/null || fail "a yolov5n6u .pt"
head_of "$release/yolov5n6u.pt" "$work/p6_served.head" 33
output=$("$bin" train "${common[@]}" --model ultralytics/yolov5n6u.pt \
  --out "$work/run_p6" 2>&1) || fail "train --model ultralytics/yolov5n6u.pt: $output"
head_of "$work/run_p6/exported_models/exported_last.safetensors" "$work/p6_run.head" 33
"$compare" "$work/p6_run.head" "$work/p6_served.head" 0 0 >/dev/null ||
  fail "the run did not start from the release's yolov5n6u.pt"
"$tool" list "$work/p6_run.head" | grep -q -P "^tensor\tcv3.3.2.weight\tF32\t80," ||
  fail "the yolov5n6u head has no fourth level: $("$tool" list "$work/p6_run.head" | grep cv3)"

# Refusals, one line each, nothing written: an asset the release lacks
# (404), offline and not cached, an unknown name, a file that is not the
# name's model.
refused 2 "^lightly-train-c train: ultralytics/yolov8n.pt: $url/yolov8n.pt: not found \(HTTP 404\).* \(the weights of --model ultralytics/yolov8n.pt\); or put yolov8n.pt into the working directory, pass --checkpoint PATH, or train from --model ultralytics/yolov8n.yaml$" -- \
  "$bin" train "${common[@]}" --model ultralytics/yolov8n.pt --out "$work/refused"
[ -e "$work/refused" ] && fail "the refused run wrote $work/refused"
refused 2 "ultralytics/yolov8n.pt: $url/yolov8n.pt: not found \(HTTP 404\)" -- \
  "$bin" weights fetch ultralytics/yolov8n.pt
refused 2 "ultralytics/yolo11s.pt is not downloaded and HF_HUB_OFFLINE forbids the network: run 'lightly-train-c weights fetch ultralytics/yolo11s.pt' .*or download $url/yolo11s.pt by hand" -- \
  env HF_HUB_OFFLINE=1 "$bin" train "${common[@]}" --model ultralytics/yolo11s.pt --out "$work/refused"
grep -q "yolo11s" "$log" && fail "HF_HUB_OFFLINE still asked GitHub"
refused 2 "unknown weights name 'ultralytics/yolo13n.pt' \(known: ultralytics/yolov8n.pt, .*ultralytics/yolov8x-worldv2.pt: 119 names; " -- \
  "$bin" weights fetch ultralytics/yolo13n.pt
refused 2 "^lightly-train-c train: --checkpoint: .*/yolov8s.pt: yolov8s: weights do not match the model: [0-9]+ missing: model.4.m.1.cv1.conv.weight" -- \
  "$bin" train "${common[@]}" --model ultralytics/yolov8s.pt --out "$work/refused"
[ -e "$work/refused/checkpoints/last.ckpt" ] && fail "the run with the wrong file trained"

e2e_finish
