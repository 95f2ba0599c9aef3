"""Run directories: what `irbm train` writes and the other commands read, and how they tell a
run from any other directory and a current result from a stale one.

A run directory holds:

- ``irbm-run.json``: the marker (format name and version) that makes a directory a run;
- ``config.json``: the run's `irbm.settings.Settings`, the dataset's shape, the directory its
  file was read from and a sha256 of its rows (the other commands read the data from there
  unless told otherwise, and refuse other data: `load_run_dataset`);
- ``checkpoint.safetensors``: the full training state (resumable); ``model.safetensors``: the
  latest model; ``best.safetensors``: the model with the best validation NLL (AIS, every
  ``eval_every`` epochs);
- ``history.json``: per-epoch metrics; ``validation.json``: the periodic AIS evaluations;
- ``evaluation.json`` (a list: every `irbm evaluate` appends one) and ``ais_log_weights.npy``
  (the latest evaluation's); ``samples.npz`` and figures under ``figures/``.

Evaluations and samples record the epoch and a sha256 digest of the model they were computed
from, so a later reader can tell whether they still describe the run's model.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from . import checkpoint as ckpt
from ._io import atomic_write, dumps_json, loads_json
from ._warn import warn_user
from .ais import estimate_log_partition
from .datasets import LOADERS, dataset_name, load_dataset
from .evaluate import nll
from .floor import sampled_log_partition_floor
from .models import check_dtype, family_class
from .settings import Settings
from .training import AVERAGE_DIR, Callback, refuse_other_run

# What `from irbm.runs import *` gives: reading a run directory, and the callbacks.
__all__ = [
    "read_settings", "run_model", "load_run_model", "load_run_dataset", "ModelSource",
    "read_evaluations", "current_evaluation", "is_run", "require_run", "ValidateWithAIS",
    "HistoryWriter", "StopOnNonFinite", "StopOnDivergence", "TrainingDiverged"]

MARKER_FILE = "irbm-run.json"
RUN_FORMAT, RUN_VERSION = "irbm-run", 1
SWEEP_MARKER_FILE = "irbm-sweep.json"  # `irbm.sweep_table`'s; a sweep's trials are runs
CONFIG_FILE = "config.json"
HISTORY_FILE = "history.json"
TRAIN_LOCK_FILE = ".training.lock"  # held while a process trains the run (irbm._io.hold_lock)
VALIDATION_FILE = "validation.json"
EVALUATION_FILE = "evaluation.json"
BEST_FILE = "best.safetensors"
SAMPLES_FILE = "samples.npz"
AIS_WEIGHTS_FILE = "ais_log_weights.npy"
AIS_PARTIAL_FILE = "ais_partial.npz"
# The level a bracket has under way (`irbm._bracket_work`): rerunning the command resumes it.
BRACKET_WORK_DIR = "bracket_partial"
# What numpy raises for a truncated or garbled .npz.
_NPZ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error)
# Files that only a run that trained at least one epoch (or was evaluated) holds.
RESULT_FILES = (ckpt.MODEL_FILE, BEST_FILE, HISTORY_FILE, VALIDATION_FILE, EVALUATION_FILE,
                SAMPLES_FILE, AIS_WEIGHTS_FILE)
# Everything a run directory holds that `irbm train` writes or later reads as the run's own:
# found in a directory that is not a run, training there is refused, even with --force.
RUN_FILES = (ckpt.TRAINER_FILE, CONFIG_FILE, *RESULT_FILES, AVERAGE_DIR)


# ---------------------------------------------------------------------------- files
def write_json(path, payload):
    """Write JSON atomically (temp file then rename), standard JSON (`dumps_json`)."""
    with atomic_write(path, "w") as stream:
        stream.write(dumps_json(payload))


def read_json(path, default=None):
    path = Path(path)
    if not path.exists():
        if default is not None:
            return default
        raise FileNotFoundError(f"missing {path}")
    try:
        return loads_json(path.read_text())
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


def save_npz(path, arrays: dict):
    with atomic_write(path) as stream:
        np.savez_compressed(stream, **arrays)


# ---------------------------------------------------------------------------- the marker
def is_run(directory) -> bool:
    """Whether ``directory`` is a run directory (holds a valid marker); ValueError when the
    marker is unreadable or of another format or version."""
    return has_marker(directory, MARKER_FILE, RUN_FORMAT, RUN_VERSION, "run")


def has_marker(directory, file_name: str, kind: str, version: int, noun: str) -> bool:
    """Whether ``directory`` holds the marker file ``file_name`` of format ``kind`` and this
    ``version``; ValueError when it is there but unreadable, of another format or version."""
    marker = Path(directory) / file_name
    if not marker.is_file():
        return False
    content = read_json(marker)
    if not isinstance(content, dict) or content.get("format") != kind:
        raise ValueError(f"{marker} is not an irbm {noun} marker")
    if content.get("version") != version:
        raise ValueError(f"{directory} is a {noun} of format version {content.get('version')}; "
                         f"this irbm reads version {version}")
    return True


def _require_directory(directory: Path) -> None:
    if directory.is_file():  # a model file named instead of its run, say
        raise ValueError(f"{directory} is a file; give the run directory it is in "
                         f"({directory.parent})")
    if not directory.is_dir():
        raise FileNotFoundError(f"run directory not found: {directory} (`irbm train ... --out "
                                "DIR` makes one)")


def require_run(directory, command: str = "irbm COMMAND") -> Path:
    """``directory`` as a Path if it is a run directory; a clear error otherwise, which for a
    sweep directory names ``command`` on one of its trials."""
    directory = Path(directory)
    _require_directory(directory)
    if not is_run(directory) and (directory / SWEEP_MARKER_FILE).is_file():
        trials = read_json(directory / SWEEP_MARKER_FILE).get("trials") or ["TRIAL"]
        raise ValueError(f"{directory} is a sweep directory, not a run: its trials are the "
                         f"runs (`{command} {directory / trials[0]}`, one of "
                         f"{len(trials)}), and `irbm report {directory}` tables them all")
    if not is_run(directory) and (directory / ckpt.MODEL_FILE).is_file():
        # Written by Python (irbm.training.CheckpointEvery): a model, but no record of its data
        # and settings, which every command needs.
        model = f"irbm.load('{directory}')"
        python = {"irbm sample": f"`irbm.sampling.sample({model}, 100, 1000)` samples it",
                  "irbm plot": f"`irbm.plotting.plot_filters({model}, (height, width), "
                               "'filters.png')` draws its filters"}.get(
            command, f"`irbm.evaluate.ais_nll({model}, test_rows)` evaluates it")
        raise ValueError(f"{directory} holds a model saved from Python ({ckpt.MODEL_FILE}) "
                         f"but no run records ({MARKER_FILE}, {CONFIG_FILE}): the command line "
                         f"takes runs of `irbm train` or `irbm.workflows.train_run`; in Python, "
                         f"{python}")
    if not is_run(directory):
        raise ValueError(f"{directory} is not an irbm run directory (it has no {MARKER_FILE}; "
                         f"`irbm train ... --out {directory}` makes one)")
    return directory


def create_run(directory, record: dict):
    """Write the marker and ``config.json`` into ``directory`` (which exists)."""
    write_json(Path(directory) / MARKER_FILE, {"format": RUN_FORMAT, "version": RUN_VERSION})
    write_json(Path(directory) / CONFIG_FILE, record)


def read_settings(run_dir) -> Settings:
    """The settings a run recorded."""
    path = Path(run_dir) / CONFIG_FILE
    record = read_json(path)
    try:
        return Settings.from_mapping(record["settings"], source=str(path))
    except (KeyError, TypeError) as error:
        raise ValueError(f"{path} holds no settings ({error})") from None


def data_record(dataset, named: bool) -> dict:
    """Where a run's data came from and what it was, for ``config.json``: the directory the
    file of a ``named`` dataset (mnist, caltech101) was read from (None for data read from no
    directory: the embedded digits, a download not cached, the user's own file, whose path is
    the dataset setting) and a sha256 of every split."""
    source = Path(dataset.source) if named and dataset.source else None
    return {"data_dir": str(source.parent.resolve()) if source and source.is_file() else None,
            "sha256": data_digest(dataset)}


def data_digest(dataset) -> str:
    """sha256 over the shapes and bytes of the train, valid and test rows."""
    digest = hashlib.sha256()
    for split in ("train", "valid", "test"):
        rows = np.ascontiguousarray(getattr(dataset, split))
        digest.update(f"{split}:{rows.shape};".encode())
        digest.update(rows.tobytes())
    return digest.hexdigest()


def run_data_dir(run_dir, data_dir=None):
    """``data_dir`` when given, else the directory the run's data came from while it exists
    (else None: `irbm.datasets.load_dataset` looks in its usual places)."""
    if data_dir is not None:
        return data_dir
    recorded = recorded_data(run_dir).get("data_dir")
    return recorded if recorded and Path(recorded).is_dir() else None


def check_run_data(run_dir, dataset):
    """ValueError unless ``dataset`` (whole, before any subset) is the data the run was
    trained on, by the sha256 in its ``config.json`` (runs that predate it are not checked)."""
    expected = recorded_data(run_dir).get("sha256")
    found = data_digest(dataset)
    if expected is not None and found != expected:
        trained_on = str(read_json(Path(run_dir) / CONFIG_FILE).get("settings", {}).get(
            "dataset", ""))
        # A data file of the user's (recorded by its absolute path): --data-dir finds only a
        # copy of it by its name, so the way out is the file itself.
        fix = (f"put back the file it was trained on ({trained_on}), or train on these rows "
               "in a new run"
               if Path(trained_on).is_absolute() else "pass --data-dir with the run's data")
        raise ValueError(f"{dataset.source or dataset.name} is not the data {run_dir} was "
                         f"trained on (sha256 {found[:12]}..., the run recorded "
                         f"{expected[:12]}...): {fix}")


def recorded_data(run_dir) -> dict:
    """What ``config.json`` recorded of the run's data (`data_record`, with its name); {}
    for runs made before it was recorded."""
    record = read_json(Path(run_dir) / CONFIG_FILE).get("dataset")
    return record if isinstance(record, dict) else {}


def _data_file(run_dir, dataset: str, data_dir) -> str:
    """Where a run trained on a data file (recorded by its absolute path) finds it now: in
    ``data_dir`` by its name when it is there (the file moved), else where it was. A named
    dataset (mnist, digits, ...) is returned as it is: ``data_dir`` says where its loader
    looks. The contents are checked after (`check_run_data`)."""
    recorded = Path(dataset)
    if not recorded.is_absolute():
        return dataset
    moved = None if data_dir is None else Path(data_dir).expanduser() / recorded.name
    if moved is not None and moved.is_file():
        return str(moved)
    if recorded.is_file():
        return dataset
    if moved is None:
        raise ValueError(f"{recorded}: no such file, and {run_dir} was trained on it: pass "
                         f"--data-dir with a directory that holds {recorded.name} (its "
                         "contents are checked)")
    raise ValueError(f"{run_dir} was trained on {recorded.name}, and neither {recorded} nor "
                     f"{moved} is a file: pass --data-dir with a directory that holds it")


def data_options(settings: Settings) -> dict:
    """The loader options of the settings' data file (`irbm.datasets.load_user_data`):
    ``binarize``, ``key`` and ``split_seed`` where given; ValueError for a named dataset,
    whose loader takes none of them."""
    options = {name: value for name, value in (("binarize", settings.binarize),
                                               ("key", settings.data_key),
                                               ("split_seed", settings.split_seed))
               if value is not None}
    if options and dataset_name(settings.dataset) in LOADERS:
        given = ", ".join(f"--{name.replace('_', '-')}" for name, value in (
            ("binarize", settings.binarize), ("data_key", settings.data_key),
            ("split_seed", settings.split_seed)) if value is not None)
        raise ValueError(f"{given}: only for your own data files; {settings.dataset} is a "
                         "named dataset, already binary and split: leave it out")
    return options


def load_run_dataset(run_dir, data_dir=None):
    """The dataset (and subset) the run was trained on: read from ``data_dir``, else from where
    the run's data came from, else as `irbm.datasets.load_dataset` finds it; checked against
    the run's record (`check_run_data`)."""
    settings = read_settings(run_dir)
    source = _data_file(run_dir, settings.dataset, data_dir)
    dataset = load_dataset(source, data_dir=run_data_dir(run_dir, data_dir),
                           **data_options(settings))
    check_run_data(run_dir, dataset)
    return dataset.subset(settings.train_size, settings.valid_size, settings.test_size)


