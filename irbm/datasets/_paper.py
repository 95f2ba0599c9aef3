"""The paper's two datasets: binarized MNIST and CalTech101 Silhouettes (28x28).

Both are read from an .npz (``mnist.npz``, ``caltech101_silhouettes_28.npz``) holding arrays
``train_x``, ``valid_x``, ``test_x`` (uint8, one image per row) and, optionally, labels
``train_y``, ``valid_y``, ``test_y``, found as `_sources` describes: ``data_dir`` /
``--data-dir``, else ``$IRBM_DATA_DIR``, else the cache. A download from the original URLs is
turned into that layout before it is cached.
"""

from __future__ import annotations

import hashlib
import io
import os
import struct
from pathlib import Path

import numpy as np

from . import _sources
from ._dataset import SPLITS, Dataset, binarize_stochastic

MNIST_FILE = "mnist.npz"
CALTECH_FILE = "caltech101_silhouettes_28.npz"
MNIST_URL_ENV = "IRBM_MNIST_URL"
CALTECH_URL_ENV = "IRBM_CALTECH_URL"

# Mirrors of LeCun's files, tried in order (the original site no longer serves them reliably).
MNIST_MIRRORS = ("https://ossci-datasets.s3.amazonaws.com/mnist/",
                 "https://storage.googleapis.com/cvdf-datasets/mnist/")
