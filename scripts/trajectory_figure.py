"""The iRBM's hidden-layer size and test NLL over training, for several training rules.

    python scripts/trajectory_figure.py LABEL=RUN_DIR [LABEL=RUN_DIR ...] \
        --out results/caltech101_irbm_trajectory [--chains 100] [--betas 2000]

Each RUN_DIR is a run trained by scripts/train_snapshots.sh (RUN/snapshots/EPOCH/). The size
comes from the run's per-epoch history; the NLL of every snapshot from AIS on each of the
family's annealing paths (pilot-tuned schedules, data base from the training set), keeping the
highest ln Z: an optimistic point estimate at a modest budget, enough to see swings of several
nats, not a bracket (`irbm evaluate --bracket` gives those for the rows of the tables). Results
are cached per snapshot in OUT.json, so a rerun evaluates only new snapshots. Writes OUT.png and
OUT.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from irbm import runs  # noqa: E402
from irbm._threads import apply_threads  # noqa: E402
from irbm.ais import estimate_log_partition, tuned_betas  # noqa: E402
from irbm.evaluate import free_energies  # noqa: E402


def snapshot_nll(snapshot: Path, n_chains: int, n_betas: int) -> dict:
    dataset = runs.load_run_dataset(snapshot)
    model, source = runs.run_model(snapshot, which="latest")
    train, test = torch.as_tensor(dataset.train), torch.as_tensor(dataset.test)
    log_z = {}
    for path in model.ais_paths:
        betas = tuned_betas(model, n_betas, base="data", data=train, path=path, seed=1)
        log_z[path] = estimate_log_partition(model, n_chains, betas=betas, base="data",
                                             data=train, path=path, seed=0,
                                             progress=False).log_z
    best = max(log_z.values())
    return {"epoch": source.epoch, "n_hidden": model.n_hidden, "sha256": source.sha256,
            "log_z": log_z, "nll": float(free_energies(model, test).mean()) + best}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="LABEL=RUN_DIR")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--chains", type=int, default=100)
    parser.add_argument("--betas", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    apply_threads(args.threads)
    cache_path = args.out.with_suffix(".json")
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    figure, (size_axes, nll_axes) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    for item in args.runs:
        label, run = item.split("=", 1)
        run = Path(run)
        history = json.loads((run / runs.HISTORY_FILE).read_text())["history"]
        size_axes.plot([r["epoch"] for r in history], [r["n_hidden"] for r in history],
                       label=label)
        points = cache.setdefault(label, {})
        for snapshot in sorted((run / "snapshots").iterdir(), key=lambda p: int(p.name)):
            if snapshot.name not in points:
                points[snapshot.name] = snapshot_nll(snapshot, args.chains, args.betas)
                print(f"{label} epoch {snapshot.name}: {points[snapshot.name]['nll']:.2f}",
                      flush=True)
                cache_path.write_text(json.dumps(cache, indent=1) + "\n")
        epochs = sorted(points, key=int)
        nll_axes.plot([int(e) for e in epochs], [points[e]["nll"] for e in epochs], "o-",
                      label=label)
    size_axes.set_ylabel("hidden units")
    nll_axes.set_ylabel("test NLL (AIS, best path), nats")
    nll_axes.set_xlabel("epoch")
    for axes in (size_axes, nll_axes):
        axes.grid(alpha=0.3)
        axes.legend()
    figure.suptitle("CalTech101 iRBM: size and test NLL over training")
    figure.tight_layout()
    figure.savefig(args.out.with_suffix(".png"), dpi=100)
    cache_path.write_text(json.dumps(cache, indent=1) + "\n")
    print(f"wrote {args.out.with_suffix('.png')} and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
