"""Hyper-parameter sweeps on Dask: the product of a grid of settings, one run directory per
trial, on a local `dask.distributed.LocalCluster` or an existing cluster.

A sweep file is TOML: the settings of `irbm train` (`irbm.settings.Settings`, ``family`` and
``dataset`` included) as fixed values, a ``[grid]`` table whose keys hold lists (the sweep runs
their product), and an optional ``[evaluation]`` table (``chains``, ``betas``, ``seed``: the
AIS budget of the final evaluation of each trial)::

    family = "irbm"
    dataset = "digits"
    epochs = 20
    [grid]
    lr = [0.1, 0.05]
    l1 = [0.0, 0.001]

A grid over ``family`` compares families: each trial keeps only the model options its family
takes (``beta = [1.01, 1.5]`` beside ``family = ["rbm", "irbm"]`` gives one RBM trial, named
without beta, and two iRBM trials); an option no family of the grid takes, or a training rule
only some families have, is refused as for a single family. Every grid point is validated as
`Settings` before anything runs. Each trial trains with `irbm.workflows.train_run` into
``OUT/<name>`` (e.g. ``lr=0.05,l1=0.001``), which checkpoints every epoch, then is evaluated by
`irbm.workflows.evaluate_run`. A trial is one Dask task that resumes whatever its directory
holds, which gives the fault tolerance: re-running the sweep skips finished trials (epochs
reached and an evaluation of the current model) and continues the others; a worker that dies
mid-trial has its task rescheduled by Dask on another worker, where it resumes from the trial's
last checkpoint; a trial that raises records its error in ``error.txt`` and
``trial-status.json`` and the sweep goes on. What can be checked before that is: on a local
cluster the data of every trial to run is loaded and checked first (missing data, split sizes,
a data file changed under a started trial), and one such trial refuses the whole sweep; a
second sweep into the same directory is refused while one runs (a lock file in it).

Successive halving (stopping the worse half of the trials at each evaluation point) is not
implemented. Its decisions depend on the validation NLLs of *all* trials at a rung, so it needs
a barrier at every rung: each trial would become one task per rung, and the decisions must be
recorded in the sweep directory so that a re-run, or a retried task on another worker, takes
the same ones rather than resurrecting a stopped trial or stopping one that a resumed run would
have kept. Done asynchronously instead (ASHA), the set of stopped trials depends on which
worker happened to be faster, so a re-run would not reproduce the sweep. Both are feasible but
not at the cost of the simple invariant the sweep relies on now: a trial's directory alone
says what remains to be done.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import importlib.util
import itertools
import logging
import math
import os
import re
import signal
import socket
import sys
import threading
import time
import tomllib
import traceback
import urllib.request
import warnings
from pathlib import Path

from . import checkpoint as ckpt
from . import runs, sweep_table, workflows
from ._io import hold_lock
from .datasets import LOADERS, check_dataset, dataset_name
from .settings import SPECS, Settings, applicable, check_setting, closest_key

__all__ = ["run_sweep", "read_sweep", "trial_settings", "trial_name", "run_trial"]

logger = logging.getLogger(__name__)

EVALUATION_DEFAULTS = {"chains": 100, "betas": 1000, "seed": 0}
SWEEP_LOCK_FILE = ".sweep.lock"  # held while a sweep runs into the directory (`_sweep_lock`)
_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]")
_RUN_MODEL_FILES = (ckpt.MODEL_FILE, runs.BEST_FILE, ckpt.TRAINER_FILE)


# ---------------------------------------------------------------------------- the sweep file
def read_sweep(source) -> dict:
    """The sweep's fixed settings, grid, evaluation budget and trials, all validated.

    Parameters
    ----------
    source : path or dict
        A TOML sweep file, or the same structure as a dict.

    Returns
    -------
    dict
        ``fixed``, ``grid``, ``evaluation`` and ``trials`` (a dict of trial name to its
        grid values, in grid order); raises ValueError naming the bad key or value.
    """
    name, beside = "the sweep", None
    if not isinstance(source, dict):
        path = Path(source)
        beside = path.parent
        if not path.is_file():
            raise FileNotFoundError(f"sweep file not found: {path}")
        name = str(path)
        try:
            source = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"sweep file {path} is not valid TOML: {error}") from None
    values = dict(source)
    grid = values.pop("grid", {})
    evaluation = values.pop("evaluation", {})
    _check_keys(name, values, grid, evaluation)
    if beside is not None:  # a model named relative to the sweep file, as a data file is
        if isinstance(values.get("init_model"), str):
            values["init_model"] = _file_beside(values["init_model"], beside)
        if isinstance(grid.get("init_model"), list):
            grid = {**grid, "init_model": [_file_beside(value, beside) if isinstance(value, str)
                                           else value for value in grid["init_model"]]}
    fixed = {key: _checked(name, key, value) for key, value in values.items()}
    grid = {key: [_checked(name, f"grid.{key}", v) for v in _values(name, key, options)]
            for key, options in grid.items()}
    if beside is not None:  # a data file named relative to the sweep file, from any directory
        if "dataset" in fixed:
            fixed["dataset"] = _data_file_beside(fixed["dataset"], beside)
        if "dataset" in grid:
            grid["dataset"] = [_data_file_beside(value, beside) for value in grid["dataset"]]
    evaluation = {**EVALUATION_DEFAULTS, **evaluation}
    for key, minimum in (("chains", 1), ("betas", 2), ("seed", 0)):
        value = evaluation[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{name}: evaluation.{key} must be an integer >= {minimum}, "
                             f"got {value!r}")
    if "family" in grid:  # an option no family of the grid takes would vanish from every trial
        for key in [key for key in {**fixed, **grid} if key != "family"]:
            if not any(key in applicable({"family": family, key: None})
                       for family in grid["family"]):
                raise ValueError(f"{name}: {key} applies to none of the grid's families "
                                 f"{grid['family']}: leave it out")
    trials = {}
    for point in itertools.product(*grid.values()):
        point = dict(zip(grid, point))
        if "family" in grid:  # families side by side: each trial takes what its family takes
            point = {key: value for key, value in point.items()
                     if key in applicable({**fixed, **point})}
        label = trial_name(point)
        try:
            Settings.from_mapping(trial_settings({"fixed": fixed, "grid": grid}, point),
                                  source=name)
        except ValueError as error:
            raise ValueError(f"{name}: grid point {label}: {error}") from None
        if trials.get(label, point) != point:
            raise ValueError(f"{name}: two grid points are both named {label}")
        trials[label] = point  # a point repeated without the options its family lacks: once
    return {"fixed": fixed, "grid": grid, "evaluation": evaluation, "trials": trials}


def trial_settings(spec: dict, point: dict) -> dict:
    """The settings of the trial at grid ``point``: the fixed ones, then the point's; where the
    grid holds several families, without the model options the trial's family does not take."""
    mapping = {**spec["fixed"], **point}
    return applicable(mapping) if "family" in spec["grid"] else mapping


