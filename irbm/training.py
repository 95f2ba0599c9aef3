"""Minibatch training by CD-k or PCD-k, for any model of the shared interface.

The trainer knows nothing model-specific: it asks the model for Gibbs steps, for the weighted
free-energy gradients of a stack of positive and negative examples, and, after each update, to
adapt its size to the largest z sampled (only the iRBM grows) and to prune exactly-zero trailing
units when L1 is on (only the iRBM shrinks). Logging, evaluation and checkpoints are callbacks.
"""

from __future__ import annotations

import json
import numbers
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from . import checkpoint as ckpt
from ._io import atomic_write
from ._threads import apply_threads, held_threads
from ._warn import warn_user
from .ais import batch_seed
from .kernels import PhiloxGenerator
from .models import EnergyModel, check_device
from .optim import Optimizer

# What `from irbm.training import *` gives, and the module's public names.
__all__ = [
    "Trainer", "Callback", "CheckpointEvery", "TrainingConfig", "AVERAGE_DIR",
    "GROWTH_RULES", "RULES", "RANDOM_STREAMS"]

_MONITOR_ROWS = 2000  # examples used for the per-epoch metrics on the training set
GROWTH_RULES = ("any", "paired", "chains", "data", "expected")
# The rules each option of the trainer takes, irbm's first (the authors' code's second where
# it differs: see `irbm.profiles`).
RULES = {"growth": GROWTH_RULES, "growth_trigger": ("tail", "last"),
         "new_unit": ("update", "chains", "peers"), "pruning": ("all", "one", "none"),
         "chains_per_update": ("all", "rows"), "last_batch": ("keep", "merge"),
         "visible_init": ("zeros", "data")}
RANDOM_STREAMS = ("philox", "torch")
AVERAGE_DIR = "average"  # inside a run directory: the averaged model's run directory


@dataclass
class TrainingConfig:
    """Hyper-parameters; a resumed run must match them unless forced."""

    cd_k: int = 10
    persistent: bool = True
    batch_size: int = 64
    optimizer: str = "adagrad"
    lr: float = 0.03
    l1: float = 0.0
    l2: float = 0.0
    epsilon: float = 1e-6
    n_chains: int | None = None
    seed: int = 1234
    regularization: str = "proximal"
    growth: str = "any"
    epsilon_placement: str = "outside"
    growth_trigger: str = "tail"
    new_unit: str = "peers"
    pruning: str = "all"
    shuffle: bool = True
    chains_per_update: str = "all"
    random_stream: str = "philox"
    last_batch: str = "keep"
    average: int = 0
    visible_init: str = "zeros"


class Callback:
    """Hooks called by `Trainer.fit`; subclass and override what you need.

    A training strategy is a callback: ``on_update_start`` may change the model (through
    `Trainer.relayout_hidden` for the hidden layout, so the optimizer state follows), and
    ``on_hidden_layout`` lets a callback keep per-unit statistics aligned with the units.
    Setting ``trainer.stop_training = True`` ends the fit after the current epoch (early
    stopping). A schedule of the learning rate sets ``trainer.optimizer.lr`` from
    ``trainer.epoch`` (the epochs done) and ``trainer.config.lr`` in ``on_epoch_start``: a
    checkpoint restores ``config.lr``, not the optimizer's current value, so a rule applied
    there resumes exactly (in ``on_epoch_end`` the first epoch after a resume would run at
    ``config.lr``)::

        class InverseTime(Callback):
            def on_epoch_start(self, trainer):
                trainer.optimizer.lr = trainer.config.lr / (1 + trainer.epoch)
    """

    def check_fit(self, trainer: Trainer):
        """Raise if this fit must not run (inputs that do not fit the model, a directory that
        holds another run): called on every callback before any ``on_fit_start``, so a
        refusal comes before any epoch runs and before any callback writes a file."""

    def on_fit_start(self, trainer: Trainer):
        pass

    def on_epoch_start(self, trainer: Trainer):
        """Before the epoch's first update (``trainer.epoch`` epochs are done)."""

    def on_update_start(self, trainer: Trainer, batch: torch.Tensor):
        pass

    def on_update_end(self, trainer: Trainer, batch: torch.Tensor):
        pass

    def on_hidden_layout(self, trainer: Trainer, index: torch.Tensor):
        pass

    def on_epoch_end(self, trainer: Trainer, metrics: dict):
        pass

    def on_fit_end(self, trainer: Trainer):
        pass


