"""Under the float32 floor: the Gibbs step's product v W^T in other forms, as a ratio to float32.

For each size (784 visible, batch 64) and visible density, the float32 product of a binary
batch with W^T is timed interleaved with the same product in bfloat16 and float16, with the
batch as a sparse CSR matrix (binary visibles are mostly zeros on MNIST), and, where torch has
it, a ``torch.compile``d version of the ordered models' z machinery beside the eager one.
A ratio below 1 would be a gain.

    python benchmarks/bench_precision.py [--sizes 100 500 1500] [--densities 0.13 0.5]
                                         [--threads 1] [--compile] [--quick]

Findings (2-core AMD EPYC, AVX2 and FMA only, no AVX-512/BF16/AMX; torch 2.13 CPU; 1 thread;
the background training jobs stopped with SIGSTOP while measuring):

    hidden  density  f32 ms  bf16   f16    CSR        z machinery / product: eager  compiled
    100     0.13     0.22    5.39   4.64   1.11                              0.90   1.42
    100     0.50     0.23    5.18   4.47   2.94
    500     0.13     0.94    5.44   4.53   1.46                              0.94   1.51
    500     0.50     1.01    5.70   4.89   3.48
    1500    0.13     3.17    5.59   4.83   1.15                              0.63   1.08
    1500    0.50     2.64    5.91   4.96   3.25

Reduced precision is 4.5-6x *slower* here: without native bf16/f16 instructions the products are
converted and emulated. The sparse product loses at both MNIST's density (binarized digits are
~13% on: 1.1-1.5x) and CalTech101's (silhouettes ~55%: 2.9-3.5x): a dense AVX2 kernel beats
index chasing at these sizes. An index-and-sum product (sum of the W columns of the active
visibles, tried by hand) was 33-35x slower. ``torch.compile`` of the z machinery (softplus,
cumulative sums, exp, the CDF comparison, masking and sigmoid fused by inductor) was 1.6-1.7x
slower than eager at 100-1500 hidden units and costs 4-18 s of compilation per shape,
which the iRBM's growing layer would pay again. None of these is adopted: irbm stays float32 on
the CPU. On hardware with native bf16 (AVX-512 BF16, AMX or a GPU) the picture differs; this
benchmark is how to check before adopting any of them, and an adoption would still need the
exact-maths tests and an NLL comparison.
"""

from __future__ import annotations

import argparse
import warnings

import torch
from _common import conditions, interleaved, median_ms, median_ratio, table, threads
from torch.nn import functional

N_VISIBLE, BATCH = 784, 64


def product_forms(n_hidden: int, density: float) -> dict:
    """The product v W^T (v: (BATCH, N_VISIBLE) binary, W: (n_hidden, N_VISIBLE)) in each form."""
    generator = torch.Generator().manual_seed(0)
    weights = torch.randn(n_hidden, N_VISIBLE, generator=generator) * 0.01
    visible = torch.rand(BATCH, N_VISIBLE, generator=generator).lt(density).float()
    forms = {"f32": lambda: torch.mm(visible, weights.t())}
    for name, dtype in (("bf16", torch.bfloat16), ("f16", torch.float16)):
        v, w = visible.to(dtype), weights.to(dtype)
        forms[name] = lambda v=v, w=w: torch.mm(v, w.t())
    with warnings.catch_warnings():  # "sparse CSR support is in beta"
        warnings.simplefilter("ignore")
        sparse = visible.to_sparse_csr()
    weights_t = weights.t().contiguous()
    forms["CSR"] = lambda: torch.sparse.mm(sparse, weights_t)
    return forms


def z_machinery(preactivation, penalties, z_uniform, hidden_uniform, positions):
    """(h (N, K), z (N, 1)) from W v + b (N, K): the ordered models' hidden draw, unfused."""
    columns = (functional.softplus(preactivation) - penalties).cumsum(1)
    shifted = (columns - columns.amax(1, keepdim=True)).clamp(min=-80).exp()
    cdf = shifted.cumsum(1)
    z = (cdf < z_uniform * cdf[:, -1:]).sum(1, keepdim=True) + 1
    beyond = torch.where(positions > z, torch.ones_like(hidden_uniform), hidden_uniform)
    return beyond < torch.sigmoid(preactivation), z


def compile_row(n_hidden: int, repeats: int) -> list:
    generator = torch.Generator().manual_seed(1)
    arguments = (torch.randn(BATCH, n_hidden, generator=generator),
                 torch.rand(n_hidden, generator=generator),
                 torch.rand(BATCH, 1, generator=generator),
                 torch.rand(BATCH, n_hidden, generator=generator),
                 torch.arange(1, n_hidden + 1))
    compiled = torch.compile(z_machinery, dynamic=False)
    product = product_forms(n_hidden, 0.5)["f32"]
    times = interleaved({"product": product, "eager": lambda: z_machinery(*arguments),
                         "compiled": lambda: compiled(*arguments)}, repeats, warmup=2)
    return [n_hidden, median_ratio(times["eager"], times["product"]),
            median_ratio(times["compiled"], times["product"])]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 500, 1500])
    parser.add_argument("--densities", type=float, nargs="+", default=[0.13, 0.5])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--compile", action="store_true",
                        help="also time torch.compile of the z machinery (slow to compile)")
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.densities, args.repeats = [20], [0.5], 2
    print(conditions(busy=False))
    rows = []
    with threads(args.threads):
        for n_hidden in args.sizes:
            for density in args.densities:
                times = interleaved(product_forms(n_hidden, density), args.repeats, warmup=2)
                ratios = [median_ratio(times[f], times["f32"]) for f in ("bf16", "f16", "CSR")]
                rows.append([n_hidden, density, median_ms(times["f32"])] + ratios)
        print(f"\n### v W^T in other forms / float32 (batch {BATCH}, {N_VISIBLE} visible, "
              f"{args.threads} thread(s))\n")
        print(table(["hidden", "density", "f32 ms", "bf16", "f16", "CSR"], rows))
        if args.compile:
            print("\n### z machinery / one float32 product, eager and torch.compile\n")
            print(table(["hidden", "eager", "compiled"],
                        [compile_row(n, args.repeats) for n in args.sizes]))


if __name__ == "__main__":
    main()