# ---------------------------------------------------------------------------- models
@dataclass(frozen=True)
class ModelSource:
    """Which model file a result was computed from: its name, epoch and parameter digest."""

    file: str
    epoch: int | None
    sha256: str

    def as_record(self) -> dict:
        return {"model_file": self.file, "epoch": self.epoch, "model_sha256": self.sha256}


def model_digest(model) -> str:
    """sha256 over the names, dtypes, shapes and bytes of the model's state_dict tensors (on
    any device, the same digest)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        tensor = tensor.detach().contiguous().cpu()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _model_file(directory: Path, which: str) -> Path:
    if which not in ("best", "latest"):  # a typo loaded the latest model, and was recorded so
        raise ValueError(f'which must be "best" or "latest", got {which!r}')
    best = directory / BEST_FILE
    return best if which == "best" and best.exists() else directory / ckpt.MODEL_FILE


def run_model(directory, *, which="best", device=None, dtype=None):
    """(model, `ModelSource`): the run's best model when it has one (``which="best"``), else
    its latest; ``dtype``, as `irbm.load` takes it (default: the saved one)."""
    directory = Path(directory)
    _require_directory(directory)
    path = _model_file(directory, which)
    if is_run(directory) and not path.exists():  # made by `irbm train`, no epoch finished
        raise ValueError(f"{directory} holds no model yet ({path.name}): no epoch of its "
                         "training finished (it was stopped or diverged in the first); run "
                         "`irbm train` on it again (a smaller --lr if it diverged)")
    if dtype is not None:
        check_dtype(dtype)  # before the file is read
    tensors, metadata = ckpt.read_checkpoint(path)
    check_recorded_model(directory, metadata.get("model"), path.name)
    model = ckpt.model_from_tensors(tensors, metadata, device=device)
    source = ModelSource(path.name, metadata.get("epoch"), model_digest(model))
    # The digest is of the model as saved, which the run's records name, whatever dtype.
    return (model if dtype is None else model.to(dtype=check_dtype(dtype))), source


def check_recorded_model(directory, model_config, file_name: str):
    """ValueError, before any work, when the model in ``directory / file_name`` (its recorded
    constructor arguments ``model_config``) is not the one the run's config.json describes:
    another family, another number of visible units, or (families of a fixed size) of hidden
    units. Files of two runs mixed by hand were evaluated, sampled and trained on as the run's."""
    directory = Path(directory)
    if not is_run(directory) or not isinstance(model_config, dict):
        return  # a directory of model files alone; an unreadable config: its reader says so
    record = read_json(directory / CONFIG_FILE)
    settings = record.get("settings") or {}
    recorded = {"family": settings.get("family"),
                "n_visible": (record.get("dataset") or {}).get("n_visible")}
    try:
        if not family_class(settings.get("family")).resizable:
            recorded["n_hidden"] = settings.get("n_hidden")
    except (KeyError, ValueError):  # a family this process has not registered
        pass
    differs = [f"{name} {model_config.get(name)!r} where it records {value!r}"
               for name, value in recorded.items()
               if value is not None and model_config.get(name) != value]
    if differs:
        raise ValueError(f"{directory / file_name} is not the model {directory / CONFIG_FILE} "
                         f"describes ({'; '.join(differs)}): the files are of different runs; "
                         f"put the run's own {file_name} back, or use the model's own run "
                         "directory")


