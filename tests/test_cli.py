"""End-to-end tests of the `irbm` command line on the embedded digits in temporary directories.

Train, resume, evaluate, sample, plot and report; the errors a user meets (unknown dataset,
missing or corrupt files, wrong shapes or values, invalid settings, missing runs, corrupt
checkpoints, unwritable directories, bad config files) give one line on stderr and exit code 2,
without a traceback and without touching what was there; every subcommand has --help; the demo
runs end to end. Run directories are trusted only when they say so (tests/test_cli_runs.py).

The CLI runs in-process (`irbm.cli.main`) for speed; one test runs it as a subprocess.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from _cli_helpers import (
    ais_on_tiny_models,  # noqa: F401 (an autouse fixture)
    assert_clean_error,
    assert_ok,
    numbers,
    one_thread,  # noqa: F401 (an autouse fixture)
    parse_markdown_table,
    png_stats,
    run_cli,
    snapshot,
    subprocess_environment,
)

import irbm
from irbm.ais import estimate_log_partition
from irbm.checkpoint import read_checkpoint
from irbm.datasets import load_dataset
from irbm.evaluate import nll
from irbm.runs import BEST_FILE, data_digest, load_run_model, model_digest, recorded_data
from irbm.settings import CONFIG_KEYS, SPECS

SMALL = ["--train-size", 300, "--valid-size", 100, "--test-size", 100]
TINY_TRAIN = ["--n-hidden", 16, "--epochs", 2, "--cd-k", 1, "--quiet", *SMALL]
IRBM_EVAL = ["--eval-every", 1, "--eval-chains", 20, "--eval-betas", 50]
EVALUATE = ["--chains", 20, "--betas", 100]
SAMPLE = ["--n", 8, "--steps", 50]

# The runs shared by the evaluate / sample / plot / report tests: (family, dataset, options).
RUNS = {
    "digits-irbm": ("irbm", "digits", IRBM_EVAL),
    "digits-orbm": ("orbm", "digits", []),
    "digits-rbm": ("rbm", "digits", []),
}
N_VISIBLE = 64
FIGURES = {
    "rbm": {"filters", "samples", "training_curves", "ais_convergence"},
    "orbm": {"filters", "samples", "training_curves", "ais_convergence", "p_z_given_v",
             "top_inputs_by_z"},
    "irbm": {"filters", "samples", "training_curves", "ais_convergence", "p_z_given_v",
             "top_inputs_by_z", "hidden_size"},
}
CURVES = {"training_curves", "ais_convergence", "hidden_size"}
NAMES = {"rbm": "RBM", "orbm": "oRBM", "irbm": "iRBM"}




def train_args(family, dataset, out, *extra):
    return ["train", family, dataset, "--out", out, *TINY_TRAIN, *extra]


def evaluations(run_dir) -> list[dict]:
    return json.loads((Path(run_dir) / "evaluation.json").read_text())["evaluations"]


def model_tensors(path):
    model = irbm.load(path)
    return model, {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def assert_same_parameters(path_a, path_b):
    model_a, a = model_tensors(path_a)
    model_b, b = model_tensors(path_b)
    assert model_a.family == model_b.family and model_a.n_hidden == model_b.n_hidden
    for name in a:
        assert torch.equal(a[name], b[name]), f"{name} differs between {path_a} and {path_b}"


def assert_non_trivial_png(path, name=None):
    """The PNG opens and shows something: shades, not one flat color; curves drawn in color."""
    stats = png_stats(path)
    name = name or Path(path).stem
    assert stats["height"] > 100 and stats["width"] > 100, stats
    assert stats["std"] > 0.05, f"{path} looks blank: {stats}"
    assert stats["dark"] > 0.01, f"{path} has almost nothing drawn: {stats}"
    if name in CURVES:
        assert stats["colored"] > 0.002, f"{path} shows no plotted curve: {stats}"
    if name in ("filters", "samples"):
        assert stats["mid"] > 0.05, f"{path} shows no shades (filters/probabilities): {stats}"


# ---------------------------------------------------------------------------- shared runs
class Pipeline:
    """Runs trained, evaluated, sampled and plotted once per module, on demand."""

    def __init__(self, root: Path):
        self.root, self.done, self.outputs, self.failed = root, {}, {}, {}

    def get(self, key) -> Path:
        if key in self.failed:
            pytest.fail(f"building the run {key} failed in an earlier test: {self.failed[key]}")
        if key not in self.done:
            self.failed[key] = "interrupted"
            family, dataset, options = RUNS[key]
            run_dir = self.root / key
            steps = {
                "train": train_args(family, dataset, run_dir, *options),
                "evaluate": ["evaluate", run_dir, *EVALUATE],
                "sample": ["sample", run_dir, *SAMPLE],
                "plot": ["plot", run_dir],
            }
            for step, args in steps.items():
                result = self.outputs[key, step] = run_cli(*args)
                self.failed[key] = f"`irbm {step}` exited with {result.code}: {result.err}"
                assert_ok(result)
            del self.failed[key]
            self.done[key] = run_dir
        return self.done[key]


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    return Pipeline(tmp_path_factory.mktemp("runs"))


def pipeline_run(pipeline, key):
    return pipeline.get(key)


# ---------------------------------------------------------------------------- train
@pytest.mark.parametrize("key", list(RUNS))
def test_train_writes_a_run_directory(pipeline, key):
    family, dataset, _ = RUNS[key]
    run_dir = pipeline_run(pipeline, key)
    train_output = pipeline.outputs[key, "train"].out
    assert f"training an {NAMES[family]} on" in train_output and "done: epoch 2" in train_output

    marker = json.loads((run_dir / "irbm-run.json").read_text())
    assert marker == {"format": "irbm-run", "version": 1}
    config = json.loads((run_dir / "config.json").read_text())
    settings = config["settings"]
    assert settings["family"] == family and settings["dataset"] == dataset
    assert settings["n_hidden"] == 16 and settings["cd_k"] == 1 and settings["epochs"] == 2
    assert {k: settings[k] for k in ("train_size", "valid_size", "test_size", "binarize")} == {
        "train_size": 300, "valid_size": 100, "test_size": 100, "binarize": None}
    assert "threads" not in settings  # how a run was computed, not what it is
    # The whole dataset's digest (the run reads no directory for the embedded digits).
    assert config["dataset"] == {"name": "digits", "n_visible": 64, "image_shape": [8, 8],
                                 "pixel_order": "C", "data_dir": None,
                                 "sha256": data_digest(load_dataset("digits"))}
    history = json.loads((run_dir / "history.json").read_text())["history"]
    assert [h["epoch"] for h in history] == [1, 2]
    assert all(math.isfinite(h["train_free_energy"]) for h in history)

    model = irbm.load(run_dir / "model.safetensors")
    assert model.family == family and model.n_visible == N_VISIBLE
    _, metadata = read_checkpoint(run_dir / "checkpoint.safetensors")
    assert metadata["epoch"] == 2 and metadata["training"]["cd_k"] == 1
    if family == "irbm":  # --eval-every 1: AIS on the validation set after each epoch
        validation = json.loads((run_dir / "validation.json").read_text())
        assert [v["epoch"] for v in validation] == [1, 2]
        assert all(math.isfinite(v["valid_nll"]) for v in validation)
        assert all(0 < v["effective_sample_size"] <= v["n_chains"] for v in validation)
        assert (run_dir / "best.safetensors").is_file()
        from irbm.runs import ValidateWithAIS
        best = ValidateWithAIS(run_dir, None, 1).best
        assert best == min(validation, key=lambda v: v["valid_nll"])
        assert read_checkpoint(run_dir / "best.safetensors")[1]["epoch"] == best["epoch"]
        assert history[-1]["n_hidden"] == model.n_hidden > 16  # grew from 16 units
    else:
        assert not (run_dir / "best.safetensors").exists()
        assert model.n_hidden == 16


def test_a_run_starts_from_a_saved_model_and_trains_on_from_it(tmp_path, monkeypatch):
    """Weights trained elsewhere had no way into a run (a walkthrough overwrote an --epochs 0
    run's model, which the next `irbm train` threw away for its checkpoint): --init-model makes
    them the run's epoch-0 model, its options taken from them, the same command (a relative
    path) resumes it, and training goes on from them; a model that does not fit the run is
    refused before anything is written."""
    from irbm.runs import model_digest
    monkeypatch.chdir(tmp_path)
    model = irbm.InfiniteRBM(64, n_hidden=5, beta=1.2, dtype=torch.float64)
    with torch.no_grad():
        model.W.normal_(0, 0.3, generator=torch.Generator().manual_seed(0))
    irbm.save(model, tmp_path / "own.safetensors")
    command = ["train", "irbm", "digits", "--init-model", "own.safetensors", "--beta", 1.2,
               "--out", "run"]
    result = run_cli(*command, "--epochs", 0)
    assert_ok(result)
    assert (f"starting from {tmp_path / 'own.safetensors'} (5 hidden units; float64, trained "
            "in float32)") in result.out
    as_saved = model_digest(model)
    assert model_digest(irbm.load(tmp_path / "run")) == model_digest(
        irbm.load(tmp_path / "own.safetensors", dtype=torch.float32))
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["settings"]["init_model"] == str(tmp_path / "own.safetensors")
    assert config["settings"]["n_hidden"] == 5 and config["settings"]["beta"] == 1.2
    origin = {"file": str(tmp_path / "own.safetensors"), "model_sha256": as_saved,
              "dtype": "float64"}
    assert config["initial_model"] == origin  # the file's model, as saved
    assert_ok(run_cli(*command, "--epochs", 1))  # the same command resumes it
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["initial_model"] == origin and config["settings"]["beta"] == 1.2
    trained = irbm.load(tmp_path / "run")
    assert trained.n_hidden >= 5 and float(trained.beta) == pytest.approx(1.2)
    # One epoch from the saved weights, not from new ones: the first units moved a little.
    assert 0 < (trained.W[:5].double() - model.W).abs().max() < 0.5
    # Its report says what it started from (its settings alone trained nothing at epoch 0).
    from irbm.report import run_row
    assert_ok(run_cli("evaluate", "run", "--chains", 5, "--betas", 20))
    assert ", from own.safetensors" in run_row(tmp_path / "run")["Settings"]
    # A run directory gives its best model, else its latest, whose file is recorded.
    assert_ok(run_cli("train", "irbm", "digits", "--init-model", "run", "--epochs", 0,
                      "--out", "again"))
    again = json.loads((tmp_path / "again" / "config.json").read_text())["initial_model"]
    assert again["file"] == str(tmp_path / "run" / "model.safetensors")
    assert again["model_sha256"] == model_digest(trained)
    best = irbm.load(tmp_path / "own.safetensors", dtype=torch.float32)
    irbm.save(best, tmp_path / "run" / "best.safetensors", extra={"epoch": 0})
    assert_ok(run_cli("train", "irbm", "digits", "--init-model", "run", "--epochs", 0,
                      "--out", "best"))
    chosen = json.loads((tmp_path / "best" / "config.json").read_text())["initial_model"]
    assert chosen["file"] == str(tmp_path / "run" / "best.safetensors")
    assert chosen["model_sha256"] == model_digest(best)
    (tmp_path / "notrun").mkdir()
    (tmp_path / "notrun" / "notes.txt").write_text("mine")
    np.save(tmp_path / "rows.npy", np.zeros((4, 64)))
    for given, message in (("notrun", "is a directory but not an irbm run (no irbm-run.json)"),
                           ("rows.npy", "give a model saved by irbm.save (a .safetensors "
                                        "file) or a run directory (data goes in DATASET)")):
        assert_clean_error(run_cli("train", "irbm", "digits", "--init-model", given,
                                   "--out", "refused"), message)
    for options, message in (
            (["--n-hidden", 7], "is not the model these settings describe: n_hidden 7 (the "
                                "model's: 5); leave those options out"),
            (["--max-hidden", 50], "max_hidden 50 (the model's: None)"),
            (["--visible-init", "data"], "--visible-init data would set the visible biases"),
            (["--init-model", "none.safetensors"], "none.safetensors: no such file")):
        assert_clean_error(run_cli("train", "irbm", "digits", "--init-model", "own.safetensors",
                                   *options, "--out", "refused"), message)
    assert_clean_error(run_cli("train", "rbm", "digits", "--init-model", "own.safetensors",
                               "--out", "refused"),
                       "holds a model of the family irbm, and this run's is rbm")
    assert not (tmp_path / "refused").exists()


def test_a_warning_is_one_line_in_the_commands_voice(tmp_path):
    """Python's form (file, line number, the source line) read as a crash to a walkthrough;
    here the iRBM's cap holds back growth."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # pytest's filters would otherwise decide
        result = run_cli("train", "irbm", "digits", "--out", tmp_path / "run", "--epochs", 2,
                         "--max-hidden", 2, "--cd-k", 1, "--quiet", *SMALL)
    assert_ok(result)
    lines = result.err.strip().splitlines()
    assert lines and all(line.startswith("irbm: warning: the infinite RBM would grow past "
                                         "max_hidden (2)") for line in lines), result.err
    assert "--max-hidden" in lines[0]
    # Another library's keeps its kind and origin; a message of several lines is one line.
    import io

    from irbm import cli
    stream = io.StringIO()
    cli._show_warning(RuntimeWarning("two\nlines"), RuntimeWarning, "/x/site-packages/lib.py",
                      7, file=stream)
    assert stream.getvalue() == "irbm: warning: two lines (RuntimeWarning, lib.py:7)\n"


