"""Bracket the test NLL of committed models and write the table beside the paper's numbers.

    python scripts/bracket_results.py results/models/NAME [...] --out results/caltech101_brackets \
        [--evaluate] [--chains 300] [--max-seconds 3600] [--tolerance 1.0] [--threads 1]

Each NAME is a run directory (a snapshot of a training run: irbm-run.json, config.json,
history.json, model.safetensors). With ``--evaluate``, a model without a bracket of its current
parameters is bracketed first (`irbm evaluate NAME --bracket`, appended to its
evaluation.json); the table then reads every number from the models' evaluation.json, so
nothing in OUT.md or OUT.json is typed by hand, and each row names the command that re-derives
it on a fresh clone. Each bracket is judged again under the current rules
(`irbm.bracket.rejudge`) from the estimates its evaluation stored.
"""

from __future__ import annotations

import argparse
import inspect
import json
import shlex
import sys
from pathlib import Path

from paper_results import PAPER, command_of

from irbm import runs, workflows
from irbm._threads import hold_threads
from irbm.bracket import BracketUnfinished, rejudge
from irbm.evaluate import bracket_nll

SELECTION_FILE = "selection.json"  # scripts/record_selection.py


def latest_bracket(model_dir: Path) -> dict | None:
    """The latest evaluation of the directory's current model that holds a bracket."""
    cache = {}
    for record in reversed(runs.read_evaluations(model_dir)):
        if "bracket" in record and runs.staleness(model_dir, record, cache) is None:
            return record
    return None


def carried_cross_check(model_dir: Path, record: dict) -> dict | None:
    """The record's cross-check, else that of the nearest bracket it continues (through
    ``continues``, an index into the directory's evaluations) that has one."""
    records = runs.read_evaluations(model_dir)
    while not record["bracket"].get("cross_check") and record.get("continues") is not None:
        record = records[record["continues"]]
    return record["bracket"].get("cross_check")


# `irbm.evaluate.bracket_nll`'s first level when --betas is not given.
FIRST_LEVEL_BETAS = inspect.signature(bracket_nll).parameters["n_betas"].default


def evaluate_command(model_dir: Path, bracket: dict, record: dict,
                     records: list[dict] | None = None) -> str:
    """The command(s) that re-derive ``record`` (its bracket ``bracket``); a continued bracket
    (`irbm evaluate --continue`) is the command of the one it continues (in ``records``, the
    directory's evaluations) followed by the continuation."""
    if record.get("continues") is not None:
        earlier = records[record["continues"]]
        return (evaluate_command(model_dir, earlier["bracket"], earlier, records)
                + f"`, then `irbm evaluate {shlex.quote(str(model_dir))}"
                + (" --latest" if record.get("which", "latest") == "latest" else "")
                + " --bracket --continue"
                + (f" --max-seconds {bracket['max_seconds']:g}" if bracket.get("max_seconds")
                   else "")
                + (" --device cuda" if record.get("device", "cpu").startswith("cuda") else "")
                + _tempering_command(model_dir, record, bracket.get("cross_check"))
                + _floor_command(model_dir, record))
    bases = bracket.get("bases", ["data"])  # brackets made before both bases ran: data
    paths = bracket.get("paths", [])
    budget = bracket.get("max_seconds")  # not recorded by the first brackets
    levels = bracket.get("levels") or [{}]
    first = levels[0].get("n_betas", FIRST_LEVEL_BETAS)  # a bracket started further on
    # Brackets made before RAISE had a schedule of its own spaced it as AIS's.
    schedule = bracket.get("schedule", "tuned-forward")
    return (f"irbm evaluate {shlex.quote(str(model_dir))}"
            + (" --latest" if record.get("which", "latest") == "latest" else "")
            + f" --bracket --chains {bracket['n_chains']} --raise {bracket['n_rows']} "
            # Always said, so the command keeps its meaning whatever the default; brackets
            # stored before repeats were recorded ran one reverse chain per row.
            + f"--raise-repeats {bracket.get('raise_repeats', 1)} "
            + f"--tolerance {bracket['tolerance']:g} --seed {record.get('seed', 0)}"
            + (f" --max-seconds {budget:g}" if budget else "")
            + (f" --betas {first}" if first != FIRST_LEVEL_BETAS else "")
            + (f" --base {bases[0]}" if len(bases) == 1 else "")
            + (f" --ais-path {paths[0]}" if len(paths) == 1 else "")
            + (f" --schedule {schedule}" if schedule != "tuned" else "")
            # Records before devices were stored ran on the CPU.
            + (" --device cuda" if record.get("device", "cpu").startswith("cuda") else "")
            + _tempering_command(model_dir, record, bracket.get("cross_check"))
            + _floor_command(model_dir, record))


