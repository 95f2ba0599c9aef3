"""The ``authors`` training profile: one update of a tiny iRBM against a hand computation of
the authors' rules (MarcCote/iRBM, see ../shared/NOTES.md), each rule on its own, and a
bit-identical resume under the profile.

The hand computation is independent of the library: the free energy is written out from the
paper with the authors' last category (z >= l) and differentiated by autograd, and the update
follows their code line by line (ADAGRAD's accumulator first, epsilon inside the root, L1 on W
and b by each element's rate, the new unit from the chains' gradient, one unit pruned). The
Gibbs steps are made deterministic by visible biases of +-40, which pin every chain to one
pattern, and growth is decided by probabilities the test checks to be within 1e-6 of 0 or 1.
"""

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from torch.nn import functional

import irbm
from irbm.settings import PROFILES, Settings
from irbm.training import Callback, Trainer
from irbm.workflows import settings_for, train_run

D, EPS, BETA = 6, 1e-6, 1.01
PATTERN = torch.tensor([1.0, 1, 1, 0, 0, 0], dtype=torch.float64)  # where every chain ends


def options(profile="authors", **changes):
    """The trainer's options for a Settings with this profile (and explicit changes)."""
    settings = Settings(family="irbm", dataset="digits", profile=profile, dtype="float64",
                        cd_k=1, batch_size=5, **{"lr": 0.1, **changes})
    return {**settings.training_options(), "progress": False}


# ---------------------------------------------------------------------------- by hand
def free_energy(W, b, c, v, beta=BETA):
    """F(v) = -v.c - log(sum_{z<l} exp(S_z) + exp(S_l) / (1 - r)), S_z = sum_{i<=z}
    softplus(W_i v + b_i) - beta softplus(b_i), r = 2^(1 - beta): the authors' l categories,
    the last holding z >= l (irbm.py:52-61)."""
    columns = torch.cumsum(functional.softplus(v @ W.T + b) - beta * functional.softplus(b), 1)
    return -v @ c - torch.logsumexp(_last_category(columns, beta), 1)


def _last_category(columns, beta):
    r = 2.0 ** (1.0 - beta)
    return torch.cat([columns[:, :-1], columns[:, -1:] - math.log(1.0 - r)], 1)


def p_last_category(W, b, v, beta=BETA):
    """P(z >= l | v) per row, in the authors' categories."""
    columns = torch.cumsum(functional.softplus(v @ W.T + b) - beta * functional.softplus(b), 1)
    return torch.softmax(_last_category(columns, beta), 1)[:, -1]


def gradient(params, positives, negatives, beta=BETA):
    """d/dtheta [mean F(positives) - mean F(negatives)] by autograd."""
    params = [p.detach().clone().requires_grad_() for p in params]
    cost = (free_energy(*params, positives, beta).mean()
            - free_energy(*params, negatives, beta).mean())
    return torch.autograd.grad(cost, params)


def by_hand(W, b, c, G, data, start, end, *, lr, l1, grows, beta=BETA):
    """The authors' update: returns (W, b, c, accumulators) after it."""
    W, b, c = W.clone(), b.clone(), c.clone()
    G = {name: value.clone() for name, value in G.items()}
    g_new = None
    if grows:  # from the pre-update parameters, an appended zero row, the chains alone
        W_ext, b_ext = torch.cat([W, torch.zeros(1, D, dtype=W.dtype)]), torch.cat([b, b[:1] * 0])
        g_new = gradient((W_ext, b_ext, c), start, end, beta)[0][-1]
    for name, p, g in zip("Wbc", (W, b, c), gradient((W, b, c), data, end, beta)):
        G[name] += g ** 2  # the accumulator first (learning_rate.py:117)
        rate = lr / torch.sqrt(G[name] + EPS)  # epsilon inside the root (:120)
        p -= rate * g
        if name in "Wb":  # L1 on W and b, by each element's own rate (irbm.py:96-98)
            p.copy_(torch.sign(p) * torch.clamp(p.abs() - rate * l1, min=0))
    if grows:  # irbm.py:187-212
        G["W"] = torch.cat([G["W"], (g_new ** 2).unsqueeze(0)])
        G["b"] = torch.cat([G["b"], G["b"][:1] * 0])
        rate = lr / torch.sqrt(g_new ** 2 + EPS)
        w_new = -rate * g_new
        w_new = torch.sign(w_new) * torch.clamp(w_new.abs() - rate * l1, min=0)
        W, b = torch.cat([W, w_new.unsqueeze(0)]), torch.cat([b, b[:1] * 0])
    if l1 and (W[-1] == 0).all() and b[-1] == 0:  # shrink one unit at most (irbm.py:221-233)
        W, b = W[:-1], b[:-1]
        G["W"], G["b"] = G["W"][:-1], G["b"][:-1]
    return W, b, c, G


