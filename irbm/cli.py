"""The `irbm` command line: train, evaluate, sample, plot, report, demo.

Every subcommand has ``--help``. Errors print one line (``irbm: error: ...``) and exit with
status 2, without a traceback (set IRBM_DEBUG=1 to see one).
"""

from __future__ import annotations

import argparse
import os
import sys
import tomllib
from pathlib import Path

# Defaults of `irbm train` (the paper's settings). Options left unset on the command line take
# these, or on resume the values recorded in the run.
TRAIN_DEFAULTS = {
    "n_hidden": None, "beta": 1.01, "max_hidden": None, "epochs": 100, "batch_size": 64,
    "lr": 0.03, "optimizer": "adagrad", "l1": 0.0, "l2": 0.0, "cd_k": 10, "pcd": True,
    "eval_every": 0, "eval_chains": 100, "eval_betas": 1000, "seed": 1234, "dtype": "float32",
    "train_size": None, "valid_size": None, "test_size": None, "binarize": None,
}
# What a config file may hold for each key (TOML values are typed; these are checked).
_CONFIG_TYPES = {**{key: int for key in TRAIN_DEFAULTS}, "beta": float, "lr": float, "l1": float,
                 "l2": float, "pcd": bool, "optimizer": str, "dtype": str, "binarize": str}
_CONFIG_CHOICES = {"optimizer": ("adagrad", "sgd"), "dtype": ("float32", "float64"),
                   "binarize": ("threshold", "stochastic")}
MODEL_KEYS = ("n_hidden", "beta", "max_hidden", "dtype")
TRAINING_KEYS = ("batch_size", "lr", "optimizer", "l1", "l2", "cd_k", "pcd", "seed")
DATA_KEYS = ("train_size", "valid_size", "test_size")


