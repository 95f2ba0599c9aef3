"""Figures of the paper's "Experiments" section: image grids, filters, samples, P(z | v) and the
top inputs for intervals of z. Curves over training and AIS live in `plotting_curves` and are
re-exported here, so ``irbm.plotting`` is the one module to import.

Every function takes arrays or tensors, returns the `matplotlib.figure.Figure`, and when given
``path`` also writes it there as a PNG, atomically. Images are flat vectors of length
height * width; ``order="F"`` reads them column-major (CalTech101 Silhouettes is stored so).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from ._figures import (TITLE_INCHES, as_numpy, check_image_shape, check_order, draw_mosaic,
                       finish_figure, mosaic_figure, new_figure, tile_images)
from .plotting_curves import plot_ais_convergence, plot_size_history, plot_training_curves

__all__ = ["image_grid", "plot_filters", "plot_samples", "plot_chain_evolution",
           "plot_p_z_given_v", "top_inputs_by_z_interval", "plot_top_inputs_by_z_interval",
           "plot_size_history", "plot_ais_convergence", "plot_training_curves", "tile_images"]


def image_grid(images, image_shape, path=None, *, n_columns=None, order="C", title=None,
               value_range=(0.0, 1.0), border_color="0.5"):
    """Draw flat images as a grid, filling each row left to right.

    Parameters
    ----------
    images : array or tensor (N, height * width)
        Values in ``value_range`` (binary images or probabilities by default).
    image_shape : (height, width)
    path : str or Path, optional
        Where to write the PNG.
    n_columns : int, optional
        Images per row; default ceil(sqrt(N)).
    order : {"C", "F"}
        "F" for column-major vectors (CalTech101 Silhouettes).
    title : str, optional
    value_range : (low, high) or None
        Values mapped to black and white; None uses the images' own range.
    border_color : matplotlib color
        Color of the lines between images.

    Returns
    -------
    matplotlib.figure.Figure
    """
    mosaic = tile_images(images, image_shape, n_columns=n_columns, order=order, empty=np.inf)
    return mosaic_figure(mosaic, title, value_range, border_color, path)


def plot_filters(model, image_shape, path=None, *, n_filters=96, n_columns=12, order="C",
                 title=None):
    """Draw the first ``n_filters`` rows of W as images, as in the paper's filters figure.

    Filter k sits at row k // n_columns, column k % n_columns (across columns first). Each
    filter is scaled by its own largest absolute weight so that weak filters stay visible; zero
    is mid-gray, so an untrained iRBM unit (all-zero weights) shows as a flat gray square.

    Parameters
    ----------
    model : EnergyModel or array (n_hidden, n_visible)
        A model (its ``W`` is used) or the weight matrix itself.
    image_shape : (height, width)
    path : str or Path, optional
    n_filters : int
        How many filters to show (fewer if the model has fewer units).
    n_columns : int
    order : {"C", "F"}
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    weights = as_numpy(model.W if hasattr(model, "W") else model, "weights", dims=2)
    if int(n_filters) < 1:
        raise ValueError(f"n_filters must be >= 1, got {n_filters}")
    weights = weights[: int(n_filters)]
    largest = np.abs(weights).max(axis=1, keepdims=True)
    normalized = 0.5 + 0.5 * weights / np.where(largest > 0, largest, 1.0)
    mosaic = tile_images(normalized, image_shape, n_columns=n_columns, order=order,
                         empty=np.inf)
    if title is None:
        title = f"First {len(weights)} filters"
    return mosaic_figure(mosaic, title, (0.0, 1.0), "#1f3b73", path)


