"""Atomic file writes (everything irbm writes goes through `atomic_write`) and the lock that
keeps a second process off a directory in use (`hold_lock`)."""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path

try:  # POSIX; elsewhere two processes must not share a directory (not enforced)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


@contextlib.contextmanager
def atomic_write(path, mode: str = "wb"):
    """Open a temporary file beside ``path``, yield it, then fsync and rename it onto ``path``.

    A crash or an exception leaves ``path`` as it was (old content or absent) and no temporary
    file behind. The temporary file is created with ``open`` rather than ``tempfile`` so the
    result gets the usual umask permissions, not 0600.
    """
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(temporary, mode.replace("w", "x")) as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()


def hold_lock(path, doing: str):
    """An open file holding an exclusive lock on ``path`` with this process's id in it,
    released when it is closed or the process dies; ValueError naming the process that holds
    it, ``doing`` what (e.g. "training this run"), when another does."""
    handle = open(path, "a+")
    if fcntl is None:  # pragma: no cover - Windows
        return handle
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise ValueError(f"{Path(path).parent} is in use by another process (pid {holder}, "
                         f"{doing}): wait for it, or stop it") from None
    handle.seek(0)
    if handle.read() != str(os.getpid()):  # as it is, the file is left untouched
        handle.truncate(0)
        handle.write(str(os.getpid()))
        handle.flush()
    os.set_inheritable(handle.fileno(), False)
    return handle
