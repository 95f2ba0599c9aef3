"""Every setting of a training run, declared once.

`Settings` is the single source of the `irbm train` options (the command line generates its
arguments from the fields), of the keys a TOML config file may hold and their types, of the
defaults, of validation, and of the record a run directory keeps (``config.json``). Each field's
metadata holds its help text, its group (model, training, data, evaluation, system), its choices
or range, and what resuming a run may do with it:

- ``"free"``: may change (``epochs``; system settings such as ``threads`` are not recorded);
- ``"force"``: a change needs ``force=True`` (``--force``);
- ``"fixed"``: the model was built with it; a change needs a new run directory.

The model options (``n_hidden``, ``beta``, ``max_hidden``) default to None, meaning "the
family's own default" (`EnergyModel.options`); giving one the family does not take is an error.
The training rules in `PROFILES` default to None too, meaning "the profile's" (``profile``:
irbm's own rules, or the authors' iRBM code's); a constructed `Settings` holds them resolved,
so `dataclasses.replace` of ``profile`` alone keeps them: build new settings instead.
"""

from __future__ import annotations

import difflib
import math
import numbers
import os
import tomllib
import typing
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path

import torch

from .models import DTYPES as MODEL_DTYPES
from .models import FAMILIES, family_class
from .optim import EPSILON_PLACEMENTS, OPTIMIZERS, REGULARIZATIONS
from .profiles import FORMER_IRBM, GROWTH_SETTINGS, PROFILES, profile_help, profile_values
from .strategies import REGROUPINGS
from .training import GROWTH_RULES, RANDOM_STREAMS, RULES

GROUPS = ("model", "training", "data", "evaluation", "system")
DTYPES = tuple(MODEL_DTYPES)
BINARIZATIONS = ("threshold", "stochastic")
# Largest n_hidden probed at construction (the probe holds n_hidden x 1 values on the CPU).
_LARGEST_PROBE = 2**20


