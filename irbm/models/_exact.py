"""Models at full size whose ln Z is exact: block-diagonal couplings.

Enumeration gives ln Z only for tiny models, and tiny models do not show what fails at size
(precision, batching, bookkeeping). Here the visible units are cut into blocks of at most
``block_size`` units and hidden unit i connects only to block i mod B. Given how many units
take part (z, or all of them for the RBM), v factorizes over the blocks:

    Z_z = prod_b sum_{v_b} exp(c_b^T v_b + sum_{i<=z, i in b} softplus(W_i,b v_b + b_i)),

each factor a sum over at most 2^block_size states. The RBM's ln Z is ln Z_K; the ordered RBM's
is logsumexp_z [ln Z_z - beta sum_{i<=z} softplus(b_i)]; the infinite RBM adds its tail,
Z_l e^{-penalty(l)} r / (1 - r) with r = 2^{1 - beta}. Hidden units are interleaved over the
blocks, so every prefix of units (every z) touches all of v, as in a trained model.

The formulas are written here from the definitions, not through the families' code, so the
models test that code. They are easy to anneal (the difficulty of trained models is their
coupling across the whole image), so they catch defects, not slow mixing.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional

from ._base import binary_configurations
from ._registry import family_class


def block_diagonal(family: str, n_visible: int = 784, n_hidden: int = 2000, *,
                   block_size: int = 16, weight_std: float = 2.5, hidden_bias_mean: float = -2.0,
                   seed: int = 0, dtype=torch.float32, device=None, **options):
    """(model, exact ln Z): a ``family`` model with block-diagonal W and random parameters.

    Parameters
    ----------
    family : str
        A registered family whose energy is the RBM's, the ordered RBM's or the infinite RBM's.
    n_visible, n_hidden : int
    block_size : int
        Visible units per block (at most 20: each block is enumerated).
    weight_std : float
        Standard deviation of the non-zero weights (trained CalTech101 models: about 1-3).
    hidden_bias_mean : float
        Mean of the hidden biases b ~ N(mean, 1); visible biases c ~ N(0, 1).
    seed : int
    dtype, device : of the returned model; ln Z is computed in float64 on the CPU.
    **options : family options (``beta``).

    Returns
    -------
    model : EnergyModel with W (n_hidden, n_visible) zero outside the blocks.
    log_partition : float, exact ln Z.
    """
    if not 1 <= block_size <= 20:
        raise ValueError(f"block_size must lie in 1..20 (each block is enumerated), got "
                         f"{block_size}")
    generator = torch.Generator().manual_seed(seed)
    blocks = [torch.arange(start, min(start + block_size, n_visible))
              for start in range(0, n_visible, block_size)]
    owner = torch.arange(n_hidden) % len(blocks)  # block of each hidden unit
    weights = torch.zeros(n_hidden, n_visible, dtype=torch.float64)
    for unit in range(n_hidden):
        columns = blocks[int(owner[unit])]
        weights[unit, columns] = torch.randn(len(columns), generator=generator,
                                             dtype=torch.float64) * weight_std
    hidden_bias = torch.randn(n_hidden, generator=generator, dtype=torch.float64) \
        + hidden_bias_mean
    visible_bias = torch.randn(n_visible, generator=generator, dtype=torch.float64)
    model = family_class(family)(n_visible, n_hidden, dtype=dtype, device=device, **options)
    with torch.no_grad():
        for name, value in (("W", weights), ("b", hidden_bias), ("c", visible_bias)):
            getattr(model, name).copy_(value.to(dtype))
    # ln Z from the parameters as stored (rounded to dtype), so the answer is the model's.
    exact = _log_partition(model, [weights.to(dtype).double(), hidden_bias.to(dtype).double(),
                                   visible_bias.to(dtype).double()], blocks, owner)
    return model, exact


def _prefix_log_partitions(weights, hidden_bias, visible_bias, blocks, owner) -> torch.Tensor:
    """ln Z_z of the RBM on the first z hidden units, z = 0..K, shape (K + 1,), float64."""
    n_hidden = weights.shape[0]
    # per_block[b][k]: ln sum_{v_b} exp(c_b^T v_b + the first k units of block b), k = 0..n_b.
    per_block, enumerations = [], {}
    for index, columns in enumerate(blocks):
        if len(columns) not in enumerations:
            enumerations[len(columns)] = torch.cat(list(binary_configurations(len(columns))))
        states = enumerations[len(columns)]
        units = torch.nonzero(owner == index).flatten()
        gains = functional.softplus(states @ weights[units][:, columns].t() + hidden_bias[units])
        log_terms = torch.cat([torch.zeros(states.shape[0], 1, dtype=torch.float64),
                               gains.cumsum(1)], 1) + (states @ visible_bias[columns]).unsqueeze(1)
        per_block.append(torch.logsumexp(log_terms, 0))
    # Walk z up: unit z - 1 joins its block, replacing that block's factor.
    taken = [0] * len(blocks)
    total = sum(float(terms[0]) for terms in per_block)
    prefixes = [total]
    for unit in range(n_hidden):
        block = int(owner[unit])
        total += float(per_block[block][taken[block] + 1] - per_block[block][taken[block]])
        taken[block] += 1
        prefixes.append(total)
    return torch.tensor(prefixes, dtype=torch.float64)


def _log_partition(model, parameters, blocks, owner) -> float:
    """Exact ln Z of a block-diagonal model of the RBM, ordered or infinite family."""
    weights, hidden_bias, visible_bias = parameters
    prefixes = _prefix_log_partitions(weights, hidden_bias, visible_bias, blocks, owner)
    if not getattr(model, "has_z", False):
        return float(prefixes[-1])
    beta = float(model.beta)
    penalties = torch.cumsum(beta * functional.softplus(hidden_bias), 0)
    columns = prefixes[1:] - penalties  # z = 1..K
    if getattr(model, "has_tail", False):
        log_r = (1.0 - beta) * math.log(2.0)
        columns = torch.cat([columns, columns[-1:] + log_r - math.log(-math.expm1(log_r))])
    return float(torch.logsumexp(columns, 0))
