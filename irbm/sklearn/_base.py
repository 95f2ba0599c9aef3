"""What the three scikit-learn estimators share: input checks, training through `irbm.Trainer`,
mean hiddens at grey-level inputs, exact or AIS log-likelihoods, sampling and pickling.

The torch model (``_model``) holds the parameters; the fitted arrays ``components_``,
``intercept_hidden_`` and ``intercept_visible_`` are copies refreshed after every fit and
partial_fit, and arrays a user changed (in place or by assignment) are loaded back into the
model before it is used, as scikit-learn's BernoulliRBM, whose arrays are its parameters,
would use them (`_check_fitted`). Only `_model_parameters` and `_load_model_parameters` touch
the model's parameter attributes, so that a rename in the core changes one place.
"""

from __future__ import annotations

import copy
import functools
import math
import numbers
import time
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from scipy import sparse
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from .. import Trainer
from .._threads import using_threads
from .._warn import warn_user
from ..ais import estimate_log_partition
from ..models import DTYPES, check_device
from ..sampling import sample as _run_gibbs_chains

try:
    from scipy.sparse import sparray as _SparseArray
except ImportError:  # scipy < 1.11 has sparse matrices only
    from scipy.sparse import spmatrix as _SparseArray

#: Dense arrays, array-likes and scipy sparse matrices/arrays of shape (n_samples, n_features).
MatrixLike = npt.ArrayLike | sparse.spmatrix | _SparseArray
#: ``random_state`` as scikit-learn takes it.
RandomStateLike = int | np.random.RandomState | None

_OPTIMIZERS = ("sgd", "adagrad")
# Rows converted to a dense tensor at once in transform and scoring.
_CHUNK_ROWS = 4096
# Exact log Z enumerates 2**min(n_hidden, n_visible) terms: about a million at 20, a few seconds
# (the core accepts up to 2**24, which can take minutes); larger models use AIS.
_EXACT_MAX_UNITS = 20
# Pseudo-counts (fraction of the examples, on both outcomes) of the AIS base rate, as in
# irbm.ais.data_base_rate (Salakhutdinov & Murray's base-rate model, kept finite).
_BASE_RATE_SMOOTHING = 0.05


# ---------------------------------------------------------------------------- threads
def _threaded(rows: str | None):
    """Run the method with torch's CPU threads as `irbm train` picks them: one for a small
    matrix product, else the free cores (`irbm._threads.using_threads`), the caller's setting
    restored after; a second thread on a busy core made a fit 6-60x slower. ``rows``: the rows
    of the method's typical product ("batch": ``batch_size``; "X": X's, at most a chunk;
    None: unknown, as for AIS or long chains)."""
    def decorate(method):
        @functools.wraps(method)
        def threaded(self, *args, **kwargs):
            with using_threads(None, self._work(rows, args[0] if args else None)):
                return method(self, *args, **kwargs)
        return threaded
    return decorate


