"""What each `irbm` subcommand does with its parsed arguments: combine the settings, set the
threads (a given --threads held for the command: the library's calls inside it keep it), call
`irbm.workflows` and print the outcome. `cli.py` parses; this module never imports it."""

from __future__ import annotations

import time
from pathlib import Path

from . import runs, workflows
from ._threads import hold_threads
from .settings import SPECS, check_setting, read_config_file


def _start(args):
    """Before any work: the run directory is one (a sweep's is refused naming this command on
    a trial), the device must exist, the threads are set."""
    if args.command in ("evaluate", "sample", "plot"):
        runs.require_run(args.run, command=f"irbm {args.command}")
    workflows.check_device(getattr(args, "device", None))
    hold_threads(check_setting("threads", args.threads))


def run_train(args):
    given = read_config_file(args.config) if args.config else {}
    given.update({name: value for name in SPECS
                  if (value := getattr(args, name, None)) is not None})
    workflows.check_device(args.device)
    settings = workflows.settings_for(args.out, given)
    hold_threads(settings.threads)
    return workflows.train_run(settings, args.out, data_dir=args.data_dir, device=args.device,
                               force=args.force, echo=print, epoch_lines=not args.quiet)


def run_evaluate(args):
    _start(args)
    run_dir = Path(args.run)
    record = workflows.evaluate_run(run_dir, n_chains=args.chains, n_betas=args.betas,
                                    base=args.base, path=args.ais_path, seed=args.seed,
                                    which="latest" if args.latest else "best",
                                    raise_rows=args.raise_rows,
                                    raise_repeats=args.raise_repeats, bracket=args.bracket,
                                    tolerance=args.tolerance, max_seconds=args.max_seconds,
                                    tempering_sweeps=args.tempering, schedule=args.schedule,
                                    resume=args.resume, floor_chains=args.floor_chains,
                                    floor_descents=args.floor_descents,
                                    data_dir=args.data_dir, device=args.device, echo=print,
                                    progress=not args.quiet)
    if record is None:  # --floor-chains found no higher floor
        return None
    log_z, source = record.get("nll_log_z", record["log_z"]), record.get("log_z_source")
    if source == "exact":
        summary = f"ln Z = {log_z:.3f}  (exact)"
    elif source == "floor" or (log_z != record["log_z"] and log_z == record.get("log_z_floor")):
        estimate = ("the bracket's AIS runs pooled lie" if "bracket" in record else
                    "AIS's estimate lies")  # a single run of a bracket may lie above it
        summary = f"ln Z >= {log_z:.3f}  (the certain floor, which {estimate} below)"
    else:
        # A bracket's ln Z pools its runs; the warnings above were its highest run's alone.
        pooled = "the bracket's AIS runs pooled: " if source == "pooled" else ""
        summary = (f"ln Z = {log_z:.3f}  ({pooled}ln of Z-hat -/+ 3 sigma: "
                   f"[{record['log_z_low']:.3f}, {record['log_z_high']:.3f}])")
    print(f"  {summary}  -> {run_dir / runs.EVALUATION_FILE}")
    return record


def run_sample(args):
    _start(args)
    start = time.perf_counter()
    samples, picture = workflows.sample_run(
        args.run, n_samples=args.n, n_steps=args.steps, init=args.init,
        z_max_init=args.z_max_init, seed=args.seed, data_dir=args.data_dir, device=args.device,
        which="latest" if args.latest else "best", echo=print, progress=not args.quiet)
    print(f"{args.n} samples in {time.perf_counter() - start:.1f}s -> {samples}, {picture}")


def run_plot(args):
    _start(args)
    for path in workflows.plot_run(args.run, data_dir=args.data_dir, device=args.device,
                                   allow_stale=args.allow_stale, echo=print,
                                   which="latest" if args.latest else "best"):
        print(path)


def run_report(args):
    _start(args)
    markdown, html = workflows.report_runs(args.runs, args.out, allow_stale=args.allow_stale)
    print(f"report: {markdown} and {html}")


def run_sweep(args):
    from .sweep import run_sweep
    workflows.check_device(args.device)
    result = run_sweep(args.sweep, args.out, workers=args.workers, scheduler=args.scheduler,
                       data_dir=args.data_dir, threads=check_setting("threads", args.threads),
                       device=args.device, progress=args.progress, echo=print)
    if result["failed"]:
        raise TrialsFailed(f"{len(result['failed'])} of {result['done'] + len(result['failed'])}"
                           f" trials run failed: {', '.join(result['failed'])} (see error.txt in "
                           "each; the others are tabled, and rerunning the sweep retries these)")
    return result


class TrialsFailed(RuntimeError):
    """Some trials of a sweep failed (the command exits with status 1, its table written)."""


def run_demo(args):
    from .demo import demo
    _start(args)
    demo(Path(args.out), quick=args.quick, device=args.device, echo=print)
