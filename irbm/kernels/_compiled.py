"""Fused sampling kernels compiled with numba: one pass over each row of a (rows, units) block.

Each kernel draws its uniforms from the Philox stream inside the pass (`_row_uniforms`, the
layout of `irbm.kernels.philox`), so rows are independent and may run on any thread. float32
uses polynomial exp and softplus that LLVM vectorizes (numba calls libm's scalar functions
otherwise, about 8 times slower); float64 uses libm, for reference-grade accuracy.
Imported only when numba is installed (see `irbm.kernels`).
"""

from __future__ import annotations

import math
import os
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor, wait

import numba
import numpy as np
from numba import types
from numba.extending import overload

U64, F32 = np.uint64, np.float32
MASK, SHIFT = U64(0xFFFFFFFF), U64(32)
MULTIPLIER_0, MULTIPLIER_1 = U64(0xD2511F53), U64(0xCD9E8D57)
KEY_STEP_0, KEY_STEP_1 = U64(0x9E3779B9), U64(0xBB67AE85)
# exp(x) is taken as exp(max(x, EXP_FLOOR)) where x - max <= 0 is exponentiated: the eager
# path's clamp at -80 (subnormal results are ~10 times slower and below rounding anyway).
EXP_FLOOR = -80.0
TINY32, TINY64 = float(np.finfo(np.float32).tiny), float(np.finfo(np.float64).tiny)
# numba's own pedantic SSA check flags the inlined overloads below ("variable ... is not in
# scope") while compiling correct code; only that message, only for these functions, is muted.
warnings.filterwarnings("ignore", message=r".*_overload__locals.*is not in scope",
                        category=numba.core.errors.NumbaIRAssumptionWarning)
# The helpers called once per row (uniforms, prefix sums, search) are compiled once and called,
# not inlined into every kernel: a cold compile of all kernels took 48 s inlined, 17 s so, at
# the same speed. The elementwise maths (exp, softplus) is inlined: the loops vectorize on it.
# "numpy": no ZeroDivisionError check, which would keep LLVM from vectorizing the loops.
OPTIONS = {"error_model": "numpy", "cache": True, "nogil": True}


# ---------------------------------------------------------------------- random numbers
@numba.njit(inline="always", **OPTIONS)
def _philox(counter, k0, k1):
    """Philox4x32-10 of block ``counter`` (words low, high, 0, 0); uint64 holding 32 bits."""
    c0, c1, c2, c3 = counter & MASK, counter >> SHIFT, U64(0), U64(0)
    for _ in range(10):
        p0 = MULTIPLIER_0 * c0
        p1 = MULTIPLIER_1 * c2
        c0, c1, c2, c3 = (p1 >> SHIFT) ^ c1 ^ k0, p1 & MASK, (p0 >> SHIFT) ^ c3 ^ k1, p0 & MASK
        k0 = (k0 + KEY_STEP_0) & MASK
        k1 = (k1 + KEY_STEP_1) & MASK
    return c0, c1, c2, c3


def _to_uniform(word, like):
    pass


@overload(_to_uniform, inline="always")
def _to_uniform_overload(word, like):
    if like == types.float32:
        return lambda word, like: F32(np.int32(word >> U64(8))) * F32(2.0**-24)
    return lambda word, like: np.float64(word) * 2.0**-32


