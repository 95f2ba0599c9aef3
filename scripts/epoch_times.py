"""CPU time per epoch of trained run directories, and the projected time of the paper's protocol.

    python scripts/epoch_times.py RUN_DIR [RUN_DIR ...] --out results/mnist_timing

For each `irbm train` run directory: the family, the range of hidden units over the timed
epochs, the epochs timed and their median seconds (the first epoch, which pays start-up costs,
is left out when there are more), the training threads ("?" where the history does not record
them), and the paper's epochs for that model with the projected hours at the measured rate
(training only; the paper's model selection adds an AIS run of 5,000 chains x 100,000
temperatures every 1,000 epochs, see benchmarks/bench_ais.py). Writes OUT.md and OUT.json,
generated from the run directories.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from paper_results import PAPER, command_of, describe


def paper_epochs(dataset: str, family: str, n_hidden: int) -> int | None:
    """Epochs of the paper's protocol for this model (Tables 1 and 2), None if not in them."""
    table = PAPER.get(dataset, {})
    entry = table.get((family, n_hidden)) or table.get((family, "learned"))
    return entry[2] if entry else None


def row_for(run_dir: Path) -> dict:
    """The timing row of one run directory (a dict of the table's columns)."""
    config = json.loads((run_dir / "config.json").read_text())
    epochs = json.loads((run_dir / "history.json").read_text())["history"]
    if not epochs:
        raise SystemExit(f"{run_dir} has no trained epoch yet")
    family, dataset, settings = describe(config)
    timed = epochs[1:] if len(epochs) > 1 else epochs
    seconds = statistics.median(entry["seconds"] for entry in timed)
    sizes = [entry["n_hidden"] for entry in timed]
    threads = {entry.get("threads") for entry in timed}
    total = paper_epochs(dataset, family, settings.get("n_hidden") or sizes[-1])
    return {"run": str(run_dir), "command": command_of(config, run_dir), "family": family,
            "dataset": dataset, "n_hidden": [min(sizes), max(sizes)], "epochs": len(timed),
            "seconds_per_epoch": seconds,
            "threads": threads.pop() if len(threads) == 1 and None not in threads else None,
            "paper_epochs": total, "projected_hours": seconds * total / 3600 if total else None}


def markdown(rows: list[dict]) -> str:
    """The table (Markdown) and the commands of its runs."""
    lines = ["| model | dataset | hidden | epochs timed | seconds / epoch | threads | paper epochs "
             "| projected hours |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        projected = "-" if row["projected_hours"] is None else f"{row['projected_hours']:.1f}"
        low, high = row["n_hidden"]
        lines.append(f"| {row['family']} | {row['dataset']} | "
                     f"{low if low == high else f'{low}-{high}'} | "
                     f"{row['epochs']} | {row['seconds_per_epoch']:.1f} | {row['threads'] or '?'} "
                     f"| {row['paper_epochs'] or '-'} | {projected} |")
    lines.append("\nCommands:\n")
    lines += [f"- `{row['command']}`" for row in rows]
    return "\n".join(lines) + "\n"


def main(argv=None):
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="writes OUT.md and OUT.json")
    args = parser.parse_args(argv)
    rows = [row_for(run) for run in args.runs]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(markdown(rows))
    sys.stdout.write(markdown(rows))


if __name__ == "__main__":
    main()
