"""Parameter updates: SGD and ADAGRAD, L2 weight decay, and L1 as a proximal soft-threshold.

The update works on named tensors rather than torch.optim so that its state can follow a model
whose hidden layer grows and shrinks (the iRBM): `sync` pads or truncates the per-element
accumulators to the current parameter shapes, new units starting with empty accumulators.
"""

from __future__ import annotations

import torch

OPTIMIZERS = ("adagrad", "sgd")
# Parameters that weight decay applies to (not the visible biases c, as in the paper's code).
DECAYED = ("W", "b")


class Optimizer:
    """theta <- prox_{step * l1}(theta - step * (grad + l2 theta)), step per element.

    SGD: step = lr. ADAGRAD: step = lr / (eps + sqrt(sum of past squared gradients)), so every
    hidden unit gets its own decaying learning rate (the paper trains oRBMs and iRBMs this way).

    Parameters
    ----------
    kind : {"adagrad", "sgd"}
    lr : float
    l1, l2 : float
        Regularization factors on W and b.
    epsilon : float
        ADAGRAD's epsilon (the paper: 1e-6).
    """

    def __init__(self, kind="adagrad", *, lr=0.03, l1=0.0, l2=0.0, epsilon=1e-6):
        if kind not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {kind!r}")
        for name, value in (("lr", lr), ("l1", l1), ("l2", l2), ("epsilon", epsilon)):
            if not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        if lr == 0:
            raise ValueError("lr must be > 0")
        self.kind, self.lr, self.l1, self.l2, self.epsilon = kind, lr, l1, l2, epsilon
        self.accumulators: dict[str, torch.Tensor] = {}

    def sync(self, parameters: dict[str, torch.Tensor]):
        """Pad (with zeros) or truncate each accumulator along dim 0 to its parameter's shape."""
        if self.kind != "adagrad":
            return
        for name, parameter in parameters.items():
            old = self.accumulators.get(name)
            if old is None:
                self.accumulators[name] = torch.zeros_like(parameter)
            elif old.shape != parameter.shape:
                new = torch.zeros_like(parameter)
                rows = min(old.shape[0], parameter.shape[0])
                new[:rows] = old[:rows]
                self.accumulators[name] = new

    @torch.no_grad()
    def step(self, parameters: dict[str, torch.Tensor], gradients: dict[str, torch.Tensor]):
        """Update ``parameters`` in place from ``gradients`` (same names and shapes)."""
        self.sync(parameters)
        for name, parameter in parameters.items():
            gradient = gradients[name]
            decayed = name in DECAYED
            if decayed and self.l2:
                gradient = gradient + self.l2 * parameter
            if self.kind == "adagrad":
                accumulator = self.accumulators[name]
                accumulator.addcmul_(gradient, gradient)
                denominator = accumulator.sqrt().add_(self.epsilon)
                parameter.addcdiv_(gradient, denominator, value=-self.lr)
                if decayed and self.l1:
                    # The prox uses the same per-element step lr / denominator; an element that
                    # never had a gradient keeps the plain rate rather than lr / epsilon, which
                    # would wipe it at once.
                    denominator.masked_fill_(accumulator == 0, 1.0)
                    soft_threshold_(parameter, denominator.reciprocal_().mul_(self.lr * self.l1))
            else:
                parameter.sub_(gradient, alpha=self.lr)
                if decayed and self.l1:
                    soft_threshold_(parameter, self.lr * self.l1)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: tensor.clone() for name, tensor in self.accumulators.items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]):
        self.accumulators = {name: tensor.clone() for name, tensor in state.items()}


def soft_threshold_(parameter: torch.Tensor, threshold):
    """theta <- sign(theta) max(|theta| - threshold, 0), in place: exact zeros for L1.

    Computed as theta - clamp(theta, -threshold, threshold): where |theta| <= threshold this is
    theta - theta, exactly 0. ``threshold`` is a float or a tensor shaped like ``parameter``.
    """
    if isinstance(threshold, torch.Tensor):
        parameter.sub_(torch.maximum(torch.minimum(parameter, threshold), threshold.neg()))
    else:
        parameter.sub_(parameter.clamp(-threshold, threshold))
