"""The fused sampling kernels alone: each one's time per element against torch's exp.

Each CPU kernel of `irbm.kernels` (one pass per row: Philox uniforms, the elementwise maths,
the draws) is timed on the block a PCD-10 update or an AIS step gives it, interleaved in one
run with ``torch.exp`` of the same block. The ratio (median of per-repeat ratios) says how many
exps' worth of time the kernel costs per element, a measure that other load and the machine's
clock cancel from; the header names the CPU, since vector extensions change it (AVX2 has no
vector int64 -> float conversion, AVX-512 has).

    python benchmarks/bench_kernels.py [--repeats 31] [--dtypes float32 float64] [--quick]

Findings (2-core AMD EPYC, AVX2 only, one thread, idle; kernel / exp, float32; "before" is
a15326b, two rounds each, alternated in one session):

    kernel                  before       after
    bernoulli 64 x 784      2.53-2.73    1.86-1.92
    annealed 1000 x 500     6.94-8.16    4.43-4.70
    ordered 64 x 500        7.61-8.31    5.81-6.59
    ordered 1000 x 500      7.31-7.90    5.64-6.13
    released 1000 x 500     9.32-10.59   7.22-8.09
    statistics 128 x 500    8.55-9.22    6.66-6.98

Before, `_exp32` built 2^k through int32 arithmetic, which numba widens to int64; AVX2 has no
vector int64 -> float32 conversion, so LLVM kept that part scalar: exp alone took 1.9 ns an
element, 0.8 after (k kept in float32; the results are bit-identical over every float32 in
[-120, 120]). The annealed step also shares e^-|x| between softplus(x) and the sigmoid, as the
ordered steps do (one exp fewer per unit). float64 calls libm's scalar exp and log1p, for
reference-grade accuracy, and costs 12-16 exps an element.
"""

from __future__ import annotations

import argparse

import torch
from _common import conditions, interleaved, median_ms, median_ratio, table, threads

from irbm import kernels
from irbm.kernels import PhiloxGenerator

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def calls(dtype: torch.dtype, scale: int = 1) -> dict:
    """name -> (kernel call, its block): the blocks of a PCD-10 update (batch 64) and of an
    AIS step (1,000 chains), at 500 hidden and 784 visible units (``scale`` divides them)."""
    generator = torch.Generator().manual_seed(0)
    stream = PhiloxGenerator(1)
    rows, chains, hidden, visible = 64 // scale, 1000 // scale, 500 // scale, 784 // scale

    def block(n, k, spread=3.0):
        return torch.randn(n, k, generator=generator, dtype=dtype) * spread

    penalties = torch.rand(hidden, generator=generator, dtype=dtype)
    tilt = torch.zeros(hidden + 1, dtype=dtype)
    visible_logits, training, annealing = block(rows, visible), block(rows, hidden), \
        block(chains, hidden)
    stacked, weights = torch.cat([training, training]), torch.ones(2 * rows, dtype=dtype)
    return {
        f"bernoulli {rows} x {visible}": (
            lambda: kernels.bernoulli_from_logits(visible_logits, stream), visible_logits),
        f"annealed {chains} x {hidden}": (
            lambda: kernels.annealed_bernoulli(annealing, 0.5, 0.51, stream), annealing),
        f"ordered {rows} x {hidden}": (
            lambda: kernels.ordered_hidden(training, penalties, -1.0, stream), training),
        f"ordered {chains} x {hidden}": (
            lambda: kernels.ordered_hidden(annealing, penalties, -1.0, stream, scale=0.5),
            annealing),
        f"released {chains} x {hidden}": (
            lambda: kernels.released_hidden(annealing, penalties, -1.0, tilt, tilt + 0.01,
                                            stream), annealing),
        f"statistics {2 * rows} x {hidden}": (
            lambda: kernels.ordered_statistics(stacked, penalties, -1.0, weights, stream),
            stacked),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=31)
    parser.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), default=["float32",
                                                                               "float64"])
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    args = parser.parse_args(argv)
    if not kernels.compiled_available():
        raise SystemExit("the compiled kernels are not available (numba missing, or "
                         "IRBM_KERNELS=off): nothing to time")
    repeats, scale = (3, 8) if args.quick else (args.repeats, 1)
    print(conditions(busy=False))
    rows = []
    with threads(1):
        kernels.warm_up()
        for name in args.dtypes:
            for label, (call, block) in calls(DTYPES[name], scale).items():
                times = interleaved({"kernel": call, "exp": lambda b=block: torch.exp(b)},
                                    repeats)
                nanoseconds = median_ms(times["kernel"]) * 1e6 / block.numel()
                rows.append([label, name, f"{nanoseconds:.2f}",
                             f"{median_ratio(times['kernel'], times['exp']):.2f}"])
    print("\n### Fused kernel / torch.exp of the same block (1 thread)\n")
    print(table(["kernel", "dtype", "ns/element", "kernel / exp"], rows))


if __name__ == "__main__":
    main()
