"""Atomic file writes (everything irbm writes goes through `atomic_write`), the lock that
keeps a second process off a directory in use (`hold_lock`), and standard JSON for records
that hold non-finite numbers (`dumps_json`, `loads_json`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import socket
import time
import uuid
from glob import escape as glob_escape
from pathlib import Path

try:  # POSIX; elsewhere two processes must not share a directory (not enforced)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


@contextlib.contextmanager
def atomic_write(path, mode: str = "wb"):
    """Open a temporary file beside ``path``, yield it, then fsync and rename it onto ``path``.

    A crash or an exception leaves ``path`` as it was (old content or absent) and no temporary
    file behind; a process killed outright (SIGKILL) leaves its temporary file, which the next
    write of ``path`` removes (`_remove_orphans`). The temporary file is created with ``open``
    rather than ``tempfile`` so the result gets the usual umask permissions, not 0600.
    """
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:12]}.tmp")
    try:
        with open(temporary, mode.replace("w", "x")) as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()
    _remove_orphans(path)


# An unnamed writer's temporary file (written before names carried the process id) this old
# is no write in progress: a checkpoint takes seconds.
_ORPHAN_SECONDS = 3600
# What follows ".NAME." in a temporary file's name: "HOST-PID-" (none before) and 12 hex
# digits; HOST a digest of the machine's name, since process ids are one machine's (a run
# directory on a file system that Dask workers of several machines share).
_TEMPORARY = re.compile(r"(?:(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-)?[0-9a-f]{12}\.tmp")
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def _remove_orphans(path: Path):
    """Delete the temporary files of ``path`` that writers killed outright left (each the size
    of the file: a checkpoint of a large model is megabytes): those of this machine's
    processes no longer running, and others (another machine's, or unnamed) older than an
    hour."""
    for orphan in path.parent.glob(f".{glob_escape(path.name)}.*.tmp"):
        name = _TEMPORARY.fullmatch(orphan.name[len(path.name) + 2:])
        if name is None:  # another file's (a name that ends like ours), or not ours
            continue
        try:
            if name["host"] == _HOST:
                if int(name["pid"]) == os.getpid() or _running(int(name["pid"])):
                    continue
            elif time.time() - orphan.stat().st_mtime < _ORPHAN_SECONDS:
                continue  # another machine's, or unnamed: no process to ask, only its age
            orphan.unlink()
        except OSError:  # gone meanwhile, or not ours to delete: left as it is
            continue


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


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


def lock_holder(path) -> str | None:
    """The process id written in ``path`` when another process holds its `hold_lock`, else
    None (no such file, or nobody holds it); creates nothing."""
    path = Path(path)
    if fcntl is None or not path.is_file():
        return None
    try:
        with open(path) as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return handle.read().strip() or "unknown"
            fcntl.flock(handle, fcntl.LOCK_UN)
    except OSError:  # removed meanwhile: its holder finished
        return None
    return None


# Non-finite numbers (a bracket with no conservative side, a floor of -inf) as the strings of
# the tokens Python's json writes bare: bare, they are not JSON (JavaScript's JSON.parse throws,
# jq turns -Infinity into -1.797e308 without a word). `read_json` turns them back into floats,
# as it reads the bare tokens of files written before.
_NON_FINITE = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}


def _finite_or_named(value):
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: _finite_or_named(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_named(item) for item in value]
    return value


def _numbers_back(value):
    if isinstance(value, str):
        return _NON_FINITE.get(value, value)
    if isinstance(value, dict):
        return {key: _numbers_back(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_numbers_back(item) for item in value]
    return value


def dumps_json(payload, indent: int = 2) -> str:
    """Standard JSON of ``payload``, non-finite floats as "Infinity", "-Infinity", "NaN"."""
    return json.dumps(_finite_or_named(payload), indent=indent, allow_nan=False)


def loads_json(text: str):
    """`dumps_json`'s payload back, with its non-finite floats (and files' bare tokens)."""
    return _numbers_back(json.loads(text))
