"""Figures of the models with z (oRBM, iRBM): P(z | v) for a few inputs, and the inputs that
maximize P(a <= z < b | v) for intervals [a, b) of z.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import torch

from ._canvas import (
    add_heading,
    as_numpy,
    check_image_shape,
    check_order,
    draw_mosaic,
    finish_figure,
    heading_inches,
    new_figure,
    pixel_caption,
    tile_images,
)

__all__ = ["plot_p_z_given_v", "top_inputs_by_z_interval", "plot_top_inputs_by_z_interval",
           "quantile_z_intervals", "equal_width_z_intervals"]

logger = logging.getLogger(__name__)

# The P(z | v) axis ends where every plotted curve has this share of its mass over 1..l.
SHOWN_MASS = 0.999


def _ordered_only(model, what):
    if not getattr(model, "has_z", False):
        name = getattr(model, "display_name", type(model).__name__)
        raise ValueError(f"{what} needs a model with a z variable (has_z: the families orbm or "
                         f"irbm, or one of their subclasses), got an {name}")


def _p_z_given_v(model, data) -> np.ndarray:
    """P(z | v) in float64, shape (N, n_hidden) (+ 1 tail column for `has_tail` models)."""
    with torch.no_grad():
        # In float64 a tiny tail mass prints as e.g. 1e-75 instead of underflowing to 0.
        return torch.exp(model.log_p_z_given_v(data).double()).cpu().numpy()


def shown_z_range(curves, n_hidden: int) -> int:
    """Last z of the P(z | v) axis: the largest over the rows of ``curves`` (M, n_hidden) of the
    smallest z holding `SHOWN_MASS` of the row's mass over 1..n_hidden, plus a margin; the full
    n_hidden unless that saves a fifth of the axis (short axes are not worth a cut)."""
    cumulative = np.cumsum(curves, 1) / np.maximum(curves.sum(1, keepdims=True), 1e-300)
    covered = int((cumulative < SHOWN_MASS).sum(1).max()) + 1
    last = covered + max(2, math.ceil(0.05 * covered))
    return last if last < 0.8 * n_hidden else n_hidden


def _draw_tail(axes, position, separator, tail, curve_top):
    """The iRBM's tail mass P(z > l | v) as a red marker at ``position``, past a dotted line at
    ``separator``, with its value above the row. Each row is scaled to its curve; a tail above
    that scale is drawn at the top as an upward arrow."""
    off_scale = tail > curve_top
    height = 0.93 * curve_top if off_scale else tail
    axes.plot([position], [height], linestyle="none", marker="^" if off_scale else "D",
              color="tab:red", label="z > l (tail)" + (", off scale" if off_scale else ""))
    axes.axvline(separator, color="0.6", linestyle=":", linewidth=1)
    axes.text(1.0, 1.02, f"P(z > l | v) = {tail:.2g}", transform=axes.transAxes, ha="right",
              va="bottom", fontsize=7, color="tab:red")


def plot_p_z_given_v(model, examples, image_shape, path=None, *, order="C", title=None,
                     one_means=None):
    """Draw P(z | v) for a few examples: each row shows the example at left and the curve of
    P(z | v) over z at right, as in the paper's figure.

    The z axis stops where the curves have their mass (`shown_z_range`), not at l = n_hidden:
    the curves of a model with hundreds of units sit at small z and would be squashed against
    the left edge. When it is cut, the x label says where and gives the largest mass any row
    has beyond the cut. For models with a tail (the iRBM), the mass P(z > l | v) is drawn as a
    separate red marker right of the curves labeled "z > l", with its value written above the
    row; each row's y-axis is scaled to its curve, so a dominant tail is drawn at the top of the
    axis as an upward arrow (its value is still written).

    Parameters
    ----------
    model : EnergyModel with ``has_z``
    examples : array (M, n_visible)
        Binary inputs, one figure row each.
    image_shape : (height, width)
    path : str or Path, optional
    order : {"C", "F"}
    title : str, optional
    one_means : str, optional
        What pixel value 1 stands for, written in the caption.

    Returns
    -------
    matplotlib.figure.Figure
    """
    _ordered_only(model, "plot_p_z_given_v")
    check_order(order)
    probabilities = _p_z_given_v(model, examples)
    images = as_numpy(model.check_visible(examples), "examples")
    check_image_shape(image_shape, images.shape[1])
    n_rows, n_hidden = probabilities.shape[0], model.n_hidden
    curves = probabilities[:, :n_hidden]
    last = shown_z_range(curves, n_hidden)
    gap = max(1, round(0.04 * last))
    tail_position = last + gap

    title = title or f"P(z | v) of an {model.display_name} with {n_hidden} hidden units"
    caption = pixel_caption(one_means)
    top = heading_inches(title, caption, 8.0) + 0.2  # + the tail values above the first row
    figure = new_figure(8.0, 1.1 * n_rows + 0.9 + top)
    grid = figure.add_gridspec(n_rows, 2, width_ratios=[1, 6], wspace=0.3, hspace=0.35,
                               top=1 - top / figure.get_figheight(),
                               bottom=0.75 / figure.get_figheight())
    curve_axes = None
    for row in range(n_rows):
        image_axes = figure.add_subplot(grid[row, 0])
        draw_mosaic(image_axes, tile_images(images[row], image_shape, order=order), (0.0, 1.0),
                    "0.5")
        curve_axes = figure.add_subplot(grid[row, 1], sharex=curve_axes)
        curve_axes.plot(np.arange(1, last + 1), curves[row, :last], color="tab:blue",
                        marker="." if last <= 50 else None, label="P(z | v)")
        curve_top = 1.15 * max(float(curves[row].max()), 1e-12)
        if model.has_tail:
            _draw_tail(curve_axes, tail_position, last + gap / 2,
                       float(probabilities[row, n_hidden]), curve_top)
        curve_axes.set_ylim(0, curve_top)
        curve_axes.tick_params(labelsize=7, labelbottom=row == n_rows - 1)
        if row == 0 and model.has_tail:
            curve_axes.legend(fontsize=7, loc="best")
        curve_axes.set_ylabel("P(z | v)", fontsize=8)
    right = tail_position if model.has_tail else last
    curve_axes.set_xlim(0.5, right + 0.5 + 0.01 * right)
    if model.has_tail:
        # The marker stands for every z > l: no numeric tick may sit under it.
        ticks = [tick for tick in curve_axes.get_xticks() if 1 <= tick <= last]
        curve_axes.set_xticks(ticks + [tail_position], [f"{tick:g}" for tick in ticks] + ["> l"])
    label = "z (number of hidden units used)"
    if last < n_hidden:
        # Say what the cut hides: the axis must not suggest that the curves end at `last`.
        hidden = float(curves[:, last:].sum(1).max())
        label += (f"\naxis cut at z = {last} of l = {n_hidden}: "
                  f"P({last} < z ≤ l | v) ≤ {hidden:.1g} in every row")
    curve_axes.set_xlabel(label, fontsize=9)
    add_heading(figure, title, caption, wrap=True)
    return finish_figure(figure, path)


def equal_width_z_intervals(n_hidden: int, n_intervals: int = 10) -> list[tuple[int, int]]:
    """About ``n_intervals`` contiguous intervals [a, b) of equal width covering 1..n_hidden."""
    edges = np.unique(np.round(np.linspace(1, n_hidden + 1, min(n_intervals, n_hidden) + 1)))
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def quantile_z_intervals(mass, n_intervals: int = 10, min_share: float | None = None):
    """Contiguous intervals [a, b) covering z = 1..len(mass), each holding about an equal share
    of ``mass``.

    Value z goes to slice floor(n_intervals * u) where u is the middle of its mass on the
    cumulative scale, so an interval holds about 1 / n_intervals of the mass; a value with more
    mass than that gets an interval of its own. An interval left with less than ``min_share``
    of the mass (default a tenth of the equal share) is merged into its left neighbour (the
    first one into its right neighbour): its top inputs would say nothing about z.

    Parameters
    ----------
    mass : array (n_hidden,)
        Non-negative mass of z = 1..n_hidden, e.g. P(z | v) summed over a data set.
    n_intervals : int
        Most intervals returned.
    min_share : float, optional

    Returns
    -------
    list of (a, b)
        From a = 1 to b = n_hidden + 1, without gaps.
    """
    mass = np.asarray(mass, dtype=np.float64)
    if mass.ndim != 1 or len(mass) == 0 or (mass < 0).any() or not mass.sum() > 0:
        raise ValueError("mass must be a non-empty 1-D array of non-negative values, not all 0")
    if int(n_intervals) < 1:
        raise ValueError(f"n_intervals must be >= 1, got {n_intervals}")
    n_intervals = int(n_intervals)
    min_share = 0.1 / n_intervals if min_share is None else float(min_share)
    share = mass / mass.sum()
    middle = np.cumsum(share) - share / 2
    slices = np.minimum((middle * n_intervals).astype(int), n_intervals - 1)
    starts = [0] + [z for z in range(1, len(share)) if slices[z] != slices[z - 1]]
    intervals = [[a, b] for a, b in zip(starts, starts[1:] + [len(share)])]
    merged = []
    for a, b in intervals:
        # A small interval joins its left neighbour; a small first one absorbs its right one.
        if merged and min(share[a:b].sum(), share[merged[-1][0]:merged[-1][1]].sum()) < min_share:
            merged[-1][1] = b
        else:
            merged.append([a, b])
    return [(a + 1, b + 1) for a, b in merged]


def top_inputs_by_z_interval(model, data, intervals=None, top=10, batch_size=1024):
    """Compute, for each interval [a, b) of z, the ``top`` inputs of ``data`` with the highest
    P(a <= z < b | v), and the average of that probability over them.

    Parameters
    ----------
    model : EnergyModel with ``has_z``
    data : array (N, n_visible)
        Binary inputs (the paper used the test set).
    intervals : sequence of (a, b), optional
        Integer bounds with 1 <= a < b <= n_hidden + 1, used as given. Default: about ten
        intervals holding comparable shares of the mass of P(z | v) summed over ``data``
        (`quantile_z_intervals`), so that none is nearly empty. The iRBM's tail z > l is in no
        interval.
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
    data = model.check_visible(data)
    chunks = data.split(int(batch_size))
    if intervals is None:
        # A first pass for the data's distribution of z: one pass per interval set is cheaper
        # than keeping the (N, n_hidden) matrix of a large test set.
        pooled = sum(_p_z_given_v(model, chunk)[:, :n_hidden].sum(0) for chunk in chunks)
        intervals = quantile_z_intervals(pooled)
        logger.debug("z intervals by quantile of the data's P(z | v): %s", intervals)
    else:
        intervals = [(int(a), int(b)) for a, b in intervals]
    if not intervals:
        raise ValueError("intervals is empty")
    for a, b in intervals:
        if not 1 <= a < b <= n_hidden + 1:
            raise ValueError(f"interval [{a}, {b}) is invalid: need 1 <= a < b <= n_hidden + 1 "
                             f"= {n_hidden + 1}")
    if int(top) < 1:
        raise ValueError(f"top must be >= 1, got {top}")
    masses = []
    for chunk in chunks:
        # Direct sums, not differences of a cumulative sum, keep tiny masses exact.
        probabilities = _p_z_given_v(model, chunk)
        masses.append(np.stack([probabilities[:, a - 1:b - 1].sum(1) for a, b in intervals], 1))
    masses = np.concatenate(masses)
    top = min(int(top), masses.shape[0])
    # A stable descending sort keeps ties in data order, so results are reproducible.
    indices = np.argsort(-masses, axis=0, kind="stable")[:top]
    averages = np.take_along_axis(masses, indices, 0).mean(0)
    return indices, averages, intervals


