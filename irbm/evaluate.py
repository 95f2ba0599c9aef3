"""Average negative log-likelihood of a data set, given (an AIS estimate of) log Z.

-ln p(v) = F(v) + ln Z. irbm reports the mean over the test set +/- one standard error,
treating ln Z-hat as exact; the paper's +/- is 1.96 of them, a 95% half-width (its authors'
code: ``build_avg_stderr_nll(..., factor=1.96)``). `ais_nll` also returns the range implied by
the AIS interval ln(Z-hat -/+ 3 sigma), which is what the validation-set model selection should
look at when two models are close.
"""

from __future__ import annotations

import copy
import math
import numbers
import time
from dataclasses import dataclass

import numpy as np
import torch

from ._bracket_work import LevelWork, bracket_fingerprint, bracket_identity
from ._threads import chooses_threads
from .ais import (
    AISResult,
    Deadline,
    OutOfTime,
    batch_seed,
    betas_of_equal_length,
    estimate_log_partition,
    make_betas,
    thermodynamic_length,
    tuned_betas,
)
from .bracket import (
    BRACKET_CHAINS,
    PILOT_BETAS,
    RAISE_REPEATS,
    SCHEDULES,
    Bracket,
    BracketUnfinished,
    control_variate,
    judge_conservative,
    pooled_log_z,
    stored_pilot_betas,
    verdict,
    width_text,
)
from .floor import FLOOR_STEPS, free_energies, sampled_log_partition_floor
from .models import require_finite_parameters, require_full_precision
from .reverse import BDMCEstimate, RAISEEstimate, bdmc_log_partition, raise_nll, repeat_gap
from .tempering import estimate_log_partition_tempering

# What `from irbm.evaluate import *` gives, and the module's public names.
__all__ = [
    "nll", "ais_nll", "raise_nll", "bracket_nll", "bdmc_log_partition", "cross_check", "repeat_gap",
    "free_energies", "NLLEstimate", "RAISEEstimate", "BDMCEstimate", "Bracket",
    "BracketUnfinished", "BRACKET_CHAINS", "RAISE_REPEATS", "DEFAULT_TOLERANCE", "EXACT_TERMS"]

# Models whose ln Z sums at most this many terms (hidden configurations with z, or visible
# vectors) have their exact NLL computed too: about a second at 784 visible units.
EXACT_TERMS = 2**20

CPU_CHAIN_BATCH = 250  # chains per batch of a bracket's runs off the GPU (`bracket_nll`)


