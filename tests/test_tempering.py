"""Parallel tempering with BAR (`irbm.tempering`): Bennett's equation on distributions whose
ratio is known, and ln Z of every family against brute force (tiny models, float64) and
against the exact ln Z of block-diagonal models at full size."""

import itertools
import math

import numpy as np
import pytest
import torch
from test_models_reference import EXAMPLES, example_params, reference

from irbm.models import block_diagonal
from irbm.tempering import bar_log_ratio, estimate_log_partition_tempering


def test_bar_is_exact_when_the_two_densities_differ_by_a_constant():
    works = np.full(7, 3.25)  # f_1 = e^3.25 f_0 everywhere
    assert bar_log_ratio(works, np.full(11, 3.25)) == pytest.approx(3.25, abs=1e-9)


def test_bar_recovers_the_ratio_of_two_shifted_gaussians():
    """f_0(x) = exp(-x^2 / 2), f_1(x) = k exp(-(x - m)^2 / 2): ln Z_1 / Z_0 = ln k, and
    w = ln f_1 - ln f_0 = ln k + m x - m^2 / 2, sampled from both ends."""
    rng = np.random.default_rng(0)
    log_k, shift, n = 5.0, 1.5, 20_000
    x_0, x_1 = rng.normal(0.0, 1.0, n), rng.normal(shift, 1.0, n // 2)
    work = lambda x: log_k + shift * x - shift ** 2 / 2  # noqa: E731
    estimate = bar_log_ratio(work(x_0), work(x_1))
    assert abs(estimate - log_k) < 0.03
    # One-sided exponential averaging with the same samples is worse: BAR uses both ends.
    one_sided = np.logaddexp.reduce(work(x_0)) - math.log(n)
    assert abs(estimate - log_k) < abs(one_sided - log_k) + 0.03


def _bennett_balance(forward, backward, c):
    """ln sum_0 sigmoid(w + c) - ln sum_1 sigmoid(-(w + c)), increasing in c: 0 at the root."""
    return (np.logaddexp.reduce(-np.logaddexp(0.0, -(forward + c)))
            - np.logaddexp.reduce(-np.logaddexp(0.0, backward + c)))


def _bennett_root_by_bisection(forward, backward) -> float:
    """ln(Z_1 / Z_0) from Bennett's equation solved by bisection down to adjacent floats."""
    low, high = -1e4, 1e4
    while (middle := 0.5 * (low + high)) not in (low, high):
        low, high = (low, middle) if _bennett_balance(forward, backward, middle) > 0 else \
            (middle, high)
    return math.log(backward.size / forward.size) - middle


@pytest.mark.parametrize("seed", range(8))
def test_bar_solves_bennetts_equation_to_rounding(seed):
    """Works of every spread, overlap and sample size, as ladders of trained models give:
    the solver's answer is the root of Bennett's equation (found here by plain bisection)."""
    rng = np.random.default_rng(seed)
    spread, gap = 10.0 ** rng.uniform(-2, 2), rng.normal(0.0, 30.0)
    forward = rng.normal(gap, spread, rng.integers(1, 3000)) * rng.choice([1.0, 0.1])
    backward = rng.normal(gap + spread ** 2 / 2, spread, rng.integers(1, 3000))
    expected = _bennett_root_by_bisection(forward, backward)
    assert bar_log_ratio(forward, backward) == pytest.approx(expected, abs=1e-9, rel=1e-12)


@pytest.mark.parametrize("forward, backward, expected", [
    ([0.0], [-500.0, -1000.0], math.log(2) - 750),  # g' = -g in the tail Newton starts from
    ([0.0], [-1000.0, 500.0], math.log(2) - 500)])
def test_bar_leaves_the_exponential_tails_of_bennetts_equation(forward, backward, expected):
    assert bar_log_ratio(forward, backward) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("seed", range(200))
def test_bar_finds_a_root_with_few_samples_far_apart(seed):
    """A handful of works with spreads of hundreds of nats, the two sides overlapping either
    way round: g at the answer is zero to rounding (where g is flat to rounding, any point of
    the flat stretch is a root, and bisection's may differ)."""
    rng = np.random.default_rng(seed)
    spread = rng.uniform(100, 1000)
    forward = rng.normal(0.0, spread, rng.integers(1, 20))
    backward = rng.normal(rng.normal(0.0, 2 * spread), spread, rng.integers(1, 20))
    c = math.log(backward.size / forward.size) - bar_log_ratio(forward, backward)
    assert abs(_bennett_balance(forward, backward, c)) < 1e-9


def test_bar_refuses_an_empty_side():
    with pytest.raises(ValueError, match="both distributions"):
        bar_log_ratio([], [1.0])


@pytest.mark.parametrize("example", example_params(  # one per family, 32-128 states
    [e for e in EXAMPLES if e.n_visible >= 5 and e.n_hidden == 5]))
def test_tempering_matches_brute_force_on_tiny_models(example):
    model = example.build()
    exact = reference(example).log_partition()
    for path in model.ais_paths:
        result = estimate_log_partition_tempering(model, 8, 250, n_ladders=16, base="model",
                                                  path=path, seed=3, progress=False)
        assert abs(result.log_z - exact) < 4 * result.stderr + 0.02, (path, result, exact)
        assert result.passages > 0 and (result.swap_rates > 0).all()


@pytest.mark.parametrize("family, options", [("rbm", {}), ("orbm", {"beta": 1.05}),
                                             ("irbm", {"beta": 1.05})])
def test_tempering_matches_the_exact_log_partition_at_full_size(family, options):
    """784 visible units, 100 hidden, weights of trained magnitude: the ln Z of a product of
    small RBMs, exact, on every annealing path of the family. BDMC from 128 of its samples is
    above ln Z within its noise, and within a nat of it at 200 temperatures."""
    from irbm.evaluate import bdmc_log_partition
    model, exact = block_diagonal(family, 784, 100, block_size=12, weight_std=2.0, seed=4,
                                  **options)
    for path in model.ais_paths:
        result = estimate_log_partition_tempering(model, 16, 120, n_ladders=16, base="model",
                                                  path=path, n_samples=16 * 8, seed=3,
                                                  progress=False)
        assert abs(result.log_z - exact) < 4 * result.stderr + 0.05, (path, result, exact)
        assert result.group_log_z.shape == (8,) and result.log_ratios.shape == (15,)
        assert result.summary()["passages"] == result.passages > 0
        bdmc = bdmc_log_partition(model, result.samples, betas=np.linspace(0, 1, 200),
                                  base="model", path=path, n_clusters=16, seed=1)
        assert exact - 4 * bdmc.stderr - 0.05 < bdmc.log_z < exact + 1.0, (path, bdmc)


@pytest.mark.parametrize("arguments, message", [
    (dict(n_ladders=12, n_groups=8), "multiple of n_groups"),
    (dict(n_ladders=8, n_groups=1), "at least 2"),
    (dict(burn_in=1.0), "burn_in"),
    (dict(n_sweeps=0), "no sweep after the burn-in"),
])
def test_bad_arguments_are_refused_before_any_work(arguments, message):
    model = EXAMPLES[1].build()
    with pytest.raises(ValueError, match=message):
        estimate_log_partition_tempering(model, 4, **{"n_sweeps": 10, **arguments},
                                         base="model", progress=False)


def test_tempering_is_reproducible_from_its_seed():
    model = EXAMPLES[5].build()
    first, second = (estimate_log_partition_tempering(model, 6, 50, n_ladders=8,
                                                      base="model", seed=9, progress=False)
                     for _ in range(2))
    assert first.log_z == second.log_z and first.passages == second.passages
    torch.testing.assert_close(torch.from_numpy(first.swap_rates),
                               torch.from_numpy(second.swap_rates))


@pytest.mark.parametrize("example", example_params(
    [e for e in EXAMPLES if e.n_visible >= 5 and e.n_hidden == 5]))
def test_log_unnormalized_many_agrees_with_the_steps_and_the_free_energy(example):
    """Tempering's shared-product evaluation checked by independent routes, on every path
    (pinned: temperatures on both sides of the release): each difference
    ln f_b(v) - ln f_a(v) is what the path's own step(a, b) returns at v (its log ratio is
    computed by other code: fused kernels, the pinned path's `_log_ratio`), and
    ln f_1(v) = -F(v) up to one constant over v."""
    from irbm.ais import make_path
    from irbm.models import UniformSource
    model = example.build()
    v = torch.rand(9, example.n_visible, generator=torch.Generator().manual_seed(3)).lt(0.5)
    v = v.to(model.dtype)
    ts = (0.0, 0.3, 0.74, 0.8, 0.97, 1.0)
    bases = (model.base_visible_bias(), torch.zeros(example.n_visible, dtype=model.dtype))
    for path, base in itertools.product(model.ais_paths, bases):  # zeros: c is annealed too
        annealing = make_path(model, base, path)
        many = annealing.log_unnormalized_many(v, ts)
        assert many.shape == (len(ts), 9)
        for a in range(len(ts) - 1):
            annealing.start(v, UniformSource(0, model.device))
            stepped = annealing.step(ts[a], ts[a + 1]).double()
            torch.testing.assert_close(stepped, many[a + 1] - many[a], rtol=0, atol=1e-9)
        offset = many[-1] + model.free_energy(v).detach().double()
        assert float(offset.max() - offset.min()) < 1e-9, path


# ---------------------------------------------------------------- samples and BDMC
def _exact_samples(example, n, seed):
    """n exact draws from the example's p(v), by enumeration."""
    brute = reference(example)
    probabilities = torch.from_numpy(np.exp(brute.log_p_v()))
    index = torch.multinomial(probabilities, n, replacement=True,
                              generator=torch.Generator().manual_seed(seed))
    return torch.from_numpy(brute.all_visible()[index.numpy()]).float()


@pytest.mark.parametrize("example", example_params(  # one per family, 32-128 states
    [e for e in EXAMPLES if e.n_visible >= 5 and e.n_hidden == 5]))
def test_bdmc_from_exact_samples_bounds_ln_z_from_above_and_is_tight(example):
    """Reverse annealing from exact draws: -ln mean exp(-d) is a stochastic upper bound of
    ln Z, on every path, and close to it with a modest schedule."""
    from irbm.evaluate import bdmc_log_partition
    model = example.build()
    exact = reference(example).log_partition()
    samples = _exact_samples(example, 1000, seed=5)
    for path in model.ais_paths:
        short = bdmc_log_partition(model, samples, betas=np.linspace(0, 1, 3), base="model",
                                   path=path, seed=2)
        tight = bdmc_log_partition(model, samples, betas=np.linspace(0, 1, 300), base="model",
                                   path=path, seed=2)
        assert tight.n_samples == 1000 and tight.n_betas == 300
        assert tight.summary() == {"log_z": tight.log_z, "stderr": tight.stderr,
                                   "n_samples": 1000, "n_betas": 300, "seconds": tight.seconds}
        assert abs(tight.log_z - exact) < 4 * tight.stderr + 0.02, (path, tight, exact)
        # Few temperatures: a looser bound, still above ln Z (beyond its noise).
        assert short.log_z > exact - 3 * short.stderr, (path, short, exact)
    with pytest.raises(ValueError, match="must divide"):
        bdmc_log_partition(model, samples, betas=np.linspace(0, 1, 3), base="model",
                           n_clusters=7)
    with pytest.raises(ValueError, match="needs base_data"):
        bdmc_log_partition(model, samples, betas=np.linspace(0, 1, 3), base="data")


def test_tempering_keeps_samples_of_the_model_replica_that_follow_the_model():
    """Their histogram is as far from p(v) as that of as many exact draws (total variation
    within 1.5 times the exact draws' plus 0.02)."""
    example = next(e for e in EXAMPLES if e.family == "orbm" and e.n_visible == 5)
    model = example.build()
    result = estimate_log_partition_tempering(model, 8, 200, n_ladders=16, base="model",
                                              n_samples=16 * 50, seed=3, progress=False)
    assert result.samples.shape == (800, example.n_visible)
    assert "samples" not in result.summary()  # JSON-ready: no tensors
    brute = reference(example)
    states, exact = brute.all_visible(), np.exp(brute.log_p_v())

    def total_variation(samples):
        index = [int(np.flatnonzero((states == row).all(1))[0]) for row in samples.numpy()]
        return 0.5 * np.abs(np.bincount(index, minlength=len(states)) / len(index) - exact).sum()

    noise = np.mean([total_variation(_exact_samples(example, 800, seed)) for seed in range(5)])
    assert total_variation(result.samples) < 1.5 * noise + 0.02, noise
    with pytest.raises(ValueError, match="multiple of n_ladders"):
        estimate_log_partition_tempering(model, 4, 20, n_ladders=16, base="model",
                                         n_samples=17, progress=False)
