"""The user's own binary data, from a .npy, .npz or .csv file."""

from __future__ import annotations

import logging
import math
import zipfile
import zlib
from pathlib import Path

import numpy as np

from ._dataset import SPLITS, Dataset, binarize_stochastic, fixed_split

logger = logging.getLogger(__name__)

# .npz key spellings accepted for each split.
_SPLIT_KEYS = {"train": ("train", "train_x"), "valid": ("valid", "valid_x", "val", "val_x"),
               "test": ("test", "test_x")}
_BINARIZE = (None, "threshold", "stochastic")
# Share of rows held out for valid and for test when the file holds one array.
_HELD_OUT = 0.1


def load_user_data(path, *, binarize: str | None = None, threshold: float = 0.5, seed: int = 42,
                   image_shape: tuple[int, int] | None = None, key: str | None = None,
                   split_seed: int | None = None) -> Dataset:
    """Binary vectors from a .npy, .npz or .csv file.

    Layouts
        * .npz with arrays ``train``, ``valid``, ``test`` (or ``train_x``, ``valid_x``,
          ``test_x``; ``val`` for valid): the split is the file's.
        * one array: a .npy, an .npz holding a single array (or the one named by ``key``, as
          ``X`` of ``np.savez(path, X=X, y=y)``), or a .csv (comma-separated numbers, one row
          per line, a non-numeric header line skipped). It is shuffled with ``split_seed`` and
          split 80% / 10% / 10% (valid and test get at least one row each); the split depends
          only on the number of rows and that seed.

    Each array is (N, n_visible), or (N, H, W) images, flattened row by row.

    Parameters
    ----------
    path : str or Path
    binarize : {None, "threshold", "stochastic"}
        None: values must already be 0 or 1. "threshold": 1 where value > `threshold`.
        "stochastic": values in [0, 1] are probabilities, 1 where value > U(0, 1), drawn by
        ``np.random.RandomState(seed)`` for train, then valid, then test (as for MNIST).
        uint8 arrays with values above 1 are read as grey levels: value / 255 (other values
        must lie in [0, 1]).
    threshold : float
    seed : int
        Seed of the stochastic binarization.
    image_shape : (height, width), optional
        Default: (H, W) of 3-D arrays, else (s, s) when n_visible = s * s, else (1, n_visible).
    key : str, optional
        The array of a .npz to read, as one array to split (``--data-key``).
    split_seed : int, optional
        Seed of the shuffle that splits one array (``--split-seed``; default 0); a file that
        holds its own split refuses it.

    Returns
    -------
    Dataset
        Named after the file's stem; uint8 in {0, 1}, pixel_order "C".

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        Unsupported file type, unreadable file, wrong shapes, NaN or infinite values, too few
        rows, or non-binary values without `binarize`. The message names the file.
    """
    path = Path(path)
    if binarize not in _BINARIZE:
        raise ValueError(f"binarize must be one of {_BINARIZE}, got {binarize!r}")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (a named dataset is one of mnist, "
                                "caltech101, digits, mnist5k; any other name is a file path)")
    readers = {".npy": _read_npy, ".npz": _read_npz, ".csv": _read_csv}
    if path.suffix.lower() not in readers:
        raise ValueError(f"{path}: unsupported file type {path.suffix!r}; expected .npy, .npz "
                         f"or .csv")
    if split_seed is not None and not 0 <= split_seed < 2**32:  # numpy's RandomState's range
        raise ValueError(f"split_seed (--split-seed) must lie in [0, 2^32), got {split_seed}")
    if key is not None and path.suffix.lower() != ".npz":
        raise ValueError(f"{path}: key={key!r} (--data-key) names an array of a .npz file; a "
                         f"{path.suffix} file holds one array: leave it out")
    arrays = _read_npz(path, key) if key is not None else readers[path.suffix.lower()](path)
    if split_seed is not None and len(arrays) > 1:
        raise ValueError(f"{path}: split_seed (--split-seed) shuffles a single array before "
                         f"splitting it, and this file holds its own split ({', '.join(arrays)})"
                         ": leave it out")

    shapes = {name: _check_rows(x, path, name) for name, x in arrays.items()}
    images = {name: shape for name, shape in shapes.items() if shape is not None}
    if len(set(images.values())) > 1:  # flattened, their pixels would not line up
        raise ValueError(f"{path}: the splits hold images of different shapes "
                         f"{', '.join(f'{name} {shape}' for name, shape in images.items())}: "
                         "store every split in one shape (a transposed split?)")
    arrays = {name: x.reshape(len(x), -1) for name, x in arrays.items()}
    n_rows = sum(len(x) for x in arrays.values())
    if n_rows < next(iter(arrays.values())).shape[1]:
        # Each row is an example; a (values, examples) array trains silently on nonsense.
        logger.warning("%s: %d rows of %d values: each row is one example (if the examples "
                       "are its columns, transpose the array)", path, n_rows,
                       next(iter(arrays.values())).shape[1])
    if len(arrays) == 1:
        (rows,) = arrays.values()
        _refuse_stray_row_or_columns(rows, path, binarize)
        held_out = max(1, round(_HELD_OUT * len(rows)))
        try:
            indices = fixed_split(len(rows), held_out, held_out,
                                  0 if split_seed is None else split_seed)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None
        arrays = dict(zip(SPLITS, (rows[i] for i in indices)))
    widths = {name: x.shape[1] for name, x in arrays.items()}
    if len(set(widths.values())) > 1:
        raise ValueError(f"{path}: the splits have different numbers of columns {widths}")

    splits = _binarize([arrays[s] for s in SPLITS], path, binarize, threshold, seed)
    if image_shape is None:
        image_shape = next((s for s in shapes.values() if s is not None), None)
    if image_shape is None:
        side = math.isqrt(widths["train"])
        image_shape = (side, side) if side * side == widths["train"] else (1, widths["train"])
    return Dataset(path.stem, *splits, image_shape=image_shape, pixel_order="C",
                   source=str(path))


