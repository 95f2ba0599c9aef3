"""Self-describing checkpoints: safetensors tensors plus JSON metadata, never pickle.

A checkpoint file holds the model's constructor arguments (with the iRBM's current size) and
parameters, and optionally a trainer's state (optimizer accumulators, persistent chains, RNG
states, epoch, configuration, history). Loading cannot execute code, a checksum over all tensors
catches truncation and tampering, and writes go to a temporary file renamed into place, so a
crash never leaves a half-written checkpoint and the previous one stays intact.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from safetensors.torch import save as serialize

from ._io import atomic_write
from .models import EnergyModel, build_model, check_device

# What `from irbm.checkpoint import *` gives: saving and loading, and the files' names.
__all__ = ["save", "load", "read_checkpoint", "write_checkpoint", "model_tensors",
           "model_metadata", "model_from_tensors", "resolve", "CheckpointError", "MODEL_FILE",
           "TRAINER_FILE"]

FORMAT = "irbm-checkpoint"
VERSION = 1
MODEL_FILE = "model.safetensors"
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
          "float64": torch.float64}
TRAINER_FILE = "checkpoint.safetensors"


class CheckpointError(ValueError):
    """A checkpoint file is missing, unreadable, corrupt or of the wrong kind."""


def _checksum(tensors: dict[str, torch.Tensor], metadata_json: str) -> str:
    """sha256 over the JSON metadata and every tensor's name, dtype, shape and bytes."""
    digest = hashlib.sha256(metadata_json.encode())
    for name in sorted(tensors):
        tensor = tensors[name].detach().contiguous().cpu()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        if tensor.numel():
            digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def write_checkpoint(path, tensors: dict[str, torch.Tensor], metadata: dict):
    """Write tensors and JSON-serializable metadata to ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {name: t.detach().contiguous().cpu() for name, t in tensors.items()}
    metadata_json = json.dumps(metadata)
    header = {"format": FORMAT, "version": str(VERSION),
              "sha256": _checksum(tensors, metadata_json), "metadata": metadata_json}
    with atomic_write(path) as stream:
        stream.write(serialize(tensors, metadata=header))


def read_checkpoint(path) -> tuple[dict[str, torch.Tensor], dict]:
    """Read and verify a checkpoint; raises CheckpointError with the reason."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        tensors = load_file(path)
        with safe_open(path, framework="pt") as reader:
            header = reader.metadata() or {}
    except (SafetensorError, OSError, ValueError, RuntimeError) as error:
        raise CheckpointError(f"unreadable checkpoint {path} (truncated or not a safetensors "
                              f"file): {error}") from None
    if header.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not an irbm checkpoint")
    if header.get("version") != str(VERSION):
        newer = str(header.get("version", "")).isdigit() and int(header["version"]) > VERSION
        raise CheckpointError(f"{path} has checkpoint version {header.get('version')}, "
                              f"this irbm reads version {VERSION}" + (
                                  ": it was written by a newer irbm; update this one (git "
                                  "pull in its checkout, then pip install -e .)" if newer
                                  else ""))
    if header.get("sha256") != _checksum(tensors, header.get("metadata", "")):
        raise CheckpointError(f"checkpoint {path} is corrupt: checksum mismatch")
    try:
        metadata = json.loads(header["metadata"])
    except (KeyError, json.JSONDecodeError) as error:
        raise CheckpointError(f"checkpoint {path} has unreadable metadata: {error}") from None
    return tensors, metadata


def model_tensors(model: EnergyModel) -> dict[str, torch.Tensor]:
    """The model's ``state_dict()`` (parameters and buffers such as beta), keys prefixed."""
    return {f"model.{name}": tensor for name, tensor in model.state_dict().items()}


