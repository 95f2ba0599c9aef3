"""AIS for the families with z: anneal with z pinned at K = n_hidden, then release it.

Why not the linear path of Salakhutdinov & Murray, which scales W v + b by t with z free? At a
small t the chains' v is still noise from the base, every unit's W_i. v is strongly negative
for noise, and the sum over z collapses onto z = 1 or 2: on an MNIST iRBM (449 units) the
chains' mean z fell from 96 at t = 0.003 to 5 at t = 0.1 and to 1.1 at t = 1. At t = 1,
(noise, z = 1) is a self-consistent mode that Gibbs sampling never leaves. Every chain ended
there with near-uniform weights (ESS 483 of 500), and AIS's ln Z was 8.4 nats below a certain
lower bound, with nothing in its diagnostics to show it.

With z pinned at K, the path is a plain RBM's (K units), which does not collapse. Releasing z
at t = 1 then lets the chains spread over z. K = n_hidden: the pinned model then holds every
unit's factor 1 + e^{W_i. v + b_i}, so no mode of the model lacks one. Pinned at the data's
mean z (143) instead, the same model's ln Z came out 4.5 nats lower (132.0 against 136.5 at
100 x 5,000): each AIS estimate is a stochastic lower bound of ln Z, so the higher is the
better one. At 500 x 5,000 the pinned path gives 137.7, 22 nats above that certain bound.
Neither path always wins: on an MNIST oRBM the pinned path's ln Z came out 5.5 nats below the
linear one's (both with few effective chains), so evaluate both where a number matters.

The release is the costly part: its weights change only through the chains' z, and at small
kappa the z spread and the v modes must follow. kappa = kappa_max (1 - r)^3 over the release
(r from 0 to 1) spends most temperatures at small kappa. On a small trained oRBM (10 units,
200 chains x 3,000 temperatures) the spread of ln Z-hat over 10 seeds was 0.06 nats against
0.10 for a linear kappa from 20 (the linear path: 0.01).
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional

from .. import kernels
from ._annealing import UniformSource
from ._base import index_from_cdf
from ._bipartite import BipartitePath


class PinnedPath(BipartitePath):
    """t <= s: f_t(v) = exp(v^T c_u + sum_{i<=K} softplus(u (W_i. v + b_i)) - beta softplus(u b_i)),
    u = t / s (z pinned at K); t > s: f_t(v) = exp(v^T c) sum_z exp(-F(v, z) - kappa |z - K|),
    kappa = kappa_max ((1 - t) / (1 - s))^3 (z released, down to the model at t = 1).

    c_u = c0 + u (c - c0), shapes (n_visible,). The step from s (pinned) to the first t > s
    multiplies f by sum_z exp(-F(v, z) + F(v, K) - kappa_max |z - K|) >= 1: a valid AIS step, as
    is any pair of unnormalized densities on the same v.

    Parameters
    ----------
    model : OrderedRBM or InfiniteRBM
    base_visible_bias : Tensor (n_visible,)
    pin : int in 1..n_hidden
        K, the z held during the coupling's anneal.
    release_fraction : float in (0, 1)
        1 - s, the share of the schedule spent releasing z.
    kappa_max : float
        Pin strength (nats per unit of |z - K|) at the start of the release.
    """

    # While z is pinned a step is a plain RBM's over the K units, and once released the
    # ordered families' z step at two tilts: both (the release on the CPU only), and every
    # visible draw, run on irbm.kernels where they can (another random stream); the one step
    # across the release is eager.
    fused_steps = True

    def __init__(self, model, base_visible_bias, pin: int, *, release_fraction: float = 0.25,
                 kappa_max: float = 5.0):
        if not 1 <= int(pin) <= model.n_hidden:
            raise ValueError(f"pin must lie in 1..{model.n_hidden}, got {pin}")
        if not 0.0 < release_fraction < 1.0 or not kappa_max > 0.0:
            raise ValueError("release_fraction must lie in (0, 1) and kappa_max be > 0")
        self.pin, self.split, self.kappa_max = int(pin), 1.0 - release_fraction, float(kappa_max)
        self.penalties = {}
        self.description = (f"pinned: z = {self.pin} while coupling, released over the last "
                            f"{release_fraction:.0%} of temperatures")
        super().__init__(model, base_visible_bias)

    def _log_hidden_base(self) -> float:
        """Every pinned unit contributes softplus(0) - beta softplus(0) at u = 0."""
        return self.pin * math.log(2.0) - self._penalty(0.0)

    # ------------------------------------------------------------------ schedule
    def _coupling(self, t: float) -> float:
        return min(t / self.split, 1.0)

    def _kappa(self, t: float) -> float:
        """Pin strength at t: inf while coupling, then down to 0 at t = 1, cubically."""
        if t <= self.split:
            return math.inf
        return self.kappa_max * ((1.0 - t) / (1.0 - self.split)) ** 3

    def _units(self, *ts) -> int:
        """Units whose preactivation the step needs: the pinned K while z is pinned."""
        return self.pin if all(t <= self.split for t in ts) else self.model.n_hidden

    # ------------------------------------------------------------------ densities
    def _penalty(self, u) -> float:
        """sum_{i<=K} beta softplus(u b_i): a constant per u, summed once in float64."""
        if u not in self.penalties:
            b = self.model.b.detach()[:self.pin].double()
            self.penalties[u] = float(self.model._penalties_from(b * u).sum())
        return self.penalties[u]

    def _pinned_log(self, preactivation, u):
        """sum_{i<=K} softplus(u (W_i. v + b_i)) - beta softplus(u b_i), (N,) float64."""
        pinned = functional.softplus(preactivation[:, :self.pin] * u).sum(1)
        return pinned.double() - self._penalty(u)

    def _released_columns(self, preactivation):
        """-F(v, z) - v^T c for every z column (N, n_columns), at full coupling."""
        return self.model._log_z_weights_from(None, preactivation, self.model.b.detach())

    def _visible_bias(self, t):
        return torch.add(self.base_bias, self.visible_shift, alpha=self._coupling(t))

    def log_unnormalized(self, v, t):
        return self.log_unnormalized_many(v, (t,))[0]

    @torch.no_grad()
    def log_unnormalized_many(self, v, ts):
        model = self.model
        v = v.to(model.dtype)
        preactivation = model._hidden_preactivation(v)
        columns = None  # the released z columns, computed once if any t needs them
        values = []
        for t in ts:
            kappa = self._kappa(t)
            if math.isinf(kappa):
                hidden = self._pinned_log(preactivation, self._coupling(t))
            else:
                if columns is None:
                    columns = self._released_columns(preactivation).double()
                hidden = torch.logsumexp(columns + self.model._pin_offsets(kappa, self.pin), 1)
            values.append((v @ self._visible_bias(t)).double() + hidden)
        return torch.stack(values)

    # ------------------------------------------------------------------ chains
    def start(self, visible, uniforms: UniformSource):
        model, n_chains = self.model, visible.shape[0]
        self.visible = visible.to(model.device, model.dtype).contiguous().clone()
        self.visible_uniform = torch.empty_like(self.visible)
        self.draw_visible = uniforms.filler(self.visible_uniform)
        self.hidden_uniform = {n: torch.empty(n_chains, n, dtype=model.dtype, device=model.device)
                               for n in {self.pin, model.n_hidden}}
        self.draw_hidden = {n: uniforms.filler(buffer) for n, buffer in self.hidden_uniform.items()}
        self.z_uniform = torch.empty(n_chains, 1, dtype=model.dtype, device=model.device)
        self.draw_z = uniforms.filler(self.z_uniform)
        self.unit_index = torch.arange(model.n_hidden, device=model.device)
        self.activation = torch.empty_like(self.visible)
        self.philox = self._kernel_stream(uniforms)
        # The release's fused step has no CUDA version: there it stays eager.
        self.fused_release = self.philox is not None and self.visible.device.type == "cpu"
        self.released_penalties = model._penalties_from(model.b.detach())
        self.log_tail = model._log_tail()

    def _log_ratio(self, preactivation, t_from, t_to):
        """(ln f_{t_to} - ln f_{t_from} without the visible term (n_chains,) float64, the
        released columns at t_to shifted by their row maximum, or None when z is pinned at t_to).

        Between two pinned temperatures the units are differenced before summing, and between two
        released ones the columns are shifted by their maximum first: either way the large common
        part cancels before float32 rounds it (hundreds to thousands of nats on trained models)."""
        u_from, u_to = self._coupling(t_from), self._coupling(t_to)
        kappa_from, kappa_to = self._kappa(t_from), self._kappa(t_to)
        if math.isinf(kappa_from) and math.isinf(kappa_to):
            part = preactivation[:, :self.pin]
            gains = functional.softplus(part * u_to).sub_(functional.softplus(part * u_from))
            return gains.sum(1).double() - (self._penalty(u_to) - self._penalty(u_from)), None
        columns = self._released_columns(preactivation)
        top = columns.amax(1, keepdim=True)
        shifted = columns.sub_(top)

        def log_f(kappa, u):
            if math.isinf(kappa):
                return self._pinned_log(preactivation, u) - top.squeeze(1).double()
            return torch.logsumexp(shifted + self.model._pin_offsets(kappa, self.pin), 1).double()

        delta = log_f(kappa_to, u_to) - log_f(kappa_from, u_from)
        return delta, None if math.isinf(kappa_to) else \
            shifted.add_(self.model._pin_offsets(kappa_to, self.pin))

    @torch.no_grad()
    def step(self, t_from, t_to):
        model, n_units = self.model, self._units(t_from, t_to)
        weight = model.W.detach()[:n_units]
        preactivation = torch.addmm(model.b.detach()[:n_units], self.visible, weight.t())
        u_from, u = self._coupling(t_from), self._coupling(t_to)
        if self.philox is not None and max(t_from, t_to) <= self.split:
            # Pinned on both sides: n_units is K, and the step is an annealed RBM layer.
            hidden, gains = kernels.annealed_bernoulli(preactivation, u_from, u, self.philox)
            delta = gains.double() - (self._penalty(u) - self._penalty(u_from))
        elif self.fused_release and min(t_from, t_to) > self.split:
            delta, hidden = self._released_hidden_step(preactivation, t_from, t_to)
        else:
            delta, hidden = self._eager_hidden_step(preactivation, t_from, t_to)
        if self.anneal_visible:
            delta += (u - u_from) * (self.visible @ self.visible_shift).double()
        torch.addmm(self._visible_bias(t_to), hidden, weight, alpha=u, out=self.activation)
        if self.philox is not None:
            kernels.bernoulli_from_logits(self.activation, self.philox, out=self.visible)
        else:
            torch.lt(self.draw_visible(), self.activation.sigmoid_(), out=self.visible)
        return delta

    def _released_hidden_step(self, preactivation, t_from, t_to):
        """`_eager_hidden_step` between two released temperatures, fused: one set of columns,
        tilted by -kappa |z - K| at each end (`_pin_offsets`), so their rounding cancels."""
        kappa_from, kappa_to = self._kappa(t_from), self._kappa(t_to)
        tilt_to = self.model._pin_offsets(kappa_to, self.pin)
        # One temperature (tempering's sweeps, RAISE's first transition): one tilt, one pass.
        tilt_from = tilt_to if kappa_from == kappa_to else \
            self.model._pin_offsets(kappa_from, self.pin)
        hidden, delta = kernels.released_hidden(preactivation, self.released_penalties,
                                                self.log_tail, tilt_from, tilt_to, self.philox)
        return delta, hidden

    def _eager_hidden_step(self, preactivation, t_from, t_to):
        """(ln f_{t_to} - ln f_{t_from} without the visible term (n_chains,), h (n_chains,
        n_units) drawn at t_to, with z drawn first once it is released)."""
        delta, columns = self._log_ratio(preactivation, t_from, t_to)
        uniform = self.draw_hidden[preactivation.shape[1]]()
        if columns is None:  # pinned: units past K stay off (a uniform of 1 never wins)
            uniform[:, self.pin:] = 1.0
        else:  # released: z drawn by inverting the CDF of P(z | v) at t_to
            cdf = columns.sub_(columns.amax(1, keepdim=True)).exp_().cumsum_(1)
            last_unit = index_from_cdf(cdf, self.draw_z())  # z - 1
            uniform.masked_fill_(self.unit_index > last_unit, 1.0)
        hidden = torch.lt(uniform, torch.sigmoid(preactivation * self._coupling(t_to)))
        return delta, hidden.to(self.model.dtype)
