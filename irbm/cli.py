"""The `irbm` command line: train, evaluate, sample, plot, report, sweep, demo.

Every subcommand has ``--help``. Errors print one line (``irbm: error: ...``) and exit with
status 2, without a traceback (set IRBM_DEBUG=1 to see one); a bracket stopped by its time
budget before its first level finished exits with status 3. The options of `irbm train` are
generated from `irbm.settings.Settings`; what each subcommand does is in `irbm.commands`.
"""

from __future__ import annotations

import argparse
import contextvars
import difflib
import os
import re
import sys
import warnings
from pathlib import Path

import torch

from . import __version__, commands
from .bracket import RAISE_REPEATS, SCHEDULES, BracketUnfinished
from .checkpoint import MODEL_FILE, TRAINER_FILE, CheckpointError, read_checkpoint
from .models import FAMILIES
from .settings import GROUPS, SPECS, SettingSpec

_ARGUMENT_TYPES = {int: int, float: float, str: str}
# Counts checked once parsed, before any work or banner: {command: {dest: (option, minimum)}}.
_COUNTS = {"evaluate": {"chains": ("--chains", 1), "betas": ("--betas", 2),
                        "raise_repeats": ("--raise-repeats", 1),
                        "seed": ("--seed", 0)},
           "sample": {"n": ("--n", 1), "steps": ("--steps", 1), "seed": ("--seed", 0)},
           "sweep": {"workers": ("--workers", 1)}}


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose usage errors are one line, ``irbm: error: ...`` (exit 2), with
    the closest valid choice when a value is mistyped and where to find the help. Options are
    never abbreviated: ``irbm train --chains 10`` was taken for --chains-per-update."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.siblings = {}  # the other subcommands' parsers, by name (`build_parser`)

    def error(self, message):
        choice = re.match(r"argument .*: invalid choice: '?([^' ]*)'? \(choose from (.*)\)$",
                          message)
        if choice:
            choices = [c.strip(" '") for c in choice.group(2).split(",")]
            message += _did_you_mean(choice.group(1), choices, "'{}'")
        self.exit(2, f"irbm: error: {message} (`{self.prog} --help` lists the options)\n")

    def unrecognized(self, extras: list[str]):
        """Refuse arguments this (sub)command does not take, suggesting an option for each
        mistyped one (``--n_hidden``: the config key's spelling)."""
        options = [option for action in self._actions for option in action.option_strings]
        elsewhere = {}  # option: the other subcommands that take it
        for name, parser in self.siblings.items():
            for option in {option for action in parser._actions
                           for option in action.option_strings if parser is not self}:
                elsewhere.setdefault(option, []).append(f"`irbm {name}`")
        hints = ""
        for extra in (extra.split("=")[0] for extra in extras if extra.startswith("--")):
            if extra in elsewhere and extra not in options:  # an option of another command
                hints += (f"; {extra} is an option of {', '.join(elsewhere[extra])}, not of "
                          f"`{self.prog}`")
            else:
                hints += _did_you_mean(extra, options, "{}")
        self.error(f"unrecognized arguments: {' '.join(extras)}{hints}")


def _did_you_mean(typed: str, choices: list[str], form: str) -> str:
    spelled = typed.replace("_", "-")
    # Close spellings only: --quiet was offered --quick, an option that changes what runs.
    close = [spelled] if spelled in choices else difflib.get_close_matches(typed, choices, n=1,
                                                                           cutoff=0.75)
    return f"; did you mean {form.format(close[0])}?" if close else ""


def _count_error(args) -> str | None:
    """The first count option below its minimum, as a one-line message; None when all fit."""
    for dest, (option, minimum) in _COUNTS.get(args.command, {}).items():
        value = getattr(args, dest, None)
        if value is not None and value < minimum:
            return f"{option} must be an integer >= {minimum}, got {value}"
    return None


