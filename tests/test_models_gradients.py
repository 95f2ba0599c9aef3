"""Gradients of the free energy: autograd against finite differences, and the closed-form
``free_energy_gradients`` against autograd and against the paper's formulas (eqs. 9-11 for the
RBM; eqs. 24-26 for the oRBM/iRBM, with 1 - cdf(z | v) = P(z >= i | v) from brute force)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.special import expit
from test_models_reference import (
    EXAMPLES,
    Example,
    all_binary,
    build_model,
    example_params,
    reference,
)
from torch import nn


class _FreeEnergy(nn.Module):
    """Wraps a model so that torch.func.functional_call can swap W, b, c for gradcheck."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, v):
        return self.model.free_energy(v)


def _batch(example, n=6, seed=0) -> torch.Tensor:
    """A few distinct visible vectors (all of them when 2**D <= n)."""
    V = torch.from_numpy(all_binary(example.n_visible))
    if len(V) <= n:
        return V
    index = torch.randperm(len(V), generator=torch.Generator().manual_seed(seed))[:n]
    return V[index]


@pytest.mark.parametrize("example", example_params(EXAMPLES))
def test_free_energy_gradcheck(example):
    """torch.autograd.gradcheck: autograd of free_energy(v) w.r.t. W, b and c matches central
    finite differences in float64 (every output row, every parameter entry)."""
    model = example.build()
    wrapper = _FreeEnergy(model)
    v = _batch(example)

    def free_energy(W, b, c):
        params = {"model.W": W, "model.b": b, "model.c": c}
        return torch.func.functional_call(wrapper, params, (v,))

    inputs = tuple(getattr(model, name).detach().clone().requires_grad_(True)
                   for name in ("W", "b", "c"))
    assert torch.autograd.gradcheck(free_energy, inputs, eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("example", example_params(EXAMPLES))
def test_free_energy_gradients_match_autograd(example):
    """free_energy_gradients(v) == autograd gradient of free_energy(v).mean() for W, b, c."""
    model = example.build()
    v = _batch(example)
    closed = model.free_energy_gradients(v)
    assert set(closed) == {"W", "b", "c"}
    model.zero_grad()
    model.free_energy(v).mean().backward()
    for name in ("W", "b", "c"):
        assert closed[name].shape == getattr(model, name).shape
        torch.testing.assert_close(closed[name], getattr(model, name).grad, rtol=1e-10,
                                   atol=1e-12)


@pytest.mark.parametrize("example", example_params(EXAMPLES))
def test_free_energy_gradients_match_paper_formulas(example):
    """free_energy_gradients(v) equals the batch mean of the paper's closed forms:
    RBM (eqs. 9-11): dF/dW = -sigmoid(Wv+b) v^T, dF/db = -sigmoid(Wv+b), dF/dc = -v;
    oRBM/iRBM (eqs. 24-26): the hidden terms multiplied by 1 - cdf(z|v) = P(z >= i | v), here
    obtained by brute-force summation over (h, z) (for the iRBM including the whole tail), and
    dF/db = -(sigmoid(Wv+b) - beta sigmoid(b)) (1 - cdf(z|v))."""
    model = example.build()
    p = example.params()
    v = _batch(example)
    V = v.numpy()
    h_hat = expit(V @ p.W.T + p.b)
    if example.family == "rbm":
        survival, penalty = np.ones_like(h_hat), 0.0
    else:
        survival, penalty = reference(example).survival(V), p.beta * expit(p.b)
    expected = {
        "W": -((h_hat * survival).T @ V) / len(V),
        "b": -((h_hat - penalty) * survival).mean(0),
        "c": -V.mean(0),
    }
    got = model.free_energy_gradients(v)
    for name in ("W", "b", "c"):
        np.testing.assert_allclose(got[name].numpy(), expected[name], rtol=1e-10, atol=1e-12)


def test_irbm_gradients_equal_orbm_with_many_zero_units():
    """The iRBM's gradients for its l units equal those of an oRBM holding the same units
    followed by 6000 zero units (whose P(z >= i | v) includes all the mass beyond l)."""
    example = Example("irbm", 4, 3, 1.01, seed=50)
    p = example.params()
    m = 6000
    padded = type(p)("orbm", np.vstack([p.W, np.zeros((m, 4))]), np.concatenate([p.b, np.zeros(m)]),
                     p.c, p.beta)
    v = torch.from_numpy(all_binary(4))
    got = example.build().free_energy_gradients(v)
    expected = build_model(padded).free_energy_gradients(v)
    torch.testing.assert_close(got["W"], expected["W"][:3], rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(got["b"], expected["b"][:3], rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(got["c"], expected["c"], rtol=1e-12, atol=1e-12)
    # and the oRBM's zero units do receive gradient (they are not inert in the oRBM)
    assert expected["W"][3:].abs().sum() > 0


def test_irbm_gradients_after_growth_need_no_second_pass():
    """Growth by one zero unit leaves the distribution unchanged: the old rows keep their
    gradients and the new row comes from the tail column (what the trainer uses after growth)."""
    import irbm
    generator = torch.Generator().manual_seed(3)
    model = irbm.InfiniteRBM(7, n_hidden=4, beta=1.2, dtype=torch.float64)
    with torch.no_grad():
        model.W.normal_(0, 0.5, generator=generator)
        model.b.normal_(0, 0.5, generator=generator)
        model.c.normal_(0, 0.5, generator=generator)
    v = torch.rand(9, 7, generator=generator, dtype=torch.float64).lt(0.5).double()
    weights = torch.randn(9, generator=generator, dtype=torch.float64)
    before, _ = model.weighted_gradients(v, weights)
    layout = model.growth_layout(model.n_hidden + 1)
    model.relayout_hidden(layout)
    derived = model.relayout_gradients(before, layout)
    recomputed, _ = model.weighted_gradients(v, weights)
    assert set(derived) == set(recomputed)
    for name in recomputed:
        torch.testing.assert_close(derived[name], recomputed[name], rtol=1e-10, atol=1e-12)
    # A permutation changes the distribution: nothing is derived.
    assert model.relayout_gradients(recomputed, torch.arange(model.n_hidden).flip(0)) is None
