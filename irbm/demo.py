"""`irbm demo`: the three models of the paper on the embedded digits, end to end.

Trains an RBM, an ordered RBM and an infinite RBM on scikit-learn's 8x8 digits (shipped inside
scikit-learn, binarized the authors' way), evaluates each with AIS, draws the figures and writes
the report. It goes through the same code as the `irbm` subcommands, so what it prints is what a
user would get by running them one by one.
"""

from __future__ import annotations

import time
from pathlib import Path

from .cli import build_parser

DATASET = "digits"
# (family, extra options): settings chosen to finish in a few minutes on 2 CPU cores.
MODELS = (
    ("rbm", ["--n-hidden", "100", "--lr", "0.05"]),
    ("orbm", ["--n-hidden", "100", "--lr", "0.05"]),
    ("irbm", ["--lr", "0.05", "--l1", "1e-3"]),
)
EPOCHS, QUICK_EPOCHS = 200, 5
CHAINS, BETAS = 400, 6000
QUICK_CHAINS, QUICK_BETAS = 50, 300


def demo(out_dir: Path, *, quick: bool = False, device=None):
    """Train, evaluate, plot and report the three models into ``out_dir``."""
    from . import commands

    parser = build_parser()
    out_dir = Path(out_dir)
    device_options = ["--device", device] if device else []
    epochs = QUICK_EPOCHS if quick else EPOCHS
    chains, betas = (QUICK_CHAINS, QUICK_BETAS) if quick else (CHAINS, BETAS)
    start = time.perf_counter()
    run_dirs = []
    for family, options in MODELS:
        run_dir = out_dir / family
        run_dirs.append(run_dir)
        print(f"\n== {family}: training {epochs} epochs on {DATASET} -> {run_dir}")
        commands.run_train(parser.parse_args(
            ["train", family, DATASET, "--out", str(run_dir), "--epochs", str(epochs),
             "--quiet", *options, *device_options]))
        print(f"== {family}: AIS with {chains} chains and {betas} temperatures")
        commands.run_evaluate(parser.parse_args(
            ["evaluate", str(run_dir), "--chains", str(chains), "--betas", str(betas),
             *device_options]))
        commands.run_plot(parser.parse_args(["plot", str(run_dir), *device_options]))
    commands.run_report(parser.parse_args(["report", *map(str, run_dirs), "--out",
                                           str(out_dir)]))
    print((out_dir / "report.md").read_text())
    print(f"demo finished in {time.perf_counter() - start:.0f}s; open {out_dir / 'report.html'}")
