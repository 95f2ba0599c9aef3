"""How many CPU threads torch uses when the user does not say (``threads = None``)."""

from __future__ import annotations

import os

import torch


def default_threads(work: float | None = None) -> int:
    """The cores that look free: ``min(cpu_count, cpu_count - 1-minute load average)``, rounded,
    at least 1. ``work`` (multiply-adds of a typical product) is ignored by this policy.

    A placeholder policy. On a machine whose cores are busy with other processes, torch's default
    of one thread per core makes every small matrix product wait for a time slice of the busiest
    core, which was measured 10-100x slower than one thread.
    """
    cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # not available on this platform
        return cores
    return max(1, min(cores, round(cores - load)))


def apply_threads(threads: int | None = None) -> int:
    """Set torch's intra-op threads to ``threads`` (None: `default_threads`); return the count."""
    count = default_threads() if threads is None else int(threads)
    torch.set_num_threads(count)
    return count
