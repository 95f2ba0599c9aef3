"""Usage errors of the command line are one line on stderr (``irbm: error: ...``, exit 2) that
say what to type instead, and come before any work or banner."""

from __future__ import annotations

import json

import pytest
from _cli_helpers import (  # noqa: F401 (one_thread: an autouse fixture)
    assert_clean_error,
    assert_ok,
    one_thread,
    run_cli,
    snapshot,
)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run = tmp_path_factory.mktemp("errors") / "run"
    assert_ok(run_cli("train", "rbm", "digits", "--out", run, "--n-hidden", 4, "--epochs", 1,
                      "--cd-k", 1, "--quiet"))
    return run


def test_a_mistyped_family_is_one_line_with_a_suggestion(tmp_path):
    result = run_cli("train", "ibrm", "digits", "--out", tmp_path / "run")
    assert_clean_error(result, "invalid choice: 'ibrm'", "did you mean 'irbm'?")
    assert "usage" not in result.err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("typed,meant", [("--n_hidden", "--n-hidden"),
                                         ("--batchsize", "--batch-size"),
                                         ("--eval_every", "--eval-every")])
def test_an_option_spelled_like_its_config_key_gets_the_right_spelling(tmp_path, typed, meant):
    result = run_cli("train", "rbm", "digits", "--out", tmp_path / "run", typed, 5)
    assert_clean_error(result, f"unrecognized arguments: {typed} 5", f"did you mean {meant}?")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command,typed,said", [
    (["evaluate", "RUN"], ["--epochs", "5"], "--epochs is an option of `irbm train`, not of "
                                              "`irbm evaluate`"),
    (["demo"], ["--quiet"], "--quiet is an option of `irbm train`, `irbm evaluate`, `irbm "
                            "sample`, not of `irbm demo`"),
    # Never abbreviated: --chains was taken for --chains-per-update, "invalid choice: '10'".
    (["train", "rbm", "digits", "--out", "RUN"], ["--chains", "10"],
     "--chains is an option of `irbm evaluate`, not of `irbm train`")])
def test_an_option_of_another_command_is_named_so(tmp_path, command, typed, said):
    """An audit of messages: other commands' options got a far-fetched "did you mean" (--quiet
    in the demo: --quick, which changes what runs) or were taken by abbreviation."""
    command = [str(tmp_path / "run") if part == "RUN" else part for part in command]
    assert_clean_error(run_cli(*command, *typed), f"unrecognized arguments: {' '.join(typed)}",
                       said)
    assert not (tmp_path / "run").exists()


def test_a_missing_option_is_one_line_naming_the_help(tmp_path):
    assert_clean_error(run_cli("train", "rbm", "digits"),
                       "the following arguments are required: --out", "irbm train --help")


@pytest.mark.parametrize("args,fragment", [
    (["evaluate", "{run}", "--chains", -5], "--chains must be an integer >= 1, got -5"),
    (["evaluate", "{run}", "--betas", 1], "--betas must be an integer >= 2, got 1"),
    (["evaluate", "{run}", "--raise", -3], "--raise: must be an integer >= 1, got -3"),
    # 0 rows is neither none (leave --raise out) nor all (--raise alone, argparse's 0)
    (["evaluate", "{run}", "--raise", 0], "--raise: must be an integer >= 1, got 0; give "
     "--raise alone for all test rows, or leave it out for none"),
    (["evaluate", "{run}", "--bracket", "--raise", 1], "--raise 1: a bracket's conservative "
     "side needs at least 2 RAISE rows for its standard error (default 300)"),
    (["evaluate", "{run}", "--seed", -1], "--seed must be an integer >= 0, got -1"),
    (["evaluate", "{run}", "--max-seconds", 60], "--max-seconds 60.0 is the time budget of "
     "--bracket; add --bracket, or leave --max-seconds out"),
    (["evaluate", "{run}", "--tolerance", 0.5], "--tolerance 0.5 is the width --bracket aims "
     "at; add --bracket, or leave --tolerance out"),
    (["sample", "{run}", "--seed", -3], "--seed must be an integer >= 0, got -3"),
    (["sample", "{run}", "--n", 0], "--n must be an integer >= 1, got 0"),
    (["sample", "{run}", "--steps", 0], "--steps must be an integer >= 1, got 0"),
    (["sweep", "{run}/sweep.toml", "--out", "{run}/sweep", "--workers", 0],
     "--workers must be an integer >= 1, got 0")])
def test_out_of_range_counts_are_refused_before_any_banner(run_dir, args, fragment):
    result = run_cli(*(str(arg).format(run=run_dir) for arg in args))
    assert_clean_error(result, fragment)
    assert result.out == ""


