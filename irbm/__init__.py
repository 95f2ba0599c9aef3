"""irbm: restricted Boltzmann machines whose hidden layer learns its own size.

Implements the RBM, the ordered RBM and the infinite RBM of Cote & Larochelle,
"An Infinite Restricted Boltzmann Machine" (Neural Computation, 2016).
"""

from importlib import import_module as _import_module
from importlib.util import find_spec as _find_spec

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
           "build_model", "Trainer", "Callback", "save", "load", "ais", "bracket", "evaluate",
           "reverse", "floor", "tempering", "datasets", "sampling", "plotting", "sklearn", "runs",
           "strategies", "sweep", "workflows", "settings", "register_family", "__version__"]


def __getattr__(name):
    # Every public submodule loads on first use (`irbm.tempering.X` after `import irbm` alone),
    # so `import irbm` stays light (no matplotlib, no sklearn, no Dask).
    if name.isidentifier() and not name.startswith("_") and \
            _find_spec(f"{__name__}.{name}") is not None:
        return _import_module(f".{name}", __name__)
    raise AttributeError(f"module 'irbm' has no attribute {name!r}")
