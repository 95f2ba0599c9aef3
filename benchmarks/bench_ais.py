"""Cost of one AIS temperature step against the two bare matrix products it cannot avoid.

One step needs W v (n_chains x n_visible x n_hidden) and h W (n_chains x n_hidden x n_visible);
everything else (free energies, sampling, bookkeeping) is overhead, which the ratio measures.

    python benchmarks/bench_ais.py [--threads 2] [--steps 200] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from irbm import InfiniteRBM, OrderedRBM, RBM
from irbm._ais_chains import run_chains

N_VISIBLE, N_HIDDEN = 784, 500


def seconds(function) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def make_model(family: str, generator: torch.Generator):
    """A float32 model of the paper's MNIST size with trained-looking parameter scales."""
    model = {"rbm": lambda: RBM(N_VISIBLE, N_HIDDEN),
             "orbm": lambda: OrderedRBM(N_VISIBLE, N_HIDDEN),
             "irbm": lambda: InfiniteRBM(N_VISIBLE, n_hidden=N_HIDDEN)}[family]()
    with torch.no_grad():
        model.W.copy_(0.1 * torch.randn(model.W.shape, generator=generator))
        model.b.copy_(-1.0 + 0.5 * torch.randn(model.b.shape, generator=generator))
        model.c.copy_(-2.0 + torch.randn(model.c.shape, generator=generator))
    return model


def products_runner(n_chains: int, steps: int, generator):
    """``steps`` times (n, D) x (D, K) then (n, K) x (K, D) on binary operands, as in a step."""
    weights = torch.randn(N_HIDDEN, N_VISIBLE, generator=generator)
    visible = (torch.rand(n_chains, N_VISIBLE, generator=generator) < 0.5).float()
    hidden = (torch.rand(n_chains, N_HIDDEN, generator=generator) < 0.5).float()
    weights_t = weights.t()
    products = torch.empty(n_chains, N_HIDDEN), torch.empty(n_chains, N_VISIBLE)

    def run():
        for _ in range(steps):
            torch.mm(visible, weights_t, out=products[0])
            torch.mm(hidden, weights, out=products[1])

    return run


def ais_runner(family: str, n_chains: int, steps: int, base: str, generator):
    """``steps`` AIS temperature steps on ``n_chains`` chains (sampling the base included)."""
    model = make_model(family, generator)
    betas = torch.linspace(0.0, 1.0, steps + 1, dtype=torch.float64)
    base_bias = model.c.detach().clone() if base == "model" else torch.full((N_VISIBLE,), -1.5)
    return lambda: run_chains(model, betas, base_bias, n_chains, 0)


def measure(n_chains, family, args, generator):
    """Median ms per step of both, and the median of the per-repeat ratios: the two are timed
    back to back in each repeat so that load from other processes hits both alike."""
    products = products_runner(n_chains, args.steps, generator)
    annealing = ais_runner(family, n_chains, args.steps, args.base, generator)
    products(), annealing()  # warm-up
    pairs = [(seconds(annealing), seconds(products)) for _ in range(args.repeats)]
    step_ms, product_ms = (1e3 * statistics.median(column) / args.steps for column in zip(*pairs))
    return step_ms, product_ms, statistics.median(step / product for step, product in pairs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200, help="temperature steps per timing")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--chains", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--base", choices=["model", "data"], default="model",
                        help='"data" also anneals the visible biases (a custom base)')
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(1234)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32, "
          f"D={N_VISIBLE}, K={N_HIDDEN}, base={args.base}, {args.steps} steps x {args.repeats}")
    print(f"{'family':<7}{'chains':>8}{'step ms':>10}{'matmuls ms':>12}{'ratio':>8}")
    with torch.no_grad():
        for n_chains in args.chains:
            for family in ("rbm", "orbm", "irbm"):
                step, products, ratio = measure(n_chains, family, args, generator)
                print(f"{family:<7}{n_chains:>8}{step:>10.3f}{products:>12.3f}{ratio:>8.2f}")


if __name__ == "__main__":
    main()
