"""Train, evaluate, sample and plot run directories from Python: what the `irbm` subcommands
and `irbm demo` call (the evaluations live in `irbm._evaluate_run`, given here).

Every function checks everything it can (settings, directory, data, model size, device) before
it writes anything, and raises ValueError or OSError with a one-line reason. Messages go to
``echo`` when one is given (the command line passes ``print``), else to `logging`.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from . import checkpoint as ckpt
from . import runs
from ._evaluate_run import cross_check_run, evaluate_run, floor_run, independent_pixels_nll
from ._io import hold_lock
from .datasets import LOADERS, dataset_name, load_dataset
from .models import build_model, check_device
from .profiles import PROFILES, merge_settings
from .report import MARKER_FILE as REPORT_MARKER
from .report import write_report
from .sampling import sample
from .settings import (
    SPECS,
    Settings,
    check_memory,
    check_model_size,
    check_setting,
    refuse_foreign_options,
)
from .sweep_table import expand_sweeps
from .training import AVERAGE_DIR, Callback, CheckpointEvery, Trainer

# What `from irbm.workflows import *` gives, and the module's public names.
__all__ = [
    "settings_for", "train_run", "training_data", "evaluate_run", "cross_check_run", "floor_run",
    "sample_run", "plot_run", "report_runs", "independent_pixels_nll"]

logger = logging.getLogger(__name__)


def _is_named_dataset(name) -> bool:
    return dataset_name(name) in LOADERS


def unchanged_setting(name: str, recorded, given) -> bool:
    """Whether a recorded setting and a given one agree: a named dataset in any spelling
    (``Digits``, recorded before names were keyed, is ``digits``); no random stream given
    (the default) agrees with the one the run recorded; no split seed is seed 0."""
    if name == "dataset" and _is_named_dataset(recorded):
        return dataset_name(recorded) == dataset_name(given)
    if name == "random_stream" and given is None:  # the default: the stream the run has
        return True
    if name == "split_seed":  # unset is seed 0: the same split
        return (recorded or 0) == (given or 0)
    return recorded == given


def dataset_key(name) -> str:
    """A named dataset's loader key (Digits -> digits: a run resumes under any spelling), or
    an existing file's absolute path (so that the run works from any directory); anything
    else as given, for the loader's error message."""
    if _is_named_dataset(name):
        return dataset_name(name)
    path = Path(name).expanduser()
    return str(path.resolve()) if path.exists() else str(name)


# ---------------------------------------------------------------------------- train
def settings_for(out, given: dict) -> Settings:
    """The settings of training into ``out``: the defaults, then the run's recorded settings
    when ``out`` is a run to resume, then ``given`` (a config file's values updated by the
    command line's).

    A value that the run's model was built with cannot change: that is refused here, the
    family before ``given`` is combined with settings of another family, the rest after each
    given value is checked alone and against the run's family (an invalid value is named as
    such, not as a change, nor as a clash with a recorded value the user never gave)."""
    resumable = runs.is_run(out) and (Path(out) / ckpt.TRAINER_FILE).exists()
    recorded = runs.read_settings(out).record() if resumable else {}
    _refuse_fixed_changes(out, recorded, {"family": given["family"]} if "family" in given
                          else {})
    # Checked and normalized (a relative path made absolute, as the run recorded it).
    given = {name: check_setting(name, value) if name in SPECS else value
             for name, value in given.items()}
    if not recorded:
        return Settings.from_mapping(merge_settings(recorded, given), source="the settings")
    refuse_foreign_options(recorded["family"], given)
    try:
        settings = Settings.from_mapping(merge_settings(recorded, given), source="the settings")
    except ValueError:
        # A value invalid for the family on its own (an iRBM's beta <= 1) is named so; one
        # that clashes only with a recorded value (n_hidden above the run's max_hidden) is a
        # change of what the run's model was built with.
        Settings.from_mapping({"family": recorded["family"], "dataset": recorded["dataset"],
                               **given}, source="the settings")
        _refuse_fixed_changes(out, recorded, given)
        raise
    _refuse_fixed_changes(out, recorded, given)
    return settings