def _setting(help_text, group, default=MISSING, *, choices=None, minimum=None, above=None,
             resume="force", positional=False, family_option=False, path=False):
    """A dataclass field carrying what the command line, config files and validation need.

    ``choices`` may be a callable (read when used: families can register after import);
    ``minimum`` is inclusive, ``above`` exclusive; ``family_option`` marks constructor options
    of the model families; ``path``, a file path, kept absolute (a run resumed from another
    directory, or by the same command, names the same file)."""
    metadata = {"help": help_text, "group": group, "choices": choices, "minimum": minimum,
                "above": above, "resume": resume, "positional": positional,
                "family_option": family_option, "path": path}
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class SettingSpec:
    """One field of `Settings`, with its type unpacked from the annotation.

    Attributes
    ----------
    name : str
        Field name, also the config-file key (``--name-with-dashes`` on the command line).
    kind : type
        int, float, bool or str; ``optional`` when None (unset) is allowed.
    default : object
        ``dataclasses.MISSING`` for the required (positional) ones.
    help, group : str
        Help text; one of `GROUPS`.
    choices : tuple, callable returning one, or None
    minimum, above : float or None
        Inclusive and exclusive lower bounds.
    resume : {"free", "force", "fixed"}
        What resuming a run may do with it (module docstring).
    positional, family_option, path : bool
        A positional argument of `irbm train`; a constructor option of the model families; a
        file path (made absolute).
    """

    name: str
    kind: type
    optional: bool
    default: object
    help: str
    group: str
    choices: object
    minimum: float | None
    above: float | None
    resume: str
    positional: bool
    family_option: bool
    path: bool = False

    @property
    def flag(self) -> str:
        """The command-line option, e.g. ``--n-hidden``."""
        return "--" + self.name.replace("_", "-")

    def allowed(self) -> tuple | None:
        return tuple(self.choices()) if callable(self.choices) else self.choices

    def rule(self) -> str:
        """What a valid value is, in words."""
        if self.allowed() is not None:
            text = "one of " + ", ".join(map(str, self.allowed()))
            if self.name == "family":  # the registry holds what has been imported
                text += " (a family of your own: import the module that registers it first)"
        elif self.kind is bool:
            text = "true or false"
        elif self.kind is int:
            text = "an integer" + (f" >= {self.minimum}" if self.minimum is not None else "")
        elif self.kind is float:
            text = "a finite number" + (f" >= {self.minimum}" if self.minimum is not None else
                                        f" > {self.above}" if self.above is not None else "")
        else:
            text = "a string"
        return text + (" (or unset)" if self.optional else "")

    def check(self, value):
        """``value`` converted to the field's type; ValueError naming the rule otherwise."""
        if value is None and self.optional:
            return None
        if self.kind is bool:
            valid = isinstance(value, bool)
        elif self.kind is int:
            valid = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        elif self.kind is float:
            valid = (isinstance(value, numbers.Real) and not isinstance(value, bool)
                     and math.isfinite(value))
        else:
            valid = isinstance(value, str)
        valid = valid and (self.allowed() is None or value in self.allowed())
        valid = valid and (self.minimum is None or value >= self.minimum)
        valid = valid and (self.above is None or value > self.above)
        if not valid:
            raise ValueError(f"{self.name} must be {self.rule()}, got {value!r}")
        return str(Path(value).expanduser().resolve()) if self.path else self.kind(value)


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything that defines a training run (and the threads it runs on).

    Constructing one validates every value (types, choices, ranges, options the family takes)
    and runs the family's constructor on one visible unit, so an invalid ``beta`` or
    ``max_hidden`` fails here, before any data is read. Use `dataclasses.replace` to change a
    field (the result is validated again).
    """

    # ---------------------------------------------------------------- model
    family: str = _setting("model family", "model", choices=lambda: sorted(FAMILIES),
                           resume="fixed", positional=True)
    n_hidden: int | None = _setting("hidden units (the iRBM's initial number)", "model", None,
                                    minimum=1, resume="fixed", family_option=True)
    beta: float | None = _setting("penalty scale of the ordered families", "model", None,
                                  resume="fixed", family_option=True)
    max_hidden: int | None = _setting("cap on the iRBM's growth", "model", None, minimum=1,
                                      resume="fixed", family_option=True)
    dtype: str = _setting("precision of the parameters", "model", "float32", choices=DTYPES,
                          resume="fixed")
    init_model: str | None = _setting(
        "start from this saved model (irbm.save's file, or a run's model.safetensors: weights "
        "trained elsewhere, say) instead of new parameters; the run takes its family's options "
        "from it and trains in --dtype (the file's own precision and digest are recorded in "
        "config.json; --epochs 0 makes a run of it to evaluate, sample and report; a run "
        "directory gives its best model, else its latest)",
        "model", None, resume="fixed", path=True)
    # ---------------------------------------------------------------- training
    epochs: int = _setting("total epochs (raise it to train a run further)", "training", 100,
                           minimum=0, resume="free")
    batch_size: int = _setting("examples per update", "training", 64, minimum=1)
    lr: float = _setting("learning rate", "training", 0.03, above=0)
    optimizer: str = _setting("update rule", "training", "adagrad", choices=OPTIMIZERS)
    profile: str = _setting(
        "training rules: 'irbm' (this library's) or 'authors' (the authors' public iRBM code: "
        "growth on the chains' z in the last category, a new unit from the chains' gradient, "
        "ADAGRAD's epsilon inside the root, their L1, one zero unit pruned per update, "
        "minibatches in file order); it sets the options that name it, which, given "
        "explicitly, win", "training", "irbm", choices=lambda: tuple(PROFILES))
    epsilon_placement: str | None = _setting(
        "where ADAGRAD's epsilon (1e-6) sits: 'outside' the root, lr/(sqrt(G)+eps), or "
        "'inside' it, lr/sqrt(G+eps) (the authors' code); G sums the squared gradients, this "
        "one included", "training", None, choices=EPSILON_PLACEMENTS)
    l1: float = _setting("L1 factor (where and how: --regularization)", "training", 0.0,
                         minimum=0)
    l2: float = _setting("L2 factor (where and how: --regularization)", "training", 0.0,
                         minimum=0)
    regularization: str | None = _setting(
        "how L1/L2 apply: 'proximal' (l2*theta in the gradient and a soft-threshold, on the "
        "hidden weights and biases), 'weights' (the same on the coupling weights only, biases "
        "free) or 'authors' "
        "(the paper's code: 4*l2*theta on the coupling "
        "weights only; L1 as l1*sign(theta) in their gradient, or a soft-threshold for families "
        "that prune)", "training", None, choices=REGULARIZATIONS)
    shuffle: bool | None = _setting(
        "minibatches in a new random order each epoch; --no-shuffle: in the data's order",
        "training", None)
    chains_per_update: str | None = _setting(
        "persistent chains an update advances: 'all', or as many as the minibatch has rows, "
        "the first ones ('rows', the authors' code: an epoch's last, short minibatch advances "
        "only the first chains)", "training", None, choices=RULES["chains_per_update"])
    last_batch: str = _setting(
        "when --batch-size does not divide the training rows: 'keep' the remainder as a short "
        "last minibatch (CalTech101: 4 rows; the authors' code), or 'merge' it into the one "
        "before (ADAGRAD steps a 4-row minibatch's noisy gradient as far as a full one's)",
        "training", "keep", choices=RULES["last_batch"])
    visible_init: str = _setting(
        "the visible biases at the start: 'zeros' (the paper's and scikit-learn's) or 'data' "
        "(the training rows' smoothed log-odds, Hinton's practical guide, sec. 8.1: the model "
        "starts as the data's factorized model, which on small data sets it otherwise takes "
        "epochs to reach)", "training", "zeros", choices=RULES["visible_init"], resume="fixed")
    average: int = _setting(
        "keep an exponential moving average of the parameters over about this many updates "
        "(0: none) and write it as a run directory of its own, RUN/average/, at every "
        "checkpoint, for evaluation; training never uses it (the iRBM's NLL moves 10-20 "
        "nats between updates at the paper's lr; results/README.md)", "training", 0, minimum=0)
    random_stream: str | None = _setting(
        "the Gibbs sampler's uniforms: 'philox' (counter-based, serves the fused sampling "
        "kernels on CPU and CUDA, the same draws on both; a new CPU run's default) or 'torch' "
        "(torch.Generator, eager sampling; the default on CUDA, and what runs trained before "
        "the kernels used and resume with)",
        "training", None,
        choices=RANDOM_STREAMS)
    cd_k: int = _setting("Gibbs steps per update", "training", 10, minimum=1)
    pcd: bool = _setting("persistent chains (PCD-k); --no-pcd for CD-k", "training", True)
    seed: int = _setting("seed of the initial parameters, the Gibbs chains and the minibatch "
                         "order", "training", 1234, minimum=0)
    random_permutation: bool = _setting(
        "permute the hidden units before each update (Peng et al. 2018; families with z only)",
        "training", False)
    regrouping: str = _setting(
        "which units --random-permutation permutes: 'all' trained units, or 'peng' (Peng et "
        "al.'s code: the first 0.9 l units for 10 epochs, then, after sorting the units by "
        "filter norm once, a number following the chains' recent mean z: 0.9 times it below "
        "100, else it minus 10)", "training", "all",
        choices=REGROUPINGS)
    growth: str | None = _setting(
        "which z a growing model (iRBM) grows on: 'any' z sampled in the update (the paper), "
        "'paired' (Peng et al.'s code: a data row's z and its paired chain's z both past its "
        "units), or 'chains' (the authors' code: z drawn on the negative chains before and "
        "after the Gibbs steps, never the data's), 'data' (only the z drawn on the data "
        "rows), or 'expected' (no sampled z: grow while the minibatch's expected number of "
        "data rows with z past l, sum_n P(z > l | v_n), is at least one)", "training", None,
        choices=GROWTH_RULES)
    growth_trigger: str | None = _setting(
        "which z grows the iRBM: one past its l units ('tail'), or one at l or past it "
        "('last': the authors' P(z|v) has l categories, the last holding z >= l)", "training",
        None, choices=RULES["growth_trigger"])
    new_unit: str | None = _setting(
        "a grown unit's first step: from the update's gradient, on its weights and bias "
        "('update'), or its weights from one step on the chains' gradient (start minus end) "
        "and its bias 0 with an empty accumulator ('chains', the authors' code), or as "
        "'update' with ADAGRAD accumulators at the other units' mean ('peers': steps of its "
        "peers' size, not lr per element)", "training",
        None, choices=RULES["new_unit"])
    pruning: str | None = _setting(
        "with L1, after each update drop 'all' trailing units whose parameters are all zero, "
        "at most 'one' (the authors' code), or 'none' (no shrinking)", "training", None,
        choices=RULES["pruning"])
    # ---------------------------------------------------------------- data
    dataset: str = _setting("mnist (alias binarized_mnist), caltech101 (alias "
                            "caltech101_silhouettes), digits or mnist5k (embedded), or a "
                            ".npy/.npz/.csv file of 0/1 rows", "data", positional=True)
    train_size: int | None = _setting("use only the first N training rows", "data", None,
                                      minimum=1)
    valid_size: int | None = _setting("use only the first N validation rows", "data", None,
                                      minimum=1)
    test_size: int | None = _setting("use only the first N test rows", "data", None, minimum=1)
    binarize: str | None = _setting(
        "binarize a user data file with values in [0, 1]: threshold at 0.5, or the authors' "
        "stochastic binarization (seed 42)", "data", None, choices=BINARIZATIONS)
    data_key: str | None = _setting(
        "the array of a .npz data file that holds several (X of np.savez(file, X=X, y=y)), "
        "split 80/10/10 as a single array is", "data", None)
    split_seed: int | None = _setting(
        "seed of the shuffle that splits a data file's single array 80/10/10 (default 0)",
        "data", None, minimum=0)
    # ---------------------------------------------------------------- evaluation
    eval_every: int = _setting("AIS on the validation set every N epochs, keeping the best "
                               "model (0: never); with --average, the averaged model's too, "
                               "its best kept in RUN/average/", "evaluation", 0, minimum=0)
    eval_chains: int = _setting("AIS chains of --eval-every", "evaluation", 100, minimum=1)
    eval_betas: int = _setting("AIS temperatures of --eval-every", "evaluation", 1000,
                               minimum=2)
    # ---------------------------------------------------------------- system
    threads: int | None = _setting("CPU threads (default: the cores that are not busy)",
                                   "system", None, minimum=1, resume="free")

    def __post_init__(self):
        for spec in SPECS.values():
            # Frozen: normalized values (an int lr becomes a float) are set this way.
            object.__setattr__(self, spec.name, spec.check(getattr(self, spec.name)))
        cls = family_class(self.family)
        refuse_foreign_options(self.family, {spec.name: getattr(self, spec.name)
                                             for spec in SPECS.values()})
        if self.random_permutation and not cls.has_z:
            raise ValueError(f"random_permutation (--random-permutation) needs a family whose "
                             f"hidden units are ordered (with z); {self.family} has none")
        if self.regrouping != "all" and not self.random_permutation:
            raise ValueError(f"regrouping {self.regrouping!r} chooses which units "
                             "random_permutation permutes; turn random_permutation on too "
                             "(--random-permutation)")
        for name, value in profile_values(self.profile, cls, self.optimizer).items():
            if getattr(self, name) is None:  # not given: the profile's
                object.__setattr__(self, name, value)
        if self.epsilon_placement != "outside" and self.optimizer != "adagrad":
            raise ValueError(f"epsilon_placement {self.epsilon_placement!r} is ADAGRAD's; "
                             f"optimizer {self.optimizer!r} has no epsilon: use optimizer "
                             "'adagrad' or leave epsilon_placement 'outside'")
        for name in GROWTH_SETTINGS:
            value = getattr(self, name)
            if not cls.resizable and value != PROFILES["irbm"][name] and \
                    value not in FORMER_IRBM.get(name, ()):
                raise ValueError(f"{name} {getattr(self, name)!r} chooses how a model grows or "
                                 f"shrinks; {self.family} has a fixed number of hidden units")
        self._probe_family()

    def _probe_family(self):
        """Build the family with one visible unit so that its constructor validates its own
        options (e.g. the iRBM's beta > 1) now, before any data is read. (The meta device
        would allocate nothing but costs seconds of torch start-up on first use.)"""
        options = self.model_options()
        if (options.get("n_hidden") or 1) <= _LARGEST_PROBE:  # larger: checked when built
            family_class(self.family)(1, **options, dtype=getattr(torch, self.dtype))

    # ---------------------------------------------------------------- derived values
    def model_options(self) -> dict:
        """The family's constructor options, with the family's defaults for unset ones."""
        options = family_class(self.family).options()
        return {name: (getattr(self, name) if name in SPECS and getattr(self, name) is not None
                       else default) for name, default in options.items()}

    def resolved(self) -> Settings:
        """These settings with the family's defaults written in (what a run records)."""
        return replace(self, **{name: value for name, value in self.model_options().items()
                                if name in SPECS})

    def model_config(self, n_visible: int) -> dict:
        """What `irbm.models.build_model` takes."""
        return {"family": self.family, "n_visible": n_visible, **self.model_options()}

    def training_options(self) -> dict:
        """Keyword arguments of `irbm.Trainer`."""
        return {"cd_k": self.cd_k, "persistent": self.pcd, "batch_size": self.batch_size,
                "optimizer": self.optimizer, "lr": self.lr, "l1": self.l1, "l2": self.l2,
                "regularization": self.regularization, "seed": self.seed,
                "last_batch": self.last_batch, "average": self.average,
                "visible_init": self.visible_init,
                **{name: getattr(self, name) for name in PROFILES["irbm"]},
                **({} if self.random_stream is None else {"random_stream": self.random_stream})}

    def record(self) -> dict:
        """The settings a run directory keeps: every group but "system"."""
        return {name: getattr(self, name) for name, spec in SPECS.items()
                if spec.group != "system"}

    @classmethod
    def from_mapping(cls, values: dict, source: str = "settings") -> Settings:
        """Settings from a dict of field names (a record, a config file plus the command line);
        unknown keys are refused, missing ones take the defaults."""
        unknown = sorted(set(values) - set(SPECS))
        if unknown:
            raise ValueError(f"unknown keys in {source}: {', '.join(unknown)}")
        missing = [name for name, spec in SPECS.items()
                   if spec.default is MISSING and name not in values]
        if missing:
            raise ValueError(f"{source} does not give {', '.join(missing)}")
        return cls(**values)


