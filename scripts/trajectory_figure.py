"""The iRBM's hidden-layer size and test NLL over training, for several training rules and seeds.

    python scripts/trajectory_figure.py RULE/SEED=RUN_DIR [RULE/SEED=RUN_DIR ...] \
        --out results/caltech101_irbm_trajectory [--chains 100] [--betas 2000] [--every 50]

Each RUN_DIR is a run trained by scripts/train_snapshots.sh (RUN/snapshots/EPOCH/); RUN_DIR@average
takes each snapshot's running average of the parameters instead (RUN/snapshots/EPOCH/average/,
from ``irbm train --average``); the runs of
one RULE share a colour, each SEED its own line style. The size
comes from the run's per-epoch history; the NLL of every snapshot from AIS on each of the
family's annealing paths (pilot-tuned schedules, data base from the training set), keeping the
highest ln Z: an optimistic point estimate at a modest budget, enough to see swings of several
nats, not a bracket (`irbm evaluate --bracket` gives those for the rows of the tables). Results
are cached per snapshot in OUT.json, so a rerun evaluates only new snapshots (``--every N``:
only epochs that are multiples of N; ``--until E``: none after epoch E, ``--since E``: none
before; a run without snapshots
yet is skipped). Writes OUT.png, OUT.json and OUT.md, a table per run of
the NLL and size from epoch 500 on: their mean, range and the largest move between neighbouring
snapshots, which is what "settles" means here.
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
from irbm._threads import hold_threads  # noqa: E402
from irbm.ais import estimate_log_partition, tuned_betas  # noqa: E402
from irbm.evaluate import free_energies  # noqa: E402


def snapshot_log_z(model, train, n_chains: int, n_betas: int) -> dict:
    """{path: ln Z} by AIS on each of the family's paths: n_chains chains, n_betas
    temperatures tuned on a pilot run, base from the training rows (N, n_visible)."""
    log_z = {}
    for path in model.ais_paths:
        betas = tuned_betas(model, n_betas, base="data", data=train, path=path, seed=1)
        log_z[path] = estimate_log_partition(model, n_chains, betas=betas, base="data",
                                             data=train, path=path, seed=0,
                                             progress=False).log_z
    return log_z


def snapshot_nll(snapshot: Path, n_chains: int, n_betas: int) -> dict:
    dataset = runs.load_run_dataset(snapshot)
    model, source = runs.run_model(snapshot, which="latest")
    train, test = torch.as_tensor(dataset.train), torch.as_tensor(dataset.test)
    log_z = snapshot_log_z(model, train, n_chains, n_betas)
    best = max(log_z.values())
    return {"epoch": source.epoch, "n_hidden": model.n_hidden, "sha256": source.sha256,
            "log_z": log_z, "nll": float(free_energies(model, test).mean()) + best,
            "active_units": active_units(model)}


# A unit whose weights have a smaller norm hardly moves any visible unit (trained units: 3-8).
ACTIVE_NORM = 0.05


def active_units(model) -> int:
    """Hidden units whose weight row has norm above ACTIVE_NORM: the size without the nearly
    dead units that growth adds past the data's z and pruning later removes in blocks."""
    coupling = next(name for name, spec in model.parameter_specs.items() if spec.coupling)
    return int((model.get_parameter(coupling).detach().norm(dim=1) > ACTIVE_NORM).sum())


SETTLED_FROM = 500  # epochs: the table judges each run from here on


def settling_row(label: str, points: list[dict], history: list[dict]) -> list:
    """[label, epochs, NLL mean, min-max, largest move between neighbouring snapshots, final
    NLL, size min-max, final size, active units min-max] over the snapshots from epoch
    SETTLED_FROM on."""
    late = [p for p in points if p["epoch"] >= SETTLED_FROM]
    sizes = [r["n_hidden"] for r in history if r["epoch"] >= SETTLED_FROM]
    if len(late) < 2 or not sizes:
        return [label, f"{points[-1]['epoch'] if points else 0}"] + ["-"] * 7
    nll = [p["nll"] for p in late]
    active = [p["active_units"] for p in late]
    moves = [abs(after - before) for before, after in zip(nll, nll[1:])]
    return [label, f"{late[0]['epoch']}-{late[-1]['epoch']}", f"{sum(nll) / len(nll):.1f}",
            f"{min(nll):.1f}-{max(nll):.1f}", f"{max(moves):.1f}", f"{nll[-1]:.1f}",
            f"{min(sizes)}-{max(sizes)}", f"{history[-1]['n_hidden']}",
            f"{min(active)}-{max(active)}"]


