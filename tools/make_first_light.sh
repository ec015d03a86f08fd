#!/usr/bin/env bash
# make first-light: the one folder a GPU session carries (issue 19), then
# the device command that runs it. Run as: tools/make_first_light.sh BUILD_DIR OUT_DIR
#
#   OUT/run.sh, first_light_lib.bash, first_light_check.py
#                       the GPU script (tools/first_light.sh) and its helpers
#   OUT/python/lightly_train_c   the pip wheel's Python package (its launcher)
#   OUT/bundle.tar.xz   make bundle's folder (program, test binaries, tools,
#                       our Debian libraries; not CUDA's: the node's PyTorch
#                       brings those), debug sections stripped, xz -9 (its
#                       64 MB window also removes the CUDA code that every
#                       test binary repeats); without the bundle's copy of
#                       tests/fixtures: the working tree beside the folder
#                       has them (run.sh links them in; 4 MiB of xz saved)
#   OUT/images.conf     how many JPEGs run.sh makes on the node, and their
#                       sizes: real JPEGs cropped and scaled from the working
#                       tree's tests/fixtures/photos by the bundle's
#                       tools/photo_crops (tools/photo_crops.c; 768 of
#                       ImageNet's sizes in about 2 s, none of them carried)
#   OUT/MANIFEST        what was built from what
# What travels to the device, this folder and the working tree beside it
# (tracked and untracked-not-ignored files, shared/ where the checkout has
# one), must stay under the device tool's 64 MiB: this script fails when
# the two together pass FIRST_LIGHT_MAX_MB MiB.
#
# Environment: FIRST_LIGHT_IMAGES (768: 3 steps of 256 per epoch),
# FIRST_LIGHT_SIDES ("288 480": the images' shorter sides, ImageNet's
# range, so the train part's data time is a real dataset's; until
# 2026-11-29 the images were carried, and the growing bundle had shrunk them
# to 112-208 px), FIRST_LIGHT_PACK (xz; "tar" packs without compressing,
# for the test), FIRST_LIGHT_MAX_MB (63: MiB with the tree).
set -eu

if [ $# -ne 2 ]; then
    echo "usage: $0 BUILD_DIR OUT_DIR" >&2
    exit 2
fi
build=$1
out=$2
here=$(cd "$(dirname "$0")/.." && pwd)
count=${FIRST_LIGHT_IMAGES:-768}
read -r min_side max_side <<<"${FIRST_LIGHT_SIDES:-288 480}"
pack=${FIRST_LIGHT_PACK:-xz}
max_mb=${FIRST_LIGHT_MAX_MB:-63}

rm -rf "$out"
mkdir -p "$out"
staging=$(mktemp -d "${TMPDIR:-/tmp}/first-light-staging-XXXXXX")
trap 'rm -rf "$staging"' EXIT

BUNDLE_TARBALL=0 "$here/tools/bundle.sh" "$build" "$staging/bundle"
# The fixtures travel in the working tree already (tracked files); float
# weights barely compress, so a second copy cost 4 of the 64 MiB.
rm -rf "$staging/bundle/tests/fixtures"
# run.sh makes the images on the node from the tree's photographs.
cp "$build/tools/photo_crops" "$staging/bundle/tools/"
# Host debug sections only (symbols stay, for backtraces); the CUDA code is
# not touched.
find "$staging/bundle" -type f -exec sh -c 'head -c 4 "$1" | grep -q ELF' _ {} \; -print0 |
    xargs -0 strip --strip-debug
case $pack in
xz) tar -C "$staging" -cf - bundle | xz -9 -T1 >"$out/bundle.tar.xz" ;;
tar) tar -C "$staging" -cf "$out/bundle.tar" bundle ;;
*) echo "make_first_light.sh: FIRST_LIGHT_PACK is xz or tar, not '$pack'" >&2; exit 2 ;;
esac

printf 'FIRST_LIGHT_IMAGES=%d\nFIRST_LIGHT_SIDES="%d %d"\n' "$count" "$min_side" "$max_side" \
    >"$out/images.conf"
cp "$here/tools/first_light.sh" "$out/run.sh"
cp "$here/tools/first_light_lib.bash" "$here/tools/first_light_check.py" "$out/"
mkdir -p "$out/python"  # the wheel's launcher, for its check on the node
cp -R "$here/python/lightly_train_c" "$out/python/"

{
    echo "lightly-train-c first light, made $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "commit: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
        git -C "$here" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
    "$build/lightly-train-c" --version 2>&1 | head -n 1
    "$build/lightly-train-c" --version 2>&1 | sed -n 's/^GPU libraries: /libraries here: /p'
    "$build/lightly-train-c" --version 2>&1 | sed -n 's/^NCCL: /NCCL here: /p'
    echo "images: $count JPEGs, shorter sides $min_side to $max_side px, made on the node from tests/fixtures/photos"
} >"$out/MANIFEST"

# Bytes of what travels beside the folder: the files git tracks or would
# (not ignored), and shared/ inside the checkout.
tree_bytes=$( (cd "$here" && git ls-files -z --cached --others --exclude-standard 2>/dev/null |
    xargs -0 -r stat -c %s 2>/dev/null; [ -d shared ] && du -sb shared | cut -f1) |
    awk '{ total += $1 } END { print total + 0 }')
folder_bytes=$(du -sb "$out" | cut -f1)
size_mb=$(( (folder_bytes + tree_bytes + 1048575) / 1048576 ))
if [ "$size_mb" -gt "$max_mb" ]; then
    echo "make_first_light.sh: $out ($((folder_bytes >> 20)) MiB) and the working tree" \
         "($((tree_bytes >> 20)) MiB) are $size_mb MiB, over $max_mb MiB (the device tool carries" \
         "64 MiB)" >&2
    exit 1
fi
echo "first light: $out ($((folder_bytes >> 20)) MiB: bundle $(du -sm "$out"/bundle.tar* | cut -f1) MiB; $size_mb MiB with the working tree; $count images of $min_side to $max_side px made on the node)"
echo "The device command (from the repository root the device tool sends, with $(basename "$out")/ there):"
echo "  run: command=\"bash $(basename "$out")/run.sh\" carry=[\"$(basename "$out")\"] timeout_s=480"
