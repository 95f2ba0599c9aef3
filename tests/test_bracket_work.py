"""A bracket's level survives an interruption (`irbm._bracket_work`): its AIS and RAISE runs
save their finished chain batches and its pilots in a work directory, and a call with the same
arguments redoes only what is missing and returns what an uninterrupted call returns.

Tiny float64 block-diagonal models; the CLI's use of it (`irbm evaluate --bracket`) in
tests/test_cli_runs.py.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from test_raise_schedule import _without_seconds

import irbm.ais as ais
import irbm.evaluate as evaluate
import irbm.reverse as reverse
from irbm.bracket import BracketUnfinished
from irbm.evaluate import bracket_nll, raise_nll
from irbm.models import block_diagonal


def _model():
    return block_diagonal("irbm", 12, 8, block_size=4, weight_std=2.0, dtype=torch.float64,
                          seed=5, beta=1.05)[0]


def _data(seed, n, rate):
    return torch.rand(n, 12, generator=torch.Generator().manual_seed(seed),
                      dtype=torch.float64).lt(rate).double()


SETTINGS = dict(rows=40, tolerance=1e-6, seed=3, n_chains=16, n_betas=25, bases=("data",),
                raise_repeats=3, pilot_betas=200, max_betas=100)


def _interrupt_at(monkeypatch, module, name, call):
    """Make ``module.name`` raise KeyboardInterrupt at its ``call``-th call (1-based); return
    the list its calls are counted in."""
    real, calls = getattr(module, name), []  # call 0: never interrupted

    def counted(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def _saved_seconds(paths) -> float:
    total = 0.0
    for path in paths:
        with np.load(path) as saved:
            total += float(sum(saved[name] for name in saved.files if name.endswith("seconds")))
    return total


@pytest.fixture(scope="module")
def uninterrupted():
    """The bracket of `_model` never interrupted, in chain batches of 5 (shared by the cases
    below: it is the slowest part of each)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(evaluate, "CPU_CHAIN_BATCH", 5)
        return bracket_nll(_model(), _data(4, 200, 0.5), base_data=_data(6, 300, 0.4),
                           **SETTINGS)


@pytest.mark.parametrize("where, call, forward_after, reverse_after", [
    # Chain batches of 5: 4 AIS batches (16 chains) and 24 RAISE batches (40 rows x 3) per
    # route and level, 2 routes (the iRBM's pinned, then linear path; data base). irbm.ais's
    # run_chains also runs each route's forward pilot in level 1: calls 1-10 are level 1's,
    # so call 13 stops level 2's first AIS after two batches; RAISE's calls 1-48 are level 1's,
    # so call 80 stops level 2's second RAISE after seven.
    ("ais", 13, 2 + 4 + 8, 24 + 24 + 48),
    ("raise", 80, 8, 17 + 48)])
def test_an_interrupted_level_resumes_to_the_uninterrupted_bracket(
        tmp_path, monkeypatch, uninterrupted, where, call, forward_after, reverse_after):
    """Stopped inside a run of its second level, a bracket called again with the same
    arguments runs only the missing chain batches, and its levels, sides and verdict are those
    of a call never interrupted; its pilots are read back, not rerun; its seconds count the
    saved work's; the work directory is gone once it returns."""
    monkeypatch.setattr(evaluate, "CPU_CHAIN_BATCH", 5)
    model, rows, train = _model(), _data(4, 200, 0.5), _data(6, 300, 0.4)
    whole = uninterrupted
    assert [level["n_betas"] for level in whole.levels] == [25, 50, 100]
    work = tmp_path / "work"
    with monkeypatch.context() as patch:
        if where == "ais":
            _interrupt_at(patch, ais, "run_chains", call)
        else:
            _interrupt_at(patch, reverse, "run_reverse_chains", call)
        with pytest.raises(KeyboardInterrupt):
            bracket_nll(model, rows, base_data=train, work_dir=work, **SETTINGS)
    assert (work / "settings.json").exists() and (work / "pilots.npz").exists()
    with np.load(work / ("50-pinned-ais.npz" if where == "ais" else
                         "50-linear-raise.npz")) as saved:
        assert saved["batch_sizes"].tolist() == [5] * (2 if where == "ais" else 7)
    level_2 = _saved_seconds(work.glob("50-*.npz"))
    everything = _saved_seconds(work.glob("*.npz"))
    with monkeypatch.context() as patch:
        forward = _interrupt_at(patch, ais, "run_chains", 0)
        backward = _interrupt_at(patch, reverse, "run_reverse_chains", 0)
        pilots = _interrupt_at(patch, evaluate, "thermodynamic_length", 0)
        echoed = []
        resumed = bracket_nll(model, rows, base_data=train, work_dir=work, echo=echoed.append,
                              **SETTINGS)
    assert (len(pilots), len(forward), len(backward)) == (0, forward_after, reverse_after)
    assert echoed[0].startswith("  each level: AIS (")  # what it runs, then where it goes on
    assert f"resuming the unfinished level from {work}" in echoed[1]
    assert _without_seconds(resumed.levels) == _without_seconds(whole.levels)
    for side in ("optimistic", "conservative", "conservative_stderr", "log_partition"):
        assert getattr(resumed, side) == getattr(whole, side), side
    assert resumed.reasons == whole.reasons
    assert resumed.levels[1]["seconds"] > level_2 > 0 and resumed.seconds > everything
    assert not work.exists()