def test_plot_on_a_sweep_directory_names_its_trials(run_dir, tmp_path):
    sweep = tmp_path / "sweep"
    (sweep / "lr-0.1").mkdir(parents=True)
    (sweep / "irbm-sweep.json").write_text(json.dumps(
        {"format": "irbm-sweep", "version": 1, "trials": ["lr-0.1"]}))
    for command in ("plot", "evaluate", "sample"):
        line = assert_clean_error(run_cli(command, sweep), "is a sweep directory",
                                  f"irbm {command} {sweep / 'lr-0.1'}", f"irbm report {sweep}")
        assert "irbm train" not in line


@pytest.mark.parametrize("other", ["mnist", "caltech101"])
def test_resuming_on_another_named_dataset_is_refused_even_with_force(run_dir, other):
    """Before, the first message said "pass --force", and --force then met the data check."""
    before = {path.name: path.read_bytes() for path in run_dir.iterdir() if path.is_file()}
    for force in ((), ("--force",)):
        result = run_cli("train", "rbm", other, "--out", run_dir, "--n-hidden", 4,
                         "--epochs", 2, "--cd-k", 1, "--quiet", *force)
        assert_clean_error(result, f"{run_dir} was trained on digits",
                           f"train on {other} with a new --out")
    assert {path.name: path.read_bytes() for path in run_dir.iterdir() if path.is_file()} \
        == before


def test_a_moved_data_file_resumes_with_force_once_its_contents_match(tmp_path):
    import numpy as np
    rows = (np.random.default_rng(0).random((60, 9)) < 0.4).astype(np.float32)
    first, moved = tmp_path / "a.npy", tmp_path / "elsewhere" / "a.npy"
    np.save(first, rows)
    run = tmp_path / "run"
    options = ["--out", run, "--n-hidden", 3, "--cd-k", 1, "--quiet"]
    assert_ok(run_cli("train", "rbm", first, "--epochs", 1, *options))
    moved.parent.mkdir()
    first.rename(moved)
    assert_clean_error(run_cli("train", "rbm", moved, "--epochs", 2, *options),
                       "different settings", "if the data file only moved, --force goes on")
    assert_ok(run_cli("train", "rbm", moved, "--epochs", 2, "--force", *options))
    assert json.loads((run / "history.json").read_text())["history"][-1]["epoch"] == 2


def test_a_run_on_a_moved_data_file_is_evaluated_with_data_dir(tmp_path):
    """--data-dir finds a run's own data file by its name; before, the recorded absolute path
    was read whatever --data-dir said."""
    import numpy as np
    rows = (np.random.default_rng(1).random((90, 9)) < 0.4).astype(np.float32)
    first, moved = tmp_path / "rows.npy", tmp_path / "moved" / "rows.npy"
    np.save(first, rows)
    run = tmp_path / "run"
    assert_ok(run_cli("train", "rbm", first, "--out", run, "--n-hidden", 3, "--epochs", 1,
                      "--cd-k", 1, "--quiet"))
    moved.parent.mkdir()
    first.rename(moved)
    evaluate = ("evaluate", run, "--latest", "--chains", 5, "--betas", 10)
    assert_clean_error(run_cli(*evaluate), f"{first}: no such file", "pass --data-dir",
                       "holds rows.npy")
    assert_clean_error(run_cli(*evaluate, "--data-dir", tmp_path / "nowhere"),
                       "trained on rows.npy, and neither", "nowhere/rows.npy is a file")
    (tmp_path / "other").mkdir()
    np.save(tmp_path / "other" / "rows.npy", 1 - rows)  # same name, other data
    assert_clean_error(run_cli(*evaluate, "--data-dir", tmp_path / "other"),
                       "is not the data", "sha256")
    assert_ok(run_cli(*evaluate, "--data-dir", moved.parent))
    assert json.loads((run / "evaluation.json").read_text())["evaluations"][-1]["nll"]
    # A --data-dir without the file (a sweep's, say) still finds it where it was.
    moved.rename(first)
    assert_ok(run_cli(*evaluate, "--data-dir", tmp_path / "nowhere"))


@pytest.mark.parametrize("command", ["evaluate", "sample", "plot"])
def test_a_model_file_named_instead_of_its_run_names_the_run(run_dir, command):
    assert_clean_error(run_cli(command, run_dir / "model.safetensors"),
                       "model.safetensors is a file; give the run directory it is in",
                       f"({run_dir})")


