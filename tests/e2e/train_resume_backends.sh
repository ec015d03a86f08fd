#!/usr/bin/env bash
# A checkpoint moves between backends: written by the ref backend and
# resumed by the cpu backend, and the other way (tests/e2e/resume_across.bash;
# make test-gpu runs the same between the GPU and the CPU). SimCLR in fp32,
# DINO (EMA teacher, centre, schedules) from ref to cpu, and SimCLR from cpu
# to cpu (which must end byte-identical to the uninterrupted run).
set -u
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/resume_across.bash"
e2e_init resume_backends
export OMP_WAIT_POLICY=PASSIVE

"$build/tests/e2e/make_images" "$work/images" 8 >/dev/null || fail "make_images"
# 8 images / batch 4: an epoch, and a checkpoint, every 2 steps.
common=(--data "$work/images" --image-size 24 --batch-size 4 --num-workers 1 --max-steps 3
        --seed 5 --accelerator cpu)
small=(--method simclr --method-arg hidden_dim=64 --method-arg output_dim=32)
resume_across simclr-ref-cpu "--backend ref" "--backend cpu" 2 -- "${common[@]}" "${small[@]}"
resume_across simclr-cpu-ref "--backend cpu" "--backend ref" 2 -- "${common[@]}" "${small[@]}"
resume_across simclr-cpu-cpu "--backend cpu" "--backend cpu" 2 -- "${common[@]}" "${small[@]}"
# Local crops of 16 px: left to the default (96 px, four times the global
# crops' side) the ref backend spent ~90 of this test's ~108 s on them.
resume_across dino-ref-cpu "--backend ref" "--backend cpu" 2 -- "${common[@]}" --method dino \
  --local-views 2 --local-image-size 16 --method-arg hidden_dim=64 --method-arg bottleneck_dim=16 \
  --method-arg output_dim=32
e2e_finish
