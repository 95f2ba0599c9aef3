#!/usr/bin/env bash
# The paper's best settings (Tables 1-2) as settings files (scripts/paper/*.toml, the keys of
# `irbm train`), trained, evaluated and reported. Every run resumes where it stopped when the
# script is run again.
#
#   bash scripts/reproduce_paper.sh caltech            # the paper's full protocol (days on a CPU)
#   EPOCHS=1000 bash scripts/reproduce_paper.sh caltech  # a budget: every run capped at 1,000 epochs
#   RBM_OPTIMIZER=sgd bash scripts/reproduce_paper.sh caltech  # RBM rows with a constant rate
#   REGULARIZATION=authors bash scripts/reproduce_paper.sh caltech  # L1/L2 as the authors' code
#   PROFILE=authors bash scripts/reproduce_paper.sh mnist  # every training rule the authors' code's
#   DEVICE=cuda THREADS=4 OUT=runs bash scripts/reproduce_paper.sh mnist
#
# The runs train under irbm's own rules unless PROFILE=authors (`irbm train --help`, --profile:
# growth, new units, pruning, ADAGRAD's epsilon, shuffling, the short last minibatch), with the
# paper's hyper-parameters in scripts/paper/*.toml.
set -euo pipefail
DEVICE="${DEVICE:-cpu}"
OUT="${OUT:-runs}"
THREADS="${THREADS:-1}"
RBM_OPTIMIZER="${RBM_OPTIMIZER:-adagrad}"  # the paper names ADAGRAD only for its oRBMs and iRBMs
REGULARIZATION="${REGULARIZATION:-}"  # "proximal" or "authors"; unset: the profile's
PROFILE="${PROFILE:-irbm}"  # or "authors": the authors' code's training rules
which="${1:-all}"
cd "$(dirname "$0")/.."

named_regularization() {  # a regularization other than the profile's names the runs
  [[ -n $REGULARIZATION && ! ( $REGULARIZATION == proximal && $PROFILE == irbm ) ]]
}

run_name() {  # settings file -> run directory name
  local name family
  name=$(basename "$1" .toml)
  family=${name#*-}; family=${family%%[0-9]*}
  [[ $family == rbm ]] && name="$name-$RBM_OPTIMIZER"
  named_regularization && name="$name-$REGULARIZATION"
  [[ $PROFILE == irbm ]] || name="$name-$PROFILE-rules"
  echo "$OUT/$name"
}

train() {  # settings file
  local config=$1 name family extra=()
  name=$(basename "$config" .toml)
  family=${name#*-}; family=${family%%[0-9]*}
  [[ $family == rbm ]] && extra+=(--optimizer "$RBM_OPTIMIZER")
  [[ -n "${EPOCHS:-}" ]] && extra+=(--epochs "$EPOCHS")
  [[ -z $REGULARIZATION ]] || extra+=(--regularization "$REGULARIZATION")
  extra+=(--profile "$PROFILE")
  irbm train "$family" "$2" --out "$(run_name "$config")" --config "$config" \
      --device "$DEVICE" --threads "$THREADS" "${extra[@]}"
  irbm evaluate "$(run_name "$config")" --chains 5000 --betas 100000 --raise 2000 \
      --device "$DEVICE" --threads "$THREADS"
  irbm plot "$(run_name "$config")" --device "$DEVICE"
}

for dataset in caltech mnist; do
  if [[ "$which" == "$dataset" || "$which" == all ]]; then
    runs=()
    for config in scripts/paper/"$dataset"-*.toml; do
      train "$config" "${dataset/caltech/caltech101}"
      runs+=("$(run_name "$config")")
    done
    suffix="-$RBM_OPTIMIZER"; named_regularization && suffix+="-$REGULARIZATION"
    [[ $PROFILE == irbm ]] || suffix+="-$PROFILE-rules"
    irbm report "${runs[@]}" --out "$OUT/$dataset-report$suffix"
  fi
done