def _data_file_beside(dataset: str, directory: Path) -> str:
    """A relative data file's path, absolute: beside the sweep file when it is there, else
    from the current directory; a named dataset (or a missing file, for the loader's
    message) as given."""
    path = Path(dataset).expanduser()
    if path.is_absolute() or dataset_name(dataset) in LOADERS:
        return dataset
    if (directory / path).is_file():
        return str((directory / path).resolve())
    # From the current directory: kept absolute, so that the sweep resumes from anywhere.
    return str(path.resolve()) if path.is_file() else dataset


def _file_beside(value: str, directory: Path) -> str:
    """A relative path, beside the sweep file when something is there by that name."""
    path = Path(value).expanduser()
    return str((directory / path).resolve()) if not path.is_absolute() and \
        (directory / path).exists() else value


def _check_keys(name, fixed, grid, evaluation):
    if not isinstance(grid, dict) or not isinstance(evaluation, dict):
        # ValueError like every other mistake in a sweep file: the CLI reports it in one line.
        raise ValueError(f"{name}: [grid] and [evaluation] must be tables")  # noqa: TRY004
    known = [key for key in SPECS if SPECS[key].group != "system"]
    for where, keys in (("", fixed), ("grid.", grid)):
        unknown = sorted(set(keys) - set(known))
        if "threads" in unknown:  # a setting of `irbm train`'s config file, not of a sweep's
            raise ValueError(f"{name}: threads is not a sweep-file setting: the sweep command "
                             "takes it for every trial (irbm sweep --threads N; Python: "
                             "run_sweep(threads=N))")
        tables = [key for key in unknown if isinstance(keys[key], dict)]
        if tables:  # a misspelt [grid] or [evaluation] header, or a setting made a table
            close = difflib.get_close_matches(tables[0], ("grid", "evaluation"), n=1)
            raise ValueError(f"{name}: [{where}{tables[0]}] is no table of a sweep file (its "
                             "tables: [grid], [evaluation])"
                             + (f"; did you mean [{close[0]}]?" if close else ""))
        if unknown:
            hints = "".join(closest_key(key, known) for key in unknown)
            raise ValueError(f"{name}: unknown settings {', '.join(where + k for k in unknown)}"
                             f"{hints} (known: {', '.join(known)}; threads is a sweep option)")
    both = sorted(set(fixed) & set(grid))
    if both:
        raise ValueError(f"{name}: {', '.join(both)} both fixed and in [grid]")
    unknown = sorted(set(evaluation) - set(EVALUATION_DEFAULTS))
    if unknown:
        raise ValueError(f"{name}: unknown keys in [evaluation]: {', '.join(unknown)} "
                         f"(known: {', '.join(EVALUATION_DEFAULTS)})")