def _positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (refused before any work starts)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def _raise_rows(text: str) -> int:
    """argparse type of --raise's ROWS: an integer >= 1; all test rows is --raise alone, which
    argparse passes as 0 without this check (the Python API's "all rows")."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of test rows, got {text!r}") \
            from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value}; give --raise "
                                         "alone for all test rows, or leave it out for none")
    return value


def _default_text(spec: SettingSpec) -> str:
    """The default as the help shows it; per family for the families' own options."""
    def shown(value):
        return "none" if value is None else str(value)

    if spec.family_option:
        families = {}
        for family, cls in sorted(FAMILIES.items()):
            if spec.name in cls.options():
                families.setdefault(shown(cls.options()[spec.name]), []).append(family)
        return "default: " + ", ".join(f"{value} ({', '.join(names)})"
                                       for value, names in families.items())
    if spec.kind is bool and spec.default is not None:  # None: the profile's, in the help
        return "default: " + ("on" if spec.default else "off")
    return "" if spec.default is None or spec.positional else f"default: {spec.default}"


def add_setting_argument(parser, spec: SettingSpec):
    """One setting as an argument: positional or ``--flag``, typed, with its choices; options
    default to None so that only what the user gave overrides a config file or a run."""
    default = _default_text(spec)
    help_text = spec.help + (f" ({default})" if default else "")
    if spec.positional:
        choices = spec.allowed()
        parser.add_argument(spec.name, metavar=spec.name.upper(), choices=choices,
                            help=help_text + (f": {', '.join(choices)}" if choices else ""))
    elif spec.kind is bool:
        parser.add_argument(spec.flag, dest=spec.name, action=argparse.BooleanOptionalAction,
                            default=None, help=help_text)
    else:
        parser.add_argument(spec.flag, dest=spec.name, type=_ARGUMENT_TYPES[spec.kind],
                            choices=spec.allowed(), default=None, help=help_text)


def _latest_option(parser, verb: str):
    parser.add_argument("--latest", action="store_true",
                        help=f"{verb} the latest model rather than the best (best.safetensors, "
                             "kept by --eval-every; a run without one has only its latest)")


def _system_options(parser, *, data: bool = True, threads: bool = True):
    group = parser.add_argument_group("system options")
    if data:
        group.add_argument("--data-dir", help="directory holding the dataset files, and the "
                           "only place looked in (default: $IRBM_DATA_DIR; with neither, the "
                           "cache, then a download)")
    group.add_argument("--device", default=None, help="torch device, e.g. cpu or cuda")
    if threads:
        add_setting_argument(group, SPECS["threads"])
    return group


