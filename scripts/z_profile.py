"""Where in z an oRBM or iRBM keeps its mass: ln Z(z) = ln sum_v exp(-F(v, z)) on a grid of z.

    python scripts/z_profile.py results/models/NAME --z 100,200,300,400 --out results/NAME_z \
        [--chains 300] [--betas 3000] [--rows 100] [--seed 11] [--threads 1]

With z fixed the model is an RBM of its first z units (`model.given_z`), so ln Z(z) is an RBM's
ln Z plus a constant, and Z = sum_z Z(z). For each z the table gives AIS's ln Z(z) (a stochastic
lower bound, data base) with its effective sample size, RAISE's estimate on random test rows
(-F(v, z) - ln p-hat(v | z) averaged: a bound for RAISE's annealing model only), and the data's
mean z under P(z | v). A model whose ln Z(z) peaks far from the data's z holds mass that chains
started at the data do not reach: RAISE then errs low, and the bracket's conservative side with it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from irbm import checkpoint, runs
from irbm._threads import hold_threads
from irbm.ais import estimate_log_partition
from irbm.evaluate import free_energies, raise_nll


def profile(model, dataset, grid, *, chains, betas, rows, seed) -> list[dict]:
    train = torch.as_tensor(dataset.train)
    test = torch.as_tensor(dataset.test)
    subset = test[torch.randperm(len(test), generator=torch.Generator().manual_seed(seed))[:rows]]
    records = []
    for z in grid:
        started = time.perf_counter()
        rbm, log_factor = model.given_z(z)
        ais = estimate_log_partition(rbm, chains, betas, base="data", data=train, seed=seed,
                                     progress=False)
        reverse = raise_nll(rbm, subset, n_betas=betas, base="data", base_data=train,
                            seed=seed + 1, progress=False)
        implied = -(reverse.log_likelihoods.double() + free_energies(rbm, subset).double())
        records.append({"z": z, "ais_log_z": ais.log_z + log_factor,
                        "effective_sample_size": ais.effective_sample_size,
                        "raise_log_z": float(implied.mean()) + log_factor,
                        "raise_stderr": float(implied.std() / len(implied) ** 0.5),
                        "seconds": time.perf_counter() - started})
        print(json.dumps(records[-1]), flush=True)
    return records


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="a run directory with model.safetensors")
    parser.add_argument("--z", required=True, help="comma-separated values of z")
    parser.add_argument("--out", type=Path, required=True, help="output path without suffix")
    parser.add_argument("--chains", type=int, default=300)
    parser.add_argument("--betas", type=int, default=3000)
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    hold_threads(args.threads)
    model = checkpoint.load(args.model)
    if not getattr(model, "has_z", False):
        raise SystemExit(f"{args.model} holds a {model.display_name}, which has no z")
    grid = [int(value) for value in args.z.split(",")]
    dataset = runs.load_run_dataset(args.model, args.data_dir)
    with torch.no_grad():
        data_z = model.log_p_z_given_v(torch.as_tensor(dataset.test, dtype=model.dtype)).exp()
        positions = torch.arange(1, data_z.shape[1] + 1, dtype=data_z.dtype)
        mean_z = float((data_z * positions).sum(1).mean())
    records = profile(model, dataset, grid, chains=args.chains, betas=args.betas,
                      rows=args.rows, seed=args.seed)
    payload = {"model": str(args.model), "n_hidden": model.n_hidden, "test_mean_z": mean_z,
               "chains": args.chains, "betas": args.betas, "rows": args.rows,
               "seed": args.seed, "profile": records}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(payload, indent=1) + "\n")
    lines = [f"ln Z(z) of `{args.model}` ({model.n_hidden} units; the test rows' mean z under "
             f"P(z | v) is {mean_z:.0f}). AIS: {args.chains} chains x {args.betas} "
             f"temperatures, data base; RAISE: {args.rows} random test rows, same schedule.",
             "", "| z | AIS ln Z(z) | ESS | RAISE ln Z(z) +/- se | seconds |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['z']} | {r['ais_log_z']:.2f} | {r['effective_sample_size']:.1f} | "
              f"{r['raise_log_z']:.2f} +/- {r['raise_stderr']:.2f} | {r['seconds']:.0f} |"
              for r in records]
    lines += ["", f"Command: `python scripts/z_profile.py {args.model} --z {args.z} --out "
              f"{args.out} --chains {args.chains} --betas {args.betas} --rows {args.rows} "
              f"--seed {args.seed}`"]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out.with_suffix('.md')} and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