def _values(name, key, options) -> list:
    if not isinstance(options, list) or not options:
        raise ValueError(f"{name}: grid.{key} must be a non-empty list, got {options!r}")
    if len(set(map(repr, options))) != len(options):
        raise ValueError(f"{name}: grid.{key} repeats a value: {options!r}")
    return options


def _checked(name, key, value):
    if isinstance(value, list) and not key.startswith("grid."):
        raise ValueError(f"{name}: {key} = {value!r} is a list at the top level: put it under "
                         "[grid] to sweep it, or give one value")
    try:
        return check_setting(key.removeprefix("grid."), value)
    except ValueError as error:
        raise ValueError(f"{name}: {key}: {error}") from None


def trial_name(point: dict) -> str:
    """A filesystem-safe directory name from the grid values, e.g. ``lr=0.05,l1=0.001``."""
    if not point:
        return "trial"
    text = ",".join(f"{key}={_short(value) if isinstance(value, str) else value}"
                    for key, value in point.items())
    return _UNSAFE.sub("_", text)[:200]


def _short(value: str) -> str:
    """A path's file name, or a run's model file named by its run ("run-a.model.safetensors"
    for run-a/model.safetensors): the runs of a grid share their files' names."""
    path = Path(value)
    return f"{path.parent.name}.{path.name}" if path.name in _RUN_MODEL_FILES else path.name


def _check_datasets(spec: dict) -> None:
    """Refuse an unknown dataset, a missing data file or a missing --init-model before any
    worker starts."""
    for dataset in dict.fromkeys(point.get("dataset", spec["fixed"].get("dataset"))
                                 for point in spec["trials"].values()):
        check_dataset(dataset)
    for model in dict.fromkeys(point.get("init_model", spec["fixed"].get("init_model"))
                               for point in spec["trials"].values()):
        if model is not None and not Path(model).exists():
            raise FileNotFoundError(f"init_model {model}: no such file (give a model saved by "
                                    "irbm.save, or a run directory or its model.safetensors)")