def _floor_command(model_dir, record) -> str:
    """The `irbm evaluate --floor-chains [--floor-descents]` that re-judged the record with a
    higher floor."""
    if not record.get("floor_chains"):
        return ""
    return (f"`, then `irbm evaluate {shlex.quote(str(model_dir))} "
            f"--floor-chains {record['floor_chains']}"
            + (f" --floor-descents {record['floor_descents']}"
               if record.get("floor_descents") else ""))


def _tempering_command(model_dir, record, check) -> str:
    """The cross-check: inside the bracket's command, or (a record re-judged after one) the
    separate `irbm evaluate --tempering` that added it, along its route."""
    if check is None or check.get("carried"):  # carried on from the bracket it continues
        return ""
    if not record.get("cross_checked"):
        return f" --tempering {check['n_sweeps']}"
    path, _, base = check["route"].partition(", ")
    route = f" --ais-path {path}" + (f" --base {base.removesuffix(' base')}" if base else "")
    return (f"`, then `irbm evaluate {shlex.quote(str(model_dir))} "
            f"--tempering {check['n_sweeps']}{route}")


def row_of(model_dir: Path) -> dict:
    record = latest_bracket(model_dir)
    if record is None:
        raise SystemExit(f"{model_dir} has no bracket of its current model: run with --evaluate")
    config = json.loads((model_dir / runs.CONFIG_FILE).read_text())
    settings = config["settings"]
    family, hidden = record["family"], record["n_hidden"]
    paper = PAPER.get(record["dataset"], {})
    reference = paper.get((family, hidden)) or paper.get((family, "learned"))
    # The stored estimates judged under the current rules (a rule change needs no resampling),
    # with the cross-check of the bracket it continues where --continue dropped it (before
    # irbm.evaluate.bracket_nll carried it on).
    bracket = rejudge({**record["bracket"],
                       "cross_check": carried_cross_check(model_dir, record)})
    # How a selected model was chosen (the paper's protocol): the row scripts/paper_results.py
    # wrote for the candidates, copied beside the model when it was selected.
    selection = runs.read_json(model_dir / SELECTION_FILE, {})
    if selection and (not isinstance(selection, dict)
                      or selection.get("model_sha256") != record["model_sha256"]):
        raise SystemExit(f"{model_dir / SELECTION_FILE} does not describe the directory's model "
                         f"(sha256 {record['model_sha256'][:12]}, epoch {record['epoch']}): "
                         "run scripts/record_selection.py again")
    return {"model": str(model_dir), "family": family, "display_name": record["display_name"],
            "n_hidden": hidden, "epoch": record["epoch"], "dataset": record["dataset"],
            "settings": {key: settings.get(key) for key in
                         ("optimizer", "lr", "l1", "profile", "seed")},
            "bracket": bracket, "paper": reference,
            "selection": selection.get("selection"),
            "train_command": _train_command(command_of(config, Path("runs") / model_dir.name),
                                            selection, model_dir.name, settings),
            "evaluate_command": evaluate_command(model_dir, record["bracket"], record,
                                                 runs.read_evaluations(model_dir))}


