#!/usr/bin/env bash
# MNIST (Table 1) on CPU: a few epochs of each of the paper's three models with its settings
# (scripts/paper/mnist-*.toml), then the measured seconds per epoch and the projected time of the
# paper's protocol (scripts/epoch_times.py -> results/mnist_timing.md). The iRBM is timed at the
# paper's final size (1,208 units) by starting it there, without L1 (which would zero and prune
# the units it has not trained yet). Resumable: raise EPOCHS to train further.
#   EPOCHS=3 OUT=runs THREADS=1 bash scripts/mnist_timing.sh
set -euo pipefail
EPOCHS="${EPOCHS:-3}"
OUT="${OUT:-runs}"
THREADS="${THREADS:-1}"
PY="${PYTHON:-python}"
cd "$(dirname "$0")/.."
for model in rbm500 orbm500 irbm; do
  family=${model%%[0-9]*}
  extra=()
  [[ $family == irbm ]] && extra+=(--n-hidden 1208 --l1 0)
  $PY -m irbm.cli train "$family" mnist --out "$OUT/mnist-timing-$model" \
      --config "scripts/paper/mnist-$model.toml" --epochs "$EPOCHS" --eval-every 0 \
      --threads "$THREADS" --quiet "${extra[@]}"
done
$PY scripts/epoch_times.py "$OUT"/mnist-timing-{rbm500,orbm500,irbm} --out results/mnist_timing
