#!/usr/bin/env bash
# Brackets of committed models on one GPU, several at once (issue 26): each job is
# `irbm evaluate MODEL --bracket ... --device cuda`, appended to MODEL/evaluation.json; the
# evaluation.json files and logs (and the bracket_partial/ of a job stopped mid-level) are
# packed into OUT/brackets.tgz to be merged back. A level a CPU started (its bracket_partial/
# holds CPU batches) is refused on the GPU: delete that directory to run the level there.
#
#   OUT=/tmp/gpu IRBM_DATA_DIR=... [BUDGET=470] [GRACE=80] [DEVICE=cuda] bash scripts/gpu_brackets.sh \
#       "MODEL_DIR [evaluate options]" ["MODEL_DIR [evaluate options]" ...]
#
# One GPU serves the jobs in turn: each step of an annealing run is a handful of small kernels,
# launch-bound at a few thousand chains, so the jobs' launches interleave. Each job gets the
# time budget BUDGET (its last doubling predicted to fit) and is killed GRACE s (default 80)
# after it. The budget is checked before each chain batch, and on a GPU a batch is a whole
# run, so a kill loses the run in flight: make BUDGET + GRACE cover the longest run a job may
# start just before its budget.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:?set OUT to a folder for the results}"
BUDGET="${BUDGET:-470}"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT/logs"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  lscpu | grep -E '^Model name|^CPU\(s\)'
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'triton', triton.__version__)"
} 2>&1 | tee "$OUT/logs/machine.txt"

pids=()
for job in "$@"; do
  read -r -a words <<<"$job"
  model="${words[0]}"
  log="$OUT/logs/$(basename "$model").log"
  timeout $((BUDGET + ${GRACE:-80})) python3 -m irbm.cli evaluate "${words[@]}" --device "${DEVICE:-cuda}" \
    --max-seconds "$BUDGET" --threads 2 >"$log" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done

for job in "$@"; do
  read -r -a words <<<"$job"
  model="${words[0]}"
  mkdir -p "$OUT/evaluations/$(basename "$model")"
  cp "$model/evaluation.json" "$OUT/evaluations/$(basename "$model")/"
  # A job the timeout stopped mid-level keeps its finished chain batches: rerun to resume.
  [[ -d "$model/bracket_partial" ]] && cp -r "$model/bracket_partial" \
      "$OUT/evaluations/$(basename "$model")/"
  tail -c 3000 "$OUT/logs/$(basename "$model").log" | tr '\r' '\n' | tail -25
done
tar czf "$OUT/brackets.tgz" -C "$OUT" logs evaluations && rm -rf "$OUT/logs" "$OUT/evaluations"
