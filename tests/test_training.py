"""Training: learning lowers the exact NLL, iRBM growth and shrinking, the oRBM's left-to-right
training, optimizer updates against hand-computed ones, and resumable checkpoints."""

import math

import numpy as np
import pytest
import torch

import irbm
from irbm import checkpoint as ckpt
from irbm.optim import Optimizer
from irbm.training import Callback, Trainer

N_VISIBLE = 10


def prototype_data(n_rows=400, n_visible=N_VISIBLE, n_prototypes=4, flip=0.05, seed=0):
    """Noisy copies of a few random binary prototypes: data that needs hidden capacity."""
    generator = torch.Generator().manual_seed(seed)
    prototypes = (torch.rand(n_prototypes, n_visible, generator=generator) < 0.5).double()
    rows = prototypes[torch.randint(0, n_prototypes, (n_rows,), generator=generator)]
    noise = (torch.rand(n_rows, n_visible, generator=generator) < flip).double()
    return (rows + noise) % 2


FACTORIES = {
    "rbm": lambda: irbm.RBM(N_VISIBLE, 8, dtype=torch.float64),
    "orbm": lambda: irbm.OrderedRBM(N_VISIBLE, 8, dtype=torch.float64),
    "irbm": lambda: irbm.InfiniteRBM(N_VISIBLE, dtype=torch.float64, max_hidden=60),
}


def mean_nll(model, data):
    return float(-model.log_likelihood_exact(data).mean())


@pytest.mark.parametrize("family", FACTORIES)
@pytest.mark.parametrize("persistent,cd_k", [(False, 1), (True, 5)])
# FACTORIES caps the iRBM so that these short runs stay small; the cap's warning is expected.
@pytest.mark.filterwarnings("ignore:the infinite RBM would grow past max_hidden")
def test_training_lowers_exact_nll(family, persistent, cd_k):
    data = prototype_data()
    model = FACTORIES[family]()
    before = mean_nll(model, data)
    trainer = Trainer(model, cd_k=cd_k, persistent=persistent, batch_size=20, lr=0.2,
                      progress=False)
    trainer.fit(data, 30)
    after = mean_nll(model, data)
    # The initial model is near uniform (10 ln 2 = 6.93 nats); the data's entropy is about
    # ln 4 + 10 H(0.05) = 3.38 nats, so a good fit gains more than 2.5 nats.
    assert before > 6.5
    assert after < before - 2.5, (before, after)
    assert [m["epoch"] for m in trainer.history] == list(range(1, 31))
    for key in ("reconstruction_error", "train_free_energy", "n_hidden", "seconds"):
        assert key in trainer.history[-1]


def test_the_caps_warning_names_the_line_that_called_fit():
    """Raised four calls deep in the trainer's growth step, it named a line of irbm (stacklevel=2),
    where a user can neither see their own code nor filter it with -W by module."""
    model = irbm.InfiniteRBM(N_VISIBLE, n_hidden=1, max_hidden=1,
                             generator=torch.Generator().manual_seed(0))
    with pytest.warns(UserWarning, match=r"would grow past max_hidden \(1\)") as caught:
        Trainer(model, cd_k=1, batch_size=20, lr=0.2, seed=0, progress=False).fit(
            prototype_data(), 3)
    assert {record.filename for record in caught} == {__file__}
    assert model.n_hidden == 1
    # Called straight, through torch.no_grad's wrapper (it named torch's _contextlib.py).
    trainer = Trainer(model, cd_k=1, batch_size=20, lr=0.2, seed=0, progress=False)
    with pytest.warns(UserWarning, match="would grow past max_hidden") as caught:
        for _ in range(20):
            trainer.update(prototype_data()[:20])
    assert {record.filename for record in caught} == {__file__}


class ShapeWatcher(Callback):
    """Record (n_hidden, ADAGRAD accumulator shapes) after every epoch."""

    def __init__(self):
        self.sizes = []

    def on_epoch_end(self, trainer, metrics):
        model = trainer.model
        for name in ("W", "b", "c"):
            assert trainer.optimizer.accumulators[name].shape == getattr(model, name).shape
        self.sizes.append(model.n_hidden)


