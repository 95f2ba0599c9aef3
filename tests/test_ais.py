"""AIS against exact log Z on small models of every family (float64, fixed seeds)."""

import copy
import math

import numpy as np
import pytest
import torch
from _deep_mode import deep_mode_model
from torch.nn import functional

from irbm import RBM, InfiniteRBM, OrderedRBM, ais
from irbm.ais import (
    base_log_partition,
    convergence_curve,
    estimate_log_partition,
    log_mean_interval,
    make_betas,
)
from irbm.models import BipartiteModel

FAMILIES = ("rbm", "orbm", "irbm")
# Every family with every annealing path it offers: a new path joins every accuracy test below.
FAMILY_PATHS = [(family, path) for family, cls in zip(FAMILIES, (RBM, OrderedRBM, InfiniteRBM))
                for path in cls.ais_paths]
N_VISIBLE, N_HIDDEN = 16, 10


def make_model(family, n_visible=N_VISIBLE, n_hidden=N_HIDDEN, scale=1.0, seed=0, **options):
    model = {"rbm": lambda: RBM(n_visible, n_hidden, **options),
             "orbm": lambda: OrderedRBM(n_visible, n_hidden, **options),
             "irbm": lambda: InfiniteRBM(n_visible, n_hidden=n_hidden, **options)}[family]()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in (model.W, model.b, model.c):
            parameter.copy_(scale * torch.randn(parameter.shape, generator=generator))
    return model


def prototype_data(n_rows=400, n_visible=N_VISIBLE, flip=0.05, seed=1):
    """Noisy copies of 3 random binary prototypes: a peaked, multi-modal distribution."""
    generator = torch.Generator().manual_seed(seed)
    prototypes = (torch.rand(3, n_visible, generator=generator) < 0.5).double()
    rows = prototypes[torch.randint(3, (n_rows,), generator=generator)]
    flips = (torch.rand(rows.shape, generator=generator) < flip).double()
    return (rows + flips) % 2


def train_exactly(model, data, steps=150, learning_rate=0.1):
    """Maximum likelihood with the exact, differentiable log Z (a sum over the 2**n_hidden
    hidden configurations): a briefly trained, peaked model."""
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    for _ in range(steps):
        optimizer.zero_grad()
        (model._free_energy(data).mean() + model._log_partition_by_hidden()).backward()
        optimizer.step()
    return model


def _all_visibles(n_visible):
    from irbm.models._base import binary_configurations
    return binary_configurations(n_visible, torch.float64)


@pytest.fixture(autouse=True)
def _one_thread():
    # These models are tiny: a second thread only adds synchronization (and stalls badly when
    # the machine is busy).
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def trained():
    torch.set_num_threads(1)
    data = prototype_data()
    return data, {family: train_exactly(make_model(family, scale=0.01, dtype=torch.float64), data)
                  for family in FAMILIES}


# ---------------------------------------------------------------------- the base distribution
@pytest.mark.parametrize("family", FAMILIES)
def test_base_log_partition_matches_closed_form_and_enumeration(family):
    options = {} if family == "rbm" else {"beta": 1.3}
    model = make_model(family, n_hidden=6, dtype=torch.float64, **options)
    with torch.no_grad():
        model.W.zero_()
        model.b.zero_()
    base_bias = torch.linspace(-2.0, 1.5, N_VISIBLE, dtype=torch.float64)
    visible_part = float(functional.softplus(base_bias).sum())
    log_r = (1 - 1.3) * math.log(2)
    z = torch.arange(1, 7, dtype=torch.float64)
    closed_form = {"rbm": visible_part + 6 * math.log(2),
                   "orbm": visible_part + float(torch.logsumexp(z * log_r, 0)),
                   "irbm": visible_part + log_r - math.log(1 - math.exp(log_r))}[family]
    assert base_log_partition(model, base_bias, path="linear") == \
        pytest.approx(closed_form, abs=1e-10)
    if family != "rbm":  # pinned at z = 6: six units of softplus(0) - beta softplus(0)
        assert base_log_partition(model, base_bias, path="pinned") == \
            pytest.approx(visible_part + 6 * log_r, abs=1e-10)
    with torch.no_grad():
        model.c.copy_(base_bias)
    assert model.log_partition_exact() == pytest.approx(closed_form, abs=1e-10)


