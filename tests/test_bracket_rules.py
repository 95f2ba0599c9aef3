"""The certification rules of a bracket (`irbm.bracket.verdict`) and its control variate, on
hand-made levels: each rule fires on the case it names and only there."""

import math

import numpy as np
import pytest
import torch

from irbm.bracket import (
    conditional_bracket,
    control_variate,
    judge_conservative,
    rejudge,
    rising_routes,
    same_weights_move,
    verdict,
    width_text,
)

# The last reason of a bracket the time budget stopped before it settled (2,000 temperatures).
OUT_OF_TIME = ("stopped at the time budget after 2000 temperatures, before another doubling "
               "could settle the above (--continue, Python: resume=, goes on from the stored "
               "levels)")


def level(n_betas, optimistic, conservative, *, own=None, stderr=0.05, ess=80.0, chains=100):
    own_optimistic, own_conservative = own or (optimistic, conservative)
    return {"n_betas": n_betas, "optimistic": optimistic, "conservative": conservative,
            "own_optimistic": own_optimistic, "own_conservative": own_conservative,
            "conservative_stderr": stderr, "best_path": "linear",
            "ais": {"linear": {"effective_sample_size": ess, "n_chains": chains}}}


def test_a_narrow_converged_bracket_is_certified():
    assert verdict([level(1000, 100.0, 100.9), level(2000, 100.1, 100.8)], tolerance=1.0,
                   out_of_time=False) == []


@pytest.mark.parametrize("levels, fragment", [
    ([level(1000, 100.0, 100.5)], "only one number of temperatures"),
    ([level(1000, 99.0, 101.0), level(2000, 100.0, 100.5)], "optimistic side moved by +1.00"),
    ([level(1000, 100.0, 101.4), level(2000, 100.1, 100.8)], "conservative side moved by -0.60"),
    ([level(1000, 100.0, 103.0), level(2000, 100.1, 102.9)], "2.80 nats wide"),
    ([level(1000, 100.0, 100.5), level(2000, 100.0, 100.5, own=(97.6, 100.5))],
     "2.40 nats below the pooled estimate"),
    ([level(1000, 100.0, 100.5, stderr=0.4), level(2000, 100.0, 100.5, stderr=0.4)],
     "standard error is 0.40 nats (RAISE rows): use more rows (a new bracket with --raise N, "
     "Python: bracket_nll's rows= or evaluate_run's raise_rows=; --continue, Python: resume=, "
     "keeps its rows)"),
])
def test_each_rule_says_why(levels, fragment):
    reasons = verdict(levels, tolerance=1.0, out_of_time=False)
    assert any(fragment in reason for reason in reasons), reasons


def test_which_side_is_suspect_and_the_time_budget_are_named():
    levels = [level(1000, 100.0, 104.0), level(2000, 100.1, 103.0, ess=3.0)]
    reasons = verdict(levels, tolerance=1.0, out_of_time=True)
    assert "optimistic side is suspect: its AIS weights are degenerate" in reasons[0]
    assert "conservative side is suspect: it still fell by 1.00" in reasons[0]
    assert reasons[-1] == OUT_OF_TIME
    # Certified brackets never mention the budget.
    assert verdict([level(1000, 100.0, 100.5), level(2000, 100.0, 100.5)], tolerance=1.0,
                   out_of_time=True) == []


def test_the_suspect_optimistic_side_is_judged_on_the_level_that_gave_it():
    # Levels as bracket_nll builds them: each keeps the highest optimistic NLL (highest ln Z)
    # so far. Here the first level's healthy run is kept; the last level's degenerate run
    # (own NLL 100.0, ESS 2) was not.
    healthy_kept = [level(1000, 100.3, 104.0, ess=80.0),
                    level(2000, 100.3, 103.9, own=(100.0, 103.9), ess=2.0)]
    assert not any("optimistic side is suspect" in r
                   for r in verdict(healthy_kept, tolerance=1.0, out_of_time=False))
    # And the reverse: the kept side is the degenerate level's.
    degenerate_kept = [level(1000, 100.0, 104.0, ess=80.0),
                       level(2000, 100.3, 103.9, own=(100.3, 103.9), ess=2.0)]
    reasons = verdict(degenerate_kept, tolerance=1.0, out_of_time=False)
    assert any("effective sample size 2.0 of 100 at 2000 temperatures" in r for r in reasons)


