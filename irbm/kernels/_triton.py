"""The fused sampling kernels on CUDA, in Triton: the same passes as `_compiled` (numba, CPU),
one program per row, drawing the same Philox stream (Triton's Philox4x32-10 with the block
counter's low and high words and the key as its seed is the stream of `irbm.kernels.philox`
word for word). Imported by `irbm.kernels` on the first CUDA tensor it is given, where Triton
is installed (it comes with PyTorch's CUDA wheels on Linux).

The eager path on a GPU is launch-bound: a PCD-10 update of an ordered model at 500 units ran
about 70 small kernels for 0.6 ms of products (12x their time on an H100); these kernels make
each Gibbs half-step one launch besides its product. Sizes are not specialized on (Triton
would compile a variant per divisibility class of every size an iRBM grows through); a kernel
is compiled once per power of two of the row's length and per dtype, then cached on disk.
"""

from __future__ import annotations

import contextlib
import struct

import torch
import triton
import triton.language as tl
from triton.language.random import philox

# As in `_compiled`: exp(x - max) is taken at max(x - max, -80); beyond |a| = 87 (float32) or
# 708 (float64) e^-|a| is taken as 0, where sigmoid(a) is 0 or 1 to rounding.
EXP_FLOOR = tl.constexpr(-80.0)


@triton.jit
def _real(bits, FLOAT64: tl.constexpr):
    """A float passed as its float64 bit pattern (Triton passes Python floats as float32,
    which would round float64 scales and flush float64's smallest normal number to 0), in
    the kernel's precision."""
    value = bits.to(tl.int64).to(tl.float64, bitcast=True)
    if not FLOAT64:  # a static branch: FLOAT64 is a compile-time constant
        value = value.to(tl.float32)
    return value