def _check_started_trials(out: Path, spec: dict) -> None:
    """Refuse, before anything runs, a sweep file that would go on in ``out`` otherwise than
    its trials started: a trial trained with another value of a setting this file gives (only
    ``epochs`` may change, and new grid points be added), or trials evaluated with another
    [evaluation]. Their rows would mix what the sweep's table shows as one."""
    if not sweep_table.is_sweep(out):
        return
    stored = sweep_table.read_marker(out)["evaluation"]
    if stored != spec["evaluation"] and any(runs.is_run(path) for path in out.iterdir()):
        changed = ", ".join(f"{key} {stored.get(key)} -> {value}"
                            for key, value in spec["evaluation"].items()
                            if stored.get(key) != value)
        raise ValueError(f"{out} evaluated its trials with another [evaluation] ({changed}), "
                         "and its table compares them under one: put it back, or sweep into "
                         "a new --out")
    for name, point in spec["trials"].items():
        trial = out / name
        if not runs.is_run(trial):
            continue
        mapping = trial_settings(spec, point)
        mapping["dataset"] = workflows.dataset_key(mapping["dataset"])
        given = Settings.from_mapping(mapping, source="the sweep").record()
        recorded = runs.read_settings(trial).record()
        changed = [f"{key} {recorded[key]} -> {given[key]}" for key in mapping
                   if SPECS[key].resume != "free" and key in recorded
                   and not workflows.unchanged_setting(key, recorded[key], given[key])]
        if changed:
            raise ValueError(f"{trial} was trained with other settings ({', '.join(changed)}): "
                             "a sweep goes on with the settings its trials started with (only "
                             "epochs may change); put them back, or sweep into a new --out")
        history = runs.read_json(trial / runs.HISTORY_FILE, default={"history": []})["history"]
        trained = history[-1]["epoch"] if history else 0
        if trained > given["epochs"]:  # the table would rank runs of different lengths
            raise ValueError(f"{trial} is trained to epoch {trained}, past epochs = "
                             f"{given['epochs']}: a sweep's epochs may only rise (its table "
                             "compares trials of one length); put it back, or sweep into a new "
                             "--out")


def _check_trial_data(todo: dict, out: Path, data_dir) -> None:
    """Load the data of the trials to run as they will (`irbm.workflows.training_data`), one
    dataset in memory at a time, and refuse the sweep before anything runs if any trial would
    fail on its data: data that is missing, split sizes it has too few rows for, or a started
    trial's data file changed since it was trained on it."""
    cache, loaded = {}, None
    for name, mapping in sorted(todo.items(), key=lambda item: str(item[1]["dataset"])):
        if mapping["dataset"] != loaded:  # the trials sorted by dataset: one held at a time
            cache.clear()
            loaded = mapping["dataset"]
        trial = out / name
        resuming = runs.is_run(trial) and (trial / ckpt.TRAINER_FILE).exists()
        settings = workflows.settings_for(trial, mapping)
        try:
            workflows.training_data(settings.resolved(), trial, data_dir, resuming=resuming,
                                    cache=cache)
        except (OSError, ValueError) as error:
            raise type(error)(f"trial {name}: {error}") from None


def _unguarded_script() -> str | None:
    """The script that called the sweep from a plain statement at its top level (not inside
    ``if __name__ == "__main__":`` or any other block), else None (an interactive session,
    ``python -c``, a call from any block). Dask starts a local cluster's workers as new
    interpreters that import the main script again: such a call would start a sweep in each,
    and the cluster fails with hundreds of lines of tracebacks that bury the cause. Only the
    plain case is refused: a guard may take many forms, and a block at the top level may hold
    one."""
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == "<module>"
                                     and frame.f_globals.get("__name__") == "__main__"):
        frame = frame.f_back
    script = None if frame is None else frame.f_globals.get("__file__")
    # A console's namespace can keep the __file__ of a script run in it earlier (IPython's
    # %run): only the frame of that script's own code is its top level.
    if not script or not Path(script).is_file() or \
            Path(frame.f_code.co_filename).resolve() != Path(script).resolve():
        return None
    try:
        tree = ast.parse(Path(script).read_text(), script)
    except (SyntaxError, ValueError, OSError):  # not Python source (a frozen entry point)
        return None
    for node in tree.body:
        if node.lineno <= frame.f_lineno <= node.end_lineno:
            plain = isinstance(node, (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign))
            return script if plain else None
    return None


def _repeated_trials(todo: dict, out: Path, others: list[str]) -> dict:
    """{new trial: earlier trial} for trials to start afresh whose settings (all but epochs
    and threads) are those of a run ``others`` names in ``out``."""
    def same(recorded: dict, given: dict) -> bool:
        # A run records the random stream its trainer resolved; None is that default.
        return all(recorded.get(name) == value for name, value in given.items()
                   if name not in ("epochs", "threads")
                   and not (name == "random_stream" and value is None))
    earlier = []
    for name in others:
        try:
            earlier.append((runs.read_settings(out / name).record(), name))
        except (OSError, ValueError, KeyError):  # a run of another irbm version: not compared
            continue
    repeated = {}
    for name, mapping in todo.items():
        if runs.is_run(out / name):
            continue
        given = Settings.from_mapping(mapping).resolved().record()
        match = next((other for record, other in earlier if same(record, given)), None)
        if match is not None:
            repeated[name] = match
    return repeated


