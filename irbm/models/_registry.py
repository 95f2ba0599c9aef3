"""One registry from family names to classes: the CLI's choices, checkpoints and settings all
read it, so a family defined anywhere joins everything by decorating its class."""

from __future__ import annotations

FAMILIES: dict[str, type] = {}


def register_family(cls):
    """Class decorator: make ``cls`` (an `EnergyModel` with a ``family`` name) buildable by name.

    Registering another class under a taken name replaces it (re-imports in notebooks)."""
    name = getattr(cls, "family", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{cls.__name__} needs a class attribute `family` (its registry name)")
    if getattr(cls, "authors_l1", "subgradient") not in ("subgradient", "proximal"):
        raise ValueError(f"{cls.__name__}.authors_l1 must be 'subgradient' or 'proximal', got "
                         f"{cls.authors_l1!r}")
    FAMILIES[name] = cls
    return cls


def family_class(name: str) -> type:
    """The class registered as ``name``; ValueError naming the known families otherwise."""
    if name not in FAMILIES:
        raise ValueError(f"unknown model family {name!r}; expected one of {sorted(FAMILIES)}")
    return FAMILIES[name]


def build_model(config: dict, *, dtype=None, device=None):
    """Rebuild a model from ``{"family": name, **model.config()}``."""
    config = dict(config)
    cls = family_class(config.pop("family", None))
    extra = {} if dtype is None else {"dtype": dtype}
    return cls(**config, **extra, device=device)
