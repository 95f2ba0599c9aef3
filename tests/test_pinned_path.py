"""The pinned AIS path of the families with z, against enumeration over (v, z, h) in float64.

The reference below is written from the path's definition, not from irbm's code: for t <= s,
f_t(v) = exp(v^T c_u) sum_{h in {0,1}^K} exp(sum_{i<=K} h_i u (W_i v + b_i) - beta softplus(u b_i)),
u = t / s; for t > s, f_t(v) = sum_z exp(-kappa |z - K|) sum_{h in H_z} exp(-E(v, h, z)) with
kappa = kappa_max ((1 - t) / (1 - s))^3, the iRBM's z running far past l (its units have zero
parameters there). K = 2 here, inside the units, so that both sides of the pin are exercised;
the families pin at K = n_hidden.
"""

import itertools
import math

import numpy as np
import pytest
import torch

from irbm import RBM, InfiniteRBM, OrderedRBM, kernels
from irbm.ais import estimate_log_partition
from irbm.evaluate import raise_nll
from irbm.models import UniformSource
from irbm.models._base import index_from_cdf
from irbm.models._pinned import PinnedPath

N_VISIBLE, PIN, BETA = 5, 2, 1.3
SPLIT, KAPPA_MAX = 0.75, 5.0  # the path's defaults (release over the last 25%)


def make(family, seed=0):
    model = (OrderedRBM(N_VISIBLE, 4, beta=BETA, dtype=torch.float64) if family == "orbm" else
             InfiniteRBM(N_VISIBLE, n_hidden=4, beta=BETA, dtype=torch.float64))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in (model.W, model.b, model.c):
            parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=torch.float64))
    return model


def softplus(x):
    return np.logaddexp(0.0, x)


def reference_log_f(model, base_bias, v, t):
    """ln f_t(v) by enumeration over z and h, in numpy."""
    W, b, c = (p.detach().numpy() for p in (model.W, model.b, model.c))
    c0 = base_bias.numpy()
    v = np.asarray(v, dtype=float)
    if t <= SPLIT:
        u = t / SPLIT
        terms = [sum(h[i] * u * (W[i] @ v + b[i]) - BETA * softplus(u * b[i]) for i in range(PIN))
                 for h in itertools.product((0, 1), repeat=PIN)]
        return v @ (c0 + u * (c - c0)) + np.logaddexp.reduce(terms)
    kappa = KAPPA_MAX * ((1 - t) / (1 - SPLIT)) ** 3
    n_units = W.shape[0]

    def log_sum_h(z):  # ln sum_{h in H_z} exp(-E(v, h, z)), z <= l
        return np.logaddexp.reduce([
            v @ c + sum(h[i] * (W[i] @ v + b[i]) - BETA * softplus(b[i]) for i in range(z))
            for h in itertools.product((0, 1), repeat=z)])

    sums = [log_sum_h(z) for z in range(1, n_units + 1)]
    terms = [sums[z - 1] - kappa * abs(z - PIN) for z in range(1, n_units + 1)]
    if model.has_tail:  # units past l: zero parameters, each (1 + e^0) e^{-beta softplus(0)}
        per_unit = math.log(2.0) - BETA * math.log(2.0)
        terms += [sums[-1] + (z - n_units) * per_unit - kappa * abs(z - PIN)
                  for z in range(n_units + 1, n_units + 200)]
    return np.logaddexp.reduce(terms)


def all_visibles():
    return torch.tensor(list(itertools.product((0.0, 1.0), repeat=N_VISIBLE)), dtype=torch.float64)


@pytest.mark.parametrize("family", ["orbm", "irbm"])
def test_densities_and_base_partition_match_enumeration(family):
    model = make(family)
    base_bias = torch.linspace(-1.0, 0.8, N_VISIBLE, dtype=torch.float64)
    path = PinnedPath(model, base_bias, PIN)
    visibles = all_visibles()
    for t in (0.0, 0.3, 0.75, 0.76, 0.9, 0.99, 1.0):
        expected = [reference_log_f(model, base_bias, v, t) for v in visibles]
        assert path.log_unnormalized(visibles, t).numpy() == pytest.approx(expected, abs=1e-9)
    assert path.log_base_partition == pytest.approx(
        float(torch.logsumexp(path.log_unnormalized(visibles, 0.0), 0)), abs=1e-10)
    # t = 1 is the model itself
    assert path.log_unnormalized(visibles, 1.0).numpy() == pytest.approx(
        (-model.free_energy(visibles)).detach().numpy(), abs=1e-9)


