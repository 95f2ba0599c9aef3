"""Milliseconds per training update, and the ratio to the update's bare matrix products.

For each model (784 visible, 500 hidden, batch 64) one PCD-k update is timed, then the same
sequence of matrix products alone (2 per Gibbs step, 2 for the gradient pass over the stacked
positive and negative examples), measured in the same run with the same thread count. The
ratio is the overhead of everything else (sampling, sigmoids, the z distribution, the update).
scikit-learn's BernoulliRBM (PCD-1) is timed beside ours at PCD-1, with its own bare products
(its partial_fit does 4: two for the Gibbs step, two for the gradient).

    python benchmarks/bench_training.py [--threads 2] [--repeats 30]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

import irbm
from irbm.training import Trainer

N_VISIBLE, N_HIDDEN, BATCH = 784, 500, 64


def median_ms(function, repeats: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def bare_products(k: int, stacked_rows: int):
    weights = torch.randn(N_HIDDEN, N_VISIBLE) * 0.01
    visible = (torch.rand(BATCH, N_VISIBLE) < 0.5).float()
    hidden = (torch.rand(BATCH, N_HIDDEN) < 0.5).float()
    stacked = (torch.rand(stacked_rows, N_VISIBLE) < 0.5).float()
    coefficients = torch.rand(stacked_rows, N_HIDDEN)

    def run():
        for _ in range(k):
            torch.mm(visible, weights.t())
            torch.mm(hidden, weights)
        torch.mm(stacked, weights.t())
        torch.mm(coefficients.t(), stacked)
    return run


def our_update(family: str, k: int):
    data = (torch.rand(BATCH * 4, N_VISIBLE, generator=torch.Generator().manual_seed(0)) < 0.2)
    model = {"rbm": lambda: irbm.RBM(N_VISIBLE, N_HIDDEN),
             "orbm": lambda: irbm.OrderedRBM(N_VISIBLE, N_HIDDEN),
             "irbm": lambda: irbm.InfiniteRBM(N_VISIBLE, n_hidden=N_HIDDEN,
                                              max_hidden=N_HIDDEN)}[family]()
    if family == "irbm":
        with torch.no_grad():  # a trained-looking iRBM of 500 units (growth capped)
            model.W.normal_(0, 0.01, generator=torch.Generator().manual_seed(1))
    trainer = Trainer(model, cd_k=k, batch_size=BATCH, progress=False)
    trainer.chains = trainer._initial_chains()
    batch = data[:BATCH].float()
    return lambda: trainer.update(batch)


def sklearn_update():
    from sklearn.neural_network import BernoulliRBM
    data = (np.random.default_rng(0).random((BATCH, N_VISIBLE)) < 0.2).astype(np.float32)
    rbm = BernoulliRBM(n_components=N_HIDDEN, batch_size=BATCH, random_state=0)
    rbm.partial_fit(data)
    return lambda: rbm.partial_fit(data)


def sklearn_bare():
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((N_HIDDEN, N_VISIBLE)).astype(np.float32)
    visible = rng.random((BATCH, N_VISIBLE)).astype(np.float32)
    hidden = rng.random((BATCH, N_HIDDEN)).astype(np.float32)

    def run():
        visible @ weights.T
        hidden @ weights
        visible @ weights.T
        hidden.T @ visible
    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--k", type=int, default=10, help="Gibbs steps (PCD-k)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(args.threads)
    except ImportError:
        pass

    rows = []
    for k in (args.k, 1):
        bare = median_ms(bare_products(k, 2 * BATCH), args.repeats)
        for family in ("rbm", "orbm", "irbm"):
            ms = median_ms(our_update(family, k), args.repeats)
            rows.append((f"irbm {family}", f"PCD-{k}", ms, bare))
    try:
        rows.append(("sklearn BernoulliRBM", "PCD-1", median_ms(sklearn_update(), args.repeats),
                     median_ms(sklearn_bare(), args.repeats)))
    except ImportError:
        print("scikit-learn not installed: its row is skipped")

    print(f"{N_VISIBLE} visible, {N_HIDDEN} hidden, batch {BATCH}, float32, "
          f"{args.threads} threads")
    print(f"| {'model':22} | {'update':6} | {'ms/update':>9} | {'bare mm ms':>10} | {'ratio':>5} |")
    print(f"|{'-' * 24}|{'-' * 8}|{'-' * 11}|{'-' * 12}|{'-' * 7}|")
    for name, update, ms, bare in rows:
        print(f"| {name:22} | {update:6} | {ms:9.3f} | {bare:10.3f} | {ms / bare:5.2f} |")


if __name__ == "__main__":
    main()
