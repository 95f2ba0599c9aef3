"""Run directories: what `irbm train` writes and the other commands read.

A run directory holds:

- ``config.json``: model family and constructor arguments, training hyper-parameters, dataset;
- ``checkpoint.safetensors``: the full training state (resumable); ``model.safetensors``: the
  latest model; ``best.safetensors``: the model with the best validation NLL (AIS, every
  ``eval_every`` epochs);
- ``history.json``: per-epoch metrics; ``validation.json``: the periodic AIS evaluations;
- ``evaluation.json`` and ``ais_log_weights.npy`` from `irbm evaluate`; ``samples.npz`` and
  figures under ``figures/`` from `irbm sample` and `irbm plot`.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import torch

from . import checkpoint as ckpt
from ._io import atomic_write
from .ais import estimate_log_partition
from .evaluate import nll
from .training import Callback

CONFIG_FILE = "config.json"
HISTORY_FILE = "history.json"
VALIDATION_FILE = "validation.json"
EVALUATION_FILE = "evaluation.json"
BEST_FILE = "best.safetensors"


def write_json(path, payload):
    """Write JSON atomically (temp file then rename)."""
    with atomic_write(path, "w") as stream:
        json.dump(payload, stream, indent=2, allow_nan=True)


def read_json(path, default=None):
    path = Path(path)
    if not path.exists():
        if default is not None:
            return default
        raise FileNotFoundError(f"missing {path}")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"corrupt JSON file {path}: {error}") from None


def check_writable(directory) -> Path:
    """Create ``directory`` if needed and make sure files can be written in it."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(dir=directory)
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        raise OSError(f"output directory {directory} is not writable: "
                      f"{error.strerror or error}") from None
    return directory


def is_run(directory) -> bool:
    return (Path(directory) / ckpt.TRAINER_FILE).exists()


def load_run_model(directory, *, which="best", device=None):
    """The run's best model when it has one (``which="best"``), else its latest."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"run directory not found: {directory}")
    best = directory / BEST_FILE
    if which == "best" and best.exists():
        return ckpt.load(best, device=device)
    return ckpt.load(directory / ckpt.MODEL_FILE, device=device)


class HistoryWriter(Callback):
    """Write history.json (and print one line per epoch) after every epoch."""

    def __init__(self, run_dir, total_epochs: int, echo=print):
        self.path = Path(run_dir) / HISTORY_FILE
        self.total_epochs, self.echo = total_epochs, echo

    def on_epoch_end(self, trainer, metrics):
        write_json(self.path, {"history": trainer.history, "size_history": trainer.size_history})
        if self.echo:
            valid = metrics.get("valid_free_energy")
            self.echo(f"epoch {metrics['epoch']:>4}/{self.total_epochs}  "
                      f"n_hidden {metrics['n_hidden']:>5}  "
                      f"recon {metrics['reconstruction_error']:8.3f}  "
                      f"F(train) {metrics['train_free_energy']:9.3f}  "
                      + (f"F(valid) {valid:9.3f}  " if valid is not None else "")
                      + f"{metrics['seconds']:6.1f}s")


class ValidateWithAIS(Callback):
    """Every ``every`` epochs: AIS estimate of log Z, NLL on the validation set, and keep the
    best model's checkpoint (the paper's protocol: AIS every 1,000 epochs, keep the best)."""

    def __init__(self, run_dir, valid, every: int, *, n_chains=100, n_betas=1000, seed=0,
                 echo=print):
        self.run_dir, self.valid, self.every = Path(run_dir), valid, int(every)
        self.n_chains, self.n_betas, self.seed, self.echo = n_chains, n_betas, seed, echo
        self.path = self.run_dir / VALIDATION_FILE

    def on_fit_start(self, trainer):
        # After a crash between this record and the epoch's checkpoint, the resumed run repeats
        # the epoch: drop the records it will write again.
        records = read_json(self.path, default=[])
        kept = [r for r in records if r["epoch"] <= trainer.epoch]
        if len(kept) != len(records):
            write_json(self.path, kept)

    def on_epoch_end(self, trainer, metrics):
        if self.every <= 0 or trainer.epoch % self.every:
            return
        model = trainer.model
        result = estimate_log_partition(model, self.n_chains, self.n_betas, seed=self.seed,
                                        progress=False)
        mean, stderr = nll(model, self.valid, result.log_z)
        records = read_json(self.path, default=[])
        record = {"epoch": trainer.epoch, "n_hidden": model.n_hidden, "log_z": result.log_z,
                  "log_z_low": result.log_z_low, "log_z_high": result.log_z_high,
                  "valid_nll": mean, "valid_nll_stderr": stderr}
        best = min((r["valid_nll"] for r in records), default=float("inf"))
        records.append(record)
        write_json(self.path, records)
        metrics.update({"valid_nll": mean, "log_z": result.log_z})
        if mean < best:
            ckpt.save(model, self.run_dir / BEST_FILE, extra={"epoch": trainer.epoch,
                                                               "valid_nll": mean})
        if self.echo:
            self.echo(f"  AIS: ln Z = {result.log_z:.3f}  valid NLL = {mean:.3f} +/- {stderr:.3f}"
                      + ("  (best so far)" if mean < best else ""))


def evaluate_run(run_dir, dataset, *, n_chains=1000, n_betas=None, base="model", seed=0,
                 which="best", device=None, progress=True, echo=print) -> dict:
    """AIS estimate of log Z for the run's model, NLL on every split, saved as JSON."""
    run_dir = Path(run_dir)
    model = load_run_model(run_dir, which=which, device=device)
    data = dataset.train if base == "data" else None
    result = estimate_log_partition(
        model, n_chains, n_betas, base=base, data=None if data is None else torch.as_tensor(data),
        seed=seed, progress=progress, checkpoint_path=run_dir / "ais_partial.npz")
    record = {
        "family": model.family, "n_hidden": model.n_hidden, "dataset": dataset.name,
        "log_z": result.log_z, "log_z_low": result.log_z_low, "log_z_high": result.log_z_high,
        "n_chains": result.n_chains, "n_betas": result.n_betas, "base": result.base,
        "ais_seconds": result.seconds, "nll": {},
    }
    for split in ("train", "valid", "test"):
        values = getattr(dataset, split)
        if values is not None and len(values):
            mean, stderr = nll(model, torch.as_tensor(values), result.log_z)
            record["nll"][split] = {"mean": mean, "stderr": stderr, "n": int(len(values))}
            if echo:
                echo(f"  {split:5} NLL = {mean:.3f} +/- {stderr:.3f}  ({len(values)} examples)")
    np.save(run_dir / "ais_log_weights.npy", result.log_weights.numpy())
    write_json(run_dir / EVALUATION_FILE, record)
    (run_dir / "ais_partial.npz").unlink(missing_ok=True)
    return record
