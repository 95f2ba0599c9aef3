"""Fused sampling kernels behind the families' sampling methods, and their random stream.

A family's Gibbs step runs as a few passes per matrix product in eager PyTorch (sigmoid,
uniforms, comparison; for the ordered families softplus, two cumulative sums, exp, a search and
a mask). Given a `PhiloxGenerator` and CPU tensors, the families call these kernels instead:
one pass per row, uniforms generated inside it, rows spread over torch's thread count (numba,
`_compiled`). On CUDA tensors the same kernels run in Triton (`_triton`, where Triton is
installed), one program per row. With any other generator, on other devices, without numba
(CPU) or Triton (CUDA), or with ``IRBM_KERNELS=off`` in the environment, the eager path runs;
with a `PhiloxGenerator` it draws the same uniforms, so all of them agree draw for draw except
where a probability and its uniform tie to within rounding, or a zero uniform meets a unit of
probability below e^-87 (float32; e^-708 in float64), which the kernels leave off and the
eager path turns on (`_compiled._decay`).
"""

from __future__ import annotations

import functools
import importlib
import os

import numpy as np
import torch

from .philox import PhiloxGenerator, blocks_per_row

__all__ = ["PhiloxGenerator", "adagrad_step", "annealed_bernoulli", "bernoulli_from_logits",
           "blocks_per_row",
           "compiled_available", "ordered_hidden", "ordered_statistics", "released_hidden",
           "runs_on", "usable", "warm_up"]

try:  # numba is a dependency, but the library must work (slower) where it cannot load
    from . import _compiled
except ImportError:  # pragma: no cover - exercised only on machines without numba
    _compiled = None


_triton = None  # irbm.kernels._triton, imported at the first CUDA tensor (Triton is slow to load)


def _switched_on() -> bool:
    return os.environ.get("IRBM_KERNELS", "on").lower() != "off"


def compiled_available() -> bool:
    """numba loaded and the kernels not switched off (``IRBM_KERNELS=off``)."""
    return _compiled is not None and _switched_on()


def gpu_available() -> bool:
    """Triton importable (it ships with PyTorch's CUDA wheels on Linux) and the kernels not
    switched off; imports `_triton` on the first call."""
    global _triton
    if _triton is None and _switched_on() and torch.cuda.is_available():
        try:  # not "from . import _triton": that would read this module's None above
            module = importlib.import_module("._triton", __name__)
        except ImportError:  # pragma: no cover - CUDA without Triton (Windows wheels)
            module = False
        _triton = module
    return bool(_triton) and _switched_on()


def _gpu():
    """`_triton`, imported; a clear error where it cannot be (a direct call on CUDA tensors
    that `runs_on` would have refused)."""
    if not gpu_available():
        raise RuntimeError("the fused kernels on CUDA need Triton (installed with PyTorch's "
                           "CUDA wheels on Linux) and IRBM_KERNELS not 'off': check "
                           "irbm.kernels.runs_on first")
    return _triton


def runs_on(*tensors: torch.Tensor) -> bool:
    """Whether the sampling kernels can take these tensors: contiguous float32 or float64
    tensors without autograd, all on the CPU (numba) or all on one CUDA device (Triton)."""
    if not tensors or not all(t.dtype in (torch.float32, torch.float64) and t.is_contiguous()
                              and not t.requires_grad for t in tensors):
        return False
    device = tensors[0].device
    if any(t.device != device for t in tensors):
        return False
    return compiled_available() if device.type == "cpu" else \
        device.type == "cuda" and gpu_available()


def usable(generator, *tensors: torch.Tensor) -> bool:
    """Whether the kernels can serve this call: a Philox stream and `runs_on` the tensors."""
    return isinstance(generator, PhiloxGenerator) and runs_on(*tensors)


# Elements of a call below which the kernels stay on one thread. Measured (2-core Xeon, torch 2
# threads) with numba's own OpenMP pool, which the kernels then used: a training step (64 rows)
# gained nothing, and waking that pool made torch's threaded ops around it 1.3-1.4x slower;
# AIS steps on 1,000 chains ran 1.9x faster threaded. The Python threads that replaced it
# (`_compiled.RowThreaded`) ran AIS steps as fast or faster; for training steps a lower bar
# was not measurably better on a noisy 2-core EPYC (session 20), so the bar stayed.
THREADED_MIN_ELEMENTS = 2**18


