"""Evaluate trained run directories and write the results table beside the paper's numbers.

    python scripts/paper_results.py RUN_DIR [RUN_DIR ...] \
        --out results/caltech101_point_estimates [--chains 500] [--betas 10000] \
        [--raise-rows 300] [--raise-betas 10000] \
        [--bases data] [--seeds 0] [--data-dir DIR] [--threads 1] [--device cuda] \
        [--summary-by KEY[,KEY]]

Each RUN_DIR is an `irbm train` run directory (or a snapshot of one: a directory with
model.safetensors, config.json and history.json). Several snapshots of one run joined by commas
(``run/snapshots/1000,run/snapshots/2000``) make one row: the snapshot with the best validation
NLL (the paper's model selection; each snapshot's ln Z serves its validation and test NLL, so
where AIS is unreliable the selection favours an underestimated ln Z: the reported test NLL
of the selected row is then optimistic, and every candidate's is in the JSON).
``--summary-by KEY[,KEY...]`` adds a table of the mean and spread of the test NLL over the runs
sharing each value of the settings (e.g. ``regularization`` over seeds).

For each run, the script estimates ln Z by AIS (every base and seed asked for, on every annealing
path the family offers; the path with the highest ln Z heads the row), the average
test NLL with its standard error, the AIS diagnostics (effective sample size, top-chain share,
warnings), and RAISE's conservative NLL on the first ``--raise-rows`` test images. Evaluations
are cached in the run directory (``paper-eval-<digest>.json``, keyed by the model's parameters
and the budget), so a rerun only evaluates what is new. It writes OUT.json (every number) and
OUT.md (the table), both generated from the run directories: nothing in them is typed by hand.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import shlex
import statistics
import sys
from pathlib import Path

import torch

import irbm
from irbm import evaluate
from irbm._threads import hold_threads
from irbm.datasets import load_dataset
from irbm.settings import GROWTH_SETTINGS, PROFILES, SPECS

# Tables 1 (binarized MNIST) and 2 (CalTech101 Silhouettes) of the paper, keyed by (family,
# hidden units or "learned"): (average test NLL, its +/- as the paper gives it, epochs). The
# paper's +/- is 1.96 standard errors (a 95% half-width: its authors' code computes it with
# build_avg_stderr_nll(..., factor=1.96)); irbm's tables give one standard error.
PAPER = {
    "caltech101": {("rbm", 100): (177.37, 2.81, 5000), ("rbm", 500): (119.05, 2.27, 3000),
                   ("rbm", 2000): (118.29, 2.25, 2000), ("orbm", 500): (114.99, 1.97, 5000),
                   ("irbm", "learned"): (121.47, 2.07, 4000)},
    "mnist": {("rbm", 100): (98.17, 0.52, 5000), ("rbm", 500): (86.50, 0.44, 5000),
              ("rbm", 2000): (85.03, 0.42, 5000), ("orbm", 500): (88.15, 0.46, 500),
              ("irbm", "learned"): (85.65, 0.44, 3000)},
}


# Where the evaluations run (--device): a setting of this invocation, not of the results,
# which are the same distributions on any device (the caches are shared).
DEVICE = None


def _load(run_dir: Path):
    return irbm.load(run_dir / "model.safetensors", device=DEVICE)


def _rows(array) -> torch.Tensor:
    return torch.as_tensor(array, device=DEVICE)


def model_digest(model) -> str:
    hasher = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        hasher.update(name.encode())
        hasher.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return hasher.hexdigest()[:16]


def describe(record: dict) -> tuple[str, str, dict]:
    """(family, dataset, settings) of a run's config.json (this version's layout, or the first
    version's, where family and dataset sat beside the settings)."""
    settings = dict(record.get("settings", {}))
    family = settings.pop("family", record.get("family"))
    dataset = settings.pop("dataset", record.get("dataset"))
    if isinstance(dataset, dict):
        dataset = dataset.get("name")
    return family, dataset, settings


