"""Average NLL from (an AIS estimate of) log Z against the exact likelihood."""

import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from test_ais import FAMILIES, make_model, prototype_data, train_exactly
from test_models_reference import EXAMPLES, example_params, reference

import irbm
import irbm.sampling
from irbm import evaluate
from irbm import floor as floor_module
from irbm.ais import AISResult
from irbm.datasets import load_dataset
from irbm.evaluate import ais_nll, free_energies, nll


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)  # tiny models: see test_ais


@pytest.mark.parametrize("family", FAMILIES)
def test_nll_with_exact_log_partition_is_the_exact_nll(family):
    model = make_model(family, scale=0.5, dtype=torch.float64)
    data = prototype_data(n_rows=50)
    exact = -model.log_likelihood_exact(data)
    mean, stderr = nll(model, data, model.log_partition_exact(), batch_size=7)
    assert mean == pytest.approx(float(exact.mean()), abs=1e-10)
    assert stderr == pytest.approx(float(exact.std()) / math.sqrt(50), rel=1e-10)
    # numpy uint8 input, another batch size: same numbers
    again = nll(model, data.numpy().astype(np.uint8), model.log_partition_exact(), batch_size=1000)
    assert again == pytest.approx((mean, stderr), abs=1e-10)


@pytest.mark.parametrize("family, path", [("rbm", "linear"), ("orbm", "linear"),
                                          ("orbm", "pinned"), ("irbm", "linear"),
                                          ("irbm", "pinned")])
def test_ais_nll_agrees_with_exact_nll_within_the_ais_error(family, path):
    """On a briefly trained model: |NLL_AIS - NLL_exact| is within the 3-sigma AIS interval.

    The pinned path is noisier on this tiny oRBM, whose data spread over z = 2..10 (ln Z-hat's
    spread over 10 seeds: 0.06 nats, against 0.01 on the linear path), hence its tolerance."""
    data = prototype_data(n_rows=200)
    model = train_exactly(make_model(family, scale=0.01, dtype=torch.float64), data, steps=100)
    exact = -model.log_likelihood_exact(data)
    estimate = ais_nll(model, data, n_chains=200, n_betas=3000, base="data", seed=4, path=path,
                       progress=False)
    assert estimate.log_partition.path.startswith(path)
    assert estimate.mean_low <= float(exact.mean()) <= estimate.mean_high
    assert abs(estimate.mean - float(exact.mean())) < (0.05 if path == "linear" else 0.15)
    assert estimate.stderr == pytest.approx(float(exact.std()) / math.sqrt(200), rel=1e-10)
    assert isinstance(estimate.log_partition, AISResult)
    assert estimate.log_partition.log_weights.shape == (200,)
    assert estimate.mean - estimate.log_partition.log_z == pytest.approx(
        float(free_energies(model, data).mean()))
    summary = json.loads(json.dumps(estimate.summary()))  # JSON-ready, as the others are
    assert summary["mean"] == estimate.mean and summary["stderr"] == estimate.stderr
    assert summary["log_partition"] == json.loads(json.dumps(estimate.log_partition.summary()))


def test_nll_accepts_an_ais_result_and_validates_inputs():
    model = make_model("rbm", dtype=torch.float64)
    data = prototype_data(n_rows=5)
    result = AISResult(3.0, 2.5, 3.5, torch.zeros(2, dtype=torch.float64), data[:2], n_betas=2,
                       base="model", seconds=0.0)
    assert nll(model, data, result) == pytest.approx(nll(model, data, 3.0))
    assert nll(model, data[:1], 3.0)[1] == 0.0
    with pytest.raises(ValueError):
        nll(model, data * 0.5, 3.0)  # not binary
    with pytest.raises(ValueError):
        nll(model, data[:, :-1], 3.0)  # wrong width
    with pytest.raises(ValueError):
        nll(model, data[:0], 3.0)  # empty
    with pytest.raises(ValueError):
        nll(model, data, float("-inf"))
    with pytest.raises(ValueError):
        nll(model, data, 3.0, batch_size=0)


# ------------------------------------------------------------------ diagnostics and RAISE


