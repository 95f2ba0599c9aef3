"""Parameter updates: SGD and ADAGRAD, L2 weight decay, and L1 as a proximal soft-threshold
(or, with ``regularization="authors"``, as the authors' code applies them).

The update works on a model's named parameters rather than torch.optim so that its state can
follow the hidden layer when it grows, shrinks or is permuted: `relayout_hidden` applies to the
accumulators (and to the parameters' running average, when one is kept) the same index as
`EnergyModel.relayout_hidden` to the parameters. Which parameters take L1/L2 and which follow
the hidden units comes from the model's `parameter_specs`.
"""

from __future__ import annotations

import copy

import torch

from . import kernels
from .models import EnergyModel, take_units

OPTIMIZERS = ("adagrad", "sgd")
AVERAGE_PREFIX = "average."
REGULARIZATIONS = ("proximal", "weights", "authors")
EPSILON_PLACEMENTS = ("outside", "inside")


class Optimizer:
    """theta <- prox_{step * l1}(theta - step * (grad + l2 theta)), step per element (the
    default convention; ``regularization="authors"`` changes the penalty terms).

    SGD: step = lr. ADAGRAD: step = lr / (eps + sqrt(G)), G the sum of past squared gradients
    (this one included), so every hidden unit gets its own decaying learning rate (the paper
    trains oRBMs and iRBMs this way); with ``epsilon_placement="inside"``, as in the authors'
    code, step = lr / sqrt(G + eps), which damps gradients far below sqrt(eps) (1e-3).

    Parameters
    ----------
    kind : {"adagrad", "sgd"}
    lr : float
    l1, l2 : float
        Regularization factors.
    epsilon : float
        ADAGRAD's epsilon (the paper: 1e-6).
    epsilon_placement : {"outside", "inside"}
        Where ADAGRAD's epsilon sits: added to sqrt(G) (irbm's) or to G under the root (the
        authors' code). The steps differ by more than 1% while G is below about 50 eps
        (sqrt(G) < 7e-3), i.e. for parameters whose gradients so far are tiny (new units,
        units that z rarely reaches).
    average : int
        Horizon H, in updates, of an exponential moving average of the parameters kept beside
        them (0: none): theta_bar <- theta_bar + (theta - theta_bar) / H after every step,
        starting from the parameters after the first step. Polyak-Ruppert averaging in its
        exponential form (Polyak & Juditsky 1992): an estimate of where the noisy iterates
        hover, which the training never uses; `averaged` returns it as a model. New hidden
        units enter it at 0 (the value an infinite RBM's unused units have); units pruned
        from the model leave it, whatever their average.
    regularization : {"proximal", "weights", "authors"}
        "proximal" (irbm's): L2 adds ``l2 * theta`` to the gradient and L1 soft-thresholds
        after the step, both on the parameters whose spec has ``decay`` (hidden weights and
        biases). "weights": the same on the coupling weights only, the biases free (under
        "proximal" L1 holds the hidden biases of the units an ordered model's data do not
        reach at exactly 0; under "weights" they move, so the iRBM, which prunes only units
        whose weights and bias are all zero, practically never shrinks). "authors" (the
        paper's code): the penalty ``2 l2 sum W^2`` adds ``4 l2 W`` to the gradient of the
        coupling weights only; L1 adds ``l1 sign(W)`` to it (a subgradient, inside ADAGRAD's
        accumulators) where the family's ``authors_l1`` is "subgradient", else
        soft-thresholds the decayed parameters as "proximal" does.
    """

    def __init__(self, kind="adagrad", *, lr=0.03, l1=0.0, l2=0.0, epsilon=1e-6,
                 regularization="proximal", epsilon_placement="outside", average=0):
        if kind not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {kind!r}")
        if regularization not in REGULARIZATIONS:
            raise ValueError(f"regularization must be one of {REGULARIZATIONS}, got "
                             f"{regularization!r}")
        if epsilon_placement not in EPSILON_PLACEMENTS:
            raise ValueError(f"epsilon_placement must be one of {EPSILON_PLACEMENTS}, got "
                             f"{epsilon_placement!r}")
        if epsilon_placement != "outside" and kind != "adagrad":
            raise ValueError(f"epsilon_placement {epsilon_placement!r} is ADAGRAD's; optimizer "
                             f"{kind!r} has no epsilon: use 'adagrad' or leave it 'outside'")
        for name, value in (("lr", lr), ("l1", l1), ("l2", l2), ("epsilon", epsilon)):
            if not (value >= 0 and value < float("inf")):
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")
        if lr == 0:
            raise ValueError("lr must be > 0")
        if isinstance(average, bool) or not isinstance(average, int) or average < 0:
            raise ValueError(f"average must be an integer >= 0 (a horizon in updates; 0: no "
                             f"average), got {average!r}")
        if kind == "adagrad" and epsilon == 0:
            raise ValueError("ADAGRAD's epsilon must be > 0 (the paper uses 1e-6): it keeps the "
                             "first step of a parameter with a zero gradient finite")
        self.kind, self.lr, self.l1, self.l2, self.epsilon = kind, lr, l1, l2, epsilon
        self.regularization, self.epsilon_placement = regularization, epsilon_placement
        self.accumulators: dict[str, torch.Tensor] = {}
        self.average = average
        self.averages: dict[str, torch.Tensor] = {}

    def sync(self, model: EnergyModel):
        """Create missing accumulators (zeros) and check the others match their parameters."""
        if self.kind != "adagrad":
            return
        for name, parameter in model.named_parameters():
            old = self.accumulators.get(name)
            if old is None:
                self.accumulators[name] = torch.zeros_like(parameter)
            elif old.shape != parameter.shape:
                raise ValueError(f"optimizer state for {name} has shape {tuple(old.shape)}, the "
                                 f"parameter {tuple(parameter.shape)}: change hidden layouts "
                                 "through Trainer.relayout_hidden")

    def relayout_hidden(self, model: EnergyModel, index: torch.Tensor):
        """Move per-unit accumulators with their units (`EnergyModel.relayout_hidden`'s index);
        new units (index < 0) start with empty accumulators."""
        for name, spec in model.parameter_specs.items():
            for state in (self.accumulators, self.averages):
                if spec.per_unit and name in state:
                    state[name] = take_units(state[name], index)

    @torch.no_grad()
    def new_units_like_peers(self, model: EnergyModel, index: torch.Tensor):
        """G[k] = mean over the other units j of G[j], for every unit k just grown
        (``index[k] < 0``) and every per-unit accumulator G (n_hidden, ...): a new unit's first
        steps then have its peers' size rather than lr per element (the trainer's
        ``new_unit="peers"``). Nothing to do without ADAGRAD or without older units."""
        new = torch.as_tensor(index) < 0
        if self.kind != "adagrad" or not new.any() or new.all():
            return
        for name, spec in model.parameter_specs.items():
            if spec.per_unit and name in self.accumulators:
                accumulator = self.accumulators[name]
                rows = new.to(accumulator.device)
                accumulator[rows] = accumulator[~rows].mean(0)

    @torch.no_grad()
    def step(self, model: EnergyModel, gradients: dict[str, torch.Tensor]):
        """Update the parameters of ``model`` in place from ``gradients`` (one per parameter)."""
        self.sync(model)
        for name, parameter in model.named_parameters():
            gradient, proximal = self._penalized(model, name, parameter, gradients[name])
            if self.kind == "adagrad" and self._fusable(parameter, gradient,
                                                         self.accumulators[name]):
                # The same step fused in one pass over the parameter (the eager passes below
                # are its reference: the tests check they agree bit for bit but for torch's
                # square root, which is not correctly rounded).
                kernels.adagrad_step(parameter.detach(), gradient, self.accumulators[name],
                                     lr=self.lr,
                                     l1=self.l1 if proximal else 0.0, epsilon=self.epsilon,
                                     inside=self.epsilon_placement == "inside")
            elif self.kind == "adagrad":
                accumulator = self.accumulators[name]
                accumulator.addcmul_(gradient, gradient)
                denominator = self._denominator(name, accumulator)
                parameter.addcdiv_(gradient, denominator, value=-self.lr)
                if proximal and self.l1:
                    # The prox uses the same per-element step lr / denominator; an element that
                    # never had a gradient keeps the plain rate rather than lr / epsilon (or
                    # lr / sqrt(epsilon), the authors'), which would wipe it at once.
                    denominator.masked_fill_(accumulator == 0, 1.0)
                    soft_threshold_(parameter, denominator.reciprocal_().mul_(self.lr * self.l1))
            else:
                parameter.sub_(gradient, alpha=self.lr)
                if proximal and self.l1:
                    soft_threshold_(parameter, self.lr * self.l1)
        if self.average:
            self._update_averages(model)

    def _update_averages(self, model: EnergyModel):
        """theta_bar <- theta_bar + (theta - theta_bar) / H per parameter (theta_bar = theta at
        the first step, or the first after a checkpoint that had no average), in float64: at
        long horizons a float32 average's increments fall below half its ulp."""
        for name, parameter in model.named_parameters():
            mean = self.averages.get(name)
            if mean is None:
                self.averages[name] = parameter.detach().to(torch.float64, copy=True)
            elif mean.shape != parameter.shape:
                raise ValueError(f"the average of {name} has shape {tuple(mean.shape)}, the "
                                 f"parameter {tuple(parameter.shape)}: change hidden layouts "
                                 "through Trainer.relayout_hidden")
            else:
                mean.lerp_(parameter.detach().to(torch.float64), 1.0 / self.average)

    def averaged(self, model: EnergyModel) -> EnergyModel | None:
        """A copy of ``model`` holding the running average of its parameters (see
        ``average``), or None when none is kept (``average`` 0) or none has been taken yet."""
        if not self.average or not self.averages:
            return None
        averaged = copy.deepcopy(model)
        with torch.no_grad():
            for name, parameter in averaged.named_parameters():
                parameter.copy_(self.averages[name])
        return averaged

    @staticmethod
    def _fusable(parameter, gradient, accumulator) -> bool:
        """Whether `kernels.adagrad_step` can take this step: three tensors of one shape and
        dtype (the eager step also broadcasts a smaller gradient) that `kernels.runs_on`."""
        return (gradient.shape == parameter.shape == accumulator.shape
                and gradient.dtype == parameter.dtype == accumulator.dtype
                and parameter.device.type == "cpu"  # numba's; on CUDA the eager step runs
                and kernels.runs_on(parameter.detach(), gradient, accumulator))

    def _denominator(self, name, accumulator):
        """sqrt(G) + eps, or sqrt(G + eps) (``epsilon_placement="inside"``), in a reused
        buffer shaped like the parameter."""
        denominator = self._scratch(name, accumulator)
        if self.epsilon_placement == "inside":
            return torch.add(accumulator, self.epsilon, out=denominator).sqrt_()
        return torch.sqrt(accumulator, out=denominator).add_(self.epsilon)

    def _penalized(self, model, name, parameter, gradient):
        """The gradient of parameter ``name`` with its penalties' gradients added (same shape
        as the parameter), and whether the L1 soft-threshold follows the step (bool)."""
        spec = model.parameter_specs[name]
        if self.regularization in ("proximal", "weights"):
            decayed = spec.coupling if self.regularization == "weights" else spec.decay
            if decayed and self.l2:
                gradient = gradient + self.l2 * parameter
            return gradient, decayed
        if spec.coupling and self.l2:
            gradient = gradient + (4 * self.l2) * parameter
        subgradient = model.authors_l1 == "subgradient"
        if spec.coupling and self.l1 and subgradient:
            gradient = gradient + self.l1 * torch.sign(parameter)
        return gradient, spec.decay and not subgradient

    def _scratch(self, name: str, like: torch.Tensor) -> torch.Tensor:
        """A reused buffer shaped like ``like``: a fresh (K, D) tensor per step costs page
        faults comparable to the arithmetic on it."""
        buffers = self.__dict__.setdefault("_buffers", {})
        buffer = buffers.get(name)
        if buffer is None or buffer.shape != like.shape or buffer.dtype != like.dtype \
                or buffer.device != like.device:
            buffer = buffers[name] = torch.empty_like(like)
        return buffer

    def state_dict(self) -> dict[str, torch.Tensor]:
        """ADAGRAD's accumulators by parameter name, and the averages as ``average.NAME``."""
        state = {name: tensor.clone() for name, tensor in self.accumulators.items()}
        state.update({AVERAGE_PREFIX + name: tensor.clone()
                      for name, tensor in self.averages.items()})
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor]):
        """The state of `state_dict`; averages are dropped when this optimizer keeps none (a
        run resumed with ``average`` 0 must not go on exporting a frozen one)."""
        self.accumulators = {name: tensor.clone() for name, tensor in state.items()
                             if not name.startswith(AVERAGE_PREFIX)}
        # float64 whatever was saved (the first builds kept averages in the model's dtype).
        self.averages = {name[len(AVERAGE_PREFIX):]: tensor.to(torch.float64, copy=True)
                         for name, tensor in state.items()
                         if name.startswith(AVERAGE_PREFIX) and self.average}


def soft_threshold_(parameter: torch.Tensor, threshold):
    """theta <- sign(theta) max(|theta| - threshold, 0), in place: exact zeros for L1.

    Computed as theta - clamp(theta, -threshold, threshold): where |theta| <= threshold this is
    theta - theta, exactly 0. ``threshold`` is a float or a tensor shaped like ``parameter``.
    """
    if isinstance(threshold, torch.Tensor):
        parameter.sub_(torch.maximum(torch.minimum(parameter, threshold), threshold.neg()))
    else:
        parameter.sub_(parameter.clamp(-threshold, threshold))
