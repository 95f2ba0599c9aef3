"""The interface shared by every model family, and the input checks they all use.

Every family is an energy-based model over binary vectors v of shape (N, n_visible) with
parameters W (n_hidden, n_visible), b (n_hidden,) and c (n_visible,). The trainer, AIS and
the command line only use what is declared here, so a new family plugs in by implementing
the abstract methods.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

# Largest number of terms `log_partition_exact` agrees to sum.
MAX_EXACT_TERMS = 2**24
# Rows of an enumeration processed at once, to bound memory.
_ENUMERATION_CHUNK = 2**14


@dataclass
class HiddenState:
    """A sample of the hidden layer.

    Attributes
    ----------
    h : Tensor (N, n_hidden)
        Binary hidden units; for the ordered models units beyond z are 0.
    z : LongTensor (N,) or None
        Number of selected units (1-based), None for the RBM. For the iRBM, ``z == n_hidden + 1``
        means "beyond the trained units": z fell in the geometric tail.
    """

    h: torch.Tensor
    z: torch.Tensor | None = None


class EnergyModel(nn.Module):
    """Base class: parameters, input checks, the exact log-partition and Gibbs sampling.

    Subclasses implement `_log_joint_weights` style hooks (see each abstract method).
    """

    family: str = "base"

    def __init__(self, n_visible, n_hidden, *, dtype=torch.float32, device=None,
                 generator=None, init_std=0.01):
        super().__init__()
        n_visible, n_hidden = int(n_visible), int(n_hidden)
        if n_visible < 1:
            raise ValueError(f"n_visible must be >= 1, got {n_visible}")
        if n_hidden < 1:
            raise ValueError(f"n_hidden must be >= 1, got {n_hidden}")
        factory = {"dtype": dtype, "device": device}
        self.W = nn.Parameter(torch.zeros(n_hidden, n_visible, **factory))
        self.b = nn.Parameter(torch.zeros(n_hidden, **factory))
        self.c = nn.Parameter(torch.zeros(n_visible, **factory))
        if init_std:
            self.reset_parameters(generator, init_std)

    # ------------------------------------------------------------------ sizes and config
    @property
    def n_visible(self) -> int:
        return self.W.shape[1]

    @property
    def n_hidden(self) -> int:
        return self.W.shape[0]

    def config(self) -> dict:
        """Constructor arguments that rebuild this model (with its current size)."""
        return {"family": self.family, "n_visible": self.n_visible, "n_hidden": self.n_hidden}

    def reset_parameters(self, generator: torch.Generator | None = None, std: float = 0.01):
        """W ~ N(0, std^2), biases zero: the authors' initialization. Without a generator, a
        fixed seed (0) keeps construction deterministic."""
        if generator is None:
            generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            noise = torch.randn(self.W.shape, generator=generator, dtype=self.W.dtype,
                                device=generator.device)
            self.W.copy_(noise.to(self.W.device) * std)
            self.b.zero_()
            self.c.zero_()
        return self

    # ------------------------------------------------------------------ input checks
    def _check_visible(self, v, *, binary: bool = True) -> torch.Tensor:
        """Validate a batch of visible vectors and return it as a (N, n_visible) tensor."""
        if not isinstance(v, torch.Tensor):
            v = torch.as_tensor(v)
        if v.dim() == 1:
            v = v.unsqueeze(0)
        if v.dim() != 2 or v.shape[1] != self.n_visible:
            raise ValueError(
                f"visible input must have shape (N, {self.n_visible}), got {tuple(v.shape)}")
        v = v.to(dtype=self.W.dtype, device=self.W.device)
        if torch.isnan(v).any():
            raise ValueError("visible input contains NaN")
        if binary and not ((v == 0) | (v == 1)).all():
            raise ValueError("visible input must be binary (only 0 and 1 values)")
        if not binary and ((v < 0) | (v > 1)).any():
            raise ValueError("visible input must lie in [0, 1]")
        return v

    def _check_hidden(self, h) -> torch.Tensor:
        h = torch.as_tensor(h).to(dtype=self.W.dtype, device=self.W.device)
        if h.dim() == 1:
            h = h.unsqueeze(0)
        if h.dim() != 2 or h.shape[1] != self.n_hidden:
            raise ValueError(
                f"hidden input must have shape (N, {self.n_hidden}), got {tuple(h.shape)}")
        if torch.isnan(h).any():
            raise ValueError("hidden input contains NaN")
        if not ((h == 0) | (h == 1)).all():
            raise ValueError("hidden input must be binary (only 0 and 1 values)")
        return h

    # ------------------------------------------------------------------ shared maths
    def _hidden_preactivation(self, v: torch.Tensor) -> torch.Tensor:
        """W v + b, shape (N, n_hidden)."""
        return torch.addmm(self.b, v, self.W.t())

    def _mean_visibles(self, h: torch.Tensor) -> torch.Tensor:
        """P(v_j = 1 | h) = sigmoid(h^T W_.j + c_j), shape (N, n_visible)."""
        return torch.sigmoid_(torch.addmm(self.c, h, self.W))

    @staticmethod
    def _bernoulli(probabilities: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        uniform = torch.rand(probabilities.shape, generator=generator,
                             dtype=probabilities.dtype, device=probabilities.device)
        # In place: the uniforms become the 0/1 sample, with no bool tensor or cast.
        return uniform.lt_(probabilities)

    # ------------------------------------------------------------------ public API
    def free_energy(self, v) -> torch.Tensor:
        """F(v) = -log sum_h exp(-E(v, h)), shape (N,). Differentiable."""
        v = self._check_visible(v)
        return self._free_energy(v)

    def sample_visible(self, state: HiddenState, generator: torch.Generator | None = None):
        """v ~ P(v | h, z), shape (N, n_visible). Units beyond z are already 0 in ``state.h``."""
        h = state.h if isinstance(state, HiddenState) else self._check_hidden(state)
        with torch.no_grad():
            return self._bernoulli(self._mean_visibles(h), generator)

    def gibbs_step(self, v, generator: torch.Generator | None = None):
        """One block Gibbs step v -> (h, z) -> v'.

        Returns
        -------
        v_next : Tensor (N, n_visible)
        state : HiddenState sampled from ``v`` on the way.
        """
        with torch.no_grad():
            return self._gibbs_step(self._check_visible(v), generator)

    def _gibbs_step(self, v, generator):
        """`gibbs_step` without input checks, for the inner loops of training and sampling."""
        state = self._sample_hidden(v, generator)
        return self._bernoulli(self._mean_visibles(state.h), generator), state

    def sample_hidden(self, v, generator: torch.Generator | None = None) -> HiddenState:
        """(h, z) ~ P(h, z | v); for the RBM z is None."""
        with torch.no_grad():
            return self._sample_hidden(self._check_visible(v), generator)

    def log_likelihood_exact(self, v) -> torch.Tensor:
        """log P(v) = -F(v) - log Z, shape (N,), in float64 with the exact log Z."""
        v = self._check_visible(v)
        model64 = self._as_float64()
        with torch.no_grad():
            free = model64._free_energy(v.to(torch.float64))
        return -free - model64.log_partition_exact()

    def _as_float64(self) -> "EnergyModel":
        """A float64 copy that shares nothing with self (for exact computations)."""
        if self.W.dtype == torch.float64:
            return self
        clone = self.__class__(**self._constructor_kwargs(), dtype=torch.float64,
                               device=self.W.device)
        with torch.no_grad():
            for name in ("W", "b", "c"):
                getattr(clone, name).copy_(getattr(self, name))
        return clone

    def _constructor_kwargs(self) -> dict:
        kwargs = self.config()
        kwargs.pop("family")
        return kwargs

    def log_partition_exact(self) -> float:
        """log Z by enumeration in float64: over hidden configurations (and z) with the visible
        units summed out analytically, or over visible vectors when that is smaller."""
        model = self._as_float64()
        n_hidden_terms = model._n_hidden_terms()
        n_visible_terms = 2**model.n_visible
        if min(n_hidden_terms, n_visible_terms) > MAX_EXACT_TERMS:
            raise ValueError(
                f"exact log Z needs min({n_hidden_terms}, {n_visible_terms}) terms, more than "
                f"{MAX_EXACT_TERMS}: use irbm.ais.estimate_log_partition instead")
        with torch.no_grad():
            if n_hidden_terms <= n_visible_terms:
                return float(model._log_partition_by_hidden())
            return float(model._log_partition_by_visible())

    def _log_partition_by_visible(self) -> torch.Tensor:
        """log Z = logsumexp_v -F(v), enumerating all 2**n_visible visible vectors."""
        partials = [torch.logsumexp(-self._free_energy(v), 0)
                    for v in binary_configurations(self.n_visible, self.W.dtype, self.W.device)]
        return torch.logsumexp(torch.stack(partials), 0)

    def _visible_sum_out(self, h: torch.Tensor) -> torch.Tensor:
        """log sum_v exp(v^T (W^T h + c)) = sum_j softplus(c_j + (h W)_j), shape (M,)."""
        return nn.functional.softplus(torch.addmm(self.c, h, self.W)).sum(1)

    # ------------------------------------------------------------------ to implement
    def _free_energy(self, v: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _free_energy_from(self, visible_term, preactivation, hidden_bias) -> torch.Tensor:
        """F(v) from its parts: v^T c (N,), W v + b (N, n_hidden) and b (n_hidden,). AIS calls it
        with scaled parts to evaluate intermediate distributions."""
        raise NotImplementedError

    def _sample_hidden(self, v: torch.Tensor, generator) -> HiddenState:
        raise NotImplementedError

    def _sample_hidden_from(self, preactivation, hidden_bias, generator) -> HiddenState:
        """(h, z) ~ P(h, z | v) given W v + b (N, n_hidden) and b (n_hidden,)."""
        raise NotImplementedError

    def _n_hidden_terms(self) -> int:
        raise NotImplementedError

    def _log_partition_by_hidden(self) -> torch.Tensor:
        raise NotImplementedError

    def free_energy_gradients(self, v) -> dict[str, torch.Tensor]:
        """Closed-form mean over the batch of dF(v)/dtheta: {"W": (K, D), "b": (K,), "c": (D,)}.

        v: (N, n_visible). Agrees with autograd of ``free_energy(v).mean()``.
        """
        v = self._check_visible(v)
        row_weights = v.new_full((v.shape[0],), 1.0 / v.shape[0])
        return self._free_energy_gradients(v, row_weights)[0]

    def _free_energy_gradients(self, v, row_weights, generator=None):
        """sum_n row_weights[n] dF(v_n)/dtheta, and (ordered models, when a generator is given)
        z_n ~ P(z | v_n) drawn from the same pass. The trainer stacks positive and negative
        examples with weights +1/N and -1/S so one pass gives the whole gradient.

        Returns
        -------
        gradients : dict of tensors shaped like W, b, c.
        z : LongTensor (N,) or None.
        """
        raise NotImplementedError

    def adapt_size(self, largest_z) -> int:
        """Grow after a z beyond the trained units was sampled (iRBM); returns units added."""
        return 0

    def prune(self) -> int:
        """Drop trailing units whose parameters are all zero (iRBM); returns units removed."""
        return 0


def binary_configurations(n_units: int, dtype=torch.float64, device=None,
                          chunk: int = _ENUMERATION_CHUNK):
    """Yield all 2**n_units binary vectors, in chunks of shape (<=chunk, n_units).

    Row r of the full enumeration is the binary expansion of r, unit 0 as the lowest bit.
    """
    total = 2**n_units
    bits = 2 ** torch.arange(n_units, device=device)
    for start in range(0, total, chunk):
        index = torch.arange(start, min(start + chunk, total), device=device)
        yield ((index.unsqueeze(1) // bits) % 2).to(dtype)


def log_geometric_tail(beta: float) -> float:
    """log(r / (1 - r)) with r = 2**(1 - beta): the mass of the iRBM's units beyond l, relative
    to exp(-F(v, l))."""
    log_r = (1.0 - beta) * math.log(2.0)
    return log_r - math.log(-math.expm1(log_r))
