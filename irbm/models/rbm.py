"""The classic binary restricted Boltzmann machine (paper section 2)."""

from __future__ import annotations

import torch
from torch.nn import functional

from .. import kernels
from ._base import HiddenState, bernoulli
from ._bipartite import BipartiteModel, BipartitePath
from ._registry import register_family


@register_family
class RBM(BipartiteModel):
    """E(v, h) = -h^T W v - v^T c - h^T b over v in {0,1}^n_visible, h in {0,1}^n_hidden.

    Parameters
    ----------
    n_visible : int
    n_hidden : int, default 500
    dtype, device : torch dtype and device of the parameters.
    generator : torch.Generator, optional
        Draws the initial W ~ N(0, 0.01^2) (biases start at zero); default: seed 0.
    """

    family = "rbm"
    display_name = "RBM"

    def __init__(self, n_visible, n_hidden=500, *, dtype=torch.float32, device=None,
                 generator=None):
        super().__init__(n_visible, n_hidden, dtype=dtype, device=device, generator=generator)

    def energy(self, v, h) -> torch.Tensor:
        """E(v, h) = -h^T W v - v^T c - h^T b, shape (N,)."""
        v, h = self.check_visible(v), self.check_hidden(h)
        if v.shape[0] != h.shape[0]:
            raise ValueError(f"v has {v.shape[0]} rows but h has {h.shape[0]}")
        return -(h * self._hidden_preactivation(v)).sum(1) - v @ self.c

    def _hidden_log_sum(self, preactivation, hidden_bias):
        """L = sum_i softplus(W_i. v + b_i), shape (N,); b enters only through W v + b."""
        return functional.softplus(preactivation).sum(1)

    def _mean_hiddens(self, v):
        """P(h_i = 1 | v) = sigmoid(W_i. v + b_i), shape (N, n_hidden)."""
        return torch.sigmoid(self._hidden_preactivation(v))

    def _sample_hidden_from(self, preactivation, hidden_bias, generator, z=None):
        if z is not None:
            raise ValueError("an RBM has no z")
        if kernels.usable(generator, preactivation):
            return HiddenState(kernels.bernoulli_from_logits(preactivation, generator))
        return HiddenState(bernoulli(torch.sigmoid(preactivation), generator))

    def _n_hidden_terms(self) -> int:
        return 2**self.n_hidden

    def _hidden_free_energy(self, h):
        """G(h) = -h^T b - sum_j softplus(c_j + (h W)_j), shape (M,)."""
        return self._hidden_rest(h) - self._visible_sum_out(h)

    def _hidden_rest(self, h):
        """-h^T b, shape (M,): G(h) without the visible units' softplus terms."""
        return -(h @ self.b)

    @torch.no_grad()
    def weighted_gradients(self, v, row_weights, generator=None):
        """Weighted sums of dF/dW = -sigmoid(Wv+b) v^T, dF/db = -sigmoid(Wv+b), dF/dc = -v
        (paper eqs. 9-11). v: (N, n_visible), row_weights: (N,)."""
        # The sign goes on the (N, K) factor rather than on the (K, D) product.
        weighted_h = torch.sigmoid(self._hidden_preactivation(v)).mul_(
            row_weights.neg().unsqueeze(1))
        gradients = {"W": torch.mm(weighted_h.t(), v), "b": weighted_h.sum(0),
                     "c": -(row_weights @ v)}
        return gradients, None

    def annealing_path(self, base_visible_bias, *, kind=None):
        self.check_ais_path(kind)
        return _RBMPath(self, base_visible_bias)


class _RBMPath(BipartitePath):
    """The RBM's path with the hidden step fused on preallocated buffers."""

    def _start_hidden(self, n_chains, buffer, uniforms):
        self.scaled, self.work, self.hidden, self.hidden_uniform = (
            buffer(n_chains, self.model.n_hidden) for _ in range(4))
        self.draw_hidden = uniforms.filler(self.hidden_uniform)

    def _hidden_step(self, t_from, t_to):
        if self.philox is not None:
            hidden, gains = kernels.annealed_bernoulli(self.preactivation, t_from, t_to,
                                                       self.philox)
            return gains, hidden
        # sum_i softplus(t x_i) - softplus(t' x_i), differenced per unit before summing so that
        # float32 keeps the precision of the small per-step increments.
        torch.mul(self.preactivation, t_to, out=self.scaled)
        gains = functional.softplus(self.scaled)
        gains -= functional.softplus(torch.mul(self.preactivation, t_from, out=self.work))
        torch.lt(self.draw_hidden(), torch.sigmoid(self.scaled, out=self.work), out=self.hidden)
        return gains.sum(1), self.hidden
