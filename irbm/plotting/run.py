"""All the figures of a run directory (what `irbm plot` draws)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from .. import runs
from ..ais import convergence_curve
from ..sampling import sample
from .curves import plot_ais_convergence, plot_size_history, plot_training_curves
from .images import plot_filters, plot_samples
from .ordered import plot_p_z_given_v, plot_top_inputs_by_z_interval

__all__ = ["figures_for_run", "model_description", "sample_description"]

# Few enough that plotting stays quick when `irbm sample` has not been run.
_QUICK_SAMPLES, _QUICK_STEPS = 16, 1000


def model_description(file_name: str | None, epoch) -> str:
    """Which of a run's models a figure shows: "best model, epoch 10" (best.safetensors),
    "latest model, epoch 30" (model.safetensors)."""
    name = "best" if str(file_name).startswith("best") else "latest"
    return f"{name} model" + ("" if epoch is None else f", epoch {epoch}")


def _ais_title(record: dict | None, n_chains: int) -> str:
    """Which run the weights are of (a later evaluation by another path replaced them); the
    record's details only where its chains are the file's (weights older than the record
    were titled with its temperatures)."""
    if record is None or record.get("n_chains") != n_chains:
        return "AIS estimate of ln Z"
    details = [f"{str(record.get('path') or 'linear').split(':')[0]} path"] + [
        f"{value} {what}" for value, what in ((record.get("base"), "base"),
                                              (record.get("n_betas"), "temperatures"))
        if value is not None]
    return (f"AIS estimate of ln Z ({', '.join(details)}; "
            f"{model_description(record.get('model_file'), record.get('epoch'))})")


def _highest_floor(run_dir, record: dict | None) -> float | None:
    """The highest certain floor of ln Z any evaluation of the weights' model found (a later
    --floor-chains record may hold one far above the weights' own)."""
    if record is None:
        return None
    # Records of older irbm versions name no model: only the weights' own floor is theirs.
    same = [r for r in runs.read_evaluations(run_dir)
            if r.get("model_sha256") == record.get("model_sha256")] \
        if record.get("model_sha256") is not None else [record]
    floors = [r.get("log_z_floor") for r in same]
    floors = [floor for floor in floors if isinstance(floor, (int, float))
              and not isinstance(floor, bool) and math.isfinite(floor)]  # nan would win max
    return max(floors, default=None)


def sample_description(n_steps: int, init: str, z_max_init: bool) -> str:
    """How samples were drawn, for a figure's title: "1000 Gibbs steps from random, z = K
    first"."""
    return (f"{n_steps} Gibbs steps from {'noise' if init == 'random' else init}"
            + (", z = K first" if z_max_init else ""))


def figures_for_run(run_dir, dataset, *, device=None, stale=(), which="best") -> list[Path]:
    """Draw every figure that applies to the run into ``run_dir/figures`` and return the paths:
    filters, samples, P(z|v) and the top inputs per z interval (models with z), the hidden
    layer size over training (models that can grow), training curves and AIS convergence (once
    evaluated).

    ``stale``: names of the run's result files (``samples.npz``, ``ais_log_weights.npy``) that
    describe an earlier model and must not be drawn: the samples are then drawn afresh from
    the model, and the AIS convergence figure is not drawn and an earlier one removed, so that
    no figure of an older model is left looking current. ``which``: the run's "best" model
    when it has one (else its latest), or its "latest"."""
    run_dir = Path(run_dir)
    figures = runs.check_writable(run_dir / "figures")
    model, source = runs.run_model(run_dir, which=which, device=device)
    shape, order = dataset.image_shape, dataset.pixel_order
    # Every figure of the model says which one it is (a best model sat beside curves that ran
    # on past it, and figures of two epochs read as one).
    of_model = model_description(source.file, source.epoch)
    written = []

    def keep(name):
        written.append(figures / name)
        return figures / name

    plot_filters(model, shape, keep("filters.png"), order=order,
                 title=f"{model.display_name}: first filters of {model.n_hidden} ({of_model})")
    # Datasets that say what pixel value 1 stands for get it named in the image captions.
    one_means = getattr(dataset, "one_means", None)
    samples_file = run_dir / runs.SAMPLES_FILE
    if samples_file.exists() and runs.SAMPLES_FILE not in stale:
        with np.load(samples_file, allow_pickle=False) as stored:
            images = stored["samples"]
            how = (sample_description(int(stored["n_steps"]), str(stored["init"]),
                                      bool(stored["z_max_init"])) + ", irbm sample"
                   if "n_steps" in stored else "from irbm sample")
            # Of the model they were drawn from (--allow-stale draws an earlier model's).
            epoch = int(stored["epoch"]) if "epoch" in stored else -1
            samples_of = model_description(str(stored["model_file"]), None if epoch < 0
                                           else epoch) if "model_file" in stored else of_model
    else:
        generator = torch.Generator(device=model.device).manual_seed(0)
        # Ordered models without a tail mix slowly from noise: the paper starts them at z = K.
        start_at_k = model.has_z and not model.has_tail
        images = sample(model, _QUICK_SAMPLES, _QUICK_STEPS, generator=generator,
                        z_max_init=start_at_k).samples.cpu().numpy()
        how = sample_description(_QUICK_STEPS, "random", start_at_k)
        samples_of = of_model
    # Binary states, not P(v | h) of the last step: that mean is a smooth blur for chains at
    # small z and hid what the chains actually produce.
    plot_samples(images, shape, keep("samples.png"), order=order, one_means=one_means,
                 title=f"{model.display_name} samples ({how}; {samples_of})")
    if model.has_z:
        test = torch.as_tensor(dataset.test[:2000] if len(dataset.test) else dataset.train[:2000])
        # The paper's first row is unstructured noise, whose P(z|v) peaks at small z.
        noise = (torch.rand((1, dataset.n_visible), generator=torch.Generator().manual_seed(0))
                 < 0.5).to(test.dtype)
        plot_p_z_given_v(model, torch.cat([noise, test[:7]]), shape, keep("p_z_given_v.png"),
                         order=order, one_means=one_means,
                         title=f"{model.display_name}: P(z | v) ({of_model})")
        plot_top_inputs_by_z_interval(model, test, shape, keep("top_inputs_by_z.png"),
                                      order=order, one_means=one_means)
    history = runs.read_json(run_dir / runs.HISTORY_FILE, default={"history": []})
    if history["history"]:
        plot_training_curves(history["history"], keep("training_curves.png"),
                             mark_epoch=source.epoch)
    sizes_seen = {size for _, size in history.get("size_history", [])}
    if history.get("size_history") and (model.resizable or len(sizes_seen) > 1):
        epochs, sizes = zip(*history["size_history"])
        last_epoch = history["history"][-1]["epoch"] if history["history"] else epochs[-1]
        plot_size_history(list(epochs) + [last_epoch], list(sizes) + [sizes[-1]],
                          keep("hidden_size.png"), mark_epoch=source.epoch)
    weights_file = run_dir / runs.AIS_WEIGHTS_FILE
    if runs.AIS_WEIGHTS_FILE in stale:
        (figures / "ais_convergence.png").unlink(missing_ok=True)
    elif weights_file.exists():
        log_weights = np.load(weights_file, allow_pickle=False)
        record = runs.weights_record(run_dir)
        exact = record["log_z"] if record and record.get("log_z_source") == "exact" else None
        if len(log_weights) >= 2:
            plot_ais_convergence(*convergence_curve(log_weights), keep("ais_convergence.png"),
                                 exact=exact, title=_ais_title(record, len(log_weights)),
                                 floor=_highest_floor(run_dir, record))
    return written
