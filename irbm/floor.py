"""Free energies of many rows, and the certain floor of ln Z they give.

Z sums exp(-F(v)) over every visible vector, and exp(-G(h)) over every hidden vector (G sums
the visible units, and z, out: `EnergyModel.hidden_free_energy`), so the sum over any set of
distinct vectors of either layer is a lower bound of Z that no spread of AIS weights can fool.
`sampled_log_partition_floor` takes those vectors from Gibbs chains run from the data and from
the minima of G that descents from random hidden vectors reach.
"""

from __future__ import annotations

import math

import numpy as np
import torch

# What `from irbm.floor import *` gives, and the module's public names.
__all__ = ["free_energies", "sampled_log_partition_floor", "log_partition_floor", "FLOOR_STEPS"]

# Gibbs steps of the floor's chains in a bracket (`irbm.evaluate.bracket_nll`).
FLOOR_STEPS = 300
# Starts descended together (`EnergyModel.descend_hidden`), and the most values (rows x units)
# in one block of single flips of their minima.
DESCENT_BATCH = 1000
NEIGHBOUR_VALUES = 2**26


def free_energies(model, data, *, batch_size: int = 4096, layer: str = "visible"
                  ) -> torch.Tensor:
    """F(v_n) for every row of ``data`` (N, n_visible), as a float64 tensor of shape (N,), or
    with ``layer="hidden"`` G(h_n) for rows (N, n_hidden) (`EnergyModel.hidden_free_energy`).

    Rows are validated (binary, right width) and evaluated ``batch_size`` at a time, so a large
    uint8 data set is never converted to the model's dtype all at once.
    """
    if int(batch_size) < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if layer not in ("visible", "hidden"):  # any other word gave the visible F, silently
        raise ValueError(f'layer must be "visible" or "hidden", got {layer!r}')
    if not isinstance(data, torch.Tensor):
        data = torch.as_tensor(data)
    if data.dim() != 2 or data.shape[0] == 0:
        width = model.n_hidden if layer == "hidden" else model.n_visible
        raise ValueError(f"data must have shape (N, {width}) with N >= 1, "
                         f"got {tuple(data.shape)}")
    parts = []
    with torch.no_grad():
        for start in range(0, data.shape[0], int(batch_size)):
            rows = data[start:start + int(batch_size)]
            parts.append((model.hidden_free_energy(rows) if layer == "hidden" else
                          model.free_energy(rows)).double().cpu())
    return torch.cat(parts)


def log_partition_floor(free: torch.Tensor) -> float:
    """ln sum_v exp(-F(v)) from the free energies (N,) of DISTINCT visible (or hidden) vectors:
    a certain lower bound of ln Z (Z sums exp(-F(v)) over every v)."""
    return float(torch.logsumexp(-free.double(), 0))


class _DistinctSum:
    """ln sum exp(-F(x)) over the distinct binary rows x added so far, without keeping them.

    Rows are told apart by a 64-bit hash of their packed bits (`_row_hashes`): two equal rows
    always share it, so none is counted twice; two different rows that collide lose one of
    them, which can only lower the sum. So the sum stays a certain lower bound (up to float64
    rounding), in memory of a hash per row.
    """

    def __init__(self, model, layer: str, batch_size: int):
        # F and G in float64 whatever the model's dtype: a sum rounded up is no floor (in
        # bfloat16 a 301-unit oRBM's G was off by 1e-2 nats).
        self.model, self.layer, self.batch_size = model.as_float64(), layer, batch_size
        self.seen: set[int] = set()
        self.log_sum = -math.inf

    def add(self, rows: torch.Tensor) -> None:
        """Count the rows (M, width) of 0/1 values not seen before. The values are not checked
        (the callers pass validated data and chain states): other values would be hashed as
        0/1 but evaluated as they are."""
        keys, first = np.unique(_row_hashes(rows), return_index=True)
        fresh = [(key, index) for key, index in zip(keys.tolist(), first.tolist())
                 if key not in self.seen]
        if fresh:
            self.seen.update(key for key, _ in fresh)
            new = torch.as_tensor(sorted(index for _, index in fresh), device=rows.device)
            with self.model.trusted_inputs():  # chain states and checked data: binary
                free = free_energies(self.model, rows[new], batch_size=self.batch_size,
                                     layer=self.layer)
            self.log_sum = float(np.logaddexp(self.log_sum, log_partition_floor(free)))


