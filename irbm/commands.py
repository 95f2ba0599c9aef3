"""What each `irbm` subcommand does; `cli.py` only parses arguments."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import torch

from . import checkpoint as ckpt
from . import runs
from ._io import atomic_write
from .cli import DATA_KEYS, MODEL_KEYS, TRAIN_DEFAULTS, TRAINING_KEYS, read_config_file
from .datasets import ALIASES, LOADERS, load_dataset
from .models import build_model
from .training import CheckpointEvery, Trainer


def check_device(device):
    """Refuse a device torch does not know or cannot use here (e.g. cuda without a GPU)."""
    if device is None:
        return
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ValueError(f"device {device!r} is not usable here: {message}") from None


def _dataset_key(name) -> str:
    """A dataset name as given, or a file's absolute path (so the run works from any directory)."""
    key = str(name).strip().lower()
    if ALIASES.get(key, key) in LOADERS:
        return str(name)
    return str(Path(name).expanduser().resolve())


def _binarize_option(binarize) -> dict:
    """Only user files take ``binarize``; named datasets are binary already."""
    return {} if binarize is None else {"binarize": binarize}


def _dataset_from_record(record: dict, data_dir=None):
    dataset = load_dataset(record["name"], data_dir=data_dir,
                           **_binarize_option(record.get("binarize")))
    return dataset.subset(record.get("train_size"), record.get("valid_size"),
                          record.get("test_size"))


# ---------------------------------------------------------------------------- train
def _train_settings(args, recorded: dict | None) -> tuple[dict, dict]:
    """Merge defaults, the recorded run, the config file and the command line; return the
    settings and those given explicitly (config file or command line)."""
    given = read_config_file(args.config) if args.config else {}
    given.update({k: v for k, v in vars(args).items() if k in TRAIN_DEFAULTS and v is not None})
    settings = {**TRAIN_DEFAULTS, **(recorded or {}), **given}
    if settings["n_hidden"] is None:
        settings["n_hidden"] = 1 if args.family == "irbm" else 500
    if settings["epochs"] < 0:
        raise ValueError(f"epochs must be >= 0, got {settings['epochs']}")
    for key in DATA_KEYS:
        if settings[key] is not None and settings[key] < 1:
            raise ValueError(f"{key} must be >= 1, got {settings[key]}")
    return settings, given


def run_train(args):
    # Nothing is written (not even the directory) until the settings and the data are checked.
    out = Path(args.out)
    config_path = out / runs.CONFIG_FILE
    resuming = runs.is_run(out)
    recorded = runs.read_json(config_path) if resuming else None
    dataset_key = _dataset_key(args.dataset)
    if resuming:
        if recorded["family"] != args.family:
            raise ValueError(f"{out} holds a {recorded['family']} run; it cannot be resumed as "
                             f"a {args.family} (use a new --out)")
        if recorded["dataset"] != dataset_key and not args.force:
            raise ValueError(f"{out} holds a run on {recorded['dataset']}; refusing to resume "
                             f"it on {args.dataset} (use --force or a new --out)")
    settings, given = _train_settings(args, recorded and recorded["settings"])
    if resuming:
        changed = {k: (recorded["settings"].get(k), v) for k, v in given.items()
                   if k != "epochs" and recorded["settings"].get(k) != v}
        built = [k for k in changed if k in MODEL_KEYS]
        if built:  # the checkpoint's model is resumed as it is: --force cannot change these
            raise ValueError(f"{out} holds a model already built with {', '.join(built)} "
                             f"{', '.join(str(changed[k][0]) for k in built)}; it cannot be "
                             f"changed on resume (use a new --out)")
        if changed and not args.force:
            details = ", ".join(f"{k}: {a} -> {b}" for k, (a, b) in changed.items())
            raise ValueError(f"refusing to resume {out} with different hyper-parameters "
                             f"({details}); pass --force to override")
    if settings["binarize"] is not None and dataset_key.lower() in (*LOADERS, *ALIASES):
        raise ValueError(f"--binarize applies to your own data files; {args.dataset} is "
                         "binary already")
    dataset = load_dataset(args.dataset, data_dir=args.data_dir,
                           **_binarize_option(settings["binarize"])).subset(
        *(settings[k] for k in DATA_KEYS))
    if resuming and math.prod(recorded["image_shape"]) != dataset.n_visible:
        raise ValueError(f"{args.dataset} has {dataset.n_visible} values per row; the model in "
                         f"{out} has {math.prod(recorded['image_shape'])} visible units")
    record = {"family": args.family, "dataset": dataset_key, "dataset_name": dataset.name,
              "image_shape": list(dataset.image_shape), "pixel_order": dataset.pixel_order,
              "data": {"name": dataset_key, **{k: settings[k] for k in DATA_KEYS},
                       "binarize": settings["binarize"]},
              "settings": settings}
    train = torch.as_tensor(dataset.train)
    valid = torch.as_tensor(dataset.valid) if len(dataset.valid) else None
    echo = None if args.quiet else print
    training = {k: settings[k] for k in TRAINING_KEYS}
    training["persistent"] = training.pop("pcd")
    if resuming:
        trainer = Trainer.from_checkpoint(out, device=args.device, progress=False,
                                          force=args.force, **training)
        message = (f"resuming {out} at epoch {trainer.epoch} "
                   f"({trainer.model.n_hidden} hidden units)")
    else:
        dtype = getattr(torch, settings["dtype"])
        model_config = {"family": args.family, "n_visible": dataset.n_visible,
                        "n_hidden": settings["n_hidden"]}
        if args.family != "rbm":
            model_config["beta"] = settings["beta"]
        if args.family == "irbm":
            model_config["max_hidden"] = settings["max_hidden"]
        model = build_model(model_config, dtype=dtype, device=args.device)
        model.reset_parameters(torch.Generator().manual_seed(settings["seed"]),
                               0.0 if args.family == "irbm" else 0.01)
        trainer = Trainer(model, device=args.device, progress=False, **training)
        message = f"training a {args.family} on {dataset!r} into {out}"
    out = runs.check_writable(out)
    # On resume too: the next resume compares with what this run uses (epochs, forced changes).
    runs.write_json(config_path, record)
    print(message)
    callbacks = [CheckpointEvery(out), runs.HistoryWriter(out, settings["epochs"], echo)]
    if settings["eval_every"] and valid is not None:
        callbacks.insert(0, runs.ValidateWithAIS(out, valid, settings["eval_every"],
                                                 n_chains=settings["eval_chains"],
                                                 n_betas=settings["eval_betas"], echo=echo))
    trainer.fit(train, settings["epochs"], valid=valid, callbacks=callbacks)
    print(f"done: epoch {trainer.epoch}, {trainer.model.n_hidden} hidden units; model in "
          f"{out / ckpt.MODEL_FILE}")
    return trainer


