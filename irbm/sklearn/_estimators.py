"""The three estimators: their constructors, defaults and documentation."""

from __future__ import annotations

import numpy as np
import torch

from .. import RBM, InfiniteRBM, OrderedRBM
from ._base import RandomStateLike, _BaseBernoulliRBM, _check_int, _seed

_COMMON_PARAMETERS = """
    learning_rate : float, default=0.1
        Step size of the parameter updates (with ``optimizer="adagrad"``, the base rate that
        ADAGRAD divides per element). Gradients are averaged over the minibatch, so with
        ``optimizer="sgd"`` this is scikit-learn's ``learning_rate``.
    batch_size : int, default=10
        Examples per minibatch, and number of persistent chains.
    n_iter : int, default=10
        Number of epochs (passes over the training data) of `fit`.
    verbose : int, default=0
        Print the pseudo-likelihood and the time of every epoch.
    random_state : int, RandomState instance or None, default=None
        Seeds everything random: the initial weights, the minibatch order, the stochastic
        binarization of non-binary inputs, the Gibbs sampler (through a torch seed drawn from
        it), the AIS chains of `score_samples` and the bit flips of `pseudo_likelihood`. An int
        makes `fit` reproducible.
    cd_k : int, default=1
        Gibbs steps per update (scikit-learn: 1; the paper: 10).
    persistent : bool, default=True
        Persistent chains (PCD, scikit-learn's "stochastic maximum likelihood"), started at
        zeros; False runs CD-k from the minibatch.
    optimizer : {"sgd", "adagrad"}, default="sgd"
        Update rule: plain SGD (scikit-learn's) or ADAGRAD with epsilon 1e-6 (the paper's).
    l1, l2 : float, default=0.0
        L1 (proximal, giving exact zeros) and L2 penalties on the weights and hidden biases.
    score_chains : int, default=100
        AIS chains used by `score_samples` when log Z is too large to enumerate.
    score_betas : int, default=10000
        AIS temperatures (evenly spaced in [0, 1]) for the same.
    device : str or None, default=None
        torch device of the model ("cpu" when None; e.g. "cuda").
    dtype : {"float32", "float64"} or the NumPy dtype, default="float32"
        Precision of the model during training, transform and AIS; free energies and exact
        log Z are computed in float64.
    visible_init : {"zeros", "data"}, default="zeros"
        The visible biases at the start: zeros (scikit-learn's), or the smoothed log-odds of
        the features' means in the data `fit` gets (the first minibatch of `partial_fit`),
        as `irbm.Trainer`'s ``visible_init`` (Hinton's practical guide, section 8.1)."""

_INPUTS = """
    Inputs
    ------
    X may be a dense array or a scipy sparse matrix whose values lie in [0, 1], like
    scikit-learn's BernoulliRBM takes them (its digits example feeds min-max scaled grey
    levels); other values raise a ValueError that suggests a MinMaxScaler. irbm's models are
    distributions over binary vectors, so values strictly between 0 and 1 are read as Bernoulli
    means:

    - training binarizes every minibatch stochastically, v ~ Bernoulli(X), with fresh draws
      from ``random_state`` at every epoch. The updates are then unbiased stochastic gradients
      of the expected log-likelihood E_{v ~ Bernoulli(X)}[log p(v)] ("dynamic binarization"),
      a proper objective for the binary model; binary X is used unchanged. scikit-learn feeds
      the grey levels themselves into the positive phase, which has no such reading.
    - `transform` evaluates E[h | v] at v = X itself (the conditionals are defined by the same
      formula for real v), deterministically, as scikit-learn does.
    - `score_samples` and `pseudo_likelihood` score the thresholded vector 1[X >= 0.5], the
      most probable binary vector under Bernoulli(X), so the result is a genuine
      (pseudo-)log-probability of a binary vector and is deterministic.
    - `gibbs` and `sample` (with ``init``) binarize stochastically, like training."""