def load_run_model(directory, *, which="best", device=None, dtype=None):
    """The run's best model when it has one (``which="best"``), else its latest; ``dtype``
    as `irbm.load` takes it (default: the saved one)."""
    return run_model(directory, which=which, device=device, dtype=dtype)[0]


def _current_source(directory: Path, file_name: str, cache: dict) -> ModelSource | None:
    if file_name not in cache:
        path = directory / file_name
        cache[file_name] = None
        if path.is_file():
            tensors, metadata = ckpt.read_checkpoint(path)
            model = ckpt.model_from_tensors(tensors, metadata)
            cache[file_name] = ModelSource(file_name, metadata.get("epoch"), model_digest(model))
    return cache[file_name]


def staleness(directory, record: dict, cache: dict | None = None,
              verb: str = "evaluated") -> str | None:
    """None when ``record`` (with `ModelSource.as_record` keys) describes the model now in
    its file; else why not, e.g. "stale: evaluated at epoch 2 (the model is now at epoch 5)"."""
    if "model_sha256" not in record:
        return f"stale: {verb} by an older irbm that did not record the model"
    cache = {} if cache is None else cache
    file_name = record.get("model_file")
    current = _current_source(Path(directory), file_name, cache) if file_name else None
    if current is not None and current.sha256 == record["model_sha256"]:
        return None
    now = (f"the model is now at epoch {current.epoch}" if current is not None
           else f"{file_name} is gone")
    return f"stale: {verb} at epoch {record.get('epoch')} ({now})"


