"""irbm.sklearn: scikit-learn's estimator checks, Pipeline / GridSearchCV / pickle, log-likelihoods
against brute-force enumeration, and scikit-learn's digits example with the import swapped."""

import itertools
import math
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import sparse
from scipy.special import logsumexp
from sklearn.base import clone
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV
from sklearn.neural_network import BernoulliRBM as SklearnBernoulliRBM
from sklearn.pipeline import Pipeline
from sklearn.utils.estimator_checks import check_estimator, parametrize_with_checks

import irbm
from irbm.sklearn import (
    EXPECTED_FAILED_CHECKS,
    BernoulliRBM,
    InfiniteBernoulliRBM,
    OrderedBernoulliRBM,
)

ESTIMATORS = (BernoulliRBM, OrderedBernoulliRBM, InfiniteBernoulliRBM)
# `small` caps the iRBM to stay fast, so its fits warn that the cap holds it; one test below
# checks that warning, the rest need not repeat it.
pytestmark = pytest.mark.filterwarnings("ignore:the infinite RBM would grow past max_hidden")


def small(cls, **overrides):
    """A fast instance: 4 hidden units (iRBM: at most 6), 2 epochs."""
    size = {"max_hidden": 6} if issubclass(cls, InfiniteBernoulliRBM) else {"n_components": 4}
    return cls(**{"n_iter": 2, "random_state": 0, **size, **overrides})


def binary_data(n_rows=120, n_features=6, seed=0):
    """Noisy copies of three binary prototypes."""
    rng = np.random.RandomState(seed)
    prototypes = rng.rand(3, n_features) < 0.5
    rows = prototypes[rng.randint(0, 3, n_rows)]
    return (rows ^ (rng.rand(n_rows, n_features) < 0.1)).astype(np.float64)


# ---------------------------------------------------------------------------- estimator checks
# Checks whose generated X reaches values above 1 (make_blobs data shifted to be non-negative, as
# the positive_only tag asks, or 3 * uniform and 10 * uniform draws). The estimators reject such
# input by design and scikit-learn has no tag for "values in [0, 1]" (its 1.6+ API declares
# expected failures with a reason instead of the removed _xfail_checks tag). Each of these checks
# passes below on the same estimator with its inputs squashed into [0, 1] first.
@pytest.mark.parametrize("cls", ESTIMATORS)
def test_check_estimator(cls):
    """The whole suite on the estimator itself; the checks above cannot apply and are skipped
    with their reason (running them only to watch them fail costs ~0.5 s each in pytest's
    traceback formatting)."""
    check_estimator(small(cls), expected_failed_checks=EXPECTED_FAILED_CHECKS, on_skip=None)


def test_the_readme_counts_the_checks_declared_expected_failures():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text().replace("\n", " ")
    assert f"the {len(EXPECTED_FAILED_CHECKS)} checks that generate values above 1" in readme


class _Squashed:
    """Mixin: x -> x / (1 + x) on non-negative inputs before the estimator's range check, so
    that scikit-learn's generated data lie in [0, 1]. Negative values still reach the check
    (check_positive_only_tag_during_fit wants them refused). Everything else is the estimator's
    own code."""

    def _check_range(self, X):
        X = X.copy()
        values = X.data if sparse.issparse(X) else X
        values[values > 0] /= 1.0 + values[values > 0]
        return super()._check_range(X)


# Module-level classes, so that check_estimators_pickle can pickle them by name.
class SquashedBernoulliRBM(_Squashed, BernoulliRBM):
    pass


class SquashedOrderedBernoulliRBM(_Squashed, OrderedBernoulliRBM):
    pass


class SquashedInfiniteBernoulliRBM(_Squashed, InfiniteBernoulliRBM):
    pass


SQUASHED = (SquashedBernoulliRBM, SquashedOrderedBernoulliRBM, SquashedInfiniteBernoulliRBM)


@parametrize_with_checks([small(cls) for cls in SQUASHED])
def test_estimator_checks_in_range(estimator, check):
    check(estimator)


