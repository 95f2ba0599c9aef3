#!/usr/bin/env bash
# The RBM-100 and RBM-500 rows of Table 2 at the paper's protocol (issue 27): trained to 5,000
# and 3,000 epochs (paper settings, seed 1234), the snapshot of best validation NLL among every
# 1,000 epochs selected (scripts/paper_results.py, as the paper did), copied to results/models/
# and bracketed there with the tempering cross-check. One model per call, so the two can run as
# two one-thread jobs:
#
#   bash scripts/paper_epochs_rbm.sh rbm100     # or rbm500
#
# RUNS: where the runs live (default runs/). Every step resumes where it stopped.
set -euo pipefail
RUNS="${RUNS:-runs}"
cd "$(dirname "$0")/.."
paper=(--batch-size 64 --cd-k 10 --seed 1234 --threads 1)
case "${1:-}" in
  rbm100) run=rbm100-adagrad; epochs=5000; options=(--n-hidden 100 --lr 0.1) ;;
  rbm500) run=rbm500-adagrad; epochs=3000; options=(--n-hidden 500 --lr 0.01) ;;
  *) echo "usage: $0 rbm100|rbm500" >&2; exit 2 ;;
esac
EVERY=500 EPOCHS=$epochs bash scripts/train_snapshots.sh "$RUNS/$run" rbm caltech101 \
    "${options[@]}" "${paper[@]}"
snapshots=$(seq -s, -f "$RUNS/$run/snapshots/%g" 1000 1000 "$epochs")
python scripts/paper_results.py "$snapshots" --out "results/caltech101_$1_selection" \
    --chains 300 --betas 5000 --raise-rows 0 --threads 1
selected=$(python -c "import json,sys; print(json.load(open(sys.argv[1]))[0]['run'])" \
    "results/caltech101_$1_selection.json")
model="$run-selected"
if [[ ! -d results/models/$model ]]; then  # the model's files, not the evaluation caches
  mkdir -p "results/models/$model.tmp"
  cp "$selected"/{irbm-run.json,config.json,history.json,model.safetensors} \
      "results/models/$model.tmp/"
  mv "results/models/$model.tmp" "results/models/$model"
fi
python scripts/record_selection.py "results/caltech101_$1_selection.json" "results/models/$model"
python scripts/bracket_results.py "results/models/$model" --out "/tmp/$model" --evaluate \
    --chains 1000 --rows 300 --raise-repeats 1 --max-seconds 2400 --tempering 2000