# Settings shown beside optimizer, lr and L1 when they differ from these defaults.
NOTED = {"seed": 1234, "l2": 0.0, "regrouping": "all", "profile": "irbm", **PROFILES["irbm"]}
SKIPPED = {"eval_every", "eval_chains", "eval_betas", "train_size", "valid_size", "test_size",
           "binarize", "max_hidden", "dtype"}


def training_directory(run_dir) -> Path:
    """The run directory a snapshot (``RUN/snapshots/EPOCH``) was taken from; else itself."""
    run_dir = Path(run_dir)
    return run_dir.parents[1] if run_dir.parent.name == "snapshots" else run_dir


def family_takes(name: str, family: str) -> bool:
    """Whether `irbm train FAMILY` has a use for the setting ``name``: a constructor option of
    the family, the unit ordering of families with z, the growth of resizable ones, else yes."""
    cls = irbm.models.family_class(family)
    if SPECS[name].family_option:
        return name in cls.options()
    if name in ("random_permutation", "regrouping"):
        return cls.has_z
    return cls.resizable if name in GROWTH_SETTINGS else True


def command_of(record: dict, run_dir=None) -> str:
    """The `irbm train` command that the recorded settings correspond to, training into
    ``run_dir`` (the run a snapshot was taken from), with only the options the family takes:
    pasted into a shell, it runs."""
    family, dataset, settings = describe(record)
    parts = ["irbm train", family, dataset]
    for key, value in settings.items():
        if key in SKIPPED or value is None or not family_takes(key, family):
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):  # flags: pcd and shuffle are on by default, the others off
            if value != (key in ("pcd", "shuffle")):
                parts.append(flag if value else "--no-" + key.replace("_", "-"))
        else:
            parts.append(f"{flag} {value}")
    out = training_directory(run_dir) if run_dir is not None else Path("runs") / family
    return " ".join(parts + ["--out", shlex.quote(str(out))])


def evaluation_of(run_dir: Path, dataset, budget: dict) -> dict:
    """The run's evaluation on every AIS path its family offers, the path with the highest
    ln Z first (its first estimate heads the row) and the lowest RAISE NLL.

    Each AIS estimate is a stochastic lower bound of ln Z (P(ln Z-hat > ln Z + a) <= e^-a), so
    the higher is the better, and neither path always wins: on the MNIST iRBM the linear
    path's ln Z was 30 nats below the pinned path's with uniform weights, on the MNIST oRBM the
    pinned path's 5 nats below the linear one's."""
    model = _load(run_dir)
    records = sorted((evaluate_run(run_dir, dataset, budget, path) for path in model.ais_paths),
                     key=lambda record: -record["ais"][0]["log_z"])
    raised = [record["raise"] for record in records if record["raise"]]
    return {**records[0], "ais": [estimate for record in records for estimate in record["ais"]],
            "raise": min(raised, key=lambda record: record["mean"]) if raised else None}


def evaluate_run(run_dir: Path, dataset, budget: dict, path: str = "linear") -> dict:
    """Evaluation record of one run directory on one AIS path (cached)."""
    model = _load(run_dir)
    digest = model_digest(model)
    # The path joins the key, except the linear path: records made before paths existed used
    # it, and they stay valid.
    key_parts = [digest, budget] + ([path] if path != "linear" else [])
    key = hashlib.sha256(json.dumps(key_parts, sort_keys=True).encode()).hexdigest()[:16]
    cache = run_dir / f"paper-eval-{key}.json"
    if cache.exists():
        return json.loads(cache.read_text())
    test = _rows(dataset.test)
    train = _rows(dataset.train)
    estimates = []
    for base in budget["bases"]:
        for seed in budget["seeds"]:
            result = evaluate.ais_nll(model, test, n_chains=budget["chains"],
                                      n_betas=budget["betas"], base=base, base_data=train,
                                      seed=seed, path=path, progress=False)
            estimates.append({"base": base, "seed": seed, "nll": result.mean,
                              "stderr": result.stderr, "nll_low": result.mean_low,
                              "nll_high": result.mean_high,
                              **result.log_partition.summary(),
                              "log_z_floor": result.log_partition_floor,
                              "warnings": result.reliability_warnings()})
    conservative = None
    if budget["raise_rows"]:
        rows = test[: budget["raise_rows"]]
        raised = evaluate.raise_nll(model, rows, n_betas=budget["raise_betas"], seed=0,
                                    base="data", path=path, base_data=train, progress=False)
        ais_same_rows = evaluate.nll(model, rows, estimates[0]["log_z"])
        conservative = {**raised.summary(), "ais_nll_same_rows": ais_same_rows[0]}
    record = {"model_digest": digest, "budget": budget, "ais": estimates, "raise": conservative,
              "n_hidden": model.n_hidden, "family": model.family}
    cache.write_text(json.dumps(record, indent=1))
    return record