# ---------------------------------------------------------------------------- evaluate
def _run_dataset(run_dir, data_dir=None):
    if not Path(run_dir).is_dir():
        raise FileNotFoundError(f"run directory not found: {run_dir}")
    config = runs.read_json(Path(run_dir) / runs.CONFIG_FILE)
    return config, _dataset_from_record(config["data"], data_dir)


def run_evaluate(args):
    run_dir = Path(args.run)
    config, dataset = _run_dataset(run_dir, args.data_dir)
    runs.check_writable(run_dir)
    uses_best = not args.latest and (run_dir / runs.BEST_FILE).exists()
    print(f"AIS on {run_dir} ({args.chains} chains), "
          + ("best model by validation NLL" if uses_best else "latest model")
          + ("" if uses_best or args.latest else
             " (no best.safetensors: train with --eval-every N for model selection)"))
    record = runs.evaluate_run(run_dir, dataset, n_chains=args.chains, n_betas=args.betas,
                               base=args.base, seed=args.seed, device=args.device,
                               which="latest" if args.latest else "best")
    print(f"  ln Z = {record['log_z']:.3f}  [{record['log_z_low']:.3f}, "
          f"{record['log_z_high']:.3f}]  -> {run_dir / runs.EVALUATION_FILE}")
    return record


# ---------------------------------------------------------------------------- sample
def run_sample(args):
    from .plotting import plot_samples
    from .sampling import sample
    run_dir = Path(args.run)
    config, dataset = _run_dataset(run_dir, args.data_dir)
    figures = runs.check_writable(run_dir / "figures")
    model = runs.load_run_model(run_dir, device=args.device)
    generator = torch.Generator(device=model.W.device).manual_seed(args.seed)
    start = time.perf_counter()
    result = sample(model, args.n, args.steps, init=args.init,
                    data=torch.as_tensor(dataset.test) if args.init == "data" else None,
                    z_max_init=args.z_max_init, generator=generator, progress=True)
    arrays = {"samples": result.samples.cpu().numpy().astype(np.uint8),
              "probabilities": result.probabilities.cpu().numpy()}
    _save_npz(run_dir / "samples.npz", arrays)
    plot_samples(arrays["probabilities"], dataset.image_shape, figures / "samples.png",
                 order=dataset.pixel_order,
                 title=f"{model.family}: {args.steps} Gibbs steps from {args.init}")
    print(f"{args.n} samples in {time.perf_counter() - start:.1f}s -> {run_dir / 'samples.npz'}, "
          f"{figures / 'samples.png'}")


def _save_npz(path, arrays):
    with atomic_write(path) as stream:
        np.savez_compressed(stream, **arrays)


# ---------------------------------------------------------------------------- plot
def run_plot(args):
    from .plotting import figures_for_run
    run_dir = Path(args.run)
    config, dataset = _run_dataset(run_dir, args.data_dir)
    written = figures_for_run(run_dir, dataset, device=args.device)
    for path in written:
        print(path)


# ---------------------------------------------------------------------------- report
def run_report(args):
    from .report import write_report
    markdown, html = write_report([Path(r) for r in args.runs], args.out)
    print(f"report: {markdown} and {html}")


# ---------------------------------------------------------------------------- demo
def run_demo(args):
    from .demo import demo
    demo(Path(args.out), quick=args.quick, device=args.device)
