"""Where dataset files are found, and how a missing one is downloaded into the cache.

A file is looked for in this order; the first hit wins:

1. a directory the caller names: the ``data_dir`` argument (``--data-dir`` on the command
   line), else ``$IRBM_DATA_DIR``. Naming a directory turns the other sources off, so a typo
   cannot silently load other data;
2. the cache: ``$IRBM_CACHE_DIR``, else the platform's user cache directory plus ``irbm``
   (``$XDG_CACHE_HOME/irbm`` or ``~/.cache/irbm`` on Linux);
3. a download from the original public URLs, checked against a sha256, turned into the same
   .npz layout and written to the cache atomically (temp file, then ``os.replace``), so an
   interrupted or corrupt download never leaves a file behind.

Not built on pooch: it would replace only `fetch` and `user_cache_dir` (about 30 lines) while
adding requests, platformdirs and packaging, and it caches and hashes the raw download from one
http/ftp URL, whereas irbm caches the converted .npz, checks the decompressed idx bytes (so any
re-gzipped mirror passes), falls back across mirrors and accepts ``file://`` URLs and paths.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import sys
import urllib.request
import zipfile
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from .._io import atomic_write

DATA_DIR_ENV = "IRBM_DATA_DIR"
CACHE_DIR_ENV = "IRBM_CACHE_DIR"
_DOWNLOAD_TIMEOUT_S = 60
# How to point irbm at files it cannot find or download; ends error messages.
HINT = (f"put the .npz in a directory and set ${DATA_DIR_ENV} to it, or pass it with "
        f"--data-dir (data_dir= in Python)")

log = logging.getLogger(__name__)


class DownloadError(OSError):
    """No URL gave the expected file: offline, a server error, or a checksum mismatch."""


def user_cache_dir() -> Path:
    """``$IRBM_CACHE_DIR``, else the platform's per-user cache directory plus ``irbm``."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV]).expanduser()
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    elif os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "irbm"


def locate(filename: str, data_dir=None, cache_dir=None) -> Path | None:
    """Path of `filename` from the first source holding it, or None when it must be downloaded.

    Raises
    ------
    FileNotFoundError
        A directory was named (argument or ``$IRBM_DATA_DIR``) and `filename` is not in it.
    """
    if data_dir is not None or os.environ.get(DATA_DIR_ENV):
        how = "--data-dir / data_dir" if data_dir is not None else f"${DATA_DIR_ENV}"
        directory = Path(data_dir if data_dir is not None else os.environ[DATA_DIR_ENV])
        path = directory.expanduser() / filename
        if path.is_file():
            return path
        raise FileNotFoundError(
            f"{filename} is not in {directory} (named by {how}); put it there, or name no "
            f"directory to use the cache and download")
    path = (Path(cache_dir) if cache_dir else user_cache_dir()) / filename
    return path if path.is_file() else None


def fetch(urls: Sequence[str], sha256: str, *, gunzip: bool = False) -> bytes:
    """The content of the first URL whose (gunzipped, if asked) bytes have the given sha256.

    URLs may be http(s)://, file:// or plain local paths. Nothing is written to disk.

    Raises
    ------
    DownloadError
        Every URL failed; the message lists each one's reason.
    """
    failures = []
    for url in urls:
        if "://" not in url:
            url = Path(url).resolve().as_uri()
        log.info("downloading %s", url)
        try:
            with urllib.request.urlopen(url, timeout=_DOWNLOAD_TIMEOUT_S) as response:
                content = response.read()
            if gunzip:
                content = gzip.decompress(content)
        except (OSError, EOFError, zlib.error) as err:  # URLError, HTTPError, timeouts, bad gzip
            failures.append(f"{url}: {err}")
            continue
        digest = hashlib.sha256(content).hexdigest()
        if digest == sha256:
            return content
        failures.append(f"{url}: sha256 mismatch (expected {sha256}, got {digest})")
    raise DownloadError("download failed: " + "; ".join(failures) + f". Offline? {HINT}")


def read_npz(path: Path, keys: Iterable[str], optional: Iterable[str] = ()) -> dict:
    """Arrays `keys` (required) and `optional` (if present) of an .npz, read in full.

    Raises
    ------
    ValueError
        The file is not a readable .npz (truncated, corrupt) or lacks a required key; the
        message names the file.
    """
    keys, optional = list(keys), list(optional)
    try:
        with np.load(path, allow_pickle=False) as archive:
            missing = [k for k in keys if k not in archive.files]
            # Reading every array here makes zip CRC and truncation errors surface now.
            arrays = {k: archive[k] for k in keys + optional
                      if k in archive.files and not missing}
    except (OSError, EOFError, ValueError, zipfile.BadZipFile, zlib.error) as err:
        raise ValueError(f"{path} is not a readable .npz archive ({type(err).__name__}: "
                         f"{err}); replace or delete it") from err
    if missing:
        raise ValueError(f"{path} lacks the arrays {missing} (it has {sorted(archive.files)})")
    return arrays


def write_npz_atomic(path: Path, arrays: dict) -> bool:
    """Save `arrays` compressed to `path` via a temp file and ``os.replace``.

    A cache that cannot be written is not fatal: log a warning and return False.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(path) as file:
            np.savez_compressed(file, **arrays)
        return True
    except OSError as err:
        log.warning("could not cache %s: %s", path, err)
        return False
