"""Curves: the hidden-layer size over training, AIS convergence and training metrics."""

from __future__ import annotations

import numbers
import os

import numpy as np
from matplotlib.ticker import LogLocator, MaxNLocator, NullFormatter, StrMethodFormatter

from ._canvas import as_numpy, finish_figure, new_figure, wrap_text

__all__ = ["plot_size_history", "plot_ais_convergence", "plot_training_curves"]


def plot_size_history(epochs, sizes, path=None, *, title=None, mark_epoch=None):
    """Draw the number of hidden units of a growing model (the iRBM) over training.

    Parameters
    ----------
    epochs : array (T,)
    sizes : array (T,)
        Hidden-layer size l at each epoch.
    path : str or Path, optional
    title : str, optional
    mark_epoch : int, optional
        The epoch of the model the other figures show, marked when it is not the last.

    Returns
    -------
    matplotlib.figure.Figure
    """
    epochs = as_numpy(epochs, "epochs", dims=1)
    sizes = as_numpy(sizes, "sizes", dims=1)
    if len(epochs) == 0 or len(epochs) != len(sizes):
        raise ValueError(f"epochs and sizes must be non-empty and of equal length, got "
                         f"{len(epochs)} and {len(sizes)}")
    figure = new_figure(6.0, 3.5)
    axes = figure.add_subplot()
    axes.step(epochs, sizes, where="post", color="tab:blue",
              marker="." if len(sizes) <= 50 else None)
    axes.annotate(f"{int(sizes[-1])} units", (epochs[-1], sizes[-1]), textcoords="offset points",
                  xytext=(-4, 6), ha="right")
    _mark(axes, mark_epoch, epochs)
    if any(line.get_label().startswith("the model drawn") for line in axes.get_lines()):
        axes.legend(fontsize=8, loc="best")  # what the dashed line is
    axes.set_xlabel("epoch")
    axes.set_ylabel("hidden units l")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))  # no epoch 2.5
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.set_title(title or "Hidden-layer size during training")
    figure.tight_layout()
    return finish_figure(figure, path)


