"""irbm: restricted Boltzmann machines whose hidden layer learns its own size.

Implements the RBM, the ordered RBM and the infinite RBM of Cote & Larochelle,
"An Infinite Restricted Boltzmann Machine" (Neural Computation, 2016).
"""

from .models import RBM, EnergyModel, FAMILIES, HiddenState, InfiniteRBM, OrderedRBM, build_model

__version__ = "0.1.0"

__all__ = ["RBM", "OrderedRBM", "InfiniteRBM", "EnergyModel", "HiddenState", "FAMILIES",
           "build_model", "__version__"]
