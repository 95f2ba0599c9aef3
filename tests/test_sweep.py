"""`irbm sweep`: a grid of trials on a Dask LocalCluster, resumed, reported, fault tolerant.

Tiny models on the embedded digits (8 hidden units, a few epochs, AIS with 20 chains and 100
temperatures) so that the whole file stays well under a minute on a busy 2-core machine. Two
clusters in all: the one `run_sweep` starts itself (`swept`), and one of two workers shared by
the tests that hand a sweep a scheduler address (`cluster`); pytest-xdist runs a module on one
worker (--dist=loadfile), which starts each once."""

from __future__ import annotations

import csv
import importlib
import json
import os
import re
import shutil
import signal
import threading
import time

import numpy as np
import pytest

from irbm import checkpoint as ckpt
from irbm import runs
from irbm.sweep import prepare_sweep_directory, read_sweep, run_sweep, trial_settings
from irbm.sweep_table import ERROR_FILE, MARKER_FILE, STATUS_FILE, sweep_rows
from irbm.workflows import report_runs, settings_for, train_run

BASE = {"family": "irbm", "dataset": "digits", "n_hidden": 8, "epochs": 2,
        "evaluation": {"chains": 20, "betas": 100}}
GRID = {**BASE, "grid": {"lr": [0.1, 0.05], "l1": [0.0, 0.001]}}


@pytest.fixture(scope="module")
def cluster():
    """A LocalCluster of two single-threaded worker processes with irbm and the digits' loader
    already imported in both (a worker that takes over a killed worker's trial would otherwise
    spend seconds importing torch and scikit-learn)."""
    from dask.distributed import Client, LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as local, Client(local) as client:
        for module in ("irbm.sweep", "sklearn.datasets"):
            client.run(importlib.import_module, module)
        yield local, client


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "out"
    result = run_sweep(GRID, out, workers=2, progress=False)
    return out, result


def _table(out) -> list[dict]:
    with open(out / "sweep.csv") as stream:
        return list(csv.DictReader(stream))


def test_every_trial_of_the_grid_finishes_and_is_tabled_from_its_run_directory(swept):
    out, result = swept
    assert result["done"] == 4 and not result["failed"]
    rows = _table(out)
    assert [row["trial"] for row in rows] == ["lr=0.1,l1=0.0", "lr=0.1,l1=0.001",
                                              "lr=0.05,l1=0.0", "lr=0.05,l1=0.001"]
    for row in rows:
        record, stale = runs.current_evaluation(out / row["trial"])
        assert stale is None and row["status"] == "done" and row["epochs"] == "2"
        # sweep.csv: a number per cell (the tables' "mean +/- stderr" in two columns)
        for split in ("valid", "test"):
            assert float(row[f"{split} NLL"]) == round(record["nll"][split]["mean"], 3)
            assert float(row[f"{split} NLL stderr"]) == round(record["nll"][split]["stderr"], 3)
        assert float(row["AIS ESS"]) == round(record["effective_sample_size"], 1)
        assert int(row["AIS chains"]) == record["n_chains"] == 20
        assert row["n_hidden"] == str(record["n_hidden"])
        if record["warnings"]:  # the first warning's gist says why
            gist = row["reliable"].split(" (+")[0]
            assert gist.startswith("no: ") and record["warnings"][0].startswith(gist[4:])
            assert len(gist) > 8 and ("more" in row["reliable"]) == (len(record["warnings"]) > 1)
        else:
            assert row["reliable"] in ("yes", "yes (exact ln Z)")
            assert (row["reliable"] == "yes (exact ln Z)") == \
                (record.get("log_z_source") == "exact")
    assert sum(row["best"] == "*" for row in rows) == 1  # one family
    # seconds: the epochs' (history.json) and the evaluation's AIS, as the legend says
    for row in rows:
        history = runs.read_json(out / row["trial"] / runs.HISTORY_FILE)["history"]
        record, _ = runs.current_evaluation(out / row["trial"])
        assert float(row["seconds"]) == pytest.approx(
            sum(epoch["seconds"] for epoch in history) + record.get("ais_seconds", 0.0), abs=0.06)
    assert "seconds: the training epochs' and the evaluation's AIS" in \
        (out / "sweep.md").read_text()
    assert (out / "sweep.md").read_text().count("| lr=") == 4
    assert "<table>" in (out / "sweep.html").read_text()