def test_each_epochs_validation_line_follows_that_epochs_line(tmp_path):
    """--eval-every: the AIS line of an epoch comes after the epoch's own line (it used to come
    before, under the previous epoch), with the numbers validation.json records."""
    run_dir = tmp_path / "run"
    result = run_cli("train", "irbm", "digits", "--out", run_dir, "--n-hidden", 4, "--epochs",
                     4, "--cd-k", 1, *IRBM_EVAL[:1], 2, *IRBM_EVAL[2:], *SMALL)
    assert_ok(result)
    validation = json.loads((run_dir / "validation.json").read_text())
    lines = [line for line in result.out.splitlines()
             if line.startswith("epoch") or line.startswith("  AIS:")]
    assert [line.split()[0] + line.split()[1][:1] for line in lines] == [
        "epoch1", "epoch2", "AIS:l", "epoch3", "epoch4", "AIS:l"]
    for line, record in zip((lines[2], lines[5]), validation):
        assert f"valid NLL = {record['valid_nll']:.3f} +/- {record['valid_nll_stderr']:.3f}" \
            in line
    assert lines[2].endswith("(best so far)")
    assert lines[5].endswith("(best so far)") == (
        validation[1]["valid_nll"] < validation[0]["valid_nll"])
    # 20 chains are too few to judge ln Z by: said under each line that picks the best model.
    doubts = [line for line in result.out.splitlines() if line.startswith("  unreliable:")]
    assert [f"effective sample size {record['effective_sample_size']:.1f} of 20 chains, so ln "
            "Z is likely too low" in line for line, record in zip(doubts, validation)] == \
        [True, True]
    assert "--eval-chains, --eval-betas" in doubts[0]


def test_a_dataset_named_in_other_letters_is_recorded_by_its_key_and_resumes(tmp_path):
    run_dir = tmp_path / "run"
    assert_ok(run_cli("train", "rbm", "Digits", "--out", run_dir, "--n-hidden", 4, "--epochs",
                      1, "--cd-k", 1, "--quiet", *SMALL))
    assert json.loads((run_dir / "config.json").read_text())["settings"]["dataset"] == "digits"
    result = run_cli("train", "rbm", "DIGITS", "--out", run_dir, "--n-hidden", 4, "--epochs", 2,
                     "--cd-k", 1, "--quiet", *SMALL)
    assert_ok(result)
    assert "done: epoch 2" in result.out


# ---------------------------------------------------------------------------- resume
@pytest.mark.parametrize("family,options", [("irbm", IRBM_EVAL), ("orbm", []), ("rbm", [])])
def test_resume_continues_and_equals_an_uninterrupted_run(tmp_path, family, options):
    resumed, straight = tmp_path / "resumed", tmp_path / "straight"
    assert_ok(run_cli(*train_args(family, "digits", resumed, *options)))
    result = run_cli(*train_args(family, "digits", resumed, *options, "--epochs", 4))
    assert_ok(result)
    assert f"resuming {resumed} at epoch 2" in result.out and "done: epoch 4" in result.out
    assert_ok(run_cli(*train_args(family, "digits", straight, *options, "--epochs", 4)))

    history = json.loads((resumed / "history.json").read_text())
    assert [h["epoch"] for h in history["history"]] == [1, 2, 3, 4]
    reference = json.loads((straight / "history.json").read_text())
    without_time = [{k: v for k, v in h.items() if k != "seconds"} for h in history["history"]]
    assert without_time == [{k: v for k, v in h.items() if k != "seconds"}
                            for h in reference["history"]]
    assert history["size_history"] == reference["size_history"]
    for name in ("model.safetensors", "checkpoint.safetensors"):
        assert_same_parameters(resumed / name, straight / name)
    _, metadata = read_checkpoint(resumed / "checkpoint.safetensors")
    assert metadata["epoch"] == 4
    assert json.loads((resumed / "config.json").read_text())["settings"]["epochs"] == 4
    if family == "irbm":
        assert_same_parameters(resumed / "best.safetensors", straight / "best.safetensors")
        validation = json.loads((resumed / "validation.json").read_text())
        assert [v["epoch"] for v in validation] == [1, 2, 3, 4]
        assert validation == json.loads((straight / "validation.json").read_text())


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    """An iRBM trained 1 epoch on the digits, copied by the tests that must not change it."""
    run_dir = tmp_path_factory.mktemp("base") / "run"
    assert_ok(run_cli(*train_args("irbm", "digits", run_dir, "--epochs", 1)))
    return run_dir


def copy_run(run_dir, tmp_path) -> Path:
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)  # copy2: contents, modes and mtimes
    return copy


@pytest.mark.parametrize("change,expected", [
    (["--lr", 0.1], "lr: 0.03 -> 0.1"),
    (["--cd-k", 2], "cd_k: 1 -> 2"),
    (["--batch-size", 32], "batch_size: 64 -> 32"),
    (["--no-pcd"], "pcd: True -> False"),
    (["--seed", 7], "seed: 1234 -> 7"),
    (["--train-size", 200], "train_size: 300 -> 200"),
    (["--random-permutation"], "random_permutation: False -> True"),
    (["--eval-every", 3], "eval_every: 0 -> 3"),
])
def test_resume_with_changed_hyperparameter_is_refused(base_run, tmp_path, change, expected):
    run_dir = copy_run(base_run, tmp_path)
    before = snapshot(run_dir)
    result = run_cli(*train_args("irbm", "digits", run_dir, "--epochs", 2, *change))
    # Every way out named: the option to leave out (an audit found --force the only one).
    assert_clean_error(result, expected, f"leave {change[0]} out to resume it as trained",
                       "new --out", "--force")
    assert snapshot(run_dir) == before


def test_resume_as_another_model_or_dataset_is_refused(base_run, tmp_path):
    run_dir = copy_run(base_run, tmp_path)
    rows = tmp_path / "rows.npy"
    np.save(rows, (np.random.default_rng(0).random((120, 64)) < 0.3).astype(np.uint8))
    before = snapshot(run_dir)
    assert_clean_error(run_cli(*train_args("orbm", "digits", run_dir, "--epochs", 2)),
                       "built with family irbm", "new --out")
    assert_clean_error(run_cli(*train_args("irbm", rows, run_dir, "--epochs", 2)),
                       f"{run_dir} was trained on digits", f"train on {rows} with a new --out")
    assert snapshot(run_dir) == before


@pytest.mark.parametrize("change,expected", [
    (["--beta", 1.5], "built with beta 1.01"), (["--n-hidden", 8], "built with n_hidden 16"),
    (["--dtype", "float64"], "built with dtype float32")])
def test_resume_cannot_change_the_built_model_even_with_force(base_run, tmp_path, change,
                                                              expected):
    run_dir = copy_run(base_run, tmp_path)
    before = snapshot(run_dir)
    result = run_cli(*train_args("irbm", "digits", run_dir, "--epochs", 2, "--force", *change))
    assert_clean_error(result, expected, "new --out")
    assert snapshot(run_dir) == before


@pytest.mark.parametrize("change,expected", [
    (["--n-hidden", 0], "n_hidden must be an integer >= 1"),
    (["--lr", -1], "lr must be a finite number > 0"),
    (["--beta", 0.5], "beta must be a finite number > 1")])
