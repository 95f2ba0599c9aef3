"""Training strategies and growth rules: Peng et al.'s regrouping schedule (which units are
permuted, the one-time sort by filter norm, bit-identical resume) and the paired growth rule,
against hand-computed values."""

import math
from types import SimpleNamespace

import pytest
import torch

import irbm
from irbm.strategies import RandomPermutation
from irbm.training import CheckpointEvery, Trainer

N_VISIBLE = 10


def data(n_rows=60, seed=0):
    generator = torch.Generator().manual_seed(seed)
    prototypes = (torch.rand(3, N_VISIBLE, generator=generator) < 0.5).double()
    rows = prototypes[torch.randint(0, 3, (n_rows,), generator=generator)]
    return (rows + (torch.rand(n_rows, N_VISIBLE, generator=generator) < 0.05).double()) % 2


def grown_irbm(n_hidden=20, seed=0):
    """An iRBM of n_hidden units whose filters all have different norms."""
    model = irbm.InfiniteRBM(N_VISIBLE, dtype=torch.float64)
    model.grow(n_hidden - model.n_hidden)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.W.copy_(torch.randn(model.W.shape, generator=generator, dtype=torch.float64))
        model.b.copy_(torch.randn(model.b.shape, generator=generator, dtype=torch.float64))
    return model


def stub(epoch, means):
    """What `_regrouped` reads of a trainer: epochs finished and their history."""
    history = [{"epoch": k + 1, "mean_chain_z": m} for k, m in enumerate(means)]
    return SimpleNamespace(epoch=epoch, history=history)


# ---------------------------------------------------------------------------- the schedule
@pytest.mark.parametrize("n_hidden,expected", [(5, 5), (100, 90), (21, 19)])
def test_warmup_permutes_nine_tenths_rounded_half_up(n_hidden, expected):
    # 0.9 * 5 = 4.5 -> 5 (MATLAB's rounding; Python's round would give 4).
    strategy = RandomPermutation("peng")
    assert strategy._regrouped(stub(0, []), n_hidden) == expected
    assert strategy._regrouped(stub(9, [1.0] * 9), n_hidden) == expected


def test_epoch_eleven_sorts_once_then_permutes_nothing():
    strategy = RandomPermutation("peng")
    trainer = stub(10, [50.0] * 10)
    assert strategy._regrouped(trainer, 40) == 0
    assert strategy._regrouped(trainer, 40) == 1
    strategy.on_epoch_end(trainer, {})
    assert strategy._regrouped(stub(11, [50.0] * 11), 100) == 45


def test_after_the_sort_the_count_follows_the_chains_mean_z():
    strategy = RandomPermutation("peng")
    # Last mean < 100: 0.9 x the mean of the last 10 epochs' means. Means 10, 20, ..., 100, 99:
    # the last ten are 20..100 and 99, mean 63.9, x 0.9 = 57.51 -> 58.
    means = [10.0 * k for k in range(1, 11)] + [99.0]
    assert strategy._regrouped(stub(11, means), 1000) == 58
    # Last mean >= 100 before epoch 22: the mean since epoch 11, minus 10.
    means = [50.0] * 10 + [110.0, 130.0]
    assert strategy._regrouped(stub(12, means), 1000) == 120 - 10
    # From epoch 22 on: the mean from epoch round(0.8 e) on, minus 10 (e = 30: epochs 24-29,
    # 124..129, mean 126.5 -> 127 rounding half up, 117).
    means = [100.0 + k for k in range(1, 30)]
    assert strategy._regrouped(stub(29, means), 1000) == 117
    # Kept within 1..l.
    assert strategy._regrouped(stub(29, means), 50) == 50
    assert strategy._regrouped(stub(11, [5.0] * 11), 50) == 5  # 0.9 x 5 = 4.5 -> 5


def test_a_history_without_chain_means_is_a_clear_error():
    strategy = RandomPermutation("peng")
    with pytest.raises(ValueError, match="mean_chain_z"):
        strategy._regrouped(stub(14, [None] * 14), 100)


def test_peng_regrouping_refuses_at_once_a_run_without_chain_means_or_a_late_position(tmp_path):
    rows = data()
    trainer = Trainer(irbm.InfiniteRBM(N_VISIBLE, dtype=torch.float64), cd_k=1, batch_size=20,
                      progress=False)
    trainer.fit(rows, 2, callbacks=[RandomPermutation("all")])
    with pytest.raises(ValueError, match="mean_chain_z"):
        trainer.fit(rows, 30, callbacks=[RandomPermutation("peng")])
    assert trainer.epoch == 2  # refused before any work
    fresh = Trainer(irbm.InfiniteRBM(N_VISIBLE, dtype=torch.float64), progress=False)
    with pytest.raises(ValueError, match="before CheckpointEvery"):
        fresh.fit(rows, 1, callbacks=[CheckpointEvery(tmp_path), RandomPermutation("peng")])


