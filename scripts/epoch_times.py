"""CPU time per epoch of trained run directories, and the projected time of the paper's protocol.

    python scripts/epoch_times.py RUN_DIR [RUN_DIR ...] --out results/mnist_timing

For each `irbm train` run directory: the family, hidden units, epochs trained, the median
seconds per epoch (the first epoch, which pays start-up costs, is left out when there are
more), the training threads, and the paper's epochs for that model with the projected hours at
the measured rate (training only; the paper's model selection adds an AIS run of 5,000 chains x
100,000 temperatures every 1,000 epochs, see benchmarks/bench_ais.py). Writes OUT.md and OUT.json,
generated from the run directories.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from paper_results import command_of, describe

# Epochs of the paper's protocol (Tables 1 and 2), keyed by (dataset, family).
PAPER_EPOCHS = {("mnist", "rbm"): 5000, ("mnist", "orbm"): 500, ("mnist", "irbm"): 3000,
                ("caltech101", "rbm"): 5000, ("caltech101", "orbm"): 5000,
                ("caltech101", "irbm"): 4000}


def row_for(run_dir: Path) -> dict:
    config = json.loads((run_dir / "config.json").read_text())
    epochs = json.loads((run_dir / "history.json").read_text())["history"]
    if not epochs:
        raise SystemExit(f"{run_dir} has no trained epoch yet")
    family, dataset, settings = describe(config)
    timed = epochs[1:] if len(epochs) > 1 else epochs
    seconds = statistics.median(entry["seconds"] for entry in timed)
    paper_epochs = PAPER_EPOCHS.get((dataset, family))
    return {"run": str(run_dir), "command": command_of(config), "family": family,
            "dataset": dataset, "n_hidden": epochs[-1]["n_hidden"], "epochs": len(epochs),
            "seconds_per_epoch": seconds,
            "threads": max(entry.get("threads", 1) for entry in timed),
            "paper_epochs": paper_epochs,
            "projected_hours": seconds * paper_epochs / 3600 if paper_epochs else None}


def markdown(rows: list[dict]) -> str:
    lines = ["| model | dataset | hidden | epochs timed | seconds / epoch | threads | paper epochs "
             "| projected hours |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        projected = "-" if row["projected_hours"] is None else f"{row['projected_hours']:.1f}"
        lines.append(f"| {row['family']} | {row['dataset']} | {row['n_hidden']} | "
                     f"{row['epochs']} | {row['seconds_per_epoch']:.1f} | {row['threads']} | "
                     f"{row['paper_epochs'] or '-'} | {projected} |")
    lines.append("\nCommands:\n")
    lines += [f"- `{row['command']}`" for row in rows]
    return "\n".join(lines) + "\n"


def main(argv=None):
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