# ---------------------------------------------------------------------------- the library
def one_update(W, b, G, data, start, *, profile="authors", **changes):
    """One `Trainer.update` of an iRBM with these parameters, accumulators and chains."""
    model = irbm.InfiniteRBM(D, W.shape[0], dtype=torch.float64)
    c = 40.0 * (2 * PATTERN - 1)  # pins every visible unit: chains end at PATTERN
    with torch.no_grad():
        model.W.copy_(W), model.b.copy_(b), model.c.copy_(c)
    trainer = Trainer(model, **options(profile, **changes))
    trainer.chains = start.clone()
    trainer.optimizer.sync(model)
    trainer.optimizer.load_state_dict(G)
    trainer.update(data)
    return trainer, c


def rows(seed, n=5, fixed=None):
    """n random 0/1 rows of D values, with the columns in ``fixed`` set as given."""
    v = (torch.rand(n, D, generator=torch.Generator().manual_seed(seed)) < 0.5).double()
    for column, value in (fixed or {}).items():
        v[:, column] = value
    return v


def accumulators(n_units, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return {"W": 0.1 + torch.rand(n_units, D, generator=generator, dtype=torch.float64),
            "b": 0.1 + torch.rand(n_units, generator=generator, dtype=torch.float64),
            "c": 0.1 + torch.rand(D, generator=generator, dtype=torch.float64)}


def assert_matches(trainer, expected):
    W, b, c, G = expected
    model = trainer.model
    assert model.n_hidden == W.shape[0]
    for name, want in zip("Wbc", (W, b, c)):
        torch.testing.assert_close(getattr(model, name).detach(), want, rtol=1e-10, atol=1e-12)
    for name in "Wbc":
        torch.testing.assert_close(trainer.optimizer.accumulators[name], G[name], rtol=1e-10,
                                   atol=1e-12)
    assert torch.equal(trainer.chains, PATTERN.expand(5, D)), "the chains were not pinned"


# Unit 2 is a gate: W_2 v + b_2 is 40 on the chains' PATTERN, 20 - 40 = -20 on rows whose first
# three values are 1, and 20 + 20 = 40 on rows 000111.
GATE_UP = torch.tensor([[0.3, -0.5, 0.8, 0.2, -0.1, 0.4], [40 / 3] * 3 + [-1.0] * 3])
GATE_DOWN = torch.tensor([[0.3, -0.5, 0.8, 0.2, -0.1, 0.4], [-40 / 3] * 3 + [20 / 3] * 3])


def test_one_update_grows_from_the_chains_and_initializes_the_new_unit_as_the_authors():
    """The chains end where z >= l is certain: one unit is added, its weights one ADAGRAD + L1
    step on the chains' own gradient (start minus end), its bias and accumulator 0; the old
    units' accumulators take g^2 before the step."""
    W, b = GATE_UP.double(), torch.tensor([0.5, 0.0], dtype=torch.float64)
    data, start = rows(1), rows(2, fixed={5: 0.0})  # column 5: start = end, new weight 0
    G, lr, l1 = accumulators(2), 0.1, 0.05
    assert p_last_category(W, b, PATTERN.unsqueeze(0)).min() > 1 - 1e-6
    trainer, c = one_update(W, b, G, data, start, l1=l1)
    expected = by_hand(W, b, c, G, data, start, PATTERN.expand(5, D), lr=lr, l1=l1, grows=True)
    assert_matches(trainer, expected)
    new_row = trainer.model.W[-1]
    assert new_row[5] == 0 and (new_row[:3] != 0).all() and trainer.model.b[-1] == 0
    assert trainer.optimizer.accumulators["b"][-1] == 0


def test_one_update_ignores_the_data_z_for_growth():
    """z >= l is certain on the data and impossible on the chains: the authors' rule does not
    grow, irbm's (z anywhere in the update) does."""
    W, b = GATE_DOWN.double(), torch.tensor([0.5, 20.0], dtype=torch.float64)
    data = rows(3, fixed={0: 0.0, 1: 0.0, 2: 0.0, 3: 1.0, 4: 1.0, 5: 1.0})
    start = rows(4, fixed={0: 1.0, 1: 1.0, 2: 1.0})
    G, lr, l1 = accumulators(2, seed=1), 0.1, 0.0  # no L1: a wrongly grown unit would stay
    chain_p = torch.cat([p_last_category(W, b, start), p_last_category(W, b, PATTERN[None])])
    assert chain_p.max() < 1e-6 and p_last_category(W, b, data).min() > 1 - 1e-6
    trainer, c = one_update(W, b, G, data, start)
    assert_matches(trainer, by_hand(W, b, c, G, data, start, PATTERN.expand(5, D), lr=lr,
                                    l1=l1, grows=False))
    assert one_update(W, b, G, data, start, growth="any")[0].model.n_hidden == 3


def test_one_update_grows_on_the_z_of_the_chains_start():
    """The chains start where z >= l is certain and end where it is impossible (the data too):
    the z drawn on the persistent chains before the Gibbs steps grows the model."""
    W, b = GATE_DOWN.double(), torch.tensor([0.5, 20.0], dtype=torch.float64)
    data = rows(11, fixed={0: 1.0, 1: 1.0, 2: 1.0})
    start = rows(12, fixed={0: 0.0, 1: 0.0, 2: 0.0, 3: 1.0, 4: 1.0})
    G, lr, l1 = accumulators(2, seed=3), 0.1, 1e-3
    assert p_last_category(W, b, start).min() > 1 - 1e-6
    assert torch.cat([p_last_category(W, b, PATTERN[None]),
                      p_last_category(W, b, data)]).max() < 1e-6
    trainer, c = one_update(W, b, G, data, start, l1=l1)
    assert trainer.model.n_hidden == 3
    assert_matches(trainer, by_hand(W, b, c, G, data, start, PATTERN.expand(5, D), lr=lr,
                                    l1=l1, grows=True))


def test_one_update_prunes_one_trailing_zero_unit():
    """Units 2 and 3 are zero and stay zero under a strong L1; z >= 3 is near certain (the
    zero units pass z on), so a unit grows whose weights L1 zeroes too: the authors' rule then
    removes that one unit and keeps the other two zero units (irbm's removes all three)."""
    W = torch.zeros(3, D, dtype=torch.float64)
    W[0] = GATE_UP[0].double() * 10
    b = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    data, start = rows(5), rows(6)
    G, lr, l1 = accumulators(3, seed=2), 0.1, 10.0
    G["W"][0], G["b"][0] = 1e4, 1e4  # unit 1 survives L1: its rate is lr / 100
    G["W"][1:], G["b"][1:] = 0.0, 0.0  # the zero units have never had a gradient
    chain_p = torch.cat([p_last_category(W, b, start), p_last_category(W, b, PATTERN[None])])
    assert chain_p.min() > 0.98  # ten draws: all below the last category with p < 1e-16
    trainer, c = one_update(W, b, G, data, start, l1=l1)
    expected = by_hand(W, b, c, G, data, start, PATTERN.expand(5, D), lr=lr, l1=l1, grows=True)
    assert expected[0].shape[0] == 3 and (expected[0][1:] == 0).all()
    assert_matches(trainer, expected)
    assert one_update(W, b, G, data, start, l1=l1, pruning="all")[0].model.n_hidden == 1


# ---------------------------------------------------------------------------- one at a time
@pytest.mark.parametrize("name", list(PROFILES["irbm"]))
def test_each_rule_is_a_setting_of_its_own_that_overrides_the_profile(name):
    irbm_options, authors_options = options("irbm"), options("authors")
    assert irbm_options[name] != authors_options[name]
    one = options("irbm", **{name: PROFILES["authors"][name]})
    assert {k for k in one if one[k] != irbm_options[k]} == {name}
    back = options("authors", **{name: PROFILES["irbm"][name]})
    assert {k for k in back if back[k] != authors_options[k]} == {name}


def test_the_profile_leaves_the_growth_rules_of_fixed_size_families_and_sgd_alone():
    settings = Settings(family="orbm", dataset="digits", profile="authors", optimizer="sgd")
    assert (settings.growth, settings.pruning, settings.epsilon_placement) == \
        ("any", "all", "outside")
    assert (settings.regularization, settings.shuffle) == ("authors", False)
    with pytest.raises(ValueError, match="orbm has a fixed number of hidden units"):
        Settings(family="orbm", dataset="digits", new_unit="chains")
    # Records made while new_unit "update" was irbm's default carry it for every family (it
    # changes nothing for a fixed size): they still load, and so does today's default.
    assert Settings(family="rbm", dataset="digits", new_unit="update").new_unit == "update"
    assert Settings(family="orbm", dataset="digits").new_unit == "peers"
    with pytest.raises(ValueError, match="rbm has a fixed number of hidden units"):
        Settings(family="rbm", dataset="digits", new_unit="chains")


def test_growth_chains_alone_stops_the_data_z_from_growing_the_model():
    W, b = GATE_DOWN.double(), torch.tensor([0.5, 20.0], dtype=torch.float64)
    data = rows(3, fixed={0: 0.0, 1: 0.0, 2: 0.0, 3: 1.0, 4: 1.0, 5: 1.0})
    start = rows(4, fixed={0: 1.0, 1: 1.0, 2: 1.0})
    G = accumulators(2)
    assert one_update(W, b, G, data, start, profile="irbm")[0].model.n_hidden == 3
    assert one_update(W, b, G, data, start, profile="irbm",
                      growth="chains")[0].model.n_hidden == 2


def test_growth_trigger_last_alone_grows_on_z_at_the_last_unit():
    """With beta = 30 the tail is out of reach (r = 2^-29) and z = l is certain."""
    beta = 30.0
    data = rows(7)
    sizes = {}
    for trigger in ("tail", "last"):
        trainer = Trainer(irbm.InfiniteRBM(D, 1, beta=beta, dtype=torch.float64),
                          **options("irbm", growth_trigger=trigger))
        trainer.update(data)
        sizes[trigger] = trainer.model.n_hidden
    assert sizes == {"tail": 1, "last": 2}


def grown_both_ways(new_unit, **changes):
    """One update of the same two-unit iRBM under new_unit="update" (a new unit's first step
    from the update's gradient, its accumulators empty) and under ``new_unit``, which grows a
    third unit; checks that the two units already there, c and the chains are the same after
    it either way. Returns ("update"'s trainer, the other's, the accumulators)."""
    W, b = GATE_UP.double(), torch.tensor([0.5, 0.0], dtype=torch.float64)
    data, start, G = rows(1), rows(2, fixed={5: 0.0}), accumulators(2)
    ours = one_update(W, b, G, data, start, profile="irbm", new_unit="update", **changes)[0]
    theirs = one_update(W, b, G, data, start, profile="irbm", new_unit=new_unit, **changes)[0]
    assert ours.model.n_hidden == theirs.model.n_hidden == 3
    for name in "Wbc":
        old = slice(None) if name == "c" else slice(0, 2)
        assert torch.equal(getattr(ours.model, name)[old], getattr(theirs.model, name)[old])
        assert torch.equal(ours.optimizer.accumulators[name][old],
                           theirs.optimizer.accumulators[name][old])
    assert torch.equal(ours.chains, theirs.chains)
    return ours, theirs, G


def test_new_unit_chains_alone_changes_only_the_new_unit():
    ours, theirs, _ = grown_both_ways("chains")
    assert ours.model.b[-1] != 0 and theirs.model.b[-1] == 0
    assert theirs.optimizer.accumulators["b"][-1] == 0
    assert not torch.equal(ours.model.W[-1], theirs.model.W[-1])


def test_new_unit_peers_starts_the_new_units_accumulators_at_the_others_mean():
    """new_unit="peers" is "update" but for the new unit's ADAGRAD accumulators, which start at
    the mean of the other units' (G[new] = mean_j G[j]) rather than empty: on the same gradient
    g its first step is lr g / (sqrt(mean + g^2) + eps) instead of lr g / (|g| + eps). The
    older units, c, the chains and the size are untouched."""
    ours, peers, G = grown_both_ways("peers", l1=0.0)
    epsilon = peers.optimizer.epsilon
    for name in "Wb":
        empty = ours.optimizer.accumulators[name][-1]  # g^2 alone
        seeded = peers.optimizer.accumulators[name][-1]
        assert (empty > 0).any(), "the new unit had no gradient: the test shows nothing"
        torch.testing.assert_close(seeded - empty, G[name].mean(0), rtol=1e-12, atol=1e-15)
        step, scaled = getattr(ours.model, name)[-1], getattr(peers.model, name)[-1]
        torch.testing.assert_close(scaled, step * (empty.sqrt() + epsilon)
                                   / (seeded.sqrt() + epsilon), rtol=1e-10, atol=1e-15)
        assert (scaled.abs() <= step.abs()).all() and (scaled.abs() < step.abs()).any()


def test_pruning_one_alone_keeps_the_other_trailing_zero_units_and_none_keeps_all():
    W = torch.zeros(3, D, dtype=torch.float64)
    W[0] = GATE_UP[0].double() * 10
    b = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    G = accumulators(3)
    G["W"][0], G["b"][0] = 1e4, 1e4
    G["W"][1:], G["b"][1:] = 0.0, 0.0
    sizes = [one_update(W, b, G, rows(5), rows(6), profile="irbm", l1=10.0,
                        **extra)[0].model.n_hidden
             for extra in ({}, {"pruning": "one"}, {"pruning": "none"})]
    assert sizes == [1, 3, 4]  # three units and the one grown: none, all but one, all kept


class Batches(Callback):
    """Records every minibatch and the chains before and after each update."""

    def __init__(self):
        self.batches, self.chains = [], []

    def on_update_start(self, trainer, batch):
        self.batches.append(batch.clone())
        self.chains.append(trainer.chains.clone())

    def on_update_end(self, trainer, batch):
        self.chains[-1] = (self.chains[-1], trainer.chains.clone())


def test_shuffle_off_alone_takes_the_minibatches_in_file_order():
    data = rows(8, n=23)
    for shuffle in (True, False):
        recorder = Batches()
        trainer = Trainer(irbm.InfiniteRBM(D, dtype=torch.float64),
                          **options("irbm", shuffle=shuffle))
        trainer.fit(data, 1, callbacks=[recorder])
        in_order = torch.equal(torch.cat(recorder.batches), data)
        assert in_order == (not shuffle)
        assert [len(batch) for batch in recorder.batches] == [5, 5, 5, 5, 3]


@pytest.mark.parametrize("rule", ["all", "rows"])
def test_chains_per_update_rows_alone_advances_only_the_first_chains_on_a_short_batch(rule):
    data = rows(9, n=13)
    recorder = Batches()
    trainer = Trainer(irbm.InfiniteRBM(D, dtype=torch.float64),
                      **options("irbm", chains_per_update=rule))
    trainer.fit(data, 2, callbacks=[recorder])
    before, after = recorder.chains[-1]  # the second epoch's last minibatch: 3 rows
    assert len(recorder.batches[-1]) == 3 and after.shape == (5, D)
    assert torch.equal(before[3:], after[3:]) == (rule == "rows")
    assert not torch.equal(before[:3], after[:3])


# ---------------------------------------------------------------------------- resume
def test_a_resumed_run_under_the_profile_is_bit_identical(tmp_path):
    """Through `train_run`: growth, L1 pruning, a short last minibatch, the file order."""
    generator = np.random.default_rng(0)
    prototypes = generator.random((3, 16)) < 0.5
    data = prototypes[generator.integers(0, 3, 150)] ^ (generator.random((150, 16)) < 0.05)
    path = tmp_path / "rows.npy"
    np.save(path, data.astype(np.float64))
    settings = Settings(family="irbm", dataset=str(path), profile="authors", epochs=6, cd_k=2,
                        batch_size=16, lr=0.05, l1=1e-3, dtype="float64", train_size=100)
    straight = train_run(settings, tmp_path / "straight", epoch_lines=False)
    train_run(replace(settings, epochs=3), tmp_path / "resumed", epoch_lines=False)
    resumed_settings = settings_for(tmp_path / "resumed", {"epochs": 6})
    assert (resumed_settings.profile, resumed_settings.new_unit) == ("authors", "chains")
    resumed = train_run(resumed_settings, tmp_path / "resumed", epoch_lines=False)
    assert resumed.model.n_hidden == straight.model.n_hidden > 1
    assert resumed.size_history == straight.size_history
    assert len({size for _, size in straight.size_history}) > 2, "no growth to speak of"
    for name, value in straight.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], value), name
    for name, value in straight.optimizer.state_dict().items():
        assert torch.equal(resumed.optimizer.state_dict()[name], value), name
    assert torch.equal(resumed.chains, straight.chains)
    assert torch.equal(resumed.gibbs_generator.get_state(), straight.gibbs_generator.get_state())
    record = json.loads((tmp_path / "resumed" / "config.json").read_text())["settings"]
    assert record["profile"] == "authors" and record["growth"] == "chains"


