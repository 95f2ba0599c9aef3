"""Annealing along the training trajectory and pilot-tuned schedules, against exact ln Z.

Tiny float64 models whose ln Z is enumerated; snapshots are perturbed, shrunken copies of the
model (any sequence of distributions is a valid path, so the estimate must be right for any).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from irbm.ais import estimate_log_partition, make_betas, thermodynamic_length, tuned_betas
from irbm.evaluate import free_energies, raise_nll
from irbm.models import TrajectoryPath, block_diagonal

FAMILIES = [("rbm", {}), ("orbm", {"beta": 1.05}), ("irbm", {"beta": 1.05})]


def _model(family, options, n_hidden=6):
    return block_diagonal(family, 12, n_hidden, block_size=4, weight_std=2.0,
                          dtype=torch.float64, seed=3, **options)


def _snapshots(model, family, options):
    """Two shrunken, perturbed copies of ``model``; for the iRBM a smaller first one too."""
    generator = torch.Generator().manual_seed(1)
    snapshots = []
    for shrink in (0.3, 0.7):
        snapshot = copy.deepcopy(model)
        with torch.no_grad():
            for parameter in snapshot.parameters():
                parameter.mul_(shrink).add_(
                    0.5 * torch.randn(parameter.shape, generator=generator, dtype=torch.float64))
        snapshots.append(snapshot)
    if family == "irbm":
        small = type(model)(12, 3, dtype=torch.float64, **options)
        with torch.no_grad():
            small.W.copy_(model.W[:3] * 0.2)
            small.b.copy_(model.b[:3])
        snapshots.insert(0, small)
    return snapshots


@pytest.mark.parametrize("family, options", FAMILIES)
def test_trajectory_annealing_finds_the_exact_log_partition(family, options):
    model, exact = _model(family, options)
    snapshots = _snapshots(model, family, options)
    result = estimate_log_partition(model, 400, 1500, base="model", path="trajectory",
                                    trajectory=snapshots, seed=0, progress=False)
    assert result.path.startswith("trajectory")
    assert result.log_z_low <= exact <= result.log_z_high
    assert abs(result.log_z - exact) < 0.05
    # RAISE along the same trajectory: a stochastic upper bound of the NLL, tight here.
    rows = torch.cat([model.gibbs_step(torch.zeros(40, 12, dtype=torch.float64),
                                       torch.Generator().manual_seed(k))[0] for k in range(2)])
    exact_nll = float(free_energies(model, rows).mean()) + exact
    upper = raise_nll(model, rows, n_betas=1500, base="model", path="trajectory",
                      trajectory=snapshots, seed=0, progress=False)
    assert exact_nll - 0.1 < upper.mean < exact_nll + 0.1


def test_the_linear_path_is_the_trajectory_with_no_snapshot():
    """From the base to the model alone, the trajectory is the linear path: same ln f_t."""
    model, _ = _model("irbm", {"beta": 1.05})
    base = torch.zeros(12, dtype=torch.float64)
    linear, trajectory = model.annealing_path(base, kind="linear"), TrajectoryPath([model], base)
    v = torch.rand(30, 12, generator=torch.Generator().manual_seed(0),
                   dtype=torch.float64).lt(0.5).double()
    for t in (0.0, 0.25, 0.8, 1.0):
        torch.testing.assert_close(trajectory.log_unnormalized(v, t),
                                   linear.log_unnormalized(v, t))
    assert trajectory.log_base_partition == pytest.approx(linear.log_base_partition)


def test_a_padded_irbm_snapshot_is_the_same_distribution():
    model, _ = _model("irbm", {"beta": 1.05})
    small = copy.deepcopy(model)
    small.relayout_hidden(torch.arange(4))
    with torch.no_grad():
        small.W[3:].zero_()
    path = TrajectoryPath([small, model], torch.zeros(12, dtype=torch.float64),
                          positions=[0.0, 0.5, 1.0])
    v = torch.rand(20, 12, generator=torch.Generator().manual_seed(2),
                   dtype=torch.float64).lt(0.5).double()
    torch.testing.assert_close(path.log_unnormalized(v, 0.5), -small.free_energy(v))


def test_trajectory_inputs_are_refused_clearly():
    rbm, _ = _model("rbm", {})
    smaller, _ = block_diagonal("rbm", 12, 4, block_size=4, dtype=torch.float64)
    with pytest.raises(ValueError, match="a resizable family anneals from smaller snapshots"):
        TrajectoryPath([smaller, rbm], torch.zeros(12, dtype=torch.float64))
    with pytest.raises(ValueError, match="needs the models saved during training"):
        estimate_log_partition(rbm, 4, 10, base="model", path="trajectory", progress=False)
    with pytest.raises(ValueError, match='path="trajectory", not'):
        estimate_log_partition(rbm, 4, 10, base="model", path="linear", trajectory=[rbm],
                               progress=False)
    orbm, _ = _model("orbm", {"beta": 1.05})
    with pytest.raises(ValueError, match="every snapshot must be"):
        TrajectoryPath([rbm, orbm], torch.zeros(12, dtype=torch.float64))


def test_tuned_schedules_follow_the_pilot_and_stay_unbiased():
    model, exact = _model("orbm", {"beta": 1.05}, n_hidden=8)
    pilot, length = thermodynamic_length(model, base="model", path="pinned", pilot_chains=64,
                                         pilot_betas=200, seed=0)
    assert length[0] == 0.0 and (np.diff(length) > 0).all() and pilot.shape == length.shape
    betas = tuned_betas(model, 300, base="model", path="pinned", pilot_chains=64,
                        pilot_betas=200, seed=0)
    assert len(betas) == 300 and np.array_equal(betas, make_betas(betas=betas))
    # Equal length per step: the steps' shares of L agree within interpolation error.
    steps = np.diff(np.interp(betas, pilot, length))
    assert steps.max() < 1.05 * steps.min()
    # ... so the steps are narrow where the pilot's increments spread most (not uniform).
    assert np.diff(betas).max() > 3 * np.diff(betas).min()
    # Z-hat stays unbiased with the schedule frozen: the mean of Z-hat / Z over repeats is 1.
    short = tuned_betas(model, 30, base="model", path="pinned", pilot_chains=64,
                        pilot_betas=200, seed=0)
    ratios = [np.exp(estimate_log_partition(model, 8, betas=short, base="model", path="pinned",
                                            seed=seed, progress=False).log_z - exact)
              for seed in range(60)]
    assert abs(np.mean(ratios) - 1.0) < 4 * np.std(ratios) / np.sqrt(len(ratios)) + 1e-3
