"""Average negative log-likelihood of a data set, given (an AIS estimate of) log Z.

-ln p(v) = F(v) + ln Z. The paper reports the mean over the test set +/- its standard error,
treating ln Z-hat as exact; `ais_nll` also returns the range implied by the AIS interval
ln(Z-hat -/+ 3 sigma), which is what the validation-set model selection should look at when
two models are close.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .ais import AISResult, estimate_log_partition


def free_energies(model, data, *, batch_size: int = 4096) -> torch.Tensor:
    """F(v_n) for every row of ``data`` (N, n_visible), as a float64 tensor of shape (N,).

    Rows are validated (binary, right width) and evaluated ``batch_size`` at a time, so a large
    uint8 data set is never converted to the model's dtype all at once.
    """
    if int(batch_size) < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not isinstance(data, torch.Tensor):
        data = torch.as_tensor(data)
    if data.dim() != 2 or data.shape[0] == 0:
        raise ValueError(f"data must have shape (N, {model.n_visible}) with N >= 1, "
                         f"got {tuple(data.shape)}")
    parts = []
    with torch.no_grad():
        for start in range(0, data.shape[0], int(batch_size)):
            parts.append(model.free_energy(data[start:start + int(batch_size)]).double().cpu())
    return torch.cat(parts)


def _log_partition_value(log_z) -> float:
    value = float(log_z.log_z if isinstance(log_z, AISResult) else log_z)
    if not math.isfinite(value):
        raise ValueError(f"log_z must be finite, got {value}")
    return value


def nll(model, data, log_z, *, batch_size: int = 4096) -> tuple[float, float]:
    """mean_n [F(v_n) + ln Z] and its standard error std_n F(v_n) / sqrt(N).

    Parameters
    ----------
    model : EnergyModel
    data : Tensor or array (N, n_visible), binary.
    log_z : float or AISResult
        ln Z (exact or estimated); its own uncertainty is not included in the standard error.

    Returns
    -------
    (mean, standard_error) : floats, in nats. The standard error is 0 for N = 1.
    """
    log_partition = _log_partition_value(log_z)
    free = free_energies(model, data, batch_size=batch_size)
    stderr = float(free.std(correction=1)) / math.sqrt(free.numel()) if free.numel() > 1 else 0.0
    return float(free.mean()) + log_partition, stderr


@dataclass
class NLLEstimate:
    """mean_n -ln p(v_n) with ln Z from AIS.

    Attributes
    ----------
    mean, stderr : float
        Average NLL with ln Z-hat, and its standard error over the data (paper's convention).
    mean_low, mean_high : float
        Average NLL with ln(Z-hat - 3 sigma) and ln(Z-hat + 3 sigma): the AIS uncertainty alone
        (``mean_low`` is -inf when the lower bound of Z is not positive).
    log_partition : AISResult
        The AIS run, with per-chain log weights for convergence diagnostics.
    """

    mean: float
    stderr: float
    mean_low: float
    mean_high: float
    log_partition: AISResult


def ais_nll(model, data, *, n_chains: int = 100, n_betas=None, betas=None, base=None,
            base_data=None, batch_size: int = 4096, **ais_options) -> NLLEstimate:
    """mean_n [F(v_n) + ln Z-hat] with ln Z-hat from `irbm.ais.estimate_log_partition`.

    What a trainer callback calls every few epochs on the validation set.

    Parameters
    ----------
    model : EnergyModel
    data : Tensor or array (N, n_visible), binary: the set whose NLL is wanted.
    n_chains, n_betas, betas, base : as in `estimate_log_partition` (default base: the
        family's ``default_ais_base``).
    base_data : (M, n_visible), optional
        Data for the base rate when the base is "data"; defaults to ``data`` itself (any base
        keeps the estimate of Z unbiased, so this leaks nothing into the NLL).
    batch_size : int
        Rows per free-energy evaluation.
    **ais_options : seed, generator, device, dtype, chain_batch_size, checkpoint_path, progress.
    """
    if base_data is None:  # the data base (the default of most families) needs data
        base_data = data
    result = estimate_log_partition(model, n_chains, n_betas, betas=betas, base=base,
                                    data=base_data, **ais_options)
    mean, stderr = nll(model, data, result, batch_size=batch_size)
    shift = mean - result.log_z
    return NLLEstimate(mean, stderr, shift + result.log_z_low, shift + result.log_z_high, result)