def plot_samples(samples, image_shape, path=None, *, n_columns=None, order="C", title=None):
    """Draw one or several grids of samples side by side, as in the paper's samples figures.

    Parameters
    ----------
    samples : array (N, D), SampleResult, or mapping label -> array (N_i, D)
        Several panels (e.g. {"Test set": ..., "RBM": ..., "iRBM": ...}) are drawn left to
        right with their labels. A SampleResult shows its probabilities when it has them.
    image_shape : (height, width), with height * width = D
    path : str or Path, optional
    n_columns : int, optional
        Images per row in each panel; default ceil(sqrt(N_i)).
    order : {"C", "F"}
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    panels = dict(samples) if isinstance(samples, Mapping) else {"": samples}
    if not panels:
        raise ValueError("samples is an empty mapping: nothing to draw")
    mosaics = {}
    for label, images in panels.items():
        if hasattr(images, "samples"):  # a SampleResult
            images = images.probabilities if images.probabilities is not None else images.samples
        mosaics[label] = tile_images(images, image_shape, n_columns=n_columns, order=order,
                                     empty=np.inf)
    if list(mosaics) == [""]:  # one unlabeled grid
        return mosaic_figure(mosaics[""], title, (0.0, 1.0), "0.5", path)

    tallest = max(mosaic.shape[0] for mosaic in mosaics.values())
    widths = [mosaic.shape[1] for mosaic in mosaics.values()]
    panel_height = 3.0
    figure = new_figure(panel_height * sum(widths) / tallest + 0.3 * len(widths),
                        panel_height + 0.5 + (TITLE_INCHES if title else 0))
    grid = figure.add_gridspec(1, len(mosaics), width_ratios=widths, wspace=0.08)
    for index, (label, mosaic) in enumerate(mosaics.items()):
        axes = figure.add_subplot(grid[0, index])
        draw_mosaic(axes, mosaic, (0.0, 1.0), "0.5")
        axes.set_title(str(label))
    if title:
        figure.suptitle(title)
    return finish_figure(figure, path)


def plot_chain_evolution(snapshots, steps, image_shape, path=None, *, order="C", title=None):
    """Draw Gibbs chains over time: one row per chain, one column per snapshot step.

    Parameters
    ----------
    snapshots : array (n_snapshots, n_chains, D)
        As in ``SampleResult.snapshots``.
    steps : sequence of int, length n_snapshots
        Gibbs step of each snapshot (``SampleResult.snapshot_steps``).
    image_shape : (height, width)
    path : str or Path, optional
    order : {"C", "F"}
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    snapshots = as_numpy(snapshots, "snapshots", dims=3)
    steps = [int(step) for step in steps]
    if len(steps) != snapshots.shape[0]:
        raise ValueError(f"steps has {len(steps)} entries for {snapshots.shape[0]} snapshots")
    n_snapshots, n_chains, _ = snapshots.shape
    by_chain = snapshots.transpose(1, 0, 2).reshape(n_snapshots * n_chains, -1)
    mosaic = tile_images(by_chain, image_shape, n_columns=n_snapshots, order=order)
    height, width = check_image_shape(image_shape, snapshots.shape[2])
    cell = 0.8
    figure = new_figure(n_snapshots * cell + 0.6, n_chains * cell + 0.9)
    axes = figure.add_axes((0.5 / (n_snapshots * cell + 0.6), 0.6 / (n_chains * cell + 0.9),
                            n_snapshots * cell / (n_snapshots * cell + 0.6),
                            n_chains * cell / (n_chains * cell + 0.9)))
    draw_mosaic(axes, mosaic, (0.0, 1.0), "0.5")
    axes.set_axis_on()
    axes.set_xticks(np.arange(n_snapshots) * (width + 1) + (width - 1) / 2, steps)
    axes.set_yticks([])
    axes.set_xlabel("Gibbs step")
    axes.set_ylabel("chain")
    for spine in axes.spines.values():
        spine.set_visible(False)
    figure.suptitle(title or "Evolution of the Gibbs chains")
    return finish_figure(figure, path)


def _ordered_only(model, what):
    if getattr(model, "family", None) not in ("orbm", "irbm"):
        raise ValueError(f"{what} needs an ordered model (orbm or irbm) with a z variable, got "
                         f"family {getattr(model, 'family', type(model).__name__)!r}")


def _tail_position(n_hidden):
    """Where the iRBM's tail marker goes: past z = l by a gap that stays visible for large l."""
    return n_hidden + max(1, round(0.04 * n_hidden))


def _draw_tail(axes, n_hidden, tail, curve_top):
    """The iRBM's tail mass P(z > l | v) as a marker right of z = l, with its value. Each row is
    scaled to its curve; a tail above that scale is drawn at the top as an upward arrow."""
    off_scale = tail > curve_top
    position = _tail_position(n_hidden)
    height = 0.93 * curve_top if off_scale else tail
    axes.plot([position], [height], linestyle="none", marker="^" if off_scale else "D",
              color="tab:red", label="z > l (tail)" + (", off scale" if off_scale else ""))
    axes.axvline((n_hidden + position) / 2, color="0.6", linestyle=":", linewidth=1)
    axes.text(1.0, 1.02, f"P(z > l | v) = {tail:.2g}", transform=axes.transAxes, ha="right",
              va="bottom", fontsize=7, color="tab:red")


