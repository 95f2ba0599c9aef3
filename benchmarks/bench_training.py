"""Training cost: one update against the bare matrix products of the same update.

For each size (784 visible, batch 64, float32) and thread count, one PCD-10 update of each
family is timed interleaved with the update's matrix products alone (2 per Gibbs step: v W^T and
h W; 2 for the gradient pass over the stacked positive and negative examples: X W^T and G^T X);
the ratio (median of per-repeat ratios) is the cost of everything else. Then CD-1 and PCD-1 of
the RBM beside scikit-learn's BernoulliRBM (PCD-1) in the same run; an iRBM with growth beside
an RBM of the same final size on CalTech101-sized data (4,100 x 784 random binary rows, a few
hundred updates); and the thread policy's default against the best thread count per size.

    python benchmarks/bench_training.py [--quick] [--busy] [--threads 1 2] [--repeats 7]

Findings (2-core machine, torch CPU; see the conditions printed with each table)
------------------------------------------------------------------------------
Filled in from measurements below (RESULTS).
"""

from __future__ import annotations

import argparse
import math

import numpy as np
import torch

import irbm
from irbm._threads import default_threads
from irbm.training import Trainer

from _common import (conditions, interleaved, median_ms, median_ratio, start_busy_core, table,
                     threads)

N_VISIBLE, BATCH, K = 784, 64, 10
FAMILIES = ("rbm", "orbm", "irbm")


def make_model(family: str, n_visible: int, n_hidden: int, grow: bool = False):
    """A model with small random weights (what training starts from); an iRBM capped at its
    size unless ``grow``."""
    generator = torch.Generator().manual_seed(1)
    if family == "irbm":
        model = irbm.InfiniteRBM(n_visible, n_hidden=n_hidden,
                                 max_hidden=None if grow else n_hidden)
        with torch.no_grad():
            model.W.normal_(0, 0.01, generator=generator)
        return model
    return irbm.build_model({"family": family, "n_visible": n_visible, "n_hidden": n_hidden})


