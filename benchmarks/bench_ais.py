"""Cost of one AIS temperature step against the two matrix products it cannot avoid.

One step needs W v (n_chains x n_visible x n_hidden) and h W (n_chains x n_hidden x n_visible);
everything else (the families' hidden sums, drawing h and z, the visible draw) is overhead,
which the ratio (median of per-repeat ratios, the two timed back to back) measures.

    python benchmarks/bench_ais.py [--quick] [--busy] [--threads 1 2] [--chains 1000 2000]
    python benchmarks/bench_ais.py --device cuda --threads 1 --chains 1000 10000

Findings (AIS step ratios, conditions): see bench_training.py's docstring.
"""

from __future__ import annotations

import argparse
import os

import torch
from _common import (
    conditions,
    interleaved,
    median_ms,
    median_ratio,
    start_busy_core,
    table,
    threads,
)

import irbm
from irbm.models import UniformSource

N_VISIBLE = 784
FAMILIES = ("rbm", "orbm", "irbm")
PAPER_CHAINS, PAPER_BETAS = 5_000, 100_000
MODES = ("eager", "fused")


def make_model(family: str, n_visible: int, n_hidden: int, generator: torch.Generator,
               device="cpu"):
    """A float32 model with trained-looking parameter scales, on ``device``."""
    model = irbm.build_model({"family": family, "n_visible": n_visible, "n_hidden": n_hidden})
    with torch.no_grad():
        for parameter, mean, std in zip(model.parameters(), (0.0, -1.0, -2.0), (0.1, 0.5, 1.0)):
            parameter.copy_(mean + std * torch.randn(parameter.shape, generator=generator))
    return model.to(device)


def products_runner(n_visible, n_hidden, n_chains, steps, generator, device="cpu"):
    """``steps`` times (n, D) x (D, K) then (n, K) x (K, D) on binary operands, as in a step."""
    weights = torch.randn(n_hidden, n_visible, generator=generator).to(device)
    visible = torch.rand(n_chains, n_visible, generator=generator).lt(0.5).float().to(device)
    hidden = torch.rand(n_chains, n_hidden, generator=generator).lt(0.5).float().to(device)
    out = (torch.empty(n_chains, n_hidden, device=device),
           torch.empty(n_chains, n_visible, device=device))

    def run():
        for _ in range(steps):
            torch.mm(visible, weights.t(), out=out[0])
            torch.mm(hidden, weights, out=out[1])
    return run


def steps_runner(model, n_chains, steps, base: str, kind=None, fused: bool = True):
    """``steps`` temperature steps of the family's annealing path ``kind`` (None: its default)
    on ``n_chains`` chains, with irbm.kernels' fused steps or (``fused=False``) eager ones."""
    bias = model.base_visible_bias() if base == "model" else \
        torch.full((model.n_visible,), -1.5, device=model.device)
    path = model.annealing_path(bias, kind=kind if kind in model.ais_paths else None)
    uniforms = UniformSource(0, model.device)
    previous = os.environ.get("IRBM_KERNELS")
    os.environ["IRBM_KERNELS"] = "on" if fused else "off"  # read when the path starts
    try:
        path.start(path.sample_base(n_chains, uniforms), uniforms)
    finally:
        if previous is None:
            del os.environ["IRBM_KERNELS"]
        else:
            os.environ["IRBM_KERNELS"] = previous
    schedule = torch.linspace(0.0, 1.0, steps + 1, dtype=torch.float64).tolist()

    def run():
        for t_from, t_to in zip(schedule[:-1], schedule[1:]):
            path.step(t_from, t_to)
    return run


@torch.no_grad()  # restores the caller's mode (tests/test_benchmarks.py calls main in-process)
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--chains", type=int, nargs="+", default=[1000])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 1500])
    parser.add_argument("--visible", type=int, default=N_VISIBLE)
    parser.add_argument("--steps", type=int, default=10, help="temperature steps per timing")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--base", choices=["model", "data"], default="data",
                        help='"data" also anneals the visible biases (the default base)')
    parser.add_argument("--path", default="linear",
                        help="annealing path (the kernels serve 'linear'; a family without it "
                             "takes its default)")
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    parser.add_argument("--busy", action="store_true", help="keep one core busy meanwhile")
    parser.add_argument("--device", default="cpu",
                        help="torch device (on cuda the fused mode runs the Triton kernels, "
                             "the eager one PyTorch)")
    args = parser.parse_args(argv)
    if args.quick:
        args.chains, args.sizes, args.visible, args.threads = [50], [10], 20, [1]
        args.steps, args.repeats = 3, 1
    if args.busy:
        start_busy_core()
    print(conditions(args.busy, args.device))
    generator = torch.Generator().manual_seed(1234)
    rows = []
    for n_hidden in args.sizes:
        for n_chains in args.chains:
            for n in args.threads:
                with threads(n):
                    functions = {"bare": products_runner(args.visible, n_hidden, n_chains,
                                                         args.steps, generator, args.device)}
                    models = {f: make_model(f, args.visible, n_hidden, generator, args.device)
                              for f in FAMILIES}
                    functions.update({
                        f"{f} {mode}": steps_runner(models[f], n_chains, args.steps, args.base,
                                                    args.path, mode == "fused")
                        for f in FAMILIES for mode in MODES})
                    times = interleaved(functions, args.repeats, device=args.device)
                rows.append([n_hidden, n_chains, n, median_ms(times["bare"]) / args.steps]
                            + [median_ratio(times[f"{f} {mode}"], times["bare"])
                               for f in FAMILIES for mode in MODES])
    print(f"\n### AIS temperature step / its two matrix products ({args.visible} visible, "
          f"base {args.base}, path {args.path}; eager: IRBM_KERNELS=off)\n")
    print(table(["hidden", "chains", "threads", "products ms/step"]
                + [f"{f} {mode}" for f in FAMILIES for mode in MODES], rows))
    print(f"\n### The paper's AIS budget ({PAPER_CHAINS:,} chains x {PAPER_BETAS:,} temperatures) "
          "at these step costs, hours on this machine (chains scale linearly)\n")
    print(table(["hidden", "threads"] + [f"{f} {mode} hours" for f in FAMILIES
                                         for mode in MODES],
                [[row[0], row[2]] + [paper_budget_hours(row[3] * ratio, row[1])
                                     for ratio in row[4:]] for row in rows]))


def paper_budget_hours(ms_per_step: float, n_chains: int) -> float:
    """Hours of the paper's budget from one step's cost on ``n_chains`` chains."""
    return ms_per_step * (PAPER_CHAINS / n_chains) * PAPER_BETAS / 3.6e6


if __name__ == "__main__":
    main()
