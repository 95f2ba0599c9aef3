"""Why parallel tempering's ln Z fell short on trained CalTech101 models (session 18).

On the RBM-500 (`results/models/rbm500-adagrad-selected`) tempering with 64 temperatures, 32
ladders and 2,000 sweeps gave ln Z 2297.17-2297.22, while AIS at 64,000-256,000 temperatures
(a stochastic lower bound of ln Z) gave 2297.7-2298.2. This runs tempering along the same
route (linear path, data base) with more sweeps and with more temperatures, one setting at a
time, and writes what each gives, to tell a short burn-in (more sweeps help) from a ladder
too coarse for Bennett's acceptance ratio (more temperatures help) from chains that never
reach the model's modes (neither helps).

    python scripts/tempering_bias.py [--model results/models/rbm500-adagrad-selected] \
        [--settings 64x2000 64x8000 256x2000] [--out results/caltech101_tempering_bias]

Each setting is appended to OUT.json as it finishes (a rerun skips the settings it holds), and
OUT.md is rewritten from it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from irbm import runs
from irbm._io import atomic_write
from irbm._threads import hold_threads
from irbm.tempering import estimate_log_partition_tempering


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path,
                        default=Path("results/models/rbm500-adagrad-selected"))
    parser.add_argument("--settings", nargs="+", default=["64x2000", "64x8000", "256x2000"],
                        help="TEMPERATURESxSWEEPS, each run once")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--base", choices=["data", "model"], default="data",
                        help="the route's base (the path is linear)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("results/caltech101_tempering_bias"))
    args = parser.parse_args(argv)
    hold_threads(args.threads)
    settings = []
    for text in args.settings:
        temperatures, _, sweeps = text.partition("x")
        if not (temperatures.isdigit() and sweeps.isdigit()):
            parser.error(f"a setting is TEMPERATURESxSWEEPS, e.g. 64x2000, got {text!r}")
        settings.append((int(temperatures), int(sweeps)))
    model, source = runs.run_model(args.model, which="latest")
    dataset = runs.load_run_dataset(args.model)
    out_json = args.out.with_suffix(".json")
    done = json.loads(out_json.read_text()) if out_json.exists() else []
    if any(row["model_sha256"] != source.sha256 for row in done):
        raise SystemExit(f"{out_json} describes another model: move it away first")
    for temperatures, sweeps in settings:
        if any(row["n_temperatures"] == temperatures and row["n_sweeps"] == sweeps
               and row.get("base", "data") == args.base for row in done):
            continue
        result = estimate_log_partition_tempering(
            model, temperatures, sweeps, base=args.base, path="linear",
            data=torch.as_tensor(dataset.train), seed=args.seed, progress=False)
        done.append({"model": args.model.name, "model_sha256": source.sha256,
                     "seed": args.seed, "base": args.base, **result.summary()})
        with atomic_write(out_json, "w") as handle:
            handle.write(json.dumps(done, indent=2) + "\n")
        print(f"{args.base} base, {temperatures} temperatures, {sweeps} sweeps: ln Z "
              f"{result.log_z:.2f} "
              f"+/- {result.stderr:.2f}, {result.passages} passages, {result.seconds:.0f} s",
              flush=True)
    lines = ["| base | temperatures | sweeps | ln Z | stderr | passages | lowest swap rate | "
             "seconds |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {row.get('base', 'data')} | {row['n_temperatures']} | {row['n_sweeps']} | "
              f"{row['log_z']:.2f} | "
              f"{row['stderr']:.2f} | {row['passages']} | {row['min_swap_rate']:.2f} | "
              f"{row['seconds']:.0f} |" for row in done]
    with atomic_write(args.out.with_suffix(".md"), "w") as handle:
        handle.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