def _train_parser(commands_parser):
    train = commands_parser.add_parser(
        "train", help="train a model (resumes an existing run)",
        description="Train an RBM, oRBM or iRBM into a run directory. Defaults are the paper's: "
        "batch 64, PCD-10, ADAGRAD, beta 1.01. A run directory is resumed; changed settings are "
        "refused unless --force, and the model's own settings cannot change.")
    groups = {group: train.add_argument_group(f"{group} settings") for group in GROUPS[:-1]}
    for spec in SPECS.values():
        if spec.group != "system":
            add_setting_argument(groups[spec.group], spec)
    run = train.add_argument_group("run options")
    run.add_argument("--out", required=True, help="run directory: new, empty, or a run to "
                     "resume")
    run.add_argument("--config", help="TOML file of training settings: top-level keys as the "
                     "long options above, with underscores (lr = 0.05), no tables; family and "
                     "dataset stay on the command line, as do --out, --device, --data-dir, "
                     "--force and --quiet; the command line wins")
    run.add_argument("--force", action="store_true", help="resume despite changed settings, "
                     "or write into a non-empty directory that is not a run")
    run.add_argument("--quiet", action="store_true", help="no per-epoch lines")
    _system_options(train)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="irbm", description="Restricted Boltzmann machines whose hidden layer learns its "
        "own size: RBM, ordered RBM and infinite RBM (Cote & Larochelle).")
    parser.add_argument("--version", action="version", version=f"irbm {__version__}")
    commands_parser = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _train_parser(commands_parser)

    evaluate = commands_parser.add_parser(
        "evaluate", help="NLL per split by AIS; --bracket: a certified interval",
        description="Estimate ln Z by annealed importance sampling and the average NLL on "
        "train/valid/test with standard errors; with --bracket, the test NLL as an interval "
        "[optimistic (AIS), conservative (RAISE)], certified when at most --tolerance wide and "
        "converged. A model small enough to enumerate (ln Z a sum of at most 2^20 terms) gets "
        "its exact ln Z, AIS's kept beside it. Appends to evaluation.json in the run.")
    evaluate.add_argument("run", help="run directory")
    # Grouped in --help by what they set: one AIS estimate, a bracket, checks of a bracket.
    ais = evaluate.add_argument_group("AIS and RAISE (alone, or as a bracket's)")
    bracket = evaluate.add_argument_group("a bracket (--bracket)")
    checks = evaluate.add_argument_group("cross-checks of a bracket")
    ais.add_argument("--chains", type=int, default=None, help="AIS chains (default 1000)")
    ais.add_argument("--betas", type=int, default=None, help="number of temperatures "
                     "(default: the authors' schedule of 14,500)")
    ais.add_argument("--base", choices=["model", "data", "descents"], default=None,
                     help="base distribution (default: the family's, the data's base "
                     "rate from the training set; descents: the visible marginals of the "
                     "deepest minima of the hidden free energy, for a model whose mass "
                     "sits in a few deep basins; not for --bracket)")
    paths = sorted({path for cls in FAMILIES.values() for path in cls.ais_paths})
    ais.add_argument("--ais-path", choices=paths, default=None,
                     help="annealing path (default: the family's; the families with z "
                     "pin z while annealing, since the linear path can collapse onto z = 1 "
                     "and miss most of Z)")
    _latest_option(ais, "evaluate")
    ais.add_argument("--seed", type=int, default=None,
                     help="seed of the AIS and RAISE chains (default 0)")
    ais.add_argument("--raise", dest="raise_rows", nargs="?", type=_raise_rows, const=0,
                     default=None, metavar="ROWS",
                     help="also RAISE's conservative test NLL (an upper bound in "
                     "expectation), on the first ROWS test rows (default: all; with "
                     "--bracket: ROWS random test rows, default 300)")
    bracket.add_argument("--raise-repeats", type=int, default=None, metavar="CHAINS",
                         help="with --bracket: reverse chains per RAISE row, averaged in "
                         f"probability (default {RAISE_REPEATS}; with --continue, the stored "
                         "bracket's); one chain's ln p-hat falls below ln p by about half its "
                         "variance, a gap that more chains per row close and each level "
                         "measures")
    bracket.add_argument("--bracket", action="store_true",
                         help="bracket the test NLL between AIS (optimistic) and RAISE "
                         "(conservative) on every annealing path from both bases (or the "
                         "--ais-path and --base given), doubling the temperatures "
                         "from --betas (default 1000) until the bracket is --tolerance wide "
                         "and converged; says whether it is certified and, if not, why. "
                         "Finished chain batches are kept in RUN/bracket_partial until the "
                         "result is stored: after an interruption the same command resumes "
                         "the level there")
    bracket.add_argument("--tolerance", type=_positive_float, default=None,
                         help="width of a certified bracket, nats (default 1.0)")
    bracket.add_argument("--max-seconds", type=_positive_float, default=None,
                         help="time budget of --bracket (default: none): a level starts "
                         "only when the last one's time says it fits; given here, it also "
                         "stops the command's first level between saved chain batches (before "
                         "one predicted to end past it), for the same command to go on (exit "
                         "status 3)")
    bracket.add_argument("--continue", dest="resume", action="store_true",
                         help="with --bracket: continue the latest bracket of the run's "
                         "current model from twice its last level's temperatures, with its "
                         "chains, rows, RAISE repeats, seed, routes and schedule, and its "
                         "--max-seconds unless given (a new record; on the same device the "
                         "bracket an uninterrupted run would have made)")
    bracket.add_argument("--schedule", choices=SCHEDULES, default=None,
                         help="--bracket's temperatures: 'tuned' (equal thermodynamic length "
                         "from pilot runs: a forward one for AIS, a reverse one from training "
                         "rows for RAISE), 'tuned-forward' (RAISE on AIS's, as brackets "
                         "before this option) or 'uniform' (default tuned)")
    checks.add_argument("--tempering", type=int, default=None, metavar="SWEEPS",
                        help="cross-check a bracket by parallel tempering with Bennett's "
                        "acceptance ratio (64 temperatures, 32 ladders, SWEEPS sweeps; 2000 "
                        "suit a trained model): with --bracket the new one, without it the run's "
                        "latest bracket (appended as a new record), along the route of its "
                        "highest AIS run or --ais-path from --base; a point estimate outside "
                        "the bracket withholds certification, and BDMC from 8 of its samples "
                        "per ladder bounds the NLL from above as far as they are draws from "
                        "the model")
    checks.add_argument("--floor-chains", type=int, default=None, metavar="CHAINS",
                        help="recompute the certain floor of ln Z (a sum over the distinct "
                        "visible and hidden vectors that CHAINS Gibbs chains from the training "
                        "rows visit) for the run's latest bracket and, when it is higher than "
                        "the bracket's, append the bracket re-judged with it as a new record; "
                        "more chains than the bracket's AIS chains find more of a model's mass")
    checks.add_argument("--floor-descents", type=int, default=0, metavar="STARTS",
                        help="with --floor-chains, also count the minima of the hidden free "
                        "energy that single-flip descents from STARTS uniform random hidden "
                        "vectors reach, and every single flip of them: they find deep, narrow "
                        "basins chains from the data never enter (1,000 take seconds on a "
                        "100-unit model)")
    evaluate.add_argument("--quiet", action="store_true",
                          help="no progress bars (their redrawn lines fill a log file); the "
                          "level lines and results are still printed")
    _system_options(evaluate)

    sample = commands_parser.add_parser(
        "sample", help="draw samples by Gibbs sampling",
        description="Run Gibbs chains and save samples.npz and figures/samples.png in the run.")
    sample.add_argument("run", help="run directory")
    sample.add_argument("--n", type=int, default=16, help="number of chains (default 16)")
    sample.add_argument("--steps", type=int, default=10000, help="Gibbs steps (default 10000)")
    sample.add_argument("--init", choices=["random", "data"], default="random",
                        help="start the chains from uniform random visible vectors, or from "
                             "--n test rows drawn at random (default random)")
    sample.add_argument("--z-max-init", action="store_true",
                        help="take the first hidden step at z = the model's hidden size "
                             "(every trained unit selected): the paper's start for its oRBM "
                             "samples, whose chains mix slowly over z; its iRBM needed none")
    sample.add_argument("--seed", type=int, default=0, help="seed of the chains (default 0)")
    sample.add_argument("--quiet", action="store_true",
                        help="no progress bar (its redrawn lines fill a log file)")
    _latest_option(sample, "sample")
    _system_options(sample)

    plot = commands_parser.add_parser(
        "plot", help="filters, samples, P(z|v), sizes, AIS convergence",
        description="Draw the run's figures into its figures/ directory, of the run's current "
        "model only: samples of an earlier model give way to short chains of the current one, "
        "and the AIS convergence of an earlier model is not drawn (its old figure is removed).")
    plot.add_argument("run", help="run directory")
    plot.add_argument("--allow-stale", action="store_true",
                      help="draw samples or AIS weights of an earlier model anyway")
    _latest_option(plot, "draw")
    _system_options(plot)

    report = commands_parser.add_parser(
        "report", help="results table (Markdown and HTML)",
        description="Table in the paper's format from evaluated runs, as report.md and a "
        "self-contained report.html. Each run shows its current model's ln Z pooled over its "
        "evaluations (one unbiased estimate of Z, whose log is a stochastic lower bound; the "
        "highest of several is not), the AIS diagnostics of the highest, and its latest bracket.")
    report.add_argument("runs", nargs="+", help="run directories, or sweep directories (their "
                        "evaluated trials)")
    report.add_argument("--out", default=None, help="report directory (default: report/ in "
                        "the current directory); a non-empty directory that is not a report "
                        "is refused")
    report.add_argument("--allow-stale", action="store_true", help="report runs evaluated "
                        "only with an earlier model, marked stale")
    _system_options(report, data=False)

    sweep = commands_parser.add_parser(
        "sweep", help="grid of training runs on Dask (local or a cluster)",
        description="Train and evaluate every point of a grid of settings, one run directory "
        "per trial under --out, on a local Dask cluster (--workers) or an existing one "
        "(--scheduler). Re-running resumes: finished trials are skipped, others continue from "
        "their checkpoints. Writes sweep.md, sweep.html and sweep.csv into --out.")
    sweep.add_argument("sweep", metavar="SWEEP.toml", help="settings of irbm train as fixed "
                       "values, a [grid] table of lists, an optional [evaluation] table "
                       "(chains, betas, seed)")
    sweep.add_argument("--out", required=True, help="sweep directory: new, empty, or a sweep "
                       "to resume")
    where = sweep.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, default=None, help="worker processes of the "
                       "local cluster (default: the free cores; one on a CUDA device)")
    where.add_argument("--scheduler", default=None, metavar="ADDRESS", help="an existing Dask "
                       "scheduler, e.g. tcp://host:8786 (its workers must see --out)")
    sweep.add_argument("--no-progress", dest="progress", action="store_false",
                       help="no progress bar")
    group = _system_options(sweep, threads=False)
    group.add_argument("--threads", type=int, default=1, help="torch threads of each trial "
                       "(default: 1)")

    demo_text = ("train, evaluate and report the three models on the embedded digits (30-60 s "
                 "on 2 cores)")
    demo = commands_parser.add_parser("demo", help=demo_text, description=demo_text[0].upper()
                                      + demo_text[1:] + "; the same command resumes it.")
    demo.add_argument("--out", default="demo-output", help="output directory (default: "
                      "demo-output)")
    demo.add_argument("--quick", action="store_true", help="a much shorter run (for tests)")
    _system_options(demo, data=False)
    parser.command_parsers = commands_parser.choices
    for command in commands_parser.choices.values():
        command.siblings = commands_parser.choices
    return parser