@triton.jit
def _uniforms(first_block, row, columns, per_row, seed, FLOAT64: tl.constexpr):
    """U[0, 1) of element ``columns`` of ``row`` in a draw starting at ``first_block``: word
    columns % 4 of block first_block + row * per_row + columns // 4 (the stream's layout),
    its top 24 bits in float32, all 32 in float64."""
    block = first_block + row.to(tl.int64) * per_row + (columns // 4).to(tl.int64)
    low = (block & 0xFFFFFFFF).to(tl.uint32)
    high = (block >> 32).to(tl.uint32)
    zero = tl.zeros_like(low)
    w0, w1, w2, w3 = philox(seed, low, high, zero, zero)
    lane = columns % 4
    word = tl.where(lane == 0, w0, tl.where(lane == 1, w1, tl.where(lane == 2, w2, w3)))
    if FLOAT64:
        uniform = word.to(tl.float64) * 2.3283064365386963e-10  # 2^-32
    else:
        uniform = (word >> 8).to(tl.float32) * 5.960464477539063e-08  # 2^-24
    return uniform


@triton.jit
def _decay(a, FLOAT64: tl.constexpr):
    """e^-|a| (N, K), 0 where e^|a| overflows."""
    if FLOAT64:
        limit = 708.0
    else:
        limit = 87.0
    magnitude = tl.abs(a)
    return tl.where(magnitude <= limit, tl.exp(-tl.minimum(magnitude, limit)), 0.0)


@triton.jit
def _softplus_of(a, y):
    """softplus(a) = max(a, 0) + log1p(y) given y = e^-|a|; log1p(y) = ln(u) y / (u - 1) with
    u = 1 + y (Goldberg's correction: accurate where ln(1 + y) alone rounds to 0)."""
    u = 1.0 + y
    log1p = tl.where(u == 1.0, y, tl.log(u) * (y / (u - 1.0)))
    return tl.maximum(a, 0.0) + log1p


@triton.jit(do_not_specialize=["n_columns", "first_block", "per_row", "seed"])
def _bernoulli_kernel(logits, out, n_columns, first_block, per_row, seed,
                      FLOAT64: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    columns = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    valid = columns < n_columns
    offsets = row.to(tl.int64) * n_columns + columns
    x = tl.load(logits + offsets, mask=valid, other=0.0)
    u = _uniforms(first_block, row, columns, per_row, seed, FLOAT64)
    # u < sigmoid(x) from y = e^-|x|, as numba's kernels: u (1 + y) < 1 for x >= 0, u (1 + y)
    # < y below; y = 0 past the decay's limit leaves the unit off even for u = 0.
    y = _decay(x, FLOAT64)
    on = u * (1.0 + y) < tl.where(x >= 0.0, 1.0, y)
    tl.store(out + offsets, tl.where(on, 1.0, 0.0).to(x.dtype), mask=valid)


@triton.jit(do_not_specialize=["t_from", "t_to", "n_units", "first_block", "per_row", "seed"])
def _annealed_kernel(preactivation, t_from, t_to, hidden, gains, n_units, first_block, per_row,
                     seed, FLOAT64: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    t_from, t_to = _real(t_from, FLOAT64), _real(t_to, FLOAT64)
    total = tl.zeros([BLOCK], dtype=gains.dtype.element_ty)
    for start in range(0, n_units, BLOCK):
        columns = start + tl.arange(0, BLOCK)
        valid = columns < n_units
        offsets = row.to(tl.int64) * n_units + columns
        a = tl.load(preactivation + offsets, mask=valid, other=0.0)
        after, before = a * t_to, a * t_from
        y = _decay(after, FLOAT64)  # for softplus(after) and the sigmoid, as numba's kernel
        gain = _softplus_of(after, y) - _softplus_of(before, _decay(before, FLOAT64))
        total += tl.where(valid, gain, 0.0)
        u = _uniforms(first_block, row, columns, per_row, seed, FLOAT64)
        on = u * (1.0 + y) < tl.where(after >= 0.0, 1.0, y)
        tl.store(hidden + offsets, tl.where(on, 1.0, 0.0).to(a.dtype), mask=valid)
    tl.store(gains + row, tl.sum(total, 0))


@triton.jit
def _ordered_columns(preactivation, scale, penalties, log_tail, row, n_units,
                     HAS_TAIL: tl.constexpr, FLOAT64: tl.constexpr, BLOCK: tl.constexpr):
    """A row's z columns (the log weights of z = 1..K and of the tail), exponentiated from
    their maximum, with a = scale * the row's preactivation and the tail's log weight read
    from the pointer ``log_tail``: (a, y = e^-|a|, e (BLOCK,), cdf (BLOCK,), total, top,
    in_use (BLOCK,): the columns that exist)."""
    index = tl.arange(0, BLOCK)
    valid = index < n_units
    a = tl.load(preactivation + row.to(tl.int64) * n_units + index, mask=valid, other=0.0)
    a = a * scale
    y = _decay(a, FLOAT64)
    penalty = tl.load(penalties + index, mask=valid, other=0.0)
    columns = tl.cumsum(tl.where(valid, _softplus_of(a, y) - penalty, 0.0), 0)
    last = tl.max(tl.where(index == n_units - 1, columns, float("-inf")), 0)
    in_use = valid
    if HAS_TAIL:
        columns = tl.where(index == n_units, last + tl.load(log_tail), columns)
        in_use = index <= n_units
    columns = tl.where(in_use, columns, float("-inf"))
    top = tl.max(columns, 0)
    e = tl.where(in_use, tl.exp(tl.maximum(columns - top, EXP_FLOOR)), 0.0)
    cdf = tl.cumsum(e, 0)
    total = tl.max(cdf, 0)  # the last: e >= 0
    return a, y, e, cdf, total, top, in_use


@triton.jit(do_not_specialize=["scale", "n_units", "z_block", "hidden_block", "per_row",
                                "seed"])
def _ordered_kernel(preactivation, scale, penalties, log_tail, z, hidden, log_sum, n_units,
                    z_block, hidden_block, per_row, seed, HAS_TAIL: tl.constexpr,
                    DRAW_Z: tl.constexpr, DRAW_H: tl.constexpr, FLOAT64: tl.constexpr,
                    BLOCK: tl.constexpr):
    row = tl.program_id(0)
    a, y, e, cdf, total, top, in_use = _ordered_columns(
        preactivation, _real(scale, FLOAT64), penalties, log_tail, row, n_units, HAS_TAIL,
        FLOAT64, BLOCK)
    tl.store(log_sum + row, top.to(tl.float64) + tl.log(total.to(tl.float64)))
    if DRAW_H:
        index = tl.arange(0, BLOCK)
        if DRAW_Z:
            u = tl.sum(tl.where(index == 0, _uniforms(z_block, row, index, 1, seed, FLOAT64),
                                0.0), 0)
            # The first column whose CDF reaches (1 - u) total (the CDF is non-decreasing).
            chosen = tl.sum(tl.where(in_use & (cdf < (1.0 - u) * total), 1, 0), 0) + 1
            tl.store(z + row, chosen.to(tl.int64))
        else:
            chosen = tl.load(z + row)
        uniform = _uniforms(hidden_block, row, index, per_row, seed, FLOAT64)
        # u < sigmoid(a) from y: u (1 + y) < 1 for a >= 0, u (1 + y) < y below.
        on = (index < chosen) & (uniform * (1.0 + y) < tl.where(a >= 0.0, 1.0, y))
        tl.store(hidden + row.to(tl.int64) * n_units + index, tl.where(on, 1.0, 0.0).to(a.dtype),
                 mask=index < n_units)


@triton.jit(do_not_specialize=["n_units", "z_block", "seed"])
def _statistics_kernel(preactivation, penalties, log_tail, row_weights, z, weighted_hidden, kept,
                       tail, n_units, z_block, seed, tiny, HAS_TAIL: tl.constexpr,
                       FLOAT64: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    a, y, e, cdf, total, top, in_use = _ordered_columns(
        preactivation, 1.0, penalties, log_tail, row, n_units, HAS_TAIL, FLOAT64, BLOCK)
    index = tl.arange(0, BLOCK)
    survival = tl.cumsum(e, 0, reverse=True)  # the mass of columns i.. (small tails keep bits)
    weight = -tl.load(row_weights + row)
    kept_row = tl.minimum(survival / total, 1.0) * weight
    value = kept_row * (tl.where(a >= 0.0, 1.0, y) / (1.0 + y))
    offsets = row.to(tl.int64) * n_units + index
    valid = index < n_units
    tl.store(kept + offsets, kept_row, mask=valid)
    tl.store(weighted_hidden + offsets,
             tl.where(tl.abs(value) >= _real(tiny, FLOAT64), value, 0.0), mask=valid)
    if HAS_TAIL:
        tail_mass = tl.sum(tl.where(index == n_units, survival, 0.0), 0)
        tl.store(tail + row, tl.minimum(tail_mass / total, 1.0) * weight)
    u = tl.sum(tl.where(index == 0, _uniforms(z_block, row, index, 1, seed, FLOAT64), 0.0), 0)
    chosen = tl.sum(tl.where(in_use & (cdf < (1.0 - u) * total), 1, 0), 0) + 1
    tl.store(z + row, chosen.to(tl.int64))


# ---------------------------------------------------------------------- launchers
ROW_BLOCK = 1024  # columns per program of the elementwise kernels


def _bits(value) -> int:
    """A float's float64 bit pattern, as a signed 64-bit integer (see `_real`)."""
    return struct.unpack("<q", struct.pack("<d", float(value)))[0]


def _seed(generator) -> int:
    """The key as Triton's 64-bit Philox seed: low word k0, high word k1."""
    return generator.key[0] | (generator.key[1] << 32)


def _on(device: torch.device):
    """Triton launches on the current CUDA device, not on its tensors' (a model on cuda:1
    would run on GPU 0 with GPU 1's pointers): make theirs current. CPU tensors (Triton's
    interpreter, TRITON_INTERPRET=1) need nothing."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _tail(log_tail, like: torch.Tensor) -> torch.Tensor:
    """The tail's log weight as a 0-d tensor beside ``like`` (the kernels read it through a
    pointer: an iRBM's is a tensor on its device already, and turning it into a Python float
    would wait for the GPU at every call); None: a placeholder the kernel never reads."""
    if log_tail is None:
        return like
    return torch.as_tensor(log_tail, dtype=like.dtype, device=like.device)


def _row_block(n_columns: int) -> tuple[int, int]:
    """(BLOCK, num_warps) for one program holding a whole row of ``n_columns``."""
    block = max(triton.next_power_of_2(n_columns), 16)
    return block, min(max(block // 256, 1), 16)


def bernoulli_from_logits(logits, generator, out=None):
    out = torch.empty_like(logits) if out is None else out
    n_rows, n_columns = logits.shape
    first = generator.take(n_rows, n_columns)
    grid = (n_rows, triton.cdiv(n_columns, ROW_BLOCK))
    with _on(logits.device):
        _bernoulli_kernel[grid](logits, out, n_columns, first, (n_columns + 3) // 4,
                                _seed(generator), FLOAT64=logits.dtype == torch.float64,
                                BLOCK=ROW_BLOCK)
    return out


def annealed_bernoulli(preactivation, t_from, t_to, generator):
    n_rows, n_units = preactivation.shape
    hidden = torch.empty_like(preactivation)
    gains = torch.empty(n_rows, dtype=preactivation.dtype, device=preactivation.device)
    first = generator.take(n_rows, n_units)
    block = min(max(triton.next_power_of_2(n_units), 16), ROW_BLOCK)
    with _on(preactivation.device):
        _annealed_kernel[(n_rows,)](preactivation, _bits(t_from), _bits(t_to), hidden, gains,
                                    n_units, first, (n_units + 3) // 4, _seed(generator),
                                    FLOAT64=preactivation.dtype == torch.float64, BLOCK=block)
    return hidden, gains


def ordered_hidden(preactivation, penalties, log_tail, generator, z=None, scale=1.0):
    n_rows, n_units = preactivation.shape
    device = preactivation.device
    hidden = torch.empty_like(preactivation)
    log_sum = torch.empty(n_rows, dtype=torch.float64, device=device)
    draw_h, draw_z = generator is not None, z is None
    z = (torch.empty(n_rows, dtype=torch.int64, device=device) if draw_z
         else z.to(torch.int64).contiguous())
    z_block = generator.take(n_rows, 1) if draw_h and draw_z else 0
    hidden_block = generator.take(n_rows, n_units) if draw_h else 0
    block, warps = _row_block(n_units + 1)
    with _on(device):
        _ordered_kernel[(n_rows,)](
            preactivation, _bits(scale), penalties.to(preactivation.dtype).contiguous(),
            _tail(log_tail, preactivation), z, hidden, log_sum, n_units, z_block, hidden_block,
            (n_units + 3) // 4, _seed(generator) if draw_h else 0,
            HAS_TAIL=log_tail is not None, DRAW_Z=draw_z, DRAW_H=draw_h,
            FLOAT64=preactivation.dtype == torch.float64, BLOCK=block, num_warps=warps)
    return hidden, z, log_sum


def ordered_statistics(preactivation, penalties, log_tail, row_weights, generator):
    n_rows, n_units = preactivation.shape
    device, dtype = preactivation.device, preactivation.dtype
    weighted_hidden, kept = torch.empty_like(preactivation), torch.empty_like(preactivation)
    tail = torch.empty(n_rows, dtype=dtype, device=device)
    z = torch.empty(n_rows, dtype=torch.int64, device=device)
    z_block = generator.take(n_rows, 1)
    block, warps = _row_block(n_units + 1)
    with _on(device):
        _statistics_kernel[(n_rows,)](
            preactivation, penalties.to(dtype).contiguous(), _tail(log_tail, preactivation),
            row_weights.to(dtype).contiguous(), z, weighted_hidden, kept, tail, n_units, z_block,
            _seed(generator), _bits(torch.finfo(dtype).tiny), HAS_TAIL=log_tail is not None,
            FLOAT64=dtype == torch.float64, BLOCK=block, num_warps=warps)
    return weighted_hidden, kept, (tail if log_tail is not None else None), z
