#!/usr/bin/env bash
# Issue 27's comparison of the iRBM's training rules on CalTech101 at the paper's settings
# (lr 0.05, L1 1e-3, beta 1.01), two seeds each, 1,000 epochs, snapshots every 50; then the
# test NLL of every snapshot (scripts/trajectory_figure.py: the figure, and the table of
# whether each run's size and NLL settle). The seed-1234 runs of the first three rules are
# scripts/caltech101_brackets.sh's. RUNS: where the runs live (default runs/). Every step
# resumes where it stopped.
set -euo pipefail
RUNS="${RUNS:-runs}"
cd "$(dirname "$0")/.."
# --max-seconds also stops a command's first level, saved (exit status 3): go on until done.
until_done() { local status=3; while ((status == 3)); do status=0; "$@" || status=$?; done
  return "$status"; }
common=(--n-hidden 1 --beta 1.01 --lr 0.05 --l1 0.001 --batch-size 64 --cd-k 10 --threads 1)
# The runs before session 22 were trained when irbm's default new unit was "update" (its default
# since then is "peers"): they name it, so that each line trains what it trained then.
former=(--new-unit update)
train() {  # the authors' profile sets its own new unit
  local rule=("${former[@]}"); [[ " ${*:2} " == *" --profile authors "* ]] && rule=()
  EVERY=50 EPOCHS=1000 bash scripts/train_snapshots.sh "$RUNS/$1" irbm caltech101 \
      "${rule[@]}" "${@:2}" "${common[@]}"
}
train seed2/irbm-default --seed 2
train seed2/irbm-authors --profile authors --seed 2
train seed2/irbm-growth-data --growth data --seed 2
# One of the authors' differences alone: ADAGRAD's epsilon inside the root.
train rules/irbm-eps-inside-s1234 --epsilon-placement inside --seed 1234
# Another alone: pruning at most one trailing zero unit per update (session 14).
train rules/irbm-prune-one-s1234 --pruning one --seed 1234
# Two more alone: the authors' growth rule (on the chains' z, whenever z falls in the last
# bucket) and their new unit (one ADAGRAD + L1 step on the chains' gradient).
train rules/irbm-growth-chains-s1234 --growth chains --growth-trigger last --seed 1234
train rules/irbm-new-unit-chains-s1234 --new-unit chains --seed 1234
# A rule of irbm's own (session 15): grow while the minibatch's expected number of data rows
# with z past l is at least one, no sampled z.
train rules/irbm-expected-s1234 --growth expected --seed 1234
train rules/irbm-expected-s2 --growth expected --seed 2
# Where in an epoch the NLL moves (session 15): the expected-growth run of seed 1234 again to
# epoch 499, then its epoch 500 update by update (its epoch-500 snapshot had spiked).
irbm train irbm caltech101 "${former[@]}" --growth expected --seed 1234 "${common[@]}" --epochs 499 --quiet \
    --out "$RUNS/rules/irbm-expected-s1234-e499"
python scripts/epoch_updates.py "$RUNS/rules/irbm-expected-s1234-e499" \
    --updates 0,16,32,48,56,60,62,63,64 --alternatives 2 --out results/caltech101_irbm_last_batch
# The remainder rows merged into the epoch's last full minibatch, no 4-row one (session 15).
train rules/irbm-merge-s1234 --last-batch merge --seed 1234
train rules/irbm-merge-s2 --last-batch merge --seed 2
# Its seed 2 at epoch 1,000 had the lowest point estimate of any 1,000-epoch iRBM: bracketed once.
[[ -d results/models/irbm-merge-s2-e1000 ]] || cp -r "$RUNS/rules/irbm-merge-s2/snapshots/1000" \
    results/models/irbm-merge-s2-e1000
[[ -f results/models/irbm-merge-s2-e1000/evaluation.json ]] ||
  irbm evaluate results/models/irbm-merge-s2-e1000 --latest --bracket --chains 500 --raise 300 \
      --raise-repeats 1 \
      --tolerance 1 --seed 0 --max-seconds 1200 --threads 1
# Biases free of L1 (--regularization weights): it never shrinks, stopped at 300 epochs.
EVERY=50 EPOCHS=300 bash scripts/train_snapshots.sh "$RUNS/rules/irbm-weights-s1234" irbm \
    caltech101 "${former[@]}" --regularization weights --seed 1234 "${common[@]}"
