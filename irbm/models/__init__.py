"""Model families: one file each, behind the interface of `_base.EnergyModel`."""

from ._base import EnergyModel, HiddenState
from .infinite import InfiniteRBM
from .ordered import OrderedRBM
from .rbm import RBM

FAMILIES = {"rbm": RBM, "orbm": OrderedRBM, "irbm": InfiniteRBM}


def build_model(config: dict, *, dtype=None, device=None) -> EnergyModel:
    """Rebuild a model from ``model.config()`` (a dict with a "family" key)."""
    config = dict(config)
    family = config.pop("family", None)
    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; expected one of {sorted(FAMILIES)}")
    extra = {} if dtype is None else {"dtype": dtype}
    return FAMILIES[family](**config, **extra, device=device)


__all__ = ["EnergyModel", "HiddenState", "RBM", "OrderedRBM", "InfiniteRBM", "FAMILIES",
           "build_model"]