@pytest.mark.parametrize("new_unit", ["peers", "update"])
def test_irbm_grows_then_levels_off_with_weight_decay(new_unit):
    """Growth slows under L2 alone (nothing prunes). Under "peers" (the default) it slows
    later: a new unit's first steps are small, so the near-zero units past the trained ones
    keep the tail's mass up for longer (here 922 units at epoch 200 against 481 under
    "update"; with L1 both stay near 400)."""
    data = prototype_data(n_rows=300)
    model = irbm.InfiniteRBM(N_VISIBLE, dtype=torch.float64)
    watcher = ShapeWatcher()
    trainer = Trainer(model, cd_k=1, batch_size=20, lr=0.05, l2=0.05, progress=False,
                      new_unit=new_unit)
    trainer.fit(data, 60, callbacks=[watcher])
    sizes = watcher.sizes
    assert sizes[-1] > 1, "the iRBM never grew"
    early_growth = sizes[19] - 1
    late_growth = sizes[-1] - sizes[39]
    assert early_growth > 2 * max(late_growth, 1), sizes
    assert trainer.size_history[0] == (0, 1) and trainer.size_history[-1][1] == sizes[-1]


def test_irbm_shrinks_with_l1_and_optimizer_state_follows():
    data = prototype_data(n_rows=300)
    model = irbm.InfiniteRBM(N_VISIBLE, dtype=torch.float64)
    Trainer(model, cd_k=1, batch_size=20, lr=0.05, progress=False).fit(data, 15)
    grown = model.n_hidden
    assert grown > 5
    watcher = ShapeWatcher()
    trainer = Trainer(model, cd_k=1, batch_size=20, lr=0.05, l1=0.3, progress=False)
    trainer.fit(data, 20, callbacks=[watcher])
    assert min(watcher.sizes) < grown, (grown, watcher.sizes)


def test_new_unit_takes_a_gradient_step_on_creation():
    model = irbm.InfiniteRBM(N_VISIBLE, dtype=torch.float64)
    trainer = Trainer(model, cd_k=1, batch_size=50, lr=0.05, progress=False)
    trainer.chains = trainer._initial_chains()
    data = prototype_data(n_rows=50)
    # With beta = 1.01 the tail holds most of P(z | v) at first, so z > l is sampled at once.
    trainer.update(data)
    assert model.n_hidden == 2
    assert (model.W[-1] != 0).any(), "the grown unit kept zero weights"


def test_orbm_trains_units_left_to_right():
    """The paper: (1 - cdf(z|v)) decreases with the unit's index, so early in training the
    first units move most. Plain SGD shows the term's effect directly (ADAGRAD divides each
    element's step by its own gradient scale, which evens this out at first)."""
    data = prototype_data(n_rows=400, n_visible=16, n_prototypes=6)
    model = irbm.OrderedRBM(16, 20, dtype=torch.float64)
    start = model.W.detach().clone()
    Trainer(model, cd_k=1, batch_size=20, lr=0.1, optimizer="sgd", progress=False).fit(data, 1)
    moved = (model.W.detach() - start).norm(dim=1)
    assert moved[:5].mean() > 3 * moved[-5:].mean(), moved
    ranks = torch.argsort(torch.argsort(moved)).double()
    index = torch.arange(20, dtype=torch.float64)
    spearman = torch.corrcoef(torch.stack([ranks, index]))[0, 1]
    assert spearman < -0.9, moved


# ---------------------------------------------------------------------------- optimizer
def _model_with(W, c=None):
    """An RBM whose W is ``W`` (K, D), b = 0 and c = ``c`` (default 0)."""
    model = irbm.RBM(W.shape[1], W.shape[0], dtype=W.dtype)
    with torch.no_grad():
        model.W.copy_(W)
        model.b.zero_()
        model.c.copy_(torch.zeros(W.shape[1], dtype=W.dtype) if c is None else c)
    return model


def _only_w(model, gradient):
    return {"W": gradient, "b": torch.zeros_like(model.b), "c": torch.zeros_like(model.c)}


def test_sgd_and_adagrad_steps_match_hand_computation():
    generator = torch.Generator().manual_seed(3)
    parameter = torch.randn(4, 3, generator=generator, dtype=torch.float64)
    gradients = [torch.randn(4, 3, generator=generator, dtype=torch.float64) for _ in range(3)]
    lr, l2, eps = 0.1, 0.01, 1e-6

    sgd = _model_with(parameter)
    optimizer = Optimizer("sgd", lr=lr, l2=l2)
    expected = parameter.clone()
    for g in gradients:
        optimizer.step(sgd, _only_w(sgd, g))
        expected = expected - lr * (g + l2 * expected)
    torch.testing.assert_close(sgd.W.detach(), expected)

    adagrad = _model_with(parameter)
    optimizer = Optimizer("adagrad", lr=lr, l2=l2, epsilon=eps)
    expected, accumulator = parameter.clone(), torch.zeros_like(parameter)
    for g in gradients:
        optimizer.step(adagrad, _only_w(adagrad, g))
        full = g + l2 * expected
        accumulator = accumulator + full**2
        expected = expected - lr / (accumulator.sqrt() + eps) * full
    torch.testing.assert_close(adagrad.W.detach(), expected)