def _result_with(log_weights):
    log_weights = torch.as_tensor(log_weights, dtype=torch.float64)
    return AISResult(0.0, float("-inf"), 0.0, log_weights, torch.zeros(len(log_weights), 1),
                      10, "model", 0.0)


def test_effective_sample_size_and_top_share_on_constructed_weights():
    equal = _result_with(torch.zeros(200))
    assert equal.effective_sample_size == pytest.approx(200.0)
    assert equal.top_chain_share == pytest.approx(1 / 200)
    dominant = _result_with(torch.cat([torch.tensor([50.0]), torch.zeros(199)]))
    assert dominant.effective_sample_size == pytest.approx(1.0, abs=1e-9)
    assert dominant.top_chain_share == pytest.approx(1.0, abs=1e-9)
    warnings = dominant.reliability_warnings()
    assert warnings and "effective sample size is 1.0 of 200" in warnings[0]
    assert 'other base (base="data"; irbm evaluate --base data)' in warnings[0]
    assert not dominant.reliable
    dominant.base = "data"
    assert 'other base (base="model"; irbm evaluate --base model)' in \
        dominant.reliability_warnings()[0]
    # The best run of a bracket: the bracket's reasons judge its paths and bases, so the
    # advice is to continue it or use more chains, not to bracket the NLL.
    in_bracket = dominant.reliability_warnings(bracketed=True)[0]
    assert "effective sample size is 1.0 of 200" in in_bracket
    assert "irbm evaluate RUN --bracket --continue" in in_bracket
    assert "--base" not in in_bracket and "--ais-path" not in in_bracket
    # Two equal heavy chains: ESS 2 exactly.
    two = _result_with(torch.cat([torch.tensor([40.0, 40.0]), torch.zeros(98)]))
    assert two.effective_sample_size == pytest.approx(2.0, abs=1e-9)
    assert repr(dominant) == ("AISResult(log_z=0.0000, interval=[-inf, 0.0000], n_chains=200, "
                              "n_betas=10, effective_sample_size=1.0, base='data', "
                              "path='linear', seconds=0.0)")
    # Fewer than 30 chains: too few to judge by, said as such, not as weights too spread.
    few = _result_with(torch.linspace(0.0, 0.1, 20))
    assert few.effective_sample_size > 19.9
    warning = few.reliability_warnings()[0]  # then the constructed interval's -inf
    assert warning.startswith("only 20 AIS chains (effective sample size 20.0): too few")
    assert "run well over 30" in warning and "underestimated, so" not in warning
    # and one chain of 20 holding nearly all the weight: weights too spread, said as well
    spread = _result_with(torch.cat([torch.tensor([30.0]), torch.zeros(19)]))
    assert [text.split(" (")[0] for text in spread.reliability_warnings()[:2]] == [
        "only 20 AIS chains", "AIS effective sample size is 1.0 of 20 chains"]
    assert not any("AIS" in text for text in
                   _result_with(torch.linspace(0.0, 0.1, 100)).reliability_warnings())
    # 30 chains whose weights are nearly equal: ESS just under 30, too few to judge by, not
    # degenerate weights (a sweep with chains = 30 read every trial so)
    (text,) = [text for text in _result_with(torch.linspace(0.0, 0.1, 30))
               .reliability_warnings() if "AIS" in text]
    assert "fewer than the 30 an estimate is judged by: run more chains" in text


def _random_model(family, seed):
    factories = {"rbm": lambda: irbm.RBM(8, 5, dtype=torch.float64),
                 "orbm": lambda: irbm.OrderedRBM(8, 5, dtype=torch.float64),
                 "irbm": lambda: irbm.InfiniteRBM(8, n_hidden=5, dtype=torch.float64)}
    model = factories[family]()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator,
                                        dtype=torch.float64) * 1.5)
    return model