def plot_ais_convergence(n_chains, log_z=None, log_z_low=None, log_z_high=None, path=None, *,
                         exact=None, title=None, floor=None):
    """Draw the AIS estimate ln Z-hat against the number of chains, with its 3-sigma band.

    ``plot_ais_convergence(result)`` with an `irbm.ais.AISResult` draws its own curve
    (`irbm.ais.convergence_curve` of its log-weights).

    A lower bound ln(Z-hat - 3 sigma) of -inf (3 sigma exceeds Z-hat: a few chains dominate the
    weights) cannot be drawn: the band is clipped at the bottom of the axis there, those points
    get a downward marker, and a note below the axes (clear of the legend) says how many bounds
    were infinite.

    Parameters
    ----------
    n_chains : array (M,), or AISResult
        Number of AIS chains of each estimate (or the run, without the three arrays).
    log_z, log_z_low, log_z_high : array (M,)
        ln Z-hat, ln(Z-hat - 3 sigma) (may be -inf) and ln(Z-hat + 3 sigma).
    path : str or Path, optional
    exact : float, optional
        The exact ln Z, drawn as a dashed line when known.
    title : str, optional
    floor : float, optional
        A certain lower bound of ln Z (`irbm.floor`), drawn as a dotted line: an estimate below
        it is too low for certain.

    Returns
    -------
    matplotlib.figure.Figure
    """
    if hasattr(n_chains, "log_weights"):  # an AISResult: a TypeError, where it read as one
        if log_z is not None and not _is_path(log_z):
            raise TypeError("an AISResult carries its own curve: give it alone (and path=)")
        from ..ais import convergence_curve
        path = log_z if log_z is not None else path
        n_chains, log_z, log_z_low, log_z_high = convergence_curve(n_chains.log_weights)
    if log_z is None or log_z_low is None or log_z_high is None:
        raise ValueError("give n_chains, log_z, log_z_low and log_z_high (irbm.ais."
                         "convergence_curve's four arrays), or an AISResult alone")
    n_chains = as_numpy(n_chains, "n_chains", dims=1)
    columns = [as_numpy(values, name, dims=1) for values, name in
               ((log_z, "log_z"), (log_z_low, "log_z_low"), (log_z_high, "log_z_high"))]
    if len(n_chains) == 0 or any(len(column) != len(n_chains) for column in columns):
        raise ValueError("n_chains, log_z, log_z_low and log_z_high must be non-empty and of "
                         f"equal length, got {[len(n_chains)] + [len(c) for c in columns]}")
    order = np.argsort(n_chains, kind="stable")
    n_chains = n_chains[order]
    log_z, low, high = (column[order] for column in columns)
    if not np.isfinite(log_z).any():
        raise ValueError("log_z has no finite value: nothing to draw")

    estimates = np.concatenate([values[np.isfinite(values)] for values in (log_z, low, high)])
    # A floor below the estimates is no news and would flatten them (26-47 nats below on
    # trained models): noted, not drawn; one above them is what the figure must show.
    floor = None if floor is None or not np.isfinite(floor) else float(floor)
    floor_below = floor is not None and floor < estimates.min()
    finite = np.concatenate([estimates] + [np.array([float(value)]) for value in
                                           (exact, None if floor_below else floor)
                                           if value is not None])
    spread = finite.max() - finite.min()
    padding = 0.1 * spread if spread > 0 else max(1.0, 0.01 * abs(finite.max()))
    bottom, top = finite.min() - padding, finite.max() + padding
    low_infinite, high_infinite = np.isneginf(low), np.isposinf(high)
    band_low = np.where(low_infinite, bottom, low)
    band_high = np.where(high_infinite, top, high)

    figure = new_figure(6.5, 4.0)
    axes = figure.add_subplot()
    drawable = np.isfinite(band_low) & np.isfinite(band_high)
    axes.fill_between(n_chains, band_low, band_high, where=drawable, color="tab:blue",
                      alpha=0.2, linewidth=0, label="ln(Ẑ ± 3σ)")
    axes.plot(n_chains, log_z, marker="o", color="tab:blue", label="ln Ẑ")
    if exact is not None:
        axes.axhline(float(exact), color="black", linestyle="--", linewidth=1,
                     label=f"exact ln Z = {float(exact):.4g}")
    notes = []
    if floor is not None and not floor_below:
        axes.axhline(floor, color="tab:red", linestyle=":", linewidth=1.2,
                     label=f"certain floor of ln Z = {floor:.6g}")
    elif floor_below:
        notes.append(f"certain floor of ln Z = {floor:.6g}, below the estimates")
    if low_infinite.any():
        axes.plot(n_chains[low_infinite], np.full(low_infinite.sum(), bottom), linestyle="none",
                  marker="v", markersize=8, color="tab:red", clip_on=False,
                  label="ln(Ẑ − 3σ) = −∞ (clipped)")
        notes.append(f"lower bound is −∞ for {int(low_infinite.sum())} of {len(low)} "
                     "estimates: band clipped at the axis")
    if high_infinite.any():
        notes.append(f"upper bound is +∞ for {int(high_infinite.sum())} of {len(high)} "
                     "estimates: band clipped at the axis")
    if notes:
        # Below the x label, outside the axes: the legend lives inside them, so the two cannot
        # overlap wherever "best" puts the legend. tight_layout makes room for it.
        axes.annotate("\n".join(notes), xy=(0.0, 0.0), xycoords=("axes fraction", axes.xaxis.label),
                      xytext=(0, -4), textcoords="offset points", ha="left", va="top",
                      fontsize=8, color="tab:red")
    if n_chains.min() > 0 and n_chains.max() >= 10 * n_chains.min():
        axes.set_xscale("log")
        # Plain numbers at 1, 2 and 5 per decade: matplotlib's labels of the minor ticks
        # (3x10^0, 4x10^0, ...) overlapped on a span of one or two decades.
        axes.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axes.xaxis.set_major_formatter(StrMethodFormatter("{x:g}"))
        axes.xaxis.set_minor_formatter(NullFormatter())
    axes.set_ylim(bottom, top)
    axes.set_xlabel("number of AIS chains")
    axes.set_ylabel("ln Z")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="best")
    axes.set_title(wrap_text(title or "AIS estimate of ln Z", 6.0, 12))
    figure.tight_layout()
    return finish_figure(figure, path)