def test_adagrad_epsilon_inside_the_root_is_the_authors_step():
    """lr g / sqrt(G + eps) (the authors' code) against lr g / (sqrt(G) + eps): equal where
    gradients are large, far apart where they are below sqrt(eps) = 1e-3."""
    parameter = torch.zeros(1, 3, dtype=torch.float64)
    gradients = [torch.tensor([[1e-6, 1e-3, 0.5]], dtype=torch.float64),
                 torch.tensor([[2e-6, -4e-3, -0.1]], dtype=torch.float64)]
    lr, eps = 0.1, 1e-6
    steps = {}
    for placement in ("outside", "inside"):
        model = _model_with(parameter)
        optimizer = Optimizer("adagrad", lr=lr, epsilon=eps, epsilon_placement=placement)
        expected, accumulator = parameter.clone(), torch.zeros_like(parameter)
        for g in gradients:
            optimizer.step(model, _only_w(model, g))
            accumulator = accumulator + g**2
            root = (accumulator + eps).sqrt() if placement == "inside" else \
                accumulator.sqrt() + eps
            expected = expected - lr * g / root
        torch.testing.assert_close(model.W.detach(), expected, rtol=1e-12, atol=0)
        steps[placement] = model.W.detach()[0]
    assert steps["inside"][0].abs() < 0.01 * steps["outside"][0].abs()  # tiny gradients damped
    torch.testing.assert_close(steps["inside"][2], steps["outside"][2], rtol=1e-5, atol=0)


def test_l1_is_a_proximal_step_giving_exact_zeros():
    model = _model_with(torch.tensor([[0.05, -0.05, 1.0, -1.0]]), torch.full((4,), 0.05))
    Optimizer("sgd", lr=1.0, l1=0.1).step(model, _only_w(model, torch.zeros(1, 4)))
    torch.testing.assert_close(model.W.detach(), torch.tensor([[0.0, 0.0, 0.9, -0.9]]))
    assert model.W[0, 0].item() == 0.0  # exactly zero, not tiny
    torch.testing.assert_close(model.c.detach(), torch.full((4,), 0.05))  # c is not decayed


@pytest.mark.parametrize("family", ["rbm", "orbm", "irbm"])
def test_weights_regularization_decays_and_thresholds_w_only(family):
    """regularization="weights": l2 W in W's gradient and the soft-threshold on W; the biases
    take the plain step (b can grow to penalize the units an ordered model's data do not use)."""
    model = FACTORIES[family]().double()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(0.05)
        model.W[0, 0] = 1.0
    start = {name: p.detach().clone() for name, p in model.named_parameters()}
    gradients = {name: torch.full_like(p, 0.01) for name, p in model.named_parameters()}
    lr, l1, l2 = 0.5, 0.2, 0.1
    Optimizer("sgd", lr=lr, l1=l1, l2=l2, regularization="weights").step(model, gradients)
    moved_w = start["W"] - lr * (gradients["W"] + l2 * start["W"])
    expected_w = moved_w.sign() * (moved_w.abs() - lr * l1).clamp(min=0)
    torch.testing.assert_close(model.W.detach(), expected_w, rtol=1e-12, atol=0)
    assert model.W[0, 1].item() == 0.0 and model.W[0, 0].item() > 0.5
    for name in ("b", "c"):
        torch.testing.assert_close(model.get_parameter(name).detach(),
                                   start[name] - lr * gradients[name], rtol=1e-12, atol=0)


def _authors_penalty_gradient(W, l1, l2):
    """Gradient of the authors' penalties 2 l2 sum W^2 + l1 sum |W| by autograd."""
    W = W.detach().clone().requires_grad_(True)
    (2 * l2 * (W**2).sum() + l1 * W.abs().sum()).backward()
    return W.grad


def test_the_trainer_trains_and_resumes_with_the_epsilon_placement_it_records(tmp_path):
    """Not only recorded: the placement reaches the update (a run whose weights follow it)
    and survives a resume."""
    data = prototype_data(n_rows=40)
    finals = {}
    for placement in ("outside", "inside"):
        trainer = Trainer(FACTORIES["orbm"](), cd_k=1, batch_size=20, lr=0.05,
                          epsilon_placement=placement, progress=False)
        trainer.fit(data, 1)
        finals[placement] = trainer.model.W.detach().clone()
        path = tmp_path / f"{placement}.safetensors"
        trainer.save_checkpoint(path)
        resumed = Trainer.from_checkpoint(path, progress=False)
        assert resumed.config.epsilon_placement == placement
        assert resumed.optimizer.epsilon_placement == placement
    assert not torch.equal(finals["outside"], finals["inside"])