_SCORING = """
    Scoring
    -------
    `score_samples` returns the log-likelihood log p(v) = -F(v) - log Z, not scikit-learn's
    pseudo-likelihood (available as `pseudo_likelihood`, for comparison). log Z is exact, by
    enumeration, when min(n_components_, n_features) <= 20 (at most about a million terms:
    seconds), and otherwise an AIS estimate with ``score_chains`` chains and ``score_betas``
    temperatures from a base distribution fitted to the feature means of the training data
    (a few seconds for 64 features and 100 hidden units with the defaults). It is computed
    on first use after each fit and kept in ``log_partition_`` with its reliability:
    ``log_partition_interval_`` = ln(Z-hat -/+ 3 sigma) (-inf lower bound when 3 sigma
    exceeds Z-hat) and ``log_partition_ess_``, the effective sample size (sum w)^2 / sum w^2
    of the AIS weights (close to ``score_chains`` for a reliable estimate, near 1 when one
    chain dominates); an estimate the CLI would flag (an effective sample size below 10% of
    the chains or below 30, or fewer than 30 chains) warns (UserWarning) when it is made.
    AIS is stochastic and tends to underestimate log Z: compare models with the same, large
    settings."""

_ATTRIBUTES = """
    Attributes
    ----------
    components_ : ndarray of shape (n_components_, n_features)
        Weight matrix W, row i the filter of hidden unit i (a copy of the model's).
    intercept_hidden_ : ndarray of shape (n_components_,)
        Hidden biases b.
    intercept_visible_ : ndarray of shape (n_features,)
        Visible biases c.
    n_components_ : int
        Number of hidden units{size_note}.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Names of the features, when X has string column names.
    random_state_ : RandomState
        Generator used by training and continued by `partial_fit`, `gibbs` and `sample`.
    log_partition_ : float
        log Z, set by the first `score_samples` / `score` after fitting.
    log_partition_interval_ : tuple of float
        ln(Z-hat -/+ 3 sigma) of the AIS estimate; (log Z, log Z) when exact.
    log_partition_ess_ : float or None
        Effective sample size of the AIS weights; None when exact.
    log_partition_method_ : {{"exact", "ais"}}
        How ``log_partition_`` was obtained.

    Notes
    -----
    Pickling keeps the parameters (as NumPy arrays) and the random state but not the
    optimizer's accumulators or the persistent chains: `partial_fit` after unpickling
    restarts those."""


class BernoulliRBM(_BaseBernoulliRBM):
    """Bernoulli restricted Boltzmann machine trained by irbm, a drop-in for scikit-learn's.

    Same constructor arguments and defaults as `sklearn.neural_network.BernoulliRBM`
    (``n_components=256, learning_rate=0.1, batch_size=10, n_iter=10``), and the same training
    by default: PCD-1 with plain SGD on minibatches of 10, persistent chains started at zeros
    (``cd_k=1, persistent=True, optimizer="sgd"``). Differences: minibatches are shuffled at
    every epoch, non-binary inputs are binarized (see "Inputs"), and `score_samples` is the
    log-likelihood rather than a pseudo-likelihood.

    Parameters
    ----------
    n_components : int, default=256
        Number of hidden units.
    {common}

    {inputs}

    {scoring}

    {attributes}

    Examples
    --------
    >>> import numpy as np
    >>> from irbm.sklearn import BernoulliRBM
    >>> X = np.array([[0, 0, 0], [0, 1, 1], [1, 0, 1], [1, 1, 1]])
    >>> model = BernoulliRBM(n_components=2, random_state=0).fit(X)
    >>> model.transform(X).shape
    (4, 2)
    """

    def __init__(self, n_components: int = 256, *, learning_rate: float = 0.1,
                 batch_size: int = 10, n_iter: int = 10, verbose: int = 0,
                 random_state: RandomStateLike = None, cd_k: int = 1, persistent: bool = True,
                 optimizer: str = "sgd", l1: float = 0.0, l2: float = 0.0,
                 score_chains: int = 100, score_betas: int = 10000, device: str | None = None,
                 dtype: str = "float32", visible_init: str = "zeros"):
        self.n_components = n_components
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.n_iter = n_iter
        self.verbose = verbose
        self.random_state = random_state
        self.cd_k = cd_k
        self.persistent = persistent
        self.optimizer = optimizer
        self.l1 = l1
        self.l2 = l2
        self.score_chains = score_chains
        self.score_betas = score_betas
        self.device = device
        self.dtype = dtype
        self.visible_init = visible_init

    def _new_model(self, n_features: int, rng: np.random.RandomState):
        model = RBM(n_features, self.n_components, dtype=self._torch_dtype, device=self._device)
        return model.reset_parameters(torch.Generator().manual_seed(_seed(rng)))

    def _empty_model(self, n_features, n_hidden, dtype=None):
        return RBM(n_features, n_hidden, dtype=dtype or self._torch_dtype, device=self._device)