def _is_path(value) -> bool:
    return isinstance(value, (str, os.PathLike))


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


# What the trainer's history keys stand for (`irbm.Trainer.epoch_metrics`, the AIS callback);
# other keys are drawn under their own names.
_LABELS = {"valid_nll": "validation NLL (AIS)", "log_z": "ln Z (AIS)",
           "train_free_energy": "train free energy", "valid_free_energy": "valid free energy",
           "reconstruction_error": "reconstruction error", "n_hidden": "hidden units",
           "seconds": "seconds per epoch", "nll": "NLL (nats)", "free_energy": "free energy",
           "log_z_ess": "effective AIS chains (validation)",
           "log_z_chains": "AIS chains (validation)",
           "average_valid_nll": "validation NLL of the average (AIS)",
           "average_log_z": "ln Z of the average (AIS)",
           "average_log_z_ess": "effective AIS chains (average)",
           "average_log_z_chains": "AIS chains (average)",
           "log_z_floor": "certain floor of ln Z", "nll_log_z": "ln Z of the NLL",
           "average_log_z_floor": "certain floor of ln Z (average)",
           "average_nll_log_z": "ln Z of the average's NLL"}
# Series from a validation's AIS, and the history key saying whether its ln Z was reliable.
_RELIABILITY = {key: prefix + "log_z_reliable" for prefix in ("", "average_")
                for key in (prefix + "valid_nll", prefix + "log_z")}


def _mark(axes, epoch, epochs) -> None:
    """A vertical line at the epoch of the model the run's other figures show, when it is not
    the last drawn (a best model before more training)."""
    if epoch is not None and len(epochs) and float(epoch) < float(np.nanmax(epochs)):
        axes.axvline(float(epoch), color="0.4", linestyle="--", linewidth=1,
                     label=f"the model drawn (epoch {int(epoch)})")


def _label(key: str) -> str:
    return _LABELS.get(key, key.replace("_", " "))


def _panels(keys):
    """Group metric keys into panels: a validation's ln Z beside its certain floor and the ln Z
    its NLL used, free energies together, NLLs together, others alone; standard errors
    (``*_stderr``) are not drawn (on an NLL's axis they would flatten it)."""
    groups = {}
    for key in keys:
        if key.endswith("_stderr"):
            continue
        prefix = "average_" if key.startswith("average_") else ""
        if key.removeprefix(prefix) in ("log_z", "log_z_floor", "nll_log_z"):
            groups.setdefault(prefix + "log_z", []).append(key)
            continue
        for family in ("free_energy", "nll"):
            if family in key:
                groups.setdefault(family, []).append(key)
                break
        else:
            groups[key] = [key]
    return groups


