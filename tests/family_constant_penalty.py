"""A model family defined outside the package, in one file: the ordered RBM with the constant
per-unit penalty beta * softplus(0) = beta ln 2 (a variant in the authors' code) instead of
beta * softplus(b_i).

It overrides two methods of `irbm.OrderedRBM` and registers itself; nothing under `irbm/` knows
about it, yet training, checkpoints, AIS and the CLI work for it (tests/test_family_contract.py).
"""

import math

import torch

from irbm.models import OrderedRBM, register_family


@register_family
class ConstantPenaltyOrderedRBM(OrderedRBM):
    """E(v, h, z) = -v^T c - sum_{i<=z} (h_i (W_i. v + b_i) - beta ln 2)."""

    family = "orbm-constant"
    display_name = "oRBM (constant penalty)"

    def _penalties_from(self, hidden_bias):
        """beta ln 2 for every unit, shape (K,), whatever the biases."""
        return torch.full_like(hidden_bias, math.log(2.0)) * self.beta

    def _penalty_gradient(self):
        return torch.zeros_like(self.b)