def test_control_variate_scales_the_rows_estimate_of_ln_z_to_the_whole_set():
    free_all = torch.tensor([-10.0, -20.0, -30.0, -40.0], dtype=torch.float64)
    free_rows = free_all[:2]
    log_z = 50.0
    exact_rows = -(free_rows + log_z)  # ln p(v) = -F(v) - ln Z
    whole, stderr = control_variate(free_all, free_rows, exact_rows)
    assert whole == pytest.approx(float(free_all.mean()) + log_z) and stderr == 0.0
    noisy = exact_rows - torch.tensor([0.5, 1.5], dtype=torch.float64)
    whole, stderr = control_variate(free_all, free_rows, noisy)
    assert whole == pytest.approx(float(free_all.mean()) + log_z + 1.0)
    assert stderr == pytest.approx(float(torch.tensor([0.5, 1.5]).std()) / math.sqrt(2))


def test_moves_within_the_estimates_noise_are_not_trends():
    """A 0.5-nat move between levels whose ln Z-hat have standard errors of 0.3 is noise; with
    standard errors of 0.02 it is a trend; the same for a last level behind the best."""
    def noisy(n_betas, optimistic, sigma, own=None):
        record = level(n_betas, optimistic, 100.6, own=own)
        record.update(own_optimistic_sigma=sigma, own_conservative_stderr=0.02)
        return record

    def rules(sigma, **kwargs):
        return verdict([noisy(1000, 100.0, sigma), noisy(2000, 100.5, sigma, **kwargs)],
                       tolerance=1.0, out_of_time=False)

    assert rules(0.3) == []
    assert any("optimistic side moved by +0.50" in reason for reason in rules(0.02))
    assert rules(0.3, own=(99.9, 100.6)) == []  # 0.6 behind, within 3 sigma = 0.9
    assert any("0.60 nats below the pooled" in reason for reason in rules(0.05, own=(99.9, 100.6)))


def test_the_budget_that_stopped_it_is_named():
    levels = [level(1000, 100.0, 104.0), level(2000, 100.1, 103.0)]
    assert verdict(levels, tolerance=1.0, out_of_time="temperatures")[-1] == \
        "stopped at the largest number of temperatures allowed (2000) before the above settled"
    assert verdict(levels, tolerance=1.0, out_of_time="time")[-1] == \
        OUT_OF_TIME


# --------------------------------------------------- RAISE refuted by the optimistic side
def raised(n_betas, optimistic, per_route, stderr=0.1):
    """A level as bracket_nll builds it before the conservative side is judged: the kept
    optimistic side and one RAISE record per route (NLL over the whole set)."""
    record = level(n_betas, optimistic, math.nan)
    record["raise"] = {route: {"whole": nll, "rows": nll - 2.0, "stderr": stderr}
                       for route, nll in per_route.items()}
    return record


def judged(levels):
    for index in range(len(levels)):
        judge_conservative(levels[:index + 1])
    return levels[-1]


def test_a_raise_route_below_the_optimistic_side_is_left_out():
    # The linear route's RAISE falls below the optimistic side (134.4) by far more than its
    # noise (3 x 0.1 + 1 nat) at the last level: left out. Only the last level's records
    # count: the pinned route's 146.8 at fewer temperatures came from a worse annealing model.
    levels = [raised(1000, 134.4, {"linear": 133.0, "pinned": 146.8}),
              raised(2000, 134.4, {"linear": 130.5, "pinned": 150.8})]
    last = judged(levels)
    assert last["conservative"] == 150.8 and last["conservative_rows"] == 148.8
    assert last["raise_path"] == "pinned" and last["own_conservative"] == 150.8
    assert last["refuted"] == {"linear": 130.5}
    reasons = verdict(levels, tolerance=1.0, out_of_time=False)
    assert any("RAISE (linear: 130.50) falls below the optimistic side (134.40)" in reason
               and "overshot" in reason for reason in reasons), reasons
    assert any("16.40 nats wide" in reason for reason in reasons), reasons
    # The pinned route's RAISE rose with the temperatures: its annealing model is moving.
    assert any("RAISE along pinned rose by 4.00 nats" in reason for reason in reasons), reasons