def switch_kernels(mode, monkeypatch):
    """IRBM_KERNELS=mode; "on" skips where numba cannot load (the steps would be eager)."""
    if mode == "on" and not kernels.compiled_available():
        pytest.skip("numba missing or IRBM_KERNELS=off: no fused steps to check")
    monkeypatch.setenv("IRBM_KERNELS", mode)


# While z is pinned on both sides a step runs on irbm.kernels ("on"), else eagerly.
KERNELS = ["on", "off"]


@pytest.mark.parametrize("kernels_mode", KERNELS)
@pytest.mark.parametrize("family", ["orbm", "irbm"])
@pytest.mark.parametrize("t_from, t_to", [(0.2, 0.5), (0.7, 0.75), (0.74, 0.76), (0.8, 0.9),
                                          (0.99, 1.0), (0.76, 0.74), (0.0, 1.0), (1.0, 0.9),
                                          (0.9, 0.9)])
def test_step_returns_the_log_ratio_at_the_current_state(family, t_from, t_to, kernels_mode,
                                                         monkeypatch):
    switch_kernels(kernels_mode, monkeypatch)
    model = make(family, seed=1)
    base_bias = torch.linspace(0.5, -0.5, N_VISIBLE, dtype=torch.float64)
    path = PinnedPath(model, base_bias, PIN)
    visible = all_visibles()
    path.start(visible, UniformSource(0, model.device))
    assert (path.philox is not None) == (kernels_mode == "on")
    expected = np.array([reference_log_f(model, base_bias, v, t_to)
                         - reference_log_f(model, base_bias, v, t_from) for v in visible])
    assert path.step(t_from, t_to).numpy() == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("kernels_mode", KERNELS)
@pytest.mark.parametrize("family", ["orbm", "irbm"])
@pytest.mark.parametrize("t_from, t", [(0.5, 0.5), (0.75, 0.75), (0.9, 0.9), (1.0, 1.0),
                                       (0.76, 0.74), (0.74, 0.76)])
def test_the_transition_leaves_f_t_invariant(family, t_from, t, kernels_mode, monkeypatch):
    """Chains drawn exactly from f_t stay distributed as f_t after one step(t_from, t) (the
    transition depends on t only, but a step across the release computes every unit): the state
    frequencies match f_t within 5 standard errors, state by state."""
    switch_kernels(kernels_mode, monkeypatch)
    model = make(family, seed=2)
    base_bias = torch.zeros(N_VISIBLE, dtype=torch.float64)
    path = PinnedPath(model, base_bias, PIN)
    visibles = all_visibles()
    log_f = path.log_unnormalized(visibles, t)
    probabilities = torch.softmax(log_f, 0)
    n_chains = 200_000
    generator = torch.Generator().manual_seed(3)
    start = torch.multinomial(probabilities, n_chains, replacement=True, generator=generator)
    path.start(visibles[start], UniformSource(4, model.device))
    path.step(t_from, t)
    codes = (path.visible.long() * (2 ** torch.arange(N_VISIBLE - 1, -1, -1))).sum(1)
    frequencies = torch.bincount(codes, minlength=2**N_VISIBLE).double() / n_chains
    standard_error = torch.sqrt(probabilities * (1 - probabilities) / n_chains)
    assert ((frequencies - probabilities).abs() <= 5 * standard_error + 1e-4).all()
    # The check can fail: a step at another temperature moves the frequencies off f_t.
    path.start(visibles[start], UniformSource(4, model.device))
    path.step(0.1, 0.1)
    codes = (path.visible.long() * (2 ** torch.arange(N_VISIBLE - 1, -1, -1))).sum(1)
    moved = torch.bincount(codes, minlength=2**N_VISIBLE).double() / n_chains
    assert not ((moved - probabilities).abs() <= 5 * standard_error + 1e-4).all()


def test_families_pin_at_n_hidden_and_paths_are_validated():
    model = make("irbm", seed=5)
    path = model.annealing_path(model.c.detach())
    assert isinstance(path, PinnedPath) and path.pin == model.n_hidden
    assert type(model.annealing_path(model.c.detach(), kind="linear")) is not PinnedPath
    with pytest.raises(ValueError, match="unknown AIS path 'pinned' for the RBM: choose one of "
                                         "linear"):
        estimate_log_partition(RBM(4, 2), 10, 10, base="model", path="pinned", progress=False)
    with pytest.raises(ValueError, match="choose one of pinned, linear"):
        estimate_log_partition(model, 10, 10, base="model", path="straight", progress=False)