python scripts/trajectory_figure.py \
    "irbm default/seed 1234=$RUNS/irbm-l1e-3" "irbm default/seed 2=$RUNS/seed2/irbm-default" \
    "authors profile/seed 1234=$RUNS/irbm-authors" "authors profile/seed 2=$RUNS/seed2/irbm-authors" \
    "growth on the data's z/seed 1234=$RUNS/irbm-growth-data" \
    "growth on the data's z/seed 2=$RUNS/seed2/irbm-growth-data" \
    "epsilon inside the root/seed 1234=$RUNS/rules/irbm-eps-inside-s1234" \
    "one-unit pruning/seed 1234=$RUNS/rules/irbm-prune-one-s1234" \
    "growth on the chains' z/seed 1234=$RUNS/rules/irbm-growth-chains-s1234" \
    "new unit from the chains/seed 1234=$RUNS/rules/irbm-new-unit-chains-s1234" \
    "L1 on the weights only/seed 1234=$RUNS/rules/irbm-weights-s1234" \
    "expected growth/seed 1234=$RUNS/rules/irbm-expected-s1234" \
    "expected growth/seed 2=$RUNS/rules/irbm-expected-s2" \
    "last minibatch merged/seed 1234=$RUNS/rules/irbm-merge-s1234" \
    "last minibatch merged/seed 2=$RUNS/rules/irbm-merge-s2" \
    --until 1000 --out results/caltech101_irbm_trajectory
# The merged-minibatch run of seed 2 on to the paper's 4,000 epochs (session 16; snapshots every
# 250 from 1,000), its size and NLL over that span, and a bracket at 4,000.
EVERY=250 EPOCHS=4000 bash scripts/train_snapshots.sh "$RUNS/rules/irbm-merge-s2" irbm \
    caltech101 "${former[@]}" --last-batch merge --seed 2 "${common[@]}"
[[ -d results/models/irbm-merge-s2-e4000 ]] || cp -r "$RUNS/rules/irbm-merge-s2/snapshots/4000" \
    results/models/irbm-merge-s2-e4000
[[ -f results/models/irbm-merge-s2-e4000/evaluation.json ]] ||
  irbm evaluate results/models/irbm-merge-s2-e4000 --latest --bracket --chains 500 --raise 300 \
      --raise-repeats 1 \
      --tolerance 1 --seed 0 --max-seconds 2400 --threads 1
# then continued to 16,000 temperatures (--max-seconds 1500) and, in session 27, to 32,000:
# irbm evaluate results/models/irbm-merge-s2-e4000 --latest --bracket --continue \
#     --max-seconds 3600 --threads 1
# A running average of the parameters (--average 320, about 5 epochs of updates; session 16):
# (a) from the start, seed 1234, whose merged run spiked at epoch 500 (training never uses the
# average, so its raw models are rules/irbm-merge-s1234's); (b) from epoch 4,000 of seed 2 on
# for 250 epochs, snapshots every 25, both models evaluated at each.
EVERY=50 EPOCHS=1000 bash scripts/train_snapshots.sh "$RUNS/avg/merge-s1234-avg320" irbm \
    caltech101 "${former[@]}" --last-batch merge --seed 1234 --average 320 "${common[@]}"
if [[ ! -d $RUNS/avg/merge-s2-avg320 ]]; then
  mkdir -p "$RUNS/avg/merge-s2-avg320/snapshots"
  for f in checkpoint.safetensors config.json history.json irbm-run.json model.safetensors; do
    cp "$RUNS/rules/irbm-merge-s2/$f" "$RUNS/avg/merge-s2-avg320/"
  done
fi
EVERY=25 EPOCHS=4250 bash scripts/train_snapshots.sh "$RUNS/avg/merge-s2-avg320" irbm \
    caltech101 "${former[@]}" --last-batch merge --seed 2 --average 320 --force "${common[@]}"