def _train_command(command: str, selection: dict, name: str, settings: dict) -> str:
    """The training command of a row; for a selected model, the run to the last candidate's
    epoch with snapshots 1,000 epochs apart (`scripts/train_snapshots.sh`), then the selection
    among them (`scripts/select_snapshots.sh`, among the running averages where the run kept
    one): `irbm train` alone made a different model (a walkthrough)."""
    if not selection:
        return command
    parts, kept, run = shlex.split(command)[2:], [], None  # without "irbm train"
    while parts:
        part = parts.pop(0)
        if part in ("--epochs", "--out"):
            value = parts.pop(0)
            run = value if part == "--out" else run
            continue
        kept.append(part)
    epochs = [candidate["epochs"] for candidate in selection["selection"]]
    every = min(b - a for a, b in zip(epochs, epochs[1:])) if len(epochs) > 1 else epochs[0]
    average = "AVERAGE=1 " if settings.get("average") else ""
    return (f"EVERY={every} EPOCHS={max(epochs)} bash scripts/train_snapshots.sh {run} "
            f"{shlex.join(kept)}`, then `{average}bash scripts/select_snapshots.sh {run} {name} "
            + " ".join(map(str, epochs)))


def _epochs(row: dict) -> str:
    """"4000", or "4000, selected by validation NLL among 1000: 143.7, ..."."""
    if not row.get("selection"):
        return str(row["epoch"])
    candidates = ", ".join(f"{candidate['epochs']}: {candidate['valid_nll']:.1f}"
                           for candidate in row["selection"])
    return f"{row['epoch']}, selected by validation NLL (AIS point estimates) among {candidates}"


def _cross_check(check: dict | None, conditional: dict | None = None) -> str:
    if check is None:
        return "-"
    passages = check.get("passages", check.get("round_trips"))  # the older records' name
    bdmc = check.get("bdmc")
    return (f"{check['nll']:.2f} +/- {check['stderr']:.2f} ({passages} passages, "
            f"{check['n_sweeps']} sweeps)"
            + ("" if bdmc is None else f"; BDMC <= {bdmc['nll']:.2f} +/- {bdmc['stderr']:.2f} "
               "if its samples are draws of the model")
            + ("" if not conditional or conditional.get("contradicted") else
               f", so [{conditional['optimistic']:.2f}, {conditional['conservative']:.2f}] on "
               "that condition (" + ("within" if conditional["within_tolerance"] else "not within")
               + " the tolerance; a bracket on a condition, never certified)")
            + ("; BDMC below the optimistic side: its samples miss mass"
               + ("" if conditional.get("certain_floor") else ", or AIS overshot")
               if conditional and conditional.get("contradicted") else ""))


