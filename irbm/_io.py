"""Atomic file writes: everything irbm writes goes through `atomic_write`."""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path


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
