"""The infinite RBM (paper section 4): the ordered RBM in the limit of infinitely many units.

Only the first l = n_hidden units have non-zero parameters. Each unit beyond l has W_i. = 0 and
b_i = 0, so it multiplies the sum over z by r = exp((1 - beta) ln 2) = 2**(1 - beta), and the
whole tail z > l sums to exp(-F(v, l)) r / (1 - r): finite as long as beta > 1.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._base import log_geometric_tail
from .ordered import OrderedRBM


class InfiniteRBM(OrderedRBM):
    """E(v, h, z) = -v^T c - sum_{i<=z} (h_i (W_i. v + b_i) - beta softplus(b_i)), z in 1..inf,
    with W_i. = 0 and b_i = 0 for every i > l = n_hidden.

    Parameters
    ----------
    n_visible : int
    n_hidden : int
        Current number l of trained units (the authors start at 1).
    beta : float, > 1
        Penalty scale; beta <= 1 makes the partition function diverge.
    max_hidden : int or None
        Cap on growth (the authors used 20,000).
    dtype, device : torch dtype and device of the parameters.

    Notes
    -----
    In ``log_p_z_given_v`` and in sampled hidden states, the category ``z = n_hidden + 1`` stands
    for the whole tail z > l. Units beyond l have zero weights, so v given (h, z) does not depend
    on where in the tail z fell: reporting the tail as one category keeps Gibbs sampling exact.
    """

    family = "irbm"

    def __init__(self, n_visible, *, n_hidden=1, beta=1.01, max_hidden=None,
                 dtype=torch.float32, device=None):
        if not float(beta) > 1.0:
            raise ValueError(
                f"beta must be > 1 for the infinite RBM (got {beta}): with beta <= 1 the "
                "geometric series over the units beyond l, hence the partition function, diverges")
        if max_hidden is not None and int(max_hidden) < int(n_hidden):
            raise ValueError(f"max_hidden ({max_hidden}) is smaller than n_hidden ({n_hidden})")
        # The authors start from zero weights: units are trained in turn as the model grows.
        super().__init__(n_visible, n_hidden, beta=beta, dtype=dtype, device=device, init_std=0)
        self.max_hidden = None if max_hidden is None else int(max_hidden)
        self._log_tail = log_geometric_tail(self.beta)

    def config(self) -> dict:
        return {**super().config(), "max_hidden": self.max_hidden}

    def _z_range(self):
        return 1, None

    def _energy_beyond(self, z):
        """Each selected unit beyond l costs beta softplus(0) = beta ln 2 and gains nothing."""
        beyond = (z - self.n_hidden).clamp(min=0).to(self.W.dtype)
        return beyond * self.beta * math.log(2.0)

    def _append_tail(self, columns):
        """Add the column log sum_{z>l} exp(-F(v, z)) = -F(v, l) + log(r / (1 - r))."""
        return torch.cat([columns, columns[:, -1:] + self._log_tail], 1)

    # ------------------------------------------------------------------ size changes
    @property
    def can_grow(self) -> bool:
        return self.max_hidden is None or self.n_hidden < self.max_hidden

    def grow(self, n_units: int = 1) -> int:
        """Append ``n_units`` units with zero parameters (the distribution is unchanged) and
        return how many were added (fewer when ``max_hidden`` is reached)."""
        if self.max_hidden is not None:
            n_units = min(n_units, self.max_hidden - self.n_hidden)
        if n_units <= 0:
            return 0
        with torch.no_grad():
            self.W = nn.Parameter(torch.cat([self.W, self.W.new_zeros(n_units, self.n_visible)]))
            self.b = nn.Parameter(torch.cat([self.b, self.b.new_zeros(n_units)]))
        return n_units

    def adapt_size(self, largest_z) -> int:
        """The paper's growth heuristic: a z sampled beyond l is clamped to l + 1, which adds one
        unit (with zero parameters) unless ``max_hidden`` is reached."""
        if largest_z is not None and int(largest_z) > self.n_hidden:
            return self.grow(1)
        return 0

    def prune(self) -> int:
        return self.shrink()

    def shrink(self) -> int:
        """Remove trailing units whose weights and bias are all exactly zero (keeping at least
        one unit); the distribution is unchanged. Returns the number removed."""
        with torch.no_grad():
            alive = (self.W != 0).any(1) | (self.b != 0)
            nonzero = torch.nonzero(alive).flatten()
            keep = max(1, int(nonzero[-1]) + 1 if len(nonzero) else 1)
            removed = self.n_hidden - keep
            if removed > 0:
                self.W = nn.Parameter(self.W[:keep].clone())
                self.b = nn.Parameter(self.b[:keep].clone())
        return removed

    def resize(self, n_hidden: int):
        """Set the number of trained units (used when loading a checkpoint)."""
        if n_hidden > self.n_hidden:
            self.grow(n_hidden - self.n_hidden)
        elif n_hidden < self.n_hidden:
            with torch.no_grad():
                self.W = nn.Parameter(self.W[:n_hidden].clone())
                self.b = nn.Parameter(self.b[:n_hidden].clone())