@contextlib.contextmanager
def _sweep_lock(out: Path):
    """Hold ``out``'s sweep lock while a sweep runs into it: a second sweep there would train
    the same trials at the same time, each refused by the other's run locks and reported
    failed though the other finished it."""
    _check_out(out)
    made = not out.exists()
    runs.check_writable(out)
    out.mkdir(parents=True, exist_ok=True)
    lock = hold_lock(out / SWEEP_LOCK_FILE, "running a sweep into it")
    try:
        yield
    finally:
        (out / SWEEP_LOCK_FILE).unlink(missing_ok=True)
        lock.close()
        if made and not any(out.iterdir()):  # refused before writing: as if never begun
            out.rmdir()


# ---------------------------------------------------------------------------- one trial
def is_finished(trial_dir, epochs: int) -> bool:
    """Whether the trial trained ``epochs`` epochs and has an evaluation of that model."""
    trial_dir = Path(trial_dir)
    try:
        if not (runs.is_run(trial_dir) and (trial_dir / ckpt.TRAINER_FILE).exists()):
            return False
        history = runs.read_json(trial_dir / runs.HISTORY_FILE, default={"history": []})
        trained = history["history"][-1]["epoch"] if history["history"] else 0
        return trained >= epochs and runs.current_evaluation(trial_dir)[1] is None
    except (FileNotFoundError, ValueError, KeyError):
        return False


def _train_and_evaluate(mapping, trial_dir, evaluation, threads, data_dir, device) -> None:
    """What a trial does: train (or resume) to its epochs, then evaluate by [evaluation]."""
    settings = workflows.settings_for(trial_dir, {**mapping, "threads": threads})
    if not is_finished(trial_dir, settings.epochs):
        workflows.train_run(settings, trial_dir, data_dir=data_dir, device=device,
                            epoch_lines=False, echo=logger.debug)
        workflows.evaluate_run(trial_dir, n_chains=evaluation["chains"],
                               n_betas=evaluation["betas"], seed=evaluation["seed"],
                               data_dir=data_dir, device=device, progress=False,
                               echo=logger.debug, threads=threads)


def run_trial(mapping: dict, trial_dir, evaluation: dict, *, threads: int = 1,
              data_dir=None, device=None) -> dict:
    """Train (or resume) and evaluate one trial; what a Dask task runs.

    Errors are recorded in the trial directory and returned, not raised, so that Dask retries
    only what is worth retrying: a lost worker, not a bad setting.

    Returns
    -------
    dict
        ``status`` ("done" or "failed"), ``trial`` and ``error`` when it failed.
    """
    import torch
    trial_dir = Path(trial_dir)
    # One thread per trial: the cluster's parallelism is across trials, and more threads on
    # busy cores oversubscribe them (irbm._threads).
    torch.set_num_threads(threads)
    # Only the outcome is written, after train_run: a directory holding nothing but an old
    # status is "not empty and not a run", which train_run refuses to start in.
    for name in (sweep_table.ERROR_FILE, sweep_table.STATUS_FILE):
        (trial_dir / name).unlink(missing_ok=True)
    status = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}

    def say_warning(message, category, filename, lineno, file=None, line=None):
        # In a worker's stream, a warning must say which trial it is about (the iRBM's cap
        # came as Python's file and line, no trial named: a walkthrough).
        logger.warning("trial %s: %s", trial_dir.name, " ".join(str(message).split()))
    try:
        with warnings.catch_warnings():
            warnings.showwarning = say_warning
            _train_and_evaluate(mapping, trial_dir, evaluation, threads, data_dir, device)
    except Exception as error:  # noqa: BLE001 -- any failure of a trial is recorded, not fatal
        trial_dir.mkdir(parents=True, exist_ok=True)
        (trial_dir / sweep_table.ERROR_FILE).write_text(traceback.format_exc())
        message = f"{type(error).__name__}: {error}"
        runs.write_json(trial_dir / sweep_table.STATUS_FILE,
                        {**status, "status": "failed", "error": message})
        return {"trial": trial_dir.name, "status": "failed", "error": message}
    runs.write_json(trial_dir / sweep_table.STATUS_FILE,
                    {**status, "status": "done", "finished": time.time()})
    return {"trial": trial_dir.name, "status": "done"}


