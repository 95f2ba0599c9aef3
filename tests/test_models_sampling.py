"""Sampling against exact distributions, with chi-square goodness-of-fit tests (fixed seeds).

* each conditional alone: (h, z) ~ P(h, z | v) (also with z forced), v ~ P(v | h, z);
* block Gibbs chains on models with 4-5 visible units: the empirical P(v), P(z) and P(v, z) of
  long chains (thinned so that consecutive kept samples are nearly independent) against the
  exact distributions from brute force.

Exact probabilities come from `test_models_reference.BruteForce` (enumeration of exp(-E)).
Thinning and burn-in are derived from the second eigenvalue of the exact Gibbs kernel, and each
chain test also checks that its samples *reject* a slightly perturbed model, so the test has
the power to see a wrong sampler.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
import torch
from scipy.special import logsumexp
from scipy.stats import chisquare
from test_models_reference import (
    EXAMPLES,
    ORDERED_EXAMPLES,
    BruteForce,
    Example,
    all_binary,
    example_params,
    own_energy,
    reference,
    visible_index,
)

import irbm

P_MIN = 1e-3  # chi-square tests must give p > P_MIN
N_DRAWS = 20_000  # draws per conditioning value in the conditional tests


def chi_square_pvalue(counts, probabilities, min_expected=5.0) -> float:
    """p-value of a chi-square goodness-of-fit test of ``counts`` against ``probabilities``.

    Categories of expected count < min_expected are pooled into one. An observed count in a
    category of probability zero is an outright failure (p = 0)."""
    counts = np.asarray(counts, float)
    probabilities = np.asarray(probabilities, float)
    assert counts.shape == probabilities.shape
    if (counts[probabilities == 0] > 0).any():
        return 0.0
    expected = probabilities / probabilities.sum() * counts.sum()
    small = expected < min_expected
    if small.any():
        counts = np.append(counts[~small], counts[small].sum())
        expected = np.append(expected[~small], expected[small].sum())
        if expected[-1] == 0:
            counts, expected = counts[:-1], expected[:-1]
    return float(chisquare(counts, expected).pvalue)


def _bits_to_int(h) -> np.ndarray:
    """Integer code of binary rows (unit 0 = least significant bit)."""
    h = np.asarray(h)
    return (h @ (2 ** np.arange(h.shape[1]))).round().astype(int)


def _state_codes(h, z, n_hidden) -> np.ndarray:
    """Category of a hidden state: h's code, plus z (iRBM tail folded into z = K + 1)."""
    codes = _bits_to_int(h)
    if z is None:
        return codes
    return np.minimum(np.asarray(z), n_hidden + 1) * 2**n_hidden + codes


def _exact_state_probabilities(ref: BruteForce, v_row) -> np.ndarray:
    """P(category | v) from brute force, indexed by `_state_codes`."""
    K = ref.p.n_hidden
    lw = ref.log_weights(np.asarray(v_row, float)[None, :])[0]
    probabilities = np.exp(lw - logsumexp(lw))
    codes = _state_codes(ref.h, ref.z, K)
    size = 2**K if ref.z is None else (K + 2) * 2**K
    return np.bincount(codes, weights=probabilities, minlength=size)


def _check_hidden_state(example, state, n_rows):
    """Shape, dtype and legality of a HiddenState: binary h; for the ordered models h_i = 0 for
    i > z, z an integer in 1..K (iRBM: 1..K+1, K+1 standing for the tail)."""
    K = example.n_hidden
    assert isinstance(state, irbm.HiddenState)
    assert state.h.shape == (n_rows, K)
    assert ((state.h == 0) | (state.h == 1)).all()
    if example.family == "rbm":
        assert state.z is None
        return
    assert state.z.shape == (n_rows,) and state.z.dtype == torch.int64
    top = K + 1 if example.family == "irbm" else K
    assert int(state.z.min()) >= 1 and int(state.z.max()) <= top
    beyond = torch.arange(1, K + 1) > state.z.unsqueeze(1)
    assert (state.h[beyond] == 0).all()


# --------------------------------------------------------------------------- conditionals
@pytest.mark.parametrize("example", example_params(EXAMPLES))
def test_sample_hidden_matches_exact_joint_conditional(example):
    """(h, z) = sample_hidden(v) is distributed as P(h, z | v) (z then h with units beyond z at
    0; for the iRBM the whole tail z > l is the single category z = l + 1): chi-square over all
    legal (h, z) categories, for two visible vectors."""
    model = example.build()
    ref = reference(example)
    V = all_binary(example.n_visible)
    generator = torch.Generator().manual_seed(100)
    for v_row in (V[1], V[-2]):
        v = torch.from_numpy(np.tile(v_row, (N_DRAWS, 1)))
        state = model.sample_hidden(v, generator)
        _check_hidden_state(example, state, N_DRAWS)
        z = None if state.z is None else state.z.numpy()
        codes = _state_codes(state.h.numpy(), z, example.n_hidden)
        exact = _exact_state_probabilities(ref, v_row)
        counts = np.bincount(codes, minlength=len(exact))
        assert chi_square_pvalue(counts, exact) > P_MIN


