"""Figures of the paper's "Experiments" section, and all the figures of a run directory.

Every function takes arrays, tensors or a model, returns the `matplotlib.figure.Figure`, and
when given ``path`` also writes it there as a PNG, atomically. Figures are drawn on the Agg
canvas without pyplot, so no screen is needed and no global backend is switched.

Modules: `images` (image grids, filters, samples, chain evolution), `ordered` (P(z | v) and the
top inputs per interval of z, for models with z), `curves` (hidden-layer size, AIS convergence,
training curves) and `run` (`figures_for_run`, what ``irbm plot`` draws).
"""

from ._canvas import tile_images
from .curves import plot_ais_convergence, plot_size_history, plot_training_curves
from .images import image_grid, plot_chain_evolution, plot_filters, plot_samples
from .ordered import plot_p_z_given_v, plot_top_inputs_by_z_interval, top_inputs_by_z_interval
from .run import figures_for_run

__all__ = ["image_grid", "plot_filters", "plot_samples", "plot_chain_evolution",
           "plot_p_z_given_v", "top_inputs_by_z_interval", "plot_top_inputs_by_z_interval",
           "plot_size_history", "plot_ais_convergence", "plot_training_curves", "tile_images",
           "figures_for_run"]
