#!/usr/bin/env bash
# MNIST (Table 1) as far as the CPU allowed: the latest snapshot of each of the paper's three
# models, trained with its settings (scripts/paper/mnist-*.toml) and an epoch cap,
#   irbm train rbm mnist --config scripts/paper/mnist-rbm500.toml --epochs E --eval-every 0 --out runs/mnist-rbm500
# (likewise orbm500 and irbm; snapshots/<epoch> copies of the run directory), evaluated by
# scripts/paper_results.py beside the paper's numbers. Every row is partial and says so.
# RUNS: where the runs live (default runs/).
set -euo pipefail
RUNS="${RUNS:-runs}"
PY="${PYTHON:-python}"
cd "$(dirname "$0")/.."
rows=()
for model in rbm500 orbm500 irbm; do
  epoch=$(ls "$RUNS/mnist-$model/snapshots" 2>/dev/null | sort -n | tail -1)
  [[ -n $epoch ]] || { echo "no snapshots in $RUNS/mnist-$model/snapshots" >&2; exit 1; }
  rows+=("$RUNS/mnist-$model/snapshots/$epoch")
done
$PY scripts/paper_results.py "${rows[@]}" --dataset mnist --out results/mnist \
    --chains 500 --betas 5000 --raise-rows 300 --raise-betas 5000
# The iRBM's AIS checked: ten times the temperatures (100 chains), and from the model base.
irbm_row="$RUNS/mnist-irbm/snapshots/$(ls "$RUNS/mnist-irbm/snapshots" | sort -n | tail -1)"
$PY scripts/paper_results.py "$irbm_row" --dataset mnist --out results/mnist_irbm_ais_long \
    --chains 100 --betas 50000 --raise-rows 0
$PY scripts/paper_results.py "$irbm_row" --dataset mnist --out results/mnist_irbm_ais_model \
    --chains 500 --betas 5000 --bases model --raise-rows 0
