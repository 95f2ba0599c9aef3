"""scikit-learn estimators for the RBM, the ordered RBM and the infinite RBM.

`BernoulliRBM` is a drop-in replacement for `sklearn.neural_network.BernoulliRBM` (same
constructor arguments and defaults); `OrderedBernoulliRBM` and `InfiniteBernoulliRBM` add the
ordered RBM and the infinite RBM of Cote & Larochelle. All three are transformers that work in
`Pipeline`, `GridSearchCV`, `clone` and pickle, train with `irbm.Trainer`, and score with the
log-likelihood (exact or AIS) rather than scikit-learn's pseudo-likelihood.

    from irbm.sklearn import BernoulliRBM          # instead of sklearn.neural_network
"""

from ._estimators import BernoulliRBM, InfiniteBernoulliRBM, OrderedBernoulliRBM

__all__ = ["BernoulliRBM", "OrderedBernoulliRBM", "InfiniteBernoulliRBM"]