@pytest.mark.parametrize("family", ["rbm", "orbm", "irbm"])
def test_raise_brackets_the_exact_nll_with_ais_and_converges(family):
    """Few temperatures: RAISE's NLL is clearly above the exact NLL (conservative), on average
    over 8 runs (one run's excess has a standard deviation of 0.06 nat on the iRBM, its mean
    0.10: a single seed fell below 0.05 one time in five). Many: both AIS and RAISE are close
    to it, AIS not above and RAISE not below beyond noise."""
    model = _random_model(family, seed=1)
    data = irbm.sampling.sample(model, 60, 200, generator=0, progress=False).samples
    exact = float(-model.log_likelihood_exact(data).mean())
    coarse = np.mean([evaluate.raise_nll(model, data, n_betas=5, seed=seed, progress=False).mean
                      for seed in range(8)])
    assert coarse > exact + 0.05, (coarse, exact)
    fine = evaluate.raise_nll(model, data, n_betas=1500, n_repeats=4, seed=0, progress=False)
    optimistic = evaluate.ais_nll(model, data, n_chains=200, n_betas=1500, seed=0,
                                  progress=False)
    assert optimistic.log_partition.base == "data"  # the family default
    assert optimistic.mean - 0.03 <= exact <= fine.mean + 0.03
    assert abs(fine.mean - exact) < 0.06 and abs(optimistic.mean - exact) < 0.06
    assert fine.log_likelihoods.shape == (60,) and fine.n_repeats == 4


def test_an_annealing_far_too_short_is_caught_by_the_data_floor():
    """A model whose mass sits on a few data vectors, annealed in 3 temperatures: the weights
    can look fine, but ln Z-hat falls below ln sum_{v in data} exp(-F(v)), which is certain."""
    model = irbm.RBM(12, 30, dtype=torch.float64)
    generator = torch.Generator().manual_seed(0)
    prototypes = (torch.rand(3, 12, generator=generator) < 0.5).double()
    with torch.no_grad():  # each hidden unit votes strongly for one prototype
        model.W.copy_(8.0 * (2 * prototypes[torch.arange(30) % 3] - 1))
        model.b.copy_(-8.0 * prototypes[torch.arange(30) % 3].sum(1) + 4.0)
    exact = model.log_partition_exact()
    estimate = evaluate.ais_nll(model, prototypes, n_chains=50, n_betas=3, base="model",
                                seed=0, progress=False)
    assert estimate.log_partition_floor <= exact + 1e-9  # the floor is a true lower bound
    assert estimate.log_partition.log_z < estimate.log_partition_floor - 10  # far too low...
    assert estimate.log_partition.reliable  # ...with near-uniform weights: ESS cannot see it
    (warning,) = estimate.reliability_warnings()
    assert "certain lower bound" in warning and "more temperatures" in warning


def test_a_floor_within_the_estimates_own_noise_raises_no_warning():
    """The floor is certain, but ln Z-hat a hundredth of a nat under it, inside its own 3-sigma
    interval, is that estimate's noise: flagging the row unreliable ("at least 0.0 nats too
    low", a user's report) would be wrong. Past the interval's top it is a missed mode."""
    model = irbm.RBM(8, 6, dtype=torch.float64)
    data = (torch.rand(20, 8, generator=torch.Generator().manual_seed(1)) < 0.5).double()
    estimate = evaluate.ais_nll(model, data, n_chains=20, n_betas=50, seed=0, progress=False)
    result, own = estimate.log_partition, estimate.log_partition.reliability_warnings()
    assert result.log_z < result.log_z_high
    inside = (result.log_z + result.log_z_high) / 2
    assert dataclasses.replace(estimate, log_partition_floor=inside).reliability_warnings() == own
    above = dataclasses.replace(estimate, log_partition_floor=result.log_z_high + 0.004)
    *rest, warning = above.reliability_warnings()
    assert rest == own
    assert f"at least {result.log_z_high + 0.004 - result.log_z:.2f} nats too low" in warning


