"""RAISE's own temperature schedule: a pilot of reverse chains started at data rows
(`irbm.ais.thermodynamic_length(reverse_from=...)`), used by `irbm.evaluate.bracket_nll`.

Tiny float64 block-diagonal models whose ln Z is enumerated, all three families.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import irbm.evaluate as evaluate
from irbm._ais_chains import run_reverse_chains
from irbm.ais import (
    batch_seed,
    betas_of_equal_length,
    make_betas,
    make_path,
    resolve_base,
    thermodynamic_length,
)
from irbm.evaluate import bracket_nll, free_energies
from irbm.models import UniformSource, block_diagonal

FAMILIES = [("rbm", {}), ("orbm", {"beta": 1.05}), ("irbm", {"beta": 1.05})]


def _model(family, options):
    return block_diagonal(family, 12, 8, block_size=4, weight_std=2.0, dtype=torch.float64,
                          seed=5, **options)


@pytest.mark.parametrize("family, options", FAMILIES)
def test_the_reverse_pilot_measures_each_step_where_it_lies(family, options):
    """L(t) of the reverse pilot: its k-th increment is the spread over the chains of the ln w
    increment of the step between the k-th and (k+1)-th temperatures, taken from t = 1 down,
    recomputed here step by step on the same chains."""
    model, _ = _model(family, options)
    rows = torch.rand(16, 12, generator=torch.Generator().manual_seed(2),
                      dtype=torch.float64).lt(0.5).double()
    pilot, length = thermodynamic_length(model, base="model", path=model.ais_paths[0],
                                         pilot_chains=16, pilot_betas=40, seed=3,
                                         reverse_from=rows)
    assert np.array_equal(pilot, make_betas(40)) and length[0] == 0.0
    assert (np.diff(length) > 0).all()
    # The same chains by hand: `thermodynamic_length` seeds its pilot with batch_seed(seed, 2**31).
    base_bias, _ = resolve_base(model, "model", None)
    path = make_path(model, base_bias, model.ais_paths[0], None)
    path.start(rows, UniformSource(batch_seed(3, 2**31), model.device))
    path.step(1.0, 1.0)
    spreads = []
    with torch.no_grad():
        for t_from, t_to in zip(pilot[::-1][:-1], pilot[::-1][1:]):
            spreads.append(float(path.step(float(t_from), float(t_to)).std(correction=0)))
    spreads = np.asarray(spreads[::-1])  # per step of the grid, from t = 0 up
    floor = 1e-3 * spreads.max()
    np.testing.assert_allclose(np.diff(length), spreads + floor, rtol=1e-9, atol=1e-12)


def test_the_reverse_pilot_is_the_chains_of_raise():
    """The pilot runs RAISE's chains: its variances come from `run_reverse_chains`."""
    model, _ = _model("irbm", {"beta": 1.05})
    rows = torch.ones(8, 12, dtype=torch.float64)
    betas = torch.from_numpy(make_betas(20))
    variances = []
    base_bias, _ = resolve_base(model, "model", None)
    run_reverse_chains(make_path(model, base_bias, "linear", None), betas, rows, 0,
                       step_variances=variances)
    assert len(variances) == 19 and all(v >= 0 for v in variances)


@pytest.mark.parametrize("family, options", FAMILIES)
def test_bracket_spaces_raise_by_its_own_pilot_and_contains_the_exact_nll(family, options,
                                                                          monkeypatch):
    model, log_z = _model(family, options)
    rows = torch.rand(200, 12, generator=torch.Generator().manual_seed(4),
                      dtype=torch.float64).lt(0.5).double()
    train = torch.rand(300, 12, generator=torch.Generator().manual_seed(6),
                       dtype=torch.float64).lt(0.4).double()
    exact = float(free_energies(model, rows).mean()) + log_z
    seen = {}
    real_raise, real_ais = evaluate.raise_nll, evaluate.estimate_log_partition

    def spy_raise(*args, betas, path, base, **kwargs):
        seen.setdefault(("raise", path, base), []).append(np.asarray(betas))
        return real_raise(*args, betas=betas, path=path, base=base, **kwargs)

    def spy_ais(*args, betas, path, base, **kwargs):
        seen.setdefault(("ais", path, base), []).append(np.asarray(betas))
        return real_ais(*args, betas=betas, path=path, base=base, **kwargs)

    monkeypatch.setattr(evaluate, "raise_nll", spy_raise)
    monkeypatch.setattr(evaluate, "estimate_log_partition", spy_ais)
    bracket = bracket_nll(model, rows, base_data=train, rows=60, tolerance=1.0, seed=0,
                          n_chains=32, n_betas=200, max_betas=200)
    assert bracket.schedule == "tuned" and bracket.summary()["schedule"] == "tuned"
    assert bracket.optimistic <= exact + 0.1 and bracket.conservative >= exact - 0.1, \
        (bracket.optimistic, exact, bracket.conservative)
    for kind in model.ais_paths:
        for base in ("data", "model"):
            ais, reverse = seen["ais", kind, base][0], seen["raise", kind, base][0]
            # RAISE's schedule is the reverse pilot's, from REVERSE_PILOT_ROWS training rows
            # chosen by seed + 2, with the forward pilot's seed.
            pick = torch.randperm(300, generator=torch.Generator().manual_seed(2))
            expected = betas_of_equal_length(*thermodynamic_length(
                model, base=base, path=kind, data=train, seed=1,
                reverse_from=train[pick[:evaluate.REVERSE_PILOT_ROWS]]), 200)
            np.testing.assert_array_equal(reverse, expected)
            assert not np.array_equal(ais, reverse)
    seen.clear()
    forward = bracket_nll(model, rows, base_data=train, rows=60, tolerance=1.0, seed=0,
                          n_chains=32, n_betas=200, max_betas=200, schedule="tuned-forward")
    assert forward.schedule == "tuned-forward"
    for key in [key for key in seen if key[0] == "raise"]:
        np.testing.assert_array_equal(seen[key][0], seen[("ais", *key[1:])][0])


def test_a_schedule_outside_the_list_is_refused_before_work():
    model, _ = _model("rbm", {})
    rows = torch.zeros(4, 12, dtype=torch.float64)
    with pytest.raises(ValueError, match="schedule must be one of tuned, tuned-forward, uniform"):
        bracket_nll(model, rows, base_data=None, schedule="reverse")