# sha256 of the *decompressed* idx files, so a re-gzipped mirror is accepted too. Derived from
# the reference mnist.npz (see PUBLISHED_SHA256) and cross-checked: the same bytes have the
# published md5s
# (train images 6bbc9ace..., train labels a25bea73..., test images 2646ac64..., test labels
# 27ae3e4e...).
MNIST_FILES = {
    "train-images-idx3-ubyte.gz":
        "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte.gz":
        "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images-idx3-ubyte.gz":
        "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte.gz":
        "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}
# The paper's split (Larochelle & Murray): the last 10,000 training images are the validation set.
MNIST_N_VALID = 10_000

CALTECH_URL = "https://people.cs.umass.edu/~marlin/data/caltech101_silhouettes_28_split1.mat"
CALTECH_SHA256 = "eb6735e8d84b1850fabc5590124aab1755e90c9fd28123585324398405e1e42a"

# Per-array sha256 of the published .npz files, for ``verify=True``.
PUBLISHED_SHA256 = {
    MNIST_FILE: {
        "train_x": "c80ceb24eedca80f31cfca280b8fb911cbb41b9990f998bebd40e26b1ab6d0f8",
        "valid_x": "2b079632b0defaf508a5ebf8c4ac1e18ce15c8b337da087e9c3e1c84c618d244",
        "test_x": "6d87418db22cc8025d05968bec9bd5c3932904b23485740db143a061a2c9d161"},
    CALTECH_FILE: {
        "train_x": "e16c69228270895ecb557b51da4924fbb288b477fd5923c533614c3159aaccc3",
        "valid_x": "67a4e3a2ee22d8dce7242c3227f1bd643554efcbdb4d6cce6249832f7d623754",
        "test_x": "4abecf7121e7eeb9c944d555d59efc350ef75f979951175322ba8a2842e7fe0f"},
}

_X_KEYS = tuple(f"{split}_x" for split in SPLITS)
_Y_KEYS = tuple(f"{split}_y" for split in SPLITS)


def binarized_mnist(data_dir=None, *, seed: int = 42, download: bool = True, url=None,
                    cache_dir=None, verify: bool = False) -> Dataset:
    """MNIST in the paper's split, binarized stochastically the authors' way.

    Train is the first 50,000 original training images, valid the last 10,000, test the
    10,000 original test images. pixel = (intensity / 255 > U(0, 1)), with one
    ``np.random.RandomState(seed)`` drawing for train, then valid, then test; seed 42 is the
    authors'. The mean pixel is about 0.13.

    Parameters
    ----------
    data_dir : path, optional
        Directory holding ``mnist.npz`` (``--data-dir`` on the command line), else
        ``$IRBM_DATA_DIR``; a named directory is the only place looked. With neither: the
        cache, then a download.
    seed : int
        Binarization seed.
    download : bool
        Allow the download when no file is found (else FileNotFoundError).
    url : str or sequence of str, optional
        Base URL(s) holding the four idx .gz files; default ``$IRBM_MNIST_URL``, else the mirrors
        in `MNIST_MIRRORS`.
    cache_dir : path, optional
        Overrides ``$IRBM_CACHE_DIR`` / the user cache directory.
    verify : bool
        Also compare the arrays with the published per-array sha256 (about 0.1 s).

    Returns
    -------
    Dataset
        train (50000, 784), valid (10000, 784), test (10000, 784), uint8 in {0, 1}, 28x28 "C".
    """
    path = _sources.locate(MNIST_FILE, data_dir, cache_dir)
    if path is None:
        arrays, source = _download(MNIST_FILE, _mnist_from_idx, url, MNIST_URL_ENV, download,
                                   cache_dir)
    else:
        arrays, source = _sources.read_npz(path, _X_KEYS, _Y_KEYS), str(path)
    _check_images(arrays, source, 255, PUBLISHED_SHA256[MNIST_FILE] if verify else None)
    splits = binarize_stochastic([arrays[k] for k in _X_KEYS], 255.0, seed)
    return Dataset("mnist", *splits, image_shape=(28, 28), pixel_order="C", source=source,
                   labels=_labels(arrays))


def caltech101_silhouettes(data_dir=None, *, download: bool = True, url=None, cache_dir=None,
                           verify: bool = False) -> Dataset:
    """CalTech101 Silhouettes 28x28, split 1 of Marlin et al. (2010): 4,100 / 2,264 / 2,307.

    Values are used as stored, like the authors did: 1 is background, 0 the silhouette (mean
    pixel about 0.55). Rows are column-major (the .mat's layout), hence ``pixel_order="F"``:
    use ``Dataset.to_image`` for upright pictures.

    Parameters
    ----------
    data_dir, download, cache_dir, verify
        As in `binarized_mnist`; the file is ``caltech101_silhouettes_28.npz``.
    url : str or sequence of str, optional
        URL(s) of ``caltech101_silhouettes_28_split1.mat``; default ``$IRBM_CALTECH_URL``, else
        Marlin's page. Reading it needs scipy.

    Returns
    -------
    Dataset
        train (4100, 784), valid (2264, 784), test (2307, 784), uint8 in {0, 1}, 28x28 "F".
    """
    path = _sources.locate(CALTECH_FILE, data_dir, cache_dir)
    if path is None:
        arrays, source = _download(CALTECH_FILE, _caltech_from_mat, url, CALTECH_URL_ENV,
                                   download, cache_dir)
    else:
        arrays, source = _sources.read_npz(path, _X_KEYS, _Y_KEYS), str(path)
    _check_images(arrays, source, 1, PUBLISHED_SHA256[CALTECH_FILE] if verify else None)
    return Dataset("caltech101", *(arrays[k] for k in _X_KEYS), image_shape=(28, 28),
                   pixel_order="F", source=source, labels=_labels(arrays))


def _labels(arrays: dict) -> dict | None:
    """{split: its labels (N,)} where the file holds one label per row of all three splits
    (else None: the labels are extra, and data that trains must not fail on their shape)."""
    if not all(key in arrays for key in _Y_KEYS):
        return None
    labels = {split: np.asarray(arrays[y_key]) for split, y_key in zip(SPLITS, _Y_KEYS)}
    if any(labels[split].size != len(arrays[x_key]) for split, x_key in zip(SPLITS, _X_KEYS)):
        return None
    return {split: values.ravel() for split, values in labels.items()}


def _download(filename, build, url, url_env, allowed, cache_dir):
    """Arrays built by ``build(urls)`` from the original files, cached as `filename`."""
    target = (Path(cache_dir) if cache_dir else _sources.user_cache_dir()) / filename
    if not allowed:
        raise FileNotFoundError(f"{filename} is not in the cache {target.parent} and "
                                f"download=False: {_sources.HINT}")
    urls = url if url is not None else os.environ.get(url_env)
    if isinstance(urls, str):
        urls = [urls]
    arrays = build(list(urls) if urls else None)  # None: the built-in URLs
    cached = _sources.write_npz_atomic(target, arrays)
    return arrays, str(target) if cached else f"download ({filename} not cached)"


def _mnist_from_idx(base_urls) -> dict:
    """Download the four idx files and cut them into the paper's split."""
    bases = base_urls or MNIST_MIRRORS
    raw = {}
    for name, sha256 in MNIST_FILES.items():
        urls = [base.rstrip("/") + "/" + name for base in bases]
        raw[name] = _parse_idx(_sources.fetch(urls, sha256, gunzip=True), name)
    train_x = raw["train-images-idx3-ubyte.gz"].reshape(-1, 784)
    train_y = raw["train-labels-idx1-ubyte.gz"]
    n_train = len(train_x) - MNIST_N_VALID
    return {"train_x": train_x[:n_train], "valid_x": train_x[n_train:],
            "test_x": raw["t10k-images-idx3-ubyte.gz"].reshape(-1, 784),
            "train_y": train_y[:n_train], "valid_y": train_y[n_train:],
            "test_y": raw["t10k-labels-idx1-ubyte.gz"]}


def _parse_idx(content: bytes, name: str) -> np.ndarray:
    """An idx file (LeCun's format): 2 zero bytes, type 0x08 (uint8), ndim, big-endian dims."""
    if len(content) < 4 or content[:3] != b"\x00\x00\x08":
        raise ValueError(f"{name} is not a uint8 idx file")
    ndim = content[3]
    dims = struct.unpack(f">{ndim}I", content[4:4 + 4 * ndim])
    data = np.frombuffer(content, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != np.prod(dims):
        raise ValueError(f"{name}: header says {dims}, found {data.size} values")
    return data.reshape(dims)


def _caltech_from_mat(urls) -> dict:
    """Download Marlin's .mat and keep its own split, values and column-major rows."""
    try:
        import scipy.io
    except ImportError:  # checked before downloading, so no bytes are wasted
        raise ImportError("reading the CalTech101 .mat download needs scipy (pip install scipy); "
                          f"or put {CALTECH_FILE} in a directory and set "
                          f"${_sources.DATA_DIR_ENV} to it or pass it with --data-dir") from None
    content = _sources.fetch(urls or [CALTECH_URL], CALTECH_SHA256)
    mat = scipy.io.loadmat(io.BytesIO(content))
    arrays = {}
    for split, key in zip(SPLITS, ("train", "val", "test")):
        x = np.asarray(mat[f"{key}_data"])
        if not np.isin(x, (0, 1)).all():
            raise ValueError(f"{key}_data of the CalTech101 .mat is not binary")
        arrays[f"{split}_x"] = x.astype(np.uint8)
        arrays[f"{split}_y"] = np.asarray(mat[f"{key}_labels"]).ravel().astype(np.uint8)
    return arrays


def _check_images(arrays: dict, source: str, max_value: int, published: dict | None) -> None:
    """Refuse arrays that are not (N, 784) uint8 images in [0, max_value], or (if `published`
    is given) whose sha256 differs from it; the message names the source."""
    for key in _X_KEYS:
        x = arrays[key]
        if x.dtype != np.uint8 or x.ndim != 2 or x.shape[1] != 784 or len(x) == 0:
            raise ValueError(f"{source}: {key} should be a non-empty (N, 784) uint8 array, "
                             f"got {x.dtype} {x.shape}")
        if x.max() > max_value:
            raise ValueError(f"{source}: {key} has values above {max_value}")
        if published:
            digest = hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()
            if digest != published[key]:
                raise ValueError(f"{source}: {key} differs from the published data "
                                 f"(sha256 {digest}, expected {published[key]})")