def test_unknown_regrouping_is_refused():
    with pytest.raises(ValueError, match="regrouping must be one of"):
        RandomPermutation("sorted")


# ---------------------------------------------------------------------------- its effects
def _trainer(model, **options):
    trainer = Trainer(model, cd_k=1, batch_size=20, lr=0.05, progress=False, **options)
    trainer.optimizer.sync(model)
    generator = torch.Generator().manual_seed(5)
    for accumulator in trainer.optimizer.accumulators.values():
        accumulator.copy_(torch.rand(accumulator.shape, generator=generator, dtype=torch.float64))
    return trainer


def test_warmup_permutes_only_the_leading_units():
    model = grown_irbm(20)
    trainer = _trainer(model)
    W, accumulator = model.W.detach().clone(), trainer.optimizer.accumulators["W"].clone()
    strategy = RandomPermutation("peng")
    strategy.on_fit_start(trainer)
    moved = False
    for _ in range(3):
        strategy.on_update_start(trainer, None)
        assert torch.equal(model.W[18:], W[18:])  # round(0.9 * 20) = 18 leading units only
        assert torch.equal(trainer.optimizer.accumulators["W"][18:], accumulator[18:])
        # The leading rows are the same rows, reordered, with their accumulators.
        index = [next(i for i in range(18) if torch.equal(row, W[i])) for row in model.W[:18]]
        assert sorted(index) == list(range(18))
        assert torch.equal(trainer.optimizer.accumulators["W"][:18], accumulator[index])
        moved |= index != list(range(18))
    assert moved


def test_the_sort_orders_units_by_filter_norm_with_their_state():
    model = grown_irbm(12)
    trainer = _trainer(model)
    trainer.state.epoch = 10  # epoch 11 under way
    W, b = model.W.detach().clone(), model.b.detach().clone()
    accumulator = trainer.optimizer.accumulators["b"].clone()
    order = sorted(range(12), key=lambda i: -float(W[i].norm()))
    strategy = RandomPermutation("peng")
    strategy.on_fit_start(trainer)
    strategy.on_update_start(trainer, None)
    assert torch.equal(model.W, W[order]) and torch.equal(model.b, b[order])
    assert torch.equal(trainer.optimizer.accumulators["b"], accumulator[order])
    strategy.on_update_start(trainer, None)  # later updates of epoch 11 leave the order alone
    assert torch.equal(model.W, W[order])


@pytest.mark.parametrize("stop", [9, 10, 11, 12])
def test_peng_regrouping_resumes_bit_identically_across_the_sort(tmp_path, stop):
    rows = data()
    options = dict(cd_k=2, batch_size=20, lr=0.05, l1=1e-3, growth="paired", progress=False)

    def fresh():
        return Trainer(irbm.InfiniteRBM(N_VISIBLE, dtype=torch.float64), **options)

    straight = fresh()
    straight.fit(rows, 13, callbacks=[RandomPermutation("peng")])
    first = fresh()
    first.fit(rows, stop, callbacks=[RandomPermutation("peng")])
    first.save_checkpoint(tmp_path / "state.safetensors")
    resumed = Trainer.from_checkpoint(tmp_path / "state.safetensors", progress=False)
    resumed.fit(rows, 13, callbacks=[RandomPermutation("peng")])
    assert [row["mean_chain_z"] for row in resumed.history] == \
        [row["mean_chain_z"] for row in straight.history]
    for name, tensor in straight.model.state_dict().items():
        assert torch.equal(tensor, resumed.model.state_dict()[name]), name


# ---------------------------------------------------------------------------- growth rules
def test_growth_z_by_rule_against_hand_values():
    trainer = Trainer(irbm.InfiniteRBM(N_VISIBLE), progress=False, growth="paired")
    # Three data rows, then four chains: pairs (3, 6), (7, 1), (2, 5); the fourth chain has
    # no data row. max of the pairs' minima = 3.
    z = torch.tensor([3, 7, 2, 6, 1, 5, 9])
    assert int(trainer._growth_z(torch.tensor(8), z, 3)) == 3
    trainer.config.growth = "any"
    assert int(trainer._growth_z(torch.tensor(8), z, 3)) == 9
    assert int(trainer._growth_z(torch.tensor(11), z, 3)) == 11
    assert int(trainer._growth_z(None, z, 3)) == 9


def test_paired_growth_grows_less_than_any_on_the_same_run():
    sizes = {}
    for rule in ("any", "paired"):
        trainer = Trainer(irbm.InfiniteRBM(N_VISIBLE, dtype=torch.float64), cd_k=2,
                          batch_size=20, lr=0.1, growth=rule, progress=False)
        trainer.fit(data(120), 20)
        sizes[rule] = trainer.model.n_hidden
    # Early on both grow at every update (one unit per update at most); later "paired" lags.
    assert 1 < sizes["paired"] < sizes["any"]