def test_rerunning_a_finished_sweep_trains_nothing(swept):
    out, _ = swept
    files = [out / row["trial"] / name for row in _table(out)
             for name in (ckpt.TRAINER_FILE, runs.HISTORY_FILE, runs.EVALUATION_FILE)]
    before = [path.stat().st_mtime_ns for path in files]
    result = run_sweep(GRID, out, workers=2, progress=False)
    assert result["skipped"] == 4 and result["done"] == 0
    assert [path.stat().st_mtime_ns for path in files] == before
    # A smaller grid says which trials its table leaves out (then the whole grid again).
    said = []
    smaller = {**GRID, "grid": {**GRID["grid"], "lr": [0.1]}}
    assert run_sweep(smaller, out, progress=False, echo=said.append)["skipped"] == 2
    assert "2 trial(s) in" in said[0] and said[0].endswith(
        "are left out of its table: lr=0.05,l1=0.0, lr=0.05,l1=0.001")
    assert len(_table(out)) == 2
    run_sweep(GRID, out, progress=False)
    assert len(_table(out)) == 4 and [path.stat().st_mtime_ns for path in files] == before


def test_training_into_a_sweep_directory_is_refused_even_with_force(swept):
    """`irbm train --out SWEEP` advised --force, which then made the sweep a run as well (an
    audit of messages)."""
    from _cli_helpers import assert_clean_error, run_cli
    out, _ = swept
    before = sorted(path.name for path in out.iterdir())
    for force in ([], ["--force"]):
        assert_clean_error(run_cli("train", "irbm", "digits", "--out", out, "--epochs", 1,
                                   *force),
                           "is a sweep directory (irbm-sweep.json): train into a new --out")
    assert sorted(path.name for path in out.iterdir()) == before


def test_the_command_line_resumes_a_sweep_from_its_file(swept, tmp_path):
    from _cli_helpers import run_cli
    out, _ = swept
    path = tmp_path / "sweep.toml"
    path.write_text('family = "irbm"\ndataset = "digits"\nn_hidden = 8\nepochs = 2\n'
                    "[evaluation]\nchains = 20\nbetas = 100\n"
                    "[grid]\nlr = [0.1, 0.05]\nl1 = [0.0, 0.001]\n")
    result = run_cli("sweep", path, "--out", out, "--workers", "1", "--no-progress")
    assert result.code == 0, result.err
    assert "4 finished already, 0 to run" in result.out
    report = run_cli("report", out, "--out", tmp_path / "report")
    assert report.code == 0, report.err
    assert (tmp_path / "report" / "report.md").read_text().count("| iRBM") == 4
    bad = run_cli("sweep", path, "--out", out, "--workers", "1", "--scheduler", "tcp://x:1")
    assert bad.code == 2 and "not allowed with argument" in bad.err


def test_report_accepts_a_sweep_directory(swept, tmp_path):
    out, _ = swept
    markdown, _ = report_runs([out], tmp_path / "report")
    assert markdown.read_text().count("| iRBM") == 4
    # irbm report OUT/* names the sweep's tables and marker too: they are left out, and so
    # is a trial without an evaluation of its model, as from irbm report OUT
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    (copy / "lr=0.1,l1=0.0" / runs.EVALUATION_FILE).unlink()
    for given in ([copy], sorted(copy.iterdir())):
        markdown, _ = report_runs(given, tmp_path / "glob")
        assert markdown.read_text().count("| iRBM") == 3


def test_a_failing_trial_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch, cluster,
                                                           caplog):
    """On a remote cluster, whose workers may see data the submitting machine lacks, the data
    is checked in the trials: a bad data file fails its trial alone."""
    (tmp_path / "bad.csv").write_text("0,1,2\n" * 20)  # valid settings, not 0/1 data
    fixed = {key: value for key, value in BASE.items() if key != "dataset"}
    sweep = {**fixed, "epochs": 1, "grid": {"dataset": ["digits", "bad.csv"]}}
    # A relative data file: the sweep hands the workers its full path (the workers, started
    # before this chdir, run in another directory).
    monkeypatch.chdir(tmp_path)
    result = run_sweep(sweep, tmp_path / "out", scheduler=cluster[0].scheduler_address,
                       progress=False)
    assert result["done"] == 1 and result["failed"] == ["dataset=bad.csv"]
    failed = tmp_path / "out" / "dataset=bad.csv"
    assert "Traceback" in (failed / ERROR_FILE).read_text()
    status = runs.read_json(failed / STATUS_FILE)
    assert status["status"] == "failed" and str(tmp_path / "bad.csv") in status["error"]
    statuses = {row["trial"]: row["status"] for row in _table(tmp_path / "out")}
    assert statuses["dataset=digits"] == "done"
    assert statuses["dataset=bad.csv"].startswith("failed: ValueError")
    # The report leaves it out saying it failed, not only that it has no evaluation.
    from irbm.sweep_table import evaluated_trial_dirs
    with caplog.at_level("WARNING", logger="irbm.sweep_table"):
        assert evaluated_trial_dirs(tmp_path / "out") == [tmp_path / "out" / "dataset=digits"]
    assert f"dataset=bad.csv: failed (ValueError: {tmp_path / 'bad.csv'}" in caplog.text


