"""Results tables laid out as the paper's, as Markdown and a self-contained HTML page (NLLs +/-
one standard error, where the paper's +/- is 1.96 of them).

A report directory is marked by ``irbm-report.json``, so writing a report never overwrites a
directory that holds anything else.
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path

from . import checkpoint as ckpt
from . import runs
from ._io import atomic_write
from .bracket import level_estimates, pool_estimates, width_text
from .datasets import dataset_name
from .evaluate import describe_bdmc
from .models import FAMILIES, family_class
from .profiles import GROWTH_SETTINGS
from .settings import SPECS, Settings
from .training import AVERAGE_DIR

COLUMNS = ("Run", "Model", "Size", "Epoch", "Settings", "ln Z-hat", "ln(Z-hat -/+ 3 sigma)",
           "AIS (base, chains x temperatures, ESS, path)", "Avg. test NLL", "RAISE test NLL",
           "Test NLL bracket")
DATASET = "Dataset"  # a column shown only when the rows come from more than one dataset
NOTE = "Note"  # a column shown only when a row is stale
WARNINGS = "Warnings"  # footnote marks, a column shown only when a row has warnings
MARKER_FILE = "irbm-report.json"
DIGEST_SHOWN = 12  # hex digits of a data sha256 in a label, as in irbm.runs' messages
REPORT_FORMAT, REPORT_VERSION = "irbm-report", 1
DEFAULT_DIRECTORY = "report"


def _number(value, digits=2) -> str:
    return f"{value:.{digits}f}" if value == value and abs(value) != float("inf") else str(value)


def _model_name(record: dict) -> str:
    family = record["family"]
    return record.get("display_name") or getattr(FAMILIES.get(family), "display_name", family)


def best_evaluation(run_dir) -> tuple[dict, str | None, list[dict]]:
    """(the evaluation of the run's current model with an exact ln Z, else with the highest
    ln Z, None, the other evaluations of that same model in file order), or (the latest
    evaluation, why it is stale, []) when none is of the current model. It heads the row for
    its diagnostics; the row's ln Z is the exact one, or pools them all
    (`pooled_log_partition`)."""
    record, stale = runs.current_evaluation(run_dir)
    if stale:
        return record, stale, []
    cache, current = {}, {}
    for r in runs.read_evaluations(run_dir):
        # A re-judged record (a cross-check appended) repeats its AIS run: the later one
        # stands for it, in its place in the file's order.
        if runs.staleness(run_dir, r, cache) is None:
            current.pop(r["log_z"], None)
            current[r["log_z"]] = r
    # An enumerated ln Z heads its row (the latest such); else the highest AIS estimate does,
    # among records no later one holds (a bracket its --continue extended is superseded: its
    # diagnostics and advice to continue headed the row after the continuation).
    exact = [r for r in current.values() if r.get("log_z_source") == "exact"]
    best = exact[-1] if exact else max(_distinct_runs(list(current.values())),
                                       key=lambda r: r["log_z"])
    # Only evaluations of the model the best one describes (a run's "best" and "latest"
    # models are both current, and their ln Z must not be pooled).
    same = [r for r in current.values()
            if r is not best and r.get("model_sha256") == best.get("model_sha256")]
    return best, None, same


def _estimates(record: dict) -> list[tuple[float, float, float]]:
    """(ln Z-hat, weight, sigma / Z-hat) of each AIS run behind an evaluation: a bracket's runs
    of every level and path (its ln Z may be the certain floor instead), else its one run."""
    return level_estimates(record.get("bracket", {}).get("levels", [])) or [
        (record["log_z"], record["n_chains"] * record["n_betas"],
         math.expm1(record["log_z_high"] - record["log_z"]) / 3)]


def _runs_of(record: dict) -> frozenset:
    """The AIS runs behind an evaluation, each as (temperatures, route, ln Z-hat)."""
    levels = record.get("bracket", {}).get("levels", [])
    return frozenset((level["n_betas"], route, run.get("log_z")) for level in levels
                     for route, run in level.get("ais", {}).items()) or frozenset(
        [(record.get("n_betas"), record.get("path"), record["log_z"])])


def _distinct_runs(records: list[dict]) -> list[dict]:
    """``records`` without those whose AIS runs another record holds too: a continued bracket
    carries its stored levels, which pooled with their first record would count twice (a
    walkthrough found a row's NLL outside its own certified bracket so)."""
    runs_of = [_runs_of(record) for record in records]
    return [record for index, record in enumerate(records)
            if not any(runs_of[index] < other or (runs_of[index] == other and later > index)
                       for later, other in enumerate(runs_of) if later != index)]


def pooled_log_partition(records: list[dict]) -> tuple[float, float, float]:
    """(ln Z-hat, ln(Z-hat - 3 sigma), ln(Z-hat + 3 sigma)) of one Z-hat pooled over the AIS
    runs of ``records`` (`irbm.bracket.pool_estimates`, weighted by chains x temperatures), the
    exact ln Z three times where one was enumerated, or, when the certain floor (the highest
    ``log_z_floor``) is higher, (floor, floor, inf): ln Z is at least the floor, with no upper
    limit known.

    Every AIS Z-hat is unbiased, so the pool is too, and its log is one stochastic lower bound
    of ln Z. The highest of m evaluations is not: it overshoots by k nats with probability up
    to m e^-k."""
    exact = [record["log_z"] for record in records if record.get("log_z_source") == "exact"]
    if exact:  # enumerated: nothing to pool
        return exact[-1], exact[-1], exact[-1]
    log_z, low, high = pool_estimates([estimate for record in _distinct_runs(records)
                                       for estimate in _estimates(record)])
    floor = max(record.get("log_z_floor", -math.inf) for record in records)
    return (floor, floor, math.inf) if floor > log_z else (log_z, low, high)


def _latest_bracket(run_dir, record, others) -> dict | None:
    """The latest bracket (in the file's order) among the evaluations of the row's model (None:
    never bracketed)."""
    in_order = [r for r in runs.read_evaluations(run_dir)
                if any(r is kept or r == kept for kept in (record, *others))]
    brackets = [r["bracket"] for r in in_order if "bracket" in r]
    return brackets[-1] if brackets else None


def _bracket_cell(bracket: dict | None) -> str:
    if bracket is None:
        return "-"
    verdict = "certified" if bracket["certified"] else "not certified"
    width = bracket["width"]
    check = bracket.get("cross_check")  # the independent estimate the footnotes judge it by
    return (f"[{_number(bracket['optimistic'])}, {_number(bracket['conservative'])}] "
            + (width_text(width) if math.isfinite(width) else f"width {width}")
            + f", {verdict}"
            + ("" if check is None else
               f"; tempering {_number(check['nll'])} +/- {_number(check['stderr'])}"
               # checks stored before passages were counted have none to show
               + (f" ({check['passages']} passages)" if "passages" in check else "")
               + describe_bdmc(check)))


def _raise_cell(upper: dict | None, bracket: dict | None) -> str:
    """RAISE's test NLL: the evaluation's own (--raise), else its bracket's conservative end,
    which is RAISE's estimate at the bracket's last level ("-": neither ran)."""
    if upper is not None:
        return (f"{_number(upper['mean'])} +/- {_number(upper['stderr'])} "
                f"({upper['n_rows']} rows)")
    if bracket is None or not math.isfinite(bracket["conservative"]):
        return "-"
    return (f"{_number(bracket['conservative'])} +/- {_number(bracket['conservative_stderr'])} "
            f"({bracket['n_rows']} rows, bracket)")


def _nll_log_z(record: dict) -> float:
    """The ln Z the record's NLLs were computed with (its AIS ln Z in records made before the
    floor could replace it)."""
    return record.get("nll_log_z", record["log_z"])


def _floor_note(log_z: float, records: list[dict]) -> list[str]:
    """A note when the row's ln Z is the certain floor (`pooled_log_partition`), not AIS's."""
    floor = max(record.get("log_z_floor", -math.inf) for record in records)
    if not math.isfinite(floor) or log_z != floor:
        return []
    return [f"ln Z-hat is the certain floor {_number(floor)} (ln sum exp(-F) over the distinct "
            "vectors Gibbs chains from the data reached): the AIS estimate lies below it, and "
            "ln Z cannot; the NLL uses the floor"]


def _pool_note(record: dict, others: list[dict]) -> list[str]:
    """A note, when the row's heading evaluation raised warnings, on the pooled evaluations of
    the same model that raised none (what its warning advised: another path or base)."""
    clean = [r for r in others if not r.get("warnings")]
    if not record.get("warnings") or not clean:
        return []
    listed = "; ".join(f"{r.get('path', 'linear').split(':')[0]} path, {r.get('base')} base, "
                      f"ESS {r.get('effective_sample_size', float('nan')):.0f} of "
                      f"{r.get('n_chains')}" for r in clean)
    return [f"the row's ln Z and NLL also pool {len(clean)} evaluation(s) of this model that "
            f"raised no warning ({listed}): the warnings above are the heading evaluation's, "
            "the one with the highest ln Z"]


def _heading_warnings(record: dict, others: list[dict]) -> list[str]:
    """The heading evaluation's warnings; where the row pools others, each says it is that
    evaluation's alone (its "-inf" bound beside the pool's finite interval read as a
    contradiction to a user)."""
    warnings = list(record.get("warnings", []))
    if not others or record.get("log_z_source") == "exact":
        return warnings
    which = (f"of the heading evaluation alone ({record.get('path', 'linear').split(':')[0]} "
             f"path, {record.get('base')} base, {record.get('n_chains')} x "
             f"{record.get('n_betas')}; the row pools {len(others) + 1})")
    return [f"{warning} [{which}]" for warning in warnings]


# Settings the Settings cell words itself (or that do not change the model: the Gibbs stream,
# the threads, the validation during training).
_WORDED = {"family", "dataset", "n_hidden", "epochs", "optimizer", "lr", "l1", "l2",
           "visible_init", "train_size", "valid_size", "test_size", "random_permutation",
           "regrouping", "growth", "regularization", "epsilon_placement", "init_model",
           "random_stream", "average", "profile"}


def _other_settings(settings, run_dir: Path, model_file) -> str:
    """", name value" for every other setting of the run that is not its profile's default
    (two runs of a different batch size, CD-k or seed read the same without), the profile when
    not irbm's, and what an averaged run's parameters are."""
    defaults = Settings(family=settings.family, dataset=settings.dataset,
                        profile=settings.profile)
    # A model of a fixed size takes no growth rule (older runs recorded one all the same).
    inert = () if family_class(settings.family).resizable else GROWTH_SETTINGS
    text = "" if settings.profile == SPECS["profile"].default else f", {settings.profile} profile"
    text += "".join(f", {name} {value}" for name, spec in SPECS.items()
                    if spec.group in ("model", "training", "data") and name not in _WORDED
                    and not spec.family_option and name not in inert
                    and (value := getattr(settings, name)) != getattr(defaults, name))
    if _averaged(run_dir, model_file):
        text += f", the parameters' moving average over about {settings.average} updates"
    return text


def _averaged(run_dir: Path, model_file) -> bool:
    """Whether the run's model is a running average of parameters: its checkpoint says so
    (RUN/average/, or a copy of one made into a run of its own)."""
    try:
        return bool(ckpt.read_checkpoint(run_dir / model_file)[1].get("averaged"))
    except (ckpt.CheckpointError, TypeError):  # a record naming no file: not an average
        return run_dir.name == AVERAGE_DIR and runs.is_run(run_dir.parent)


def run_row(run_dir, *, allow_stale=False) -> dict:
    """The evaluations of the run's current model as table cells: ln Z and the NLL pooled over
    them all, the AIS diagnostics of the one with the highest ln Z (the others listed); a run
    evaluated only with an older model is refused, or with ``allow_stale`` marked in the
    "Note" cell."""
    run_dir = runs.require_run(run_dir)
    record, stale, others = best_evaluation(run_dir)
    if stale and not allow_stale:
        raise ValueError(f"{run_dir / runs.EVALUATION_FILE} is {stale}: run `irbm evaluate "
                         f"{run_dir}` again, or pass --allow-stale (Python: allow_stale=True) "
                         "to report it marked stale")
    split = "test" if "test" in record["nll"] else next(iter(record["nll"]), None)
    nll = record["nll"].get(split) if split else None
    log_z, log_z_low, log_z_high = pooled_log_partition([record, *others])
    settings = runs.read_settings(run_dir)
    ess = record.get("effective_sample_size")
    ais = f"{record.get('base')}, {record.get('n_chains')} x {record.get('n_betas')}" + (
        f", ESS {ess:.0f}" if ess is not None else "")
    # Records made before paths existed used the linear path.
    ais += ", " + record.get("path", "linear").split(":")[0] + " path"
    bracket = _latest_bracket(run_dir, record, others)
    if record.get("warnings"):
        # A certified bracket judged its own AIS runs: the point estimate's flag is its alone.
        ais += (" (unreliable alone; this row's bracket is certified)"
                if bracket is not None and bracket["certified"] else " (unreliable)")
    if record.get("log_z_source") == "exact":
        ais += "; not used: ln Z exact (enumerated)" + (
            f", {len(others)} other evaluation(s) by AIS beside it" if others else "")
    elif others:
        ais += "; " + _others_text(record, others)
    upper = record.get("raise")
    return {
        "run": str(run_dir), "dataset": dataset_name(record.get("dataset", "")),
        "data_sha256": runs.recorded_data(run_dir).get("sha256"),
        "Run": str(run_dir), DATASET: dataset_name(record.get("dataset", "")),
        "Model": _model_name(record),
        "Size": str(record["n_hidden"]),
        # A stale row's cells describe the model evaluated then, not the run's current one.
        "Epoch": f"{record.get('epoch')} ({record.get('which', 'latest')}"
                 + ("; stale, see Note" if stale else "") + ")",
        "Settings": f"{settings.optimizer} lr {settings.lr}, L1 {settings.l1}, L2 {settings.l2}"
                    # the model's own options (two trials of a beta grid read the same without)
                    + "".join(f", {name} {value}" for name, value
                              in settings.model_options().items()
                              if name != "n_hidden" and value is not None)
                    + (f", visible biases from the {settings.visible_init}"
                       if settings.visible_init != "zeros" else "")
                    + (f", from {Path(settings.init_model).name}"
                       if settings.init_model is not None else "")
                    + "".join(f", {split} rows {size}" for split, size in
                              (("train", settings.train_size), ("valid", settings.valid_size),
                               ("test", settings.test_size)) if size is not None)
                    + (", random permutation" if settings.random_permutation else "")
                    + (f" ({settings.regrouping} regrouping)"
                       if settings.regrouping != "all" else "")
                    + (f", {settings.growth} growth" if settings.growth != "any" else "")
                    + (f", {settings.regularization} regularization"
                       if settings.regularization != "proximal" else "")
                    + (f", epsilon {settings.epsilon_placement} the root"
                       if settings.epsilon_placement != "outside" else "")
                    + _other_settings(settings, run_dir, record.get("model_file")),
        "AIS (base, chains x temperatures, ESS, path)": ais,
        "RAISE test NLL": _raise_cell(upper, bracket),
        "ln Z-hat": _number(log_z),
        # The certain floor is a lower limit with no upper one, not an interval of Z-hat.
        "ln(Z-hat -/+ 3 sigma)": (f">= {_number(log_z)} (the certain floor)"
                                  if math.isinf(log_z_high) and log_z_low == log_z else
                                  f"[{_number(log_z_low)}, {_number(log_z_high)}]"),
        # mean F + ln Z: the record's NLL moved from the ln Z it used to the pool's.
        "Avg. test NLL": (f"{_number(nll['mean'] - _nll_log_z(record) + log_z)} +/- "
                          f"{_number(nll['stderr'])}"
                          if nll else "n/a") + ("" if split in ("test", None) else f" ({split})"),
        "Test NLL bracket": _bracket_cell(bracket),
        NOTE: (stale or "").split(" (")[0],
        "record": record,
        "footnotes": _heading_warnings(record, others) + _pool_note(record, others)
        + _floor_note(log_z, [record, *others]) + (
            [] if bracket is None else [f"bracket not certified: {reason}"
                                        for reason in bracket["reasons"]]),
    }


def _others_text(record: dict, others: list[dict]) -> str:
    """What the AIS cell says of the evaluations of the same model beside the heading one."""
    # A record whose runs a later one holds (a bracket --continue extended, or one a
    # cross-check re-judged) cannot head the row even with a higher ln Z: said, or "the
    # highest" reads false beside it.
    distinct = _distinct_runs([record, *others])
    held = [r for r in others if not any(r is kept for kept in distinct)]
    return (f"the highest ln Z of {len(others) + 1} evaluations"
            + (", those whose runs a later record holds aside" if held else "") + " (also ran: "
            + "; ".join(f"{_number(r['log_z'])} {r.get('path', 'linear').split(':')[0]}"
                        + (", its runs held by a later record (continued or re-judged)"
                           if any(r is h for h in held) else "") for r in others)
            + "; ln Z and the NLL pool their distinct AIS runs)")


def _tell_data_apart(rows) -> list[dict]:
    """The rows, where one dataset name stands for different data (files of one name in two
    directories) with the start of each row's data sha256 after it, so that the Dataset column
    and the header never show two datasets as one. A run that recorded no sha256 (made before
    it was) differs from none: it is labelled "data not recorded" only beside such rows."""
    digests = {}
    for row in rows:
        if row["data_sha256"]:
            digests.setdefault(row["dataset"], set()).add(row["data_sha256"])
    labelled = []
    for row in rows:
        if len(digests.get(row["dataset"], ())) > 1:
            shown = (f"sha256 {row['data_sha256'][:DIGEST_SHOWN]}" if row["data_sha256"] else
                     "not recorded")
            row = {**row, "dataset": f"{row['dataset']} (data {shown})",
                   DATASET: f"{row['dataset']} (data {shown})"}
        labelled.append(row)
    return labelled


def _columns(rows) -> tuple:
    several = len({row[DATASET] for row in rows}) > 1
    return COLUMNS[:1] + ((DATASET,) if several else ()) + COLUMNS[1:] + (
        (NOTE,) if any(row[NOTE] for row in rows) else ()) + (
        (WARNINGS,) if any(row["footnotes"] for row in rows) else ())


def _footnotes(rows) -> list[str]:
    """Every row's warnings, numbered in order; sets each row's WARNINGS cell to its marks."""
    notes = []
    for row in rows:
        marks = []
        for footnote in row["footnotes"]:
            notes.append(footnote)
            marks.append(f"[^{len(notes)}]")
        row[WARNINGS] = " ".join(marks)
    return notes


def markdown_table(rows) -> str:
    """The table, each row's warnings as numbered footnotes under it (a paragraph in a cell
    makes the table unreadable)."""
    columns, notes = _columns(rows), _footnotes(rows)
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(row[c] for c in columns) + " |" for row in rows]
    if notes:
        lines.append("")
        lines += [f"[^{number}]: {note}" for number, note in enumerate(notes, 1)]
    return "\n".join(lines)