def test_resume_names_an_invalid_value_as_invalid_not_as_a_change(base_run, tmp_path, change,
                                                                  expected):
    """An invalid value is what to fix, whether or not the run exists ("holds a model built
    with n_hidden 16" sent a user to a new --out with a value no run takes)."""
    run_dir = copy_run(base_run, tmp_path)
    before = snapshot(run_dir)
    assert_clean_error(run_cli(*train_args("irbm", "digits", run_dir, "--epochs", 2, *change)),
                       expected)
    assert snapshot(run_dir) == before


def test_resume_with_force_accepts_the_change_and_records_it(base_run, tmp_path):
    run_dir = copy_run(base_run, tmp_path)
    before = snapshot(run_dir)
    # At its epochs already, no epoch would take the change: refused, not "recorded".
    assert_clean_error(run_cli(*train_args("irbm", "digits", run_dir, "--epochs", 1, "--lr",
                                           0.1, "--force")),
                       "is at epoch 1 and --epochs 1 trains nothing, so --force's changes (lr ",
                       "would apply to no epoch: raise --epochs")
    assert snapshot(run_dir) == before
    result = run_cli(*train_args("irbm", "digits", run_dir, "--epochs", 2, "--lr", 0.1,
                                 "--force"))
    assert_ok(result)
    assert "resuming" in result.out and "done: epoch 2" in result.out
    _, metadata = read_checkpoint(run_dir / "checkpoint.safetensors")
    assert metadata["training"]["lr"] == 0.1 and metadata["epoch"] == 2
    assert json.loads((run_dir / "config.json").read_text())["settings"]["lr"] == 0.1
    # What --force changed, and from which epoch, is said and kept beside the settings.
    old_lr = json.loads((base_run / "config.json").read_text())["settings"]["lr"]
    assert f"--force: lr {old_lr} -> 0.1 from epoch 2 (recorded in config.json)" in result.out
    forced = [{"from_epoch": 2, "changes": {"lr": [old_lr, 0.1]}}]
    assert json.loads((run_dir / "config.json").read_text())["forced"] == forced
    # The next resume continues with the forced value, without --force or --lr, and keeps it.
    assert_ok(run_cli("train", "irbm", "digits", "--out", run_dir, "--epochs", 3, "--quiet"))
    history = json.loads((run_dir / "history.json").read_text())["history"]
    assert [h["epoch"] for h in history] == [1, 2, 3]
    assert json.loads((run_dir / "config.json").read_text())["forced"] == forced
    # ... and going back to the old value is a change again.
    assert_clean_error(run_cli("train", "irbm", "digits", "--out", run_dir, "--epochs", 4,
                               "--lr", 0.03), "lr: 0.1 -> 0.03")


# ---------------------------------------------------------------------------- evaluate
@pytest.mark.parametrize("key", list(RUNS))
def test_evaluate_writes_finite_log_z_and_nll_per_split(pipeline, key):
    family, dataset, _ = RUNS[key]
    run_dir = pipeline_run(pipeline, key)
    (record,) = evaluations(run_dir)
    assert record["family"] == family and record["dataset"] == dataset
    assert record["display_name"] == NAMES[family]
    assert record["n_chains"] == 20 and record["n_betas"] == 100
    assert record["base"] == "data"  # every family's default: the training set's base rate
    assert math.isfinite(record["log_z"]) and math.isfinite(record["log_z_high"])
    assert record["log_z_low"] <= record["log_z"] <= record["log_z_high"]
    assert set(record["nll"]) == {"train", "valid", "test"}
    for split, n in (("train", 300), ("valid", 100), ("test", 100)):
        entry = record["nll"][split]
        assert entry["n"] == n
        assert math.isfinite(entry["mean"]) and 0 < entry["mean"] < N_VISIBLE * 10
        assert math.isfinite(entry["stderr"]) and entry["stderr"] > 0

    # The numbers are what the saved AIS weights and the model give.
    log_weights = torch.as_tensor(np.load(run_dir / "ais_log_weights.npy"))
    assert log_weights.shape == (20,)
    log_z = float(torch.logsumexp(log_weights, 0) - math.log(20))
    assert log_z == pytest.approx(record["log_z"], abs=1e-6)
    best = run_dir / "best.safetensors"
    model_file = best if best.exists() else run_dir / "model.safetensors"
    model = irbm.load(model_file)
    # The record names the model it describes: file, epoch and digest of its tensors.
    assert (record["model_file"], record["epoch"]) == (model_file.name, 2)
    assert record["model_sha256"] == model_digest(model)
    assert record["n_hidden"] == model.n_hidden
    if model.n_hidden <= 16:  # small enough to enumerate: AIS agrees with the exact ln Z
        exact = model.log_partition_exact()
        assert record["log_z_low"] - 0.5 < exact < record["log_z_high"] + 0.5
        assert abs(record["log_z"] - exact) < 1.0
    test = load_dataset(dataset).subset(300, 100, 100).test
    mean, stderr = nll(model, torch.as_tensor(test), record["log_z"])
    assert mean == pytest.approx(record["nll"]["test"]["mean"], rel=1e-9)
    assert stderr == pytest.approx(record["nll"]["test"]["stderr"], rel=1e-9)

    printed = pipeline.outputs[key, "evaluate"].out
    assert (f"ln Z = {record['log_z']:.3f}  (ln of Z-hat -/+ 3 sigma: "
            f"[{record['log_z_low']:.3f}, {record['log_z_high']:.3f}])") in printed
    assert f"test  NLL = {record['nll']['test']['mean']:.3f}" in printed


# ---------------------------------------------------------------------------- sample
@pytest.mark.parametrize("key", list(RUNS))
def test_sample_saves_binary_samples_and_a_picture(pipeline, key):
    run_dir = pipeline_run(pipeline, key)
    with np.load(run_dir / "samples.npz", allow_pickle=False) as stored:
        samples, probabilities = stored["samples"], stored["probabilities"]
        digest, epoch = str(stored["model_sha256"]), int(stored["epoch"])
        # How they were drawn, for irbm plot's title (it said "from irbm sample" alone).
        drawn = int(stored["n_steps"]), str(stored["init"]), bool(stored["z_max_init"])
    assert drawn == (int(SAMPLE[SAMPLE.index("--steps") + 1]), "random", False)
    assert samples.shape == probabilities.shape == (8, N_VISIBLE)
    assert samples.dtype == np.uint8 and set(np.unique(samples)) <= {0, 1}
    assert 0 < samples.mean() < 1  # not all one value
    assert ((probabilities >= 0) & (probabilities <= 1)).all()
    assert epoch == 2 and digest == model_digest(load_run_model(run_dir))
    assert_non_trivial_png(run_dir / "figures" / "samples.png")
    assert "8 samples" in pipeline.outputs[key, "sample"].out


def test_sample_from_data_and_from_z_max(pipeline, tmp_path):
    run_dir = copy_run(pipeline_run(pipeline, "digits-orbm"), tmp_path)
    common = ["sample", run_dir, "--n", 5, "--steps", 3]
    assert_ok(run_cli(*common, "--init", "data", "--z-max-init", "--seed", 3))
    with np.load(run_dir / "samples.npz") as stored:
        first = stored["samples"]
        drawn = int(stored["n_steps"]), str(stored["init"]), bool(stored["z_max_init"])
    assert first.shape == (5, 64) and set(np.unique(first)) <= {0, 1}
    assert drawn == (3, "data", True)  # what irbm plot's title says of them
    assert_ok(run_cli(*common, "--init", "data", "--z-max-init", "--seed", 3))
    with np.load(run_dir / "samples.npz") as stored:
        assert np.array_equal(stored["samples"], first)  # --seed makes it reproducible


# ---------------------------------------------------------------------------- plot
@pytest.mark.parametrize("key", list(RUNS))
def test_plot_draws_every_figure_and_none_is_blank(pipeline, key):
    family = RUNS[key][0]
    run_dir = pipeline_run(pipeline, key)
    figures = run_dir / "figures"
    assert {p.stem for p in figures.glob("*.png")} == FIGURES[family]
    heading, *printed = pipeline.outputs[key, "plot"].out.splitlines()
    assert re.fullmatch(r"figures of (best|model)\.safetensors \(epoch \d+, \d+ hidden units\)",
                        heading), heading
    assert sorted(printed) == sorted(str(figures / f"{name}.png") for name in FIGURES[family])
    for path in figures.glob("*.png"):
        assert_non_trivial_png(path)


def test_png_check_rejects_blank_figures(tmp_path):
    """The figure check of these tests tells a blank or flat picture from a real one."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 4))
    axes = figure.subplots()
    axes.set_title("ais_convergence")
    figure.savefig(tmp_path / "ais_convergence.png")  # empty axes: no curve
    with pytest.raises(AssertionError, match="no plotted curve"):
        assert_non_trivial_png(tmp_path / "ais_convergence.png")
    axes.imshow(np.zeros((8, 8)), cmap="gray", vmin=0, vmax=1)
    figure.savefig(tmp_path / "samples.png")  # one black picture: no shades
    with pytest.raises(AssertionError, match="no shades"):
        assert_non_trivial_png(tmp_path / "samples.png")
    Figure(figsize=(6, 4)).savefig(tmp_path / "filters.png")  # all white
    with pytest.raises(AssertionError, match="blank"):
        assert_non_trivial_png(tmp_path / "filters.png")


# ---------------------------------------------------------------------------- report
def check_report(out_dir, run_dirs):
    """report.md's table and report.html match the runs' evaluation.json; the page is
    self-contained."""
    rows = parse_markdown_table((out_dir / "report.md").read_text())
    assert list(rows[0]) == ["Run", "Model", "Size", "Epoch", "Settings", "ln Z-hat",
                             "ln(Z-hat -/+ 3 sigma)",
                             "AIS (base, chains x temperatures, ESS, path)",
                             "Avg. test NLL", "RAISE test NLL", "Test NLL bracket"] + (
                                 ["Warnings"] if "Warnings" in rows[0] else [])
    assert len(rows) == len(run_dirs)
    for row, run_dir in zip(rows, run_dirs):
        record = evaluations(run_dir)[-1]
        assert row["Run"] == str(run_dir)  # which run a row is, as the user named it
        assert row["Model"] == NAMES[record["family"]]
        assert int(row["Size"]) == record["n_hidden"]
        expected = {"ln Z-hat": [record["log_z"]],
                    "ln(Z-hat -/+ 3 sigma)": [record["log_z_low"], record["log_z_high"]],
                    "Avg. test NLL": [record["nll"]["test"]["mean"],
                                      record["nll"]["test"]["stderr"]]}
        for column, values in expected.items():
            assert numbers(row[column]) == [round(v, 2) for v in values], (column, row)
        assert row["ln Z-hat"] == f"{record['log_z']:.2f}"
        evaluated = "best" if record["model_file"] == BEST_FILE else "latest"
        assert row["Epoch"] == f"{record['epoch']} ({evaluated})", row  # not merely what was asked
        assert row["AIS (base, chains x temperatures, ESS, path)"].startswith(
            f"{record['base']}, {record['n_chains']} x {record['n_betas']}, ESS "
            f"{record['effective_sample_size']:.0f}, "
            + ("pinned" if record["family"] in ("orbm", "irbm") else "linear") + " path")

    page = (out_dir / "report.html").read_text()
    for row in rows:
        for cell in row.values():
            assert f"<td>{cell}</td>" in page
    sources = re.findall(r"""\bsrc\s*=\s*["']([^"']*)["']""", page)
    pngs = [p for run_dir in run_dirs for p in (run_dir / "figures").glob("*.png")]
    assert len(sources) == len(pngs) > 0
    for source in sources:
        assert source.startswith("data:image/png;base64,")
        assert_non_trivial_png(base64.b64decode(source.split(",", 1)[1]), name="embedded")
    assert not re.search(r"""\b(href|src)\s*=\s*["']?(https?:|//|file:)""", page)
    assert "<link" not in page and "<script" not in page and "url(" not in page
    return rows


