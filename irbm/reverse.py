"""Reverse annealing: RAISE's conservative NLL of data rows and BDMC's upper bound of ln Z.

Both start chains at visible vectors (data rows for RAISE, samples of the model for BDMC), take
a Gibbs transition at the model and anneal down to a base whose ln Z_0 is known; the path's log
ratios give ln p-hat(v), a stochastic lower bound of ln p(v) (Burda, Grosse & Salakhutdinov,
AISTATS 2015; Grosse, Ghahramani & Adams 2015). `irbm.evaluate` gives both beside AIS, and its
`bracket_nll` takes RAISE as a bracket's conservative side.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm

from ._ais_chains import check_path, run_reverse_chains
from ._threads import chooses_threads
from .ais import (
    Deadline,
    batch_seed,
    load_batches,
    make_betas,
    make_path,
    on_device,
    resolve_base,
    resumed_label,
    run_batches,
    run_config,
    save_batches,
    tensor_digest,
)
from .floor import free_energies

__all__ = ["raise_nll", "RAISEEstimate", "repeat_gap", "bdmc_log_partition", "BDMCEstimate"]


@dataclass
class RAISEEstimate:
    """Conservative average NLL from RAISE: mean_n -ln p-hat(v_n), a stochastic upper bound on
    the true average NLL (ln p-hat is a stochastic lower bound on ln p(v) in expectation).

    Attributes
    ----------
    mean, stderr : float
        Average conservative NLL and its standard error over the data rows.
    log_likelihoods : Tensor (N,), float64
        ln p-hat(v_n) per row (the repeats of a row averaged in probability).
    n_betas, n_repeats : int
        Temperatures (0 and 1 included) and reverse chains per data row.
    base : str
    seconds : float
    path : str
        The annealing path's description.
    repeat_gap : float or None
        With two or more repeats, `repeat_gap`'s estimate of how far the mean of ln p-hat still
        lies below the annealing model's ln p(v) for want of chains (None with one repeat).
    """

    mean: float
    stderr: float
    log_likelihoods: torch.Tensor = field(repr=False)  # one per row: too long to print
    n_betas: int
    n_repeats: int
    base: str
    seconds: float
    path: str = "linear"
    repeat_gap: float | None = None

    def summary(self) -> dict:
        return {"mean": self.mean, "stderr": self.stderr, "n_betas": self.n_betas,
                "n_repeats": self.n_repeats, "base": self.base, "path": self.path,
                "seconds": self.seconds, "n_rows": int(self.log_likelihoods.numel()),
                "repeat_gap": self.repeat_gap}


@dataclass
class BDMCEstimate:
    """ln Z-hat = -ln mean_s exp(-d_s) from reverse chains started at samples of the model
    (`bdmc_log_partition`): a stochastic upper bound of ln Z when the samples are exact draws.

    Attributes
    ----------
    log_z, stderr : float
        The estimate and its standard error (delta method over the samples' chains).
    n_samples, n_betas : int
        Samples annealed back to the base, and temperatures (0 and 1 included).
    seconds : float
    """

    log_z: float
    stderr: float
    n_samples: int
    n_betas: int
    seconds: float

    def summary(self) -> dict:
        return {"log_z": self.log_z, "stderr": self.stderr, "n_samples": self.n_samples,
                "n_betas": self.n_betas, "seconds": self.seconds}


def repeat_gap(per_chain: torch.Tensor) -> float | None:
    """(R - 1) mean_n [lme(w_n) - mean_i lme(w_n without chain i)]: the jackknife estimate of
    the gap E ln p-hat still leaves below ln p for want of chains, from ``per_chain`` (N, R)
    ln p-hat of R chains per row (lme: ln of the mean of exp).

    Jensen's gap of the log of a mean of R unbiased estimates falls as c / R to first order,
    whatever their spread, and the jackknife estimates c / R for any R >= 2. Heavy-tailed
    weights make it an underestimate: for log-normal weights, within 10% at sigma 1 and
    R = 16, about half the gap at sigma 2 (where the first-order sigma^2 / 2R gives a third).
    None when R < 2.
    """
    n_repeats = per_chain.shape[1]
    if n_repeats < 2:
        return None
    per_chain = per_chain.double()
    whole = torch.logsumexp(per_chain, 1) - math.log(n_repeats)
    # Row n's R leave-one-out sets as an (N, R, R) block with chain i masked out of row i.
    masked = per_chain.unsqueeze(1).repeat(1, n_repeats, 1)
    masked.diagonal(dim1=1, dim2=2).fill_(-math.inf)
    left_out = torch.logsumexp(masked, 2) - math.log(n_repeats - 1)
    return float((n_repeats - 1) * (whole - left_out.mean(1)).mean())


@chooses_threads(lambda a: min(len(a["data"]) * int(a["n_repeats"]),
                               int(a["chain_batch_size"])))
def raise_nll(model, data, *, n_betas=None, betas=None, seed=None, base=None, path=None,
              trajectory=None, base_data=None, n_repeats: int = 1, chain_batch_size: int = 1000,
              checkpoint_path=None, deadline: float | Deadline | None = None,
              progress: bool = True, threads=None, device=None,
              dtype=None) -> RAISEEstimate:
    """mean_n -ln p-hat(v_n) by reverse annealing (RAISE): the pessimistic partner of `ais_nll`.

    For each data row, ``n_repeats`` reverse chains start at the row, take a Gibbs transition at
    the model and anneal down to the base along the family's path; ln p-hat(v) = -F(v) - ln Z_0
    + sum of the path's log ratios, averaged over repeats in probability. Its expectation is
    below ln p(v) (Burda, Grosse & Salakhutdinov, AISTATS 2015), so this NLL errs high where
    AIS's errs low; both converge to the exact NLL as temperatures grow.

    Parameters
    ----------
    model : EnergyModel
    data : Tensor or array (N, n_visible), binary.
    n_betas, betas : the schedule, as in `irbm.ais.estimate_log_partition`.
    seed : int, optional
    base : "model", "data", "descents" or Tensor (n_visible,); default the family's
        ``default_ais_base``.
    path : str, optional: one of the model's ``ais_paths`` (default: its first).
    trajectory : list of EnergyModel, optional: earlier models to anneal along (see
        `irbm.ais.estimate_log_partition`).
    base_data : (M, n_visible), optional: data for the data base (default: ``data``).
    n_repeats : int
        Reverse chains per row.
    chain_batch_size : int
        Chains run together.
    checkpoint_path : str, optional
        .npz file where finished chain batches are saved; a rerun with the same configuration
        (model, rows, schedule, base, repeats, batch size; requires ``seed``) resumes from it and
        gives what an uninterrupted run gives, a different configuration raises ValueError.
    deadline : float or `irbm.ais.Deadline`, optional
        As in `irbm.ais.estimate_log_partition`: past it, or before a batch predicted to end
        past it, a checkpointed run stops between batches (`irbm.ais.OutOfTime`), after at
        least one; a `irbm.ais.Deadline` shared by
        several runs lets a run stop before its first batch once another has run one.
    threads : int, optional: torch's CPU threads, as in `irbm.ais.estimate_log_partition`.
    device, dtype : optional
        Run on a copy of the model there and in that precision (float32 or float64), as
        `irbm.ais.estimate_log_partition` does; default: the model's own.
    """
    if checkpoint_path is not None and seed is None:
        raise ValueError("resuming from checkpoint_path needs an explicit integer seed")
    schedule = torch.from_numpy(make_betas(n_betas, betas))
    n_repeats = int(n_repeats)
    if n_repeats < 1:
        raise ValueError(f"n_repeats must be >= 1, got {n_repeats}")
    model = on_device(model, device, dtype, "RAISE")
    data = model.check_visible(torch.as_tensor(data))
    if seed is None:
        seed = int(torch.randint(0, 2**62, (1,)))
    started = time.perf_counter()
    with torch.no_grad():
        base_data = data if base_data is None else base_data
        base_bias, base_name = resolve_base(model, base, base_data)
        annealing = make_path(model, base_bias, path, trajectory)
        check_path(model, annealing)
        rows = data.repeat_interleave(n_repeats, 0)
        config = run_config(model, annealing, schedule.numpy(), base_name, base_bias,
                            trajectory, model.dtype, model.device,
                            rows=tensor_digest(data),
                            n_repeats=n_repeats, seed=int(seed),
                            chain_batch_size=int(chain_batch_size))
        done, restored = load_batches(checkpoint_path, config, ("log_ratios",))
        pieces = done["log_ratios"]
        started -= restored  # the seconds the saved batches took count as this run's
        starts = range(0, rows.shape[0], chain_batch_size)
        with tqdm(total=(len(starts) - len(pieces)) * (len(schedule) - 1),
                  disable=not progress or len(pieces) == len(starts),
                  desc=resumed_label("RAISE", len(pieces), len(starts)), unit="step") as bar:
            shapes = [(min(chain_batch_size, rows.shape[0] - start), len(schedule))
                      for start in starts]  # the reverse chains' first transition is a step
            for batch in run_batches(len(pieces), len(starts), deadline, checkpoint_path,
                                     shapes):
                chunk = rows[starts[batch]:starts[batch] + chain_batch_size]
                pieces.append(run_reverse_chains(make_path(model, base_bias, path, trajectory),
                                                 schedule,
                                                 chunk, batch_seed(int(seed), batch),
                                                 bar.update).cpu())
                if checkpoint_path is not None:
                    save_batches(checkpoint_path, config, {"log_ratios": pieces},
                                 time.perf_counter() - started)
        log_ratios = torch.cat(pieces).view(data.shape[0], n_repeats)
        per_chain = (log_ratios - free_energies(model, rows).view(-1, n_repeats)
                     - annealing.log_base_partition)
        log_likelihoods = torch.logsumexp(per_chain, 1) - math.log(n_repeats)
    n_rows = log_likelihoods.numel()
    stderr = float(log_likelihoods.std(correction=1)) / math.sqrt(n_rows) if n_rows > 1 else 0.0
    return RAISEEstimate(float(-log_likelihoods.mean()), stderr, log_likelihoods,
                         len(schedule), n_repeats, base_name, time.perf_counter() - started,
                         annealing.description, repeat_gap(per_chain))


@chooses_threads(lambda a: len(a["samples"]))
def bdmc_log_partition(model, samples, *, betas, base=None, path=None, base_data=None,
                       n_clusters: int = 1, seed: int = 0, progress: bool = False,
                       threads=None) -> BDMCEstimate:
    """-ln mean_s exp(-d_s): ln Z-hat from reverse annealing started at draws from the model
    (BDMC, Grosse, Ghahramani & Adams 2015), with d_s = -ln p-hat(x_s) - F(x_s) from RAISE's
    chains (`raise_nll`) started at the samples (S, n_visible) instead of data rows.

    When x_s is an exact draw from the model, exp(-d_s) is an unbiased estimate of 1 / Z, so
    this ln Z-hat is a stochastic upper bound of ln Z, whatever the path misses: reverse chains
    that start in every mode carry each mode's mass down. Draws from a Markov chain (such as
    parallel tempering's model replica) make it a bound only as far as that chain had reached
    equilibrium: a mode it never visited is missed here too.

    Parameters
    ----------
    samples : Tensor (S, n_visible), binary
    betas : array (M + 1,) from 0 to 1
    base, path, base_data, threads : as in `raise_nll`.
    seed, progress : as in `raise_nll`, but 0 and False by default (it runs inside a
        cross-check, whose result must be reproducible and whose own bar shows progress).
    n_clusters : int
        Samples come in S / n_clusters rounds of n_clusters chains (sample s from chain
        s mod n_clusters): the standard error treats each chain's samples as one draw.

    Returns
    -------
    BDMCEstimate: ``log_z``, ``stderr`` (delta method over the clusters), ``n_samples``,
    ``n_betas``, ``seconds``; ``summary()`` gives them as a dict.
    """
    started = time.perf_counter()
    samples = model.check_visible(torch.as_tensor(samples))
    if n_clusters < 1 or samples.shape[0] % n_clusters:
        raise ValueError(f"n_clusters ({n_clusters}) must divide the number of samples "
                         f"({samples.shape[0]}): each of its chains gave as many")
    if base_data is None and (model.default_ais_base if base is None else base) == "data":
        raise ValueError("a data base needs base_data (the training rows): the samples "
                         "themselves would make the base depend on what is evaluated")
    estimate = raise_nll(model, samples, betas=betas, base=base, path=path,
                         base_data=base_data, seed=seed, progress=progress)
    inverse = estimate.log_likelihoods + free_energies(model, samples).double()  # ln(1/Z)-hat
    n = inverse.numel()
    log_z = -(float(torch.logsumexp(inverse, 0)) - math.log(n))
    weights = torch.exp(inverse - inverse.max())
    clusters = weights.view(-1, n_clusters).mean(0) if n_clusters > 1 else weights
    stderr = (float(clusters.std(correction=1)) / math.sqrt(clusters.numel())
              / float(weights.mean())) if clusters.numel() > 1 else math.inf
    return BDMCEstimate(log_z, stderr, n, estimate.n_betas, time.perf_counter() - started)