class OrderedBernoulliRBM(_BaseBernoulliRBM):
    """Ordered RBM (Cote & Larochelle, section 3) as a scikit-learn transformer.

    A latent z in 1..n_components selects how many hidden units take part, each selected unit
    paying an energy penalty beta * softplus(b_i): the units are used, and learned, in order,
    so the first features are the most general. Training and defaults follow `BernoulliRBM`
    (PCD-1, SGD, scikit-learn's learning rate and batch size); the paper itself trained
    ordered RBMs with ``optimizer="adagrad", cd_k=10, batch_size=64``.

    `transform` returns E[h_i | v] = sigmoid(W_i v + b_i) P(z >= i | v). Unit i is zero
    unless it is selected (i <= z), and once selected it is Bernoulli(sigmoid(W_i v + b_i))
    whatever the value of z, because given (v, z) the selected units are independent and
    unit i's energy term does not involve z. Summing over z:
    E[h_i | v] = sum over z >= i of P(z | v) sigmoid(W_i v + b_i). Features of units that v rarely
    selects are damped towards 0, so the features are ordered by how much each unit is used.

    Parameters
    ----------
    n_components : int, default=256
        Number of hidden units K (the largest z).
    {common}
    beta : float, default=1.01
        Scale of the per-unit penalty beta * softplus(b_i) (the paper's value).

    {inputs}

    {scoring}

    {attributes}
    """

    _ordered = True

    def __init__(self, n_components: int = 256, *, learning_rate: float = 0.1,
                 batch_size: int = 10, n_iter: int = 10, verbose: int = 0,
                 random_state: RandomStateLike = None, cd_k: int = 1, persistent: bool = True,
                 optimizer: str = "sgd", l1: float = 0.0, l2: float = 0.0,
                 score_chains: int = 100, score_betas: int = 10000, device: str | None = None,
                 dtype: str = "float32", beta: float = 1.01, visible_init: str = "zeros"):
        self.n_components = n_components
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.n_iter = n_iter
        self.verbose = verbose
        self.random_state = random_state
        self.cd_k = cd_k
        self.persistent = persistent
        self.optimizer = optimizer
        self.l1 = l1
        self.l2 = l2
        self.score_chains = score_chains
        self.score_betas = score_betas
        self.device = device
        self.dtype = dtype
        self.visible_init = visible_init
        self.beta = beta

    def _new_model(self, n_features: int, rng: np.random.RandomState):
        model = OrderedRBM(n_features, self.n_components, beta=self.beta,
                           dtype=self._torch_dtype, device=self._device)
        return model.reset_parameters(torch.Generator().manual_seed(_seed(rng)))

    def _empty_model(self, n_features, n_hidden, dtype=None):
        return OrderedRBM(n_features, n_hidden, beta=self.beta,
                          dtype=dtype or self._torch_dtype, device=self._device)