def test_a_report_over_two_datasets_names_each_rows_run_and_data(tmp_path):
    """Rows alone did not say which run or which data they came from (a user's report)."""
    rows = (np.random.default_rng(0).random((200, 64)) < 0.3).astype(np.float32)
    np.save(tmp_path / "own.npy", rows)
    runs_ = {"digits": tmp_path / "on-digits", str(tmp_path / "own.npy"): tmp_path / "on-own"}
    for dataset, run in runs_.items():
        assert_ok(run_cli("train", "rbm", dataset, "--out", run, "--n-hidden", 4, "--epochs",
                          1, "--cd-k", 1, "--quiet"))
        assert_ok(run_cli("evaluate", run, "--latest", "--chains", 10, "--betas", 20))
    assert_ok(run_cli("report", *runs_.values(), "--out", tmp_path / "report"))
    table = parse_markdown_table((tmp_path / "report" / "report.md").read_text())
    assert list(table[0])[:3] == ["Run", "Dataset", "Model"]
    assert [(row["Run"], row["Dataset"]) for row in table] == [
        (str(run), evaluations(run)[-1]["dataset"]) for run in runs_.values()]
    assert table[0]["Dataset"] == "digits" and "own" in table[1]["Dataset"]


def test_a_report_tells_apart_two_files_of_one_name(tmp_path):
    """Runs on rows.npy from two directories showed one dataset twice under one label; each
    label now carries the start of its data's sha256 (`irbm.runs.data_digest`), a run on a copy
    of the same data shares its label, and a run that recorded no sha256 (made before it was)
    is set apart from none: labelled "not recorded" beside the others, unlabelled alone."""
    generator = np.random.default_rng(0)
    runs_ = []
    for name, seed_rows in (("a", 0), ("b", 1), ("c", 0), ("d", 0)):
        (tmp_path / name).mkdir()
        rows = (np.random.default_rng(seed_rows).random((200, 64)) < 0.3).astype(np.float32)
        np.save(tmp_path / name / "rows.npy", rows)
        run = tmp_path / f"on-{name}"
        assert_ok(run_cli("train", "rbm", tmp_path / name / "rows.npy", "--out", run,
                          "--n-hidden", 4, "--epochs", 1, "--cd-k", 1, "--quiet", "--seed",
                          int(generator.integers(100))))
        assert_ok(run_cli("evaluate", run, "--latest", "--chains", 10, "--betas", 20))
        runs_.append(run)
    config = json.loads((runs_[3] / "config.json").read_text())
    del config["dataset"]["sha256"]
    (runs_[3] / "config.json").write_text(json.dumps(config))
    assert_ok(run_cli("report", *runs_, "--out", tmp_path / "report"))
    text = (tmp_path / "report" / "report.md").read_text()
    labels = [row["Dataset"] for row in parse_markdown_table(text)]
    name = evaluations(runs_[0])[-1]["dataset"]
    assert labels == [f"{name} (data sha256 {recorded_data(run)['sha256'][:12]})"
                      for run in runs_[:3]] + [f"{name} (data not recorded)"]
    assert labels[0] == labels[2] != labels[1]
    assert f"Dataset: {', '.join(sorted(set(labels)))}." in text
    assert_ok(run_cli("report", runs_[0], runs_[2], runs_[3], "--out", tmp_path / "same"))
    text = (tmp_path / "same" / "report.md").read_text()
    assert "Dataset" not in parse_markdown_table(text)[0] and f"Dataset: {name}." in text


def test_report_over_several_runs_matches_the_evaluations(pipeline, tmp_path, monkeypatch):
    run_dirs = [pipeline_run(pipeline, key) for key in RUNS]
    before = [snapshot(run_dir) for run_dir in run_dirs]
    monkeypatch.chdir(tmp_path)
    result = run_cli("report", *run_dirs)  # default --out: report/ in the current directory
    assert_ok(result)
    out_dir = tmp_path / "report"
    assert f"{out_dir / 'report.md'}" in result.out
    assert (out_dir / "irbm-report.json").is_file()
    check_report(out_dir, run_dirs)
    assert "Dataset: digits." in (out_dir / "report.md").read_text()
    assert [snapshot(run_dir) for run_dir in run_dirs] == before  # the runs are only read
    # a report's own directory among the runs (demo-output/*/ names demo-output/report): none
    assert_ok(run_cli("report", *run_dirs, out_dir, "--out", tmp_path / "again"))
    assert len(parse_markdown_table((tmp_path / "again" / "report.md").read_text())) == \
        len(run_dirs)
    assert_ok(run_cli("report", run_dirs[2]))  # a report directory is rewritten
    assert [row["Model"] for row in check_report(out_dir, run_dirs[2:])] == ["RBM"]

    assert_ok(run_cli("report", run_dirs[2], run_dirs[0], "--out", tmp_path / "elsewhere"))
    rows = check_report(tmp_path / "elsewhere", [run_dirs[2], run_dirs[0]])
    assert [row["Model"] for row in rows] == ["RBM", "iRBM"]


def test_a_run_never_evaluated_is_left_out_of_a_report_of_several(pipeline, tmp_path, caplog):
    """`irbm report runs/*/` over evaluated runs and one never evaluated reports the others and
    names it; alone, it is an error naming the command to run. In Python one directory may be
    given as such, and an empty list is refused in words."""
    evaluated = pipeline_run(pipeline, list(RUNS)[0])
    fresh = tmp_path / "fresh"
    assert_ok(run_cli("train", "rbm", "digits", "--out", fresh, *TINY_TRAIN, "--epochs", 1))
    result = run_cli("report", evaluated, fresh, "--out", tmp_path / "both")
    assert_ok(result)
    assert f"{fresh} has no evaluation (irbm evaluate {fresh}): left out of the report" \
        in caplog.text
    check_report(tmp_path / "both", [evaluated])
    alone = run_cli("report", fresh, "--out", tmp_path / "alone")
    assert alone.code != 0 and f"run `irbm evaluate {fresh}` first" in alone.err
    from irbm.workflows import report_runs
    markdown, _ = report_runs(str(evaluated), tmp_path / "one")
    assert len(parse_markdown_table(markdown.read_text())) == 1
    with pytest.raises(ValueError, match="nothing to report: no run directory was given"):
        report_runs([], tmp_path / "none")


def test_report_says_which_regularization_convention_a_run_used(tmp_path):
    for convention, placement in (("proximal", "outside"), ("authors", "inside")):
        run_dir = tmp_path / convention
        assert_ok(run_cli("train", "rbm", "digits", "--out", run_dir, *TINY_TRAIN, "--epochs", 1,
                          "--l1", "1e-3", "--regularization", convention,
                          "--epsilon-placement", placement))
        assert_ok(run_cli("evaluate", run_dir, "--chains", 5, "--betas", 10))
    assert_ok(run_cli("report", tmp_path / "proximal", tmp_path / "authors",
                      "--out", tmp_path / "report"))
    proximal_row, authors_row = [row["Settings"] for row in parse_markdown_table(
        (tmp_path / "report" / "report.md").read_text())]
    assert "authors regularization, epsilon inside the root" in authors_row
    assert "regularization" not in proximal_row and "epsilon" not in proximal_row


def test_a_report_takes_a_dataset_recorded_in_another_spelling_for_the_same(pipeline,
                                                                           tmp_path):
    evaluated = pipeline_run(pipeline, list(RUNS)[0])
    old = tmp_path / "old"
    shutil.copytree(evaluated, old)
    payload = json.loads((old / "evaluation.json").read_text())
    for record in payload["evaluations"]:
        record["dataset"] = "Digits"  # as runs recorded it before names were keyed
    (old / "evaluation.json").write_text(json.dumps(payload))
    assert_ok(run_cli("report", evaluated, old, "--out", tmp_path / "report"))
    text = (tmp_path / "report" / "report.md").read_text()
    assert "Dataset: digits." in text and "Dataset" not in parse_markdown_table(text)[0]


def test_training_into_a_runs_average_names_the_run_to_train(tmp_path):
    run_dir = tmp_path / "run"
    assert_ok(run_cli("train", "irbm", "digits", "--out", run_dir, *TINY_TRAIN, "--epochs", 1,
                      "--average", 10))
    before = snapshot(tmp_path)
    assert_clean_error(run_cli("train", "irbm", "digits", "--out", run_dir / "average",
                               *TINY_TRAIN, "--epochs", 2),
                       f"{run_dir / 'average'} is where the run {run_dir} writes its running "
                       f"average (--average), not a run to train: train the run itself (--out "
                       f"{run_dir})")
    assert snapshot(tmp_path) == before
    # So is a new run there, beside a run trained without --average (resumed with it later,
    # the run overwrote the average's files and left the other run's beside them).
    plain = tmp_path / "plain"
    assert_ok(run_cli("train", "rbm", "digits", "--out", plain, *TINY_TRAIN, "--epochs", 1))
    before = snapshot(tmp_path)
    assert_clean_error(run_cli("train", "rbm", "digits", "--out", plain / "average",
                               *TINY_TRAIN, "--epochs", 1),
                       f"{plain / 'average'} is where the run {plain} writes its running average")
    assert snapshot(tmp_path) == before
    # One made before this refusal is not written over by the run's average.
    shutil.copytree(plain, plain / "average")
    before = snapshot(tmp_path)
    assert_clean_error(run_cli("train", "rbm", "digits", "--out", plain, *TINY_TRAIN,
                               "--epochs", 2, "--average", 5, "--force"),
                       f"{plain / 'average'} holds a run of its own (checkpoint.safetensors), "
                       "where this run writes its running average: move that run elsewhere")
    assert snapshot(tmp_path) == before