def test_a_route_refuted_at_fewer_temperatures_counts_again_when_it_is_not_at_the_last():
    levels = [raised(1000, 100.0, {"linear": 97.0}), raised(2000, 100.0, {"linear": 100.4})]
    last = judged(levels)
    assert last["conservative"] == 100.4 and last["refuted"] == {}
    assert not any("falls below" in reason
                   for reason in verdict(levels, tolerance=1.0, out_of_time=False))


def test_a_change_of_route_is_not_a_trend_of_the_conservative_side():
    # At 1000 temperatures the linear route (133.42, within the noise) is the side; at 2000 it
    # is refuted and the pinned route (148.5 -> 148.6, a move within noise) takes over.
    levels = [raised(1000, 134.4, {"linear": 133.42, "pinned": 148.5}),
              raised(2000, 134.4, {"linear": 131.0, "pinned": 148.6})]
    judged(levels)
    assert levels[0]["conservative"] == 133.42 and levels[1]["conservative"] == 148.6
    reasons = verdict(levels, tolerance=1.0, out_of_time=False)
    assert not any("conservative side moved" in r or "rose" in r for r in reasons), reasons


def test_a_raise_route_within_the_noise_below_the_optimistic_side_is_kept():
    # 1.2 nats below with a standard error of 0.1: within 3 x 0.1 + 1 = 1.3.
    last = judged([raised(1000, 100.0, {"linear": 98.8}), raised(2000, 100.0, {"linear": 98.8})])
    assert last["conservative"] == 98.8 and last["refuted"] == {}
    # 1.4 below is beyond it.
    last = judged([raised(1000, 100.0, {"linear": 98.6}), raised(2000, 100.0, {"linear": 98.6})])
    assert last["refuted"] == {"linear": 98.6}


def test_with_every_raise_route_refuted_there_is_no_conservative_side():
    levels = [raised(1000, 134.4, {"linear": 130.0}), raised(2000, 134.4, {"linear": 129.0})]
    last = judged(levels)
    assert last["conservative"] == math.inf and last["raise_path"] is None
    reasons = verdict(levels, tolerance=1.0, out_of_time=False)
    assert any("no conservative side" in reason for reason in reasons), reasons
    assert not any("nats wide" in reason or "cross" in reason for reason in reasons), reasons


def test_rejudge_recomputes_the_verdict_from_the_stored_estimates():
    levels = [raised(1000, 134.4, {"linear": 133.0, "pinned": 146.8}),
              raised(2000, 134.4, {"linear": 130.5, "pinned": 150.8})]
    for record in levels:  # as an older rule stored it: the lowest RAISE of all, crossing
        record.update(conservative=130.5, conservative_rows=128.5, conservative_stderr=0.1)
    stored = {"optimistic": 134.4, "conservative": 130.5, "width": -3.9, "certified": False,
              "reasons": ["the sides cross by 3.90 nats"], "tolerance": 1.0,
              "stopped_by": "time", "levels": levels}
    fresh = rejudge(stored)
    assert fresh["conservative"] == 150.8 and fresh["width"] == pytest.approx(16.4)
    assert fresh["certified"] is False
    assert fresh["reasons"][-1] == OUT_OF_TIME
    assert stored["levels"][-1]["conservative"] == 130.5  # the stored record is not modified
    assert fresh["levels"][-1]["raise"] == stored["levels"][-1]["raise"]


def test_a_tempering_estimate_outside_the_bracket_is_named():
    levels = [level(1000, 100.0, 100.8), level(2000, 100.1, 100.8)]
    assert verdict(levels, tolerance=1.0, out_of_time=False,
                   cross_check={"nll": 100.4, "stderr": 0.1, "passages": 12}) == []
    above = verdict(levels, tolerance=1.0, out_of_time=False,
                    cross_check={"nll": 103.0, "stderr": 0.1, "passages": 12})
    assert any("lies above the conservative side (100.80)" in reason for reason in above)
    below = verdict(levels, tolerance=1.0, out_of_time=False,
                    cross_check={"nll": 98.0, "stderr": 0.1, "passages": 12})
    assert any("lies below the optimistic side (100.10)" in reason for reason in below)
    low_bdmc = verdict(levels, tolerance=1.0, out_of_time=False,
                       cross_check={"nll": 100.4, "stderr": 0.1, "passages": 12,
                                    "bdmc": {"nll": 98.5, "stderr": 0.1}})
    assert any("BDMC from the tempering samples (98.50 +/- 0.10)" in r for r in low_bdmc)
    assert verdict(levels, tolerance=1.0, out_of_time=False,
                   cross_check={"nll": 100.4, "stderr": 0.1, "passages": 12,
                                "bdmc": {"nll": 100.6, "stderr": 0.1}}) == []
    stuck = verdict(levels, tolerance=1.0, out_of_time=False,
                    cross_check={"nll": 100.4, "stderr": 0.1, "passages": 0})
    assert any("after its burn-in" in reason for reason in stuck)