def _specs() -> dict[str, SettingSpec]:
    hints = typing.get_type_hints(Settings)
    specs = {}
    for item in fields(Settings):
        kinds = [k for k in typing.get_args(hints[item.name]) or (hints[item.name],)
                 if k is not type(None)]
        optional = type(None) in typing.get_args(hints[item.name])
        metadata = dict(item.metadata)
        if item.name in PROFILES["irbm"]:
            metadata["help"] += profile_help(item.name)
        specs[item.name] = SettingSpec(item.name, kinds[0], optional, item.default, **metadata)
    return specs


SPECS: dict[str, SettingSpec] = _specs()
# Keys a config file may hold: every option (the positional family and dataset are not).
CONFIG_KEYS = tuple(name for name, spec in SPECS.items() if not spec.positional)


def applicable(mapping: dict) -> dict:
    """``mapping`` (settings by name) without the model options its family does not take,
    for a sweep whose grid holds several families (a beta given to the RBM's trials too)."""
    if "family" not in mapping:  # left to Settings to refuse
        return dict(mapping)
    options = family_class(mapping["family"]).options()
    return {key: value for key, value in mapping.items()
            if not (key in SPECS and SPECS[key].family_option) or key in options}


def refuse_foreign_options(family: str, mapping: dict):
    """ValueError naming the model options in ``mapping`` (set, not None) that ``family`` does
    not take, and those it does."""
    options = family_class(family).options()
    foreign = [name for name, value in mapping.items() if name in SPECS
               and SPECS[name].family_option and value is not None and name not in options]
    if foreign:
        # Options the command line has no flag for (a family of one's own) are said so.
        named = [_both(name) if name in SPECS else f"{name} (set from Python)"
                 for name in options]
        raise ValueError(f"{family} does not take {', '.join(map(_both, foreign))}; "
                         f"the options of {family} are {', '.join(named) or 'none'}")


