"""The budget each estimator needs to bracket the average NLL within a tolerance, side by side.

For each model, each annealing path on its own with evenly spaced and with pilot-tuned
temperatures, then all paths together (what `irbm evaluate --bracket` runs, there with
`--raise-repeats 4` by default; here one reverse chain per row unless `--raise-repeats`), via
`irbm.evaluate.bracket_nll`: temperatures doubled until the bracket is ``--tolerance`` wide and
converged, or ``--max-seconds`` per estimator. Models: block-diagonal ones whose ln Z is exact
(`irbm.models.block_diagonal`; their "data" are Gibbs samples of the model), and trained models
given as run directories (their test set, base rate from their training set).

    python benchmarks/bench_bracket.py [--quick] [--exact 500 2000] [--run RUN ...]
        [--chains 100] [--rows 300] [--raise-repeats 1] [--tolerance 1.0] [--max-seconds 1800]
        [--pilot-betas 1000]

Findings (2-core Intel Xeon with AVX-512 and AMX, one thread per process, two processes;
100 AIS chains per path, both bases, RAISE on 100 rows; block-diagonal 784 x 2,000 models with
weights of sd 2.5, exact NLL 78.24 for the RBM and 77.79 for the iRBM):

| model | estimator | temperatures | seconds | bracket | exact |
|---|---|---|---|---|---|
| RBM | linear, uniform | 1000 | 31 | [78.32, 78.31] | 78.24 |
| RBM | linear, tuned | 1000 | 34 | [78.17, 78.35] | 78.24 |
| iRBM | pinned, uniform | 1000 | 43 | [78.13, 78.05] | 77.79 |
| iRBM | pinned, tuned | 1000 | 39 | [77.74, 77.91] | 77.79 |
| iRBM | linear, uniform | 2000 | 85 | [77.80, 77.80] | 77.79 |
| iRBM | linear, tuned | 2000 | 87 | [77.72, 77.69] | 77.79 |
| iRBM | all paths, tuned (default) | 1000 | 78 | [77.74, 77.91] | 77.79 |

All certified at 1 nat, all within 0.35 nat of the exact NLL (sides that cross are at the truth
up to their noise: the pinned path's uniform-schedule sides are both 0.3 high). Such models are
easy to anneal; trained ones are not (results/caltech101_brackets.md: 700-1,300 s and not
certified at 1 nat on the CalTech101 models of 1,000 epochs).

Annealing along the training trajectory (Béreux et al. 2024; `bracket_nll(..., paths=
("trajectory",), trajectory=[...])`) measured on two trained CalTech101 iRBMs, 500 AIS chains,
RAISE on 300 rows, data base, tuned schedule, a third process on the machine (session 14):

| iRBM | snapshots | temperatures | seconds | bracket | other paths |
|---|---|---|---|---|---|
| default, 1,000 epochs | 19, every 50 epochs | 1000 | 116 | [116.2, 308.8] | [142.60, 144.88] |
| | | 2000 | 199 | [116.2, 328.4] | (8,000 temp.) |
| authors', 4,000 epochs | 19, every 200 epochs | 1000 | 152 | [113.1, 167.4] | [132.62, 135.16] |
| | | 2000 | 264 | [119.5, 170.4] | (1,000 temp.) |

(default: irbm's rules, 640 units; authors': `--profile authors`, 659 units.)

Far worse than the linear and pinned paths at equal temperatures: the AIS side stayed at or near
the certain floor (its ln Z 20-30 nats low) and RAISE 30-160 nats loose. Snapshots 50-200
epochs (3,000-13,000 updates) apart are themselves far apart: units grow, are pruned and regrow
at the same index, and the default run passes a degenerate snapshot (NLL 241 at epoch 950).
Even one snapshot (4,000 epochs, the snapshot at 3,800 at t = 0.5, 1,000 uniform temperatures,
200 chains, model base) lost to the linear path: ln Z 2047.45 against 2050.01, RAISE on 100
rows 142.4 against 135.8, because the segment to the snapshot, which is as hard as the linear
path, got half the temperatures. Béreux et al. anneal through many closely spaced snapshots;
the trajectory path suits a run saved that densely, not `train_snapshots.sh`'s 50-500 epochs.
"""

from __future__ import annotations

import argparse

import torch
from _common import conditions, table, threads

from irbm import runs
from irbm.evaluate import bracket_nll, free_energies
from irbm.models import block_diagonal