def test_a_tempering_estimate_far_below_every_ais_level_is_called_wrong():
    """Were tempering's ln Z the truth, each level's unbiased Z-hat would lie k nats above it
    with probability at most e^-k, and independent levels multiply: e^-(sum of k). Below 0.01
    the verdict says tempering missed mass; above, it says either may be at fault, with the
    bound. A level's routes are averaged as Z-hats (not the largest taken)."""
    from irbm.bracket import overshoot_bound
    levels = [level(1000, 100.0, 100.8), level(2000, 100.1, 100.8), level(4000, 100.1, 100.8)]
    for entry, log_z in zip(levels, (10.0, 10.5, 11.0)):
        entry["ais"]["linear"]["log_z"] = log_z
    assert overshoot_bound(levels, 5.0) == pytest.approx(math.exp(-(5.0 + 5.5 + 6.0)))
    assert overshoot_bound(levels, 10.2) == pytest.approx(math.exp(-(0.3 + 0.8)))
    assert overshoot_bound(levels, 12.0) == 1.0
    wrong = verdict(levels, tolerance=1.0, out_of_time=False,
                    cross_check={"nll": 95.0, "stderr": 0.1, "passages": 12, "log_z": 5.0})
    assert any("with probability at most 6.8e-08 (Markov's inequality per level): its chains "
               "missed mass that AIS found" in reason for reason in wrong), wrong
    doubt = verdict(levels, tolerance=1.0, out_of_time=False,
                    cross_check={"nll": 95.0, "stderr": 0.1, "passages": 12, "log_z": 10.2})
    assert any("either its chains missed mass that AIS found or the best of the AIS estimates "
               "overshot ln Z (were it right, the AIS levels would lie this far above it with "
               "probability at most 0.33" in reason for reason in doubt), doubt
    # Two routes of 10 and 12 pool to ln((e^10 + e^12) / 2), not 12.
    levels[0]["ais"]["model base"] = {"log_z": 12.0}
    levels[0]["ais"]["linear"]["log_z"] = 10.0
    pooled = math.log((math.exp(10.0) + math.exp(12.0)) / 2)
    assert overshoot_bound(levels[:1], 0.0) == pytest.approx(math.exp(-pooled))
    # Levels stored without their estimates bound nothing.
    assert overshoot_bound([level(1000, 100.0, 100.8)], 5.0) is None


def test_the_optimistic_side_pools_the_runs_rather_than_taking_the_largest():
    """Runs weigh by chains x temperatures: 100 x 1000 at ln Z-hat 10 and 100 x 3000 at 12 pool
    to ln((e^10 + 3 e^12) / 4), never above the largest."""
    from irbm.bracket import pooled_log_z
    runs = [{"n_betas": 1000, "ais": {"a": {"log_z": 10.0, "n_chains": 100}}},
            {"n_betas": 3000, "ais": {"a": {"log_z": 12.0, "n_chains": 100}}}]
    assert pooled_log_z(runs) == pytest.approx(math.log((math.exp(10) + 3 * math.exp(12)) / 4))
    runs[0]["ais"]["b"] = {"log_z": 11.0, "n_chains": 200}
    assert pooled_log_z(runs) == pytest.approx(
        math.log((math.exp(10) + 2 * math.exp(11) + 3 * math.exp(12)) / 6))
    assert pooled_log_z(runs) < 12.0
    # rejudge recomputes a stored optimistic side that kept the largest run.
    levels = [raised(1000, 100.0, {"linear": 101.0}), raised(1000, 100.0, {"linear": 101.0})]
    for record, log_z in zip(levels, (48.0, 50.0)):
        record["ais"] = {"linear": {"log_z": log_z, "n_chains": 100,
                                    "effective_sample_size": 50.0}}
        record.update(log_z=50.0, optimistic=50.0 + 50.0, optimistic_rows=40.0 + 50.0)
    fresh = rejudge({"levels": levels, "tolerance": 1.0, "stopped_by": None,
                     "log_z_floor": 0.0, "reasons": []})
    pooled = math.log((math.exp(48) + math.exp(50)) / 2)
    assert fresh["log_z"] == pytest.approx(pooled)
    assert fresh["optimistic"] == pytest.approx(50.0 + pooled)
    assert fresh["optimistic_rows"] == pytest.approx(40.0 + pooled)