def settling_table(rows: list[list], args) -> str:
    header = ["run (rule/seed)", "epochs", "NLL mean", "NLL range", "largest move",
              "last NLL", "size range", "last size", f"active units (norm > {ACTIVE_NORM})"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return (f"# CalTech101 iRBM: does the size and NLL settle?\n\nTest NLL of every snapshot "
            f"from epoch {SETTLED_FROM} on (AIS, {args.chains} chains x {args.betas} tuned "
            "temperatures on each path, the higher ln Z: an optimistic point estimate, not a "
            "bracket); largest move: between neighbouring snapshots. Sizes from the "
            "per-epoch history; active units: those whose weights have a norm above "
            f"{ACTIVE_NORM}, at the snapshots. Written by `scripts/trajectory_figure.py`.\n\n"
            + "\n".join(lines) + "\n")


NLL_CEILING = 220.0  # nats: higher snapshots are drawn at the top edge with their value


def plot_nll(axes, epochs: list[int], nlls: list[float], **style) -> None:
    """Plot one run's NLL with points above NLL_CEILING clipped to it and labelled, so that a
    spike of 370 nats does not squash the 130-160 range where the runs differ."""
    axes.plot(epochs, [min(nll, NLL_CEILING) for nll in nlls], marker="o", markersize=3,
              **style)
    for epoch, nll in zip(epochs, nlls):
        if nll > NLL_CEILING:
            axes.annotate(f"{nll:.0f}", (epoch, NLL_CEILING), textcoords="offset points",
                          xytext=(0, 4), ha="center", fontsize="x-small",
                          color=style.get("color"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="LABEL=RUN_DIR")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--chains", type=int, default=100)
    parser.add_argument("--betas", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--until", type=int, default=10**9,
                        help="leave out snapshots after this epoch")
    parser.add_argument("--since", type=int, default=0,
                        help="leave out snapshots and sizes before this epoch")
    parser.add_argument("--every", type=int, default=50,
                        help="evaluate only snapshots whose epoch is a multiple of this")
    args = parser.parse_args(argv)
    if args.every < 1:
        parser.error(f"--every must be at least 1, got {args.every}")
    hold_threads(args.threads)
    cache_path = args.out.with_suffix(".json")
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    figure, (size_axes, nll_axes) = plt.subplots(2, 1, figsize=(9, 10), sharex=True)
    colours, styles, table = {}, {}, []
    for item in args.runs:
        label, run = item.split("=", 1)
        rule, _, seed = label.partition("/")
        colour = colours.setdefault(rule, f"C{len(colours)}")
        style = styles.setdefault(seed, ("-", "--", ":", "-.")[len(styles) % 4])
        run, _, which = run.partition("@")
        if which not in ("", "average"):
            parser.error(f"{item}: RUN_DIR@average is the only suffix, got @{which}")
        run = Path(run)
        recorded = json.loads((run / runs.HISTORY_FILE).read_text())["history"] \
            if (run / runs.HISTORY_FILE).exists() else []
        history = [record for record in recorded
                   if args.since <= record["epoch"] <= args.until]
        size_axes.plot([r["epoch"] for r in history], [r["n_hidden"] for r in history],
                       color=colour, linestyle=style, label=label)
        points = cache.setdefault(label, {})
        snapshots = sorted((run / "snapshots").iterdir(), key=lambda p: int(p.name)) \
            if (run / "snapshots").is_dir() else []
        for snapshot in snapshots:
            epoch = snapshot.name
            if int(epoch) % args.every or not args.since <= int(epoch) <= args.until:
                continue
            source = snapshot / which if which else snapshot
            if not source.is_dir():
                continue
            if epoch not in points:
                points[epoch] = snapshot_nll(source, args.chains, args.betas)
                print(f"{label} epoch {epoch}: {points[epoch]['nll']:.2f}", flush=True)
                cache_path.write_text(json.dumps(cache, indent=1) + "\n")
            elif "active_units" not in points[epoch]:  # cached before it was counted
                model, _ = runs.run_model(source, which="latest")
                points[epoch]["active_units"] = active_units(model)
        # The cache is the record (snapshots are not committed): every cached epoch on the
        # --every grid, whether or not its snapshot is still on this machine.
        epochs = sorted((epoch for epoch in points
                         if int(epoch) % args.every == 0
                         and args.since <= int(epoch) <= args.until), key=int)
        plot_nll(nll_axes, [int(e) for e in epochs], [points[e]["nll"] for e in epochs],
                 color=colour, linestyle=style)
        table.append(settling_row(label, [points[e] for e in epochs], history))
    size_axes.set_ylabel("hidden units")
    nll_axes.set_ylabel("test NLL (AIS, best path), nats")
    nll_axes.set_xlabel("epoch")
    for axes in (size_axes, nll_axes):
        axes.grid(alpha=0.3)
    if nll_axes.get_ylim()[1] > NLL_CEILING:
        nll_axes.set_ylim(top=NLL_CEILING + 12)  # room for the labels of clipped points
    # One legend for both panels, below them: inside either it hid the curves.
    handles, labels = size_axes.get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=3, fontsize="small")
    figure.suptitle("CalTech101 iRBM: size and test NLL over training")
    figure.tight_layout(rect=(0, 0.01 + 0.02 * -(-len(labels) // 3), 1, 1))
    figure.savefig(args.out.with_suffix(".png"), dpi=100)
    cache_path.write_text(json.dumps(cache, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(settling_table(table, args))
    print(f"wrote {args.out.with_suffix('.png')}, .json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