# ---------------------------------------------------------------------------- the sweep
def _check_out(out: Path) -> None:
    """Refuse a file, or a non-empty directory that is not a sweep, as a sweep's --out."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a sweep directory: give a new directory")
    if out.is_dir() and any(path.name != SWEEP_LOCK_FILE for path in out.iterdir()) \
            and not sweep_table.is_sweep(out):
        raise ValueError(f"{out} is not empty and not an irbm sweep directory (no "
                         f"{sweep_table.MARKER_FILE}); choose a new --out")


def prepare_sweep_directory(out, spec: dict) -> Path:
    """Make ``out`` a sweep directory for ``spec``: refuse a file or a non-empty directory
    that is not a sweep; (re)write the marker."""
    out = Path(out).resolve()
    _check_out(out)
    runs.check_writable(out)
    runs.write_json(out / sweep_table.MARKER_FILE, {
        "format": sweep_table.SWEEP_FORMAT, "version": sweep_table.SWEEP_VERSION,
        "fixed": spec["fixed"], "grid": spec["grid"], "evaluation": spec["evaluation"],
        "trials": list(spec["trials"]), "grid_values": spec["trials"]})
    return out


def _connect(workers, scheduler):
    """(client, cluster or None): a client of ``scheduler``, or of a new LocalCluster of
    ``workers`` single-threaded worker processes (default: the free cores)."""
    from dask.distributed import Client, LocalCluster

    from ._threads import default_threads
    if scheduler is not None:
        return Client(scheduler), None
    workers = default_threads() if workers is None else int(workers)
    if workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers}")
    # Processes, not threads: torch holds the GIL in places and a killed trial must not take
    # the others with it. Port 0: never collide with another sweep's dashboard.
    cluster = None
    try:
        with _workers_leave_interrupts_to_us():
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   dashboard_address=":0")
        return Client(cluster), cluster
    except BaseException:  # Ctrl-C held back while the workers started lands here
        if cluster is not None:
            _close_quietly(None, cluster)
        raise


def _close_quietly(client, cluster) -> None:
    """Close the client and the local cluster; workers still in a trial are cancelled and
    killed, which Dask warns about in lines that would bury the sweep's own message."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)  # every logger, whatever levels Dask's have set
    try:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    finally:
        logging.disable(previous)


# Dask's log level in the worker processes, read as they start (before any configuration
# reaches them), and the warnings of the resource tracker (a process of this one's, started
# with the cluster) about the semaphores of workers killed mid-trial.
_QUIET_WORKERS = {"DASK_LOGGING__DISTRIBUTED": "error"}
_QUIET_TRACKER = "ignore::UserWarning:multiprocessing.resource_tracker"