def test_a_raise_route_below_the_tempering_estimate_is_left_out():
    # The authors-profile iRBM's case: linear RAISE 131.87 (se 0.3) is within the noise of the
    # optimistic side (133.22) but 2.31 below tempering's 134.18 +/- 0.09, beyond
    # 3 x hypot(0.3, 0.09) + 1 = 1.94: refuted, and the pinned route (150.8) is the side.
    check = {"nll": 134.18, "stderr": 0.09, "passages": 188}
    levels = [raised(1000, 133.22, {"linear": 131.9, "pinned": 150.0}, stderr=0.3),
              raised(2000, 133.22, {"linear": 131.87, "pinned": 150.8}, stderr=0.3)]
    judged(levels)
    judge_conservative(levels, check)
    last = levels[-1]
    assert last["refuted"] == {} and last["refuted_by_check"] == {"linear": 131.87}
    assert last["conservative"] == 150.8 and last["raise_path"] == "pinned"
    reasons = verdict(levels, tolerance=1.0, out_of_time=False, cross_check=check)
    assert any("RAISE (linear: 131.87) falls below the tempering estimate (134.18 +/- 0.09)"
               in reason for reason in reasons), reasons
    # Within the noise (tempering 133.7: 1.83 above) the route stays.
    judge_conservative(levels, {**check, "nll": 133.7})
    assert levels[-1]["conservative"] == 131.87 and levels[-1]["refuted_by_check"] == {}
    # A check that never carried a state from the base to the model refutes nothing.
    judge_conservative(levels, {**check, "passages": 0})
    assert levels[-1]["conservative"] == 131.87
    # rejudge applies a stored check to the last level only.
    stored = {"levels": levels, "tolerance": 1.0, "stopped_by": None, "reasons": [],
              "cross_check": check}
    fresh = rejudge(stored)
    assert fresh["conservative"] == 150.8 and fresh["levels"][0]["refuted_by_check"] == {}


def test_later_levels_weigh_the_routes_by_what_earlier_levels_found():
    """Level 1 weighs its routes by chains x temperatures; level 2 shares its weight out in
    proportion to each route's earlier Z-hat, so a route 5 nats behind nearly drops out."""
    from irbm.bracket import pool_weights, pooled_log_z
    levels = [{"n_betas": 1000, "ais": {"a": {"log_z": 10.0, "n_chains": 100},
                                        "b": {"log_z": 5.0, "n_chains": 100}}},
              {"n_betas": 2000, "ais": {"a": {"log_z": 10.2, "n_chains": 100},
                                        "b": {"log_z": 5.1, "n_chains": 100},
                                        "c": {"log_z": 50.0, "n_chains": 100}}}]
    weights = [weight for _, weight in pool_weights(levels)]
    share_a = 1 / (1 + math.exp(-5.0))
    assert weights == pytest.approx([1e5, 1e5, 6e5 * share_a, 6e5 * (1 - share_a)])
    # Route c, first seen at level 2, gets no weight there: its 50 cannot carry the pool.
    expected = math.log((1e5 * math.exp(10) + 1e5 * math.exp(5)
                         + 6e5 * share_a * math.exp(10.2)
                         + 6e5 * (1 - share_a) * math.exp(5.1)) / 8e5)
    assert pooled_log_z(levels) == pytest.approx(expected)
    # Weighted alike (the first level alone), the lagging route costs about ln 2.
    assert pooled_log_z(levels[:1]) == pytest.approx(10 + math.log((1 + math.exp(-5)) / 2))


