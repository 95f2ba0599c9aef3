"""`irbm demo`: the three models of the paper on the embedded digits, end to end.

Trains an RBM, an ordered RBM and an infinite RBM on scikit-learn's 8x8 digits (shipped inside
scikit-learn, binarized the authors' way), evaluates each with AIS, draws the figures and writes
the report. It calls the same functions as the `irbm` subcommands (`irbm.workflows`), so what
it produces is what a user would get by running them one by one.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from .settings import Settings
from .workflows import evaluate_run, plot_run, report_runs, train_run

logger = logging.getLogger(__name__)

DATASET = "digits"
# (family, settings) and budgets: chosen to finish in under 45 s on an idle 2-core machine
# (measured: 18-26 s on a 2-core AMD EPYC in sessions 24-26, 40 s when first written; 200 epochs
# and 400 x 6,000 AIS took 126 s for NLLs ~0.7 nat better).
MODELS = (
    ("rbm", {"n_hidden": 100, "lr": 0.05}),
    ("orbm", {"n_hidden": 100, "lr": 0.05}),
    ("irbm", {"lr": 0.05, "l1": 1e-3}),
)
EPOCHS, QUICK_EPOCHS = 60, 5
CHAINS, BETAS = 200, 2000
QUICK_CHAINS, QUICK_BETAS = 50, 300


def demo(out_dir: Path, *, quick: bool = False, device=None, echo=None) -> Path:
    """Train, evaluate and plot the three models into ``out_dir/FAMILY`` and write the report
    into ``out_dir/report``; return the report's Markdown file. Messages go to ``echo``
    (default: logging)."""
    say = echo or logger.info
    out_dir = Path(out_dir)
    epochs = QUICK_EPOCHS if quick else EPOCHS
    chains, betas = (QUICK_CHAINS, QUICK_BETAS) if quick else (CHAINS, BETAS)
    start = time.perf_counter()
    say("The models are trained without --eval-every (no model selection), so each one "
        "evaluated is the latest.")
    run_dirs = []
    for family, options in MODELS:
        run_dir = out_dir / family
        run_dirs.append(run_dir)
        say(f"\n== {family}: training {epochs} epochs on {DATASET} -> {run_dir}")
        settings = Settings(family=family, dataset=DATASET, epochs=epochs, **options)
        train_run(settings, run_dir, device=device, echo=say, epoch_lines=False)
        say(f"== {family}: AIS with {chains} chains and {betas} temperatures")
        # Without --eval-every there is no best model: evaluate the latest, and say so once.
        evaluate_run(run_dir, n_chains=chains, n_betas=betas, which="latest", device=device,
                     echo=say)
        plot_run(run_dir, device=device, echo=say)
    markdown, html = report_runs(run_dirs, out_dir / "report")
    say(markdown.read_text())
    say(f"demo finished in {time.perf_counter() - start:.0f}s; open {html}")
    return markdown
