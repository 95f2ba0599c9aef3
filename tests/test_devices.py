"""The families on every device at hand. The sampling steps run fused kernels on the Philox
stream (`irbm.kernels`: numba on the CPU, Triton on CUDA) or eager PyTorch (``IRBM_KERNELS=off``,
another generator, or neither compiler). These tests hold every device and path to the CPU
kernels' numbers: energies, exact ln Z, the conditionals' distributions, whole training runs draw
for draw (growth and shrinking included), checkpoints across devices, and AIS and RAISE against
exact answers at full size.

``DEVICES`` is the CPU plus CUDA where torch sees a GPU; ``SIDES`` pairs each with the paths it
has (the CPU's eager path against its kernels; CUDA's Triton kernels and its eager path).
``ACCELERATORS`` holds CUDA alone, for the checks that the CPU's own suite already makes
(tests/test_exact_and_bracket.py): they are skipped here without a GPU and run on one
(`scripts/cuda_checks.sh`; benchmarks/README.md records the last such run).
"""

import copy

import pytest
import torch
from _prototypes import prototype_batches
from scipy import stats

import irbm
from irbm import kernels
from irbm.ais import estimate_log_partition
from irbm.evaluate import raise_nll
from irbm.kernels import PhiloxGenerator
from irbm.models import block_diagonal
from irbm.sampling import sample
from irbm.training import Trainer

FAMILIES = ["rbm", "orbm", "irbm"]
ACCELERATORS = ["cuda"] if torch.cuda.is_available() else []
DEVICES = ["cpu", *ACCELERATORS]
SIDES = [("cpu", "eager"), *((device, mode) for device in ACCELERATORS
                             for mode in ("kernels", "eager"))]
OPTIONS = {"rbm": {}, "orbm": {"beta": 1.3}, "irbm": {"beta": 1.3}}


@pytest.fixture
def kernels_switch(monkeypatch):
    """``switch("eager")`` turns the fused kernels off (``IRBM_KERNELS=off``) for what
    follows; ``switch("kernels")`` leaves them on, checks that they can run and counts the
    calls of the device's kernels (Triton's on CUDA) in the returned list, so that a silent
    fallback to the eager path cannot pass for them."""
    def switch(mode, device):
        calls = []
        if mode == "eager":
            monkeypatch.setenv("IRBM_KERNELS", "off")
            return calls
        assert kernels.runs_on(torch.zeros(1, device=device)), "no kernels on " + device
        if torch.device(device).type == "cuda":
            module = kernels._gpu()
            for name in ("bernoulli_from_logits", "ordered_hidden", "ordered_statistics",
                         "annealed_bernoulli"):
                monkeypatch.setattr(module, name, _counted(getattr(module, name), name, calls))
        return calls
    return switch


def _counted(function, name, calls):
    """``function`` appending ``name`` to ``calls`` at each call."""
    def counted(*args, **options):
        calls.append(name)
        return function(*args, **options)
    return counted


def random_model(family, dtype=torch.float64, n_visible=11, n_hidden=7, seed=0):
    """A CPU model with parameters large enough for every z and unit to matter."""
    model = irbm.build_model({"family": family, "n_visible": n_visible, "n_hidden": n_hidden,
                              **OPTIONS[family]}, dtype=dtype)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter, scale, shift in zip((model.W, model.b, model.c), (0.8, 1.0, 1.0),
                                           (0.0, 0.3, 0.0)):
            parameter.copy_(shift + scale * torch.randn(parameter.shape, generator=generator,
                                                        dtype=torch.float64))
    return model


