"""Record beside a selected model how it was selected (the paper's protocol).

    python scripts/record_selection.py results/caltech101_rbm100_selection.json \
        results/models/rbm100-adagrad-selected

SELECTION is the JSON scripts/paper_results.py wrote for one row of comma-joined snapshots: its
candidates' validation NLL. MODEL is the directory the selected snapshot was copied to; the
record (MODEL/selection.json) carries that model's parameter digest, so that
scripts/bracket_results.py refuses it once the directory holds another model.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from paper_results import model_digest

from irbm import runs

FILE = "selection.json"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("selection", type=Path, help="scripts/paper_results.py's OUT.json")
    parser.add_argument("model", type=Path, help="the directory holding the selected model")
    args = parser.parse_args(argv)
    rows = runs.read_json(args.selection)
    if len(rows) != 1 or not rows[0].get("selection"):
        raise SystemExit(f"{args.selection} must hold one row selected among snapshots")
    row = rows[0]
    try:
        model, source = runs.run_model(runs.require_run(args.model), which="latest")
    except (FileNotFoundError, ValueError) as error:
        raise SystemExit(str(error)) from None
    if source.epoch != row["epochs"]:
        raise SystemExit(f"{args.model} holds the model of epoch {source.epoch}, but "
                         f"{args.selection} selected epoch {row['epochs']}")
    if model_digest(model) != row["evaluation"]["model_digest"]:
        raise SystemExit(f"{args.model} holds another model than the one {args.selection} "
                         f"selected ({row['run']}): copy that snapshot there first")
    runs.write_json(args.model / FILE, {"selection": row["selection"], "epochs": row["epochs"],
                                       "paper_epochs": row["paper_epochs"],
                                       "budget": row["evaluation"]["budget"],
                                       "model_sha256": source.sha256})
    print(f"wrote {args.model / FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
