#!/usr/bin/env bash
# The paper's model selection among a run's snapshots 1,000 epochs apart: the validation NLL of
# each under AIS point estimates (scripts/paper_results.py, 300 chains x 5,000 temperatures on
# every path its family offers), the best copied to results/models/NAME with the record of how
# it was chosen (scripts/record_selection.py). Resumable: the evaluations are cached in the
# candidates' directories, and an existing results/models/NAME is kept.
#
#   [AVERAGE=1] [DEVICE=cuda] [EVAL="--chains 300 ..."] \
#       bash scripts/select_snapshots.sh RUN NAME [EPOCH ...]      (default 1000 2000 3000 4000)
#
# AVERAGE=1 selects among the parameters' running averages (RUN/snapshots/EPOCH/average, from
# `irbm train --average`), each given its run's training record in RUN-average/EPOCH.
# The table is written to results/caltech101_NAME_selection.{md,json} (NAME less "-selected").
set -euo pipefail
run=$1 name=$2; shift 2
(( $# )) || set -- 1000 2000 3000 4000
EVAL="${EVAL:---chains 300 --betas 5000 --raise-rows 0 --threads 1}"
candidates=()
for epoch in "$@"; do
  snapshot="$run/snapshots/$epoch"
  dir=$snapshot
  [[ ${AVERAGE:-0} == 1 ]] && dir="$run-average/$epoch"
  # An average candidate made earlier (kept, or carried in results/checkpoints/) needs no snapshot.
  if [[ ! -d $dir ]] || [[ $dir == "$snapshot" ]]; then
    [[ -f $snapshot/model.safetensors ]] || { echo "no snapshot $snapshot: train further" >&2; exit 2; }
  fi
  if [[ ! -d $dir ]]; then
    mkdir -p "$dir.tmp"
    cp "$snapshot/average"/* "$snapshot/history.json" "$dir.tmp/"
    mv "$dir.tmp" "$dir"
  fi
  candidates+=("$dir")
done
table="results/caltech101_${name%-selected}_selection"
# shellcheck disable=SC2086  # EVAL is a list of options
python scripts/paper_results.py "$(IFS=,; echo "${candidates[*]}")" --out "$table" $EVAL \
    ${DEVICE:+--device "$DEVICE"} >/dev/null
selected=$(python -c "import json,sys; print(json.load(open(sys.argv[1]))[0]['run'])" "$table.json")
model="results/models/$name"
if [[ ! -d $model ]]; then
  mkdir -p "$model.tmp"
  cp "$selected"/{irbm-run.json,config.json,history.json,model.safetensors} "$model.tmp/"
  mv "$model.tmp" "$model"
  python scripts/record_selection.py "$table.json" "$model"
fi
echo "$name: $selected ($table.md)"