def test_a_run_whose_first_epoch_never_finished_says_so(tmp_path):
    """A run stopped (or diverged) in its first epoch has its marker and settings but no
    model: 'checkpoint not found' sent users looking for a file."""
    run = tmp_path / "run"
    assert_ok(run_cli("train", "rbm", "digits", "--out", run, "--n-hidden", 4, "--epochs", 1,
                      "--cd-k", 1, "--quiet"))
    for name in ("model.safetensors", "checkpoint.safetensors", "history.json"):  # epoch 1 cut
        (run / name).unlink()
    for command in ("evaluate", "sample"):
        assert_clean_error(run_cli(command, run), "holds no model yet",
                           "no epoch of its training finished", "run `irbm train` on it again")
    # The advice works: the same command trains it, and then it evaluates.
    assert_ok(run_cli("train", "rbm", "digits", "--out", run, "--n-hidden", 4, "--epochs", 1,
                      "--cd-k", 1, "--quiet"))
    assert_ok(run_cli("evaluate", run, "--latest", "--chains", 5, "--betas", 10))


def test_a_run_resumes_under_another_spelling_of_its_dataset_and_past_a_recorded_size(
        tmp_path):
    """From a review: 'Digits' is digits (the refusal of another dataset compares loader
    keys), and a run that recorded more valid rows than its data has (accepted before the
    sizes were checked) goes on with the rows it started with."""
    run = tmp_path / "run"
    assert_ok(run_cli("train", "rbm", "digits", "--out", run, "--n-hidden", 3, "--epochs", 1,
                      "--cd-k", 1, "--quiet"))
    config = json.loads((run / "config.json").read_text())
    config["settings"]["valid_size"] = 5000  # as an older irbm recorded it
    (run / "config.json").write_text(json.dumps(config))
    assert_ok(run_cli("train", "rbm", "Digits", "--out", run, "--n-hidden", 3, "--epochs", 2,
                      "--cd-k", 1, "--quiet", "--force"))
    assert json.loads((run / "history.json").read_text())["history"][-1]["epoch"] == 2


def test_a_checkpoint_directory_written_from_python_says_how_to_use_it(tmp_path):
    """CheckpointEvery writes a model but no run records: the message says what the command
    line takes and how to evaluate the model in Python (and that way works)."""
    import torch

    import irbm
    from irbm.datasets import load_dataset
    from irbm.training import CheckpointEvery
    data = load_dataset("digits")
    trainer = irbm.Trainer(irbm.RBM(data.n_visible, 3), batch_size=50, progress=False)
    trainer.fit(torch.as_tensor(data.train[:100]), epochs=1,
                callbacks=[CheckpointEvery(tmp_path / "ck")])
    for command, python in (("evaluate", "irbm.evaluate.ais_nll(irbm.load("),
                            ("sample", "irbm.sampling.sample(irbm.load("),
                            ("plot", "irbm.plotting.plot_filters(irbm.load(")):
        assert_clean_error(run_cli(command, tmp_path / "ck"), "holds a model saved from Python",
                           "irbm.workflows.train_run", python)
    drawn = irbm.sampling.sample(irbm.load(str(tmp_path / "ck")), 100, 1000)  # as said
    assert drawn.samples.shape == (100, data.n_visible)
    # Training into it is refused before anything is written, --force or not: it would
    # overwrite that model (a review found a run's records written, then the refusal).
    before = snapshot(tmp_path / "ck")
    for force in ([], ["--force"]):
        assert_clean_error(run_cli("train", "orbm", "digits", "--out", tmp_path / "ck",
                                   "--n-hidden", 7, "--epochs", 1, *force),
                           "holds checkpoint.safetensors, model.safetensors but no "
                           "irbm-run.json (a run written from Python, one whose marker was "
                           "lost, or files of your own), which training here would overwrite "
                           "or take for its own: choose a new --out")
    assert snapshot(tmp_path / "ck") == before
    estimate = irbm.evaluate.ais_nll(irbm.load(str(tmp_path / "ck")),
                                     torch.as_tensor(data.test[:20]), n_chains=10, n_betas=20)
    assert estimate.mean > 0


def test_a_sweep_with_failed_trials_exits_with_status_1(tmp_path, monkeypatch):
    """A script or CI job must tell a sweep whose trials failed from one that succeeded."""
    monkeypatch.setattr("irbm.sweep.run_sweep", lambda *args, **kwargs: {
        "tables": [], "done": 3, "failed": ["lr=1e+30"], "skipped": 0})
    result = run_cli("sweep", tmp_path / "sweep.toml", "--out", tmp_path / "out")
    assert result.code == 1, result
    assert "irbm: 1 of 4 trials run failed: lr=1e+30 (see error.txt in each" in result.err
    monkeypatch.setattr("irbm.sweep.run_sweep", lambda *args, **kwargs: {
        "tables": [], "done": 4, "failed": [], "skipped": 0})
    assert_ok(run_cli("sweep", tmp_path / "sweep.toml", "--out", tmp_path / "out"))
