"""Dask worker preload of the sweep's local cluster (`irbm.sweep`): run in each worker process
as it starts.

Ctrl-C in a terminal reaches every process of its group. It is the sweep's process to handle,
by closing the cluster (each trial resumes from its checkpoint); a worker interrupted mid-trial
would print a traceback and Dask's warnings over the sweep's one-line message.
"""

from __future__ import annotations

import signal
import threading


def dask_setup(worker) -> None:
    """Ignore SIGINT in this worker process (signal handlers belong to its main thread)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
