"""Where an unfinished bracket keeps the work of its current level, so that a level of hours
survives an interruption (a killed process, the end of a session on a shared machine).

A bracket's level is an AIS run and a RAISE run per route, each made of chain batches whose
seeds depend on the batch alone (`irbm.ais.batch_seed`). With a work directory, each run saves
its finished batches there (`irbm.ais.save_batches`, one file per level, route and direction,
keyed by everything that makes its draws), and the pilots of the tuned schedules are saved as
they are run, so a call with the same arguments finds the same temperatures whatever its
thread count, redoes only the unfinished batches and returns what an uninterrupted call would
have returned on that device. ``settings.json`` names the bracket the files belong to: another
bracket is refused before it starts rather than mixed with them or allowed to delete them.
"""

from __future__ import annotations

import json
import re
import shutil
import zipfile
import zlib
from pathlib import Path

import numpy as np
import torch

from ._io import atomic_write
from .ais import tensor_digest

SETTINGS_FILE = "settings.json"
PILOTS_FILE = "pilots.npz"


def bracket_identity(model, *, data, base_data, pilot_data, trajectory, **settings) -> dict:
    """What a bracket's draws depend on besides its level: the model, its rows (digests) and
    ``settings`` (chains, rows, repeats, seed, routes, schedule, pilots), as JSON values."""
    def digest(rows):
        return None if rows is None else tensor_digest(torch.as_tensor(rows))

    return json.loads(json.dumps({
        "model": model.config(), "parameters": tensor_digest(*model.state_dict().values()),
        "data": digest(data), "base_data": digest(base_data), "pilot_data": digest(pilot_data),
        "trajectory": [tensor_digest(*m.state_dict().values()) for m in trajectory or []],
        "dtype": str(model.dtype), "device": model.device.type, **settings}))


class LevelWork:
    """The work directory of one bracket (see the module docstring).

    Parameters
    ----------
    directory : path
        Created if absent; when it holds another bracket's work, ValueError names what differs
        and the two ways out, before any work starts.
    identity : dict
        `bracket_identity` of the bracket using it.
    """

    def __init__(self, directory, identity: dict):
        self.directory = Path(directory)
        # Settings alone (a bracket refused or failed before its first pilot) hold no work.
        if not any(self.directory.glob("*.npz")):
            self.directory.mkdir(parents=True, exist_ok=True)
            self._write(identity)
        settings = self.directory / SETTINGS_FILE
        try:
            stored = json.loads(settings.read_text())
        except (OSError, ValueError) as error:
            raise ValueError(f"{settings} is unreadable ({error}); delete {self.directory} "
                             "to start the bracket afresh") from None
        differing = sorted(key for key in {*stored, *identity}
                           if stored.get(key) != identity.get(key))
        if differing:
            raise ValueError(
                f"{self.directory} holds the unfinished level of another bracket (it differs "
                f"in {', '.join(differing)}): rerun that bracket's command to finish it, or "
                f"delete {self.directory} to start this one")
        self.restored_runs = sum(1 for _ in self.directory.glob("*-*.npz"))

    def _write(self, identity: dict):
        with atomic_write(self.directory / SETTINGS_FILE, "w") as stream:
            json.dump(identity, stream, indent=1)

    def checkpoint(self, n_betas: int, route: str, direction: str) -> Path:
        """The file of one run's chain batches: level, route ("linear, data base") and
        direction ("ais" or "raise")."""
        return self.directory / f"{int(n_betas)}-{_slug(route)}-{direction}.npz"

    def pilot(self, key: str, compute):
        """``compute()``'s pilot (t (P,), L(t) (P,)) for ``key``, run once and then read back:
        the temperatures of a resumed level are those it started with, bit for bit."""
        path, key = self.directory / PILOTS_FILE, _slug(key)
        saved = {}
        if path.exists():
            try:
                with np.load(path) as stored:
                    saved = {name: stored[name] for name in stored.files}
            except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as error:
                raise ValueError(f"{path} is unreadable ({error}); delete {self.directory} to "
                                 "start the bracket afresh") from None
        if f"{key}-t" not in saved:
            saved[f"{key}-t"], saved[f"{key}-length"] = compute()
            with atomic_write(path) as stream:
                np.savez(stream, **saved)
        return saved[f"{key}-t"], saved[f"{key}-length"]

    def finish(self):
        """Remove the directory: the bracket returned, and its levels are the caller's."""
        shutil.rmtree(self.directory, ignore_errors=True)


def _slug(name: str) -> str:
    """"linear, data base" -> "linear-data-base": a file-name-safe key."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
