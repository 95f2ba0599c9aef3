"""A counter-based uniform stream: Philox4x32-10 (Salmon, Moraes, Dror & Shaw 2011).

Block n of the stream is Philox(counter = n, key = seed): four 32-bit words that are a pure
function of (seed, n). A draw of shape (N, D) takes N * ceil(D / 4) consecutive blocks, row r
starting at block ``first + r * ceil(D / 4)``, so any row can be generated on its own: a
compiled kernel that splits rows over threads produces the same numbers as this file's PyTorch
reference, whatever the thread count. The whole state is (seed, next block): two integers,
checkpointed in a few bytes.
"""

from __future__ import annotations

import math
import numbers

import torch

MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)
KEY_STEPS = (0x9E3779B9, 0xBB67AE85)
ROUNDS = 10
WORDS = 4
MASK = 0xFFFFFFFF


def blocks_per_row(n_columns: int) -> int:
    """Blocks one row of ``n_columns`` draws takes: ceil(n_columns / 4)."""
    return (n_columns + WORDS - 1) // WORDS


def philox_words(counters: torch.Tensor, key: tuple[int, int]) -> torch.Tensor:
    """Philox4x32-10 of 64-bit block counters (n,) int64 with words (low, high, 0, 0) and a
    32-bit key pair, shape (n, 4) int64 holding 32-bit words.

    Products of two 32-bit words fit in 64 bits; torch's int64 arithmetic wraps modulo 2^64,
    so the masked high and low halves are exact on every device.
    """
    c0, c1 = counters & MASK, (counters >> 32) & MASK
    c2, c3 = torch.zeros_like(counters), torch.zeros_like(counters)
    k0, k1 = key
    for _ in range(ROUNDS):
        p0, p1 = c0 * MULTIPLIERS[0], c2 * MULTIPLIERS[1]
        c0, c1, c2, c3 = (((p1 >> 32) & MASK) ^ c1 ^ k0, p1 & MASK,
                          ((p0 >> 32) & MASK) ^ c3 ^ k1, p0 & MASK)
        k0, k1 = (k0 + KEY_STEPS[0]) & MASK, (k1 + KEY_STEPS[1]) & MASK
    return torch.stack([c0, c1, c2, c3], 1)


def words_to_uniform(words: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """32-bit words to U[0, 1) in ``dtype``: the top m bits, m the dtype's significand (24 for
    float32, 11 for float16, 8 for bfloat16; all 32 for float64), so every value is exact and
    below 1 (rounding a finer uniform could give 1.0, or inf in float16 on the way)."""
    if not dtype.is_floating_point:
        raise ValueError(f"uniforms are drawn in a floating-point dtype, not {dtype}")
    bits = min(round(-math.log2(torch.finfo(dtype).eps)) + 1, 32)
    # Integers below 2^24 and their scaling are exact in float32 (no float64 on some devices).
    exact = torch.float64 if bits > 24 else torch.float32
    return (words >> (32 - bits)).to(exact).mul_(2.0**-bits).to(dtype)


class PhiloxGenerator:
    """Uniform draws from a counter-based stream; pass it wherever irbm takes a generator.

    The families' sampling methods run compiled, fused kernels (``irbm.kernels``) when given
    this generator on the CPU, and the same stream through PyTorch elsewhere (the reference
    the kernels are tested against).

    Parameters
    ----------
    seed : int, 0 <= seed < 2^64
        The key: two 32-bit words.
    device : torch.device or str
        Where `uniform` puts its draws by default.
    """

    def __init__(self, seed: int = 0, device="cpu"):
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or \
                not 0 <= seed < 2**64:
            raise ValueError(f"seed must be an integer in [0, 2^64), got {seed!r}")
        self.key = (int(seed) & MASK, (int(seed) >> 32) & MASK)
        self.position = 0  # next unused block
        self.device = torch.device(device)

    def manual_seed(self, seed: int) -> PhiloxGenerator:
        self.__init__(seed, self.device)
        return self

    def take(self, n_rows: int, n_columns: int) -> int:
        """Reserve the blocks of an (n_rows, n_columns) draw; returns its first block."""
        first = self.position
        self.position += n_rows * blocks_per_row(n_columns)
        if self.position >= 2**63:
            raise OverflowError("the Philox stream is exhausted (2^63 blocks)")
        return first

    def uniform(self, shape, dtype=torch.float32, device=None) -> torch.Tensor:
        """U[0, 1) draws of ``shape`` (N, D) or (N,), from the next blocks (the reference
        implementation: the kernels draw the same numbers)."""
        shape = tuple(shape)
        n_rows, n_columns = (shape[0], 1) if len(shape) == 1 else shape
        per_row = blocks_per_row(n_columns)
        device = self.device if device is None else torch.device(device)
        counters = torch.arange(n_rows * per_row, device=device) + self.take(n_rows, n_columns)
        words = philox_words(counters, self.key).reshape(n_rows, per_row * WORDS)
        return words_to_uniform(words[:, :n_columns], dtype).reshape(shape)

    def permutation(self, n: int, device=None) -> torch.Tensor:
        """A uniformly random permutation of 0..n-1 (LongTensor (n,)): the order of n float64
        draws (32 random bits each; a tie, probability below n^2 / 2^33, keeps index order)."""
        return torch.argsort(self.uniform((n,), torch.float64, device), stable=True)

    def get_state(self) -> torch.Tensor:
        """(key low, key high, next block) as an int64 tensor (3,)."""
        return torch.tensor([*self.key, self.position], dtype=torch.int64)

    def set_state(self, state: torch.Tensor) -> PhiloxGenerator:
        state = torch.as_tensor(state)
        if state.shape != (3,) or state.dtype != torch.int64 or (state < 0).any() or \
                (state[:2] > MASK).any():
            raise ValueError("a Philox state is an int64 tensor (key low, key high, next block)")
        self.key, self.position = (int(state[0]), int(state[1])), int(state[2])
        return self
