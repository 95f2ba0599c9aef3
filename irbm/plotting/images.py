"""Image figures: grids of binary images, filters, samples and the evolution of Gibbs chains.

Images are flat vectors of length height * width; ``order="F"`` reads them column-major
(CalTech101 Silhouettes is stored so). Every image figure draws 1 white and 0 black and says so
in its caption, naming what 1 means when ``one_means`` is given (e.g. "background" for
CalTech101 Silhouettes, which stores the silhouette as 0).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ._canvas import (
    FILTER_CMAP,
    add_heading,
    as_numpy,
    check_image_shape,
    draw_mosaic,
    finish_figure,
    heading_inches,
    mosaic_figure,
    new_figure,
    pixel_caption,
    tile_images,
)

__all__ = ["image_grid", "plot_filters", "plot_samples", "plot_chain_evolution"]


def image_grid(images, image_shape, path=None, *, n_columns=None, order="C", title=None,
               value_range=(0.0, 1.0), border_color="0.5", one_means=None):
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
    one_means : str, optional
        What pixel value 1 stands for. With a title or ``one_means`` (and the binary value
        range), a caption says what white and black mean; without either the figure is only
        the grid.

    Returns
    -------
    matplotlib.figure.Figure
    """
    mosaic = tile_images(images, image_shape, n_columns=n_columns, order=order, empty=np.inf)
    binary = value_range is not None and tuple(map(float, value_range)) == (0.0, 1.0)
    caption = pixel_caption(one_means) if binary and (title or one_means) else None
    return mosaic_figure(mosaic, title, value_range, border_color, path, caption=caption)


def plot_filters(model, image_shape, path=None, *, n_filters=96, n_columns=12, order="C",
                 title=None):
    """Draw the first ``n_filters`` filters as images, as in the paper's filters figure.

    Filter k sits at row k // n_columns, column k % n_columns (across columns first). Each
    filter is scaled by its own largest absolute weight so that weak filters stay visible, in a
    diverging colormap centred at zero (positive red, negative blue, zero white): an untrained
    iRBM unit (all-zero weights) shows as a flat white square.

    Parameters
    ----------
    model : EnergyModel or array (n_hidden, n_visible)
        A model (its `filters`) or the filters themselves.
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
    weights = as_numpy(model.filters() if hasattr(model, "filters") else model, "weights",
                       dims=2)
    if int(n_filters) < 1:
        raise ValueError(f"n_filters must be >= 1, got {n_filters}")
    weights = weights[: int(n_filters)]
    largest = np.abs(weights).max(axis=1, keepdims=True)
    normalized = weights / np.where(largest > 0, largest, 1.0)
    mosaic = tile_images(normalized, image_shape, n_columns=n_columns, order=order,
                         empty=np.inf)
    if title is None:
        title = f"First {len(weights)} filters"
    return mosaic_figure(mosaic, title, (-1.0, 1.0), "0.35", path, cmap=FILTER_CMAP,
                         caption="red > 0 > blue, each filter scaled to its largest |weight|")


def plot_samples(samples, image_shape, path=None, *, n_columns=None, order="C", title=None,
                 one_means=None, probabilities=False):
    """Draw one or several grids of samples side by side, as in the paper's samples figures.

    Parameters
    ----------
    samples : array (N, D), SampleResult, or mapping label -> array (N_i, D)
        Several panels (e.g. {"Test set": ..., "RBM": ..., "iRBM": ...}) are drawn left to
        right with their labels.
    image_shape : (height, width), with height * width = D
    path : str or Path, optional
    n_columns : int, optional
        Images per row in each panel; default ceil(sqrt(N_i)).
    order : {"C", "F"}
    title : str, optional
    one_means : str, optional
        What pixel value 1 stands for, written in the caption.
    probabilities : bool
        For a SampleResult, draw P(v = 1 | h) of the last step instead of the binary samples.
        The default shows the chains' actual states: the mean given the last h is smoother, but
        for a chain at small z it is a blur close to sigmoid(c) whatever the sample looks like.

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
            shown = images.probabilities if probabilities else None
            images = images.samples if shown is None else shown
        mosaics[label] = tile_images(images, image_shape, n_columns=n_columns, order=order,
                                     empty=np.inf)
    caption = pixel_caption(one_means)
    if list(mosaics) == [""]:  # one unlabeled grid
        return mosaic_figure(mosaics[""], title, (0.0, 1.0), "0.5", path, caption=caption)

    tallest = max(mosaic.shape[0] for mosaic in mosaics.values())
    widths = [mosaic.shape[1] for mosaic in mosaics.values()]
    panel_height = 3.0
    figure_width = panel_height * sum(widths) / tallest + 0.3 * len(widths)
    top = heading_inches(title, caption, figure_width) + 0.25  # + the panel labels
    figure = new_figure(figure_width, panel_height + 0.5 + top)
    grid = figure.add_gridspec(1, len(mosaics), width_ratios=widths, wspace=0.08,
                               top=1 - top / figure.get_figheight(), bottom=0.02)
    for index, (label, mosaic) in enumerate(mosaics.items()):
        axes = figure.add_subplot(grid[0, index])
        draw_mosaic(axes, mosaic, (0.0, 1.0), "0.5")
        axes.set_title(str(label))
    add_heading(figure, title, caption, wrap=True)
    return finish_figure(figure, path)


def plot_chain_evolution(snapshots, steps, image_shape, path=None, *, order="C", title=None,
                         one_means=None):
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
    one_means : str, optional
        What pixel value 1 stands for, written in the caption.

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
    title = title or "Evolution of the Gibbs chains"
    caption = pixel_caption(one_means)
    cell, left, bottom = 0.8, 0.5, 0.6
    figure_width = n_snapshots * cell + left + 0.1
    top = heading_inches(title, caption, figure_width)
    figure_height = n_chains * cell + bottom + top
    figure = new_figure(figure_width, figure_height)
    axes = figure.add_axes((left / figure_width, bottom / figure_height,
                            n_snapshots * cell / figure_width, n_chains * cell / figure_height))
    draw_mosaic(axes, mosaic, (0.0, 1.0), "0.5")
    axes.set_xticks(np.arange(n_snapshots) * (width + 1) + (width - 1) / 2, steps)
    axes.set_xlabel("Gibbs step")
    axes.set_ylabel("chain")
    add_heading(figure, title, caption, wrap=True)
    return finish_figure(figure, path)