def test_every_trials_data_is_loaded_and_checked_before_anything_runs(tmp_path, monkeypatch):
    """A sweep checked its data inside each trial: missing data, rows the split sizes lack or
    a data file changed under started trials made every trial fail with a traceback in its
    error.txt, where `irbm train` refuses in one line (a walkthrough)."""
    (tmp_path / "bad.csv").write_text("0,1,2\n" * 20)  # valid settings, not 0/1 data
    fixed = {key: value for key, value in BASE.items() if key != "dataset"}
    monkeypatch.chdir(tmp_path)
    for sweep, options, message in (
            ({**fixed, "grid": {"dataset": ["digits", "bad.csv"]}}, {},
             "trial dataset=bad.csv: .*bad.csv"),
            ({**fixed, "dataset": "mnist", "grid": {"lr": [0.1]}},
             {"data_dir": tmp_path / "nowhere"}, "trial lr=0.1: mnist.npz is not in"),
            ({**BASE, "grid": {"train_size": [100, 100000]}}, {},
             "trial train_size=100000: --train-size 100000: digits has 1197 train rows")):
        with pytest.raises((ValueError, FileNotFoundError), match=message):
            run_sweep(sweep, tmp_path / "out", workers=1, progress=False, **options)
        assert not (tmp_path / "out").exists()
    # A data file changed under a started trial: refused before the sweep goes on, with the
    # way out (--data-dir, which the error suggested, cannot name a data file).
    rows = np.random.default_rng(0).random((300, 16)) < 0.3
    np.save(tmp_path / "mine.npy", rows.astype(np.float32))
    sweep = {**fixed, "dataset": str(tmp_path / "mine.npy"), "epochs": 1,
             "grid": {"lr": [0.1]}}
    spec = read_sweep(sweep)
    out = prepare_sweep_directory(tmp_path / "out", spec)
    train_run(settings_for(out / "lr=0.1", trial_settings(spec, spec["trials"]["lr=0.1"])),
              out / "lr=0.1", epoch_lines=False)
    np.save(tmp_path / "mine.npy", (~rows).astype(np.float32))
    before = {path.name: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    with pytest.raises(ValueError, match=r"trial lr=0.1: .*mine.npy is not the data .* put "
                                         r"back the file it was trained on"):
        run_sweep({**sweep, "epochs": 2}, out, workers=1, progress=False)
    assert {path.name: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before


@pytest.mark.parametrize("change, message", [
    ({"grid": {"lr": [0.1, -1.0]}}, "grid.lr: lr must be a finite number > 0, got -1.0"),
    ({"grid": {"beta": [1.01, 0.5]}}, "grid point beta=0.5"),
    ({"grid": {"lrr": [0.1]}}, "unknown settings grid.lrr"),
    ({"grid": {"epochs": [1, 2]}}, "epochs both fixed and in [grid]"),
    ({"grid": {"lr": []}}, "grid.lr must be a non-empty list"),
    ({"grid": {"lr": 0.1}}, "grid.lr must be a non-empty list"),
    ({"evaluation": {"chains": 0}}, "evaluation.chains must be an integer >= 1"),
    ({"evaluation": {"temps": 3}}, "unknown keys in [evaluation]: temps"),
    ({"grid": {"n_hiden": [8]}}, "unknown settings grid.n_hiden; did you mean n_hidden for "
                                 "n_hiden?"),
    ({"evaluaton": {"chains": 10}}, "[evaluaton] is no table of a sweep file (its tables: "
                                    "[grid], [evaluation]); did you mean [evaluation]?"),
    ({"lr": [0.1, 0.2]}, "lr = [0.1, 0.2] is a list at the top level: put it under [grid] to "
                         "sweep it, or give one value"),
    ({"threads": 2}, "threads is not a sweep-file setting: the sweep command takes it for "
                     "every trial"),
    ({"threads": 2, "lrr": 1}, "threads is not a sweep-file setting"),
    ({"dataset": "digitz"}, "unknown dataset 'digitz'"),
    ({"dataset": "missing.npy"}, "missing.npy: no such file"),
])
def test_every_grid_point_is_validated_before_anything_runs(tmp_path, change, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        run_sweep({**BASE, **change}, tmp_path / "out", workers=1, progress=False)
    assert not (tmp_path / "out").exists()


def test_a_second_sweep_into_a_running_sweeps_directory_is_refused(tmp_path):
    """Two sweeps into one --out trained the same trials at once, each refused by the other's
    run locks: trials reported failed that the other finished, their error.txt left beside a
    "done" status (a walkthrough)."""
    from irbm._io import hold_lock
    from irbm.sweep import SWEEP_LOCK_FILE
    out = prepare_sweep_directory(tmp_path / "out", read_sweep(GRID))
    running = hold_lock(out / SWEEP_LOCK_FILE, "running a sweep into it")
    try:
        before = sorted(path.name for path in out.iterdir())
        refused = rf"{re.escape(str(out))} is in use by another process \(pid {os.getpid()}, " \
            r"running a sweep into it\): wait for it"
        with pytest.raises(ValueError, match=refused):
            run_sweep(GRID, out, workers=1, progress=False)
        # The lock comes before the data is loaded (seconds for MNIST): a grid whose data
        # would be refused is refused for the lock.
        with pytest.raises(ValueError, match=refused):
            run_sweep({**BASE, "grid": {"train_size": [100000]}}, out, workers=1,
                      progress=False)
        assert sorted(path.name for path in out.iterdir()) == before
    finally:
        running.close()


def test_a_script_that_sweeps_at_its_top_level_is_refused_before_any_work(tmp_path):
    """Dask's local workers import the main script again: unguarded, each started a sweep of
    its own and the cluster failed in some 200 lines of tracebacks (a walkthrough). A call
    under the __main__ guard, or from a function called there, passes."""
    import subprocess
    import sys

    from _cli_helpers import subprocess_environment
    script = tmp_path / "sweeps.py"
    script.write_text(
        "import irbm.sweep\n"
        "def check():\n"
        "    return irbm.sweep._unguarded_script()\n"
        "print('unguarded:', check())\n"
        "if __name__ == '__main__':\n"
        "    print('guarded:',\n"
        "          check())\n"
        "try:\n"
        "    if __name__ == '__main__' and check() is None:\n"
        "        print('a guard in a block: passes')\n"
        "finally:\n"
        "    pass\n"
        f"result = irbm.sweep.run_sweep({GRID!r}, 'out', workers=1, progress=False)\n")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            cwd=tmp_path, env=subprocess_environment(), timeout=300)
    assert result.stdout.splitlines() == [f"unguarded: {script}", "guarded: None",
                                          "a guard in a block: passes"], result.stderr
    assert result.returncode == 1 and result.stderr.strip().splitlines()[-1] == (
        f"ValueError: {script} calls the sweep at its top level: the local cluster's workers "
        "import that script again, and each would start a sweep; put the call under `if "
        '__name__ == "__main__":`'), result.stderr
    assert not (tmp_path / "out").exists()
    # A console whose namespace keeps the __file__ of a script run in it earlier (IPython's
    # %run) is no script's top level.
    console = subprocess.run([sys.executable, "-c", f"__file__ = {str(script)!r}\n"
                              "import irbm.sweep\nprint(irbm.sweep._unguarded_script())"],
                             capture_output=True, text=True, cwd=tmp_path,
                             env=subprocess_environment(), timeout=300)
    assert console.stdout.strip() == "None", console.stderr


@pytest.mark.parametrize("change, message", [
    ({"batch_size": 32}, "was trained with other settings (batch_size 64 -> 32)"),
    ({"grid": {"lr": [0.1, 0.05], "l1": [0.0, 0.002]}, "n_hidden": 9},
     "was trained with other settings (n_hidden 8 -> 9)"),
    ({"evaluation": {"chains": 30, "betas": 100}},
     "evaluated its trials with another [evaluation] (chains 20 -> 30)"),
    # lowered, its table would rank 2-epoch trials beside new 1-epoch ones (a walkthrough)
    ({"epochs": 1, "grid": {"lr": [0.1, 0.05], "l1": [0.0, 0.002]}},
     "is trained to epoch 2, past epochs = 1: a sweep's epochs may only rise")])
def test_a_sweep_resumed_with_other_settings_is_refused_before_anything_runs(
        swept, change, message):
    """Its finished trials were skipped and its record rewritten to the new file's values,
    which its rows did not have; a trial to train further failed in its worker, pointing at a
    --force the sweep has not got (a user's report)."""
    out, _ = swept
    before = (out / MARKER_FILE).read_text()
    with pytest.raises(ValueError, match=re.escape(message) + ".*put .* back, or sweep into a "
                                                              "new --out"):
        run_sweep({**GRID, **change}, out, workers=1, progress=False)
    assert (out / MARKER_FILE).read_text() == before
    assert not (out / "lr=0.1,l1=0.002").exists()


def test_an_extended_grid_reports_the_best_of_every_trial_so_far(swept, tmp_path, cluster):
    """The best validation NLL said while a sweep runs counts the trials an earlier call
    finished (a walkthrough saw a worse new trial called best)."""
    out = tmp_path / "copy"
    shutil.copytree(swept[0], out)
    lines = []
    extended = {**BASE, "grid": {"lr": [0.1, 0.05, 0.01], "l1": [0.0, 0.001]}}
    result = run_sweep(extended, out, scheduler=cluster[0].scheduler_address, progress=False,
                       echo=lines.append)
    assert result["skipped"] == 4 and result["done"] == 2 and not result["failed"]
    nlls = {row["trial"]: float(row["valid NLL"]) for row in _table(out)}
    best = min(nlls, key=nlls.get)
    assert f"best validation NLL {nlls[best]:.3f} ({best})" in lines[-2], lines


def test_a_trial_recorded_under_another_spelling_of_its_dataset_goes_on(swept, tmp_path):
    """A run recorded its dataset as given ("Digits") before names were keyed ("digits"): the
    sweep takes it for the same settings, not for a changed one."""
    out = tmp_path / "copy"
    shutil.copytree(swept[0], out)
    trial = next(path for path in sorted(out.iterdir()) if runs.is_run(path))
    config = runs.read_json(trial / runs.CONFIG_FILE)
    assert config["settings"]["dataset"] == "digits"
    config["settings"]["dataset"] = "Digits"
    runs.write_json(trial / runs.CONFIG_FILE, config)
    result = run_sweep(GRID, out, workers=1, progress=False)
    assert result["failed"] == [] and result["done"] == 0 and result["skipped"] >= 1


def test_nothing_evaluated_is_nothing_to_report_and_a_failed_trial_is_never_best(
        swept, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(swept[0], out)
    rows = sweep_rows(out)
    (best,) = [row["trial"] for row in rows if row["best"] == "*"]
    runs.write_json(out / best / STATUS_FILE, {"status": "failed", "error": "ValueError: x"})
    again = {row["trial"]: row for row in sweep_rows(out)}
    assert again[best]["best"] == "" and again[best]["status"] == "failed: ValueError: x"
    assert sum(row["best"] == "*" for row in again.values()) == 1
    for row in rows:
        (out / row["trial"] / runs.EVALUATION_FILE).unlink()
    with pytest.raises(ValueError, match="nothing to report: no trial of .* has an evaluation"):
        report_runs([out], tmp_path / "report")
    assert not (tmp_path / "report").exists()


def test_a_sweep_file_is_read_and_a_foreign_directory_refused(tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text('family = "rbm"\ndataset = "digits"\n[grid]\nlr = [0.1, 0.05]\n')
    assert list(read_sweep(path)["trials"]) == ["lr=0.1", "lr=0.05"]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x").write_text("")
    with pytest.raises(ValueError, match="not an irbm sweep directory"):
        run_sweep(path, tmp_path / "other", workers=1, progress=False)


def test_a_data_file_named_relative_to_the_sweep_file_is_found_from_any_directory(
        tmp_path, monkeypatch):
    sweeps = tmp_path / "project"
    sweeps.mkdir()
    np.save(sweeps / "mine.npy", np.zeros((30, 4)))
    np.save(sweeps / "other.npy", np.zeros((30, 4)))
    path = sweeps / "sweep.toml"
    path.write_text('family = "rbm"\ndataset = "mine.npy"\n[grid]\nlr = [0.1]\n')
    monkeypatch.chdir(tmp_path)  # not the sweep file's directory
    assert read_sweep(path)["fixed"]["dataset"] == str(sweeps / "mine.npy")
    path.write_text('family = "rbm"\n[grid]\ndataset = ["mine.npy", "other.npy", "digits"]\n')
    assert read_sweep(path)["grid"]["dataset"] == [str(sweeps / "mine.npy"),
                                                   str(sweeps / "other.npy"), "digits"]
    # A path that is not beside the file is the current directory's, kept absolute: stored
    # as given, the sweep did not resume from another directory (a walkthrough)
    (tmp_path / "here.npy").write_bytes((sweeps / "mine.npy").read_bytes())
    path.write_text('family = "rbm"\ndataset = "here.npy"\n[grid]\nlr = [0.1]\n')
    assert read_sweep(path)["fixed"]["dataset"] == str(tmp_path / "here.npy")
    # So is a model to start from; the runs of a grid of them are told apart by their runs.
    import irbm
    for run in ("a", "b"):
        (sweeps / run).mkdir()
        irbm.save(irbm.RBM(4, 3), sweeps / run / "model.safetensors")
    path.write_text('family = "rbm"\ndataset = "mine.npy"\n[grid]\ninit_model = '
                    '["a/model.safetensors", "b/model.safetensors"]\n')
    spec = read_sweep(path)
    assert spec["grid"]["init_model"] == [str(sweeps / run / "model.safetensors")
                                          for run in ("a", "b")]
    assert list(spec["trials"]) == ["init_model=a.model.safetensors",
                                    "init_model=b.model.safetensors"]
    path.write_text('family = "rbm"\ndataset = "mine.npy"\ninit_model = "a/model.safetensors"\n'
                    '[grid]\nlr = [0.1]\n')
    assert read_sweep(path)["fixed"]["init_model"] == str(sweeps / "a" / "model.safetensors")
    path.write_text('family = "rbm"\ndataset = "mine.npy"\ninit_model = "c.safetensors"\n'
                    '[grid]\nlr = [0.1]\n')
    with pytest.raises(FileNotFoundError, match=r"init_model .*c.safetensors: no such file"):
        run_sweep(path, tmp_path / "out", workers=1, progress=False)
    assert not (tmp_path / "out").exists()


def test_a_worker_killed_mid_trial_has_its_trial_resumed_from_the_checkpoint(tmp_path, cluster):
    local, client = cluster
    out = tmp_path / "out"
    epochs = 16  # killed after epoch 2: fourteen epochs (seconds) of margin for the kill
    sweep = {**BASE, "epochs": epochs, "grid": {"lr": [0.05]}}
    history_file = out / "lr=0.05" / runs.HISTORY_FILE
    results = []
    thread = threading.Thread(target=lambda: results.append(run_sweep(
        sweep, out, scheduler=local.scheduler_address, progress=False)))
    thread.start()
    deadline = time.monotonic() + 60
    while not (history_file.exists() and len(runs.read_json(history_file)["history"]) >= 2):
        assert time.monotonic() < deadline, "the trial never checkpointed"
        time.sleep(0.05)
    pids = client.run(os.getpid)
    busy = [address for address, keys in client.processing().items() if keys]
    os.kill(pids[busy[0]], signal.SIGKILL)
    before = runs.read_json(history_file)["history"]
    thread.join(timeout=120)
    assert results and results[0]["done"] == 1, results
    assert len(before) < epochs, "the trial finished before the kill: make it longer"
    after = runs.read_json(history_file)["history"]
    assert [epoch["epoch"] for epoch in after] == list(range(1, epochs + 1))
    # Resumed, not restarted: the epochs trained before the kill are the ones recorded then
    # (their measured seconds would differ had they been trained again).
    assert after[:len(before)] == before
    assert runs.current_evaluation(out / "lr=0.05")[1] is None
    assert (out / MARKER_FILE).exists()


def test_ctrl_c_during_the_trials_is_one_line_and_the_sweep_resumes(tmp_path):
    """Ctrl-C reaches every process of the terminal's group: the workers' tracebacks, Dask's
    cancellation warnings and the resource tracker's left no room for the sweep's one line
    (a user's report). The workers now leave it to the sweep, which closes them quietly; the
    same command goes on from the trials' checkpoints."""
    import subprocess
    import sys
    path = tmp_path / "sweep.toml"
    path.write_text('family = "rbm"\ndataset = "digits"\nn_hidden = 8\nepochs = 3000\n'
                    "[evaluation]\nchains = 20\nbetas = 100\n[grid]\nlr = [0.1]\n")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "irbm.cli", "sweep", str(path), "--out", str(out),
               "--workers", "1", "--no-progress"]
    # Its own group, as a terminal's foreground job, with SIGINT not ignored (a shell starting
    # a job in the background would ignore it).
    sweep = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    histories = [out / "lr=0.1" / runs.HISTORY_FILE]
    deadline = time.monotonic() + 120
    while not all(history.exists() for history in histories):  # the trial is training
        assert sweep.poll() is None and time.monotonic() < deadline, sweep.communicate()
        time.sleep(0.1)
    os.killpg(sweep.pid, signal.SIGINT)
    stdout, stderr = sweep.communicate(timeout=60)
    assert sweep.returncode == 130, (stdout, stderr)
    assert stderr.strip() == ("irbm: interrupted; finished trials are kept, and the same "
                              "command resumes the others from their checkpoints"), stderr
    epochs = [len(runs.read_json(history)["history"]) for history in histories]
    assert all(0 < count < 3000 for count in epochs)


@pytest.mark.parametrize("device, expected", [("cuda", 1), ("cuda:1", 1), ("cpu", None)])
def test_a_sweep_on_a_gpu_starts_one_worker_unless_told(tmp_path, monkeypatch, device, expected):
    """Each worker process would open its own CUDA context on the same GPU; on the CPU the
    default stays the free cores (None, resolved by `_connect`)."""
    asked = []

    def connect(workers, scheduler):
        asked.append(workers)
        raise KeyboardInterrupt  # stop before any trial runs

    monkeypatch.setattr("irbm.sweep._connect", connect)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(GRID, tmp_path / "out", device=device, progress=False)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(GRID, tmp_path / "out2", device=device, workers=3, progress=False)
    assert asked == [expected, 3]


def test_the_trials_get_the_data_directory_the_command_found_the_data_in(tmp_path,
                                                                          monkeypatch):
    """$IRBM_DATA_DIR goes to every trial by name: a worker started elsewhere lacks the
    variable (a walkthrough's second worker then tried to download CalTech101)."""
    sent = []

    def run_on_dask(todo, out, evaluation, options, *args, **kwargs):
        sent.append(options["data_dir"])
        return []

    monkeypatch.setattr("irbm.sweep._run_on_dask", run_on_dask)
    monkeypatch.setenv("IRBM_DATA_DIR", str(tmp_path / "data"))
    run_sweep(GRID, tmp_path / "out", progress=False)
    named = tmp_path / "elsewhere"
    run_sweep(GRID, tmp_path / "out2", data_dir=named, progress=False)
    monkeypatch.delenv("IRBM_DATA_DIR")
    run_sweep(GRID, tmp_path / "out3", progress=False)
    assert sent == [str((tmp_path / "data").resolve()), str(named.resolve()), None]


def test_a_grid_key_added_at_its_default_names_the_earlier_trials_it_repeats(
        swept, tmp_path, monkeypatch):
    """cd_k = [10, 1] added to a finished grid (10 the default) retrained its trials from
    scratch under new names, to the same NLLs, with one line saying the old ones were left
    out (a walkthrough): each repeat is named, with the ways to keep the work."""
    out = tmp_path / "copy"
    shutil.copytree(swept[0], out)
    monkeypatch.setattr("irbm.sweep._run_on_dask", lambda todo, *args, **kwargs: [])
    lines = []
    run_sweep({**GRID, "grid": {**GRID["grid"], "cd_k": [10, 1]}}, out, progress=False,
              echo=lines.append)
    notes = [line for line in lines if line.startswith("note: trial ")]
    assert notes == [f"note: trial {name},cd_k=10 has the settings of the earlier grid's {name} "
                     "(a grid key added at its default value names it anew): it trains again "
                     f"from the start; to keep {name}'s work, leave the key out of the grid or "
                     "rename that directory to the new name"
                     for name in ("lr=0.1,l1=0.0", "lr=0.1,l1=0.001", "lr=0.05,l1=0.0",
                                  "lr=0.05,l1=0.001")], lines


def test_a_remote_dashboard_is_named_only_where_it_answers():
    """A remote scheduler started without a dashboard (or without bokeh) still lists the
    service, and its link answered 404 (a walkthrough)."""
    import http.server
    import threading

    from irbm.sweep import _dashboard

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/status" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"

    class Client:
        def __init__(self, link):
            self.dashboard_link = link

        def scheduler_info(self):
            return {"services": {"dashboard": 8787}}
    try:
        assert _dashboard(Client(base + "/status"), local=False) == base + "/status"
        assert _dashboard(Client(base + "/missing"), local=False) is None
    finally:
        server.shutdown()


def test_a_grid_of_families_gives_each_trial_the_options_its_family_takes():
    """[grid] family = ["rbm", "irbm"] with beta = [1.01, 1.5]: the RBM takes no beta, so its
    trial is one, named without it (a walkthrough's paper-table sweep was refused whole). A
    single family given a foreign option is still refused."""
    without_family = {key: value for key, value in BASE.items() if key != "family"}
    spec = read_sweep({**without_family, "grid": {"family": ["rbm", "irbm"],
                                                  "beta": [1.01, 1.5]}})
    assert list(spec["trials"]) == ["family=rbm", "family=irbm,beta=1.01",
                                    "family=irbm,beta=1.5"]
    fixed = read_sweep({**without_family, "beta": 1.2, "grid": {"family": ["rbm", "orbm"]}})
    from irbm.sweep import trial_settings
    assert "beta" not in trial_settings(fixed, fixed["trials"]["family=rbm"])
    assert trial_settings(fixed, fixed["trials"]["family=orbm"])["beta"] == 1.2
    with pytest.raises(ValueError, match="rbm does not take beta"):
        read_sweep({**BASE, "family": "rbm", "grid": {"beta": [1.5]}})
    for nowhere in ({"grid": {"family": ["rbm"], "beta": [1.01, 1.5]}},
                    {"max_hidden": 50, "grid": {"family": ["rbm", "orbm"]}}):
        with pytest.raises(ValueError, match=r"applies to none of the grid's families"):
            read_sweep({**without_family, **nowhere})


@pytest.mark.parametrize("families", [["rbm", "irbm"], ["irbm", "rbm"]])
def test_a_table_of_several_families_has_every_grid_column(tmp_path, families):
    """The first row alone gave the columns: listed after the RBM, beta was left out of the
    table; before it, writing the table failed on the RBM's row (a review)."""
    from irbm.sweep import prepare_sweep_directory
    from irbm.sweep_table import write_table
    without_family = {key: value for key, value in BASE.items() if key != "family"}
    spec = read_sweep({**without_family, "grid": {"family": families, "beta": [1.01, 1.5]}})
    out = prepare_sweep_directory(tmp_path / "out", spec)
    markdown, _, csv_path = write_table(out)
    header, _, *rows = (out / "sweep.md").read_text().split("\n\n")[2].splitlines()
    assert header.startswith("| trial | family | beta | ")
    (rbm,) = [row for row in rows if row.startswith("| family=rbm |")]
    assert rbm.split(" | ")[2] == "-"
    assert csv_path.read_text().splitlines()[0].startswith("trial,family,beta,")


def test_a_trial_evaluated_again_keeps_the_row_its_sweep_budget_gave_it(swept, tmp_path):
    """An evaluation run after the sweep (a bracket, another budget) replaced the trial's row,
    whose numbers then came from outside the [evaluation] the table compares them under (a
    walkthrough)."""
    import shutil

    from irbm import workflows
    from irbm.sweep_table import write_table
    out = tmp_path / "sweep"
    shutil.copytree(swept[0], out)
    before = {row["trial"]: row for row in _table(out)}
    trial = next(iter(before))
    workflows.evaluate_run(out / trial, n_chains=7, n_betas=30, seed=5, progress=False)
    write_table(out)
    after = {row["trial"]: row for row in _table(out)}
    assert after == before and after[trial]["AIS chains"] == "20"


def test_a_report_names_the_trials_of_an_earlier_grid_it_leaves_out(swept, tmp_path, caplog):
    import logging
    import shutil

    from irbm.sweep_table import evaluated_trial_dirs
    out = tmp_path / "sweep"
    shutil.copytree(swept[0], out)
    marker = json.loads((out / MARKER_FILE).read_text())
    dropped = marker["trials"].pop()  # as after a sweep file without that grid point
    (out / MARKER_FILE).write_text(json.dumps(marker))
    with caplog.at_level(logging.WARNING):
        kept = evaluated_trial_dirs(out)
    assert out / dropped not in kept
    assert f"1 trial(s) in {out} from an earlier grid are not in its sweep file and are left " \
        f"out of the report: {dropped} (name them, SWEEP/TRIAL, to include them)" in caplog.text
    from irbm.sweep_table import expand_sweeps
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # named: kept, as it says, and not said again
        assert expand_sweeps([out / dropped]) == [out / dropped]
        assert len(expand_sweeps(sorted(out.iterdir()))) == len(marker["trials"]) + 1
    assert "earlier grid" not in caplog.text


def test_a_trials_warning_names_the_trial(tmp_path, caplog):
    """In a worker's stream the iRBM's cap came as Python's file and line, naming no trial (a
    walkthrough): it is logged, one line, with the trial's name."""
    import logging

    from irbm.sweep import run_trial
    mapping = {**{k: v for k, v in BASE.items() if k != "evaluation"}, "max_hidden": 8,
               "lr": 0.1}
    with caplog.at_level(logging.WARNING, logger="irbm.sweep"):
        result = run_trial(mapping, tmp_path / "capped", {"chains": 10, "betas": 20,
                                                           "seed": 0})
    assert result["status"] == "done", result
    lines = [record.getMessage() for record in caplog.records if "max_hidden" in
             record.getMessage()]
    assert lines and all(line.startswith("trial capped: the infinite RBM would grow past "
                                         "max_hidden (8)") for line in lines)