def brute_force_p_z(W, b, v, beta, terms=20000):
    """P(z | v) for z = 1..l + terms, shape (N, l + terms), summed term by term rather than by
    the tail's closed form: each unit past l adds (1 - beta) ln 2 to -F(v, z) (float64)."""
    softplus = torch.nn.functional.softplus
    inside = (softplus(v @ W.T + b) - beta * softplus(b)).cumsum(1)
    beyond = inside[:, -1:] + (1 - beta) * math.log(2) * torch.arange(1, terms + 1)
    return torch.softmax(torch.cat([inside, beyond], 1), 1)


@pytest.mark.parametrize("trigger", ["tail", "last"])
def test_expected_growth_against_a_brute_force_tail_probability(trigger):
    """growth="expected" grows on t = l + 1 (trigger "last": t = l) exactly when the batch's
    sum_n P(z >= t | v_n) is at least one."""
    generator = torch.Generator().manual_seed(3)
    model = irbm.InfiniteRBM(N_VISIBLE, 3, beta=1.2, dtype=torch.float64).requires_grad_(False)
    with torch.no_grad():
        model.W.copy_(0.8 * torch.randn(3, N_VISIBLE, generator=generator, dtype=torch.float64))
        model.b.copy_(torch.randn(3, generator=generator, dtype=torch.float64))
    trainer = Trainer(model, progress=False, growth="expected", growth_trigger=trigger)
    rows = data(40, seed=5)
    first = 4 if trigger == "tail" else 3
    reaching = brute_force_p_z(model.W, model.b, rows, 1.2)[:, first - 1:].sum(1)
    outcomes = set()
    for n_rows in range(1, 41):
        expected = float(reaching[:n_rows].sum())
        assert abs(expected - 1) > 1e-6  # away from the threshold, so the decision is sharp
        decided = int(trainer._expected_growth_z(rows[:n_rows]))
        assert decided == (first if expected >= 1 else 0), (n_rows, expected)
        outcomes.add(decided)
    assert outcomes == {0, first}


def test_expected_growth_in_an_update_against_hand_values():
    """A zero iRBM of 2 units with beta = 3 gives each unit the factor r = 2**(1 - beta) = 1/4:
    P(z = 1, 2, > 2 | v) is proportional to r, r^2, r^3 / (1 - r), so P(z > 2 | v) = 1/16 and
    P(z >= 2 | v) = 1/4 for every row. An update grows it when the rows reach one in all:
    trigger "tail" at 20 rows (1.25) and not at 5 (0.31); "last" at 5 (1.25), not at 3."""
    for n_rows, trigger, size in [(5, "tail", 2), (20, "tail", 3), (3, "last", 2),
                                  (5, "last", 3)]:
        model = irbm.InfiniteRBM(N_VISIBLE, 2, beta=3.0, dtype=torch.float64)
        with torch.no_grad():
            model.W.zero_()
        trainer = Trainer(model, progress=False, growth="expected", growth_trigger=trigger,
                          batch_size=n_rows)
        trainer.update(data(n_rows))
        assert trainer.model.n_hidden == size, (n_rows, trigger)


def test_expected_growth_leaves_a_fixed_size_family_alone():
    trainer = Trainer(irbm.OrderedRBM(N_VISIBLE, 3, dtype=torch.float64), progress=False,
                      growth="expected", growth_trigger="last", batch_size=20)
    # E = sum_n P(z = 3 | v_n), about 20 / 3 for the zero model, calls for growth...
    assert int(trainer._expected_growth_z(data(20))) == 3
    trainer.update(data(20))
    assert trainer.model.n_hidden == 3  # ...but an oRBM does not grow


def test_unknown_growth_rule_is_refused():
    with pytest.raises(ValueError, match="growth must be one of"):
        Trainer(irbm.InfiniteRBM(N_VISIBLE), growth="both")


def test_expected_growth_resumes_bit_identically(tmp_path):
    options = dict(cd_k=2, batch_size=16, lr=0.05, l1=1e-3, growth="expected",
                   last_batch="merge", progress=False)

    def fresh():
        return Trainer(irbm.InfiniteRBM(N_VISIBLE, dtype=torch.float64), **options)

    straight = fresh()
    straight.fit(data(120), 6)
    first = fresh()
    first.fit(data(120), 3)
    first.save_checkpoint(tmp_path / "state.safetensors")
    resumed = Trainer.from_checkpoint(tmp_path / "state.safetensors", progress=False)
    resumed.fit(data(120), 6)
    assert resumed.size_history == straight.size_history and straight.model.n_hidden > 1
    for name, tensor in straight.model.state_dict().items():
        assert torch.equal(tensor, resumed.model.state_dict()[name]), name