def _read_npy(path: Path) -> dict:
    # numpy's own message for a file without its header ("contains pickled (object) data ...
    # load it unsafely") would send a user with a corrupt file to unpickling it.
    try:
        with open(path, "rb") as file:
            header = file.read(6)
    except OSError as err:
        raise ValueError(f"{path}: not a readable .npy file ({err})") from err
    if header != b"\x93NUMPY":
        raise ValueError(f"{path}: not a .npy file (it lacks NumPy's header): write the rows "
                         "with numpy.save, or give a .npz or .csv file")
    try:
        return {"data": np.load(path, allow_pickle=False)}
    except ValueError as err:
        if "allow_pickle" in str(err):
            raise ValueError(f"{path}: holds Python objects, which irbm does not load (loading "
                             "them could run code): save a numeric array") from None
        raise ValueError(f"{path}: not a readable .npy file ({err})") from err
    except (OSError, EOFError) as err:
        raise ValueError(f"{path}: not a readable .npy file ({err})") from err


def _read_npz(path: Path, key: str | None = None) -> dict:
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as err:
        raise ValueError(f"{path}: not a readable .npz file ({err})") from err
    if key is not None:
        if key not in arrays:
            raise ValueError(f"{path}: key={key!r} (--data-key) is not one of its arrays "
                             f"{sorted(arrays)}")
        own_split = all(any(k in arrays for k in keys) for keys in _SPLIT_KEYS.values())
        if own_split and any(key in keys for keys in _SPLIT_KEYS.values()):
            raise ValueError(f"{path}: key={key!r} (--data-key) names one part of the file's "
                             f"own split {sorted(arrays)}, which would be split again: leave "
                             "it out to train on the file's split")
        return {"data": arrays[key]}
    if len(arrays) == 1:
        return arrays
    found = {split: next((k for k in keys if k in arrays), None)
             for split, keys in _SPLIT_KEYS.items()}
    missing = [split for split, key in found.items() if key is None]
    if missing and len(missing) < len(found):
        raise ValueError(f"{path}: holds part of a train/valid/test split {sorted(arrays)} but "
                         f"no {' or '.join(missing)} array: add it (numpy.savez(..., "
                         f"{missing[0]}=rows)), or name one array to split 80/10/10 with "
                         f"--data-key (Python: key=), which leaves the others unused")
    if missing:
        raise ValueError(f"{path}: expected arrays train/valid/test (or train_x/valid_x/test_x) "
                         f"or a single array, found {sorted(arrays)}: name the array of rows "
                         f"to split with key='{_likely_rows(arrays)}' (--data-key "
                         f"{_likely_rows(arrays)})")
    return {split: arrays[key] for split, key in found.items()}


def _likely_rows(arrays: dict) -> str:
    """The name of the array most likely to hold the rows: the largest (a label vector, the
    other usual array, is smaller)."""
    return max(arrays, key=lambda name: arrays[name].size)


def _read_csv(path: Path) -> dict:
    with open(path) as file:
        first = file.readline()
    if not first.strip():
        raise ValueError(f"{path}: empty file")
    try:
        [float(value) for value in first.split(",")]
        header = 0
    except ValueError:
        header = 1
    try:
        return {"data": np.loadtxt(path, delimiter=",", ndmin=2, skiprows=header)}
    except ValueError as err:
        raise ValueError(f"{path}: not a CSV of numbers ({err})") from err


