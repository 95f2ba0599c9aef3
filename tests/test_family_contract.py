"""The contract every family must meet, run over a list of families (as torch.distributions'
tests do): a new family gets this whole suite by joining `FAMILIES`.

The list includes `ConstantPenaltyOrderedRBM`, defined outside the package in
tests/family_constant_penalty.py: adding it touched that file and the list below, nothing under
irbm/. Checks use only the model interface, against independent routes: the exact log Z by
hidden enumeration against a brute-force sum over all visible vectors, closed-form gradients
against autograd, AIS (both bases) against the exact log Z, the Gibbs conditionals against
the exact distribution they must leave unchanged.

To run it on a family of your own, copy this file beside your module and replace `FAMILIES`
(and the import of the outside family it lists). The brute-force sums call the family's
``energy(v, h)`` (``energy(v, h, z)`` with z). The tests of irbm's own registry and outside
family are in tests/test_family_registry.py.
"""

import math

import pytest
import torch
from family_constant_penalty import ConstantPenaltyOrderedRBM

import irbm
from irbm import ais
from irbm.models import FAMILIES as REGISTRY
from irbm.models import EnergyModel, binary_configurations, build_model
from irbm.strategies import RandomPermutation
from irbm.training import Callback, Trainer

N_VISIBLE = 5

# (id, factory of a small float64 model): every test below runs for each entry.
FAMILIES = [
    ("rbm", lambda: irbm.RBM(N_VISIBLE, 4, dtype=torch.float64)),
    ("orbm", lambda: irbm.OrderedRBM(N_VISIBLE, 4, beta=1.2, dtype=torch.float64)),
    ("irbm", lambda: irbm.InfiniteRBM(N_VISIBLE, n_hidden=3, beta=1.3, dtype=torch.float64)),
    ("orbm-constant", lambda: ConstantPenaltyOrderedRBM(N_VISIBLE, 4, beta=1.2,
                                                        dtype=torch.float64)),
]
PARAMS = [pytest.param(factory, id=name) for name, factory in FAMILIES]
# The tests of what only some families have pick them by it, not by name: a new family joins
# them by what it is.
BETA_PARAMS = [p for p in PARAMS if "beta" in type(p.values[0]()).options()]
ORDERED_PARAMS = [p for p in PARAMS if type(p.values[0]()).has_z]


def randomized(factory, seed=0, scale=0.8):
    """A model of the family with every parameter drawn from N(0, scale^2)."""
    model = factory()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator,
                                        dtype=parameter.dtype) * scale)
    return model


def all_visibles():
    return next(binary_configurations(N_VISIBLE, torch.float64))


def brute_force_log_partition(model):
    """log sum_v exp(-F(v)) over all 2^D visible vectors."""
    with torch.no_grad():
        return float(torch.logsumexp(-model.free_energy(all_visibles()), 0))


def data_for(seed=0, n_rows=200):
    """Noisy copies of two prototypes."""
    generator = torch.Generator().manual_seed(seed)
    prototypes = torch.tensor([[1, 1, 0, 0, 1], [0, 0, 1, 1, 0]], dtype=torch.float64)
    rows = prototypes[torch.randint(0, 2, (n_rows,), generator=generator)]
    return (rows + (torch.rand(rows.shape, generator=generator) < 0.05)) % 2


@pytest.mark.parametrize("factory", PARAMS)
def test_registered_and_rebuilt_from_config(factory):
    model = randomized(factory)
    assert REGISTRY[model.family] is type(model)
    # Every constructor option is in config(): checkpoints rebuild the model from it.
    assert set(type(model).options()) <= set(model.config())
    rebuilt = build_model(model.config(), dtype=torch.float64)
    rebuilt.load_state_dict(model.state_dict())
    assert rebuilt.config() == model.config()
    assert rebuilt.log_partition_exact() == pytest.approx(model.log_partition_exact(), abs=1e-12)


