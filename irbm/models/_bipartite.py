"""What the built-in families share: binary visible units with biases c (n_visible,), hidden
units with weights W (n_hidden, n_visible) and biases b (n_hidden,), and the AIS path that
anneals W and b from zero while the visible biases move from a base c0 to c.

A family built on `BipartiteModel` defines how the hidden layer sums out
(`_hidden_log_sum`) and samples (`_sample_hidden_from`), given the pre-activations W v + b;
the free energy, the AIS path and its base follow.
"""

from __future__ import annotations

import abc
import math
import numbers

import torch
from torch import nn
from torch.nn import functional

from .. import kernels
from ._annealing import AnnealingPath, UniformSource
from ._base import EnergyModel, HiddenState, ParameterSpec, bernoulli, check_device, check_dtype

# Pseudo-counts, as a fraction of the number of examples, added to both outcomes of each visible
# unit before taking the data's base rate: Salakhutdinov & Murray's code adds 5 per 100 examples
# to the "on" count only; adding them to both keeps every base bias finite.
BASE_RATE_SMOOTHING = 0.05


class BipartiteModel(EnergyModel):
    """F(v) = -v^T c - L(W v + b, b), where L sums the hidden layer out (family-specific).

    Parameters
    ----------
    n_visible, n_hidden : int
    dtype, device : torch dtype and device of the parameters.
    generator : torch.Generator, optional
        Draws the initial parameters (`reset_parameters`); default: seed 0.
    """

    parameter_specs = {"W": ParameterSpec(per_unit=True, decay=True, coupling=True),
                       "b": ParameterSpec(per_unit=True, decay=True),
                       "c": ParameterSpec(per_unit=False, decay=False)}
    init_std = 0.01  # the authors' W ~ N(0, 0.01^2)

    def __init__(self, n_visible, n_hidden, *, dtype=torch.float32, device=None, generator=None):
        super().__init__()
        n_visible, n_hidden = _count(n_visible, "n_visible"), _count(n_hidden, "n_hidden")
        check_device(device)
        factory = {"dtype": check_dtype(dtype), "device": device}
        self.W = nn.Parameter(torch.zeros(n_hidden, n_visible, **factory))
        self.b = nn.Parameter(torch.zeros(n_hidden, **factory))
        self.c = nn.Parameter(torch.zeros(n_visible, **factory))
        self.reset_parameters(generator)

    @property
    def n_visible(self) -> int:
        return self.W.shape[1]

    @property
    def n_hidden(self) -> int:
        return self.W.shape[0]

    def config(self) -> dict:
        return {"family": self.family, "n_visible": self.n_visible, "n_hidden": self.n_hidden}

    def reset_parameters(self, generator=None):
        """W ~ N(0, init_std^2), biases zero: the authors' initialization. Without a generator,
        a fixed seed (0) keeps construction deterministic."""
        if generator is None:
            generator = torch.Generator().manual_seed(0)
        elif not isinstance(generator, torch.Generator):  # an int failed on .device
            raise TypeError(f"generator must be a torch.Generator or None, got "
                            f"{type(generator).__name__} (a seed: "
                            "torch.Generator().manual_seed(seed))")
        with torch.no_grad():
            noise = torch.randn(self.W.shape, generator=generator, dtype=self.W.dtype,
                                device=generator.device)
            self.W.copy_(noise.to(self.W.device) * self.init_std)
            self.b.zero_()
            self.c.zero_()
        return self

    def filters(self) -> torch.Tensor:
        return self.W.detach()

    def weights_and_biases(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The live parameters (weights (n_hidden, n_visible), hidden biases (n_hidden,),
        visible biases (n_visible,)), for code that maps them onto another convention (e.g.
        scikit-learn's ``components_``, ``intercept_hidden_``, ``intercept_visible_``)."""
        return self.W, self.b, self.c

    # ------------------------------------------------------------------ what a family defines
    @abc.abstractmethod
    def _hidden_log_sum(self, preactivation, hidden_bias) -> torch.Tensor:
        """L = log sum over the hidden layer (h and z) given W v + b (N, K) and b (K,), shape
        (N,), so that F(v) = -v^T c - L. AIS passes t (W v + b) and t b."""

    @abc.abstractmethod
    def _sample_hidden_from(self, preactivation, hidden_bias, generator, z=None) -> HiddenState:
        """(h, z) given W v + b (N, K) and b (K,) (scaled by t in AIS)."""

    # ------------------------------------------------------------------ shared maths
    def _hidden_preactivation(self, v: torch.Tensor) -> torch.Tensor:
        """W v + b, shape (N, n_hidden)."""
        return torch.addmm(self.b, v, self.W.t())

    def _free_energy(self, v):
        """F(v) = -v^T c - L(W v + b, b), shape (N,)."""
        return -(v @ self.c) - self._hidden_log_sum(self._hidden_preactivation(v), self.b)

    def _sample_hidden(self, v, generator, z=None):
        return self._sample_hidden_from(self._hidden_preactivation(v), self.b, generator, z)

    def _mean_visibles(self, h):
        """P(v_j = 1 | h) = sigmoid(h^T W_.j + c_j), shape (N, n_visible)."""
        return torch.sigmoid_(torch.addmm(self.c, h, self.W))

    def _sample_visibles(self, h, generator):
        """v ~ Bernoulli(sigmoid(h W + c)), shape (N, n_visible); one fused pass after the
        product where `irbm.kernels` serves the generator."""
        logits = torch.addmm(self.c, h, self.W)
        if kernels.usable(generator, logits):
            return kernels.bernoulli_from_logits(logits, generator)
        return bernoulli(logits.sigmoid_(), generator)

    def _visible_sum_out(self, h: torch.Tensor) -> torch.Tensor:
        """log sum_v exp(v^T (W^T h + c)) = sum_j softplus(c_j + (h W)_j), shape (M,)."""
        return functional.softplus(torch.addmm(self.c, h, self.W)).sum(1)

    def _hidden_rest(self, h: torch.Tensor) -> torch.Tensor:
        """G(h) + sum_j softplus(c_j + (h W)_j), shape (M,): the terms of G that the visible
        units do not give; families override it with a form that needs no product."""
        return self._hidden_free_energy(h) + self._visible_sum_out(h)

    def _descend_hidden(self, h, max_sweeps):
        """`EnergyModel.descend_hidden` with the visible input a = c + h W (M, n_visible)
        updated by one row of W per flip, so that a sweep costs M n_hidden n_visible softplus
        evaluations (the reference recomputes h W for every flip: n_hidden times more) and
        M n_hidden^2 for the rest of G (`_hidden_rest` of each candidate: on a 2,000-unit iRBM
        three quarters of a sweep; carrying each row's last active unit would remove it).
        Assumes `_visible_sum_out` is sum_j softplus(c_j + (h W)_j)."""
        visible_input = torch.addmm(self.c, h, self.W)
        visible_sum = functional.softplus(visible_input).sum(1)
        rest = self._hidden_rest(h)
        for _ in range(max_sweeps):
            flipped = False
            for unit in reversed(range(self.n_hidden)):  # last first: see descend_hidden
                sign = 1 - 2 * h[:, unit]  # +1 turns the unit on, -1 off
                new_input = torch.addcmul(visible_input, sign.unsqueeze(1), self.W[unit])
                new_sum = functional.softplus(new_input).sum(1)
                candidate = h.clone()
                candidate[:, unit] = 1 - candidate[:, unit]
                new_rest = self._hidden_rest(candidate)
                lower = (new_rest - rest) - (new_sum - visible_sum) < 0
                if lower.any():
                    h[lower, unit] = candidate[lower, unit]
                    visible_input[lower] = new_input[lower]
                    visible_sum = torch.where(lower, new_sum, visible_sum)
                    rest = torch.where(lower, new_rest, rest)
                    flipped = True
            if not flipped:
                break
        return h

    # ------------------------------------------------------------------ AIS
    def initialize_visible_bias(self, data, *, binary: bool = True) -> None:
        with torch.no_grad():
            self.c.copy_(self.base_visible_bias(data, binary=binary))

    def base_visible_bias(self, data=None, smoothing: float = BASE_RATE_SMOOTHING, *,
                          binary: bool = True):
        """c0_j = logit((mean_n v_nj + s) / (1 + 2 s)) for ``data`` (N, n_visible) (the data's
        smoothed log-odds, Salakhutdinov & Murray's base rate), or c without data; (n_visible,)."""
        if data is None:
            return self.c.detach().clone()
        data = torch.as_tensor(data)
        if data.dim() != 2 or data.shape[0] == 0:
            raise ValueError(f"data must be (N >= 1, {self.n_visible}), got {tuple(data.shape)}")
        # Chunks: a large uint8 data set is never converted to the model's dtype all at once.
        # Values in [0, 1] (``binary`` False: probabilities, means) count by their expectation.
        counts = sum(self.check_visible(data[start:start + 4096], binary=binary).double().sum(0)
                     for start in range(0, data.shape[0], 4096))
        probability = (counts / data.shape[0] + smoothing) / (1.0 + 2.0 * smoothing)
        return torch.logit(probability).to(self.dtype)

    def annealing_path(self, base_visible_bias, *, kind=None):
        self.check_ais_path(kind)
        return BipartitePath(self, base_visible_bias)


class BipartitePath(AnnealingPath):
    """f_t(v) = exp(v^T (c0 + t (c - c0)) + L(t (W v + b), t b)).

    At t = 0 the hidden layer decouples from v, so Z_0 = prod_j (1 + e^{c0_j}) exp(L(0, 0)).
    Per step: one product W v (shared by both f's and the hidden draw) and one h W (the visible
    draw). Families override `_hidden_step` with a fused version; this generic one calls the
    model's `_hidden_log_sum` and `_sample_hidden_from`.
    """

    description = "linear: W v + b scaled by t (Salakhutdinov & Murray)"
    fused_steps = True

    def __init__(self, model: BipartiteModel, base_visible_bias):
        self.model = model
        base = torch.as_tensor(base_visible_bias).to(dtype=model.dtype, device=model.device)
        if base.shape != (model.n_visible,) or not torch.isfinite(base).all():
            raise ValueError(f"base visible biases must be finite, of shape ({model.n_visible},)")
        self.base_bias = base
        self.visible_shift = model.c.detach() - base  # zero for the model's own base
        self.anneal_visible = bool(self.visible_shift.any())
        self.log_base_partition = (float(functional.softplus(base.double()).sum())
                                   + self._log_hidden_base())

    @torch.no_grad()
    def _log_hidden_base(self) -> float:
        """ln of the hidden factor of Z_0 (t = 0: W and b at zero), in float64."""
        model = self.model
        zeros = torch.zeros(1, model.n_hidden, dtype=torch.float64, device=model.device)
        return float(model.as_float64()._hidden_log_sum(zeros, zeros[0])[0])

    def log_unnormalized(self, v, t):
        return self.log_unnormalized_many(v, (t,))[0]

    @torch.no_grad()
    def log_unnormalized_many(self, v, ts):
        model = self.model
        v = v.to(model.dtype)
        pre = model._hidden_preactivation(v)
        return torch.stack([(v @ (self.base_bias + t * self.visible_shift)
                             + model._hidden_log_sum(pre * t, model.b * t)).double()
                            for t in ts])

    def sample_base(self, n_chains, uniforms):
        out = torch.empty(n_chains, self.model.n_visible, dtype=self.model.dtype,
                          device=self.model.device)
        return torch.lt(uniforms.filler(out)(), torch.sigmoid(self.base_bias))

    def start(self, visible, uniforms: UniformSource):
        model, n_chains = self.model, visible.shape[0]

        def buffer(*shape):
            return torch.empty(shape, dtype=model.dtype, device=model.device)

        self.visible = visible.to(model.device, model.dtype).contiguous().clone()
        self.activation = buffer(n_chains, model.n_visible)
        self.visible_uniform = buffer(n_chains, model.n_visible)
        self.draw_visible = uniforms.filler(self.visible_uniform)
        self.preactivation = buffer(n_chains, model.n_hidden)
        self.weight_t = model.W.detach().t()
        self.philox = self._kernel_stream(uniforms)
        self._start_hidden(n_chains, buffer, uniforms)

    def _kernel_stream(self, uniforms):
        """A Philox stream seeded from ``uniforms`` when `irbm.kernels` can run this path's
        steps (float32/64 on the CPU, or on CUDA with Triton), else None (the eager steps draw
        from ``uniforms``)."""
        if not kernels.runs_on(self.activation, self.model.W.detach()):
            return None
        seed = uniforms.filler(torch.empty(1, dtype=torch.float64, device=self.model.device))
        return kernels.PhiloxGenerator(int(seed()[0] * 2**62))

    def _start_hidden(self, n_chains, buffer, uniforms):
        """Allocate what `_hidden_step` needs (the generic one: a torch generator)."""
        seed = int(uniforms.filler(torch.empty(1, dtype=torch.float64,
                                                device=self.model.device))()[0] * 2**62)
        self.generator = torch.Generator(device=self.model.device).manual_seed(seed)

    def _hidden_step(self, t_from, t_to):
        """(ln f_{t_to} - ln f_{t_from} without the visible term (n_chains,), h drawn at t_to)."""
        model, pre = self.model, self.preactivation
        b = model.b.detach()
        delta = (model._hidden_log_sum(pre * t_to, b * t_to)
                 - model._hidden_log_sum(pre * t_from, b * t_from))
        return delta, model._sample_hidden_from(pre * t_to, b * t_to, self.generator).h

    @torch.no_grad()
    def step(self, t_from, t_to):
        model = self.model
        torch.addmm(model.b.detach(), self.visible, self.weight_t, out=self.preactivation)
        delta, hidden = self._hidden_step(t_from, t_to)
        if self.anneal_visible:
            delta = delta + (t_to - t_from) * (self.visible @ self.visible_shift)
        visible_bias = (torch.add(self.base_bias, self.visible_shift, alpha=t_to)
                        if self.anneal_visible else self.base_bias)
        torch.addmm(visible_bias, hidden, model.W.detach(), alpha=t_to, out=self.activation)
        if self.philox is not None:
            kernels.bernoulli_from_logits(self.activation, self.philox, out=self.visible)
        else:
            torch.lt(self.draw_visible(), self.activation.sigmoid_(), out=self.visible)
        return delta


def _count(value, name) -> int:
    """A positive integer argument, refusing floats with a fraction, bools and NaN."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or value != value:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not float(value).is_integer() or value < 1 or math.isinf(value):
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)
