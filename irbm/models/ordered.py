"""The ordered RBM (paper section 3): z in 1..K selects how many hidden units take part."""

from __future__ import annotations

import math

import torch
from torch.nn import functional

from .. import kernels
from ._base import Gradients, HiddenState, index_from_cdf, uniform
from ._bipartite import BipartiteModel, BipartitePath
from ._pinned import PinnedPath
from ._registry import register_family
from .rbm import RBM


@register_family
class OrderedRBM(BipartiteModel):
    """E(v, h, z) = -v^T c - sum_{i<=z} (h_i (W_i. v + b_i) - beta softplus(b_i)).

    Hidden units beyond z are 0 (h in H_z). The marginal is P(v) = sum_z exp(-F(v, z)) / Z.

    Parameters
    ----------
    n_visible : int
    n_hidden : int, default 500
    beta : float, > 0
        Scale of the per-unit penalty beta_i = beta * softplus(b_i). A buffer: it is part of
        ``state_dict()``, and assigning a number to ``model.beta`` is validated.
    dtype, device : torch dtype and device of the parameters.
    generator : torch.Generator, optional
        Draws the initial W ~ N(0, 0.01^2) (biases start at zero); default: seed 0.
    """

    family = "orbm"
    display_name = "oRBM"
    has_z = True

    def __init__(self, n_visible, n_hidden=500, *, beta=1.01, dtype=torch.float32, device=None,
                 generator=None):
        beta = self._checked_beta(beta)
        super().__init__(n_visible, n_hidden, dtype=dtype, device=device, generator=generator)
        self.register_buffer("beta", torch.tensor(beta, dtype=self.W.dtype, device=self.W.device))

    @classmethod
    def _checked_beta(cls, beta) -> float:
        beta = float(beta)
        if not (math.isfinite(beta) and beta > 0):
            raise ValueError(f"beta must be a finite number > 0 (the per-unit penalty scale), "
                             f"got {beta}")
        return beta

    def __setattr__(self, name, value):
        # model.beta = 1.05 updates the buffer in place (validated), so nothing derived from
        # beta can go stale and state_dict() always holds the value in use.
        if name == "beta" and "beta" in self.__dict__.get("_buffers", {}):
            self._buffers["beta"].fill_(self._checked_beta(value))
            return
        super().__setattr__(name, value)

    def config(self) -> dict:
        return {**super().config(), "beta": float(self.beta)}

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # A loaded beta is validated as the constructor and ``model.beta = ...`` validate it
        # (an iRBM's beta <= 1 made every number NaN or inf), here so that a model inside
        # another module is checked too; a beta of the wrong shape is torch's size mismatch.
        beta = state_dict.get(prefix + "beta")
        if beta is not None and torch.as_tensor(beta).numel() == 1:
            self._checked_beta(torch.as_tensor(beta).item())
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    # ------------------------------------------------------------------ energies
    def _penalties(self) -> torch.Tensor:
        """beta_i = beta * softplus(b_i), shape (n_hidden,)."""
        return self._penalties_from(self.b)

    def _penalties_from(self, hidden_bias) -> torch.Tensor:
        """The per-unit penalties for hidden biases ``hidden_bias`` (K,) (AIS passes t b)."""
        return self.beta * functional.softplus(hidden_bias)

    def _penalty_gradient(self) -> torch.Tensor:
        """d beta_i / d b_i = beta * sigmoid(b_i), shape (n_hidden,)."""
        return self.beta * torch.sigmoid(self.b)

    def check_z(self, z, n_rows: int) -> torch.Tensor:
        """z as a LongTensor (n_rows,) of values in the model's range (a scalar is broadcast)."""
        z = torch.as_tensor(z, device=self.device)
        if z.dim() == 0:
            z = z.expand(n_rows)
        if z.shape != (n_rows,):
            raise ValueError(f"z must have shape ({n_rows},), got {tuple(z.shape)}")
        if z.is_floating_point():
            if torch.isnan(z).any() or (z != z.round()).any():
                raise ValueError("z must hold integers")
            z = z.long()
        low, high = self._z_range()
        if (z < low).any() or (high is not None and (z > high).any()):
            raise ValueError(f"z out of range: values must lie in {low}..{high or 'infinity'}")
        return z.long()

    def _z_range(self):
        return 1, self.n_hidden

    def energy(self, v, h, z) -> torch.Tensor:
        """E(v, h, z) = -v^T c - sum_{i<=z} (h_i (W_i. v + b_i) - beta_i), shape (N,).

        v: (N, n_visible), h: (N, n_hidden), z: integer (N,) in 1..n_hidden. Units of h beyond z
        do not enter the energy.
        """
        v, h = self.check_visible(v), self.check_hidden(h)
        if v.shape[0] != h.shape[0]:
            raise ValueError(f"v has {v.shape[0]} rows but h has {h.shape[0]}")
        z = self.check_z(z, v.shape[0])
        selected = self._selection_mask(z).to(v.dtype)
        per_unit = h * self._hidden_preactivation(v) - self._penalties()
        return -v @ self.c - (per_unit * selected).sum(1) + self._energy_beyond(z)

    def _energy_beyond(self, z):
        return 0.0

    def _selection_mask(self, z) -> torch.Tensor:
        """1_z: (N, n_hidden) boolean, True for units i <= z."""
        return torch.arange(1, self.n_hidden + 1, device=z.device) <= z.unsqueeze(1)

    def _log_z_weights(self, v, preactivation=None) -> torch.Tensor:
        """-F(v, z) for every value of z, shape (N, n_hidden) (the iRBM adds a tail column)."""
        if preactivation is None:
            preactivation = self._hidden_preactivation(v)
        return self._log_z_weights_from(v @ self.c, preactivation, self.b)

    def _log_z_weights_from(self, visible_term, preactivation, hidden_bias):
        """-F(v, z) from its parts: v^T c (N,), W v + b (N, K) and b (K,). AIS passes scaled
        parts to evaluate intermediate distributions without another matrix product. With
        ``visible_term=None`` the v^T c shift, common to all z, is left out (enough to draw z)."""
        # In place on softplus's fresh output (its backward needs only its input): two
        # (N, K) allocations fewer per Gibbs step.
        columns = functional.softplus(preactivation).sub_(self._penalties_from(hidden_bias))
        columns = columns.cumsum_(1)
        if visible_term is not None:
            columns += visible_term.unsqueeze(1)
        return self._append_tail(columns)

    def _append_tail(self, columns):
        return columns

    def _log_tail(self):
        """log of the tail's mass relative to exp(-F(v, K)): None, no tail (the iRBM has one)."""
        return None

    def _hidden_log_sum(self, preactivation, hidden_bias):
        """L = log sum_z exp(sum_{i<=z} softplus(W_i. v + b_i) - beta softplus(b_i)), (N,)."""
        return torch.logsumexp(self._log_z_weights_from(None, preactivation, hidden_bias), 1)

    def free_energy_z(self, v) -> torch.Tensor:
        """F(v, z) = -v^T c - sum_{i<=z} (softplus(W_i. v + b_i) - beta_i), shape (N, n_hidden):
        column z - 1 holds F(v, z) for z = 1..n_hidden."""
        v = self.check_visible(v)
        return -self._log_z_weights(v)[:, : self.n_hidden]

    def log_p_z_given_v(self, v) -> torch.Tensor:
        """log P(z | v) = -F(v, z) - log sum_z' exp(-F(v, z')), shape (N, n_hidden)
        (iRBM: (N, n_hidden + 1), the last column being log P(z > n_hidden | v))."""
        v = self.check_visible(v)
        return torch.log_softmax(self._log_z_weights(v), 1)

    # ------------------------------------------------------------------ sampling
    @staticmethod
    def _sample_categorical(log_weights, generator) -> torch.Tensor:
        """Index (1-based) drawn from softmax(log_weights) per row, by inverting the CDF."""
        # Unnormalized: the comparison below scales the uniform by the total instead. Clamping at
        # -80 keeps exp out of float32's subnormal range, where it is ~10x slower; it changes
        # only probabilities below e^-80 relative to the largest, far below rounding.
        shifted = log_weights.sub(log_weights.amax(1, keepdim=True)).clamp_(min=-80.0)
        cdf = torch.cumsum(shifted.exp_(), 1)
        draws = uniform((log_weights.shape[0], 1), generator, cdf)
        # Scaling by the last entry absorbs rounding error so the top category stays reachable.
        index = index_from_cdf(cdf, draws).squeeze(1) + 1
        return index.clamp_(max=log_weights.shape[1])

    def _sample_hidden_from(self, preactivation, hidden_bias, generator, z=None):
        """(h, z) given W v + b (N, K) and b (K,); v^T c only shifts every z alike, so it is
        not needed to draw z. Fused in one pass where `irbm.kernels` serves the generator."""
        if kernels.usable(generator, preactivation):
            h, z, _ = kernels.ordered_hidden(preactivation, self._penalties_from(hidden_bias),
                                             self._log_tail(), generator, z)
            return HiddenState(h, z)
        if z is None:
            z = self._sample_categorical(
                self._log_z_weights_from(None, preactivation, hidden_bias), generator)
        draws = uniform(preactivation.shape, generator, preactivation)
        # A uniform of 1 never falls below sigmoid(.) <= 1: units past z come out 0 without a
        # mask multiplication (same draws as bernoulli() followed by the mask).
        beyond = torch.arange(1, self.n_hidden + 1, device=z.device) > z.unsqueeze(1)
        return HiddenState(draws.masked_fill_(beyond, 1.0).lt_(torch.sigmoid(preactivation)), z)

    def _mean_hiddens(self, v) -> torch.Tensor:
        """E[h_i | v] = sigmoid(W_i. v + b_i) P(z >= i | v), shape (N, n_hidden)."""
        preactivation = self._hidden_preactivation(v)
        survival = self._survival(self._log_z_weights(v, preactivation))
        return torch.sigmoid(preactivation) * survival[:, : self.n_hidden]

    def _survival(self, log_weights) -> torch.Tensor:
        """P(z >= i | v) for every column i of ``log_weights`` (N, n_hidden [+ 1 for a tail]),
        same shape: 1 - cdf(z < i | v), computed as
        a reverse cumulative sum so that small tail masses keep their precision."""
        probabilities = torch.softmax(log_weights, 1)
        survival = torch.flip(torch.flip(probabilities, (1,)).cumsum_(1), (1,))
        # Rounding can push a sum of probabilities a hair above 1.
        return survival.clamp_(max=1.0)

    # ------------------------------------------------------------------ exact log Z
    def _n_hidden_terms(self) -> int:
        return 2**self.n_hidden

    def _hidden_free_energy(self, h):
        """G(h) = -h^T b - sum_j softplus(c_j + (h W)_j) - log sum_{z >= m(h)} exp(-sum_{i<=z}
        beta_i), shape (M,), m(h) the last active unit of h (1 when none); the iRBM's z past
        its units adds the tail, whose units are free to take either value."""
        return self._hidden_rest(h) - self._visible_sum_out(h)

    def _hidden_rest(self, h):
        """-h^T b - log sum_{z >= m(h)} exp(-sum_{i<=z} beta_i), shape (M,): G(h) without the
        visible units' softplus terms."""
        z_columns = self._append_tail(torch.cumsum(-self._penalties(), 0).unsqueeze(0))[0]
        # suffix[m] = logsumexp(z_columns[m:]): all z >= m + 1 (and the tail for the iRBM).
        suffix = torch.flip(torch.logcumsumexp(torch.flip(z_columns, (0,)), 0), (0,))
        # Integer positions: a low-precision float cannot hold every index (bfloat16: 256).
        positions = torch.arange(1, self.n_hidden + 1, device=h.device)
        last_active = torch.where(h != 0, positions, 0).amax(1).clamp(min=1)
        return -(h @ self.b) - suffix[last_active - 1]

    def given_z(self, z: int):
        """(rbm, log_factor) with exp(-F(v, z)) = exp(-F_rbm(v) + log_factor) for every v:
        the model with z fixed is an RBM of its first z units (n_hidden + 1 on the iRBM: the
        tail, whose units past l are zero, has the same RBM as z = l), and log_factor =
        -sum_{i<=z} beta softplus(b_i) (the iRBM's tail z > l adds ln(r / (1 - r))). So
        Z = sum_z Z_rbm(z) e^{log_factor(z)}: where in z the model keeps its mass."""
        last = self.n_hidden if self._log_tail() is None else self.n_hidden + 1
        if isinstance(z, bool) or int(z) != z or not 1 <= z <= last:
            raise ValueError(f"z must be an integer in 1..{last}, got {z!r}")
        units = min(int(z), self.n_hidden)
        rbm = RBM(self.n_visible, units, dtype=self.dtype, device=self.device)
        with torch.no_grad():
            rbm.W.copy_(self.W[:units])
            rbm.b.copy_(self.b[:units])
            rbm.c.copy_(self.c)
            log_factor = -float(self._penalties()[:units].double().sum())
        if z > self.n_hidden:
            log_factor += float(self._log_tail())
        return rbm, log_factor

    # ------------------------------------------------------------------ gradients
    def weighted_gradients(self, v, row_weights, generator=None):
        """Weighted sums of the paper's eqs. 24-26 (v: (N, n_visible), row_weights: (N,)):
        dF/dW = -(sigmoid(Wv+b) * (1 - cdf(z|v))) v^T,
        dF/db = -(sigmoid(Wv+b) - beta sigmoid(b)) * (1 - cdf(z|v)), dF/dc = -v.
        With a generator, also z ~ P(z | v) for every row (growth of the iRBM uses it).
        Families with a tail also give ``gradients.appended``: the rows a zero unit appended
        at l + 1 would get (its survival P(z >= l + 1 | v) is the tail column's mass)."""
        with torch.no_grad():
            preactivation = self._hidden_preactivation(v)
            if kernels.usable(generator, preactivation, row_weights):
                weighted_h, kept, tail, z = kernels.ordered_statistics(
                    preactivation, self._penalties(), self._log_tail(), row_weights, generator)
            else:
                weighted_h, kept, tail, z = self._z_statistics(v, preactivation, row_weights,
                                                               generator)
            gradients = Gradients({
                "W": torch.mm(weighted_h.t(), v),
                "b": weighted_h.sum(0) - self._penalty_gradient() * kept.sum(0),
                "c": -(row_weights @ v),
            })
            if tail is not None:
                # A zero unit has sigmoid(0) = 1/2 and d beta_i / d b_i = beta sigmoid(0),
                # i.e. beta / 2.
                gradients.appended = {"W": 0.5 * (tail @ v).unsqueeze(0),
                                      "b": (0.5 * (1.0 - self.beta) * tail.sum()).reshape(1)}
            return gradients, z

    def _z_statistics(self, v, preactivation, row_weights, generator):
        """(weighted_h (N, K), kept (N, K), tail (N,) or None, z (N,) or None) of
        `weighted_gradients`, eagerly: kept = -w_n P(z >= i | v_n), weighted_h = sigmoid(W v +
        b) * kept, tail = -w_n P(z > K | v_n) for families with a tail, z drawn when a
        generator is given. `irbm.kernels.ordered_statistics` is the fused version."""
        log_weights = self._log_z_weights(v, preactivation)
        # -w_n P(z >= i | v_n): the sign goes on this (N, K) factor, not on the (K, D) result.
        weights = self._survival(log_weights).mul_(row_weights.neg().unsqueeze(1))
        kept = weights[:, : self.n_hidden]
        weighted_h = torch.sigmoid(preactivation).mul_(kept)
        # Units far past a row's z get survival probabilities below float32's normal range:
        # subnormal operands made the gradient product 12 times slower (5.6 ms against 0.47 at
        # 128 x 500 x 784). Zeroing them changes the gradient by less than 1e-38 per term.
        weighted_h.masked_fill_(weighted_h.abs() < torch.finfo(weighted_h.dtype).tiny, 0.0)
        tail = weights[:, self.n_hidden] if weights.shape[1] > self.n_hidden else None
        z = None if generator is None else self._sample_categorical(log_weights, generator)
        return weighted_h, kept, tail, z

    # ------------------------------------------------------------------ AIS
    ais_paths = ("pinned", "linear")

    def annealing_path(self, base_visible_bias, *, kind=None):
        """"pinned" (default, `PinnedPath`): z held at n_hidden while W v + b is annealed, then
        released; "linear": Salakhutdinov & Murray's, z free throughout, whose chains can
        collapse onto z = 1 (see `irbm.models._pinned`)."""
        if self.check_ais_path(kind) == "linear":
            return _OrderedPath(self, base_visible_bias)
        return PinnedPath(self, base_visible_bias, self.n_hidden)

    def _pin_offsets(self, kappa: float, pin: int) -> torch.Tensor:
        """-kappa |z - pin| for every z column, shape (n_columns,): the release's tilt."""
        z = torch.arange(1, self.n_hidden + 1, device=self.device, dtype=self.dtype)
        return (z - pin).abs_().mul_(-kappa)