def _as_callbacks(callbacks) -> list[Callback]:
    """``callbacks`` (an iterable of `Callback` or callables ``f(trainer, metrics)``) as
    Callbacks; ValueError naming the contract for anything else, before any epoch runs."""
    if isinstance(callbacks, Callback) or callable(callbacks) or not isinstance(
            callbacks, Iterable):
        raise ValueError(f"callbacks must be a list of Callback objects or functions "
                         f"f(trainer, metrics), got {callbacks!r}: wrap one in a list")
    chosen = []
    for callback in callbacks:
        if not isinstance(callback, Callback) and not callable(callback):
            raise ValueError(f"callback {callback!r} is neither an irbm.training.Callback nor "
                             "a function f(trainer, metrics)")
        chosen.append(callback if isinstance(callback, Callback) else
                      _FunctionCallback(callback))
    return chosen


class _FunctionCallback(Callback):
    def __init__(self, function):
        self.function = function

    def on_epoch_end(self, trainer, metrics):
        self.function(trainer, metrics)


@dataclass
class _State:
    epoch: int = 0
    updates: int = 0
    history: list = field(default_factory=list)


class Trainer:
    """Stochastic gradient descent on the NLL with the negative phase from Gibbs chains.

    Parameters
    ----------
    model : EnergyModel
    cd_k : int
        Gibbs steps per update (the paper: 10).
    persistent : bool
        PCD (chains kept across updates, started at zeros as in the authors' code) or CD
        (chains start at the minibatch).
    batch_size : int
    optimizer : {"adagrad", "sgd"}
    lr, l1, l2 : float
        Learning rate and regularization factors (which parameters they act on, and how: see
        ``regularization``).
    regularization : {"proximal", "weights", "authors"}
        How L1 and L2 apply: irbm's convention, on the coupling weights only, or the authors'
        code's (`irbm.optim.Optimizer`).
    epsilon_placement : {"outside", "inside"}
        ADAGRAD's lr / (sqrt(G) + eps) or the authors' code's lr / sqrt(G + eps).
    growth : {"any", "paired", "chains", "data", "expected"}
        Which sampled z a growing model (the iRBM) grows on. "any" (the paper): the largest z
        sampled anywhere in the update, in every Gibbs step and in the gradient pass. "paired"
        (Peng et al.'s code): only the gradient pass's z, and only a value that data row n and
        chain n both reached, i.e. max_n min(z_data[n], z_chain[n]) over the first
        min(rows, chains) pairs (unpaired rows or chains are ignored); growth is much rarer.
        "chains" (the authors' code): z drawn afresh on the negative chains' start (the
        persistent chains; the minibatch under CD) and the gradient pass's z on their end,
        never the data's. "data": only the z drawn on the data rows in the gradient pass.
        On CalTech101 the data's z stays near 150-160 (max about 280) while the chains' z
        reaches the tail and grows hundreds of units that L1 keeps near zero and pruning
        then removes in bulk (the size's sawtooth, results/README.md); growing on the data's
        z keeps only units the data use. "expected": no sampled z at all; grow when the
        minibatch's expected number of data rows whose z reaches the trigger,
        sum_n P(z > l | v_n) (or P(z >= l | v_n)), is at least one. A sampled z grows the
        model on rare draws from a tail that holds little of the data's mass; in expectation
        it grows only while a row's worth of the data's mass lies past the units (then at
        every update: a zero unit moves the tail's mass by a factor 2^(1 - beta) only).
    growth_trigger : {"tail", "last"}
        Which z grows the model: one past its l units ("tail"), or one at l or past it
        ("last": the authors' P(z | v) has l categories, the last holding z >= l).
    new_unit : {"update", "chains", "peers"}
        A grown unit's first step: from the update's gradient, data against chains, on all its
        parameters ("update"); or ("chains", the authors') its coupling weights from the
        gradient of mean F(chain start) - mean F(chain end) and a zero gradient elsewhere, so
        its bias stays 0 with an empty accumulator and its weights' accumulator is g^2; or
        ("peers") as "update", its ADAGRAD accumulators starting at the other units' mean
        instead of empty. With an empty accumulator a first step is lr g / |g|, lr in size
        per element however faint the gradient, so a new unit starts with every weight its
        gradient touches at +-lr. Under "peers" it steps as far as the units already trained
        would on the same gradient (on CalTech101 the units carrying weight then stayed at
        230-245 where "update"'s swung over 183-599, and the test NLL at 4,000 epochs was 4-10
        nats better in two seeds; results/README.md). The default: "peers" (irbm's profile
        since session 22; runs record the rule they were trained with and resume with it).
    pruning : {"all", "one", "none"}
        With L1, after the step, drop every trailing unit with all-zero parameters, at most
        one per update ("one", the authors'), or none (the paper's model without shrinking:
        its size never falls); interior zero units stay either way. Dropping zero units
        leaves the distribution unchanged (each is a factor of the closed-form tail); it
        changes only the size l that the growth rule compares z with.
    shuffle : bool
        Minibatches in a new random order each epoch, or in the data's order (the authors').
    chains_per_update : {"all", "rows"}
        Under PCD, advance every persistent chain each update, or as many as the minibatch has
        rows, the first ones ("rows", the authors': their last, short minibatch of an epoch
        advances only the first chains).
    last_batch : {"keep", "merge"}
        When batch_size does not divide the rows, the remainder makes a short last minibatch
        ("keep": CalTech101's 4,100 rows end every epoch on 4), or joins the minibatch before
        it ("merge": one of 68). ADAGRAD's step, lr g / sqrt(G), divides by the gradients
        accumulated so far, not by this minibatch's noise, so a 4-row minibatch, whose mean
        gradient has 16 times the variance of a 64-row one's, steps at least as far in a
        noisier direction: on a CalTech101 iRBM that one update raised the test NLL from 133
        to 212 (results/caltech101_irbm_last_batch.md).
    average : int
        Keep an exponential moving average of the parameters over about this many updates
        (0: none; `irbm.optim.Optimizer`'s ``average``). Training never uses it;
        `averaged_model` returns it, and `CheckpointEvery` writes it as a run directory of
        its own, RUN/average/, for evaluation. At the paper's lr the iRBM's test NLL moves by
        10-20 nats from one update to the next; an average over a few epochs of updates is
        an estimate of where the iterates hover.
    visible_init : {"zeros", "data"}
        "data": when `fit` starts before any update, the visible biases are set to the
        training rows' smoothed log-odds (`EnergyModel.initialize_visible_bias`; Hinton's
        practical guide, section 8.1); "zeros" leaves the model as built (the paper's start).
        Driving `update` directly skips it.
    seed : int
        Seeds the Gibbs sampler and the minibatch order.
    random_stream : {"philox", "torch"} or None
        The Gibbs sampler's uniforms: a counter-based Philox stream, which lets the families
        run fused sampling kernels (`irbm.kernels`: numba on the CPU, Triton on CUDA) with
        draws that depend neither on the thread count nor, in float64, on the device (in
        float32 the devices break rounding ties differently); or a torch.Generator
        and eager PyTorch ("torch", every run trained before irbm had kernels; their
        checkpoints resume with it). None: "philox" on the CPU, "torch" elsewhere (on an H100
        a whole epoch ran about as fast either way; benchmarks/README.md, "On a GPU").
    device : torch.device or str, optional
        Where to train; the model is moved there.
    n_chains : int, optional
        Persistent chains (default: batch_size).
    progress : bool
        Show a progress bar over epochs.
    """

    def __init__(self, model: EnergyModel, *, cd_k=10, persistent=True, batch_size=64,
                 optimizer="adagrad", lr=0.03, l1=0.0, l2=0.0, seed=1234, device=None,
                 n_chains=None, epsilon=1e-6, regularization="proximal", growth="any",
                 epsilon_placement="outside", growth_trigger="tail", new_unit="peers",
                 pruning="all", shuffle=True, chains_per_update="all", random_stream=None,
                 last_batch="keep", average=0, visible_init="zeros", progress=True):
        if not isinstance(model, EnergyModel):
            raise TypeError(f"Trainer takes a model (irbm.InfiniteRBM(n_visible), say), got "
                            f"{type(model).__name__}")
        for name, value in (("lr", lr), ("l1", l1), ("l2", l2), ("epsilon", epsilon)):
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"{name} must be a number, got {value!r} (a "
                                f"{type(value).__name__})")
        cd_k, batch_size = _count(cd_k, "cd_k"), _count(batch_size, "batch_size")
        n_chains = None if n_chains is None else _count(n_chains, "n_chains")
        rules = {"growth": growth, "growth_trigger": growth_trigger, "new_unit": new_unit,
                 "pruning": pruning, "chains_per_update": chains_per_update,
                 "last_batch": last_batch, "visible_init": visible_init}
        for name, value in rules.items():
            if value not in RULES[name]:
                raise ValueError(f"{name} must be one of {RULES[name]}, got {value!r}")
        if random_stream is not None and random_stream not in RANDOM_STREAMS:
            raise ValueError(f"random_stream must be one of {RANDOM_STREAMS} or None, got "
                             f"{random_stream!r}")
        check_device(device)  # torch's own word for it ("not compiled with CUDA enabled")
        target = torch.device(device) if device is not None else model.device
        seed = _count(seed, "seed", minimum=0)  # None failed in int() with Python's words
        if random_stream is None:
            random_stream = "philox" if target.type == "cpu" else "torch"
        self.config = TrainingConfig(cd_k, bool(persistent), batch_size, optimizer, float(lr),
                                     float(l1), float(l2), float(epsilon), n_chains,
                                     int(seed), regularization, growth, epsilon_placement,
                                     growth_trigger, new_unit, pruning, bool(shuffle),
                                     chains_per_update, random_stream, last_batch,
                                     average, visible_init)
        self.device = target
        try:
            # A device without random numbers (e.g. "meta") is refused before the model moves.
            torch.Generator(device=self.device)
            self.model = model.to(self.device)
        except (RuntimeError, AssertionError) as error:  # e.g. "cuda" without a GPU
            raise ValueError(f"device {str(self.device)!r} is not usable here: "
                             f"{str(error).splitlines()[0]}") from None
        self.optimizer = Optimizer(optimizer, lr=lr, l1=l1, l2=l2, epsilon=epsilon,
                                   regularization=regularization,
                                   epsilon_placement=epsilon_placement, average=average)
        self.progress = progress
        self.state = _State()
        self.size_history: list[tuple[int, int]] = [(0, model.n_hidden)]
        self.gibbs_generator = (
            PhiloxGenerator(int(seed), self.device) if random_stream == "philox"
            else torch.Generator(device=self.device).manual_seed(int(seed)))
        self.order_generator = torch.Generator().manual_seed(int(seed) + 1)
        self.chains = None
        # z of the last gradient pass, (batch rows + chains,) or None: strategies read it.
        self.last_z: torch.Tensor | None = None
        self.callbacks: list[Callback] = []
        self.stop_training = False
        self._trained_here = False  # fit has run in this process (its epochs count in total)
        # The directories whose run files are this trainer's to write: the one it was resumed
        # from and those its callbacks claimed empty (`refuse_other_run`).
        self.run_dirs: set[Path] = set()
        self._claims: set[Path] = set()

    # ------------------------------------------------------------------ properties
    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def history(self) -> list[dict]:
        return self.state.history

    # ------------------------------------------------------------------ one update
    def averaged_model(self) -> EnergyModel | None:
        """The model with the running average of its parameters (``average``), or None."""
        return self.optimizer.averaged(self.model)

    def relayout_hidden(self, index: torch.Tensor):
        """Apply a hidden-unit layout (`EnergyModel.relayout_hidden`) to the model, the
        optimizer state and the callbacks, so that everything per unit stays aligned."""
        self.model.relayout_hidden(index)
        self.optimizer.relayout_hidden(self.model, index)
        for callback in self.callbacks:
            callback.on_hidden_layout(self, index)

    def _negative_phase(self, batch):
        """Run cd_k Gibbs steps from the persistent chains (PCD: all of them, or as many as
        the batch has rows) or the batch (CD); return the chains' start and end and the
        largest z sampled on the way (a tensor, no host sync; only ``growth="any"`` uses it)."""
        if self.config.persistent:
            rows = self.chains.shape[0]
            if self.config.chains_per_update == "rows":
                rows = min(rows, batch.shape[0])
            start = self.chains[:rows]
        else:
            start = batch
        chains, largest_z = start, None
        for _ in range(self.config.cd_k):
            chains, state = self.model.gibbs_step(chains, self.gibbs_generator)
            if state.z is not None and self.config.growth == "any":
                step_max = state.z.max()
                largest_z = step_max if largest_z is None else torch.maximum(largest_z, step_max)
        if self.config.persistent:
            self.chains = chains if rows == self.chains.shape[0] else \
                torch.cat([chains, self.chains[rows:]])
        return start, chains, largest_z

    def _gradients(self, positives, negatives, generator=True):
        """dF averaged over ``positives`` minus dF averaged over ``negatives``, in one pass
        (with z drawn for every row unless ``generator`` is False)."""
        stacked = torch.cat([positives, negatives])
        row_weights = torch.cat([
            positives.new_full((positives.shape[0],), 1.0 / positives.shape[0]),
            negatives.new_full((negatives.shape[0],), -1.0 / negatives.shape[0])])
        return self.model.weighted_gradients(stacked, row_weights,
                                             self.gibbs_generator if generator else None)

    @torch.no_grad()
    def update(self, batch: torch.Tensor):
        """One parameter update from a minibatch (N, n_visible) of 0/1 values."""
        batch = self.model.check_visible(batch).to(self.device)
        if self.chains is None:
            self.chains = self._initial_chains()
            self.optimizer.sync(self.model)
        for callback in self.callbacks:
            callback.on_update_start(self, batch)
        with self.model.trusted_inputs():
            start, negatives, largest_z = self._negative_phase(batch)
            gradients, z = self._gradients(batch, negatives)
            self.last_z = z
            if z is not None:
                largest_z = self._growth_z(largest_z, z, batch.shape[0], start, batch)
            growth = self._growth_layout(None if largest_z is None else int(largest_z))
            if growth is not None:
                self.relayout_hidden(growth)
                # The new unit takes its first step now: its gradient is non-zero even though its
                # parameters are (the authors' behaviour). The model derives the grown gradients
                # when it can (the iRBM: only the new row is new); else compute them again.
                grown = self.model.relayout_gradients(gradients, growth)
                gradients = grown if grown is not None else self._gradients(batch, negatives)[0]
                if self.config.new_unit == "chains":
                    self._new_units_from_chains(gradients, growth, start, negatives)
                elif self.config.new_unit == "peers":
                    self.optimizer.new_units_like_peers(self.model, growth)
        self.optimizer.step(self.model, gradients)
        if self.config.l1 and (pruning := self._pruning_layout()) is not None:
            self.relayout_hidden(pruning)
        self.state.updates += 1
        for callback in self.callbacks:
            callback.on_update_end(self, batch)

    def _growth_z(self, negative_phase_z, z, n_rows, start=None, batch=None):
        """The z the model grows on (see ``growth``), from the negative phase's largest z,
        the gradient pass's z (n_rows data rows, then the chains), the chains' start and the
        minibatch (N, n_visible)."""
        if self.config.growth == "expected":
            return self._expected_growth_z(batch)
        if self.config.growth == "any":
            largest = z.max()
            return largest if negative_phase_z is None else torch.maximum(negative_phase_z, largest)
        if self.config.growth == "chains":
            start_z = self.model.sample_hidden(start, self.gibbs_generator).z
            return torch.maximum(start_z.max(), z[n_rows:].max())
        if self.config.growth == "data":
            return z[:n_rows].max()
        pairs = min(n_rows, z.shape[0] - n_rows)
        return torch.minimum(z[:pairs], z[n_rows:n_rows + pairs]).max()

    def _expected_growth_z(self, batch):
        """E = sum_n P(z >= t | v_n) over the minibatch (N, n_visible), t = l + 1 (trigger
        "tail") or l ("last"); returns t where E >= 1, else 0 (a 0-d tensor, no host sync).
        Columns of log P(z | v) hold z = 1, 2, ...; a family with a tail adds one for z > l."""
        first = self.model.n_hidden + (self.config.growth_trigger != "last")
        expected = self.model.log_p_z_given_v(batch)[:, first - 1:].exp().sum()
        return torch.where(expected >= 1.0, first, 0)

    def _growth_layout(self, largest_z):
        if self.config.growth_trigger == "last":
            return self.model.growth_layout(largest_z, at_last=True)
        return self.model.growth_layout(largest_z)

    def _pruning_layout(self):
        if self.config.pruning == "none":
            return None
        if self.config.pruning == "one":
            return self.model.pruning_layout(at_most=1)
        return self.model.pruning_layout()

    def _new_units_from_chains(self, gradients, index, start, negatives):
        """``new_unit="chains"``: in place, the rows of the units just grown (``index < 0``)
        take, for coupling parameters, the grown model's gradient of mean F(chain start) -
        mean F(chain end) (the chains' alone: the authors' appended zero row), and zero for
        the other per-unit parameters."""
        new = torch.as_tensor(index, device=self.device) < 0
        chain_gradients, _ = self._gradients(start, negatives, generator=False)
        for name, spec in self.model.parameter_specs.items():
            if spec.per_unit:
                gradients[name][new] = chain_gradients[name][new] if spec.coupling else 0

    # ------------------------------------------------------------------ epochs
    def _as_data(self, data) -> torch.Tensor:
        data = torch.as_tensor(data)
        if data.dim() != 2 or data.shape[0] == 0:
            raise ValueError(f"training data must be a non-empty (N, {self.model.n_visible}) "
                             f"array, got shape {tuple(data.shape)}")
        return self.model.check_visible(data)

    def _initial_chains(self):
        n_chains = self.config.n_chains or self.config.batch_size
        return torch.zeros(n_chains, self.model.n_visible, dtype=self.model.dtype,
                           device=self.device)

    @torch.no_grad()
    def epoch_metrics(self, train, valid=None) -> dict:
        """Mean reconstruction error (squared, per example) and mean free energies."""
        monitor = train[:_MONITOR_ROWS]
        generator = torch.Generator(device=self.device).manual_seed(self.config.seed + 2)
        with self.model.trusted_inputs():
            state = self.model.sample_hidden(monitor, generator)
            reconstruction = self.model.mean_visibles(state)
            metrics = {
                "reconstruction_error": float(((monitor - reconstruction) ** 2).sum(1).mean()),
                "train_free_energy": float(self.model.free_energy(monitor).mean()),
            }
            if valid is not None:
                metrics["valid_free_energy"] = float(self.model.free_energy(valid).mean())
        return metrics

    def fit(self, train, epochs: int, *, valid=None, callbacks=(), threads=None) -> list[dict]:
        """Train until ``epochs`` epochs in total have run (a resumed trainer continues from its
        epoch) and return the per-epoch history.

        Parameters
        ----------
        train : Tensor or ndarray (N, n_visible) of 0/1 values
        epochs : int
            Epochs in total, not more epochs: a trainer that has already trained there in
            this process warns and does nothing.
        valid : Tensor or ndarray (M, n_visible), optional
            Its mean free energy is recorded every epoch ("valid_free_energy"); its NLL needs
            ln Z, which `irbm.runs.ValidateWithAIS` (a callback) estimates.
        callbacks : iterable of Callback or callables ``f(trainer, metrics)``
        threads : int, optional
            torch's CPU threads while it trains (default: as ``irbm train``, one for a small
            model, else the free cores, chosen again every epoch as a model grows;
            `irbm._threads.default_threads`; inside an enclosing choice, such as a command's
            ``--threads`` or `irbm._threads.hold_threads`, that choice); torch's own setting is
            restored after, and the callbacks' estimators keep each epoch's choice.

        Returns
        -------
        list of dict
            One per epoch: "epoch", "n_hidden", "reconstruction_error" (squared error of the
            mean reconstruction, summed over the visible units, averaged over the first
            training rows), "train_free_energy" (mean F(v) of those rows, nats),
            "valid_free_energy" (with ``valid``), "seconds" (the epoch's wall time) and
            "threads"; callbacks may add theirs (`ValidateWithAIS`: "valid_nll",
            "valid_nll_stderr", "log_z", and "log_z_ess", "log_z_chains", "log_z_reliable":
            its effective sample size, chains, and whether ln Z passes the reliability
            checks of `irbm.ais.AISResult.reliable`).
        """
        epochs = _count(epochs, "epochs", minimum=0)
        if getattr(self, "_trained_here", False) and 0 < epochs <= self.epoch:
            warn_user(f"this trainer has already run {self.epoch} epoch(s) and epochs="
                      f"{epochs} counts them in total: nothing to train (pass "
                      f"epochs={self.epoch + epochs} for {epochs} more)")
        before = torch.get_num_threads()
        # threads None inside an enclosing choice (`irbm._threads.hold_threads`, a command's
        # --threads, the demo's one thread per worker): keep it rather than read the free cores.
        keep_enclosing = threads is None and held_threads.get()
        # The callbacks' estimators (validation AIS) keep each epoch's choice of threads.
        token = held_threads.set(True)
        try:
            return self._fit(train, epochs, valid, callbacks, threads, keep_enclosing)
        finally:
            held_threads.reset(token)
            torch.set_num_threads(before)
            self._trained_here = True
            # A callback that raised must not stay hooked into later updates or relayouts.
            self.callbacks = []

    def _fit(self, train, epochs, valid, callbacks, threads, keep_enclosing) -> list[dict]:
        train = self._as_data(train)
        valid = None if valid is None else self._as_data(valid)
        callbacks = _as_callbacks(callbacks)
        self.callbacks = callbacks
        if self.chains is None:
            self.chains = self._initial_chains()
        self.optimizer.sync(self.model)
        self.stop_training = False
        self._claims = set()
        for callback in callbacks:
            callback.check_fit(self)
        self.run_dirs |= self._claims
        if self.config.visible_init == "data" and self.state.updates == 0:
            # Before the first update only (a checkpoint at epoch 0 resumes to the same values).
            self.model.initialize_visible_bias(train)
        for callback in callbacks:
            callback.on_fit_start(self)
        bar = tqdm(total=epochs, initial=self.epoch, disable=not self.progress, unit="epoch",
                   dynamic_ncols=True)
        while self.epoch < epochs and not self.stop_training:
            if not keep_enclosing:  # every epoch: a growing model's products outgrow one thread
                apply_threads(threads, self.config.batch_size * self.model.n_visible
                              * max(self.model.n_hidden, 1))
            for callback in callbacks:
                callback.on_epoch_start(self)
            start = time.perf_counter()
            order = torch.randperm(train.shape[0], generator=self.order_generator) \
                if self.config.shuffle else None
            with self.model.trusted_inputs():  # checked once above
                for rows in self._minibatches(train.shape[0], order):
                    self.update(train[rows])
            self.state.epoch += 1
            if self.model.n_hidden != self.size_history[-1][1]:
                self.size_history.append((self.epoch, self.model.n_hidden))
            metrics = {"epoch": self.epoch, "n_hidden": self.model.n_hidden,
                       **self.epoch_metrics(train, valid),
                       "seconds": time.perf_counter() - start,
                       "threads": torch.get_num_threads()}  # what "seconds" was measured on
            self.state.history.append(metrics)
            for callback in callbacks:
                callback.on_epoch_end(self, metrics)
                _plain_metrics(metrics, callback)  # before a later callback saves them
            bar.update(1)
            bar.set_postfix(n_hidden=metrics["n_hidden"],
                            recon=f"{metrics['reconstruction_error']:.2f}",
                            F=f"{metrics['train_free_energy']:.2f}")
        bar.close()
        for callback in callbacks:
            callback.on_fit_end(self)
        return self.history

    def _minibatches(self, n_rows: int, order):
        """The rows of each minibatch of an epoch: slices in the data's order (``order`` None)
        or index tensors into it, batch_size rows each but the last (see ``last_batch``)."""
        size = self.config.batch_size
        starts = list(range(0, n_rows, size))
        if self.config.last_batch == "merge" and len(starts) > 1 and n_rows % size:
            del starts[-1]
        for first, stop in zip(starts, starts[1:] + [n_rows]):
            yield slice(first, stop) if order is None else order[first:stop].to(self.device)

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, path):
        """Everything needed to resume bit-identically, written atomically."""
        tensors = ckpt.model_tensors(self.model)
        tensors.update({f"optimizer.{k}": v for k, v in self.optimizer.state_dict().items()})
        if self.chains is not None:
            tensors["trainer.chains"] = self.chains
        tensors["rng.gibbs"] = self.gibbs_generator.get_state()
        tensors["rng.order"] = self.order_generator.get_state()
        metadata = {"kind": "trainer", **ckpt.model_metadata(self.model),
                    "training": asdict(self.config), "epoch": self.state.epoch,
                    "updates": self.state.updates, "history": self.state.history,
                    "size_history": self.size_history}
        ckpt.write_checkpoint(path, tensors, metadata)

    @classmethod
    def from_checkpoint(cls, path, *, device=None, progress=True, force=False, **overrides):
        """Rebuild a trainer (and its model) from a trainer checkpoint or a run directory.

        ``overrides`` are hyper-parameters for the resumed run; any that differ from the
        recorded ones are refused unless ``force`` is set.
        """
        tensors, metadata = ckpt.read_checkpoint(ckpt.resolve(path, ckpt.TRAINER_FILE))
        if metadata.get("kind") != "trainer":
            raise ckpt.CheckpointError(f"{path} is a model checkpoint, not a training state")
        recorded = metadata.get("training")
        if isinstance(recorded, dict):  # checkpoints from before these options behaved so
            later = ("regularization", "growth", "epsilon_placement", "growth_trigger",
                     "new_unit", "pruning", "shuffle", "chains_per_update", "last_batch",
                     "average", "visible_init")
            defaults = asdict(TrainingConfig())
            # Runs from before the kernels drew from a torch.Generator.
            recorded = {**{name: defaults[name] for name in later}, "random_stream": "torch",
                        **recorded}
        known = set(TrainingConfig.__dataclass_fields__)
        if not isinstance(recorded, dict) or set(recorded) != known:
            raise ckpt.CheckpointError(f"{path}: the recorded training settings are malformed")
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown training settings: {', '.join(sorted(unknown))}")
        changed = {k: (recorded[k], v) for k, v in overrides.items()
                   if k in recorded and recorded[k] != v}
        if changed and not force:
            details = ", ".join(f"{k}: {old} -> {new}" for k, (old, new) in changed.items())
            raise ValueError(f"refusing to resume with different hyper-parameters ({details}); "
                             "pass force=True (CLI: --force) to override")
        config = {**recorded, **overrides}
        model = ckpt.model_from_tensors(tensors, metadata, device=device)
        trainer = cls(model, device=device, progress=progress, **config)
        trainer.optimizer.load_state_dict(
            {k.removeprefix("optimizer."): v.to(trainer.device)
             for k, v in tensors.items() if k.startswith("optimizer.")})
        if "trainer.chains" in tensors:
            trainer.chains = tensors["trainer.chains"].to(trainer.device, model.dtype)
        gibbs_state = tensors["rng.gibbs"]
        if gibbs_state.numel() == trainer.gibbs_generator.get_state().numel():
            trainer.gibbs_generator.set_state(gibbs_state)
        else:  # saved on another kind of device (a CUDA generator state: 16 bytes; CPU: 5,056)
            warn_user(f"{path}: the Gibbs sampler's random state was saved on another "
                      "kind of device; it continues from a new seed, so the resumed run does "
                      "not repeat an uninterrupted one bit for bit", RuntimeWarning)
            # Hashed, not seed + updates: that would replay the order or monitor generator's stream.
            trainer.gibbs_generator.manual_seed(batch_seed(int(config["seed"]),
                                                           int(metadata["updates"])))
        trainer.order_generator.set_state(tensors["rng.order"])
        trainer.state = _State(metadata["epoch"], metadata["updates"], metadata["history"])
        trainer.size_history = [tuple(x) for x in metadata["size_history"]]
        run_dir = ckpt.resolve(path, ckpt.TRAINER_FILE).parent.resolve()
        # The run's averaged model (RUN/average/, its validation and best model) is its too.
        trainer.run_dirs.update({run_dir, run_dir / AVERAGE_DIR})
        return trainer


