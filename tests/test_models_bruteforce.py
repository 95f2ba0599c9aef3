"""Exactness of the three families against brute-force enumeration (float64, fixed seeds).

Every check compares an ``irbm`` method with `test_models_reference.BruteForce`, which sums
exp(-E) over all legal (v, h, z) -- using either the paper's energy written in numpy
(`own_energy`) or the model's own ``energy`` method (`model_energy`). The iRBM is also compared
with an oRBM that holds the same l units followed by m units of zero parameters, as m grows.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.special import logsumexp
from test_models_reference import (
    EXAMPLES,
    ORDERED_EXAMPLES,
    BruteForce,
    Example,
    Params,
    all_binary,
    build_model,
    example_params,
    model_energy,
    own_energy,
    reference,
)

import irbm

RTOL, ATOL = 1e-10, 1e-10


def _visibles(example) -> torch.Tensor:
    return torch.from_numpy(all_binary(example.n_visible))


def _brute_force(example, model=None, **kwargs) -> BruteForce:
    """Brute force with the paper's energy, or with ``model.energy`` when a model is given."""
    if model is None and not kwargs:
        return reference(example)
    energy = own_energy if model is None else model_energy(model)
    return BruteForce(example.params(), energy, **kwargs)


# --------------------------------------------------------------------------- energies
@pytest.mark.parametrize("example", example_params(EXAMPLES))
def test_energy_matches_paper_formula(example):
    """model.energy(v, h[, z]) equals the paper's energy for every v and every legal (h, z)
    (for the iRBM including z up to l + 4, beyond the trained units)."""
    model = example.build()
    V = all_binary(example.n_visible)
    z_max = example.n_hidden + 4 if example.family == "irbm" else None
    mine = BruteForce(example.params(), own_energy, z_max=z_max).log_weights(V)
    theirs = BruteForce(example.params(), model_energy(model), z_max=z_max).log_weights(V)
    np.testing.assert_allclose(theirs, mine, rtol=RTOL, atol=ATOL)


