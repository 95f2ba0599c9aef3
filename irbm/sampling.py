"""Draw samples from a trained model by running block Gibbs chains.

The paper's samples figures start chains from random binary images and run 10,000 Gibbs steps;
for the ordered RBM the first hidden step is taken at z = K, because chains started from noise
otherwise stay stuck at small z (see the "Experiments" section). `sample` does both.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from ._threads import chooses_threads
from .models import EnergyModel, bernoulli, require_finite_parameters

# What `from irbm.sampling import *` gives, and the module's public names.
__all__ = ["sample", "SampleResult", "INITIALIZATIONS"]

INITIALIZATIONS = ("random", "data")


@dataclass
class SampleResult:
    """What `sample` returns.

    Attributes
    ----------
    samples : Tensor (n_samples, n_visible)
        Final binary visible states of the chains.
    probabilities : Tensor (n_samples, n_visible) or None
        P(v = 1 | h) for the last hidden state: the expected value of ``samples``, smoother to
        display. None when ``return_probabilities=False``.
    z : LongTensor (n_samples,) or None
        Number of selected hidden units in the last hidden state (None for the RBM; for the
        iRBM, ``n_hidden + 1`` means the geometric tail beyond the trained units).
    snapshots : Tensor (n_snapshots, n_samples, n_visible) or None
        Chain states at ``snapshot_steps``: the initial visible vectors at step 0, then the
        probabilities (or the binary samples when ``return_probabilities=False``).
    snapshot_steps : list of int or None
        Gibbs step of each snapshot: 0, every, 2 * every, ... and always ``n_steps``.
    """

    samples: torch.Tensor
    probabilities: torch.Tensor | None = None
    z: torch.Tensor | None = None
    snapshots: torch.Tensor | None = None
    snapshot_steps: list[int] | None = None


def _chains(arguments) -> int | None:
    """How many chains `sample` runs, from its arguments (None: unknown before it checks them)."""
    if arguments["n_samples"]:
        return arguments["n_samples"]
    if not isinstance(arguments["init"], str):
        return len(arguments["init"])
    return len(arguments["data"]) if arguments["data"] is not None else None


@chooses_threads(_chains)
def sample(model: EnergyModel, n_samples: int | None, n_steps: int, *, init="random",
           data=None, z_max_init: bool = False, generator=None, seed: int | None = None,
           return_probabilities: bool = True, progress: bool = False,
           every: int | None = None, threads: int | None = None) -> SampleResult:
    """Draw samples from ``model`` by running ``n_samples`` block Gibbs chains for ``n_steps``.

    Each step is v -> (h, z) ~ P(h, z | v) -> v ~ P(v | h), for all chains at once.

    Parameters
    ----------
    model : EnergyModel
        An RBM, ordered RBM or infinite RBM.
    n_samples : int or None
        Number of independent chains. None takes it from ``init`` when ``init`` is a tensor.
    n_steps : int, >= 1
        Number of Gibbs steps (the paper used 10,000).
    init : {"random", "data"} or array (n_samples, n_visible)
        Start of the chains: uniform random binary vectors (as in the paper), rows of ``data``
        drawn without replacement, or the given binary vectors.
    data : array (N, n_visible), optional
        Binary examples; required for ``init="data"``, ignored otherwise.
    z_max_init : bool
        Take the first hidden step at z = n_hidden (all trained units), the paper's start for
        ordered-RBM chains. Only for the ordered RBM and the infinite RBM.
    generator : torch.Generator, int or None
        Source of randomness; an int is used as the seed of a new generator.
    seed : int, optional
        The seed of a new generator, as `irbm.ais.estimate_log_partition` takes it (give
        ``seed`` or ``generator``, not both).
    return_probabilities : bool
        Also return P(v = 1 | h) of the last step.
    progress : bool
        Show a tqdm progress bar over the steps.
    every : int, optional
        Keep a snapshot of the chains every ``every`` steps (for a chain-evolution figure).
    threads : int, optional
        torch's CPU threads, as in `irbm.ais.estimate_log_partition`.

    Returns
    -------
    SampleResult
        ``samples`` (n_samples, n_visible), ``probabilities``, ``z``, ``snapshots`` and
        ``snapshot_steps``, on the model's device and in its dtype.

    Raises
    ------
    ValueError
        For a bad count, an unknown ``init``, missing or malformed ``data``, a wrong ``init``
        shape, or ``z_max_init`` with an RBM.
    """
    require_finite_parameters(model, "sampling")
    n_steps = _positive_int(n_steps, "n_steps")
    if every is not None:
        every = _positive_int(every, "every")
    if z_max_init and not model.has_z:
        raise ValueError(f"z_max_init=True needs a model with a z variable; a "
                         f"{model.display_name} has none")
    if seed is not None:
        if generator is not None:
            raise ValueError("give either seed or generator, not both")
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
        generator = int(seed)
    generator = _as_generator(generator, model.device)

    with torch.no_grad(), model.trusted_inputs():  # the start is validated once, below
        visible = _initial_visibles(model, n_samples, init, data, generator)
        state = model.sample_hidden(visible, generator,
                                    z=model.n_hidden if z_max_init else None)

        # Each step allocates new tensors, so keeping references is enough (no copies).
        snapshots = [visible] if every is not None else None
        steps_kept = [0] if every is not None else None
        for step in tqdm(range(1, n_steps + 1), disable=not progress, desc="Gibbs sampling",
                         unit="step", leave=False):
            if step > 1:
                state = model.sample_hidden(visible, generator)
            mean_visible = model.mean_visibles(state)
            visible = bernoulli(mean_visible, generator)
            if every is not None and (step % every == 0 or step == n_steps):
                snapshots.append(mean_visible if return_probabilities else visible)
                steps_kept.append(step)

    return SampleResult(
        samples=visible,
        probabilities=mean_visible if return_probabilities else None,
        z=state.z,
        snapshots=torch.stack(snapshots) if snapshots is not None else None,
        snapshot_steps=steps_kept,
    )


def _initial_visibles(model, n_samples, init, data, generator) -> torch.Tensor:
    """Starting visible vectors, shape (n_samples, n_visible), validated once."""
    if isinstance(init, str):
        if init not in INITIALIZATIONS:
            raise ValueError(f"init must be one of {INITIALIZATIONS} or a tensor of starting "
                             f"visible vectors, got {init!r}")
        if n_samples is None:
            raise ValueError(f"n_samples is required with init={init!r}")
        n_samples = _positive_int(n_samples, "n_samples")
        if init == "random":
            half = torch.full((n_samples, model.n_visible), 0.5, dtype=model.dtype,
                              device=model.device)
            return bernoulli(half, generator)
        if data is None:
            raise ValueError("init='data' needs the data argument (binary examples to start from)")
        data = _checked(model, data, "data")
        if n_samples > data.shape[0]:
            raise ValueError(f"init='data' asks for {n_samples} chains but data has only "
                             f"{data.shape[0]} rows")
        rows = torch.randperm(data.shape[0], generator=generator, device=generator.device)
        return data[rows[:n_samples].to(data.device)]

    visible = _checked(model, init, "init")
    if n_samples is not None and _positive_int(n_samples, "n_samples") != visible.shape[0]:
        raise ValueError(f"init has {visible.shape[0]} rows but n_samples is {n_samples}")
    return visible.clone()


def _checked(model, values, name) -> torch.Tensor:
    """The model's own input check, with the argument's name in the message."""
    try:
        with model.validation():
            return model.check_visible(values)
    except ValueError as error:
        raise ValueError(f"{name}: {error}") from None


def _positive_int(value, name) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _as_generator(generator, device) -> torch.Generator:
    """A torch.Generator on ``device``: the given one, a new one seeded with an int, or a new one
    seeded from torch's global generator (so that torch.manual_seed makes runs repeatable)."""
    if isinstance(generator, torch.Generator):
        if generator.device.type != torch.device(device).type:
            raise ValueError(f"the generator is on {generator.device} but the model on {device}: "
                             f"create it with torch.Generator(device={str(device)!r})")
        return generator
    if generator is not None and (isinstance(generator, bool)
                                  or not isinstance(generator, numbers.Integral)):
        raise ValueError(f"generator must be a torch.Generator, an int seed or None, "
                         f"got {type(generator).__name__}")
    seed = int(generator) if generator is not None else int(
        torch.randint(0, 2**62, (1,)).item())
    return torch.Generator(device=device).manual_seed(seed)