def test_a_learning_rate_schedule_at_each_epochs_start_resumes_exactly(tmp_path):
    """The rule the Callback docstring gives, fitted to 4 epochs, against 2, a checkpoint and
    2 more: the same parameters bit for bit and the same learning rates epoch by epoch (set in
    on_epoch_end, as a walkthrough did, the resumed run's third epoch ran at config.lr)."""
    seen = {}

    class InverseTime(Callback):
        def __init__(self, name):
            self.name = name

        def on_epoch_start(self, trainer):
            trainer.optimizer.lr = trainer.config.lr / (1 + trainer.epoch)

        def on_update_end(self, trainer, batch):
            seen.setdefault(self.name, {})[trainer.epoch] = trainer.optimizer.lr

    data = prototype_data(n_rows=40)
    whole = Trainer(FACTORIES["irbm"](), cd_k=1, batch_size=10, lr=0.1, progress=False)
    whole.fit(data, 4, callbacks=[InverseTime("whole")])
    first = Trainer(FACTORIES["irbm"](), cd_k=1, batch_size=10, lr=0.1, progress=False)
    first.fit(data, 2, callbacks=[InverseTime("resumed")])
    first.save_checkpoint(tmp_path / "checkpoint.safetensors")
    resumed = Trainer.from_checkpoint(tmp_path / "checkpoint.safetensors", progress=False)
    resumed.fit(data, 4, callbacks=[InverseTime("resumed")])
    assert seen["whole"] == seen["resumed"] == {epoch: 0.1 / (1 + epoch) for epoch in range(4)}
    assert all(torch.equal(a, b) for a, b in zip(whole.model.state_dict().values(),
                                                  resumed.model.state_dict().values()))


@pytest.mark.parametrize("kind", ["adagrad", "sgd"])
def test_authors_regularization_is_a_penalty_on_w_inside_the_gradient(kind):
    """RBM/oRBM under the authors' convention: their penalties' gradient joins W's gradient
    (and ADAGRAD's accumulator); b and c are not regularized; no soft-threshold."""
    generator = torch.Generator().manual_seed(5)
    model = irbm.OrderedRBM(3, 4, dtype=torch.float64)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=torch.float64))
    start = {name: p.detach().clone() for name, p in model.named_parameters()}
    gradients = {name: 0.1 * torch.randn(p.shape, generator=generator, dtype=torch.float64)
                 for name, p in model.named_parameters()}
    lr, l1, l2, eps = 0.1, 0.03, 0.02, 1e-6
    Optimizer(kind, lr=lr, l1=l1, l2=l2, regularization="authors").step(model, gradients)
    for name, before in start.items():
        full = gradients[name] + (_authors_penalty_gradient(before, l1, l2) if name == "W"
                                  else 0)
        step = lr / (full.abs() + eps) if kind == "adagrad" else lr
        torch.testing.assert_close(model.get_parameter(name).detach(), before - step * full)


@pytest.mark.parametrize("placement", ["outside", "inside"])
def test_authors_regularization_of_the_irbm_soft_thresholds_w_and_b(placement):
    """The authors' iRBM: L2 as 4 l2 W in W's gradient, L1 as a prox on W and b with ADAGRAD's
    per-element step (their shrinking needs exact zeros), under either epsilon placement."""
    model = irbm.InfiniteRBM(2, 2, dtype=torch.float64)
    with torch.no_grad():
        model.W.copy_(torch.tensor([[0.5, -0.001], [2.0, 0.0]], dtype=torch.float64))
        model.b.copy_(torch.tensor([0.3, 0.0005], dtype=torch.float64))
    start = {name: p.detach().clone() for name, p in model.named_parameters()}
    gradients = {"W": torch.tensor([[0.2, 0.0], [-0.1, 0.4]], dtype=torch.float64),
                 "b": torch.tensor([0.1, 0.0], dtype=torch.float64),
                 "c": torch.tensor([0.3, -0.2], dtype=torch.float64)}
    lr, l1, l2 = 0.1, 0.02, 0.05
    Optimizer("adagrad", lr=lr, l1=l1, l2=l2, regularization="authors",
              epsilon_placement=placement).step(model, gradients)
    for name in ("W", "b", "c"):
        full = gradients[name] + (_authors_penalty_gradient(start[name], 0.0, l2)
                                  if name == "W" else 0)
        denominator = (full**2 + 1e-6).sqrt() if placement == "inside" else full.abs() + 1e-6
        moved = start[name] - lr / denominator * full
        if name != "c":  # soft-threshold; an element without a gradient has the plain rate lr
            threshold = lr * l1 / torch.where(full == 0, torch.ones_like(full), denominator)
            moved = moved.sign() * (moved.abs() - threshold).clamp(min=0)
        torch.testing.assert_close(model.get_parameter(name).detach(), moved)
    assert model.W[0, 1].item() == 0.0 and model.b[1].item() == 0.0  # exact zeros


