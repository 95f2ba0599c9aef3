"""What annealed importance sampling (AIS) and its reverse (RAISE) need from a family.

A path is a family of unnormalized distributions f_t(v), t in [0, 1]: f_0 factorizes (exact
samples and a closed-form log Z_0), f_1(v) = exp(-F(v)) is the model. One operation drives both
directions: ``step(t_from, t_to)`` returns ln f_{t_to}(v) - ln f_{t_from}(v) at the chains'
current v and then moves v by one Gibbs transition that leaves f_{t_to} invariant.

- AIS: v ~ f_0, then step(t_{k-1}, t_k) for k = 1..M; ln w = ln Z_0 + sum of the returns.
- RAISE: v = a data vector, step(1, 1), then step(t_k, t_{k-1}) for k = M..1; the sum of the
  returns plus ln f_1(v_data) - ln Z_0 is a stochastic lower bound on ln p(v_data).
"""

from __future__ import annotations

import abc

import numpy as np
import torch


class UniformSource:
    """U(0, 1) draws into preallocated tensors, from a seed alone. On the CPU they come from
    numpy's PCG64, about 1.5 times faster than torch's serial Mersenne twister (sampling is the
    largest cost of an AIS step after the two matrix products); elsewhere from a torch.Generator."""

    def __init__(self, seed: int, device: torch.device):
        device = torch.device(device)
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


class AnnealingPath(abc.ABC):
    """Chains annealed between a factorized base (t = 0) and a model (t = 1).

    Attributes
    ----------
    log_base_partition : float
        ln Z_0 of f_0, in float64.
    visible : Tensor (n_chains, n_visible)
        The chains' current state, after `start`.
    """

    log_base_partition: float
    visible: torch.Tensor
    # Whether `step` runs on irbm.kernels where they can take the model (float32/64 on the CPU,
    # or on CUDA with Triton): their chains then draw from another random stream than the eager
    # steps'.
    fused_steps: bool = False

    @abc.abstractmethod
    def log_unnormalized(self, v: torch.Tensor, t: float) -> torch.Tensor:
        """ln f_t(v), shape (N,), for v (N, n_visible): the reference the fused `step` must
        agree with (AIS checks it against the model's free energy before it starts)."""

    def log_unnormalized_many(self, v: torch.Tensor, ts) -> torch.Tensor:
        """ln f_t(v) for every t of ``ts``, shape (len(ts), N): paths whose f_t share the
        product W v across temperatures compute it once (parallel tempering asks for three)."""
        return torch.stack([self.log_unnormalized(v, t) for t in ts])

    @abc.abstractmethod
    def sample_base(self, n_chains: int, uniforms: UniformSource) -> torch.Tensor:
        """Exact draws from f_0 / Z_0, shape (n_chains, n_visible)."""

    @abc.abstractmethod
    def start(self, visible: torch.Tensor, uniforms: UniformSource) -> None:
        """Bind chains at ``visible`` (n_chains, n_visible); buffers are allocated here."""

    @abc.abstractmethod
    def step(self, t_from: float, t_to: float) -> torch.Tensor:
        """ln f_{t_to}(v) - ln f_{t_from}(v) at the current v, shape (n_chains,), then one
        transition of v that leaves f_{t_to} invariant."""