# ---------------------------------------------------------------------- accuracy
# 500 chains x 1,000 temperatures (chains are cheap here: they share each matrix product). Over
# seeds 0-29 of each of the 12 cases below, |log Z-hat - log Z| was at most 0.05 nat (standard
# deviation at most 0.018, from the model's own base on the trained models) and the 3-sigma
# interval held log Z every time. Both checks fail every case with log Z_0 off by 0.1 nat, every
# data-base case with the visible term of the weights dropped, and some cases of transitions at
# the wrong temperature (which 300 x 10,000 did not catch). 300 x 10,000, the budget before, took
# 8 times longer for errors below 0.015; the tolerance stays 0.1 nat. The base's log Z_0 alone
# is checked exactly above.
N_CHAINS, N_BETAS = 500, 1000


@pytest.mark.parametrize("base", ["model", "data"])
@pytest.mark.parametrize("kind", ["random", "trained"])
@pytest.mark.parametrize("family, path", FAMILY_PATHS)
def test_ais_matches_exact_log_partition(family, path, kind, base, trained):
    data, models = trained
    model = make_model(family, dtype=torch.float64, seed=3) if kind == "random" else models[family]
    exact = model.log_partition_exact()
    result = estimate_log_partition(model, N_CHAINS, N_BETAS, base=base, path=path, data=data,
                                    seed=11, progress=False)
    assert result.path.startswith(path)
    assert abs(result.log_z - exact) < 0.1
    assert result.log_z_low <= exact <= result.log_z_high
    assert result.log_weights.dtype == torch.float64 and result.log_weights.shape == (N_CHAINS,)
    assert result.samples.shape == (N_CHAINS, N_VISIBLE) and result.n_betas == N_BETAS


@pytest.mark.parametrize("family, path", FAMILY_PATHS)
def test_the_eager_steps_match_the_exact_log_partition(family, path, trained, monkeypatch):
    """Each path's eager steps (what runs on CUDA without Triton or without numba; on a CPU
    with numba the test above runs the fused kernels) on the trained models, same budget and
    checks."""
    monkeypatch.setenv("IRBM_KERNELS", "off")
    data, models = trained
    model = models[family]
    exact = model.log_partition_exact()
    result = estimate_log_partition(model, N_CHAINS, N_BETAS, base="data", path=path,
                                    data=data, seed=11, progress=False)
    assert abs(result.log_z - exact) < 0.1
    assert result.log_z_low <= exact <= result.log_z_high


def test_float32_model_and_hook_only_family():
    """A float32 model (float64 accumulation) and a family reached only through the abstract
    hooks both estimate the exact log Z."""
    model = make_model("rbm", scale=0.7, seed=5)
    exact = model.log_partition_exact()
    result = estimate_log_partition(model, 200, 3000, seed=2, progress=False, base="model")
    assert result.log_weights.dtype == torch.float64 and abs(result.log_z - exact) < 0.05
    promoted = estimate_log_partition(model, 200, 3000, seed=2, progress=False, device="cpu",
                                      dtype=torch.float64, base="model")
    assert promoted.samples.dtype == torch.float64 and model.W.dtype == torch.float32
    assert abs(promoted.log_z - exact) < 0.05 and promoted.log_z != result.log_z

    class HookOnly(BipartiteModel):  # an RBM on the generic (unfused) annealing path
        family, display_name = "hook-only-rbm", "hook-only RBM"
        _hidden_log_sum = RBM._hidden_log_sum
        _sample_hidden_from = RBM._sample_hidden_from
        _mean_hiddens = RBM._mean_hiddens
        weighted_gradients = RBM.weighted_gradients
        _n_hidden_terms = RBM._n_hidden_terms
        _hidden_free_energy = RBM._hidden_free_energy
        _hidden_rest = RBM._hidden_rest

    hook_only = HookOnly(N_VISIBLE, N_HIDDEN, dtype=torch.float64)
    hook_only.load_state_dict(model.state_dict())
    assert abs(hook_only.log_partition_exact() - exact) < 1e-5  # float32 parameters
    result = estimate_log_partition(hook_only, 200, 3000, seed=2, progress=False, base="model")
    assert abs(result.log_z - exact) < 0.05 and result.log_z_low <= exact <= result.log_z_high