# ---------------------------------------------------------------------------- evaluations
def read_evaluations(run_dir) -> list[dict]:
    """Every evaluation of the run, oldest first (an older irbm wrote a single record);
    ValueError naming the file and the record when one is not of the form irbm writes (a
    hand-edited file made `irbm report` fail with a traceback, or print a word as a number)."""
    path = Path(run_dir) / EVALUATION_FILE
    payload = read_json(path, default={"evaluations": []})
    records = payload.get("evaluations", [payload]) if isinstance(payload, dict) else payload
    problem = "not a list of records" if not isinstance(records, list) else None
    for index, record in enumerate(records if problem is None else []):
        problem = _record_problem(record)
        if problem is not None:
            problem = f"evaluation {index + 1} {problem}"
            break
    if problem is not None:
        raise ValueError(f"{path}: {problem}, not what irbm writes: correct it, or delete the "
                         "file and run `irbm evaluate` again")
    return records


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _record_problem(record) -> str | None:
    """What in one evaluation record is not of the form irbm writes (None: nothing found)."""
    if not isinstance(record, dict):
        return "is not a record (a JSON object)"
    if not _is_number(record.get("log_z")):
        return f"has log_z {record.get('log_z')!r}, not a number"
    nll_record = record.get("nll")
    if not isinstance(nll_record, dict) or not all(
            isinstance(split, dict) and _is_number(split.get("mean"))
            and _is_number(split.get("stderr")) for split in nll_record.values()):
        return "has an nll that is not {split: {mean, stderr}} of numbers"
    for key in ("epoch", "n_hidden"):
        if record.get(key) is not None and (not isinstance(record[key], int)
                                            or isinstance(record[key], bool)):
            return f"has {key} {record[key]!r}, not a whole number"
    bracket = record.get("bracket")
    if bracket is not None and not (
            isinstance(bracket, dict) and isinstance(bracket.get("levels"), list)
            and all(_is_number(bracket.get(side)) for side in ("optimistic", "conservative"))):
        return "has a bracket without numeric sides and a list of levels"
    return None