# ---------------------------------------------------------------------------- inputs
@pytest.mark.parametrize("cls", ESTIMATORS)
@pytest.mark.parametrize("bad,problem", [(1.5, "Values above 1"), (-0.5, "Negative values")])
def test_values_outside_unit_interval_are_refused(cls, bad, problem):
    X = binary_data()
    X[3, 2] = bad
    pattern = rf"{problem} in data passed to {cls.__name__}.*MinMaxScaler"
    with pytest.raises(ValueError, match=pattern):
        small(cls).fit(X)
    fitted = small(cls).fit(binary_data())
    for method in (fitted.transform, fitted.score_samples, fitted.partial_fit):
        with pytest.raises(ValueError, match=pattern):
            method(X)


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_sparse_input_trains_like_dense(cls):
    X = binary_data()
    dense = small(cls).fit(X)
    from_sparse = small(cls).fit(sparse.csr_matrix(X))
    np.testing.assert_array_equal(dense.components_, from_sparse.components_)
    np.testing.assert_allclose(dense.transform(X), from_sparse.transform(sparse.csr_matrix(X)))


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_grey_levels(cls):
    """Training binarizes grey levels, transform reads them as they are, scores threshold."""
    rng = np.random.RandomState(1)
    grey = np.clip(binary_data() * 0.8 + rng.rand(120, 6) * 0.2, 0.0, 1.0)
    model = small(cls, dtype="float64").fit(grey)
    np.testing.assert_array_equal(model.score_samples(grey),
                                  model.score_samples((grey >= 0.5).astype(float)))
    features = model.transform(grey)
    assert features.shape == (120, model.n_components_)
    assert features.dtype == np.float64 and model.transform(grey.astype(np.float32)).dtype == \
        np.float32
    # Deterministic, and not the features of the thresholded input.
    np.testing.assert_array_equal(features, model.transform(grey))
    assert not np.allclose(features, model.transform((grey >= 0.5).astype(float)))


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_transform_matches_the_core_on_binary_input(cls):
    """The grey-level formula of transform reduces to the model's own mean_hiddens on 0/1."""
    X = binary_data()
    model = small(cls, dtype="float64", n_iter=5).fit(X)
    expected = model._model.mean_hiddens(torch.from_numpy(X)).detach().numpy()
    np.testing.assert_allclose(model.transform(X), expected, rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------- likelihoods
def _log_softplus_sum(x):
    return np.logaddexp(0.0, x)


def brute_force_log_marginal(V, W, b, c, family, beta=None, tail_terms=5000):
    """log sum_{h, z} exp(-E(v, h, z)) per row of V, enumerating every hidden configuration
    (and z) in float64 from the energy functions of the paper, independently of irbm."""
    n_hidden = W.shape[0]
    H = np.array(list(itertools.product([0.0, 1.0], repeat=n_hidden)))  # (2^K, K)
    visible = V @ c
    if family == "rbm":
        return logsumexp(visible[:, None] + (V @ W.T + b) @ H.T, axis=1)
    penalties = beta * _log_softplus_sum(b)
    columns = []  # log sum_h exp(-E(v, h, z)) for z = 1..K, shape (N,) each
    for z in range(1, n_hidden + 1):
        Hz = H[(H[:, z:] == 0).all(1)]  # h_i = 0 beyond z
        columns.append(logsumexp(visible[:, None] + (V @ W.T + b) @ Hz.T, axis=1)
                       - penalties[:z].sum())
    if family == "irbm":
        # z = K + k: k more units with zero parameters, each summing to 2 * 2**-beta over h_i.
        k = np.arange(1, tail_terms + 1)
        log_extra = logsumexp(k * math.log(2.0 * 2.0 ** -beta))
        columns.append(columns[-1] + log_extra)
    return logsumexp(np.stack(columns, 1), axis=1)


def brute_force_log_likelihood(model, V):
    family = {BernoulliRBM: "rbm", OrderedBernoulliRBM: "orbm", InfiniteBernoulliRBM: "irbm"}[
        type(model)]
    W, b, c = (np.asarray(a, np.float64) for a in (
        model.components_, model.intercept_hidden_, model.intercept_visible_))
    every_v = np.array(list(itertools.product([0.0, 1.0], repeat=W.shape[1])))
    args = (W, b, c, family, getattr(model, "beta", None))
    log_z = logsumexp(brute_force_log_marginal(every_v, *args))
    return brute_force_log_marginal(V, *args) - log_z, lambda U: brute_force_log_marginal(U, *args)


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_score_samples_is_the_exact_log_likelihood(cls):
    X = binary_data()
    model = small(cls, dtype="float64", n_iter=5).fit(X)
    with pytest.raises(AttributeError, match=r"log_partition_method_ is set by the first "
                                             r"score_samples or score after a fit"):
        getattr(model, "log_partition_method_")  # noqa: B009 - the attribute access is the test
    assert not hasattr(model, "log_partition_")  # still an AttributeError, as hasattr needs
    with pytest.raises(AttributeError, match="components_"):  # a property's own message
        getattr(small(cls), "_n_features_out")  # noqa: B009 - the attribute access is the test
    expected, log_marginal = brute_force_log_likelihood(model, X)
    np.testing.assert_allclose(model.score_samples(X), expected, rtol=1e-9, atol=1e-9)
    assert model.score(X) == pytest.approx(expected.mean(), rel=1e-9)
    assert model.log_partition_method_ == "exact" and model.log_partition_ess_ is None
    assert model.log_partition_interval_ == (model.log_partition_,) * 2
    # Parameters set by hand: the cached ln Z no longer describes them, and says so.
    before = model.log_partition_
    model.components_ = model.components_ * 2
    with pytest.raises(AttributeError, match=r"log_partition_ described the parameters before "
                                             r"components_ or the intercepts changed"):
        getattr(model, "log_partition_")  # noqa: B009 - the attribute access is the test
    doubled, _ = brute_force_log_likelihood(model, X)
    np.testing.assert_allclose(model.score_samples(X), doubled, rtol=1e-9, atol=1e-9)
    assert model.log_partition_ != before
    model.components_ = model.components_ / 2
    model.score(X)

    # scikit-learn's pseudo-likelihood, with the free energy F(v) = -log_marginal(v) and the
    # same bit flips as scikit-learn's (RandomState(random_state).randint).
    columns = np.random.RandomState(0).randint(0, X.shape[1], X.shape[0])
    flipped = X.copy()
    flipped[np.arange(X.shape[0]), columns] = 1.0 - flipped[np.arange(X.shape[0]), columns]
    difference = log_marginal(X) - log_marginal(flipped)  # F(v~) - F(v)
    np.testing.assert_allclose(model.pseudo_likelihood(X),
                               -X.shape[1] * np.logaddexp(0.0, -difference), rtol=1e-9)


def test_pseudo_likelihood_is_scikit_learns_for_the_rbm():
    X = binary_data()
    ours = small(BernoulliRBM, dtype="float64", n_iter=5).fit(X)
    theirs = SklearnBernoulliRBM(n_components=4, n_iter=0, random_state=0).fit(X)
    theirs.components_ = ours.components_.copy()
    theirs.intercept_hidden_ = ours.intercept_hidden_.copy()
    theirs.intercept_visible_ = ours.intercept_visible_.copy()
    np.testing.assert_allclose(ours.pseudo_likelihood(X), theirs.score_samples(X), rtol=1e-10)
    np.testing.assert_allclose(ours.transform(X), theirs.transform(X), rtol=1e-10)


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_arrays_given_to_an_estimator_never_fitted_define_its_model(cls):
    """scikit-learn's BernoulliRBM takes components_ and the intercepts set on an unfitted
    estimator; ours raised AttributeError on n_features_in_ (a walkthrough's own weights)."""
    X = binary_data()
    rng = np.random.RandomState(3)
    arrays = rng.randn(5, 6), rng.randn(5), rng.randn(6)
    model = small(cls, dtype="float64", n_iter=1)
    model.components_, model.intercept_hidden_, model.intercept_visible_ = arrays
    reference = irbm.RBM(6, 5, dtype=torch.float64) if cls is BernoulliRBM else \
        irbm.OrderedRBM(6, 5, beta=model.beta, dtype=torch.float64) \
        if cls is OrderedBernoulliRBM else \
        irbm.InfiniteRBM(6, n_hidden=5, beta=model.beta, dtype=torch.float64)
    with torch.no_grad():
        for parameter, array in zip((reference.W, reference.b, reference.c), arrays):
            parameter.copy_(torch.as_tensor(array))
    np.testing.assert_allclose(model.score_samples(X),
                               reference.log_likelihood_exact(torch.as_tensor(X)).numpy(),
                               rtol=1e-10)
    assert model.n_features_in_ == 6 and model.n_components_ == 5
    if cls is BernoulliRBM:
        theirs = SklearnBernoulliRBM(n_components=5)
        theirs.components_, theirs.intercept_hidden_, theirs.intercept_visible_ = arrays
        np.testing.assert_allclose(model.transform(X), theirs.transform(X), rtol=1e-10)
    model.partial_fit(X)  # trains on from them (the iRBM may grow)
    assert model.components_.shape[1] == 6 and model.components_.shape[0] >= 5
    assert 0 < np.abs(model.components_[:5] - arrays[0]).max() < 0.5
    with pytest.raises(ValueError, match="expecting 6 features"):
        model.transform(X[:, :4])
    bad = small(cls, learning_rate=-1.0)  # its settings are checked as a fit checks them
    bad.components_, bad.intercept_hidden_, bad.intercept_visible_ = arrays
    with pytest.raises(ValueError, match="learning_rate"):
        bad.partial_fit(X)


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_score_samples_falls_back_to_ais(cls, monkeypatch):
    X = binary_data()
    settings = {"dtype": "float64", "n_iter": 5, "score_chains": 200, "score_betas": 1000}
    exact = small(cls, **settings).fit(X)
    exact_scores = exact.score_samples(X)

    def too_big(self):
        raise ValueError("too many terms")

    for family in (irbm.RBM, irbm.OrderedRBM, irbm.InfiniteRBM):
        monkeypatch.setattr(family, "log_partition_exact", too_big)
    model = small(cls, **settings).fit(X)  # the same parameters (same random_state)
    scores = model.score_samples(X)
    assert model.log_partition_method_ == "ais"
    low, high = model.log_partition_interval_
    assert low <= model.log_partition_ <= high
    assert model.log_partition_ == pytest.approx(exact.log_partition_, abs=0.05)
    np.testing.assert_allclose(scores, exact_scores - (model.log_partition_
                                                      - exact.log_partition_), atol=1e-9)
    assert 100 < model.log_partition_ess_ <= 200


def test_larger_models_are_scored_with_ais_and_an_estimate_the_cli_would_flag_warns():
    X = binary_data(n_features=21)
    model = BernoulliRBM(n_components=21, n_iter=1, random_state=0, score_chains=20,
                         score_betas=100).fit(X)
    with pytest.warns(UserWarning, match=r"BernoulliRBM: log Z by AIS is unreliable: effective "
                                         r"sample size \d+\.\d of 20 chains x 100 temperatures"
                                         r".*raise score_chains and score_betas "
                                         r"\(score_chains=20 can never reach 30 effective "
                                         r"chains: use at least 100\)") as caught:
        scores = model.score_samples(X)
    assert {record.filename for record in caught} == {__file__}  # the user's line, not irbm's
    assert model.log_partition_method_ == "ais" and np.isfinite(scores).all()
    assert 1.0 <= model.log_partition_ess_ <= 20.0
    with warnings.catch_warnings():  # log Z is kept: said once per fitted model
        warnings.simplefilter("error")
        model.score(X)
        # Following the advice takes effect without a new fit (the cache ignored it before)
        model.set_params(score_chains=200)
        with pytest.raises(AttributeError, match="was estimated with other score_chains"):
            getattr(model, "log_partition_ess_")  # noqa: B009 - the access is the test
        model.score(X)  # a reliable estimate is quiet
    assert model.log_partition_ess_ >= 30
    # Parameters that are not finite are refused by name, not scored as NaN
    model.components_ = np.where(np.arange(model.components_.size).reshape(
        model.components_.shape) == 0, np.nan, model.components_)
    for method in (model.score_samples, model.transform):
        with pytest.raises(ValueError, match="components_ holds NaN or infinite values"):
            method(X)
    copied = pickle.loads(pickle.dumps(model))  # a diverged fit still pickles, to look at
    assert np.isnan(copied.components_).any()
    assert torch.isnan(model.to_model().W).any()


def test_a_cached_ln_z_survives_pickling_with_a_random_state_instance():
    """The cache's key held repr(RandomState), an address a pickle does not keep (review)."""
    X = binary_data(n_features=21)
    model = BernoulliRBM(n_components=21, n_iter=1, random_state=np.random.RandomState(0),
                         score_chains=40, score_betas=50).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 40 chains: the estimate's own warning
        first = model.score(X)
    copied = pickle.loads(pickle.dumps(model))
    assert copied.log_partition_ == model.log_partition_ and copied.score(X) == first


# ---------------------------------------------------------------------------- fitting API
@pytest.mark.parametrize("cls", ESTIMATORS)
def test_partial_fit_continues_training(cls):
    X = binary_data()
    model = small(cls)
    for start in range(0, 60, 10):
        model.partial_fit(X[start:start + 10])
    assert model.n_features_in_ == 6 and model.components_.shape == (model.n_components_, 6)
    model.score_samples(X)
    before = model.components_.copy()
    model.partial_fit(X[60:70])
    assert not hasattr(model, "log_partition_")  # new parameters: log Z is recomputed
    assert model.components_.shape != before.shape or not np.array_equal(model.components_,
                                                                         before)
    fitted = small(cls).fit(X)
    fitted.partial_fit(X[:10])  # continues the fitted model
    assert fitted.n_features_in_ == 6


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_pickle_and_clone(cls):
    X = binary_data()
    model = small(cls, n_iter=3).fit(X)
    restored = pickle.loads(pickle.dumps(model))
    assert "_model" not in model.__getstate__()  # plain NumPy state
    np.testing.assert_array_equal(restored.transform(X), model.transform(X))
    np.testing.assert_array_equal(restored.score_samples(X), model.score_samples(X))
    assert restored.get_params() == model.get_params()
    restored.partial_fit(X[:10])  # trains on after unpickling
    assert restored.sample(2, n_steps=5).shape == (2, 6)
    fresh = clone(model)
    assert fresh.get_params() == model.get_params() and not hasattr(fresh, "components_")


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_to_model_gives_the_fitted_model_to_the_rest_of_the_library(cls, tmp_path):
    from sklearn.exceptions import NotFittedError

    import irbm
    with pytest.raises(NotFittedError):
        small(cls).to_model()
    X = binary_data()
    estimator = small(cls, n_iter=3).fit(X)
    model = estimator.to_model()
    assert (model.n_visible, model.n_hidden) == (6, estimator.n_components_)
    weights = next(t for t in model.state_dict().values() if t.dim() == 2)
    np.testing.assert_allclose(weights.numpy(), estimator.components_)
    # Its free energies are the estimator's (score_samples' pseudo-likelihood uses them).
    with torch.no_grad():
        free = model.free_energy(torch.as_tensor(X[:5], dtype=model.dtype)).double().numpy()
    np.testing.assert_allclose(free, estimator._free_energies(estimator._float64_model(),
                                                              X[:5]), rtol=1e-5)
    irbm.save(model, tmp_path / "model.safetensors")
    assert irbm.load(tmp_path / "model.safetensors").n_hidden == estimator.n_components_
    weights.zero_()  # a copy: the estimator is untouched
    assert np.abs(estimator.components_).sum() > 0
    assert not np.array_equal(estimator.to_model().state_dict()[
        next(k for k, t in model.state_dict().items() if t.dim() == 2)].numpy(), 0)


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_edited_fitted_arrays_are_the_parameters_as_in_scikit_learn(cls):
    """Setting components_ or the intercepts had no effect until the estimator was pickled,
    and then it had (a user's report); scikit-learn's BernoulliRBM uses them at once. In place
    or by assignment, of the same shape or another, they are the parameters from then on, and
    a pickled copy agrees."""
    X = binary_data()
    model = small(cls, n_iter=3).fit(X)
    theirs = SklearnBernoulliRBM(n_components=model.n_components_, n_iter=1,
                                 random_state=0).fit(X)
    fitted = model.transform(X[:2])
    for estimator in (model, theirs):
        estimator.components_[:] = 0.0
        estimator.intercept_hidden_[:] = 0.0
    edited = model.transform(X[:2])
    assert not np.allclose(edited, fitted)
    np.testing.assert_array_equal(edited, pickle.loads(pickle.dumps(model)).transform(X[:2]))
    if cls is BernoulliRBM:  # the ordered models' means also sum over z
        np.testing.assert_allclose(edited, theirs.transform(X[:2]))
        np.testing.assert_allclose(edited, 0.5)
    before = model.score_samples(X[:3])  # log Z of the edited model: uniform hiddens
    np.testing.assert_allclose(before, model.score_samples(X[:3]))
    model.intercept_visible_ = np.full(6, -1.0)
    assert not np.allclose(model.score_samples(X[:3]), before)  # log Z recomputed
    restored = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(restored.score_samples(X), model.score_samples(X))
    # pickled after an edit, the copy does not take the former parameters' cached log Z
    model.intercept_visible_ = np.full(6, -2.0)
    restored = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(restored.score_samples(X), model.score_samples(X))
    rng = np.random.RandomState(1)
    model.components_ = rng.randn(3, 6)
    model.intercept_hidden_ = rng.randn(3)
    assert model.transform(X[:4]).shape == (4, 3) and model.n_components_ == 3
    expected = 1.0 / (1.0 + np.exp(-(X[:4] @ model.components_.T + model.intercept_hidden_)))
    if cls is BernoulliRBM:  # the ordered models' means also sum over z
        np.testing.assert_allclose(model.transform(X[:4]), expected, rtol=1e-5)
    assert pickle.loads(pickle.dumps(model)).n_components_ == 3
    model.partial_fit(X[:10])  # trains on from the new parameters
    assert model.components_.shape[1] == 6
    model.intercept_hidden_ = np.zeros(2)
    with pytest.raises(ValueError, match=r"do not fit together: expected \(n_components, "):
        model.transform(X[:2])


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_sample_and_gibbs(cls):
    X = binary_data()
    model = small(cls, n_iter=3).fit(X)
    samples = model.sample(5, n_steps=20)
    assert samples.shape == (5, 6) and samples.dtype == bool
    from_data = model.sample(n_steps=3, init=X[:4])
    assert from_data.shape == (4, 6)
    step = model.gibbs(X[:7])
    assert step.shape == (7, 6) and step.dtype == bool
    assert not np.array_equal(model.gibbs(X), model.gibbs(X))  # one random stream continues


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_a_device_set_after_fitting_applies_at_the_next_fit(cls):
    """The fitted model stays where it was fitted: its inputs and generators follow it, not a
    device parameter changed since (which would move them to a GPU the model is not on)."""
    X = binary_data()
    model = small(cls, n_iter=2).fit(X)
    expected = model.transform(X)
    model.set_params(device="cuda")
    np.testing.assert_array_equal(model.transform(X), expected)
    assert model.gibbs(X[:3]).shape == (3, 6)
    if torch.cuda.is_available():
        assert small(cls, n_iter=1).fit(X).set_params(device="cuda").fit(X)._model.device.type \
            == "cuda"
    else:  # the refit builds on the new device: here, one torch cannot reach, refused first
        with pytest.raises(ValueError, match="device 'cuda' is not usable here: .*CUDA"):
            model.fit(X)
        np.testing.assert_array_equal(model.transform(X), expected)  # the model kept


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("cls", ESTIMATORS)
def test_an_estimator_fitted_on_a_gpu_unpickles_on_the_cpu(cls):
    X = binary_data()
    model = small(cls, n_iter=2).fit(X)
    state = model.__getstate__()
    state["device"] = "cuda"  # what pickling a CUDA-fitted estimator stores
    restored = cls.__new__(cls)
    with pytest.warns(RuntimeWarning, match="rebuilt on the CPU"):
        restored.__setstate__(state)
    assert restored.device == "cpu"
    np.testing.assert_allclose(restored.transform(X), model.transform(X))


def test_infinite_rbm_learns_its_size():
    X = binary_data(n_rows=200)
    model = InfiniteBernoulliRBM(n_iter=3, random_state=0).fit(X)
    assert model.n_components_ > 1
    assert model.transform(X).shape == (200, model.n_components_)
    assert len(model.get_feature_names_out()) == model.n_components_
    with pytest.warns(UserWarning, match=r"past max_hidden \(3\) and is held there"):
        capped = InfiniteBernoulliRBM(n_iter=3, max_hidden=3, random_state=0).fit(X)
    assert capped.n_components_ == 3


def test_invalid_parameters_are_refused():
    X = binary_data()
    for estimator, name in [(BernoulliRBM(n_components=0), "n_components"),
                            (BernoulliRBM(learning_rate=-1.0), "learning_rate"),
                            (BernoulliRBM(optimizer="adam"), "optimizer"),
                            (BernoulliRBM(dtype="float16"), "dtype"),
                            (OrderedBernoulliRBM(beta=0.0), "beta"),
                            (InfiniteBernoulliRBM(beta=1.0), "beta"),
                            (InfiniteBernoulliRBM(max_hidden=0), "max_hidden")]:
        with pytest.raises(ValueError, match=name):
            estimator.fit(X)


def test_pipeline_and_grid_search_in_two_processes():
    digits = load_digits()
    X = (digits.data[:300] > 7).astype(np.float64)
    y = digits.target[:300]
    pipeline = Pipeline([("rbm", BernoulliRBM()), ("logistic", LogisticRegression(max_iter=500))])
    grid = GridSearchCV(pipeline, {"rbm": [
        BernoulliRBM(n_components=16, n_iter=10, random_state=0),
        OrderedBernoulliRBM(n_components=16, n_iter=10, random_state=0),
        InfiniteBernoulliRBM(n_iter=10, max_hidden=16, random_state=0)]}, cv=2, n_jobs=2)
    grid.fit(X, y)  # the estimators travel to the worker processes and back pickled
    assert np.isfinite(grid.cv_results_["mean_test_score"]).all()
    assert grid.best_score_ > 0.2  # 10 classes: chance is 0.1 (tiny training budget)
    assert grid.predict(X[:5]).shape == (5,)
    # An RBM alone is scored by its mean log-likelihood (exact here: 6 features).
    alone = GridSearchCV(BernoulliRBM(n_iter=2, random_state=0), {"n_components": [2, 4]},
                         cv=2, n_jobs=2).fit(binary_data())
    assert np.isfinite(alone.best_score_) and alone.best_score_ < 0


# ---------------------------------------------------------------------------- digits example
# A reduced version of scikit-learn's example "Restricted Boltzmann Machine features for digit
# classification" (examples/neural_networks/plot_rbm_logistic_classification.py): the same
# data (digits nudged by one pixel in four directions, min-max scaled), split, pipeline and
# hyper-parameters, with {n_iter} epochs instead of 10, no raw-pixel baseline and no plot.
# One change: the example's LogisticRegression(solver="newton-cg", tol=1) stops after 0
# iterations under scikit-learn 1.9 (chance accuracy), so the default tol is used.
DIGITS_EXAMPLE = """
import numpy as np
from scipy.ndimage import convolve

from sklearn import datasets, linear_model, metrics
from sklearn.model_selection import train_test_split
from sklearn.neural_network import BernoulliRBM
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import minmax_scale


def nudge_dataset(X, Y):
    shifts = [[[0, 1, 0], [0, 0, 0], [0, 0, 0]], [[0, 0, 0], [1, 0, 0], [0, 0, 0]],
              [[0, 0, 0], [0, 0, 1], [0, 0, 0]], [[0, 0, 0], [0, 0, 0], [0, 1, 0]]]

    def shift(image, kernel):
        return convolve(image.reshape((8, 8)), mode="constant", weights=kernel).ravel()

    moved = [np.apply_along_axis(shift, 1, X, kernel) for kernel in shifts]
    return np.concatenate([X] + moved), np.concatenate([Y] * 5)


X, y = datasets.load_digits(return_X_y=True)
X, Y = nudge_dataset(np.asarray(X, "float32"), y)
X = minmax_scale(X, feature_range=(0, 1))
X_train, X_test, Y_train, Y_test = train_test_split(X, Y, test_size=0.2, random_state=0)

logistic = linear_model.LogisticRegression(solver="newton-cg")
rbm = BernoulliRBM(random_state=0, verbose=True)
rbm_features_classifier = Pipeline(steps=[("rbm", rbm), ("logistic", logistic)])

rbm.learning_rate = 0.06
rbm.n_iter = {n_iter}
rbm.n_components = 100
logistic.C = 6000
rbm_features_classifier.fit(X_train, Y_train)

Y_pred = rbm_features_classifier.predict(X_test)
print(metrics.classification_report(Y_test, Y_pred))
accuracy = metrics.accuracy_score(Y_test, Y_pred)
"""
SKLEARN_IMPORT = "from sklearn.neural_network import BernoulliRBM"


def test_scikit_learn_digits_example_with_the_import_swapped(capsys):
    original = DIGITS_EXAMPLE.format(n_iter=2)
    swapped = original.replace(SKLEARN_IMPORT, "from irbm.sklearn import BernoulliRBM")
    assert swapped.count("irbm") == 1 and SKLEARN_IMPORT not in swapped
    namespace = {"__name__": "digits_example"}
    exec(compile(swapped, "<digits example>", "exec"), namespace)
    assert "[BernoulliRBM] Iteration 2, pseudo-likelihood" in capsys.readouterr().out
    assert isinstance(namespace["rbm"], BernoulliRBM)
    # scikit-learn's own BernoulliRBM scores 0.910 on this reduced script (scikit-learn 1.9.1;
    # not rerun here: its logistic regression alone takes ~7 s); irbm's scored 0.935.
    assert namespace["accuracy"] > 0.88


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_visible_biases_can_start_at_the_datas_log_odds(cls):
    """As irbm.Trainer's visible_init: zero epochs of fit leave them at the smoothed log-odds
    of the feature means; the default keeps scikit-learn's zeros."""
    X = binary_data()
    started = small(cls, n_iter=0, visible_init="data", dtype="float64").fit(X)
    rate = (X.mean(0) + 0.05) / 1.1
    np.testing.assert_allclose(started.intercept_visible_, np.log(rate / (1 - rate)),
                               rtol=1e-9)
    assert not small(cls, n_iter=0).fit(X).intercept_visible_.any()
    with pytest.raises(ValueError, match="visible_init must be 'zeros' or 'data'"):
        small(cls, visible_init="mean").fit(X)