# ---------------------------------------------------------------- one step: importance sampling
@pytest.mark.parametrize("base", ["model", "data"])
@pytest.mark.parametrize("family, path", FAMILY_PATHS)
def test_single_step_is_unbiased_importance_sampling(family, path, base):
    """With betas = (0, 1), w = Z_0 p*(v) / p*_0(v) with v ~ p_0 exactly: E[Z-hat / Z] = 1.

    The exact variance of w / Z, sum_v p(v)^2 / p_0(v) - 1, sets the tolerance (5 sigma of the
    mean over every chain of every seed)."""
    model = make_model(family, n_visible=10, n_hidden=5, scale=0.5, seed=7, dtype=torch.float64)
    exact = model.log_partition_exact()
    visibles = torch.cat(list(_all_visibles(10)))
    log_p = -model._free_energy(visibles).detach() - exact
    generator = torch.Generator().manual_seed(0)
    data = visibles[torch.multinomial(log_p.exp(), 300, True, generator=generator)]
    base_bias = model.c.detach() if base == "model" else ais.data_base_rate(data, model)
    log_p0 = visibles @ base_bias - functional.softplus(base_bias).sum()
    variance = float(torch.exp(2 * log_p - log_p0).sum()) - 1.0
    n_seeds, n_chains = 150, 20
    ratios = [math.exp(estimate_log_partition(model, n_chains, 2, base=base, path=path, data=data,
                                              seed=seed, progress=False).log_z - exact)
              for seed in range(n_seeds)]
    tolerance = 5 * math.sqrt(variance / (n_seeds * n_chains))
    assert 0.005 < tolerance < 0.15  # the check is informative, and the weights not degenerate
    assert abs(np.mean(ratios) - 1.0) < tolerance


# ---------------------------------------------------------------------- statistics
def test_log_mean_interval_matches_direct_computation_and_is_shift_invariant():
    log_weights = torch.tensor([0.1, -0.3, 0.5, 0.0, -1.2, 0.7], dtype=torch.float64)
    weights = log_weights.exp().numpy()
    sigma = weights.std(ddof=1) / math.sqrt(len(weights))
    expected = [math.log(weights.mean()), math.log(weights.mean() - 3 * sigma),
                math.log(weights.mean() + 3 * sigma)]
    assert log_mean_interval(log_weights) == pytest.approx(expected, abs=1e-12)
    shifted = log_mean_interval(log_weights + 5000.0)
    assert shifted == pytest.approx([value + 5000.0 for value in expected], abs=1e-9)


def test_dominated_weights_give_infinite_lower_bound():
    log_weights = torch.tensor([0.0] + [-100.0] * 9, dtype=torch.float64)
    log_z, low, high = log_mean_interval(log_weights)
    assert log_z == pytest.approx(-math.log(10)) and low == -math.inf and high > log_z


