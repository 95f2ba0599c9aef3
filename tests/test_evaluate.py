"""Average NLL from (an AIS estimate of) log Z against the exact likelihood."""

import math

import numpy as np
import pytest
import torch

from irbm.ais import AISResult
from irbm.evaluate import ais_nll, free_energies, nll
from test_ais import FAMILIES, make_model, prototype_data, train_exactly


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


@pytest.mark.parametrize("family", FAMILIES)
def test_ais_nll_agrees_with_exact_nll_within_the_ais_error(family):
    """On a briefly trained model: |NLL_AIS - NLL_exact| is within the 3-sigma AIS interval."""
    data = prototype_data(n_rows=200)
    model = train_exactly(make_model(family, scale=0.01, dtype=torch.float64), data, steps=100)
    exact = -model.log_likelihood_exact(data)
    estimate = ais_nll(model, data, n_chains=200, n_betas=3000, base="data", seed=4,
                       progress=False)
    assert estimate.mean_low <= float(exact.mean()) <= estimate.mean_high
    assert abs(estimate.mean - float(exact.mean())) < 0.05
    assert estimate.stderr == pytest.approx(float(exact.std()) / math.sqrt(200), rel=1e-10)
    assert isinstance(estimate.log_partition, AISResult)
    assert estimate.log_partition.log_weights.shape == (200,)
    assert estimate.mean - estimate.log_partition.log_z == pytest.approx(
        float(free_energies(model, data).mean()))


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
