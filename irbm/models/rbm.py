"""The classic binary restricted Boltzmann machine (paper section 2)."""

from __future__ import annotations

import torch
from torch.nn import functional

from ._base import EnergyModel, HiddenState, binary_configurations


class RBM(EnergyModel):
    """E(v, h) = -h^T W v - v^T c - h^T b over v in {0,1}^n_visible, h in {0,1}^n_hidden.

    Parameters
    ----------
    n_visible, n_hidden : int
    dtype, device : torch dtype and device of the parameters.
    generator : torch.Generator, optional
        Draws the initial W ~ N(0, 0.01^2) (biases start at zero); default: seed 0.
    """

    family = "rbm"

    def energy(self, v, h) -> torch.Tensor:
        """E(v, h) = -h^T W v - v^T c - h^T b, shape (N,)."""
        v, h = self._check_visible(v), self._check_hidden(h)
        if v.shape[0] != h.shape[0]:
            raise ValueError(f"v has {v.shape[0]} rows but h has {h.shape[0]}")
        return -(h * self._hidden_preactivation(v)).sum(1) - v @ self.c

    def _free_energy(self, v):
        """F(v) = -v^T c - sum_i softplus(W_i. v + b_i), shape (N,)."""
        return self._free_energy_from(v @ self.c, self._hidden_preactivation(v), self.b)

    def _free_energy_from(self, visible_term, preactivation, hidden_bias):
        """F from its parts: v^T c (N,), W v + b (N, K); b enters only through W v + b."""
        return -visible_term - functional.softplus(preactivation).sum(1)

    def mean_hiddens(self, v) -> torch.Tensor:
        """P(h_i = 1 | v) = sigmoid(W_i. v + b_i), shape (N, n_hidden)."""
        return torch.sigmoid(self._hidden_preactivation(self._check_visible(v)))

    def _sample_hidden(self, v, generator):
        return self._sample_hidden_from(self._hidden_preactivation(v), self.b, generator)

    def _sample_hidden_from(self, preactivation, hidden_bias, generator):
        return HiddenState(self._bernoulli(torch.sigmoid(preactivation), generator))

    def _n_hidden_terms(self) -> int:
        return 2**self.n_hidden

    def _log_partition_by_hidden(self):
        """log Z = logsumexp_h [h^T b + sum_j softplus(c_j + (h W)_j)]."""
        partials = [torch.logsumexp(h @ self.b + self._visible_sum_out(h), 0)
                    for h in binary_configurations(self.n_hidden, self.W.dtype, self.W.device)]
        return torch.logsumexp(torch.stack(partials), 0)

    def _free_energy_gradients(self, v, row_weights, generator=None):
        """Weighted sums of dF/dW = -sigmoid(Wv+b) v^T, dF/db = -sigmoid(Wv+b), dF/dc = -v
        (paper eqs. 9-11). v: (N, n_visible), row_weights: (N,)."""
        with torch.no_grad():
            weighted_h = torch.sigmoid(self._hidden_preactivation(v)) * row_weights.unsqueeze(1)
            gradients = {"W": -(weighted_h.t() @ v), "b": -weighted_h.sum(0),
                         "c": -(row_weights @ v)}
            return gradients, None