def test_the_budget_stops_the_first_level_between_saved_batches(tmp_path, monkeypatch,
                                                                uninterrupted):
    """Past ``max_seconds`` the call's first level stops after the chain batch that ends past
    it, saved, and says so (`BracketUnfinished`, naming the directory); each call again runs
    at least one more batch, and one with time to spare returns what an uninterrupted call
    returns. Without a work directory the work would be lost, so the level goes on."""
    monkeypatch.setattr(evaluate, "CPU_CHAIN_BATCH", 5)
    model, rows, train = _model(), _data(4, 200, 0.5), _data(6, 300, 0.4)
    work = tmp_path / "work"
    saved_batches, floors = [], []
    real_floor = evaluate.sampled_log_partition_floor
    monkeypatch.setattr(evaluate, "sampled_log_partition_floor",
                        lambda *a, **k: floors.append(real_floor(*a, **k)) or floors[-1])
    for _ in range(2):
        with pytest.raises(BracketUnfinished, match=rf"stopped at the time budget \(1e-06 s\) "
                                                    rf"inside the level of 25 temperatures.*"
                                                    rf"saved in {work}"):
            bracket_nll(model, rows, base_data=train, work_dir=work,
                        **{**SETTINGS, "max_seconds": 1e-6})
        with np.load(work / "25-pinned-ais.npz") as saved:
            saved_batches.append(len(saved["batch_sizes"]))
    assert saved_batches == [1, 2]
    resumed = bracket_nll(model, rows, base_data=train, work_dir=work, **SETTINGS)
    assert len(floors) == 1  # computed by the first call, read back by the two after it
    assert _without_seconds(resumed.levels) == _without_seconds(uninterrupted.levels)
    assert resumed.reasons == uninterrupted.reasons and not work.exists()
    alone = bracket_nll(model, rows, base_data=train, **{**SETTINGS, "max_seconds": 1e-6})
    assert [level["n_betas"] for level in alone.levels] == [25]
    assert "stopped at the time budget after 25 temperatures" in " ".join(alone.reasons)


def test_past_the_budget_no_new_run_starts_once_a_batch_has_run(tmp_path, monkeypatch):
    """The deadline is checked before every chain batch, a run's first included, once the call
    has run one: so each call past its budget adds exactly one batch to the level, and the call
    that finishes a run (the pinned path's 4 AIS batches) does not go on into the next one's
    first batch (RAISE's), which at size is a whole batch, minutes to hours, past the budget."""
    monkeypatch.setattr(evaluate, "CPU_CHAIN_BATCH", 5)
    model, rows, train = _model(), _data(4, 200, 0.5), _data(6, 300, 0.4)
    work, saved = tmp_path / "work", []
    for _ in range(6):
        with pytest.raises(BracketUnfinished):
            bracket_nll(model, rows, base_data=train, work_dir=work,
                        **{**SETTINGS, "max_seconds": 1e-6})
        counts = {}
        for path in sorted(work.glob("25-*.npz")):
            with np.load(path) as batches:
                counts[path.stem] = len(batches["batch_sizes"])
        saved.append(counts)
    assert saved[3] == {"25-pinned-ais": 4}
    assert saved[5] == {"25-pinned-ais": 4, "25-pinned-raise": 2}
    assert [sum(counts.values()) for counts in saved] == [1, 2, 3, 4, 5, 6]


