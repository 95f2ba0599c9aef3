"""RAISE's conservative NLL at fixed budgets: temperatures spaced by AIS's forward pilot against
RAISE's own reverse pilot (`irbm.evaluate.bracket_nll`'s "tuned-forward" and "tuned").

Equal thermodynamic length per step minimizes the summed variance of the steps' ln w increments
(Grosse, Maddison & Salakhutdinov 2013), measured by a pilot run. RAISE's chains start at data
rows and lag behind the temperature on the data's side, where AIS's forward chains lag on the
base's: a pilot of reverse chains sees the variance where RAISE spends it. Both schedules are
fixed before the estimate runs, on the same rows and seeds, so only the spacing differs.

    python benchmarks/bench_raise_schedule.py [--quick] [--run RUN ...] [--betas 2000 4000]
        [--rows 300] [--path linear] [--threads 1] [--pilot-betas 1000]

Findings (2-core AMD EPYC (Zen 4: AVX-512), one thread, two other processes on the machine,
session 17; CalTech101 test rows, 300 at random, data base, linear path; test NLL over the
whole test set by the free-energy control variate, standard errors 0.2-0.46):

| model | temperatures | AIS's schedule | RAISE's own | gain, nats |
|---|---|---|---|---|
| iRBM merged, averaged, epoch 4,250 (578 units) | 1,000 | 131.42 | 130.48 | 0.93 |
| | 2,000 | 129.26 | 127.98 | 1.27 |
| | 4,000 | 127.46 | 126.27 | 1.19 |
| | 8,000 | 126.30 (the bracket's RAISE, other chains) | 125.36 | 0.94 |
| iRBM merged, raw, epoch 4,250 | 2,000 | 132.78 | 132.11 | 0.67 |
| RBM-500, selected (2,000 epochs) | 2,000 | 126.79 | 125.66 | 1.13 |
| | 4,000 | 125.14 | 124.36 | 0.79 |

RAISE on its own schedule at N temperatures is about where it was at 2N on AIS's (126.27 at
4,000 against 126.30 at 8,000, the latter from the stored bracket's chains, so within a
standard error of 0.3; 127.98 at 2,000 against 127.46 at 4,000): roughly half the cost for the
conservative side, the side that kept the brackets of trained models open. Neither more pilot
rows (128) nor a second pilot on the first one's schedule moved it beyond the pilot's own
noise (about 0.3 nat between pilots of other rows).
"""

from __future__ import annotations

import argparse

import torch
from _common import conditions, table, threads
from bench_bracket import exact_models, trained_models

from irbm.ais import betas_of_equal_length, thermodynamic_length
from irbm.bracket import control_variate
from irbm.evaluate import REVERSE_PILOT_ROWS, free_energies, raise_nll


def schedules(model, base_rows, path, seed, pilot_betas=1000):
    """name -> (t, L(t)) of each pilot: AIS's forward one, RAISE's reverse one."""
    picked = base_rows[torch.randperm(base_rows.shape[0],
                                      generator=torch.Generator().manual_seed(seed + 2))]
    options = {"base": "data", "path": path, "data": base_rows, "seed": seed + 1,
               "pilot_betas": pilot_betas}
    return {"AIS's (tuned-forward)": thermodynamic_length(model, **options),
            "RAISE's own (tuned)": thermodynamic_length(
                model, reverse_from=picked[:REVERSE_PILOT_ROWS], **options)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    parser.add_argument("--exact", type=int, nargs="*", default=[2000],
                        help="hidden sizes of exact block-diagonal models")
    parser.add_argument("--families", nargs="*", default=["rbm", "irbm"])
    parser.add_argument("--run", nargs="*", default=[], help="trained run directories")
    parser.add_argument("--betas", type=int, nargs="*", default=[2000, 4000])
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--path", default="linear")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--pilot-betas", type=int, default=1000,
                        help="temperatures of each pilot")
    args = parser.parse_args()
    n_visible, block_size = 784, 16
    if args.quick:
        args.exact, n_visible, block_size, args.rows, args.betas = [12], 24, 6, 20, [30]
        args.pilot_betas = 30
    print(f"# RAISE schedules: {conditions(False)}; RAISE on {args.rows} rows, data base, "
          f"{args.path} path, {args.threads} thread(s)\n")
    rows = []
    with threads(args.threads):
        models = list(exact_models(args.exact, args.families, n_visible, block_size, 2 * args.rows))
        models += list(trained_models(args.run))
        for label, model, test, base, exact in models:
            order = torch.randperm(test.shape[0], generator=torch.Generator().manual_seed(0))
            subset = test[order[:args.rows]]
            free_all, free_rows = free_energies(model, test), free_energies(model, subset)
            pilots = schedules(model, base, args.path, seed=0, pilot_betas=args.pilot_betas)
            for count in args.betas:
                for name, pilot in pilots.items():
                    estimate = raise_nll(model, subset, betas=betas_of_equal_length(*pilot, count),
                                         seed=11, base="data", path=args.path, base_data=base,
                                         progress=False)
                    whole, stderr = control_variate(free_all, free_rows,
                                                    estimate.log_likelihoods)
                    rows.append([label, model.n_hidden, count, name, f"{whole:.2f}",
                                 f"{stderr:.2f}", f"{estimate.seconds:.1f}",
                                 "-" if exact is None else f"{exact:.2f}"])
    print(table(["model", "hidden", "temperatures", "RAISE schedule", "NLL", "stderr", "seconds",
                 "exact NLL"], rows))


if __name__ == "__main__":
    main()