class CheckpointEvery(Callback):
    """Save the training state (and the model alone) into a run directory every few epochs;
    with a parameter average (``Trainer(average=...)``), also the averaged model into
    RUN/average/ beside copies of the run's ``records`` (file names), so that it is a run
    directory too."""

    def __init__(self, run_dir, every: int = 1, records: tuple[str, ...] = ()):
        self.run_dir, self.every = Path(run_dir), _count(every, "every (epochs)")
        self.records = tuple(records)
        self.saved_epoch = None

    def check_fit(self, trainer):
        refuse_other_run(self.run_dir, trainer, (ckpt.TRAINER_FILE, ckpt.MODEL_FILE))
        average = self.run_dir / AVERAGE_DIR
        if trainer.config.average and (average / ckpt.TRAINER_FILE).exists():
            # Where the averaged model goes is another run's (trained into RUN/average before
            # that was refused): its files would be mixed with the average's.
            raise ValueError(f"{average} holds a run of its own ({ckpt.TRAINER_FILE}), where "
                             "this run writes its running average: move that run elsewhere "
                             "first")

    def on_epoch_end(self, trainer, metrics):
        if trainer.epoch % self.every == 0:
            self.save(trainer)

    def on_fit_end(self, trainer):
        if self.saved_epoch != trainer.epoch:
            self.save(trainer)

    def save(self, trainer):
        self.saved_epoch = trainer.epoch
        trainer.save_checkpoint(self.run_dir / ckpt.TRAINER_FILE)
        ckpt.save(trainer.model, self.run_dir / ckpt.MODEL_FILE,
                  extra={"epoch": trainer.epoch})
        averaged = trainer.averaged_model()
        if averaged is not None:
            self._save_average(averaged, trainer.epoch)

    def _save_average(self, averaged, epoch: int):
        """RUN/average/: the averaged model beside copies of the run's records, a run directory
        that every command takes (``irbm evaluate RUN/average``). The model is written last,
        so the records beside it are never older than it."""
        directory = self.run_dir / AVERAGE_DIR
        directory.mkdir(exist_ok=True)
        for name in self.records:
            if (self.run_dir / name).is_file():
                with atomic_write(directory / name) as stream:
                    stream.write((self.run_dir / name).read_bytes())
        ckpt.save(averaged, directory / ckpt.MODEL_FILE, extra={"epoch": epoch, "averaged": True})