# --------------------------------------------------------------------------- free energies
@pytest.mark.parametrize("energy_source", ["paper-energy", "model-energy"])
@pytest.mark.parametrize("example", example_params(EXAMPLES))
def test_free_energy_matches_brute_force(example, energy_source):
    """free_energy(v) == -log sum_{h,z} exp(-E(v,h,z)) over all v, enumerating h (and z; for the
    iRBM z up to where the remaining tail is < 1e-13 of the total), with the paper's energy and
    with the model's own energy."""
    model = example.build()
    ref = _brute_force(example, model if energy_source == "model-energy" else None)
    V = _visibles(example)
    np.testing.assert_allclose(model.free_energy(V).detach().numpy(), ref.free_energy(V.numpy()),
                               rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("energy_source", ["paper-energy", "model-energy"])
@pytest.mark.parametrize("example", example_params(ORDERED_EXAMPLES))
def test_free_energy_z_matches_brute_force(example, energy_source):
    """free_energy_z(v)[:, z-1] == -log sum_{h in H_z} exp(-E(v,h,z)) for each z = 1..K."""
    model = example.build()
    ref = _brute_force(example, model if energy_source == "model-energy" else None,
                       z_max=example.n_hidden + 1 if example.family == "irbm" else None)
    V = _visibles(example)
    got = model.free_energy_z(V).detach().numpy()
    assert got.shape == (len(V), example.n_hidden)
    np.testing.assert_allclose(got, ref.free_energy_z(V.numpy()), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("example", example_params(ORDERED_EXAMPLES))
def test_log_p_z_given_v_matches_brute_force(example):
    """log_p_z_given_v(v) equals brute-force log P(z | v) for z = 1..K, and for the iRBM its last
    column equals log P(z > l | v) = log sum_{z > l} P(z | v) summed term by term."""
    model = example.build()
    V = _visibles(example)
    got = model.log_p_z_given_v(V).detach().numpy()
    width = example.n_hidden + (example.family == "irbm")
    assert got.shape == (len(V), width)
    np.testing.assert_allclose(got, _brute_force(example).log_p_z_given_v(V.numpy()),
                               rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("example", example_params(EXAMPLES))
def test_mean_hiddens_matches_brute_force(example):
    """mean_hiddens(v) == E[h_i | v] = sum over (h, z) of P(h, z | v) h_i (for the ordered models
    this is sigmoid(W_i. v + b_i) P(z >= i | v), not the plain sigmoid)."""
    model = example.build()
    V = _visibles(example)
    np.testing.assert_allclose(model.mean_hiddens(V).detach().numpy(),
                               _brute_force(example).mean_hiddens(V.numpy()), rtol=RTOL, atol=ATOL)


# --------------------------------------------------------------------------- partition function
@pytest.mark.parametrize("example", example_params(EXAMPLES))
def test_log_partition_exact_matches_brute_force(example):
    """log_partition_exact() == log sum_{v,h,z} exp(-E(v,h,z)), enumerating everything."""
    model = example.build()
    got = model.log_partition_exact()
    assert isinstance(got, float)
    assert got == pytest.approx(_brute_force(example).log_partition(), rel=RTOL, abs=ATOL)


@pytest.mark.parametrize("example", example_params(EXAMPLES))
def test_log_likelihood_exact_matches_brute_force(example):
    """log_likelihood_exact(v) == log P(v) from brute force, for every v."""
    model = example.build()
    V = _visibles(example)
    np.testing.assert_allclose(model.log_likelihood_exact(V).detach().numpy(),
                               _brute_force(example).log_p_v(), rtol=RTOL, atol=ATOL)


NORMALIZATION_EXAMPLES = [
    Example(family, D, K, beta, seed=20 + i)
    for i, (family, D, K, beta) in enumerate([
        ("rbm", 1, 1, None), ("rbm", 8, 3, None), ("rbm", 10, 4, None), ("rbm", 10, 12, None),
        ("orbm", 1, 2, 1.01), ("orbm", 8, 3, 1.01), ("orbm", 10, 4, 1.3), ("orbm", 10, 12, 1.01),
        ("irbm", 1, 1, 1.01), ("irbm", 8, 3, 1.01), ("irbm", 10, 4, 1.3), ("irbm", 10, 12, 1.01),
    ])
]


@pytest.mark.parametrize("example", example_params(NORMALIZATION_EXAMPLES))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_likelihood_sums_to_one_over_all_visible_vectors(example, dtype):
    """sum over all 2**D visible vectors of exp(log_likelihood_exact(v)) == 1, for D up to 10
    (K < D and K > D, so log Z is enumerated over hidden and over visible configurations), for a
    float64 model and a float32 one (whose exact log-likelihood is still computed in float64)."""
    model = example.build(dtype)
    V = torch.from_numpy(all_binary(example.n_visible)).to(dtype)
    log_p = model.log_likelihood_exact(V).double()
    assert log_p.shape == (len(V),)
    assert float(torch.logsumexp(log_p, 0)) == pytest.approx(0.0, abs=1e-9)


# --------------------------------------------------------------------------- iRBM == oRBM + zeros
IRBM_LIMIT_EXAMPLES = [Example("irbm", 5, 3, 1.01, seed=30), Example("irbm", 4, 2, 1.5, seed=31)]
# Zero units appended to the oRBM; the last count leaves < 1e-15 of the iRBM tail for beta = 1.01.
ZERO_UNITS = {1.01: [0, 10, 100, 1000, 3000, 6000], 1.5: [0, 3, 10, 30, 60, 150]}


def _padded_orbm(p: Params, m: int, dtype=torch.float64):
    """An oRBM holding the iRBM's l units followed by m units with zero parameters."""
    D = p.n_visible
    padded = Params("orbm", np.vstack([p.W, np.zeros((m, D))]), np.concatenate([p.b, np.zeros(m)]),
                    p.c, p.beta)
    return build_model(padded, dtype)


@pytest.mark.parametrize("example", example_params(IRBM_LIMIT_EXAMPLES))
def test_irbm_free_energy_is_limit_of_orbm_with_zero_units(example):
    """F_oRBM(l + m zero units)(v) decreases strictly towards F_iRBM(v) as m grows (every extra
    unit adds a positive term to sum_z exp(-F(v, z))), and reaches it to 1e-12 for large m;
    F(v, z) for z <= l is identical in both models."""
    p = example.params()
    irbm_model = example.build()
    V = _visibles(example)
    target = irbm_model.free_energy(V).detach().numpy()
    gaps = []
    for m in ZERO_UNITS[example.beta]:
        orbm = _padded_orbm(p, m)
        np.testing.assert_allclose(orbm.free_energy_z(V)[:, : p.n_hidden].detach().numpy(),
                                   irbm_model.free_energy_z(V).detach().numpy(), rtol=1e-12)
        gaps.append(orbm.free_energy(V).detach().numpy() - target)
    gaps = np.array(gaps)
    assert (gaps[:-1] > 0).all()
    assert (np.diff(gaps, axis=0)[:-1] < 0).all()
    assert np.abs(gaps[-1]).max() < 1e-12


@pytest.mark.parametrize("example", example_params(IRBM_LIMIT_EXAMPLES))
def test_irbm_log_p_z_tail_is_orbm_mass_beyond_l(example):
    """With many zero units, the oRBM's log P(z|v) for z <= l matches the iRBM's first l columns,
    and the oRBM's total mass on z > l matches the iRBM's tail column log P(z > l | v)."""
    p = example.params()
    n_trained = p.n_hidden
    V = _visibles(example)
    got = example.build().log_p_z_given_v(V).detach().numpy()
    orbm = _padded_orbm(p, ZERO_UNITS[example.beta][-1])
    expected = orbm.log_p_z_given_v(V).detach().numpy()
    np.testing.assert_allclose(got[:, :n_trained], expected[:, :n_trained], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got[:, n_trained], logsumexp(expected[:, n_trained:], axis=1),
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("example", example_params(IRBM_LIMIT_EXAMPLES))
def test_irbm_log_partition_is_limit_of_orbm_with_zero_units(example):
    """log_partition_exact of the oRBM with l + m zero units increases strictly with m and tends
    to the iRBM's log_partition_exact (within 1e-12 for the largest m)."""
    p = example.params()
    target = example.build().log_partition_exact()
    values = np.array([_padded_orbm(p, m).log_partition_exact() for m in ZERO_UNITS[example.beta]])
    assert (np.diff(values)[:-1] > 0).all()
    assert (values[:-1] < target).all()
    assert values[-1] == pytest.approx(target, abs=1e-12)


# --------------------------------------------------------------------------- grow / shrink
def test_irbm_grow_and_shrink_leave_the_distribution_unchanged():
    """grow(n) appends n zero units and shrink() removes trailing all-zero units: neither changes
    F(v), log Z or P(z <= l_old | v); after growing, the new units' columns of P(z | v) plus the
    new tail add up to the old tail. max_hidden caps growth; shrink keeps non-zero units."""
    example = Example("irbm", 4, 2, 1.2, seed=40)
    model = example.build()
    V = _visibles(example)
    f0 = model.free_energy(V).detach().clone()
    log_z0 = model.log_partition_exact()
    lp0 = model.log_p_z_given_v(V).detach().clone()

    assert model.grow(3) == 3 and model.n_hidden == 5
    assert model.W.shape == (5, 4) and model.b.shape == (5,)
    assert torch.count_nonzero(model.W[2:]) == 0 and torch.count_nonzero(model.b[2:]) == 0
    torch.testing.assert_close(model.free_energy(V), f0, rtol=1e-12, atol=1e-12)
    assert model.log_partition_exact() == pytest.approx(log_z0, abs=1e-12)
    lp = model.log_p_z_given_v(V).detach()
    assert lp.shape == (len(V), 6)
    torch.testing.assert_close(lp[:, :2], lp0[:, :2], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(torch.logsumexp(lp[:, 2:], 1), lp0[:, 2], rtol=1e-12, atol=1e-12)

    # A non-zero unit in the middle stays; only the trailing zeros go.
    with torch.no_grad():
        model.W[2, 0] = 0.5
    f1 = model.free_energy(V).detach().clone()
    assert model.shrink() == 2 and model.n_hidden == 3
    torch.testing.assert_close(model.free_energy(V), f1, rtol=1e-12, atol=1e-12)
    with torch.no_grad():
        model.W[2].zero_()
    assert model.shrink() == 1 and model.n_hidden == 2
    torch.testing.assert_close(model.free_energy(V), f0, rtol=1e-12, atol=1e-12)

    capped = irbm.InfiniteRBM(4, n_hidden=2, max_hidden=4, dtype=torch.float64)
    assert capped.grow(5) == 2 and capped.n_hidden == 4
    assert capped.grow(1) == 0 and capped.n_hidden == 4
    assert capped.growth_layout(3) is None  # no growth asked for: no word
    with pytest.warns(UserWarning, match=r"would grow past max_hidden \(4\) and is held "
                                         r"there: its size is the cap"):
        assert capped.growth_layout(5) is None


def test_irbm_shrink_keeps_at_least_one_unit():
    """An all-zero iRBM shrinks to a single unit, never to zero units."""
    model = irbm.InfiniteRBM(3, n_hidden=4, dtype=torch.float64)
    model.shrink()
    assert model.n_hidden == 1
    assert np.isfinite(model.log_partition_exact())


def test_zero_parameter_irbm_has_closed_form_partition():
    """All-zero iRBM: every v and every h in H_z has energy sum_{i<=z} beta ln 2, so
    Z = 2**D sum_z 2**z 2**(-beta z) = 2**D r / (1 - r) with r = 2**(1 - beta) (any l)."""
    for beta in (1.01, 1.5, 3.0):
        r = 2.0 ** (1 - beta)
        expected = 4 * np.log(2) + np.log(r / (1 - r))
        for n_trained in (1, 3):
            model = irbm.InfiniteRBM(4, n_hidden=n_trained, beta=beta, dtype=torch.float64)
            assert model.log_partition_exact() == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("example", example_params(ORDERED_EXAMPLES))
def test_the_model_given_z_is_an_rbm_and_their_partition_functions_sum_to_z(example):
    """exp(-F(v, z)) = exp(-F_rbm(v) + log_factor) at every visible state, for every z (the
    iRBM's tail as z = n_hidden + 1), and Z = sum_z Z_rbm(z) e^log_factor(z), by brute force."""
    model = example.build()
    v = torch.as_tensor(all_binary(example.n_visible), dtype=model.dtype)
    log_tail = model._log_tail()
    last = model.n_hidden + (log_tail is not None)
    columns = -model.free_energy_z(v).detach()
    terms = []
    for z in range(1, last + 1):
        rbm, log_factor = model.given_z(z)
        assert rbm.n_hidden == min(z, model.n_hidden)
        column = columns[:, z - 1] if z <= model.n_hidden else columns[:, -1] + log_tail
        torch.testing.assert_close(-rbm.free_energy(v).detach() + log_factor, column)
        terms.append(logsumexp(-rbm.free_energy(v).detach().numpy()) + log_factor)
    assert logsumexp(terms) == pytest.approx(reference(example).log_partition(), abs=1e-9)
    for bad in (0, last + 1, 1.5, True):
        with pytest.raises(ValueError, match=f"integer in 1..{last}"):
            model.given_z(bad)