def model_metadata(model: EnergyModel) -> dict:
    """What rebuilds the model before its tensors are loaded: constructor arguments, dtype.
    ValueError when `config` leaves out a constructor option (a family of one's own): the
    model would come back with that option's default, without a word."""
    config = model.config()
    missing = sorted(set(type(model).options()) - set(config))
    if missing:
        entries = ", ".join(f"{name!r}: self.{name}" for name in missing)
        raise ValueError(f"{type(model).__name__}.config() leaves out its constructor option"
                         f"{'s' if len(missing) > 1 else ''} {', '.join(missing)}: a saved "
                         "model would load with the default; return every option from "
                         f"config() ({{**super().config(), {entries}}})")
    return {"model": config, "dtype": str(model.dtype).removeprefix("torch.")}


def model_from_tensors(tensors, metadata, *, device=None, dtype=None) -> EnergyModel:
    """Rebuild a model from its recorded constructor arguments and parameters."""
    check_device(device)  # a device this machine lacks is not the checkpoint's fault
    try:
        config = metadata["model"]
        if metadata.get("dtype", "float32") not in DTYPES:
            raise CheckpointError(f"checkpoint records dtype {metadata.get('dtype')!r}; "
                                  f"expected one of {sorted(DTYPES)}")
        stored_dtype = DTYPES[metadata.get("dtype", "float32")]
        model = build_model(config, dtype=dtype or stored_dtype, device=device)
        state = {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
        # Checkpoints written before beta was a buffer lack it: the constructor set it from the
        # recorded config. Missing parameters are never filled in.
        parameters = dict(model.named_parameters())
        for name, value in model.state_dict().items():
            if name not in state and name not in parameters:
                state[name] = value
        expected = model.state_dict()
        for name, value in state.items():
            if name in expected and value.shape != expected[name].shape:
                raise CheckpointError(f"parameter {name} has shape {tuple(value.shape)}, "
                                      f"the recorded model needs {tuple(expected[name].shape)}")
        with torch.no_grad():
            model.load_state_dict(state)
    except KeyError as error:
        raise CheckpointError(f"checkpoint does not describe a model: missing {error}") from None
    except (TypeError, ValueError, RuntimeError) as error:
        if isinstance(error, CheckpointError):
            raise
        raise CheckpointError(f"checkpoint describes an invalid model: {error}") from None
    return model


def save(model: EnergyModel, path, *, extra: dict | None = None):
    """Save a model (constructor arguments + parameters) to ``path`` (.safetensors); ``extra``
    (JSON values, e.g. the epoch) is kept beside them, read back by
    `irbm.checkpoint.read_checkpoint`'s metadata, and may not replace the checkpoint's own
    fields (ValueError)."""
    if not isinstance(model, EnergyModel):
        raise TypeError(f"irbm.save takes an irbm model (an EnergyModel), got "
                        f"{type(model).__name__}; a scikit-learn estimator saves its model as "
                        "irbm.save(estimator.to_model(), path), or pickles whole")
    if Path(path).is_dir():
        raise ValueError(f"{path} is a directory: give a file path such as "
                         f"{Path(path) / MODEL_FILE}")
    own = {"kind": "model", **model_metadata(model)}
    # The checkpoint's own fields are not the caller's to replace: a "dtype" in extra loaded a
    # float32 model as float64, a "model" wrote a file load refused.
    clash = sorted(set(extra or {}) & set(own))
    if clash:
        raise ValueError(f"extra may not hold {', '.join(clash)}: the checkpoint's own fields "
                         "(rename those keys)")
    write_checkpoint(path, model_tensors(model), {**own, **(extra or {})})


def resolve(path, name=MODEL_FILE) -> Path:
    """A checkpoint file, or inside a run directory the file ``name``."""
    path = Path(path)
    if path.is_dir():
        candidate = path / name
        if not candidate.exists():
            raise CheckpointError(f"run directory {path} holds no {name}")
        return candidate
    return path


def load(path, *, device=None, dtype=None) -> EnergyModel:
    """Load a model from a model or trainer checkpoint, or from a run directory (its latest
    model)."""
    tensors, metadata = read_checkpoint(resolve(path))
    return model_from_tensors(tensors, metadata, device=device, dtype=dtype)