def test_the_pool_with_weights_from_earlier_levels_is_unbiased():
    """Monte Carlo: every run's Z-hat = Z x (mean-1 log-normal noise), routes of very
    different quality, three levels; the mean of the pooled Z-hat / Z over many brackets is 1
    (the weights of a level depend only on earlier levels)."""
    from irbm.bracket import pooled_log_z
    generator = np.random.default_rng(0)
    sigmas = {"good": 0.3, "noisy": 2.0, "awful": 3.0}
    ratios = []
    for _ in range(20000):
        levels = [{"n_betas": n_betas, "ais": {
            route: {"log_z": sigma * generator.standard_normal() - sigma**2 / 2,
                    "n_chains": 10} for route, sigma in sigmas.items()}}
            for n_betas in (100, 200, 400)]
        ratios.append(math.exp(pooled_log_z(levels)))
    ratios = np.array(ratios)
    assert abs(ratios.mean() - 1) < 4 * ratios.std() / math.sqrt(len(ratios)), ratios.mean()


def test_the_optimistic_side_converges_with_its_route_weights_held_fixed():
    """The first level splits its weight evenly among the routes, so a poor route drags the
    pool down there and less at the next level: the pool moves though no route does (the
    CalTech101 oRBM-500 at 4,000 and 8,000 temperatures, session 14). With the route weights of
    the level before held fixed, only the estimates move; a route that still rises is flagged."""
    def routes(linear, model_base):
        return {"linear": {"log_z": linear, "sigma": 0.1, "effective_sample_size": 80.0,
                           "n_chains": 100},
                "linear, model base": {"log_z": model_base, "sigma": 0.2,
                                       "effective_sample_size": 9.0, "n_chains": 100}}
    first, second = level(1000, 99.5, 100.8), level(2000, 100.0, 100.7)
    first["ais"], second["ais"] = routes(50.28, 45.6), routes(50.20, 46.3)
    reasons = verdict([first, second], tolerance=1.0, out_of_time=False)
    assert not any("optimistic side moved" in reason for reason in reasons), reasons
    second["ais"]["linear"]["log_z"] = 50.9  # the favoured route itself rose by 0.62
    reasons = verdict([first, second], tolerance=1.0, out_of_time=False)
    (reason,) = [reason for reason in reasons if "optimistic side moved" in reason]
    # The printed sides moved by 0.5; the reason says what moved by 0.6.
    assert "+0.6" in reason and "(the pooled ln Z with the routes weighted as at the level " \
        "before)" in reason, reasons
    move, sigma = same_weights_move([first, second])
    assert 0.55 < move < 0.63 and 0.05 < sigma < 0.2


def test_bdmc_gives_a_bracket_that_holds_if_the_tempering_samples_are_draws():
    last = level(2000, 142.60, 144.88)
    check = {"nll": 142.45, "stderr": 0.12, "passages": 313,
             "bdmc": {"nll": 142.59, "stderr": 0.14, "n_samples": 256}}
    held = conditional_bracket(last, check, tolerance=1.0)
    assert held["optimistic"] == 142.60 and held["conservative"] == 142.59
    assert held["within_tolerance"] and held["passages"] == 313
    wide = conditional_bracket(last, {**check, "bdmc": {**check["bdmc"], "nll": 143.9}}, 1.0)
    assert not wide["within_tolerance"]  # 1.3 nats wide
    below = conditional_bracket(last, {**check, "bdmc": {**check["bdmc"], "nll": 140.0}}, 1.0)
    assert not below["within_tolerance"]  # crosses beyond BDMC's noise: samples miss mass
    assert below["contradicted"] and not held["contradicted"] and not wide["contradicted"]
    noisy = conditional_bracket(last, {**check, "bdmc": {**check["bdmc"], "stderr": 0.3}}, 1.0)
    assert not noisy["within_tolerance"]  # BDMC's standard error above a quarter nat
    assert conditional_bracket(last, {**check, "passages": 0}, 1.0) is None
    assert conditional_bracket(last, {"nll": 142.45, "stderr": 0.12, "passages": 9}, 1.0) is None
    assert conditional_bracket(last, None, 1.0) is None


def test_a_lagging_route_still_rising_within_reach_of_the_pool_is_flagged():
    """A route far behind weighs little in the pool, so its rise hardly moves the pool: the
    rise is flagged where one more such rise would lift the pool (found by a review)."""
    first, second = level(1000, 100.0, 100.8), level(2000, 100.0, 100.7)
    runs = {"linear": (50.20, 50.21), "linear, model base": (47.0, 49.6)}
    for at, which in ((first, 0), (second, 1)):
        at["ais"] = {route: {"log_z": values[which], "sigma": 0.1, "n_chains": 100,
                             "effective_sample_size": 50.0} for route, values in runs.items()}
    second["log_z"] = 50.1
    assert [route for route, _ in rising_routes([first, second])] == ["linear, model base"]
    reasons = verdict([first, second], tolerance=1.0, out_of_time=False)
    assert any("AIS along linear, model base rose by 2.60" in reason for reason in reasons)
    second["ais"]["linear, model base"]["log_z"] = 47.5  # +0.5: no reach of the pool
    assert rising_routes([first, second]) == []


