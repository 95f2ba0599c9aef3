"""Training strategies: callbacks that change how a model is trained, not what it is.

Each strategy uses only the trainer's hooks (`irbm.training.Callback`) and the model interface,
so a new strategy is one class here (or in a user's own file) and no trainer edit.
"""

from __future__ import annotations

import math

import torch

from .kernels import PhiloxGenerator
from .training import Callback, CheckpointEvery

REGROUPINGS = ("all", "peng")
# Peng et al.'s code: permute 0.9 l units for this many epochs, then sort by filter norm once.
WARMUP_EPOCHS, WARMUP_FRACTION = 10, 0.9
_NO_MEANS = ("regrouping 'peng' needs the chains' mean z of every past epoch ('mean_chain_z' in "
             "the history); this run was trained without it: continue it with regrouping "
             "'all' or start a new run")


class RandomPermutation(Callback):
    """Randomly regroup the hidden units before each gradient step (Peng, Gao & Li, "On better
    training the infinite restricted Boltzmann machines", Machine Learning 107, 2018).

    An ordered model (oRBM, iRBM) learns its units left to right, and a unit's filter changes
    slowly once its neighbours use it. Permuting the units before every update breaks that
    dependency: the model is trained as a mixture over orderings (an effect the authors liken
    to dropout) and, they report, converges faster. The permutation is applied through
    `irbm.Trainer.relayout_hidden`, so ADAGRAD's per-unit accumulators move with their units,
    and it is kept (the next update draws a new one from the permuted model).

    Which units are permuted (``regrouping``):

    - ``"all"``: every unit. Measured here (CalTech101, iRBM, lr 0.05, L1 1e-3, PCD-10,
      ADAGRAD, the paper's growth rule): the layer grows without bound, about 60 units per
      epoch (2,175 units after 36 epochs, against 299 without the permutation). Barely trained
      units land at the front and strong ones at the back, so P(z | v) keeps mass near l, z
      keeps reaching past l, and L1 cannot prune the zero units, which are no longer trailing.
    - ``"peng"``: the first M_t units, as the authors' public code does (their paper calls M_t
      the regrouping rate). For the first 10 epochs M_t = round(0.9 l); at the first update of
      epoch 11 the units are sorted by filter norm, largest first, and not permuted; after
      that M_t follows m, the mean z of the negative chains per epoch (from the trainer's
      gradient pass): round(0.9 x mean of the last 10 epochs' m) while the last m < 100, else
      round(mean of m over epochs 11..e-1) - 10 up to epoch e = 21 and round(mean of m over
      epochs round(0.8 e)..e-1) - 10 after; M_t is kept within 1..l. Their code pairs this
      with a stricter growth rule (``growth="paired"`` of the trainer) and a constant penalty
      beta ln 2 per unit, which irbm's models do not have. Measured here with
      ``growth="paired"`` and the settings above: about one unit per epoch (802 at epoch
      1,000), and a test NLL that swings with the epochs (211 at 150, 170 at 250, 213 at
      500, 144 at 1,000): behind plain training early, level with it at 1,000 epochs
      (results/caltech101_peng.md).

    Parameters
    ----------
    regrouping : {"all", "peng"}
    generator : torch.Generator, optional
        Draws the permutations. Default: the trainer's Gibbs generator, whose state is in every
        checkpoint, so a resumed run draws the same permutations (bit-identical resume). With
        "peng", the per-epoch chain means are kept in the trainer's history
        (``"mean_chain_z"``), so they too survive a resume; the strategy must therefore come
        before any checkpointing callback (checked when training starts).
    """

    def __init__(self, regrouping: str = "all", generator: torch.Generator | None = None):
        if regrouping not in REGROUPINGS:
            raise ValueError(f"regrouping must be one of {REGROUPINGS}, got {regrouping!r}")
        self.regrouping = regrouping
        self.generator = generator
        self._reset_epoch()

    def _reset_epoch(self):
        # The chains' z summed over the epoch's updates, kept on the device: no host sync
        # per update (one per epoch, in on_epoch_end). M_t before clamping to 1..l, as
        # (epoch, count): one pass over the history per epoch, not per update.
        self._z_sum, self._z_count, self._sort_pending = None, 0, True
        self._target = None

    def on_fit_start(self, trainer):
        if not trainer.model.has_z:
            raise ValueError(f"random permutation training needs a model whose hidden units are "
                             f"ordered (with z); a {trainer.model.display_name} has none")
        # Runs resume at epoch boundaries, so the sort is due at the start of epoch 11 only.
        self._reset_epoch()
        if self.regrouping != "peng":
            return
        if any("mean_chain_z" not in row for row in trainer.history):
            raise ValueError(_NO_MEANS)
        position = trainer.callbacks.index(self) if self in trainer.callbacks else 0
        if any(isinstance(c, CheckpointEvery) for c in trainer.callbacks[:position]):
            raise ValueError("RandomPermutation('peng') must come before CheckpointEvery in "
                             "the callbacks, so that each checkpoint holds the epoch's mean z")

    def on_update_start(self, trainer, batch):
        n_hidden = trainer.model.n_hidden
        count = n_hidden if self.regrouping == "all" else self._regrouped(trainer, n_hidden)
        if count == 0:
            norms = trainer.model.filters().norm(dim=1)
            trainer.relayout_hidden(torch.argsort(norms, descending=True, stable=True))
        elif count > 1:
            generator = self.generator or trainer.gibbs_generator
            order = (generator.permutation(count) if isinstance(generator, PhiloxGenerator)
                     else torch.randperm(count, generator=generator, device=generator.device))
            rest = torch.arange(count, n_hidden, device=order.device)
            trainer.relayout_hidden(torch.cat([order, rest]))

    def on_update_end(self, trainer, batch):
        if self.regrouping == "peng" and trainer.last_z is not None:
            mean = trainer.last_z[batch.shape[0]:].double().mean()
            self._z_sum = mean if self._z_sum is None else self._z_sum + mean
            self._z_count += 1

    def on_epoch_end(self, trainer, metrics):
        if self.regrouping == "peng" and self._z_count:
            metrics["mean_chain_z"] = float(self._z_sum) / self._z_count
        self._reset_epoch()

    def _regrouped(self, trainer, n_hidden) -> int:
        """M_t, the number of leading units to permute in this update (0: sort them instead)."""
        epoch = trainer.epoch + 1  # the epoch under way, counted from 1 as in Peng et al.
        if epoch <= WARMUP_EPOCHS:
            return _round(WARMUP_FRACTION * n_hidden)
        if epoch == WARMUP_EPOCHS + 1:
            sort, self._sort_pending = self._sort_pending, False
            return 0 if sort else 1
        if self._target is None or self._target[0] != epoch:
            self._target = (epoch, _target_count(trainer.history, epoch))
        count = self._target[1]
        return min(max(count, 1), n_hidden)


def _target_count(history: list[dict], epoch: int) -> int:
    """M_t for an epoch after the sort, from the chains' mean z of the epochs before it."""
    # history[k - 1] is epoch k; the slices are the epochs Peng et al.'s code averages.
    means = [row.get("mean_chain_z") for row in history[:epoch - 1]]
    if None in means or not means:
        raise ValueError(_NO_MEANS)
    if means[-1] < 100:
        recent = means[-10:]
        return _round(WARMUP_FRACTION * sum(recent) / len(recent))
    first = _round(0.8 * epoch) - 1 if epoch > WARMUP_EPOCHS + 11 else WARMUP_EPOCHS
    recent = means[first:]
    return _round(sum(recent) / len(recent)) - 10


def _round(value: float) -> int:
    """Halves up, as MATLAB's round does for the non-negative values used here (Python's
    round takes halves to the even neighbour)."""
    return math.floor(value + 0.5)
