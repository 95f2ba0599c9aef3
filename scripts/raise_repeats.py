"""RAISE's test NLL with R reverse chains per row, for several R: how much of its gap is each
row's chain noise (`irbm.evaluate.raise_nll` with ``n_repeats``, `irbm.evaluate.repeat_gap`).

    python scripts/raise_repeats.py results/models/NAME --repeats 1 2 8 16 [--path pinned]
        [--temperatures 8000] [--rows 100] [--seed 5] [--base data] [--float64] [--threads 1]

Runs on the first ``--rows`` test rows, the same rows for every R, with a uniform schedule of
``--temperatures`` from the run's training set as base data; prints a markdown table of R, the
mean NLL and its standard error over the rows, the jackknife estimate of the gap left at R, and
the seconds. The tables in results/README.md ("Several reverse chains per RAISE row") came from
it, one thread of a 2-core AMD EPYC.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from irbm import runs
from irbm._threads import hold_threads
from irbm.evaluate import raise_nll


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="a run directory (its latest model)")
    parser.add_argument("--repeats", type=int, nargs="+", required=True,
                        help="reverse chains per row, one row of the table each")
    parser.add_argument("--path", default=None, help="annealing path (default: the family's)")
    parser.add_argument("--base", choices=["data", "model"], default="data")
    parser.add_argument("--temperatures", type=int, default=4000)
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--float64", action="store_true", help="run in float64")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    if min(args.repeats) < 1 or args.rows < 2 or args.temperatures < 2:
        parser.error("--repeats must be >= 1, --rows and --temperatures >= 2")
    hold_threads(args.threads)
    model = runs.load_run_model(args.model, which="latest")
    model.check_ais_path(args.path)
    dtype = torch.float64 if args.float64 else model.dtype
    model = model.to(dtype)
    dataset = runs.load_run_dataset(args.model, args.data_dir)
    rows = torch.as_tensor(dataset.test[:args.rows]).to(dtype)
    print(f"# {args.model.name}: RAISE on the first {len(rows)} test rows, "
          f"{args.temperatures} temperatures, path {args.path or model.ais_paths[0]}, "
          f"{args.base} base, seed {args.seed}, {dtype}, {args.threads} thread(s)\n")
    print("| chains per row R | NLL | stderr | gap left (jackknife) | seconds |")
    print("|---|---|---|---|---|")
    for repeats in args.repeats:
        started = time.perf_counter()
        estimate = raise_nll(model, rows, n_betas=args.temperatures, seed=args.seed,
                             base=args.base, path=args.path,
                             base_data=torch.as_tensor(dataset.train).to(dtype),
                             n_repeats=repeats,
                             chain_batch_size=len(rows) * repeats, progress=False)
        gap = "-" if estimate.repeat_gap is None else f"{estimate.repeat_gap:.2f}"
        print(f"| {repeats} | {estimate.mean:.2f} | {estimate.stderr:.2f} | {gap} | "
              f"{time.perf_counter() - started:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