@numba.njit(**OPTIONS)
def _row_uniforms(out, first_block, k0, k1):
    """Fill ``out`` (4 * blocks,) with the uniforms of consecutive blocks from ``first_block``."""
    like = out[0]
    for block in range(out.shape[0] // 4):
        w0, w1, w2, w3 = _philox(U64(first_block + block), k0, k1)
        out[4 * block] = _to_uniform(w0, like)
        out[4 * block + 1] = _to_uniform(w1, like)
        out[4 * block + 2] = _to_uniform(w2, like)
        out[4 * block + 3] = _to_uniform(w3, like)


def uniforms(out, first_block, k0, k1):
    """(rows, 4 * blocks per row) uniforms from ``first_block`` on: the stream's layout."""
    _uniforms(out, np.int64(first_block), U64(k0), U64(k1))


@numba.njit(**OPTIONS)
def _uniforms(out, first_block, k0, k1):
    for row in range(out.shape[0]):
        _row_uniforms(out[row], first_block + row * (out.shape[1] // 4), k0, k1)


# ---------------------------------------------------------------------- elementwise maths
@numba.njit(inline="always", **OPTIONS)
def _exp32(x):
    """e^x for float32 x: x = k ln 2 + r, |r| <= ln 2 / 2, e^r by a degree-6 Taylor polynomial
    (relative error < 2.5e-7), 2^k written into the exponent bits; e^-87 below -87 (where
    libm returns subnormals, then 0: callers that need 0 there use `_decay`) and inf above
    88.37 (where the exponent bits would overflow into the sign)."""
    big = x > F32(88.37)
    x = min(max(x, F32(-87.0)), F32(88.37))
    # k and 2^k stay in float32 and int32: numba widens int32 arithmetic to int64, and AVX2
    # has no vector int64 -> float conversion, which kept part of each loop scalar (1.9 ns an
    # element against 0.8; benchmarks/bench_kernels.py). Exact: k + 128 is in [2, 255], and
    # (k + 127) 2^23 < 2^31 is a float32.
    kf = F32(np.int32(x * F32(1.4426950408889634) + F32(128.5))) - F32(128.0)
    r = x - kf * F32(0.693145751953125) - kf * F32(1.428606765330187e-06)
    p = F32(1.0) + r * (F32(1.0) + r * (F32(0.5) + r * (F32(0.16666667) + r * (
        F32(0.041666668) + r * (F32(0.008333334) + r * F32(0.0013888889))))))
    value = p * np.int32((kf + F32(127.0)) * F32(8388608.0)).view(np.float32)
    return F32(np.inf) if big else value


def _cast(value, like):
    pass


@overload(_cast, inline="always")
def _cast_overload(value, like):
    """``value`` in the type of ``like``: a bare Python number would promote float32 maths to
    float64 (and send exp to libm)."""
    if like == types.float32:
        return lambda value, like: np.float32(value)
    return lambda value, like: np.float64(value)


def _smallest_normal(like):
    pass


@overload(_smallest_normal, inline="always")
def _smallest_normal_overload(like):
    if like == types.float32:
        return lambda like: np.float32(TINY32)
    return lambda like: np.float64(TINY64)


def _exp(x):
    pass


@overload(_exp, inline="always")
def _exp_overload(x):
    if x == types.float32:
        return lambda x: _exp32(x)
    return lambda x: math.exp(x)


@numba.njit(inline="always", **OPTIONS)
def _softplus32(x):
    """ln(1 + e^x) = max(x, 0) + log1p(y), y = e^-|x| in (0, 1], with log1p(y) = 2 atanh(s),
    s = y / (2 + y) <= 1/3, by its series to s^13 (truncation below 1e-8; the result's relative
    error, about 2.5e-7, is the exp's). As fast as torch's softplus, and accurate for tiny y,
    where ln(1 + y) would round to 0."""
    return _softplus32_of(x, _exp32(-abs(x)))


@numba.njit(inline="always", **OPTIONS)
def _softplus32_of(x, y):
    """`_softplus32` given y = e^-|x|."""
    s = y / (F32(2.0) + y)
    s2 = s * s
    series = F32(1.0) + s2 * (F32(1 / 3) + s2 * (F32(0.2) + s2 * (F32(1 / 7) + s2 * (
        F32(1 / 9) + s2 * (F32(1 / 11) + s2 * F32(1 / 13))))))
    return max(x, F32(0.0)) + F32(2.0) * s * series


def _softplus(x):
    pass


def _decay(x):
    pass


@overload(_decay, inline="always")
def _decay_overload(x):
    """y = e^-|x|, and 0 where e^|x| overflows (|x| past 87 in float32, where `_exp32` clamps,
    past 708 in float64): there a zero uniform (2^-24 a draw in float32) leaves a unit of
    probability below e^-87 off. The eager path's sigmoid reaches 0 only at -88.7 (float32) and
    -745 (float64), so between there and these limits it turns such a unit on with a zero
    uniform: the one place, besides ties within rounding, where the two draw differently."""
    if x == types.float32:
        return lambda x: _exp32(-abs(x)) if abs(x) <= F32(87.0) else F32(0.0)
    return lambda x: math.exp(-abs(x)) if abs(x) <= 708.0 else 0.0


def _softplus_of(x, y):
    pass


@overload(_softplus_of, inline="always")
def _softplus_of_overload(x, y):
    """softplus(x) given y = e^-|x| (kept for the sigmoid that follows, which then needs no
    other exp)."""
    if x == types.float32:
        return lambda x, y: _softplus32_of(x, y)
    return lambda x, y: max(x, 0.0) + math.log1p(y)


@numba.njit(inline="always", **OPTIONS)
def _below_sigmoid(u, x, y):
    """u < sigmoid(x) without a division, from y = e^-|x|: u (1 + y) < 1 for x >= 0 (where
    e^-x = y), u (1 + y) < y below (e^-x = 1 / y)."""
    one = _cast(1.0, u)
    return u * (one + y) < (one if x >= _cast(0.0, x) else y)


@overload(_softplus, inline="always")
def _softplus_overload(x):
    if x == types.float32:
        return lambda x: _softplus32(x)
    return lambda x: max(x, 0.0) + math.log1p(math.exp(-abs(x)))


@numba.njit(**OPTIONS)
def _prefix_sum_max(x, n):
    """x[i] = x[0] + ... + x[i] in place for i < n; returns max_i x[i].

    Four segments run interleaved, then take the totals before them: a plain loop is bound
    by the latency of one add (and one compare for the max) per element, 2-3 times slower.
    """
    length = n // 4
    t0 = t1 = t2 = t3 = x[0]
    start = 1
    if length >= 2:
        a, b, c, d = 0, length, 2 * length, 3 * length
        t1, t2, t3 = x[b], x[c], x[d]
        for i in range(1, length):
            x[a + i] += x[a + i - 1]
            x[b + i] += x[b + i - 1]
            x[c + i] += x[c + i - 1]
            x[d + i] += x[d + i - 1]
            t0 = x[a + i] if x[a + i] > t0 else t0
            t1 = x[b + i] if x[b + i] > t1 else t1
            t2 = x[c + i] if x[c + i] > t2 else t2
            t3 = x[d + i] if x[d + i] > t3 else t3
        o1 = x[b - 1]
        o2 = o1 + x[c - 1]
        o3 = o2 + x[d - 1]
        for i in range(b, c):
            x[i] += o1
        for i in range(c, d):
            x[i] += o2
        for i in range(d, 4 * length):
            x[i] += o3
        t1 += o1
        t2 += o2
        t3 += o3
        start = 4 * length
    for i in range(start, n):
        x[i] += x[i - 1]
        t0 = x[i] if x[i] > t0 else t0
    t0 = t1 if t1 > t0 else t0
    t2 = t3 if t3 > t2 else t2
    return t2 if t2 > t0 else t0


@numba.njit(**OPTIONS)
def _sum(x):
    """sum(x) with four accumulators: one is bound by the latency of an add per element."""
    t0 = t1 = t2 = t3 = x[0] - x[0]
    n = x.shape[0] // 4 * 4
    for i in range(0, n, 4):
        t0 += x[i]
        t1 += x[i + 1]
        t2 += x[i + 2]
        t3 += x[i + 3]
    for i in range(n, x.shape[0]):
        t0 += x[i]
    return (t0 + t1) + (t2 + t3)


@numba.njit(**OPTIONS)
def _search(cdf, target):
    """The first index whose CDF reaches ``target``, by bisection (torch.searchsorted's rule)."""
    low, high = 0, cdf.shape[0] - 1
    while low < high:
        middle = (low + high) // 2
        if cdf[middle] >= target:
            high = middle
        else:
            low = middle + 1
    return low


@numba.njit(**OPTIONS)
def _z_columns(a, penalties, log_tail, has_tail, columns, decay):
    """The ordered families' log z weights of one row, in place: columns_i = sum_{m <= i}
    softplus(a_m) - penalty_m for i < K, then the tail column columns_{K-1} + log_tail when
    ``has_tail``; decay_i = e^-|a_i| (for the sigmoid that follows). Returns max(columns)."""
    n_units = a.shape[0]
    for i in range(n_units):  # vectorized
        decay[i] = _decay(a[i])
        columns[i] = _softplus_of(a[i], decay[i]) - penalties[i]
    top = _prefix_sum_max(columns, n_units)
    if has_tail:
        columns[n_units] = columns[n_units - 1] + log_tail
        top = columns[n_units] if columns[n_units] > top else top
    return top


@numba.njit(**OPTIONS)
def _selected_units(out, a, decay, selected, uniform, first_block, k0, k1):
    """out_i = [u_i < sigmoid(a_i)] for the ``selected`` first units, 0 beyond, with decay_i =
    e^-|a_i| and u the stream's uniforms from block ``first_block``, drawn into ``uniform``
    (4 * blocks per row,)."""
    n_units = a.shape[0]
    zero, one = _cast(0.0, a[0]), _cast(1.0, a[0])
    _row_uniforms(uniform, first_block, k0, k1)
    for i in range(selected):  # vectorized
        out[i] = one if _below_sigmoid(uniform[i], a[i], decay[i]) else zero
    for i in range(selected, n_units):
        out[i] = zero


# ---------------------------------------------------------------------- kernels
def _bernoulli_logits(logits, out, first_block, k0, k1):
    """out[r, j] = 1 if u[r, j] < sigmoid(logits[r, j]) else 0."""
    n_rows, n_columns = logits.shape
    per_row = (n_columns + 3) // 4
    u = np.empty(4 * per_row, logits.dtype)  # scratch, once per call (see `_ordered_units`)
    for row in range(n_rows):
        _row_uniforms(u, first_block + row * per_row, k0, k1)
        x, drawn = logits[row], out[row]
        zero, one = _cast(0.0, x[0]), _cast(1.0, x[0])
        for j in range(n_columns):  # a zero uniform draws no unit of probability 0
            drawn[j] = one if _below_sigmoid(u[j], x[j], _decay(x[j])) else zero


def _annealed_units(preactivation, t_from, t_to, hidden, gains, first_block, k0, k1):
    """The RBM's annealed hidden step: gains_r = sum_i softplus(t_to a_ri) - softplus(t_from
    a_ri) (differenced per unit, so float32 keeps the small increments), h_ri = [u_ri <
    sigmoid(t_to a_ri)]."""
    n_rows, n_units = preactivation.shape
    per_row = (n_units + 3) // 4
    u, gain = np.empty(4 * per_row, preactivation.dtype), np.empty(n_units, preactivation.dtype)
    for row in range(n_rows):
        a = preactivation[row]
        zero, one = _cast(0.0, a[0]), _cast(1.0, a[0])
        before, after = _cast(t_from, a[0]), _cast(t_to, a[0])
        _row_uniforms(u, first_block + row * per_row, k0, k1)
        drawn = hidden[row]
        for i in range(n_units):  # vectorized: a sum in this loop would keep it scalar
            x = after * a[i]
            y = _decay(x)  # one exp for softplus(x) and the sigmoid
            gain[i] = _softplus_of(x, y) - _softplus(before * a[i])
            drawn[i] = one if _below_sigmoid(u[i], x, y) else zero
        gains[row] = _sum(gain)


def _ordered_units(preactivation, scale, penalties, log_tail, has_tail, z, draw_z, draw_h,
                   hidden, log_sum, z_block, hidden_block, k0, k1):
    """The ordered families' hidden step for each row r, in one pass, with a_ri the row's
    preactivation times ``scale`` (AIS's t):

    column_i = sum_{m <= i} softplus(a_rm) - penalty_m (i < K), plus the tail column
    column_{K-1} + log_tail when ``has_tail``; log_sum_r = logsumexp(columns); then, when
    ``draw_h``, z_r (1-based) drawn by inverting the CDF at (1 - u) total (unless ``draw_z``
    is false: z given) and h_ri = [i < z_r] [u_ri < sigmoid(a_ri)].
    """
    n_rows, n_units = preactivation.shape
    n_columns = n_units + 1 if has_tail else n_units
    per_row = (n_units + 3) // 4
    # Scratch rows allocated once per call, not per row: with few units (tests, small models)
    # the allocations cost as much as the row's arithmetic (float64, 500 x 10: 1.6x faster).
    like = preactivation.dtype
    a, columns, decay = np.empty(n_units, like), np.empty(n_columns, like), np.empty(n_units, like)
    uniform, u = np.empty(4 * per_row, like), np.empty(4, like)
    for row in range(n_rows):
        zero, one = _cast(0.0, preactivation[row, 0]), _cast(1.0, preactivation[row, 0])
        factor = _cast(scale, zero)
        for i in range(n_units):  # vectorized
            a[i] = preactivation[row, i] * factor
        top = _z_columns(a, penalties, log_tail, has_tail, columns, decay)
        floor = _cast(EXP_FLOOR, a[0])
        for i in range(n_columns):  # vectorized
            columns[i] = _exp(max(columns[i] - top, floor))
        _prefix_sum_max(columns, n_columns)  # the unnormalized CDF
        total = columns[n_columns - 1]
        # In float64 (math.log of a float32 stays float32): AIS differences two of these.
        log_sum[row] = np.float64(top) + math.log(np.float64(total))
        if not draw_h:
            continue
        if draw_z:
            _row_uniforms(u, z_block + row, k0, k1)
            # The target in the CDF's precision, as the eager path and the Triton kernels form
            # it (a bare 1 - u would promote it to float64 and break float32 ties otherwise).
            z[row] = _search(columns, (one - u[0]) * total) + 1
        _selected_units(hidden[row], a, decay, min(z[row], n_units), uniform,
                        hidden_block + row * per_row, k0, k1)


def _released_units(preactivation, penalties, log_tail, has_tail, tilt_from, tilt_to, same,
                    hidden, delta, z_block, hidden_block, k0, k1):
    """The pinned AIS path's release step for each row r (`irbm.models._pinned`), in one pass:
    the columns of `_ordered_units` at scale 1, shifted by their maximum once, then for each
    tilt (n_columns,) the log-sum of exp(column + tilt); delta_r = log-sum at ``tilt_to`` -
    log-sum at ``tilt_from`` (float64), z_r drawn from the columns tilted by ``tilt_to`` and
    h_ri = [i < z_r] [u_ri < sigmoid(a_ri)]. ``same``: the tilts are equal, delta is 0 and only
    the draw is made (a transition at one temperature).

    Both log-sums read the same shifted columns, so float32's rounding of the columns (hundreds
    to thousands of nats on trained models) cancels in delta, as in the eager step."""
    n_rows, n_units = preactivation.shape
    n_columns = n_units + 1 if has_tail else n_units
    per_row = (n_units + 3) // 4
    like = preactivation.dtype  # scratch once per call, as in `_ordered_units`
    columns, decay, tilted = (np.empty(n_columns, like), np.empty(n_units, like),
                              np.empty(n_columns, like))
    uniform, u, log_sums = np.empty(4 * per_row, like), np.empty(4, like), np.empty(2, np.float64)
    for row in range(n_rows):
        a = preactivation[row]
        one, floor = _cast(1.0, a[0]), _cast(EXP_FLOOR, a[0])
        top = _z_columns(a, penalties, log_tail, has_tail, columns, decay)
        log_sums[0] = log_sums[1] = 0.0
        for side in range(1 if same else 0, 2):
            tilt = tilt_from if side == 0 else tilt_to
            for i in range(n_columns):  # vectorized
                tilted[i] = (columns[i] - top) + tilt[i]
            peak = tilted[0]
            for i in range(1, n_columns):
                peak = tilted[i] if tilted[i] > peak else peak
            for i in range(n_columns):  # vectorized
                tilted[i] = _exp(max(tilted[i] - peak, floor))
            _prefix_sum_max(tilted, n_columns)  # the unnormalized CDF
            if not same:
                log_sums[side] = np.float64(peak) + math.log(np.float64(tilted[n_columns - 1]))
        delta[row] = log_sums[1] - log_sums[0]
        total = tilted[n_columns - 1]  # the CDF at tilt_to, from the last side
        _row_uniforms(u, z_block + row, k0, k1)
        _selected_units(hidden[row], a, decay, min(_search(tilted, (one - u[0]) * total) + 1,
                                                   n_units), uniform, hidden_block + row * per_row,
                        k0, k1)


def _ordered_statistics(preactivation, penalties, log_tail, has_tail, row_weights, z, draw_z,
                        weighted_hidden, kept, tail, z_block, k0, k1):
    """The ordered families' z-aware gradient statistics for each row r, in one pass:

    survival_ri = P(z >= i | v_r) from the columns of `_ordered_units` (a reverse cumulative
    sum, so that small tail masses keep their precision), kept_ri = -w_r survival_ri,
    weighted_hidden_ri = sigmoid(a_ri) kept_ri (zeroed below the smallest normal number:
    subnormal operands slow the product that follows 12-fold), tail_r = -w_r P(z > K | v_r)
    when ``has_tail``, and z_r ~ P(z | v_r) when ``draw_z``.
    """
    n_rows, n_units = preactivation.shape
    n_columns = n_units + 1 if has_tail else n_units
    like = preactivation.dtype  # scratch once per call, as in `_ordered_units`
    columns, decay, reverse = (np.empty(n_columns, like), np.empty(n_units, like),
                               np.empty(n_columns, like))
    u = np.empty(4, like)
    for row in range(n_rows):
        a = preactivation[row]
        zero, one = _cast(0.0, a[0]), _cast(1.0, a[0])
        tiny = _smallest_normal(a[0])
        top = _z_columns(a, penalties, log_tail, has_tail, columns, decay)
        floor = _cast(EXP_FLOOR, a[0])
        for i in range(n_columns):  # vectorized
            columns[i] = _exp(max(columns[i] - top, floor))
            reverse[n_columns - 1 - i] = columns[i]
        _prefix_sum_max(columns, n_columns)  # the unnormalized CDF
        _prefix_sum_max(reverse, n_columns)  # reverse[j]: the mass of the last j + 1 columns
        total = columns[n_columns - 1]
        for i in range(n_units):  # vectorized
            weight = min(reverse[n_columns - 1 - i] / total, one) * -row_weights[row]
            kept[row, i] = weight
            # sigmoid(a) = 1 / (1 + y) for a >= 0, y / (1 + y) below, y = e^-|a|.
            value = weight * ((one if a[i] >= zero else decay[i]) / (one + decay[i]))
            weighted_hidden[row, i] = value if abs(value) >= tiny else zero
        if has_tail:
            tail[row] = min(reverse[0] / total, one) * -row_weights[row]
        if draw_z:
            _row_uniforms(u, z_block + row, k0, k1)
            z[row] = _search(columns, (one - u[0]) * total) + 1


def _adagrad(parameter, gradient, accumulator, lr, threshold, epsilon, inside):
    """ADAGRAD with an optional L1 soft-threshold on flat arrays, in place, in one pass and in
    the eager `irbm.optim.Optimizer.step`'s order of operations: G += g^2; d = sqrt(G) + eps
    (``inside``: sqrt(G + eps)); theta += (-lr g) / d; then, when ``threshold`` (lr * l1) is
    non-zero, theta -= clip(theta, -t, t) with t = (1 / d) threshold (t = threshold where G
    is 0)."""
    one = _cast(1.0, parameter[0])
    step = -lr
    for i in range(parameter.shape[0]):
        g = gradient[i]
        total = accumulator[i] + g * g
        accumulator[i] = total
        denominator = np.sqrt(total + epsilon) if inside else np.sqrt(total) + epsilon
        value = parameter[i] + step * g / denominator
        if threshold != 0:
            rate = one / (denominator if total != 0 else one) * threshold
            value = value - max(min(value, rate), -rate)
        parameter[i] = value


# ---------------------------------------------------------------------- threads
class _Threads:
    """A pool of Python threads, rebuilt after a fork (a child inherits the pool but not its
    threads, and would wait on it forever)."""

    def __init__(self):
        self._pool, self._size, self._lock = None, 0, threading.Lock()
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self):
        self._pool, self._size, self._lock = None, 0, threading.Lock()

    def submit(self, n_workers, function, *args):
        with self._lock:  # callers on several threads share one pool
            if self._pool is None or self._size < n_workers:
                if self._pool is not None:
                    self._pool.shutdown(wait=False)
                self._pool = ThreadPoolExecutor(n_workers, thread_name_prefix="irbm-kernel")
                self._size = n_workers
            return self._pool.submit(function, *args)


_THREADS = _Threads()


class RowThreaded:
    """A compiled kernel run on ``threads`` threads, each on a contiguous block of rows.

    The kernels release the GIL (``nogil``) and every row draws its uniforms at its own
    position in the stream, so a block's call with its counters advanced to the block's first
    row makes exactly the draws the whole call makes there: results do not depend on the
    thread count. Python threads rather than numba's ``parallel=True``: no second compilation
    of each kernel (the threaded copies took 19 of a cold start's 30 s), and no OpenMP pool
    spinning against torch's between the products.

    Parameters
    ----------
    kernel : numba dispatcher
        Takes arrays whose first axis is the rows, among other arguments.
    block : callable
        ``block(args, start, stop)``: the kernel's arguments for rows [start, stop).
    """

    def __init__(self, kernel, block):
        self.kernel, self.block = kernel, block
        self.split_calls = 0  # calls spread over two or more threads (the tests read it)

    def __call__(self, *args, threads: int):
        n_rows = args[0].shape[0]
        threads = max(1, min(threads, n_rows))
        self.split_calls += threads > 1
        bounds = [n_rows * part // threads for part in range(threads + 1)]
        futures = [_THREADS.submit(threads - 1, self.kernel, *self.block(args, start, stop))
                   for start, stop in zip(bounds[1:-1], bounds[2:])]
        try:
            self.kernel(*self.block(args, bounds[0], bounds[1]))
        finally:  # no block may still write into the outputs once the call is over
            wait(futures)
        for future in futures:
            future.result()


def _rows(args, start, stop, sliced, counters):
    """``args`` with the arrays at ``sliced`` cut to rows [start, stop) and the stream blocks
    at ``counters`` (index: blocks per row) moved to row ``start``."""
    args = list(args)
    for index in sliced:
        args[index] = args[index][start:stop]
    for index, per_row in counters.items():
        args[index] = args[index] + np.int64(start * per_row)
    return args


def _per_row(args):
    return (args[0].shape[1] + 3) // 4


def _compiled_pair(function, block, **options):
    """A serial compilation of ``function`` (with ``options`` beside `OPTIONS`) and the same
    kernel on threads (`RowThreaded`, with ``block`` cutting its arguments to rows)."""
    serial = numba.njit(**{**OPTIONS, **options})(function)
    return serial, RowThreaded(serial, block)


bernoulli_logits = _compiled_pair(_bernoulli_logits, lambda args, start, stop: _rows(
    args, start, stop, (0, 1), {2: _per_row(args)}))
annealed_units = _compiled_pair(_annealed_units, lambda args, start, stop: _rows(
    args, start, stop, (0, 3, 4), {5: _per_row(args)}))
ordered_units = _compiled_pair(_ordered_units, lambda args, start, stop: _rows(
    args, start, stop, (0, 5, 8, 9), {10: 1, 11: _per_row(args)}))
released_units = _compiled_pair(_released_units, lambda args, start, stop: _rows(
    args, start, stop, (0, 7, 8), {9: 1, 10: _per_row(args)}))
ordered_statistics = _compiled_pair(_ordered_statistics, lambda args, start, stop: _rows(
    args, start, stop, (0, 4, 5, 7, 8, 9), {10: 1}))
# G + g * g as one fused multiply-add, as torch's addcmul computes it (the eager reference).
adagrad = _compiled_pair(_adagrad, lambda args, start, stop: _rows(
    args, start, stop, (0, 1, 2), {}), fastmath={"contract"})
