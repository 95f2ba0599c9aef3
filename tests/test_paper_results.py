"""scripts/paper_results.py builds the results table from run directories: every number in the
Markdown comes from an evaluation of the run's model, none is typed by hand."""

import importlib.util
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
import torch

import irbm
from irbm import evaluate
from irbm.bracket import rejudge
from irbm.cli import main as cli_main
from irbm.datasets import load_dataset
from irbm.runs import read_json

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "paper_results.py"


def _script():
    spec = importlib.util.spec_from_file_location("paper_results", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bracket_results(monkeypatch):
    """scripts/bracket_results.py as a module, importing its neighbours as `python scripts/...`
    does."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("bracket_results",
                                                  SCRIPT.parent / "bracket_results.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


@pytest.mark.parametrize("family", ["rbm", "irbm"])
def test_table_is_generated_from_run_directories(tmp_path, family):
    run = tmp_path / family
    options = ["--n-hidden", "12"] if family == "rbm" else ["--l1", "1e-3"]
    assert cli_main(["train", family, "digits", "--out", str(run), "--epochs", "2",
                     "--lr", "0.05", "--quiet", *options]) == 0
    out = tmp_path / "results" / "table"
    budget = ["--chains", "20", "--betas", "50", "--raise-rows", "10", "--raise-betas", "50",
              "--dataset", "digits", "--seeds", "3"]
    assert _script().main([str(run), "--out", str(out), *budget]) == 0
    rows = json.loads(out.with_suffix(".json").read_text())
    table = out.with_suffix(".md").read_text()
    (row,) = rows
    model = irbm.load(run)
    assert row["n_hidden"] == model.n_hidden and row["epochs"] == 2 and row["family"] == family
    # Recompute the AIS NLL from the run's model with the recorded budget and seed, on every
    # path of the family: the one with the highest ln Z heads the row, and all are listed.
    data = load_dataset("digits")
    estimates = [evaluate.ais_nll(model, torch.as_tensor(data.test), n_chains=20, n_betas=50,
                                  base="data", base_data=torch.as_tensor(data.train), seed=3,
                                  path=path, progress=False) for path in model.ais_paths]
    again = max(estimates, key=lambda estimate: estimate.log_partition.log_z)
    assert row["evaluation"]["ais"][0]["nll"] == pytest.approx(again.mean, abs=1e-9)
    assert [e["path"] for e in row["evaluation"]["ais"]] == \
        [e.log_partition.path for e in sorted(estimates, key=lambda e: -e.log_partition.log_z)]
    for estimate in estimates:
        assert f"{estimate.mean:.2f} +/- {estimate.stderr:.2f}" in table
    assert "partial" not in table  # digits has no paper row, hence no protocol to fall short of
    # The certain floor of ln Z is below the exact one (12 hidden units: enumerable), and a
    # row is marked exactly when AIS falls under it.
    if family == "rbm":
        exact = irbm.load(run, dtype=torch.float64).log_partition_exact()
        assert row["sampled_log_z_floor"] <= exact + 1e-3
    below = row["sampled_log_z_floor"] > row["evaluation"]["ais"][0]["log_z"]
    assert (row["nll_at_least"] is not None) == below == ("certain floor: NLL >=" in table)
    # A second run reuses the cached evaluation (same digest and budget).
    cached = list(run.glob("paper-eval-*.json"))
    assert len(cached) == len(model.ais_paths)
    assert _script().main([str(run), "--out", str(out), *budget]) == 0
    assert list(run.glob("paper-eval-*.json")) == cached


def test_paper_settings_files_are_valid_settings():
    """scripts/reproduce_paper.sh trains from scripts/paper/*.toml: each must be a valid settings
    file for its family, and the MNIST oRBM (500 epochs) must select at its end."""
    from irbm.settings import Settings, read_config_file
    configs = sorted((SCRIPT.parent / "paper").glob("*.toml"))
    assert [path.stem for path in configs] == [  # every row of Tables 1 and 2
        f"{dataset}-{model}" for dataset in ("caltech", "mnist")
        for model in ("irbm", "orbm500", "rbm100", "rbm2000", "rbm500")]
    for path in configs:
        family = path.stem.split("-")[1].rstrip("0123456789")
        values = read_config_file(path)
        settings = Settings.from_mapping({"family": family, "dataset": "digits", **values})
        assert settings.epochs % settings.eval_every == 0, path  # selection at the last epoch


def test_epoch_times_table_is_generated_from_run_directories(tmp_path, monkeypatch):
    """scripts/epoch_times.py (the MNIST timing table): seconds per epoch and threads come from
    the run's history, the projection from the paper's epochs for the run's dataset and family."""
    run = tmp_path / "rbm"
    assert cli_main(["train", "rbm", "digits", "--out", str(run), "--epochs", "3",
                     "--n-hidden", "8", "--threads", "1", "--quiet"]) == 0
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("epoch_times", SCRIPT.parent / "epoch_times.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(module.PAPER, "digits", {("rbm", 8): (0.0, None, 1000)})
    out = tmp_path / "timing"
    module.main([str(run), "--out", str(out)])
    (row,) = json.loads(out.with_suffix(".json").read_text())
    history = json.loads((run / "history.json").read_text())["history"]
    seconds = sorted(entry["seconds"] for entry in history[1:])
    assert row["seconds_per_epoch"] == pytest.approx(sum(seconds) / 2)  # median of two
    assert row["threads"] == 1 and row["epochs"] == 2 and row["n_hidden"] == [8, 8]
    assert row["projected_hours"] == pytest.approx(row["seconds_per_epoch"] * 1000 / 3600)
    assert f"| rbm | digits | 8 | 2 | {row['seconds_per_epoch']:.1f} | 1 | 1000 |" in \
        out.with_suffix(".md").read_text()


def test_snapshots_joined_by_commas_give_the_row_with_the_best_validation_nll(tmp_path):
    run = tmp_path / "run"
    snapshots = []
    for epochs in (1, 2):
        assert cli_main(["train", "rbm", "digits", "--out", str(run), "--epochs", str(epochs),
                         "--n-hidden", "6", "--lr", "0.05", "--quiet"]) == 0
        snapshot = tmp_path / f"snapshot-{epochs}"
        shutil.copytree(run, snapshot)
        snapshots.append(snapshot)
    out = tmp_path / "table"
    budget = ["--chains", "10", "--betas", "30", "--raise-rows", "0", "--dataset", "digits"]
    other = tmp_path / "other-seed"
    assert cli_main(["train", "rbm", "digits", "--out", str(other), "--epochs", "1",
                     "--n-hidden", "6", "--lr", "0.05", "--seed", "7", "--optimizer", "sgd",
                     "--quiet"]) == 0
    with pytest.raises(SystemExit, match="--summary-by sed: not a setting"):
        _script().main([str(other), "--out", str(out), "--summary-by", "optimizer,sed", *budget])
    assert not out.with_suffix(".json").exists()
    assert _script().main([",".join(map(str, snapshots)), str(other), "--out", str(out),
                           "--summary-by", "family, seed, optimizer", *budget]) == 0
    selected, other_row = json.loads(out.with_suffix(".json").read_text())
    data = load_dataset("digits")
    valid_nll = {}
    for snapshot in snapshots:  # recomputed from each snapshot's model and cached ln Z
        (cache,) = snapshot.glob("paper-eval-*.json")
        log_z = json.loads(cache.read_text())["ais"][0]["log_z"]
        model = irbm.load(snapshot / "model.safetensors")
        valid_nll[str(snapshot)] = evaluate.nll(model, torch.as_tensor(data.valid), log_z)[0]
    assert selected["run"] == min(valid_nll, key=valid_nll.get)
    assert [c["valid_nll"] for c in selected["selection"]] == pytest.approx(
        [valid_nll[str(s)] for s in snapshots])
    table = out.with_suffix(".md").read_text()
    assert "selected by valid NLL among 1: " in table and "seed 7" in table
    nlls = [row["evaluation"]["ais"][0]["nll"] for row in (selected, other_row)]
    assert f"| rbm, 1234, adagrad | 1 | {nlls[0]:.2f} |" in table
    assert f"| rbm, 7, sgd | 1 | {nlls[1]:.2f} |" in table


def test_the_summary_groups_by_family_and_gives_raise_only_where_every_run_has_it():
    def row(family, nll, raised):
        return {"family": family, "settings": {"seed": 1},
                "evaluation": {"ais": [{"nll": nll}],
                               "raise": None if raised is None else {"mean": raised}}}

    table = _script().summary([row("irbm", 1.0, 2.0), row("irbm", 3.0, 4.0),
                               row("rbm", 5.0, 6.0), row("rbm", 7.0, None)], "family")
    # irbm: mean 2, sd sqrt(2); RAISE mean 3, sd sqrt(2). rbm: one RAISE missing, so none.
    assert "| irbm | 2 | 2.00 | 1.41 | 1.00 | 3.00 | 3.00 | 1.41 |" in table
    assert "| rbm | 2 | 6.00 | 1.41 | 5.00 | 7.00 | - | - |" in table


def test_a_selected_row_is_partial_only_when_its_last_candidate_falls_short():
    script = _script()
    row = {"epochs": 4000, "paper_epochs": 5000,
           "selection": [{"epochs": e, "valid_nll": v} for e, v in ((4000, 159.3), (5000, 160.8))]}
    assert script.epochs_cell(row) == ("4000 (5000), selected by valid NLL among 4000: 159.30, "
                                       "5000: 160.80")
    row["selection"].pop()
    assert script.epochs_cell(row).startswith("4000 (5000) partial, selected")
    assert script.epochs_cell({"epochs": 1000, "paper_epochs": 3000}) == "1000 (3000) partial"
    assert script.epochs_cell({"epochs": 3000, "paper_epochs": 3000}) == "3000 (3000)"
    assert script.epochs_cell({"epochs": 7, "paper_epochs": None}) == "7 (-)"


def test_the_readme_summary_agrees_with_the_committed_results():
    """README's "What it reproduces" table is a digest of results/caltech101.json (generated
    from the committed models' brackets by scripts/bracket_results.py): each of its rows must
    match its own row there in family, size, epochs (and the selection), both sides of the
    bracket (one decimal, optimistic first), the verdict and the paper's number, so the README
    cannot drift from the tables."""
    root = SCRIPT.parents[1]
    rows = read_json(root / "results" / "caltech101.json")  # non-finite numbers back
    text = (root / "README.md").read_text()
    section = text[text.index("**What it reproduces**"):]
    table = section[section.index("\n| model |"):].strip().split("\n\n")[0].splitlines()
    lines = table[2:]
    assert len(lines) == len(rows) == 12
    matched = []
    for line in lines:
        model, epochs, bracket, certified, paper = [cell.strip()
                                                     for cell in line.strip("|").split("|")]
        # "RBM-500" or "iRBM, 659 units (paper 915)"
        shape = re.fullmatch(r"(\w+)(?:-(\d[\d,]*)|, (\d[\d,]*) units.*)", model)
        assert shape, line
        name, n_hidden = shape[1], int((shape[2] or shape[3]).replace(",", ""))
        matches = [row for row in rows
                   if row["display_name"] == name and row["n_hidden"] == n_hidden
                   and bracket.startswith(f"[{row['bracket']['optimistic']:.1f}, "
                                          f"{row['bracket']['conservative']:.1f}]")]
        assert len(matches) == 1, line
        (row,) = matches
        matched.append(rows.index(row))
        assert certified.startswith("yes" if row["bracket"]["certified"] else "no"), line
        assert float(paper) == row["paper"][0], line
        # "3,000, selected 2,000 (3,000)" or "2,000 (2,000)"
        numbers = [int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", epochs)]
        if row.get("selection"):
            assert "selected" in epochs, line
            assert numbers[:2] == [max(c["epochs"] for c in row["selection"]), row["epoch"]]
        else:
            assert "selected" not in epochs and numbers[0] == row["epoch"], line
        assert numbers[-1] == row["paper"][2], line
    assert sorted(matched) == list(range(len(rows)))


def test_ordering_sensitivity_evaluates_each_order_of_the_snapshot(tmp_path):
    """scripts/ordering_sensitivity.py: the saved order's NLL is the snapshot's own AIS NLL and
    the filter-norm order's is that of the sorted model (same budget and seed)."""
    run = tmp_path / "peng"
    assert cli_main(["train", "irbm", "digits", "--out", str(run), "--epochs", "12", "--lr", "0.05",
                     "--random-permutation", "--regrouping", "peng", "--growth", "paired",
                     "--quiet"]) == 0
    spec = importlib.util.spec_from_file_location("ordering", SCRIPT.with_name(
        "ordering_sensitivity.py"))
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    out = tmp_path / "ordering"
    assert script.main([str(run), "--out", str(out), "--dataset", "digits", "--chains", "10",
                        "--betas", "30", "--gibbs-steps", "3", "--orders", "1"]) == 0
    (row,) = json.loads(out.with_suffix(".json").read_text())
    assert len(row["orders"]) == 3
    data = load_dataset("digits")
    test, train = (torch.as_tensor(split, dtype=torch.float64) for split in (data.test, data.train))
    model = irbm.load(run, dtype=torch.float64)
    budget = dict(n_chains=10, n_betas=30, base="data", base_data=train, seed=1, progress=False)
    assert row["orders"]["saved"]["nll"] == pytest.approx(
        evaluate.ais_nll(model, test, **budget).mean, abs=1e-9)
    model.relayout_hidden(torch.argsort(model.filters().norm(dim=1), descending=True,
                                        stable=True))
    assert row["orders"]["by filter norm"]["nll"] == pytest.approx(
        evaluate.ais_nll(model, test, **budget).mean, abs=1e-9)
    with pytest.raises(SystemExit):  # not a run directory: refused before any evaluation
        script.main([str(tmp_path), "--out", str(out), "--dataset", "digits"])


def _parsed_train_command(command: str):
    """The `irbm train` command printed in a results table, parsed by irbm's own parser (as if
    pasted into a shell) and turned into the settings it would train with."""
    from irbm.cli import build_parser
    from irbm.settings import SPECS, Settings
    words = shlex.split(command)
    assert words[:2] == ["irbm", "train"], command
    args = build_parser().parse_args(words[1:])  # argparse exits on what does not parse
    given = {name: value for name in SPECS if (value := getattr(args, name, None)) is not None}
    return args, Settings.from_mapping(given)


@pytest.mark.parametrize("family", ["rbm", "irbm"])
def test_printed_commands_run_as_pasted_with_only_the_family_options(tmp_path, family):
    """The command behind a row names the run directory (--out), parses with the CLI's parser,
    gives the run's settings back, and shows no option the family does not take."""
    script = _script()
    run = tmp_path / family
    options = ["--n-hidden", "6"] if family == "rbm" else ["--random-permutation"]
    assert cli_main(["train", family, "digits", "--out", str(run), "--epochs", "1",
                     "--quiet", *options]) == 0
    snapshot = run / "snapshots" / "1"
    shutil.copytree(run, snapshot, ignore=shutil.ignore_patterns("snapshots"))
    config = json.loads((run / "config.json").read_text())
    for directory in (run, snapshot):  # a snapshot's command trains the run it was taken from
        command = script.command_of(config, directory)
        args, settings = _parsed_train_command(command)
        assert Path(args.out) == run
        assert settings.resolved().record() == irbm.runs.read_settings(run).record()
    if family == "rbm":  # no iRBM-only option
        for flag in ("--regrouping", "--growth", "--random-permutation", "--beta"):
            assert flag not in command


def test_the_commands_in_the_committed_results_run_as_pasted():
    """Every `irbm train` command printed under results/ parses with the CLI's parser."""
    tables = sorted((SCRIPT.parents[1] / "results").glob("*.md"))
    commands = [command for table in tables
                for command in re.findall(r"^- `(irbm train [^`]*)`$", table.read_text(),
                                          re.MULTILINE)]
    assert len(commands) >= 10
    for command in commands:
        args, settings = _parsed_train_command(command)
        assert args.out
        if settings.family == "rbm":
            assert "--regrouping" not in command and "--growth" not in command, command


def test_bracket_table_is_generated_from_the_models_evaluations(tmp_path, monkeypatch):
    """scripts/bracket_results.py brackets a model once (--evaluate), then writes every number
    of its row from the model's evaluation.json, with commands that parse as pasted."""
    script = _bracket_results(monkeypatch)
    model_dir = tmp_path / "models" / "irbm-digits"
    assert cli_main(["train", "irbm", "digits", "--out", str(model_dir), "--epochs", "1",
                     "--quiet", "--l1", "1e-3"]) == 0
    out = tmp_path / "results" / "brackets"
    budget = ["--chains", "10", "--rows", "20", "--max-seconds", "2"]
    with pytest.raises(SystemExit, match="has no bracket"):
        script.main([str(model_dir), "--out", str(out)])
    # A first level longer than the budget (a loaded machine) stops between saved batches with
    # status 3, and the same command goes on from them.
    for _ in range(20):
        status = script.main([str(model_dir), "--out", str(out), "--evaluate", *budget])
        if status != 3:
            break
    assert status == 0
    records = irbm.runs.read_evaluations(model_dir)
    assert len(records) == 1 and records[0]["bracket"]["n_rows"] == 20
    assert script.main([str(model_dir), "--out", str(out), "--evaluate", *budget]) == 0
    assert len(irbm.runs.read_evaluations(model_dir)) == 1  # bracketed once, not again
    bracket = records[0]["bracket"]
    (row,) = json.loads(out.with_suffix(".json").read_text())
    assert {key: value for key, value in row["bracket"].items() if key != "conditional"} == \
        bracket and row["bracket"]["conditional"] is None  # no tempering, no BDMC
    table = out.with_suffix(".md").read_text()
    cells = [line for line in table.splitlines() if line.startswith("| iRBM")][0].split(" | ")
    assert [float(cells[k]) for k in (4, 5, 6)] == [
        round(bracket[key], 2) for key in ("optimistic", "conservative", "width")]
    assert cells[7].startswith("yes" if bracket["certified"] else "no")
    train = re.findall(r"^- `(irbm train [^`]*)`$", table, re.MULTILINE)
    assert len(train) == 1 and _parsed_train_command(train[0])[0].out
    (evaluate_line,) = re.findall(r"then `(irbm evaluate [^`]*)`", table)
    args = irbm.cli.build_parser().parse_args(shlex.split(evaluate_line)[1:])
    assert args.bracket and Path(args.run) == model_dir and args.raise_rows == 20
    # A selected model carries its candidates (scripts/record_selection.py); the row shows them,
    # and a record of another model's selection is refused.
    selection = tmp_path / "selection.json"
    digest = _script().model_digest(irbm.load(model_dir / "model.safetensors"))
    row = {"run": "runs/x/snapshots/1", "epochs": 1, "paper_epochs": 4000,
           "evaluation": {"model_digest": digest, "budget": {"chains": 10}},
           "selection": [{"epochs": 1, "valid_nll": 12.345}]}
    selection.write_text(json.dumps([row]))
    recorder = importlib.util.spec_from_file_location("record_selection",
                                                      SCRIPT.parent / "record_selection.py")
    record_selection = importlib.util.module_from_spec(recorder)
    recorder.loader.exec_module(record_selection)
    assert record_selection.main([str(selection), str(model_dir)]) == 0
    assert script.main([str(model_dir), "--out", str(out)]) == 0
    assert "| 1, selected by validation NLL (AIS point estimates) among 1: 12.3 |" in \
        out.with_suffix(".md").read_text()
    stored = json.loads((model_dir / "selection.json").read_text())
    (model_dir / "selection.json").write_text(json.dumps({**stored, "model_sha256": "0" * 64}))
    with pytest.raises(SystemExit, match="does not describe the directory's model"):
        script.main([str(model_dir), "--out", str(out)])
    selection.write_text(json.dumps([{**row, "evaluation": {"model_digest": "0" * 16}}]))
    with pytest.raises(SystemExit, match="holds another model than the one"):
        record_selection.main([str(selection), str(model_dir)])
    selection.write_text(json.dumps([{**row, "epochs": 2}]))
    with pytest.raises(SystemExit, match="epoch 1, but .* selected epoch 2"):
        record_selection.main([str(selection), str(model_dir)])


COMMITTED_MODELS = sorted(path for path in (SCRIPT.parents[1] / "results" / "models").iterdir()
                          if path.is_dir())


@pytest.mark.parametrize("model_dir", COMMITTED_MODELS, ids=lambda path: path.name)
def test_every_committed_model_reproduces_its_bracket_on_a_fresh_clone(model_dir,
                                                                       shared_data_dir):
    """`irbm evaluate results/models/NAME` works from the repository alone: the model loads
    (safetensors, no code runs), its data is found the way a user names it and matches the
    digest its run recorded, its latest bracket is of this very model, and that bracket's
    optimistic side is the test rows' mean free energy, computed here, plus its stored ln Z."""
    model, source = irbm.runs.run_model(model_dir, which="latest")
    records = [record for record in irbm.runs.read_evaluations(model_dir) if "bracket" in record]
    assert records, f"{model_dir.name} has no bracket"
    record = records[-1]
    assert record["model_sha256"] == source.sha256
    assert irbm.runs.staleness(model_dir, record) is None
    dataset = irbm.runs.load_run_dataset(model_dir)
    bracket = rejudge(record["bracket"])
    mean_free_energy = float(evaluate.free_energies(model, torch.as_tensor(dataset.test))
                             .double().mean())
    # A GPU sums the float32 free energies in another order: equal within float32's rounding.
    tolerance = 1e-4 if record.get("device", "cpu") == "cpu" else 1e-6 * abs(mean_free_energy)
    assert bracket["optimistic"] == pytest.approx(mean_free_energy + bracket["log_z"],
                                                  abs=tolerance)


def test_a_bracket_started_further_on_names_its_first_temperatures(monkeypatch):
    """The command that re-derives a bracket gives --betas when its first level was not
    bracket_nll's default (the oRBM-500's last bracket started at 16,000)."""
    script = _bracket_results(monkeypatch)
    bracket = {"n_chains": 1000, "n_rows": 300, "tolerance": 1.0, "max_seconds": 6500,
               "levels": [{"n_betas": 16000}, {"n_betas": 32000}]}
    command = script.evaluate_command(Path("m"), bracket, {"seed": 2})
    assert " --betas 16000" in command and shlex.split(command)[:2] == ["irbm", "evaluate"]
    bracket["levels"][0]["n_betas"] = script.FIRST_LEVEL_BETAS
    assert "--betas" not in script.evaluate_command(Path("m"), bracket, {"seed": 2})


def test_a_bracket_names_the_schedule_it_was_made_with(monkeypatch):
    """Brackets stored before RAISE had a schedule of its own spaced it as AIS's: their command
    says --schedule tuned-forward; a bracket on the default schedule needs no option."""
    script = _bracket_results(monkeypatch)
    bracket = {"n_chains": 500, "n_rows": 300, "tolerance": 1.0, "levels": [{"n_betas": 1000}]}
    assert " --schedule tuned-forward" in script.evaluate_command(Path("m"), bracket, {})
    for schedule in ("tuned-forward", "uniform"):
        command = script.evaluate_command(Path("m"), {**bracket, "schedule": schedule}, {})
        assert shlex.split(command)[-2:] == ["--schedule", schedule]
    assert "--schedule" not in script.evaluate_command(Path("m"),
                                                       {**bracket, "schedule": "tuned"}, {})


def test_a_bracket_rejudged_with_a_higher_floor_names_that_command(monkeypatch):
    """A record appended by `irbm evaluate --floor-chains [--floor-descents]` re-derives with
    that command last."""
    script = _bracket_results(monkeypatch)
    bracket = {"n_chains": 500, "n_rows": 300, "tolerance": 1.0, "schedule": "tuned",
               "levels": [{"n_betas": 1000}]}
    assert "--floor-chains" not in script.evaluate_command(Path("m"), bracket, {})
    command = script.evaluate_command(Path("m"), bracket, {"floor_chains": 32000})
    assert command.endswith("`, then `irbm evaluate m --floor-chains 32000")
    command = script.evaluate_command(Path("m"), bracket, {"floor_chains": 2000,
                                                           "floor_descents": 10000})
    assert command.endswith("`, then `irbm evaluate m --floor-chains 2000 --floor-descents 10000")


def test_a_bracket_names_the_device_it_ran_on(monkeypatch):
    """A bracket made on a GPU is re-derived with --device cuda (its random streams are the
    GPU's); one made on the CPU, or stored before devices were recorded, needs no option."""
    script = _bracket_results(monkeypatch)
    bracket = {"n_chains": 2000, "n_rows": 1000, "tolerance": 1.0, "schedule": "tuned",
               "levels": [{"n_betas": 16000}]}
    command = script.evaluate_command(Path("m"), bracket, {"device": "cuda: NVIDIA H200"})
    assert shlex.split(command)[-2:] == ["--device", "cuda"]
    for record in ({"device": "cpu"}, {}):
        assert "--device" not in script.evaluate_command(Path("m"), bracket, record)
    # A continued bracket: the command of the one it continues, then the continuation.
    first = {"device": "cpu", "seed": 4, "bracket": bracket}
    later = {"device": "cuda: NVIDIA H200", "seed": 4, "continues": 0,
             "bracket": {**bracket, "max_seconds": 500.0}}
    command = script.evaluate_command(Path("m"), later["bracket"], later, [first, later])
    assert command == (script.evaluate_command(Path("m"), bracket, first)
                       + "`, then `irbm evaluate m --latest --bracket --continue "
                       "--max-seconds 500 --device cuda")
    later["bracket"]["cross_check"] = {"n_sweeps": 30}  # checked as it was continued
    assert script.evaluate_command(Path("m"), later["bracket"], later, [first, later]) \
        == command + " --tempering 30"


def test_a_bracket_names_its_reverse_chains_per_row(monkeypatch):
    """The command that re-derives a bracket always says its reverse chains per RAISE row (so
    it keeps its meaning whatever irbm evaluate's default): one for brackets stored before
    repeats were recorded."""
    script = _bracket_results(monkeypatch)
    bracket = {"n_chains": 8000, "n_rows": 500, "tolerance": 1.0, "schedule": "tuned",
               "levels": [{"n_betas": 32000}]}
    parser = irbm.cli.build_parser()
    for stored, repeats in (({**bracket, "raise_repeats": 8}, 8), (bracket, 1),
                            ({**bracket, "raise_repeats": 4}, 4)):
        command = script.evaluate_command(Path("m"), stored, {})
        args = parser.parse_args(shlex.split(command)[1:])
        assert (args.raise_rows, args.raise_repeats, args.chains) == (500, repeats, 8000)
    with pytest.raises(SystemExit):
        script.main(["m", "--out", "x", "--raise-repeats", "0"])


def test_raise_repeats_script_tables_one_row_per_number_of_chains(tmp_path, capsys):
    """scripts/raise_repeats.py: RAISE on the same first test rows for each R, a row each,
    with the jackknife gap where R >= 2; its R = 1 row is `raise_nll`'s with one chain."""
    spec = importlib.util.spec_from_file_location("raise_repeats",
                                                  SCRIPT.parent / "raise_repeats.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    run_dir = tmp_path / "rbm-digits"
    assert cli_main(["train", "rbm", "digits", "--out", str(run_dir), "--epochs", "1",
                     "--quiet"]) == 0
    capsys.readouterr()
    assert script.main([str(run_dir), "--repeats", "1", "3", "--temperatures", "30",
                        "--rows", "12", "--float64"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert [line.split(" | ")[0] for line in lines[1:]] == ["| 1", "| 3"]
    assert lines[1].split(" | ")[3] == "-" and float(lines[2].split(" | ")[3]) >= 0
    model = irbm.runs.load_run_model(run_dir, which="latest").double()
    dataset = irbm.runs.load_run_dataset(run_dir)
    alone = evaluate.raise_nll(model, torch.as_tensor(dataset.test[:12]).double(), n_betas=30,
                               seed=5, base="data",
                               base_data=torch.as_tensor(dataset.train).double(),
                               progress=False)
    assert float(lines[1].split(" | ")[1]) == round(alone.mean, 2)
    with pytest.raises(SystemExit):
        script.main([str(run_dir), "--repeats", "0"])
