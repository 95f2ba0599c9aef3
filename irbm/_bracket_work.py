"""Where an unfinished bracket keeps the work of its current level, so that a level of hours
survives an interruption (a killed process, the end of a session on a shared machine).

A bracket's level is an AIS run and a RAISE run per route, each made of chain batches whose
seeds depend on the batch alone (`irbm.ais.batch_seed`). With a work directory, each run saves
its finished batches there (`irbm.ais.save_batches`, one file per level, route and direction,
keyed by everything that makes its draws), and the pilots of the tuned schedules and the
certain floor are saved as they are run, so a call with the same arguments finds the same
temperatures whatever its thread count and redoes only the unfinished batches.
``settings.json`` names the bracket the files belong to: another bracket is refused before it
starts rather than mixed with them or allowed to delete them, and a lock keeps a second process
off a directory in use.
"""

from __future__ import annotations

import json
import re
import time
import zipfile
import zlib
from pathlib import Path

import numpy as np
import torch

from ._io import atomic_write, dumps_json, hold_lock, loads_json
from .ais import tensor_digest
from .kernels import runs_on

SETTINGS_FILE = "settings.json"
PILOTS_FILE = "pilots.npz"
FLOOR_FILE = "floor.json"
LOCK_FILE = "lock"
_RUN_FILE = re.compile(r"^\d+-[a-z0-9-]+-(ais|raise)\.npz$")


def rows_digest(rows) -> str | None:
    """sha256 of the values of ``rows`` (N, D), whatever their dtype or device (None: None);
    in chunks, so that MNIST's 60,000 rows are never copied whole."""
    return None if rows is None else tensor_digest(
        *(chunk.to(torch.float64) for chunk in torch.as_tensor(rows).split(4096)))


def model_digest(model) -> str:
    """sha256 of a model's parameters (and buffers), as a checkpoint keeps them."""
    return tensor_digest(*model.state_dict().values())


def bracket_fingerprint(model, *, data, base_data, trajectory) -> dict:
    """Digests of what a bracket is of: the model's "parameters", its "data" rows, its "base
    data" and its "trajectory" models (`Bracket.fingerprint`, which a resume must match)."""
    return {"parameters": model_digest(model), "data": rows_digest(data),
            "base data": rows_digest(base_data),
            "trajectory": [model_digest(m) for m in trajectory or []]}


def bracket_identity(model, *, fingerprint, pilot_data, **settings) -> dict:
    """What a bracket's draws depend on besides its levels' seeds: the model and its rows
    (``fingerprint``, `bracket_fingerprint`), the pilot rows, whether the fused kernels draw
    the chains, and ``settings`` (chains, rows, repeats, seed, routes, schedule, pilots,
    temperatures), as JSON values."""
    return json.loads(json.dumps({
        "model": model.config(), **fingerprint, "pilot data": rows_digest(pilot_data),
        "dtype": str(model.dtype), "device": model.device.type,
        "kernels": runs_on(torch.empty(1, dtype=model.dtype, device=model.device)),
        **settings}))


