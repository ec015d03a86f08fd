#!/usr/bin/env bash
# `make demo`: the whole path of lightly-train-c on a small sample, on the CPU,
# in two and a half to six minutes of training (by CPU): 1000 Fashion-MNIST training images and 500
# labelled test images (from the Debian package dataset-fashion-mnist that
# `make deps` installs), a short SimCLR run with kNN evaluation on the test
# images (the configuration of tests/e2e/learning_fashion_mnist.sh, measured
# to raise kNN top-1 over the random backbone), the embeddings of the test
# images, the exported backbone, and where everything is. Rerunning replaces
# the previous demo.
#   tools/demo.sh [BUILD] [DEMO_DIR]     (defaults: build, BUILD/demo)
# Environment: DEMO_EPOCHS (default 30) sets the length of the training run.
set -euo pipefail

build=${1:-build}
demo_dir=${2:-$build/demo}
epochs=${DEMO_EPOCHS:-30}
bin=$build/lightly-train-c
tool=$build/tools/fashion_mnist_folder
dataset=/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz

for file in "$bin" "$tool"; do
  [ -x "$file" ] || { echo "demo: $file is not built (run: make demo)" >&2; exit 1; }
done
[ -f "$dataset" ] || {
  echo "demo: $dataset is missing: apt-get install dataset-fashion-mnist (make deps does it)" >&2
  exit 1
}

images=$demo_dir/images
labelled=$demo_dir/labelled
run=$demo_dir/run
embeddings=$demo_dir/embeddings.npy
exported=$demo_dir/resnet18.safetensors
mkdir -p "$demo_dir"

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# Prints the command, then runs it.
run_step() {
  echo "+ $*"
  "$@"
}
start=$(now)

echo "== 1/4 sample data: 100 images per class of the Fashion-MNIST train split, 50 of the test split"
rm -rf "$images" "$labelled"
step=$(now)
run_step "$tool" --out "$images" --split train --per-class 100
run_step "$tool" --out "$labelled" --split test --per-class 50
echo "   ($(elapsed "$step") s) one sub-folder per class: train ignores them, the kNN evaluation reads them as labels"

echo
echo "== 2/4 train: SimCLR, ResNet-18, 16 px views, batch 64, $epochs epochs on the CPU"
echo "   (one compute thread and seed 0: the run of tests/e2e/learning_fashion_mnist.sh, whose"
echo "   result does not depend on the machine's core count)"
step=$(now)
run_step "$bin" train --data "$images" --out "$run" --model resnet18 --method simclr \
  --method-arg hidden_dim=512 --method-arg output_dim=128 --transform scale_min=0.3 \
  --image-size 16 --batch-size 64 --epochs "$epochs" --optim adamw --lr 4e-3 \
  --knn-data "$labelled" --knn-every 10 --threads 1 --num-workers 1 --seed 0 --overwrite
train_seconds=$(elapsed "$step")

echo
echo "== 3/4 embed the labelled images with the exported backbone"
step=$(now)
run_step "$bin" embed --data "$labelled" --checkpoint "$run/exported_models/exported_last.safetensors" \
  --out "$embeddings" --image-size 16 --overwrite
embed_seconds=$(elapsed "$step")

echo
echo "== 4/4 export the backbone as a torchvision state dict"
run_step "$bin" export --checkpoint "$run/checkpoints/last.ckpt" --out "$exported" --overwrite

# kNN top-1 before training (the random backbone) and after the last epoch,
# from metrics.jsonl.
knn=$( { grep -o '"knn/top1": [0-9.e-]*' "$run/metrics.jsonl" || true; } |
  awk '{ printf "%.1f%%\n", 100 * $2 }')
knn_first=$(printf '%s\n' "$knn" | head -n 1)
knn_last=$(printf '%s\n' "$knn" | tail -n 1)

echo
echo "== demo done in $(elapsed "$start") s (training $train_seconds s, embedding $embed_seconds s)"
if [ -n "$knn" ]; then
  echo "kNN top-1 on the 500 labelled images: $knn_first with the random backbone, $knn_last after training"
  echo "  (a short run on 1000 small images: kNN top-1 first drops, then passes the random backbone)"
else
  echo "kNN: no evaluation was recorded (see $run/train.log)"
fi
cat <<EOF

files:
  training images (a sub-folder per class) $images/
  labelled images for kNN                 $labelled/
  checkpoint (to resume or export)        $run/checkpoints/last.ckpt
  backbone after training                 $run/exported_models/exported_last.safetensors
  logs                                    $run/{train.log,metrics.jsonl,events.out.tfevents.*}
  embeddings, (500, 512) float32          $embeddings
  their file names, one per row           $embeddings.filenames.txt
  torchvision ResNet-18 state dict        $exported

look at the run in TensorBoard (pip install tensorboard), then open http://localhost:6006:
  tensorboard --logdir $run

use the results in Python:
  import numpy, torchvision, safetensors.torch
  embeddings = numpy.load("$embeddings")
  names = open("$embeddings.filenames.txt").read().splitlines()
  model = torchvision.models.resnet18()
  model.load_state_dict(safetensors.torch.load_file("$exported"), strict=False)  # only fc.* missing
EOF