def test_with_l1_alone_the_irbm_trains_identically_under_both_conventions():
    """The paper's iRBM settings (L1, no L2): the authors' code soft-thresholds W and b as
    irbm does, so the conventions cannot differ there (they do for the RBM and oRBM)."""
    data = prototype_data(n_rows=80)
    finals = {}
    for family in ("irbm", "orbm"):
        for convention in ("proximal", "authors"):
            trainer = Trainer(FACTORIES[family](), cd_k=2, batch_size=16, lr=0.05, l1=1e-2,
                              regularization=convention, progress=False)
            trainer.fit(data, 3)
            finals[family, convention] = trainer.model.state_dict()
    for name, tensor in finals["irbm", "proximal"].items():
        assert torch.equal(tensor, finals["irbm", "authors"][name]), name
    assert not torch.equal(finals["orbm", "proximal"]["W"], finals["orbm", "authors"]["W"])


def test_a_checkpoint_from_before_the_regularization_growth_and_epsilon_options_resumes_as_before(
        tmp_path):
    trainer = Trainer(FACTORIES["irbm"](), cd_k=1, batch_size=20, l1=1e-3, progress=False)
    trainer.fit(prototype_data(n_rows=40), 1)
    path = tmp_path / "checkpoint.safetensors"
    trainer.save_checkpoint(path)
    tensors, metadata = ckpt.read_checkpoint(path)
    for name in ("regularization", "growth", "epsilon_placement", "last_batch", "average"):
        del metadata["training"][name]
    ckpt.write_checkpoint(path, tensors, metadata)
    resumed = Trainer.from_checkpoint(path)
    assert (resumed.config.regularization, resumed.config.growth,
            resumed.config.epsilon_placement, resumed.config.last_batch,
            resumed.config.average) == ("proximal", "any", "outside", "keep", 0)
    assert resumed.averaged_model() is None
    with pytest.raises(ValueError, match="last_batch: keep -> merge"):
        Trainer.from_checkpoint(path, last_batch="merge")
    with pytest.raises(ValueError, match="regularization: proximal -> authors"):
        Trainer.from_checkpoint(path, regularization="authors")
    with pytest.raises(ValueError, match="growth: any -> paired"):
        Trainer.from_checkpoint(path, growth="paired")
    with pytest.raises(ValueError, match="epsilon_placement: outside -> inside"):
        Trainer.from_checkpoint(path, epsilon_placement="inside")


def test_optimizer_rejects_bad_settings():
    with pytest.raises(ValueError, match="optimizer"):
        Optimizer("adam")
    with pytest.raises(ValueError, match="l1"):
        Optimizer("sgd", l1=-1)
    with pytest.raises(ValueError, match="regularization must be one of"):
        Optimizer("sgd", regularization="theirs")
    with pytest.raises(ValueError, match="epsilon_placement must be one of"):
        Optimizer("adagrad", epsilon_placement="under")
    with pytest.raises(ValueError, match="optimizer 'sgd' has no epsilon"):
        Optimizer("sgd", epsilon_placement="inside")


# ---------------------------------------------------------------------------- checkpoints
@pytest.mark.parametrize("family", FACTORIES)
@pytest.mark.parametrize("persistent,last_batch", [(True, "keep"), (False, "keep"),
                                                   (True, "merge")])
def test_resume_is_bit_identical(family, persistent, last_batch, tmp_path):
    data = prototype_data(n_rows=120)  # 7 minibatches of 16 and one of 8 (merged: of 24)
    settings = dict(cd_k=2, persistent=persistent, batch_size=16, lr=0.05, l1=1e-3,
                    last_batch=last_batch, progress=False)
    straight = Trainer(FACTORIES[family](), **settings)
    straight.fit(data, 6)
    first = Trainer(FACTORIES[family](), **settings)
    first.fit(data, 3)
    first.save_checkpoint(tmp_path / "state.safetensors")
    resumed = Trainer.from_checkpoint(tmp_path / "state.safetensors", progress=False)
    resumed.fit(data, 6)
    assert resumed.model.n_hidden == straight.model.n_hidden
    for name in ("W", "b", "c"):
        assert torch.equal(getattr(resumed.model, name), getattr(straight.model, name)), name
    assert [h["epoch"] for h in resumed.history] == list(range(1, 7))
    assert resumed.size_history == straight.size_history