@contextlib.contextmanager
def _workers_leave_interrupts_to_us():
    """Worker processes started inside ignore SIGINT, log errors only, and the semaphores of
    those killed go unremarked: Ctrl-C, which reaches every process of the terminal's group,
    is this process's to handle, by closing the cluster, in one line (each trial resumes from
    its checkpoint).

    SIGINT is ignored meanwhile, which the processes started inherit through exec (Python
    keeps an ignored SIGINT ignored), and blocked in this thread and the threads it starts,
    where Linux keeps one that arrives pending: it is raised on leaving, once the cluster can
    be closed (a half-started one fails Dask's own closing at exit). A thread started before,
    such as a library's native one, may take it instead, and then it is lost: Ctrl-C again
    once the workers are up. Workers restarted later ignore it once Dask's preload
    `irbm._dask_worker` has run in them."""
    import dask
    in_main_thread = threading.current_thread() is threading.main_thread()
    block = in_main_thread and hasattr(signal, "pthread_sigmask")  # POSIX
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if block else None
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN) if in_main_thread else None
    warnings_before = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [warnings_before, _QUIET_TRACKER]))
    try:
        with dask.config.set({"distributed.worker.preload": ["irbm._dask_worker"],
                              "distributed.nanny.pre-spawn-environ": {
                                  **dask.config.get("distributed.nanny.pre-spawn-environ"),
                                  **_QUIET_WORKERS}}):
            yield
    finally:
        if warnings_before is None:
            os.environ.pop("PYTHONWARNINGS", None)
        else:
            os.environ["PYTHONWARNINGS"] = warnings_before
        if in_main_thread:
            signal.signal(signal.SIGINT, handler)
        if block:  # a Ctrl-C kept pending is raised here
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _dashboard(client, local: bool) -> str | None:
    # A local scheduler serves its status page only with bokeh installed (the link would
    # answer 404 otherwise); a remote one's environment is not ours to inspect.
    if local and importlib.util.find_spec("bokeh") is None:
        return None
    try:
        link = client.dashboard_link if "dashboard" in client.scheduler_info().get(
            "services", {}) else None
        if link and not local:  # a remote scheduler's page may answer 404 (no bokeh there)
            with urllib.request.urlopen(link, timeout=2):
                pass
        return link
    except Exception:  # noqa: BLE001 -- the link is a convenience only
        return None


def _valid_nll(trial_dir) -> float:
    try:
        record, stale = runs.current_evaluation(trial_dir)
        return record["nll"]["valid"]["mean"] if stale is None else math.inf
    except (FileNotFoundError, ValueError, KeyError):
        return math.inf


def run_sweep(sweep, out, *, workers=None, scheduler=None, data_dir=None, threads: int = 1,
              device=None, progress: bool = True, echo=None) -> dict:
    """Run every trial of a sweep on Dask and write its table.

    Parameters
    ----------
    sweep : path or dict
        The sweep file (module docstring) or its content.
    out : path
        The sweep directory: new, empty, or a sweep to resume.
    workers : int, optional
        Worker processes of the local cluster (default: the free cores,
        `irbm._threads.default_threads`; on a CUDA device, one: each process would hold its own
        context on the same GPU). Ignored with ``scheduler``.
    scheduler : str, optional
        Address of an existing Dask scheduler (``tcp://host:8786``); its workers must see
        ``out`` (a shared filesystem) and import this irbm.
    data_dir : path, optional
    threads : int
        Torch threads of each trial.
    device : str, optional
        Torch device of each trial.
    progress : bool
        A progress bar (trials done / running / failed, best validation NLL).
    echo : callable, optional
        Receives the messages (default: the module's logger).

    Returns
    -------
    dict
        ``tables`` (the Markdown, HTML and CSV paths), ``done`` and ``skipped`` (counts of
        the trials run to their end by this call and of those finished before it), ``failed``
        (the names of the trials that failed; their ``error.txt`` says why).

    Local workers import the calling script again: call it under ``if __name__ ==
    "__main__":`` (refused otherwise, before any work).
    """
    from tqdm.auto import tqdm
    say = echo or logger.info
    if scheduler is None and (script := _unguarded_script()) is not None:
        raise ValueError(f"{script} calls the sweep at its top level: the local cluster's "
                         "workers import that script again, and each would start a sweep; "
                         'put the call under `if __name__ == "__main__":`')
    spec = read_sweep(sweep)
    # The data directory this command finds the data in ($IRBM_DATA_DIR where none is named)
    # goes to the trials by name: a worker of another machine or shell lacks the variable,
    # and without it a trial would try to download what this command checked was here.
    if data_dir is None:
        data_dir = os.environ.get("IRBM_DATA_DIR") or None
    options = {"threads": check_setting("threads", threads), "device": device,
               "data_dir": None if data_dir is None else str(Path(data_dir).resolve())}
    _check_datasets(spec)
    out = Path(out).resolve()
    _check_started_trials(out, spec)
    with _sweep_lock(out):
        todo = {}
        for name, point in spec["trials"].items():
            mapping = trial_settings(spec, point)
            # A data file relative to here means nothing to a worker in another directory.
            mapping["dataset"] = workflows.dataset_key(mapping["dataset"])
            if not is_finished(out / name, Settings.from_mapping(mapping).epochs):
                todo[name] = mapping
        if scheduler is None:  # a remote cluster's workers may see data this machine lacks
            _check_trial_data(todo, out, options["data_dir"])
        prepare_sweep_directory(out, spec)
        others = sorted(path.name for path in out.iterdir()
                        if path.name not in spec["trials"] and runs.is_run(path))
        if others:
            say(f"{len(others)} trial(s) in {out} from an earlier grid are not in this sweep "
                f"file and are left out of its table: {', '.join(others)}")
            for name, earlier in _repeated_trials(todo, out, others).items():
                say(f"note: trial {name} has the settings of the earlier grid's {earlier} "
                    "(a grid key added at its default value names it anew): it trains again "
                    f"from the start; to keep {earlier}'s work, leave the key out of the grid "
                    "or rename that directory to the new name")
        skipped = len(spec["trials"]) - len(todo)
        say(f"sweep of {len(spec['trials'])} trials into {out}: {skipped} finished already, "
            f"{len(todo)} to run")
        failed = []
        if todo:
            done_before = [name for name in spec["trials"] if name not in todo]
            failed = _run_on_dask(
                todo, out, spec["evaluation"], options, workers, scheduler, say,
                lambda: tqdm(total=len(todo), unit="trial", disable=not progress), done_before)
        tables = sweep_table.write_table(out)
    say(f"sweep table: {', '.join(map(str, tables))}")
    return {"tables": tables, "done": len(todo) - len(failed), "failed": failed,
            "skipped": skipped}


