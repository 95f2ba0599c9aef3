"""Helpers of tests/test_cli.py: run the CLI in-process or as a process of its own, snapshot
directories, read PNGs and the report's Markdown table."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.image import imread

from irbm.cli import main

REPOSITORY = Path(__file__).resolve().parents[1]


def subprocess_environment() -> dict:
    """The environment for running irbm in a subprocess: this checkout first on PYTHONPATH
    (not an installed irbm), IRBM_DEBUG unset (no tracebacks), one thread."""
    environment = {k: v for k, v in os.environ.items() if k != "IRBM_DEBUG"}
    paths = [str(REPOSITORY), *filter(None, environment.get("PYTHONPATH", "").split(os.pathsep))]
    environment["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    environment.setdefault("OMP_NUM_THREADS", "1")
    return environment


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_cli(*args) -> Result:
    """``irbm ARGS`` in this process: exit code (argparse's SystemExit included), stdout, stderr.

    An exception escaping `main` is not caught: it is a traceback the user would see, so the
    test fails. IRBM_DEBUG (which re-raises errors) is unset for the call.
    """
    out, err = io.StringIO(), io.StringIO()
    debug = os.environ.pop("IRBM_DEBUG", None)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        if debug is not None:
            os.environ["IRBM_DEBUG"] = debug
    return Result(code, out.getvalue(), err.getvalue())


def exit_with_cli(argv: list[str], stderr_path: str):
    """``sys.exit(irbm ARGV)`` with stdout discarded and stderr (the C level's too) written to
    ``stderr_path``: what ``python -m irbm.cli ARGV`` does, as the target of a process started
    by `multiprocessing`."""
    with open(os.devnull, "w") as devnull, open(stderr_path, "w") as errors:
        os.dup2(devnull.fileno(), 1)
        os.dup2(errors.fileno(), 2)
    sys.exit(main(argv))


def assert_ok(result: Result):
    assert result.code == 0, f"exit {result.code}\nstdout:\n{result.out}\nstderr:\n{result.err}"


def assert_clean_error(result: Result, *fragments: str) -> str:
    """Exit code 2 and exactly one line on stderr, 'irbm: error: ...', holding ``fragments``."""
    assert "Traceback" not in result.out + result.err
    assert result.code == 2, f"exit {result.code}\nstdout:\n{result.out}\nstderr:\n{result.err}"
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{result.err}"
    assert lines[0].startswith("irbm: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    return lines[0]


def snapshot(directory) -> dict:
    """Every entry under ``directory`` (hidden ones too) with, for files, the sha256 of the
    content, the mtime and the mode: equal snapshots mean nothing was written, created or
    removed."""
    directory = Path(directory)
    if not directory.exists():
        return {}
    entries = {}
    for path in sorted(directory.rglob("*")):
        stat = path.stat()
        key = str(path.relative_to(directory))
        if path.is_dir():
            entries[key] = "dir"
        else:
            entries[key] = (hashlib.sha256(path.read_bytes()).hexdigest(), stat.st_mtime_ns,
                            stat.st_mode)
    return entries


def png_stats(path_or_bytes) -> dict:
    """Gray-level statistics of a PNG (a path or its bytes).

    std: of the gray levels; dark: fraction below 0.5; mid: fraction in (0.15, 0.85) (shades,
    as in pictures of probabilities or filters); colored: fraction of saturated pixels (a
    plotted curve; axes, ticks and text are gray).
    """
    source = io.BytesIO(path_or_bytes) if isinstance(path_or_bytes, bytes) else path_or_bytes
    pixels = imread(source, format="png")
    # Channel by channel: numpy's reductions over a last axis of 3 were 5 times slower.
    red, green, blue = (pixels[..., i] for i in range(3)) if pixels.ndim == 3 else [pixels] * 3
    gray = (red + green + blue) / 3
    spread = np.maximum(np.maximum(red, green), blue) - np.minimum(np.minimum(red, green), blue)
    return {"height": gray.shape[0], "width": gray.shape[1], "std": float(gray.std()),
            "dark": float((gray < 0.5).mean()),
            "mid": float(((gray > 0.15) & (gray < 0.85)).mean()),
            "colored": float((spread > 0.2).mean())}


def parse_markdown_table(text: str) -> list[dict]:
    """The rows of the first Markdown table in ``text``, as {header: cell}."""
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith("|")]
    assert len(lines) >= 2, f"no table in:\n{text}"

    def cells(line):
        return [cell.strip() for cell in line.strip("|").split("|")]

    header = cells(lines[0])
    assert re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[1]), lines[1]
    rows = [dict(zip(header, cells(line), strict=True)) for line in lines[2:]]
    return rows


def numbers(cell: str) -> list[float]:
    """The numbers in a table cell, in order ('inf' and 'nan' included)."""
    return [float(x) for x in re.findall(r"-?inf|nan|-?\d+(?:\.\d+)?", cell)]


@pytest.fixture(autouse=True)
def ais_on_tiny_models(monkeypatch):
    """Autouse in the CLI test modules that import it: their models are tiny enough for
    `irbm evaluate` to enumerate ln Z, and they test what AIS feeds (pools, floors, reports);
    `test_evaluate_enumerates_ln_z_where_it_is_cheap` lifts it."""
    monkeypatch.setattr("irbm._evaluate_run.EXACT_TERMS", 0)


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    """Autouse in the CLI test modules that import it. Their models are tiny: a second
    intra-op thread gains nothing, and on a 2-core machine busy with other processes, waiting
    for it made `irbm demo --quick` take 15-140 s instead of 4 s (every small matrix product
    waited a scheduler time slice for the other thread). The CLI sets the threads itself: its
    automatic choice is pinned to 1 here."""
    monkeypatch.setattr("irbm._threads.default_threads", lambda *args, **kwargs: 1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def load_script(name: str):
    """The module scripts/NAME.py, imported from its file (scripts/ is not a package)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