def _add_data_options(parser):
    parser.add_argument("--data-dir", help="directory holding the dataset files "
                        "(default: $IRBM_DATA_DIR, ../shared/data, the cache, then download)")
    parser.add_argument("--device", default=None, help="torch device, e.g. cpu or cuda")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="irbm", description="Restricted Boltzmann machines whose hidden layer learns its "
        "own size: RBM, ordered RBM and infinite RBM (Cote & Larochelle).")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = commands.add_parser("train", help="train a model (resumes an existing run)",
                                description="Train an RBM, oRBM or iRBM. Defaults are the "
                                "paper's: batch 64, PCD-10, ADAGRAD, beta 1.01. An existing run "
                                "directory is resumed; differing hyper-parameters are refused "
                                "unless --force.")
    train.add_argument("family", choices=["rbm", "orbm", "irbm"])
    train.add_argument("dataset", help="mnist, caltech101, digits (embedded), or a .npy/.npz/"
                       ".csv file of 0/1 rows")
    train.add_argument("--out", required=True, help="run directory")
    train.add_argument("--config", help="TOML file of option values (keys as the long options, "
                       "with underscores)")
    train.add_argument("--n-hidden", type=int, help="hidden units (RBM/oRBM: default 500; "
                       "iRBM: initial size, default 1)")
    train.add_argument("--beta", type=float, help="penalty scale (default 1.01)")
    train.add_argument("--max-hidden", type=int, help="iRBM growth cap")
    train.add_argument("--epochs", type=int, help="total epochs (default 100)")
    train.add_argument("--batch-size", type=int, help="default 64")
    train.add_argument("--lr", type=float, help="learning rate (default 0.03)")
    train.add_argument("--optimizer", choices=["adagrad", "sgd"])
    train.add_argument("--l1", type=float, help="L1 factor on W and b (default 0)")
    train.add_argument("--l2", type=float, help="L2 factor on W and b (default 0)")
    train.add_argument("--cd-k", type=int, help="Gibbs steps per update (default 10)")
    train.add_argument("--pcd", action=argparse.BooleanOptionalAction,
                       help="persistent chains (default) or --no-pcd for CD-k")
    train.add_argument("--eval-every", type=int, help="AIS on the validation set every N "
                       "epochs, keeping the best model (default 0: off)")
    train.add_argument("--eval-chains", type=int, help="AIS chains for --eval-every")
    train.add_argument("--eval-betas", type=int, help="AIS temperatures for --eval-every")
    train.add_argument("--seed", type=int)
    train.add_argument("--dtype", choices=["float32", "float64"])
    train.add_argument("--train-size", type=int, help="use only the first N training rows")
    train.add_argument("--valid-size", type=int)
    train.add_argument("--test-size", type=int)
    train.add_argument("--binarize", choices=["threshold", "stochastic"],
                       help="binarize a user data file with values in [0, 1] (threshold at 0.5, "
                       "or the authors' stochastic binarization, seed 42)")
    train.add_argument("--force", action="store_true", help="resume despite changed settings")
    train.add_argument("--quiet", action="store_true", help="no per-epoch lines")
    _add_data_options(train)

    evaluate = commands.add_parser("evaluate", help="AIS estimate of log Z and NLL per split",
                                   description="Estimate ln Z by annealed importance sampling "
                                   "and the average NLL on train/valid/test with standard "
                                   "errors; writes evaluation.json in the run directory.")
    evaluate.add_argument("run", help="run directory")
    evaluate.add_argument("--chains", type=int, default=1000, help="AIS chains (default 1000)")
    evaluate.add_argument("--betas", type=int, default=None, help="number of temperatures "
                          "(default: the authors' schedule of 14,500)")
    evaluate.add_argument("--base", choices=["model", "data"], default="model",
                          help="base distribution (default: the model's visible biases)")
    evaluate.add_argument("--latest", action="store_true", help="evaluate the latest model "
                          "rather than the best")
    evaluate.add_argument("--seed", type=int, default=0)
    _add_data_options(evaluate)

    sample = commands.add_parser("sample", help="draw samples by Gibbs sampling",
                                 description="Run Gibbs chains and save samples.npz and "
                                 "figures/samples.png in the run directory.")
    sample.add_argument("run")
    sample.add_argument("--n", type=int, default=16, help="number of chains (default 16)")
    sample.add_argument("--steps", type=int, default=10000, help="Gibbs steps (default 10000)")
    sample.add_argument("--init", choices=["random", "data"], default="random")
    sample.add_argument("--z-max-init", action="store_true", help="start at z = K (oRBM)")
    sample.add_argument("--seed", type=int, default=0)
    _add_data_options(sample)

    plot = commands.add_parser("plot", help="filters, samples, P(z|v), sizes, AIS convergence")
    plot.add_argument("run")
    _add_data_options(plot)

    report = commands.add_parser("report", help="results table (Markdown and HTML)",
                                 description="Table in the paper's format from evaluated runs, "
                                 "as report.md and a self-contained report.html.")
    report.add_argument("runs", nargs="+")
    report.add_argument("--out", default=None, help="output directory (default: the runs' "
                        "common parent)")

    demo = commands.add_parser("demo", help="train, evaluate and report the three models on "
                               "the embedded digits (a few minutes)")
    demo.add_argument("--out", default="demo-output", help="output directory")
    demo.add_argument("--quick", action="store_true", help="a much shorter run (for tests)")
    _add_data_options(demo)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from . import commands
    handler = getattr(commands, f"run_{args.command}")
    try:
        commands.check_device(getattr(args, "device", None))
        handler(args)
    except KeyboardInterrupt:
        print("irbm: interrupted; the last checkpoint is intact", file=sys.stderr)
        return 130
    except (ValueError, OSError, KeyError, ImportError, tomllib.TOMLDecodeError) as error:
        if os.environ.get("IRBM_DEBUG"):
            raise
        message = str(error) if not isinstance(error, KeyError) else f"missing {error}"
        print(f"irbm: error: {message}".splitlines()[0], file=sys.stderr)
        return 2
    return 0


def read_config_file(path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file not found: {path}")
    with open(path, "rb") as stream:
        try:
            values = tomllib.load(stream)
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"config file {path} is not valid TOML: {error}") from None
    unknown = set(values) - set(TRAIN_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown keys in {path}: {', '.join(sorted(unknown))}")
    for key, value in values.items():
        expected = _CONFIG_TYPES[key]
        ok = (isinstance(value, (int, float)) if expected is float else isinstance(value, expected))
        if not ok or (isinstance(value, bool) and expected is not bool):
            raise ValueError(f"{path}: {key} must be {expected.__name__}, got {value!r}")
        if value not in _CONFIG_CHOICES.get(key, (value,)):
            raise ValueError(f"{path}: {key} must be one of {_CONFIG_CHOICES[key]}, "
                             f"got {value!r}")
        values[key] = float(value) if expected is float else value
    return values


if __name__ == "__main__":
    sys.exit(main())