def plot_top_inputs_by_z_interval(model, data, image_shape, path=None, *, intervals=None,
                                  top=10, order="C", title=None, one_means=None):
    """Draw the paper's top-inputs figure: for each interval [a, b) of z, a column of the
    ``top`` inputs maximizing P(a <= z < b | v) (best at the top), with a bar above giving the
    average of that probability over them.

    Parameters and ``intervals`` are as in `top_inputs_by_z_interval` (by default intervals
    holding comparable shares of the data's P(z | v) mass); ``image_shape`` is (height, width),
    ``order`` is "C" or "F", ``path`` optional, ``one_means`` what pixel value 1 stands for
    (written in the caption). Returns the Figure.
    """
    check_order(order)
    indices, averages, intervals = top_inputs_by_z_interval(model, data, intervals, top)
    images = as_numpy(model.check_visible(data)[torch.as_tensor(indices.ravel())], "data")
    height, width = check_image_shape(image_shape, images.shape[1])
    n_top, n_intervals = indices.shape
    mosaic = tile_images(images, image_shape, n_columns=n_intervals, order=order)

    title = title or f"Top {n_top} inputs maximizing P(a ≤ z < b | v)"
    caption = pixel_caption(one_means)
    cell, left, right, bottom, bar, gap = 0.6, 0.8, 0.2, 0.8, 1.2, 0.1
    width_inches = max(n_intervals * cell + left + right, 4.0)
    top_margin = heading_inches(title, caption, width_inches) + 0.1
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
    add_heading(figure, title, caption, wrap=True)
    return finish_figure(figure, path)