@pytest.mark.parametrize("factory", PARAMS)
def test_exact_log_partition_equals_brute_force(factory):
    model = randomized(factory, seed=1)
    assert model._n_hidden_terms() <= 2**N_VISIBLE  # the hidden route, not the visible one
    assert model.log_partition_exact() == pytest.approx(brute_force_log_partition(model),
                                                        abs=1e-9)


def brute_force_hidden_free_energy(model, h, tail_units=200):
    """-log sum_v sum_z exp(-E(v, h, z)) by enumeration of v (and of z in 1..n_hidden with h's
    units past z off; for the iRBM also z = n_hidden + k, k = 1..tail_units, whose k units
    past the trained ones take any of 2^k values at the same energy), shape (1,)."""
    visibles = all_visibles()
    hs = h.expand(visibles.shape[0], -1)
    with torch.no_grad():
        if not model.has_z:
            return -torch.logsumexp(-model.energy(visibles, hs), 0, keepdim=True)
        terms = [-model.energy(visibles, hs, z) for z in range(1, model.n_hidden + 1)
                 if not h[0, z:].any()]
        if model._z_range()[1] is None:
            terms += [k * math.log(2.0) - model.energy(visibles, hs, model.n_hidden + k)
                      for k in range(1, tail_units + 1)]
        return -torch.logsumexp(torch.cat(terms), 0, keepdim=True)


@pytest.mark.parametrize("factory", PARAMS)
def test_hidden_free_energy_equals_brute_force(factory):
    """G(h) sums out v (and z) exactly for every h, so exp(-G) over all h sums to Z."""
    model = randomized(factory, seed=4)
    every_h = next(binary_configurations(model.n_hidden, torch.float64))
    with torch.no_grad():
        hidden = model.hidden_free_energy(every_h)
    assert hidden.shape == (every_h.shape[0],)
    for h, value in zip(every_h, hidden):
        assert float(value) == pytest.approx(
            float(brute_force_hidden_free_energy(model, h.unsqueeze(0))), abs=1e-9)
    assert float(torch.logsumexp(-hidden, 0)) == pytest.approx(
        brute_force_log_partition(model), abs=1e-9)


@pytest.mark.parametrize("factory", PARAMS)
def test_descend_hidden_ends_where_no_single_flip_lowers_g_as_the_reference_does(factory):
    """From every hidden vector: G never rises, no single flip of a result lowers G (checked
    by flipping each unit), the input is left as it was, and the family's descent (incremental
    where it has one) ends where the reference, which evaluates G afresh for each flip, does."""
    model = randomized(factory, seed=6, scale=2.0)
    every_h = next(binary_configurations(model.n_hidden, torch.float64))
    before = every_h.clone()
    with torch.no_grad():
        minima = model.descend_hidden(every_h)
        reference = EnergyModel._descend_hidden(model, every_h.clone(), 1000)
        energy = model.hidden_free_energy(minima)
        assert torch.equal(every_h, before) and torch.equal(minima, reference)
        assert (energy <= model.hidden_free_energy(every_h) + 1e-12).all()
        assert len(torch.unique(minima, dim=0)) < len(every_h)  # it moved somewhere
        for unit in range(model.n_hidden):
            flipped = minima.clone()
            flipped[:, unit] = 1 - flipped[:, unit]
            assert (model.hidden_free_energy(flipped) >= energy - 1e-12).all()
    with pytest.raises(ValueError, match="max_sweeps"):
        model.descend_hidden(every_h, max_sweeps=0)


