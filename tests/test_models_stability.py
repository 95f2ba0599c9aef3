"""Numerical stability: weights of magnitude 1e3, 5000 hidden units and beta close to 1 give
finite (and still correct) free energies and probabilities, in float32 and float64.

Correctness is checked against float64 numpy references: the brute force of
`test_models_reference` where it fits (5 visible, 3 hidden units), and otherwise the paper's
free-energy formulas evaluated with log-sum-exp (5000 units cannot be enumerated).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.special import logsumexp
from test_models_reference import (
    LN2,
    BruteForce,
    Params,
    all_binary,
    build_model,
    random_params,
    softplus,
)

FAMILIES = [("rbm", None), ("orbm", 1.01), ("irbm", 1.01)]
DTYPES = [pytest.param(torch.float32, id="float32"), pytest.param(torch.float64, id="float64")]
# Tolerance against the float64 reference, relative to the largest |F(v)|, per dtype.
RTOL = {torch.float32: 1e-5, torch.float64: 1e-11}


def _check_everything_finite(model, V, dtype):
    """Every public quantity on V is finite; log P(z | v) is normalized; samples are binary.
    Returns the free energies and (ordered) log P(z | v) for further checks."""
    generator = torch.Generator().manual_seed(0)
    f = model.free_energy(V)
    assert f.dtype == dtype and torch.isfinite(f).all()
    assert torch.isfinite(model.mean_hiddens(V)).all()  # range: see test_mean_hiddens_in_unit_...
    gradients = model.free_energy_gradients(V)
    assert all(torch.isfinite(g).all() for g in gradients.values())
    model.zero_grad()
    model.free_energy(V).mean().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
    v_next, state = model.gibbs_step(V, generator)
    assert ((v_next == 0) | (v_next == 1)).all() and ((state.h == 0) | (state.h == 1)).all()
    log_p_z = None
    if model.family != "rbm":
        assert torch.isfinite(model.free_energy_z(V)).all()
        log_p_z = model.log_p_z_given_v(V)
        assert torch.isfinite(log_p_z).all() and (log_p_z <= 1e-6).all()
        torch.testing.assert_close(torch.logsumexp(log_p_z.double(), 1),
                                   torch.zeros(len(V), dtype=torch.float64), atol=1e-5, rtol=0)
        z_top = model.n_hidden + (model.family == "irbm")
        assert 1 <= int(state.z.min()) and int(state.z.max()) <= z_top
    return f, log_p_z


def _params_of(model) -> Params:
    """The model's parameters as float64 numpy (float32 models: their rounded values), so that
    references describe exactly the model under test."""
    return Params(model.family, *(getattr(model, n).detach().double().numpy() for n in "Wbc"),
                  None if getattr(model, "beta", None) is None else float(model.beta))


# --------------------------------------------------------------------------- huge weights
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family,beta", FAMILIES, ids=[f for f, _ in FAMILIES])
def test_weights_of_magnitude_1e3(family, beta, dtype):
    """W, b, c of magnitude ~1e3 (D = 5, K = 3): every quantity is finite, log P(z | v) is
    normalized, and free energies, log P(z | v), log Z and log P(v) still match the float64
    brute force (exp(-E) of order e^5000 would overflow without log-sum-exp everywhere)."""
    model = build_model(random_params(family, 5, 3, beta, seed=70, scale=1e3), dtype)
    ref = BruteForce(_params_of(model))
    V = torch.from_numpy(all_binary(5)).to(dtype)
    f, log_p_z = _check_everything_finite(model, V, dtype)
    scale = np.abs(ref.free_energy(V.double().numpy())).max()
    np.testing.assert_allclose(f.detach().double().numpy(), ref.free_energy(V.double().numpy()),
                               rtol=0, atol=RTOL[dtype] * scale)
    if log_p_z is not None:
        expected = ref.log_p_z_given_v(V.double().numpy())
        got = log_p_z.detach().double().numpy()
        # compare where the probability is not astronomically small (float32 may round those)
        visible = expected > -50
        np.testing.assert_allclose(got[visible], expected[visible], rtol=0,
                                   atol=RTOL[dtype] * scale)
        assert (got[~visible] < -20).all()
    log_z = model.log_partition_exact()
    assert math.isfinite(log_z)
    assert log_z == pytest.approx(ref.log_partition(), rel=1e-11)
    log_p = model.log_likelihood_exact(V).double()
    assert torch.isfinite(log_p).all()
    assert float(torch.logsumexp(log_p, 0)) == pytest.approx(0.0, abs=1e-9)


# --------------------------------------------------------------------------- many units
def _paper_free_energies(p: Params, V):
    """F(v) and log P(z | v) (with the iRBM tail column) from the paper's formulas in float64,
    with the iRBM tail summed term by term up to where it is below 1e-16 of the total."""
    pre = V @ p.W.T + p.b
    visible = V @ p.c
    if p.family == "rbm":
        return -visible - softplus(pre).sum(1), None
    neg_f_z = visible[:, None] + np.cumsum(softplus(pre) - p.beta * softplus(p.b), 1)
    columns = neg_f_z
    if p.family == "irbm":
        log_r = (1 - p.beta) * LN2
        n_terms = math.ceil(45 / -log_r)
        tail = neg_f_z[:, -1:] + log_r * np.arange(1, n_terms + 1)[None, :]
        columns = np.concatenate([neg_f_z, logsumexp(tail, axis=1, keepdims=True)], 1)
    total = logsumexp(columns, axis=1)
    return -total, columns - total[:, None]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family,beta", FAMILIES, ids=[f for f, _ in FAMILIES])
def test_five_thousand_hidden_units(family, beta, dtype):
    """K = 5000 hidden units (D = 10, parameters ~ N(0, 1)): free energies are finite and match
    the paper's formulas to the dtype's precision, P(z | v) is normalized, log Z is finite (it is
    enumerated over the 2**10 visible vectors) and the exact likelihood sums to 1."""
    model = build_model(random_params(family, 10, 5000, beta, seed=71), dtype)
    p = _params_of(model)
    V_all = all_binary(10)
    V_np = V_all[np.random.RandomState(0).choice(len(V_all), 64, replace=False)]
    V = torch.from_numpy(V_np).to(dtype)
    f, log_p_z = _check_everything_finite(model, V, dtype)
    f_ref, log_p_z_ref = _paper_free_energies(p, V_np)
    scale = np.abs(f_ref).max()
    np.testing.assert_allclose(f.detach().double().numpy(), f_ref, rtol=0,
                               atol=RTOL[dtype] * scale)
    if log_p_z is not None:
        got = log_p_z.detach().double().numpy()
        big = log_p_z_ref > -30
        np.testing.assert_allclose(got[big], log_p_z_ref[big], rtol=0, atol=RTOL[dtype] * scale)
    log_p = model.log_likelihood_exact(torch.from_numpy(V_all).to(dtype)).double()
    assert torch.isfinite(log_p).all()
    assert float(torch.logsumexp(log_p, 0)) == pytest.approx(0.0, abs=1e-8)


# --------------------------------------------------------------------------- beta near 1
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("beta", [1 + 1e-3, 1 + 1e-6])
def test_irbm_beta_barely_above_one(beta, dtype):
    """beta -> 1+ makes the iRBM's tail mass r / (1 - r) (r = 2**(1 - beta)) huge, ~1e3 or ~1e6
    times the z = l term, but finite: log P(z | v) stays finite and normalized with over 99% of
    the mass in the tail (matching the term-by-term tail sum for beta = 1 + 1e-3, where that sum
    is short enough to do), and log Z is finite and above the log Z of the oRBM holding the same
    l units."""
    model = build_model(random_params("irbm", 4, 3, beta, seed=72), dtype)
    p = _params_of(model)
    V = torch.from_numpy(all_binary(4)).to(dtype)
    _, log_p_z = _check_everything_finite(model, V, dtype)
    assert (log_p_z[:, -1] > math.log(0.99)).all()
    if beta > 1 + 1e-5:
        _, log_p_z_ref = _paper_free_energies(p, all_binary(4))
        np.testing.assert_allclose(log_p_z.detach().double().numpy(), log_p_z_ref,
                                   rtol=0, atol=1e-4 if dtype == torch.float32 else 1e-9)
    log_z = model.log_partition_exact()
    orbm = Params("orbm", p.W, p.b, p.c, beta)
    assert math.isfinite(log_z) and log_z > BruteForce(orbm).log_partition()


# --------------------------------------------------------------------------- probability range
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family,beta", FAMILIES, ids=[f for f, _ in FAMILIES])
@pytest.mark.parametrize("case", ["weights-1e3", "5000-units"])
def test_mean_hiddens_in_unit_interval(family, beta, dtype, case):
    """mean_hiddens(v) = E[h_i | v] is a probability: within [0, 1] exactly, even when rounding
    makes sum_z P(z | v) slightly exceed 1 (values like 1 + 1e-7 break torch.bernoulli)."""
    if case == "weights-1e3":
        model = build_model(random_params(family, 5, 3, beta, seed=70, scale=1e3), dtype)
        V = torch.from_numpy(all_binary(5)).to(dtype)
    else:
        model = build_model(random_params(family, 10, 5000, beta, seed=71), dtype)
        V = torch.from_numpy(all_binary(10)[::16]).to(dtype)
    with torch.no_grad():
        mean_h = model.mean_hiddens(V)
    assert torch.isfinite(mean_h).all()
    assert float(mean_h.min()) >= 0 and float(mean_h.max()) <= 1, (
        f"mean_hiddens outside [0, 1]: min {float(mean_h.min())!r}, max - 1 = "
        f"{float(mean_h.max()) - 1!r}")
    torch.bernoulli(mean_h, generator=torch.Generator().manual_seed(0))