def plot_training_curves(history, path=None, *, title=None, mark_epoch=None):
    """Draw training metrics against the epoch, one panel per kind of metric.

    Parameters
    ----------
    history : list of dict
        One dict per evaluation, e.g. {"epoch": 3, "train_free_energy": ...,
        "valid_free_energy": ..., "reconstruction_error": ..., "n_hidden": ...}. Every numeric
        key except "epoch" is drawn; keys missing from some entries (metrics computed only every
        few epochs) are drawn where present. A metric that never changes (an RBM's n_hidden)
        gets no panel: its value is written below the panels. Without "epoch", entries are
        numbered from 1. A validation whose AIS the trainer flagged (``log_z_reliable`` False)
        is drawn as a hollow red point: its ln Z is likely too low, its NLL too good.
    path : str or Path, optional
    title : str, optional
    mark_epoch : int, optional
        The epoch of the model the run's other figures show, marked when it is not the last.

    Returns
    -------
    matplotlib.figure.Figure
    """
    if not isinstance(history, (list, tuple)) or not history:
        raise ValueError("history must be a non-empty list of dicts")
    if not all(isinstance(entry, dict) for entry in history):
        raise ValueError("history must be a list of dicts")
    epochs = np.array([entry.get("epoch", index + 1) for index, entry in enumerate(history)],
                      dtype=np.float64)
    keys = []
    for entry in history:
        keys += [key for key, value in entry.items()
                 if key != "epoch" and key not in keys and _is_number(value)]
    if not keys:
        raise ValueError("history has no numeric metric besides 'epoch'")
    series = {key: np.array([entry[key] if _is_number(entry.get(key)) else np.nan
                             for entry in history], dtype=np.float64) for key in keys}
    # A series that never changes (an RBM's n_hidden, a fixed setting) gets no panel, only a
    # mention below the panels; if every series is constant, they are all drawn.
    constant = [key for key in keys if np.unique(series[key][~np.isnan(series[key])]).size == 1]
    if len(constant) < len(keys):
        keys = [key for key in keys if key not in constant]
    else:
        constant = []
    panels = _panels(keys)

    figure = new_figure(7.0, 2.2 * len(panels) + 0.6)
    axes_list = figure.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    for axes, (panel, panel_keys) in zip(axes_list, panels.items()):
        for key in panel_keys:
            values = series[key]
            present = ~np.isnan(values)
            draw = axes.step if key == "n_hidden" else axes.plot
            extra = {"where": "post"} if key == "n_hidden" else {}
            draw(epochs[present], values[present], label=_label(key),
                 marker="." if present.sum() <= 50 else None, **extra)
            doubted = present & np.array([entry.get(_RELIABILITY.get(key)) is False
                                          for entry in history])
            if doubted.any():  # drawn like the others, they read as estimates to trust
                named = any(line.get_label().startswith("unreliable")
                            for line in axes.get_lines())
                axes.plot(epochs[doubted], values[doubted], linestyle="none", marker="o",
                          markerfacecolor="none", markeredgecolor="tab:red",
                          label="_unreliable" if named else  # one legend entry per panel
                          "unreliable AIS (few effective chains)")
        _mark(axes, mark_epoch, epochs)
        if any(artist.get_label().startswith(("unreliable", "the model drawn"))
               for artist in axes.get_lines()):  # "_unreliable": a repeat, not in the legend
            axes.legend(fontsize=8)
        axes.set_ylabel(_label(panel_keys[0] if len(panel_keys) == 1 else panel), fontsize=9)
        if panel == "n_hidden":
            axes.yaxis.set_major_locator(MaxNLocator(integer=True))
        axes.grid(alpha=0.3)
        if len(panel_keys) > 1:
            axes.legend(fontsize=8)
    axes_list[-1].set_xlabel("epoch")
    axes_list[-1].xaxis.set_major_locator(MaxNLocator(integer=True))  # no epoch 1.5
    if constant:
        axes_list[-1].annotate(
            "constant: " + ", ".join(f"{_label(key)} = "
                                     f"{series[key][~np.isnan(series[key])][0]:g}"
                                     for key in constant),
            xy=(0.0, 0.0), xycoords=("axes fraction", axes_list[-1].xaxis.label), xytext=(0, -4),
            textcoords="offset points", ha="left", va="top", fontsize=8, color="0.3")
    figure.suptitle(title or "Training curves")
    # Room for the title above the top panel, whose frame it touched.
    figure.tight_layout(rect=(0, 0, 1, 1 - 0.3 / figure.get_figheight()))
    return finish_figure(figure, path)
