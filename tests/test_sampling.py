"""Tests of irbm.sampling: exactness against enumeration, the z = K start, snapshots, errors."""

import numpy as np
import pytest
import torch
from scipy import stats

from irbm import build_model
from irbm.models import family_class
from irbm.models._base import binary_configurations
from irbm.sampling import _as_generator, sample

N_VISIBLE, N_HIDDEN = 4, 3
N_CHAINS = 10_000
CONFIGS = {
    "rbm": {"family": "rbm"},
    "orbm": {"family": "orbm", "beta": 1.01},
    "irbm": {"family": "irbm", "beta": 1.01},
    "irbm-beta2": {"family": "irbm", "beta": 2.0},
}


def tiny_model(name, seed=0):
    """A float64 model with D=4, K=3 and parameters ~ N(0, 1): far from uniform, still exact."""
    model = build_model({**CONFIGS[name], "n_visible": N_VISIBLE, "n_hidden": N_HIDDEN},
                        dtype=torch.float64)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=torch.float64))
    return model


def exact_distribution(model):
    """P(v) for all 16 visible vectors, indexed by sum_j v_j 2**j."""
    everything = next(binary_configurations(N_VISIBLE))
    return torch.exp(model.log_likelihood_exact(everything)).numpy()


def state_index(samples):
    """Integer code of each binary row, unit 0 as the lowest bit (as binary_configurations)."""
    return (samples.long() * (2 ** torch.arange(N_VISIBLE))).sum(1).numpy()


def chi_square_p_value(samples, probabilities):
    observed = np.bincount(state_index(samples), minlength=len(probabilities))
    return stats.chisquare(observed, probabilities * observed.sum()).pvalue


@pytest.mark.parametrize("name, start", [
    (name, start) for name in sorted(CONFIGS) for start in ("random", "data", "z_max")
    if start != "z_max" or family_class(CONFIGS[name]["family"]).has_z])
def test_samples_follow_the_exact_distribution(name, start):
    model = tiny_model(name)
    exact = exact_distribution(model)
    assert exact.sum() == pytest.approx(1.0, abs=1e-12)
    data = torch.tensor([[1.0, 1.0, 0.0, 0.0]]).repeat(N_CHAINS, 1)
    result = sample(model, N_CHAINS, 30, init="data" if start == "data" else "random", data=data,
                    z_max_init=start == "z_max", generator=1234)
    assert chi_square_p_value(result.samples, exact) > 1e-3
    # The returned probabilities are E[v | h]: averaged over chains they estimate P(v_j = 1).
    everything = next(binary_configurations(N_VISIBLE)).numpy()
    marginal = exact @ everything
    standard_error = np.sqrt(marginal * (1 - marginal) / N_CHAINS)
    assert np.all(np.abs(result.probabilities.mean(0).numpy() - marginal) < 5 * standard_error)


def test_chi_square_check_has_power():
    # Wrong targets and unmixed chains must be rejected, or the test above proves nothing.
    model = tiny_model("orbm")
    exact = exact_distribution(model)
    mixed = sample(model, N_CHAINS, 30, generator=1234)
    assert chi_square_p_value(mixed.samples, np.full(16, 1 / 16)) < 1e-6
    start = torch.tensor([[1.0, 1.0, 0.0, 0.0]]).repeat(N_CHAINS, 1)
    unmixed = sample(model, None, 1, init=start, generator=1234)
    assert chi_square_p_value(unmixed.samples, exact) < 1e-6



PATTERN = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])


def bimodal_irbm():
    """A float32 iRBM (D=6, K=3, beta=1.5) with the two kinds of state a trained iRBM's chains
    visit: at z = 1 the visibles are uniform noise (c = 0, unit 1 has zero weights); at z >= 2
    and in the tail z > l, units 2 and 3 pull them towards PATTERN. Exact: P(z = 1) = 0.29,
    P(z > l) = 0.41, P(PATTERN) = 0.29."""
    model = build_model({"family": "irbm", "n_visible": 6, "n_hidden": 3, "beta": 1.5})
    weights, hidden_bias, visible_bias = model.parameters()  # in declaration order
    with torch.no_grad():
        for parameter in (weights, hidden_bias, visible_bias):
            parameter.zero_()
        weights[1:] = 2 * PATTERN - 1
        hidden_bias[1:] = 3.0
    return model


@pytest.mark.parametrize("start", ["noise", "pattern"])
def test_irbm_chains_reach_the_exact_bimodal_distribution(start):
    # Behind "iRBM samples collapse to blobs": does `sample` reach P(v) when the model has a
    # noise state at small z beside a structured one? Both P(v) (64 states) and P(z) (1, 2, 3,
    # tail) of the chains' final states must match the exact ones, from either start.
    model = bimodal_irbm()
    everything = next(binary_configurations(6))
    exact_v = torch.exp(model.log_likelihood_exact(everything)).numpy()
    exact_z = (exact_v[:, None] * torch.exp(
        model.as_float64().log_p_z_given_v(everything)).detach().numpy()).sum(0)
    assert exact_z[0] > 0.2 and exact_z[-1] > 0.2 and exact_v[7] > 0.2  # 7 codes PATTERN
    init = "random" if start == "noise" else PATTERN.repeat(N_CHAINS, 1)
    result = sample(model, N_CHAINS, 50, init=init, generator=0)
    codes = (result.samples.long() * 2 ** torch.arange(6)).sum(1).numpy()
    assert stats.chisquare(np.bincount(codes, minlength=64), exact_v * N_CHAINS).pvalue > 1e-3
    observed_z = np.bincount(result.z.numpy() - 1, minlength=4)
    assert stats.chisquare(observed_z, exact_z / exact_z.sum() * N_CHAINS).pvalue > 1e-3
    # Power: after 3 steps the chains still remember their start, and the test sees it.
    early = sample(model, N_CHAINS, 3, init=init, generator=0)
    codes = (early.samples.long() * 2 ** torch.arange(6)).sum(1).numpy()
    assert stats.chisquare(np.bincount(codes, minlength=64), exact_v * N_CHAINS).pvalue < 1e-6

