"""A run remembers where its data came from and checks it is the same data before using it:
`irbm evaluate`, `irbm sample`, `irbm plot` and a resume of a run trained with ``--data-dir``
work offline without naming the directory again, and refuse other data under the same name."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from _cli_helpers import assert_clean_error, assert_ok, run_cli

TINY = ["--n-hidden", 6, "--epochs", 1, "--cd-k", 1, "--quiet"]


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    """No $IRBM_DATA_DIR, an empty cache and a download URL that fails: offline."""
    monkeypatch.setattr("irbm._threads.default_threads", lambda *args, **kwargs: 1)
    monkeypatch.delenv("IRBM_DATA_DIR", raising=False)
    monkeypatch.setenv("IRBM_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("IRBM_CALTECH_URL", (tmp_path / "offline.mat").as_uri())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def write_caltech(directory, seed=0):
    """A small stand-in for caltech101_silhouettes_28.npz (0/1 rows of 784 pixels)."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    np.savez(directory / "caltech101_silhouettes_28.npz",
             **{f"{split}_x": (rng.random((rows, 784)) < 0.5).astype(np.uint8)
                for split, rows in (("train", 60), ("valid", 20), ("test", 20))})
    return directory


@pytest.fixture
def trained(tmp_path):
    data_dir = write_caltech(tmp_path / "data")
    run_dir = tmp_path / "run"
    assert_ok(run_cli("train", "rbm", "caltech101", "--data-dir", data_dir, "--out", run_dir,
                      *TINY))
    return run_dir, data_dir


def test_a_run_trained_with_data_dir_is_evaluated_sampled_and_plotted_offline(trained):
    run_dir, data_dir = trained
    record = json.loads((run_dir / "config.json").read_text())["dataset"]
    assert record["data_dir"] == str(data_dir.resolve()) and len(record["sha256"]) == 64
    assert_ok(run_cli("evaluate", run_dir, "--chains", 5, "--betas", 20))
    assert_ok(run_cli("sample", run_dir, "--n", 2, "--steps", 2))
    assert_ok(run_cli("plot", run_dir))
    assert_ok(run_cli("train", "rbm", "caltech101", "--out", run_dir, *TINY[:-3],
                      "--epochs", 2, "--quiet"))


def test_other_data_under_the_same_name_is_refused(trained, tmp_path):
    run_dir, data_dir = trained
    write_caltech(data_dir, seed=1)  # same file name and shapes, other rows
    for command in (["evaluate", run_dir], ["sample", run_dir, "--init", "data"],
                    ["plot", run_dir],
                    ["train", "rbm", "caltech101", "--out", run_dir, "--epochs", 2]):
        assert_clean_error(run_cli(*command), "not the data", "sha256", "--data-dir")
    # Chains from random states read no data: the run's record gives the images' layout.
    assert_ok(run_cli("sample", run_dir, "--n", 2, "--steps", 2))
    shutil.rmtree(data_dir)
    assert_ok(run_cli("sample", run_dir, "--n", 2, "--steps", 2))
    with np.load(run_dir / "samples.npz") as saved:
        assert saved["samples"].shape == (2, 784)
    # The same data elsewhere, named by --data-dir, passes the check.
    copy = write_caltech(tmp_path / "copy")
    assert_ok(run_cli("evaluate", run_dir, "--data-dir", copy, "--chains", 5, "--betas", 20))


def test_a_moved_data_directory_is_found_through_the_usual_places(trained, tmp_path,
                                                                  monkeypatch):
    run_dir, data_dir = trained
    moved = tmp_path / "moved"
    shutil.move(data_dir, moved)
    monkeypatch.setenv("IRBM_DATA_DIR", str(moved))
    assert_ok(run_cli("sample", run_dir, "--n", 2, "--steps", 2))


def test_records_are_standard_json_and_keep_their_non_finite_numbers(tmp_path):
    """Bare Infinity/NaN is Python's JSON, not JSON: JavaScript's JSON.parse threw on the
    records, and jq read -Infinity as -1.797e308 without a word (a walkthrough)."""
    import math

    from irbm import runs

    def refuse(token):
        raise AssertionError(f"bare {token} written")

    payload = {"bracket": {"conservative": math.inf, "levels": [{"log_z_floor": -math.inf}]},
               "spread": math.nan, "name": "run", "sizes": (1, 2)}
    path = tmp_path / "record.json"
    runs.write_json(path, payload)
    strict = json.loads(path.read_text(), parse_constant=refuse)
    assert strict["bracket"]["conservative"] == "Infinity" and strict["spread"] == "NaN"
    back = runs.read_json(path)
    assert back["bracket"] == {"conservative": math.inf, "levels": [{"log_z_floor": -math.inf}]}
    assert math.isnan(back["spread"]) and back["name"] == "run" and back["sizes"] == [1, 2]
    # Records written before (bare tokens) read as they did.
    path.write_text('{"log_z_floor": -Infinity, "x": [Infinity, NaN]}')
    old = runs.read_json(path)
    assert old["log_z_floor"] == -math.inf and old["x"][0] == math.inf and math.isnan(old["x"][1])