class InfiniteBernoulliRBM(_BaseBernoulliRBM):
    """Infinite RBM (Cote & Larochelle, section 4): an ordered RBM whose hidden layer grows.

    There is no ``n_components``: the model starts with one hidden unit of zero weights (the
    authors' start) and adds one whenever an update samples z beyond the trained units, so the
    learned size ``n_components_`` is a result of training (and L1, with ``l1 > 0``, can
    remove trailing units whose parameters reach exactly zero). Units beyond ``n_components_``
    have zero parameters; `transform` returns the ``n_components_`` trained ones, with
    E[h_i | v] = sigmoid(W_i v + b_i) P(z >= i | v) as for `OrderedBernoulliRBM` (P(z >= i | v)
    including the mass of the infinite tail z > n_components_). The number of features
    therefore varies from one fit to the next: in scikit-learn's digits example (100 units for
    the other models, 10 epochs) it grew to 400 units (418 under the sampling streams before
    session 22). Growth is fast at first (up to one unit per update) and slows as the trained
    units take over; ``max_hidden`` caps it. Other defaults follow `BernoulliRBM`.

    Parameters
    ----------
    {common}
    beta : float, default=1.01
        Penalty scale, must be > 1 (the partition function diverges otherwise); the paper's
        value. Values closer to 1 make the model grow faster.
    max_hidden : int or None, default=None
        Cap on ``n_components_`` (None: no cap; the authors used 20,000).

    {inputs}

    {scoring}

    {attributes}
    """

    _ordered = True
    _infinite = True

    def __init__(self, *, learning_rate: float = 0.1, batch_size: int = 10, n_iter: int = 10,
                 verbose: int = 0, random_state: RandomStateLike = None, cd_k: int = 1,
                 persistent: bool = True, optimizer: str = "sgd", l1: float = 0.0,
                 l2: float = 0.0, score_chains: int = 100, score_betas: int = 10000,
                 device: str | None = None, dtype: str = "float32", beta: float = 1.01,
                 max_hidden: int | None = None, visible_init: str = "zeros"):
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.n_iter = n_iter
        self.verbose = verbose
        self.random_state = random_state
        self.cd_k = cd_k
        self.persistent = persistent
        self.optimizer = optimizer
        self.l1 = l1
        self.l2 = l2
        self.score_chains = score_chains
        self.score_betas = score_betas
        self.device = device
        self.dtype = dtype
        self.visible_init = visible_init
        self.beta = beta
        self.max_hidden = max_hidden

    def _check_params(self) -> None:
        super()._check_params()
        if self.max_hidden is not None:
            _check_int("max_hidden", self.max_hidden, 1)

    def _new_model(self, n_features: int, rng: np.random.RandomState):
        # Zero weights, one unit: no random initialization to draw.
        return InfiniteRBM(n_features, n_hidden=1, beta=self.beta, max_hidden=self.max_hidden,
                           dtype=self._torch_dtype, device=self._device)

    def _empty_model(self, n_features, n_hidden, dtype=None):
        cap = None if self.max_hidden is None else max(int(self.max_hidden), n_hidden)
        return InfiniteRBM(n_features, n_hidden=n_hidden, beta=self.beta, max_hidden=cap,
                           dtype=dtype or self._torch_dtype, device=self._device)


def _fill_docstrings() -> None:
    for estimator, size_note in ((BernoulliRBM, " (= n_components)"),
                                 (OrderedBernoulliRBM, " (= n_components)"),
                                 (InfiniteBernoulliRBM, ", learned by the iRBM")):
        if estimator.__doc__ is None:  # python -OO
            continue
        estimator.__doc__ = estimator.__doc__.format(
            common=_COMMON_PARAMETERS.strip("\n").lstrip(),
            inputs=_INPUTS.strip("\n").lstrip(), scoring=_SCORING.strip("\n").lstrip(),
            attributes=_ATTRIBUTES.format(size_note=size_note).strip("\n").lstrip())


_fill_docstrings()
