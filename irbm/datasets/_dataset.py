"""The `Dataset` container and the stochastic binarization every loader shares."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

SPLITS = ("train", "valid", "test")

# Rows binarized per draw: bounds the float64 uniforms held at once (~60 MB for 28x28 images).
# Drawing row blocks in turn consumes RandomState's stream exactly like one rng.rand(*shape).
_BINARIZE_ROWS = 10_000


@dataclass(frozen=True, repr=False, eq=False)
class Dataset:
    """Binary data split into train / valid / test, and how a row becomes a picture.

    Attributes
    ----------
    name : str
    train, valid, test : ndarray of uint8, shape (N_split, n_visible)
        Values in {0, 1}.
    image_shape : tuple (height, width)
        height * width == n_visible.
    pixel_order : {"C", "F"}
        How an image was flattened into a row: "C" row-major (MNIST), "F" column-major
        (CalTech101 Silhouettes, stored the MATLAB way). `to_image` undoes it.
    source : str
        Where the data was read from (a file path or a package), for logs and reports.
    labels : dict or None
        {"train", "valid", "test": ndarray (N_split,)}: each row's class where the loader
        reads them (MNIST and CalTech101 files with one label per row, digits), for
        classifiers on learned features; None otherwise (user files, mnist5k).
    """

    name: str
    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    image_shape: tuple[int, int]
    pixel_order: str = "C"
    source: str = ""
    labels: dict[str, np.ndarray] | None = None

    def __post_init__(self):
        object.__setattr__(self, "image_shape", tuple(int(s) for s in self.image_shape))
        if self.pixel_order not in ("C", "F"):
            raise ValueError(f"pixel_order must be 'C' or 'F', got {self.pixel_order!r}")
        for split in SPLITS:
            x = getattr(self, split)
            if not isinstance(x, np.ndarray) or x.dtype != np.uint8 or x.ndim != 2:
                raise ValueError(f"{self.name}: {split} must be a 2-D uint8 array, got "
                                 f"{type(x).__name__} {getattr(x, 'dtype', '')} "
                                 f"{getattr(x, 'shape', '')}")
            if x.size and x.max() > 1:
                raise ValueError(f"{self.name}: {split} has values other than 0 and 1")
            if x.shape[1] != self.train.shape[1]:
                raise ValueError(f"{self.name}: {split} has {x.shape[1]} columns, "
                                 f"train has {self.train.shape[1]}")
        if self.labels is not None and (set(self.labels) != set(SPLITS) or any(
                np.shape(self.labels[split]) != (len(getattr(self, split)),) for split in SPLITS)):
            raise ValueError(f"{self.name}: labels must be {{train, valid, test: one label per "
                             f"row}}, got shapes "
                             f"{ {k: np.shape(v) for k, v in self.labels.items()} }")
        if math.prod(self.image_shape) != self.n_visible or len(self.image_shape) != 2:
            raise ValueError(f"{self.name}: image_shape {self.image_shape} does not hold "
                             f"{self.n_visible} pixels")

    @property
    def n_visible(self) -> int:
        """Number of visible units (pixels per row)."""
        return self.train.shape[1]

    def to_image(self, rows) -> np.ndarray:
        """Upright images from rows: (n_visible,) -> (H, W); (..., n_visible) -> (..., H, W).

        Works for any values (binary rows, mean visibles, or a weight matrix's filters); torch
        tensors on any device are accepted too. The dtype is kept.
        """
        if isinstance(rows, torch.Tensor):
            rows = rows.detach().cpu()
        rows = np.asarray(rows)
        if rows.ndim == 0 or rows.shape[-1] != self.n_visible:
            raise ValueError(f"expected rows of {self.n_visible} values, got shape {rows.shape}")
        height, width = self.image_shape
        if self.pixel_order == "C":
            return rows.reshape(*rows.shape[:-1], height, width)
        # Column-major: consecutive values run down a column, so build (W, H) and transpose.
        return rows.reshape(*rows.shape[:-1], width, height).swapaxes(-1, -2)

    def subset(self, n_train: int | None = None, n_valid: int | None = None,
               n_test: int | None = None) -> Dataset:
        """The first rows of each split (None keeps a split whole), for quick tests and demos."""
        def head(x, n):
            return x if n is None else x[: int(n)]
        sizes = dict(zip(SPLITS, (n_train, n_valid, n_test)))
        return replace(self, train=head(self.train, n_train), valid=head(self.valid, n_valid),
                       test=head(self.test, n_test),
                       labels=None if self.labels is None else {
                           split: head(self.labels[split], sizes[split]) for split in SPLITS})

    def __repr__(self):
        height, width = self.image_shape
        return (f"Dataset({self.name!r}, train={len(self.train)}, valid={len(self.valid)}, "
                f"test={len(self.test)}, n_visible={self.n_visible}, image={height}x{width}, "
                f"source={self.source!r})")


def binarize_stochastic(splits: Sequence[np.ndarray], scale: float, seed: int) -> list[np.ndarray]:
    """The authors' binarization: pixel = (x / scale > U(0, 1)).

    One ``np.random.RandomState(seed)`` draws a uniform per value for each split in turn (train,
    then valid, then test), exactly as ``rng.rand(*x.shape)`` per split would.

    Parameters
    ----------
    splits : sequence of ndarray, each (N_split, n_visible)
        Intensities in [0, scale].
    scale : float
        Largest intensity (255 for MNIST, 16 for the sklearn digits, 1 for probabilities).
    seed : int

    Returns
    -------
    list of ndarray of uint8, same shapes as `splits`
    """
    rng = np.random.RandomState(seed)
    binary = []
    for x in splits:
        out = np.empty(x.shape, dtype=np.uint8)
        for start in range(0, len(x), _BINARIZE_ROWS):
            block = x[start:start + _BINARIZE_ROWS]
            out[start:start + _BINARIZE_ROWS] = block / scale > rng.random_sample(block.shape)
        binary.append(out)
    return binary


def fixed_split(n_rows: int, n_valid: int, n_test: int, seed: int = 0):
    """Row indices (train, valid, test) of a shuffled split that depends only on the sizes."""
    if n_rows - n_valid - n_test < 1 or n_valid < 1 or n_test < 1:
        raise ValueError(f"cannot split {n_rows} rows into {n_rows - n_valid - n_test} "
                         f"train / {n_valid} valid / {n_test} test with at least one row each")
    order = np.random.RandomState(seed).permutation(n_rows)
    n_train = n_rows - n_valid - n_test
    return order[:n_train], order[n_train:n_train + n_valid], order[n_train + n_valid:]
