"""How many threads torch should use: never more than the cores that are free right now, and
one for problems too small to gain from more.

Oversubscription is the costly mistake on a shared machine: with another process keeping one of
two cores busy, a 64 x 100 model took 595 ms per update with two threads against 14 ms with one
(OpenMP threads spin-wait on each other at every barrier and one of them is always descheduled).
Using one thread too few costs at most the parallel speed-up, which is small at these sizes.
"""

from __future__ import annotations

import functools
import inspect
import logging
import numbers
import os
import time
from contextlib import contextmanager
from contextvars import ContextVar

import torch

logger = logging.getLogger(__name__)

# Multiply-adds of one matrix product (rows x n_visible x n_hidden) below which a second thread
# does not pay. Measured with benchmarks/bench_training.py (PCD-10, 784 visible, batch 64, 2-core
# machine with the background jobs stopped): at 250 hidden (12.5e6) one thread lost 7-13% to two,
# at 100 hidden (6.4e6) two threads gained nothing; see that benchmark's docstring.
SMALL_WORK = 10e6

_SAMPLE_SECONDS = 0.05

# Whether an enclosing call already chose the threads (`using_threads`, `hold_threads`): a call
# inside it with threads None keeps that choice instead of reading the free cores again, which
# its own enclosing computation may be keeping busy.
held_threads: ContextVar[bool] = ContextVar("irbm_threads_held", default=False)


def _allowed_cpus() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return set(range(os.cpu_count() or 1))


def _cpu_times(cpus: set[int]) -> tuple[float, float] | None:
    """(busy, total) jiffies summed over ``cpus`` from /proc/stat, or None where unreadable."""
    try:
        with open("/proc/stat") as stat:
            lines = stat.readlines()
    except OSError:
        return None
    busy = total = 0.0
    for line in lines:
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        values = [float(x) for x in fields[:8]]
        idle = values[3] + values[4]  # idle + iowait
        busy += sum(values) - idle
        total += sum(values)
    return busy, total


def free_cores(sample_seconds: float = _SAMPLE_SECONDS) -> int:
    """Cores this process may use that other processes are not using: the allowed CPUs (affinity)
    minus their busy fraction over ``sample_seconds`` (/proc/stat), or minus the 1-minute load
    average where /proc/stat is missing. At least 1."""
    cpus = _allowed_cpus()
    before = _cpu_times(cpus)
    if before is not None:
        time.sleep(sample_seconds)
        after = _cpu_times(cpus)
        elapsed = after[1] - before[1]
        if elapsed > 0:
            busy_cores = len(cpus) * (after[0] - before[0]) / elapsed
            # A core more than half busy counts as taken: sharing it is what hurts.
            return max(1, len(cpus) - int(busy_cores + 0.5))
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return len(cpus)
    return max(1, len(cpus) - int(load + 0.5))


_FREE_CORES_KEPT = 1.0  # seconds a reading of the free cores is reused (partial_fit per batch)
_last_reading = (-float("inf"), 1)


def default_threads(work: float | None = None) -> int:
    """Threads for a computation whose typical matrix product has ``work`` multiply-adds
    (rows x n_visible x n_hidden; None: unknown, assumed large): 1 below `SMALL_WORK`, else
    the number of free cores (`free_cores`, read at most once a second)."""
    global _last_reading
    if work is not None and work < SMALL_WORK:
        return 1
    if time.monotonic() - _last_reading[0] > _FREE_CORES_KEPT:
        _last_reading = (time.monotonic(), free_cores())
    return _last_reading[1]


def apply_threads(n: int | None, work: float | None = None) -> int:
    """``torch.set_num_threads(n)``, or the `default_threads` for ``work`` when ``n`` is None;
    returns the thread count set."""
    if n is None:
        n = default_threads(work)
    elif isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"threads must be a positive integer, got {n!r}")
    n = int(n)
    torch.set_num_threads(n)
    logger.info("using %d torch thread%s", n, "" if n == 1 else "s")
    return n


def hold_threads(n: int | None, work: float | None = None) -> int:
    """`apply_threads`; a given ``n`` is kept by every call with threads None inside the
    current context (the command line's ``--threads``: `irbm.cli.main` runs each command in a
    context of its own), while None lets each such call choose for its own product size;
    returns the thread count set."""
    chosen = apply_threads(n, work)
    if n is not None:
        held_threads.set(True)
    return chosen


@contextmanager
def using_threads(n: int | None = None, work: float | None = None):
    """torch's CPU threads at ``n`` (None: `default_threads` for ``work``, or the enclosing
    block's choice inside one) inside the block and torch's own setting restored after: how
    `irbm.Trainer.fit`, the estimators of ln Z and the scikit-learn estimators keep to the free
    cores (a second thread on a busy core made updates 6-60x slower) without changing their
    caller's setting."""
    before = torch.get_num_threads()
    if n is not None or not held_threads.get():
        apply_threads(n, work)
    token = held_threads.set(True)
    try:
        yield
    finally:
        held_threads.reset(token)
        torch.set_num_threads(before)


def chooses_threads(rows=None):
    """Decorate a function whose arguments include ``threads`` and ``model`` (or, with ``rows``
    None, only ``threads``) to run under `using_threads`.

    ``threads`` None picks them as `irbm.Trainer.fit` does for a product of ``rows(arguments)``
    rows (a function of the bound arguments, by name) by the model's n_visible x n_hidden: one
    thread for a small product, else the free cores. With ``rows`` None (a workflow whose model
    is not an argument), threads None leaves the choice to the estimators it calls. A model
    off the CPU runs as it is (torch's CPU threads do not drive it).
    """
    def decorate(function):
        signature = inspect.signature(function)

        @functools.wraps(function)
        def threaded(*args, **kwargs):
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:  # Python's own message, naming the function
                return function(*args, **kwargs)
            bound.apply_defaults()
            named = bound.arguments
            threads = named.get("threads")
            model = named.get("model")
            if threads is None and (rows is None or getattr(
                    getattr(model, "device", None), "type", "cpu") != "cpu"):
                return function(*args, **kwargs)
            try:
                count = rows(named) if rows is not None else None
                work = (count * model.n_visible * max(model.n_hidden, 1)
                        if isinstance(count, numbers.Real) and not isinstance(count, bool)
                        else None)
            except (TypeError, ValueError, AttributeError) as error:
                # A bad argument: the function's own check names it. (A KeyError, a ``rows``
                # naming no parameter, is this module's bug and is raised.)
                logger.debug("%s: work unknown (%s)", function.__qualname__, error)
                work = None
            with using_threads(threads, work):
                return function(*args, **kwargs)
        return threaded
    return decorate