def _checkpoint_epoch(run_dir) -> str:
    """" (epoch N)" of the run's last model checkpoint, or "" where it cannot be read."""
    try:
        _, metadata = read_checkpoint(os.path.join(run_dir, MODEL_FILE))
        return f" (epoch {int(metadata['epoch'])})"
    except (CheckpointError, KeyError, TypeError, ValueError):
        return ""


# What Ctrl-C leaves, per command: each saves its work at its own boundaries.
_INTERRUPTED = {
    "train": "the last checkpoint is intact, and the same command resumes from it",
    "evaluate": "nothing was recorded; AIS chain batches already saved, if any "
                "(ais_partial.npz, bracket_partial/), are kept, and the same command goes on "
                "from them",
    "demo": "finished models are kept, and the same command resumes the interrupted one",
    "sweep": "finished trials are kept, and the same command resumes the others from their "
             "checkpoints",
}


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """A warning as one line in the command's voice, not Python's file, line and source
    (IRBM_DEBUG=1 shows those); one from another library keeps its kind and origin."""
    ours = Path(filename).resolve().is_relative_to(Path(__file__).resolve().parent)
    origin = "" if ours and category is UserWarning else (
        f" ({category.__name__}" + ("" if ours else f", {Path(filename).name}:{lineno}") + ")")
    print(f"irbm: warning: {' '.join(str(message).split())}{origin}",
          file=sys.stderr if file is None else file)