def plot_p_z_given_v(model, examples, image_shape, path=None, *, order="C", title=None):
    """Draw P(z | v) for a few examples: each row shows the example at left and the curve of
    P(z | v) over z = 1..n_hidden at right, as in the paper's figure.

    For the iRBM the mass of the tail, P(z > l | v) with l = n_hidden, is drawn as a separate
    red marker right of z = l labeled "z > l", with its value written above the row. Each row's
    y-axis is scaled to its curve over 1..l, so a dominant tail is drawn at the top of the axis
    as an upward arrow (its value is still written).

    Parameters
    ----------
    model : OrderedRBM or InfiniteRBM
    examples : array (M, n_visible)
        Binary inputs, one figure row each.
    image_shape : (height, width)
    path : str or Path, optional
    order : {"C", "F"}
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    _ordered_only(model, "plot_p_z_given_v")
    check_order(order)
    with torch.no_grad():
        # In float64, a tiny tail mass prints as e.g. 1e-75 instead of underflowing to 0.
        probabilities = torch.exp(model.log_p_z_given_v(examples).double()).cpu().numpy()
    images = as_numpy(model.check_visible(examples), "examples")
    height, width = check_image_shape(image_shape, images.shape[1])
    n_rows, n_hidden = probabilities.shape[0], model.n_hidden
    has_tail = model.family == "irbm"
    z_values = np.arange(1, n_hidden + 1)

    figure = new_figure(8.0, 1.1 * n_rows + 0.9)
    grid = figure.add_gridspec(n_rows, 2, width_ratios=[1, 6], wspace=0.2, hspace=0.35)
    curve_axes = None
    for row in range(n_rows):
        image_axes = figure.add_subplot(grid[row, 0])
        image_axes.imshow(images[row].reshape(height, width, order=order), cmap="gray",
                          vmin=0, vmax=1, interpolation="nearest")
        image_axes.set_axis_off()
        curve_axes = figure.add_subplot(grid[row, 1], sharex=curve_axes)
        curve_axes.plot(z_values, probabilities[row, :n_hidden], color="tab:blue",
                        marker="." if n_hidden <= 50 else None, label="P(z | v)")
        curve_top = 1.15 * max(float(probabilities[row, :n_hidden].max()), 1e-12)
        if has_tail:
            _draw_tail(curve_axes, n_hidden, float(probabilities[row, n_hidden]), curve_top)
        curve_axes.set_ylim(0, curve_top)
        curve_axes.tick_params(labelsize=7, labelbottom=row == n_rows - 1)
        if row == 0 and has_tail:
            curve_axes.legend(fontsize=7, loc="upper left")
        curve_axes.set_ylabel("P(z | v)", fontsize=8)
    last = _tail_position(n_hidden) if has_tail else n_hidden
    curve_axes.set_xlim(0.5, last + 0.5 + 0.01 * n_hidden)
    curve_axes.set_xlabel("z (number of hidden units used)")
    figure.suptitle(title or f"P(z | v) of a {model.family} with {n_hidden} hidden units")
    return finish_figure(figure, path)


def default_z_intervals(n_hidden: int, n_intervals: int = 10) -> list[tuple[int, int]]:
    """About ``n_intervals`` contiguous intervals [a, b) of equal width covering 1..n_hidden."""
    edges = np.unique(np.round(np.linspace(1, n_hidden + 1, min(n_intervals, n_hidden) + 1)))
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def top_inputs_by_z_interval(model, data, intervals=None, top=10, batch_size=1024):
    """Compute, for each interval [a, b) of z, the ``top`` inputs of ``data`` with the highest
    P(a <= z < b | v), and the average of that probability over them.

    Parameters
    ----------
    model : OrderedRBM or InfiniteRBM
    data : array (N, n_visible)
        Binary inputs (the paper used the test set).
    intervals : sequence of (a, b), optional
        Integer bounds with 1 <= a < b <= n_hidden + 1; default `default_z_intervals`. The
        iRBM's tail z > l is in no interval.
    top : int
        Inputs kept per interval (fewer if ``data`` has fewer rows).
    batch_size : int
        Rows of ``data`` processed at once, to bound memory.

    Returns
    -------
    indices : ndarray of int (top, n_intervals)
        Row indices into ``data``, best first.
    averages : ndarray (n_intervals,)
        Mean of P(a <= z < b | v) over each interval's top inputs.
    intervals : list of (a, b)
    """
    _ordered_only(model, "top_inputs_by_z_interval")
    n_hidden = model.n_hidden
    intervals = default_z_intervals(n_hidden) if intervals is None else [
        (int(a), int(b)) for a, b in intervals]
    if not intervals:
        raise ValueError("intervals is empty")
    for a, b in intervals:
        if not 1 <= a < b <= n_hidden + 1:
            raise ValueError(f"interval [{a}, {b}) is invalid: need 1 <= a < b <= n_hidden + 1 "
                             f"= {n_hidden + 1}")
    if int(top) < 1:
        raise ValueError(f"top must be >= 1, got {top}")
    data = model.check_visible(data)
    masses = []
    with torch.no_grad():
        for chunk in data.split(int(batch_size)):
            probabilities = torch.exp(model.log_p_z_given_v(chunk).double())
            masses.append(torch.stack([probabilities[:, a - 1:b - 1].sum(1) for a, b in intervals],
                                      1))
    masses = torch.cat(masses).cpu().numpy()
    top = min(int(top), masses.shape[0])
    # A stable descending sort keeps ties in data order, so results are reproducible.
    indices = np.argsort(-masses, axis=0, kind="stable")[:top]
    averages = np.take_along_axis(masses, indices, 0).mean(0)
    return indices, averages, intervals


def plot_top_inputs_by_z_interval(model, data, image_shape, path=None, *, intervals=None,
                                  top=10, order="C", title=None):
    """Draw the paper's top-inputs figure: for each interval [a, b) of z, a column of the
    ``top`` inputs maximizing P(a <= z < b | v) (best at the top), with a bar above giving the
    average of that probability over them.

    Parameters and ``intervals`` are as in `top_inputs_by_z_interval`; ``image_shape`` is
    (height, width), ``order`` is "C" or "F", ``path`` optional. Returns the Figure.
    """
    check_order(order)
    indices, averages, intervals = top_inputs_by_z_interval(model, data, intervals, top)
    images = as_numpy(model.check_visible(data)[torch.as_tensor(indices.ravel())], "data")
    height, width = check_image_shape(image_shape, images.shape[1])
    n_top, n_intervals = indices.shape
    mosaic = tile_images(images, image_shape, n_columns=n_intervals, order=order)

    cell, left, right, bottom, bar, gap, top_margin = 0.6, 0.8, 0.2, 0.8, 1.2, 0.1, 0.5
    width_inches = n_intervals * cell + left + right
    height_inches = n_top * cell + bottom + bar + gap + top_margin
    figure = new_figure(width_inches, height_inches)
    image_axes = figure.add_axes((left / width_inches, bottom / height_inches,
                                  n_intervals * cell / width_inches, n_top * cell / height_inches))
    bar_axes = figure.add_axes((left / width_inches, (bottom + n_top * cell + gap) / height_inches,
                                n_intervals * cell / width_inches, bar / height_inches),
                               sharex=image_axes)
    # One x unit per image plus its border, so that columns line up with the bars above.
    draw_mosaic(image_axes, mosaic, (0.0, 1.0), "0.5", aspect="auto",
                extent=(-0.5, -0.5 + mosaic.shape[1] / (width + 1),
                        -0.5 + mosaic.shape[0] / (height + 1), -0.5))
    image_axes.set_axis_on()
    image_axes.set_xlim(-0.5, n_intervals - 0.5)
    image_axes.set_xticks(np.arange(n_intervals), [f"[{a}, {b})" for a, b in intervals],
                          rotation=45, ha="right", fontsize=8)
    image_axes.set_yticks(np.arange(n_top), [str(rank) for rank in range(1, n_top + 1)],
                          fontsize=8)
    image_axes.set_ylabel(f"top {n_top} inputs")
    bar_axes.bar(np.arange(n_intervals), averages, width=0.8, color="tab:blue")
    bar_axes.set_ylim(0, max(float(averages.max()), 1e-12) * 1.25)
    bar_axes.tick_params(labelbottom=False, labelsize=7)
    bar_axes.set_ylabel("mean P(a≤z<b|v)", fontsize=8)
    figure.suptitle(title or f"Top {n_top} inputs maximizing P(a ≤ z < b | v)")
    return finish_figure(figure, path)