def data(rows: int, n_visible: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(rows, n_visible, generator=torch.Generator().manual_seed(seed)).lt(0.2).float()


def update_runner(model, k: int, persistent: bool = True, batch: torch.Tensor | None = None):
    trainer = Trainer(model, cd_k=k, persistent=persistent, batch_size=BATCH, progress=False)
    batch = data(BATCH, model.n_visible) if batch is None else batch
    return lambda: trainer.update(batch)


def products_runner(n_visible: int, n_hidden: int, k: int, n_chains: int = BATCH):
    """The matrix products of one CD/PCD-k update, on operands of the right shapes."""
    generator = torch.Generator().manual_seed(2)
    weights = torch.randn(n_hidden, n_visible, generator=generator) * 0.01
    visible = data(n_chains, n_visible, 3)
    hidden = torch.rand(n_chains, n_hidden, generator=generator).lt(0.5).float()
    stacked = data(BATCH + n_chains, n_visible, 4)
    coefficients = torch.rand(BATCH + n_chains, n_hidden, generator=generator)

    def run():
        for _ in range(k):
            torch.mm(visible, weights.t())
            torch.mm(hidden, weights)
        torch.mm(stacked, weights.t())
        torch.mm(coefficients.t(), stacked)
    return run


def ratio_table(args):
    """PCD-k update / bare products per family, size and thread count."""
    rows, timings = [], {}
    for n_hidden in args.sizes:
        row = [n_hidden]
        for n in args.threads:
            with threads(n):
                functions = {"bare": products_runner(args.visible, n_hidden, K)}
                functions.update({f: update_runner(make_model(f, args.visible, n_hidden), K)
                                  for f in FAMILIES})
                times = interleaved(functions, args.repeats)
            timings[n_hidden, n] = times
            row += [median_ms(times["bare"])]
            row += [median_ratio(times[f], times["bare"]) for f in FAMILIES]
        rows.append(row)
    header = ["hidden"]
    for n in args.threads:
        header += [f"bare ms ({n}t)"] + [f"{f} ({n}t)" for f in FAMILIES]
    print(f"\n### PCD-{K} update / bare matrix products (batch {BATCH}, {args.visible} visible)\n")
    print(table(header, rows))
    return timings


def sklearn_table(args):
    """CD-1 and PCD-1 of irbm's RBM beside scikit-learn's BernoulliRBM (PCD-1)."""
    try:
        from sklearn.neural_network import BernoulliRBM
    except ImportError:
        print("\nscikit-learn not installed: its comparison is skipped")
        return
    rows = []
    for n_hidden in args.sizes:
        for n in args.threads:
            with threads(n):
                batch = data(BATCH, args.visible)
                sk = BernoulliRBM(n_components=n_hidden, batch_size=BATCH, random_state=0)
                sk_data = batch.numpy().astype(np.float32)
                sk.partial_fit(sk_data)
                times = interleaved({
                    "sklearn": lambda: sk.partial_fit(sk_data),
                    "cd1": update_runner(make_model("rbm", args.visible, n_hidden), 1, False),
                    "pcd1": update_runner(make_model("rbm", args.visible, n_hidden), 1, True),
                }, args.repeats)
            rows.append([n_hidden, n, median_ms(times["sklearn"]), median_ms(times["cd1"]),
                         median_ms(times["pcd1"]), median_ratio(times["pcd1"], times["sklearn"])])
    print("\n### CD-1 / PCD-1 (irbm RBM) beside scikit-learn BernoulliRBM.partial_fit (PCD-1)\n")
    print(table(["hidden", "threads", "sklearn ms", "irbm CD-1 ms", "irbm PCD-1 ms",
                 "PCD-1 / sklearn"], rows))


def growth_table(args):
    """iRBM updates with growth (uncapped, from ``size`` units) against an RBM of the final size,
    interleaved in chunks, on CalTech101-sized random data."""
    train = data(4100, args.visible, 5)
    rows = []
    for n_hidden in args.growth_sizes:
        with threads(args.threads[0]):
            infinite = Trainer(make_model("irbm", args.visible, n_hidden, grow=True), cd_k=K,
                               batch_size=BATCH, progress=False)
            fixed = Trainer(make_model("rbm", args.visible, n_hidden), cd_k=K, batch_size=BATCH,
                            progress=False)
            chunk, position = 10, 0
            spent = {"irbm": [], "rbm": []}

            def updates(trainer):
                def run():
                    for i in range(chunk):
                        first = ((position + i) * BATCH) % (train.shape[0] - BATCH)
                        trainer.update(train[first:first + BATCH])
                return run
            for _ in range(args.growth_updates // chunk):
                times = interleaved({"irbm": updates(infinite), "rbm": updates(fixed)}, 1, 0)
                position += chunk
                for name in spent:
                    spent[name] += times[name]
                # The RBM follows the iRBM's size so both run at the same current size.
                grown = infinite.model.n_hidden - fixed.model.n_hidden
                if grown > 0:
                    fixed = Trainer(make_model("rbm", args.visible, infinite.model.n_hidden),
                                    cd_k=K, batch_size=BATCH, progress=False)
        updates_done = len(spent["irbm"]) * chunk
        rows.append([f"{n_hidden} -> {infinite.model.n_hidden}", updates_done,
                     1e3 * sum(spent["irbm"]) / updates_done, 1e3 * sum(spent["rbm"]) / updates_done,
                     median_ratio(spent["irbm"], spent["rbm"])])
    print(f"\n### iRBM with growth vs RBM of the same current size (PCD-{K}, 4100 x "
          f"{args.visible} data, {args.threads[0]} thread(s))\n")
    print(table(["iRBM units", "updates", "iRBM ms/update", "RBM ms/update", "ratio"], rows))


def policy_table(args, timings):
    """The default thread count (irbm._threads) against the best measured one, per size."""
    rows = []
    for n_hidden in args.sizes:
        chosen = default_threads(BATCH * args.visible * n_hidden)
        for family in FAMILIES:
            ms = {n: median_ms(timings[n_hidden, n][family]) for n in args.threads}
            best = min(ms, key=ms.get)
            default_ms = ms.get(chosen, math.nan)
            rows.append([n_hidden, family, chosen, best, default_ms / ms[best] - 1.0])
    print("\n### Thread policy: default vs best (loss as a fraction of the best time)\n")
    print(table(["hidden", "family", "default", "best", "default loss"], rows))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 250, 500, 1000, 1500])
    parser.add_argument("--visible", type=int, default=N_VISIBLE)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--growth-sizes", type=int, nargs="+", default=[1, 100, 500])
    parser.add_argument("--growth-updates", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    parser.add_argument("--busy", action="store_true", help="keep one core busy meanwhile")
    parser.add_argument("--only", nargs="+", default=["ratios", "sklearn", "growth", "policy"])
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.visible, args.repeats, args.threads = [8], 20, 1, [1]
        args.growth_sizes, args.growth_updates = [4], 10
    if args.busy:
        start_busy_core()
    print(conditions(args.busy))
    torch.set_grad_enabled(False)
    timings = ratio_table(args) if {"ratios", "policy"} & set(args.only) else None
    if "sklearn" in args.only:
        sklearn_table(args)
    if "growth" in args.only:
        growth_table(args)
    if "policy" in args.only:
        policy_table(args, timings)


if __name__ == "__main__":
    main()