@pytest.mark.parametrize("example", example_params(ORDERED_EXAMPLES))
def test_sample_hidden_with_forced_z(example):
    """sample_hidden(v, z=k) returns z == k and h ~ P(h | v, z=k): units beyond k are 0 and the
    first min(k, l) follow P(h | v, z) from brute force (chi-square). Checked for k = 1, K and,
    for the iRBM, k = l + 1 and l + 3 (all trained units free)."""
    model = example.build()
    K = example.n_hidden
    p = example.params()
    V = all_binary(example.n_visible)
    v_row = V[-1]
    H = all_binary(K)
    generator = torch.Generator().manual_seed(101)
    forced = [1, K] + ([K + 1, K + 3] if example.family == "irbm" else [])
    for k in forced:
        v = torch.from_numpy(np.tile(v_row, (N_DRAWS, 1)))
        state = model.sample_hidden(v, generator, z=torch.full((N_DRAWS,), k))
        assert (state.z == k).all()
        h = state.h.numpy()
        assert (h[:, min(k, K):] == 0).all()
        legal = H[(H[:, min(k, K):] == 0).all(1)]
        neg_e = -own_energy(p, np.tile(v_row, (len(legal), 1)), legal, np.full(len(legal), k))
        exact = np.zeros(2**K)
        exact[_bits_to_int(legal)] = np.exp(neg_e - logsumexp(neg_e))
        counts = np.bincount(_bits_to_int(h), minlength=2**K)
        assert chi_square_pvalue(counts, exact) > P_MIN


@pytest.mark.parametrize("example", example_params(EXAMPLES))
def test_sample_visible_matches_exact_conditional(example):
    """v = sample_visible(HiddenState(h, z)) is distributed as P(v | h, z), proportional to
    exp(-E(v, h, z)) over all v (chi-square), for a few legal hidden states including, for the
    iRBM, one in the tail (z = l + 1)."""
    model = example.build()
    p = example.params()
    K = example.n_hidden
    V = all_binary(example.n_visible)
    rng = np.random.RandomState(102)
    generator = torch.Generator().manual_seed(102)
    states = []
    if example.family == "rbm":
        z_values = [None, None]
    else:
        z_values = [1, K] + ([K + 1] if example.family == "irbm" else [])
    for k in z_values:
        h = (rng.rand(K) < 0.6).astype(float)
        if k is not None:
            h[min(k, K):] = 0
        states.append((h, k))
    for h, k in states:
        z_rows = None if k is None else np.full(len(V), k)
        neg_e = -own_energy(p, V, np.tile(h, (len(V), 1)), z_rows)
        exact = np.exp(neg_e - logsumexp(neg_e))
        z = None if k is None else torch.full((N_DRAWS,), k)
        state = irbm.HiddenState(torch.from_numpy(np.tile(h, (N_DRAWS, 1))), z)
        v = model.sample_visible(state, generator)
        assert v.shape == (N_DRAWS, example.n_visible) and v.dtype == torch.float64
        assert ((v == 0) | (v == 1)).all()
        counts = np.bincount(visible_index(v.detach().numpy()), minlength=len(V))
        assert chi_square_pvalue(counts, exact) > P_MIN


# --------------------------------------------------------------------------- Gibbs chains
CHAIN_EXAMPLES = [
    Example("rbm", 5, 3, seed=60),
    Example("orbm", 4, 3, beta=1.01, seed=60),
    Example("irbm", 4, 2, beta=1.01, seed=60),
    Example("irbm", 4, 3, beta=1.5, seed=62),
]
N_CHAINS = 16
SAMPLES_PER_CHAIN = 2_500


def _mixing(ref: BruteForce) -> tuple[int, int]:
    """(burn-in, thinning) from the second largest eigenvalue modulus lambda of the exact Gibbs
    kernel: lambda**burn_in <= 1e-10 and lambda**thin <= 0.01, so kept samples are at most ~1%
    correlated."""
    eigenvalues = np.sort(np.abs(np.linalg.eigvals(ref.gibbs_kernel())))[::-1]
    assert eigenvalues[0] == pytest.approx(1.0)
    lam = eigenvalues[1]
    assert lam < 0.5, "example chosen to mix quickly; pick another seed"
    return math.ceil(math.log(1e-10) / math.log(lam)), math.ceil(math.log(0.01) / math.log(lam))


