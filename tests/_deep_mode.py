"""A model whose mass sits in one deep basin that chains from the data never enter."""

import torch

import irbm


def deep_mode_model(family: str):
    """20 visible and 10 hidden units, float64: every hidden unit on is a deep mode (G -11.3
    against -2.5 at h = 0) behind a barrier (G 12.6 with one unit on; the hidden units need 9
    of the first 10 visible units on, each on with probability 0.12 when h = 0). Chains from
    zero rows never leave h = 0; descents from random hidden vectors with 3 or more units on
    end in the mode."""
    model = (irbm.RBM(20, 10, dtype=torch.float64) if family == "rbm" else
             irbm.OrderedRBM(20, 10, beta=1.2, dtype=torch.float64) if family == "orbm" else
             irbm.InfiniteRBM(20, n_hidden=10, beta=1.3, dtype=torch.float64))
    with torch.no_grad():
        model.W.zero_()[:, :10] = 3.0
        model.b.fill_(-27.0)
        model.c.fill_(-2.0)
    return model
