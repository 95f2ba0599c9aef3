"""What a bracket of the average NLL is, and when it is certified.

The optimistic side comes from forward annealing (AIS): each ln Z-hat is a stochastic lower bound
of ln Z (Z-hat is unbiased, so P(ln Z-hat > ln Z + k) <= e^-k), and so is the certain floor
ln sum_v exp(-F(v)) over distinct visited states (or ln sum_h exp(-G(h)) over distinct hidden
vectors, `irbm.floor`). The largest of many runs is not (the best
of m overshoots with probability up to m e^-k), so the runs of every level and path are pooled
into one unbiased Z-hat (`pooled_log_z`): on the CalTech101 oRBM-500 at 5,000 epochs the
largest run (effective sample size 1.7) stood 1 nat above a healthy one (67) and tempering.
The conservative side comes from reverse annealing
(RAISE, Burda, Grosse & Salakhutdinov 2015): per row, ln p-hat(v) is a stochastic lower bound of
ln p_A(v), the likelihood under the *annealing model* A (the distribution of the forward chains'
final states along the same path), so its average NLL errs high for A. A equals the model only
when the forward chains reach all of the model's mass. Where they miss mass far from the data,
A gives the data more probability than the model does and RAISE errs low: on a CalTech101 iRBM
(authors' profile, 4,000 epochs) the linear path's chains all end near z = 217, the data's z,
while the model's mass sits near z = 400; RAISE along it gave 130.5 nats against AIS's 134.4
(pinned path). Both sides converge to the exact NLL as the temperatures grow, so
`irbm.evaluate.bracket_nll` doubles them until the sides meet within a tolerance.

An AIS estimate overshoots ln Z by k nats with probability below e^-k, so a RAISE NLL below the
optimistic side by more than 3 standard errors + 1 nat is refuted and left out of the
conservative side: most likely its annealing model misses mass the forward chains found, though
the best of many AIS estimates may also have overshot, and the verdict says both. Below a
certain floor of ln Z (`irbm.floor`, which cannot overshoot) 3 standard errors suffice. Only
the last level's RAISE counts, its annealing model being the closest to the model
(`judge_conservative`).
An independent point estimate by parallel tempering (`irbm.tempering`) can be checked against
the bracket (`cross_check_reasons`); a RAISE route below it by the same margin is refuted too
(`refuted_by_check`): on that iRBM tempering along the pinned path gave 134.2 +/- 0.1.

RAISE runs on a random subset of rows. Its per-row estimate of ln Z,
d_n = -ln p-hat(v_n) - F(v_n), varies far less across rows than the NLL itself (F carries the
rows' differences), so the whole set's conservative NLL is mean_all F + mean_subset d, with the
free energy as a control variate: its standard error is std(d) / sqrt(n_rows).

This module holds the record and the rules; `irbm.evaluate.bracket_nll` runs the estimators.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import torch

# What `from irbm.bracket import *` gives: the result, and the rules a stored bracket is judged
# by (`rejudge` applies them all).
__all__ = [
    "Bracket", "BracketUnfinished", "rejudge", "verdict", "judge_conservative",
    "refuted_by_check", "conditional_bracket", "control_variate", "pool_weights",
    "pooled_log_z", "same_weights_move", "rising_routes", "overshoot_bound", "SCHEDULES",
    "BRACKET_CHAINS", "RAISE_REPEATS"]

# `irbm.evaluate.bracket_nll`'s temperature schedules (its ``schedule``).
SCHEDULES = ("tuned", "tuned-forward", "uniform")

# The most temperatures a pilot run of the tuned schedules takes by default (`bracket_nll`'s
# pilot_betas: the first level's, at most this), and those of every bracket stored before the
# pilots' were recorded.
PILOT_BETAS = 1000


def stored_pilot_betas(stored: dict) -> int | None:
    """The pilot temperatures of a stored bracket (`Bracket.summary`); None: no pilot ran."""
    if stored.get("schedule", "tuned-forward") == "uniform":
        return None
    return stored.get("pilot_betas", PILOT_BETAS)

# `irbm evaluate --bracket`'s reverse chains per RAISE row (`bracket_nll`'s raise_repeats):
# on trained CalTech101 models at 2,000-4,000 temperatures, 8-16 chains per row lowered RAISE's
# NLL by 1.8-3.2 nats, what about three doublings of the temperatures buy there (0.3-1 nat
# each), and where RAISE had stopped falling with temperatures (the RBM-100, the RBM-2000) 3-4
# nats; 4 cost about 1.7 times a level's time, and two or more give the gap left
# (`repeat_gap`). See results/README.md.
RAISE_REPEATS = 4
# AIS chains per route and level: `irbm evaluate --bracket` and `irbm.evaluate.bracket_nll`
# alike (a Python call got 100 until session 32, a different bracket from the command's).
BRACKET_CHAINS = 1000

# A RAISE gap left for want of reverse chains per row (`irbm.evaluate.repeat_gap`) above this
# is named as what loosens a wide bracket (nats).
REPEAT_GAP = 0.2

# A side still moving by more than this at the last doubling is not converged (nats).
MOVEMENT = 0.2
# Sides crossing by more than this many standard errors (plus the bounds' slack) mean a defect.
CROSSING_SIGMAS = 3.0
# The slack granted to the optimistic side's lower bound on ln Z (nats): an AIS estimate
# overshoots ln Z by k nats with probability below e^-k.
OVERSHOOT = 1.0
# AIS weights resting on fewer effective chains than this share are called degenerate.
DEGENERATE_SHARE = 0.1
# A tempering estimate below the AIS levels is called wrong, not merely in doubt, when were it
# right the levels would lie that far above it with probability below this (`overshoot_bound`).
REFUTED_BELOW = 0.01


class BracketUnfinished(RuntimeError):
    """`irbm.evaluate.bracket_nll` reached its time budget inside the first level of the call,
    before any level of the call had finished: there is no bracket to report yet. The level's
    finished chain batches are in the work directory, and the same call again goes on from
    them."""


@dataclass
class Bracket:
    """optimistic <= mean_n -ln p(v_n) <= conservative, in nats, each side a stochastic bound.

    Attributes
    ----------
    optimistic, conservative : float
        Average NLL over the whole ``data``: mean F + ln of the pooled AIS estimate of Z over
        all levels and paths (`pooled_log_z`; every level draws independent chains) or the
        certain floor when higher, and mean F + RAISE's control-variate estimate of ln Z from
        the subset (the last level's lowest route not refuted).
    width : float
        conservative - optimistic (negative when the sides cross).
    certified : bool
        The width is within the tolerance, neither side moved at the last doubling by more than
        0.2 nat or two standard errors (whichever is larger; the conservative side judged on
        its route, the optimistic side's pool with its route weights held fixed, as the
        re-weighting of the routes is no trend: `same_weights_move`), no AIS route rose at
        the last doubling by more than that (`rising_routes`: another such rise would lift the
        pool), the pooled AIS estimate does not lie below the certain floor (`floor_gap`: the
        annealing misses mass), the sides do not cross beyond their noise, the conservative
        side's standard error is within a quarter of the tolerance, and a tempering
        cross-check, when run, does not refute it. Certified means converged within the
        tolerance by these checks: both sides stay stochastic bounds, not guarantees (AIS is a
        lower bound of ln Z in probability, RAISE bounds the NLL of its own annealing model).
    reasons : list of str
        Plain sentences, one per failed condition (empty when certified).
    optimistic_rows, conservative_rows : float
        The same two sides on the RAISE rows alone (no control variate).
    conservative_stderr : float
        Standard error of ``conservative`` over the RAISE rows.
    log_partition : float
        The optimistic side's ln Z (pooled AIS estimate or the certain floor).
    log_partition_floor : float
        ln sum_v exp(-F(v)) over distinct data rows and Gibbs states, or ln sum_h exp(-G(h))
        over the distinct hidden vectors those chains drew, when higher: certain.
    n_rows, n_betas, n_chains : int
        RAISE rows, temperatures of the last level, AIS chains per path.
    seconds : float
    tolerance : float
    levels : list of dict
        One record per number of temperatures tried: per route ("path, base"), AIS ln Z and
        its effective sample size (``ais``) and RAISE's conservative NLL (``raise``); the
        level's own sides (``own_optimistic``: its best AIS route, ``own_conservative``) and
        the bracket's so far (``optimistic``: the AIS estimates of every route and level
        pooled, or the floor, ``conservative``: the lowest RAISE route not refuted, with
        ``conservative_stderr``); ``log_z``, the pooled ln Z; ``refuted`` and
        ``refuted_by_check``, the RAISE routes left out and why; the level's ``seconds``.
    ais : AISResult or None
        The AIS run behind the optimistic side (per-chain weights, samples, diagnostics).
    bases, paths : tuple of str
        The AIS bases ("data", "model") and annealing paths run.
    max_seconds : float or None
        The time budget it was given.
    stopped_by : str or None
        "time" or "temperatures" when a budget ended it before certification.
    cross_check : dict or None
        The independent point estimate by parallel tempering (`irbm.tempering`), when run:
        ``nll`` (mean F + its ln Z), ``stderr``, ``route`` and its diagnostics.
    schedule : str
        How the temperatures were spaced (`irbm.evaluate.bracket_nll`'s ``schedule``); a
        stored bracket without it spaced RAISE's as AIS's ("tuned-forward").
    resumed_levels : int
        Levels taken from the stored bracket this one continued (0: none); ``seconds``
        includes theirs.
    raise_repeats : int
        Reverse chains per RAISE row (a stored bracket without it ran one).
    pilot_betas : int or None
        Temperatures of each pilot run of a tuned schedule (None: "uniform", no pilot).
    exact_nll : float or None
        The exact average NLL on ``data`` where ln Z can be enumerated
        (`irbm.evaluate.EXACT_TERMS`), the truth the bracket is checked against; None
        otherwise.
    seed : int or None
        The seed of the row subset and the estimators (None: stored before it was recorded).
    fingerprint : dict or None
        sha256 digests of what it bracketed ("parameters" of the model, "data", "base data",
        "trajectory"), which a call continuing it must match (None: stored before).
    """

    optimistic: float
    conservative: float
    certified: bool
    reasons: list[str]
    optimistic_rows: float
    conservative_rows: float
    conservative_stderr: float
    log_partition: float
    log_partition_floor: float
    n_rows: int
    n_betas: int
    n_chains: int
    seconds: float
    tolerance: float
    levels: list[dict] = field(default_factory=list)
    ais: object = None
    bases: tuple = ("data",)
    paths: tuple = ()
    max_seconds: float | None = None
    stopped_by: str | None = None
    cross_check: dict | None = None
    schedule: str = "tuned"
    resumed_levels: int = 0
    raise_repeats: int = 1
    pilot_betas: int | None = PILOT_BETAS
    exact_nll: float | None = None
    seed: int | None = None
    fingerprint: dict | None = None

    @property
    def width(self) -> float:
        return self.conservative - self.optimistic

    def summary(self) -> dict:
        """JSON-ready record (what `irbm evaluate --bracket` appends to the run)."""
        return {"optimistic": self.optimistic, "conservative": self.conservative,
                "width": self.width, "certified": self.certified, "reasons": list(self.reasons),
                "optimistic_rows": self.optimistic_rows,
                "conservative_rows": self.conservative_rows,
                "conservative_stderr": self.conservative_stderr,
                "log_z": self.log_partition, "log_z_floor": self.log_partition_floor,
                "n_rows": self.n_rows, "n_betas": self.n_betas, "n_chains": self.n_chains,
                "seconds": self.seconds, "tolerance": self.tolerance, "bases": list(self.bases),
                "paths": list(self.paths), "max_seconds": self.max_seconds,
                "stopped_by": self.stopped_by, "cross_check": self.cross_check,
                "schedule": self.schedule, "resumed_levels": self.resumed_levels,
                "raise_repeats": self.raise_repeats, "pilot_betas": self.pilot_betas,
                "seed": self.seed, "fingerprint": self.fingerprint, "levels": self.levels}

    def __str__(self) -> str:
        verdict = "certified" if self.certified else "NOT certified"
        # A continued bracket's seconds count its stored levels' (a walkthrough read 87 s
        # against a 60 s budget as the budget broken).
        new_levels = self.levels[self.resumed_levels:] if self.resumed_levels else []
        seconds = (f"{self.seconds:.0f} s in all, "
                   f"{sum(level.get('seconds', 0.0) for level in new_levels):.0f} s in this "
                   f"call's {len(new_levels)} level{'s' if len(new_levels) != 1 else ''}"
                   if self.resumed_levels else f"{self.seconds:.0f} s")
        return (f"NLL in [{self.optimistic:.2f}, {self.conservative:.2f}] "
                f"({width_text(self.width)}, {verdict}; {self.n_betas} temperatures, "
                f"{seconds})")


def width_text(width: float) -> str:
    """"width W nats", or "sides cross by W nats" where the optimistic side lies above the
    conservative one (within their noise: a bracket at the truth)."""
    return f"sides cross by {-width:.2f} nats" if width < 0 else f"width {width:.2f} nats"


def control_variate(free_all: torch.Tensor, free_rows: torch.Tensor,
                    log_likelihood_rows: torch.Tensor) -> tuple[float, float]:
    """(mean_all F + mean_rows d, std_rows(d) / sqrt(n)) with d = -ln p-hat(v) - F(v).

    free_all : (N,) free energies of every row; free_rows, log_likelihood_rows : (n,) on the
    RAISE rows."""
    per_row = (-log_likelihood_rows.double() - free_rows.double())
    n = per_row.numel()
    stderr = float(per_row.std(correction=1)) / math.sqrt(n) if n > 1 else math.inf
    return float(free_all.double().mean() + per_row.mean()), stderr


def pool_weights(levels: list[dict]) -> list[tuple[dict, float]]:
    """Each AIS run of ``levels`` (per level ``n_betas`` and ``ais``: per route ``log_z`` and
    ``n_chains``) with its weight in the pool, weights fixed before the run is drawn.

    A level weighs chains x temperatures in all. The first splits it so among its routes; each
    later one shares it out in proportion to each route's Z-hat pooled over the levels before
    (a route first seen there gets none). Such weights depend only on runs drawn earlier, so
    with E[Z-hat] = Z for every run the pool stays unbiased (E[sum_i w_i Z-hat_i] = Z sum_i
    E[w_i], a martingale), while a route whose ln Z-hat lags, such as a path that anneals
    badly, stops diluting it: weighted alike, m routes lose up to ln m nats to the worst."""
    return [(run, weight) for level, weights in zip(levels, route_weights(levels))
            for route, run in level["ais"].items() if (weight := weights[route]) > 0]


def route_weights(levels: list[dict]) -> list[dict[str, float]]:
    """Per level of ``levels``, each route's weight in the pool (see `pool_weights`)."""
    per_level, earlier = [], {}
    for level in levels:
        runs = level["ais"]
        sizes = {route: run["n_chains"] * level["n_betas"] for route, run in runs.items()}
        known = {route: log_weighted_mean(*zip(*earlier[route]))
                 for route in runs if route in earlier}
        if known:
            top = max(known.values())
            shares = {route: math.exp(value - top) for route, value in known.items()}
            scale = sum(sizes.values()) / sum(shares.values())
            per_level.append({route: scale * shares.get(route, 0.0) for route in runs})
        else:
            per_level.append(sizes)
        for route, run in runs.items():
            earlier.setdefault(route, []).append((run["log_z"], sizes[route]))
    return per_level


def same_weights_move(levels: list[dict]) -> tuple[float, float] | None:
    """(move, sigma) of the pooled ln Z-hat from the level before the last to the last, both
    pooled with the weights the level before the last had (fixed before either ran), or None
    where the levels lack the runs or an estimate is not finite.

    The pool's own move also holds the re-weighting of the routes (the first level splits its
    weight evenly, so a poor route drags it down there and less later), which is no trend of
    the annealing; with the weights held fixed only the estimates move. Weights taken from the
    last level would hold the level before's own estimates, so a lucky draw there would weigh
    its route up and its fall back hide a rise (found by a review)."""
    def holds(level, keys):
        return all(key in run and math.isfinite(run[key])
                   for run in level["ais"].values() for key in keys)
    # The weights need every level's estimates and sizes, the move the last two's spreads.
    if len(levels) < 2 or not all(holds(level, ("log_z", "n_chains")) for level in levels) \
            or not all(holds(level, ("sigma",)) for level in levels[-2:]):
        return None
    weights = route_weights(levels)[-2]
    routes = [route for route, weight in weights.items()
              if weight > 0 and route in levels[-1]["ais"]]
    if not routes:
        return None
    pools = []
    for level in levels[-2:]:
        estimates = [(level["ais"][route]["log_z"], weights[route],
                      math.expm1(3 * level["ais"][route]["sigma"]) / 3) for route in routes]
        log_z, _, high = pool_estimates(estimates)
        pools.append((log_z, (high - log_z) / 3))  # high: ln(Z-hat + 3 sigma)
    (before, sigma_before), (last, sigma_last) = pools
    return last - before, math.hypot(sigma_before, sigma_last)


def rising_routes(levels: list[dict]) -> list[tuple[str, float]]:
    """(route, move) of the AIS routes whose ln Z-hat rose at the last doubling beyond 0.2 nat
    and two standard errors, and which another such rise would lift above the pool: a route
    far behind weighs little in the pool, so its rise barely moves it, yet it shows the
    annealing has not converged where it could still overtake."""
    if len(levels) < 2 or "log_z" not in levels[-1]:
        return []
    last, before, rising = levels[-1], levels[-2], []
    for route, run in last["ais"].items():
        then = before["ais"].get(route, {})
        if not {"log_z", "sigma"} <= set(run) or not {"log_z", "sigma"} <= set(then):
            continue
        move = run["log_z"] - then["log_z"]
        noise = max(MOVEMENT, 2 * math.hypot(run["sigma"], then["sigma"]))
        if move > noise and run["log_z"] + move > last["log_z"] + noise:
            rising.append((route, move))
    return rising


def floor_gap(levels: list[dict]) -> float:
    """How far the last level's ln Z (the pool or, when higher, the certain floor) lies above
    the pool of its AIS runs: > 0 when the floor is the optimistic side; 0 for levels stored
    without their runs' sizes."""
    runs = [run for level in levels for run in level.get("ais", {}).values()]
    if "log_z" not in levels[-1] or not runs or not all(
            {"log_z", "n_chains"} <= set(run) for run in runs):
        return 0.0
    return max(0.0, levels[-1]["log_z"] - pooled_log_z(levels))


def pooled_log_z(levels: list[dict]) -> float:
    """ln sum_i w_i Z-hat_i / sum_i w_i over every AIS run of ``levels``, with the weights of
    `pool_weights`.

    Each Z-hat_i is unbiased and each weight is fixed before its run, so the pool is unbiased
    too and its log is one stochastic lower bound of ln Z (P(overshoot by k) <= e^-k); the
    weights favour the runs with more temperatures, whose estimates vary less, and the routes
    that found more mass. The largest ln Z-hat_i is no such bound: the best of m runs
    overshoots with probability up to m e^-k, and a single lucky chain (an effective sample
    size near 1) can carry it a nat too high."""
    runs = pool_weights(levels)
    return log_weighted_mean([run["log_z"] for run, _ in runs], [weight for _, weight in runs])


def level_estimates(levels: list[dict]) -> list[tuple[float, float, float]]:
    """(ln Z-hat, weight, sigma / Z-hat) of every AIS run of ``levels`` (per run ``log_z``,
    ``n_chains`` and ``sigma``, the standard error of ln Z-hat), with the weights of
    `pool_weights`."""
    return [(run["log_z"], weight, math.expm1(3 * run["sigma"]) / 3)
            for run, weight in pool_weights(levels)
            if {"log_z", "n_chains", "sigma"} <= set(run)]


def pool_estimates(estimates: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """(ln Z-hat, ln(Z-hat - 3 sigma), ln(Z-hat + 3 sigma)) of Z-hat = sum_i w_i Z-hat_i /
    sum_i w_i from (ln Z-hat_i, w_i, sigma_i / Z-hat_i): unbiased when each Z-hat_i is and the
    weights are fixed in advance, sigma = sqrt(sum_i w_i^2 sigma_i^2) / sum_i w_i for
    independent runs. The lower end is -inf when 3 sigma >= Z-hat."""
    weights = [weight for _, weight, _ in estimates]
    log_z = log_weighted_mean([value for value, _, _ in estimates], weights)
    relative = math.sqrt(sum((weight / sum(weights) * math.exp(value - log_z) * spread) ** 2
                             for value, weight, spread in estimates))
    low = log_z + math.log1p(-3 * relative) if 3 * relative < 1 else -math.inf
    return log_z, low, log_z + math.log1p(3 * relative)


def log_weighted_mean(log_values: list[float], weights: list[float]) -> float:
    """ln(sum_i w_i e^{x_i} / sum_i w_i), computed without overflow."""
    terms = [math.log(weight) + value for value, weight in zip(log_values, weights)]
    top = max(terms)
    return top + math.log(sum(math.exp(term - top) for term in terms)) - math.log(sum(weights))


def crossing_noise(stderr: float, certain_floor: bool = False) -> float:
    """How far (nats) a RAISE NLL with standard error ``stderr`` may fall below the optimistic
    side before the two contradict each other: three standard errors plus AIS's slack, which
    an optimistic side that is a certain floor (`floor_gap`) does not have."""
    return CROSSING_SIGMAS * stderr + (0.0 if certain_floor else OVERSHOOT)


def refuted(estimate: dict, optimistic: float, certain_floor: bool = False) -> bool:
    """Whether a RAISE record {"whole", "stderr"} lies below ``optimistic`` beyond the noise
    (`crossing_noise`: without AIS's slack when that side is a ``certain_floor``)."""
    return estimate["whole"] < optimistic - crossing_noise(estimate["stderr"], certain_floor)


def refuted_by_check(estimate: dict, check: dict | None) -> bool:
    """Whether a RAISE record {"whole", "stderr"} lies below the tempering estimate ``check``
    (``nll``, ``stderr``, ``passages``) beyond their noise. Tempering is consistent, not a
    bound: where its chains miss mass it errs low, like RAISE's annealing model, so an
    estimate above RAISE by more than 3 standard errors + 1 nat shows mass RAISE missed. A
    check that never carried a state from the base to the model refutes nothing."""
    if check is None or check.get("passages", check.get("round_trips", 1)) == 0:
        return False
    noise = crossing_noise(math.hypot(estimate["stderr"], check["stderr"]))
    return estimate["whole"] < check["nll"] - noise


def judge_conservative(levels: list[dict], cross_check: dict | None = None,
                       floor: float = -math.inf) -> None:
    """Set the last level's conservative side from its RAISE records.

    Each level holds ``raise`` (per route: ``whole``, ``rows``, ``stderr``) and ``optimistic``
    (the best of all levels so far). RAISE bounds the NLL of its annealing model, which nears
    the model as the temperatures grow, so only the last level's records count (a lower value
    at fewer temperatures may come from an annealing model that gave the data more mass):
    the side (``conservative``, ``conservative_rows``, ``conservative_stderr``,
    ``raise_path``, also as ``own_conservative``, ``own_conservative_stderr``) is the lowest of
    them that neither ``optimistic`` nor the tempering estimate ``cross_check`` refutes.
    ``refuted`` and ``refuted_by_check`` map the routes each leaves out to their NLL. With
    nothing left the side is +inf: no conservative bound.

    A certain ``floor`` of ln Z below the pooled AIS gives a lower bound of the NLL below the
    optimistic side: a route under it beyond three standard errors is left out as well
    (listed in ``below_floor``), though AIS's slack would keep it."""
    last = levels[-1]
    records, certain_floor = last["raise"], floor_gap(levels) > 0
    floor_side = last["optimistic"] - last["log_z"] + floor \
        if "log_z" in last and math.isfinite(floor) else -math.inf
    below_floor = {route: record["whole"] for route, record in records.items()
                   if record["whole"] < floor_side - crossing_noise(record["stderr"], True)}
    left_out = {route: record["whole"] for route, record in records.items()
                if refuted(record, last["optimistic"], certain_floor) or route in below_floor}
    by_check = {route: record["whole"] for route, record in records.items()
                if route not in left_out and refuted_by_check(record, cross_check)}
    kept = [route for route in records if route not in left_out and route not in by_check]
    route = min(kept, key=lambda name: records[name]["whole"]) if kept else None
    record = records[route] if route else {"whole": math.inf, "rows": math.inf,
                                           "stderr": math.inf}
    # The check's estimate stays with the level, so a verdict needs no other argument.
    checked = {key: cross_check[key] for key in ("nll", "stderr")} if by_check else None
    last.update(refuted=left_out, refuted_by_check=by_check, refuting_check=checked,
                below_floor=sorted(below_floor), floor_side=floor_side,
                raise_path=route,
                own_conservative=record["whole"], own_conservative_stderr=record["stderr"],
                conservative=record["whole"], conservative_rows=record["rows"],
                conservative_stderr=record["stderr"])


def rejudge(summary: dict) -> dict:
    """A stored bracket (`Bracket.summary()`) judged again under the current rules from its
    per-level estimates, without sampling: its conservative side, width, certification and
    reasons are recomputed, the estimates themselves are kept."""
    levels = copy.deepcopy(summary["levels"])
    pooled = all("log_z" in run and "n_chains" in run
                 for level in levels for run in level.get("ais", {}).values())
    for index, level in enumerate(levels):
        if "log_z" in level:  # the optimistic side as the current rule pools it
            free_all = level["optimistic"] - level["log_z"]
            floor = summary.get("log_z_floor", -math.inf)
            log_z = max(pooled_log_z(levels[:index + 1]) if pooled else level["log_z"], floor)
            if "optimistic_rows" in level:
                level["optimistic_rows"] += log_z - level["log_z"]
            level.update(log_z=log_z, optimistic=free_all + log_z)
            if "own_optimistic" in level:  # as `bracket_nll` makes it: the floor when higher
                level["own_optimistic"] = max(level["own_optimistic"], free_all + floor)
                best = level.get("ais", {}).get(level.get("best_path"), {})
                if "log_z" in best:
                    level["own_from_floor"] = bool(floor > best["log_z"])
        last_level = index == len(levels) - 1
        judge_conservative(levels[:index + 1],
                           summary.get("cross_check") if last_level else None,
                           summary.get("log_z_floor", -math.inf))
    stopped_by = summary.get("stopped_by")
    if stopped_by is None:  # brackets stored before stopped_by was: read it from the reasons
        stopped = [reason for reason in summary.get("reasons", []) if reason.startswith("stopped")]
        stopped_by = stopped and ("time" if "time budget" in stopped[-1] else "temperatures")
    reasons = verdict(levels, tolerance=summary["tolerance"], out_of_time=stopped_by or False,
                      cross_check=summary.get("cross_check"))
    last = levels[-1]
    return {**summary, "levels": levels, "optimistic": last["optimistic"],
            "optimistic_rows": last.get("optimistic_rows", summary.get("optimistic_rows")),
            "log_z": last.get("log_z", summary.get("log_z")),
            "conservative": last["conservative"],
            "conservative_rows": last["conservative_rows"],
            "conservative_stderr": last["conservative_stderr"],
            "width": last["conservative"] - last["optimistic"], "certified": not reasons,
            "reasons": reasons,
            "conditional": conditional_bracket(last, summary.get("cross_check"),
                                               summary["tolerance"],
                                               certain_floor=floor_gap(levels) > 0)}


def conditional_bracket(last: dict, check: dict | None, tolerance: float, *,
                        certain_floor: bool = False) -> dict | None:
    """[optimistic, BDMC] of level ``last`` where the tempering ``check`` ran BDMC: a bracket
    that holds if tempering's samples are draws from the model (Grosse et al. 2015), which
    its passages from base to model make plausible but nothing certifies (nor that BDMC has
    converged). ``within_tolerance`` when it is at most ``tolerance`` wide, the two do not
    cross beyond BDMC's noise and BDMC's standard error is within a quarter of the tolerance,
    as a certified bracket's conservative side must be; ``contradicted`` when they cross
    beyond it (the samples miss mass the AIS chains found, or AIS overshot; only the former
    when the optimistic side is a ``certain_floor``, which leaves BDMC no slack for an AIS
    overshoot). None without BDMC, or when tempering never carried a state from the base to
    the model.

    Measured (session 18, `results/README.md`): on the CalTech101 RBM-2000 (76 passages) AIS
    at 16,000-64,000 temperatures lay 4.4-5.1 nats above such a BDMC bound, so passages did not
    make those samples draws: a hint, never a result."""
    bdmc = None if check is None else check.get("bdmc")
    passages = None if check is None else check.get("passages", check.get("round_trips", 0))
    if bdmc is None or not passages:
        return None
    width = bdmc["nll"] - last["optimistic"]
    noise = crossing_noise(bdmc["stderr"], certain_floor)
    return {"optimistic": last["optimistic"], "conservative": bdmc["nll"],
            "conservative_stderr": bdmc["stderr"], "width": width, "passages": passages,
            "contradicted": width < -noise, "certain_floor": certain_floor,
            "within_tolerance": -noise <= width <= tolerance and bdmc["stderr"] <= tolerance / 4}


def verdict(levels: list[dict], *, tolerance: float, out_of_time,
            cross_check: dict | None = None) -> list[str]:
    """Why the last level's bracket is not certified (empty list: it is).

    Each level holds ``optimistic``, ``conservative``, ``conservative_stderr``, ``n_betas`` and
    ``ais`` (per path: ``log_z``, ``effective_sample_size``, ``n_chains``) and ``best_path``."""
    last, reasons = levels[-1], []
    width = last["conservative"] - last["optimistic"]
    floor_refuted = last.get("refuted") and set(last["refuted"]) <= set(
        last.get("below_floor", ()))
    if last.get("refuted") and (floor_gap(levels) > 0 or floor_refuted):
        listed = "; ".join(f"{route}: {nll:.2f}" for route, nll in last["refuted"].items())
        side = (f"the optimistic side ({last['optimistic']:.2f}), a certain floor of the NLL"
                if floor_gap(levels) > 0 else f"{last['floor_side']:.2f}, a certain floor of the "
                "NLL (from the sampled floor of ln Z, below the pooled AIS)")
        reasons.append(
            f"RAISE ({listed}) falls below {side}, by more than 3 standard errors, so it is left "
            "out: its annealing model (where its forward chains end) misses mass, so RAISE, "
            "which bounds that model's NLL, errs low")
    elif last.get("refuted"):
        listed = "; ".join(f"{route}: {nll:.2f}" for route, nll in last["refuted"].items())
        kept = max(levels, key=lambda level: level.get("own_optimistic", level["optimistic"]))
        ais = kept.get("ais", {}).get(kept.get("best_path"), {})
        ess = (f" (effective sample size {ais['effective_sample_size']:.1f} of "
               f"{ais['n_chains']})" if "effective_sample_size" in ais else "")
        reasons.append(
            f"RAISE ({listed}) falls below the optimistic side ({last['optimistic']:.2f}) by "
            "more than 3 standard errors + 1 nat, so it is left out: either its annealing model "
            "(where its forward chains end) misses mass that AIS found away from the data, so "
            "RAISE, which bounds that model's NLL, errs low, or the optimistic side's AIS"
            f"{ess} overshot ln Z, which the best of several estimates can; an independent "
            "estimate (--tempering) tells which")
    if last.get("refuted_by_check"):
        listed = "; ".join(f"{route}: {nll:.2f}"
                           for route, nll in last["refuted_by_check"].items())
        check = last["refuting_check"]
        reasons.append(
            f"RAISE ({listed}) falls below the tempering estimate ({check['nll']:.2f} +/- "
            f"{check['stderr']:.2f}) by more than 3 standard errors + 1 nat, so it is "
            "left out: its annealing model misses mass that the tempering chains reach, so "
            "RAISE, which bounds that model's NLL, errs low")
    if not math.isfinite(last["conservative"]):
        reasons.append("no conservative side: every RAISE estimate of the last level is "
                       "refuted (by the optimistic side or the tempering estimate)")
    elif width > tolerance:
        reasons.append(f"the bracket is {width:.2f} nats wide, more than the tolerance "
                       f"({tolerance:g})" + _suspect(levels))
    # The last level must agree with the best bounds kept from earlier ones: a level whose AIS
    # falls far below an earlier level's ln Z shows weights that hinge on a few lucky chains.
    behind = last["optimistic"] - last.get("own_optimistic", last["optimistic"])
    if behind > max(tolerance / 2, 3 * last.get("own_optimistic_sigma", 0.0)):
        own = ("the certain floor, which the last level's best AIS run falls below, gives "
               "an NLL" if last.get("own_from_floor") else
               "the last level's best AIS run gives an NLL")
        reasons.append(f"{own} {behind:.2f} nats below the pooled estimate of all runs (ln Z "
                       "that much lower): the estimates "
                       "hinge on a few chains that find mass the others miss; use more chains")
    if len(levels) < 2:
        reasons.append("only one number of temperatures was run: convergence is unchecked")
    else:
        before = levels[-2]
        for side, noise in (("optimistic", "own_optimistic_sigma"),
                            ("conservative", "own_conservative_stderr")):
            # A move within two standard errors of the two levels' estimates is noise, not a
            # trend: the 0.2-nat rule applies where the estimates are that precise.
            spread = 2 * math.hypot(last.get(noise, 0.0), before.get(noise, 0.0))
            moved = last[side] - before[side]
            route = last.get("raise_path") if side == "conservative" else None
            if route and route in before.get("raise", {}):
                # The same route's move: a change of route (one refuted) is not a trend.
                now, then = last["raise"][route], before["raise"][route]
                moved = now["whole"] - then["whole"]
                spread = 2 * math.hypot(now["stderr"], then["stderr"])
            if side == "optimistic" and floor_gap(levels) > 0 and floor_gap(levels[:-1]) > 0:
                continue  # the certain floor, the same at both: the AIS pool's move is moot
            fixed = same_weights_move(levels) if side == "optimistic" else None
            if fixed is not None:  # the NLL moves with ln Z; see `same_weights_move`
                moved, spread = fixed[0], 2 * fixed[1]
            # Said where the move is not the printed sides' difference (a reader checks it).
            measure = " (the pooled ln Z with the routes weighted as at the level before)" \
                if fixed is not None else ""
            if not math.isfinite(moved) or abs(moved) <= max(MOVEMENT, spread):
                continue
            if route and moved > 0:
                # RAISE's NLL falls as its annealing model nears the model; a rise shows that
                # model still moving mass away from the data.
                reasons.append(f"RAISE along {route} rose by {moved:.2f} nats when the "
                               f"temperatures doubled to {last['n_betas']}: its annealing model "
                               "is still moving mass away from the data, so the conservative "
                               "side may still be too low")
            else:
                reasons.append(f"the {side} side moved by {moved:+.2f} nats{measure} when "
                               f"the temperatures doubled to {last['n_betas']}: not converged")
    below = floor_gap(levels)
    if below > 0:
        amount = f"{below:.2f} nats" if below >= 0.005 else "less than 0.005 nat"
        reasons.append(f"the pooled AIS estimate lies {amount} below the certain floor "
                       "(ln Z summed over the distinct visible and hidden vectors Gibbs chains "
                       "from the data, or descents of G, reached), so the optimistic side is "
                       "that floor: the annealing misses mass those vectors hold, and RAISE, on "
                       "the same paths, may miss it too")
    for route, move in rising_routes(levels):
        reasons.append(f"AIS along {route} rose by {move:.2f} nats when the temperatures "
                       f"doubled to {last['n_betas']}, and another such rise would lift the "
                       "pool: not converged")
    if math.isfinite(last["conservative_stderr"]) and \
            last["conservative_stderr"] > tolerance / 4:
        reasons.append(f"the conservative side's standard error is "
                       f"{last['conservative_stderr']:.2f} nats (RAISE rows): use more rows "
                       "(a new bracket with --raise N, Python: bracket_nll's rows= or "
                       "evaluate_run's raise_rows=; --continue, Python: resume=, keeps its "
                       "rows)")
    if cross_check is not None:
        reasons += cross_check_reasons(levels, cross_check)
    if reasons and out_of_time:
        # Not a defect of the bracket: what ended the doublings before the reasons above settled.
        if out_of_time in (True, "time"):
            reasons.append(f"stopped at the time budget after {last['n_betas']} temperatures, "
                           "before another doubling could settle the above (--continue, "
                           "Python: resume=, goes on from the stored levels)")
        else:
            reasons.append(f"stopped at the largest number of temperatures allowed "
                           f"({last['n_betas']}) before the above settled")
    return reasons


def overshoot_bound(levels: list[dict], log_z: float) -> float | None:
    """prod_k exp(-max(0, ln Z-hat_k - ``log_z``)) over the levels, Z-hat_k the level's AIS
    estimates (its routes) averaged: were ``log_z`` the true ln Z, an upper bound on the chance
    that every level lies as far above it as it does. Each Z-hat_k is unbiased, so
    P(Z-hat_k >= e^a Z) <= e^-a (Markov), and the levels draw independent chains. None when the
    levels hold no estimates of ln Z."""
    excess = 0.0
    for level in levels:
        estimates = [run["log_z"] for run in level.get("ais", {}).values() if "log_z" in run]
        if not estimates:
            return None
        top = max(estimates)
        pooled = top + math.log(sum(math.exp(e - top) for e in estimates) / len(estimates))
        excess += max(0.0, pooled - log_z)
    return math.exp(-excess)


def cross_check_reasons(levels: list[dict], check: dict) -> list[str]:
    """Where the tempering estimate ``check`` (``nll``, ``stderr``, ``passages``, optionally
    ``log_z`` and ``bdmc``) contradicts the bracket of the last of ``levels``: it is
    consistent, not a bound, so outside the bracket beyond its noise it shows that one of the
    three estimators missed mass; below the optimistic side, `overshoot_bound` over every level
    tells whether AIS could have overshot or tempering missed mass. BDMC from its samples is an
    upper bound of the NLL when they are draws from the model: below the optimistic side it
    shows they are not. Below an optimistic side that is a certain floor (`floor_gap`) either
    is wrong beyond three standard errors: no AIS overshoot can explain it."""
    last = levels[-1]
    certain_floor = floor_gap(levels) > 0
    nll, stderr = check["nll"], check["stderr"]
    estimate = f"the tempering estimate ({nll:.2f} +/- {stderr:.2f})"
    reasons = []
    # Records made before "passages" named them "round_trips" (burn-in included).
    if check.get("passages", check.get("round_trips", 1)) == 0:
        reasons.append(f"{estimate} never carried a state from the base to the model after its "
                       "burn-in: it checks nothing; use more sweeps or temperatures")
    chance = None if "log_z" not in check else overshoot_bound(levels, check["log_z"])
    if nll < last["optimistic"] - crossing_noise(stderr, certain_floor):
        below = f"{estimate} lies below the optimistic side ({last['optimistic']:.2f}) beyond "
        odds = ("" if chance is None else f"were it right, the AIS levels would lie this far "
                f"above it with probability at most {chance:.2g} (Markov's inequality per "
                "level)")
        if floor_gap(levels) > 0:
            reasons.append(f"{below}its noise, and that side is a certain floor of the NLL: "
                           "its chains missed mass")
        elif chance is not None and chance < REFUTED_BELOW:
            reasons.append(f"{below}its noise, and {odds}: its chains missed mass that AIS "
                           "found")
        else:
            reasons.append(f"{below}its noise: either its chains missed mass that AIS found or "
                           "the best of the AIS estimates overshot ln Z"
                           + (f" ({odds})" if odds else ""))
    elif nll > last["conservative"] + CROSSING_SIGMAS * math.hypot(
            stderr, last["conservative_stderr"]):
        reasons.append(f"{estimate} lies above the conservative side "
                       f"({last['conservative']:.2f}) beyond their noise: the model holds mass "
                       "that RAISE's annealing model misses, so the conservative side is too "
                       "low")
    bdmc = check.get("bdmc")
    if bdmc is not None and bdmc["nll"] < last["optimistic"] - crossing_noise(
            bdmc["stderr"], certain_floor):
        reasons.append(f"BDMC from the tempering samples ({bdmc['nll']:.2f} +/- "
                       f"{bdmc['stderr']:.2f}), an upper bound when they are draws from the "
                       f"model, lies below the optimistic side ({last['optimistic']:.2f}) "
                       "beyond its noise: the samples miss mass the AIS chains (or the "
                       "floor's vectors) hold")
    return reasons


def _suspect(levels: list[dict]) -> str:
    """Which side is likely the loose one, from the diagnostics of the last level(s)."""
    last = levels[-1]
    # The optimistic side kept is the best level's (the highest ln Z, hence the highest of
    # these lower bounds on the NLL): judge that level's AIS run.
    source = max(levels, key=lambda level: level.get("own_optimistic", level["optimistic"]))
    ais = source["ais"].get(source["best_path"])
    notes = []
    if ais is not None and ais["effective_sample_size"] < DEGENERATE_SHARE * ais["n_chains"]:
        notes.append(f"the optimistic side is suspect: its AIS weights are degenerate (effective "
                     f"sample size {ais['effective_sample_size']:.1f} of {ais['n_chains']} at "
                     f"{source['n_betas']} temperatures), so ln Z is likely too low")
    if len(levels) >= 2:
        route, before = last.get("raise_path"), levels[-2]
        fall = (before["raise"][route]["whole"] - last["raise"][route]["whole"]
                if route and route in before.get("raise", {})
                else before["conservative"] - last["conservative"])
        if fall > MOVEMENT:
            notes.append(f"the conservative side is suspect: it still fell by {fall:.2f} nats "
                         "at the last doubling")
    # Jensen's gap of each row's mean of R weights (`irbm.evaluate.repeat_gap`) only loosens
    # the conservative side, so it names the fix for a wide bracket but never voids a narrow one.
    gap = last.get("raise", {}).get(last.get("raise_path"), {}).get("repeat_gap")
    if gap is not None and gap > REPEAT_GAP:
        notes.append(f"the conservative side is loose: about {gap:.2f} nats of RAISE's NLL "
                     "are each row's chain noise (the jackknife over its reverse chains per "
                     "row, an underestimate when their weights are heavy-tailed): use more "
                     "--raise-repeats")
    return "; " + "; ".join(notes) if notes else ""
