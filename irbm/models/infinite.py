"""The infinite RBM (paper section 4): the ordered RBM in the limit of infinitely many units.

Only the first l = n_hidden units have non-zero parameters. Each unit beyond l has W_i. = 0 and
b_i = 0, so it multiplies the sum over z by r = exp((1 - beta) ln 2) = 2**(1 - beta), and the
whole tail z > l sums to exp(-F(v, l)) r / (1 - r): finite as long as beta > 1.
"""

from __future__ import annotations

import math

import torch

from .._warn import warn_user
from ._registry import register_family
from .ordered import OrderedRBM


@register_family
class InfiniteRBM(OrderedRBM):
    """E(v, h, z) = -v^T c - sum_{i<=z} (h_i (W_i. v + b_i) - beta softplus(b_i)), z in 1..inf,
    with W_i. = 0 and b_i = 0 for every i > l = n_hidden.

    Parameters
    ----------
    n_visible : int
    n_hidden : int, default 1
        Current number l of trained units (the authors start at 1, with zero weights).
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
    The tail constant is kept until ``beta``'s buffer changes (assigning ``model.beta`` or
    ``load_state_dict`` writes it, either way bumping its version), so changing beta never
    leaves it stale, and ``load_state_dict`` resizes the model to the state's number of units.
    """

    family = "irbm"
    display_name = "iRBM"
    has_tail = True
    resizable = True
    # The authors' iRBM soft-thresholds W and b after the step (their RBM and oRBM add
    # lambda sign(W) to the gradient instead): pruning needs exact zeros.
    authors_l1 = "proximal"
    init_std = 0.0  # the authors start from zero weights: units are trained in turn as they grow

    def __init__(self, n_visible, n_hidden=1, *, beta=1.01, max_hidden=None,
                 dtype=torch.float32, device=None, generator=None):
        if max_hidden is not None:
            if isinstance(max_hidden, bool) or int(max_hidden) != max_hidden or max_hidden < 1:
                raise ValueError(f"max_hidden must be a positive integer or None, got "
                                 f"{max_hidden!r}")
            if int(max_hidden) < int(n_hidden):
                raise ValueError(f"max_hidden ({max_hidden}) is smaller than n_hidden "
                                 f"({n_hidden}): raise max_hidden, or start with fewer units")
        super().__init__(n_visible, n_hidden, beta=beta, dtype=dtype, device=device,
                         generator=generator)
        self.max_hidden = None if max_hidden is None else int(max_hidden)

    @classmethod
    def _checked_beta(cls, beta) -> float:
        beta = float(beta)
        if not (math.isfinite(beta) and beta > 1.0):
            raise ValueError(
                f"beta must be a finite number > 1 for the infinite RBM (got {beta}): with "
                "beta <= 1 the geometric series over the units beyond l, hence the partition "
                "function, diverges")
        return beta

    def config(self) -> dict:
        return {**super().config(), "max_hidden": self.max_hidden}

    def _z_range(self):
        return 1, None

    def _log_tail(self) -> torch.Tensor:
        """log(r / (1 - r)) with r = 2**(1 - beta): the mass of the units beyond l, relative to
        exp(-F(v, l)); a 0-d tensor (not to be modified in place)."""
        # Every hidden step needs it, and its five small ops cost a third of a 100-unit step's
        # glue: it is kept until beta's buffer changes (assignment and load_state_dict write it
        # in place, which bumps its version; .to() makes a new one), computed by the same ops.
        # (Writing through beta.data or beta.numpy() bypasses the version, as it does autograd's
        # checks: assign model.beta instead.)
        beta, key = self.beta, None
        if not torch.is_inference_mode_enabled():  # an inference tensor must not be kept
            try:
                key = (beta._version, beta.data_ptr(), beta.dtype, beta.device)
            except RuntimeError:  # a beta made in inference mode keeps no version: no cache
                key = None
        cached = self.__dict__.get("_log_tail_cache")
        if key is not None and cached is not None and cached[0] == key:
            return cached[1]
        log_r = (1.0 - beta) * math.log(2.0)
        value = log_r - torch.log(-torch.expm1(log_r))
        if key is not None:
            self.__dict__["_log_tail_cache"] = (key, value)
        return value

    def _pin_offsets(self, kappa: float, pin: int) -> torch.Tensor:
        """The units' -kappa |z - pin|, then the tail's: its column becomes
        log sum_{z>l} exp(-F(v, l)) (r e^-kappa)^(z-l) e^(-kappa (l - pin)), a geometric series
        of ratio r e^-kappa in place of r."""
        log_r = (1.0 - self.beta) * math.log(2.0)
        tilted = log_r - kappa
        offset = (tilted - math.log(-math.expm1(tilted)) - float(self._log_tail())
                  - kappa * (self.n_hidden - pin))
        return torch.cat([super()._pin_offsets(kappa, pin),
                          torch.tensor([offset], device=self.device, dtype=self.dtype)])

    def _energy_beyond(self, z):
        """Each selected unit beyond l costs beta softplus(0) = beta ln 2 and gains nothing."""
        beyond = (z - self.n_hidden).clamp(min=0).to(self.dtype)
        return beyond * self.beta * math.log(2.0)

    def _append_tail(self, columns):
        """Add the column log sum_{z>l} exp(-F(v, z)) = -F(v, l) + log(r / (1 - r))."""
        return torch.cat([columns, columns[:, -1:] + self._log_tail()], 1)

    # ------------------------------------------------------------------ size changes
    @property
    def can_grow(self) -> bool:
        return self.max_hidden is None or self.n_hidden < self.max_hidden

    def growth_layout(self, largest_z, *, at_last=False):
        """The paper's growth heuristic: a z sampled beyond l (``at_last``: at l or beyond, the
        authors' code's last category) is clamped to l + 1, which adds one unit with zero
        parameters (the distribution is unchanged) unless ``max_hidden`` is reached."""
        threshold = self.n_hidden if at_last else self.n_hidden + 1
        if largest_z is None or int(largest_z) < threshold:
            return None
        if not self.can_grow:
            # Silent, the cap would pass for the size the data asked for.
            warn_user(f"the infinite RBM would grow past max_hidden ({self.max_hidden}) "
                      "and is held there: its size is the cap, not the one training "
                      "would learn (raise max_hidden, --max-hidden, or leave it None, "
                      "without --max-hidden)")
            return None
        return torch.cat([torch.arange(self.n_hidden, device=self.device),
                          torch.tensor([-1], device=self.device)])

    def pruning_layout(self, *, at_most=None):
        """Drop trailing units whose weights and bias are all exactly zero, the last
        ``at_most`` at most (None: all; at least one unit is kept); interior zero units stay.
        The distribution is unchanged."""
        with torch.no_grad():
            alive = torch.nonzero((self.W != 0).any(1) | (self.b != 0)).flatten()
        keep = int(alive[-1]) + 1 if len(alive) else 1
        if at_most is not None:
            keep = max(keep, self.n_hidden - int(at_most))
        if keep >= self.n_hidden:
            return None
        return torch.arange(keep, device=self.device)

    def relayout_gradients(self, gradients, index):
        """After growth by one zero unit (old units in place, one new unit last) the
        distribution is unchanged, so the old units keep their gradients and the new unit takes
        ``gradients.appended`` (computed in the same pass); any other layout: None."""
        appended = getattr(gradients, "appended", None)
        index = torch.as_tensor(index)
        old = index.numel() - 1
        if appended is None or old < 1 or int(index[-1]) >= 0 or \
                gradients["b"].shape[0] != old or \
                not torch.equal(index[:old].cpu(), torch.arange(old)):
            return None
        return {name: torch.cat([gradient, appended[name]]) if self.parameter_specs[name].per_unit
                else gradient for name, gradient in gradients.items()}

    def relayout_hidden(self, index):
        index = torch.as_tensor(index)
        if self.max_hidden is not None and index.numel() > self.max_hidden:
            raise ValueError(f"the layout has {index.numel()} units, more than max_hidden "
                             f"({self.max_hidden})")
        super().relayout_hidden(index)

    def grow(self, n_units: int = 1) -> int:
        """Append ``n_units`` zero units (fewer at ``max_hidden``); returns how many."""
        if self.max_hidden is not None:
            n_units = min(n_units, self.max_hidden - self.n_hidden)
        if n_units > 0:
            self.relayout_hidden(torch.cat([torch.arange(self.n_hidden),
                                            torch.full((n_units,), -1)]))
        return max(n_units, 0)

    def shrink(self) -> int:
        """Remove trailing all-zero units (keeping one); returns the number removed."""
        layout = self.pruning_layout()
        if layout is None:
            return 0
        removed = self.n_hidden - layout.numel()
        self.relayout_hidden(layout)
        return removed