def test_a_conservative_side_short_of_reverse_chains_per_row_is_named():
    """With several reverse chains per row, the last level's RAISE route carries the jackknife
    estimate of the gap they leave (`irbm.evaluate.repeat_gap`): above 0.2 nat a too-wide bracket
    names it, and --raise-repeats, as what loosens it; a narrow bracket stays certified (the
    gap only raises the conservative side), as does any with a small gap or one chain per
    row."""
    def with_gap(gap, conservative):
        last = level(2000, 100.1, conservative)
        last["raise_path"] = "linear"
        last["raise"] = {"linear": {"whole": conservative, "stderr": 0.05, "repeat_gap": gap}}
        before = level(1000, 100.0, conservative + 0.1)
        before["raise"] = {"linear": {"whole": conservative + 0.1, "stderr": 0.05}}
        return [before, last]

    (reason,) = verdict(with_gap(0.35, 102.0), tolerance=1.0, out_of_time=False)
    assert "1.90 nats wide" in reason and "about 0.35 nats of RAISE's NLL" in reason and \
        "--raise-repeats" in reason
    for gap in (0.15, None):
        (reason,) = verdict(with_gap(gap, 102.0), tolerance=1.0, out_of_time=False)
        assert "--raise-repeats" not in reason
    for gap in (0.35, 0.15, None):
        assert verdict(with_gap(gap, 100.8), tolerance=1.0, out_of_time=False) == []