def _check_rows(x: np.ndarray, path: Path, name: str):
    """Validate one array of rows; return (H, W) when it holds images, else None."""
    if x.dtype.kind not in "biuf":
        raise ValueError(f"{path}: {name} holds {x.dtype} values, expected numbers")
    if x.ndim not in (2, 3):
        raise ValueError(f"{path}: {name} has shape {x.shape}; expected (N, n_visible) rows "
                         f"or (N, height, width) images")
    if x.size == 0:
        raise ValueError(f"{path}: {name} is empty (shape {x.shape})")
    if x.dtype.kind == "f" and not np.isfinite(x).all():
        raise ValueError(f"{path}: {name} contains NaN or infinite values")
    return x.shape[1:] if x.ndim == 3 else None


def _refuse_stray_row_or_columns(x: np.ndarray, path: Path, binarize):
    """Refuse a single array whose values outside [0, 1] (outside {0, 1} without ``binarize``)
    all lie in its first row or in one or two of its columns: a header line of numbers, an
    index column (pandas' to_csv) or a label column, which scaling the whole array would not
    cure. Values outside [0, 1] are looked at first, so that grey levels do not hide them."""
    if len(x) < 2 or x.shape[1] < 2:
        return
    checks = [((x < 0) | (x > 1), "in [0, 1]")]
    if not binarize:
        checks.append(((x != 0) & (x != 1), "0 or 1"))
    for odd, kind in checks:
        if not odd.any():
            continue
        rows, columns = np.flatnonzero(odd.any(axis=1)), np.flatnonzero(odd.any(axis=0))
        if rows.tolist() == [0]:
            raise ValueError(f"{path}: its first row alone has values that are not {kind} "
                             f"(e.g. {x[0][odd[0]][0]:g}): a header line of numbers? Delete "
                             "it (pandas: to_csv(..., header=False))")
        if len(columns) <= 2 and len(columns) < x.shape[1]:
            named = ", ".join(f"{c + 1} ({x[:, c].min():g}..{x[:, c].max():g})" for c in columns)
            raise ValueError(f"{path}: only column{'s' if len(columns) > 1 else ''} {named} of "
                             f"{x.shape[1]} {'have' if len(columns) > 1 else 'has'} values that "
                             f"are not {kind}: an index or label column? Remove it (pandas: "
                             "to_csv(..., index=False, header=False), and drop the labels)")


def _binarize(splits, path, how, threshold, seed) -> list[np.ndarray]:
    if how is not None and all(x.dtype == np.uint8 for x in splits) and \
            max(int(x.max()) for x in splits) > 1:
        # 8-bit grey levels, as images are stored: intensities x / 255 (the authors' MNIST rule);
        # uint8 zeros and ones are already binary.
        splits = [x / 255.0 for x in splits]
    if how is not None:
        # Both rules read values as intensities in [0, 1]; other values (0-255 pixels, z-scores)
        # would be binarized silently wrong.
        kind = "probabilities" if how == "stochastic" else "values"
        for name, x in zip(SPLITS, splits):
            if x.min() < 0 or x.max() > 1:
                how_to = ("divide by the maximum" if x.min() >= 0 else
                          "subtract the minimum, then divide by the range")
                raise ValueError(f"{path}: binarize={how!r} (--binarize {how}) needs {kind} "
                                 f"in [0, 1], {name} spans [{x.min()}, {x.max()}] ({how_to})")
    if how == "threshold":
        return [(x > threshold).astype(np.uint8) for x in splits]
    if how == "stochastic":
        return binarize_stochastic(splits, 1.0, seed)
    for name, x in zip(SPLITS, splits):
        bad = x[(x != 0) & (x != 1)]
        if bad.size:
            how_to = "divide by the maximum" if x.min() >= 0 else \
                "subtract the minimum, then divide by the range"
            scale = ("" if x.min() >= 0 and x.max() <= 1 else
                     "; as uint8 they are read as grey levels 0-255" if x.dtype == np.uint8
                     else f"; they span [{x.min()}, {x.max()}]: scale them into [0, 1] first "
                     f"({how_to}), as both rules read intensities")
            raise ValueError(f"{path}: {name} has values other than 0 and 1 (e.g. {bad[0]}); "
                             f"binarize them with binarize='threshold' or 'stochastic' "
                             f"(command line: --binarize threshold|stochastic){scale}")
    return [x.astype(np.uint8) for x in splits]