@pytest.mark.parametrize("factory", PARAMS)
def test_gradients_equal_autograd(factory):
    model = randomized(factory, seed=2)
    v = data_for(seed=2, n_rows=7)
    model.zero_grad()
    model.free_energy(v).mean().backward()
    closed_form = model.free_energy_gradients(v)
    assert set(closed_form) == {name for name, _ in model.named_parameters()}
    for name, parameter in model.named_parameters():
        torch.testing.assert_close(closed_form[name], parameter.grad, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("base", ["model", "data"])
@pytest.mark.parametrize("factory", PARAMS)
def test_ais_estimates_the_exact_log_partition(factory, base):
    model = randomized(factory, seed=3)
    result = ais.estimate_log_partition(model, 200, 1500, base=base, data=data_for(), seed=0,
                                        progress=False)
    assert result.base == base
    assert result.log_z == pytest.approx(model.log_partition_exact(), abs=0.05)


@pytest.mark.parametrize("factory", PARAMS)
def test_training_lowers_the_exact_nll(factory):
    """In rounds of 25 epochs, up to 100: a family of one's own that learns more slowly at this
    learning rate (parameters on another scale, a temperature) passes if it learns at all."""
    model, data = factory(), data_for(seed=4)
    before = float(-model.log_likelihood_exact(data).mean())
    trainer = Trainer(model, cd_k=1, batch_size=20, lr=0.2, progress=False, seed=0)
    for epochs in (25, 50, 75, 100):
        trainer.fit(data, epochs)
        after = float(-model.log_likelihood_exact(data).mean())
        if after < before - 0.5:  # uniform: 3.47 nats, data entropy ~1.7
            break
    assert after < before - 0.5, (before, after)


@pytest.mark.parametrize("factory", PARAMS)
def test_checkpoint_round_trip_and_bit_identical_resume(factory, tmp_path):
    data = data_for(seed=5)
    trainer = Trainer(factory(), cd_k=2, batch_size=25, lr=0.1, progress=False)
    trainer.fit(data, 2)
    trainer.save_checkpoint(tmp_path / "state.safetensors")
    irbm.save(trainer.model, tmp_path / "model.safetensors")
    loaded = irbm.load(tmp_path / "model.safetensors")
    assert type(loaded) is type(trainer.model) and loaded.config() == trainer.model.config()
    for name, tensor in trainer.model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    resumed = Trainer.from_checkpoint(tmp_path / "state.safetensors", progress=False)
    trainer.fit(data, 4)
    resumed.fit(data, 4)
    for name, tensor in trainer.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], tensor), name


@pytest.mark.parametrize("factory", PARAMS)
def test_hidden_permutation_moves_optimizer_state_and_undoes_bit_identically(factory):
    trainer = Trainer(factory(), cd_k=1, batch_size=20, lr=0.1, progress=False)
    trainer.fit(data_for(seed=6), 2)
    model = trainer.model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    accumulators = {k: v.clone() for k, v in trainer.optimizer.accumulators.items()}
    permutation = torch.randperm(model.n_hidden, generator=torch.Generator().manual_seed(0))
    trainer.relayout_hidden(permutation)
    for name, spec in model.parameter_specs.items():
        if spec.per_unit:
            assert torch.equal(getattr(model, name).detach(), before[name][permutation])
            assert torch.equal(trainer.optimizer.accumulators[name],
                               accumulators[name][permutation])
    trainer.relayout_hidden(torch.argsort(permutation))
    for name, tensor in before.items():
        assert torch.equal(model.state_dict()[name], tensor), name
    for name, tensor in accumulators.items():
        assert torch.equal(trainer.optimizer.accumulators[name], tensor), name


@pytest.mark.parametrize("factory", BETA_PARAMS)
def test_changing_beta_never_leaves_a_stale_log_partition(factory):
    model = randomized(factory, seed=7)
    before = model.log_partition_exact()  # anything derived from beta is now computed once
    model.beta = 1.7
    fresh = build_model({**model.config(), "beta": 1.7}, dtype=torch.float64)
    fresh.load_state_dict({k: v for k, v in model.state_dict().items()})
    assert float(model.state_dict()["beta"]) == 1.7
    assert model.log_partition_exact() == pytest.approx(brute_force_log_partition(model), abs=1e-9)
    assert model.log_partition_exact() == pytest.approx(fresh.log_partition_exact(), abs=1e-12)
    # Loading a state written with another beta brings back that beta's partition function.
    fresh.load_state_dict(randomized(factory, seed=7).state_dict())
    assert fresh.log_partition_exact() == pytest.approx(before, abs=1e-12)
    assert model.log_partition_exact() != pytest.approx(before, abs=1e-6)
    with pytest.raises(ValueError, match="beta"):
        model.beta = float("nan")