def append_evaluation(run_dir, record: dict):
    records = read_evaluations(run_dir) + [record]
    write_json(Path(run_dir) / EVALUATION_FILE, {"evaluations": records})


def current_evaluation(run_dir, accept=None) -> tuple[dict, str | None]:
    """(the latest evaluation of the run's current model, None), or (the latest evaluation,
    why it is stale) when none matches; ``accept`` (record -> bool), when given, prefers the
    latest current evaluation it accepts (a sweep's own budget) over later ones."""
    run_dir = Path(run_dir)
    records = read_evaluations(run_dir)
    if not records:
        raise FileNotFoundError(f"{run_dir} has no {EVALUATION_FILE}: run "
                                f"`irbm evaluate {run_dir}` first")
    cache = {}
    current = [record for record in reversed(records)
               if staleness(run_dir, record, cache) is None]
    for record in current:
        if accept is None or accept(record):
            return record, None
    if current:
        return current[0], None
    return records[-1], staleness(run_dir, records[-1], cache)


def stale_inputs(run_dir, which="best") -> dict[str, str]:
    """What `irbm plot` would draw from results of another model, {file name: why}:
    ``samples.npz`` drawn from another model than the run's ``which`` ("best": its best when
    it has one, else its latest; "latest"), the AIS weights of a stale evaluation (each
    message names the command that brings it up to date)."""
    run_dir = Path(run_dir)
    problems, cache = {}, {}
    wanted = _model_file(run_dir, which).name
    latest = " --latest" if which == "latest" else ""
    samples = run_dir / SAMPLES_FILE
    if samples.exists():
        try:
            with np.load(samples, allow_pickle=False) as stored:
                record = {key: stored[key].item() for key in
                          ("model_file", "epoch", "model_sha256") if key in stored.files}
        except _NPZ_ERRORS as error:
            raise ValueError(f"{samples} is unreadable ({error}): run `irbm sample {run_dir}` "
                             "again, or delete it") from None
        if record.get("epoch") == -1:  # saved for "unknown"
            record["epoch"] = None
        reason = staleness(run_dir, record, cache, verb="drawn") or _not_the_model(
            run_dir, record, wanted, which, "drawn", cache)
        if reason is not None:
            problems[SAMPLES_FILE] = (f"{samples} is {reason}: run `irbm sample {run_dir}"
                                      f"{latest}` again")
    record = weights_record(run_dir)  # which may be of the run's other model
    if record is not None and (run_dir / AIS_WEIGHTS_FILE).exists():
        reason = staleness(run_dir, record, cache) or _not_the_model(
            run_dir, record, wanted, which, "computed", cache)
        if reason is not None:
            problems[AIS_WEIGHTS_FILE] = (f"{run_dir / AIS_WEIGHTS_FILE} is {reason}: run "
                                          f"`irbm evaluate {run_dir}{latest}` again")
    return problems


def weights_record(run_dir) -> dict | None:
    """The evaluation whose AIS log-weights ``ais_log_weights.npy`` holds: the last one that
    ran AIS (a re-judged bracket, appended with a new floor or a cross-check, wrote none), or
    None."""
    records = [r for r in read_evaluations(run_dir)
               if not r.get("floor_chains") and not r.get("cross_checked")]
    return records[-1] if records else None


def _not_the_model(run_dir: Path, record: dict, wanted: str, which: str, verb: str,
                   cache: dict) -> str | None:
    """Why a result of the run's other model file is stale for ``which`` (None: it is of that
    file, or of the same parameters: best and latest are one model when the last epoch was
    the best)."""
    if record.get("model_file", wanted) == wanted:
        return None
    current = _current_source(run_dir, wanted, cache)
    if current is not None and current.sha256 == record.get("model_sha256"):
        return None
    return (f"stale: {verb} from {record['model_file']}, not the run's "
            f"{'latest' if which == 'latest' else 'best'} model ({wanted})")


def check_ais_partial(path):
    """A leftover partial AIS run must be readable; else say to delete it."""
    path = Path(path)
    if not path.exists():
        return
    try:
        with np.load(path, allow_pickle=False) as saved:
            for key in ("config", "seconds", "batch_sizes", "log_weights", "samples"):
                saved[key]
    except (*_NPZ_ERRORS, KeyError) as error:
        raise ValueError(f"{path} (an interrupted AIS run) is corrupt ({error}); delete it to "
                         "start the evaluation afresh") from None


