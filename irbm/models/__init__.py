"""Model families: one file each, behind the abstract interface `EnergyModel`.

A new family subclasses `EnergyModel` (or `BipartiteModel`, or a built-in family), sets its class
attributes (``family``, ``display_name``, ``parameter_specs``, ...) and decorates itself with
`register_family`; training, checkpoints, AIS, evaluation, sampling, plots and the CLI then work
for it without any other change.
"""

from ._annealing import AnnealingPath, UniformSource
from ._base import (
                    DTYPES,
                    EnergyModel,
                    Gradients,
                    HiddenState,
                    ParameterSpec,
                    bernoulli,
                    binary_configurations,
                    check_device,
                    check_dtype,
                    require_finite_parameters,
                    require_full_precision,
                    take_units,
)
from ._bipartite import BipartiteModel, BipartitePath
from ._exact import block_diagonal
from ._registry import FAMILIES, build_model, family_class, register_family
from ._trajectory import TrajectoryPath
from .infinite import InfiniteRBM
from .ordered import OrderedRBM
from .rbm import RBM

__all__ = ["EnergyModel", "Gradients", "BipartiteModel", "HiddenState", "ParameterSpec",
           "AnnealingPath", "BipartitePath", "TrajectoryPath", "block_diagonal", "UniformSource",
           "RBM", "OrderedRBM", "InfiniteRBM",
           "FAMILIES",
           "build_model", "family_class", "register_family", "binary_configurations",
           "take_units", "bernoulli", "check_device", "check_dtype", "DTYPES",
           "require_finite_parameters", "require_full_precision"]
