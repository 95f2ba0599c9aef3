"""The registry and the family defined outside the package, beside the contract
(tests/test_family_contract.py, which holds only tests over its `FAMILIES` list, so that a
copy of it runs on another list): registration's refusals, a grown iRBM's state, and the
outside family checked by an enumeration in numpy and through the command line."""

import math

import numpy as np
import pytest
import torch
from family_constant_penalty import ConstantPenaltyOrderedRBM
from test_family_contract import N_VISIBLE, all_visibles, randomized

import irbm
from irbm import ais
from irbm.models import FAMILIES as REGISTRY
from irbm.models import build_model


def _factory(name):
    """The contract list's factory of ``name``."""
    from test_family_contract import FAMILIES
    return dict(FAMILIES)[name]


def test_a_grown_infinite_rbm_state_dict_loads_into_a_fresh_one():
    model = randomized(_factory("irbm"), seed=9)
    model.grow(4)
    with torch.no_grad():
        model.W[-1] = 0.5
    fresh = irbm.InfiniteRBM(N_VISIBLE, beta=1.01, dtype=torch.float64)
    fresh.load_state_dict(model.state_dict())
    assert fresh.n_hidden == model.n_hidden == 7
    assert float(fresh.beta) == pytest.approx(1.3)
    assert fresh.log_partition_exact() == pytest.approx(model.log_partition_exact(), abs=1e-12)


def test_a_subclass_changing_its_free_energy_but_not_its_path_is_refused_by_ais():
    class Shifted(irbm.OrderedRBM):  # F changed, annealing path inherited: must not go unseen
        family = "orbm-shifted-test"

        def _free_energy(self, v):
            return super()._free_energy(v) + 0.1 * v.sum(1)

    model = randomized(lambda: Shifted(N_VISIBLE, 4, dtype=torch.float64), seed=10)
    with pytest.raises(ValueError, match="annealing_path"):
        ais.estimate_log_partition(model, 10, 10, base="model", seed=0, progress=False)


def test_outside_family_free_energy_matches_its_energy_by_enumeration():
    """Independent of irbm's code: F(v) = -log sum_{z, h in H_z} exp(-E(v, h, z)) in numpy."""
    model = randomized(_factory("orbm-constant"), seed=11)
    W, b, c = (p.detach().numpy() for p in (model.W, model.b, model.c))
    beta, K = float(model.beta), model.n_hidden
    v = all_visibles().numpy()
    terms = []
    for z in range(1, K + 1):
        for bits in range(2**z):
            h = np.array([(bits >> i) & 1 for i in range(z)], dtype=float)
            terms.append(v @ c + (h * (v @ W[:z].T + b[:z])).sum(1) - z * beta * math.log(2))
    reference = -np.logaddexp.reduce(np.stack(terms), axis=0)
    np.testing.assert_allclose(model.free_energy(all_visibles()).detach().numpy(), reference,
                               rtol=1e-12)


def test_the_outside_family_trains_evaluates_and_reports_through_the_cli(tmp_path):
    """Registered outside the package, it is a choice of `irbm train` (the registry feeds the
    CLI) and every command works on its run directory."""
    from irbm.cli import main

    run = tmp_path / "constant"  # argparse refuses a family that is not registered
    assert main(["train", "orbm-constant", "digits", "--out", str(run), "--epochs", "2",
                 "--n-hidden", "10", "--quiet"]) == 0
    assert type(irbm.load(run)) is ConstantPenaltyOrderedRBM
    assert main(["evaluate", str(run), "--chains", "20", "--betas", "100"]) == 0
    assert main(["report", str(run), "--out", str(tmp_path / "report")]) == 0
    assert "oRBM (constant penalty)" in (tmp_path / "report" / "report.md").read_text()


def test_a_family_with_an_unknown_authors_l1_is_refused_at_registration():
    from irbm.models import register_family

    class Misspelt(irbm.OrderedRBM):
        family, authors_l1 = "orbm-misspelt-test", "sub-gradient"

    with pytest.raises(ValueError, match="authors_l1 must be 'subgradient' or 'proximal'"):
        register_family(Misspelt)
    assert "orbm-misspelt-test" not in REGISTRY


def test_registration_refuses_a_taken_name_an_abstract_class_and_options_without_defaults():
    """A subclass inherits its parent's `family`: registered, it replaced the built-in, and
    checkpoints of that family loaded as it (a walkthrough). An abstract class and an option
    without a default failed later, inside the command line, with a traceback."""
    import abc

    from irbm.models import register_family

    class Inherits(irbm.RBM):
        pass

    class NoDefault(irbm.RBM):
        family = "rbm-no-default-test"

        def __init__(self, n_visible, n_hidden=4, *, penalty, **kwargs):
            super().__init__(n_visible, n_hidden, **kwargs)

    class Abstract(irbm.RBM):
        family = "rbm-abstract-test"

        @abc.abstractmethod
        def left_out(self):
            pass

    for cls, message in ((Inherits, r"the family name 'rbm' is taken by irbm.models.rbm.RBM: "
                                    r"give Inherits a `family` of its own"),
                         (NoDefault, r"NoDefault's options penalty need defaults"),
                         (Abstract, r"Abstract leaves left_out abstract")):
        with pytest.raises(ValueError, match=message):
            register_family(cls)
    assert REGISTRY["rbm"] is irbm.RBM and "rbm-no-default-test" not in REGISTRY
    assert register_family(irbm.RBM) is irbm.RBM  # the same class again: a re-import
    with pytest.raises(ValueError, match=r"import the module that registers it first"):
        build_model({"family": "sparse-rbm", "n_visible": 3})