class LevelWork:
    """The work directory of one bracket (see the module docstring), locked while it lives.

    Parameters
    ----------
    directory : path
        Missing, empty, or a bracket's work directory; when it holds another bracket's work,
        ValueError names what differs and the way out, before any work starts.
    identity : dict
        `bracket_identity` of the bracket using it.
    """

    def __init__(self, directory, identity: dict):
        self.directory = Path(directory)
        settings = self.directory / SETTINGS_FILE
        if self.directory.exists() and not settings.exists() and any(
                not _ours(path.name) for path in self.directory.iterdir()):
            raise ValueError(f"{self.directory} is neither empty nor a bracket's work "
                             "directory: give a new or empty directory")
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = hold_lock(self.directory / LOCK_FILE, "running a bracket of this run")
        try:
            self._check(identity)
        except BaseException:
            self.release()
            raise
        self.restored_runs = sum(1 for path in self.directory.iterdir()
                                 if _RUN_FILE.match(path.name))

    def _check(self, identity: dict):
        settings = self.directory / SETTINGS_FILE
        # Settings alone (a bracket refused or failed before its first pilot) hold no work, and
        # a floor beside them may be another bracket's.
        if not any(self.directory.glob("*.npz")):
            (self.directory / FLOOR_FILE).unlink(missing_ok=True)
            with atomic_write(settings, "w") as stream:
                json.dump(identity, stream, indent=1)
        try:
            stored = json.loads(settings.read_text())
        except (OSError, ValueError) as error:
            raise ValueError(f"{settings} is unreadable ({error}); delete {self.directory} "
                             "to start the bracket afresh") from None
        differing = sorted(key for key in {*stored, *identity}
                           if stored.get(key) != identity.get(key))
        if {"model", "parameters"} & set(differing):
            raise ValueError(f"{self.directory} holds the unfinished level of a bracket of "
                             "another model (its parameters differ: trained further since?); "
                             f"its work is stale: delete {self.directory} to start this one")
        if differing:
            raise ValueError(
                f"{self.directory} holds the unfinished level of another bracket (it differs "
                f"in {', '.join(differing)}): rerun that bracket's command to finish it, or "
                f"delete {self.directory} to start this one")

    def checkpoint(self, n_betas: int, route: str, direction: str) -> Path:
        """The file of one run's chain batches: level, route ("linear, data base") and
        direction ("ais" or "raise")."""
        return self.directory / f"{int(n_betas)}-{_slug(route)}-{direction}.npz"

    def pilot(self, key: str, compute):
        """(t (P,), L(t) (P,), seconds read back): ``compute()``'s pilot for ``key``, run once
        and then read back (with the seconds it took), so that the temperatures of a resumed
        level are those it started with, bit for bit."""
        key = _slug(key)
        saved = self._saved()
        if f"{key}-t" in saved:
            return saved[f"{key}-t"], saved[f"{key}-length"], float(saved[f"{key}-seconds"])
        started = time.perf_counter()
        saved[f"{key}-t"], saved[f"{key}-length"] = compute()
        saved[f"{key}-seconds"] = np.array(time.perf_counter() - started)
        self._save(saved)
        return saved[f"{key}-t"], saved[f"{key}-length"], 0.0

    def floor(self, compute) -> float:
        """``compute()``, the certain floor of ln Z from the bracket's Gibbs chains, run once and
        then read back: each call resuming a level would otherwise redo those chains (4 of a
        6-second call's seconds on a small MNIST iRBM). Its own file, not work: a directory
        holding only it and the settings may still be taken by another bracket."""
        path = self.directory / FLOOR_FILE
        try:
            return float(loads_json(path.read_text())["floor"])
        except (OSError, ValueError, KeyError, TypeError):  # none yet, or unreadable: again
            floor = float(compute())
            with atomic_write(path, "w") as stream:
                stream.write(dumps_json({"floor": floor}))  # -inf as "-Infinity"
            return floor

    def _saved(self) -> dict:
        """The pilots saved so far, {name: array}."""
        path = self.directory / PILOTS_FILE
        if not path.exists():
            return {}
        try:
            with np.load(path) as stored:
                return {name: stored[name] for name in stored.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as error:
            raise ValueError(f"{path} is unreadable ({error}); delete {self.directory} to "
                             "start the bracket afresh") from None

    def _save(self, saved: dict):
        with atomic_write(self.directory / PILOTS_FILE) as stream:
            np.savez(stream, **saved)

    def release(self):
        """Let another process use the directory (its files stay)."""
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def finish(self):
        """Remove the directory's files and the directory: the bracket's result is stored."""
        remove_work(self.directory)
        self.release()


def remove_work(directory):
    """Delete a work directory's own files (settings, pilots, runs, lock), then the directory
    if nothing else is left in it."""
    directory = Path(directory)
    if not directory.is_dir():
        return
    for path in directory.iterdir():
        if _ours(path.name):
            path.unlink(missing_ok=True)
    try:
        directory.rmdir()
    except OSError:
        pass  # something not ours is in it: left as found


def _ours(name: str) -> bool:
    return name in (SETTINGS_FILE, PILOTS_FILE, FLOOR_FILE, LOCK_FILE) or \
        bool(_RUN_FILE.match(name))


def _slug(name: str) -> str:
    """"linear, data base" -> "linear-data-base": a file-name-safe key."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
