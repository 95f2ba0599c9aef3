"""One registry from family names to classes: the CLI's choices, checkpoints and settings all
read it, so a family defined anywhere joins everything by decorating its class."""

from __future__ import annotations

import inspect

FAMILIES: dict[str, type] = {}


def register_family(cls):
    """Class decorator: make ``cls`` (an `EnergyModel` with a ``family`` name) buildable by name.

    The same class registered again replaces itself (a module re-imported in a notebook);
    another class under a taken name is refused: checkpoints of the family would load as it.
    A class with abstract methods left, or a constructor option without a default (the CLI
    and checkpoints build a model from its name and options), is refused too."""
    name = getattr(cls, "family", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{cls.__name__} needs a class attribute `family` (its registry name)")
    taken = FAMILIES.get(name)
    if taken is not None and (taken.__module__, taken.__qualname__) != (cls.__module__,
                                                                         cls.__qualname__):
        raise ValueError(f"the family name {name!r} is taken by {taken.__module__}."
                         f"{taken.__qualname__}: give {cls.__name__} a `family` of its own (a "
                         "subclass inherits its parent's)")
    if inspect.isabstract(cls):
        raise ValueError(f"{cls.__name__} leaves {', '.join(sorted(cls.__abstractmethods__))} "
                         "abstract: implement them before registering it")
    required = [parameter.name for parameter in
                list(inspect.signature(cls.__init__).parameters.values())[2:]
                if parameter.default is inspect.Parameter.empty
                and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)]
    if required:
        raise ValueError(f"{cls.__name__}'s options {', '.join(required)} need defaults: the "
                         "command line and checkpoints build a model from its family name and "
                         "the options given")
    if getattr(cls, "authors_l1", "subgradient") not in ("subgradient", "proximal"):
        raise ValueError(f"{cls.__name__}.authors_l1 must be 'subgradient' or 'proximal', got "
                         f"{cls.authors_l1!r}")
    FAMILIES[name] = cls
    return cls


def family_class(name: str) -> type:
    """The class registered as ``name``; ValueError naming the known families otherwise."""
    if name not in FAMILIES:
        raise ValueError(f"unknown model family {name!r}; expected one of {sorted(FAMILIES)} "
                         "(a family of your own: import the module that registers it first)")
    return FAMILIES[name]


def build_model(config: dict, *, dtype=None, device=None):
    """Rebuild a model from ``{"family": name, **model.config()}``."""
    config = dict(config)
    cls = family_class(config.pop("family", None))
    extra = {} if dtype is None else {"dtype": dtype}
    return cls(**config, **extra, device=device)