def exact_models(sizes, families, n_visible, block_size, n_rows):
    """(label, model, test rows, base rows, exact average NLL) per family and size."""
    for family in families:
        for n_hidden in sizes:
            options = {} if family == "rbm" else {"beta": 1.01}
            model, log_z = block_diagonal(family, n_visible, n_hidden, block_size=block_size,
                                          **options)
            generator = torch.Generator().manual_seed(0)
            rows = torch.rand(2 * n_rows, n_visible, generator=generator).lt(0.5).float()
            for _ in range(200):  # the blocks are small: the chains mix in a few steps
                rows, _ = model.gibbs_step(rows, generator)
            test, base = rows[:n_rows], rows[n_rows:]
            exact = float(free_energies(model, test).mean()) + log_z
            yield f"{family} block-diagonal", model, test, base, exact


def trained_models(run_dirs):
    for run_dir in run_dirs:
        dataset = runs.load_run_dataset(run_dir)
        model, source = runs.run_model(run_dir, which="latest")
        yield (f"{model.family} {run_dir} (epoch {source.epoch})", model,
               torch.as_tensor(dataset.test), torch.as_tensor(dataset.train), None)


def estimators(model):
    """(name, bracket_nll options): each path alone, uniform then tuned; then all paths."""
    for path in model.ais_paths:
        for schedule in ("uniform", "tuned"):
            yield f"{path}, {schedule}", {"paths": (path,), "schedule": schedule}
    if len(model.ais_paths) > 1:
        yield "all paths, tuned (default)", {"schedule": "tuned"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    parser.add_argument("--exact", type=int, nargs="*", default=[500, 2000],
                        help="hidden sizes of the exact block-diagonal models")
    parser.add_argument("--families", nargs="*", default=["rbm", "orbm", "irbm"])
    parser.add_argument("--run", nargs="*", default=[], help="trained run directories")
    parser.add_argument("--chains", type=int, default=100)
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--raise-repeats", type=int, default=1,
                        help="reverse chains per RAISE row (the findings above: 1)")
    parser.add_argument("--betas", type=int, default=500, help="first level's temperatures")
    parser.add_argument("--max-betas", type=int, default=1_000_000,
                        help="last level's temperatures at most")
    parser.add_argument("--pilot-betas", type=int, default=1000,
                        help="temperatures of each pilot of the tuned schedules")
    parser.add_argument("--tolerance", type=float, default=1.0)
    parser.add_argument("--max-seconds", type=float, default=1800.0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    n_visible, block_size = 784, 16
    if args.quick:
        # A smoke test: the ordered families share their paths, so the iRBM stands for both.
        args.exact, n_visible, block_size, args.rows = [12], 24, 6, 20
        args.families = [family for family in args.families if family != "orbm"]
        # Two levels, so that a doubling and its verdict run, whatever the machine's speed.
        args.chains, args.betas, args.max_betas, args.pilot_betas, args.run = 8, 20, 40, 20, []
    print(f"# bracket budgets: {conditions(False)}; {args.chains} AIS chains per path, RAISE on "
          f"{args.rows} rows x {args.raise_repeats} chains, tolerance {args.tolerance:g}, at most "
          f"{args.max_seconds:g} s each, "
          f"{args.threads} thread(s)\n")
    rows = []
    with threads(args.threads):
        models = list(exact_models(args.exact, args.families, n_visible, block_size, args.rows))
        models += list(trained_models(args.run))
        for label, model, test, base, exact in models:
            for name, options in estimators(model):
                bracket = bracket_nll(model, test, base_data=base, rows=min(args.rows, len(test)),
                                      tolerance=args.tolerance, max_seconds=args.max_seconds,
                                      max_betas=args.max_betas, pilot_betas=args.pilot_betas,
                                      seed=0, n_chains=args.chains, n_betas=args.betas,
                                      raise_repeats=args.raise_repeats, progress=False,
                                      **options)
                rows.append([label, model.n_hidden, name, bracket.n_betas, bracket.seconds,
                             bracket.optimistic, bracket.conservative, bracket.width,
                             "yes" if bracket.certified else "no",
                             "-" if exact is None else f"{exact:.2f}"])
    print(table(["model", "hidden", "estimator", "temperatures", "seconds", "optimistic",
                 "conservative", "width", "certified", "exact NLL"], rows))


if __name__ == "__main__":
    main()
