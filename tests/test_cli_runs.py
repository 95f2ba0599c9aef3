"""Run directories you can trust, through the command line.

A run is a directory with the ``irbm-run.json`` marker; training refuses to write into anything
else that holds files, to restart a run over its results, or to save a diverged epoch; reports
and plots refuse (or, when asked, mark) results computed from another model than the run's
current one. Every refusal is one line on stderr, exit status 2, and leaves every file on disk
byte-identical (`snapshot`).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
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
    run_cli,
    snapshot,
)

from irbm.runs import load_run_dataset, load_run_model, read_json

TINY = ["--n-hidden", 8, "--epochs", 1, "--cd-k", 1, "--quiet", "--train-size", 200,
        "--valid-size", 50, "--test-size", 50]
EVALUATE = ["--chains", 10, "--betas", 50]




@pytest.fixture(scope="module")
def evaluated_run(tmp_path_factory) -> Path:
    """An RBM trained one epoch on the digits, evaluated and sampled; tests work on copies."""
    run_dir = tmp_path_factory.mktemp("evaluated") / "run"
    assert_ok(run_cli("train", "rbm", "digits", "--out", run_dir, *TINY))
    with pytest.MonkeyPatch.context() as patch:  # by AIS, as the tests' (`ais_on_tiny_models`)
        patch.setattr("irbm._evaluate_run.EXACT_TERMS", 0)
        assert_ok(run_cli("evaluate", run_dir, *EVALUATE))
    assert_ok(run_cli("sample", run_dir, "--n", 4, "--steps", 5))
    return run_dir


@pytest.fixture
def run_dir(evaluated_run, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(evaluated_run, copy)
    return copy


def evaluations(run_dir) -> list[dict]:
    """The run's evaluation records, as the library reads them (non-finite numbers back)."""
    return read_json(Path(run_dir) / "evaluation.json")["evaluations"]


def refused(where, *args_and_fragments) -> str:
    """Run ``irbm ARGS``: a clean error holding the fragments, nothing changed under ``where``."""
    args, fragments = args_and_fragments
    before = snapshot(where)
    line = assert_clean_error(run_cli(*args), *fragments)
    assert snapshot(where) == before
    return line


# ---------------------------------------------------------------------------- training output
def test_train_refuses_a_non_empty_directory_that_is_not_a_run(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    refused(tmp_path, ["train", "rbm", "digits", "--out", out, *TINY],
            ["not empty and not an irbm run directory", "irbm-run.json", "--force"])
    # --force writes a run into it, leaving the other file alone.
    assert_ok(run_cli("train", "rbm", "digits", "--out", out, *TINY, "--force"))
    assert (out / "irbm-run.json").is_file() and (out / "notes.txt").read_text() == "my notes"


def test_force_into_a_directory_never_takes_or_overwrites_files_a_run_would_write(tmp_path):
    """--force let training into a directory of one's own files; it overwrote a config.json,
    history.json and average/ of the user's, and left an evaluation.json beside the new
    model to be read as its (a review)."""
    out = tmp_path / "mine"
    out.mkdir()
    for name in ("config.json", "history.json", "evaluation.json"):
        (out / name).write_text("{}")
    refused(tmp_path, ["train", "rbm", "digits", "--out", out, *TINY, "--force"],
            ["holds config.json, history.json, evaluation.json but no irbm-run.json",
             "files of your own", "move those files first"])


def test_a_model_file_of_another_run_is_refused_by_name(run_dir, tmp_path):
    """An oRBM's model and checkpoint copied into an RBM run were evaluated, sampled and
    trained on as the run's (the checkpoint's refusal blamed an option never given)."""
    other = tmp_path / "other"
    assert_ok(run_cli("train", "orbm", "digits", "--out", other, *TINY))
    shutil.copy(other / "model.safetensors", run_dir / "model.safetensors")
    mixed = (f"{run_dir / 'model.safetensors'} is not the model {run_dir / 'config.json'} "
             "describes (family 'orbm' where it records 'rbm')")
    for command in (["evaluate", run_dir, *EVALUATE], ["sample", run_dir, "--n", 4]):
        refused(run_dir, [*command], [mixed, "the files are of different runs"])
    shutil.copy(other / "checkpoint.safetensors", run_dir / "checkpoint.safetensors")
    refused(run_dir, ["train", "rbm", "digits", "--out", run_dir, *TINY, "--epochs", 2,
                      "--average", 5, "--force"],
            [f"{run_dir / 'checkpoint.safetensors'} is not the model", "family 'orbm'"])
    # Another number of hidden units of a family of fixed size, the family right.
    wider = tmp_path / "wider"
    assert_ok(run_cli("train", "rbm", "digits", "--out", wider, "--n-hidden", 9, *TINY[2:]))
    shutil.copy(wider / "model.safetensors", run_dir / "model.safetensors")
    refused(run_dir, ["evaluate", run_dir, *EVALUATE], ["n_hidden 9 where it records 8"])
    shutil.copy(other / "model.safetensors", run_dir / "model.safetensors")
    # Another number of visible units, with the family right, is named too.
    record = json.loads((run_dir / "config.json").read_text())
    record["settings"]["family"], record["dataset"]["n_visible"] = "orbm", 63
    (run_dir / "config.json").write_text(json.dumps(record))
    refused(run_dir, ["evaluate", run_dir, *EVALUATE], ["n_visible 64 where it records 63"])


def test_train_into_an_empty_directory_is_allowed(tmp_path):
    (tmp_path / "empty").mkdir()
    assert_ok(run_cli("train", "rbm", "digits", "--out", tmp_path / "empty", *TINY))


def test_train_refuses_out_that_is_a_file(tmp_path):
    (tmp_path / "run").write_text("a file")
    refused(tmp_path, ["train", "rbm", "digits", "--out", tmp_path / "run", *TINY],
            ["--out", "is a file"])


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_a_run_with_results_but_no_checkpoint_is_refused_not_restarted(run_dir, force):
    (run_dir / "checkpoint.safetensors").unlink()
    refused(run_dir.parent, ["train", "rbm", "digits", "--out", run_dir, *TINY, "--epochs", 2,
                             *force],
            ["no checkpoint.safetensors", "cannot be resumed", "model.safetensors",
             "evaluation.json"])


def test_a_run_stopped_before_its_first_checkpoint_starts_again(tmp_path):
    out = tmp_path / "run"
    # Diverges at once: the run directory exists, with no checkpoint and no results.
    line = assert_clean_error(run_cli("train", "rbm", "digits", "--out", out, *TINY,
                                      "--lr", 1e38), "diverged at epoch 1")
    assert "no checkpoint was written" in line
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "irbm-run.json"]
    result = run_cli("train", "rbm", "digits", "--out", out, *TINY)
    assert_ok(result)
    assert "training an RBM" in result.out and "done: epoch 1" in result.out


def test_a_marker_of_another_format_version_is_refused(run_dir):
    (run_dir / "irbm-run.json").write_text(json.dumps({"format": "irbm-run", "version": 99}))
    for args in (["train", "rbm", "digits", "--out", run_dir, *TINY, "--epochs", 2],
                 ["evaluate", run_dir, *EVALUATE], ["report", run_dir, "--out",
                                                     run_dir.parent / "report"]):
        refused(run_dir.parent, args, ["format version 99", "reads version 1"])


def test_training_stops_at_the_first_non_finite_epoch_keeping_the_last_checkpoint(run_dir):
    line = refused(run_dir.parent, ["train", "rbm", "digits", "--out", run_dir, *TINY,
                                    "--epochs", 3, "--lr", 1e38, "--force"],
                   ["training diverged at epoch 2", "the checkpoint of epoch 1 is kept",
                    "--lr"])
    assert re.search(r"(parameter \w+ has non-finite values|\w+ is (nan|-?inf)|\| grew)",
                     line)
    # The run resumes from its last good epoch.
    result = run_cli("train", "rbm", "digits", "--out", run_dir, *TINY, "--epochs", 2)
    assert_ok(result)
    assert "resuming" in result.out and "at epoch 1" in result.out


def test_training_that_runs_away_stops_keeping_the_last_sound_checkpoint(run_dir, tmp_path):
    """SGD at lr 1e30 keeps every value finite (parameters of 1e30, free energies of -1e30)
    but makes a useless model: training stops at the epoch that grew by orders of magnitude,
    with a clear message and a non-zero exit, before anything saves it."""
    new = tmp_path / "new"
    line = assert_clean_error(
        run_cli("train", "rbm", "digits", "--out", new, *TINY, "--optimizer", "sgd", "--lr",
                1e30),
        "training diverged at epoch 1", "grew from", "e+30", "no checkpoint was written", "--lr")
    assert "non-finite" not in line
    assert sorted(path.name for path in new.iterdir()) == ["config.json", "irbm-run.json"]
    refused(run_dir.parent, ["train", "rbm", "digits", "--out", run_dir, *TINY, "--epochs", 3,
                             "--optimizer", "sgd", "--lr", 1e30, "--force"],
            ["training diverged at epoch 2", "the largest |parameter| grew",
             "the checkpoint of epoch 1 is kept"])
    result = run_cli("train", "rbm", "digits", "--out", run_dir, *TINY, "--epochs", 2)
    assert_ok(result)
    assert "at epoch 1" in result.out