@contextlib.contextmanager
def _one_thread():
    """Tiny batches gain nothing from intra-op threads, and on a busy 2-core machine torch's
    threaded softmax on a (16, K) tensor can take milliseconds instead of microseconds."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _run_chains(model, burn_in, thin, seed):
    """N_CHAINS chains from v = 0; keeps every thin-th v with the z sampled from it."""
    with _one_thread():
        return _run_chains_loop(model, burn_in, thin, seed)


def _run_chains_loop(model, burn_in, thin, seed):
    generator = torch.Generator().manual_seed(seed)
    v = torch.zeros(N_CHAINS, model.n_visible, dtype=torch.float64)
    for _ in range(burn_in):
        v, _ = model.gibbs_step(v, generator)
    kept_v, kept_z = [], []
    for step in range(SAMPLES_PER_CHAIN * thin):
        v_next, state = model.gibbs_step(v, generator)
        if step % thin == 0:
            kept_v.append(v)
            kept_z.append(state.z)
        v = v_next
    vs = torch.cat(kept_v).numpy()
    zs = None if kept_z[0] is None else torch.cat(kept_z).numpy()
    return vs, zs


@pytest.mark.parametrize("example", example_params(CHAIN_EXAMPLES))
def test_gibbs_chain_matches_exact_distribution(example):
    """Long block-Gibbs chains (gibbs_step, 16 chains x 2,500 thinned samples) reproduce the
    exact P(v) and, for the ordered models, the exact marginal P(z) (iRBM: z = 1..l and the tail)
    and joint P(v, z): chi-square p > 1e-3. The same samples must be rejected (p < 1e-6) against
    the P(v) of the model with W perturbed by N(0, 0.1^2) noise and, for the iRBM, against the
    oRBM with the same l units (no tail), showing that the test has power."""
    model = example.build()
    ref = reference(example)
    burn_in, thin = _mixing(ref)
    vs, zs = _run_chains(model, burn_in, thin, seed=103)
    n_v = 2**example.n_visible
    v_codes = visible_index(vs)
    p_v = np.exp(ref.log_p_v())
    assert chi_square_pvalue(np.bincount(v_codes, minlength=n_v), p_v) > P_MIN

    if example.ordered:
        n_z = example.n_hidden + (example.family == "irbm")
        assert zs.min() >= 1 and zs.max() <= n_z
        assert chi_square_pvalue(np.bincount(zs - 1, minlength=n_z), ref.p_z()) > P_MIN
        joint = p_v[:, None] * np.exp(ref.log_p_z_given_v(ref.all_visible()))
        joint_counts = np.bincount(v_codes * n_z + zs - 1, minlength=n_v * n_z)
        assert chi_square_pvalue(joint_counts, joint.ravel()) > P_MIN

    # Power: the same counts reject nearby wrong distributions.
    v_counts = np.bincount(v_codes, minlength=n_v)
    perturbed = example.params()
    perturbed.W = perturbed.W + 0.1 * np.random.RandomState(7).randn(*perturbed.W.shape)
    assert chi_square_pvalue(v_counts, np.exp(BruteForce(perturbed).log_p_v())) < 1e-6
    if example.family == "irbm":  # a sampler that dropped the tail z > l would sample the oRBM
        no_tail = example.params()
        no_tail.family = "orbm"
        assert chi_square_pvalue(v_counts, np.exp(BruteForce(no_tail).log_p_v())) < 1e-6


@pytest.mark.parametrize("example", example_params(CHAIN_EXAMPLES[1:2]))
def test_orbm_chain_started_at_z_equal_k(example):
    """A chain started the way the notes recommend for a trained oRBM -- first (h, z) drawn with
    z forced to K, then sample_visible, then gibbs_step -- also reaches the exact P(v)."""
    model = example.build()
    ref = reference(example)
    burn_in, thin = _mixing(ref)
    generator = torch.Generator().manual_seed(104)
    v0 = torch.zeros(N_CHAINS * SAMPLES_PER_CHAIN // 10, example.n_visible, dtype=torch.float64)
    state = model.sample_hidden(v0, generator, z=example.n_hidden)
    assert (state.z == example.n_hidden).all()
    v = model.sample_visible(state, generator)
    for _ in range(burn_in):
        v, _ = model.gibbs_step(v, generator)
    counts = np.bincount(visible_index(v.numpy()), minlength=2**example.n_visible)
    assert chi_square_pvalue(counts, np.exp(ref.log_p_v())) > P_MIN