class _OrderedPath(BipartitePath):
    """The ordered families' path, fused: one exp pass over the z columns gives both
    sum_z exp(-F_t(v, z)) and the CDF from which z is drawn. It calls the model's
    `_log_z_weights_from`, so a subclass that changes the z columns (the iRBM's tail) is
    annealed correctly; AIS checks `log_unnormalized` against the free energy in any case."""

    def _start_hidden(self, n_chains, buffer, uniforms):
        model = self.model
        self.scaled, self.work, self.hidden, self.hidden_uniform = (
            buffer(n_chains, model.n_hidden) for _ in range(4))
        self.z_uniform = buffer(n_chains, 1)
        self.draw_hidden = uniforms.filler(self.hidden_uniform)
        self.draw_z = uniforms.filler(self.z_uniform)
        self.unit_index = torch.arange(model.n_hidden, device=model.device)
        # exp is ~10 times slower on inputs whose result is subnormal (or nearly): clamping just
        # above ln(smallest normal) changes a sum whose largest term is 1 by less than rounding.
        self.floor = math.log(torch.finfo(model.dtype).tiny) + 1.0
        self.log_tail = model._log_tail()  # beta's: fixed while annealing

    def _hidden_step(self, t_from, t_to):
        model, b = self.model, self.model.b.detach()
        if self.philox is not None:
            _, _, previous = kernels.ordered_hidden(
                self.preactivation, model._penalties_from(b * t_from), self.log_tail, None,
                scale=t_from)
            hidden, _, current = kernels.ordered_hidden(
                self.preactivation, model._penalties_from(b * t_to), self.log_tail,
                self.philox, scale=t_to)
            return current - previous, hidden  # float64: the AIS weights accumulate in it
        previous = model._log_z_weights_from(
            None, torch.mul(self.preactivation, t_from, out=self.work), b * t_from)
        previous_top = previous.amax(1, keepdim=True)
        previous_sum = previous.sub_(previous_top).clamp_(min=self.floor).exp_().sum(1, True)
        torch.mul(self.preactivation, t_to, out=self.scaled)
        columns = model._log_z_weights_from(None, self.scaled, b * t_to)
        top = columns.amax(1, keepdim=True)
        cdf = columns.sub_(top).clamp_(min=self.floor).exp_().cumsum_(1)
        total = cdf[:, -1:]
        delta = (top - previous_top + torch.log(total / previous_sum)).squeeze(1)
        last_unit = index_from_cdf(cdf, self.draw_z())  # z - 1
        # u = 1 never falls below sigmoid(.) <= 1: units past z stay off.
        self.draw_hidden().masked_fill_(self.unit_index > last_unit, 1.0)
        torch.lt(self.hidden_uniform, torch.sigmoid(self.scaled, out=self.work), out=self.hidden)
        return delta, self.hidden