def test_training_a_run_to_fewer_epochs_than_it_has_is_refused(run_dir):
    assert_ok(run_cli("train", "rbm", "digits", "--out", run_dir, *TINY, "--epochs", 2))
    refused(run_dir.parent, ["train", "rbm", "digits", "--out", run_dir, *TINY],
            [f"{run_dir} is at epoch 2", "--epochs 1", "raise --epochs", "left as it is"])
    result = run_cli("train", "rbm", "digits", "--out", run_dir, *TINY, "--epochs", 2)
    assert_ok(result)  # as many: nothing to do, and said so
    assert "at epoch 2" in result.out


# ---------------------------------------------------------------------------- inputs
def test_binarize_threshold_refuses_values_outside_the_unit_interval(tmp_path):
    np.save(tmp_path / "intensities.npy", np.random.default_rng(0).integers(0, 256, (60, 16)))
    refused(tmp_path, ["train", "rbm", tmp_path / "intensities.npy", "--out", tmp_path / "run",
                       "--binarize", "threshold", "--quiet"],
            ["binarize='threshold' (--binarize threshold) needs values in [0, 1]", "spans [0"])


def test_a_huge_n_hidden_is_refused_before_allocating(tmp_path):
    refused(tmp_path, ["train", "rbm", "digits", "--out", tmp_path / "run", "--n-hidden",
                       10**9, "--quiet"],
            ["n_hidden 1,000,000,000 x n_visible 64 float32 weights need", "GiB",
             "--n-hidden"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_cuda_without_cuda_is_a_clean_error(run_dir):
    for args in (["train", "rbm", "digits", "--out", run_dir.parent / "new", *TINY],
                 ["evaluate", run_dir, *EVALUATE], ["sample", run_dir]):
        refused(run_dir.parent, [*args, "--device", "cuda"], ["device 'cuda' is not usable"])


# Fixed bytes and ids: random ones made each pytest-xdist worker collect other test ids.
_NOISE = np.random.default_rng(0).bytes(300)


@pytest.mark.parametrize("content", [_NOISE, b"PK\x03\x04" + _NOISE, b""],
                         ids=["noise", "zip-header-then-noise", "empty"])
def test_a_corrupt_partial_ais_run_is_a_clean_error(run_dir, content):
    (run_dir / "ais_partial.npz").write_bytes(content)
    refused(run_dir.parent, ["evaluate", run_dir, *EVALUATE],
            ["ais_partial.npz", "corrupt", "delete it"])


# ---------------------------------------------------------------------------- results
def test_reevaluating_appends_and_the_report_pools_the_evaluations_of_the_model(run_dir,
                                                                               tmp_path):
    assert_ok(run_cli("evaluate", run_dir, *EVALUATE, "--seed", 1))
    first, second = evaluations(run_dir)
    assert first["seed"] == 0 and second["seed"] == 1
    assert first["model_sha256"] == second["model_sha256"] and first["epoch"] == 1
    # A later record of another model (with a higher ln Z) does not count for this model.
    other = {**second, "log_z": 1e6, "epoch": 7, "model_sha256": "0" * 64}
    for highest, lowest in ((first, second), (second, first)):
        # Each AIS ln Z is a stochastic lower bound: the higher one heads the row, first or
        # latest, and the other is listed.
        highest = {**highest, "log_z": lowest["log_z"] + 5.0, "path": "pinned: z = 8"}
        payload = {"evaluations": [highest, lowest, other] if highest["seed"] == 0
                   else [lowest, highest, other]}
        (run_dir / "evaluation.json").write_text(json.dumps(payload))
        assert_ok(run_cli("report", run_dir, "--out", tmp_path / "report"))
        (row,) = parse_markdown_table((tmp_path / "report" / "report.md").read_text())
        # ln Z pools the two (equal chains x temperatures): ln((Z-hat_1 + Z-hat_2) / 2),
        # below the highest; the NLL moves with it.
        pooled = highest["log_z"] + math.log((1 + math.exp(-5.0)) / 2)
        assert numbers(row["ln Z-hat"]) == [round(pooled, 2)]
        # (its NLLs were computed with the ln Z the record names, not the one set here)
        nll = highest["nll"]["test"]["mean"] - highest["nll_log_z"] + pooled
        assert numbers(row["Avg. test NLL"])[0] == round(nll, 2)
        ais = row["AIS (base, chains x temperatures, ESS, path)"]
        assert ais.split(", ")[3].startswith("pinned path")
        assert f"highest ln Z of 2 evaluations (also ran: {lowest['log_z']:.2f} linear; ln Z " \
            "and the NLL pool" in ais
        assert "Note" not in row


def test_a_warning_of_the_heading_evaluation_names_the_pooled_ones_without(run_dir, tmp_path):
    """The row's heading (highest ln Z) evaluation warns; another of the same model, on the
    other path as the warning advises, does not: a note says the pool holds it."""
    assert_ok(run_cli("evaluate", run_dir, *EVALUATE, "--seed", 1))
    first, second = evaluations(run_dir)
    warned = {**first, "log_z": second["log_z"] + 1.0, "path": "pinned: z = 8",
              "warnings": ["AIS effective sample size is 3.0 of 20 chains"]}
    clean = {**second, "warnings": [], "path": "linear: W v + b scaled by t",
             "effective_sample_size": 19.6}
    for payload, noted in (([warned, clean], True), ([warned, {**clean, "warnings": ["x"]}],
                                                     False), ([clean], False)):
        (run_dir / "evaluation.json").write_text(json.dumps({"evaluations": payload}))
        assert_ok(run_cli("report", run_dir, "--out", tmp_path / "report"))
        text = (tmp_path / "report" / "report.md").read_text()
        note = (f"also pool 1 evaluation(s) of this model that raised no warning (linear path, "
                f"{clean['base']} base, ESS 20 of {clean['n_chains']})")
        assert (note in text) == noted, text
        alone = (f"AIS effective sample size is 3.0 of 20 chains [of the heading evaluation "
                 f"alone (pinned path, {warned['base']} base, {warned['n_chains']} x "
                 f"{warned['n_betas']}; the row pools 2)]")
        assert (alone in text) == (len(payload) == 2), text


def test_evaluate_enumerates_ln_z_where_it_is_cheap(run_dir, tmp_path, monkeypatch, capsys):
    """A model of at most 2^20 terms (8 hidden units here) is evaluated with its exact ln Z:
    the NLLs use it, AIS's estimate and warnings are kept apart, and the report and its table
    show the exact value (a walkthrough's 10-unit RBM got "ln Z = 50.280" from AIS, below the
    certain floor, while the exact 50.363 was a second away)."""
    from irbm import _evaluate_run
    from irbm.cli import main
    monkeypatch.setattr(_evaluate_run, "EXACT_TERMS", 2**20)
    assert main(["evaluate", str(run_dir), *map(str, EVALUATE)]) == 0
    printed = capsys.readouterr().out
    record = evaluations(run_dir)[-1]
    model = load_run_model(run_dir, which="best")
    exact = model.log_partition_exact()
    assert record["log_z_source"] == "exact" and record["log_z"] == exact == record["nll_log_z"]
    assert record["log_z_low"] == record["log_z_high"] == exact and record["warnings"] == []
    assert record["ais_log_z"] != exact and "ais_warnings" in record
    test = torch.as_tensor(load_run_dataset(run_dir).test, dtype=torch.float32)
    with torch.no_grad():
        free = float(model.free_energy(test).mean())
    assert record["nll"]["test"]["mean"] == pytest.approx(free + exact, abs=1e-4)
    assert f"ln Z = {exact:.3f} exact (a sum of 256 terms), which the NLLs use; AIS gave " \
        f"{record['ais_log_z']:.3f}" in printed
    assert f"ln Z = {exact:.3f}  (exact)" in printed
    assert_ok(run_cli("report", run_dir, "--out", tmp_path / "report"))
    (row,) = parse_markdown_table((tmp_path / "report" / "report.md").read_text())
    assert row["ln Z-hat"] == f"{exact:.2f}" and row["ln(Z-hat -/+ 3 sigma)"] == \
        f"[{exact:.2f}, {exact:.2f}]"
    assert row["Avg. test NLL"].split(" +/- ")[0] == f"{free + exact:.2f}"
    assert "not used: ln Z exact (enumerated), 1 other evaluation(s) by AIS beside it" in \
        row["AIS (base, chains x temperatures, ESS, path)"]
    # An AIS estimate above the exact value (here: made so) does not head the row.
    stored = json.loads((run_dir / "evaluation.json").read_text())
    stored["evaluations"][0]["log_z"] = exact + 1.0
    (run_dir / "evaluation.json").write_text(json.dumps(stored))
    (row,) = parse_markdown_table(run_cli("report", run_dir, "--out", tmp_path / "again").out
                                  and (tmp_path / "again" / "report.md").read_text())
    assert row["ln Z-hat"] == f"{exact:.2f}" and "(unreliable" not in str(row)
    # The AIS convergence figure draws the exact ln Z beside the estimates.
    from irbm.plotting import run as figures
    drawn, real = [], figures.plot_ais_convergence
    monkeypatch.setattr(figures, "plot_ais_convergence",
                        lambda *a, **k: drawn.append(k.get("exact")) or real(*a, **k))
    assert_ok(run_cli("plot", run_dir))
    assert drawn == [exact]
    # --bracket anneals all the same, and says where the exact NLL lies against it.
    capsys.readouterr()
    assert main(["evaluate", str(run_dir), "--bracket", "--chains", "10", "--betas", "50",
                 "--raise", "20", "--max-seconds", "30"]) == 0
    printed, record = capsys.readouterr().out, evaluations(run_dir)[-1]
    assert record["log_z_source"] in ("pooled", "floor") and "bracket" in record
    assert record["exact_test_nll"] == pytest.approx(free + exact, abs=1e-4)
    assert f"exact test NLL {record['exact_test_nll']:.2f} (ln Z enumerated): " in printed
    bracket = record["bracket"]
    lower, upper = sorted((bracket["optimistic"], bracket["conservative"]))
    inside = lower <= record["exact_test_nll"] <= upper
    assert ("inside the bracket" in printed) == inside


def test_a_floor_above_ais_gives_one_nll_in_evaluate_and_report(run_dir, tmp_path,
                                                                 monkeypatch, capsys):
    """ln Z is at least the floor for certain, so a floor above the AIS estimate is the ln Z
    of the NLLs: irbm evaluate (and so the sweep table) used AIS's within its noise while
    irbm report used the floor, two test NLLs for one evaluation, neither saying why (a user's
    report). Here the floor is made 0.5 nat above AIS's estimate."""
    import irbm._evaluate_run as _evaluate_run
    from irbm.cli import main
    real = _evaluate_run.estimate_log_partition
    estimates = []

    def keep(*args, **kwargs):
        estimates.append(real(*args, **kwargs))
        return estimates[-1]

    monkeypatch.setattr(_evaluate_run, "estimate_log_partition", keep)
    monkeypatch.setattr(_evaluate_run, "sampled_log_partition_floor",
                        lambda *args, **kwargs: estimates[-1].log_z + 0.5)
    assert main(["evaluate", str(run_dir), *map(str, EVALUATE), "--seed", "3"]) == 0
    record = evaluations(run_dir)[-1]
    floor = estimates[-1].log_z + 0.5
    assert record["log_z"] == estimates[-1].log_z and record["nll_log_z"] == floor
    assert f"ln Z >= {floor:.3f}  (the certain floor" in capsys.readouterr().out
    model = load_run_model(run_dir, which="best")
    test = torch.as_tensor(load_run_dataset(run_dir).test, dtype=torch.float32)
    with torch.no_grad():
        free = float(model.free_energy(test).mean())
    assert record["nll"]["test"]["mean"] == pytest.approx(free + floor, abs=1e-4)
    (run_dir / "evaluation.json").write_text(json.dumps({"evaluations": [record]}))
    assert_ok(run_cli("report", run_dir, "--out", tmp_path / "report"))
    text = (tmp_path / "report" / "report.md").read_text()
    (row,) = parse_markdown_table(text)
    assert row["Avg. test NLL"].split(" +/- ")[0] == f"{record['nll']['test']['mean']:.2f}"
    assert f"ln Z-hat is the certain floor {floor:.2f}" in text
    # ln Z is at least the floor, with no upper limit: neither a zero-width nor a Z-hat interval.
    assert row["ln Z-hat"] == f"{floor:.2f}" and row["ln(Z-hat -/+ 3 sigma)"] == \
        f">= {floor:.2f} (the certain floor)"


def test_the_pooled_ln_z_weighs_by_chains_x_temperatures_and_combines_the_sigmas():
    from irbm.report import pooled_log_partition

    def record(log_z, sigma, n_chains, n_betas):  # sigma relative to Z-hat
        return {"log_z": log_z, "log_z_low": log_z + math.log(1 - 3 * sigma),
                "log_z_high": log_z + math.log(1 + 3 * sigma), "n_chains": n_chains,
                "n_betas": n_betas}

    one = record(100.0, 0.05, 10, 10)
    assert pooled_log_partition([one]) == pytest.approx((100.0, one["log_z_low"],
                                                        one["log_z_high"]))
    # Z-hat 1 (sigma 0.1, weight 1/4) and e (sigma 0.2, weight 3/4), in units of e^100:
    # pool 1/4 + 3e/4, sigma sqrt((0.1/4)^2 + (0.2 * 3e/4)^2).
    log_z, low, high = pooled_log_partition([record(100.0, 0.1, 10, 10),
                                             record(101.0, 0.2, 30, 10)])
    pool, sigma = 0.25 + 0.75 * math.e, math.hypot(0.1 / 4, 0.2 * 3 * math.e / 4)
    assert log_z == pytest.approx(100.0 + math.log(pool))
    assert high == pytest.approx(100.0 + math.log(pool + 3 * sigma))
    assert low == pytest.approx(100.0 + math.log(pool - 3 * sigma))


def test_the_report_pools_only_one_models_evaluations_and_shows_the_latest_bracket(
        monkeypatch):
    """A run's "best" and "latest" models are both current: their evaluations are not pooled.
    A re-judged bracket (a cross-check appended with the same AIS run) replaces the earlier
    record, in its place, and its bracket is the row's."""
    from irbm import report

    def record(log_z, sha, bracket=None):
        return {"log_z": log_z, "log_z_high": log_z + 0.1, "n_chains": 10, "n_betas": 10,
                "model_sha256": sha, **({"bracket": bracket} if bracket else {})}

    first = record(5.0, "a", {"optimistic": 1.0, "conservative": 3.0, "levels": []})
    rejudged = {**first, "bracket": {**first["bracket"], "conservative": 9.0},
                "cross_checked": True}
    other_model, later = record(50.0, "b"), record(4.0, "a")
    stored = [first, other_model, later, rejudged]
    monkeypatch.setattr(report.runs, "current_evaluation", lambda run_dir: (rejudged, None))
    monkeypatch.setattr(report.runs, "read_evaluations",
                        lambda run_dir: [dict(r) for r in stored])
    monkeypatch.setattr(report.runs, "staleness", lambda run_dir, r, cache: None)
    best, stale, others = report.best_evaluation("run")
    assert best["log_z"] == 50.0 and others == []  # model b alone
    stored.remove(other_model)
    best, stale, others = report.best_evaluation("run")
    assert best == rejudged and others == [later]
    assert report._latest_bracket("run", best, others)["conservative"] == 9.0


def test_a_continued_brackets_stored_levels_are_pooled_once():
    """--continue records the stored levels again beside the new one: pooled with the record
    they came from, they counted twice, and a row's NLL fell outside its own certified bracket
    (a walkthrough). A separate evaluation of the same model still joins the pool."""
    from irbm import report

    def level(n_betas, log_z):
        return {"n_betas": n_betas, "ais": {"linear": {"log_z": log_z, "n_chains": 100,
                                                       "sigma": 0.05}}}

    def bracketed(*levels):
        return {"log_z": levels[-1]["ais"]["linear"]["log_z"], "n_chains": 100,
                "n_betas": levels[-1]["n_betas"], "log_z_high": 0.0,
                "bracket": {"levels": list(levels)}}
    first = bracketed(level(1000, 10.0), level(2000, 12.0))
    continued = bracketed(level(1000, 10.0), level(2000, 12.0), level(4000, 12.5))
    alone = report.pooled_log_partition([continued])
    assert report.pooled_log_partition([first, continued]) == alone
    assert report.pooled_log_partition([continued, first]) == alone
    other = {"log_z": 14.0, "log_z_high": 14.1, "n_chains": 100, "n_betas": 1000}
    assert report.pooled_log_partition([first, continued, other])[0] > alone[0]



def test_a_bracket_superseded_by_its_continuation_does_not_head_the_row(monkeypatch):
    """Its highest ln Z made it the row's heading evaluation, whose diagnostics and advice to
    continue were then shown after the continuation (a walkthrough)."""
    from irbm import report

    def level(n_betas, log_z):
        return {"n_betas": n_betas, "ais": {"linear": {"log_z": log_z, "n_chains": 100,
                                                       "sigma": 0.05}}}

    def bracketed(log_z, *levels):
        return {"log_z": log_z, "log_z_high": log_z + 0.1, "n_chains": 100, "n_betas": 1000,
                "model_sha256": "a", "bracket": {"levels": list(levels)}}
    first = bracketed(99.0, level(1000, 10.0))
    continued = bracketed(12.0, level(1000, 10.0), level(2000, 12.0))
    monkeypatch.setattr(report.runs, "current_evaluation", lambda run_dir: (continued, None))
    monkeypatch.setattr(report.runs, "read_evaluations", lambda run_dir: [first, continued])
    monkeypatch.setattr(report.runs, "staleness", lambda run_dir, r, cache: None)
    best, stale, others = report.best_evaluation("run")
    assert best is continued and stale is None
    # Beside it, the higher ln Z that did not head the row is said to be continued (the cell
    # read "the highest ln Z of 2 evaluations" beside a higher one).
    assert report._others_text(best, others) == (
        "the highest ln Z of 2 evaluations, those whose runs a later record holds aside (also "
        "ran: 99.00 linear, its runs held by a later record (continued or re-judged); ln Z and "
        "the NLL pool their distinct AIS runs)")


def test_evaluate_bracket_records_both_sides_and_the_report_shows_them(run_dir, tmp_path,
                                                                       capsys):
    from irbm.cli import main
    assert main(["evaluate", str(run_dir), "--bracket", "--chains", "10", "--betas", "50",
                 "--raise", "20", "--tolerance", "0.5", "--max-seconds", "60",
                 "--tempering", "40"]) == 0
    printed = capsys.readouterr().out
    record = evaluations(run_dir)[-1]
    bracket = record["bracket"]
    routes = {route for level in bracket["levels"] for route in level["ais"]}
    assert f"each level: AIS (10 chains) and RAISE (20 rows x {bracket['raise_repeats']} " \
        f"reverse chains) on each of {len(routes)} routes (" in printed
    # The last line's ln Z is the pool's, said so below the highest run's own warnings.
    assert record["log_z_source"] in ("pooled", "floor")
    if record["log_z_source"] == "pooled":
        assert f"ln Z = {record['log_z']:.3f}  (the bracket's AIS runs pooled: ln of Z-hat " \
            "-/+ 3 sigma" in printed
    check = bracket["cross_check"]  # the tempering cross-check, recorded and echoed
    assert check["n_sweeps"] == 40 and check["n_temperatures"] == 64
    assert f"tempering ({check['route']}): NLL {check['nll']:.2f}" in printed
    assert check["bdmc"]["n_betas"] == bracket["levels"][-1]["n_betas"]
    assert f"BDMC from 256 of its samples: NLL at most {check['bdmc']['nll']:.2f}" in printed
    assert bracket["n_rows"] == 20 and bracket["n_chains"] == 10 and bracket["tolerance"] == 0.5
    # RAISE on its own schedule, tuned on the training rows (the CLI always passes them).
    assert bracket["schedule"] == "tuned"
    # The record's ln Z is the bracket's: every AIS run pooled (with its sigma), or the floor.
    assert record["log_z"] == pytest.approx(bracket["log_z"], abs=1e-9)
    assert record["log_z_source"] == ("floor" if bracket["log_z"] == bracket["log_z_floor"]
                                      else "pooled")
    assert record["log_z_low"] <= record["log_z"] <= record["log_z_high"]
    assert bracket["width"] == pytest.approx(bracket["conservative"] - bracket["optimistic"])
    assert bracket["certified"] == (not bracket["reasons"])
    assert record["log_z"] == bracket["log_z"] >= bracket["log_z_floor"]
    assert record["device"] == "cpu"  # where it ran, for the command that re-derives it
    assert [level["n_betas"] for level in bracket["levels"]] == [
        50 * 2**k for k in range(len(bracket["levels"]))]
    # The test NLL of the record is the optimistic side: the same ln Z on the same rows.
    assert record["nll"]["test"]["mean"] == pytest.approx(bracket["optimistic"], abs=1e-6)
    assert ("certified" if bracket["certified"] else "NOT certified") in printed
    # AIS's own warnings are said to be its point estimate's alone beside a certified bracket.
    label = "AIS's point estimate alone (the bracket above is certified): " \
        if bracket["certified"] else "warning (the bracket's highest AIS run alone): "
    assert all(f"{label}{warning}" in printed for warning in record["warnings"])
    # Which model was bracketed, and the test set's own spread (the paper's +/- is about 1.96
    # times it) beside the bracket.
    assert f"bracketing the test NLL of {run_dir / record['model_file']} (epoch " \
        f"{record['epoch']})" in printed
    assert f"the test rows' own standard error: {record['nll']['test']['stderr']:.2f} nats" \
        in printed
    for level in bracket["levels"]:  # each level's line ends with the bracket so far
        assert (f"{level['n_betas']} temperatures: NLL in [{level['own_optimistic']:.2f}, "
                f"{level['own_conservative']:.2f}]") in printed
        so_far = (f"the bracket so far, AIS pooled over every run: [{level['optimistic']:.2f}, "
                  f"{level['conservative']:.2f}]")
        assert so_far in printed
        # Sides that cross are said to (an inverted interval read as a bug: a message audit).
        crossing = level["conservative"] < level["optimistic"]
        assert (f"{so_far} (sides cross by "
                f"{level['optimistic'] - level['conservative']:.2f} nats)" in printed) == crossing
    assert_ok(run_cli("report", run_dir, "--out", tmp_path / "report"))
    (row,) = parse_markdown_table((tmp_path / "report" / "report.md").read_text())
    assert numbers(row["Test NLL bracket"])[:3] == [
        round(bracket["optimistic"], 2), round(bracket["conservative"], 2),
        round(abs(bracket["width"]), 2)]
    assert ("sides cross by" in row["Test NLL bracket"]) == (bracket["width"] < 0)
    # The cross-check beside it (a walkthrough found the report silent on it)
    assert (f"tempering {check['nll']:.2f} +/- {check['stderr']:.2f} ({check['passages']} "
            f"passages); BDMC from 256 of its samples: NLL at most "
            f"{check['bdmc']['nll']:.2f}") in row["Test NLL bracket"]
    # No --raise of its own: the RAISE column shows the bracket's RAISE side.
    assert "raise" not in record
    if math.isfinite(bracket["conservative"]):
        assert numbers(row["RAISE test NLL"])[:3] == [
            round(bracket["conservative"], 2), round(bracket["conservative_stderr"], 2), 20]
        assert "bracket" in row["RAISE test NLL"]
    else:  # RAISE never gave the bracket a finite side
        assert row["RAISE test NLL"] == "-"
    for reason in bracket["reasons"]:
        assert reason in (tmp_path / "report" / "report.md").read_text()


def test_bracket_options_are_refused_before_any_work(run_dir):
    for option, value in (("--tolerance", "0"), ("--max-seconds", "-3"),
                          ("--tolerance", "nan")):
        before = snapshot(run_dir)
        result = run_cli("evaluate", run_dir, "--bracket", option, value)
        assert result.code == 2 and f"argument {option}: must be a finite number > 0" in \
            result.err.splitlines()[-1]
        assert snapshot(run_dir) == before
    before = snapshot(run_dir)
    result = run_cli("evaluate", run_dir, "--bracket", "--tempering", "0")
    assert result.code != 0 and "--tempering needs a positive number of sweeps" in result.err
    # Without --bracket it cross-checks the latest bracket, and this run has none yet.
    result = run_cli("evaluate", run_dir, "--tempering", "10")
    assert result.code != 0 and "no bracket of its current model to cross-check" in result.err
    # Its ladders are its own: a budget given with it was ignored, and a record appended.
    for options in (["--chains", "16"], ["--betas", "50", "--raise", "10"], ["--seed", "3"]):
        assert_clean_error(run_cli("evaluate", run_dir, "--tempering", "10", *options),
                           "--tempering without --bracket cross-checks the run's latest "
                           f"bracket with ladders of its own and takes no {options[0]}")
    # --schedule spaces a bracket's temperatures: alone it would be ignored, so it is refused.
    result = run_cli("evaluate", run_dir, "--schedule", "uniform")
    assert result.code != 0 and "--schedule uniform spaces the temperatures of --bracket" in \
        result.err
    result = run_cli("evaluate", run_dir, "--bracket", "--schedule", "reverse")
    assert result.code == 2 and "invalid choice: 'reverse'" in result.err
    # More RAISE rows than the test set holds (50): refused naming the option, before the
    # banner, with or without --bracket.
    for extra in (["--bracket"], []):
        result = run_cli("evaluate", run_dir, *extra, "--raise", "1000")
        assert result.code == 2 and "bracketing" not in result.out
        assert "--raise 1000 (Python: raise_rows=): this run's test set has 50 rows; give at " \
            "most 50" in result.err
    result = run_cli("evaluate", run_dir, "--bracket", "--base", "descents")
    assert_clean_error(result, "the descents base serves AIS runs and --tempering cross-checks")
    assert "bracketing" not in result.out
    result = run_cli("evaluate", run_dir, "--bracket", "--chains", "1")
    assert_clean_error(result, "--chains 1 (Python: n_chains=): a bracket needs at least 2")
    assert "bracketing" not in result.out
    assert snapshot(run_dir) == before


def test_tempering_cross_checks_the_latest_bracket_in_a_new_record(run_dir, capsys):
    from irbm.cli import main
    assert main(["evaluate", str(run_dir), "--bracket", "--chains", "10", "--betas", "50",
                 "--raise", "20", "--max-seconds", "30", "--schedule", "tuned-forward"]) == 0
    bracketed = evaluations(run_dir)[-1]
    assert bracketed["bracket"]["schedule"] == "tuned-forward"
    assert "cross_check" not in bracketed["bracket"] or \
        bracketed["bracket"]["cross_check"] is None
    assert main(["evaluate", str(run_dir), "--tempering", "30"]) == 0
    printed = capsys.readouterr().out
    *earlier, checked = evaluations(run_dir)
    assert earlier[-1] == bracketed  # the bracket's own record is kept as it was
    check = checked["bracket"]["cross_check"]
    assert checked["cross_checked"] is True and check["n_sweeps"] == 30
    assert checked["bracket"]["levels"][-1]["raise"] == bracketed["bracket"]["levels"][-1]["raise"]
    assert f"tempering ({check['route']}): NLL {check['nll']:.2f}" in printed
    # BDMC from 8 samples of each of the 32 ladders, at the last level's temperatures.
    bdmc = check["bdmc"]
    assert bdmc["n_samples"] == 256
    assert bdmc["n_betas"] == checked["bracket"]["levels"][-1]["n_betas"]
    assert f"BDMC from 256 of its samples: NLL at most {bdmc['nll']:.2f}" in printed
    # Another route than the bracket's highest run: named by --ais-path and --base.
    # The floor as a bracket computes it now, never below the stored one, and the record's
    # test NLL stays the bracket's optimistic side.
    assert checked["bracket"]["log_z_floor"] >= bracketed["bracket"]["log_z_floor"]
    assert checked["nll"]["test"]["mean"] == pytest.approx(checked["bracket"]["optimistic"],
                                                           abs=1e-6)
    # Another route than the bracket's highest run: named by --ais-path and --base.
    assert main(["evaluate", str(run_dir), "--tempering", "12", "--base", "model",
                 "--ais-path", "linear"]) == 0
    assert evaluations(run_dir)[-1]["bracket"]["cross_check"]["route"] == "linear, model base"


def test_a_cross_check_whose_floor_beats_the_pooled_ais_makes_it_the_records_ln_z(
        run_dir, monkeypatch):
    """When the floor recomputed by a cross-check lies above the pooled AIS (as on the
    CalTech101 RBM-100, whose hidden vectors hold its mass), the new record's ln Z, its NLLs
    and its bracket's optimistic side are the floor's, and the verdict names it."""
    from irbm import _evaluate_run
    from irbm.cli import main
    from irbm.floor import FLOOR_STEPS
    assert main(["evaluate", str(run_dir), "--bracket", "--chains", "10", "--betas", "50",
                 "--raise", "20", "--max-seconds", "30"]) == 0
    bracketed = evaluations(run_dir)[-1]
    lifted = bracketed["log_z"] + 2.0
    calls = []

    def floor_of(model, data, **options):  # the floor a bracket of this record computes
        calls.append(options)
        assert model.n_hidden == bracketed["n_hidden"]
        assert data.shape == (200, model.n_visible)  # the run's training rows (--train-size)
        return lifted

    monkeypatch.setattr(_evaluate_run, "sampled_log_partition_floor", floor_of)
    assert main(["evaluate", str(run_dir), "--tempering", "8"]) == 0
    assert calls == [{"n_chains": 10, "n_steps": FLOOR_STEPS, "seed": bracketed["seed"] or 0}]
    checked = evaluations(run_dir)[-1]
    assert checked["log_z"] == checked["log_z_floor"] == checked["bracket"]["log_z"] == lifted
    assert checked["log_z_source"] == "floor"
    # ln Z >= the floor for certain, and nothing bounds it above (not [floor, floor]).
    assert (checked["log_z_low"], checked["log_z_high"]) == (lifted, math.inf)
    assert "2.00 nats too low" in checked["warnings"][-1]
    for split, values in checked["nll"].items():
        assert values["mean"] == pytest.approx(bracketed["nll"][split]["mean"] + 2.0, abs=1e-6)
    assert checked["bracket"]["optimistic"] == pytest.approx(checked["nll"]["test"]["mean"],
                                                             abs=1e-6)
    # and the report shows that NLL (it was 2 nats off, moved from the former ln Z's)
    assert checked["nll_log_z"] == lifted
    assert_ok(run_cli("report", run_dir, "--out", run_dir.parent / "report"))
    (row,) = parse_markdown_table((run_dir.parent / "report" / "report.md").read_text())
    assert row["Avg. test NLL"].split(" +/- ")[0] == f"{checked['nll']['test']['mean']:.2f}"
    assert not checked["bracket"]["certified"]
    reasons = checked["bracket"]["reasons"]
    assert any("below the certain floor" in reason for reason in reasons)
    assert not any("best AIS run gives" in reason for reason in reasons)


def test_a_floor_from_more_chains_rejudges_the_latest_bracket(run_dir, monkeypatch, capsys):
    """--floor-chains recomputes the certain floor with more chains: one above the bracket's
    is appended as a new record whose ln Z, NLLs and optimistic side are its own (with
    --floor-descents, descents' minima count too); one no higher appends nothing; AIS
    options, and descents without --floor-chains, are refused before any work."""
    import irbm
    from irbm import _evaluate_run
    from irbm.cli import main
    from irbm.floor import FLOOR_STEPS, sampled_log_partition_floor
    assert main(["evaluate", str(run_dir), "--bracket", "--chains", "10", "--betas", "50",
                 "--raise", "20", "--max-seconds", "30"]) == 0
    bracketed, count = evaluations(run_dir)[-1], len(evaluations(run_dir))
    capsys.readouterr()
    assert main(["evaluate", str(run_dir), "--floor-chains", "40", "--betas", "9"]) == 2
    assert "takes no --betas" in capsys.readouterr().err
    assert main(["evaluate", str(run_dir), "--floor-descents", "40"]) == 2
    assert "add --floor-chains" in capsys.readouterr().err
    assert main(["evaluate", str(run_dir), "--floor-chains", "40", "--floor-descents", "-1"]) == 2
    assert "--floor-descents needs a number of starts >= 0" in capsys.readouterr().err
    assert len(evaluations(run_dir)) == count
    # The real floor from 40 chains, as the command computes it.
    model, _ = irbm.runs.run_model(run_dir, which="latest")
    expected = sampled_log_partition_floor(
        model, irbm.runs.load_run_dataset(run_dir).train, n_chains=40, n_steps=FLOOR_STEPS,
        seed=bracketed["seed"] or 0)
    assert main(["evaluate", str(run_dir), "--floor-chains", "40"]) == 0
    stored = bracketed["bracket"]["log_z_floor"]
    if expected > stored:
        assert evaluations(run_dir)[-1]["bracket"]["log_z_floor"] == expected
    else:
        assert len(evaluations(run_dir)) == count and "nothing appended" in capsys.readouterr().out
    # A floor above the pooled AIS: the new record's numbers are the floor's.
    count = len(evaluations(run_dir))
    lifted = bracketed["log_z"] + 2.0
    calls = []
    monkeypatch.setattr(_evaluate_run, "sampled_log_partition_floor",
                        lambda *a, **k: calls.append(k) or lifted)
    assert main(["evaluate", str(run_dir), "--floor-chains", "4000", "--floor-descents",
                 "30"]) == 0
    assert calls[-1]["n_chains"] == 4000 and calls[-1]["descents"] == 30
    # The bracket's pool lies below it (a single run of it may lie above: a walkthrough read
    # "AIS's estimate" as a contradiction of its level line).
    assert (f"ln Z >= {lifted:.3f}  (the certain floor, which the bracket's AIS runs pooled lie "
            "below)") in capsys.readouterr().out
    checked = evaluations(run_dir)
    assert len(checked) == count + 1 and checked[-1]["floor_chains"] == 4000
    assert checked[-1]["floor_descents"] == 30
    assert checked[-1]["log_z"] == checked[-1]["bracket"]["log_z"] == lifted
    assert checked[-1]["nll"]["test"]["mean"] == pytest.approx(
        bracketed["nll"]["test"]["mean"] + 2.0, abs=1e-6)
    assert checked[-1]["bracket"]["optimistic"] == pytest.approx(
        checked[-1]["nll"]["test"]["mean"], abs=1e-6)
    # No higher than the latest bracket's floor now: nothing more is appended.
    assert main(["evaluate", str(run_dir), "--floor-chains", "4000"]) == 0
    assert len(evaluations(run_dir)) == count + 1
    assert "nothing appended" in capsys.readouterr().out


def test_evaluate_continues_the_latest_bracket_with_its_own_settings(run_dir, capsys,
                                                                    monkeypatch):
    """--continue keeps the stored levels and settings, adds levels from twice the last
    one's temperatures in a new record that names the one it continues; options that would
    change the bracket, or nothing to continue, are refused before any work."""
    from irbm.cli import main
    refusal = run_cli("evaluate", run_dir, "--bracket", "--continue")
    assert refusal.code != 0 and "no bracket of its current model to continue" in refusal.err
    assert main(["evaluate", str(run_dir), "--bracket", "--chains", "10", "--betas", "50",
                 "--raise", "20", "--tolerance", "0.01", "--seed", "4", "--max-seconds",
                 "2", "--ais-path", "linear"]) == 0
    *_, stored = evaluations(run_dir)
    # Tempering appends a re-judged copy, the latest bracket: continued as the one it checked.
    assert main(["evaluate", str(run_dir), "--tempering", "8"]) == 0
    *_, checked = evaluations(run_dir)
    assert checked["bracket"]["cross_check"] is not None
    before = snapshot(run_dir)
    for options, message in (
            (["--chains", "12"], "--chains 12: the stored bracket ran with 10"),
            (["--seed", "5"], "--seed 5: the stored bracket ran with 4"),
            (["--betas", "400"], "--betas: a continued bracket doubles the temperatures"),
            (["--ais-path", "pinned"], "--ais-path pinned: the stored bracket ran with linear"),
            (["--raise-repeats", "2"], "--raise-repeats 2: the stored bracket ran with 4"),
            (["--raise", "30"], "--raise 30: the stored bracket ran with 20"),
            (["--base", "model"], "--base model: the stored bracket ran with both bases")):
        refusal = run_cli("evaluate", run_dir, "--bracket", "--continue", *options)
        assert refusal.code != 0 and message in refusal.err, refusal.err
    refusal = run_cli("evaluate", run_dir, "--continue")
    assert refusal.code != 0 and "--continue continues a stored bracket: add --bracket" in \
        refusal.err
    refusal = run_cli("evaluate", run_dir, "--raise-repeats", "4")
    assert refusal.code != 0 and "sets the reverse chains per row of --bracket" in refusal.err
    refusal = run_cli("evaluate", run_dir, "--bracket", "--raise-repeats", "0")
    assert refusal.code != 0 and "--raise-repeats" in refusal.err, refusal.err
    assert snapshot(run_dir) == before
    capsys.readouterr()
    # --raise alone, with --bracket the default rows, is the stored bracket's when continued.
    # The 8 s budget lets a level run to its end even on a loaded machine (2 s stopped it
    # inside the level, exit 3, under four processes on two cores): no batch is refused by its
    # predicted time (a first batch's compile would predict the rest too long on a busy
    # machine; that prediction is tested in test_bracket_work).
    monkeypatch.setattr("irbm.ais.Deadline.predicted_seconds", lambda self, *shape: 0.0)
    assert main(["evaluate", str(run_dir), "--bracket", "--continue", "--seed", "4",
                 "--max-seconds", "8", "--raise"]) == 0
    out = capsys.readouterr().out
    stored_levels = len(stored["bracket"]["levels"])
    assert f"continuing {stored_levels} stored level{'s' if stored_levels != 1 else ''}" in out
    # Four reverse chains per row by default: each level says the gap they leave.
    records = evaluations(run_dir)
    continued = records[-1]
    gaps = [level["raise"].get(level["raise_path"], {}).get("repeat_gap")
            for level in continued["bracket"]["levels"][len(stored["bracket"]["levels"]):]]
    assert gaps and None not in gaps, gaps
    for gap in gaps:  # shown from 0.005 nat up
        assert (f"its RAISE about {gap:.2f} nat loose for want of reverse chains per row"
                in out) == (gap >= 0.005)
    assert records[continued["continues"]] == checked
    old, new = stored["bracket"], continued["bracket"]
    # No --tempering this time: the check of the bracket it continues is carried on, judged
    # again at the new level (it was dropped, and a row lost its tempering column so).
    carried = checked["bracket"]["cross_check"]
    assert new["cross_check"] == {**carried, "carried": True}
    assert f"tempering of the stored bracket ({carried['route']}): NLL {carried['nll']:.2f}" \
        in out
    assert new["levels"][:len(old["levels"])] == old["levels"]
    assert new["resumed_levels"] == len(old["levels"]) < len(new["levels"])
    assert new["levels"][len(old["levels"])]["n_betas"] == 2 * old["levels"][-1]["n_betas"]
    assert (new["n_chains"], new["n_rows"], new["tolerance"], new["paths"], continued["seed"]) \
        == (10, 20, 0.01, ["linear"], 4)
    # The pilots of the first level's 50 temperatures, kept (a new bracket would cap at 1,000).
    assert old["pilot_betas"] == new["pilot_betas"] == 50
    assert new["max_seconds"] == 8  # this call's budget, recorded for the next --continue
    # A bracket that cannot go on (certified, as judged by the function the continuation
    # calls) is refused before the banner that says the work has begun (a walkthrough)
    def certified(stored, tolerance):
        raise ValueError("the stored bracket is certified at 400 temperatures")
    monkeypatch.setattr("irbm._evaluate_run.refuse_certified_resume", certified)
    refusal = run_cli("evaluate", run_dir, "--bracket", "--continue")
    assert_clean_error(refusal, "the stored bracket is certified at 400 temperatures")
    assert "bracketing" not in refusal.out


@pytest.mark.parametrize("edit, problem", [
    (lambda record: record.update(nll="x"), "evaluation 1 has an nll that is not"),
    (lambda record: record.update(nll={"test": "x"}), "evaluation 1 has an nll that is not"),
    (lambda record: record.update(bracket=5), "evaluation 1 has a bracket without numeric"),
    (lambda record: record.update(epoch="five"), "evaluation 1 has epoch 'five', not a whole"),
    (lambda record: record.update(log_z="abc"), "evaluation 1 has log_z 'abc', not a number"),
    (lambda record: record.clear(), "evaluation 1 has log_z None, not a number"),
    (lambda record: record.update(log_z=True), "evaluation 1 has log_z True, not a number"),
    (lambda record: record.update(n_hidden=8.5), "evaluation 1 has n_hidden 8.5, not a whole"),
    (lambda record: record.update(bracket={"optimistic": 1.0, "conservative": 2.0}),
     "evaluation 1 has a bracket without numeric sides and a list of levels")])
def test_a_hand_edited_evaluation_record_is_named_not_a_traceback(run_dir, tmp_path, edit,
                                                                   problem):
    """`irbm report` failed with AttributeError or TypeError on them, or printed the word in
    the table (a review)."""
    payload = json.loads((run_dir / "evaluation.json").read_text())
    edit(payload["evaluations"][0])
    (run_dir / "evaluation.json").write_text(json.dumps(payload))
    for command in (["report", run_dir, "--out", tmp_path / "report"],
                    ["report", run_dir, "--out", tmp_path / "report", "--allow-stale"]):
        refused(run_dir, command, [f"{run_dir / 'evaluation.json'}: {problem}",
                                   "correct it, or delete the file and run `irbm evaluate`"])


@pytest.mark.parametrize("payload, problem", [
    ({"evaluations": {"log_z": 1.0}}, "not a list of records"),
    ({"evaluations": ["text"]}, "evaluation 1 is not a record (a JSON object)")])
def test_an_evaluation_file_of_another_form_is_named(run_dir, tmp_path, payload, problem):
    (run_dir / "evaluation.json").write_text(json.dumps(payload))
    refused(run_dir, ["report", run_dir, "--out", tmp_path / "report"],
            [f"{run_dir / 'evaluation.json'}: {problem}"])


def test_a_run_named_twice_is_one_row(run_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(run_dir.parent)
    assert_ok(run_cli("report", run_dir, f"./{run_dir.name}", run_dir, "--out",
                      tmp_path / "report"))
    assert len(parse_markdown_table((tmp_path / "report" / "report.md").read_text())) == 1
    # Python's write_report takes one directory as report_runs does (a str was read letter by
    # letter: "run directory not found: r").
    from irbm.report import write_report
    markdown, _ = write_report(str(run_dir), tmp_path / "python")
    assert len(parse_markdown_table(markdown.read_text())) == 1


def test_report_refuses_results_of_an_earlier_model(run_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_ok(run_cli("train", "rbm", "digits", "--out", run_dir, *TINY, "--epochs", 2))
    refused(tmp_path, ["report", run_dir],
            ["evaluation.json is stale: evaluated at epoch 1", "model is now at epoch 2",
             "irbm evaluate", "--allow-stale"])
    # Asked to, the report shows it, marked.
    assert_ok(run_cli("report", run_dir, "--allow-stale"))
    (row,) = parse_markdown_table((tmp_path / "report" / "report.md").read_text())
    assert row["Note"] == "stale: evaluated at epoch 1"
    assert row["Epoch"] == "1 (latest; stale, see Note)"  # read as the run's own epoch
    assert "stale: evaluated at epoch 1" in (tmp_path / "report" / "report.html").read_text()
    # Evaluated and sampled again, they are current.
    assert_ok(run_cli("evaluate", run_dir, *EVALUATE))
    assert [record["epoch"] for record in evaluations(run_dir)] == [1, 2]
    assert_ok(run_cli("report", run_dir))
    (row,) = parse_markdown_table((tmp_path / "report" / "report.md").read_text())
    assert "Note" not in row and row["Epoch"] == "2 (latest)"
    assert numbers(row["ln Z-hat"]) == [round(evaluations(run_dir)[-1]["log_z"], 2)]
    assert "samples.npz is stale" in run_cli("plot", run_dir).out
    assert_ok(run_cli("sample", run_dir, "--n", 4, "--steps", 5))
    assert "stale" not in run_cli("plot", run_dir).out


def test_report_goes_to_report_in_the_current_directory(run_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run_cli("report", run_dir)
    assert_ok(result)
    assert (tmp_path / "report" / "report.md").is_file()
    assert (tmp_path / "report" / "irbm-report.json").is_file()
    assert not (run_dir / "report.md").exists() and not (tmp_path / "report.md").exists()


@pytest.mark.parametrize("how", ["foreign_directory", "file", "explicit_run_directory"])
def test_report_refuses_to_overwrite_what_is_not_a_report(run_dir, tmp_path, monkeypatch, how):
    monkeypatch.chdir(tmp_path)
    out = []
    if how == "foreign_directory":
        (tmp_path / "report").mkdir()
        (tmp_path / "report" / "report.md").write_text("my own report")
        fragments = ["not empty and not an irbm report directory", "--out"]
    elif how == "file":
        (tmp_path / "report").write_text("a file")
        fragments = ["is a file"]
    else:
        out = ["--out", run_dir]
        fragments = ["not an irbm report directory"]
    refused(tmp_path, ["report", run_dir, *out], fragments)


def test_plot_after_a_resume_draws_what_is_current_and_leaves_no_stale_figure(run_dir):
    """Stale samples or AIS weights block no other figure: samples.png is drawn from the current
    model instead of the stale samples, the AIS convergence of an earlier model is not drawn
    and its old figure removed, and each is said with the command that updates it."""
    figures = run_dir / "figures"
    assert_ok(run_cli("plot", run_dir))
    old = {path.name: path.read_bytes() for path in figures.glob("*.png")}
    assert {"samples.png", "ais_convergence.png", "filters.png"} <= set(old)
    assert_ok(run_cli("train", "rbm", "digits", "--out", run_dir, *TINY, "--epochs", 2))
    result = run_cli("plot", run_dir)
    assert_ok(result)
    assert re.search(r"samples.npz is stale: drawn at epoch 1 .*irbm sample", result.out)
    assert re.search(r"ais_log_weights.npy is stale: evaluated at epoch 1 .*irbm evaluate",
                     result.out)
    assert not (figures / "ais_convergence.png").exists()
    for name in ("samples.png", "filters.png", "training_curves.png"):
        assert (figures / name).read_bytes() != old[name], name
    # Asked to, plot draws from the stale results anyway, and says so.
    result = run_cli("plot", run_dir, "--allow-stale")
    assert_ok(result)
    assert "drawn anyway" in result.out and (figures / "ais_convergence.png").exists()


def test_unreadable_samples_are_a_clean_error_for_plot(run_dir):
    (run_dir / "samples.npz").write_bytes(os.urandom(200))
    refused(run_dir.parent, ["plot", run_dir, "--allow-stale"],
            ["samples.npz is unreadable", "irbm sample"])


def test_evaluate_with_raise_records_the_conservative_nll_and_diagnostics(tmp_path, capsys):
    from irbm.cli import main
    run = tmp_path / "run"
    assert main(["train", "orbm", "digits", "--out", str(run), "--epochs", "2",
                 "--n-hidden", "12", "--quiet"]) == 0
    assert main(["evaluate", str(run), "--chains", "30", "--betas", "200", "--raise", "25"]) == 0
    record = json.loads((run / "evaluation.json").read_text())["evaluations"][-1]
    assert record["base"] == "data"  # the family's default base
    assert 1.0 <= record["effective_sample_size"] <= 30
    assert record["raise"]["n_rows"] == 25 and record["raise"]["n_betas"] == 200
    assert math.isfinite(record["raise"]["mean"]) and record["raise"]["stderr"] > 0
    assert "by RAISE, conservative" in capsys.readouterr().out


def test_a_run_evaluated_on_both_paths_reports_their_pooled_ln_z(tmp_path):
    """The advice of every flagged estimate (run the other path too) is what the report uses,
    whichever path ran last: the higher heads the row, ln Z and the NLL pool the two."""
    run = tmp_path / "orbm"
    assert_ok(run_cli("train", "orbm", "digits", "--out", run, *TINY))
    for path in ("pinned", "linear"):
        assert_ok(run_cli("evaluate", run, *EVALUATE, "--ais-path", path))
    records = evaluations(run)
    assert [r["path"].split(":")[0] for r in records] == ["pinned", "linear"]
    best, other = sorted(records, key=lambda r: r["log_z"], reverse=True)
    assert_ok(run_cli("report", run, "--out", tmp_path / "report"))
    (row,) = parse_markdown_table((tmp_path / "report" / "report.md").read_text())
    pooled = best["log_z"] + math.log((1 + math.exp(other["log_z"] - best["log_z"])) / 2)
    assert numbers(row["ln Z-hat"]) == [round(pooled, 2)]
    assert numbers(row["Avg. test NLL"])[0] == round(
        best["nll"]["test"]["mean"] - best["log_z"] + pooled, 2)
    assert f"(also ran: {other['log_z']:.2f} {other['path'].split(':')[0]}; ln Z" in \
        row["AIS (base, chains x temperatures, ESS, path)"]


def test_an_interrupted_bracket_resumes_where_it_stopped(run_dir, monkeypatch, capsys):
    """`irbm evaluate --bracket` stopped in its second level keeps that level's finished runs
    under bracket_partial/; the same command resumes there, records the levels an
    uninterrupted call records, and removes the directory. Another bracket's command is
    refused while it is there, and nothing is touched."""
    import irbm.reverse as reverse
    from irbm.cli import main
    # The 2 s budget is for the levels; no batch is refused by its predicted time (a first
    # batch's compile would predict the rest too long on a busy machine; test_bracket_work).
    monkeypatch.setattr("irbm.ais.Deadline.predicted_seconds", lambda self, *shape: 0.0)

    def command(where, seed=4):
        return ["evaluate", str(where), "--bracket", "--chains", "10", "--betas", "20",
                "--raise", "20", "--raise-repeats", "1", "--tolerance", "0.001", "--seed",
                str(seed), "--ais-path", "linear", "--base", "data", "--max-seconds", "2"]

    uninterrupted = run_dir.parent / "uninterrupted"
    shutil.copytree(run_dir, uninterrupted)
    assert main(command(uninterrupted)) == 0
    expected = evaluations(uninterrupted)[-1]["bracket"]["levels"]
    real, calls = reverse.run_reverse_chains, []

    def interrupted(*args, **kwargs):  # RAISE's runs (its pilot calls irbm.ais's)
        calls.append(1)
        if len(calls) == 2:  # level 2's
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(reverse, "run_reverse_chains", interrupted)
        capsys.readouterr()
        assert main(command(run_dir)) == 130
    assert "irbm: interrupted; nothing was recorded; AIS chain batches already saved" in \
        capsys.readouterr().err
    work = run_dir / "bracket_partial"
    assert sorted(path.name for path in work.iterdir()) == [
        "20-linear-ais.npz", "20-linear-raise.npz", "40-linear-ais.npz", "floor.json", "lock",
        "pilots.npz", "settings.json"]
    before = snapshot(run_dir)
    refusal = run_cli(*command(run_dir, seed=5))
    assert refusal.code != 0 and "holds the unfinished level of another bracket (it differs " \
        "in seed)" in refusal.err, refusal.err
    assert snapshot(run_dir) == before
    # A failure after the bracket returned, before its record is stored, keeps the work.
    import irbm.runs as runs

    def disk_full(*args, **kwargs):
        raise OSError("No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(runs, "append_evaluation", disk_full)
        assert run_cli(*command(run_dir)).code != 0
    assert (work / "40-linear-raise.npz").exists()
    capsys.readouterr()
    assert main(command(run_dir)) == 0
    assert "resuming the unfinished level from" in capsys.readouterr().out
    levels = evaluations(run_dir)[-1]["bracket"]["levels"]
    assert len(levels) >= 2 and len(expected) >= 2  # how many more, the clock decides
    for level, same in zip(levels, expected):
        for route in ("ais", "raise"):
            for name, values in level[route].items():
                assert {k: v for k, v in values.items() if k != "seconds"} == \
                    {k: v for k, v in same[route][name].items() if k != "seconds"}
    assert not work.exists()


def test_a_bracket_out_of_budget_in_its_first_level_stops_with_status_3(run_dir, monkeypatch):
    """--max-seconds is also a deadline inside the command's first level: past it the command
    stops after a saved chain batch with status 3, saying where the work is and how to go on,
    and records nothing; the same command again goes on (a batch or more a call) until the
    level ends and the bracket is recorded. A budget --continue inherits does not stop its
    level: sized for the shorter stored ones, it would stop every call."""
    import irbm.evaluate as evaluate
    monkeypatch.setattr(evaluate, "CPU_CHAIN_BATCH", 4)  # so that a run has several batches
    command = ["evaluate", str(run_dir), "--bracket", "--chains", "10", "--betas", "20",
               "--raise", "20", "--raise-repeats", "1", "--tolerance", "0.001", "--seed", "4",
               "--ais-path", "linear", "--base", "data", "--max-seconds", "0.000001"]
    records = len(evaluations(run_dir))
    stopped = run_cli(*command)
    assert stopped.code == 3, stopped.err
    work = run_dir / "bracket_partial"
    assert f"irbm: stopped at the time budget (1e-06 s) inside the level of 20 temperatures, " \
        f"before any level of this call finished: its finished chain batches are saved in " \
        f"{work}" in stopped.err and "Traceback" not in stopped.err
    assert (work / "20-linear-ais.npz").exists() and len(evaluations(run_dir)) == records
    # --continue has nothing to continue yet, and says where the unfinished work is.
    refused(run_dir, ["evaluate", run_dir, "--bracket", "--continue"],
            ["no bracket of its current model to continue", f"({work} holds the unfinished "
             "first level of one: the `irbm evaluate --bracket` command that started it goes "
             "on from it"])
    calls = 1
    while stopped.code == 3 and calls < 30:
        stopped, calls = run_cli(*command), calls + 1
    assert stopped.code == 0 and calls > 2, (calls, stopped.err)
    assert "resuming the unfinished level from" in stopped.out
    assert len(evaluations(run_dir)) == records + 1 and not work.exists()
    continued = run_cli("evaluate", str(run_dir), "--bracket", "--continue")
    assert continued.code == 0, continued.err
    (level_1,), levels = evaluations(run_dir)[-2]["bracket"]["levels"], \
        evaluations(run_dir)[-1]["bracket"]["levels"]
    assert [level["n_betas"] for level in levels] == [20, 40] and levels[0] == level_1


def test_training_on_says_an_unfinished_bracket_will_be_stale(run_dir):
    """Before it trains: after, the bracket's next call found its work stale, unannounced."""
    (run_dir / "bracket_partial").mkdir()
    trained = run_cli("train", "rbm", "digits", "--out", run_dir, *TINY[:2], "--epochs", 2,
                      *TINY[4:])
    assert_ok(trained)
    assert f"note: {run_dir / 'bracket_partial'} holds an unfinished bracket of the model at " \
        "epoch 1; training changes the model, so that work will be stale" in trained.out, \
        trained.out


def test_sample_quiet_draws_no_progress_bar(run_dir):
    """Its redrawn bar filled logs, and sample alone had no --quiet (a documentation audit)."""
    assert "Gibbs sampling:" in run_cli("sample", run_dir, "--n", 4, "--steps", 20).err
    quiet = run_cli("sample", run_dir, "--n", 4, "--steps", 20, "--quiet")
    assert_ok(quiet)
    assert "Gibbs sampling" not in quiet.err and "4 samples in" in quiet.out


def test_sample_refuses_in_the_command_lines_words_before_its_banner(run_dir):
    shutil.rmtree(run_dir / "figures")  # made before a refusal, it was left empty
    for args, fragments in [
            (["--z-max-init"], ["--z-max-init (Python: z_max_init=True)", "RBM has no z"]),
            (["--init", "data", "--n", 60], ["--n 60 with --init data", "which has 50; give at "
                                             "most --n 50"]),
            # torch's allocator failed with a traceback, after figures/ was made
            (["--n", 10**11], ["100,000,000,000 chains of 64 visible and 8 hidden units need",
                               "GiB, more than the", "lower --n (Python: n_samples=)"])]:
        before = snapshot(run_dir)
        result = run_cli("sample", run_dir, "--steps", 2, *args)
        assert_clean_error(result, *fragments)
        assert "sampling" not in result.out and snapshot(run_dir) == before
    # A figures/ that cannot take the figure is refused before the chains run, not after.
    (run_dir / "figures").write_text("not a directory")
    before = snapshot(run_dir)
    result = run_cli("sample", run_dir, "--steps", 2)
    assert_clean_error(result, f"{run_dir / 'figures'} is not writable")
    assert "sampling" not in result.out and snapshot(run_dir) == before


def test_sample_and_plot_take_the_latest_model_when_told_and_say_which_they_used(tmp_path):
    """A run trained with --eval-every keeps best.safetensors beside the latest: sample and plot
    use the best unless --latest, say which model they sampled, and plot holds samples of the
    other one stale."""
    import numpy as np
    run = tmp_path / "run"
    # Validated at epoch 2 alone: the best model (epoch 2) is not the latest (epoch 3).
    assert_ok(run_cli("train", "rbm", "digits", "--out", run, *TINY, "--epochs", 3,
                      "--eval-every", 2, "--eval-chains", 10, "--eval-betas", 20))
    result = run_cli("sample", run, "--n", 4, "--steps", 2, "--latest")
    assert_ok(result)
    assert "sampling model.safetensors (epoch 3, 8 hidden units)" in result.out, result.out
    with np.load(run / "samples.npz") as stored:
        assert (str(stored["model_file"]), int(stored["epoch"])) == ("model.safetensors", 3)
    plotted = run_cli("plot", run)
    assert_ok(plotted)
    assert "not the run's best model (best.safetensors)" in plotted.out, plotted.out
    assert "irbm sample " + str(run) + "` again" in plotted.out
    plotted = run_cli("plot", run, "--latest")
    assert_ok(plotted)
    assert "stale" not in plotted.out, plotted.out
    assert "figures of model.safetensors (epoch 3, 8 hidden units)" in plotted.out
    result = run_cli("sample", run, "--n", 4, "--steps", 2)
    assert_ok(result)
    assert "sampling best.safetensors (epoch 2, 8 hidden units)" in result.out, result.out
    plotted = run_cli("plot", run, "--latest")
    assert "not the run's latest model (model.safetensors)" in plotted.out, plotted.out
    assert "irbm sample " + str(run) + " --latest` again" in plotted.out
    # The AIS figure draws the last evaluation's weights: of the best model here.
    assert_ok(run_cli("evaluate", run, "--chains", 10, "--betas", 20))
    plotted = run_cli("plot", run, "--latest")
    assert_ok(plotted)
    assert "ais_log_weights.npy is stale: computed from best.safetensors, not the run's latest " \
        "model (model.safetensors): run `irbm evaluate " + str(run) + " --latest` again" in \
        plotted.out, plotted.out
    assert_ok(run_cli("evaluate", run, "--chains", 10, "--betas", 20, "--latest"))
    assert "ais_log_weights" not in run_cli("plot", run, "--latest").out
    # A re-judged record of the best model (--floor-chains, a cross-check) writes no weights:
    # the latest model's stay current.
    stored = json.loads((run / "evaluation.json").read_text())
    stored["evaluations"].append({**stored["evaluations"][0], "floor_chains": 40})
    (run / "evaluation.json").write_text(json.dumps(stored))
    assert "ais_log_weights" not in run_cli("plot", run, "--latest").out
    # Best and latest are one model when the last epoch was the best: nothing is stale then.
    import shutil
    shutil.copyfile(run / "model.safetensors", run / "best.safetensors")
    assert_ok(run_cli("evaluate", run, "--chains", 10, "--betas", 20))
    assert_ok(run_cli("sample", run, "--n", 4, "--steps", 2))
    plotted = run_cli("plot", run, "--latest")
    assert_ok(plotted)
    assert "stale" not in plotted.out and (run / "figures" / "ais_convergence.png").exists(), \
        plotted.out


def test_a_flagged_ais_point_beside_a_certified_bracket_says_whose_flag_it_is(run_dir):
    """A user read "(unreliable)" beside "certified" in one row as a contradiction: the flag is
    the point estimate's alone when the bracket, which judged its own runs, is certified."""
    from irbm.report import run_row
    column = "AIS (base, chains x temperatures, ESS, path)"
    path = run_dir / "evaluation.json"
    stored = json.loads(path.read_text())
    record = stored["evaluations"][-1]
    record["warnings"] = ["effective sample size 2.0 of 10 chains"]
    path.write_text(json.dumps(stored))
    assert run_row(run_dir)[column].endswith(" path (unreliable)")
    record["bracket"] = {"optimistic": 30.0, "conservative": 30.5, "width": 0.5,
                         "certified": True, "reasons": [], "conservative_stderr": 0.1,
                         "n_rows": 50, "levels": []}
    path.write_text(json.dumps(stored))
    row = run_row(run_dir)
    assert row[column].endswith(" path (unreliable alone; this row's bracket is certified)")
    assert row["RAISE test NLL"] == "30.50 +/- 0.10 (50 rows, bracket)"
    record["bracket"].update(certified=False, reasons=["not converged"])
    path.write_text(json.dumps(stored))
    assert run_row(run_dir)[column].endswith(" path (unreliable)")


def test_evaluate_quiet_draws_no_progress_bars(run_dir, monkeypatch):
    """Their redrawn lines filled a walkthrough's log file; the results are still printed."""
    seen = []

    def evaluate_run(*args, progress=True, **kwargs):
        seen.append(progress)
        return None  # as --floor-chains finding no higher floor: nothing more to print
    monkeypatch.setattr("irbm.workflows.evaluate_run", evaluate_run)
    for options in ([], ["--quiet"]):
        assert_ok(run_cli("evaluate", run_dir, *options))
    assert seen == [True, False]


def test_evaluating_a_run_that_is_being_trained_warns(run_dir):
    """Its record goes stale when training replaces the model (an audit of messages)."""
    from irbm._io import hold_lock
    from irbm.runs import TRAIN_LOCK_FILE
    held = hold_lock(run_dir / TRAIN_LOCK_FILE, "training this run")
    try:
        result = run_cli("evaluate", run_dir, *EVALUATE)
    finally:
        held.close()
    assert_ok(result)
    assert f"irbm: warning: {run_dir} is being trained (pid {os.getpid()}): this evaluates" in \
        result.err
    assert "is being trained" not in run_cli("evaluate", run_dir, *EVALUATE).err