def check_setting(name: str, value):
    """One setting's value, checked and converted (e.g. ``--threads`` of any subcommand)."""
    return SPECS[name].check(value)


# Other libraries' names of settings (scikit-learn's BernoulliRBM, PyTorch's optimizers).
_SYNONYMS = {"learning_rate": "lr", "n_components": "n_hidden", "n_iter": "epochs",
             "random_state": "seed", "weight_decay": "l2", "k": "cd_k",
             "persistent": "pcd", "hidden": "n_hidden", "n_epochs": "epochs"}


def closest_key(typed: str, known=None) -> str:
    """"; did you mean n_hidden?" for n-hidden, n_hiden or n_components; "" when nothing is
    close. ``known``: the keys to choose from (default: a config file's)."""
    known = CONFIG_KEYS if known is None else list(known)
    spelled = typed.replace("-", "_")
    close = [spelled] if spelled in known else [_SYNONYMS[spelled]] \
        if _SYNONYMS.get(spelled) in known else difflib.get_close_matches(spelled, known, n=1)
    return f"; did you mean {close[0]} for {typed}?" if close else ""


def _both(name: str) -> str:
    """A setting as a config key and as its option: "max_hidden (--max-hidden)"."""
    return f"{name} (--{name.replace('_', '-')})"


def read_config_file(path) -> dict:
    """The values of a TOML config file (keys as the long options, with underscores), each
    checked against its setting; ValueError naming the file otherwise."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"--config {path} is a directory; give a TOML file (a run's settings "
                         "are its config.json: `irbm train` on the same --out resumes them)")
    if not path.is_file():
        raise FileNotFoundError(f"config file not found: {path}")
    with open(path, "rb") as stream:
        try:
            values = tomllib.load(stream)
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"config file {path} is not valid TOML: {error}") from None
    tables = [key for key, value in values.items() if isinstance(value, dict)]
    if "grid" in tables:
        raise ValueError(f"{path} is a sweep file ([grid]): run it with `irbm sweep {path} "
                         "--out DIR`; a --config file holds single values at its top")
    if tables:
        raise ValueError(f"[{tables[0]}] in {path} is a table; a config file's keys stand at "
                         "its top, without [sections] (lr = 0.05, not under [training]): move "
                         f"{', '.join(values[tables[0]]) or 'its keys'} out of it")
    unknown = sorted(set(values) - set(CONFIG_KEYS))
    positional = [key for key in unknown if key in SPECS and SPECS[key].positional]
    if positional:
        raise ValueError(f"{', '.join(positional)} in {path}: the family and the dataset are "
                         "the command's own arguments (`irbm train FAMILY DATASET --config "
                         "FILE`); leave them out of the file (a sweep's TOML takes them)")
    if unknown:
        hints = "".join(closest_key(key) for key in unknown)
        raise ValueError(f"unknown keys in {path}: {', '.join(unknown)}{hints} (known: "
                         f"{', '.join(CONFIG_KEYS)})")
    try:
        return {key: check_setting(key, value) for key, value in values.items()}
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def check_model_size(n_hidden: int, n_visible: int, dtype: str = "float32", device=None):
    """ValueError when the (n_hidden, n_visible) weight matrix alone exceeds the memory of the
    device (the host's physical memory for the CPU), before anything is allocated."""
    needed = int(n_hidden) * int(n_visible) * getattr(torch, dtype).itemsize
    available, where = _memory(device)
    if needed > available:
        raise ValueError(f"n_hidden {n_hidden:,} x n_visible {n_visible:,} {dtype} weights need "
                         f"{needed / 2**30:,.1f} GiB, more than the {available / 2**30:,.1f} GiB "
                         f"of {where}: lower --n-hidden")


def check_memory(needed: float, device, what: str, fix: str):
    """ValueError when ``needed`` bytes (for ``what``) exceed the memory of ``device``, before
    anything is allocated: torch's allocator fails with a traceback, and after work."""
    available, where = _memory(device)
    if needed > available:
        raise ValueError(f"{what} need {needed / 2**30:,.1f} GiB, more than the "
                         f"{available / 2**30:,.1f} GiB of {where}: {fix}")


def _memory(device) -> tuple[float, str]:
    device = torch.device(device or "cpu")
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory, f"memory on {device}"
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "memory on this machine"
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows): do not guess
        return math.inf, "memory"