def test_a_floor_above_the_pooled_ais_becomes_the_optimistic_side_and_is_named():
    """A certain floor (sums over distinct visible or hidden vectors, `irbm.floor`) above the
    pooled AIS estimate lifts the optimistic side to it, and the verdict says the annealing
    misses mass; a floor below the pool changes nothing."""
    def stored(floor):
        levels = [raised(1000, 100.0, {"linear": 101.0}), raised(2000, 100.0, {"linear": 100.9})]
        for record, log_z in zip(levels, (50.0, 50.0)):
            record["ais"] = {"linear": {"log_z": log_z, "n_chains": 100, "sigma": 0.01,
                                        "effective_sample_size": 50.0}}
            record.update(log_z=50.0, optimistic=50.0 + 50.0, optimistic_rows=40.0 + 50.0)
        return {"levels": levels, "tolerance": 1.0, "stopped_by": None, "log_z_floor": floor,
                "reasons": []}

    lower = rejudge(stored(49.0))
    assert lower["log_z"] == pytest.approx(50.0) and lower["certified"]
    higher = rejudge(stored(51.5))
    assert higher["log_z"] == 51.5 and higher["optimistic"] == pytest.approx(101.5)
    assert not higher["certified"]
    assert any("1.50 nats below the certain floor" in reason for reason in higher["reasons"])
    # Each level's own optimistic side is lifted too, as `bracket_nll` makes it, so the floor
    # is not mistaken for a pool that hinges on a few chains; nor is the pool's move a trend.
    assert [level["own_optimistic"] for level in higher["levels"]] == [101.5, 101.5]
    assert [level["own_from_floor"] for level in higher["levels"]] == [True, True]
    assert not any(level["own_from_floor"] for level in lower["levels"])
    assert not any("best AIS run gives" in reason or "optimistic side moved" in reason
                   for reason in higher["reasons"])
    # RAISE or tempering below a floor are wrong for certain: no "AIS overshot" alternative.
    summary = stored(53.0)
    summary["cross_check"] = {"nll": 100.0, "stderr": 0.05, "passages": 10, "log_z": 50.0}
    floored = rejudge(summary)
    refuted = [reason for reason in floored["reasons"] if reason.startswith("RAISE")]
    assert len(refuted) == 1 and "a certain floor of the NLL" in refuted[0]
    assert "overshot" not in " ".join(floored["reasons"])
    assert any(reason.startswith("the tempering estimate") and "certain floor" in reason
               for reason in floored["reasons"])
    # A floor leaves no slack for an AIS overshoot: tempering and BDMC 0.3 below it, beyond
    # three of their standard errors, miss mass; the same gap below a pooled AIS is noise.
    check = {"nll": 102.7, "stderr": 0.03, "passages": 10, "log_z": 52.7,
             "bdmc": {"nll": 102.7, "stderr": 0.02, "n_samples": 256}}
    floored = rejudge({**stored(53.0), "cross_check": check})
    assert floored["conditional"]["contradicted"] and floored["conditional"]["certain_floor"]
    assert not floored["conditional"]["within_tolerance"]
    assert any(reason.startswith("the tempering estimate") and "certain floor" in reason
               for reason in floored["reasons"])
    assert any(reason.startswith("BDMC from the tempering samples")
               for reason in floored["reasons"])
    # RAISE too: 0.5 below a floor, beyond three standard errors, errs low for certain; the
    # same gap below a pooled AIS is within AIS's slack, and the route is kept.
    def with_raise(floor):
        summary = stored(floor)
        below = max(floor, 50.0) + 50.0 - 0.5  # the optimistic side (ln Z + 50) less 0.5
        summary["levels"][-1]["raise"] = {"linear": {"whole": below, "rows": 30.0,
                                                     "stderr": 0.1}}
        return rejudge(summary)
    assert with_raise(53.0)["levels"][-1]["refuted"] == {"linear": 102.5}
    assert with_raise(53.0)["conservative"] == math.inf
    assert with_raise(49.0)["levels"][-1]["refuted"] == {}
    assert with_raise(49.0)["conservative"] == 99.5
    # A floor 0.5 below the pool: RAISE 0.5 below the floor's NLL is wrong for certain, though
    # within the pool's slack; the verdict names the floor, not an AIS overshoot.
    summary = stored(49.5)
    summary["levels"][-1]["raise"] = {"linear": {"whole": 99.0, "rows": 30.0, "stderr": 0.1}}
    under = rejudge(summary)
    assert under["levels"][-1]["refuted"] == {"linear": 99.0}
    assert under["optimistic"] == 100.0 and under["conservative"] == math.inf
    (reason,) = [reason for reason in under["reasons"] if reason.startswith("RAISE")]
    assert "falls below 99.50, a certain floor of the NLL" in reason and "overshot" not in reason
    summary["levels"][-1]["raise"]["linear"]["whole"] = 99.3
    assert rejudge(summary)["conservative"] == 99.3
    shifted = {**check, "nll": 99.7, "log_z": 49.7, "bdmc": {**check["bdmc"], "nll": 99.7}}
    pooled = rejudge({**stored(49.0), "cross_check": shifted})
    assert pooled["conditional"]["within_tolerance"]
    assert not pooled["conditional"]["contradicted"]
    assert not any("tempering" in reason or "BDMC" in reason for reason in pooled["reasons"])


def test_a_level_whose_own_side_is_the_floor_says_so():
    """Its line and the verdict named AIS for the floor's number (a walkthrough found the same
    digits at three levels under "AIS linear", and a gap that was the floor's)."""
    from irbm.evaluate import _level_line
    floored = {**level(2000, 100.0, 100.5, own=(98.0, 100.5)), "own_from_floor": True,
               "seconds": 3.0, "raise_path": "linear", "raise": {"linear": {}}}
    reasons = verdict([level(1000, 100.0, 100.5), floored], tolerance=1.0, out_of_time=False)
    assert any(reason.startswith("the certain floor, which the last level's best AIS run falls "
                                 "below, gives an NLL 2.00 nats below the pooled estimate")
               for reason in reasons), reasons
    assert "[98.00, 100.50] (the certain floor, above AIS linear's ln Z, RAISE linear" in \
        _level_line(floored)
    plain = {**floored, "own_from_floor": False}
    assert "(AIS linear, RAISE linear" in _level_line(plain)
    assert any(reason.startswith("the last level's best AIS run gives an NLL 2.00") for reason
               in verdict([level(1000, 100.0, 100.5), plain], tolerance=1.0, out_of_time=False))


def test_crossed_sides_read_as_crossing_not_as_a_negative_width():
    """'width -0.05 nats, certified' read as a defect to a user; sides that cross within their
    noise are a bracket at the truth and say so."""
    assert width_text(0.32) == "width 0.32 nats"
    assert width_text(0.0) == "width 0.00 nats"
    assert width_text(-0.05) == "sides cross by 0.05 nats"
