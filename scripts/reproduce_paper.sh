#!/usr/bin/env bash
# The paper's best settings (Tables 1-2), as irbm commands. Each run takes days on a CPU: run the
# lines you need, on a GPU with DEVICE=cuda, e.g.  DEVICE=cuda bash scripts/reproduce_paper.sh mnist
# Every run directory resumes where it stopped if the command is run again.
set -euo pipefail
DEVICE="${DEVICE:-cpu}"
OUT="${OUT:-runs}"
which="${1:-all}"
common=(--device "$DEVICE" --batch-size 64 --cd-k 10 --pcd --optimizer adagrad --eval-every 1000
        --eval-chains 5000 --eval-betas 100000)

if [[ "$which" == mnist || "$which" == all ]]; then
  irbm train rbm  mnist --out "$OUT/mnist-rbm500"  --n-hidden 500 --lr 0.01 --epochs 5000 "${common[@]}"
  irbm train orbm mnist --out "$OUT/mnist-orbm500" --n-hidden 500 --lr 0.03 --epochs 500 "${common[@]}"
  irbm train irbm mnist --out "$OUT/mnist-irbm"    --l1 1e-4 --lr 0.05 --epochs 3000 "${common[@]}"
  runs=("$OUT/mnist-rbm500" "$OUT/mnist-orbm500" "$OUT/mnist-irbm")
  for run in "${runs[@]}"; do irbm evaluate "$run" --chains 5000 --betas 100000 --device "$DEVICE"; irbm plot "$run"; done
  irbm report "${runs[@]}" --out "$OUT/mnist-report"
fi
if [[ "$which" == caltech || "$which" == all ]]; then
  irbm train rbm  caltech101 --out "$OUT/caltech-rbm500"  --n-hidden 500 --lr 0.01 --epochs 3000 "${common[@]}"
  irbm train orbm caltech101 --out "$OUT/caltech-orbm500" --n-hidden 500 --l1 1e-3 --lr 0.01 --epochs 5000 "${common[@]}"
  irbm train irbm caltech101 --out "$OUT/caltech-irbm"    --l1 1e-3 --lr 0.05 --epochs 4000 "${common[@]}"
  runs=("$OUT/caltech-rbm500" "$OUT/caltech-orbm500" "$OUT/caltech-irbm")
  for run in "${runs[@]}"; do irbm evaluate "$run" --chains 5000 --betas 100000 --device "$DEVICE"; irbm plot "$run"; done
  irbm report "${runs[@]}" --out "$OUT/caltech-report"
fi