# ---------------------------------------------------------------------------- callbacks
class TrainingDiverged(ValueError):
    """A parameter or a metric became NaN or infinite, or grew by orders of magnitude."""


def _check_finite_metrics(metrics: dict, epoch: int, kept: str):
    for name, value in metrics.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise TrainingDiverged(f"training diverged at epoch {epoch}: {name} is {value}; "
                                   f"{kept} (try a smaller --lr)")


class StopOnNonFinite(Callback):
    """Raise at the end of the first epoch whose parameters or metrics are not all finite.

    Placed before `irbm.training.CheckpointEvery` and `HistoryWriter` in the callback list, it
    stops the epoch's callbacks before they save it: the last checkpoint stays the last good
    state."""

    def on_fit_start(self, trainer):
        self.good_epoch = trainer.epoch if trainer.epoch else None

    def kept(self) -> str:
        return (f"the checkpoint of epoch {self.good_epoch} is kept" if self.good_epoch
                else "no checkpoint was written")

    def on_epoch_end(self, trainer, metrics):
        for name, parameter in trainer.model.named_parameters():
            if not torch.isfinite(parameter).all():
                raise TrainingDiverged(f"training diverged at epoch {trainer.epoch}: parameter "
                                       f"{name} has non-finite values; {self.kept()} (try a "
                                       f"smaller --lr)")
        _check_finite_metrics(metrics, trainer.epoch, self.kept())
        self.good_epoch = trainer.epoch


class StopOnDivergence(StopOnNonFinite):
    """`StopOnNonFinite`, and raise as well at the end of an epoch where the largest parameter
    or the mean free energy of the training data grew by more than `GROWTH` times since the
    last sound epoch (or the start), from at least 1 for parameters and n_visible nats for free
    energies (so small starting values give no hair trigger).

    Learning moves a sound model's parameters by a few units over many epochs; an update that
    multiplies them by a thousand is a step size run away (e.g. SGD at lr 1e30: parameters of
    1e30, free energies of -1e30, every value finite and the model useless). Like
    `StopOnNonFinite`, it stops the epoch before anything saves it."""

    GROWTH = 1e3

    def on_fit_start(self, trainer):
        super().on_fit_start(trainer)
        last = trainer.history[-1].get("train_free_energy") if trainer.history else None
        self.sound = {"the largest |parameter|": self._largest_parameter(trainer.model),
                      "|F(train)|": None if last is None else abs(last)}

    @staticmethod
    def _largest_parameter(model) -> float:
        return max((float(p.detach().abs().max()) for p in model.parameters() if p.numel()),
                   default=0.0)

    def on_epoch_end(self, trainer, metrics):
        kept = self.kept()  # before the finiteness check counts this epoch as good
        super().on_epoch_end(trainer, metrics)  # non-finite values first, named as such
        now = {"the largest |parameter|": self._largest_parameter(trainer.model),
               "|F(train)|": abs(metrics.get("train_free_energy", 0.0))}
        floors = {"the largest |parameter|": 1.0, "|F(train)|": float(trainer.model.n_visible)}
        for name, value in now.items():
            before = self.sound[name]
            if value > self.GROWTH * max(before or 0.0, floors[name]):
                was = "" if before is None else f"from {before:.3g} "
                raise TrainingDiverged(
                    f"training diverged at epoch {trainer.epoch}: {name} grew {was}to "
                    f"{value:.3g}, more than {self.GROWTH:g} times the last sound epoch's; "
                    f"{kept} (try a smaller --lr)")
        self.sound = now



def _duration(seconds: float) -> str:
    """An epoch's time in a 7-character cell: milliseconds below a second (a small model's
    epochs of 30 ms read "0.0s" otherwise)."""
    return f"{seconds * 1000:5.0f}ms" if seconds < 1 else f"{seconds:6.1f}s"

class HistoryWriter(Callback):
    """Write history.json (and one line per epoch to ``echo``) after every epoch; with
    ``validation_lines``, the line of a `ValidateWithAIS` given no echo of its own follows
    its epoch's (that callback, run before this one, would say it before the epoch's line)."""

    def __init__(self, run_dir, total_epochs: int, echo=None, *, validation_lines=False):
        self.path = Path(run_dir) / HISTORY_FILE
        self.total_epochs, self.echo = total_epochs, echo
        self.validation_lines = validation_lines

    def _write(self, trainer):
        write_json(self.path, {"history": trainer.history, "size_history": trainer.size_history})

    def on_fit_start(self, trainer):
        # The checkpoint is written before the history (`irbm.workflows`): a kill between the
        # two leaves the file an epoch behind, which a resume with nothing left to train would
        # otherwise never write again (a sweep then takes the trial for unfinished).
        if not trainer.history:
            return
        wanted = dumps_json({"history": trainer.history,
                             "size_history": trainer.size_history})  # as `write_json` writes
        try:
            current = self.path.read_text()
        except OSError:
            current = None
        if current != wanted:  # untouched when current: a refused or idle resume changes nothing
            self._write(trainer)

    def on_epoch_end(self, trainer, metrics):
        self._write(trainer)
        if self.echo:
            valid = metrics.get("valid_free_energy")
            self.echo(f"epoch {metrics['epoch']:>4}/{self.total_epochs}  "
                      f"n_hidden {metrics['n_hidden']:>5}  "
                      f"recon {metrics['reconstruction_error']:8.3f}  "
                      f"F(train) {metrics['train_free_energy']:9.3f}  "
                      + (f"F(valid) {valid:9.3f}  " if valid is not None else "")
                      + _duration(metrics["seconds"]))
            for prefix in ("", AVERAGE_PREFIX):  # each validation that ran this epoch
                if self.validation_lines and f"{prefix}valid_nll" in metrics:
                    self.echo(_validation_line(metrics, trainer.history[:-1], prefix))


