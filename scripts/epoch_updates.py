"""Test NLL after chosen updates of the next epoch of a run: where in an epoch quality moves.

    python scripts/epoch_updates.py RUN --updates 0,32,56,60,62,63,64 \
        --out results/caltech101_irbm_last_batch

RUN is a run directory whose checkpoint is resumed (it is not modified: the epoch runs in
memory, on the CPU, in the order and with the random streams the run itself would use, so the
model after the epoch's last update is the run's next epoch, bit for bit, given the thread
count it was trained with; runs with --random-permutation, whose callback this replay does not
run, and checkpoints whose sampler state was saved on another device are refused). Before
each update listed, and after the last, the test NLL is estimated as
scripts/trajectory_figure.py does (AIS on each of the family's paths, 100 chains x 2,000
pilot-tuned temperatures, data base, the higher ln Z: an optimistic point estimate). Writes
OUT.md and OUT.json: per update, the rows of its minibatch, the size, the mean test free
energy and the NLL.

Session 15 ran it on `--growth expected --seed 1234` trained to epoch 499 (the run behind
`expected growth/seed 1234` in results/caltech101_irbm_trajectory.md, whose epoch-500 snapshot
spiked to 212 nats), to see whether the spike builds up over the epoch or comes from its last
minibatch, the 4 rows left over from 4,100 = 64 x 64 + 4.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import warnings
from copy import deepcopy
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trajectory_figure import snapshot_log_z  # noqa: E402

from irbm import runs  # noqa: E402
from irbm._threads import hold_threads  # noqa: E402
from irbm.evaluate import free_energies  # noqa: E402
from irbm.training import Trainer  # noqa: E402


def measure_alternatives(trainer, train, last_rows, args) -> list[dict]:
    """The test NLL after the epoch's last update made, in a copy of ``trainer``, on
    ``args.alternatives`` minibatches of random training rows of the last one's size, then on
    each of its rows repeated to that size; the true last update is measured by the caller."""
    rows = torch.arange(train.shape[0])[last_rows]
    generator = torch.Generator().manual_seed(7)
    cases = [("its own rows", rows)]
    cases += [(f"random rows #{k + 1}",
               torch.randint(0, train.shape[0], (len(rows),), generator=generator))
              for k in range(args.alternatives)]
    cases += [(f"row {int(row)} alone, {len(rows)} times", row.repeat(len(rows))) for row in rows]
    results = []
    for kind, chosen in cases:
        copy = deepcopy(trainer)
        copy.update(train[chosen])
        log_z = snapshot_log_z(copy.model, train, args.chains, args.betas)
        results.append({"kind": kind, "rows": chosen.tolist(),
                        "nll": float(free_energies(copy.model, args.test).mean())
                        + max(log_z.values())})
        print(f"last update on {kind}: NLL {results[-1]['nll']:.2f}", flush=True)
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--updates", required=True,
                        help="comma-separated update indices within the epoch (0 = its start)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--chains", type=int, default=100)
    parser.add_argument("--betas", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--alternatives", type=int, default=0, metavar="R",
                        help="also measure the epoch's last update made instead on R minibatches "
                        "of as many random training rows, and on each row of the last "
                        "minibatch repeated to its size (each from the same state, in a copy)")
    args = parser.parse_args(argv)
    marks = sorted({int(mark) for mark in args.updates.split(",")})
    hold_threads(args.threads)
    if runs.read_settings(args.run).random_permutation:
        parser.error(f"{args.run} permutes its hidden units before every update "
                     "(--random-permutation), a callback this replay does not run: its epoch "
                     "would not be the run's")
    with warnings.catch_warnings():  # a sampler state from another device: reseeded
        warnings.simplefilter("error", RuntimeWarning)
        try:
            trainer = Trainer.from_checkpoint(args.run, device="cpu", progress=False)
        except RuntimeWarning as warning:
            parser.error(f"{warning}; the replay would not be the run's epoch")
    dataset = runs.load_run_dataset(args.run)
    dtype = trainer.model.dtype
    train = torch.as_tensor(dataset.train).to(dtype)
    test = torch.as_tensor(dataset.test).to(dtype)
    args.test = test
    epoch = trainer.epoch + 1
    # The order `Trainer.fit` would draw for this epoch, from the checkpointed generator.
    order = torch.randperm(train.shape[0], generator=trainer.order_generator) \
        if trainer.config.shuffle else None
    batches = list(trainer._minibatches(train.shape[0], order))
    if marks and (marks[0] < 0 or marks[-1] >= len(batches)):
        parser.error(f"--updates must lie in 0..{len(batches) - 1} (the epoch has "
                     f"{len(batches)} updates), got {args.updates}")
    sizes = [len(range(train.shape[0])[rows]) if isinstance(rows, slice) else len(rows)
             for rows in batches]
    records = []

    def measure(update: int):
        model = trainer.model
        log_z = snapshot_log_z(model, train, args.chains, args.betas)
        mean_free_energy = float(free_energies(model, test).mean())
        records.append({"update": update, "n_hidden": model.n_hidden,
                        "rows_next": sizes[update] if update < len(sizes) else None,
                        "test_free_energy": mean_free_energy,
                        "nll": mean_free_energy + max(log_z.values())})
        print(f"epoch {epoch} update {update}: NLL {records[-1]['nll']:.2f}", flush=True)

    alternatives = []
    with trainer.model.trusted_inputs():
        for update, rows in enumerate(batches):
            if update in marks:
                measure(update)
            if update == len(batches) - 1 and args.alternatives:
                alternatives = measure_alternatives(trainer, train, rows, args)
            trainer.update(train[rows])
    measure(len(batches))
    coupling = next(name for name, spec in trainer.model.parameter_specs.items()
                    if spec.coupling)
    digest = hashlib.sha256(trainer.model.get_parameter(coupling).detach().numpy()
                            .tobytes()).hexdigest()
    payload = {"run": str(args.run), "epoch": epoch, "updates": len(batches),
               "batch_sizes": sorted(set(sizes)),
               "last_batch": trainer.config.last_batch, "chains": args.chains,
               "betas": args.betas, "coupling_sha256_after": digest, "records": records,
               "alternatives": alternatives}
    args.out.with_suffix(".json").write_text(json.dumps(payload, indent=1) + "\n")
    lines = [f"# Test NLL within epoch {epoch} of `{args.run}`", "",
             f"Update k is measured before the epoch's k-th update (k = {len(batches)}: after "
             f"the last, i.e. the run's epoch-{epoch} model); AIS {args.chains} chains x "
             f"{args.betas} tuned temperatures per path, the higher ln Z (optimistic point "
             "estimates). Written by `scripts/epoch_updates.py`.", "",
             "| update | rows of the next minibatch | hidden units | mean test F | test NLL |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['update']} | {r['rows_next'] if r['rows_next'] is not None else '-'} | "
              f"{r['n_hidden']} | {r['test_free_energy']:.2f} | {r['nll']:.2f} |"
              for r in records]
    if alternatives:
        lines += ["", f"The last update made instead on other rows, from the state before it "
                  f"(update {len(batches) - 1}):", "",
                  "| last minibatch | training rows | test NLL after it |", "|---|---|---|"]
        lines += [f"| {a['kind']} | {', '.join(map(str, a['rows']))} | {a['nll']:.2f} |"
                  for a in alternatives]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out.with_suffix('.md')} and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
