"""`irbm demo`: the three models of the paper on the embedded digits, end to end.

Trains an RBM, an ordered RBM and an infinite RBM on scikit-learn's 8x8 digits (shipped inside
scikit-learn, binarized the authors' way), evaluates each with AIS, draws the figures and writes
the report. It calls the same functions as the `irbm` subcommands (`irbm.workflows`), so what
it produces is what a user would get by running them one by one.

On a CPU with two or more threads to use (``--threads``, by default the free cores) the models
run side by side, one thread each: the longest (the iRBM, listed last) in this process, the
others in worker processes (spawned: a script that calls `demo` needs the usual ``if __name__
== "__main__":`` guard), whose messages follow as one block per model. Each model is then what
``irbm train ... --threads 1`` would give; with one thread, or on a GPU, they run one after
the other.
"""

from __future__ import annotations

import logging
import multiprocessing
import pickle
import signal
import time
from pathlib import Path

import torch

from ._threads import hold_threads, using_threads
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


def _check_out(out_dir: Path) -> None:
    """Refuse, before any work, a directory holding anything but an earlier demo's output
    (such as a training run): the demo writes FAMILY/ and report/ into it."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out {out_dir} is a file, not a directory: give a new directory")
    ours = {family for family, _ in MODELS} | {"report"}
    others = sorted(p.name for p in out_dir.iterdir() if p.name not in ours) \
        if out_dir.is_dir() else []
    if others:
        raise ValueError(f"--out {out_dir} holds {', '.join(others[:3])}"
                         f"{' and more' if len(others) > 3 else ''}, which no demo wrote: the "
                         f"demo writes {', '.join(sorted(ours))} into it; choose a new or "
                         "empty --out (or an earlier demo's, which it resumes)")


def demo(out_dir: Path, *, quick: bool = False, device=None, echo=None) -> Path:
    """Train, evaluate and plot the three models into ``out_dir/FAMILY`` and write the report
    into ``out_dir/report``; return the report's Markdown file. Messages go to ``echo``
    (default: logging), all from the calling thread. Uses torch's thread count as the number
    of models run at once on a CPU (see the module's docstring), and leaves it as it was."""
    say = echo or logger.info
    out_dir = Path(out_dir)
    _check_out(out_dir)
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
    each; a worker's messages are said after this process's model, one block per model, in
    this thread. An error or Ctrl-C here stops the workers (their run directories stay
    resumable); a worker's error is raised after its messages."""
    threads = torch.get_num_threads()
    context = multiprocessing.get_context("spawn")  # a fork would copy torch's thread pools
    shares = [jobs[:-1][worker::processes - 1] for worker in range(processes - 1)]
    workers, done = [], False
    try:
        for share in shares:
            receiver, sender = context.Pipe(duplex=False)
            worker = context.Process(target=_worker, args=(share, sender), daemon=True)
            worker.start()
            sender.close()  # the worker's end: a worker that dies then reads as end of file
            workers.append((worker, receiver, len(share)))
        others = " and ".join(job[0] for job in jobs[:-1])
        say(f"\n{others} in {len(workers)} worker process{'es' if len(workers) > 1 else ''} "
            f"beside {jobs[-1][0]} here, one thread each; their messages follow {jobs[-1][0]}'s")
        with using_threads(1):  # held: the estimators inside keep it
            _run_model(*jobs[-1], say=say)
        for worker, receiver, n_models in workers:
            for _ in range(n_models):
                _say_block(worker, receiver, say)
        done = True
    finally:
        torch.set_num_threads(threads)
        for worker, receiver, _ in workers:
            if not done:  # stopped mid-model: its run directory resumes like any other
                worker.terminate()
            worker.join()
            receiver.close()


def _say_block(worker, receiver, say) -> None:
    """One model's messages from ``worker``; its error, raised."""
    try:
        lines, error = receiver.recv()
    except EOFError:
        worker.join()
        raise RuntimeError(f"the demo's worker process stopped (exit code {worker.exitcode}) "
                           "before its models were done") from None
    say("\n".join(lines))
    if error is not None:
        raise error


def _worker(jobs, sender) -> None:
    """A worker process: ``jobs`` one after the other on one thread, without progress bars,
    each model's (messages, error or None) sent when it is done. Ctrl-C is left to the main
    process, which stops the worker."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit)  # the main process's stop: exit as Python does
    hold_threads(1)
    for job in jobs:
        lines = []
        try:
            _run_model(*job, say=lines.append, progress=False)
        except Exception as error:  # noqa: BLE001 - sent to the main process, which raises it
            sender.send((lines, _picklable(error)))
            return
        sender.send((lines, None))


def _exit(signal_number, frame):
    """SIGTERM as an exception: files are closed and locks released (a bare SIGTERM leaves
    a semaphore for multiprocessing's resource tracker to warn about)."""
    raise SystemExit(128 + signal_number)


def _picklable(error: Exception) -> Exception:
    """``error`` if it survives the pipe to the main process, else a RuntimeError naming it."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001 - any failure to pickle: keep the message
        return RuntimeError(f"{type(error).__name__}: {error}")


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