def test_resuming_with_another_profile_is_a_change_of_the_rules_it_sets(tmp_path):
    path = tmp_path / "rows.npy"
    np.save(path, rows(10, n=60).numpy())
    settings = Settings(family="irbm", dataset=str(path), epochs=1, cd_k=1, batch_size=16)
    train_run(settings, tmp_path / "run", epoch_lines=False)
    switched = settings_for(tmp_path / "run", {"profile": "authors", "epochs": 2})
    assert (switched.growth, switched.shuffle) == ("chains", False)
    kept = settings_for(tmp_path / "run", {"profile": "authors", "growth": "any"})
    assert (kept.growth, kept.pruning) == ("any", "one")
    with pytest.raises(ValueError, match="different settings"):
        train_run(switched, tmp_path / "run", epoch_lines=False)
    assert settings_for(tmp_path / "run", {"epochs": 2}).growth == "any"


def test_growth_data_grows_on_the_data_z_alone():
    """z >= l certain on the data and impossible on the chains: 'data' grows; the reverse case
    (the chains' start in the last category, the data never) does not."""
    W, b = GATE_DOWN.double(), torch.tensor([0.5, 20.0], dtype=torch.float64)
    G = accumulators(2)
    data = rows(3, fixed={0: 0.0, 1: 0.0, 2: 0.0, 3: 1.0, 4: 1.0, 5: 1.0})
    start = rows(4, fixed={0: 1.0, 1: 1.0, 2: 1.0})
    assert one_update(W, b, G, data, start, profile="irbm", growth="data",
                      growth_trigger="last")[0].model.n_hidden == 3
    data = rows(11, fixed={0: 1.0, 1: 1.0, 2: 1.0})
    start = rows(12, fixed={0: 0.0, 1: 0.0, 2: 0.0, 3: 1.0, 4: 1.0})
    assert one_update(W, b, G, data, start, profile="irbm", growth="chains",
                      growth_trigger="last")[0].model.n_hidden == 3
    assert one_update(W, b, G, data, start, profile="irbm", growth="data",
                      growth_trigger="last")[0].model.n_hidden == 2