def markdown(rows: list[dict]) -> str:
    header = ("| model | hidden | epochs | settings | optimistic NLL | conservative NLL | width "
              "| certified | temperatures | seconds | tempering NLL | paper NLL |")
    lines, notes = [header, "|" + "---|" * 12], []
    for row in rows:
        bracket, settings, marks = row["bracket"], row["settings"], ""
        for reason in bracket["reasons"]:
            notes.append(reason)
            marks += f"[^{len(notes)}]"
        paper = row["paper"]
        lines.append(
            f"| {row['display_name']} (`{Path(row['model']).name}`) | {row['n_hidden']} | "
            f"{_epochs(row)} | {settings['optimizer']}, lr {settings['lr']}, L1 {settings['l1']}"
            + (f", {settings['profile']} profile" if settings.get("profile") else "")
            + f", seed {settings['seed']} | {bracket['optimistic']:.2f} | "
            f"{bracket['conservative']:.2f} | {bracket['width']:.2f} | "
            f"{'yes' if bracket['certified'] else 'no'}{marks} | {bracket['n_betas']} | "
            f"{bracket['seconds']:.0f} | "
            f"{_cross_check(bracket.get('cross_check'), bracket.get('conditional'))} | "
            + ("-" if paper is None else f"{paper[0]:.2f} ({paper[2]} epochs)") + " |")
    lines.append("")
    lines.append("Bracket: the optimistic side pools every AIS run over the annealing paths, "
                 "bases and levels into one unbiased Z-hat weighted by chains x temperatures "
                 "(or the certain floor), the conservative side RAISE on random test rows with "
                 "the free energy as a control variate, both scaled to the whole test set; "
                 "temperatures doubled until the width is within the tolerance and neither "
                 "side moves by more than 0.2 nat or two standard errors "
                 "(`irbm.evaluate.bracket_nll`). A RAISE path whose NLL falls below the "
                 "optimistic side beyond its noise is left out (it bounds the NLL of its "
                 "annealing model, which misses mass the forward chains found); every row is "
                 "judged under the current rules from its stored estimates "
                 "(`irbm.bracket.rejudge`). Tempering NLL: the independent point estimate by "
                 "parallel tempering with Bennett's acceptance ratio along the optimistic "
                 "side's path (`irbm.tempering`), where it ran; BDMC: reverse annealing from "
                 "its samples of the model (`irbm.evaluate.bdmc_log_partition`), an upper "
                 "bound of the NLL as far as those samples are draws from the model. Seconds: "
                 "wall-clock of the bracket, one thread (this round: on a 2-core machine shared "
                 "with two or three other processes). Commands (the evaluations append to "
                 "the committed records under results/models/: to reproduce a row apart from "
                 "them, copy the model's directory and give the copy):")
    lines.append("")
    for row in rows:
        lines.append(f"- `{row['train_command']}`")
        lines.append(f"  then `{row['evaluate_command']}`")
    if notes:
        lines.append("")
        lines += [f"[^{number}]: not certified: {note}" for number, note in enumerate(notes, 1)]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="output path without suffix")
    parser.add_argument("--evaluate", action="store_true",
                        help="bracket models that have no bracket of their current parameters")
    parser.add_argument("--chains", type=int, default=300)
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--raise-repeats", type=int, default=None,
                        help="reverse chains per RAISE row (default: irbm evaluate's)")
    parser.add_argument("--max-seconds", type=float, default=3600.0)
    parser.add_argument("--tolerance", type=float, default=1.0)
    parser.add_argument("--tempering", type=int, default=None, metavar="SWEEPS",
                        help="with --evaluate: cross-check every bracket that has no "
                        "cross-check yet by parallel tempering (irbm evaluate --tempering)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    if args.raise_repeats is not None and args.raise_repeats < 1:
        parser.error(f"--raise-repeats must be >= 1 (reverse chains per row), got "
                     f"{args.raise_repeats}")
    hold_threads(args.threads)
    for model_dir in args.models:
        runs.require_run(model_dir)
        if args.evaluate and latest_bracket(model_dir) is None:
            print(f"bracketing {model_dir}", flush=True)
            try:
                workflows.evaluate_run(model_dir, n_chains=args.chains, which="latest",
                                       raise_rows=args.rows, raise_repeats=args.raise_repeats,
                                       bracket=True, tolerance=args.tolerance,
                                       max_seconds=args.max_seconds,
                                       tempering_sweeps=args.tempering,
                                       data_dir=args.data_dir, progress=False,
                                       echo=lambda line: print(line, flush=True))
            except BracketUnfinished as stopped:  # saved: the same command goes on
                print(f"{model_dir}: {stopped}; no table written", file=sys.stderr)
                return 3
        latest = latest_bracket(model_dir)
        if args.evaluate and args.tempering and latest and \
                not latest["bracket"].get("cross_check"):
            workflows.cross_check_run(model_dir, args.tempering, data_dir=args.data_dir,
                                      progress=False, echo=lambda line: print(line, flush=True))
    rows = [row_of(model_dir) for model_dir in args.models]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(runs.dumps_json(rows, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(rows))
    print(f"wrote {args.out.with_suffix('.md')} and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