def main(argv=None) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        parser.command_parsers[args.command].unrecognized(extras)
    if (problem := _count_error(args)) is not None:
        print(f"irbm: error: {problem}", file=sys.stderr)
        return 2
    handler = getattr(commands, f"run_{args.command}")
    threads = torch.get_num_threads()
    try:
        # A context of its own: the threads a command holds (`irbm._threads.hold_threads`)
        # end with it, where main is called in-process (tests, a notebook), and so does
        # torch's setting (finally, below).
        with warnings.catch_warnings():
            if not os.environ.get("IRBM_DEBUG"):
                warnings.showwarning = _show_warning
            contextvars.copy_context().run(handler, args)
    except KeyboardInterrupt:
        left = _INTERRUPTED.get(args.command, "nothing was recorded")
        if args.command == "train" and not os.path.exists(os.path.join(args.out, TRAINER_FILE)):
            left = "before the first checkpoint: nothing to resume, the same command starts afresh"
        elif args.command == "train":
            left = left.replace("the last checkpoint is intact",
                                f"the last checkpoint{_checkpoint_epoch(args.out)} is intact")
        print(f"irbm: interrupted; {left}", file=sys.stderr)
        return 130
    except BracketUnfinished as stopped:  # not an error, but not the result asked for either
        print(f"irbm: {stopped}", file=sys.stderr)
        return 3
    except commands.TrialsFailed as failed:  # the sweep ran, but not all of it succeeded
        print(f"irbm: {failed}", file=sys.stderr)
        return 1
    except (ValueError, OSError, KeyError, ImportError) as error:
        if os.environ.get("IRBM_DEBUG"):
            raise
        message = str(error) if not isinstance(error, KeyError) else f"missing {error}"
        print(f"irbm: error: {message}".splitlines()[0], file=sys.stderr)
        return 2
    finally:
        torch.set_num_threads(threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
