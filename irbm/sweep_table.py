"""Sweep directories and their results table.

A sweep directory holds ``irbm-sweep.json`` (the marker: format, version, the sweep's fixed
settings, grid, evaluation budget and trial names) and one ordinary run directory per trial.
Each trial directory also holds ``trial-status.json`` once its task ended (done or failed, with
the host and process) and, when the trial failed, ``error.txt`` (the traceback); a run without
a status was interrupted ("unfinished"). The table is read from
the run directories themselves, so it is the same whether the sweep has just run or not.
"""

from __future__ import annotations

import csv
import html
import io
import logging
import math
from pathlib import Path

from . import runs
from ._io import atomic_write

logger = logging.getLogger(__name__)

MARKER_FILE = runs.SWEEP_MARKER_FILE
SWEEP_FORMAT, SWEEP_VERSION = "irbm-sweep", 1
STATUS_FILE = "trial-status.json"
ERROR_FILE = "error.txt"
TABLE_NAME = "sweep"  # sweep.md, sweep.html, sweep.csv


def is_sweep(directory) -> bool:
    """Whether ``directory`` holds a sweep marker of this format and version."""
    return runs.has_marker(directory, MARKER_FILE, SWEEP_FORMAT, SWEEP_VERSION, "sweep")


def read_marker(directory) -> dict:
    if not is_sweep(directory):
        raise ValueError(f"{directory} is not an irbm sweep directory (no {MARKER_FILE})")
    return runs.read_json(Path(directory) / MARKER_FILE)


def trial_dirs(directory) -> list[Path]:
    """The sweep's trial run directories, in grid order."""
    return [Path(directory) / name for name in read_marker(directory)["trials"]]


def _evaluated(run_dir: Path) -> bool:
    """A run directory with an evaluation of its current model."""
    try:
        return runs.is_run(run_dir) and runs.current_evaluation(run_dir)[1] is None
    except (FileNotFoundError, ValueError):
        return False


def evaluated_trial_dirs(directory, *, name_earlier: bool = True) -> list[Path]:
    """The trials that have an evaluation of their current model (what `irbm report` shows);
    the others are logged and left out, and so (``name_earlier``) are the runs of an earlier
    grid beside them."""
    found = []
    listed = trial_dirs(directory)
    earlier = sorted(path.name for path in Path(directory).iterdir()
                     if path not in listed and runs.is_run(path))
    if earlier and name_earlier:  # as `irbm sweep` says it (a report left them out unsaid)
        logger.warning("%d trial(s) in %s from an earlier grid are not in its sweep file and "
                       "are left out of the report: %s (name them, SWEEP/TRIAL, to include "
                       "them)",
                       len(earlier), directory, ", ".join(earlier))
    for trial in listed:
        try:
            if runs.is_run(trial) and runs.current_evaluation(trial)[1] is None:
                found.append(trial)
                continue
        except (FileNotFoundError, ValueError):
            pass
        try:
            status = read_status(trial)
        except (OSError, ValueError):
            status = {}
        if status.get("status") == "failed":  # say so: "no evaluation" hid why
            logger.warning("%s: failed (%s; see %s); left out of the report", trial,
                           str(status.get("error", "")).splitlines()[0] if status.get("error")
                           else "no message", trial / ERROR_FILE)
        else:
            logger.warning("%s: no evaluation of its current model; left out of the report",
                           trial)
    return found


def expand_sweeps(directories) -> list[Path]:
    """Run directories, with every sweep directory replaced by its evaluated trials; what a
    shell's ``SWEEP/*`` names inside a sweep is kept when it is one of those trials or an
    evaluated run of an earlier grid (the sweep's own files, and trials without an
    evaluation, logged as such, are left out)."""
    expanded, evaluated = [], {}
    for directory in map(Path, directories):
        if is_sweep(directory.parent) and not is_sweep(directory):  # e.g. from SWEEP/*
            if directory.parent not in evaluated:  # runs of an earlier grid are named here
                evaluated[directory.parent] = evaluated_trial_dirs(directory.parent,
                                                                   name_earlier=False)
            listed = directory in trial_dirs(directory.parent)
            if directory in evaluated[directory.parent] or not listed and _evaluated(directory):
                expanded.append(directory)  # a trial of an earlier grid, named: kept
            elif not listed and runs.is_run(directory):
                logger.warning("%s: no evaluation of its current model; left out of the report",
                               directory)
            continue
        expanded.extend(evaluated_trial_dirs(directory) if is_sweep(directory) else [directory])
    return expanded