def _embedded_image(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(path.stem)}">'
            f"<figcaption>{html.escape(path.stem.replace('_', ' '))}</figcaption></figure>")


def html_page(rows, run_dirs) -> str:
    columns, notes = _columns(rows), _footnotes(rows)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(row[c])}</td>" for c in columns)
                   + "</tr>" for row in rows)
    sections = []
    for run_dir, row in zip(run_dirs, rows):
        images = sorted((Path(run_dir) / "figures").glob("*.png"))
        sections.append(f"<h2>{html.escape(row['Model'])} ({html.escape(row['Size'])} units): "
                        f"{html.escape(str(run_dir))}</h2>"
                        + "".join(_embedded_image(p) for p in images))
    style = ("body{font-family:sans-serif;max-width:1100px;margin:auto}table{border-collapse:"
             "collapse}td,th{border:1px solid #999;padding:4px 10px;text-align:right}"
             "figure{display:inline-block;margin:8px}img{max-width:500px}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>irbm report</title>"
            f"<style>{style}</style></head><body><h1>irbm report</h1>"
            f"<p>ln Z estimated by annealed importance sampling; NLL in nats, +/- one standard "
            f"error over the test set (ln Z-hat taken as exact; the paper's +/- is 1.96 standard "
            f"errors).</p>"
            f"<table><tr>{head}</tr>{body}</table>"
            + "".join(f"<p>[^{number}]: {html.escape(note)}</p>"
                      for number, note in enumerate(notes, 1))
            + f"{''.join(sections)}</body></html>")