@pytest.mark.parametrize("n_rows,keep,merge", [
    (10, [4, 4, 2], [4, 6]), (8, [4, 4], [4, 4]), (3, [3], [3]), (5, [4, 1], [5])])
def test_the_last_minibatch_is_kept_short_or_merged_into_the_one_before(n_rows, keep, merge):
    """Minibatch sizes of one epoch (batch_size 4), and every row used once per epoch, in the
    shuffled order."""
    for rule, sizes in (("keep", keep), ("merge", merge)):
        trainer = Trainer(FACTORIES["rbm"](), batch_size=4, last_batch=rule, progress=False)
        order = torch.randperm(n_rows)
        batches = list(trainer._minibatches(n_rows, order))
        assert [len(rows) for rows in batches] == sizes, rule
        assert torch.equal(torch.cat(batches), order)
        in_order = list(trainer._minibatches(n_rows, None))
        assert [(s.start, s.stop) for s in in_order] == \
            [(sum(sizes[:i]), sum(sizes[:i + 1])) for i in range(len(sizes))]
    seen = []
    trainer = Trainer(FACTORIES["rbm"](), batch_size=4, last_batch="merge", progress=False)
    trainer.update = lambda batch: seen.append(batch.shape[0])
    trainer.fit(prototype_data(n_rows=10), 2)
    assert seen == [4, 6, 4, 6] and trainer.state.updates == 0  # update replaced: no steps
    with pytest.raises(ValueError, match="last_batch must be one of"):
        Trainer(FACTORIES["rbm"](), last_batch="drop")


def test_a_checkpoint_saved_on_another_kind_of_device_resumes_with_a_warning(tmp_path):
    """A CUDA generator's state (16 bytes) cannot seed a CPU one (5,056): the resume reseeds
    the Gibbs sampler from a hash of (seed, updates), the same way every time, and says so."""
    data = prototype_data(n_rows=40)
    trainer = Trainer(FACTORIES["rbm"](), cd_k=1, batch_size=20, seed=3, progress=False)
    trainer.fit(data, 1)
    path = tmp_path / "state.safetensors"
    trainer.save_checkpoint(path)
    tensors, metadata = ckpt.read_checkpoint(path)
    tensors["rng.gibbs"] = torch.arange(16, dtype=torch.uint8)  # the size of a CUDA state
    ckpt.write_checkpoint(path, tensors, metadata)
    resumed = []
    for _ in range(2):
        with pytest.warns(RuntimeWarning, match="another kind of device"):
            resumed.append(Trainer.from_checkpoint(path, progress=False))
    # The new stream is none the run already draws from: not the seed's, nor the order
    # generator's (seed + 1) or the monitor's (seed + 2), nor seed + updates.
    state = resumed[0].gibbs_generator.get_state()
    for used in {3, 4, 5, 3 + metadata["updates"]}:
        assert not torch.equal(state, torch.Generator().manual_seed(used).get_state()), used
    for trainer in resumed:
        trainer.fit(data, 3)
    assert resumed[0].epoch == 3  # and the same way every time:
    assert torch.equal(resumed[0].model.W, resumed[1].model.W)


def test_resume_with_other_hyper_parameters_is_refused_unless_forced(tmp_path):
    trainer = Trainer(FACTORIES["rbm"](), lr=0.05, progress=False)
    trainer.fit(prototype_data(n_rows=40), 1)
    trainer.save_checkpoint(tmp_path / "state.safetensors")
    with pytest.raises(ValueError, match="lr: 0.05 -> 0.1"):
        Trainer.from_checkpoint(tmp_path / "state.safetensors", lr=0.1)
    forced = Trainer.from_checkpoint(tmp_path / "state.safetensors", lr=0.1, force=True)
    assert forced.config.lr == 0.1


def test_model_checkpoint_rebuilds_the_model(tmp_path):
    model = irbm.InfiniteRBM(N_VISIBLE, n_hidden=3, beta=1.2, dtype=torch.float64)
    with torch.no_grad():
        model.W.normal_(generator=torch.Generator().manual_seed(0))
    irbm.save(model, tmp_path / "m.safetensors")
    loaded = irbm.load(tmp_path / "m.safetensors")
    assert isinstance(loaded, irbm.InfiniteRBM) and loaded.n_hidden == 3 and loaded.beta == 1.2
    assert loaded.W.dtype == torch.float64 and torch.equal(loaded.W, model.W)
    data = prototype_data(n_rows=5)
    torch.testing.assert_close(loaded.free_energy(data), model.free_energy(data))


