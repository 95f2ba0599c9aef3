"""scripts/trajectory_figure.py: the size and NLL of each snapshot of several runs, and the
table that judges whether they settle, on tiny iRBMs trained here."""

import hashlib
import json
import shutil

import pytest
from _cli_helpers import load_script

import irbm
from irbm import runs
from irbm.cli import main as cli_main


def _snapshots(run, epochs):
    """A run trained to each of ``epochs`` with its model copied to snapshots/EPOCH/, as
    scripts/train_snapshots.sh leaves it."""
    for epoch in epochs:
        assert cli_main(["train", "irbm", "digits", "--out", str(run), "--epochs", str(epoch),
                         "--lr", "0.05", "--l1", "0.001", "--quiet"]) == 0
        snapshot = run / "snapshots" / str(epoch)
        snapshot.mkdir(parents=True)
        for name in ("irbm-run.json", "config.json", "history.json", "model.safetensors"):
            shutil.copy(run / name, snapshot / name)


def test_rows_judge_each_run_from_the_settling_epoch_on(tmp_path):
    script = load_script("trajectory_figure")
    script.SETTLED_FROM = 2
    run = tmp_path / "irbm"
    _snapshots(run, [1, 2, 3, 4])
    out = tmp_path / "trajectory"
    argv = [f"rule a/seed 1={run}", "--out", str(out), "--chains", "20", "--betas", "30",
            "--every", "2"]
    assert script.main(argv) == 0
    cached = json.loads(out.with_suffix(".json").read_text())["rule a/seed 1"]
    assert sorted(cached, key=int) == ["2", "4"]  # --every 2: odd epochs skipped
    history = json.loads((run / "history.json").read_text())["history"]
    nll = [cached["2"]["nll"], cached["4"]["nll"]]
    sizes = [r["n_hidden"] for r in history if r["epoch"] >= 2]
    active = sorted(cached[e]["active_units"] for e in ("2", "4"))
    row = out.with_suffix(".md").read_text().splitlines()[-1].split(" | ")
    assert row[1:] == ["2-4", f"{sum(nll) / 2:.1f}", f"{min(nll):.1f}-{max(nll):.1f}",
                       f"{abs(nll[1] - nll[0]):.1f}", f"{nll[1]:.1f}",
                       f"{min(sizes)}-{max(sizes)}", f"{history[-1]['n_hidden']}",
                       f"{active[0]}-{active[1]} |"]
    model = irbm.load(run / "snapshots" / "4")
    assert cached["4"]["active_units"] == int((model.W.norm(dim=1) > 0.05).sum())
    # A rerun evaluates nothing again: the cached snapshots are kept as they are.
    script.snapshot_nll = lambda *args: pytest.fail("evaluated a cached snapshot again")
    assert script.main(argv) == 0
    # Cached epochs off the --every grid are left out of the table (epoch 3 is cached here).
    cache = json.loads(out.with_suffix(".json").read_text())
    cache["rule a/seed 1"]["3"] = {**cached["2"], "epoch": 3, "nll": 1e6}
    out.with_suffix(".json").write_text(json.dumps(cache))
    assert script.main(argv) == 0
    assert "1000000.0" not in out.with_suffix(".md").read_text()
    with pytest.raises(SystemExit):
        script.main([*argv[:-2], "--every", "0"])
    # --since 3: epoch 2 left out of the table (only epoch 4 remains on the grid).
    assert script.main([*argv, "--since", "3"]) == 0
    row = out.with_suffix(".md").read_text().splitlines()[-1].split(" | ")
    assert row[1] == "4"