# splitmix64's constants (Steele, Lea & Flood 2014): a word is mixed into the running hash
# with a multiply-xorshift finalizer, all in numpy's wrapping uint64 arithmetic.
_GOLDEN, _MIX_1, _MIX_2 = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9),
                           np.uint64(0x94D049BB133111EB))


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, elementwise: a bijection of uint64 that spreads every input bit
    over the output (so rows of one 64-bit word never collide)."""
    x = (x ^ (x >> np.uint64(30))) * _MIX_1
    x = (x ^ (x >> np.uint64(27))) * _MIX_2
    return x ^ (x >> np.uint64(31))


def _row_hashes(rows: torch.Tensor) -> np.ndarray:
    """A 64-bit hash (M,) of each 0/1 row of ``rows`` (M, width), equal for equal rows: its
    bits packed into 64-bit words, mixed in one after another (vectorized over the rows, where
    hashing each row's bytes in Python cost about 1 us a row)."""
    packed = np.packbits(rows.to(torch.uint8).cpu().numpy(), axis=1)
    words = np.zeros((packed.shape[0], -(-packed.shape[1] // 8) * 8), np.uint8)
    words[:, :packed.shape[1]] = packed
    words = words.view(np.uint64)
    # Each word enters after the hash so far is multiplied, so the same words in another order
    # hash differently; the start (the word count) is the same for every row of a call.
    hashes = np.full(words.shape[0], np.uint64(words.shape[1]), np.uint64)
    for column in range(words.shape[1]):
        hashes = _mix(hashes * _GOLDEN ^ _mix(words[:, column] + _GOLDEN))
    return hashes


def sampled_log_partition_floor(model, data, *, n_chains: int = 500, n_steps: int = 200,
                                seed: int | None = 0, batch_size: int = 4096,
                                descents: int = 0) -> float:
    """max(ln sum_{v in S} exp(-F(v)), ln sum_{h in T} exp(-G(h))): S = the distinct rows of
    ``data`` (N, n_visible) and every state visited by ``n_chains`` Gibbs chains run ``n_steps``
    steps from its lowest-F rows, T = the distinct hidden vectors those chains drew, and with
    ``descents`` the local minima of G reached from that many uniform random hidden vectors
    (`EnergyModel.descend_hidden`) with every single flip of them.

    Each sum is a certain lower bound of ln Z whatever the chains do (only F or G and
    distinctness matter), and both are far tighter than the data's alone when the model holds
    mass the data does not reach: on a trained MNIST iRBM, AIS gave ln Z 106.9 with uniform
    weights at every schedule and base, above the test rows' floor (105.8) but 8 nats below the
    visible states' (115.3). The hidden sum wins where the model's mass sits on few hidden
    vectors: on the CalTech101 RBM-100 (`results/models/rbm100-adagrad-e1000`) 4,000 chains x
    300 steps give 2242.77, 2.45 nats above AIS's pooled ln Z at 128,000 temperatures and 51
    above the visible sum. Where the mass sits in deep, narrow basins that chains from the data
    rarely enter, descents find them: on the RBM-100 at 5,000 epochs
    (`results/models/rbm100-adagrad-selected`) 2,000 chains gave 2534.99, with 1,000 descents
    2546.05 and with 10,000 2546.10, where 128,000 chains gave 2546.06; on the 500- and
    2,000-unit RBMs descents stay below the chains' sum.
    """
    if isinstance(descents, bool) or int(descents) != descents or descents < 0:
        raise ValueError(f"descents must be a number >= 0, got {descents!r}")
    # None: a fresh random seed, as the estimators of ln Z take it (it failed in manual_seed).
    seed = int(torch.randint(0, 2**62, (1,))) if seed is None else int(seed)
    distinct = torch.unique(model.check_visible(torch.as_tensor(data)), dim=0)
    free = free_energies(model, distinct, batch_size=batch_size)
    lowest = torch.argsort(free)[:n_chains]  # cycled when there are fewer rows than chains
    lowest = lowest.repeat(-(-n_chains // lowest.numel()))[:n_chains]
    chains = distinct[lowest].to(device=model.device, dtype=model.dtype)
    generator = torch.Generator(device=model.device).manual_seed(seed)
    visible, hidden = (_DistinctSum(model, layer, batch_size) for layer in ("visible", "hidden"))
    visible.add(distinct)  # shares `seen` with the chains' states: a data row counts once
    with torch.no_grad(), model.trusted_inputs():  # the chains' own states: binary
        for _ in range(n_steps):
            chains, state = model.gibbs_step(chains, generator)
            visible.add(chains)
            hidden.add(state.h)
        for start in range(0, int(descents), DESCENT_BATCH):
            starts = torch.rand((min(DESCENT_BATCH, int(descents) - start), model.n_hidden),
                                generator=generator, device=model.device) < 0.5
            # Below float32 the descent's rounding stops short of minima (bfloat16: by up to
            # 2 nats); the floor's own sums are float64 either way.
            descending = model if model.dtype.itemsize >= 4 else hidden.model
            minima = descending.descend_hidden(starts.to(descending.dtype))
            hidden.add(minima)
            for neighbours in _single_flips(minima):
                hidden.add(neighbours)
    return max(visible.log_sum, hidden.log_sum)


def _single_flips(rows: torch.Tensor):
    """Every row at Hamming distance 1 from a row of ``rows`` (M, K), M K rows in all, in
    blocks of at most NEIGHBOUR_VALUES values (a block may split one row's flips): a basin's
    mass around its minimum."""
    count, width = rows.shape
    per_block = max(1, NEIGHBOUR_VALUES // width)
    for start in range(0, count * width, per_block):
        flat = torch.arange(start, min(start + per_block, count * width), device=rows.device)
        block = rows[flat // width]  # a copy: advanced indexing
        index = torch.arange(flat.numel(), device=rows.device)
        block[index, flat % width] = 1 - block[index, flat % width]
        yield block