@pytest.mark.parametrize("name", ["orbm", "irbm"])
def test_z_max_init_forces_first_hidden_step(name):
    model = tiny_model(name)
    start = torch.tensor([[0.0, 1.0, 0.0, 1.0]]).repeat(500, 1)
    result = sample(model, None, 1, init=start, z_max_init=True, generator=7)
    assert torch.all(result.z == N_HIDDEN)

    # Same randomness by hand: z = K in sample_hidden, then v ~ P(v | h).
    generator = torch.Generator().manual_seed(7)
    state = model.sample_hidden(start, generator, z=N_HIDDEN)
    expected = model.sample_visible(state, generator)
    assert torch.equal(result.samples, expected)

    free = sample(model, None, 1, init=start, generator=7)
    assert (free.z != N_HIDDEN).any(), "without z_max_init, z is drawn from P(z | v)"


def test_z_max_init_rejects_rbm():
    with pytest.raises(ValueError, match="z_max_init.*z variable; a RBM has none"):
        sample(tiny_model("rbm"), 4, 2, z_max_init=True)


def test_snapshots_and_return_probabilities():
    model = tiny_model("irbm")
    start = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 1.0]])
    result = sample(model, 2, 5, init=start, every=2, generator=3)
    assert result.snapshot_steps == [0, 2, 4, 5]
    assert result.snapshots.shape == (4, 2, N_VISIBLE)
    assert torch.equal(result.snapshots[0], start.double())
    assert torch.equal(result.snapshots[-1], result.probabilities)

    binary = sample(model, 2, 5, init=start, every=5, generator=3, return_probabilities=False)
    assert binary.probabilities is None
    assert binary.snapshot_steps == [0, 5]
    assert torch.equal(binary.snapshots[-1], binary.samples)
    # Same seed, same chains whether or not probabilities are kept.
    assert torch.equal(binary.samples, result.samples)


def test_data_init_draws_distinct_rows_of_data():
    model = tiny_model("rbm")
    data = next(binary_configurations(N_VISIBLE))
    result = sample(model, 10, 1, init="data", data=data, every=1, generator=5)
    codes = state_index(result.snapshots[0])
    assert len(set(codes.tolist())) == 10


def test_reproducible_and_without_gradients():
    model = tiny_model("orbm")
    first = sample(model, 8, 10, generator=11)
    second = sample(model, 8, 10, generator=torch.Generator().manual_seed(11))
    assert torch.equal(first.samples, second.samples)
    assert not first.samples.requires_grad and not first.probabilities.requires_grad
    assert first.samples.dtype == torch.float64
    assert set(first.samples.unique().tolist()) <= {0.0, 1.0}


def test_float32_model_and_progress_bar(capsys):
    model = build_model({"family": "irbm", "n_visible": 6, "n_hidden": 2})
    result = sample(model, 3, 4, generator=0, progress=True)
    assert result.samples.shape == (3, 6) and result.samples.dtype == torch.float32
    assert "Gibbs sampling" in capsys.readouterr().err


@pytest.mark.parametrize("arguments, message", [
    ({"n_samples": 0}, "n_samples must be a positive integer"),
    ({"n_samples": 2.5}, "n_samples must be a positive integer"),
    ({"n_steps": 0}, "n_steps must be a positive integer"),
    ({"every": 0}, "every must be a positive integer"),
    ({"init": "noise"}, "init must be one of"),
    ({"init": "data"}, "needs the data argument"),
    ({"init": "data", "data": torch.full((5, 4), 0.5)}, "data: .*binary"),
    ({"init": "data", "data": torch.ones(5, 3)}, r"data: .*shape \(N, 4\)"),
    ({"init": "data", "data": torch.ones(2, 4)}, "asks for 4 chains but data has only 2"),
    ({"init": torch.ones(4, 5)}, r"init: .*shape \(N, 4\)"),
    ({"init": torch.full((4, 4), 2.0)}, "init: .*binary"),
    ({"init": torch.ones(3, 4)}, "init has 3 rows but n_samples is 4"),
    ({"n_samples": None}, "n_samples is required"),
    ({"generator": "seed"}, "generator must be"),
])
def test_bad_arguments_raise_clear_errors(arguments, message):
    call = {"n_samples": 4, "n_steps": 2, **arguments}
    with pytest.raises(ValueError, match=message):
        sample(tiny_model("orbm"), call.pop("n_samples"), call.pop("n_steps"), **call)


def test_a_generator_on_another_device_than_the_model_is_refused():
    # Without a GPU: the check compares device types, so a CPU generator for a CUDA model is
    # refused before any draw (torch's own error would come from deep inside a Gibbs step).
    with pytest.raises(ValueError, match="generator is on cpu but the model on cuda"):
        _as_generator(torch.Generator(), torch.device("cuda"))
    generator = torch.Generator()
    assert _as_generator(generator, torch.device("cpu")) is generator