def prepare_directory(out_dir) -> Path:
    """Make ``out_dir`` a report directory: refuse a file, or a non-empty directory that is not
    a report; create it (with its marker) otherwise."""
    out_dir = Path(out_dir)
    marker = out_dir / MARKER_FILE
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"report directory {out_dir} is a file: give a new directory (--out)")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not marker.is_file():
        raise ValueError(f"{out_dir} is not empty and not an irbm report directory (no "
                         f"{MARKER_FILE}); refusing to write the report into it: pass another "
                         "--out")
    runs.check_writable(out_dir)
    if not marker.is_file():
        runs.write_json(marker, {"format": REPORT_FORMAT, "version": REPORT_VERSION})
    return out_dir


def write_report(run_dirs, out_dir=None, *, allow_stale=False) -> tuple[Path, Path]:
    """Write report.md and report.html for evaluated runs into ``out_dir`` (default:
    ``report/`` in the current directory) and return both paths.

    Each run shows its current model's evaluations pooled (`run_row`) and its latest
    bracket; see `run_row` for stale ones."""
    # One directory as well as several (a str was read letter by letter).
    run_dirs = [Path(run_dirs)] if isinstance(run_dirs, (str, Path)) else [Path(r) for r in
                                                                          run_dirs]
    rows = _tell_data_apart([run_row(r, allow_stale=allow_stale) for r in run_dirs])
    out_dir = prepare_directory(Path.cwd() / DEFAULT_DIRECTORY if out_dir is None else out_dir)
    datasets = sorted({row["dataset"] for row in rows})
    markdown = (f"# irbm report\n\nDataset: {', '.join(datasets)}. ln Z by AIS; average NLL "
                "+/- one standard error over the test set (the paper's +/- is 1.96 standard "
                f"errors).\n\n{markdown_table(rows)}\n")
    markdown_path, html_path = out_dir / "report.md", out_dir / "report.html"
    for path, text in ((markdown_path, markdown), (html_path, html_page(rows, run_dirs))):
        with atomic_write(path, "w") as stream:
            stream.write(text)
    return markdown_path, html_path
