"""The interface every model family implements, and what all families share.

A family is an energy model over binary vectors v of shape (N, n_visible) with a layer of hidden
units. It declares its parameters (`parameter_specs`: which ones are per hidden unit, which take
weight decay), its free energy, its conditionals, one Gibbs step, its exact log-partition on tiny
models, its gradients, and its annealing path for AIS. The trainer, optimizer, checkpoints, AIS,
evaluation, sampling and plots use only this interface, so a new family is one file that
subclasses `EnergyModel` (or a built-in family) and registers itself with `register_family`.
"""

from __future__ import annotations

import abc
import contextlib
import copy
import inspect
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from ..kernels import PhiloxGenerator

# Largest number of terms `log_partition_exact` agrees to sum.
MAX_EXACT_TERMS = 2**24



DTYPES = {"float32": torch.float32, "float64": torch.float64}  # the CLI's and the estimators'


def check_device(device):
    """Refuse a device torch does not know or cannot use here (e.g. cuda without a GPU), as a
    ValueError naming it, before any tensor is made there."""
    if device is None:
        return
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        if message.startswith("Expected one of"):  # torch's list of twenty device types
            message = "not a device name"
        usable = "cpu" + (", cuda" if torch.cuda.is_available() else "")
        raise ValueError(f"device {device!r} is not usable here: {message} (usable: "
                         f"{usable})") from None


def check_dtype(dtype) -> torch.dtype:
    """``dtype`` as a torch floating-point dtype, from the dtype or its name ("float64"), else
    ValueError. float32 and float64 are what the families are tested in throughout; float16
    and bfloat16 models sample and save, but their sums lose digits."""
    name = dtype
    if dtype is float or isinstance(dtype, type) and issubclass(dtype, np.generic) or \
            isinstance(dtype, np.dtype) or isinstance(dtype, str) and not hasattr(torch, dtype):
        try:  # np.float64, float, "f8": as scikit-learn's side takes them
            name = np.dtype(dtype).name
        except TypeError:
            pass
    chosen = getattr(torch, name, None) if isinstance(name, str) else name
    if not isinstance(chosen, torch.dtype) or not chosen.is_floating_point:
        raise ValueError(f"dtype must be a torch floating-point dtype or its name, e.g. "
                         f"torch.float32 or 'float64', got {dtype!r}")
    return chosen

def require_full_precision(dtype: torch.dtype, what: str, source: str = "this model") -> None:
    """ValueError unless ``dtype`` is float32 or float64: the estimators of ln Z sum thousands
    of terms (float16 and bfloat16 models train, store and sample, but AIS and RAISE on them
    failed deep inside numpy's generator or torch's conversions). ``source`` names where the
    dtype came from ("this model", "dtype=")."""
    if dtype not in DTYPES.values():
        raise ValueError(f"{what} runs in float32 or float64, and {source} is {dtype}: "
                         + ("convert the model first, e.g. model.to(torch.float32), or pass "
                            "dtype=torch.float32" if source == "this model" else
                            "ask for torch.float32 or torch.float64"))


def require_finite_parameters(model, what: str) -> None:
    """ValueError naming the parameters of ``model`` that hold NaN or infinite values, which
    ``what`` cannot use (AIS returned ln Z = nan, brackets failed on "betas contains NaN",
    samples looked normal)."""
    bad = [name for name, parameter in model.named_parameters()
           if not bool(torch.isfinite(parameter).all())]
    if bad:
        raise ValueError(f"{what} needs finite parameters, and this model's {', '.join(bad)} "
                         "hold NaN or infinite values (a diverged training: load an earlier "
                         "checkpoint, or train again with a smaller learning rate)")


@dataclass(frozen=True)
class ParameterSpec:
    """How the trainer treats one parameter.

    Attributes
    ----------
    per_unit : bool
        Dimension 0 indexes hidden units: the parameter is resized and permuted with them.
    decay : bool
        L1 and L2 regularization apply to it (irbm's convention).
    coupling : bool
        It couples visible and hidden units (W): the only parameter the authors' code
        regularizes, apart from the iRBM's proximal L1 (see `EnergyModel.authors_l1`).
    """

    per_unit: bool
    decay: bool
    coupling: bool = False