@pytest.mark.parametrize("family", ["orbm", "irbm"])
def test_raise_on_the_pinned_path_bounds_the_exact_likelihood(family):
    """RAISE's estimate is a stochastic lower bound of ln p(v): its NLL lies above the exact one
    (up to noise) and approaches it with temperatures."""
    model = make(family, seed=6)
    visibles = all_visibles()
    exact = model.free_energy(visibles).detach() + model.log_partition_exact()
    rows = visibles[torch.multinomial(torch.exp(-exact), 64, True,
                                      generator=torch.Generator().manual_seed(0))]
    exact_nll = float((model.free_energy(rows).detach() + model.log_partition_exact()).mean())
    estimate = raise_nll(model, rows, n_betas=2000, seed=0, base="model", path="pinned",
                         n_repeats=20, progress=False)
    assert estimate.path.startswith("pinned")
    assert exact_nll - 0.02 < estimate.mean < exact_nll + 0.1


def test_a_uniform_of_zero_never_draws_a_category_of_zero_probability():
    """Category draws (z in AIS, RAISE and training) invert the CDF at (1 - u) * total: u = 0,
    once in 2^24 float32 draws, used to pick category 0 whatever its probability."""
    cdf = torch.tensor([[0.0, 0.0, 0.5, 0.5, 1.0]] * 4)
    uniform = torch.tensor([[0.0], [0.5], [0.4], [1.0 - 2.0**-24]])
    # (1 - u) * total = 1, 0.5, 0.6 and 2^-24: the categories of probability 0.5 only
    assert index_from_cdf(cdf, uniform).flatten().tolist() == [4, 2, 4, 2]


@pytest.mark.parametrize("kernels_mode", KERNELS)
@pytest.mark.parametrize("family", ["orbm", "irbm"])
def test_released_steps_keep_float32_precision_at_size(family, kernels_mode, monkeypatch):
    """A float32 784 x 500 model with preactivations of tens (columns of thousands of nats):
    each released step's increment matches the float64 model's ln f_t' - ln f_t at the chains'
    state within 1e-4 nat (measured: 9e-6 fused and eager, the float32 product's own rounding;
    two log-sums from separately rounded columns, the fused step's first version, erred by
    1-3e-3 per step)."""
    switch_kernels(kernels_mode, monkeypatch)
    model = {"orbm": OrderedRBM, "irbm": InfiniteRBM}[family](784, 500, beta=1.01)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        model.W.copy_(0.5 * torch.randn(model.W.shape, generator=generator))
        model.b.copy_(-1.0 + 0.5 * torch.randn(500, generator=generator))
        model.c.copy_(-2.0 + torch.randn(784, generator=generator))
    base_bias = torch.full((784,), -1.5)
    path = PinnedPath(model, base_bias, model.n_hidden)
    reference = PinnedPath(model.as_float64(), base_bias.double(), model.n_hidden)
    visible = (torch.rand(50, 784, generator=generator) < 0.3).float()
    path.start(visible, UniformSource(0, model.device))
    assert path.fused_release == (kernels_mode == "on")
    for t_from, t_to in [(0.76, 0.77), (0.9, 0.9001), (0.99, 1.0), (1.0, 0.95)]:
        state = path.visible.double()
        expected = (reference.log_unnormalized(state, t_to)
                    - reference.log_unnormalized(state, t_from))
        error = (path.step(t_from, t_to) - expected).abs().max()
        assert error < 1e-4, (t_from, t_to, float(error))


def test_a_wrong_step_late_in_the_path_is_refused_before_ais_runs(monkeypatch):
    """AIS checks a path's step early (0.3 -> 0.6, z pinned) and late (0.9 -> 1.0, released)
    against its densities: a release that is off by 0.5 nat is refused, not annealed."""
    model = make("irbm")
    step = PinnedPath.step

    def skewed(self, t_from, t_to):
        delta = step(self, t_from, t_to)
        return delta + 0.5 if min(t_from, t_to) > self.split else delta

    estimate_log_partition(model, 10, 10, base="model", seed=0, progress=False)
    monkeypatch.setattr(PinnedPath, "step", skewed)
    with pytest.raises(ValueError, match="annealing_path"):
        estimate_log_partition(model, 10, 10, base="model", seed=0, progress=False)
