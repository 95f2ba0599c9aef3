#!/usr/bin/env bash
# The checks a CUDA machine gets when one is at hand (issue 28), each log written to OUT:
#   1. tests/test_devices.py on the GPU (energies, exact ln Z, the conditionals' distributions,
#      whole training runs draw for draw against the CPU's kernels, checkpoints across devices,
#      AIS and RAISE against exact answers at full size);
#   2. the training and AIS benchmarks with --device cuda (ratio tables);
#   3. one MNIST epoch of each family at the paper's settings, on the GPU, timed;
#   4. the whole test suite (CPU tests, on the machine's own CPU), last because it is longest.
#
#   OUT=/tmp/cuda IRBM_DATA_DIR=... [STEPS="tests mnist"] bash scripts/cuda_checks.sh [SECONDS_FOR_THE_SUITE]
# STEPS picks among: tests bench mnist suite (default: all four, in that order).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:?set OUT to a folder for the logs}"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  lscpu | grep -E '^Model name|^CPU\(s\)'
  python3 -c "import torch, numba, numpy; print('torch', torch.__version__, 'cuda', \
torch.version.cuda, 'numba', numba.__version__, 'numpy', numpy.__version__)"
} 2>&1 | tee "$OUT/machine.txt"

steps=" ${STEPS:-tests bench mnist suite} "
if [[ $steps == *" tests "* ]]; then
python3 -m pytest -q -n 0 -p no:cacheprovider tests/test_devices.py 2>&1 | tee "$OUT/test_devices.log"
fi

if [[ $steps == *" bench "* ]]; then
python3 benchmarks/bench_training.py --device cuda --threads 1 --streams torch philox \
  --only ratios growth --sizes 100 500 1000 1500 --growth-sizes 1 500 --repeats 7 \
  2>&1 | tee "$OUT/bench_training_cuda.md"
python3 benchmarks/bench_ais.py --device cuda --threads 1 --chains 1000 10000 \
  --sizes 500 1500 --repeats 5 2>&1 | tee "$OUT/bench_ais_cuda.md"
fi

# Two epochs of each family on MNIST's 50,000 training rows (batch 64, PCD-10, ADAGRAD), with
# torch's generator (the eager step) and the Philox stream (the Triton kernels); the first
# epoch pays Triton's compiles (cached on disk after), the second does not. A fresh run each
# time: a finished one would only be resumed.
if [[ $steps == *" mnist "* ]]; then
for stream in torch philox; do for family in rbm orbm irbm; do
  hidden=$([[ $family == irbm ]] && echo 1 || echo 500)
  run="/tmp/cuda-epoch-$family-$stream"
  rm -rf "$run"
  python3 -m irbm.cli train "$family" mnist --n-hidden "$hidden" --epochs 2 --device cuda \
    --random-stream "$stream" --out "$run" --quiet 2>&1 | tail -1
  python3 -c "import json; h = json.load(open('$run/history.json'))['history']; \
print('$family, $stream stream: MNIST epochs on cuda,', ', '.join(f\"{e['seconds']:.1f} s \
({e['n_hidden']} units)\" for e in h))"
done; done 2>&1 | tee "$OUT/mnist_epochs.txt"
fi

[[ $steps == *" suite "* ]] || exit 0
# The console-script test needs the package installed (no dependencies fetched).
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || true
timeout "${1:-300}" python3 -m pytest -q -p no:cacheprovider 2>&1 | tail -40 \
  | tee "$OUT/suite.log"