# Metrics of the averaged model's validation (`ValidateWithAIS(averaged=True)`).
AVERAGE_PREFIX = "average_"


def _validation_line(metrics, earlier, prefix: str = "") -> str:
    """The line `ValidateWithAIS` says about an epoch's ``metrics``, the ``earlier`` epochs'
    metrics deciding whether it is the best so far (``prefix``: the averaged model's)."""
    def get(name, source=metrics):
        return source.get(prefix + name)
    best = min((get("valid_nll", m) for m in earlier if get("valid_nll", m) is not None),
               default=float("inf"))
    # The choice of the best model rests on this ln Z: a doubtful one is said where it is made.
    doubt = (f"\n  unreliable: AIS effective sample size {get('log_z_ess'):.1f} of "
             f"{get('log_z_chains')} chains, so ln Z is likely too low and this NLL too "
             "good (more validation chains and temperatures: --eval-chains, --eval-betas; "
             "Python: n_chains=, n_betas=)" if get("log_z_reliable") is False else "")
    if get("nll_log_z") is not None and get("nll_log_z") != get("log_z"):
        doubt += f"\n  {_below_floor(get('log_z'), get('nll_log_z'))}"
    return (f"  AIS{' (average)' if prefix else ''}: ln Z = {get('log_z'):.3f}  valid NLL = "
            f"{get('valid_nll'):.3f} +/- {get('valid_nll_stderr'):.3f}"
            + ("  (best so far)" if get("valid_nll") < best else "") + doubt)


def _below_floor(log_z: float, floor: float) -> str:
    return (f"ln Z-hat {log_z:.3f} lies below the certain floor {floor:.3f}, which ln Z "
            "cannot: the NLL uses the floor")


# Rows converted at once when ValidateWithAIS checks its data before the fit.
_CHECKED_ROWS = 10_000