def _variant(pair, n_elements: int):
    """The serial kernel for one torch thread or a small call, else the threaded one
    (`_compiled.RowThreaded`) at torch's thread count."""
    threads = torch.get_num_threads()
    if threads <= 1 or n_elements < THREADED_MIN_ELEMENTS:
        return pair[0]
    return functools.partial(pair[1], threads=threads)


def _key(generator):
    return np.uint64(generator.key[0]), np.uint64(generator.key[1])


def bernoulli_from_logits(logits: torch.Tensor, generator: PhiloxGenerator,
                          out: torch.Tensor | None = None) -> torch.Tensor:
    """x ~ Bernoulli(sigmoid(logits)), shape and dtype of ``logits`` (N, D), into ``out`` if
    given; the uniforms of ``generator.uniform((N, D))``."""
    if logits.is_cuda:
        return _gpu().bernoulli_from_logits(logits, generator, out)
    out = torch.empty_like(logits) if out is None else out
    first = generator.take(*logits.shape)
    kernel = _variant(_compiled.bernoulli_logits, logits.numel())
    kernel(logits.numpy(), out.numpy(), np.int64(first), *_key(generator))
    return out


def annealed_bernoulli(preactivation: torch.Tensor, t_from: float, t_to: float,
                       generator: PhiloxGenerator):
    """(h, gains) of an annealed Bernoulli layer: h ~ Bernoulli(sigmoid(t_to a)) (N, K) and
    gains = sum_i softplus(t_to a_i) - softplus(t_from a_i) (N,), for a (N, K); the uniforms
    of ``generator.uniform((N, K))``."""
    if preactivation.is_cuda:
        return _gpu().annealed_bernoulli(preactivation, t_from, t_to, generator)
    hidden = torch.empty_like(preactivation)
    gains = torch.empty(preactivation.shape[0], dtype=preactivation.dtype)
    first = generator.take(*preactivation.shape)
    kernel = _variant(_compiled.annealed_units, preactivation.numel())
    kernel(preactivation.numpy(), float(t_from), float(t_to), hidden.numpy(), gains.numpy(),
           np.int64(first), *_key(generator))
    return hidden, gains


def ordered_hidden(preactivation: torch.Tensor, penalties: torch.Tensor, log_tail,
                   generator: PhiloxGenerator | None, z: torch.Tensor | None = None,
                   scale: float = 1.0):
    """(h, z, log_sum) of the ordered families' hidden step, fused.

    With a = scale * preactivation (AIS's t; penalties given at the same t):
    log w_z = sum_{i <= z} softplus(a_i) - penalty_i for z = 1..K, plus a tail category
    K + 1 with log w_K + log_tail when ``log_tail`` is not None; z ~ w / sum(w) (unless given),
    h_i ~ Bernoulli(sigmoid(a_i)) for i <= z, 0 beyond.

    Parameters
    ----------
    preactivation : Tensor (N, K)
    penalties : Tensor (K,)
    log_tail : float or None
    generator : PhiloxGenerator or None
        Takes an (N, 1) draw for z (when drawn), then an (N, K) draw for h: the eager path's
        order. None: only ``log_sum`` is computed (h and z are returned empty).
    z : LongTensor (N,), optional
    scale : float

    Returns
    -------
    h : Tensor (N, K), z : LongTensor (N,), log_sum : float64 Tensor (N,) (log sum_z w_z)
    """
    if preactivation.is_cuda:
        return _gpu().ordered_hidden(preactivation, penalties, log_tail, generator, z, scale)
    n_rows, n_units = preactivation.shape
    hidden = torch.empty_like(preactivation)
    log_sum = torch.empty(n_rows, dtype=torch.float64)  # AIS differences two of them
    draw_h, draw_z = generator is not None, z is None
    z = torch.empty(n_rows, dtype=torch.int64) if draw_z else z.to(torch.int64).contiguous()
    z_block = generator.take(n_rows, 1) if draw_h and draw_z else 0
    hidden_block = generator.take(n_rows, n_units) if draw_h else 0
    key = _key(generator) if draw_h else (np.uint64(0), np.uint64(0))
    penalties = penalties.to(preactivation.dtype).contiguous()
    _variant(_compiled.ordered_units, preactivation.numel())(
        preactivation.numpy(), float(scale), penalties.numpy(),
        preactivation.new_tensor(0.0 if log_tail is None else float(log_tail)).numpy()[()],
        log_tail is not None, z.numpy(), draw_z, draw_h, hidden.numpy(), log_sum.numpy(),
        np.int64(z_block), np.int64(hidden_block), *key)
    return hidden, z, log_sum