def read_status(trial_dir) -> dict:
    return runs.read_json(Path(trial_dir) / STATUS_FILE, default={"status": "pending"})


# ---------------------------------------------------------------------------- rows
def _reliability(record: dict) -> str:
    """The "reliable" cell: "yes" (with "exact ln Z" where it was enumerated), or "no: " and the
    gist of the first warning (they say when ln Z is likely underestimated, the NLL too good),
    the rest being in the trial's evaluation.json."""
    warnings = record.get("warnings") or []
    if not warnings:
        return "yes (exact ln Z)" if record.get("log_z_source") == "exact" else "yes"
    gist = warnings[0].split(" (")[0].split(": ")[0]
    return f"no: {gist}" + (f" (+{len(warnings) - 1} more)" if len(warnings) > 1 else "")


def _by_budget(evaluation: dict | None):
    """Whether a record is the sweep's own evaluation ([evaluation]'s chains, temperatures and
    seed, no bracket): a trial evaluated again later (a bracket) keeps the row the sweep's
    budget gave it, as the table compares the trials under one (a walkthrough)."""
    if evaluation is None:
        return None
    return lambda record: ("bracket" not in record and record.get("n_chains") ==
                           evaluation["chains"] and record.get("n_betas") == evaluation["betas"]
                           and record.get("seed") == evaluation["seed"])


def trial_row(trial_dir, grid_values: dict, evaluation: dict | None = None) -> dict:
    """One table row from the trial's run directory: its grid values, epochs, size, the NLLs
    of its current evaluation (the latest by the sweep's ``evaluation`` budget, where given)
    with the AIS effective sample size, time and status."""
    trial_dir = Path(trial_dir)
    status = read_status(trial_dir)
    row = {"trial": trial_dir.name, **{k: str(v) for k, v in grid_values.items()},
           "family": "", "epochs": "", "n_hidden": "", "valid NLL": "", "test NLL": "",
           "AIS ESS": "", "reliable": "", "seconds": "", "status": status["status"],
           "best": "", "_valid": math.inf}
    if row["status"] == "failed":
        row["status"] = "failed: " + (status.get("error", "").splitlines() or [""])[0][:80]
    if not runs.is_run(trial_dir):
        return row
    if row["status"] == "pending":  # a run without an outcome: interrupted
        row["status"] = "unfinished"
    history = runs.read_json(trial_dir / runs.HISTORY_FILE, default={"history": []})["history"]
    seconds = sum(epoch.get("seconds", 0.0) for epoch in history)
    row.update(family=runs.read_settings(trial_dir).family,
               epochs=str(history[-1]["epoch"] if history else 0))
    try:
        record, stale = runs.current_evaluation(trial_dir, accept=_by_budget(evaluation))
    except FileNotFoundError:
        record, stale = None, "not evaluated"
    if record is not None and stale is None:
        nll = record["nll"]
        row.update(n_hidden=str(record["n_hidden"]), **{
            f"{split} NLL": f"{nll[split]['mean']:.3f} +/- {nll[split]['stderr']:.3f}"
            for split in ("valid", "test") if split in nll})
        row["AIS ESS"] = f"{record['effective_sample_size']:.1f} / {record['n_chains']}"
        row["reliable"] = _reliability(record)
        row["_valid"] = nll.get("valid", {}).get("mean", math.inf)
        seconds += record.get("ais_seconds", 0.0)
    row["seconds"] = f"{seconds:.1f}"
    return row