def test_corrupt_checkpoints_give_clear_errors_and_leave_the_previous_intact(tmp_path,
                                                                             monkeypatch):
    path = tmp_path / "model.safetensors"
    model = FACTORIES["rbm"]()
    irbm.save(model, path)
    good = path.read_bytes()

    # A crash in the middle of writing the next checkpoint leaves the previous one intact.
    def crash(tensors, metadata=None):
        raise OSError("disk full")
    monkeypatch.setattr(ckpt, "serialize", crash)
    with pytest.raises(OSError, match="disk full"):
        irbm.save(model, path)
    monkeypatch.undo()
    assert path.read_bytes() == good
    assert [p.name for p in tmp_path.iterdir()] == ["model.safetensors"]  # no temp left

    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(good[: len(good) // 2])
    with pytest.raises(ckpt.CheckpointError, match="truncated|unreadable"):
        irbm.load(truncated)

    tampered = tmp_path / "tampered.safetensors"
    data = bytearray(good)
    data[-3] ^= 0xFF  # flip bits in the last tensor's bytes
    tampered.write_bytes(bytes(data))
    with pytest.raises(ckpt.CheckpointError, match="checksum"):
        irbm.load(tampered)

    with pytest.raises(ckpt.CheckpointError, match="not found"):
        irbm.load(tmp_path / "missing.safetensors")
    not_ours = tmp_path / "other.safetensors"
    from safetensors.torch import save_file
    save_file({"x": torch.zeros(2)}, not_ours)
    with pytest.raises(ckpt.CheckpointError, match="not an irbm checkpoint"):
        irbm.load(not_ours)


def test_load_accepts_a_run_directory(tmp_path):
    from irbm.training import CheckpointEvery
    trainer = Trainer(FACTORIES["orbm"](), progress=False)
    trainer.fit(prototype_data(n_rows=40), 2, callbacks=[CheckpointEvery(tmp_path)])
    loaded = irbm.load(tmp_path)
    assert torch.equal(loaded.W, trainer.model.W)
    resumed = Trainer.from_checkpoint(tmp_path, progress=False)
    assert resumed.epoch == 2


def test_checkpoint_load_never_unpickles(tmp_path):
    """A checkpoint is safetensors + JSON: a file that is a pickle is refused, not executed."""
    import pickle
    marker = tmp_path / "executed"

    class Payload:
        def __reduce__(self):
            return (marker.write_text, ("pwned",))
    evil = tmp_path / "evil.safetensors"
    evil.write_bytes(pickle.dumps(Payload()))
    with pytest.raises(ckpt.CheckpointError):
        irbm.load(evil)
    assert not marker.exists()


def test_trainer_rejects_bad_data():
    trainer = Trainer(FACTORIES["rbm"](), progress=False)
    with pytest.raises(ValueError, match="shape"):
        trainer.fit(torch.zeros(10, N_VISIBLE + 1), 1)
    with pytest.raises(ValueError, match=r"binary .*binarize intensities in \[0, 1\] first"):
        trainer.fit(torch.full((10, N_VISIBLE), 0.5), 1)
    with pytest.raises(ValueError, match=r"span \[0, 255\]: scale them into \[0, 1\]"):
        trainer.fit(torch.zeros(10, N_VISIBLE).index_fill_(1, torch.tensor([3]), 255.0), 1)
    with pytest.raises(ValueError, match="NaN"):
        trainer.fit(torch.full((10, N_VISIBLE), math.nan), 1)


def test_written_files_follow_the_umask(tmp_path):
    """Atomic writes go through a temporary file; the result must not be left at mode 0600."""
    import os
    old = os.umask(0o022)
    try:
        irbm.save(FACTORIES["rbm"](), tmp_path / "m.safetensors")
    finally:
        os.umask(old)
    assert (tmp_path / "m.safetensors").stat().st_mode & 0o777 == 0o644


def test_pruning_removes_only_zero_units_and_keeps_the_distribution():
    """shrink() drops trailing all-zero units and nothing else: exact NLL is unchanged, and a
    unit with a single non-zero weight stops it."""
    model = irbm.InfiniteRBM(N_VISIBLE, n_hidden=6, dtype=torch.float64)
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        model.W[:3].normal_(generator=generator)
        model.b[:3].normal_(generator=generator)
        model.W[3, 4] = 1e-12  # alive, however small
    data = prototype_data(n_rows=30)
    before = model.log_likelihood_exact(data)
    assert model.shrink() == 2 and model.n_hidden == 4
    torch.testing.assert_close(model.log_likelihood_exact(data), before, rtol=0, atol=1e-12)
    assert model.shrink() == 0


def test_tampered_metadata_is_detected(tmp_path):
    """The checksum covers the JSON metadata too: a changed beta must not load silently."""
    import json

    from safetensors import safe_open
    from safetensors.torch import save_file
    path = tmp_path / "m.safetensors"
    irbm.save(irbm.OrderedRBM(6, 4, beta=1.5), path)
    with safe_open(path, framework="pt") as reader:
        header = reader.metadata()
        tensors = {k: reader.get_tensor(k) for k in reader.keys()}
    metadata = json.loads(header["metadata"])
    metadata["model"]["beta"] = 3.0
    save_file(tensors, path, metadata={**header, "metadata": json.dumps(metadata)})
    with pytest.raises(ckpt.CheckpointError, match="checksum"):
        irbm.load(path)

    # A well-formed checkpoint whose recorded dtype is not one we write gets a clear error.
    metadata["model"]["beta"] = 1.5
    metadata["dtype"] = "float128"
    ckpt.write_checkpoint(path, tensors, metadata)
    with pytest.raises(ckpt.CheckpointError, match="dtype"):
        irbm.load(path)


def test_a_callbacks_metrics_are_made_plain_or_refused_by_name_and_a_raising_one_unhooked(
        tmp_path):
    """A 0-d tensor added to the metrics failed inside the next checkpoint's JSON, naming
    neither key nor callback; a callback that raised stayed hooked into later updates (a
    walkthrough)."""
    from irbm.training import CheckpointEvery, Trainer
    rows = prototype_data(n_rows=40)
    trainer = Trainer(FACTORIES["rbm"](), batch_size=20, progress=False)

    def tensor_metric(trainer, metrics):
        metrics.update(x=torch.tensor(1.5), y=np.float32(2.0))
    history = trainer.fit(rows, 1, callbacks=[tensor_metric, CheckpointEvery(tmp_path)])
    assert history[-1]["x"] == 1.5 and type(history[-1]["y"]) is float

    def listed(trainer, metrics):
        metrics.update(w=object(), z=[1, 2], y=np.float32(1.5), t=torch.tensor(2.0))
    with pytest.raises(ValueError, match=r"metric\(s\) from .*listed that JSON cannot hold: "
                                         r"'w' \(a object\)"):
        trainer.fit(rows, 2, callbacks=[listed])
    entry = trainer.history[-1]  # the keys after the refused one converted too (a review)
    assert (entry["z"], entry["y"], entry["t"]) == ([1, 2], 1.5, 2.0) and "w" not in entry
    trainer.save_checkpoint(tmp_path / "after.safetensors")  # the history stays writable

    class Boom(irbm.training.Callback):
        def on_update_start(self, trainer, batch):
            raise RuntimeError("boom")
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(rows, 3, callbacks=[Boom()])
    assert trainer.callbacks == []
    trainer.update(rows[:20])  # no stale callback raises here


@pytest.mark.parametrize("family", FACTORIES)
def test_visible_biases_start_at_the_datas_log_odds_when_asked(family):
    """visible_init="data": before the first update the model is the data's factorized model
    (Hinton's guide, sec. 8.1); a walkthrough's small-data runs spent epochs getting there.
    Only before the first update: a second fit leaves them to training."""
    rows = prototype_data(n_rows=40)
    model = FACTORIES[family]()
    trainer = Trainer(model, batch_size=20, visible_init="data", progress=False)
    trainer.fit(rows, 0)
    rate = (rows.mean(0) + 0.05) / 1.1  # the smoothed log-odds, by hand
    torch.testing.assert_close(model.base_visible_bias(), torch.log(rate / (1 - rate)))
    trainer.fit(rows, 1)
    trained = model.base_visible_bias()
    with pytest.warns(UserWarning, match="nothing to train"):
        trainer.fit(rows, 1)  # nothing reset either
    assert torch.equal(model.base_visible_bias(), trained)
    zeros = FACTORIES[family]()
    Trainer(zeros, batch_size=20, progress=False).fit(rows, 0)
    assert not zeros.base_visible_bias().any()
    with pytest.raises(ValueError, match=r"visible_init must be one of \('zeros', 'data'\)"):
        Trainer(FACTORIES[family](), visible_init="mean")
