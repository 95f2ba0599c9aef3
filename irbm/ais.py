"""Annealed importance sampling of log Z (Salakhutdinov & Murray 2008) for every model family.

The intermediate distribution at inverse temperature t scales W and b by t and moves the visible
biases from the base's c0 to the model's c: p_t(v) ~ exp(-F_t(v)) with
F_t(v) = F(v; t W, t b, c0 + t (c - c0)). At t = 0 the hidden units carry no information, so p_0
factorizes over the visible units and its log Z is closed form. For the ordered families the
penalty beta softplus(t b) follows the scaled bias, and the iRBM keeps its infinite tail at every
temperature (units beyond l have zero parameters for any t). That is each family's "linear"
path; the families with z default to a "pinned" one (`irbm.models._pinned`), because along the
linear path their chains can collapse onto z = 1 and miss most of Z without a sign in the
weights. ``path`` chooses among the family's ``ais_paths``.

Base distributions:
- ``"model"`` (default): c0 = c, only W and b are annealed. It is the authors' choice, reproduces
  the paper's protocol and needs no data.
- ``"data"``: c0 = logit of the smoothed visible marginals of ``data`` (Salakhutdinov & Murray's
  base rate); it is closer to a trained model and gives lower-variance weights, notably for the
  iRBM, whose weights are often dominated by a few chains.
- a tensor (n_visible,) of base visible biases.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import time
import zipfile
import zlib
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from ._ais_chains import check_path, run_chains, run_reverse_chains
from ._io import atomic_write
from ._threads import chooses_threads
from .kernels import runs_on
from .models import (
    EnergyModel,
    TrajectoryPath,
    check_device,
    check_dtype,
    require_finite_parameters,
    require_full_precision,
)

# What `from irbm.ais import *` gives: the estimator, its result and schedules, and the
# helpers a user reads a run with; the batch and checkpoint plumbing stays internal.
__all__ = [
    "estimate_log_partition", "AISResult", "OutOfTime", "Deadline", "effective_sample_size",
    "default_betas", "make_betas", "tuned_betas", "thermodynamic_length",
    "betas_of_equal_length", "data_base_rate", "descended_base_bias", "base_log_partition",
    "log_mean_interval", "convergence_curve"]

MIN_JUDGED_CHAINS = 30  # AIS chains below which the spread of the weights says too little


class OutOfTime(Exception):
    """A checkpointed run stopped between chain batches because its ``deadline`` passed: the
    finished batches are in its checkpoint file, and a rerun with the same configuration
    resumes from them."""


class Deadline:
    """A time budget shared by one call's checkpointed runs: past ``at`` (a `time.perf_counter`
    value), or when the next chain batch would end past it, they stop before that batch by
    raising `OutOfTime`, once any of them has run a batch (``ran``), so that a call resumed past
    its deadline still makes progress and one that has made some starts no new batch, in this
    run or the next.

    A batch's time is predicted from the batches this call ran (any run's: AIS and RAISE steps
    cost alike at one width), because a batch at size can run for many minutes: started just
    before the budget it would overrun it by as much, or be lost to whatever kills the call at
    its end. ``seconds_per_step`` holds the last seconds per temperature step at each width
    (chains run together). A width not timed yet is predicted from the nearest one timed, as
    dearer per step if wider (a CPU's cost grows with the chains) and no cheaper if narrower
    (a GPU's is launch-bound): never too short on either device.

    A run that is not checkpointed goes on: stopped, its finished batches would be lost.
    """

    def __init__(self, at: float):
        self.at, self.ran, self.seconds_per_step = float(at), False, {}

    @classmethod
    def of(cls, deadline) -> Deadline | None:
        """``deadline`` as a Deadline: a float is one that no batch has run against yet."""
        return deadline if deadline is None or isinstance(deadline, cls) else cls(deadline)

    def predicted_seconds(self, n_chains: int, n_steps: int) -> float:
        """Seconds a batch of ``n_chains`` chains x ``n_steps`` temperature steps is predicted
        to take (0 before any batch of this call was timed; see the class)."""
        if not self.seconds_per_step:
            return 0.0
        timed = min(self.seconds_per_step, key=lambda width: abs(width - n_chains))
        return self.seconds_per_step[timed] * max(1.0, n_chains / timed) * n_steps

    def check(self, checkpoint_path, batch: int, total: int, shape=None):
        """Raise `OutOfTime` before chain batch ``batch`` of ``total`` (``shape``: its chains and
        temperature steps, None: unknown) when the budget is spent or the batch would end past
        it (see the class)."""
        if not self.ran or checkpoint_path is None:
            return
        now = time.perf_counter()
        predicted = 0.0 if shape is None else self.predicted_seconds(*shape)
        if now + predicted > self.at:
            saved = (f"the finished ones are saved in {checkpoint_path}" if batch else
                     "none of this run's had started")
            why = ("" if now > self.at else
                   f" (the next would take about {predicted:.0f} s, "
                   f"{self.at - now:.0f} s were left)")
            raise OutOfTime(f"stopped at the deadline with {total - batch} of {total} chain "
                            f"batch(es) left{why}; {saved}")

    def timed(self, shape, seconds: float):
        """Record that a batch of ``shape`` (chains, temperature steps) took ``seconds``."""
        n_chains, n_steps = shape
        if n_steps > 0:
            self.seconds_per_step[int(n_chains)] = seconds / n_steps


def run_batches(first: int, total: int, deadline, checkpoint_path, shapes=None):
    """The indices first, ..., total - 1 of the chain batches a run has left, each yielded once
    ``deadline`` (float, `Deadline` or None) allows it (`Deadline.check`) and marked run when
    the loop asks for the next one (a batch whose body raised is not: the call ends there).

    ``shapes`` (one (chains, temperature steps) per batch) lets the deadline time each batch
    and predict the next one's end. Pilot runs of a schedule, small and saved, are not
    batches: they are not checked."""
    deadline = Deadline.of(deadline)
    for batch in range(first, total):
        shape = None if shapes is None else shapes[batch]
        if deadline is not None:
            deadline.check(checkpoint_path, batch, total, shape)
        started = time.perf_counter()
        yield batch
        if deadline is not None:
            deadline.ran = True
            if shape is not None:
                deadline.timed(shape, time.perf_counter() - started)


@dataclass
class AISResult:
    """ln Z-hat = ln mean_s w_s with its interval ln(Z-hat -/+ 3 sigma), sigma = std(w) / sqrt(S).

    Attributes
    ----------
    log_z, log_z_low, log_z_high : float
        ln Z-hat and ln(Z-hat -/+ 3 sigma); ``log_z_low`` is -inf when 3 sigma >= Z-hat.
    log_weights : Tensor (n_chains,), float64, on the CPU whatever the model's device
        ln w_s per chain, including the base's ln Z_0 (so exp(log_weights) estimates Z).
    samples : Tensor (n_chains, n_visible)
        Final visible states of the chains (approximate samples from the model).
    n_betas : int
        Number of temperatures, 0 and 1 included.
    base : str
        "model", "data", "descents" or "custom".
    path : str
        The annealing path's description (which path, and its settings).
    seconds : float
        Wall-clock time spent sampling (summed over resumed runs).
    """

    log_z: float
    log_z_low: float
    log_z_high: float
    log_weights: torch.Tensor
    samples: torch.Tensor
    n_betas: int
    base: str
    seconds: float
    path: str = "linear"

    def __repr__(self) -> str:
        # The per-chain tensors would bury the numbers a reader looks for.
        return (f"AISResult(log_z={self.log_z:.4f}, interval=[{self.log_z_low:.4f}, "
                f"{self.log_z_high:.4f}], n_chains={self.n_chains}, n_betas={self.n_betas}, "
                f"effective_sample_size={self.effective_sample_size:.1f}, base={self.base!r}, "
                f"path={self.path.split(':')[0]!r}, seconds={self.seconds:.1f})")

    @property
    def n_chains(self) -> int:
        return self.log_weights.numel()

    @property
    def effective_sample_size(self) -> float:
        """(sum_s w_s)^2 / sum_s w_s^2, between 1 and ``n_chains``: how many chains the estimate
        effectively rests on."""
        return effective_sample_size(self.log_weights)

    @property
    def top_chain_share(self) -> float:
        """max_s w_s / sum_s w_s: the share of Z-hat held by the heaviest chain."""
        weights = torch.exp(self.log_weights - self.log_weights.max())
        return float(weights.max() / weights.sum())

    @property
    def reliable(self) -> bool:
        """False when the estimate rests on a few chains (see `reliability_warnings`)."""
        return not self.reliability_warnings()

    def reliability_warnings(self, bracketed: bool = False) -> list[str]:
        """Plain-words problems of this estimate, each with what to do; empty when none (the
        advice of the best run of a bracket, ``bracketed``, is the bracket's to follow).

        Threshold: an effective sample size below max(10% of the chains, 30) (below 10%: the
        weights are degenerate; below 30 effective chains: too few to judge by, as are fewer
        than 30 chains, `MIN_JUDGED_CHAINS`).
        Measured on a 411-unit CalTech101 iRBM (500 chains x 20,000 temperatures): the model
        base gave ESS 3-4 and two seeds 5 nats apart, underestimating ln Z; the data base gave
        ESS ~120 and seeds that agreed within the error bars. Seeds that agree are no evidence;
        the spread of the weights is. Neither base always wins: on a CalTech101 RBM-500 the model
        base gave ESS 140-169 of 500 where the data base gave 11-15 (results/
        caltech101_rbm_ais_bases.md), so the advice names the other base.
        """
        problems, ess = [], self.effective_sample_size
        if self.n_chains < MIN_JUDGED_CHAINS:
            problems.append(
                f"only {self.n_chains} AIS chains (effective sample size {ess:.1f}): too few "
                "for the spread of their weights to vouch that ln Z is not underestimated; run "
                f"well over {MIN_JUDGED_CHAINS} (irbm evaluate --chains; the sweep file's "
                "[evaluation] chains)")
        if ess < 0.1 * self.n_chains:
            problems.append(
                f"AIS effective sample size is {ess:.1f} of {self.n_chains} chains (the top "
                f"chain holds {100 * self.top_chain_share:.0f}% of the weight): ln Z is likely "
                f"underestimated, so the NLL looks too good. {self._advice(bracketed)}")
        elif self.n_chains >= MIN_JUDGED_CHAINS and ess < MIN_JUDGED_CHAINS:
            problems.append(
                f"AIS effective sample size is {ess:.1f} of {self.n_chains} chains, fewer than "
                f"the {MIN_JUDGED_CHAINS} an estimate is judged by: run more chains (the "
                "effective sample size must reach 30)")
        if not math.isfinite(self.log_z_low):
            problems.append("the lower 3-sigma bound of Z is not positive (ln = -inf): the "
                            "weights are too spread for the interval to mean much")
        return problems

    def _advice(self, bracketed: bool) -> str:
        """What raises the effective sample size of this run (of a bracket's, ``bracketed``)."""
        if bracketed:
            return ("More temperatures (irbm evaluate RUN --bracket --continue) or chains (a "
                    "new bracket with --chains) raise it; the bracket's reasons say which side "
                    "is suspect.")
        other_base = {"data": 'the other base (base="model"; irbm evaluate --base model)',
                      "model": 'the other base (base="data"; irbm evaluate --base data)'}.get(
            self.base, 'the data base (base="data"; irbm evaluate --base data)')
        advice = f"Use more temperatures, more chains, or {other_base}."
        if not self.path.startswith("linear"):
            advice += (" Each path gives a stochastic lower bound of ln Z: run the linear one "
                       'too (path="linear"; irbm evaluate --ais-path linear; irbm report pools '
                       "a model's evaluations), or bracket the NLL (irbm.evaluate.bracket_nll; "
                       "irbm evaluate --bracket).")
        return advice

    def summary(self) -> dict:
        """JSON-ready record of the estimate and its diagnostics (no per-chain arrays)."""
        return {"log_z": self.log_z, "log_z_low": self.log_z_low, "log_z_high": self.log_z_high,
                "n_chains": self.n_chains, "n_betas": self.n_betas, "base": self.base,
                "path": self.path, "seconds": self.seconds,
                "effective_sample_size": self.effective_sample_size,
                "top_chain_share": self.top_chain_share,
                "warnings": self.reliability_warnings()}


def effective_sample_size(log_weights) -> float:
    """(sum w)^2 / sum w^2 from ln w (S,), computed after dividing by max w."""
    log_weights = torch.as_tensor(log_weights, dtype=torch.float64).flatten()
    weights = torch.exp(log_weights - log_weights.max())
    return float(weights.sum() ** 2 / (weights**2).sum())


def default_betas() -> np.ndarray:
    """Authors' schedule: 500 temperatures in [0, 0.5), 4,000 in [0.5, 0.9), 10,000 in [0.9, 1],
    shape (14500,)."""
    return np.concatenate([np.linspace(0.0, 0.5, 500, endpoint=False),
                           np.linspace(0.5, 0.9, 4000, endpoint=False),
                           np.linspace(0.9, 1.0, 10000)])


def make_betas(n_betas=None, betas=None) -> np.ndarray:
    """0 = t_0 < t_1 < ... < t_M = 1, shape (M + 1,): ``n_betas`` evenly spaced, the explicit
    ``betas`` (validated), or `default_betas` when both are None."""
    if n_betas is not None and betas is not None:
        raise ValueError("give either n_betas or betas, not both")
    if n_betas is not None:
        if isinstance(n_betas, bool) or int(n_betas) != n_betas or n_betas < 2:
            raise ValueError(f"n_betas must be an integer >= 2 (0 and 1 included), got {n_betas!r}")
        return np.linspace(0.0, 1.0, int(n_betas))
    if betas is None:
        return default_betas()
    betas = np.asarray(betas.cpu() if isinstance(betas, torch.Tensor) else betas, dtype=np.float64)
    if betas.ndim != 1 or betas.size < 2:
        raise ValueError(f"betas must be a 1-D schedule of >= 2 values, got shape {betas.shape}")
    if not np.isfinite(betas).all():
        raise ValueError("betas contains NaN or infinite values")
    if betas[0] != 0.0 or betas[-1] != 1.0:
        raise ValueError(f"betas must start at 0 and end at 1, got {betas[0]} ... {betas[-1]}")
    if not (np.diff(betas) > 0).all():
        raise ValueError("betas must be strictly increasing")
    return betas


def tuned_betas(model, n_betas: int, *, base=None, path=None, trajectory=None, data=None,
                pilot_chains: int = 32, pilot_betas: int = 1000, seed: int = 0) -> np.ndarray:
    """A schedule of ``n_betas`` temperatures, shape (n_betas,), that spends them where the
    log-weights change: equal thermodynamic length per step, measured on a pilot run.

    The pilot anneals ``pilot_chains`` chains over ``pilot_betas`` evenly spaced temperatures
    and records s_k, the spread (standard deviation over the chains) of each step's ln w
    increment. For small steps s_k is proportional to the step's width times the local speed of
    the path, so the cumulative sum of s_k is the thermodynamic length L(t) (Crooks 2007;
    Grosse, Maddison & Salakhutdinov 2013, "Annealing between distributions by averaging
    moments", who schedule AIS this way). The returned temperatures split L into equal parts:
    with N steps each adds about the same variance, L^2 / N^2, to ln w. The schedule is fixed
    before the estimate runs on fresh chains (another seed), so Z-hat stays unbiased; adapting
    it during the run would not.

    Parameters
    ----------
    model : EnergyModel
    n_betas : int
        Temperatures in the result, 0 and 1 included.
    base, path, trajectory, data : as in `estimate_log_partition`.
    pilot_chains, pilot_betas : int
        Size of the pilot run (its cost: pilot_chains x pilot_betas Gibbs steps).
    seed : int
        Seed of the pilot (use another for the estimate).
    """
    n_betas = len(make_betas(n_betas))
    pilot, length = thermodynamic_length(model, base=base, path=path, trajectory=trajectory,
                                         data=data, pilot_chains=pilot_chains,
                                         pilot_betas=pilot_betas, seed=seed)
    return betas_of_equal_length(pilot, length, n_betas)


def thermodynamic_length(model, *, base=None, path=None, trajectory=None, data=None,
                         pilot_chains: int = 32, pilot_betas: int = 1000, seed: int = 0,
                         reverse_from=None):
    """(t (P,), L(t) (P,)): the pilot run of `tuned_betas`, L(0) = 0, strictly increasing.

    With ``reverse_from`` (R, n_visible), binary rows, the pilot is RAISE's instead: one reverse
    chain per row, started at the row and annealed from the model down to the base
    (`run_reverse_chains`), so the length is measured where reverse chains, which lag behind
    the temperature on the data's side rather than the base's, spend their variance
    (``pilot_chains`` is then R).
    """
    pilot = torch.from_numpy(make_betas(pilot_betas))
    variances = []
    with torch.no_grad():
        base_bias, _ = resolve_base(model, base, data)
        annealing = make_path(model, base_bias, path, trajectory)
        if reverse_from is None:
            run_chains(annealing, pilot, int(pilot_chains), batch_seed(seed, 2**31),
                       step_variances=variances)
        else:
            rows = model.check_visible(torch.as_tensor(reverse_from))
            run_reverse_chains(annealing, pilot, rows, batch_seed(seed, 2**31),
                               step_variances=variances)
            variances.reverse()  # taken from t = 1 down; the length runs from t = 0 up
    # A floor keeps every step of positive width where the pilot saw no spread at all.
    speed = np.sqrt(np.asarray(variances)) + 1e-3 * np.sqrt(max(variances) or 1.0)
    return pilot.numpy(), np.concatenate([[0.0], np.cumsum(speed)])


def betas_of_equal_length(pilot, length, n_betas: int) -> np.ndarray:
    """``n_betas`` temperatures (n_betas,) splitting the length L(t) of `thermodynamic_length`
    into equal parts."""
    betas = np.interp(np.linspace(0.0, length[-1], int(n_betas)), length, pilot)
    betas[0], betas[-1] = 0.0, 1.0  # the length is strictly increasing, so are the betas
    return make_betas(betas=betas)


def data_base_rate(data, model) -> torch.Tensor:
    """The data base: visible biases c0 (n_visible,) of the smoothed data marginals."""
    return model.base_visible_bias(data)


# Descents that place the descents base, and how far its marginals stay from 0 and 1.
DESCENT_BASE_STARTS = 1000
DESCENT_BASE_CLAMP = 0.02
_descended_bases: dict[str, torch.Tensor] = {}  # one model's base, as `resolve_base` is called


@torch.no_grad()
def descended_base_bias(model, n_starts: int = DESCENT_BASE_STARTS, seed: int = 0
                        ) -> torch.Tensor:
    """c0 = logit(clamp(sum_k w_k P(v = 1 | h_k), s, 1 - s)), shape (n_visible,): the descents
    base, with h_k the distinct minima of G that descents from ``n_starts`` uniform random
    hidden vectors reach (`EnergyModel.descend_hidden`), w_k = softmax_k(-G(h_k)) and
    s = DESCENT_BASE_CLAMP.

    Where a model's mass sits in a few deep, narrow basins that annealing from the data's base
    rate never enters, annealing from the basins' own visible marginals starts in them: on the
    CalTech101 RBM-100 (`results/models/rbm100-adagrad-selected`) AIS from the data base was
    12.9 nats below a certain floor at 256,000 temperatures, and from this base within 0.01 of
    it at 16,000, with 430-480 effective chains of 500. Deterministic given the model, so a
    base built again (a resumed run, BDMC after tempering) is the same; the last model's is
    kept.
    """
    key = tensor_digest(*model.state_dict().values(), torch.tensor([n_starts, seed]))
    if key not in _descended_bases:
        generator = torch.Generator(device=model.device).manual_seed(int(seed))
        starts = torch.rand((int(n_starts), model.n_hidden), generator=generator,
                            device=model.device) < 0.5
        minima = torch.unique(model.descend_hidden(starts.to(model.dtype)), dim=0)
        exact = model.as_float64()  # the weights in float64: softmax over G differences
        with exact.trusted_inputs():  # the descents' own binary vectors
            weights = torch.softmax(-exact.hidden_free_energy(minima.double()), 0)
            marginals = weights @ exact.mean_visibles(minima.double())
        _descended_bases.clear()
        _descended_bases[key] = torch.logit(marginals.clamp(DESCENT_BASE_CLAMP,
                                                            1 - DESCENT_BASE_CLAMP))
    return _descended_bases[key].to(dtype=model.dtype, device=model.device)


def base_log_partition(model, base_bias: torch.Tensor, path=None) -> float:
    """ln Z_0 of the base with visible biases ``base_bias`` (n_visible,), in float64, for the
    model's annealing path ``path`` (default: the family's)."""
    return model.annealing_path(base_bias, kind=path).log_base_partition


def log_mean_interval(log_weights, n_sigma: float = 3.0) -> tuple[float, float, float]:
    """(ln Z-hat, ln(Z-hat - n_sigma sigma), ln(Z-hat + n_sigma sigma)) with Z-hat = mean_s w_s and
    sigma = std(w) / sqrt(S), from ln w of shape (S,), computed after dividing by max w."""
    log_weights = torch.as_tensor(log_weights, dtype=torch.float64).flatten()
    n = log_weights.numel()
    if n == 0:
        raise ValueError("no log weights")
    top = float(log_weights.max())
    if not math.isfinite(top):  # every weight 0, or an overflow upstream
        return top, -math.inf, top
    scaled = torch.exp(log_weights - top)
    mean = float(scaled.mean())
    if n < 2:
        return top + math.log(mean), -math.inf, math.inf
    spread = n_sigma * float(scaled.std(correction=1)) / math.sqrt(n)
    low = top + math.log(mean - spread) if spread < mean else -math.inf
    return top + math.log(mean), low, top + math.log(mean + spread)


def convergence_curve(log_weights, n_points: int = 50):
    """ln Z-hat and ln(Z-hat -/+ 3 sigma) using the first S chains, for S log-spaced in [2, n].

    Returns
    -------
    n_chains : ndarray (P,) of int, increasing, P <= n_points, last entry n.
    log_z, log_z_low, log_z_high : ndarray (P,) of float64.
    """
    log_weights = torch.as_tensor(log_weights, dtype=torch.float64).flatten()
    n = log_weights.numel()
    if n < 2:
        raise ValueError(f"need at least 2 chains for a convergence curve, got {n}")
    counts = np.unique(np.geomspace(2, n, max(int(n_points), 2)).round().astype(np.int64))
    counts[-1] = n
    stats = np.array([log_mean_interval(log_weights[:count]) for count in counts])
    return counts, stats[:, 0], stats[:, 1], stats[:, 2]


def tensor_digest(*tensors) -> str:
    """sha256 of the tensors' bytes, in order (what keys a checkpoint to its inputs)."""
    hasher = hashlib.sha256()
    for tensor in tensors:
        array = torch.as_tensor(tensor).detach().cpu().numpy()
        hasher.update(np.ascontiguousarray(array).tobytes())
    return hasher.hexdigest()


def batch_seed(seed: int, batch: int) -> int:
    """Independent 63-bit seed per chain batch, so a resumed run redraws the same chains."""
    return int(np.random.SeedSequence([seed, batch]).generate_state(1, np.uint64)[0] >> 1)


def load_batches(path, config: str, names: tuple[str, ...]):
    """({name: [Tensor per finished chain batch]}, seconds) of an interrupted run saved at
    ``path`` by `save_batches` (empty lists and 0.0 when there is none); ValueError when it was
    written with another ``config``."""
    if path is None or not os.path.exists(path):
        return {name: [] for name in names}, 0.0
    try:
        with np.load(path) as saved:
            config_saved = str(saved["config"])
            sizes, seconds = saved["batch_sizes"].tolist(), float(saved["seconds"])
            arrays = {name: saved[name] for name in names}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as error:
        raise ValueError(f"the checkpoint {path} is unreadable ({error}); delete it to run "
                         "its chains afresh") from None
    if config_saved != config:
        was, now = json.loads(config_saved), json.loads(config)
        differing = sorted(key for key in {*was, *now} if was.get(key) != now.get(key))
        raise ValueError(f"the checkpoint {path} was written with another configuration (it "
                         f"differs in {', '.join(differing)}): rerun the command that wrote "
                         "it with its options to go on, or delete it to start afresh (Python: "
                         "or give checkpoint_path= another file)")
    bounds = np.cumsum([0] + sizes)
    return ({name: [torch.from_numpy(array[i:j]) for i, j in zip(bounds[:-1], bounds[1:])]
             for name, array in arrays.items()}, seconds)


def save_batches(path, config: str, batches: dict, seconds: float):
    """Save the finished chain batches ({name: [Tensor (batch size, ...)]}, every name with the
    same batch sizes) to ``path``: written to a temporary file and renamed, so an
    interruption never leaves a torn file."""
    sizes = [len(piece) for piece in next(iter(batches.values()))]
    with atomic_write(path) as handle:
        np.savez(handle, config=np.array(config), seconds=np.array(seconds),
                 batch_sizes=np.array(sizes, dtype=np.int64),
                 **{name: torch.cat(pieces).numpy() for name, pieces in batches.items()})


def run_config(model, annealing, schedule: np.ndarray, base_name: str, base_bias, trajectory,
               dtype, device, **settings) -> str:
    """What makes a run's chain batches reproducible, as the JSON its checkpoint is keyed by:
    the model and its parameters, the schedule (n_betas,), the base, the path, every model of
    a trajectory, whether the fused kernels (another random stream) draw the chains, and
    ``settings`` (chains or rows, seed, batch size...)."""
    return json.dumps({
        "model": model.config(), "parameters": tensor_digest(*model.state_dict().values()),
        "betas": tensor_digest(torch.from_numpy(schedule)), "n_betas": len(schedule),
        "base": base_name, "base_bias": tensor_digest(base_bias),
        "path": annealing.description,
        "trajectory": [tensor_digest(*m.state_dict().values()) for m in trajectory or []],
        "kernels": annealing.fused_steps
        and runs_on(torch.empty(1, dtype=dtype, device=device)),
        **settings, "dtype": str(dtype), "device": device.type})


def on_device(model: EnergyModel, device, dtype, what: str) -> EnergyModel:
    """``model``, or a copy of it on ``device`` in ``dtype`` (a torch dtype or its name) where
    either differs; ValueError naming an unusable device, or a precision below float32 for
    ``what`` (the estimator)."""
    check_device(device)
    dtype = None if dtype is None else check_dtype(dtype)  # "float64" names one too
    require_full_precision(dtype or model.dtype, what, "this model" if dtype is None else "dtype=")
    require_finite_parameters(model, what)
    device = torch.device(device) if device is not None else model.device
    if device.type == model.device.type and device.index is None:
        device = model.device  # "cuda" names the model's own cuda:N: no copy
    dtype = dtype or model.dtype
    if (device, dtype) != (model.device, model.dtype):
        model = copy.deepcopy(model).to(device=device, dtype=dtype)
    return model


def resumed_label(name: str, saved: int, batches: int) -> str:
    """A progress bar's label: the run's name, and how many of its batches were saved by an
    earlier call (a bracket resumed call by call would otherwise look as if it started over)."""
    return f"{name} ({saved} of {batches} batches saved)" if saved else name


@chooses_threads(lambda a: min(int(a["n_chains"]), int(a["chain_batch_size"])))
def estimate_log_partition(model, n_chains: int = 100, n_betas=None, *, betas=None, base=None,
                           path=None, trajectory=None, data=None, seed=None, generator=None,
                           device=None, dtype=None,
                           chain_batch_size: int = 1000, checkpoint_path=None,
                           deadline: float | Deadline | None = None,
                           progress: bool = True, threads=None) -> AISResult:
    """ln Z-hat = ln (1/S) sum_s w_s, ln w_s = ln Z_0 + sum_k [F_{t_{k-1}}(v_s) - F_{t_k}(v_s)].

    Parameters
    ----------
    model : EnergyModel (RBM, OrderedRBM or InfiniteRBM).
    n_chains : int
        Number S of independent AIS chains.
    n_betas : int, optional
        Number of evenly spaced temperatures in [0, 1]; ``betas`` gives them explicitly (strictly
        increasing, from 0 to 1). Neither: `default_betas` (14,500 temperatures).
    base : "model", "data", "descents" or Tensor (n_visible,)
        Base visible biases c0 (see the module docstring); "data" needs ``data`` (N, n_visible);
        "descents" is `descended_base_bias`.
    path : str, optional
        One of the model's ``ais_paths`` (default: its first), or "trajectory".
    trajectory : list of EnergyModel, optional
        Models saved while this one was trained, earliest first: anneal along them
        (`irbm.models.TrajectoryPath`; implies ``path="trajectory"``).
    seed : int, optional
        Chain batch i uses a generator seeded from (seed, i). ``generator`` instead draws that
        seed from a torch.Generator; with neither, it is drawn from torch's global generator.
    device, dtype : where and in which precision to run (default: the model's); the model is
        copied when they differ. ln w is accumulated in float64 regardless; float32 steps add
        about 1e-3 nats of rounding to ln w over the default schedule.
    chain_batch_size : int
        Chains run together; memory is about chain_batch_size (3 n_visible + 10 n_hidden) values.
    checkpoint_path : str, optional
        .npz file where finished chain batches are saved; a rerun with the same configuration
        (requires ``seed``) resumes from it, a different configuration raises ValueError.
    deadline : float or Deadline, optional
        A `time.perf_counter` value: with ``checkpoint_path``, past it, or before a batch
        predicted to end past it, the run stops between batches by raising `OutOfTime`, after
        at least one; a `Deadline` shared by several runs lets a run stop before its first
        batch once another has run one.
    threads : int, optional
        torch's CPU threads for the call (None: as `irbm.Trainer.fit` picks them, one for a
        small product, else the free cores; inside a call that chose them, its choice);
        torch's own setting is restored after.
    progress : bool
        Show a tqdm progress bar.

    Returns
    -------
    AISResult
    """
    betas = make_betas(n_betas, betas)
    if isinstance(n_chains, bool) or int(n_chains) != n_chains or n_chains < 1:
        raise ValueError(f"n_chains must be a positive integer, got {n_chains!r}")
    if int(chain_batch_size) < 1:
        raise ValueError(f"chain_batch_size must be >= 1, got {chain_batch_size}")
    if seed is not None and generator is not None:
        raise ValueError("give either seed or generator, not both")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got "  # not .device
                        f"{type(generator).__name__} (a seed is seed=)")
    if checkpoint_path is not None and seed is None:
        raise ValueError("resuming from checkpoint_path needs an explicit integer seed")
    if seed is None:
        seed = int(torch.randint(0, 2**62, (1,), generator=generator,
                                 device=generator.device if generator is not None else None))
    n_chains, chain_batch_size, seed = int(n_chains), int(chain_batch_size), int(seed)
    model = on_device(model, device, dtype, "AIS")
    device, dtype = model.device, model.dtype
    with torch.no_grad():
        base_bias, base_name = resolve_base(model, base, data)
        annealing = make_path(model, base_bias, path, trajectory)
        check_path(model, annealing)
        log_partition_0 = annealing.log_base_partition
        config = run_config(model, annealing, betas, base_name, base_bias, trajectory, dtype,
                            device, n_chains=n_chains, seed=seed,
                            chain_batch_size=chain_batch_size)
        done, seconds = load_batches(checkpoint_path, config, ("log_weights", "samples"))
        all_log_weights, all_samples = done["log_weights"], done["samples"]
        sizes = [min(chain_batch_size, n_chains - start)
                 for start in range(0, n_chains, chain_batch_size)]
        betas_tensor = torch.from_numpy(betas)
        with tqdm(total=(len(sizes) - len(all_log_weights)) * (len(betas) - 1),
                  disable=not progress or len(all_log_weights) == len(sizes),
                  desc=resumed_label("AIS", len(all_log_weights), len(sizes)), unit="step") as bar:
            for batch in run_batches(len(all_log_weights), len(sizes), deadline,
                                     checkpoint_path,
                                     [(size, len(betas) - 1) for size in sizes]):
                started = time.perf_counter()
                log_weights, samples = run_chains(make_path(model, base_bias, path, trajectory),
                                                  betas_tensor,
                                                  sizes[batch], batch_seed(seed, batch),
                                                  bar.update)
                all_log_weights.append(log_weights.cpu() + log_partition_0)
                all_samples.append(samples.cpu())
                seconds += time.perf_counter() - started
                if checkpoint_path is not None:
                    save_batches(checkpoint_path, config, {
                        "log_weights": all_log_weights,
                        "samples": [piece.to(torch.uint8) for piece in all_samples]}, seconds)
    log_weights = torch.cat(all_log_weights)
    log_z, low, high = log_mean_interval(log_weights)
    return AISResult(log_z, low, high, log_weights,
                     torch.cat(all_samples).to(dtype=dtype, device=device), len(betas), base_name,
                     seconds, annealing.description)


def make_path(model, base_bias, path=None, trajectory=None):
    """The model's annealing path ``path`` from the base ``base_bias`` (n_visible,), or the
    path along ``trajectory`` (earlier models, earliest first) when it is given."""
    if trajectory is None:
        if path == "trajectory":
            raise ValueError('path="trajectory" needs the models saved during training '
                             "(trajectory=[...], earliest first)")
        return model.annealing_path(base_bias, kind=path)
    if path not in (None, "trajectory"):
        raise ValueError(f'a trajectory is annealed along path="trajectory", not {path!r}')
    return TrajectoryPath([*trajectory, model], base_bias)


def resolve_base(model, base, data):
    """(c0 (n_visible,) in the model's dtype and device, name of the base)."""
    if base is None:
        base = model.default_ais_base
        if base == "data" and data is None:
            raise ValueError(f"the default AIS base of the {model.display_name} is the data base "
                             'rate: pass data (e.g. the training set), or base="model"')
    if isinstance(base, str):
        if base == "model":
            return model.base_visible_bias(), base
        if base == "descents":
            return descended_base_bias(model), base
        if base != "data":
            raise ValueError(f'base must be "model", "data", "descents" or a tensor, got '
                             f'{base!r}')
        if data is None:
            raise ValueError('base="data" needs the data argument')
        return model.base_visible_bias(data), base
    base_bias = torch.as_tensor(base).to(dtype=model.dtype, device=model.device)
    if base_bias.shape != (model.n_visible,) or not torch.isfinite(base_bias).all():
        raise ValueError(f"base visible biases must be finite, of shape ({model.n_visible},)")
    return base_bias, "custom"