# Both models of its last snapshot (4,250), bracketed as the 4,000-epoch one was.
for model in irbm-merge-s2-e4250 irbm-merge-s2-e4250-average; do
  source="$RUNS/avg/merge-s2-avg320/snapshots/4250"
  [[ $model == *-average ]] && source="$source/average"
  if [[ ! -d results/models/$model ]]; then
    mkdir -p "results/models/$model"
    cp "$source"/{irbm-run.json,config.json,model.safetensors} "results/models/$model/"
    # The training record (epochs, time): the raw run's, which the average shares.
    cp "$RUNS/avg/merge-s2-avg320/snapshots/4250/history.json" "results/models/$model/"
  fi
  [[ -f results/models/$model/evaluation.json ]] ||
    irbm evaluate "results/models/$model" --latest --bracket --chains 500 --raise 300 \
      --raise-repeats 1 \
        --tolerance 1 --seed 0 --max-seconds 2400 --threads 1
done
# Session 26 (no GPU): the raw model's bracket doubled once more on one CPU thread (3,130 s).
until_done irbm evaluate results/models/irbm-merge-s2-e4250 --latest --bracket --continue \
    --max-seconds 3300 --threads 1
python scripts/trajectory_figure.py \
    "last minibatch merged/seed 1234=$RUNS/rules/irbm-merge-s1234" \
    "merged, average of 320 updates/seed 1234=$RUNS/avg/merge-s1234-avg320@average" \
    --until 1000 --out results/caltech101_irbm_average_s1234
python scripts/trajectory_figure.py \
    "last minibatch merged/seed 2=$RUNS/avg/merge-s2-avg320" \
    "merged, average of 320 updates/seed 2=$RUNS/avg/merge-s2-avg320@average" \
    --every 25 --since 4000 --out results/caltech101_irbm_average_e4000
python scripts/trajectory_figure.py "last minibatch merged/seed 2=$RUNS/rules/irbm-merge-s2" \
    --every 250 --out results/caltech101_irbm_merge_s2_e4000
# The best rule so far (merged last minibatch, a running average over 320 updates) to the
# paper's 4,000 epochs with seed 1234 (session 17; its first 1,000 epochs are the run above),
# then the paper's model selection among the averaged models of epochs 1,000-4,000 (validation
# NLL, AIS point estimates as for the authors' profile), the selected one bracketed.
EVERY=50 EPOCHS=4000 bash scripts/train_snapshots.sh "$RUNS/avg/merge-s1234-avg320" irbm \
    caltech101 "${former[@]}" --last-batch merge --seed 1234 --average 320 "${common[@]}"
