"""Helpers shared by the plotting modules: array conversion, image mosaics, atomic saving.

Figures are built as bare `matplotlib.figure.Figure` objects rendered by the Agg canvas, never
through pyplot: no screen is needed, no global backend is switched, and figures are freed as
soon as the caller drops them.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import torch
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

from .._io import atomic_write

ORDERS = ("C", "F")
DPI = 100
# Largest side of a mosaic, in screen pixels, before integer upscaling stops.
_TARGET_PIXELS = 800
TITLE_INCHES = 0.3
_LINE_INCHES = {10: 1.25 * 10 / 72, 8: 1.25 * 8 / 72}  # a wrapped line at 10 and 8 points
CAPTION_INCHES = 0.22
# The one color convention of every figure: binary images and probabilities in gray levels with
# 1 white and 0 black; filters in a diverging map, zero white, positive red, negative blue.
BINARY_CMAP = "gray"
FILTER_CMAP = "RdBu_r"


def as_numpy(values, name: str, *, dims: int | None = None) -> np.ndarray:
    """``values`` (tensor, array or sequence) as a float64 numpy array with ``dims`` dimensions."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} must be numeric, got {type(values).__name__}: {error}") from None
    if dims is not None and array.ndim != dims:
        raise ValueError(f"{name} must have {dims} dimension(s), got shape {array.shape}")
    return array


def new_figure(width: float, height: float) -> Figure:
    """An Agg-backed Figure of the given size in inches."""
    figure = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(figure)
    return figure


def save_figure(figure: Figure, path) -> Path:
    """Write ``figure`` as PNG to ``path`` atomically: a temporary file in the same directory,
    then os.replace, so that an interrupted save never leaves a truncated image behind.

    The temporary file is opened with plain ``open`` (not ``tempfile``), so the PNG gets the
    usual umask-based permissions instead of 0600.
    """
    path = Path(path)
    with atomic_write(path) as stream:
        figure.savefig(stream, format="png", dpi=DPI)
    return path


def finish_figure(figure: Figure, path) -> Figure:
    """Save ``figure`` to ``path`` when one is given; return the figure."""
    if path is not None:
        save_figure(figure, path)
    return figure


def check_image_shape(image_shape, n_visible: int) -> tuple[int, int]:
    """Validate (height, width) against the vector length ``n_visible``."""
    try:
        height, width = (int(size) for size in image_shape)
    except (TypeError, ValueError):
        raise ValueError(f"image_shape must be (height, width), got {image_shape!r}") from None
    if height < 1 or width < 1 or height * width != n_visible:
        raise ValueError(f"image_shape {(height, width)} does not match vectors of length "
                         f"{n_visible} (height * width must equal it)")
    return height, width


def check_order(order: str) -> str:
    if order not in ORDERS:
        raise ValueError(f"order must be 'C' (row-major) or 'F' (column-major, as CalTech101 "
                         f"Silhouettes is stored), got {order!r}")
    return order