def released_hidden(preactivation: torch.Tensor, penalties: torch.Tensor, log_tail,
                    tilt_from: torch.Tensor, tilt_to: torch.Tensor, generator: PhiloxGenerator):
    """(h, delta) of the pinned AIS path's release step, fused (CPU only; no Triton version).

    With the columns of `ordered_hidden` at scale 1 (log w_z, z = 1..K, and the tail's), and
    L(tilt) = log sum_z exp(log w_z + tilt_z): delta = L(tilt_to) - L(tilt_from) (N,) float64,
    from one set of columns shifted by their maximum, so that float32's rounding of the
    columns cancels; z ~ w exp(tilt_to) / sum, h_i ~ Bernoulli(sigmoid(a_i)) for i <= z.
    The same tensor as both tilts: a transition at one temperature (delta 0, one pass fewer).

    Parameters
    ----------
    preactivation : Tensor (N, K)
    penalties : Tensor (K,)
    log_tail : float or None
    tilt_from, tilt_to : Tensor (n_columns,)
        K columns, and one more for the tail when ``log_tail`` is not None.
    generator : PhiloxGenerator
        Takes an (N, 1) draw for z, then an (N, K) draw for h (`ordered_hidden`'s order).

    Returns
    -------
    h : Tensor (N, K), delta : float64 Tensor (N,)
    """
    if preactivation.is_cuda:
        raise RuntimeError("released_hidden runs on the CPU only: take the eager step on CUDA")
    n_rows, n_units = preactivation.shape
    hidden = torch.empty_like(preactivation)
    delta = torch.empty(n_rows, dtype=torch.float64)
    z_block = generator.take(n_rows, 1)
    hidden_block = generator.take(n_rows, n_units)
    dtype = preactivation.dtype
    _variant(_compiled.released_units, preactivation.numel())(
        preactivation.numpy(), penalties.to(dtype).contiguous().numpy(),
        preactivation.new_tensor(0.0 if log_tail is None else float(log_tail)).numpy()[()],
        log_tail is not None, tilt_from.to(dtype).contiguous().numpy(),
        tilt_to.to(dtype).contiguous().numpy(), tilt_to is tilt_from, hidden.numpy(),
        delta.numpy(),
        np.int64(z_block), np.int64(hidden_block), *_key(generator))
    return hidden, delta


def ordered_statistics(preactivation: torch.Tensor, penalties: torch.Tensor, log_tail,
                       row_weights: torch.Tensor, generator: PhiloxGenerator):
    """The ordered families' z-aware gradient statistics, fused (see their
    ``weighted_gradients``), with z ~ P(z | v) drawn on the way.

    Parameters
    ----------
    preactivation : Tensor (N, K)
        W v + b.
    penalties : Tensor (K,)
    log_tail : float or None
        As in `ordered_hidden`.
    row_weights : Tensor (N,)
        w_n of the weighted sum.
    generator : PhiloxGenerator
        Takes an (N, 1) draw for z.

    Returns
    -------
    weighted_hidden : Tensor (N, K)
        -w_n sigmoid(a_ni) P(z >= i | v_n), zero below the smallest normal number.
    kept : Tensor (N, K)
        -w_n P(z >= i | v_n).
    tail : Tensor (N,) or None
        -w_n P(z > K | v_n) when ``log_tail`` is given.
    z : LongTensor (N,)
    """
    if preactivation.is_cuda:
        return _gpu().ordered_statistics(preactivation, penalties, log_tail, row_weights,
                                          generator)
    n_rows, n_units = preactivation.shape
    weighted_hidden, kept = torch.empty_like(preactivation), torch.empty_like(preactivation)
    tail = torch.empty(n_rows, dtype=preactivation.dtype)
    z = torch.empty(n_rows, dtype=torch.int64)
    z_block = generator.take(n_rows, 1)
    kernel = _variant(_compiled.ordered_statistics, preactivation.numel())
    kernel(preactivation.numpy(), penalties.to(preactivation.dtype).contiguous().numpy(),
           preactivation.new_tensor(0.0 if log_tail is None else float(log_tail)).numpy()[()],
           log_tail is not None, row_weights.to(preactivation.dtype).contiguous().numpy(),
           z.numpy(), True, weighted_hidden.numpy(), kept.numpy(), tail.numpy(),
           np.int64(z_block), *_key(generator))
    return weighted_hidden, kept, (tail if log_tail is not None else None), z