def refuse_other_run(run_dir: Path, trainer: Trainer, names: tuple[str, ...]):
    """ValueError when ``trainer`` would write into ``run_dir`` over files ``names`` of another
    run: its checkpoints, records and best model would be replaced without a word. The
    directory a trainer was resumed from is its own, at any epoch (``--epochs 0`` saves a
    checkpoint at 0), and so is one where no callback found another run's files, which the
    fit claims once every check has passed."""
    directory = Path(run_dir).resolve()
    found = [name for name in names if (run_dir / name).exists()]
    if directory in trainer.run_dirs or not found:
        # Claimed once every callback's check has passed (`Trainer.fit`): a claim made here
        # would let another callback's files in the same directory through unchecked.
        trainer._claims.add(directory)
        return
    hint = (f"resume that run with Trainer.from_checkpoint('{run_dir}'), or "
            if (run_dir / ckpt.TRAINER_FILE).exists() else "")
    raise ValueError(f"{run_dir} already holds {', '.join(found)} of another run, which this "
                     f"trainer (not resumed from there) would overwrite: {hint}give the "
                     "callbacks a new directory, or delete those files first")


def _plain_metrics(metrics: dict, callback) -> None:
    """Turn the numbers a callback added to ``metrics`` (a 0-d tensor, a NumPy scalar) into
    Python's, which the checkpoint's JSON takes; ValueError naming the key and the callback
    for anything JSON cannot hold (it failed inside the next checkpoint's write, naming
    neither), with that key taken out of the history first."""
    refused = []
    for key, value in list(metrics.items()):
        one_number = (value.numel() == 1 if isinstance(value, torch.Tensor) else
                      np.size(value) == 1 if isinstance(value, (np.ndarray, np.generic)) else
                      False)
        if one_number:
            metrics[key] = value.item()
            continue
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            refused.append((key, type(value).__name__))
            del metrics[key]  # every other key converted first: the history stays writable
    if refused:
        source = getattr(callback, "function", callback)  # a plain function's own name
        name = getattr(source, "__qualname__", type(source).__name__)
        raise ValueError(f"metric(s) from {name} that JSON cannot hold: "
                         + ", ".join(f"{key!r} (a {kind})" for key, kind in refused)
                         + "; a metric must be a number, a string, a bool, None, or lists and "
                         "dicts of them")


def _count(value, name, minimum: int = 1) -> int:
    """An integer setting >= minimum, refusing bools, NaN and floats with a fraction."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or value != value \
            or not float(value).is_integer() or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)
