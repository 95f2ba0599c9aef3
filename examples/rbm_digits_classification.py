"""RBM features for digit classification: scikit-learn's example with irbm's estimators.

Reproduces scikit-learn's example "Restricted Boltzmann Machine features for digit
classification" (examples/neural_networks/plot_rbm_logistic_classification.py) with its data,
split and hyper-parameters: the 8x8 digits, each also shifted by one pixel in four directions,
min-max scaled to [0, 1]; 80/20 split (random_state=0); an RBM with 100 hidden units,
learning_rate=0.06, n_iter=10, random_state=0, followed by a logistic regression with C=6000; and
the logistic regression on raw pixels (C=100) as the baseline. The RBM step is, in turn,
scikit-learn's BernoulliRBM and irbm's BernoulliRBM, OrderedBernoulliRBM and InfiniteBernoulliRBM
(which has no n_components: it learns its size).

One change: the example's LogisticRegression(solver="newton-cg", tol=1) stops after zero
iterations under scikit-learn 1.9 (chance accuracy), so the default tol is used.

Prints a Markdown table of test accuracy, macro F1, the RBM's fit time and the whole pipeline's
fit time (RBM then logistic regression) from one run.

    OMP_NUM_THREADS=1 python examples/rbm_digits_classification.py
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from scipy.ndimage import convolve
from sklearn import datasets, metrics
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.neural_network import BernoulliRBM as SklearnBernoulliRBM
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import minmax_scale

from irbm.sklearn import BernoulliRBM, InfiniteBernoulliRBM, OrderedBernoulliRBM

SHIFTS = ([[0, 1, 0], [0, 0, 0], [0, 0, 0]], [[0, 0, 0], [1, 0, 0], [0, 0, 0]],
          [[0, 0, 0], [0, 0, 1], [0, 0, 0]], [[0, 0, 0], [0, 0, 0], [0, 1, 0]])


def nudged_digits():
    """The digits and their four one-pixel shifts (5 x 1,797 images), scaled to [0, 1]."""
    X, y = datasets.load_digits(return_X_y=True)
    X = np.asarray(X, "float32")

    def shift(image, kernel):
        return convolve(image.reshape(8, 8), mode="constant", weights=kernel).ravel()

    X = np.concatenate([X] + [np.apply_along_axis(shift, 1, X, kernel) for kernel in SHIFTS])
    y = np.concatenate([y] * (1 + len(SHIFTS)))
    return minmax_scale(X, feature_range=(0, 1)), y


def feature_extractors(n_iter: int, seed: int) -> dict:
    common = {"learning_rate": 0.06, "n_iter": n_iter, "random_state": seed}
    return {
        "scikit-learn BernoulliRBM": SklearnBernoulliRBM(n_components=100, **common),
        "irbm BernoulliRBM": BernoulliRBM(n_components=100, **common),
        "irbm OrderedBernoulliRBM": OrderedBernoulliRBM(n_components=100, **common),
        "irbm InfiniteBernoulliRBM": InfiniteBernoulliRBM(**common),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-iter", type=int, default=10, help="RBM epochs (example: 10)")
    parser.add_argument("--seed", type=int, default=0, help="random_state of the RBMs")
    args = parser.parse_args(argv)

    X, y = nudged_digits()
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=0)

    rows = []
    candidates = {**feature_extractors(args.n_iter, args.seed), "raw pixels (no RBM)": None}
    for name, rbm in candidates.items():
        logistic = LogisticRegression(solver="newton-cg", C=6000.0 if rbm is not None else 100.0)
        start = time.perf_counter()
        if rbm is None:
            model, rbm_seconds = logistic.fit(X_train, y_train), 0.0
        else:
            # What Pipeline.fit does, timed step by step: fit_transform, then the classifier.
            features = rbm.fit_transform(X_train)
            rbm_seconds = time.perf_counter() - start
            logistic.fit(features, y_train)
            model = Pipeline([("rbm", rbm), ("logistic", logistic)])
        seconds = time.perf_counter() - start
        predicted = model.predict(X_test)
        # scikit-learn's BernoulliRBM has no n_components_; the iRBM has no n_components.
        units = ("-" if rbm is None else
                 str(rbm.n_components_ if hasattr(rbm, "n_components_") else rbm.n_components))
        rows.append((name, units, metrics.accuracy_score(y_test, predicted),
                     metrics.f1_score(y_test, predicted, average="macro"), rbm_seconds, seconds))
        print(f"done: {name} ({seconds:.1f} s)", flush=True)

    print()
    print(f"Digits nudged x5 ({len(X_train)} train / {len(X_test)} test); RBMs: 100 hidden "
          f"units (the iRBM learns its number), learning_rate 0.06, {args.n_iter} epochs, "
          f"random_state {args.seed}; logistic regression C=6000 on RBM features, C=100 on raw "
          f"pixels; one run, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}.")
    print()
    print("| features | hidden units | accuracy | macro F1 | RBM fit (s) | pipeline fit (s) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, units, accuracy, f1, rbm_seconds, seconds in rows:
        rbm_time = "-" if units == "-" else f"{rbm_seconds:.1f}"
        print(f"| {name} | {units} | {accuracy:.4f} | {f1:.4f} | {rbm_time} | {seconds:.1f} |")


if __name__ == "__main__":
    main()