@dataclass
class HiddenState:
    """A sample of the hidden layer.

    Attributes
    ----------
    h : Tensor (N, n_hidden)
        Binary hidden units; for the ordered models units beyond z are 0.
    z : LongTensor (N,) or None
        Number of selected units (1-based), None for families without z. For the iRBM,
        ``z == n_hidden + 1`` means "beyond the trained units": z fell in the geometric tail.
    """

    h: torch.Tensor
    z: torch.Tensor | None = None


class Gradients(dict):
    """Gradients by parameter name, as `EnergyModel.weighted_gradients` returns them.

    Attributes
    ----------
    appended : dict of str to Tensor, or None
        For families where appending a zero hidden unit leaves the distribution unchanged (the
        iRBM), the per-unit parameters' gradient rows, shape (1, ...), that such a unit would
        get: `EnergyModel.relayout_gradients` adds them after growth without another pass.
    """

    appended: dict | None = None


class EnergyModel(nn.Module, abc.ABC):
    """Abstract base of every family: P(v) = exp(-F(v)) / Z over v in {0, 1}^n_visible.

    Class attributes a family sets
    ------------------------------
    family : str
        Registry name (``irbm train FAMILY``).
    display_name : str
        Name in tables and figure titles.
    parameter_specs : dict of str to ParameterSpec
        Every parameter, in the order the optimizer visits them.
    has_z : bool
        Hidden states carry the number z of selected units (`log_p_z_given_v` exists).
    has_tail : bool
        `log_p_z_given_v` has a last column for the units beyond ``n_hidden`` (infinite models).
    resizable : bool
        The hidden layer may change size (growth, pruning, loading a state of another size).
    default_ais_base : str
        Base distribution AIS uses when none is given ("data" or "model").
    ais_paths : tuple of str
        The annealing paths `annealing_path` offers, its default first.
    authors_l1 : str
        How the authors' code applies L1 to this family (``regularization="authors"``):
        "subgradient" (lambda sign(theta) added to the gradient of the coupling parameters) or
        "proximal" (a soft-threshold of the decayed parameters after the step).

    Public methods validate their inputs while ``validate_args`` is true; inner loops that
    have validated their data once run inside `trusted_inputs` to skip the per-call checks.
    """

    family: ClassVar[str]
    display_name: ClassVar[str]
    parameter_specs: ClassVar[dict[str, ParameterSpec]]
    has_z: ClassVar[bool] = False
    has_tail: ClassVar[bool] = False
    resizable: ClassVar[bool] = False
    default_ais_base: ClassVar[str] = "data"
    ais_paths: ClassVar[tuple[str, ...]] = ("linear",)
    authors_l1: ClassVar[str] = "subgradient"
    validate_args: bool = True

    # ------------------------------------------------------------------ description
    @property
    @abc.abstractmethod
    def n_visible(self) -> int:
        """Number of visible units."""

    @property
    @abc.abstractmethod
    def n_hidden(self) -> int:
        """Number of (trained) hidden units."""

    @abc.abstractmethod
    def config(self) -> dict:
        """``{"family": name, **constructor keyword arguments}`` rebuilding this model at its
        current size (`irbm.build_model` takes it)."""

    def extra_repr(self) -> str:
        """What ``print(model)`` shows inside the family's name: `config` (its size now), the
        dtype and the device."""
        shown = [f"{name}={value:.6g}" if isinstance(value, float) else f"{name}={value}"
                 for name, value in self.config().items() if name != "family"]
        dtype = str(self.dtype).removeprefix("torch.")
        return ", ".join([*shown, f"dtype={dtype}", f"device={self.device}"])

    @classmethod
    def options(cls) -> dict:
        """Constructor options beyond ``n_visible`` with their defaults, from the signature.
        Checkpoints record them all; the CLI and the settings pass on those they have options
        for (``n_hidden``, ``beta``, ``max_hidden``): another option of a family of your own
        keeps its default there, and is set from Python."""
        skip = {"self", "n_visible", "dtype", "device", "generator"}
        return {name: (None if p.default is inspect.Parameter.empty else p.default)
                for name, p in inspect.signature(cls.__init__).parameters.items()
                if name not in skip and p.kind is not inspect.Parameter.VAR_KEYWORD}

    @property
    def dtype(self) -> torch.dtype:
        return self._first_parameter().dtype

    @property
    def device(self) -> torch.device:
        return self._first_parameter().device

    def _first_parameter(self) -> torch.Tensor:
        # Read a few dozen times per update: a family's own parameters first, without
        # nn.Module's generator over submodules (about 3 us a call, 2% of a 100-unit update).
        for parameter in self._parameters.values():
            if parameter is not None:
                return parameter
        return next(self.parameters())

    @abc.abstractmethod
    def reset_parameters(self, generator: torch.Generator | None = None) -> EnergyModel:
        """Draw the family's initial parameters from ``generator`` (default: seed 0)."""

    @abc.abstractmethod
    def filters(self) -> torch.Tensor:
        """What each hidden unit responds to, shape (n_hidden, n_visible) (detached)."""

    # ------------------------------------------------------------------ maths to implement
    @abc.abstractmethod
    def _free_energy(self, v: torch.Tensor) -> torch.Tensor:
        """F(v) = -log sum_h exp(-E(v, h)), shape (N,), for v (N, n_visible) already checked."""

    @abc.abstractmethod
    def _sample_hidden(self, v: torch.Tensor, generator, z=None) -> HiddenState:
        """(h, z) ~ P(h, z | v) for checked v (N, n_visible); ``z`` (N,) fixes z if given."""

    @abc.abstractmethod
    def _mean_visibles(self, h: torch.Tensor) -> torch.Tensor:
        """P(v_j = 1 | h), shape (N, n_visible), for h (N, n_hidden)."""

    @abc.abstractmethod
    def _mean_hiddens(self, v: torch.Tensor) -> torch.Tensor:
        """E[h_i | v], shape (N, n_hidden), for checked v (N, n_visible)."""

    @abc.abstractmethod
    def weighted_gradients(self, v: torch.Tensor, row_weights: torch.Tensor,
                           generator: torch.Generator | None = None):
        """sum_n row_weights[n] dF(v_n)/dtheta for v (N, n_visible), row_weights (N,).

        The trainer stacks positive and negative examples with weights +1/N and -1/S, so one
        pass gives the whole gradient. Families with z also return z_n ~ P(z | v_n) drawn in the
        same pass when a generator is given (the iRBM's growth uses it).

        Returns
        -------
        gradients : dict of str to Tensor, one per entry of `parameter_specs`, same shapes.
        z : LongTensor (N,) or None
        """

    @abc.abstractmethod
    def annealing_path(self, base_visible_bias: torch.Tensor, *, kind: str | None = None):
        """The AIS path from a factorized base (visible biases ``base_visible_bias``
        (n_visible,)) to this model; an `irbm.models.AnnealingPath`. ``kind`` is one of
        ``ais_paths`` (default: the first)."""

    def check_ais_path(self, kind: str | None) -> str:
        """``kind`` validated against ``ais_paths`` (None: the family's default)."""
        if kind is None:
            return self.ais_paths[0]
        if kind not in self.ais_paths:
            raise ValueError(f"unknown AIS path {kind!r} for the {self.display_name}: choose one "
                             f"of {', '.join(self.ais_paths)}")
        return kind

    def initialize_visible_bias(self, data, *, binary: bool = True) -> None:
        """Visible biases <- `base_visible_bias` (``data`` (N, n_visible), 0/1, or values in
        [0, 1] with ``binary`` False): the smoothed log-odds of each unit being on, the
        factorized model of the data, as a start (Hinton's practical guide, section 8.1)."""
        raise NotImplementedError(f"the {self.display_name} has no visible biases to start "
                                  "from the data")

    @abc.abstractmethod
    def base_visible_bias(self, data=None, *, binary: bool = True) -> torch.Tensor:
        """Visible biases (n_visible,) of the AIS base: the data's smoothed log-odds when
        ``data`` (N, n_visible; 0/1, or values in [0, 1] with ``binary`` False) is given, else
        the model's own visible biases."""

    @abc.abstractmethod
    def _n_hidden_terms(self) -> int:
        """Number of terms of the enumeration in `_log_partition_by_hidden`."""

    @abc.abstractmethod
    def _hidden_free_energy(self, h: torch.Tensor) -> torch.Tensor:
        """G(h) = -log sum_v sum_z exp(-E(v, h, z)), shape (M,), for checked h (M, n_hidden)."""

    def _log_partition_by_hidden(self) -> torch.Tensor:
        """log Z = logsumexp_h -G(h) over every hidden configuration (float64 models)."""
        partials = [torch.logsumexp(-self._hidden_free_energy(h), 0)
                    for h in binary_configurations(self.n_hidden, self.dtype, self.device)]
        return torch.logsumexp(torch.stack(partials), 0)

    # ------------------------------------------------------------------ hidden layout
    def growth_layout(self, largest_z, *, at_last: bool = False) -> torch.Tensor | None:
        """Index for `relayout_hidden` after a z of ``largest_z`` was sampled (None: no change).
        ``at_last``: grow on a z at the last unit too, not only past it (the authors' code,
        whose P(z | v) lumps z = n_hidden and the units beyond into one last category)."""
        return None

    def pruning_layout(self, *, at_most: int | None = None) -> torch.Tensor | None:
        """Index for `relayout_hidden` dropping units that carry nothing, at most ``at_most``
        of them (None: all; the authors' code drops one per update) (None: no change)."""
        return None

    def relayout_hidden(self, index: torch.Tensor) -> None:
        """New hidden unit k is old unit ``index[k]``, or a unit with zero parameters where
        ``index[k] < 0``. The one operation behind growth, pruning and permutation; the trainer
        applies the same index to the optimizer state (`irbm.Trainer.relayout_hidden`)."""
        index = torch.as_tensor(index, dtype=torch.long, device=self.device)
        if index.dim() != 1 or index.numel() < 1 or int(index.max()) >= self.n_hidden:
            raise ValueError(f"a hidden layout is a 1-D index into the {self.n_hidden} units")
        if index.numel() != self.n_hidden and not self.resizable:
            raise ValueError(f"a {self.display_name} has a fixed number of hidden units")
        with torch.no_grad():
            for name, spec in self.parameter_specs.items():
                if spec.per_unit:
                    old = getattr(self, name)
                    setattr(self, name, nn.Parameter(take_units(old, index)))

    def relayout_gradients(self, gradients, index) -> dict | None:
        """The gradients of this model, already relaid out by ``index``, derived from
        ``gradients`` computed before the change; None when they must be computed again (the
        default: only a family whose distribution a layout leaves unchanged can say)."""
        return None

    # ------------------------------------------------------------------ state
    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """As `nn.Module.load_state_dict`; a resizable model first takes the size of the state
        (its per-unit parameters' first dimension)."""
        if self.resizable:
            sizes = {state_dict[name].shape[0] for name, spec in self.parameter_specs.items()
                     if spec.per_unit and name in state_dict}
            if len(sizes) == 1 and (size := sizes.pop()) != self.n_hidden:
                keep = torch.arange(size, device=self.device)
                self.relayout_hidden(torch.where(keep < self.n_hidden, keep, -1))
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def forward(self, v) -> torch.Tensor:
        """The hidden means E[h | v], shape (N, n_hidden): the usual features of an RBM."""
        return self.mean_hiddens(v)

    def trusted_inputs(self):
        """Context: skip input validation inside the block (loops over data checked once)."""
        return self._validating(False)

    def validation(self):
        """Context: validate inputs inside the block, even within `trusted_inputs`."""
        return self._validating(True)

    @contextlib.contextmanager
    def _validating(self, flag: bool):
        previous, self.validate_args = self.validate_args, flag
        try:
            yield self
        finally:
            self.validate_args = previous

    # ------------------------------------------------------------------ input checks
    def check_visible(self, v, *, binary: bool = True) -> torch.Tensor:
        """``v`` as a (N, n_visible) tensor in the model's dtype and device; ValueError if it
        has another width, NaN, or (``binary``) values other than 0 and 1."""
        if not isinstance(v, torch.Tensor):
            v = torch.as_tensor(v)
        if v.dim() == 1:
            v = v.unsqueeze(0)
        if v.dim() != 2 or v.shape[1] != self.n_visible:
            raise ValueError(
                f"visible input must have shape (N, {self.n_visible}), got {tuple(v.shape)}")
        v = v.to(dtype=self.dtype, device=self.device)
        if not self.validate_args:
            return v
        if torch.isnan(v).any():
            raise ValueError("visible input contains NaN")
        if binary and not ((v == 0) | (v == 1)).all():
            inside = bool(((v >= 0) & (v <= 1)).all())
            raise ValueError(
                "visible input must be binary (only 0 and 1 values); "
                + ("binarize intensities in [0, 1] first: (v > 0.5) or torch.bernoulli(v), "
                   "as the paper did for MNIST" if inside else
                   f"its values span [{v.min().item():g}, {v.max().item():g}]: scale them "
                   "into [0, 1] (0-255 pixels: divide by 255), then binarize"))
        if not binary and ((v < 0) | (v > 1)).any():
            raise ValueError("visible input must lie in [0, 1]")
        return v

    def check_hidden(self, h) -> torch.Tensor:
        """``h`` as a binary (N, n_hidden) tensor in the model's dtype and device."""
        h = torch.as_tensor(h).to(dtype=self.dtype, device=self.device)
        if h.dim() == 1:
            h = h.unsqueeze(0)
        if h.dim() != 2 or h.shape[1] != self.n_hidden:
            raise ValueError(
                f"hidden input must have shape (N, {self.n_hidden}), got {tuple(h.shape)}")
        if self.validate_args and torch.isnan(h).any():
            raise ValueError("hidden input contains NaN")
        if self.validate_args and not ((h == 0) | (h == 1)).all():
            raise ValueError("hidden input must be binary (only 0 and 1 values)")
        return h

    # ------------------------------------------------------------------ public API
    def free_energy(self, v) -> torch.Tensor:
        """F(v) = -log sum_h exp(-E(v, h)), shape (N,), for v (N, n_visible). Differentiable."""
        return self._free_energy(self.check_visible(v))

    def hidden_free_energy(self, h) -> torch.Tensor:
        """G(h) = -log sum_v sum_z exp(-E(v, h, z)), shape (M,), for h (M, n_hidden).

        The hidden layer's free energy: the visible units (and, for the families with z, every
        z that keeps h's active units) summed out, so that Z = sum_h exp(-G(h)) and distinct
        hidden vectors bound Z from below (`irbm.floor.sampled_log_partition_floor`)."""
        return self._hidden_free_energy(self.check_hidden(h))

    def mean_hiddens(self, v) -> torch.Tensor:
        """E[h_i | v], shape (N, n_hidden), for v (N, n_visible): the features of a trained
        model. ``v`` may hold probabilities in [0, 1] (mean-field input, e.g. grey levels)."""
        return self._mean_hiddens(self.check_visible(v, binary=False))

    def mean_visibles(self, h) -> torch.Tensor:
        """P(v_j = 1 | h), shape (N, n_visible), for h (N, n_hidden)."""
        state_h = h.h if isinstance(h, HiddenState) else self.check_hidden(h)
        return self._mean_visibles(state_h)

    @torch.no_grad()
    def descend_hidden(self, h, max_sweeps: int = 1000) -> torch.Tensor:
        """h (M, n_hidden) -> h' (M, n_hidden): a local minimum of G (`hidden_free_energy`) for
        each row, reached by sweeping the units from the last to the first and flipping each one
        whose flip lowers G, until a sweep flips none (or after ``max_sweeps`` sweeps).

        No single flip of a returned row lowers G, to the model's precision (in bfloat16 the
        rounding of the updates leaves some that do; the floor descends in float32 or wider),
        unless the sweeps ran out. Last unit first because in the families with z switching off
        the last active unit can make an earlier one worth switching off: in order, each sweep
        of a 659-unit iRBM peeled one unit off the end (33 sweeps against 10). From uniform
        random starts the minima find hidden vectors that hold a peaked model's mass where Gibbs
        chains from the data never go (`irbm.floor.sampled_log_partition_floor`)."""
        if isinstance(max_sweeps, bool) or int(max_sweeps) != max_sweeps or max_sweeps < 1:
            raise ValueError(f"max_sweeps must be a whole number >= 1, got {max_sweeps!r}")
        return self._descend_hidden(self.check_hidden(h).clone(), int(max_sweeps))

    def _descend_hidden(self, h: torch.Tensor, max_sweeps: int) -> torch.Tensor:
        """`descend_hidden` on a checked copy ``h`` (M, n_hidden), changed in place: the
        reference, which evaluates G afresh for each flip (families override it with
        incremental updates)."""
        energy = self._hidden_free_energy(h)
        for _ in range(max_sweeps):
            flipped = False
            for unit in reversed(range(self.n_hidden)):  # last first: see descend_hidden
                candidate = h.clone()
                candidate[:, unit] = 1 - candidate[:, unit]
                new_energy = self._hidden_free_energy(candidate)
                lower = new_energy < energy
                if lower.any():
                    h[lower] = candidate[lower]
                    energy = torch.where(lower, new_energy, energy)
                    flipped = True
            if not flipped:
                break
        return h

    @torch.no_grad()
    def sample_hidden(self, v, generator: torch.Generator | None = None, *, z=None) -> HiddenState:
        """(h, z) ~ P(h, z | v) for v (N, n_visible); z is None for families without it."""
        v = self.check_visible(v)
        if z is not None:
            z = self.check_z(z, v.shape[0])
        return self._sample_hidden(v, generator, z)

    @torch.no_grad()
    def sample_visible(self, state, generator: torch.Generator | None = None) -> torch.Tensor:
        """v ~ P(v | h, z), shape (N, n_visible). Units beyond z are already 0 in ``state.h``."""
        state_h = state.h if isinstance(state, HiddenState) else self.check_hidden(state)
        return self._sample_visibles(state_h, generator)

    @torch.no_grad()
    def gibbs_step(self, v, generator: torch.Generator | None = None):
        """One block Gibbs step v -> (h, z) -> v'.

        Returns
        -------
        v_next : Tensor (N, n_visible)
        state : HiddenState sampled from ``v`` on the way.
        """
        state = self._sample_hidden(self.check_visible(v), generator)
        return self._sample_visibles(state.h, generator), state

    def _sample_visibles(self, h: torch.Tensor, generator) -> torch.Tensor:
        """v ~ P(v | h), shape (N, n_visible); families with fused kernels override it."""
        return bernoulli(self._mean_visibles(h), generator)

    def check_z(self, z, n_rows: int) -> torch.Tensor:
        """Families with z validate it here; others refuse it."""
        raise ValueError(f"a {self.display_name} has no z")

    def log_p_z_given_v(self, v) -> torch.Tensor:
        """log P(z | v) for families with z (see `has_z`)."""
        raise TypeError(f"a {self.display_name} has no z")

    def free_energy_gradients(self, v) -> dict[str, torch.Tensor]:
        """Closed-form mean over the batch of dF(v)/dtheta, one tensor per parameter.

        v: (N, n_visible). Agrees with autograd of ``free_energy(v).mean()``.
        """
        v = self.check_visible(v)
        return self.weighted_gradients(v, v.new_full((v.shape[0],), 1.0 / v.shape[0]))[0]

    # ------------------------------------------------------------------ exact answers
    def log_likelihood_exact(self, v) -> torch.Tensor:
        """log P(v) = -F(v) - log Z, shape (N,), in float64 with the exact log Z."""
        v = self.check_visible(v)
        model64 = self.as_float64()
        with torch.no_grad():
            free = model64._free_energy(v.to(torch.float64))
        return -free - model64.log_partition_exact()

    def as_float64(self) -> EnergyModel:
        """This model, or a float64 copy sharing nothing with it (for exact computations)."""
        if self.dtype == torch.float64:
            return self
        return copy.deepcopy(self).to(torch.float64)

    def exact_terms(self) -> int:
        """How many terms `log_partition_exact` sums: the fewer of the hidden configurations
        (with z) and the visible vectors."""
        return min(self._n_hidden_terms(), 2**self.n_visible)

    def log_partition_exact(self) -> float:
        """log Z by enumeration in float64: over hidden configurations (and z) with the visible
        units summed out analytically, or over visible vectors when that is smaller."""
        require_finite_parameters(self, "exact log Z")
        model = self.as_float64()
        n_hidden_terms = model._n_hidden_terms()
        n_visible_terms = 2**model.n_visible
        if min(n_hidden_terms, n_visible_terms) > MAX_EXACT_TERMS:
            fewest = min(n_hidden_terms, n_visible_terms)
            raise ValueError(
                f"exact log Z needs about 2^{math.log2(fewest):.0f} terms (the fewer of its sums "
                f"over hidden and visible configurations), more than "
                f"2^{math.log2(MAX_EXACT_TERMS):.0f}: use irbm.ais.estimate_log_partition "
                "instead")
        with torch.no_grad():
            if n_hidden_terms <= n_visible_terms:
                return float(model._log_partition_by_hidden())
            partials = [torch.logsumexp(-model._free_energy(v), 0)
                        for v in binary_configurations(model.n_visible, torch.float64,
                                                       model.device)]
            return float(torch.logsumexp(torch.stack(partials), 0))


