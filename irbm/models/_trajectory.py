"""Annealing along the training trajectory (Béreux, Decelle, Furtlehner, Rosset & Seoane 2024,
"Fast, accurate training and sampling of Restricted Boltzmann Machines", arXiv 2405.15376).

The models saved during training are the intermediate distributions: from the factorized base
(every per-unit parameter zero, visible biases c0) through snapshot 1, 2, ... to the model,
with the parameters interpolated linearly between consecutive knots. The first segment, from
the base to the first snapshot, is exactly the linear path of Salakhutdinov & Murray for that
snapshot (t W, t b, c0 + t (c - c0)); the others follow the model as training moved it, which
its persistent chains tracked, so the chains never have to find the modes all at once.

For the infinite RBM an earlier snapshot with fewer units is padded with zero units: the same
distribution (units past l have zero parameters). Families of fixed size need snapshots of the
model's size.
"""

from __future__ import annotations

import copy

import torch

from ._annealing import AnnealingPath, UniformSource
from ._bipartite import BipartiteModel, BipartitePath


class TrajectoryPath(AnnealingPath):
    """f_t(v) = exp(-F(v; theta(t))), theta piecewise linear through the knots
    (base, snapshot_1, ..., model) at ``positions`` in [0, 1].

    Parameters
    ----------
    snapshots : list of EnergyModel (BipartiteModel families), earliest first, the evaluated
        model last; same family, dtype and device.
    base_visible_bias : Tensor (n_visible,)
    positions : sequence of float, optional
        Where each knot sits in t, from 0 (the base) to 1 (the model), len(snapshots) + 1
        values, strictly increasing; default evenly spaced.
    """

    def __init__(self, snapshots, base_visible_bias, positions=None):
        snapshots = list(snapshots)
        if not snapshots:
            raise ValueError("a trajectory needs at least the model itself")
        model = snapshots[-1]
        self.model = model
        if not isinstance(model, BipartiteModel):
            raise ValueError(f"trajectory annealing needs a BipartiteModel family, got "
                             f"{type(model).__name__}")
        for snapshot in snapshots:
            if type(snapshot) is not type(model) or snapshot.n_visible != model.n_visible:
                raise ValueError(f"every snapshot must be a {type(model).__name__} with "
                                 f"{model.n_visible} visible units")
        linear = BipartitePath(model, base_visible_bias)
        self.base_bias, self.log_base_partition = linear.base_bias, linear.log_base_partition
        self._sample_base = linear.sample_base
        states = [self._base_state(model, self.base_bias)]
        states += [self._padded_state(snapshot, model) for snapshot in snapshots]
        self.names = [name for name, value in states[-1].items()
                      if value.is_floating_point() and any(
                          not torch.equal(state[name], value) for state in states)]
        self.states = states
        count = len(states)
        positions = (torch.linspace(0.0, 1.0, count, dtype=torch.float64) if positions is None
                     else torch.as_tensor(positions, dtype=torch.float64))
        if positions.shape != (count,) or positions[0] != 0.0 or positions[-1] != 1.0 or \
                not (positions.diff() > 0).all():
            raise ValueError(f"positions must be {count} increasing values from 0 to 1")
        self.positions = positions.tolist()
        self.description = f"trajectory: {len(snapshots) - 1} snapshots, then the model"
        # Two working copies: the density at t_from and at t_to of a step.
        self.working = [copy.deepcopy(model), copy.deepcopy(model)]
        self.loaded = [None, None]
        self.targets = [{**dict(copy_.named_parameters()), **dict(copy_.named_buffers())}
                        for copy_ in self.working]

    @staticmethod
    def _base_state(model, base_bias) -> dict:
        """Per-unit parameters zero, the other parameters (the visible biases) at the base."""
        state = {name: value.detach().clone() for name, value in model.state_dict().items()}
        for name, spec in model.parameter_specs.items():
            state[name] = torch.zeros_like(state[name]) if spec.per_unit else \
                base_bias.to(state[name].dtype).expand_as(state[name]).clone()
        return state

    @staticmethod
    def _padded_state(snapshot, model) -> dict:
        if snapshot.n_hidden != model.n_hidden:
            if not model.resizable or snapshot.n_hidden > model.n_hidden:
                raise ValueError(f"a snapshot has {snapshot.n_hidden} hidden units and the "
                                 f"model {model.n_hidden}: a resizable family anneals from "
                                 "smaller snapshots (padded with zero units), no family from "
                                 "larger ones (pad the model to the largest size first)")
            snapshot = copy.deepcopy(snapshot)
            index = torch.arange(model.n_hidden, device=snapshot.device)
            snapshot.relayout_hidden(torch.where(index < snapshot.n_hidden, index, -1))
        return {name: value.detach().to(model.device, model.dtype)
                if value.is_floating_point() else value.detach()
                for name, value in snapshot.state_dict().items()}

    def _load(self, which: int, t: float):
        """Working copy ``which`` set to theta(t)."""
        if self.loaded[which] == t:
            return self.working[which]
        knot = max(k for k in range(len(self.positions) - 1) if self.positions[k] <= t) \
            if t < 1.0 else len(self.positions) - 2
        left, right = self.positions[knot], self.positions[knot + 1]
        weight = (t - left) / (right - left)
        with torch.no_grad():
            for name in self.names:
                torch.lerp(self.states[knot][name], self.states[knot + 1][name], weight,
                           out=self.targets[which][name].data)
        self.loaded[which] = t
        return self.working[which]

    @torch.no_grad()
    def log_unnormalized(self, v, t):
        model = self._load(0, t)
        with model.trusted_inputs():
            return -model.free_energy(v.to(model.dtype)).double()

    def sample_base(self, n_chains, uniforms):
        return self._sample_base(n_chains, uniforms)

    def start(self, visible, uniforms: UniformSource):
        self.visible = visible.to(self.model.device, self.model.dtype).contiguous().clone()
        seed = int(uniforms.filler(torch.empty(1, dtype=torch.float64,
                                                device=self.model.device))()[0] * 2**62)
        self.generator = torch.Generator(device=self.model.device).manual_seed(seed)

    @torch.no_grad()
    def step(self, t_from, t_to):
        before, after = self._load(0, t_from), self._load(1, t_to)
        with before.trusted_inputs(), after.trusted_inputs():
            delta = (before.free_energy(self.visible).double()
                     - after.free_energy(self.visible).double())
            self.visible, _ = after.gibbs_step(self.visible, self.generator)
        # The copy at t_to is the next step's t_from: swap instead of reloading.
        for pair in (self.working, self.loaded, self.targets):
            pair.reverse()
        return delta
