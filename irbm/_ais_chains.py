"""The inner loop of AIS: a batch of chains annealed from the base (t = 0) to the model (t = 1).

Kept apart from `irbm.ais` (the public API, statistics and checkpoints) because it is the one
place tuned for speed: buffers are preallocated and reused, random numbers come from numpy's
PCG64 on the CPU, and the RBM and ordered families have fused paths.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch.nn import functional

from .models.ordered import OrderedRBM
from .models.rbm import RBM

PROGRESS_EVERY = 256  # temperature steps between progress reports


class _Uniforms:
    """U(0, 1) draws into preallocated tensors, from the seed alone. On the CPU they come from
    numpy's PCG64, about 1.5 times faster than torch's serial Mersenne twister (sampling is the
    largest cost of a step after the two matrix products); elsewhere from a torch.Generator."""

    def __init__(self, seed: int, device: torch.device):
        self.numpy = np.random.Generator(np.random.PCG64(seed)) if device.type == "cpu" else None
        self.torch = None if self.numpy else torch.Generator(device=device).manual_seed(seed)

    def filler(self, out: torch.Tensor):
        """A function that refills ``out`` (contiguous) with fresh draws and returns it."""
        if self.numpy is None:
            return lambda: out.uniform_(generator=self.torch)
        array, random = out.numpy(), self.numpy.random

        def fill():
            random(out=array, dtype=array.dtype)
            return out

        return fill


@torch.no_grad()
def run_chains(model, betas, base_bias, n_chains: int, seed: int, on_steps=None):
    """ln w_s - ln Z_0 = sum_k [F_{t_{k-1}}(v_s) - F_{t_k}(v_s)] for ``n_chains`` AIS chains.

    Parameters
    ----------
    model : EnergyModel
    betas : Tensor (M + 1,) float64, from 0 to 1.
    base_bias : Tensor (n_visible,), the base visible biases c0 (model's dtype and device).
    n_chains, seed : int
    on_steps : callable(int), optional, called with numbers of steps done (progress).

    Returns
    -------
    log_weights : Tensor (n_chains,) float64, without ln Z_0.
    visible : Tensor (n_chains, n_visible), the final states.

    Notes
    -----
    ln w accumulates F_{t_{k-1}}(v) - F_{t_k}(v) at the current v, followed by a Gibbs step at
    t_k. Per step: one product W v (shared by both free energies and the hidden sample) and one
    h W (the visible sample). v^T c0 is common to every F_t, so only t (v^T (c - c0)) enters.
    The RBM and the ordered families use fused paths on preallocated buffers (the ordered one
    shares the model's ``_log_z_weights_from`` between F_t and the draw of z); any other family
    goes through its `_free_energy_from` and `_sample_hidden_from` hooks. In float32, rounding
    adds about 1e-7 nats per step to ln w (1e-3 over the default schedule; float64 if that
    matters).
    """
    W, b, weight_t = model.W, model.b, model.W.t()
    family = ("ordered" if isinstance(model, OrderedRBM)
              else "rbm" if isinstance(model, RBM) else None)
    uniforms = _Uniforms(seed, W.device)
    generator = None if family else torch.Generator(device=W.device).manual_seed(seed)
    visible_shift = model.c - base_bias  # (n_visible,), zero for the "model" base
    anneal_visible = bool(visible_shift.any())

    def buffer(*shape):
        return torch.empty(shape, dtype=W.dtype, device=W.device)

    visible, visible_uniform, activation = (buffer(n_chains, model.n_visible) for _ in range(3))
    preactivation, scaled, work, hidden, hidden_uniform = (
        buffer(n_chains, model.n_hidden) for _ in range(5))
    z_uniform, zero = buffer(n_chains, 1), W.new_zeros(n_chains)
    draw_visible, draw_hidden, draw_z = (
        uniforms.filler(tensor) for tensor in (visible_uniform, hidden_uniform, z_uniform))
    unit_index = torch.arange(model.n_hidden, device=W.device)
    # exp is ~10 times slower on inputs whose result is subnormal (or nearly): clamping them just
    # above ln(smallest normal) changes a sum whose largest term is 1 by less than a rounding error.
    floor = math.log(torch.finfo(W.dtype).tiny) + 1.0
    log_weights = torch.zeros(n_chains, dtype=torch.float64, device=W.device)
    torch.lt(draw_visible(), torch.sigmoid(base_bias), out=visible)
    for step, (t_prev, t) in enumerate(zip(betas[:-1].tolist(), betas[1:].tolist())):
        torch.addmm(b, visible, weight_t, out=preactivation)
        torch.mul(preactivation, t, out=scaled)
        if family == "rbm":
            # sum_i softplus(t x_i) - softplus(t' x_i), differenced per unit before summing so
            # that float32 keeps the precision of the small per-step increments.
            gains = functional.softplus(scaled)
            gains -= functional.softplus(torch.mul(preactivation, t_prev, out=work))
            delta = gains.sum(1)
            torch.lt(draw_hidden(), torch.sigmoid(scaled, out=work), out=hidden)
        elif family == "ordered":
            # -F_t(v, z) for every z, shifted by its maximum, as in a logsumexp.
            previous = model._log_z_weights_from(
                zero, torch.mul(preactivation, t_prev, out=work), b * t_prev)
            previous_top = previous.amax(1, keepdim=True)
            previous_sum = previous.sub_(previous_top).clamp_(min=floor).exp_().sum(1, keepdim=True)
            columns = model._log_z_weights_from(zero, scaled, b * t)
            top = columns.amax(1, keepdim=True)
            # One exp pass gives both sum_z exp(-F_t(v, z)) (for F_t) and the CDF of z | v.
            cdf = columns.sub_(top).clamp_(min=floor).exp_().cumsum_(1)
            total = cdf[:, -1:]
            delta = (top - previous_top + torch.log(total / previous_sum)).squeeze(1)
            # The chosen z - 1 is the number of CDF entries below u * total.
            last_unit = torch.searchsorted(cdf, draw_z().mul_(total))
            # u = 1 never falls below sigmoid(.) <= 1: units past z stay off.
            draw_hidden().masked_fill_(unit_index > last_unit, 1.0)
            torch.lt(hidden_uniform, torch.sigmoid(scaled, out=work), out=hidden)
        else:
            delta = (model._free_energy_from(zero, preactivation * t_prev, b * t_prev)
                     - model._free_energy_from(zero, scaled, b * t))
            hidden = model._sample_hidden_from(scaled, b * t, generator).h
        if anneal_visible:
            delta = delta + (t - t_prev) * (visible @ visible_shift)
        log_weights += delta
        visible_bias = torch.add(base_bias, visible_shift, alpha=t) if anneal_visible else base_bias
        torch.addmm(visible_bias, hidden, W, alpha=t, out=activation)
        torch.lt(draw_visible(), activation.sigmoid_(), out=visible)
        if on_steps is not None and (step + 1) % PROGRESS_EVERY == 0:
            on_steps(PROGRESS_EVERY)
    if on_steps is not None:
        on_steps((len(betas) - 1) % PROGRESS_EVERY)
    return log_weights, visible
