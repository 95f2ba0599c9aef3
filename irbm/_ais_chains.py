"""The inner loop of AIS: a batch of chains annealed from the base (t = 0) to the model (t = 1)
along the family's `AnnealingPath`, and the check that the path describes the model."""

from __future__ import annotations

import torch

from .models import UniformSource

PROGRESS_EVERY = 256  # temperature steps between progress reports


@torch.no_grad()
def check_path(model, path, n_rows: int = 16, seed: int = 0):
    """Refuse a path that disagrees with the model: ln f_1(v) + F(v) must not depend on v, and
    the fused `step` must return ln f_t(v) - ln f_t'(v). Catches a subclass that changed the
    free energy without its annealing path (which would give a wrong ln Z silently)."""
    generator = torch.Generator(device=model.device).manual_seed(seed)
    v = torch.rand(n_rows, model.n_visible, generator=generator, dtype=model.dtype,
                   device=model.device).lt_(0.5)
    with model.trusted_inputs():
        free = model.free_energy(v).double()
        offset = path.log_unnormalized(v, 1.0) + free
    path.start(v, UniformSource(seed, model.device))
    # Two steps, early and late (a path may step differently there: the pinned one releases z).
    errors, scale = [], 1.0 + float(free.abs().max())
    for t_from, t_to in ((0.3, 0.6), (0.9, 1.0)):
        state = path.visible.clone()
        expected = path.log_unnormalized(state, t_to) - path.log_unnormalized(state, t_from)
        errors.append(float((path.step(t_from, t_to).double() - expected).abs().max()))
        scale += float(expected.abs().max())
    # Rounding grows with the magnitude of the free energies (thousands of nats when trained).
    tolerance = scale * (1e-9 if model.dtype == torch.float64 else 1e-4)
    if float(offset.max() - offset.min()) > tolerance or max(errors) > tolerance:
        raise ValueError(
            f"{type(model).__name__}.annealing_path() disagrees with its free energy (a subclass "
            "that changes the free energy must also override annealing_path): AIS would give a "
            "wrong log Z")


@torch.no_grad()
def run_chains(path, betas, n_chains: int, seed: int, on_steps=None, step_variances=None):
    """ln w_s - ln Z_0 = sum_k [ln f_{t_k}(v_s) - ln f_{t_{k-1}}(v_s)] for ``n_chains`` chains.

    Parameters
    ----------
    path : AnnealingPath of the model (its base already chosen).
    betas : Tensor (M + 1,) float64, from 0 to 1.
    n_chains, seed : int
    on_steps : callable(int), optional, called with numbers of steps done (progress).
    step_variances : list, optional
        Receives, per step, the variance over the chains of that step's ln w increment.

    Returns
    -------
    log_weights : Tensor (n_chains,) float64, without ln Z_0.
    visible : Tensor (n_chains, n_visible), the final states.
    """
    uniforms = UniformSource(seed, path.model.device)
    path.start(path.sample_base(n_chains, uniforms), uniforms)
    return _anneal(path, betas.tolist(), on_steps, step_variances), path.visible


def _anneal(path, schedule: list[float], on_steps, step_variances=None) -> torch.Tensor:
    """sum_k of path.step(t_{k-1}, t_k) over ``schedule`` (either direction), float64."""
    log_weights = torch.zeros(path.visible.shape[0], dtype=torch.float64,
                              device=path.visible.device)
    for step, (t_from, t_to) in enumerate(zip(schedule[:-1], schedule[1:])):
        increment = path.step(t_from, t_to)
        log_weights += increment
        if step_variances is not None:
            step_variances.append(float(increment.var(correction=0)))
        if on_steps is not None and (step + 1) % PROGRESS_EVERY == 0:
            on_steps(PROGRESS_EVERY)
    if on_steps is not None:
        on_steps((len(schedule) - 1) % PROGRESS_EVERY)
    return log_weights


@torch.no_grad()
def run_reverse_chains(path, betas, visible, seed: int, on_steps=None, step_variances=None):
    """RAISE's reverse chains (Burda, Grosse & Salakhutdinov 2015), one per row of ``visible``:
    start at the data vector, transition at t = 1, then anneal down to the base.

    Returns sum_{k=0}^{M-1} [ln f_{t_k}(v_k) - ln f_{t_{k+1}}(v_k)], shape (N,) float64, where
    v_k is the state after the transition at t_{k+1}. With ln f_1(v) - ln Z_0 added, its
    exponential is an unbiased estimate of the annealing model's p(v), whose log is a
    stochastic lower bound on ln p(v) in expectation.

    Parameters
    ----------
    path : AnnealingPath of the model.
    betas : Tensor (M + 1,) float64, from 0 to 1.
    visible : Tensor (N, n_visible), the data vectors (one chain each).
    seed : int
    on_steps, step_variances : as in `run_chains`; the variances come in the order of the
        steps taken, from t = 1 down.
    """
    uniforms = UniformSource(seed, path.model.device)
    path.start(visible, uniforms)
    path.step(1.0, 1.0)  # the first transition, at the model itself (returns 0)
    return _anneal(path, betas.flip(0).tolist(), on_steps, step_variances)