def _log_partition_value(log_z) -> float:
    value = log_z.log_z if isinstance(log_z, AISResult) else log_z
    number = isinstance(value, (numbers.Real, np.number)) or (
        isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim == 0)
    if not number or isinstance(value, (bool, np.bool_)):
        raise ValueError(f"log_z must be a number or an AISResult, got {log_z!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"log_z must be finite, got {value}")
    return value


def nll(model, data, log_z, *, batch_size: int = 4096) -> tuple[float, float]:
    """mean_n [F(v_n) + ln Z] and its standard error std_n F(v_n) / sqrt(N).

    Parameters
    ----------
    model : EnergyModel
    data : Tensor or array (N, n_visible), binary.
    log_z : float or AISResult
        ln Z (exact or estimated); its own uncertainty is not included in the standard error.

    Returns
    -------
    (mean, standard_error) : floats, in nats. The standard error is 0 for N = 1.
    """
    log_partition = _log_partition_value(log_z)
    free = free_energies(model, data, batch_size=batch_size)
    stderr = float(free.std(correction=1)) / math.sqrt(free.numel()) if free.numel() > 1 else 0.0
    return float(free.mean()) + log_partition, stderr


@dataclass
class NLLEstimate:
    """mean_n -ln p(v_n) with ln Z from AIS.

    Attributes
    ----------
    mean, stderr : float
        Average NLL with ln Z-hat, and its standard error over the data (the paper's +/- is
        1.96 standard errors).
    mean_low, mean_high : float
        Average NLL with ln(Z-hat - 3 sigma) and ln(Z-hat + 3 sigma): the AIS uncertainty alone
        (``mean_low`` is -inf when the lower bound of Z is not positive).
    log_partition : AISResult
        The AIS run, with per-chain log weights for convergence diagnostics.
    """

    mean: float
    stderr: float
    mean_low: float
    mean_high: float
    log_partition: AISResult
    log_partition_floor: float = -math.inf

    def reliability_warnings(self) -> list[str]:
        """The AIS warnings plus a check no spread of weights can fool: Z >= sum of exp(-F(v))
        over the distinct data rows and Gibbs states of `sampled_log_partition_floor` (or of
        exp(-G(h)) over the distinct hidden vectors those chains drew), so
        ln Z-hat below that floor is certainly too low (it happens on large models whose
        annealing misses a mode: uniform weights, all wrong). A floor within ln Z-hat's own
        3-sigma interval is its noise, not a missed mode, and raises no warning."""
        problems = self.log_partition.reliability_warnings()
        gap = self.log_partition_floor - self.log_partition.log_z
        if self.log_partition_floor > self.log_partition.log_z_high:
            problems.append(
                f"ln Z-hat is at least {gap:.2f} nats too low: it is below ln sum_v exp(-F(v)) "
                "over the evaluated data and the states Gibbs chains from it visited (or ln "
                "sum_h exp(-G(h)) over the hidden vectors they drew), a certain lower bound of "
                "ln Z. The annealing misses mass: more temperatures may help; if "
                "not (the same ln Z-hat at every schedule), the NLL is only bounded below.")
        return problems

    def summary(self) -> dict:
        """JSON-ready record of the estimate, with its AIS run's (as the other estimates
        give theirs; an API review found none here)."""
        return {"mean": self.mean, "stderr": self.stderr, "mean_low": self.mean_low,
                "mean_high": self.mean_high, "log_z_floor": self.log_partition_floor,
                "log_partition": self.log_partition.summary(),
                "warnings": self.reliability_warnings()}


@chooses_threads(lambda a: min(int(a["n_chains"]), 1000))
def ais_nll(model, data, *, n_chains: int = 100, n_betas=None, betas=None, base=None,
            base_data=None, batch_size: int = 4096, threads=None,
            **ais_options) -> NLLEstimate:
    """mean_n [F(v_n) + ln Z-hat] with ln Z-hat from `irbm.ais.estimate_log_partition`.

    It takes AIS's ln Z as it is; `irbm evaluate` (`irbm.workflows.evaluate_run`) and the
    validation during training (`irbm.runs.ValidateWithAIS`) also compute the certain floor of
    ln Z (`irbm.floor.sampled_log_partition_floor`) and use it when it is higher.

    Parameters
    ----------
    model : EnergyModel
    data : Tensor or array (N, n_visible), binary: the set whose NLL is wanted.
    n_chains, n_betas, betas, base : as in `estimate_log_partition` (default base: the
        family's ``default_ais_base``).
    base_data : (M, n_visible), optional
        Data for the base rate when the base is "data"; defaults to ``data`` itself (any base
        keeps the estimate of Z unbiased, so this leaks nothing into the NLL).
    batch_size : int
        Rows per free-energy evaluation.
    threads : int, optional: torch's CPU threads, as in `irbm.ais.estimate_log_partition`.
    **ais_options : seed, generator, device, dtype, chain_batch_size, checkpoint_path, progress.
    """
    if base_data is None:  # the data base (the default of most families) needs data
        base_data = data
    result = estimate_log_partition(model, n_chains, n_betas, betas=betas, base=base,
                                    data=base_data, **ais_options)
    mean, stderr = nll(model, data, result, batch_size=batch_size)
    shift = mean - result.log_z
    floor = sampled_log_partition_floor(model, data, n_chains=min(n_chains, 500),
                                        seed=ais_options.get("seed") or 0, batch_size=batch_size)
    return NLLEstimate(mean, stderr, shift + result.log_z_low, shift + result.log_z_high, result,
                       floor)


def cross_check(model, data, levels, *, base_data, bases, tempering=True, seed=0,
                progress=False, free_all=None, path=None, base=None) -> dict:
    """The bracket's independent point estimate: mean_n F(v_n) + ln Z-hat by parallel tempering
    (`irbm.tempering`) along the route of the optimistic side of ``levels`` (a bracket's
    per-level records), from the same base.

    Parameters
    ----------
    model : EnergyModel
    data : Tensor (N, n_visible), the rows the bracket is about.
    levels : list of dict, ``Bracket.levels`` (or a stored bracket's "levels").
    base_data : Tensor (M, n_visible) or None, the data of the data base.
    bases : sequence of str, the bracket's bases (its routes name the base only when it ran
        more than one).
    tempering : True (the defaults of `estimate_log_partition_tempering`) or a dict of its
        arguments.
    seed : int, the bracket's seed (tempering uses seed + 7).
    free_all : Tensor (N,), optional: F of ``data`` when already computed.
    path, base : str, optional
        Another route than the optimistic side's (e.g. the base whose ladder mixes better).

    Returns
    -------
    dict: ``nll``, ``route`` and `TemperingResult.summary()`; with ``n_samples`` among the
    tempering arguments also ``bdmc``: ``nll`` (mean F + `bdmc_log_partition` from those
    samples of the model replica, at the last level's number of temperatures, tuned on the
    same route), ``log_z``, ``stderr``, ``n_samples``, ``n_betas``, ``seconds``.
    """
    allowed = {"n_temperatures", "n_sweeps", "n_ladders", "betas", "burn_in", "n_groups",
               "n_samples"}
    settings = {} if tempering is True else dict(tempering)
    if not set(settings) <= allowed:
        raise ValueError(f"tempering takes {sorted(allowed)}, not "
                         f"{sorted(set(settings) - allowed)} (the route, base and seed follow "
                         "the bracket)")
    # Brackets stored before own_optimistic was recorded keep the best level's in optimistic.
    kept = max(levels, key=lambda level: level.get("own_optimistic", level["optimistic"]))
    route = kept["best_path"]
    # Routes are named "path, base base" when both bases ran, else by the path alone.
    kind, _, kept_base = route.partition(", ")
    kind, base = path or kind, base or kept_base.removesuffix(" base") or bases[0]
    if path or base != (kept_base.removesuffix(" base") or bases[0]):
        route = f"{kind}, {base} base"
    if kind == "trajectory":  # tempering needs one model's path: the family's default
        kind, route = None, f"{route} (tempering along the model's default path)"
    result = estimate_log_partition_tempering(model, **settings, base=base, path=kind,
                                              data=base_data, seed=int(seed) + 7,
                                              progress=progress)
    if free_all is None:
        free_all = free_energies(model, model.check_visible(torch.as_tensor(data)))
    mean_free = float(free_all.double().mean())
    check = {"nll": mean_free + result.log_z, "route": route, **result.summary()}
    if result.samples is not None:
        betas = tuned_betas(model, int(levels[-1]["n_betas"]), base=base, path=kind,
                            data=base_data, seed=int(seed) + 8)
        bdmc = bdmc_log_partition(model, result.samples, betas=betas, base=base, path=kind,
                                  base_data=base_data, n_clusters=result.n_ladders,
                                  seed=int(seed) + 9, progress=progress)
        check["bdmc"] = {"nll": mean_free + bdmc.log_z, **bdmc.summary()}
    return check


def describe_bdmc(check: dict) -> str:
    """"; BDMC from S of its samples: ..." for a cross-check that ran BDMC, else ""."""
    bdmc = check.get("bdmc")
    return "" if bdmc is None else (
        f"; BDMC from {bdmc['n_samples']} of its samples: NLL at most {bdmc['nll']:.2f} +/- "
        f"{bdmc['stderr']:.2f} if they are draws from the model")


REVERSE_PILOT_ROWS = 32  # reverse chains of the pilot that tunes RAISE's schedule


class _Default(float):
    """A default that tells itself from the same number given (``x is DEFAULT_TOLERANCE``)."""


# bracket_nll's tolerance when none is given: 1 nat, or the bracket's it continues.
DEFAULT_TOLERANCE = _Default(1.0)


# n_chains None: the default, or a resumed bracket's (its batches are CPU_CHAIN_BATCH at most).
@chooses_threads(lambda a: min(int(a["n_chains"] or BRACKET_CHAINS), CPU_CHAIN_BATCH))
def bracket_nll(model, data, *, base_data, rows=None, tolerance: float = DEFAULT_TOLERANCE,
                max_seconds=None, seed=None, n_chains: int | None = None,
                n_betas: int = 1000, paths=None, bases=None, trajectory=None,
                schedule: str | None = None, pilot_data=None, resume=None,
                raise_repeats: int | None = None,
                max_betas: int = 1_000_000, tempering=None, progress: bool = True,
                echo=None, pilot_betas: int | None = None, work_dir=None,
                keep_work: bool = False, stop_inside_level: bool = True,
                threads=None) -> Bracket:
    """[optimistic, conservative] around mean_n -ln p(v_n) for ``data`` (N, n_visible).

    Runs AIS (``n_chains`` chains) and RAISE (``raise_repeats`` reverse chains per row of a
    random subset of ``rows``) on every annealing path in ``paths`` from every base in
    ``bases``, doubling the temperatures from ``n_betas`` until the bracket is at most
    ``tolerance`` nats wide and neither side moved by more than 0.2 nat (or two standard
    errors) at the last doubling, or until the next doubling would pass ``max_seconds``
    (predicted from the last level, which it costs twice) or ``max_betas``. See
    `irbm.bracket` for the two sides and the certification rules.

    Parameters
    ----------
    model : EnergyModel
    data : Tensor or array (N, n_visible), binary: the rows whose average NLL is bracketed.
    base_data : Tensor or array (M, n_visible), or None
        Data of the base rate (the training set; None: the model base only).
    bases : sequence of "data" and "model", optional
        Default both when ``base_data`` is given: neither base always wins (on trained
        CalTech101 models the data base suits the iRBM, the model base the RBM-500).
    rows : int, optional
        RAISE rows, drawn at random from ``data`` (default min(N, 300)).
    raise_repeats : int, optional
        Reverse chains per RAISE row, averaged in probability. E ln p-hat(v) falls below
        ln p(v) by about half the variance of one chain's log-weight, a gap more temperatures
        close only as fast as the chains mix: on the CalTech101 RBM-100, 16 chains per row
        lowered RAISE's NLL by 3.2 nats at 4,000 temperatures, where 16 times the temperatures
        had left it within 0.5 nat (see results/README.md). With two or more, each level's
        RAISE route stores the gap left (`repeat_gap`), which a too-wide verdict names.
        Default `irbm.bracket.RAISE_REPEATS`, as `irbm evaluate --bracket`.
        Continuing (``resume``), each setting left None (``rows``, ``raise_repeats``,
        ``seed``, ``n_chains``, ``paths``, ``bases``, ``schedule``), and ``tolerance`` left
        out, is the stored bracket's.
    tolerance : float
        Largest certified width, nats.
    max_seconds : float, optional
        Time budget: a level is started only when the last one's time says it fits, and the
        last level finished is reported. With ``work_dir`` and ``stop_inside_level``, the
        call's first level also stops at it between saved chain batches, or before a batch
        predicted to end past it (`irbm.ais.Deadline`), raising
        `irbm.bracket.BracketUnfinished` (the same call again goes on from them).
    seed : int, optional
        Seeds the row subset and every estimator (default 0).
    n_chains, n_betas : int, optional
        AIS chains per path and base (default `irbm.bracket.BRACKET_CHAINS`, 1,000, as
        `irbm evaluate --bracket`), and the first level's temperatures.
    paths : sequence of str, optional
        Annealing paths (default: all the model's ``ais_paths``, and "trajectory" when a
        ``trajectory`` is given).
    trajectory : list of EnergyModel, optional
        Models saved while this one was trained, earliest first (`irbm.models.TrajectoryPath`).
    schedule : "tuned", "tuned-forward" or "uniform", optional
        Default "tuned". Temperatures of equal thermodynamic length, from pilot runs fixed
        before the estimates run (`irbm.ais.thermodynamic_length`), or evenly spaced. "tuned":
        AIS's from a forward pilot per route, RAISE's from a reverse one (32 reverse chains
        started at random rows of ``pilot_data``), since reverse chains lag behind the
        temperature on the data's side, not the base's: on trained CalTech101 models it gave
        RAISE at N temperatures about what AIS's schedule gave it at 2N
        (`benchmarks/bench_raise_schedule.py`). The pilot's spread over its rows mixes
        row-to-row differences with the chains' noise, which alone makes RAISE's gap: a
        heuristic, chosen by that measurement. Without ``pilot_data`` RAISE takes AIS's
        schedule, as with "tuned-forward" (the rule of brackets made before, which it
        re-derives); the rows bracketed never tune it.
    pilot_data : Tensor or array (M, n_visible), optional
        Rows other than ``data`` (the training set) for RAISE's pilot; default ``base_data``.
    pilot_betas : int, optional
        Temperatures of each pilot run of the tuned schedules (32 chains each, once per route
        and direction). Default: the first level's ``n_betas``, at most 1,000, so that a small
        bracket does not spend most of its time in pilots; continuing, the stored bracket's
        (1,000 for those stored before it was recorded).
    resume : Bracket or dict, optional
        A bracket of this model (a `Bracket`, or its stored `Bracket.summary`) to continue, its
        cross-check carried on when this call runs none: its levels are kept and
        the temperatures doubled from its last, with its chains, rows, seed, routes and
        schedule (those this call leaves None are its; those it gives must equal its). One of
        another model (its parameters' digest differs: another model, or this one trained
        further), of other rows or base data, is refused before any work; so is one stored
        before brackets recorded their seed without ``seed`` (the evaluation record holds
        it: `irbm evaluate --continue` passes it). Level k's seed depends on k alone, and the
        row subset and pilots on ``seed``, so on the same device the continued bracket is the
        one an uninterrupted call would have made; elsewhere its new levels are independent
        draws of the same estimators. A bracket a tempering check re-judged goes on as the
        bracket it checked; a certified one is refused (an uninterrupted call stops there).
    tempering : dict or True, optional
        Also run the independent point estimate of `irbm.tempering` (True: its defaults, or a
        dict of its arguments) along the route of the optimistic side, after the levels; the
        bracket is not certified when it falls outside (`irbm.bracket.cross_check_reasons`).
    progress : bool
        A progress bar for each AIS and RAISE run (a level can take hours), as `ais_nll` and
        `raise_nll` show by default.
    echo : callable(str), optional
        Called with one line per level.
    work_dir : path, optional
        A new or empty directory, or one an interrupted call left: where the level under way
        saves its finished chain batches and the pilots (`irbm._bracket_work`), locked while
        this call runs. A call with the same arguments after an interruption resumes the
        level there: its levels are those of an uninterrupted call on the same machine and
        thread count (within rounding on another thread count), and its seconds count the
        saved work's; the time budget ``max_seconds`` counts this call's, so it may go on to
        a level the uninterrupted call would not have started. A directory holding another
        bracket's work is refused before any work.
    keep_work : bool
        Leave the work directory for the caller to remove (`irbm._bracket_work.remove_work`)
        once it has stored the result; by default it is removed when the bracket returns.
    stop_inside_level : bool
        Whether ``max_seconds`` may stop the call's first level (see ``max_seconds``); False
        for a budget the caller did not choose for this call (`irbm evaluate --continue`
        inherits the stored bracket's, sized for its shorter levels).
    threads : int, optional: torch's CPU threads, as in `irbm.ais.estimate_log_partition`.

    Returns
    -------
    Bracket
    """
    if isinstance(resume, Bracket):  # the object a call returned, as well as its summary
        resume = resume.summary()
    require_full_precision(model.dtype, "a bracket")
    require_finite_parameters(model, "a bracket")
    fingerprint = bracket_fingerprint(model, data=data, base_data=base_data,
                                      trajectory=trajectory)
    if resume is not None:
        _refuse_another_bracket(resume, fingerprint, seed)
        stored = _stored_settings(resume)
        n_chains, rows, raise_repeats, seed, paths, bases, schedule = (
            stored[name] if given is None else given for name, given in (
                ("n_chains", n_chains), ("rows", rows), ("raise_repeats", raise_repeats),
                ("seed", seed), ("paths", paths), ("bases", bases), ("schedule", schedule)))
        if tolerance is DEFAULT_TOLERANCE:  # left out, not 1.0 given
            tolerance = resume["tolerance"]
    n_chains = BRACKET_CHAINS if n_chains is None else n_chains
    raise_repeats = RAISE_REPEATS if raise_repeats is None else raise_repeats
    schedule = "tuned" if schedule is None else schedule
    tolerance, raise_repeats = _checked_settings(tolerance, max_seconds, n_chains, schedule,
                                                 raise_repeats)
    make_betas(n_betas)  # validates
    if pilot_betas is None:
        pilot_betas = (min(PILOT_BETAS, int(n_betas)) if resume is None
                       else stored_pilot_betas(resume) or PILOT_BETAS)
    elif isinstance(pilot_betas, bool) or not isinstance(pilot_betas, numbers.Integral) \
            or pilot_betas < 2:
        raise ValueError(f"pilot_betas must be an integer >= 2 (temperatures of each pilot "
                         f"run), got {pilot_betas!r}")
    seed = 0 if seed is None else int(seed)
    data = model.check_visible(torch.as_tensor(data))
    if data.shape[0] < 2:
        raise ValueError(f"a bracket needs at least 2 rows of data (RAISE's standard error), "
                         f"got {data.shape[0]}")
    n_rows = min(data.shape[0], 300) if rows is None else int(rows)
    if not 2 <= n_rows <= data.shape[0]:
        raise ValueError(f"rows must lie in 2..{data.shape[0]} (the data's rows), got {rows}")
    paths = tuple(paths or model.ais_paths + (("trajectory",) if trajectory else ()))
    bases = tuple(bases or (("data", "model") if base_data is not None else ("model",)))
    routes = _routes(model, paths, bases, trajectory, base_data)
    if echo is not None:  # what a level costs: every route runs AIS and RAISE
        echo(f"  each level: AIS ({int(n_chains)} chains) and RAISE ({n_rows} rows x "
             f"{raise_repeats} reverse chain{'s' if raise_repeats != 1 else ''}) on each of "
             f"{len(routes)} route{'s' if len(routes) != 1 else ''} ({'; '.join(routes)})")
    order = torch.randperm(data.shape[0], generator=torch.Generator().manual_seed(seed))
    subset = data[order[:n_rows].to(data.device)]
    pilot_data = base_data if pilot_data is None else pilot_data
    if schedule == "tuned" and pilot_data is None:
        schedule = "tuned-forward"  # tuning RAISE on the rows it bounds would fit it to them
    levels, n_temperatures, out_of_time, earlier_seconds = [], int(n_betas), False, 0.0
    if resume is not None:  # refused before any work when it cannot go on
        levels, n_temperatures, earlier_seconds = _resumable(
            resume, n_chains=int(n_chains), n_rows=n_rows, raise_repeats=raise_repeats,
            bases=bases, paths=paths, schedule=schedule, pilot_betas=int(pilot_betas),
            tolerance=tolerance, max_betas=max_betas)
    resumed_levels, ais_kept = len(levels), None
    work = None if work_dir is None else LevelWork(work_dir, bracket_identity(
        model, fingerprint=fingerprint, pilot_data=pilot_data, chains=int(n_chains),
        rows=n_rows, **{"RAISE repeats": raise_repeats}, seed=seed,
        bases=bases, paths=paths, schedule=schedule,
        **{"pilot temperatures": int(pilot_betas), "first level's temperatures":
           n_temperatures, "stored levels' temperatures": [
               level["n_betas"] for level in levels]}))
    if work is not None and work.restored_runs and echo is not None:
        echo(f"  resuming the unfinished level from {work.directory}")
    try:
        started = time.perf_counter()
        # Chains run in batches, each saved as it ends when there is a work directory. On a
        # GPU the steps are launch-bound: AIS in batches of 1,000 and RAISE's repeats, up to
        # 20,000 chains, as one batch. On a CPU, batches of 250 chains run as fast per chain
        # (784 x 604 iRBM, one thread) and a level of hours is saved every half hour or so.
        on_gpu = model.device.type == "cuda"
        batches = {"ais": 1000 if on_gpu else CPU_CHAIN_BATCH,
                   "raise": (min(n_rows * raise_repeats, 20_000) if raise_repeats > 1 else 1000)
                   if on_gpu else CPU_CHAIN_BATCH}
        free_all = free_energies(model, data)
        free_rows = free_energies(model, subset)
        # The floor's chains are cheap beside a level's (one Gibbs run of n_chains x 300 steps),
        # and more of them find more of the hidden vectors that hold the mass: on the CalTech101
        # RBM-100, 500 x 200 gave 2239.7, 4,000 x 300 2242.8 (AIS: 2240.3 at 128,000 temperatures).
        def new_floor():
            return sampled_log_partition_floor(model, data if base_data is None else base_data,
                                               n_chains=n_chains, n_steps=FLOOR_STEPS, seed=seed)
        floor = max(new_floor() if work is None else work.floor(new_floor),
                    -math.inf if resume is None else resume.get("log_z_floor", -math.inf))
        schedules = _Schedules(model, routes, schedule, trajectory=trajectory,
                               base_data=base_data, pilot_data=pilot_data, seed=seed,
                               pilot_betas=int(pilot_betas), work=work)
        if resume is not None:
            # An uninterrupted call ran the pilots before its first level; run them before the
            # next level's clock too, so that its time predicts the one after it as there.
            for route in routes:
                schedules(route, n_temperatures)
                schedules(route, n_temperatures, True)
        restored = 0.0  # seconds of saved chain batches read back, not run (pilots': schedules)
        # The budget is also a deadline inside the call's first level, whose saved batches the
        # same call resumes; a later level is started only when the last one's time says it
        # fits (below), and runs to its end: cut, it would leave work a --continue cannot use.
        deadline = None if max_seconds is None or work is None or not stop_inside_level \
            else Deadline(started + float(max_seconds))
        while True:
            level_started, restored_before = time.perf_counter(), restored + schedules.restored
            # Levels draw independent chains, so their bounds are independent estimates.
            level_seed = seed if not levels else batch_seed(seed, 1000 + len(levels))
            try:
                level, results, seconds_read = _run_level(
                    model, routes, schedules, n_temperatures, level_seed,
                    n_chains=int(n_chains), subset=subset, base_data=base_data,
                    trajectory=trajectory, raise_repeats=raise_repeats, batches=batches,
                    free_all=free_all, free_rows=free_rows, work=work, progress=progress,
                    deadline=deadline if len(levels) == resumed_levels else None)
            except OutOfTime:
                raise BracketUnfinished(
                    f"stopped at the time budget ({float(max_seconds):g} s) inside the level of "
                    f"{n_temperatures} temperatures, before any level of this call finished: "
                    f"its finished chain batches are saved in {work.directory}, and the same "
                    "call again goes on from them (a larger budget lets the level finish)"
                ) from None
            restored += seconds_read
            if _close_level(level, levels, this_call=levels[resumed_levels:], floor=floor,
                            free_all=free_all, free_rows=free_rows):
                ais_kept = results[level["best_path"]]
            level["seconds"] = (time.perf_counter() - level_started + restored
                                + schedules.restored - restored_before)
            levels.append(level)
            if echo is not None:
                echo(_level_line(level))
            if not verdict(levels, tolerance=tolerance, out_of_time=False):
                break
            elapsed = time.perf_counter() - started
            if max_seconds is not None and elapsed + 2 * level["seconds"] > float(max_seconds):
                out_of_time = "time"
                break
            if 2 * n_temperatures > max_betas:
                out_of_time = "temperatures"
                break
            n_temperatures *= 2
        last = levels[-1]
        check = None
        if tempering is not None and tempering is not False:
            check = cross_check(model, data, levels, base_data=base_data, bases=bases,
                                tempering=tempering, seed=seed, progress=progress,
                                free_all=free_all)
            if echo is not None:
                echo(f"  tempering ({check['route']}): NLL {check['nll']:.2f} +/- "
                     f"{check['stderr']:.2f}, {check['passages']} passages from base to model"
                     + describe_bdmc(check))
        elif resume is not None and resume.get("cross_check") is not None:
            # An independent estimate of the same model stays evidence at every later level
            # (it was dropped, and a row lost the tempering that refuted its RAISE routes).
            check = {**resume["cross_check"], "carried": True}  # not this call's to run
            if echo is not None:
                echo(f"  tempering of the stored bracket ({check.get('route', '?')}): NLL "
                     f"{check['nll']:.2f} +/- {check['stderr']:.2f}, judged again")
        if check is not None:
            judge_conservative(levels, check, floor)  # a RAISE route below it is out
            last = levels[-1]
        reasons = verdict(levels, tolerance=tolerance, out_of_time=out_of_time, cross_check=check)
        if work is not None and not keep_work:
            work.finish()
        bracket = Bracket(last["optimistic"], last["conservative"], not reasons, reasons,
                       last["optimistic_rows"], last["conservative_rows"],
                       last["conservative_stderr"], last["log_z"], floor, n_rows,
                       last["n_betas"], int(n_chains),
                       earlier_seconds + time.perf_counter() - started + restored
                       + schedules.restored, tolerance,
                       levels, ais_kept, bases, paths,
                       None if max_seconds is None else float(max_seconds),
                       None if not verdict(levels, tolerance=tolerance, out_of_time=False,
                                           cross_check=check)
                       else out_of_time or None, check, schedule, resumed_levels, raise_repeats,
                       int(pilot_betas) if schedule != "uniform" else None,
                       seed=seed, fingerprint=fingerprint)
        if model.exact_terms() <= EXACT_TERMS:  # the truth to check the estimators against
            bracket.exact_nll = nll(model, data, model.log_partition_exact())[0]
        return bracket
    finally:  # the files stay for a call to resume (or for the caller, with keep_work)
        if work is not None:
            work.release()


def _checked_settings(tolerance, max_seconds, n_chains, schedule, raise_repeats):
    """(tolerance, raise_repeats) as numbers, or ValueError naming the first setting of
    `bracket_nll` out of its range."""
    tolerance = float(tolerance)
    if not tolerance > 0:
        raise ValueError(f"tolerance must be > 0 nats, got {tolerance}")
    if max_seconds is not None and not float(max_seconds) > 0:
        raise ValueError(f"max_seconds must be > 0, got {max_seconds}")
    if isinstance(n_chains, bool) or int(n_chains) != n_chains or n_chains < 2:
        raise ValueError(f"n_chains must be an integer >= 2 (the spread of the weights is "
                         f"needed), got {n_chains!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if isinstance(raise_repeats, bool) or int(raise_repeats) != raise_repeats or \
            raise_repeats < 1:
        raise ValueError(f"raise_repeats must be an integer >= 1 (reverse chains per row), "
                         f"got {raise_repeats!r}")
    return tolerance, int(raise_repeats)


def refuse_descents_base(bases):
    """ValueError when ``bases`` (names) hold "descents", which a bracket cannot take."""
    if "descents" in bases:
        raise ValueError("the descents base serves AIS runs and --tempering cross-checks, not "
                         "brackets: RAISE from it anneals the test rows towards the deep basins "
                         "(on the CalTech101 RBM-100 its NLL was 85 nats too high); bracket "
                         "from the data or model base, then cross-check with --tempering "
                         "SWEEPS --base descents")


def _routes(model, paths, bases, trajectory, base_data) -> dict:
    """{route name: (path, base)} for every annealing path in ``paths`` from every base in
    ``bases``, or ValueError naming a path or base a bracket cannot run."""
    for kind in paths:
        if kind != "trajectory" or trajectory is None:
            model.check_ais_path(kind)
    refuse_descents_base(bases)
    if not set(bases) <= {"data", "model"} or ("data" in bases and base_data is None):
        raise ValueError(f'bases must be "data" (with base_data) and/or "model", got {bases}')
    return {(f"{kind}, {base} base" if len(bases) > 1 else kind): (kind, base)
            for kind in paths for base in bases}


def _close_level(level, levels, *, this_call, floor, free_all, free_rows) -> bool:
    """Add to a level's record (`_run_level`) its best route and both sides of the bracket
    over ``levels`` and it (free energies: ``free_all`` (N,), ``free_rows`` (R,)); True when
    its best AIS run is higher than those of the levels ``this_call`` ran, whose diagnostics
    (weights, effective sample size, warnings) the bracket then reports: a stored level keeps
    its numbers, not its weights."""
    best_path = max(level["ais"], key=lambda route: level["ais"][route]["log_z"])
    level.update(best_path=best_path,
                 own_optimistic_sigma=level["ais"][best_path]["sigma"],
                 own_optimistic=float(free_all.mean()) + max(
                     level["ais"][best_path]["log_z"], floor),
                 own_from_floor=bool(floor > level["ais"][best_path]["log_z"]))
    # The optimistic side pools every AIS run of every level so far (`pooled_log_z`): one
    # unbiased estimate of Z, so its log is a stochastic lower bound of ln Z. The largest of
    # many runs is not: it overshoots by ln(runs) when one lucky chain carries it.
    log_z = max(pooled_log_z([*levels, level]), floor)
    level.update(log_z=log_z, optimistic=float(free_all.mean()) + log_z,
                 optimistic_rows=float(free_rows.mean()) + log_z)
    # The conservative side: the lowest RAISE NLL of any level that this optimistic side does
    # not refute (RAISE bounds its annealing model's NLL, see irbm.bracket).
    judge_conservative([*levels, level], floor=floor)
    return not this_call or level["own_optimistic"] > max(
        earlier["own_optimistic"] for earlier in this_call)


def _level_line(level) -> str:
    """The line a finished level echoes: its own sides (its best AIS route, its RAISE) and the
    bracket's so far (AIS pooled over every run of every level, the lowest RAISE not
    refuted), which the final line repeats."""
    gap = level["raise"].get(level["raise_path"], {}).get("repeat_gap")
    # The floor stands in for the level's AIS where it is higher: said, or the line reads as
    # AIS's number (the same digits level after level, when the floor holds them).
    optimistic = (f"the certain floor, above AIS {level['best_path']}'s ln Z"
                  if level.get("own_from_floor") else f"AIS {level['best_path']}")
    return (f"  {level['n_betas']} temperatures: NLL in [{level['own_optimistic']:.2f}, "
            f"{level['own_conservative']:.2f}] ({optimistic}, RAISE "
            f"{level['raise_path'] or 'refuted on every route'}"
            + ("" if gap is None or gap < 0.005
               else f", its RAISE about {gap:.2f} nat loose for want of reverse chains per row")
            + f"; {level['seconds']:.0f} s); the bracket so far, AIS pooled over every run: "
            f"[{level['optimistic']:.2f}, {level['conservative']:.2f}]"
            # An optimistic side above the conservative one reads as a bug unless said.
            + (f" ({width_text(level['conservative'] - level['optimistic'])})"
               if level["conservative"] < level["optimistic"] else ""))


class _Schedules:
    """Each route's temperatures (count,) at a level, forward or reverse: evenly spaced, or of
    equal thermodynamic length from one pilot run per route and direction, run once and kept
    (read back from the work directory when there is one; ``restored`` counts the seconds
    those read back had taken)."""

    def __init__(self, model, routes, schedule, *, trajectory, base_data, pilot_data, seed,
                 pilot_betas, work):
        self.model, self.routes, self.schedule, self.work = model, routes, schedule, work
        self.trajectory, self.base_data, self.seed = trajectory, base_data, seed
        self.pilot_betas, self.pilots, self.restored = pilot_betas, {}, 0.0
        self.pilot_rows = None
        if schedule == "tuned":
            pilot_data = model.check_visible(torch.as_tensor(pilot_data))
            self.pilot_rows = pilot_data[torch.randperm(
                pilot_data.shape[0], generator=torch.Generator().manual_seed(seed + 2))[
                :REVERSE_PILOT_ROWS].to(pilot_data.device)]

    def __call__(self, route: str, count: int, reverse: bool = False):
        if self.schedule == "uniform":
            return make_betas(count)
        reverse = reverse and self.schedule == "tuned"
        if (route, reverse) not in self.pilots:
            kind, base = self.routes[route]

            def pilot():
                return thermodynamic_length(
                    self.model, base=base, path=kind,
                    trajectory=self.trajectory if kind == "trajectory" else None,
                    data=self.base_data, seed=self.seed + 1, pilot_betas=self.pilot_betas,
                    reverse_from=self.pilot_rows if reverse else None)
            if self.work is None:
                self.pilots[route, reverse] = pilot()
            else:  # read back with the seconds it took, which count as restored work
                *self.pilots[route, reverse], seconds = self.work.pilot(
                    f"{route} {'reverse' if reverse else 'forward'}", pilot)
                self.restored += seconds
        return betas_of_equal_length(*self.pilots[route, reverse], count)


def _run_level(model, routes, schedules, n_temperatures, level_seed, *, n_chains, subset,
               base_data, trajectory, raise_repeats, batches, free_all, free_rows, work,
               progress, deadline=None) -> tuple[dict, dict, float]:
    """One level of a bracket: AIS (``n_chains``) and RAISE (``subset`` (R, n_visible),
    ``raise_repeats`` chains per row) on every route at ``n_temperatures``; past ``deadline``
    its runs stop between saved batches (`irbm.ais.OutOfTime`).

    Returns the level's record ({"n_betas", "ais": {route: ...}, "raise": {route: ...}}), the
    AIS results by route, and the seconds of chain batches read back from ``work`` (not run).
    ``free_all`` (N,) and ``free_rows`` (R,) are the free energies of the bracketed rows and of
    the subset, for RAISE's control variate.
    """
    level, results, restored = {"n_betas": n_temperatures, "ais": {}, "raise": {}}, {}, 0.0
    for route, (kind, base) in routes.items():
        along = trajectory if kind == "trajectory" else None
        betas = schedules(route, n_temperatures)
        run_started = time.perf_counter()
        ais = estimate_log_partition(
            model, n_chains, betas=betas, base=base, path=kind, trajectory=along,
            data=base_data, seed=level_seed, progress=progress,
            chain_batch_size=batches["ais"], deadline=deadline,
            checkpoint_path=work and work.checkpoint(n_temperatures, route, "ais"))
        restored += max(0.0, ais.seconds - (time.perf_counter() - run_started))
        results[route] = ais
        level["ais"][route] = {"log_z": ais.log_z, "n_chains": ais.n_chains,
                               # ln(Z-hat + 3 sigma) - ln Z-hat: three standard errors of
                               # ln Z-hat (delta method), finite whatever the weights
                               "sigma": (ais.log_z_high - ais.log_z) / 3.0,
                               "effective_sample_size": ais.effective_sample_size,
                               "seconds": ais.seconds}
        reverse_betas, run_started = schedules(route, n_temperatures, True), time.perf_counter()
        reverse = raise_nll(model, subset, betas=reverse_betas, seed=level_seed, base=base,
                            path=kind, trajectory=along, base_data=base_data,
                            n_repeats=raise_repeats, chain_batch_size=batches["raise"],
                            checkpoint_path=work and work.checkpoint(
                                n_temperatures, route, "raise"),
                            deadline=deadline, progress=progress)
        restored += max(0.0, reverse.seconds - (time.perf_counter() - run_started))
        whole, stderr = control_variate(free_all, free_rows, reverse.log_likelihoods)
        level["raise"][route] = {"rows": reverse.mean, "whole": whole, "stderr": stderr,
                                 "repeat_gap": reverse.repeat_gap, "seconds": reverse.seconds}
    return level, results, restored


def refuse_certified_resume(stored: dict, tolerance: float) -> list[dict]:
    """Copies of a stored bracket's levels as a continuation judges them; ValueError when they
    are certified, as an uninterrupted call would have stopped there."""
    levels = copy.deepcopy(stored["levels"])
    if stored.get("cross_check") is not None:
        # Tempering re-judged the last level's conservative side alone: judged again without
        # it, the levels are those of the bracket it checked (a new check may run at the end).
        judge_conservative(levels, floor=stored.get("log_z_floor", -math.inf))
    if not verdict(levels, tolerance=tolerance, out_of_time=False):
        raise ValueError(f"the stored bracket is certified at {levels[-1]['n_betas']} "
                         "temperatures: an uninterrupted call stops there, so there is nothing "
                         "to continue (start a new bracket to check it again)")
    return levels


def _stored_settings(stored: dict) -> dict:
    """The settings of a stored bracket (`Bracket.summary`) a call continuing it takes where it
    leaves them None; a seed stored before brackets recorded it is None (then 0, as before)."""
    return {"n_chains": stored["n_chains"], "rows": stored["n_rows"],
            "raise_repeats": stored.get("raise_repeats", 1), "seed": stored.get("seed"),
            "paths": _stored_paths(stored),
            "bases": tuple(stored.get("bases") or ("data",)),
            "schedule": stored.get("schedule", "tuned-forward")}  # see bracket_results


def _stored_paths(stored: dict) -> tuple:
    """A stored bracket's annealing paths: brackets stored before "bases" and "paths" were
    recorded ran the data base alone, and their paths are the routes their levels name."""
    return tuple(stored.get("paths") or dict.fromkeys(
        route.split(", ")[0] for route in stored["levels"][0]["ais"]))


def _refuse_another_bracket(stored: dict, fingerprint: dict, seed):
    """ValueError when the stored bracket was made of another model, other rows or other base
    data than this call's (``fingerprint``: their digests), or with another seed; a bracket
    stored before these were recorded is taken on trust (`irbm evaluate --continue` checks its
    run's model)."""
    what = {"parameters": "another model (its parameters differ: another model, or this one "
                          "trained or changed since)",
            "data": "other rows (data)", "base data": "other base data (base_data)",
            "trajectory": "another trajectory"}
    for name, digest in (stored.get("fingerprint") or {}).items():
        if name in fingerprint and digest != fingerprint[name]:
            raise ValueError(f"resume: the stored bracket is of {what.get(name, name)} than "
                             "this call's: continue a bracket only with the model and rows it "
                             "was made of, or start a new one (resume=None)")
    if seed is not None and stored.get("seed") is not None and int(seed) != stored["seed"]:
        raise ValueError(f"resume: the stored bracket ran with seed {stored['seed']}, this call "
                         f"with {seed}: leave seed None to continue with the stored one")
    if seed is None and stored.get("seed") is None:
        # Its row subset and levels depend on it; 0 would pool other rows' levels with its.
        raise ValueError("resume: the stored bracket was made before brackets recorded their "
                         "seed: pass seed= (the evaluation record's \"seed\"; irbm evaluate "
                         "--continue passes it)")


def _resumable(stored: dict, *, n_chains, n_rows, raise_repeats, bases, paths, schedule,
               pilot_betas, tolerance, max_betas) -> tuple[list[dict], int, float]:
    """(copies of the stored bracket's levels, the next level's temperatures, its seconds),
    or ValueError naming the setting that differs from the call continuing it."""
    stored_schedule = stored.get("schedule", "tuned-forward")  # see bracket_results
    stored_paths = _stored_paths(stored)
    settings = {"chains": (stored["n_chains"], n_chains), "rows": (stored["n_rows"], n_rows),
                "RAISE repeats": (stored.get("raise_repeats", 1), raise_repeats),
                "bases": (tuple(stored.get("bases") or ("data",)), tuple(bases)),
                "paths": (tuple(stored_paths), tuple(paths)),
                "schedule": (stored_schedule, schedule),
                "pilot temperatures": (stored_pilot_betas(stored),
                                       None if schedule == "uniform" else pilot_betas),
                "tolerance": (stored["tolerance"], tolerance)}
    for name, (was, now) in settings.items():
        if was != now:
            raise ValueError(f"the stored bracket ran with {name} {was}, this call with {now}: "
                             "a bracket continues with the settings it was started with")
    levels = refuse_certified_resume(stored, tolerance)
    next_betas = 2 * int(levels[-1]["n_betas"])
    if next_betas > max_betas:
        raise ValueError(f"the stored bracket's next level ({next_betas} temperatures) "
                         f"passes max_betas ({max_betas})")
    return levels, next_betas, float(stored["seconds"])