def row_for(run_dir: Path, dataset, budget: dict) -> dict:
    config = json.loads((run_dir / "config.json").read_text())
    history = json.loads((run_dir / "history.json").read_text())
    epochs = history["history"][-1]["epoch"] if history["history"] else 0
    evaluation = evaluation_of(run_dir, dataset, budget)
    # A certain lower bound of ln Z (distinct test rows and Gibbs states from them): AIS below
    # it is wrong whatever its weights say, and the NLL is then bounded below only.
    model = _load(run_dir)
    floor = evaluate.sampled_log_partition_floor(model, _rows(dataset.test))
    first = evaluation["ais"][0]
    family, _, settings = describe(config)
    size_key = "learned" if family == "irbm" else evaluation["n_hidden"]
    paper = PAPER.get(dataset.name, {}).get((family, size_key))
    return {"run": str(run_dir), "family": family, "dataset": dataset.name,
            "command": command_of(config, run_dir),
            "settings": settings, "epochs": epochs,
            "paper_epochs": paper[2] if paper else None,
            "seconds": sum(entry.get("seconds", 0.0) for entry in history["history"]),
            "threads": max((entry.get("threads") or 0 for entry in history["history"]),
                           default=0) or None,  # None: not recorded (runs before the record)
            "n_hidden": evaluation["n_hidden"], "evaluation": evaluation,
            "sampled_log_z_floor": floor,
            "nll_at_least": (first["nll"] - first["log_z"] + floor
                             if floor > first["log_z"] else None),
            "paper_nll": paper[0] if paper else None,
            "paper_stderr": paper[1] if paper else None}


def selected_row(candidates: list[Path], dataset, budget: dict) -> dict:
    """The row of the snapshot with the best validation NLL (under its first AIS estimate)."""
    valid = _rows(dataset.valid)
    rows = [row_for(run, dataset, budget) for run in candidates]
    for row in rows:
        model = _load(Path(row["run"]))
        row["valid_nll"] = evaluate.nll(model, valid, row["evaluation"]["ais"][0]["log_z"])[0]
    best = min(rows, key=lambda row: row["valid_nll"])
    best["selection"] = [{"epochs": row["epochs"], "valid_nll": row["valid_nll"]}
                         for row in rows]
    return best


def summary_keys(keys: str) -> list[str]:
    """The settings named by ``--summary-by`` (comma-separated), each checked."""
    names = [name.strip() for name in keys.split(",")]
    for name in names:
        if name not in SPECS:
            raise SystemExit(f"--summary-by {name}: not a setting; the settings are "
                             f"{', '.join(SPECS)}")
    return names