class ValidateWithAIS(Callback):
    """Every ``every`` epochs: AIS estimate of log Z, NLL on the validation set, and keep the
    best model's checkpoint (the paper's protocol: AIS every 1,000 epochs, keep the best).

    ``base_data`` (the training set; default: ``valid``) gives the AIS base rate when the
    family's default base is the data's (any base keeps the estimate of Z unbiased).
    ``averaged``: validate the trainer's running average of the parameters instead
    (`Trainer.averaged_model`; nothing before it has one), its metrics named "average_..."
    in the history, into ``run_dir`` (RUN/average/, where `CheckpointEvery` writes it): the
    paper's selection among averaged models.

    Each validation also sums exp(-F) over the distinct states of Gibbs chains from the
    validation rows, a certain floor of ln Z (`irbm.floor.sampled_log_partition_floor`); the
    NLL uses ln Z = max(AIS's estimate, that floor), as `irbm evaluate` does, and says so when
    the floor is higher. Records and history hold "log_z" (AIS's), "log_z_floor" and
    "nll_log_z" (the one the NLL used)."""

    def __init__(self, run_dir, valid, every: int, *, base_data=None, n_chains=100, n_betas=1000,
                 seed=0, echo=None, warn=True, averaged=False):
        if isinstance(every, bool) or int(every) != every or every < 1:
            raise ValueError(f"every must be a whole number of epochs >= 1, got {every!r} "
                             "(leave the callback out for no validation)")
        self.run_dir, self.valid, self.every = Path(run_dir), valid, int(every)
        self.base_data = base_data
        self.n_chains, self.n_betas, self.seed, self.echo = n_chains, n_betas, seed, echo
        # Python hears of an unreliable ln Z by a warning; the command line says it in its
        # own validation line (`HistoryWriter`) and passes warn=False.
        self.warn = warn
        self.path = self.run_dir / VALIDATION_FILE
        self.averaged, self.prefix = bool(averaged), AVERAGE_PREFIX if averaged else ""

    @property
    def best(self) -> dict | None:
        """The record of the model kept as best (``validation.json``'s lowest "valid_nll":
        "epoch", "n_hidden", "log_z", "valid_nll", "valid_nll_stderr", "effective_sample_size"
        ...), None before the first validation."""
        return min(read_json(self.path, default=[]), key=lambda r: r["valid_nll"], default=None)

    def check_fit(self, trainer):
        # The validation rows (and the base's) checked against the model now, not at the first
        # validation, which may be thousands of epochs away.
        for name, rows in (("valid", self.valid), ("base_data", self.base_data)):
            if rows is None:
                continue
            try:
                if len(rows) == 0 or getattr(rows, "ndim", 2) != 2:
                    trainer.model.check_visible(torch.as_tensor(rows))
                # In blocks: a training set as base_data is never converted all at once.
                for start in range(0, len(rows), _CHECKED_ROWS):
                    trainer.model.check_visible(torch.as_tensor(rows[start:start + _CHECKED_ROWS]))
            except ValueError as error:
                raise ValueError(f"ValidateWithAIS({name}=...): {error}") from None
        refuse_other_run(self.run_dir, trainer, (VALIDATION_FILE, BEST_FILE))

    def on_fit_start(self, trainer):
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # After a crash between this record and the epoch's checkpoint, the resumed run repeats
        # the epoch: drop the records it will write again.
        records = read_json(self.path, default=[])
        kept = [r for r in records if r["epoch"] <= trainer.epoch]
        if len(kept) != len(records):
            write_json(self.path, kept)

    def on_epoch_end(self, trainer, metrics):
        if trainer.epoch % self.every:
            return
        model = trainer.averaged_model() if self.averaged else trainer.model
        if model is None:  # no average kept (yet)
            return
        base_data = self.valid if self.base_data is None else self.base_data
        result = estimate_log_partition(model, self.n_chains, self.n_betas, data=base_data,
                                        seed=self.seed, progress=False)
        # ln Z >= the floor for certain, and the NLL uses it when AIS's estimate lies below,
        # as `irbm evaluate` does: it made a validation NLL, and the choice of the best model,
        # too good (a walkthrough saw 11.7 nats). From the validation rows and at most a
        # quarter of AIS's chain steps: on MNIST's 10,000 rows with 100 x 1,000, about a
        # second beside AIS's two.
        floor = sampled_log_partition_floor(
            model, self.valid, n_chains=min(self.n_chains, 100),
            n_steps=max(1, min(200, self.n_chains * self.n_betas // 400)), seed=self.seed)
        log_z = max(floor, result.log_z)
        mean, stderr = nll(model, self.valid, log_z)
        _check_finite_metrics({"valid_nll": mean, "log_z": result.log_z}, trainer.epoch,
                              "the checkpoint of the previous epoch is kept")
        records = read_json(self.path, default=[])
        record = {"epoch": trainer.epoch, "n_hidden": model.n_hidden, "log_z": result.log_z,
                  "log_z_low": result.log_z_low, "log_z_high": result.log_z_high,
                  "log_z_floor": floor, "nll_log_z": log_z,
                  "valid_nll": mean, "valid_nll_stderr": stderr,
                  # How far to trust the selection: a few effective chains favour a low ln Z.
                  "effective_sample_size": result.effective_sample_size,
                  "n_chains": self.n_chains}
        best = min((r["valid_nll"] for r in records), default=float("inf"))
        records.append(record)
        write_json(self.path, records)
        metrics.update({self.prefix + name: value for name, value in (
            ("valid_nll", mean), ("valid_nll_stderr", stderr), ("log_z", result.log_z),
            ("log_z_reliable", result.reliable), ("log_z_ess", result.effective_sample_size),
            ("log_z_chains", self.n_chains), ("log_z_floor", floor), ("nll_log_z", log_z))})
        if self.warn and not self.echo and not result.reliable:
            warn_user(f"ValidateWithAIS{' (averaged)' if self.averaged else ''}, epoch "
                      f"{trainer.epoch}: AIS effective sample size "
                      f"{result.effective_sample_size:.1f} of {self.n_chains} chains, so ln Z "
                      "is likely too low and this validation NLL, and the choice of the "
                      "best model, too good: raise n_chains and n_betas")
        if mean < best:
            ckpt.save(model, self.run_dir / BEST_FILE, extra={
                "epoch": trainer.epoch, "valid_nll": mean,
                **({"averaged": True} if self.averaged else {})})
        if log_z != result.log_z and self.warn and not self.echo:
            warn_user(f"ValidateWithAIS{' (averaged)' if self.averaged else ''}, epoch "
                      f"{trainer.epoch}: {_below_floor(result.log_z, floor)} (raise n_chains "
                      "and n_betas)")
        if self.echo:
            self.echo(_validation_line(metrics, [{self.prefix + "valid_nll": best}],
                                       self.prefix))