def binary_rows(n_rows, n_visible, seed=1, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    return (torch.rand(n_rows, n_visible, generator=generator) < 0.5).to(dtype)


def on_cpu(tensor):
    return tensor.detach().to("cpu")


@pytest.mark.parametrize("device", ACCELERATORS)  # the CPU would be compared with itself
@pytest.mark.parametrize("family", FAMILIES)
def test_energies_conditionals_and_exact_log_partition_match_the_cpu(family, device):
    """F(v) (N,), ln p(z | v) (N, K+1 or K+2), dF/dtheta and ln Z on the device, float64."""
    model = random_model(family)
    moved = copy.deepcopy(model).to(device)
    v = binary_rows(40, model.n_visible)
    tolerance = {"rtol": 1e-12, "atol": 1e-12}
    torch.testing.assert_close(on_cpu(moved.free_energy(v.to(device))), model.free_energy(v),
                               **tolerance)
    expected_gradients = model.free_energy_gradients(v)
    for name, gradient in moved.free_energy_gradients(v.to(device)).items():
        torch.testing.assert_close(on_cpu(gradient), expected_gradients[name], **tolerance)
    if model.has_z:
        torch.testing.assert_close(on_cpu(moved.log_p_z_given_v(v.to(device))),
                                   model.log_p_z_given_v(v), **tolerance)
    assert moved.log_partition_exact() == pytest.approx(model.log_partition_exact(), abs=1e-10)


@pytest.mark.parametrize("stream", ["torch", "philox"])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", FAMILIES)
def test_the_devices_draws_follow_the_exact_conditionals(family, device, stream):
    """20,000 float32 draws of (h, z) | v and of v | h on the device, from torch's generator
    (the eager path) or the Philox stream (the fused kernels): z's counts against
    exp(ln p(z | v)) by chi-square, and each unit's frequency against its exact mean within 5
    binomial standard errors."""
    n_draws = 20_000
    model = random_model(family, torch.float32, n_visible=9, n_hidden=5, seed=2).to(device)
    with torch.no_grad():
        model.W.mul_(0.4)
    generator = (torch.Generator(device=device).manual_seed(3) if stream == "torch"
                 else PhiloxGenerator(3, device))
    v = binary_rows(1, model.n_visible, seed=4, dtype=torch.float32).to(device)
    state = model.sample_hidden(v.expand(n_draws, -1).contiguous(), generator)
    if model.has_z:
        exact = on_cpu(model.log_p_z_given_v(v)).double().exp().squeeze(0)
        exact /= exact.sum()  # float32 rounding: chisquare wants equal totals
        # z is 1-based; the iRBM's last category is the tail, z > n_hidden.
        counts = torch.bincount(on_cpu(state.z).long() - 1, minlength=exact.numel()).double()
        assert counts.numel() == exact.numel()
        expected = n_draws * exact
        # Categories expected fewer than 5 times are pooled, as the chi-square test needs.
        small = expected < 5
        observed = torch.cat([counts[~small], counts[small].sum().reshape(1)])
        expected = torch.cat([expected[~small], expected[small].sum().reshape(1)])
        keep = expected > 0
        p_value = stats.chisquare(observed[keep].numpy(), expected[keep].numpy()).pvalue
        assert p_value > 1e-4, (counts, n_draws * exact)
    means = on_cpu(model.mean_hiddens(v)).double().squeeze(0)
    frequencies = on_cpu(state.h).double().mean(0)[:means.numel()]
    error = (means * (1 - means) / n_draws).sqrt().clamp_min(1e-4)
    assert ((frequencies - means).abs() / error).max() < 5
    # v | h for the first drawn h, repeated.
    first = model.sample_hidden(v, generator)
    repeated = type(first)(first.h.expand(n_draws, -1).contiguous(),
                           None if first.z is None else first.z.expand(n_draws).contiguous())
    visible_means = on_cpu(model.mean_visibles(first.h)).double().squeeze(0)
    visible = on_cpu(model.sample_visible(repeated, generator)).double().mean(0)
    error = (visible_means * (1 - visible_means) / n_draws).sqrt().clamp_min(1e-4)
    assert ((visible - visible_means).abs() / error).max() < 5


def _train(model, device, batches):
    trainer = Trainer(model, device=device, random_stream="philox", cd_k=2, batch_size=16,
                      lr=0.1, l1=0.2, seed=3, progress=False)
    sizes = []
    for batch in batches:
        trainer.update(batch.to(device))
        sizes.append(trainer.model.n_hidden)
    return trainer, sizes


@pytest.mark.parametrize("device, mode", SIDES)
@pytest.mark.parametrize("family", FAMILIES)
def test_training_on_the_device_follows_the_cpu_kernels_draw_for_draw(family, device, mode,
                                                                       kernels_switch):
    """Twelve PCD-2 updates with ADAGRAD and L1 in float64 on the Philox stream: the same sizes
    after every update (the iRBM grows and shrinks), parameters within rounding, the same
    persistent chains and the same stream position as on the CPU's compiled kernels."""
    batches = prototype_batches()
    start = random_model(family, n_visible=10, n_hidden=1 if family == "irbm" else 6, seed=5)
    with torch.no_grad():
        start.W.mul_(0.1)
    reference, sizes = _train(copy.deepcopy(start), "cpu", batches)
    calls = kernels_switch(mode, device)
    trainer, device_sizes = _train(copy.deepcopy(start).to(device), device, batches)
    if mode == "kernels":  # the GPU's kernels drew, not the eager path
        assert "bernoulli_from_logits" in calls
        assert family == "rbm" or {"ordered_hidden", "ordered_statistics"} <= set(calls)
    assert trainer.model.device.type == torch.device(device).type
    assert device_sizes == sizes
    if family == "irbm":  # the run exercises growth and shrinking
        assert max(sizes) > 1 and any(b < a for a, b in zip(sizes, sizes[1:])), sizes
    for name, parameter in reference.model.named_parameters():
        torch.testing.assert_close(on_cpu(getattr(trainer.model, name)), parameter,
                                   rtol=1e-9, atol=1e-11)
    assert torch.equal(on_cpu(trainer.chains), reference.chains)
    assert torch.equal(trainer.gibbs_generator.get_state(), reference.gibbs_generator.get_state())


@pytest.mark.parametrize("device", ACCELERATORS)
def test_a_checkpoint_written_on_the_device_resumes_on_the_cpu_and_back(device, tmp_path):
    """The Philox stream's state is three integers on every device, so a run moves between
    devices without reseeding, and goes on as the CPU run does."""
    batches = prototype_batches()
    start = random_model("irbm", n_visible=10, n_hidden=1, seed=5)
    straight, sizes = _train(copy.deepcopy(start), "cpu", batches)
    first, _ = _train(copy.deepcopy(start).to(device), device, batches[:6])
    first.save_checkpoint(tmp_path / "state.safetensors")
    resumed = Trainer.from_checkpoint(tmp_path / "state.safetensors", device="cpu",
                                      progress=False)
    assert isinstance(resumed.gibbs_generator, PhiloxGenerator)
    for batch in batches[6:9]:
        resumed.update(batch)
    resumed.save_checkpoint(tmp_path / "state.safetensors")
    back = Trainer.from_checkpoint(tmp_path / "state.safetensors", device=device,
                                   progress=False)
    for batch in batches[9:]:
        back.update(batch.to(device))
    assert back.model.n_hidden == sizes[-1]
    for name, parameter in straight.model.named_parameters():
        torch.testing.assert_close(on_cpu(getattr(back.model, name)), parameter,
                                   rtol=1e-9, atol=1e-11)


# Full size, as tests/test_exact_and_bracket.py builds it on the CPU: 784 visible units in blocks
# of 12, weights N(0, 0.5^2), exact ln Z; the budgets there (16 chains x 1,000 temperatures)
# are raised here, where the GPU makes them cheap.
FULL_HIDDEN = {"rbm": 2000, "orbm": 500, "irbm": 500}
FULL_OPTIONS = {"rbm": {}, "orbm": {"beta": 1.2}, "irbm": {"beta": 1.5}}


@pytest.mark.parametrize("device", ACCELERATORS)
@pytest.mark.parametrize("family", FAMILIES)
def test_ais_and_raise_on_the_device_match_exact_answers_at_full_size(family, device):
    model, log_z = block_diagonal(family, 784, FULL_HIDDEN[family], block_size=12,
                                  weight_std=0.5, seed=7, device=device,
                                  **FULL_OPTIONS[family])
    rows = sample(model, 100, 50, generator=torch.Generator(device=device).manual_seed(3),
                  return_probabilities=False).samples
    assert rows.device.type == torch.device(device).type
    for path in model.ais_paths:
        result = estimate_log_partition(model, 200, 2000, base="model", path=path, seed=11,
                                        progress=False)
        assert abs(result.log_z - log_z) < 0.3, (path, result.log_z, log_z)
        exact = float(model.free_energy(rows).detach().double().mean()) + log_z
        raised = raise_nll(model, rows, n_betas=2000, base="model", path=path, seed=5,
                           progress=False)
        assert abs(raised.mean - exact) < 0.3, (path, raised.mean, exact)