@pytest.mark.parametrize("last_batch", ["keep", "merge"])
def test_epoch_updates_replays_the_runs_next_epoch_bit_for_bit(tmp_path, last_batch):
    """scripts/epoch_updates.py steps through epoch E + 1 of a run saved at epoch E in memory:
    its model after the last update is the run's own epoch E + 1, and the run is untouched."""
    script = load_script("epoch_updates")
    run, ahead = tmp_path / "run", tmp_path / "ahead"
    options = ["train", "irbm", "digits", "--lr", "0.05", "--l1", "0.001", "--train-size",
               "122", "--batch-size", "40", "--last-batch", last_batch, "--quiet"]
    assert cli_main([*options, "--out", str(run), "--epochs", "1"]) == 0
    assert cli_main([*options, "--out", str(ahead), "--epochs", "2"]) == 0
    before = (run / "checkpoint.safetensors").read_bytes()
    out = tmp_path / "updates"
    alternatives = ["--alternatives", "1"] if last_batch == "keep" else []
    assert script.main([str(run), "--updates", "0,1", "--out", str(out), "--chains", "10",
                        "--betas", "20", *alternatives]) == 0
    assert (run / "checkpoint.safetensors").read_bytes() == before
    record = json.loads(out.with_suffix(".json").read_text())
    # 122 rows by 40: 3 of 40 and one of 2 (merged: 40, 40, 42).
    expected = [2, 40] if last_batch == "keep" else [40, 42]
    assert record["batch_sizes"] == expected and record["epoch"] == 2
    n_updates = 4 if last_batch == "keep" else 3
    if last_batch == "keep":  # replayed in a copy, the last update lands where the epoch does
        own, other, *alone = record["alternatives"]
        assert own["kind"] == "its own rows" and own["nll"] == record["records"][-1]["nll"]
        assert len(alone) == len(own["rows"]) == 2 and len(other["rows"]) == 2
    assert [r["update"] for r in record["records"]] == [0, 1, n_updates]
    assert record["updates"] == n_updates
    model, _ = runs.run_model(ahead, which="latest")
    assert hashlib.sha256(model.W.detach().numpy().tobytes()).hexdigest() == \
        record["coupling_sha256_after"]


def test_epoch_updates_refuses_what_it_cannot_replay(tmp_path, capsys):
    """A run with --random-permutation (a callback the replay does not run) and update indices
    outside the epoch are refused before any work, with the reason."""
    script = load_script("epoch_updates")
    run = tmp_path / "run"
    assert cli_main(["train", "irbm", "digits", "--train-size", "100", "--batch-size", "40",
                     "--epochs", "1", "--quiet", "--out", str(run)]) == 0
    with pytest.raises(SystemExit):
        script.main([str(run), "--updates", "3", "--out", str(tmp_path / "out")])
    assert "--updates must lie in 0..2" in capsys.readouterr().err
    permuted = tmp_path / "permuted"
    assert cli_main(["train", "irbm", "digits", "--train-size", "100", "--epochs", "1",
                     "--random-permutation", "--quiet", "--out", str(permuted)]) == 0
    with pytest.raises(SystemExit):
        script.main([str(permuted), "--updates", "0", "--out", str(tmp_path / "out")])
    assert "--random-permutation" in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()


def test_run_at_average_evaluates_each_snapshots_averaged_model(tmp_path, monkeypatch):
    """RUN@average: each snapshot's average/ run directory (irbm train --average), keyed by
    the snapshot's epoch; snapshots without one are left out."""
    script = load_script("trajectory_figure")
    run = tmp_path / "irbm"
    _snapshots(run, [1, 2])
    (run / "snapshots" / "2" / "average").mkdir()
    for name in ("irbm-run.json", "config.json", "history.json", "model.safetensors"):
        shutil.copy(run / name, run / "snapshots" / "2" / "average" / name)
    evaluated = []
    monkeypatch.setattr(script, "snapshot_nll", lambda source, *args: evaluated.append(source)
                        or {"nll": 1.0, "active_units": 1, "n_hidden": 1, "epoch": 2})
    out = tmp_path / "trajectory"
    assert script.main([f"rule a/seed 1={run}@average", "--out", str(out), "--every", "1"]) == 0
    assert evaluated == [run / "snapshots" / "2" / "average"]
    assert list(json.loads(out.with_suffix(".json").read_text())["rule a/seed 1"]) == ["2"]
    with pytest.raises(SystemExit):
        script.main([f"rule a/seed 1={run}@best", "--out", str(out)])