def tile_images(images, image_shape, *, n_columns: int | None = None, order: str = "C",
                border: int = 1, empty: float = np.nan) -> np.ndarray:
    """Arrange flat images in a mosaic, filling each row left to right before the next row.

    Parameters
    ----------
    images : array (N, height * width)
    image_shape : (height, width)
    n_columns : int, optional
        Images per row; default ceil(sqrt(N)).
    order : {"C", "F"}
        How each row of ``images`` unrolls an image: "F" for column-major data.
    border : int
        Pixels between images, filled with NaN (drawn in the border color).
    empty : float
        Value of the unused cells after the last image (the figures pass inf and draw them
        transparent).

    Returns
    -------
    ndarray (n_rows * (height + border) - border, n_columns * (width + border) - border)
        (N, width) for ``image_shape`` (1, width): the rows of ``images`` as they are, one
        above the other, since strips of one pixel side by side cannot be read.
    """
    images = as_numpy(images, "images")
    if images.ndim == 1:
        images = images[None]
    if images.ndim != 2 or images.shape[0] == 0:
        raise ValueError(f"images must have shape (N, D) with N >= 1, got {images.shape}")
    height, width = check_image_shape(image_shape, images.shape[1])
    order = check_order(order)
    n_images = images.shape[0]
    if height == 1:  # vectors, not pictures: one per line and no border, an (N, D) heat map
        n_columns, border = 1, 0
    if n_columns is None:
        n_columns = int(np.ceil(np.sqrt(n_images)))
    if int(n_columns) < 1:
        raise ValueError(f"n_columns must be >= 1, got {n_columns}")
    n_columns = min(int(n_columns), n_images)
    n_rows = -(-n_images // n_columns)
    mosaic = np.full((n_rows * (height + border) - border, n_columns * (width + border) - border),
                     np.nan)
    if n_images % n_columns:
        last_top = (n_rows - 1) * (height + border)
        last_left = (n_images % n_columns) * (width + border)
        # The borders around the unused cells go too, so no border line hangs in empty space.
        mosaic[last_top - border:, last_left - border:] = empty
    for index, flat in enumerate(images):
        row, column = divmod(index, n_columns)
        top, left = row * (height + border), column * (width + border)
        mosaic[top:top + height, left:left + width] = flat.reshape(height, width, order=order)
    return mosaic


def pixel_caption(one_means: str | None = None) -> str:
    """What white and black mean in an image figure, e.g. "white = 1 (background), black = 0".

    Every image figure draws pixel value 1 white and 0 black (values in between, such as
    P(v = 1 | h), in gray levels). Datasets differ in what 1 stands for (ink for MNIST, the
    background for CalTech101 Silhouettes), so the caption names it when it is known.
    """
    return f"white = 1 ({one_means}), black = 0" if one_means else "white = 1, black = 0"


def wrap_text(text: str, width_inches: float | None, fontsize: float) -> str:
    """``text`` broken into lines that fit ``width_inches`` at ``fontsize`` points (a title
    naming the model, path and temperatures was cut off at both edges of a narrow figure);
    None: as it is."""
    if width_inches is None:
        return text
    # 0.62 em: DejaVu's capitals and digits; a floor of 8 keeps a word or two on a line.
    characters = max(8, int(width_inches * 72 / (0.62 * fontsize)))
    return "\n".join(textwrap.fill(line, characters) for line in text.split("\n"))


def heading_inches(title: str | None, caption: str | None, width: float | None = None) -> float:
    """Height taken at the top of a figure ``width`` inches wide (None: one line each) by
    `add_heading` with these texts."""
    if not (title or caption):
        return 0.0
    lines = wrap_text(title, width, 10).count("\n") + 1 if title else 0
    captions = wrap_text(caption, width, 8).count("\n") + 1 if caption else 0
    # The first line of each takes its full height; a wrapped line about 1.25 em more.
    return (0.1 + (TITLE_INCHES + _LINE_INCHES[10] * (lines - 1) if lines else 0.0)
            + (CAPTION_INCHES + _LINE_INCHES[8] * (captions - 1) if captions else 0.0))


def add_heading(figure, title: str | None, caption: str | None, *, wrap: bool = False) -> None:
    """The figure's title, and under it a smaller caption line, in the top `heading_inches`
    (``wrap``: in as many lines as the figure's width needs, as `heading_inches` counted with
    that width)."""
    height, width = figure.get_figheight(), figure.get_figwidth() if wrap else None
    lines = 0
    if title:
        title = wrap_text(title, width, 10)
        lines = title.count("\n") + 1
        figure.suptitle(title, y=1 - 0.05 / height, va="top", fontsize=10)
    if caption:
        below = 0.05 + (TITLE_INCHES + _LINE_INCHES[10] * (lines - 1) if lines else 0.0)
        figure.text(0.5, 1 - below / height, wrap_text(caption, width, 8), ha="center",
                    va="top", fontsize=8, color="0.25")


def mosaic_rgba(mosaic, value_range, border_color, cmap: str = BINARY_CMAP):
    """Values as an RGBA array (H, W, 4) through ``cmap``: NaN (borders) in ``border_color``,
    inf (unused cells) transparent.

    ``value_range`` (low, high) maps low to the colormap's start and high to its end (for the
    binary colormap: black and white); None uses the finite values' own range.
    """
    finite = np.isfinite(mosaic)
    if value_range is None:
        value_range = (mosaic[finite].min(), mosaic[finite].max()) if finite.any() else (0, 1)
    low, high = (float(value) for value in value_range)
    scaled = np.clip((np.where(finite, mosaic, low) - low) / ((high - low) or 1.0), 0, 1)
    rgba = colormaps[cmap](scaled)
    rgba[np.isnan(mosaic)] = to_rgba(border_color)
    rgba[np.isinf(mosaic)] = (0.0, 0.0, 0.0, 0.0)
    return rgba


def draw_mosaic(axes, mosaic, value_range, border_color, *, cmap: str = BINARY_CMAP,
                **imshow_options):
    """Show a mosaic from `tile_images` without ticks, framed in ``border_color``: without the
    frame, white pixels at an image's edge would merge with the white page and a white digit
    on black would read as a black shape on white."""
    axes.imshow(mosaic_rgba(mosaic, value_range, border_color, cmap), interpolation="nearest",
                **imshow_options)
    axes.set_xticks([])
    axes.set_yticks([])
    for spine in axes.spines.values():
        spine.set_edgecolor(border_color)


def mosaic_figure(mosaic, title, value_range, border_color, path, *, caption=None,
                  cmap: str = BINARY_CMAP):
    """A figure holding only ``mosaic``, each image pixel drawn as an integer block of pixels,
    under ``title`` and ``caption`` (one line each, both optional)."""
    scale = int(np.clip(_TARGET_PIXELS // max(mosaic.shape), 1, 12))
    width, height = mosaic.shape[1] * scale / DPI, mosaic.shape[0] * scale / DPI
    top = heading_inches(title, caption, max(width, 1.0))
    # Two pixels round the image: the frame, drawn on the axes' edge, lost its right and
    # bottom halves at the figure's edge. Whole pixels, so each image pixel stays a block.
    margin = 2 / DPI
    figure = new_figure(max(width, 1.0) + 2 * margin, height + top + margin)
    full_width, full_height = figure.get_figwidth(), figure.get_figheight()
    axes = figure.add_axes((margin / full_width, margin / full_height,
                            1 - 2 * margin / full_width, height / full_height))
    draw_mosaic(axes, mosaic, value_range, border_color, cmap=cmap)
    add_heading(figure, title, caption, wrap=True)
    return finish_figure(figure, path)