def sweep_rows(directory) -> list[dict]:
    """Every trial's row, the best trial of each family by validation NLL marked ``*``."""
    marker = read_marker(directory)
    rows = [trial_row(Path(directory) / name, marker["grid_values"][name],
                      marker.get("evaluation")) for name in marker["trials"]]
    best = {}
    for row in rows:
        if row["status"].startswith("failed"):  # its numbers are an earlier run's
            continue
        if math.isfinite(row["_valid"]) and row["_valid"] < best.get(row["family"],
                                                                     (math.inf,))[0]:
            best[row["family"]] = (row["_valid"], row)
    for _, row in best.values():
        row["best"] = "*"
    return rows


def _numeric_rows(rows) -> list[dict]:
    """The rows for sweep.csv: a number per cell ("22.543 +/- 0.205" becomes the NLL and a
    column of its standard error; "17.6 / 20" the ESS and a column of the chains), so that
    pandas and spreadsheets read them as numbers."""
    split = []
    for row in rows:
        numeric = {}
        for column, value in row.items():
            if column.endswith(" NLL"):
                mean, _, stderr = value.partition(" +/- ")
                numeric.update({column: mean, f"{column} stderr": stderr})
            elif column == "AIS ESS":
                ess, _, chains = value.partition(" / ")
                numeric.update({column: ess, "AIS chains": chains})
            else:
                numeric[column] = value
        split.append(numeric)
    return split


LEGEND = ("NLL in nats (ln Z exact where the model is small enough to enumerate, else AIS; "
          "+/- one standard error); * best validation NLL of its family "
          "(read its 'reliable' cell: a ln Z too low makes an NLL look better); seconds: the "
          "training epochs' and the evaluation's AIS, not start-up or data loading (but the first "
          "epoch a worker runs includes loading, or on a new installation compiling, the "
          "sampling kernels: seconds, or tens); - : a grid setting the trial's family does not "
          "take.")
# The cell of a grid setting a trial does not have (its family does not take it).
NOT_TAKEN = "-"


def _columns(rows) -> list[str]:
    """Every row's columns, in their rows' order: a grid over families gives trials different
    grid keys (the RBM's trials have no beta), so the first row alone may lack some."""
    columns = []
    for row in rows:
        keys = [key for key in row if not key.startswith("_")]
        for index, key in enumerate(keys):
            if key not in columns:
                columns.insert(columns.index(keys[index - 1]) + 1 if index else 0, key)
    return columns or ["trial"]


# ---------------------------------------------------------------------------- writing
def markdown_table(rows) -> str:
    columns = _columns(rows)
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(row.get(c, NOT_TAKEN).replace("|", "/") for c in columns) + " |"
              for row in rows]
    return "\n".join(lines)


def html_table(rows, title: str) -> str:
    columns = _columns(rows)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(row.get(c, NOT_TAKEN))}</td>"
                                    for c in columns) + "</tr>" for row in rows)
    style = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
             "td,th{border:1px solid #999;padding:4px 10px;text-align:right}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title><style>{style}</style></head><body><h1>{html.escape(title)}</h1>"
            f"<p>{html.escape(LEGEND)}</p><table><tr>{head}</tr>{body}</table></body></html>")


def write_table(directory) -> tuple[Path, Path, Path]:
    """Write sweep.md, sweep.html and sweep.csv into the sweep directory; return the paths."""
    directory = Path(directory)
    rows = sweep_rows(directory)
    numeric = _numeric_rows(rows)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, _columns(numeric), extrasaction="ignore")
    writer.writeheader()
    writer.writerows(numeric)
    title = f"irbm sweep {directory.name}"
    paths = [directory / f"{TABLE_NAME}.{ext}" for ext in ("md", "html", "csv")]
    markdown = f"# {title}\n\n{LEGEND}\n\n{markdown_table(rows)}\n"
    texts = [markdown, html_table(rows, title), buffer.getvalue()]
    for path, text in zip(paths, texts):
        with atomic_write(path, "w") as stream:
            stream.write(text)
    return tuple(paths)