def _run_on_dask(todo, out, evaluation, options, workers, scheduler, say,
                 new_bar, done_before=()) -> list[str]:
    """Submit one task per trial, follow them with the progress bar ``new_bar()``, and return
    the names of the failed ones; the best validation NLL so far counts the trials
    ``done_before`` (finished by an earlier call) too."""
    from dask.distributed import as_completed
    if workers is None and str(options["device"] or "").startswith("cuda"):
        workers = 1
    # The bar after the cluster: its monitor thread would take a Ctrl-C that the cluster's
    # start holds back (`_workers_leave_interrupts_to_us`).
    client, cluster = _connect(workers, scheduler)
    bar = new_bar()
    # Lines printed under a live progress bar would break it: tqdm.write keeps it whole.
    note = say if bar.disable else bar.write
    try:
        link = _dashboard(client, local=cluster is not None)
        workers = client.scheduler_info()["workers"].values()
        slots = sum(worker["nthreads"] for worker in workers)
        note(f"Dask: {len(workers)} workers"
            + (f"; dashboard {link}" if link else ""))
        futures = {client.submit(run_trial, mapping, str(out / name), evaluation, **options,
                                 pure=False, retries=2, key=f"irbm-trial {name} {out}"): name
                   for name, mapping in todo.items()}
        failed = []
        best = min(((_valid_nll(out / name), name) for name in done_before),
                   default=(math.inf, None))
        if not math.isfinite(best[0]):
            best = (math.inf, None)
        for finished, future in enumerate(as_completed(futures), 1):
            name = futures[future]
            try:
                result = future.result()
            except Exception as error:  # noqa: BLE001 -- e.g. KilledWorker after the retries
                result = {"status": "failed", "error": f"{type(error).__name__}: {error}"}
                (out / name).mkdir(exist_ok=True)
                runs.write_json(out / name / sweep_table.STATUS_FILE, result)
            if result["status"] == "failed":
                failed.append(name)
                note(f"trial {name} failed: {result['error']}")
            nll = math.inf if result["status"] == "failed" else _valid_nll(out / name)
            if nll < best[0]:
                best = (nll, name)
            # A worker may hold a queued task besides the one it runs: at most one per thread.
            running = min(slots, sum(map(len, client.processing().values())))
            bar.update(1)
            bar.set_postfix(running=running, failed=len(failed),
                            best=f"{best[0]:.3f}" if best[1] else "-")
            note(f"{finished}/{len(todo)} trials over, {running} running, {len(failed)} failed; "
                + (f"best validation NLL {best[0]:.3f} ({best[1]})" if best[1] else
                   "no validation NLL yet"))
        return failed
    finally:
        bar.close()
        _close_quietly(client, cluster)