def adagrad_step(parameter: torch.Tensor, gradient: torch.Tensor, accumulator: torch.Tensor,
                 *, lr: float, l1: float, epsilon: float, inside: bool):
    """One ADAGRAD step with the L1 soft-threshold (``l1`` > 0) on tensors of one shape, in
    place, in one pass (`irbm.optim.Optimizer` runs it where `runs_on` its tensors; its eager
    step is the reference): G += g^2, theta += -lr g / d, d = sqrt(G) + eps (``inside``:
    sqrt(G + eps)), then theta <- prox_{lr l1 / d}(theta) (lr l1 where G = 0). CPU tensors
    only (numba): on CUDA the optimizer's eager step runs."""
    if parameter.device.type != "cpu":
        raise ValueError(f"adagrad_step runs on CPU tensors, not {parameter.device}: on other "
                         "devices irbm.optim.Optimizer takes its eager step")
    dtype = parameter.numpy().dtype.type
    kernel = _variant(_compiled.adagrad, parameter.numel())
    kernel(parameter.view(-1).numpy(), gradient.reshape(-1).numpy(),
           accumulator.view(-1).numpy(), dtype(lr), dtype(lr * l1), dtype(epsilon),
           bool(inside))


def _warm_calls(dtype):
    """Each CPU kernel's first call on tiny operands of ``dtype``, in groups of about equal
    cold compile time (2-core AMD EPYC: 6.1 s and 6.4 s for float32 and float64 together)."""
    a, penalties = torch.zeros(2, 4, dtype=dtype), torch.zeros(4, dtype=dtype)
    tilt, generator = torch.zeros(5, dtype=dtype), PhiloxGenerator(0)
    ordered = [lambda: ordered_hidden(a, penalties, 0.0, generator),
               lambda: released_hidden(a, penalties, 0.0, tilt, tilt + 1, generator)]
    bernoulli = [lambda: bernoulli_from_logits(a, generator),
                 lambda: annealed_bernoulli(a, 0.0, 1.0, generator),
                 lambda: ordered_statistics(a, penalties, 0.0, torch.ones(2, dtype=dtype),
                                            generator),
                 lambda: adagrad_step(torch.zeros(4, dtype=dtype), torch.ones(4, dtype=dtype),
                                      torch.zeros(4, dtype=dtype), lr=0.1, l1=0.1,
                                      epsilon=1e-8, inside=False)]
    return [ordered, bernoulli]


def warm_up(share: int = 0, shares: int = 1) -> None:
    """Compile the CPU kernels for float32 and float64 now (or load them from numba's on-disk
    cache) rather than at their first call.

    The kernels fall into groups of about equal compile time, taken round-robin by ``shares``
    processes: this one takes those of index ``share`` modulo ``shares``. Processes that start
    together (the test suite's workers on a fresh clone) so compile each kernel once between
    them (the small helpers both groups call, compiled on their own, by each), and each loads
    the others' from the cache when it first calls them. A no-op where the kernels do not run
    (`compiled_available`).
    """
    if not 0 <= int(share) < int(shares):
        raise ValueError(f"share must lie in 0..shares - 1, got {share} of {shares}")
    if not compiled_available():
        return
    for dtype in (torch.float32, torch.float64):
        for index, group in enumerate(_warm_calls(dtype)):
            if index % int(shares) == int(share):
                for call in group:
                    call()