def _refuse_fixed_changes(out, recorded: dict, new: dict):
    fixed = [name for name, value in new.items() if name in recorded
             and SPECS[name].resume == "fixed" and recorded[name] != value]
    if fixed:
        built = ", ".join(f"{name} {recorded[name]}" for name in fixed)
        raise ValueError(f"{out} holds a model built with {built}; it cannot be changed on "
                         "resume (use a new --out)")


def _check_output(out: Path, force: bool) -> bool:
    """Whether training into ``out`` resumes a run; refuse what must not be touched."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a run directory: give a new directory")
    if out.name == AVERAGE_DIR and runs.is_run(out.parent):
        # The run writes its running average there whenever it trains with --average: a run of
        # its own inside was later overwritten by it, its files mixed with another's.
        raise ValueError(f"{out} is where the run {out.parent} writes its running average "
                         f"(--average), not a run to train: train the run itself (--out "
                         f"{out.parent}), or give another --out")
    if not out.exists():
        return False
    for marker, kind, way in ((runs.SWEEP_MARKER_FILE, "a sweep", "raise epochs in its sweep "
                               "file and run irbm sweep again to train its trials further"),
                              (REPORT_MARKER, "a report", "reports are rewritten by irbm report")):
        if (out / marker).is_file() and not runs.is_run(out):  # --force or not
            raise ValueError(f"{out} is {kind} directory ({marker}): train into a new --out "
                             f"({way})")
    if not runs.is_run(out):
        written = [name for name in runs.RUN_FILES if (out / name).exists()]
        if written:  # even with --force: training would overwrite them, or take them for its own
            raise ValueError(f"{out} holds {', '.join(written)} but no {runs.MARKER_FILE} (a "
                             "run written from Python, one whose marker was lost, or files "
                             "of your own), which training here would overwrite or take for "
                             "its own: choose a new --out, or move those files first")
        if any(out.iterdir()) and not force:
            raise ValueError(f"{out} is not empty and not an irbm run directory (no "
                             f"{runs.MARKER_FILE}); refusing to write into it: choose a new "
                             "--out, or pass --force (Python: force=True)")
        return False
    if (out / ckpt.TRAINER_FILE).exists():
        return True
    results = [name for name in runs.RESULT_FILES if (out / name).exists()]
    if results:
        raise ValueError(f"{out} holds {', '.join(results)} but no {ckpt.TRAINER_FILE}: the run "
                         "cannot be resumed and is not restarted over its results (restore "
                         "the checkpoint, or train into a new --out)")
    return False  # created but stopped before its first checkpoint: start it again


class _RecordSettings(Callback):
    """Rewrite config.json with the resumed run's settings once its first epoch succeeded, so
    a run that fails at once is left as it was."""

    def __init__(self, path, record):
        self.path, self.record = path, record

    def on_epoch_end(self, trainer, metrics):
        if self.record is not None:
            runs.write_json(self.path, self.record)
            self.record = None


def train_run(settings: Settings, out, *, data_dir=None, device=None, force=False, echo=None,
              epoch_lines: bool = True) -> Trainer:
    """Train a run directory ``out`` with ``settings``, or resume it when it is a run.

    Parameters
    ----------
    settings : Settings
        On resume, they must equal the recorded ones (`runs.read_settings`) except ``epochs``
        and ``threads``; other changes need ``force``, and the model's cannot change.
    out : path
        A new or empty directory, or a run to resume. A non-empty directory that is not a run
        is refused unless ``force``; a run with results but no checkpoint is refused.
    data_dir : path, optional
        Where the dataset files are (see `irbm.datasets.load_dataset`).
    device : str, optional
    force : bool
    echo : callable, optional
        Receives the messages (default: the module's logger).
    epoch_lines : bool
        Also send one line per epoch to ``echo``.

    Returns
    -------
    Trainer
        After training; raises `runs.TrainingDiverged` at the first epoch whose values are
        not finite or grew by orders of magnitude (`runs.StopOnDivergence`).
    """
    if not isinstance(settings, Settings):
        raise TypeError(f"train_run takes a Settings (irbm.settings.Settings(family=..., "
                        f"dataset=..., ...), or settings_for(out, mapping)), got "
                        f"{type(settings).__name__}")
    say = echo or logger.info
    check_device(device)
    out = Path(out)
    resuming = _check_output(out, force)
    if resuming:  # before the settings: a checkpoint of another run would be blamed on them
        try:
            metadata = ckpt.read_checkpoint(out / ckpt.TRAINER_FILE)[1]
        except ckpt.CheckpointError:
            metadata = {}  # unreadable: Trainer.from_checkpoint says why, below
        runs.check_recorded_model(out, metadata.get("model"), ckpt.TRAINER_FILE)
    settings = replace(settings, dataset=dataset_key(settings.dataset))
    initial = origin = None
    if settings.init_model is not None and not resuming:  # a resume has its checkpoint
        settings, initial, origin = _initial_model(settings, device)
    settings = settings.resolved()
    forced = _check_resumed_settings(out, settings, force) if resuming else {}
    whole = training_data(settings, out, data_dir, resuming=resuming)
    dataset = whole.subset(settings.train_size, settings.valid_size, settings.test_size)
    if initial is not None and initial.n_visible != dataset.n_visible:
        raise ValueError(f"--init-model {settings.init_model} has {initial.n_visible} visible "
                         f"units; {settings.dataset} has {dataset.n_visible} values per row")
    record = {"settings": settings.record(),
              "dataset": {"name": dataset.name, "n_visible": dataset.n_visible,
                          "image_shape": list(dataset.image_shape),
                          "pixel_order": dataset.pixel_order,
                          **runs.data_record(whole, _is_named_dataset(settings.dataset))}}
    if resuming:
        n_visible = runs.read_json(out / runs.CONFIG_FILE)["dataset"]["n_visible"]
        if n_visible != dataset.n_visible:
            raise ValueError(f"{settings.dataset} has {dataset.n_visible} values per row; the "
                             f"model in {out} has {n_visible} visible units")
        trainer = Trainer.from_checkpoint(out, device=device, progress=False, force=force,
                                          **settings.training_options())
        if settings.epochs < trainer.epoch:  # nothing to train, and files not to rewrite
            raise ValueError(f"{out} is at epoch {trainer.epoch}; --epochs {settings.epochs} "
                             "would not train it: raise --epochs to train further (the run is "
                             "left as it is)")
        if forced and settings.epochs == trainer.epoch:  # a change no epoch would apply
            raise ValueError(f"{out} is at epoch {trainer.epoch} and --epochs "
                             f"{settings.epochs} trains nothing, so --force's changes ("
                             + ", ".join(f"{name} {old} -> {new}"
                                         for name, (old, new) in forced.items())
                             + ") would apply to no epoch: raise --epochs (the run is left as "
                             "it is)")
        message = (f"resuming {out} at epoch {trainer.epoch} "
                   f"({trainer.model.n_hidden} hidden units)")
        # config.json holds the settings now in force; what --force changed, and from which
        # epoch, is kept beside them so the record still tells how the run was trained.
        previous = runs.read_json(out / runs.CONFIG_FILE)
        record["forced"] = previous.get("forced", [])
        if "initial_model" in previous:  # what the run started from stays in its record
            record["initial_model"] = previous["initial_model"]
        if forced:
            record["forced"].append({"from_epoch": trainer.epoch + 1, "changes": {
                name: [old, new] for name, (old, new) in forced.items()}})
            message += ("\n--force: " + ", ".join(f"{name} {old} -> {new}" for name, (old, new)
                                                   in forced.items())
                        + f" from epoch {trainer.epoch + 1} (recorded in config.json)")
        averaged = out / AVERAGE_DIR
        if settings.eval_every and settings.average and settings.epochs > trainer.epoch \
                and trainer.epoch >= settings.eval_every \
                and not (averaged / runs.VALIDATION_FILE).exists():
            # A run begun before averaged models were validated: its best is of part of it.
            message += (f"\nnote: the averaged models before epoch {trainer.epoch + 1} were "
                        "never validated (the irbm that trained them validated the raw model "
                        f"alone): {averaged / runs.BEST_FILE} will be the best of those "
                        "validated from here on")
        if settings.epochs > trainer.epoch and (out / runs.BRACKET_WORK_DIR).is_dir():
            # Said before training, not found after it at the bracket's next run.
            message += (f"\nnote: {out / runs.BRACKET_WORK_DIR} holds an unfinished bracket of "
                        f"the model at epoch {trainer.epoch}; training changes the model, so "
                        "that work will be stale (finish it first with the `irbm evaluate "
                        "--bracket` command that started it, or delete it)")
    else:
        trainer = _new_trainer(settings, dataset.n_visible, device, initial)
        name = trainer.model.display_name
        article = "an" if name[:1].lower() in "aeio" or name[:1] in "FHLMNRSX" else "a"
        message = f"training {article} {name} on {dataset!r} into {out}"
        if initial is not None:  # what the run started from, beside its settings
            record["initial_model"] = origin
            converted = (f"; {origin['dtype']}, trained in {settings.dtype}"
                         if origin["dtype"] != settings.dtype else "")
            message += (f"\nstarting from {origin['file']} ({initial.n_hidden} hidden units"
                        f"{converted})")
        if settings.profile != "irbm":  # the rules it sets are otherwise only in config.json
            message += f"\nprofile {settings.profile}: " + ", ".join(
                f"{rule} {getattr(settings, rule)}" for rule in PROFILES[settings.profile])
        if settings.batch_size > len(dataset.train):  # legal, but rarely what was meant
            message += (f"\nnote: --batch-size {settings.batch_size} exceeds the "
                        f"{len(dataset.train)} training rows: one update per epoch, on all "
                        "of them")
    # The stream the trainer resolved (None: the device's default), so that config.json names
    # the generator the run draws from.
    record["settings"]["random_stream"] = trainer.config.random_stream
    ckpt.model_metadata(trainer.model)  # a family of one's own that checkpoints cannot rebuild
    # Everything is checked: from here on, files are written.
    runs.check_writable(out)
    if not resuming:
        runs.create_run(out, record)
    # A second process training into the same directory would interleave its checkpoints.
    lock = hold_lock(out / runs.TRAIN_LOCK_FILE, "training this run")
    try:
        say(message)
        train = torch.as_tensor(dataset.train)
        valid = torch.as_tensor(dataset.valid) if len(dataset.valid) else None
        trainer.fit(train, settings.epochs, valid=valid, threads=settings.threads,
                    callbacks=_callbacks(settings, out, train, valid,
                                         record if resuming else None,
                                         say if epoch_lines else None))
    finally:
        (out / runs.TRAIN_LOCK_FILE).unlink(missing_ok=True)
        lock.close()
    say(f"done: epoch {trainer.epoch}, {trainer.model.n_hidden} hidden units; model in "
        f"{out / ckpt.MODEL_FILE}")
    return trainer


def _check_resumed_settings(out: Path, settings: Settings, force: bool) -> dict:
    """Settings may differ from the run's recorded ones only where their policy allows;
    returns those ``force`` lets change, {name: (recorded, given)}."""
    recorded = runs.read_settings(out).record()
    _refuse_fixed_changes(out, recorded, settings.record())
    trained_on = recorded.get("dataset")
    if not _is_named_dataset(settings.dataset) and not Path(settings.dataset).exists():
        # Said as it is: a missing file read as a change of data, which --force would not mend.
        raise ValueError(f"{settings.dataset}: no such data file (the run {out} was trained "
                         f"on {trained_on}): give the path of its data file")
    if trained_on is not None and dataset_name(trained_on) != dataset_name(settings.dataset) and (
            _is_named_dataset(trained_on) or _is_named_dataset(settings.dataset)):
        raise ValueError(f"{out} was trained on {trained_on}; a run cannot change its data "
                         f"on resume (train on {settings.dataset} with a new --out)")
    changed = {name: (old, new) for name, old in recorded.items()
               if SPECS[name].resume == "force"
               and not unchanged_setting(name, old, new := getattr(settings, name))}
    if changed and not force:
        details = ", ".join(f"{k}: {a} -> {b}" for k, (a, b) in changed.items())
        flags = ", ".join(  # as given: a boolean turned off is --no-NAME
            f"--no-{name.replace('_', '-')}" if SPECS[name].kind is bool and not new
            else SPECS[name].flag
            for name, (_, new) in changed.items() if not SPECS[name].positional)
        # A data file may have moved: --force then goes on, the file's sha256 checked.
        moved = (" (if the data file only moved, --force goes on once its contents are "
                 "checked)" if "dataset" in changed else "")
        raise ValueError(f"refusing to resume {out} with different settings ({details}): "
                         + (f"leave {flags} out to resume it as trained, " if flags else "")
                         + f"train into a new --out, or pass --force to change them{moved}")
    return changed


def training_data(settings: Settings, out, data_dir=None, *, resuming: bool, cache=None):
    """The whole dataset (before any subset) `train_run` trains ``out`` on, checked as it
    checks it before any write: a resumed run reads the rows it was trained on, from where
    they came unless ``data_dir`` says otherwise, refused unless their sha256 is the recorded
    one; a new run's split sizes must fit the rows (a resumed run goes on with the rows it
    started with). ``settings.dataset`` as `dataset_key` gives it; ``cache`` (a dict) keeps
    the datasets loaded, for callers that check many runs (a sweep's trials)."""
    # A resumed run reads the data it was trained on: from where it came, checked by sha256.
    data_dir = runs.run_data_dir(out, data_dir) if resuming else data_dir
    options = runs.data_options(settings)
    key = (settings.dataset, str(data_dir), repr(sorted(options.items())))
    cache = {} if cache is None else cache
    if key not in cache:
        cache[key] = load_dataset(settings.dataset, data_dir=data_dir, **options)
    whole = cache[key]
    if resuming:
        runs.check_run_data(out, whole)
    else:
        _check_split_sizes(settings, whole)
    return whole


def _new_trainer(settings: Settings, n_visible: int, device, initial=None) -> Trainer:
    """A trainer of a new model, whose size is checked against the memory first, or of
    ``initial`` (`_initial_model`)."""
    if initial is None:
        check_model_size(settings.n_hidden or 1, n_visible, settings.dtype, device)
        initial = build_model(settings.model_config(n_visible),
                              dtype=getattr(torch, settings.dtype), device=device)
        initial.reset_parameters(torch.Generator().manual_seed(settings.seed))
    return Trainer(initial, device=device, progress=False, **settings.training_options())


def _initial_model(settings: Settings, device) -> tuple[Settings, object, dict]:
    """(settings with the family options they leave unset taken from the model, the model in
    the settings' dtype, what it came from) of ``settings.init_model``: a model file, or a run
    directory's best model (else its latest). ValueError when it is not a model of the
    settings' family, an option given differs from the model's, or ``visible_init="data"``
    would replace its visible biases."""
    path = Path(settings.init_model)  # absolute: Settings keeps paths so
    if not path.exists():
        raise FileNotFoundError(f"--init-model {path}: no such file (give a model saved by "
                                "irbm.save, or a run directory or its model.safetensors)")
    if path.is_dir() and not runs.is_run(path):
        raise ValueError(f"--init-model {path} is a directory but not an irbm run (no "
                         f"{runs.MARKER_FILE}): give a run directory, or a .safetensors file "
                         "saved by irbm.save")
    try:
        if path.is_dir():
            model, source = runs.run_model(path, which="best", device=device)
            path, digest = path / source.file, source.sha256
        else:
            model = ckpt.load(path, device=device)
            digest = runs.model_digest(model)  # of the model as saved, whatever the dtype
    except ckpt.CheckpointError as error:
        raise ValueError(f"--init-model {path}: {error}; give a model saved by irbm.save (a "
                         ".safetensors file) or a run directory (data goes in DATASET)") from None
    origin = {"file": str(path), "model_sha256": digest,
              "dtype": str(model.dtype).removeprefix("torch.")}
    if model.family != settings.family:
        raise ValueError(f"--init-model {path} holds a model of the family {model.family}, "
                         f"and this run's is {settings.family}: train {model.family}")
    taken = {name: value for name, value in model.config().items()
             if name in SPECS and SPECS[name].family_option}
    differ = [f"{name} {given} (the model's: {value})" for name, value in taken.items()
              if (given := getattr(settings, name)) is not None and (
                  value is None or not math.isclose(given, value, rel_tol=1e-6))]
    if differ:
        raise ValueError(f"--init-model {path} is not the model these settings describe: "
                         f"{', '.join(differ)}; leave those options out (the model's are taken)")
    if settings.visible_init == "data":
        raise ValueError("--visible-init data would set the visible biases of --init-model "
                         f"{path} to the data's log-odds: leave it out")
    unset = {name: value for name, value in taken.items() if getattr(settings, name) is None}
    return replace(settings, **unset), model.to(dtype=getattr(torch, settings.dtype)), origin


def _callbacks(settings, out, train, valid, record, echo) -> list:
    """In this order: the finiteness check stops a bad epoch before anything saves it."""
    callbacks = [runs.StopOnDivergence()]
    if settings.random_permutation:
        from .strategies import RandomPermutation
        callbacks.insert(0, RandomPermutation(settings.regrouping))
    if settings.eval_every and valid is not None:
        # With --average, the averaged models are validated too, and the best kept in
        # RUN/average/ (the paper's selection, among the models this project reports).
        for averaged in (False, True) if settings.average else (False,):
            callbacks.append(runs.ValidateWithAIS(
                out / AVERAGE_DIR if averaged else out, valid, settings.eval_every,
                base_data=train, n_chains=settings.eval_chains, n_betas=settings.eval_betas,
                warn=False, averaged=averaged))  # its line follows the epoch's
            # (`HistoryWriter`), with its doubt
    if record is not None:
        callbacks.append(_RecordSettings(out / runs.CONFIG_FILE, record))
    # The averaged model's run directory gets the run's marker and settings, not its history:
    # the per-epoch metrics there were measured on the raw parameters.
    records = (runs.MARKER_FILE, runs.CONFIG_FILE)
    # The checkpoint before history.json: a kill between the two leaves the history one epoch
    # behind the checkpoint (rewritten on resume), never ahead of it with an epoch the resumed
    # run then trains again (a sweep's killed worker showed it).
    return callbacks + [CheckpointEvery(out, records=records),
                        runs.HistoryWriter(out, settings.epochs, echo, validation_lines=True)]


def _check_split_sizes(settings: Settings, whole) -> None:
    """Refuse --train-size (and the others) above the rows a split has: the run would train on
    fewer rows than its record says."""
    for split in ("train", "valid", "test"):
        wanted, values = getattr(settings, f"{split}_size"), getattr(whole, split)
        rows = 0 if values is None else len(values)
        if wanted is not None and wanted > rows:
            raise ValueError(f"--{split}-size {wanted}: {whole.name} has {rows} {split} rows; "
                             f"give at most {rows}, or leave --{split}-size out to use them all")


# ---------------------------------------------------------------------------- sample, plot
def sample_run(run_dir, *, n_samples=16, n_steps=10000, init="random", z_max_init=False,
               seed=0, data_dir=None, device=None, progress=True, threads=None,
               which="best", echo=None) -> tuple[Path, Path]:
    """Gibbs chains from the run's model: ``samples.npz`` (binary samples, P(v|h) of the last
    step, and the model's epoch and digest) and ``figures/samples.png``; returns both paths.
    ``which``: the run's "best" model when it has one (else its latest), or its "latest";
    ``threads``: torch's CPU threads, as in `irbm.sampling.sample`; ``echo`` receives the
    line saying which model was sampled (default: the module's logger)."""
    from .plotting import plot_samples
    from .plotting.run import model_description, sample_description
    check_device(device)
    run_dir = runs.require_run(run_dir, command="irbm sample")
    image_shape, pixel_order, test = _sample_layout(run_dir, init, data_dir)
    # figures/ is made when there is a figure to put in it; one that cannot take it is
    # refused now, not after the chains ran.
    runs.check_writable(run_dir / "figures" if (run_dir / "figures").exists() else run_dir)
    model, source = runs.run_model(run_dir, which=which, device=device)
    # Before the banner, in the command line's words (`sample` names Python's).
    if n_samples is not None:
        # The chains' visible and hidden states with their inputs, and the saved copies.
        check_memory(int(n_samples) * (4 * model.n_visible + 2 * model.n_hidden)
                     * model.dtype.itemsize, model.device,
                     f"{n_samples:,} chains of {model.n_visible} visible and {model.n_hidden} "
                     "hidden units", "lower --n (Python: n_samples=)")
    if z_max_init and not model.has_z:
        raise ValueError(f"--z-max-init (Python: z_max_init=True) starts z at its largest "
                         f"value, and {run_dir}'s {model.display_name} has no z: leave it out")
    n_test = 0 if test is None else len(test)
    if init == "data" and not n_test:
        raise ValueError(f"--init data (Python: init='data') starts the chains from test rows, "
                         f"and {run_dir} has none: start them from --init random")
    if init == "data" and n_samples is not None and n_samples > n_test:
        raise ValueError(f"--n {n_samples} with --init data (Python: n_samples=, init='data'): "
                         f"each chain starts from a test row of {run_dir}, which has {n_test}; "
                         f"give at most --n {n_test}")
    (echo or logger.info)(f"sampling {source.file} (epoch {source.epoch}, "
                          f"{model.n_hidden} hidden units)")
    generator = torch.Generator(device=model.device).manual_seed(seed)
    start = time.perf_counter()
    result = sample(model, n_samples, n_steps, init=init,
                    data=torch.as_tensor(test) if init == "data" else None,
                    z_max_init=z_max_init, generator=generator, progress=progress,
                    threads=threads)
    probabilities = result.probabilities.cpu().numpy()
    runs.save_npz(run_dir / runs.SAMPLES_FILE, {
        "samples": result.samples.cpu().numpy().astype(np.uint8),
        "probabilities": probabilities, "model_file": np.array(source.file),
        "epoch": np.array(-1 if source.epoch is None else source.epoch),
        "model_sha256": np.array(source.sha256),
        # How they were drawn, which `irbm plot` writes in its samples figure's title.
        "n_steps": np.array(n_steps), "init": np.array(init),
        "z_max_init": np.array(bool(z_max_init))})
    figures = runs.check_writable(run_dir / "figures")
    # The binary states, as `irbm plot` draws them (P(v | h) of the last step drew chains at
    # small z as flat grey tiles under a caption that says white = 1).
    plot_samples(result.samples.cpu().numpy(), image_shape, figures / "samples.png",
                 order=pixel_order,
                 title=f"{model.display_name} samples "
                       f"({sample_description(n_steps, init, z_max_init)}; "
                       f"{model_description(source.file, source.epoch)})")
    logger.info("%d samples in %.1fs", n_samples, time.perf_counter() - start)
    return run_dir / runs.SAMPLES_FILE, figures / "samples.png"


def _sample_layout(run_dir: Path, init: str, data_dir) -> tuple:
    """(image shape, pixel order, test rows or None) for `sample_run`: chains from random
    states need no data, so the run's record gives the layout (a moved data file no longer
    stops them); chains from test rows read the run's data."""
    recorded = runs.recorded_data(run_dir)
    if init != "data" and "image_shape" in recorded and "pixel_order" in recorded:
        return tuple(recorded["image_shape"]), recorded["pixel_order"], None
    dataset = runs.load_run_dataset(run_dir, data_dir)
    return dataset.image_shape, dataset.pixel_order, dataset.test


def plot_run(run_dir, *, data_dir=None, device=None, allow_stale=False, echo=None,
             which="best") -> list[Path]:
    """Draw every figure of the run (`irbm.plotting.figures_for_run`) of its ``which`` model
    ("best" when it has one, else its latest; or "latest") and return the paths.

    Samples or AIS weights computed from another model than the run's current one are not
    drawn (the samples figure shows fresh chains of the current model, the AIS convergence
    figure is removed) unless ``allow_stale``; either way each is reported to ``echo``."""
    say = echo or logger.warning
    check_device(device)
    run_dir = runs.require_run(run_dir, command="irbm plot")
    dataset = runs.load_run_dataset(run_dir, data_dir)
    model, source = runs.run_model(run_dir, which=which)
    (echo or logger.info)(f"figures of {source.file} (epoch {source.epoch}, "
                          f"{model.n_hidden} hidden units)")
    problems = runs.stale_inputs(run_dir, which)
    instead = {runs.SAMPLES_FILE: "samples.png shows short chains of the current model "
               "instead", runs.AIS_WEIGHTS_FILE: "ais_convergence.png is not drawn"}
    for name, problem in problems.items():
        say(f"note: {problem}; " + ("drawn anyway (--allow-stale)" if allow_stale else
                                    f"{instead[name]} (--allow-stale draws it anyway)"))
    from .plotting import figures_for_run
    return figures_for_run(run_dir, dataset, device=device, which=which,
                           stale=() if allow_stale else tuple(problems))


def report_runs(run_dirs, out_dir=None, *, allow_stale=False) -> tuple[Path, Path]:
    """`irbm.report.write_report`: report.md and report.html for evaluated runs; a sweep
    directory stands for its evaluated trials. ``run_dirs``: one directory or several; a run
    never evaluated is left out with a warning, unless none is evaluated."""
    if isinstance(run_dirs, (str, Path)):
        run_dirs = [run_dirs]
    run_dirs = list(run_dirs)
    if not run_dirs:
        raise ValueError("nothing to report: no run directory was given")
    # A report's own directory, such as demo-output/report under demo-output/*/, is no run.
    runs_ = [run for run in expand_sweeps(run_dirs)
             if not (Path(run) / REPORT_MARKER).is_file()]
    # A run named twice (by two paths, or a trial of a sweep also named) is one row.
    seen = set()
    runs_ = [run for run in runs_
             if not (Path(run).resolve() in seen or seen.add(Path(run).resolve()))]
    if not runs_:
        raise ValueError(f"nothing to report: no trial of {', '.join(map(str, run_dirs))} has "
                         "an evaluation of its current model (irbm sweep evaluates each "
                         "trial that finishes; see each trial's error.txt)")
    unevaluated = [run for run in runs_ if runs.is_run(run) and not runs.read_evaluations(run)]
    if unevaluated and len(unevaluated) < len(runs_):
        for run in unevaluated:
            logger.warning("%s has no evaluation (irbm evaluate %s): left out of the report",
                           run, run)
        runs_ = [run for run in runs_ if run not in unevaluated]
    return write_report(runs_, out_dir, allow_stale=allow_stale)