@pytest.mark.parametrize("factory", PARAMS)
def test_a_model_used_in_inference_mode_still_takes_gradients(factory):
    """Nothing computed under torch.inference_mode (an inference tensor) is kept for later."""
    model = randomized(factory, seed=3)
    v = next(binary_configurations(model.n_visible))[:5].to(model.dtype)
    with torch.inference_mode():
        expected = model.free_energy(v)
    x = v.clone().requires_grad_()
    energy = model.free_energy(x)
    energy.sum().backward()
    assert torch.allclose(energy.detach(), expected) and x.grad is not None
    # The iRBM's kept tail constant: autograd would refuse to save an inference tensor.
    tail = model._log_tail() if hasattr(model, "_log_tail") else None
    assert not (isinstance(tail, torch.Tensor) and tail.is_inference())


@pytest.mark.parametrize("regrouping", ["all", "peng"])
@pytest.mark.parametrize("factory", ORDERED_PARAMS)
def test_random_permutation_training_keeps_rows_and_state_aligned(factory, regrouping):
    """Training with the strategy: at every layout change each unit's parameters and optimizer
    accumulators move together (a spy compares them with the state just before the change)."""
    model = factory()

    class Spy(Callback):
        checked = 0

        def on_update_start(self, trainer, batch):
            self.before = ({n: p.detach().clone() for n, p in trainer.model.named_parameters()},
                           {n: a.clone() for n, a in trainer.optimizer.accumulators.items()})

        def on_hidden_layout(self, trainer, index):
            parameters, accumulators = self.before
            for name, spec in trainer.model.parameter_specs.items():
                if not spec.per_unit or name not in accumulators:
                    continue
                moved = index >= 0
                assert torch.equal(trainer.model.get_parameter(name)[moved],
                                   parameters[name][index[moved]])
                assert torch.equal(trainer.optimizer.accumulators[name][moved],
                                   accumulators[name][index[moved]])
            self.checked += int(not torch.equal(index, torch.arange(index.numel())))
            self.on_update_start(trainer, None)  # several layouts may follow in one update

    spy = Spy()
    trainer = Trainer(model, cd_k=1, batch_size=20, lr=0.1, progress=False)
    trainer.fit(data_for(seed=8), 3, callbacks=[spy, RandomPermutation(regrouping)])
    assert spy.checked >= 10  # permutations that moved units were checked (not just identities)
    assert math.isfinite(float(-model.log_likelihood_exact(data_for(seed=8)).mean()))


@pytest.mark.parametrize("factory", PARAMS)
def test_a_gibbs_step_keeps_the_exact_distribution_and_mean_hiddens_is_the_mean(factory):
    """The conditionals, which the other tests barely touch (a walkthrough's family drew h
    from sigmoid(x + 2) and passed all but one AIS test): from v ~ p(v) exactly, one step
    v -> (h, z) -> v' leaves p unchanged (chi-square over the 2^5 visible vectors), and
    mean_hiddens(v) is the mean of the sampled h."""
    from scipy.stats import chi2
    model = randomized(factory, seed=12, scale=0.6)
    visibles = all_visibles()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        exact = torch.softmax(-model.free_energy(visibles), 0)
        start = visibles[torch.multinomial(exact, 40_000, replacement=True,
                                           generator=generator)]
        after = model.sample_visible(model.sample_hidden(start, generator), generator)
        index = (after[:, None, :] == visibles[None]).all(-1).float().argmax(1)
        counts = torch.bincount(index, minlength=len(visibles)).double()
        expected = exact * len(start)
        statistic = float(((counts - expected) ** 2 / expected).sum())
        assert chi2.sf(statistic, len(visibles) - 1) > 1e-6, statistic
        repeated = visibles.repeat_interleave(2000, 0)
        sampled = model.sample_hidden(repeated, generator).h.view(len(visibles), 2000, -1)
        torch.testing.assert_close(sampled.mean(1), model.mean_hiddens(visibles), atol=0.06,
                                   rtol=0)