def take_units(tensor: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Rows ``index`` of ``tensor`` along dim 0, zero rows where ``index < 0`` (a new copy)."""
    taken = tensor.detach()[index.clamp(min=0)]
    if (index < 0).any():
        taken[index < 0] = 0
    return taken


def uniform(shape, generator, like: torch.Tensor) -> torch.Tensor:
    """U[0, 1) draws of ``shape`` in the dtype and on the device of ``like``, from a
    torch.Generator (or torch's global one for None) or a `PhiloxGenerator`."""
    if isinstance(generator, PhiloxGenerator):
        return generator.uniform(shape, like.dtype, like.device)
    return torch.rand(shape, generator=generator, dtype=like.dtype, device=like.device)


def bernoulli(probabilities: torch.Tensor, generator) -> torch.Tensor:
    """0/1 sample of the same shape and dtype, P(1) = ``probabilities``."""
    uniform_ = uniform(probabilities.shape, generator, probabilities)
    # In place: the uniforms become the 0/1 sample, with no bool tensor or cast.
    return uniform_.lt_(probabilities)


def index_from_cdf(cdf: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """0-based category per row (N, 1) whose CDF interval holds (1 - u) * total, by binary search.

    cdf: (N, C) unnormalized cumulative sums; uniform: (N, 1) draws in [0, 1), overwritten. The
    point (1 - u) total lies in (0, total], so a category of zero probability (as exp's underflow
    makes them) is never chosen. Searching for u * total instead picks the first category
    whenever u is exactly 0, which a float32 uniform is once in 2^24 draws: an AIS run of 500
    chains x 5,000 temperatures met it, sent a chain to z = 1 against odds of e^-60, and its
    weight then grew by 264 nats.
    """
    return torch.searchsorted(cdf, uniform.neg_().add_(1.0).mul_(cdf[:, -1:]))


def binary_configurations(n_units: int, dtype=torch.float64, device=None, chunk: int = 2**14):
    """Yield all 2**n_units binary vectors, in chunks of shape (<=chunk, n_units).

    Row r of the full enumeration is the binary expansion of r, unit 0 as the lowest bit.
    """
    total = 2**n_units
    bits = 2 ** torch.arange(n_units, device=device)
    for start in range(0, total, chunk):
        index = torch.arange(start, min(start + chunk, total), device=device)
        yield ((index.unsqueeze(1) // bits) % 2).to(dtype)
