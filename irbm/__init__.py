"""irbm: restricted Boltzmann machines whose hidden layer learns its own size.

Implements the RBM, the ordered RBM and the infinite RBM of Cote & Larochelle,
"An Infinite Restricted Boltzmann Machine" (Neural Computation, 2016).
"""

import importlib

from .checkpoint import load, save
from .models import (
    FAMILIES,
    RBM,
    EnergyModel,
    HiddenState,
    InfiniteRBM,
    OrderedRBM,
    build_model,
    register_family,
)
from .training import Callback, Trainer

__version__ = "0.1.0"

__all__ = ["RBM", "OrderedRBM", "InfiniteRBM", "EnergyModel", "HiddenState", "FAMILIES",
           "build_model", "Trainer", "Callback", "save", "load", "ais", "evaluate", "datasets",
           "sampling", "plotting", "sklearn", "runs", "strategies", "workflows", "settings",
           "register_family", "__version__"]

_SUBMODULES = {"ais", "evaluate", "datasets", "sampling", "plotting", "sklearn", "runs",
               "strategies", "workflows", "settings"}


def __getattr__(name):
    # Submodules load on first use, so `import irbm` stays light (no matplotlib, no sklearn).
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'irbm' has no attribute {name!r}")
