"""The public contract shared by the three families, in the manner of torch.distributions'
tests: the list of example models (`test_models_reference.EXAMPLES`) drives every test here.

Covers attribute shapes, output shapes and normalization, samples (binary, legal, detached,
reproducible with an explicit generator), autograd, float32 against float64, config round
trips, and the ValueErrors raised on bad input, each naming the problem.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from test_models_reference import (
    EXAMPLES,
    ORDERED_EXAMPLES,
    all_binary,
    example_params,
)
from torch import nn

import irbm


def _visibles(example, dtype=torch.float64) -> torch.Tensor:
    return torch.from_numpy(all_binary(example.n_visible)).to(dtype)


def _z_width(example) -> int:
    """Columns of log_p_z_given_v: K for the oRBM, K + 1 (the tail) for the iRBM."""
    return example.n_hidden + (example.family == "irbm")


# --------------------------------------------------------------------------- attributes
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("example", example_params(EXAMPLES))
def test_parameters_have_documented_shapes(example, dtype):
    """W is (n_hidden, n_visible), b (n_hidden,), c (n_visible,), all parameters of the requested
    dtype; n_visible / n_hidden report the sizes; the ordered models expose beta."""
    model = example.build(dtype)
    D, K = example.n_visible, example.n_hidden
    assert model.n_visible == D and model.n_hidden == K
    for name, shape in (("W", (K, D)), ("b", (K,)), ("c", (D,))):
        tensor = getattr(model, name)
        assert isinstance(tensor, nn.Parameter), name
        assert tensor.shape == shape and tensor.dtype == dtype, name
    assert {name for name, _ in model.named_parameters()} == {"W", "b", "c"}
    if example.ordered:
        assert model.beta == example.beta


@pytest.mark.parametrize("example", example_params(EXAMPLES))
def test_a_printed_model_shows_its_sizes_options_dtype_and_device(example):
    model = example.build(torch.float64)
    options = ", ".join(f"{name}={value:.6g}" if isinstance(value, float) else
                        f"{name}={value}" for name, value in model.config().items()
                        if name != "family")
    assert repr(model) == f"{type(model).__name__}({options}, dtype=float64, device=cpu)"
    assert f"n_visible={example.n_visible}, n_hidden={example.n_hidden}" in repr(model)


def test_default_constructor_arguments():
    """Defaults from the issue: float32, beta = 1.01, the iRBM starting with one unit."""
    assert irbm.RBM(4, 2).W.dtype == torch.float32
    assert irbm.OrderedRBM(4, 2).beta == pytest.approx(1.01)
    model = irbm.InfiniteRBM(4)
    assert model.n_hidden == 1 and model.beta == pytest.approx(1.01)
    assert model.W.dtype == torch.float32


@pytest.mark.parametrize("example", example_params(EXAMPLES))
def test_parameters_replaced_in_place_change_the_model(example):
    """Values copied into W, b, c with copy_ under no_grad are the ones the model uses:
    scaling W by 0 and zeroing b, c gives the closed-form free energy of a parameter-free model
    (RBM: -K ln 2; oRBM: -log sum_{z<=K} 2**((1 - beta) z); iRBM: the same sum to infinity)."""
    model = example.build()
    with torch.no_grad():
        for name in ("W", "b", "c"):
            getattr(model, name).copy_(torch.zeros_like(getattr(model, name)))
    K = example.n_hidden
    if example.family == "rbm":
        expected = -K * math.log(2)
    else:
        r = 2.0 ** (1 - example.beta)
        total = r * (1 - r**K) / (1 - r) if example.family == "orbm" else r / (1 - r)
        expected = -math.log(total)
    torch.testing.assert_close(model.free_energy(_visibles(example)),
                               torch.full((2**example.n_visible,), expected, dtype=torch.float64))


# --------------------------------------------------------------------------- outputs
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("example", example_params(EXAMPLES))
def test_output_shapes(example, dtype):
    """free_energy (N,), free_energy_z (N, K), log_p_z_given_v (N, K) or (N, K + 1),
    mean_hiddens (N, K) in [0, 1], log_likelihood_exact (N,), all finite, in the model's dtype
    where the model computes them."""
    model = example.build(dtype)
    V = _visibles(example, dtype)
    N, K = len(V), example.n_hidden
    f = model.free_energy(V)
    assert f.shape == (N,) and f.dtype == dtype and torch.isfinite(f).all()
    m = model.mean_hiddens(V)
    assert m.shape == (N, K) and m.dtype == dtype
    assert ((m >= 0) & (m <= 1)).all()
    ll = model.log_likelihood_exact(V)
    assert ll.shape == (N,) and torch.isfinite(ll).all() and (ll <= 0).all()
    if example.ordered:
        fz = model.free_energy_z(V)
        assert fz.shape == (N, K) and fz.dtype == dtype and torch.isfinite(fz).all()
        lp = model.log_p_z_given_v(V)
        assert lp.shape == (N, _z_width(example)) and lp.dtype == dtype
        assert torch.isfinite(lp).all()


@pytest.mark.parametrize("example", example_params(ORDERED_EXAMPLES))
def test_log_p_z_given_v_is_normalized_and_consistent(example):
    """exp(log_p_z_given_v) sums to 1 over z (iRBM: including the tail column), and
    free_energy(v) == -logsumexp_z(-free_energy_z(v)) for the oRBM (for the iRBM the first K
    columns hold the same F(v, z) shifted by F(v))."""
    model = example.build()
    V = _visibles(example)
    lp = model.log_p_z_given_v(V)
    torch.testing.assert_close(torch.logsumexp(lp, 1), torch.zeros(len(V), dtype=torch.float64))
    f, fz = model.free_energy(V), model.free_energy_z(V)
    torch.testing.assert_close(lp[:, : example.n_hidden], f.unsqueeze(1) - fz)
    if example.family == "orbm":
        torch.testing.assert_close(f, -torch.logsumexp(-fz, 1))


# --------------------------------------------------------------------------- sampling contract
@pytest.mark.parametrize("example", example_params(EXAMPLES))
def test_samples_are_legal_and_detached(example):
    """sample_hidden, sample_visible and gibbs_step return binary tensors of the model's dtype and
    of the right shapes, z (ordered) in 1..K (iRBM: 1..K + 1) with h_i = 0 beyond z, and none of
    them is attached to the autograd graph (samples are data, not functions of W, b, c)."""
    model = example.build()
    V = _visibles(example)
    generator = torch.Generator().manual_seed(0)
    state = model.sample_hidden(V, generator)
    v_next = model.sample_visible(state, generator)
    v_gibbs, state_gibbs = model.gibbs_step(V, generator)
    for s in (state, state_gibbs):
        assert isinstance(s, irbm.HiddenState)
        assert s.h.shape == (len(V), example.n_hidden) and s.h.dtype == torch.float64
        assert ((s.h == 0) | (s.h == 1)).all()
        if example.ordered:
            assert s.z.shape == (len(V),) and s.z.dtype == torch.int64
            assert 1 <= int(s.z.min()) and int(s.z.max()) <= _z_width(example)
            assert (s.h[torch.arange(1, example.n_hidden + 1) > s.z.unsqueeze(1)] == 0).all()
        else:
            assert s.z is None
    for v in (v_next, v_gibbs):
        assert v.shape == V.shape and v.dtype == torch.float64
        assert ((v == 0) | (v == 1)).all()
    detached = {"sample_hidden h": state.h, "sample_visible": v_next, "gibbs_step v": v_gibbs,
                "gibbs_step h": state_gibbs.h}
    attached = [name for name, t in detached.items() if t.requires_grad or t.grad_fn is not None]
    assert not attached, f"samples attached to the autograd graph: {attached}"


@pytest.mark.parametrize("example", example_params(EXAMPLES))
def test_sampling_is_reproducible_with_explicit_generator(example):
    """Samples depend only on the torch.Generator passed in: the same seed gives identical
    samples whatever the global RNG state, another seed gives different ones."""
    model = example.build()
    V = _visibles(example).repeat(64, 1)

    def draw(seed, global_seed):
        torch.manual_seed(global_seed)
        generator = torch.Generator().manual_seed(seed)
        state = model.sample_hidden(V, generator)
        v_next, state2 = model.gibbs_step(V, generator)
        return [state.h, v_next, state2.h, model.sample_visible(state, generator)] + (
            [state.z, state2.z] if example.ordered else [])

    first, again, other = draw(1, 0), draw(1, 12345), draw(2, 0)
    for a, b in zip(first, again):
        assert torch.equal(a, b)
    assert any(not torch.equal(a, b) for a, b in zip(first, other))


# --------------------------------------------------------------------------- autograd / dtypes
@pytest.mark.parametrize("example", example_params(EXAMPLES))
def test_free_energy_is_differentiable(example):
    """free_energy(v).sum().backward() fills finite, non-zero gradients for W, b and c; for the
    ordered models free_energy_z and log_p_z_given_v backpropagate finite gradients too."""
    model = example.build()
    V = _visibles(example)
    outputs = [model.free_energy(V).sum()]
    if example.ordered:
        outputs += [model.free_energy_z(V).sum(), model.log_p_z_given_v(V)[:, 0].sum()]
    for i, out in enumerate(outputs):
        model.zero_grad()
        out.backward()
        for name in ("W", "b", "c"):
            grad = getattr(model, name).grad
            assert grad is not None and torch.isfinite(grad).all(), name
            if i == 0:  # (with K = 1, log P(z = 1 | v) = 0 has a zero gradient)
                assert grad.abs().sum() > 0, name


@pytest.mark.parametrize("example", example_params(EXAMPLES))
def test_float32_agrees_with_float64(example):
    """The same parameters in float32 give the float64 free energies, conditionals and exact
    log-likelihoods to float32 precision, and the same exact log Z (computed in float64)."""
    m32, m64 = example.build(torch.float32), example.build(torch.float64)
    V32, V64 = _visibles(example, torch.float32), _visibles(example)
    pairs = [(m32.free_energy(V32), m64.free_energy(V64)),
             (m32.mean_hiddens(V32), m64.mean_hiddens(V64)),
             (m32.log_likelihood_exact(V32), m64.log_likelihood_exact(V64))]
    if example.ordered:
        pairs += [(m32.free_energy_z(V32), m64.free_energy_z(V64)),
                  (m32.log_p_z_given_v(V32), m64.log_p_z_given_v(V64))]
    for a, b in pairs:
        np.testing.assert_allclose(a.detach().double().numpy(), b.detach().numpy(), rtol=1e-5,
                                   atol=1e-5)
    assert m32.log_partition_exact() == pytest.approx(m64.log_partition_exact(), rel=1e-6)


@pytest.mark.parametrize("example", example_params(EXAMPLES))
def test_config_round_trip(example):
    """irbm.build_model(model.config()) rebuilds a model of the same family, size and beta that,
    given the same parameters, has the same free energy."""
    model = example.build()
    clone = irbm.build_model(model.config(), dtype=torch.float64)
    assert type(clone) is type(model) and clone.n_hidden == model.n_hidden
    assert getattr(clone, "beta", None) == getattr(model, "beta", None)
    clone.load_state_dict(model.state_dict())
    V = _visibles(example)
    torch.testing.assert_close(clone.free_energy(V), model.free_energy(V))


# --------------------------------------------------------------------------- bad input
BAD_INPUT_EXAMPLES = [e for e in EXAMPLES if (e.n_visible, e.n_hidden) == (5, 3)]
VISIBLE_METHODS = ["free_energy", "mean_hiddens", "sample_hidden", "gibbs_step",
                   "log_likelihood_exact", "free_energy_gradients", "free_energy_z",
                   "log_p_z_given_v"]


def _visible_methods(example):
    return [m for m in VISIBLE_METHODS if example.ordered or m not in ("free_energy_z",
                                                                        "log_p_z_given_v")]


def _call(model, method, v):
    if method in ("sample_hidden", "gibbs_step"):
        return getattr(model, method)(v, torch.Generator().manual_seed(0))
    return getattr(model, method)(v)


def _bad_visibles(D):
    good = torch.zeros(4, D, dtype=torch.float64)
    nan = good.clone()
    nan[1, 2] = float("nan")
    half, two, minus = good.clone(), good.clone(), good.clone()
    half[0, 0], two[3, 1], minus[2, 0] = 0.5, 2.0, -1.0
    return [
        ("too wide", torch.zeros(4, D + 1, dtype=torch.float64), r"(?i)shape|width|column"),
        ("too narrow", torch.zeros(4, D - 1, dtype=torch.float64), r"(?i)shape|width|column"),
        ("3-d", torch.zeros(2, 4, D, dtype=torch.float64), r"(?i)shape|dim"),
        ("nan", nan, r"(?i)nan"),
        ("0.5", half, r"(?i)binary"),
        ("2", two, r"(?i)binary"),
        ("-1", minus, r"(?i)binary"),
    ]


@pytest.mark.parametrize("example", example_params(BAD_INPUT_EXAMPLES))
def test_bad_visible_input_raises_value_error_naming_the_problem(example):
    """Every method taking visible vectors rejects a wrong width, a wrong number of dimensions,
    NaN and non-binary values with a ValueError whose message names the problem."""
    model = example.build()
    for method in _visible_methods(example):
        for label, v, match in _bad_visibles(example.n_visible):
            if method == "mean_hiddens":  # mean-field input: probabilities in [0, 1] are valid
                if label == "0.5":
                    assert torch.isfinite(_call(model, method, v)).all()
                    continue
                match = match.replace("binary", r"\[0, 1\]")
            with pytest.raises(ValueError, match=match):
                _call(model, method, v)
                pytest.fail(f"{method} accepted {label} input")


@pytest.mark.parametrize("example", example_params(BAD_INPUT_EXAMPLES))
def test_bad_hidden_input_to_energy_raises_value_error(example):
    """energy() rejects a hidden vector of the wrong width, NaN or non-binary values, and a v/h
    row-count mismatch, with a ValueError naming the problem."""
    model = example.build()
    D, K = example.n_visible, example.n_hidden
    v = torch.zeros(3, D, dtype=torch.float64)
    z = [torch.ones(3, dtype=torch.long)] if example.ordered else []
    h_nan = torch.zeros(3, K, dtype=torch.float64)
    h_nan[0, 0] = float("nan")
    h_half = torch.zeros(3, K, dtype=torch.float64)
    h_half[2, 1] = 0.5
    cases = [(torch.zeros(3, K + 1, dtype=torch.float64), r"(?i)shape|width"),
             (h_nan, r"(?i)nan"), (h_half, r"(?i)binary")]
    for h, match in cases:
        with pytest.raises(ValueError, match=match):
            model.energy(v, h, *z)
    with pytest.raises(ValueError, match=r"(?i)rows|shape"):
        model.energy(v, torch.zeros(2, K, dtype=torch.float64), *z)
    # a valid call for contrast
    assert model.energy(v, torch.zeros(3, K, dtype=torch.float64), *z).shape == (3,)


@pytest.mark.parametrize("example", example_params([e for e in BAD_INPUT_EXAMPLES if e.ordered]))
def test_z_out_of_range_raises_value_error(example):
    """energy(v, h, z) and sample_hidden(v, z=...) reject z < 1, (oRBM) z > K, non-integer z and
    a z of the wrong shape, naming z. The iRBM accepts any z >= 1 (units beyond l exist)."""
    model = example.build()
    D, K = example.n_visible, example.n_hidden
    v, h = torch.zeros(3, D, dtype=torch.float64), torch.zeros(3, K, dtype=torch.float64)
    bad = [(torch.tensor([1, 0, 1]), r"z.*range"), (torch.tensor([-2, 1, 1]), r"z.*range"),
           (torch.tensor([1.5, 1.0, 1.0]), r"z.*integer"), (torch.tensor([1, 1]), r"z.*shape")]
    if example.family == "orbm":
        bad.append((torch.tensor([1, K + 1, 1]), r"z.*range"))
    for z, match in bad:
        with pytest.raises(ValueError, match=match):
            model.energy(v, h, z)
        with pytest.raises(ValueError, match=match):
            model.sample_hidden(v, torch.Generator().manual_seed(0), z=z)
    if example.family == "irbm":
        z = torch.tensor([K + 1, K + 7, 1])
        assert torch.isfinite(model.energy(v, h, z)).all()
        assert torch.equal(model.sample_hidden(v, torch.Generator(), z=z).z, z)


@pytest.mark.parametrize("beta", [1.0, 0.999, 0.5, 0.0, -1.0, float("nan")])
def test_infinite_rbm_rejects_beta_at_most_one(beta):
    """InfiniteRBM(beta <= 1) raises a ValueError naming beta: the partition function diverges."""
    with pytest.raises(ValueError, match=r"beta"):
        irbm.InfiniteRBM(4, n_hidden=2, beta=beta)
    # Loaded weights (a model of one's own, the README's route) are held to the same rule:
    # they made every number NaN or inf. The model is left as it was.
    model = irbm.InfiniteRBM(4, n_hidden=2)
    before = {name: value.clone() for name, value in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"beta must be a finite number > 1"):
        model.load_state_dict({**model.state_dict(), "beta": torch.tensor(beta)})
    assert all(torch.equal(value, before[name]) for name, value in model.state_dict().items())
    wrapper = torch.nn.ModuleDict({"rbm": irbm.InfiniteRBM(4, n_hidden=2)})
    with pytest.raises(ValueError, match=r"beta must be a finite number > 1"):
        wrapper.load_state_dict({f"rbm.{name}": value for name, value in
                                 {**model.state_dict(), "beta": torch.tensor(beta)}.items()})
    if beta > 0:  # an ordered RBM takes any positive beta, loaded too
        ordered = irbm.OrderedRBM(4, 2)
        ordered.load_state_dict({**ordered.state_dict(), "beta": torch.tensor(beta)})
        assert float(ordered.beta) == pytest.approx(beta)


def test_constructors_reject_impossible_sizes():
    """Zero-sized layers and max_hidden < n_hidden raise ValueErrors naming the argument."""
    for family in (irbm.RBM, irbm.OrderedRBM):
        with pytest.raises(ValueError, match="n_visible"):
            family(0, 3)
        with pytest.raises(ValueError, match="n_hidden"):
            family(3, 0)
    with pytest.raises(ValueError, match="n_visible"):
        irbm.InfiniteRBM(0)
    with pytest.raises(ValueError, match="n_hidden"):
        irbm.InfiniteRBM(3, n_hidden=0)
    with pytest.raises(ValueError, match="max_hidden"):
        irbm.InfiniteRBM(3, n_hidden=5, max_hidden=4)


@pytest.mark.parametrize("family", [irbm.RBM, irbm.OrderedRBM, irbm.InfiniteRBM])
def test_constructors_take_a_dtype_by_name_and_refuse_a_device_they_cannot_use(family):
    """dtype="float64" raised torch's TypeError, and a device this machine lacks torch's
    AssertionError (users' reports)."""
    for name in ("float64", "bfloat16"):
        assert family(4, 3, dtype=name).W.dtype == getattr(torch, name)
        assert family(4, 3, dtype=getattr(torch, name)).W.dtype == getattr(torch, name)
    for dtype in ("long", "double16", torch.int64, np.int64):
        with pytest.raises(ValueError, match=r"dtype must be a torch floating-point dtype or "):
            family(4, 3, dtype=dtype)
    assert family(4, 3, dtype=np.float64).W.dtype == torch.float64  # as scikit-learn's side
    with pytest.raises(ValueError, match=r"device 'nonsense' is not usable here: not a device "
                                         r"name \(usable: cpu"):  # not torch's list of twenty
        family(4, 3, device="nonsense")
    with tempfile.TemporaryDirectory() as directory:  # not the checkpoint's fault either
        irbm.save(family(4, 3), Path(directory) / "model.safetensors")
        with pytest.raises(ValueError, match="^device 'nonsense' is not usable here"):
            irbm.load(Path(directory) / "model.safetensors", device="nonsense")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device 'cuda' is not usable here"):
            family(4, 3, device="cuda")


TOO_LARGE = [
    pytest.param(lambda: irbm.RBM(25, 25), id="rbm-25x25"),
    pytest.param(lambda: irbm.OrderedRBM(30, 26), id="orbm-30x26"),
    pytest.param(lambda: irbm.InfiniteRBM(26, n_hidden=40), id="irbm-26x40"),
]


@pytest.mark.parametrize("factory", TOO_LARGE)
def test_exact_partition_refuses_too_large_models(factory):
    """log_partition_exact (and so log_likelihood_exact) refuses with a ValueError when both
    2**n_hidden and 2**n_visible exceed 2**24 terms, instead of trying to enumerate them."""
    model = factory()
    match = r"needs about 2\^\d+ terms .* more than 2\^24: use irbm.ais.estimate_log_partition"
    with pytest.raises(ValueError, match=match):
        model.log_partition_exact()
    with pytest.raises(ValueError, match=match):
        model.log_likelihood_exact(torch.zeros(1, model.n_visible))


def test_exact_partition_accepts_many_hidden_units_with_few_visible():
    """The limit is on the smaller enumeration: 40 hidden units but 8 visible units is fine."""
    for model in (irbm.RBM(8, 40), irbm.OrderedRBM(8, 40), irbm.InfiniteRBM(8, n_hidden=40)):
        assert math.isfinite(model.log_partition_exact())