# ---------------------------------------------------------------------------- model parameters
def _model_parameters(model) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(W (n_hidden, n_visible), hidden bias b, visible bias c) of an irbm model, live tensors.

    The only place that reads the parameters (the core is moving W behind ``filters()``)."""
    return model.weights_and_biases()


def _load_model_parameters(model, weights, hidden_bias, visible_bias) -> None:
    """Copy arrays into the tensors returned by `_model_parameters` (shapes must match)."""
    with torch.no_grad():
        targets = _model_parameters(model)
        for target, value in zip(targets, (weights, hidden_bias, visible_bias)):
            target.copy_(torch.as_tensor(np.asarray(value)).to(target.device, target.dtype))
        if _model_parameters(model)[0].data_ptr() != targets[0].data_ptr():
            raise RuntimeError("the model's weights accessor returned a copy: update "
                               "irbm.sklearn._base._load_model_parameters")


def _seed(rng: np.random.RandomState) -> int:
    """A torch seed drawn from a NumPy RandomState."""
    return int(rng.randint(np.iinfo(np.int32).max))


def _check_int(name: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _check_real(name: str, value, *, minimum: float = 0.0, strict: bool = False) -> None:
    ok = (isinstance(value, numbers.Real) and not isinstance(value, bool)
          and (value > minimum if strict else value >= minimum) and math.isfinite(value))
    if not ok:
        raise ValueError(f"{name} must be a finite number {'>' if strict else '>='} {minimum}, "
                         f"got {value!r}")


class _BaseBernoulliRBM(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Shared implementation; see `BernoulliRBM` for the documentation of the behaviour."""

    #: The family has a z variable (ordered and infinite RBMs).
    _ordered = False
    #: The family has the iRBM's infinite geometric tail of untrained units.
    _infinite = False

    def __getattr__(self, name: str):
        # Only for attributes not found (a property that raised AttributeError lands here).
        prop = getattr(type(self), name, None)
        if isinstance(prop, property) and prop.fget is not None:
            prop.fget(self)  # a property that raised AttributeError: raise its own message
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # ------------------------------------------------------------------ ln Z, cached
    def _cached_log_partition(self, name: str):
        """The ln Z attribute ``name`` of the current fitted arrays: an AttributeError saying
        why where there is none (not scored yet, or the arrays changed since, which used to
        leave the old value readable until the next score)."""
        cache = self.__dict__.get("_log_partition_cache")
        if cache is None:
            raise AttributeError(f"{type(self).__name__}.{name} is set by the first "
                                 "score_samples or score after a fit (ln Z is computed on "
                                 "first use, then cached): call one of them first")
        kept = self.__dict__.get("_fitted_arrays", ())
        now = (self.components_, self.intercept_hidden_, self.intercept_visible_)
        if not all(np.array_equal(array, old, equal_nan=True) for array, old in zip(now, kept)):
            raise AttributeError(f"{type(self).__name__}.{name} described the parameters "
                                 "before components_ or the intercepts changed: the next "
                                 "score_samples or score computes it anew")
        if cache.get("budget") not in (None, self._log_partition_budget()):
            raise AttributeError(f"{type(self).__name__}.{name} was estimated with other "
                                 "score_chains, score_betas or random_state than set now: the "
                                 "next score_samples or score estimates it anew")
        return cache[name]

    def _log_partition_budget(self) -> tuple:
        """What an AIS estimate of ln Z depends on besides the parameters (set_params may
        change it: raising score_chains is what the unreliable-estimate warning advises)."""
        # A RandomState instance draws afresh at every estimate anyway, and its identity does
        # not survive a pickle: only a seed is part of the key.
        seed = self.random_state if isinstance(self.random_state, (int, np.integer)) or \
            self.random_state is None else "an instance"
        return (self.score_chains, self.score_betas, seed)

    log_partition_ = property(lambda self: self._cached_log_partition("log_partition_"))
    log_partition_interval_ = property(
        lambda self: self._cached_log_partition("log_partition_interval_"))
    log_partition_ess_ = property(lambda self: self._cached_log_partition("log_partition_ess_"))
    log_partition_method_ = property(
        lambda self: self._cached_log_partition("log_partition_method_"))

    # ------------------------------------------------------------------ to implement
    def _new_model(self, n_features: int, rng: np.random.RandomState):
        """A freshly initialized irbm model for ``n_features`` visible units."""
        raise NotImplementedError

    def _empty_model(self, n_features: int, n_hidden: int, dtype: torch.dtype | None = None):
        """A model of the given size (in ``dtype``, default the estimator's) whose parameters are
        about to be overwritten."""
        raise NotImplementedError

    # ------------------------------------------------------------------ parameters
    def _check_params(self) -> None:
        if "n_components" in self.get_params(deep=False):
            _check_int("n_components", self.n_components, 1)
        _check_real("learning_rate", self.learning_rate, strict=True)
        _check_int("batch_size", self.batch_size, 1)
        _check_int("n_iter", self.n_iter, 0)
        _check_int("cd_k", self.cd_k, 1)
        if not isinstance(self.persistent, (bool, np.bool_)):
            raise ValueError(f"persistent must be True or False, got {self.persistent!r}")
        if self.optimizer not in _OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {_OPTIMIZERS}, got {self.optimizer!r}")
        _check_real("l1", self.l1)
        _check_real("l2", self.l2)
        if self._dtype_name not in DTYPES:
            raise ValueError(f"dtype must be one of {tuple(DTYPES)} (or the NumPy dtypes), got "
                             f"{self.dtype!r}")
        check_device(self.device)
        _check_int("score_chains", self.score_chains, 1)
        _check_int("score_betas", self.score_betas, 2)
        if self.visible_init not in ("zeros", "data"):
            raise ValueError(f"visible_init must be 'zeros' or 'data', got {self.visible_init!r}")
        if self._ordered:
            _check_real("beta", self.beta, minimum=1.0 if self._infinite else 0.0,
                        strict=True)

    @property
    def _torch_dtype(self) -> torch.dtype:
        return DTYPES[self._dtype_name]

    @property
    def _dtype_name(self) -> str | None:
        """``dtype`` as "float32" or "float64" (it may be given as a NumPy dtype), else None."""
        try:  # np.dtype(None) is float64: None is no dtype here
            return None if self.dtype is None else np.dtype(self.dtype).name
        except TypeError:
            return None

    @property
    def _device(self) -> torch.device:
        """Where the fitted model lives (a later set_params(device=...) applies at the next fit
        or unpickling), else the ``device`` parameter."""
        if getattr(self, "_model", None) is not None:
            return self._model.device
        return torch.device(self.device if self.device is not None else "cpu")

    # ------------------------------------------------------------------ input checks
    def _validate(self, X: MatrixLike, *, reset: bool):
        """validate_data (CSR or dense float array, finite, 2-D), then values in [0, 1]."""
        X = validate_data(self, X, accept_sparse="csr", dtype=(np.float64, np.float32),
                          reset=reset)
        return self._check_range(X)

    def _check_range(self, X):
        """X itself when its values lie in [0, 1]; ValueError naming the problem otherwise."""
        values = X.data if sparse.issparse(X) else X
        if values.size:
            low, high = float(values.min()), float(values.max())
            if sparse.issparse(X) and X.nnz < X.shape[0] * X.shape[1]:
                low, high = min(low, 0.0), max(high, 0.0)
            if low < 0.0 or high > 1.0:
                problem = (f"Negative values in data passed to {type(self).__name__}"
                           if low < 0.0 else
                           f"Values above 1 in data passed to {type(self).__name__}")
                raise ValueError(
                    f"{problem}: X ranges from {low:g} to {high:g}, but this binary model "
                    f"takes values in [0, 1] (0/1, or Bernoulli means such as grey levels "
                    f"scaled to [0, 1]). Rescale the features first, e.g. with "
                    f"sklearn.preprocessing.MinMaxScaler(clip=True) in a Pipeline before this "
                    f"estimator.")
        return X

    @staticmethod
    def _dense_rows(X, start: int, stop: int) -> np.ndarray:
        rows = X[start:stop]
        return rows.toarray() if sparse.issparse(rows) else np.asarray(rows)

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array)).to(self._device, self._torch_dtype)

    @staticmethod
    def _threshold(rows: np.ndarray) -> np.ndarray:
        """The binary vector scored for a row of Bernoulli means: 1 where X >= 0.5."""
        return (rows >= 0.5).astype(np.float64)

    @staticmethod
    def _binarize(rows: np.ndarray, rng: np.random.RandomState) -> np.ndarray:
        """v ~ Bernoulli(X) elementwise; 0/1 entries are returned unchanged."""
        return rng.random_sample(rows.shape) < rows

    # ------------------------------------------------------------------ fitting
    def _work(self, rows: str | None, X) -> float | None:
        """Multiply-adds of the typical matrix product of a call on X (see `_threaded`), None
        when unknown (the hidden layer not sized yet)."""
        try:
            shape = np.shape(X)
        except TypeError:  # an array-like that refuses NumPy's functions: unknown
            shape = ()
        n_features = shape[1] if len(shape) == 2 else getattr(self, "n_features_in_", None)
        parameter = self.get_params(deep=False).get("n_components")
        fitted = getattr(self, "n_components_", None)
        # A fit starts afresh at the parameter's size; other calls run the fitted model.
        n_hidden = (parameter or fitted) if rows == "batch" else (fitted or parameter)
        if rows is None or n_features is None or not n_hidden or (rows == "X" and not shape):
            return None
        n_rows = self.batch_size if rows == "batch" else min(shape[0], _CHUNK_ROWS)
        return float(n_rows) * n_features * n_hidden

    @_threaded('batch')
    def fit(self, X: MatrixLike, y: Any = None) -> _BaseBernoulliRBM:
        """Fit the model to X by ``n_iter`` epochs of minibatch CD-k / PCD-k (irbm.Trainer).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Values in [0, 1]: binary data, or Bernoulli means (e.g. scaled grey levels) that
            are binarized stochastically afresh for every minibatch.
        y : ignored

        Returns
        -------
        self : fitted estimator
        """
        self._check_params()
        X = self._validate(X, reset=True)
        rng = check_random_state(self.random_state)
        self._initialize(X.shape[1], rng)
        self._observe(X)
        self._start_visible_biases()
        n_samples = X.shape[0]
        for iteration in range(1, self.n_iter + 1):
            begin = time.perf_counter()
            order = rng.permutation(n_samples)
            # X was validated above and each minibatch is binarized here: the model need not
            # check them again at every update (13% of a fit at batch_size 10).
            with self._model.trusted_inputs():
                for start in range(0, n_samples, self.batch_size):
                    rows = X[order[start:start + self.batch_size]]
                    self._update(rows.toarray() if sparse.issparse(rows) else rows, rng)
            if self.verbose:
                self._report(iteration, X, time.perf_counter() - begin)
        self.random_state_ = rng
        self._refresh_attributes()
        return self

    @_threaded('batch')
    def partial_fit(self, X: MatrixLike, y: Any = None) -> _BaseBernoulliRBM:
        """One parameter update with X as the minibatch (as scikit-learn's BernoulliRBM).

        The first call initializes the model (with ``visible_init="data"``, its visible biases
        from this minibatch's means); later calls continue from the current parameters,
        optimizer state and persistent chains (also after `fit`). Feed minibatches of about
        ``batch_size`` rows.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), values in [0, 1]
        y : ignored

        Returns
        -------
        self : fitted estimator
        """
        first_call = not hasattr(self, "components_")
        if first_call:
            self._check_params()
        else:
            self._check_fitted()
        X = self._validate(X, reset=first_call)
        if first_call:
            self.random_state_ = check_random_state(self.random_state)
            self._initialize(X.shape[1], self.random_state_)
        self._observe(X)
        if first_call:
            self._start_visible_biases()
        self._update(X.toarray() if sparse.issparse(X) else X, self.random_state_)
        self._refresh_attributes()
        return self

    def _initialize(self, n_features: int, rng: np.random.RandomState) -> None:
        self._model = None  # a refit builds on the device parameter, not the old model's
        self._model = self._new_model(n_features, rng)
        self._trainer = None
        self._feature_sums = np.zeros(n_features)
        self._n_samples_seen = 0

    def _start_visible_biases(self) -> None:
        """With ``visible_init="data"``, the visible biases at the smoothed log-odds of the
        feature means seen so far (one row of those means: the model takes values in [0, 1])."""
        if self.visible_init == "data":
            means = self._feature_sums / max(self._n_samples_seen, 1)
            self._model.initialize_visible_bias(self._tensor(means[None, :]), binary=False)

    def _observe(self, X) -> None:
        """Accumulate the feature means of the data seen (the AIS base distribution)."""
        self._feature_sums += np.asarray(X.sum(axis=0), dtype=np.float64).ravel()
        self._n_samples_seen += X.shape[0]

    def _update(self, rows: np.ndarray, rng: np.random.RandomState) -> None:
        """One Trainer update on a stochastically binarized minibatch."""
        batch = self._tensor(self._binarize(rows, rng))
        if getattr(self, "_trainer", None) is None:
            self._trainer = Trainer(
                self._model, cd_k=self.cd_k, persistent=bool(self.persistent),
                batch_size=self.batch_size, optimizer=self.optimizer,
                lr=float(self.learning_rate), l1=float(self.l1), l2=float(self.l2),
                seed=_seed(rng), device=self._device, progress=False)
            # Zero epochs: sets up the persistent chains and the optimizer state.
            self._trainer.fit(batch, self._trainer.epoch)
        self._trainer.update(batch)

    def _refresh_attributes(self) -> None:
        """Copy the model's parameters into the fitted arrays; forget any cached log Z."""
        weights, hidden_bias, visible_bias = (
            t.detach().cpu().numpy().copy() for t in _model_parameters(self._model))
        self.components_ = weights
        self.intercept_hidden_ = hidden_bias
        self.intercept_visible_ = visible_bias
        self._remember_arrays()

    def _remember_arrays(self) -> None:
        """Keep copies of the fitted arrays, the model's parameters now (see `_check_fitted`),
        and forget any cached log Z."""
        self._fitted_arrays = tuple(np.array(array, copy=True) for array in (
            self.components_, self.intercept_hidden_, self.intercept_visible_))
        self.n_components_ = self._fitted_arrays[0].shape[0]
        self.__dict__.pop("_log_partition_cache", None)

    def _check_fitted(self, *, finite: bool = True) -> None:
        """check_is_fitted, then load fitted arrays changed since the model's parameters were
        copied into them (in place or by assignment) into the model; a new shape builds a
        model of that shape, whose optimizer state and persistent chains start afresh."""
        check_is_fitted(self)
        arrays = (self.components_, self.intercept_hidden_, self.intercept_visible_)
        for name, array in zip(("components_", "intercept_hidden_", "intercept_visible_"),
                               arrays if finite else ()):  # pickling keeps a diverged fit
            if not np.isfinite(np.asarray(array, dtype=float)).all():
                raise ValueError(f"{name} holds NaN or infinite values (a diverged fit, or "
                                 "arrays set so): fit again, with a smaller learning_rate")
        kept = getattr(self, "_fitted_arrays", None)
        if kept is not None and all(np.array_equal(array, old, equal_nan=True)
                                    for array, old in zip(arrays, kept)):
            return
        weights, hidden_bias, visible_bias = (np.asarray(array) for array in arrays)
        if weights.ndim != 2 or hidden_bias.shape != weights.shape[:1] or \
                visible_bias.shape != weights.shape[1:]:
            raise ValueError(f"components_ {weights.shape}, intercept_hidden_ "
                             f"{hidden_bias.shape} and intercept_visible_ {visible_bias.shape} "
                             "do not fit together: expected (n_components, n_features), "
                             "(n_components,) and (n_features,)")
        if getattr(self, "_model", None) is None:  # arrays given to an estimator never fitted
            # (scikit-learn's BernoulliRBM takes them so): they define its features.
            self._check_params()
            self.n_features_in_ = weights.shape[1]
            self._model = self._empty_model(weights.shape[1], weights.shape[0])
            self._trainer = None
            self._feature_sums, self._n_samples_seen = np.zeros(weights.shape[1]), 0
            self.random_state_ = check_random_state(self.random_state)
        if weights.shape[1] != self.n_features_in_:
            raise ValueError(f"components_ has {weights.shape[1]} columns; the estimator was "
                             f"fitted on {self.n_features_in_} features")
        if weights.shape != tuple(_model_parameters(self._model)[0].shape):
            self._model = self._empty_model(weights.shape[1], weights.shape[0])
            self._trainer = None
        _load_model_parameters(self._model, weights, hidden_bias, visible_bias)
        self._remember_arrays()

    @property
    def _n_features_out(self) -> int:
        return self.components_.shape[0]

    def _report(self, iteration: int, X, seconds: float) -> None:
        size = f", n_components = {self._model.n_hidden}" if self._infinite else ""
        # A RandomState of its own: printing must not change the training draws.
        pseudo = self._pseudo_likelihood(X, np.random.RandomState(iteration)).mean()
        print(f"[{type(self).__name__}] Iteration {iteration}, pseudo-likelihood = "
              f"{pseudo:.2f}{size}, time = {seconds:.2f}s")

    # ------------------------------------------------------------------ features
    @_threaded('X')
    def transform(self, X: MatrixLike) -> np.ndarray:
        """Hidden unit means E[h | v = X], shape (n_samples, n_components_).

        Evaluated at X itself, so grey levels give smooth features, deterministically.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), values in [0, 1]

        Returns
        -------
        h : ndarray of shape (n_samples, n_components_), in X's float dtype
        """
        self._check_fitted()
        X = self._validate(X, reset=False)
        out = np.empty((X.shape[0], self._model.n_hidden), dtype=X.dtype)
        with torch.no_grad():
            for start in range(0, X.shape[0], _CHUNK_ROWS):
                rows = self._tensor(self._dense_rows(X, start, start + _CHUNK_ROWS))
                out[start:start + _CHUNK_ROWS] = self._mean_hiddens(rows).cpu().numpy()
        return out

    def _mean_hiddens(self, v: torch.Tensor) -> torch.Tensor:
        """E[h_i | v] for real-valued v in [0, 1]^D (equal to model.mean_hiddens on binary v).

        RBM: sigmoid(W_i v + b_i). Ordered models: sigmoid(W_i v + b_i) P(z >= i | v) with
        P(z | v) proportional to exp(sum_{j <= z} softplus(W_j v + b_j) - beta softplus(b_j))
        (the v^T c term is common to every z), plus for the iRBM the tail column z > l, worth
        r / (1 - r) times the z = l term, r = 2**(1 - beta).
        """
        return self._model.mean_hiddens(v)

    def to_model(self):
        """The fitted `irbm` model (an `irbm.EnergyModel`, a copy): for `irbm.save`,
        `irbm.evaluate.bracket_nll` and the rest of the library.

        Returns
        -------
        EnergyModel
            n_visible = n_features_in_, n_hidden = n_components_, on the estimator's device.
        """
        self._check_fitted(finite=False)  # a diverged fit may be exported to be looked at
        return copy.deepcopy(self._model)

    # ------------------------------------------------------------------ likelihoods
    def _float64_model(self):
        """A float64 copy of the model (scores are computed in double precision)."""
        return self._model.as_float64()

    def _free_energies(self, model, X, flip_columns: np.ndarray | None = None) -> np.ndarray:
        """F(v) in float64 for the thresholded rows v of X, chunk by chunk; with
        ``flip_columns`` (n_samples,), for the rows with that one bit flipped."""
        device = _model_parameters(model)[0].device
        parts = []
        with torch.no_grad():
            for start in range(0, X.shape[0], _CHUNK_ROWS):
                v = self._threshold(self._dense_rows(X, start, start + _CHUNK_ROWS))
                if flip_columns is not None:
                    rows = np.arange(v.shape[0])
                    columns = flip_columns[start:start + _CHUNK_ROWS]
                    v[rows, columns] = 1.0 - v[rows, columns]
                parts.append(model.free_energy(torch.from_numpy(v).to(device)).cpu().numpy())
        return np.concatenate(parts)

    @_threaded(None)
    def score_samples(self, X: MatrixLike) -> np.ndarray:
        """Log-likelihood log p(v) = -F(v) - log Z of each row, in nats.

        Rows that are not binary are scored at their thresholded vector 1[X >= 0.5]. log Z is
        exact when min(n_components_, n_features) <= 20, an AIS estimate otherwise; it is
        computed once per fitted model and described by ``log_partition_``,
        ``log_partition_interval_``, ``log_partition_ess_`` and ``log_partition_method_``.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), values in [0, 1]

        Returns
        -------
        log_likelihood : ndarray of shape (n_samples,), float64
        """
        self._check_fitted()
        X = self._validate(X, reset=False)
        model = self._float64_model()
        log_z = self._log_partition(model)
        return -self._free_energies(model, X) - log_z

    def score(self, X: MatrixLike, y: Any = None) -> float:
        """Mean log-likelihood of the rows of X (see `score_samples`)."""
        return float(np.mean(self.score_samples(X)))

    def _log_partition(self, model) -> float:
        """log Z, cached: by enumeration for models of up to 2**_EXACT_MAX_UNITS terms (when the
        core agrees), by AIS otherwise."""
        if hasattr(self, "log_partition_"):  # cached, of the current arrays
            return self.log_partition_
        weights = _model_parameters(model)[0]
        log_z = None
        if min(weights.shape) <= _EXACT_MAX_UNITS:
            try:
                log_z = float(model.log_partition_exact())
            except ValueError:  # the core declines: too many terms
                pass
        if log_z is None:
            self._ais_log_partition()
        else:
            self._log_partition_cache = {
                "log_partition_": log_z, "log_partition_interval_": (log_z, log_z),
                "log_partition_ess_": None, "log_partition_method_": "exact",
                "budget": None}  # exact: no budget to change
        return self.log_partition_

    def _ais_log_partition(self) -> None:
        means = self._feature_sums / max(self._n_samples_seen, 1)
        probability = (means + _BASE_RATE_SMOOTHING) / (1.0 + 2.0 * _BASE_RATE_SMOOTHING)
        base = torch.logit(torch.as_tensor(probability)).to(self._device, self._torch_dtype)
        result = estimate_log_partition(
            self._model, n_chains=self.score_chains, n_betas=self.score_betas, base=base,
            seed=_seed(check_random_state(self.random_state)), progress=False)
        log_weights = np.asarray(result.log_weights, dtype=np.float64)
        scaled = np.exp(log_weights - log_weights.max())
        self._log_partition_cache = {
            "log_partition_": float(result.log_z),
            "log_partition_interval_": (float(result.log_z_low), float(result.log_z_high)),
            "log_partition_ess_": float(scaled.sum() ** 2 / (scaled ** 2).sum()),
            "log_partition_method_": "ais", "budget": self._log_partition_budget()}
        # A search ranking models on these scores must hear it (the CLI prints the same).
        if not result.reliable:
            warn_user(
                f"{type(self).__name__}: log Z by AIS is unreliable: effective sample size "
                f"{self.log_partition_ess_:.1f} of {self.score_chains} chains x "
                f"{self.score_betas} temperatures, where at least 30 and 10% of the chains "
                "are needed: log Z is likely underestimated, so the scores look too good; "
                "raise score_chains and score_betas"
                # 30 effective of fewer than 60 chains needs nearly equal weights.
                + (f" (score_chains={self.score_chains} can never reach 30 effective chains: "
                   "use at least 100)" if self.score_chains < 30 else
                   f" (score_chains={self.score_chains} leaves the weights almost no room to "
                   "spread: use at least 100)" if self.score_chains < 60 else ""))

    @_threaded('X')
    def pseudo_likelihood(self, X: MatrixLike) -> np.ndarray:
        """scikit-learn's BernoulliRBM.score_samples: a stochastic proxy of log p(v).

        For each row, flip one bit v_j, j drawn uniformly with a RandomState made afresh from
        ``random_state`` (the same draws as scikit-learn's), and return
        ``n_features * log sigmoid(F(v~) - F(v))``: n_features times the log conditional
        probability of that bit given the others. Unlike `score_samples` it needs no log Z, but
        it is noisy and is not a log-probability of v. Rows are thresholded at 0.5 like in
        `score_samples` (scikit-learn evaluates F at the grey levels themselves); on binary X
        with the same parameters and ``random_state`` the two agree. For the ordered models F
        is their own free energy, with z summed out.

        Returns
        -------
        pseudo_likelihood : ndarray of shape (n_samples,), float64
        """
        self._check_fitted()
        X = self._validate(X, reset=False)
        return self._pseudo_likelihood(X, check_random_state(self.random_state))

    def _pseudo_likelihood(self, X, rng: np.random.RandomState) -> np.ndarray:
        columns = rng.randint(0, X.shape[1], X.shape[0])  # scikit-learn's draws
        model = self._float64_model()
        difference = self._free_energies(model, X, columns) - self._free_energies(model, X)
        return -X.shape[1] * np.logaddexp(0.0, -difference)

    # ------------------------------------------------------------------ sampling
    def _torch_generator(self, rng: np.random.RandomState) -> torch.Generator:
        return torch.Generator(device=self._device).manual_seed(_seed(rng))

    def _persistent_rng(self) -> np.random.RandomState:
        if not hasattr(self, "random_state_"):
            self.random_state_ = check_random_state(self.random_state)
        return self.random_state_

    @_threaded('X')
    def gibbs(self, v: MatrixLike) -> np.ndarray:
        """One block Gibbs step v -> (h, z) -> v' per row.

        Rows in [0, 1] are first binarized stochastically (v ~ Bernoulli(X)). Randomness comes
        from the fitted ``random_state_``, so repeated calls continue one stream.

        Returns
        -------
        v_new : ndarray of bool, shape (n_samples, n_features)
        """
        self._check_fitted()
        X = self._validate(v, reset=False)
        rng = self._persistent_rng()
        dense = X.toarray() if sparse.issparse(X) else X
        binary = self._tensor(self._binarize(dense, rng))
        visible, _ = self._model.gibbs_step(binary, self._torch_generator(rng))
        return visible.cpu().numpy().astype(bool)

    @_threaded(None)
    def sample(self, n_samples: int = 1, *, n_steps: int = 1000,
               init: MatrixLike | None = None) -> np.ndarray:
        """Draw samples by running independent block Gibbs chains for ``n_steps`` steps.

        Chains start from uniform random binary vectors, or from ``init`` (binarized
        stochastically, one chain per row; then ``n_samples`` is ignored). For the ordered
        models the first hidden step is taken at z = n_components_, the paper's start (chains
        from noise otherwise stay at small z for a long time). Randomness comes from the fitted
        ``random_state_``.

        Returns
        -------
        X_new : ndarray of bool, shape (n_samples, n_features)
        """
        self._check_fitted()
        rng = self._persistent_rng()
        if init is None:
            _check_int("n_samples", n_samples, 1)
            start, count = "random", int(n_samples)
        else:
            X = self._validate(init, reset=False)
            dense = X.toarray() if sparse.issparse(X) else X
            start, count = self._tensor(self._binarize(dense, rng)), None
        _check_int("n_steps", n_steps, 1)
        result = _run_gibbs_chains(self._model, count, int(n_steps), init=start,
                                   z_max_init=self._ordered, generator=_seed(rng),
                                   return_probabilities=False)
        return result.samples.cpu().numpy().astype(bool)

    # ------------------------------------------------------------------ pickling and tags
    def __getstate__(self) -> dict:
        """Plain NumPy state: torch objects are left out and rebuilt from the fitted arrays."""
        if hasattr(self, "components_"):
            # edited arrays: drop what was cached of the former ones; a diverged fit pickles
            self._check_fitted(finite=False)
        state = dict(super().__getstate__())
        state.pop("_model", None)
        state.pop("_trainer", None)
        state.pop("_fitted_arrays", None)  # rebuilt from the fitted arrays
        return state

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        if "components_" in state:
            if self._device.type == "cuda" and not torch.cuda.is_available():
                warn_user(f"this {type(self).__name__} was fitted on {self.device}, which this "
                          "machine does not have: it is rebuilt on the CPU", RuntimeWarning)
                self.device = "cpu"
            self._model = self._empty_model(self.components_.shape[1],
                                            self.components_.shape[0])
            _load_model_parameters(self._model, self.components_, self.intercept_hidden_,
                                   self.intercept_visible_)
            self._fitted_arrays = tuple(np.array(array, copy=True) for array in (
                self.components_, self.intercept_hidden_, self.intercept_visible_))
            # The optimizer state and persistent chains are not pickled: a later partial_fit
            # starts them afresh.
            self._trainer = None

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        # Values must lie in [0, 1]; the tags can only say "non-negative".
        tags.input_tags.positive_only = True
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags
