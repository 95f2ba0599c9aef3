"""Brute-force reference for the three model families, written from the paper's equations, and
the list of example models that drives the other ``test_models_*`` files.

Nothing here calls into ``irbm`` except `Example.build` (which only constructs a model and copies
parameters into it) and `model_energy` (a thin adapter used when the brute force must run on the
model's *own* energy function). Everything else is plain numpy in float64:

* `own_energy` is eq. (1) (RBM) and eq. (orbm:energy) (oRBM / iRBM), with the iRBM's units beyond
  l having W_i. = 0, b_i = 0, so their penalty is beta * softplus(0).
* `BruteForce` lists every legal hidden state (h, z) -- h in H_z for the ordered models -- and
  every visible vector, and obtains every quantity (free energies, P(z | v), E[h | v], log Z, the
  exact Gibbs kernel) by summing exp(-E) over that list.

For the iRBM the sum over z is infinite. Units l+1..z have zero parameters, so for z > l the
2**(z - l) settings of h_{l+1..z} all have the same energy: the list holds h over the first l
units with a multiplicity 2**(z - l) (checked against a fully padded enumeration below), and z is
truncated at a z_max where the neglected terms are provably below 1e-13 of the total.

This module also holds the self-tests of the reference (small cases with hand-derived answers),
so that the comparisons elsewhere rest on something checked independently of the library.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from scipy.special import logsumexp

import irbm

LN2 = math.log(2.0)
# Relative mass of the iRBM's z-tail that the brute force may neglect.
TAIL_TOLERANCE = 1e-13


def softplus(x):
    """ln(1 + e^x), stably (paper's soft_+)."""
    return np.logaddexp(0.0, x)


def all_binary(n: int) -> np.ndarray:
    """All 2**n binary vectors of length n, shape (2**n, n), float64."""
    return np.array(list(itertools.product((0.0, 1.0), repeat=n))).reshape(2**n, n)


# --------------------------------------------------------------------------- parameters
@dataclass
class Params:
    """Parameters of one model in numpy float64. beta is None for the RBM."""

    family: str
    W: np.ndarray  # (K, D)
    b: np.ndarray  # (K,)
    c: np.ndarray  # (D,)
    beta: float | None = None

    @property
    def n_visible(self) -> int:
        return self.W.shape[1]

    @property
    def n_hidden(self) -> int:
        return self.W.shape[0]


def random_params(family, n_visible, n_hidden, beta=None, seed=0, scale=1.0) -> Params:
    """W, b, c ~ N(0, scale^2), from a fixed numpy seed."""
    rng = np.random.RandomState(seed)
    return Params(family, scale * rng.randn(n_hidden, n_visible), scale * rng.randn(n_hidden),
                  scale * rng.randn(n_visible), beta)


def build_model(params: Params, dtype=torch.float64):
    """An irbm model of the right family holding ``params`` (copied in with ``copy_``)."""
    D, K = params.n_visible, params.n_hidden
    if params.family == "rbm":
        model = irbm.RBM(D, K, dtype=dtype)
    elif params.family == "orbm":
        model = irbm.OrderedRBM(D, K, beta=params.beta, dtype=dtype)
    elif params.family == "irbm":
        model = irbm.InfiniteRBM(D, n_hidden=K, beta=params.beta, dtype=dtype)
    else:
        raise AssertionError(params.family)
    with torch.no_grad():
        model.W.copy_(torch.from_numpy(params.W))
        model.b.copy_(torch.from_numpy(params.b))
        model.c.copy_(torch.from_numpy(params.c))
    return model


@dataclass(frozen=True)
class Example:
    """One example model: family, shape, beta and the seed of its random parameters."""

    family: str
    n_visible: int
    n_hidden: int
    beta: float | None = None
    seed: int = 0
    scale: float = 1.0

    @property
    def id(self) -> str:
        beta = "" if self.beta is None else f"-beta{self.beta}"
        return f"{self.family}-D{self.n_visible}-K{self.n_hidden}{beta}"

    @property
    def ordered(self) -> bool:
        return self.family != "rbm"

    def params(self) -> Params:
        return random_params(self.family, self.n_visible, self.n_hidden, self.beta,
                             self.seed, self.scale)

    def build(self, dtype=torch.float64):
        return build_model(self.params(), dtype)


# The shared list of example models (in the manner of torch.distributions' EXAMPLES): every
# family in several shapes. D < K makes log_partition_exact enumerate visible vectors, D >= K
# hidden configurations, so both of its code paths are covered. beta = 1.01 (the paper's value)
# gives the iRBM a heavy tail; larger betas vary the penalty.
EXAMPLES = [
    Example("rbm", 3, 1, seed=1),
    Example("rbm", 5, 3, seed=2),
    Example("rbm", 7, 5, seed=3),
    Example("rbm", 3, 5, seed=4),
    Example("orbm", 3, 1, beta=1.01, seed=5),
    Example("orbm", 5, 3, beta=1.01, seed=6),
    Example("orbm", 7, 5, beta=1.5, seed=7),
    Example("orbm", 3, 5, beta=1.01, seed=8),
    Example("irbm", 3, 1, beta=1.01, seed=9),
    Example("irbm", 5, 3, beta=1.01, seed=10),
    Example("irbm", 7, 5, beta=1.2, seed=11),
    Example("irbm", 3, 5, beta=1.5, seed=12),
]
ORDERED_EXAMPLES = [e for e in EXAMPLES if e.ordered]


def example_params(examples):
    """pytest parameters (with readable ids) for a list of examples."""
    return [pytest.param(e, id=e.id) for e in examples]


# --------------------------------------------------------------------------- energies
def own_energy(p: Params, v, h, z=None) -> np.ndarray:
    """The paper's energy, row by row. v (n, D), h (n, K), z (n,) 1-based or None (RBM).

    RBM, eq. (rbm:energy): E = -h^T W v - v^T c - h^T b.
    oRBM/iRBM, eq. (orbm:energy): E = -v^T c - sum_{i<=z} (h_i (W_i. v + b_i) - beta_i) with
    beta_i = beta softplus(b_i). For the iRBM, every unit i > K has W_i. = 0 and b_i = 0: it adds
    h_i * 0 - beta softplus(0) whatever h_i is, so h only needs its first K columns.
    """
    v, h = np.asarray(v, float), np.asarray(h, float)
    visible = v @ p.c
    if p.family == "rbm":
        return -np.einsum("nk,kd,nd->n", h, p.W, v) - visible - h @ p.b
    z = np.asarray(z)
    K = p.n_hidden
    selected = (np.arange(1, K + 1)[None, :] <= z[:, None]).astype(float)  # (n, K)
    per_unit = h * (v @ p.W.T + p.b) - p.beta * softplus(p.b)
    energy = -visible - (per_unit * selected).sum(1)
    beyond = np.clip(z - K, 0, None)
    return energy + beyond * p.beta * softplus(0.0)


def model_energy(model):
    """The model's own ``energy`` as a numpy function with the signature of `own_energy`."""

    def energy(p, v, h, z=None):
        args = [torch.from_numpy(np.asarray(v, float)), torch.from_numpy(np.asarray(h, float))]
        if z is not None:
            args.append(torch.from_numpy(np.asarray(z)).long())
        with torch.no_grad():
            return model.energy(*args).double().numpy()

    return energy


def tail_z_max(p: Params) -> int:
    """Largest z enumerated for an iRBM: far enough that the neglected tail is negligible.

    Beyond l every extra unit multiplies the sum over z by r = 2 * 2**(-beta) = 2**(1 - beta)
    (two settings of h_i, penalty beta ln 2 each), so the mass beyond z_max is at most
    r**(z_max - l) / (1 - r) of the mass at z = l, itself at most the total.
    """
    log_r = (1.0 - p.beta) * LN2
    n_extra = math.ceil((math.log(TAIL_TOLERANCE) + math.log(1 - math.exp(log_r)) - 2) / log_r)
    return p.n_hidden + n_extra


def tail_bound(p: Params, z_max: int) -> float:
    """Upper bound on (mass with z > z_max) / (total mass), for every v."""
    r = 2.0 ** (1.0 - p.beta)
    return r ** (z_max - p.n_hidden) * r / (1 - r)


# --------------------------------------------------------------------------- brute force
class BruteForce:
    """Every quantity of a small model by explicit summation of exp(-E) over (v, h, z).

    Parameters
    ----------
    p : Params
    energy : callable (p, v, h, z) -> (n,), the energy used in the sums (default: the paper's).
    z_max : int, for the iRBM: last z enumerated (default `tail_z_max`).
    """

    def __init__(self, p: Params, energy=own_energy, z_max: int | None = None):
        self.p = p
        self.energy = energy
        K = p.n_hidden
        hs = all_binary(K)
        if p.family == "rbm":
            self.h, self.z, self.log_mult = hs, None, np.zeros(len(hs))
        else:
            if p.family == "orbm":
                self.z_values = np.arange(1, K + 1)
            else:
                self.z_max = tail_z_max(p) if z_max is None else z_max
                assert tail_bound(p, self.z_max) < TAIL_TOLERANCE or z_max is not None
                self.z_values = np.arange(1, self.z_max + 1)
            h_list, z_list, mult_list = [], [], []
            for z in self.z_values:
                legal = hs[(hs[:, min(z, K):] == 0).all(1)]  # h in H_z
                h_list.append(legal)
                z_list.append(np.full(len(legal), z))
                # iRBM: h_{l+1..z} are free and do not change the energy.
                mult_list.append(np.full(len(legal), max(z - K, 0) * LN2))
            self.h = np.concatenate(h_list)
            self.z = np.concatenate(z_list)
            self.log_mult = np.concatenate(mult_list)
        self.n_states = len(self.h)
        self._cache = {}

    # -- the (v, state) table
    def log_weights(self, v) -> np.ndarray:
        """log of the total weight exp(-E(v, h, z)) of each listed state: shape (N, n_states).
        Memoized per v (the iRBM tables are large and several tests use the same ones)."""
        v = np.ascontiguousarray(v, float)
        key = (v.shape, v.tobytes())
        if key not in self._cache:
            self._cache[key] = self._log_weights(v)
        return self._cache[key]

    def _log_weights(self, v):
        N, S = len(v), self.n_states
        rows_v = np.repeat(v, S, axis=0)
        rows_h = np.tile(self.h, (N, 1))
        rows_z = None if self.z is None else np.tile(self.z, N)
        energies = np.empty(N * S)
        chunk = 2**20
        for start in range(0, N * S, chunk):
            stop = start + chunk
            zs = None if rows_z is None else rows_z[start:stop]
            energies[start:stop] = self.energy(self.p, rows_v[start:stop], rows_h[start:stop], zs)
        return -energies.reshape(N, S) + self.log_mult[None, :]

    def all_visible(self) -> np.ndarray:
        return all_binary(self.p.n_visible)

    # -- marginals and conditionals
    def free_energy(self, v) -> np.ndarray:
        """F(v) = -ln sum_{h,z} exp(-E(v, h, z)), shape (N,)."""
        return -logsumexp(self.log_weights(v), axis=1)

    def free_energy_z(self, v) -> np.ndarray:
        """F(v, z) = -ln sum_{h in H_z} exp(-E(v, h, z)) for z = 1..K, shape (N, K)."""
        lw = self.log_weights(v)
        K = self.p.n_hidden
        return np.stack([-logsumexp(lw[:, self.z == z], axis=1) for z in range(1, K + 1)], 1)

    def log_p_z_given_v(self, v) -> np.ndarray:
        """ln P(z | v) for z = 1..K, plus, for the iRBM, a last column ln P(z > K | v)."""
        lw = self.log_weights(v)
        total = logsumexp(lw, axis=1, keepdims=True)
        K = self.p.n_hidden
        cols = [logsumexp(lw[:, self.z == z], axis=1) for z in range(1, K + 1)]
        if self.p.family == "irbm":
            cols.append(logsumexp(lw[:, self.z > K], axis=1))
        return np.stack(cols, 1) - total

    def survival(self, v) -> np.ndarray:
        """P(z >= i | v) = 1 - cdf(z | v)_i for i = 1..K (paper's cdf: P(z < i | v))."""
        lw = self.log_weights(v)
        post = np.exp(lw - logsumexp(lw, axis=1, keepdims=True))
        return np.stack([post[:, self.z >= i].sum(1) for i in range(1, self.p.n_hidden + 1)], 1)

    def mean_hiddens(self, v) -> np.ndarray:
        """E[h_i | v] = sum_{h,z} P(h, z | v) h_i, shape (N, K)."""
        lw = self.log_weights(v)
        post = np.exp(lw - logsumexp(lw, axis=1, keepdims=True))
        return post @ self.h

    def log_partition(self) -> float:
        """ln Z = ln sum_{v, h, z} exp(-E(v, h, z))."""
        return float(logsumexp(self.log_weights(self.all_visible())))

    def log_p_v(self) -> np.ndarray:
        """ln P(v) for every v of `all_visible`, shape (2**D,)."""
        lw = logsumexp(self.log_weights(self.all_visible()), axis=1)
        return lw - logsumexp(lw)

    def p_z(self) -> np.ndarray:
        """Marginal P(z) for z = 1..K (+ the iRBM tail P(z > K)), shape (K,) or (K + 1,)."""
        V = self.all_visible()
        return np.exp(self.log_p_v()) @ np.exp(self.log_p_z_given_v(V))

    def state_key(self):
        """Category of each listed state for the ordered models: z (iRBM tail -> K + 1)."""
        return np.minimum(self.z, self.p.n_hidden + 1)

    def gibbs_kernel(self) -> np.ndarray:
        """Exact v -> v' transition matrix of block Gibbs sampling, (2**D, 2**D):
        T[v, v'] = sum_s P(s | v) P(v' | s), both conditionals from exp(-E) normalized over
        the states s = (h, z) and over the visible vectors respectively."""
        lw = self.log_weights(self.all_visible())  # (V, S)
        p_s_given_v = np.exp(lw - logsumexp(lw, axis=1, keepdims=True))
        p_v_given_s = np.exp(lw - logsumexp(lw, axis=0, keepdims=True))
        return p_s_given_v @ p_v_given_s.T


@functools.cache
def reference(example: Example) -> BruteForce:
    """The (memoized) brute force of an example with the paper's energy. Do not mutate."""
    return BruteForce(example.params())


def visible_index(v) -> np.ndarray:
    """Row index of each binary vector in `all_binary` order (first unit = most significant)."""
    v = np.asarray(v)
    weights = 2 ** np.arange(v.shape[1] - 1, -1, -1)
    return (v @ weights).round().astype(int)


# =========================================================================== self-tests
def test_all_binary_lists_each_vector_once_in_index_order():
    """all_binary(n) holds 2**n distinct rows and visible_index inverts it."""
    for n in (1, 3, 6):
        V = all_binary(n)
        assert V.shape == (2**n, n)
        assert len({tuple(row) for row in V}) == 2**n
        np.testing.assert_array_equal(visible_index(V), np.arange(2**n))


def test_reference_rbm_one_by_one_closed_form():
    """D = K = 1 RBM: Z = sum over the 4 states written out by hand."""
    p = Params("rbm", np.array([[0.7]]), np.array([-0.3]), np.array([0.4]))
    by_hand = math.log(1 + math.exp(0.4) + math.exp(-0.3) + math.exp(0.7 + 0.4 - 0.3))
    assert BruteForce(p).log_partition() == pytest.approx(by_hand, rel=1e-14)


def test_reference_orbm_one_by_two_closed_form():
    """D = 1, K = 2 oRBM: the 3 legal (h, z) per v written out (z=1: h1; z=2: h1, h2)."""
    W, b, c, beta = np.array([[0.5], [-1.2]]), np.array([0.3, -0.4]), np.array([0.2]), 1.3
    p = Params("orbm", W, b, c, beta)
    pen = beta * np.log1p(np.exp(b))
    total = 0.0
    for v in (0.0, 1.0):
        a = W[:, 0] * v + b
        z1 = math.exp(c[0] * v - pen[0]) * (1 + math.exp(a[0]))
        z2 = math.exp(c[0] * v - pen[0] - pen[1]) * (1 + math.exp(a[0])) * (1 + math.exp(a[1]))
        total += z1 + z2
    assert BruteForce(p).log_partition() == pytest.approx(math.log(total), rel=1e-14)


def test_reference_irbm_tail_multiplicity_matches_padded_enumeration():
    """For z > l the reference counts the 2**(z-l) settings of the zero units instead of listing
    them. Listing them explicitly, as an oRBM with l + m units of zero parameters, must give the
    same F(v, z) for every z <= l + m."""
    p = random_params("irbm", 3, 2, beta=1.3, seed=0)
    m = 5
    padded = Params("orbm", np.vstack([p.W, np.zeros((m, 3))]), np.concatenate([p.b, np.zeros(m)]),
                    p.c, p.beta)
    V = all_binary(3)
    ref = BruteForce(p)
    lw = ref.log_weights(V)
    f_z_irbm = np.stack([-logsumexp(lw[:, ref.z == z], axis=1) for z in range(1, 2 + m + 1)], 1)
    np.testing.assert_allclose(f_z_irbm, BruteForce(padded).free_energy_z(V), rtol=1e-13)


def test_reference_irbm_truncation_converges():
    """The iRBM brute force truncated at z_max changes by less than the bound when z_max grows."""
    p = random_params("irbm", 3, 2, beta=1.05, seed=1)
    V = all_binary(3)
    z_max = tail_z_max(p)
    f = BruteForce(p, z_max=z_max).free_energy(V)
    f_longer = BruteForce(p, z_max=z_max + 400).free_energy(V)
    f_short = BruteForce(p, z_max=z_max // 4).free_energy(V)
    assert np.abs(f - f_longer).max() < 10 * TAIL_TOLERANCE
    assert np.abs(f - f_short).max() > 1e-6  # the truncation point does matter


def test_reference_gibbs_kernel_is_stochastic_and_keeps_p_v():
    """The reference's exact Gibbs kernel is a stochastic matrix with P(v) stationary."""
    for family, beta in (("rbm", None), ("orbm", 1.2), ("irbm", 1.2)):
        ref = BruteForce(random_params(family, 3, 2, beta, seed=3))
        T = ref.gibbs_kernel()
        np.testing.assert_allclose(T.sum(1), 1.0, rtol=1e-12)
        pi = np.exp(ref.log_p_v())
        np.testing.assert_allclose(pi @ T, pi, rtol=1e-10)


def test_reference_free_energy_matches_paper_closed_forms():
    """Brute-force F(v) agrees with the paper's closed forms: eq. (rbm:free_energy) for the RBM,
    eqs. (orbm:v_z_free_energy)-(orbm:p_v_free_energy) for the oRBM."""
    V = all_binary(4)
    p = random_params("rbm", 4, 3, seed=4)
    closed = -V @ p.c - softplus(V @ p.W.T + p.b).sum(1)
    np.testing.assert_allclose(BruteForce(p).free_energy(V), closed, rtol=1e-13)
    p = random_params("orbm", 4, 3, beta=1.4, seed=5)
    gains = softplus(V @ p.W.T + p.b) - p.beta * softplus(p.b)
    f_z = -(V @ p.c)[:, None] - np.cumsum(gains, 1)
    np.testing.assert_allclose(BruteForce(p).free_energy_z(V), f_z, rtol=1e-13)
    np.testing.assert_allclose(BruteForce(p).free_energy(V), -logsumexp(-f_z, axis=1), rtol=1e-13)
