"""scikit-learn estimators for the RBM, the ordered RBM and the infinite RBM.

`BernoulliRBM` is a drop-in replacement for `sklearn.neural_network.BernoulliRBM` (same
constructor arguments and defaults); `OrderedBernoulliRBM` and `InfiniteBernoulliRBM` add the
ordered RBM and the infinite RBM of Cote & Larochelle. All three are transformers that work in
`Pipeline`, `GridSearchCV`, `clone` and pickle, train with `irbm.Trainer`, and score with the
log-likelihood (exact or AIS) rather than scikit-learn's pseudo-likelihood.

    from irbm.sklearn import BernoulliRBM          # instead of sklearn.neural_network

`EXPECTED_FAILED_CHECKS` names the checks of `sklearn.utils.estimator_checks` that feed values
above 1, which a binary model refuses by design:

    check_estimator(BernoulliRBM(), expected_failed_checks=EXPECTED_FAILED_CHECKS)
"""

from ._estimators import BernoulliRBM, InfiniteBernoulliRBM, OrderedBernoulliRBM

__all__ = ["BernoulliRBM", "OrderedBernoulliRBM", "InfiniteBernoulliRBM", "EXPECTED_FAILED_CHECKS"]

_OUT_OF_RANGE = ("generates X with values above 1, which the estimator refuses by design (a "
                 "binary model's inputs lie in [0, 1]); irbm's tests run it on inputs squashed "
                 "into [0, 1], where it passes")
# {check name: reason}, as check_estimator's and parametrize_with_checks' expected_failed_checks
# take it.
EXPECTED_FAILED_CHECKS = dict.fromkeys((
    "check_estimators_dtypes", "check_estimators_fit_returns_self",
    "check_readonly_memmap_input", "check_pipeline_consistency",
    "check_estimators_overwrite_params", "check_estimators_pickle",
    "check_f_contiguous_array_estimator", "check_transformer_data_not_an_array",
    "check_transformer_general", "check_transformer_preserve_dtypes",
    "check_methods_sample_order_invariance", "check_methods_subset_invariance",
    "check_fit2d_1sample", "check_fit2d_1feature", "check_dict_unchanged",
    "check_dont_overwrite_parameters", "check_fit_idempotent", "check_fit_check_is_fitted",
    "check_n_features_in", "check_n_features_in_after_fitting", "check_fit2d_predict1d",
), _OUT_OF_RANGE)
