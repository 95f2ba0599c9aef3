"""`irbm demo`: the three models of the paper on the embedded digits, end to end.

Trains an RBM, an ordered RBM and an infinite RBM on scikit-learn's 8x8 digits (shipped inside
scikit-learn, binarized the authors' way), evaluates each with AIS, draws the figures and writes
the report. It calls the same functions as the `irbm` subcommands (`irbm.workflows`), so what
it produces is what a user would get by running them one by one.

On a CPU with two or more threads to use (``--threads``, by default the free cores) the models
run side by side, one thread each: the longest (the iRBM, listed last) in this process, the
others in worker processes, whose messages come as one block per model when it is done. Each
model is then what ``irbm train ... --threads 1`` would give; with one thread, or on a GPU,
they run one after the other.
"""

from __future__ import annotations

import logging
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from .settings import Settings
from .workflows import evaluate_run, plot_run, report_runs, train_run

logger = logging.getLogger(__name__)

DATASET = "digits"
# (family, settings) and budgets: chosen to finish in about 30 s on an idle 2-core machine
# (measured in session 29 on a 2-core AMD EPYC, AVX2 only: 30-31 s side by side, 46-60 s one
# after the other; 200 epochs and 400 x 6,000 AIS took 126 s for NLLs ~0.7 nat better, when
# the demo ran one model at a time). The last one takes longest (the iRBM grows to about 500
# units): side by side, it is the one this process runs.
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
    (default: logging). Uses torch's thread count as the number of models run at once on a
    CPU (see the module's docstring)."""
    say = echo or logger.info
    out_dir = Path(out_dir)
    budget = (QUICK_EPOCHS, QUICK_CHAINS, QUICK_BETAS) if quick else (EPOCHS, CHAINS, BETAS)
    start = time.perf_counter()
    say("The models are trained without --eval-every (no model selection), so each one "
        "evaluated is the latest.")
    jobs = [(family, options, out_dir / family, budget, device) for family, options in MODELS]
    side_by_side = min(len(jobs), torch.get_num_threads())
    if side_by_side > 1 and torch.device(device or "cpu").type == "cpu":
        _run_side_by_side(jobs, side_by_side, say)
    else:
        for job in jobs:
            _run_model(*job, say=say)
    markdown, html = report_runs([job[2] for job in jobs], out_dir / "report")
    say(markdown.read_text())
    say(f"demo finished in {time.perf_counter() - start:.0f}s; open {html}")
    return markdown


def _run_side_by_side(jobs, processes: int, say) -> None:
    """The last job here and the others on ``processes - 1`` worker processes, one torch thread
    each; a worker's messages are said as one block when its model is done."""
    torch.set_num_threads(1)
    context = multiprocessing.get_context("spawn")  # a fork would copy torch's thread pools
    with ProcessPoolExecutor(processes - 1, mp_context=context) as pool:
        futures = [pool.submit(_run_model_quietly, *job) for job in jobs[:-1]]
        for future in futures:
            future.add_done_callback(lambda done: _say_result(done, say))
        _run_model(*jobs[-1], say=say)
        for future in futures:
            future.result()  # a worker's error is raised here, after this process's model


def _say_result(future, say) -> None:
    """A worker's messages, as soon as it is done (its error is raised by the caller)."""
    if not future.cancelled() and future.exception() is None:
        say(future.result())


def _run_model_quietly(family, options, run_dir, budget, device) -> str:
    """`_run_model` in a worker process, one thread, no progress bars; returns its messages."""
    torch.set_num_threads(1)
    lines = []
    _run_model(family, options, run_dir, budget, device, say=lines.append, progress=False)
    return "\n".join(lines)


def _run_model(family, options, run_dir, budget, device, *, say, progress=True) -> None:
    """Train ``family`` with ``options`` on the digits into ``run_dir``, evaluate its latest
    model by AIS and draw its figures; ``budget`` is (epochs, chains, temperatures)."""
    epochs, chains, betas = budget
    say(f"\n== {family}: training {epochs} epochs on {DATASET} -> {run_dir}")
    settings = Settings(family=family, dataset=DATASET, epochs=epochs, **options)
    train_run(settings, run_dir, device=device, echo=say, epoch_lines=False)
    say(f"== {family}: AIS with {chains} chains and {betas} temperatures")
    # Without --eval-every there is no best model: evaluate the latest, and say so once.
    evaluate_run(run_dir, n_chains=chains, n_betas=betas, which="latest", device=device,
                 progress=progress, echo=say)
    plot_run(run_dir, device=device, echo=say)
