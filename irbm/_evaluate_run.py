"""Evaluate run directories: AIS (or a bracket) on the run's model, its NLL on every split,
the record appended to ``evaluation.json``; the tempering cross-check and the certain floor
of a stored bracket. `irbm.workflows` gives these functions; `irbm evaluate` calls them.

Every function checks everything it can before it writes anything, and raises ValueError or
OSError with a one-line reason. Messages go to ``echo`` when one is given, else to `logging`.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import torch

from . import runs
from ._bracket_work import remove_work
from ._io import atomic_write, lock_holder
from ._threads import chooses_threads
from ._warn import warn_user
from .ais import estimate_log_partition
from .bracket import BRACKET_CHAINS, RAISE_REPEATS, level_estimates, pool_estimates, rejudge
from .evaluate import (
    EXACT_TERMS,  # the tests lower it (here) to keep AIS on their tiny models
    bracket_nll,
    cross_check,
    describe_bdmc,
    nll,
    raise_nll,
    refuse_certified_resume,
    refuse_descents_base,
)
from .floor import FLOOR_STEPS, free_energies, sampled_log_partition_floor
from .models import check_device, require_finite_parameters, require_full_precision

logger = logging.getLogger("irbm.workflows")


def device_label(device) -> str:
    """'cpu', or 'cuda: <the GPU's name>': where an evaluation ran, stored with it so that the
    command re-deriving it names the device (its random streams differ from the CPU's)."""
    device = torch.device(device)
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    return device.type


@chooses_threads()
def evaluate_run(run_dir, *, n_chains=None, n_betas=None, base=None, path=None, seed=None,
                 which="best", raise_rows=None, raise_repeats=None, bracket=False,
                 tolerance=None,
                 max_seconds=None, tempering_sweeps=None, schedule=None, resume=False,
                 floor_chains=None, floor_descents=0, data_dir=None, device=None,
                 progress=True, echo=None, threads=None) -> dict | None:
    """AIS estimate of log Z for the run's model and its NLL on every split, with the AIS
    diagnostics, appended to the run's ``evaluation.json``; returns the new record.

    ``base`` None takes the family's default AIS base, with the training set for the data's
    base rate; ``path`` None takes the family's default annealing path; ``which="latest"``
    evaluates the latest model rather than the best. A model whose ln Z sums at most
    `EXACT_TERMS` terms (`EnergyModel.exact_terms`) is evaluated with its exact ln Z, AIS's
    estimate and warnings kept beside it ("ais_log_z", "ais_warnings"; not with ``bracket``,
    which always anneals).
    ``raise_rows``: also RAISE's conservative test NLL (same temperatures) on the first
    ``raise_rows`` test rows (0: all of them; None: no RAISE).
    ``bracket``: instead of one AIS run, bracket the test NLL with `irbm.evaluate.bracket_nll`
    (every path, temperatures doubled from ``n_betas`` (default 1,000) until ``tolerance`` or
    ``max_seconds``; RAISE on ``raise_rows`` random test rows, default 300, with
    ``raise_repeats`` reverse chains per row, default `irbm.bracket.RAISE_REPEATS`); ln Z is
    then the bracket's optimistic one and the record holds the bracket under "bracket".
    ``schedule``: with ``bracket``, its temperatures (`irbm.evaluate.bracket_nll`; None:
    "tuned", RAISE's tuned on the training rows).
    ``tempering_sweeps``: with ``bracket``, cross-check it by parallel tempering
    (`irbm.tempering`, 64 temperatures, 32 ladders, this many sweeps); without, cross-check
    the latest bracket of the run's current model instead (`cross_check_run`).
    ``resume``: with ``bracket``, continue the latest bracket of the run's current model
    (its settings; any given must equal them; ``max_seconds`` None: its budget again, for this
    call) from twice its last level's temperatures; the new record says which one it
    continues ("continues": its index in evaluation.json), its ``seconds`` count every level,
    and its AIS diagnostics (effective sample size, warnings, weights) are of the highest run
    of this call, since stored levels keep their numbers but not their weights.
    ``floor_chains``: without ``bracket``, ``tempering_sweeps`` or other AIS options,
    re-judge the latest bracket with a floor from this many chains instead (`floor_run`;
    None is returned when it is not higher than the bracket's), and with ``floor_descents`` the
    minima of G that descents from that many random hidden vectors reach.
    ``n_chains``, ``seed``, ``tolerance``: None takes 1,000, 0 and 1.0 nat.
    ``threads``: torch's CPU threads for the call (None: each estimator inside picks for its
    own product, one thread for a small model, else the free cores, as `irbm evaluate` does;
    an enclosing choice is kept); torch's own setting is restored after.
    """
    _refuse_inapplicable({
        "--bracket": bracket or None, "--tempering": tempering_sweeps, "--chains": n_chains,
        "--betas": n_betas, "--raise": raise_rows, "--seed": seed, "--base": base,
        "--ais-path": path, "--raise-repeats": raise_repeats, "--continue": resume or None,
        "--schedule": schedule, "--tolerance": tolerance, "--max-seconds": max_seconds},
        floor_chains=floor_chains, floor_descents=floor_descents)
    if floor_chains is not None:
        return floor_run(run_dir, floor_chains, n_descents=floor_descents, which=which,
                         data_dir=data_dir, device=device, echo=echo)
    if bracket and raise_rows == 0:
        raise_rows = None  # --raise alone: with --bracket, the default (or stored) rows
    continued = None
    # A budget inherited by --continue was sized for the stored, shorter levels: it must not
    # cut the new one (every call would stop inside it), only decide whether another starts.
    chosen_budget = max_seconds is not None
    if resume:
        continued, stored = _latest_bracket(run_dir, which, "continue")
        (n_chains, raise_rows, raise_repeats, seed, tolerance, base, path, schedule,
         stored_budget) = _continued_settings(
            stored, n_chains=n_chains, n_betas=n_betas, raise_rows=raise_rows,
            raise_repeats=raise_repeats, seed=seed,
            tolerance=tolerance, base=base, path=path, schedule=schedule)
        max_seconds = stored_budget if max_seconds is None else max_seconds
        which = stored.get("which", "latest")
    n_chains = BRACKET_CHAINS if n_chains is None else n_chains  # plain AIS's too
    seed = 0 if seed is None else seed
    tolerance = 1.0 if tolerance is None else tolerance
    raise_repeats = RAISE_REPEATS if raise_repeats is None else raise_repeats
    if tempering_sweeps is not None and not bracket:
        return cross_check_run(run_dir, tempering_sweeps, which=which, data_dir=data_dir,
                               device=device, progress=progress, echo=echo, path=path,
                               base=base)
    say = echo or logger.info
    check_device(device)
    run_dir = runs.require_run(run_dir)
    dataset = runs.load_run_dataset(run_dir, data_dir)
    n_test = 0 if dataset.test is None else len(dataset.test)
    if raise_rows and n_test and raise_rows > n_test and continued is None:
        raise ValueError(f"--raise {raise_rows} (Python: raise_rows=): this run's test set has "
                         f"{n_test} rows; give at most {n_test}, or --raise without a number" + (
                             " (with --bracket: 300 rows, or all of them when fewer)"
                             if bracket else " (all of them)"))
    runs.check_writable(run_dir)
    partial = run_dir / runs.AIS_PARTIAL_FILE
    runs.check_ais_partial(partial)
    model, source = runs.run_model(run_dir, which=which, device=device)
    if (trainer := lock_holder(run_dir / runs.TRAIN_LOCK_FILE)) is not None:
        warn_user(f"{run_dir} is being trained (pid {trainer}): this evaluates its model of "
                  f"epoch {source.epoch}, whose record goes stale when training replaces it")
    model.check_ais_path(path)  # before any work
    require_finite_parameters(model, "irbm evaluate")
    require_full_precision(model.dtype, "irbm evaluate")
    if continued is not None:  # before the banner that says the work has begun
        refuse_certified_resume(stored["bracket"], tolerance)
    if bracket and n_chains < 2:
        raise ValueError(f"--chains {n_chains} (Python: n_chains=): a bracket needs at least 2 "
                         "AIS chains per route")
    hint = (" (no best model: train with --eval-every N for model selection)"
            if which == "best" and source.file != runs.BEST_FILE else "")
    if bracket:
        interval = _bracket_test(model, dataset, n_chains=n_chains, n_betas=n_betas, base=base,
                                 path=path, seed=seed, rows=raise_rows or None,
                                 named=f"{run_dir / source.file} (epoch {source.epoch}){hint}",
                                 raise_repeats=raise_repeats,
                                 tolerance=tolerance, max_seconds=max_seconds, say=say,
                                 tempering=tempering_sweeps and _tempering(tempering_sweeps),
                                 schedule=schedule or "tuned",
                                 resume=None if continued is None else stored["bracket"],
                                 work_dir=run_dir / runs.BRACKET_WORK_DIR, progress=progress,
                                 stop_inside_level=continued is None or chosen_budget)
        result = interval.ais
    else:
        say(f"AIS on {run_dir / source.file} (epoch {source.epoch}, {n_chains} chains){hint}")
        result = estimate_log_partition(model, n_chains, n_betas, base=base, path=path,
                                        data=torch.as_tensor(dataset.train), seed=seed,
                                        progress=progress, checkpoint_path=partial)
    record = {
        # The model actually evaluated: "best" asked of a run without one falls back to latest.
        **source.as_record(), "which": "best" if source.file == runs.BEST_FILE else "latest",
        "family": model.family,
        "display_name": model.display_name, "n_hidden": model.n_hidden, "dataset": dataset.name,
        "log_z": result.log_z, "log_z_low": result.log_z_low, "log_z_high": result.log_z_high,
        "n_chains": result.n_chains, "n_betas": result.n_betas, "base": result.base,
        "path": result.path, "seed": seed, "ais_seconds": result.seconds, "nll": {},
        "effective_sample_size": result.effective_sample_size,
        "top_chain_share": result.top_chain_share,
        "warnings": result.reliability_warnings(bracketed=bracket),
        "device": device_label(model.device),
    }
    if continued is not None:
        record["continues"] = continued
    # ln Z >= ln sum_v exp(-F(v)) over distinct training rows and the states Gibbs chains from
    # them visit (and the same over the hidden vectors they draw): a check the weights cannot
    # fool (uniform weights can all miss a mode). A bracket computed its own.
    floor = interval.log_partition_floor if bracket else sampled_log_partition_floor(
        model, dataset.train, n_chains=min(n_chains, 500), seed=seed or 0)
    record["log_z_floor"] = floor
    # Enumerable: the NLLs need no estimate, and AIS's warnings judge only AIS.
    exact = not bracket and model.exact_terms() <= EXACT_TERMS
    if floor > result.log_z_high:  # within ln Z-hat's 3 sigma the gap is its noise
        record["warnings"].append(_floor_warning(floor - result.log_z, exact))
    say(f"  effective sample size {result.effective_sample_size:.1f} of {result.n_chains} "
        f"chains ({result.base} base)")
    # A bracket's warnings are its highest AIS run's, beside the pooled ln Z printed after
    # (an unlabelled "-inf" bound above a finite pooled interval read as a contradiction).
    label = ("AIS alone (not used)" if exact else
             "AIS's point estimate alone (the bracket above is certified)"
             if bracket and interval.certified else
             "warning (the bracket's highest AIS run alone)" if bracket else "warning")
    for warning in record["warnings"]:
        say(f"  {label}: {warning}")
    log_z = result.log_z
    if exact:
        log_z = model.log_partition_exact()
        say(f"  ln Z = {log_z:.3f} exact (a sum of {model.exact_terms()} terms), which the NLLs "
            f"use; AIS gave {result.log_z:.3f}")
        record.update(ais_log_z=result.log_z, log_z=log_z, log_z_low=log_z, log_z_high=log_z,
                      log_z_source="exact", ais_warnings=record["warnings"], warnings=[])
    elif bracket:
        log_z = _record_bracket(record, interval, model, say)
    elif floor > log_z:  # ln Z >= the floor for certain: the NLLs use it, as irbm report does
        log_z = floor
        say(f"  ln Z-hat {result.log_z:.3f} lies below the certain floor {floor:.3f}, which ln "
            "Z cannot: the NLLs use the floor")
    record["nll_log_z"] = log_z  # the ln Z the NLLs below are computed with
    record["nll"] = _split_nlls(model, dataset, log_z, say)
    _compare_with_independent_pixels(record, model, log_z, dataset, say,
                                     runs.read_settings(run_dir).visible_init)
    if not bracket and raise_rows is not None and dataset.test is not None and \
            len(dataset.test):
        rows = torch.as_tensor(dataset.test[: raise_rows or len(dataset.test)])
        upper = raise_nll(model, rows, n_betas=n_betas, seed=seed, base=base, path=path,
                          base_data=torch.as_tensor(dataset.train), progress=progress)
        record["raise"] = upper.summary()
        say(f"  test  NLL = {upper.mean:.3f} +/- {upper.stderr:.3f} by RAISE, conservative "
            f"({len(rows)} examples; {'exact' if exact else 'AIS'} on the same rows: "
            f"{nll(model, rows, log_z)[0]:.3f})")
    with atomic_write(run_dir / runs.AIS_WEIGHTS_FILE) as stream:
        np.save(stream, result.log_weights.numpy())
    runs.append_evaluation(run_dir, record)
    partial.unlink(missing_ok=True)
    if bracket:  # only now that its result is in the record
        remove_work(run_dir / runs.BRACKET_WORK_DIR)
    return record


def _record_bracket(record: dict, interval, model, say) -> float:
    """Put the bracket ``interval`` (`irbm.bracket.Bracket`) and its ln Z in ``record``, with
    the exact test NLL where the model's ln Z is enumerable; return the ln Z of the NLLs."""
    record["bracket"] = interval.summary()
    log_z = interval.log_partition  # the pooled AIS estimate, or the floor when higher
    if log_z == interval.log_partition_floor:  # ln Z is known no better than that
        # ln Z >= the floor for certain; the AIS interval, below it, bounds nothing above.
        record.update(log_z=log_z, log_z_low=log_z, log_z_high=math.inf, log_z_source="floor")
    else:  # every AIS run of the bracket, pooled (irbm.bracket.pooled_log_z)
        pooled, low, high = pool_estimates(level_estimates(interval.levels))
        record.update(log_z=pooled, log_z_low=low, log_z_high=high, log_z_source="pooled")
    if interval.exact_nll is not None and model.exact_terms() <= EXACT_TERMS:
        exact_nll = interval.exact_nll  # the estimators checked against the truth
        record["exact_test_nll"] = exact_nll
        lower, upper = sorted((interval.optimistic, interval.conservative))  # may cross
        outside = max(lower - exact_nll, exact_nll - upper, 0.0)
        say(f"  exact test NLL {exact_nll:.2f} (ln Z enumerated): "
            + (f"{outside:.3g} nats outside the bracket" if outside else "inside the bracket"))
    return log_z


def _refuse_inapplicable(options: dict, *, floor_chains, floor_descents) -> None:
    """Refuse, before any work, options `evaluate_run` would ignore (``options``: {the
    command's option: its value, None when not given}): a user would believe a budget, a
    tolerance or a setting held."""
    given = {option: value for option, value in options.items() if value is not None}
    if floor_descents and floor_chains is None:
        raise ValueError("--floor-descents adds to the floor that --floor-chains recomputes: "
                         "add --floor-chains (the bracket's AIS chains, say)")
    if floor_chains is not None and given:
        raise ValueError(f"--floor-chains re-judges the run's latest bracket and takes no "
                         f"{', '.join(given)}: run those in a command of their own")
    sweeps = given.get("--tempering")
    if sweeps is not None and int(sweeps) < 1:
        raise ValueError(f"--tempering needs a positive number of sweeps, got {sweeps}")
    if sweeps is not None and "--bracket" not in given:
        # The cross-check of the latest bracket runs its own ladders (64 temperatures, 32
        # ladders) on that bracket's route: these would be ignored.
        ignored = [option for option in ("--chains", "--betas", "--raise", "--seed",
                                         "--tolerance", "--max-seconds", "--schedule",
                                         "--raise-repeats", "--continue") if option in given]
        if ignored:
            raise ValueError(f"--tempering without --bracket cross-checks the run's latest "
                             f"bracket with ladders of its own and takes no "
                             f"{', '.join(ignored)}: leave them out, or add --bracket to make "
                             "a new bracket and cross-check it")
    if "--bracket" in given:
        rows = given.get("--raise")
        if rows not in (None, 0) and rows < 2:
            raise ValueError(f"--raise {rows}: a bracket's conservative side needs at least "
                             "2 RAISE rows for its standard error (default 300)")
        return
    # A single AIS run has no width to reach and no level to stop between.
    for option, role in (("--schedule", "spaces the temperatures of"),
                         ("--tolerance", "is the width"),
                         ("--max-seconds", "is the time budget of"),
                         ("--raise-repeats", "sets the reverse chains per row of")):
        if option in given:
            aim = "--bracket aims at" if option == "--tolerance" else "--bracket"
            raise ValueError(f"{option} {given[option]} {role} {aim}; add --bracket, or leave "
                             f"{option} out")
    if "--continue" in given:
        raise ValueError("--continue continues a stored bracket: add --bracket")


def _tempering(sweeps) -> dict:
    """The cross-check's settings: 64 temperatures, 32 ladders, ``sweeps`` sweeps (a quarter
    burn-in), and 8 samples of the model replica per ladder for BDMC (fewer when fewer sweeps
    follow the burn-in)."""
    kept = int(sweeps) - int(0.25 * int(sweeps))
    return {"n_temperatures": 64, "n_ladders": 32, "n_sweeps": int(sweeps),
            "n_samples": 32 * max(0, min(8, kept))}


def _latest_bracket(run_dir, which, purpose: str) -> tuple[int, dict]:
    """(index in evaluation.json, record) of the latest bracket of the run's current model, of
    its ``which`` model ("best" or "latest") where it has one; ValueError when it has none.
    To "continue", of the latest model when ``which`` is "latest" (asked for explicitly;
    "best" falls back to the latest model, as evaluation does in a run without a best
    model)."""
    run_dir = runs.require_run(run_dir)
    cache = {}
    records = [(index, record) for index, record in enumerate(runs.read_evaluations(run_dir))
               if "bracket" in record and runs.staleness(run_dir, record, cache) is None]
    hint = " (with --tempering to check it at once)" if purpose == "cross-check" else ""
    if purpose == "continue" and which == "latest":
        records = [pair for pair in records if pair[1].get("which", "latest") == "latest"]
    if not records:
        partial = run_dir / runs.BRACKET_WORK_DIR
        raise ValueError(f"{run_dir} has no bracket of its current model to {purpose}: run "
                         f"irbm evaluate RUN --bracket first{hint}" + (
                             f" ({partial} holds the unfinished first level of one: the "
                             "`irbm evaluate --bracket` command that started it goes on from "
                             "it, unless the model was trained since)"
                             if purpose == "continue" and partial.is_dir() else ""))
    return ([pair for pair in records if pair[1].get("which") == which] or records)[-1]


def _continued_settings(record, **given) -> tuple:
    """(n_chains, raise_rows, raise_repeats, seed, tolerance, base, path, schedule,
    max_seconds) of the stored bracket
    ``record``; ValueError naming the first option ``given`` (not None) that differs."""
    bracket = record["bracket"]
    bases, paths = bracket.get("bases") or [record.get("base", "data")], bracket.get("paths")
    stored = {"n_chains": bracket["n_chains"], "raise_rows": bracket["n_rows"],
              "raise_repeats": bracket.get("raise_repeats", 1),
              "max_seconds": bracket.get("max_seconds"),
              "seed": record.get("seed") or 0, "tolerance": bracket["tolerance"],
              "base": bases[0] if len(bases) == 1 else None,
              "path": paths[0] if paths and len(paths) == 1 else None,
              "schedule": bracket.get("schedule", "tuned-forward")}
    options = {"n_chains": "--chains", "raise_rows": "--raise",
               "raise_repeats": "--raise-repeats", "seed": "--seed",
               "tolerance": "--tolerance", "base": "--base", "path": "--ais-path",
               "schedule": "--schedule"}
    every = {"base": "both bases", "path": "every annealing path"}
    if given.pop("n_betas") is not None:
        raise ValueError("--betas: a continued bracket doubles the temperatures of its last "
                         f"level ({bracket['n_betas']}); leave --betas out")
    for name, value in given.items():
        if value is not None and value != stored[name]:
            was = every[name] if stored[name] is None else stored[name]
            raise ValueError(f"{options[name]} {value}: the stored bracket ran with {was}, and "
                             f"a bracket continues with its own settings; leave "
                             f"{options[name]} out")
    # Each call has a budget of its own: the stored one again unless another is given.
    return (*(stored[name] for name in options), stored["max_seconds"])


def _floor_warning(gap: float, exact: bool = False) -> str:
    return (f"ln Z-hat is at least {gap:.2f} nats too low (below ln sum_v exp(-F(v)) or ln "
            "sum_h exp(-G(h)) over the distinct visible or hidden vectors of Gibbs chains from "
            "the training set, or of descents of G, a certain lower bound)" + (
                "" if exact else ": the NLLs use that floor instead, and like it err on "
                "the optimistic side"))


def independent_pixels_nll(train: np.ndarray, rows: np.ndarray, smoothing: float = 0.05,
                           *, per_row: bool = False):
    """Average NLL of ``rows`` (N, D) under the independent-pixel model of ``train`` (M, D),
    each unit on with the training rows' smoothed rate: the baseline a model must beat (with
    ``per_row``, each row's, (N,))."""
    rate = (np.asarray(train).mean(0, dtype=np.float64) + smoothing) / (1.0 + 2.0 * smoothing)
    rows = np.asarray(rows, dtype=np.float64)
    each = -(rows @ np.log(rate) + (1.0 - rows) @ np.log1p(-rate))
    return each if per_row else float(each.mean())


def _compare_with_independent_pixels(record: dict, model, log_z: float, dataset, say,
                                     visible_init: str) -> None:
    """Record the independent-pixel model's test NLL and say when the model does worse beyond
    two standard errors of the rows' differences (the same rows: paired): it has not learned
    the data's marginals yet (on small data sets, visible biases that start at zero move
    slowly under ADAGRAD)."""
    if "test" not in record["nll"] or dataset.test is None or dataset.train is None:
        return
    baseline = independent_pixels_nll(dataset.train, dataset.test, per_row=True)
    record["independent_pixels_test_nll"] = float(baseline.mean())
    with torch.no_grad():
        own = free_energies(model, torch.as_tensor(dataset.test)).cpu().numpy() + log_z
    difference = own - baseline
    spread = difference.std(ddof=1) / np.sqrt(len(difference)) if len(difference) > 1 else 0.0
    test = record["nll"]["test"]
    if difference.mean() > 2 * spread:
        say(f"  note: its test NLL {test['mean']:.2f} is above the independent-pixel model's "
            f"{baseline.mean():.2f} (each unit on at its training rate): it has not learned the "
            "data's marginals yet; train longer" + (
                "" if visible_init == "data" else ", or start the visible biases at the data "
                "(a new run with --visible-init data)"))


def _split_nlls(model, dataset, log_z: float, say) -> dict:
    """{split: {mean, stderr, n}} of the average NLL of each split at ``log_z``, echoed."""
    nlls = {}
    for split in ("train", "valid", "test"):
        values = getattr(dataset, split)
        if values is not None and len(values):
            mean, stderr = nll(model, torch.as_tensor(values), log_z)
            nlls[split] = {"mean": mean, "stderr": stderr, "n": int(len(values))}
            say(f"  {split:5} NLL = {mean:.3f} +/- {stderr:.3f}  ({len(values)} examples)")
    return nlls


def cross_check_run(run_dir, sweeps: int, *, which=None, data_dir=None, device=None,
                    progress=True, echo=None, path=None, base=None) -> dict:
    """Cross-check the latest bracket of the run's current model (of its ``which`` model,
    "best" or "latest", when such a bracket exists) by parallel tempering
    (`irbm.evaluate.cross_check`, along ``path`` from ``base`` when given, else along the
    bracket's highest AIS run) and append it, re-judged (`irbm.bracket.rejudge`), as a new
    evaluation record (the earlier record stays as it was); returns the new record."""
    say = echo or logger.info
    run_dir, record, dataset, model = _stored_bracket(run_dir, which, "cross-check", data_dir,
                                                      device)
    bracket = record["bracket"]
    # Brackets stored before "bases" was recorded ran one base: the record's AIS base.
    bases = bracket.get("bases") or [record.get("base", "data")]
    say(f"cross-checking the bracket of {run_dir} by parallel tempering ({sweeps} sweeps)")
    check = cross_check(model, torch.as_tensor(dataset.test), bracket["levels"],
                        base_data=torch.as_tensor(dataset.train), bases=bases,
                        tempering=_tempering(sweeps), seed=record.get("seed", 0) or 0,
                        progress=progress, path=path, base=base)
    # The certain floor as a bracket computes it now (brackets stored before the hidden
    # vectors counted summed visible ones only), so the re-judged record holds the best.
    floor = max(bracket.get("log_z_floor", -math.inf), sampled_log_partition_floor(
        model, dataset.train, n_chains=record.get("n_chains") or 500, n_steps=FLOOR_STEPS,
        seed=record.get("seed", 0) or 0))
    judged = rejudge({**bracket, "log_z_floor": floor, "cross_check": check})
    say(f"  tempering ({check['route']}): NLL {check['nll']:.2f} +/- {check['stderr']:.2f}, "
        f"{check['passages']} passages from base to model{describe_bdmc(check)}")
    return _append_rejudged(run_dir, record, judged, floor, model, dataset, say,
                            cross_checked=True)


def floor_run(run_dir, n_chains: int, *, n_descents: int = 0, which=None, data_dir=None,
              device=None, echo=None) -> dict | None:
    """Recompute the certain floor of ln Z (`irbm.floor.sampled_log_partition_floor`) for the
    latest bracket of the run's current model with ``n_chains`` Gibbs chains of FLOOR_STEPS
    steps from the training rows (and the minima of descents from ``n_descents`` random hidden
    vectors), and append the bracket re-judged with it as a new evaluation record (the earlier
    one stays as it was) when it beats the stored floor; returns that record, or None when it
    does not.

    More chains find more of the vectors that hold a model's mass: on the CalTech101 RBM-100
    at 5,000 epochs, 2,000 chains (its bracket's) gave 2535.0, 8,000 2539.4 and 32,000 2540.4,
    where 2,000 chains run four times as long gave 2535.0."""
    say = echo or logger.info
    if isinstance(n_chains, bool) or int(n_chains) != n_chains or n_chains < 1:
        raise ValueError(f"--floor-chains needs a positive number of chains, got {n_chains!r}")
    if isinstance(n_descents, bool) or int(n_descents) != n_descents or n_descents < 0:
        raise ValueError(f"--floor-descents needs a number of starts >= 0, got {n_descents!r}")
    run_dir, record, dataset, model = _stored_bracket(run_dir, which, "re-judge with a floor",
                                                      data_dir, device)
    stored = record["bracket"].get("log_z_floor", -math.inf)
    say(f"the certain floor of ln Z for the bracket of {run_dir}: {int(n_chains)} Gibbs chains "
        f"x {FLOOR_STEPS} steps from the training rows"
        + (f", descents from {int(n_descents)} random hidden vectors" if n_descents else ""))
    floor = sampled_log_partition_floor(model, dataset.train, n_chains=int(n_chains),
                                        n_steps=FLOOR_STEPS, seed=record.get("seed", 0) or 0,
                                        descents=int(n_descents))
    say(f"  floor {floor:.3f}, the bracket's {stored:.3f}")
    if floor <= stored:
        say("  not above the bracket's floor: nothing appended")
        return None
    judged = rejudge({**record["bracket"], "log_z_floor": floor})
    return _append_rejudged(run_dir, record, judged, floor, model, dataset, say,
                            floor_chains=int(n_chains),
                            **({"floor_descents": int(n_descents)} if n_descents else {}))


def _stored_bracket(run_dir, which, purpose: str, data_dir, device) -> tuple:
    """(run directory, its latest bracket's record, its data, the model that bracket is of),
    everything checked before any work: the device, the run, that it can be written to."""
    check_device(device)
    run_dir = runs.require_run(run_dir)
    runs.check_writable(run_dir)
    _, record = _latest_bracket(run_dir, which, purpose)
    dataset = runs.load_run_dataset(run_dir, data_dir)
    model, _ = runs.run_model(run_dir, which=record.get("which", "latest"), device=device)
    return run_dir, record, dataset, model


def _append_rejudged(run_dir, record, judged, floor, model, dataset, say, **marks) -> dict:
    """``record`` with its bracket ``judged`` anew and the floor ``floor``, appended as a new
    evaluation record (with ``marks``); when the floor beats the record's ln Z, its ln Z and
    NLLs become the floor's."""
    say(f"  bracket [{judged['optimistic']:.2f}, {judged['conservative']:.2f}], "
        + ("certified" if judged["certified"] else "NOT certified"))
    for reason in judged["reasons"]:
        say(f"  not certified: {reason}")
    new = {**record, "bracket": judged, **marks,
           "log_z_floor": max(record.get("log_z_floor", -math.inf), floor)}
    if floor > record["log_z"]:  # the record's ln Z, and its NLLs, are the floor's now
        new.update(log_z=floor, log_z_low=floor, log_z_high=math.inf, log_z_source="floor",
                   warnings=[*record.get("warnings", []), _floor_warning(
                       floor - record["log_z"])],
                   nll=_split_nlls(model, dataset, floor, say), nll_log_z=floor)
    runs.append_evaluation(run_dir, new)
    return new


def _bracket_test(model, dataset, *, n_chains, n_betas, base, path, seed, rows, tolerance,
                  max_seconds, say, named="the model", raise_repeats=1, tempering=None,
                  schedule="tuned", resume=None, work_dir=None, progress=False,
                  stop_inside_level=True):
    """`bracket_nll` of the test set, with the run's base data, echoing each level (and each
    AIS and RAISE run's progress bar with ``progress``: a level can take hours)."""
    if dataset.test is None or not len(dataset.test):
        raise ValueError("--bracket brackets the test NLL, and this run's data has no test rows")
    refuse_descents_base((base,))  # before the banner, which says the work has begun
    say(f"bracketing the test NLL of {named} ({n_chains} AIS chains per path, "
        f"{raise_repeats} reverse chain{'s' if raise_repeats != 1 else ''} per RAISE row, "
        f"tolerance {tolerance:g} nat{'s' if tolerance != 1 else ''}"
        + (f", at most {max_seconds:g} s" if max_seconds else "")
        + (f"; continuing {len(resume['levels'])} stored level"
           f"{'s' if len(resume['levels']) != 1 else ''}" if resume else "") + ")")
    interval = bracket_nll(model, torch.as_tensor(dataset.test),
                           base_data=None if base == "model" else torch.as_tensor(dataset.train),
                           rows=rows, raise_repeats=raise_repeats, tolerance=tolerance,
                           max_seconds=max_seconds, seed=seed, n_chains=n_chains,
                           n_betas=n_betas or 1000,
                           paths=None if path is None else (path,),
                           bases=None if base is None else (base,), tempering=tempering,
                           schedule=schedule, pilot_data=torch.as_tensor(dataset.train),
                           resume=resume, echo=say, work_dir=work_dir, keep_work=True,
                           progress=progress, stop_inside_level=stop_inside_level)
    # The spread of the rows, which no number of temperatures narrows (the paper's +/- is
    # about 1.96 times it: a 95% half-width).
    spread = nll(model, torch.as_tensor(dataset.test), interval.log_partition)[1]
    say(f"  test  {interval}; the test rows' own standard error: {spread:.2f} nats")
    for reason in interval.reasons:
        say(f"  not certified: {reason}")
    return interval