candidates=()
for epoch in 1000 2000 3000 4000; do
  # The averaged model's directory with the run's training record (which it shares).
  dir="$RUNS/avg/merge-s1234-avg320-average/$epoch"
  if [[ ! -d $dir ]]; then
    mkdir -p "$dir.tmp"
    cp "$RUNS/avg/merge-s1234-avg320/snapshots/$epoch/average"/* "$dir.tmp/"
    cp "$RUNS/avg/merge-s1234-avg320/snapshots/$epoch/history.json" "$dir.tmp/"
    mv "$dir.tmp" "$dir"
  fi
  candidates+=("$dir")
done
python scripts/paper_results.py "$(IFS=,; echo "${candidates[*]}")" \
    --out results/caltech101_irbm_average_selection --chains 300 --betas 5000 --raise-rows 0 \
    --threads 1
selected=$(python -c "import json,sys; print(json.load(open(sys.argv[1]))[0]['run'])" \
    results/caltech101_irbm_average_selection.json)
if [[ ! -d results/models/irbm-average-s1234-selected ]]; then
  mkdir -p results/models/irbm-average-s1234-selected.tmp
  cp "$selected"/{irbm-run.json,config.json,history.json,model.safetensors} \
      results/models/irbm-average-s1234-selected.tmp/
  mv results/models/irbm-average-s1234-selected.tmp results/models/irbm-average-s1234-selected
  python scripts/record_selection.py results/caltech101_irbm_average_selection.json \
      results/models/irbm-average-s1234-selected
fi
[[ -f results/models/irbm-average-s1234-selected/evaluation.json ]] ||
  irbm evaluate results/models/irbm-average-s1234-selected --latest --bracket --chains 500 \
      --raise 300 --raise-repeats 1 --tolerance 1 --seed 0 --max-seconds 1200 --betas 4000 --ais-path linear \
      --threads 2
# Session 21: two more rules, two seeds each, to 1,000 epochs (snapshots every 50), each judged
# by the same AIS point estimates in a table and figure of its own. (a) Expected growth without
# shrinking (`--pruning none`, the paper's model with shrinking off): its size can only rise,
# does it stop? (b) irbm's default with a grown unit's ADAGRAD accumulators at its peers' mean
# (`--new-unit peers`): a new unit's first step no longer lr per element.
train rules/irbm-expected-noprune-s1234 --growth expected --pruning none --seed 1234
train rules/irbm-expected-noprune-s2 --growth expected --pruning none --seed 2
train rules/irbm-peers-s1234 --new-unit peers --seed 1234
train rules/irbm-peers-s2 --new-unit peers --seed 2
python scripts/trajectory_figure.py \
    "expected growth, no pruning/seed 1234=$RUNS/rules/irbm-expected-noprune-s1234" \
    "expected growth, no pruning/seed 2=$RUNS/rules/irbm-expected-noprune-s2" \
    "new unit at its peers' rate/seed 1234=$RUNS/rules/irbm-peers-s1234" \
    "new unit at its peers' rate/seed 2=$RUNS/rules/irbm-peers-s2" \
    --until 1000 --out results/caltech101_irbm_rules_s21
# Session 21, started at its end and carried on by the next sessions (checkpoints committed in
# results/checkpoints/): the peers rule with the merged last minibatch and the running average,
# the rule behind the certified 123.0-123.1, towards the paper's 4,000 epochs, two seeds.
EVERY=50 EPOCHS=4000 bash scripts/train_snapshots.sh "$RUNS/rules/irbm-peers-merge-avg-s1234" irbm \
    caltech101 --new-unit peers --last-batch merge --average 320 --seed 1234 "${common[@]}"
EVERY=50 EPOCHS=4000 bash scripts/train_snapshots.sh "$RUNS/rules/irbm-peers-merge-avg-s2" irbm \
    caltech101 --new-unit peers --last-batch merge --average 320 --seed 2 "${common[@]}"
# Session 22: both seeds to 4,000 epochs, then the paper's selection among the running averages
# of epochs 1,000-4,000 (validation NLL, AIS point estimates, one CPU thread each), the selected
# model of each seed bracketed on one GPU (scripts/gpu_brackets.sh, merged back by hand), and
# the trajectories of both seeds (raw and averaged) every 200 epochs, and every 50 over 500-1,000.
for seed in 2 1234; do
  AVERAGE=1 bash scripts/select_snapshots.sh "$RUNS/rules/irbm-peers-merge-avg-s$seed" \
      "irbm-peers-average-s$seed-selected"
done
# OUT=... BUDGET=320 bash scripts/gpu_brackets.sh \
#   "results/models/irbm-peers-average-s2-selected --latest --bracket --chains 2000 --raise 500 --raise-repeats 4 --tolerance 1 --seed 21 --betas 16000 --base data --ais-path linear" \
#   "results/models/irbm-peers-average-s1234-selected --latest --bracket --chains 2000 --raise 500 --raise-repeats 4 --tolerance 1 --seed 21 --betas 16000 --base data --ais-path linear"
# OUT=... BUDGET=185 bash scripts/gpu_brackets.sh \
#   "results/models/irbm-peers-average-s1234-selected --latest --bracket --continue"
# Session 23: a third seed of the same rule (seed 1), snapshots every 200 epochs; started on a
# CPU without a GPU, its checkpoint carried in results/checkpoints/ until it reaches 4,000 (the
# selection then as above, and a GPU bracket as for the other two).
EVERY=200 EPOCHS=4000 bash scripts/train_snapshots.sh "$RUNS/rules/irbm-peers-merge-avg-s1" irbm \
    caltech101 --new-unit peers --last-batch merge --average 320 --seed 1 "${common[@]}"
AVERAGE=1 bash scripts/select_snapshots.sh "$RUNS/rules/irbm-peers-merge-avg-s1" \
    "irbm-peers-average-s1-selected"
# Session 24: seed 1 reached 4,000 epochs and was selected as above; no GPU was lent, so its
# bracket ran on one CPU thread (fewer chains and rows than the GPU brackets of the other two):
# irbm evaluate results/models/irbm-peers-average-s1-selected --latest --bracket --chains 1000 \
#     --raise 500 --raise-repeats 2 --tolerance 1 --seed 21 --max-seconds 3000 --betas 2000 \
#     --base data --ais-path linear --threads 1
# irbm evaluate results/models/irbm-peers-average-s1-selected --latest --bracket --continue \
#     --max-seconds 2700 --threads 1
# Session 25 (no GPU again): one more doubling, to 64,000 temperatures (5,034 s, nice 10):
# irbm evaluate results/models/irbm-peers-average-s1-selected --latest --bracket --continue \
#     --max-seconds 5200 --threads 1
# and the independent cross-check (21 minutes: 3,000 sweeps, then BDMC at 64,000 temperatures):
# irbm evaluate results/models/irbm-peers-average-s1-selected --tempering 3000 --threads 1
# and the same on the other two seeds' GPU brackets (20-21 minutes each, side by side):
# irbm evaluate results/models/irbm-peers-average-s1234-selected --tempering 3000 --threads 1
# irbm evaluate results/models/irbm-peers-average-s2-selected --tempering 3000 --threads 1
# Session 27 (no GPU): seed 2's bracket, whose conservative side still fell 0.24 at 64,000,
# doubled to 128,000 temperatures on one CPU thread (about 7.5 hours, so across sessions: the
# same command, rerun, resumes the level from the chain batches saved in
# results/models/irbm-peers-average-s2-selected/bracket_partial/, committed at each stop):
# nice -n 10 irbm evaluate results/models/irbm-peers-average-s2-selected --latest --bracket \
#     --continue --max-seconds 30000 --threads 1
# and seed 1's (1,000 AIS chains, RAISE 500 rows x 2: half the chains, about 4.4 hours), in
# results/models/irbm-peers-average-s1-selected/bracket_partial/:
# nice -n 10 irbm evaluate results/models/irbm-peers-average-s1-selected --latest --bracket \
#     --continue --max-seconds 20000 --threads 1
# Session 28 (an H200 lent): both levels' CPU batches deleted (a level is refused on another
# device) and the three rows continued on the GPU, seeds 2 and 1 side by side, then seed 1234:
# OUT=... BUDGET=370 bash scripts/gpu_brackets.sh \
#   "results/models/irbm-peers-average-s2-selected --latest --bracket --continue" \
#   "results/models/irbm-peers-average-s1-selected --latest --bracket --continue"
# OUT=... BUDGET=230 bash scripts/gpu_brackets.sh \
#   "results/models/irbm-peers-average-s1234-selected --latest --bracket --continue"
# then the cross-checks of the new levels on one CPU thread (seed 2: 33 minutes; seed 1: about
# 70, BDMC at 256,000 temperatures):
# irbm evaluate results/models/irbm-peers-average-s2-selected --tempering 3000 --ais-path linear --threads 1
# irbm evaluate results/models/irbm-peers-average-s1-selected --tempering 3000 --ais-path linear --threads 1
# and the raw 4,250-epoch model's next doubling (64,000), about 3.5 hours on one CPU thread,
# resumed across sessions from results/models/irbm-merge-s2-e4250/bracket_partial/:
# nice -n 10 irbm evaluate results/models/irbm-merge-s2-e4250 --latest --bracket --continue \
#     --max-seconds 9000 --threads 1
# Session 29 (no GPU): the same command resumed that level (routes 3 and 4; [128.20, 129.11]),
# then started the next (128,000; its first AIS batch is in bracket_partial/):
# nice -n 10 irbm evaluate results/models/irbm-merge-s2-e4250 --latest --bracket --continue \
#     --max-seconds 30000 --threads 1
# and seed 1234's cross-check of its 128,000-temperature level ran beside it (nice 5):
# irbm evaluate results/models/irbm-peers-average-s1234-selected --tempering 3000 --ais-path linear --threads 1
peers_runs=(
  "peers, merged, raw/seed 1234=$RUNS/rules/irbm-peers-merge-avg-s1234"
  "peers, merged, raw/seed 2=$RUNS/rules/irbm-peers-merge-avg-s2"
  "peers, merged, average of 320 updates/seed 1234=$RUNS/rules/irbm-peers-merge-avg-s1234@average"
  "peers, merged, average of 320 updates/seed 2=$RUNS/rules/irbm-peers-merge-avg-s2@average")
python scripts/trajectory_figure.py "${peers_runs[@]}" --every 200 \
    --out results/caltech101_irbm_peers_average_e4000
python scripts/trajectory_figure.py "${peers_runs[@]}" --every 50 --since 500 --until 1000 \
    --out results/caltech101_irbm_peers_average_e1000