def test_convergence_curve_uses_chain_prefixes():
    log_weights = torch.randn(500, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    counts, log_z, low, high = convergence_curve(log_weights, 30)
    assert counts[0] == 2 and counts[-1] == 500 and (np.diff(counts) > 0).all()
    assert len(counts) == len(log_z) == len(low) == len(high) <= 30
    assert (low <= log_z).all() and (log_z <= high).all()
    for index in (0, len(counts) // 2, -1):
        assert (log_z[index], low[index], high[index]) == pytest.approx(
            log_mean_interval(log_weights[: counts[index]]))


# ---------------------------------------------------------------------- resume, reproducibility
def test_resume_gives_the_same_log_weights(tmp_path, monkeypatch):
    model = make_model("irbm", scale=0.5, dtype=torch.float64)
    options = dict(n_chains=40, n_betas=50, seed=3, chain_batch_size=10, progress=False,
                   base="model")
    uninterrupted = estimate_log_partition(model, **options)
    path = tmp_path / "ais.npz"
    original, calls = ais.run_chains, []

    def interrupted_after_two(*args, **kwargs):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(ais, "run_chains", interrupted_after_two)
    with pytest.raises(KeyboardInterrupt):
        estimate_log_partition(model, checkpoint_path=path, **options)
    with np.load(path) as saved:
        assert saved["batch_sizes"].tolist() == [10, 10]
    calls.clear()
    resumed = estimate_log_partition(model, checkpoint_path=path, **options)
    assert len(calls) == 2  # only the two missing batches ran
    assert torch.equal(resumed.log_weights, uninterrupted.log_weights)
    assert torch.equal(resumed.samples, uninterrupted.samples)
    assert resumed.log_z == uninterrupted.log_z
    with pytest.raises(ValueError, match="another configuration"):
        estimate_log_partition(model, checkpoint_path=path, **{**options, "seed": 4})
    with torch.no_grad():
        model.W[0, 0] += 1e-9
    with pytest.raises(ValueError, match="another configuration"):
        estimate_log_partition(model, checkpoint_path=path, **options)
    with pytest.raises(ValueError, match="seed"):
        estimate_log_partition(model, checkpoint_path=path, **{**options, "seed": None})


def _interrupted_after_one_batch(monkeypatch, model, path, **options):
    """Run AIS into checkpoint ``path`` until one chain batch is saved, then stop."""
    original, calls = ais.run_chains, []

    def interrupted(*args, **kwargs):
        if calls:
            raise KeyboardInterrupt
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(ais, "run_chains", interrupted)
    with pytest.raises(KeyboardInterrupt):
        estimate_log_partition(model, checkpoint_path=path, **options)
    monkeypatch.setattr(ais, "run_chains", original)


def test_a_checkpoint_names_every_model_of_its_trajectory_and_its_random_stream(tmp_path,
                                                                                 monkeypatch):
    model = make_model("rbm", scale=0.5, dtype=torch.float64)
    earlier = copy.deepcopy(model)
    with torch.no_grad():
        earlier.W.mul_(0.5)
    options = dict(n_chains=20, n_betas=20, seed=3, chain_batch_size=10, progress=False,
                   base="model")
    path = tmp_path / "trajectory.npz"
    _interrupted_after_one_batch(monkeypatch, model, path, trajectory=[earlier], **options)
    other = copy.deepcopy(earlier)  # a trajectory of the same length, another model on it
    with torch.no_grad():
        other.W.mul_(0.5)
    with pytest.raises(ValueError, match="another configuration"):
        estimate_log_partition(model, trajectory=[other], checkpoint_path=path, **options)
    # The trajectory path's steps are eager: switching the kernels off changes nothing.
    monkeypatch.setenv("IRBM_KERNELS", "off")
    estimate_log_partition(model, trajectory=[earlier], checkpoint_path=path, **options)
    if _kernels_importable():
        # The linear path's steps run on the kernels (another stream) where they can.
        monkeypatch.delenv("IRBM_KERNELS")
        linear = tmp_path / "linear.npz"
        _interrupted_after_one_batch(monkeypatch, model, linear, **options)
        monkeypatch.setenv("IRBM_KERNELS", "off")
        with pytest.raises(ValueError, match="another configuration"):
            estimate_log_partition(model, checkpoint_path=linear, **options)


def _kernels_importable() -> bool:
    from irbm import kernels
    return kernels._compiled is not None


def test_seed_and_generator_reproduce():
    model = make_model("orbm", scale=0.5, dtype=torch.float64)
    first = estimate_log_partition(model, 8, 20, seed=5, progress=False, base="model")
    second = estimate_log_partition(model, 8, 20, seed=5, progress=False, base="model")
    assert torch.equal(first.log_weights, second.log_weights)
    by_generator = [estimate_log_partition(model, 8, 20, progress=False, base="model",
                                           generator=torch.Generator().manual_seed(9))
                    for _ in range(2)]
    assert torch.equal(by_generator[0].log_weights, by_generator[1].log_weights)
    assert not torch.equal(first.log_weights, by_generator[0].log_weights)


# ---------------------------------------------------------------------- validation
@pytest.mark.parametrize("betas", [[0.5, 1.0], [0.0, 0.9], [0.0, 0.5, 0.5, 1.0],
                                   [0.0, 0.7, 0.3, 1.0], [0.0, float("nan"), 1.0], [0.0],
                                   [[0.0, 1.0]], [1.0, 0.0]])
def test_bad_schedules_raise(betas):
    with pytest.raises(ValueError):
        make_betas(betas=betas)
    with pytest.raises(ValueError):
        estimate_log_partition(make_model("rbm"), 4, betas=betas, seed=0, progress=False,
                               base="model")


@pytest.mark.parametrize("arguments", [dict(n_betas=1), dict(n_betas=2.5), dict(n_betas=True),
                                       dict(n_betas=10, betas=[0.0, 1.0]),
                                       dict(n_chains=0), dict(base="data"), dict(base="nope"),
                                       dict(base=torch.zeros(3)),
                                       dict(seed=1, generator=torch.Generator()),
                                       dict(chain_batch_size=0)])
def test_bad_arguments_raise(arguments):
    arguments = {"n_chains": 4, "base": "model", **arguments}
    with pytest.raises(ValueError):
        estimate_log_partition(make_model("rbm"), progress=False, **arguments)


def test_default_base_needs_data_and_says_so():
    with pytest.raises(ValueError, match="data base rate"):
        estimate_log_partition(make_model("rbm"), 4, 10, seed=0, progress=False)


def test_default_schedule_is_the_authors():
    betas = make_betas()
    assert len(betas) == 14_500 and betas[0] == 0.0 and betas[-1] == 1.0
    assert (np.diff(betas) > 0).all()
    assert ((betas >= 0.5) & (betas < 0.9)).sum() == 4000 and (betas >= 0.9).sum() == 10_000


@pytest.mark.parametrize("family", ["rbm", "orbm", "irbm"])
def test_the_descents_base_anneals_into_a_deep_mode_the_data_base_misses(family):
    """`deep_mode_model`: AIS from the data's base rate (zero rows) never crosses the barrier
    and misses the mode's mass; from the descents base (`ais.descended_base_bias`, the
    visible marginals of the deepest minima of G) it starts in the mode and lands within 0.1
    nat of the exact ln Z. The base is rebuilt the same from a copy of the model."""
    model = deep_mode_model(family)
    exact = model.log_partition_exact()
    rows = torch.zeros(50, 20, dtype=torch.float64)
    from_data = estimate_log_partition(model, 100, 500, base="data", data=rows, seed=0,
                                       progress=False)
    from_descents = estimate_log_partition(model, 100, 500, base="descents", seed=0,
                                           progress=False)
    assert from_data.log_z < exact - 3.0
    assert from_descents.base == "descents" and abs(from_descents.log_z - exact) < 0.1
    assert torch.equal(ais.descended_base_bias(model),
                       ais.descended_base_bias(copy.deepcopy(model)))


def test_a_bracket_refuses_the_descents_base_and_names_what_takes_it():
    from irbm.evaluate import bracket_nll
    model = deep_mode_model("rbm")
    with pytest.raises(ValueError, match="descents base serves AIS runs and --tempering"):
        bracket_nll(model, torch.zeros(4, 20, dtype=torch.float64), base_data=None,
                    bases=("descents",), max_seconds=1)


def test_tempering_from_the_descents_base_lands_on_the_exact_log_partition():
    """The cross-check route of `irbm evaluate --tempering --base descents`: parallel
    tempering whose hot end is the descents base reaches the deep mode's mass, where its
    estimate from the data base (zero rows) misses it."""
    from irbm.tempering import estimate_log_partition_tempering
    model = deep_mode_model("rbm")
    exact = model.log_partition_exact()
    rows = torch.zeros(50, 20, dtype=torch.float64)
    settings = dict(n_temperatures=16, n_sweeps=300, n_ladders=8, seed=0, progress=False)
    descents = estimate_log_partition_tempering(model, base="descents", **settings)
    from_data = estimate_log_partition_tempering(model, base="data", data=rows, **settings)
    assert abs(descents.log_z - exact) < 0.1 and from_data.log_z < exact - 3.0