@pytest.mark.parametrize("example", example_params(EXAMPLES))
def test_the_sampled_floor_is_a_lower_bound_that_tightens_to_exact(example):
    """sampled_log_partition_floor sums exp(-F) over distinct states only, so it never exceeds
    the exact ln Z (brute force); on a model this small its chains visit nearly every likely
    state, so it comes within 0.05 nats of it, above the floor of the data row alone."""
    model = example.build()
    exact = reference(example).log_partition()
    generator = torch.Generator().manual_seed(0)
    data = (torch.rand(1, example.n_visible, generator=generator) < 0.5).double()
    data_floor = floor_module.log_partition_floor(free_energies(model, data))
    floor = evaluate.sampled_log_partition_floor(model, data, n_chains=50, n_steps=100)
    assert data_floor <= floor <= exact + 1e-9
    assert exact - floor < 0.05
    if example.n_visible >= 5:  # 32+ states: one row alone holds well under the total
        assert floor > data_floor + 0.5


def test_irbm_evaluate_records_a_floor_below_the_exact_log_partition_and_flags_ais_under_it(
        tmp_path):
    """`irbm evaluate` (workflows.evaluate_run) records the sampled floor, which must stay below
    the exact ln Z (12 hidden units: enumerable); with 2 temperatures AIS is far too low, and
    the record warns exactly when its ln Z-hat is under that floor."""
    from irbm.cli import main as cli_main
    from irbm.workflows import evaluate_run

    run = tmp_path / "rbm"
    assert cli_main(["train", "rbm", "digits", "--out", str(run), "--epochs", "1",
                     "--n-hidden", "12", "--quiet"]) == 0
    # Its mass on three training digits (as in the test above), where AIS in 2 steps misses it.
    model = irbm.load(run)
    prototypes = torch.as_tensor(load_dataset("digits").train[:3], dtype=torch.float32)
    with torch.no_grad():
        model.W.copy_(20.0 * (2 * prototypes[torch.arange(12) % 3] - 1))
        model.b.copy_(-20.0 * prototypes[torch.arange(12) % 3].sum(1) + 40.0)
        model.c.zero_()
    irbm.save(model, run / "model.safetensors")
    exact = irbm.load(run, dtype=torch.float64).log_partition_exact()
    for n_betas in (2, 2000):
        record = evaluate_run(run, n_chains=50, n_betas=n_betas, base="model", progress=False,
                              echo=lambda message: None)
        assert record["log_z_floor"] <= exact + 1e-3  # float32 free energies
        # Enumerable: the record's ln Z is the exact one, AIS's estimate and warnings apart.
        assert record["log_z"] == exact and record["warnings"] == []
        flagged = any("certain lower bound" in warning for warning in record["ais_warnings"])
        assert flagged == (record["log_z_floor"] > record["ais_log_z"]), n_betas
        if n_betas == 2:
            assert flagged  # 2 temperatures: ln Z-hat is nearly the base's, far too low


def test_repeat_gap_estimates_the_jensen_gap_left_by_r_chains_per_row():
    """ln of a mean of R log-normal weights falls below ln E w (the Jensen gap); `repeat_gap`,
    from the R weights alone, finds the gap a Monte Carlo average of 40,000 rows shows: within
    25% at sigma 1 (where the first-order sigma^2 / 2R says 0.031 for 0.046), and an
    underestimate, though by less than half, at sigma 2 (heavy tails). It is 0 for equal
    weights and None for one chain per row."""
    generator = torch.Generator().manual_seed(0)
    n_rows, n_repeats = 40000, 16
    for sigma in (1.0, 2.0):
        per_chain = sigma * torch.randn(n_rows, n_repeats, generator=generator,
                                        dtype=torch.float64)
        true_gap = sigma**2 / 2 - float((torch.logsumexp(per_chain, 1)
                                         - math.log(n_repeats)).mean())  # ln E w - E ln mean
        estimate = evaluate.repeat_gap(per_chain)
        if sigma == 1.0:
            assert 0.035 < true_gap < 0.06
            assert estimate == pytest.approx(true_gap, rel=0.25)
        else:
            assert 0.5 * true_gap < estimate < true_gap
    assert evaluate.repeat_gap(torch.full((5, 4), -3.0, dtype=torch.float64)) == \
        pytest.approx(0.0, abs=1e-12)
    assert evaluate.repeat_gap(per_chain[:, :1]) is None