def test_report_of_an_unevaluated_run_is_an_error(tmp_path):
    run_dir = tmp_path / "run"
    assert_ok(run_cli("train", "rbm", "digits", "--out", run_dir, *TINY_TRAIN, "--epochs", 1))
    before = snapshot(tmp_path)
    assert_clean_error(run_cli("report", run_dir), "evaluation.json", "irbm evaluate")
    assert snapshot(tmp_path) == before


# ---------------------------------------------------------------------------- user data
def test_user_file_run_works_from_another_directory(tmp_path, monkeypatch):
    rows = (np.random.default_rng(0).random((120, 16)) < 0.3).astype(np.uint8)
    (tmp_path / "data").mkdir()
    np.save(tmp_path / "data" / "rows.npy", rows)
    monkeypatch.chdir(tmp_path / "data")
    assert_ok(run_cli("train", "rbm", "rows.npy", "--out", tmp_path / "run", "--n-hidden", 4,
                      "--epochs", 1, "--quiet"))
    monkeypatch.chdir(tmp_path)  # the run recorded where its data is
    assert_ok(run_cli("evaluate", "run", "--chains", 5, "--betas", 10))
    (record,) = evaluations(tmp_path / "run")
    assert record["dataset"] == "rows" and record["nll"]["test"]["n"] == 12
    assert_ok(run_cli("train", "rbm", "data/rows.npy", "--out", "run", "--epochs", 2,
                      "--quiet"))  # the same file by another relative path: a resume
    # Gone, it is said gone (it read as a change of data that --force would override).
    (tmp_path / "data" / "rows.npy").unlink()
    before = snapshot(tmp_path)
    assert_clean_error(run_cli("train", "rbm", "data/rows.npy", "--out", "run", "--epochs", 3),
                       "data/rows.npy: no such data file (the run run was trained on "
                       f"{tmp_path / 'data' / 'rows.npy'}): give the path of its data file")
    assert snapshot(tmp_path) == before


# ---------------------------------------------------------------------------- errors
def write_user_files(directory: Path) -> dict:
    """Bad user data files, each with the fragment its error message must hold."""
    rng = np.random.default_rng(0)
    directory.mkdir(exist_ok=True)
    files = {}

    def add(name, fragment, writer):
        path = directory / name
        writer(path)
        files[name] = (path, fragment)

    add("probabilities.npy", "values other than 0 and 1",
        lambda p: np.save(p, rng.random((50, 16))))
    add("pixels.npy", "they span [0.0, 255.0]: scale them into [0, 1] first (divide by the "
                      "maximum)", lambda p: np.save(p, rng.integers(0, 256, (50, 16)) * 1.0))
    add("twos.csv", "values other than 0 and 1",
        lambda p: np.savetxt(p, rng.integers(0, 3, (50, 9)), delimiter=",", fmt="%d"))
    add("vector.npy", "shape (40,)", lambda p: np.save(p, np.zeros(40, np.uint8)))
    add("four_d.npy", "shape (10, 2, 2, 2)", lambda p: np.save(p, np.zeros((10, 2, 2, 2))))
    add("empty.npy", "empty", lambda p: np.save(p, np.zeros((0, 16), np.uint8)))
    add("nan.npy", "NaN", lambda p: np.save(p, np.full((50, 16), np.nan)))
    add("widths.npz", "different numbers of columns",
        lambda p: np.savez(p, train=np.zeros((20, 16), np.uint8),
                           valid=np.zeros((5, 9), np.uint8), test=np.zeros((5, 16), np.uint8)))
    add("keys.npz", "expected arrays train/valid/test",
        lambda p: np.savez(p, a=np.zeros((5, 4)), b=np.zeros((5, 4))))
    add("text.csv", "not a CSV of numbers",
        lambda p: p.write_text("a,b\n1,0\nx,y\n"))
    add("garbage.npy", "not a readable .npy", lambda p: p.write_bytes(b"\x93NUMPY garbage"))
    add("two_rows.npy", "cannot split", lambda p: np.save(p, np.ones((2, 4), np.uint8)))
    add("missing.npy", "no such file", lambda p: None)
    return files


USER_FILES = ["probabilities.npy", "pixels.npy", "twos.csv", "vector.npy", "four_d.npy",
              "empty.npy", "nan.npy", "widths.npz", "keys.npz", "text.csv", "garbage.npy",
              "two_rows.npy", "missing.npy"]


@pytest.mark.parametrize("name", USER_FILES)
def test_bad_user_data_is_a_clean_error(tmp_path, name):
    path, fragment = write_user_files(tmp_path / "files")[name]
    before = snapshot(tmp_path)
    assert_clean_error(run_cli("train", "rbm", path, "--out", tmp_path / "run", "--epochs", 1),
                       fragment)
    assert snapshot(tmp_path) == before  # no run directory either


def write_bad_data_dir(tmp_path, how) -> Path:
    directory = tmp_path / "data"
    directory.mkdir()
    if how == "garbage":
        (directory / "mnist.npz").write_bytes(os.urandom(4096))
    elif how == "truncated":
        (directory / "mnist.npz").write_bytes(b"PK\x03\x04" + os.urandom(2000))
    elif how == "wrong_keys":
        np.savez(directory / "mnist.npz", images=np.zeros((3, 784), np.uint8))
    elif how == "wrong_values":
        np.savez(directory / "mnist.npz", **{f"{s}_x": np.full((3, 784), 7.5)
                                             for s in ("train", "valid", "test")})
    elif how == "wrong_shape":
        np.savez(directory / "mnist.npz", **{f"{s}_x": np.zeros((3, 100), np.uint8)
                                             for s in ("train", "valid", "test")})
    return directory


@pytest.mark.parametrize("how,fragment", [
    ("empty", "mnist.npz is not in"), ("garbage", "not a readable .npz"),
    ("truncated", "not a readable .npz"), ("wrong_keys", "lacks the arrays"),
    ("wrong_values", "(N, 784) uint8"), ("wrong_shape", "(N, 784) uint8")])
def test_missing_or_corrupt_data_file_is_a_clean_error(tmp_path, how, fragment):
    data_dir = write_bad_data_dir(tmp_path, how)
    before = snapshot(tmp_path)
    result = run_cli("train", "rbm", "mnist", "--data-dir", data_dir, "--out", tmp_path / "run",
                     "--epochs", 1)
    assert_clean_error(result, fragment)
    assert snapshot(tmp_path) == before  # the bad file is left alone, no run directory made


BAD_SETTINGS = [
    (["rbm", "nosuch"], ["unknown dataset 'nosuch'", "digits"]),
    (["rbm", "digits", "--device", "nonsense"], ["device 'nonsense'"]),
    (["rbm", "digits", "--n-hidden", 0], ["n_hidden must be an integer >= 1", "got 0"]),
    (["rbm", "digits", "--epochs", -1], ["epochs must be an integer >= 0", "got -1"]),
    (["rbm", "digits", "--train-size", 0], ["train_size must be an integer >= 1"]),
    (["rbm", "digits", "--train-size", 5000],
     ["--train-size 5000: digits has 1197 train rows", "give at most 1197"]),
    (["rbm", "digits", "--test-size", 301], ["--test-size 301: digits has 300 test rows"]),
    (["rbm", "digits", "--batch-size", 0], ["batch_size must be an integer >= 1"]),
    (["rbm", "digits", "--cd-k", 0], ["cd_k must be an integer >= 1"]),
    (["rbm", "digits", "--lr", 0], ["lr must be a finite number > 0", "got 0.0"]),
    (["rbm", "digits", "--lr", "nan"], ["lr must be a finite number > 0", "got nan"]),
    (["rbm", "digits", "--lr", "inf"], ["lr must be a finite number > 0", "got inf"]),
    (["rbm", "digits", "--l1", -1e-3], ["l1 must be a finite number >= 0"]),
    (["rbm", "digits", "--l2", "inf"], ["l2 must be a finite number >= 0"]),
    (["rbm", "digits", "--eval-every", -1], ["eval_every must be an integer >= 0"]),
    (["rbm", "digits", "--eval-chains", 0], ["eval_chains must be an integer >= 1"]),
    (["rbm", "digits", "--eval-betas", 1], ["eval_betas must be an integer >= 2"]),
    (["rbm", "digits", "--threads", 0], ["threads must be an integer >= 1"]),
    (["irbm", "digits", "--beta", 0.5], ["beta must be a finite number > 1"]),
    (["orbm", "digits", "--beta", "nan"], ["beta must be a finite number", "got nan"]),
    (["orbm", "digits", "--beta", -1], ["beta must be a finite number > 0"]),
    (["irbm", "digits", "--n-hidden", 8, "--max-hidden", 4], ["max_hidden (4) is smaller"]),
    (["orbm", "digits", "--max-hidden", 50],
     ["orbm does not take max_hidden (--max-hidden)",
      "the options of orbm are n_hidden (--n-hidden), beta (--beta)"]),
    (["rbm", "digits", "--beta", 1.5], ["rbm does not take beta", "options of rbm are n_hidden"]),
    (["rbm", "digits", "--random-permutation"], ["random_permutation", "rbm has none"]),
    (["irbm", "digits", "--regrouping", "peng"], ["regrouping 'peng'", "random_permutation on"]),
    (["orbm", "digits", "--growth", "paired"], ["growth 'paired'", "fixed number of hidden"]),
    (["rbm", "digits", "--optimizer", "sgd", "--epsilon-placement", "inside"],
     ["epsilon_placement 'inside' is ADAGRAD's", "optimizer 'sgd' has no epsilon"]),
    (["rbm", "digits", "--binarize", "threshold"], ["already binary and split"]),
    (["rbm", "digits", "--split-seed", 3, "--data-key", "X"],
     ["--data-key, --split-seed: only for your own data files", "already binary and split"]),
    (["rbm", "digits", "--split-seed", -1], ["split_seed", ">= 0"]),
]