def test_another_brackets_work_is_refused_before_any_work(tmp_path, monkeypatch):
    """Leftovers of a bracket with other settings are neither mixed in nor deleted: the call
    is refused, naming what differs and the way out, before any work; so is a directory in
    use by another process, and one that is not a work directory."""
    from irbm._bracket_work import LevelWork
    model, rows, train = _model(), _data(4, 200, 0.5), _data(6, 300, 0.4)
    work = tmp_path / "work"
    with monkeypatch.context() as patch:
        _interrupt_at(patch, reverse, "run_reverse_chains", 1)
        with pytest.raises(KeyboardInterrupt):
            bracket_nll(model, rows, base_data=train, work_dir=work, **SETTINGS)
    before = {path.name: path.read_bytes() for path in work.iterdir()}

    def no_work(*args, **kwargs):
        raise AssertionError("work started before the refusal")

    real_free_energies = evaluate.free_energies
    monkeypatch.setattr(evaluate, "free_energies", no_work)
    for change, differing in (({"seed": 4, "n_chains": 20}, "chains, seed"),
                              ({"n_betas": 50}, "first level's temperatures"),
                              ({"raise_repeats": 2}, "RAISE repeats")):
        with pytest.raises(ValueError, match=rf"holds the unfinished level of another bracket "
                                             rf"\(it differs in {differing}\): rerun that "
                                             rf"bracket's command to finish it, or delete"):
            bracket_nll(model, rows, base_data=train, work_dir=work, **{**SETTINGS, **change})
    with pytest.raises(ValueError, match=r"differs in data\)"):
        bracket_nll(model, rows.flip(0), base_data=train, work_dir=work, **SETTINGS)
    other = _model()
    with torch.no_grad():
        other.W[0, 0] += 1e-9
    with pytest.raises(ValueError, match=r"a bracket of another model .* its work is stale: "
                                         r"delete"):
        bracket_nll(other, rows, base_data=train, work_dir=work, **SETTINGS)
    held = LevelWork(work, json.loads((work / "settings.json").read_text()))
    with pytest.raises(ValueError, match="is in use by another process"):
        bracket_nll(model, rows, base_data=train, work_dir=work, **SETTINGS)
    held.release()
    assert {path.name: path.read_bytes() for path in work.iterdir()} == before
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "paper.tex").write_text("mine")
    with pytest.raises(ValueError, match="neither empty nor a bracket's work directory"):
        bracket_nll(model, rows, base_data=train, work_dir=foreign, **SETTINGS)
    assert [path.name for path in foreign.iterdir()] == ["paper.tex"]
    monkeypatch.setattr(evaluate, "free_energies", real_free_energies)
    (work / "pilots.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="pilots.npz is unreadable .*; delete"):
        bracket_nll(model, rows, base_data=train, work_dir=work, **SETTINGS)
    (work / "settings.json").write_text("{not json")
    with pytest.raises(ValueError, match="settings.json is unreadable .*; delete"):
        bracket_nll(model, rows, base_data=train, work_dir=work, **SETTINGS)
    # Settings alone hold no work (a call refused before its first pilot): replaced, and a
    # floor beside them (the other bracket's) is not read.
    for path in work.glob("*.npz"):
        path.unlink()
    (work / "floor.json").write_text('{"floor": 1e9}')
    kept = bracket_nll(model, rows, base_data=train, work_dir=work, keep_work=True,
                       **{**SETTINGS, "max_betas": 25})
    assert kept.levels and (work / "25-pinned-ais.npz").exists()
    assert kept.log_partition_floor < 1e9
    from irbm._bracket_work import remove_work
    remove_work(work)
    assert not work.exists()


def test_raise_resumes_from_its_saved_chain_batches(tmp_path, monkeypatch):
    """RAISE with a checkpoint: interrupted after two of four chain batches, rerun, it runs the
    two missing ones and equals an uninterrupted run; another configuration is refused."""
    model, rows, train = _model(), _data(4, 30, 0.5), _data(6, 300, 0.4)
    options = dict(n_betas=30, seed=2, base="data", base_data=train, n_repeats=2,
                   chain_batch_size=15, progress=False)
    whole = raise_nll(model, rows, **options)
    path = tmp_path / "raise.npz"
    with monkeypatch.context() as patch:
        _interrupt_at(patch, reverse, "run_reverse_chains", 3)
        with pytest.raises(KeyboardInterrupt):
            raise_nll(model, rows, checkpoint_path=path, **options)
    with np.load(path) as saved:
        assert saved["batch_sizes"].tolist() == [15, 15]
        assert json.loads(str(saved["config"]))["n_repeats"] == 2
    with monkeypatch.context() as patch:
        calls = _interrupt_at(patch, reverse, "run_reverse_chains", 0)
        resumed = raise_nll(model, rows, checkpoint_path=path, **options)
    assert len(calls) == 2
    assert torch.equal(resumed.log_likelihoods, whole.log_likelihoods)
    assert resumed.mean == whole.mean and resumed.repeat_gap == whole.repeat_gap
    for change in ({"seed": 3}, {"n_repeats": 3}, {"chain_batch_size": 10}):
        with pytest.raises(ValueError, match="another configuration"):
            raise_nll(model, rows, checkpoint_path=path, **{**options, **change})
    with pytest.raises(ValueError, match="another configuration"):
        raise_nll(model, rows.flip(0), checkpoint_path=path, **options)
    with pytest.raises(ValueError, match="needs an explicit integer seed"):
        raise_nll(model, rows, checkpoint_path=path, **{**options, "seed": None})
    path.write_bytes(path.read_bytes()[:100])  # torn by something other than irbm
    with pytest.raises(ValueError, match="raise.npz is unreadable .*; delete it to run its "
                                         "chains afresh"):
        raise_nll(model, rows, checkpoint_path=path, **options)


def test_a_batch_the_batches_run_say_would_end_past_the_deadline_is_not_started(
        monkeypatch, tmp_path):
    """With each batch's (chains, steps) given, the deadline times the batches run and refuses
    one predicted to end past it, in this run or the next that shares it (the last batch of a
    run is timed too); a call's first batch runs whatever the prediction (none is known), and
    without shapes only a spent budget stops a run. A width not timed yet is predicted as dearer
    if wider and no cheaper if narrower. A fake clock: a batch takes 0.01 s per chain-step."""
    clock = [0.0]
    monkeypatch.setattr(ais, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    path = tmp_path / "run.npz"

    def run(deadline, shapes=((30, 200),) * 4, told=True):
        ran = []
        try:
            for batch in ais.run_batches(0, len(shapes), deadline, path,
                                         shapes if told else None):
                ran.append(batch)
                clock[0] += 0.01 * shapes[batch][0] * shapes[batch][1]
        except ais.OutOfTime as stopped:
            return ran, str(stopped)
        return ran, None

    shared = ais.Deadline(130.0)
    ran, stopped = run(shared)
    assert ran == [0, 1] and clock[0] == 120.0
    assert "with 2 of 4 chain batch(es) left (the next would take about 60 s, 10 s were " \
           "left); the finished ones are saved in" in stopped
    ran, stopped = run(shared)  # another run of the same call: refused before its first
    assert ran == [] and stopped.endswith("with 4 of 4 chain batch(es) left (the next would "
                                          "take about 60 s, 10 s were left); none of this "
                                          "run's had started")
    clock[0] = 0.0
    assert run(ais.Deadline(130.0), told=False)[0] == [0, 1, 2]
    clock[0] = 0.0
    assert run(ais.Deadline(10.0))[0] == [0]  # the first batch runs though it cannot fit

    # Timed at 30 chains (60 s a batch) by a whole run, its last batch included: 60 chains are
    # predicted at 120 s, 15 at 60 s; a timed width is predicted by its own pace.
    clock[0], shared = 0.0, ais.Deadline(1000.0)
    assert run(shared, shapes=((30, 200),) * 2) == ([0, 1], None)
    assert shared.predicted_seconds(60, 200) == pytest.approx(120.0)
    assert shared.predicted_seconds(15, 200) == pytest.approx(60.0)
    clock[0] = 1000.0 - 100.0
    assert run(shared, shapes=((60, 200),))[0] == []
    clock[0] = 1000.0 - 50.0  # 15 chains would take 30 s here, but are not known to
    assert run(shared, shapes=((15, 200),))[0] == []
    shared.timed((15, 200), 30.0)
    assert shared.predicted_seconds(15, 200) == pytest.approx(30.0)
    assert run(shared, shapes=((15, 200),)) == ([0], None)


def test_ais_and_raise_give_the_deadline_their_batches_shapes(monkeypatch):
    """The runs time their batches by (chains, temperature steps), the smaller last batch
    included: AIS steps len(betas) - 1, RAISE's reverse chains one more (their first
    transition)."""
    seen = []
    real = ais.run_batches

    def spy(first, total, deadline, checkpoint_path, shapes=None):
        seen.append(list(shapes))
        return real(first, total, deadline, checkpoint_path, shapes)

    monkeypatch.setattr(ais, "run_batches", spy)
    monkeypatch.setattr(reverse, "run_batches", spy)
    model, rows = _model(), _data(4, 7, 0.5)
    ais.estimate_log_partition(model, 12, n_betas=20, seed=3, chain_batch_size=5, base="model",
                               progress=False)
    raise_nll(model, rows, n_betas=20, seed=3, chain_batch_size=4, n_repeats=2, progress=False)
    assert seen == [[(5, 19), (5, 19), (2, 19)], [(4, 20), (4, 20), (4, 20), (2, 20)]]


@pytest.mark.parametrize("which", ["ais", "raise"])
def test_a_deadline_stops_a_saved_run_between_batches_and_a_shared_one_before_them(
        tmp_path, which):
    """Given as a time already past, a deadline lets each call of a checkpointed run do one
    chain batch and stop (`OutOfTime`, naming the file), and the call that does the last one
    returns what a run with no deadline returns; a run with no file to save to goes on to the
    end. A `Deadline` shared with runs that have done a batch stops a run before its first."""
    model, rows = _model(), _data(4, 15, 0.5)

    def run(**options):
        if which == "ais":
            return ais.estimate_log_partition(model, 15, n_betas=20, seed=3, chain_batch_size=5,
                                              base="model",
                                              progress=False, **options).log_weights
        return raise_nll(model, rows, n_betas=20, seed=3, chain_batch_size=5, progress=False,
                         **options).log_likelihoods

    whole, path = run(), tmp_path / "run.npz"
    for left in (2, 1):
        with pytest.raises(ais.OutOfTime, match=rf"with {left} of 3 chain batch\(es\) left; "
                                                rf"the finished ones are saved in "
                                                rf"{re.escape(str(path))}"):
            run(checkpoint_path=path, deadline=0.0)
    assert torch.equal(run(checkpoint_path=path, deadline=0.0), whole)
    assert torch.equal(run(deadline=0.0), whole)
    shared, other = ais.Deadline(0.0), tmp_path / "other.npz"
    shared.ran = True
    with pytest.raises(ais.OutOfTime, match="with 3 of 3 chain batch.*none of this run's had"):
        run(checkpoint_path=other, deadline=shared)
    assert not other.exists()


def test_the_floor_file_is_standard_json_and_keeps_an_infinite_floor(tmp_path):
    """A floor of -inf (no vector found) is written as JSON any reader parses ("-Infinity" as a
    string, not the bare token Python's json emits), read back as -inf, and computed once."""
    from irbm._bracket_work import FLOOR_FILE, LevelWork
    work = LevelWork(tmp_path / "work", {"model": "m", "rows": "r"})
    calls = []
    try:
        assert work.floor(lambda: calls.append(1) or -np.inf) == -np.inf
        text = (tmp_path / "work" / FLOOR_FILE).read_text()

        def refuse(token):
            raise ValueError(f"non-standard JSON token {token}")
        assert json.loads(text, parse_constant=refuse) == {"floor": "-Infinity"}
        assert work.floor(lambda: calls.append(1) or 0.0) == -np.inf and calls == [1]
    finally:
        work.release()
