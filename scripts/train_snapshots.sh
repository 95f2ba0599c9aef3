#!/usr/bin/env bash
# Train a run in chunks of EVERY epochs up to EPOCHS, copying the model after each chunk to
# RUN/snapshots/EPOCH/ (a run directory of its own, for evaluation, model selection and
# annealing along the training trajectory). Resumable: run it again and it goes on.
#
#   EVERY=50 EPOCHS=1000 bash scripts/train_snapshots.sh RUN FAMILY DATASET [irbm train options]
set -euo pipefail
run=$1; shift
EVERY="${EVERY:-50}"
EPOCHS="${EPOCHS:-1000}"
done_epochs() { python -c "import json,sys; h=json.load(open(sys.argv[1])); print(len(h['history']))" "$run/history.json" 2>/dev/null || echo 0; }
# Resume from the epochs the run has done (a run copied from results/checkpoints/ has no
# snapshots), on the EVERY grid so that snapshots fall on the same epochs as before.
epoch=$(( $(done_epochs) / EVERY * EVERY ))
while (( epoch < EPOCHS )); do
  epoch=$(( epoch + EVERY ))
  irbm train "$@" --out "$run" --epochs "$epoch" --quiet
  snap="$run/snapshots/$epoch"
  mkdir -p "$snap.tmp"
  for f in irbm-run.json config.json history.json model.safetensors; do
    [[ -f $run/$f ]] && cp "$run/$f" "$snap.tmp/"
  done
  # The parameters' running average (--average), a run directory of its own.
  [[ -d $run/average ]] && cp -r "$run/average" "$snap.tmp/average"
  rm -rf "$snap"; mv "$snap.tmp" "$snap"
  echo "$(date -u +%H:%M:%S) epoch $epoch done" >&2
done