def summary(rows: list[dict], keys: str) -> str:
    """Mean, standard deviation and range of the test NLL (first AIS estimate), and the mean
    and spread of RAISE's where every run has it, per value of the settings ``keys``
    (comma-separated: one group per combination of their values)."""
    names = summary_keys(keys)
    groups: dict = {}
    for row in rows:  # a setting a run predates has its default
        settings = {"family": row["family"], **row["settings"]}
        value = ", ".join(str(settings.get(name, SPECS[name].default)) for name in names)
        conservative = row["evaluation"]["raise"]
        groups.setdefault(value, []).append(
            (row["evaluation"]["ais"][0]["nll"], conservative and conservative["mean"]))
    lines = [f"| {', '.join(names)} | runs | mean test NLL | sd over runs | min | max "
             "| RAISE: mean | sd |", "|---|---|---|---|---|---|---|---|"]
    for value, pairs in groups.items():
        nlls, raised = [pair[0] for pair in pairs], [pair[1] for pair in pairs]
        cells = [_mean_and_sd(nlls), f"{_fmt(min(nlls))} | {_fmt(max(nlls))}",
                 "- | -" if None in raised else _mean_and_sd(raised)]
        lines.append(f"| {value} | {len(nlls)} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def _mean_and_sd(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else float("nan")
    return f"{_fmt(statistics.mean(values))} | {_fmt(sd)}"


def _fmt(value, digits=2):
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if math.isfinite(value) else str(value)


def epochs_cell(row: dict) -> str:
    """"EPOCHS (PAPER'S)", marked partial when training stopped short of the paper's epochs;
    for a selected row, the epoch chosen and the candidates' validation NLLs (the run is
    partial only if its last candidate falls short)."""
    candidates = row.get("selection", [])
    trained = max((c["epochs"] for c in candidates), default=row["epochs"])
    partial = row["paper_epochs"] and trained < row["paper_epochs"]
    cell = f"{row['epochs']} ({row['paper_epochs'] or '-'})" + (" partial" if partial else "")
    if candidates:
        cell += ", selected by valid NLL among " + ", ".join(
            f"{c['epochs']}: {c['valid_nll']:.2f}" for c in candidates)
    return cell


def path_note(estimate: dict) -> str:
    """", pinned z = K" for an estimate on the pinned path; nothing for the linear one."""
    path = estimate.get("path", "linear")  # records before paths existed: linear
    return "" if path.startswith("linear") else ", " + path.split(" while")[0].replace(":", "")


def markdown(rows: list[dict]) -> str:
    lines = ["| model | hidden | epochs (paper) | optimizer, lr, L1 | AIS base: test NLL +/- se "
             "[ESS / chains] | RAISE NLL (AIS, same rows) | paper NLL | CPU time |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        settings, evaluation = row["settings"], row["evaluation"]
        ais_cells = "<br>".join(
            f"{e['base']} s{e['seed']}{path_note(e)}: {_fmt(e['nll'])} +/- {_fmt(e['stderr'])} "
            f"[{e['effective_sample_size']:.0f} / {e['n_chains']}]"
            + (" (unreliable)" if e["warnings"] else "") for e in evaluation["ais"])
        if row.get("nll_at_least") is not None:
            ais_cells += (f"<br>**AIS ln Z is below a certain floor: NLL >= "
                          f"{_fmt(row['nll_at_least'])}**")
        conservative = evaluation["raise"]
        raise_cell = "-" if conservative is None else (
            f"{_fmt(conservative['mean'])} ({_fmt(conservative['ais_nll_same_rows'])}, "
            f"{conservative['n_rows']} rows)")
        epochs = epochs_cell(row)
        extra = [f"{key} {settings[key]}" for key, default in NOTED.items()
                 if key in settings and settings[key] != default]
        paper = ("-" if row["paper_nll"] is None else
                 f"{row['paper_nll']:.2f}" + (f" +/- {row['paper_stderr']:.2f}"
                                              if row["paper_stderr"] else ""))
        lines.append(
            f"| {row['family']} | {row['n_hidden']} | {epochs} | {settings.get('optimizer')}, "
            f"{settings.get('lr')}, {settings.get('l1')}{''.join(', ' + e for e in extra)} "
            f"| {ais_cells} | {raise_cell} | {paper} "
            f"| {row['seconds'] / 3600:.2f} h ({row['threads'] or '?'} thread) |")
    budget = rows[0]["evaluation"]["budget"] if rows else {}
    conservative = (f"RAISE: {budget.get('raise_betas')} temperatures, 1 reverse chain per "
                    "test row, data base" if budget.get("raise_rows") else "no RAISE")
    lines += ["", f"AIS: {budget.get('chains')} chains x {budget.get('betas')} temperatures per "
              f"estimate; {conservative}. In bold: an AIS ln Z below ln sum exp(-F(v)) over "
              "the distinct test rows and the states of 500 Gibbs chains run 200 steps from "
              "them, a certain lower bound (the AIS estimate is then wrong, however uniform its "
              "weights). \"pinned z = K\": AIS and RAISE anneal with z held at K = n_hidden and "
              "release it over the last quarter of the temperatures; the other estimates use "
              "the linear path of Salakhutdinov & Murray. Rows of the ordered families list "
              "both paths, the one with the higher ln Z first (the row's NLL); RAISE is the "
              "lower of the two paths'. Commands:", ""]
    lines += [f"- `{row['command']}`" for row in rows]
    return "\n".join(lines) + "\n"


def rewrite_commands(out: Path, dataset: str) -> int:
    """Derive the commands of OUT.json's rows again from their settings, and put them in place
    of the old ones in OUT.json and OUT.md, leaving everything else as it was (a table written
    by an older version of this script keeps its text); ``dataset`` names the data of rows
    written before rows recorded it."""
    rows = json.loads(out.with_suffix(".json").read_text())
    table = out.with_suffix(".md").read_text()
    for row in rows:
        record = {"settings": {"family": row["family"],
                               "dataset": row.setdefault("dataset", dataset), **row["settings"]}}
        old, row["command"] = row["command"], command_of(record, row["run"])
        table = table.replace(f"- `{old}`\n", f"- `{row['command']}`\n", 1)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    out.with_suffix(".md").write_text(table)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run directories; a,b,c: select among them")
    parser.add_argument("--out", type=Path, required=True, help="output path without suffix")
    parser.add_argument("--dataset", default="caltech101")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--chains", type=int, default=500)
    parser.add_argument("--betas", type=int, default=10000)
    parser.add_argument("--bases", default="data", help="comma-separated: data,model")
    parser.add_argument("--seeds", default="0", help="comma-separated AIS seeds")
    parser.add_argument("--raise-rows", type=int, default=300)
    parser.add_argument("--raise-betas", type=int, default=10000)
    parser.add_argument("--summary-by", default=None,
                        help="settings to group runs by, comma-separated")
    parser.add_argument("--threads", type=int, default=1, help="for the evaluation (the "
                        "table reports each run's training threads, '?' when not recorded)")
    parser.add_argument("--device", default=None, help="torch device for the evaluations")
    parser.add_argument("--rewrite-commands", dest="rewrite", action="store_true",
                        help="evaluate nothing: derive the commands of OUT.json's rows again "
                        "from their settings and replace them in OUT.json and OUT.md")
    args = parser.parse_args(argv)
    if args.rewrite:
        return rewrite_commands(args.out, args.dataset)
    if args.summary_by:
        summary_keys(args.summary_by)  # a typo fails now, not after the evaluations
    hold_threads(args.threads)
    global DEVICE
    DEVICE = args.device
    dataset = load_dataset(args.dataset, data_dir=args.data_dir)
    budget = {"chains": args.chains, "betas": args.betas, "bases": args.bases.split(","),
              "seeds": [int(s) for s in args.seeds.split(",")], "raise_rows": args.raise_rows,
              "raise_betas": args.raise_betas}
    rows = []
    for run in args.runs:
        print(f"evaluating {run}", file=sys.stderr)
        candidates = [Path(part) for part in run.split(",")]
        rows.append(selected_row(candidates, dataset, budget) if len(candidates) > 1
                    else row_for(candidates[0], dataset, budget))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    args.out.with_suffix(".md").write_text(
        markdown(rows) + (f"\n{summary(rows, args.summary_by)}" if args.summary_by else ""))
    print(args.out.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
