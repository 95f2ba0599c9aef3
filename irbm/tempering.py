"""Parallel tempering with Bennett's acceptance ratio: a point estimate of ln Z that does not
rest on a single annealing pass, to cross-check the bracket (Krause, Fischer & Igel 2020,
"Algorithms for estimating the partition function of restricted Boltzmann machines", Artificial
Intelligence 278; Bennett 1976).

R replicas of ``n_ladders`` chains sit at fixed temperatures t_0 = 0 < ... < t_{R-1} = 1 of an
annealing path (`irbm.models.AnnealingPath`). Each sweep moves every replica by one Gibbs
transition at its own temperature, then proposes to exchange the states of neighbours k, k + 1
(even pairs on even sweeps, odd pairs on odd ones), accepted with probability
min(1, f_{k+1}(x_k) f_k(x_{k+1}) / (f_k(x_k) f_{k+1}(x_{k+1}))). Exchanges carry states found
at low coupling, where modes are connected, up to the model, so the chains at t = 1 can reach
mass that one annealing pass misses.

After a burn-in, each pair's ratio Z_{k+1} / Z_k is solved from both neighbours' samples by
Bennett's acceptance ratio, the minimum-variance estimator given samples of both ends, and
ln Z = ln Z_0 + sum_k ln(Z_{k+1} / Z_k). Unlike AIS it is not a bound, only consistent: it
errs either way when the chains have not mixed. Its error is measured honestly from
independent ladders: the ladders are split into groups, each group gives its own ln Z, and the
spread of the groups is the standard error. How often states travel from t = 0 to t = 1 after
the burn-in (``passages``) shows whether the ladder mixes at all.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from ._ais_chains import check_path
from ._threads import chooses_threads
from .ais import make_betas, make_path, resolve_base, tuned_betas
from .models import UniformSource, require_finite_parameters, require_full_precision

# What `from irbm.tempering import *` gives, and the module's public names.
__all__ = ["estimate_log_partition_tempering", "TemperingResult", "bar_log_ratio"]


@dataclass
class TemperingResult:
    """ln Z-hat by parallel tempering and BAR, with its diagnostics.

    Attributes
    ----------
    log_z : float
        ln Z_0 + sum_k BAR ln(Z_{k+1} / Z_k), all ladders pooled.
    stderr : float
        Standard error of ``log_z``: std of the groups' estimates / sqrt(n_groups).
    group_log_z : ndarray (n_groups,)
        ln Z-hat of each group of independent ladders.
    log_ratios : ndarray (R - 1,)
        BAR ln(Z_{k+1} / Z_k) per neighbouring pair.
    swap_rates : ndarray (R - 1,)
        Share of accepted exchanges per pair.
    passages : int
        Arrivals at t = 1 of states that were at t = 0 earlier, counted after the burn-in (0:
        the ladder never carried a state across; a round trip is two passages).
    betas : ndarray (R,)
    n_ladders, n_sweeps, burn_in : int
    seconds : float
    path : str
        The annealing path's description.
    samples : Tensor (n_samples, n_visible) or None
        States of the model's replica (t = 1), taken at evenly spaced sweeps after the burn-in
        from every ladder (``n_samples``): draws from the model as far as the ladder has
        equilibrated (`irbm.evaluate.bdmc_log_partition` anneals them back to the base).
    """

    log_z: float
    stderr: float
    group_log_z: np.ndarray
    log_ratios: np.ndarray
    swap_rates: np.ndarray
    passages: int
    betas: np.ndarray
    n_ladders: int
    n_sweeps: int
    burn_in: int
    seconds: float
    path: str
    samples: torch.Tensor | None = None

    def summary(self) -> dict:
        return {"log_z": self.log_z, "stderr": self.stderr,
                "group_log_z": self.group_log_z.tolist(), "n_temperatures": len(self.betas),
                "min_swap_rate": float(self.swap_rates.min()),
                "passages": self.passages, "n_ladders": self.n_ladders,
                "n_sweeps": self.n_sweeps, "burn_in": self.burn_in, "seconds": self.seconds,
                "path": self.path}


def bar_log_ratio(forward, backward) -> float:
    """ln(Z_1 / Z_0) by Bennett's acceptance ratio, from w = ln f_1(x) - ln f_0(x).

    forward : (n_0,) w at samples x ~ f_0 / Z_0; backward : (n_1,) w at samples x ~ f_1 / Z_1.
    Solves g(c) = ln sum_0 sigmoid(w + c) - ln sum_1 sigmoid(-(w + c)) = 0 for c, increasing
    in c; then ln(Z_1 / Z_0) = ln(n_1 / n_0) - c. Newton's steps inside a bracket [low, high]
    known to hold the root, with the safeguard of Numerical Recipes' rtsafe (Press et al.,
    section 9.4): a bisection instead wherever the step would leave the bracket or is not at
    most half the step before last. Newton alone crawls where g is exponential in c (one nat
    per step in a tail where g' = -g); bisection alone took about 60 evaluations, this about 10.
    """
    forward = np.asarray(forward, dtype=np.float64)
    backward = np.asarray(backward, dtype=np.float64)
    if forward.size == 0 or backward.size == 0:
        raise ValueError("BAR needs samples from both distributions")
    low = -max(forward.max(), backward.max()) - 50.0  # g < 0 here
    high = -min(forward.min(), backward.min()) + 50.0  # g > 0 here
    c = 0.5 * (low + high)
    before_last = last = high - low  # the sizes of the last two steps
    for _ in range(400):  # bisection alone ends within about 60 + 1100 (float64's range)
        value, slope = _bennett_balance(forward, backward, c)
        if value == 0 and slope > 0:
            return math.log(backward.size / forward.size) - c
        # g = 0 without slope: both sums saturated, a plateau; keep to its upper edge.
        low, high = (low, c) if value > 0 else (c, high)
        newton = c - value / slope if slope > 0 else math.nan
        if low < newton < high and abs(newton - c) <= 0.5 * before_last:
            step = newton
        else:  # also where the Newton step is nan
            step = 0.5 * (low + high)
        before_last, last = last, abs(step - c)
        c = step
        if last <= 4 * np.finfo(np.float64).eps * max(1.0, abs(c)):
            break
    return math.log(backward.size / forward.size) - c


def _bennett_balance(forward, backward, c) -> tuple[float, float]:
    """(g(c), g'(c)) of `bar_log_ratio`: with s = sigmoid(w + c) at the forward works and
    r = sigmoid(-(w + c)) at the backward ones, g' = E_s[1 - s] + E_r[1 - r], each mean
    weighted by its own terms (s / sum s, r / sum r)."""
    log_s = -np.logaddexp(0.0, -(forward + c))  # ln sigmoid(w + c)
    log_r = -np.logaddexp(0.0, backward + c)  # ln sigmoid(-(w + c))
    log_sum_s, log_sum_r = np.logaddexp.reduce(log_s), np.logaddexp.reduce(log_r)
    slope = (np.exp(log_s - log_sum_s) @ -np.expm1(log_s)
             + np.exp(log_r - log_sum_r) @ -np.expm1(log_r))
    return float(log_sum_s - log_sum_r), float(slope)


def _log_partition(log_base, forward, backward, ladders=slice(None)) -> tuple[float, np.ndarray]:
    """(ln Z_0 + sum_k BAR_k, the BAR_k) from works (R - 1, sweeps, ladders) of the chosen
    ladders."""
    ratios = np.array([bar_log_ratio(forward[k][:, ladders].ravel(),
                                     backward[k][:, ladders].ravel())
                       for k in range(len(forward))])
    return log_base + float(ratios.sum()), ratios


@torch.no_grad()
@chooses_threads(lambda a: int(a["n_temperatures"]) * int(a["n_ladders"]))
def estimate_log_partition_tempering(model, n_temperatures: int = 100, n_sweeps: int = 2000, *,
                                     n_ladders: int = 32, betas=None, base=None, path=None,
                                     data=None, burn_in: float = 0.25, n_groups: int = 8,
                                     n_samples: int = 0, seed: int | None = 0,
                                     progress: bool = True, threads=None) -> TemperingResult:
    """ln Z-hat of ``model`` by parallel tempering along an annealing path, ratios by BAR.

    Parameters
    ----------
    model : EnergyModel
    n_temperatures : int
        Replicas R, at temperatures of equal thermodynamic length (`irbm.ais.tuned_betas`)
        unless ``betas`` (R,) gives them, from 0 to 1.
    n_sweeps : int
        Sweeps (a transition of every replica and one round of exchanges), burn-in included.
    n_ladders : int
        Independent chains per temperature; a multiple of ``n_groups``.
    base, path, data : as in `irbm.ais.estimate_log_partition`.
    burn_in : float in [0, 1)
        Share of the sweeps discarded before the works are recorded.
    n_groups : int
        Groups of ladders whose separate estimates give the standard error (at least 2).
    n_samples : int
        States of the model's replica to keep (`TemperingResult.samples`): a multiple of
        ``n_ladders``, each ladder's taken at evenly spaced sweeps after the burn-in.
    seed : int or None
        None: a fresh random seed, as in `irbm.ais.estimate_log_partition`.
    threads : int, optional: torch's CPU threads, as in `irbm.ais.estimate_log_partition`.

    Returns
    -------
    TemperingResult
    """
    require_finite_parameters(model, "parallel tempering")
    require_full_precision(model.dtype, "parallel tempering")
    n_ladders, n_groups, n_sweeps = int(n_ladders), int(n_groups), int(n_sweeps)
    if n_groups < 2 or n_ladders % n_groups:
        raise ValueError(f"n_ladders ({n_ladders}) must be a multiple of n_groups "
                         f"({n_groups}), and n_groups at least 2 (the standard error)")
    if not 0.0 <= float(burn_in) < 1.0:
        raise ValueError(f"burn_in must lie in [0, 1), got {burn_in}")
    kept = n_sweeps - int(burn_in * n_sweeps)
    if kept < 1:
        raise ValueError(f"n_sweeps ({n_sweeps}) leaves no sweep after the burn-in")
    per_ladder, rest = divmod(int(n_samples), n_ladders)
    seed = int(torch.randint(0, 2**62, (1,))) if seed is None else int(seed)
    if n_samples < 0 or rest or per_ladder > kept:
        raise ValueError(f"n_samples ({n_samples}) must be a multiple of n_ladders "
                         f"({n_ladders}), at most n_ladders x the {kept} sweeps after the "
                         "burn-in")
    # The last sweep, and before it every kept // per_ladder sweeps (0-based record index).
    sample_at = {kept - 1 - i * (kept // per_ladder) for i in range(per_ladder)}
    samples = []
    started = time.perf_counter()
    base_bias, _ = resolve_base(model, base, data)
    if betas is None:
        betas = tuned_betas(model, int(n_temperatures), base=base, path=path, data=data,
                            seed=seed + 1)
    betas = make_betas(betas=betas).tolist()
    n_replicas = len(betas)
    replicas = [make_path(model, base_bias, path) for _ in betas]
    check_path(model, replicas[0])
    uniforms = UniformSource(seed, model.device)
    visible = replicas[0].sample_base(n_ladders, uniforms)
    for replica, t in zip(replicas, betas):  # warm start: one slow annealing pass
        replica.start(visible, uniforms)
        for _ in range(5):
            replica.step(t, t)
        visible = replica.visible
    forward = np.zeros((n_replicas - 1, kept, n_ladders))
    backward = np.zeros((n_replicas - 1, kept, n_ladders))
    accepted = np.zeros(n_replicas - 1)
    proposed = np.zeros(n_replicas - 1)
    labels = torch.arange(n_replicas * n_ladders).reshape(n_replicas, n_ladders)
    from_bottom = torch.zeros(n_replicas * n_ladders, dtype=torch.bool)
    passages = 0
    swap_uniform = torch.Generator().manual_seed(seed + 2)
    for sweep in tqdm(range(n_sweeps), disable=not progress, desc="tempering", unit="sweep"):
        for replica, t in zip(replicas, betas):
            replica.step(t, t)
        # ln f of each replica's states at its own temperature and at its neighbours' (one
        # product W v per replica): up[k] = ln f_{k+1}(x_k) - ln f_k(x_k) and
        # down[k] = ln f_k(x_{k+1}) - ln f_{k+1}(x_{k+1}).
        up, down = [], []
        for k, replica in enumerate(replicas):
            around = betas[max(k - 1, 0):k + 2]
            values = replica.log_unnormalized_many(replica.visible, around)
            own = values[1] if k > 0 else values[0]
            if k > 0:
                down.append(values[0] - own)
            if k < n_replicas - 1:
                up.append(values[-1] - own)
        record = sweep - (n_sweeps - kept)
        if record >= 0:
            for k in range(n_replicas - 1):
                forward[k, record] = up[k].cpu().numpy()
                backward[k, record] = -down[k].cpu().numpy()
        for k in range(sweep % 2, n_replicas - 1, 2):
            log_accept = (up[k] + down[k]).cpu()
            accept = torch.rand(n_ladders, generator=swap_uniform, dtype=torch.float64).log() \
                < log_accept
            accepted[k] += float(accept.sum())
            proposed[k] += n_ladders
            if accept.any():
                low, high = replicas[k].visible, replicas[k + 1].visible
                mask = accept.to(low.device).unsqueeze(1)
                swapped = torch.where(mask, high, low)
                high.copy_(torch.where(mask, low, high))
                low.copy_(swapped)
                labels[k], labels[k + 1] = (torch.where(accept, labels[k + 1], labels[k]),
                                            torch.where(accept, labels[k], labels[k + 1]))
        if record in sample_at:
            samples.append(replicas[-1].visible.clone())
        if record >= 0:  # after the burn-in only
            from_bottom[labels[0]] = True
            arrived = labels[-1][from_bottom[labels[-1]]]
            passages += int(arrived.numel())
            from_bottom[arrived] = False
    log_base = replicas[0].log_base_partition
    log_z, ratios = _log_partition(log_base, forward, backward)
    groups = np.array([_log_partition(log_base, forward, backward,
                                      slice(group, None, n_groups))[0]
                       for group in range(n_groups)])
    return TemperingResult(log_z, float(groups.std(ddof=1) / math.sqrt(n_groups)), groups,
                           ratios, accepted / np.maximum(proposed, 1), passages,
                           np.asarray(betas), n_ladders, n_sweeps, n_sweeps - kept,
                           time.perf_counter() - started, replicas[0].description,
                           torch.cat(samples) if samples else None)
