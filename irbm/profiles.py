"""Training profiles: named sets of training rules (`irbm.settings.Settings.profile`).

``irbm`` is this library's rules; ``authors`` the rules of the authors' public iRBM code
(MarcCote/iRBM), each difference also a setting of its own:

- ``growth="chains"``: growth on z drawn on the negative chains, before and after the Gibbs
  steps (their ``GrowiRBM``), never on the data's z;
- ``growth_trigger="last"``: on a z in their last category, z >= l (irbm: z > l);
- ``new_unit="chains"``: a grown unit's weights from one ADAGRAD (+ L1) step on the chains'
  gradient, its bias 0 with an empty accumulator;
- ``epsilon_placement="inside"``: ADAGRAD's lr / sqrt(G + eps), G including this gradient;
- ``regularization="authors"``: their L2 and L1 (for the iRBM: W and b soft-thresholded by
  each element's own rate times l1, c left alone);
- ``pruning="one"``: with L1, at most one trailing all-zero unit dropped per update;
- ``shuffle=False`` and ``chains_per_update="rows"``: minibatches in file order, the last,
  short one advancing only the first chains.

Their zero initial parameters (iRBM) and zero initial chains are irbm's too, and their oRBM's
W ~ N(0, 0.01^2) as well, so no setting is needed for them.
"""

from __future__ import annotations

# The training rules each profile sets (`Settings.profile`). Options given explicitly win; the
# growth rules apply to families that grow, epsilon_placement to ADAGRAD: elsewhere every
# profile leaves irbm's values, which change nothing there.
PROFILES = {
    "irbm": {"epsilon_placement": "outside", "regularization": "proximal", "shuffle": True,
             "chains_per_update": "all", "growth": "any", "growth_trigger": "tail",
             "new_unit": "peers", "pruning": "all"},
    "authors": {"epsilon_placement": "inside", "regularization": "authors", "shuffle": False,
                "chains_per_update": "rows", "growth": "chains", "growth_trigger": "last",
                "new_unit": "chains", "pruning": "one"},
}
GROWTH_SETTINGS = ("growth", "growth_trigger", "new_unit", "pruning")
# Values irbm's profile gave before they changed (new_unit "update" until session 22): every
# run records the rules it resolved, fixed-size families' runs included, where they change
# nothing, so such records stay valid.
FORMER_IRBM = {"new_unit": ("update",)}


def profile_values(profile: str, family_cls, optimizer: str) -> dict:
    """The values ``profile`` gives the settings it governs, for a family class and optimizer
    (irbm's where a rule does not apply: growth rules to fixed-size families, the epsilon
    placement to SGD)."""
    values = dict(PROFILES[profile])
    for name in values:
        if (name in GROWTH_SETTINGS and not family_cls.resizable) or \
                (name == "epsilon_placement" and optimizer != "adagrad"):
            values[name] = PROFILES["irbm"][name]
    return values


def merge_settings(recorded: dict, given: dict) -> dict:
    """A run's recorded settings updated by ``given``; when ``given`` changes the profile, the
    settings the profile governs are derived anew (unless given too)."""
    if given.get("profile", recorded.get("profile", "irbm")) != recorded.get("profile", "irbm"):
        recorded = {name: value for name, value in recorded.items()
                    if name not in PROFILES["irbm"]}
    return {**recorded, **given}


def profile_help(name: str) -> str:
    """' (default: X; with --profile authors: Y)' for a setting a profile governs."""
    def shown(profile):
        value = PROFILES[profile][name]
        return {True: "on", False: "off"}.get(value, value)
    others = "".join(f"; with --profile {profile}: {shown(profile)}" for profile in PROFILES
                     if profile != "irbm")
    return f" (default: {shown('irbm')}{others})"