@pytest.mark.parametrize("args,fragments", BAD_SETTINGS,
                         ids=[" ".join(map(str, args[2:])) or args[1] for args, _ in BAD_SETTINGS])
def test_invalid_settings_are_clean_errors_before_any_work(tmp_path, args, fragments):
    assert_clean_error(run_cli("train", *args, "--out", tmp_path / "run", "--quiet"), *fragments)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["evaluate", "sample", "plot", "report"])
def test_missing_run_directory_is_a_clean_error(tmp_path, command):
    assert_clean_error(run_cli(command, tmp_path / "nowhere"), "not found", "nowhere")
    (tmp_path / "empty").mkdir()
    assert_clean_error(run_cli(command, tmp_path / "empty"), "not an irbm run directory",
                       "irbm-run.json")
    assert list(tmp_path.iterdir()) == [tmp_path / "empty"]
    assert list((tmp_path / "empty").iterdir()) == []


def corrupt(path: Path, how: str):
    data = bytearray(path.read_bytes())
    if how == "truncated":
        path.write_bytes(bytes(data[: len(data) // 2]))
    else:  # one flipped bit in the last tensor's bytes: the checksum catches it
        data[-3] ^= 0x10
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("how,fragment", [("truncated", "unreadable checkpoint"),
                                          ("flipped", "checksum mismatch")])
@pytest.mark.parametrize("command", ["evaluate", "sample", "plot", "train"])
def test_corrupt_checkpoint_is_a_clean_error(pipeline, tmp_path, command, how, fragment):
    run_dir = copy_run(pipeline_run(pipeline, "digits-rbm"), tmp_path)
    for name in ("model.safetensors", "checkpoint.safetensors"):
        corrupt(run_dir / name, how)
    before = snapshot(run_dir)
    args = {"evaluate": ["evaluate", run_dir, *EVALUATE], "sample": ["sample", run_dir, *SAMPLE],
            "plot": ["plot", run_dir],
            "train": train_args("rbm", "digits", run_dir, "--epochs", 3)}[command]
    assert_clean_error(run_cli(*args), fragment)
    assert snapshot(run_dir) == before


def skip_unless_permissions_enforced(tmp_path):
    """Skip as root (with CAP_DAC_OVERRIDE), where a mode 0o500 directory is still writable."""
    probe = tmp_path / "probe"
    probe.mkdir()
    probe.chmod(0o500)
    try:
        (probe / "file").touch()
    except PermissionError:
        return
    finally:
        probe.chmod(0o700)
        shutil.rmtree(probe)
    pytest.skip(f"running as uid {os.geteuid()}: directory permissions are not enforced")


def read_only_dir(tmp_path) -> Path:
    skip_unless_permissions_enforced(tmp_path)
    directory = tmp_path / "read-only"
    directory.mkdir()
    (directory / "keep.txt").write_text("keep")
    directory.chmod(0o500)
    return directory


@pytest.fixture
def unwritable(tmp_path, request):
    """An output directory that cannot be created (under a regular file: fails for root too)
    or written (mode 0o500: skipped as root); restores permissions afterwards."""
    if request.param == "under_file":
        (tmp_path / "a_file").write_text("keep")
        yield tmp_path / "a_file" / "sub"
    else:
        directory = read_only_dir(tmp_path)
        yield directory / "sub"
        directory.chmod(0o700)


@pytest.mark.parametrize("unwritable", ["under_file", "read_only"], indirect=True)
def test_unwritable_output_directory_is_a_clean_error(pipeline, tmp_path, unwritable):
    before = snapshot(tmp_path)
    assert_clean_error(run_cli("train", "rbm", "digits", "--out", unwritable, *TINY_TRAIN),
                       "not writable", str(unwritable))
    assert snapshot(tmp_path) == before
    run_dir = pipeline_run(pipeline, "digits-rbm")
    assert_clean_error(run_cli("report", run_dir, "--out", unwritable), "not writable")
    assert_clean_error(run_cli("demo", "--quick", "--out", unwritable), "not writable")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("command", ["sample", "plot"])
def test_unwritable_figures_directory_is_a_clean_error(pipeline, tmp_path, command):
    run_dir = copy_run(pipeline_run(pipeline, "digits-rbm"), tmp_path)
    shutil.rmtree(run_dir / "figures")
    (run_dir / "figures").write_text("a file where the figures directory goes")
    before = snapshot(run_dir)
    assert_clean_error(run_cli(command, run_dir, *(SAMPLE if command == "sample" else [])),
                       "not writable")
    assert snapshot(run_dir) == before


def test_evaluate_into_a_read_only_run_is_a_clean_error(pipeline, tmp_path):
    skip_unless_permissions_enforced(tmp_path)
    run_dir = copy_run(pipeline_run(pipeline, "digits-rbm"), tmp_path)
    before = snapshot(run_dir)
    run_dir.chmod(0o500)
    try:
        assert_clean_error(run_cli("evaluate", run_dir, *EVALUATE), "not writable")
    finally:
        run_dir.chmod(0o700)
    assert snapshot(run_dir) == before


def test_error_in_a_subprocess_has_no_traceback(tmp_path):
    data_dir = write_bad_data_dir(tmp_path, "garbage")
    completed = subprocess.run(
        [sys.executable, "-m", "irbm.cli", "train", "irbm", "mnist", "--data-dir", data_dir,
         "--out", tmp_path / "run"], capture_output=True, text=True,
        env=subprocess_environment(), timeout=120)
    assert completed.returncode == 2
    assert "Traceback" not in completed.stdout + completed.stderr
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("irbm: error: ")
    assert "mnist.npz" in lines[0]
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------------------- help, config
HELP = {
    None: ["train", "evaluate", "sample", "plot", "report", "sweep", "demo"],
    # Every setting is an option of `irbm train` (the list is generated from irbm.settings).
    "train": ["FAMILY", "DATASET", *(spec.flag for spec in SPECS.values() if not spec.positional),
              "--out", "--device", "--force", "--config", "--data-dir", "--quiet"],
    "evaluate": ["--chains", "--betas", "--base", "--data-dir", "--threads"],
    "sample": ["--n", "--steps", "--init", "--z-max-init", "--quiet", "--threads"],
    "plot": ["run", "--allow-stale", "--threads"],
    "report": ["runs", "--out", "--allow-stale", "--threads"],
    "sweep": ["SWEEP.toml", "--out", "--workers", "--scheduler", "--data-dir", "--threads"],
    "demo": ["--quick", "--out", "--threads"],
}


@pytest.mark.parametrize("command", list(HELP))
def test_help_of_every_subcommand(command):
    result = run_cli(*([command] if command else []), "--help")
    assert result.code == 0 and result.err == ""
    assert result.out.startswith(f"usage: irbm {command or ''}".rstrip())
    for word in HELP[command]:  # listed at the start of a line of the option list
        assert re.search(rf"^ +{re.escape(word)}(?![\w-])", result.out, re.MULTILINE), \
            f"{word} missing from the help of {command}"


def test_console_script_and_usage_errors():
    from importlib.metadata import entry_points
    (script,) = entry_points(group="console_scripts", name="irbm")
    assert script.value == "irbm.cli:main"
    result = run_cli("train", "rbm", "digits")  # no --out: argparse's usage error
    assert result.code == 2 and "the following arguments are required: --out" in result.err
    result = run_cli("train", "rbm", "digits", "--out", "x", "--epochs", "many")
    assert result.code == 2 and "invalid int value: 'many'" in result.err
    assert "Traceback" not in result.err


def test_config_file_sets_options_and_the_command_line_wins(tmp_path):
    config = tmp_path / "options.toml"
    config.write_text('n_hidden = 12\nepochs = 1\ncd_k = 2\nlr = 0.05\nbatch_size = 32\n'
                      'optimizer = "sgd"\npcd = false\nseed = 7\nl2 = 1e-4\n'
                      'train_size = 200\nvalid_size = 50\ntest_size = 50\n')
    run_dir = tmp_path / "run"
    assert_ok(run_cli("train", "rbm", "digits", "--out", run_dir, "--config", config,
                      "--epochs", 2, "--quiet"))
    settings = json.loads((run_dir / "config.json").read_text())["settings"]
    assert {k: settings[k] for k in ("n_hidden", "epochs", "cd_k", "lr", "batch_size",
                                     "optimizer", "pcd", "seed", "l2", "train_size")} == {
        "n_hidden": 12, "epochs": 2, "cd_k": 2, "lr": 0.05, "batch_size": 32,
        "optimizer": "sgd", "pcd": False, "seed": 7, "l2": 1e-4, "train_size": 200}
    _, metadata = read_checkpoint(run_dir / "checkpoint.safetensors")
    assert {k: metadata["training"][k] for k in ("cd_k", "lr", "batch_size", "optimizer",
                                                 "persistent", "seed", "l2")} == {
        "cd_k": 2, "lr": 0.05, "batch_size": 32, "optimizer": "sgd", "persistent": False,
        "seed": 7, "l2": 1e-4}
    assert metadata["epoch"] == 2 and irbm.load(run_dir / "model.safetensors").n_hidden == 12
    # Resuming with the same file is not a change.
    assert_ok(run_cli("train", "rbm", "digits", "--out", run_dir, "--config", config,
                      "--epochs", 3, "--quiet"))
    assert read_checkpoint(run_dir / "checkpoint.safetensors")[1]["epoch"] == 3


def test_every_setting_is_a_config_key_recorded_in_the_run(tmp_path):
    """One source: a config file may set every option, and the run records every setting but
    the system ones."""
    values = {"n_hidden": 5, "beta": 1.2, "max_hidden": 40, "dtype": "float64", "epochs": 1,
              "batch_size": 50, "lr": 0.02, "optimizer": "adagrad",
              "epsilon_placement": "inside", "l1": 1e-4, "l2": 1e-4,
              "regularization": "authors", "cd_k": 2, "pcd": False, "seed": 3,
              "random_permutation": True, "regrouping": "peng", "growth": "paired",
              "profile": "authors", "growth_trigger": "last", "new_unit": "chains",
              "pruning": "one", "shuffle": False, "chains_per_update": "rows",
              "last_batch": "merge", "average": 3, "random_stream": "torch", "visible_init": "data",
              "train_size": 200, "valid_size": 30, "test_size": 30, "binarize": "threshold",
              "data_key": "X", "split_seed": 2,
              "eval_every": 1, "eval_chains": 5, "eval_betas": 20, "threads": 1}
    # init_model, the one left out (it would clash with visible_init "data"), has a test of
    # its own (test_a_run_starts_from_a_saved_model_and_trains_on_from_it).
    assert set(values) | {"init_model"} == set(CONFIG_KEYS)
    rows = tmp_path / "rows.npz"
    np.savez(rows, X=np.random.default_rng(0).random((300, 16)), y=np.zeros(300))
    config = tmp_path / "all.toml"
    config.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in values.items()))
    assert_ok(run_cli("train", "irbm", rows, "--out", tmp_path / "run", "--config", config,
                      "--quiet"))
    settings = json.loads((tmp_path / "run" / "config.json").read_text())["settings"]
    assert settings == {**{k: v for k, v in values.items() if k != "threads"},
                        "family": "irbm", "dataset": str(rows), "init_model": None}
    assert irbm.load(tmp_path / "run" / "model.safetensors").dtype == torch.float64


@pytest.mark.parametrize("text,fragment", [
    ('epochs = 1\nn-hidden = 4\n', "unknown keys in"),
    ('epochs = 1\nn-hidden = 4\n', "did you mean n_hidden for n-hidden?"),
    ('n_hiden = 4\n', "did you mean n_hidden for n_hiden?"),
    # scikit-learn's names, and the README's groups written as TOML tables.
    ('learning_rate = 0.1\n', "did you mean lr for learning_rate?"),
    ('n_components = 10\n', "did you mean n_hidden for n_components?"),
    ('lr = 0.1\n[grid]\nl1 = [0.0, 0.001]\n', "is a sweep file ([grid]): run it with `irbm "
                                               "sweep"),
    ('[training]\nlr = 0.1\ncd_k = 2\n', "[training] in"),
    ('[training]\nlr = 0.1\ncd_k = 2\n', "without [sections] (lr = 0.05, not under "
                                          "[training]): move lr, cd_k out of it"),
    # The positional arguments are not config keys, and the message says where they go.
    ('family = "rbm"\n', "family in"),
    ('family = "rbm"\n', "the family and the dataset are the command's own arguments"),
    ('epochs = "2"\n', "epochs must be an integer >= 0, got '2'"),
    ('n_hidden = 4.5\n', "n_hidden must be an integer >= 1"),
    ('pcd = "no"\n', "pcd must be true or false"),
    ('lr = true\n', "lr must be a finite number > 0"),
    ('lr = nan\n', "lr must be a finite number > 0, got nan"),
    ('optimizer = "adam"\n', "optimizer must be one of adagrad, sgd"),
    ('regrouping = "sorted"\n', "regrouping must be one of all, peng"),
    ('growth = "both"\n', "growth must be one of any, paired"),
    ('epsilon_placement = "under"\n', "epsilon_placement must be one of outside, inside"),
    ('dtype = "int8"\n', "dtype must be one of"),
    ('max_hidden = 5\n', "rbm does not take max_hidden"),
    ('epochs = [1\n', "not valid TOML"),
    (None, "config file not found"),
    ("a directory", "is a directory; give a TOML file"),
])
def test_bad_config_file_is_a_clean_error(tmp_path, text, fragment):
    config = tmp_path / "options.toml"
    if text == "a directory":
        config.mkdir()
    elif text is not None:
        config.write_text(text)
    before = snapshot(tmp_path)
    assert_clean_error(run_cli("train", "rbm", "digits", "--out", tmp_path / "run",
                               "--config", config), fragment)
    assert snapshot(tmp_path) == before


def test_threads_option_sets_torch_threads(pipeline, monkeypatch, tmp_path):
    """--threads N: the command's work runs on N threads, and main gives torch's setting back
    (the CLI runs in-process here, as in a notebook)."""
    from irbm import workflows
    # A copy: sampling into the shared run would change what other tests read there.
    run_dir = copy_run(pipeline_run(pipeline, "digits-rbm"), tmp_path)
    seen = []
    for name in ("sample_run", "report_runs"):
        original = getattr(workflows, name)

        def spy(*args, _original=original, **kwargs):
            seen.append(torch.get_num_threads())
            return _original(*args, **kwargs)
        monkeypatch.setattr(workflows, name, spy)
    for command in (["sample", run_dir, "--n", 2, "--steps", 2], ["report", run_dir]):
        assert_ok(run_cli(*command[:1], *command[1:], "--threads", 2,
                          *(["--out", run_dir.parent / "threads-report"]
                            if command[0] == "report" else [])))
        assert seen.pop() == 2 and torch.get_num_threads() == 1
    # Without --threads: the policy's choice (`irbm._threads.default_threads`; made 3 here,
    # where the CLI tests pin it to 1).
    monkeypatch.setattr("irbm._threads.default_threads", lambda *args, **kwargs: 3)
    assert_ok(run_cli("report", run_dir, "--out", run_dir.parent / "threads-report"))
    assert seen.pop() == 3 and torch.get_num_threads() == 1
    assert_clean_error(run_cli("report", run_dir, "--threads", 0), "threads must be")


# ---------------------------------------------------------------------------- demo
def test_demo_quick_runs_end_to_end(tmp_path):
    """Two threads: the iRBM here and the others in a worker process (`irbm.demo`)."""
    out_dir = tmp_path / "demo"
    start = time.perf_counter()
    result = run_cli("demo", "--quick", "--out", out_dir, "--threads", 2)
    seconds = time.perf_counter() - start
    assert_ok(result)
    print(f"irbm demo --quick: {seconds:.1f}s")
    run_dirs = [out_dir / family for family in ("rbm", "orbm", "irbm")]
    rows = check_report(out_dir / "report", run_dirs)
    assert [row["Model"] for row in rows] == ["RBM", "oRBM", "iRBM"]
    train = torch.as_tensor(load_dataset("digits").train)
    for run_dir in run_dirs:
        family = run_dir.name
        assert {p.stem for p in (run_dir / "figures").glob("*.png")} == FIGURES[family]
        for path in (run_dir / "figures").glob("*.png"):
            assert_non_trivial_png(path)
        (record,) = evaluations(run_dir)
        assert record["dataset"] == "digits" and record["n_chains"] == 50
        # Real numbers: every model beats the uniform distribution's 64 ln 2 = 44.4 nats, and
        # ln Z agrees with a longer AIS run (1,000 temperatures, 100 other chains; its own
        # error, against 400 chains x 6,000 temperatures, was below 0.02 nat for seeds 1-5).
        assert 5 < record["nll"]["test"]["mean"] < 64 * math.log(2)
        reference = estimate_log_partition(irbm.load(run_dir / "model.safetensors"), 100, 1000,
                                           data=train, seed=1, progress=False)
        assert abs(record["log_z"] - reference.log_z) < 1.0, (record["log_z"], reference)
    assert "| RBM |" in result.out and "demo finished" in result.out
    assert str(out_dir / "report" / "report.html") in result.out
    # Three models without --eval-every: the hint that the latest is evaluated comes once.
    assert result.out.count("--eval-every") == 1, result.out
    # Side by side: the iRBM here first, then the worker's models, each in one piece.
    starts = [result.out.index(f"\n== {family}: training") for family in ("irbm", "rbm", "orbm")]
    assert starts == sorted(starts), result.out
    for family in ("rbm", "orbm", "irbm"):
        block = result.out.split(f"\n== {family}: training")[1].split("\n\n== ")[0]
        assert f"== {family}: AIS" in block and "test  NLL" in block, result.out
    # A model trained in the worker is the one `irbm train --threads 1` gives.
    from irbm.demo import MODELS, QUICK_EPOCHS
    family, options = MODELS[0]
    flags = [f"--{name.replace('_', '-')}={value}" for name, value in options.items()]
    assert_ok(run_cli("train", family, "digits", "--epochs", QUICK_EPOCHS, *flags, "--threads", 1,
                      "--out", tmp_path / "alone", "--quiet"))
    assert model_digest(irbm.load(tmp_path / "alone" / "model.safetensors")) == \
        model_digest(irbm.load(out_dir / family / "model.safetensors"))


def test_history_is_written_after_the_checkpoint_of_its_epoch(tmp_path, monkeypatch):
    """A kill between the two then leaves history.json behind the checkpoint, never ahead of it
    with an epoch the resumed run trains again (a sweep's killed worker showed one)."""
    from irbm import checkpoint, runs
    seen, real = [], runs.HistoryWriter.on_epoch_end

    def spy(self, trainer, metrics):
        _, metadata = checkpoint.read_checkpoint(self.path.parent / checkpoint.MODEL_FILE)
        seen.append((metrics["epoch"], int(metadata["epoch"])))
        return real(self, trainer, metrics)
    monkeypatch.setattr(runs.HistoryWriter, "on_epoch_end", spy)
    assert_ok(run_cli("train", "rbm", "digits", "--out", tmp_path / "run", "--n-hidden", 3,
                      "--epochs", 3, "--quiet"))
    assert seen == [(1, 1), (2, 2), (3, 3)]
    # A kill between the last checkpoint and its history line: the resume with nothing left
    # to train writes the history again (a sweep reads it to tell a finished trial).
    history = tmp_path / "run" / "history.json"
    stored = json.loads(history.read_text())
    history.write_text(json.dumps({**stored, "history": stored["history"][:2]}))
    assert_ok(run_cli("train", "rbm", "digits", "--out", tmp_path / "run", "--n-hidden", 3,
                      "--epochs", 3, "--quiet"))
    assert json.loads(history.read_text()) == stored


def test_the_epoch_lines_give_short_epochs_in_ms_and_a_batch_past_the_rows_is_noted(tmp_path):
    result = run_cli("train", "rbm", "digits", "--out", tmp_path / "run", "--n-hidden", 3,
                     "--epochs", 1, "--train-size", 100, "--batch-size", 500)
    assert_ok(result)
    assert "note: --batch-size 500 exceeds the 100 training rows: one update per epoch" in \
        result.out
    assert re.search(r"epoch +1/1 .* +\d+ms\n", result.out), result.out


def test_a_named_npz_array_and_split_seed_are_the_runs_for_later_commands(tmp_path):
    """--data-key and --split-seed are recorded, so that evaluate loads the same rows (the run's
    data digest checks it), and resume refuses another split without --force."""
    import numpy as np
    rows = np.random.default_rng(0).integers(0, 2, (60, 9))
    np.savez(tmp_path / "xy.npz", X=rows, y=np.arange(60))
    out = tmp_path / "run"
    train = ["train", "rbm", tmp_path / "xy.npz", "--out", out, "--n-hidden", 3, "--quiet",
             "--data-key", "X", "--split-seed", 5]
    assert_ok(run_cli(*train, "--epochs", 1))
    recorded = json.loads((out / "config.json").read_text())["settings"]
    assert (recorded["data_key"], recorded["split_seed"]) == ("X", 5)
    assert_ok(run_cli("evaluate", out, "--chains", 10, "--betas", 20))
    assert_clean_error(run_cli(*train[:-1], 6, "--epochs", 2), "split_seed: 5 -> 6",
                       "--force")
    # Unset is seed 0: naming it on resume is no change.
    unseeded = tmp_path / "unseeded"
    assert_ok(run_cli(*train[:4], unseeded, *train[5:-2], "--epochs", 1))
    assert_ok(run_cli(*train[:4], unseeded, *train[5:-2], "--split-seed", 0, "--epochs", 2))


def test_binarize_option_for_user_files(tmp_path, capsys):
    """Grey-level user data is refused with a hint, and accepted with --binarize."""
    import numpy as np

    from irbm.cli import main
    values = np.random.default_rng(0).random((60, 9))
    path = tmp_path / "grey.npy"
    np.save(path, values)
    assert main(["train", "rbm", str(path), "--out", str(tmp_path / "refused"), "--epochs", "1",
                 "--n-hidden", "3", "--quiet"]) == 2
    assert "--binarize" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()
    out = tmp_path / "run"
    assert main(["train", "rbm", str(path), "--out", str(out), "--epochs", "1", "--n-hidden", "3",
                 "--quiet", "--binarize", "threshold"]) == 0
    assert main(["evaluate", str(out), "--chains", "10", "--betas", "20"]) == 0
    assert main(["train", "rbm", "digits", "--out", str(tmp_path / "named"), "--binarize",
                 "threshold"]) == 2
    assert "already binary and split" in capsys.readouterr().err


def test_evaluate_with_a_path_the_family_lacks_is_a_clean_error(pipeline, tmp_path):
    """`--ais-path pinned` on an RBM: one line naming the family's paths, nothing written."""
    run_dir = copy_run(pipeline_run(pipeline, "digits-rbm"), tmp_path)
    before = snapshot(run_dir)
    assert_clean_error(run_cli("evaluate", run_dir, *EVALUATE, "--ais-path", "pinned"),
                       "unknown AIS path 'pinned' for the RBM: choose one of linear")
    assert snapshot(run_dir) == before


def test_version_a_zero_step_sample_and_ctrl_c_before_the_first_checkpoint(
        pipeline, tmp_path, monkeypatch, capsys):
    from irbm import __version__
    from irbm import commands as commands_module
    assert run_cli("--version").out.strip() == f"irbm {__version__}"
    assert_clean_error(run_cli("sample", pipeline_run(pipeline, "digits-rbm"), "--steps", 0),
                       "--steps must be an integer >= 1, got 0")

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(commands_module, "run_train", interrupted)
    result = run_cli(*train_args("rbm", "digits", tmp_path / "new"))
    assert result.code == 130 and result.err.strip() == (
        "irbm: interrupted; before the first checkpoint: nothing to resume, the same command "
        "starts afresh")
    run = pipeline_run(pipeline, "digits-rbm")
    result = run_cli(*train_args("rbm", "digits", run))
    epoch = irbm.checkpoint.read_checkpoint(run / "model.safetensors")[1]["epoch"]
    assert result.code == 130 and f"the last checkpoint (epoch {int(epoch)}) is intact" in \
        result.err, result.err


def test_a_run_under_the_authors_profile_says_the_rules_it_takes(tmp_path):
    result = run_cli("train", "irbm", "digits", "--out", tmp_path / "run", *TINY_TRAIN,
                     "--epochs", 1, "--profile", "authors", "--shuffle")
    assert_ok(result)
    assert ("profile authors: epsilon_placement inside, regularization authors, shuffle True, "
            "chains_per_update rows, growth chains, growth_trigger last, new_unit chains, "
            "pruning one") in result.out.splitlines()
    plain = run_cli("train", "irbm", "digits", "--out", tmp_path / "plain", *TINY_TRAIN,
                    "--epochs", 1)
    assert_ok(plain)
    assert "profile" not in plain.out


def test_a_run_trained_to_epoch_0_resumes(tmp_path):
    """--epochs 0 saves a checkpoint at epoch 0: the same command with more epochs resumes it
    (a review found it refused as another run's files)."""
    run_dir = tmp_path / "run"
    for epochs in (0, 2):
        assert_ok(run_cli("train", "rbm", "digits", "--out", run_dir, "--n-hidden", 4,
                          "--epochs", epochs, "--cd-k", 1, "--quiet", *SMALL))
    assert json.loads((run_dir / "history.json").read_text())["history"][-1]["epoch"] == 2


def test_a_changed_size_is_named_as_a_change_not_as_a_clash_with_a_recorded_cap(tmp_path):
    """Against the run's max_hidden 20, --n-hidden 30 read "max_hidden (20) is smaller than
    n_hidden (30)", a value the user never gave (a review): it is a change of the model."""
    run_dir = tmp_path / "run"
    assert_ok(run_cli(*train_args("irbm", "digits", run_dir, "--max-hidden", 20)))
    before = snapshot(run_dir)
    assert_clean_error(run_cli(*train_args("irbm", "digits", run_dir, "--n-hidden", 30)),
                       "holds a model built with n_hidden 16; it cannot be changed")
    assert snapshot(run_dir) == before


def test_visible_init_is_recorded_and_fixed_for_the_run(tmp_path):
    run_dir = tmp_path / "run"
    assert_ok(run_cli(*train_args("rbm", "digits", run_dir, "--visible-init", "data")))
    config = json.loads((run_dir / "config.json").read_text())
    assert config["settings"]["visible_init"] == "data"
    assert_clean_error(run_cli(*train_args("rbm", "digits", run_dir, "--epochs", 3,
                                           "--visible-init", "zeros")),
                       "holds a model built with visible_init data; it cannot be changed")


def test_the_reports_settings_cell_tells_a_beta_grid_and_a_subset_apart(tmp_path):
    """Two oRBMs of a beta grid had the same Settings cell, and a run on 300 rows read as one
    on the whole data set (walkthroughs)."""
    cells = []
    for beta in (1.1, 1.2):
        run_dir = tmp_path / f"b{beta}"
        assert_ok(run_cli("train", "orbm", "digits", "--out", run_dir, "--n-hidden", 4,
                          "--epochs", 1, "--cd-k", 1, "--beta", beta, "--visible-init", "data",
                          "--quiet", *SMALL))
        assert_ok(run_cli("evaluate", run_dir, "--chains", 10, "--betas", 20))
        assert_ok(run_cli("report", run_dir, "--out", tmp_path / f"r{beta}"))
        (row,) = parse_markdown_table((tmp_path / f"r{beta}" / "report.md").read_text())
        cells.append(row["Settings"])
    assert cells[0] != cells[1] and "beta 1.1" in cells[0] and "beta 1.2" in cells[1]
    assert "visible biases from the data" in cells[0] and "train rows 300" in cells[0]
    # Every other setting off its default is named (two runs of another CD-k, batch size or
    # seed read the same, a walkthrough), and an averaged run says what its parameters are.
    assert "cd_k 1" in cells[0] and "batch_size" not in cells[0] and "seed" not in cells[0]
    run_dir = tmp_path / "other"
    assert_ok(run_cli("train", "orbm", "digits", "--out", run_dir, "--n-hidden", 4,
                      "--epochs", 1, "--cd-k", 2, "--batch-size", 32, "--seed", 7,
                      "--average", 5, "--quiet", *SMALL))
    for evaluated in (run_dir, run_dir / "average"):
        assert_ok(run_cli("evaluate", evaluated, "--latest", "--chains", 10, "--betas", 20))
    from irbm.report import run_row
    cell = run_row(run_dir)["Settings"]
    assert "batch_size 32" in cell and "cd_k 2" in cell and "seed 7" in cell, cell
    assert "moving average" not in cell
    assert run_row(run_dir / "average")["Settings"].endswith(
        ", the parameters' moving average over about 5 updates")


def test_evaluate_says_when_a_model_does_worse_than_independent_pixels(tmp_path):
    """Small-data runs from zero visible biases ended worse than each pixel on at its own rate,
    and nothing said so (a walkthrough)."""
    from irbm.workflows import independent_pixels_nll
    run_dir = tmp_path / "run"
    assert_ok(run_cli("train", "rbm", "digits", "--out", run_dir, "--n-hidden", 4, "--epochs",
                      0, "--quiet", *SMALL))
    result = run_cli("evaluate", run_dir, "--chains", 10, "--betas", 20)
    assert_ok(result)
    record = evaluations(run_dir)[-1]
    data = load_dataset("digits").subset(300, 100, 100)
    rate = (data.train.mean(0) + 0.05) / 1.1
    by_hand = float(np.mean([-np.log(np.where(row == 1, rate, 1 - rate)).sum()
                             for row in data.test]))
    assert record["independent_pixels_test_nll"] == pytest.approx(by_hand, rel=1e-9) == \
        independent_pixels_nll(data.train, data.test)
    # an untrained model (every pixel at 1/2) is worse: said, with what to do
    assert record["nll"]["test"]["mean"] > by_hand
    assert "is above the independent-pixel model's" in result.out
    assert "--visible-init data" in result.out
    # Started at the data, untrained, it is that very model (zero weights): no note, and the
    # advice never names the option a run already has (a review)
    started = tmp_path / "started"
    assert_ok(run_cli("train", "rbm", "digits", "--out", started, "--n-hidden", 4, "--epochs",
                      0, "--visible-init", "data", "--quiet", *SMALL))
    result = run_cli("evaluate", started, "--chains", 10, "--betas", 20)
    record = evaluations(started)[-1]
    # (float32 biases: 64 logits rounded)
    assert record["nll"]["test"]["mean"] == pytest.approx(by_hand, abs=0.01)
    assert "independent-pixel" not in result.out
