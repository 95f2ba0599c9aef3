"""The thread policy: small problems get one thread, never more than the allowed cores."""

import contextlib
import os

import numpy as np
import pytest
import torch

from irbm import _threads


def test_small_work_gets_one_thread():
    assert _threads.default_threads(work=1e3) == 1


def test_default_never_exceeds_allowed_cores():
    assert 1 <= _threads.default_threads() <= len(os.sched_getaffinity(0))
    assert 1 <= _threads.free_cores(0.01) <= len(os.sched_getaffinity(0))


def test_apply_threads_sets_torch_and_validates():
    previous = torch.get_num_threads()
    try:
        assert _threads.apply_threads(1) == 1 and torch.get_num_threads() == 1
        assert _threads.apply_threads(None, work=10.0) == 1
        for bad in (0, -1, 1.5, True):
            with pytest.raises(ValueError):
                _threads.apply_threads(bad)
    finally:
        torch.set_num_threads(previous)


def test_the_suite_runs_one_thread_per_pool():
    """tests/conftest.py: torch and the BLAS behind numpy and scipy (loaded before or during the
    tests) use one thread each, so that parallel test workers never oversubscribe the cores."""
    import scipy.linalg  # noqa: F401 -- loads scipy's own BLAS
    import sklearn.linear_model  # noqa: F401
    from threadpoolctl import threadpool_info

    assert torch.get_num_threads() == 1
    pools = threadpool_info()
    assert pools and all(pool["num_threads"] == 1 for pool in pools), pools


@pytest.fixture
def free_cores_three(monkeypatch):
    """Three free cores, read afresh: the policy's choice for large work is visible."""
    monkeypatch.setattr(_threads, "free_cores", lambda *args, **kwargs: 3)
    monkeypatch.setattr(_threads, "_last_reading", (-float("inf"), 1))
    previous = torch.get_num_threads()
    torch.set_num_threads(2)  # the caller's own setting, which every call must give back
    token = _threads.held_threads.set(False)  # the suite's hold (conftest) lifted
    yield
    _threads.held_threads.reset(token)
    torch.set_num_threads(previous)


@pytest.fixture
def choices(monkeypatch):
    """torch's threads inside each `using_threads` block, in order (its other contents are
    appended by the tests)."""
    seen, original = [], _threads.using_threads

    @contextlib.contextmanager
    def spy(n=None, work=None):
        with original(n, work):
            seen.append(torch.get_num_threads())
            yield
    monkeypatch.setattr(_threads, "using_threads", spy)
    return seen


@pytest.mark.parametrize("n_hidden, expected", [(4, 1), (400, 3)])
def test_trainer_fit_trains_on_the_policys_threads_and_gives_the_callers_back(
        free_cores_three, n_hidden, expected):
    """`Trainer.fit` picks threads as `irbm train` does (one for a small product, else the free
    cores) or takes ``threads``, and torch's setting is the caller's again after."""
    from irbm import RBM, Trainer
    data = (torch.rand(64, 784, generator=torch.Generator().manual_seed(0)) < 0.3).double()
    seen = []
    trainer = Trainer(RBM(784, n_hidden, dtype=torch.float64,
                          generator=torch.Generator().manual_seed(0)), cd_k=1, batch_size=32,
                      seed=0, progress=False)
    trainer.fit(data, 1, callbacks=[lambda t, m: seen.append(torch.get_num_threads())])
    trainer.fit(data, 2, threads=1, callbacks=[lambda t, m: seen.append(m["threads"])])
    assert seen == [expected, 1] and torch.get_num_threads() == 2
    assert [row["threads"] for row in trainer.history] == [expected, 1]
    nothing = (r"already run 2 epoch\(s\) and epochs=2 counts them in total: nothing to train "
               r"\(pass epochs=4 for 2 more\)")
    with pytest.warns(UserWarning, match=nothing) as caught:
        trainer.fit(data, 2)
    assert {record.filename for record in caught} == {__file__}
    assert trainer.epoch == 2


@pytest.mark.parametrize("n_components, expected", [(4, 1), (400, 3)])
def test_the_estimators_fit_on_the_policys_threads_and_give_the_callers_back(
        free_cores_three, monkeypatch, n_components, expected):
    from irbm.sklearn import BernoulliRBM
    from irbm.sklearn._base import _BaseBernoulliRBM
    seen = []
    update = _BaseBernoulliRBM._update

    def spy(self, rows, rng):
        seen.append(torch.get_num_threads())
        return update(self, rows, rng)

    monkeypatch.setattr(_BaseBernoulliRBM, "_update", spy)
    X = (np.random.RandomState(0).rand(80, 784) < 0.3).astype(float)
    estimator = BernoulliRBM(n_components=n_components, batch_size=40, n_iter=1,
                             random_state=0).fit(X)
    estimator.partial_fit(X[:40])
    assert set(seen) == {expected} and torch.get_num_threads() == 2


def test_fit_chooses_threads_again_every_epoch_as_the_model_grows(monkeypatch, free_cores_three):
    """An iRBM starts with one unit: the threads are chosen for its size at every epoch, not
    once for the size it started with."""
    import irbm.training as training
    from irbm import InfiniteRBM, Trainer
    from irbm.datasets import load_dataset
    calls = []
    monkeypatch.setattr(training, "apply_threads", lambda n, work: calls.append((n, work)))
    data = torch.as_tensor(load_dataset("digits").train[:256])
    trainer = Trainer(InfiniteRBM(64, beta=1.01, generator=torch.Generator().manual_seed(0)),
                      cd_k=1, batch_size=16, lr=0.1, seed=0, progress=False)
    trainer.fit(data, 3)
    sizes = [1] + [row["n_hidden"] for row in trainer.history[:-1]]
    assert calls == [(None, 16 * 64 * size) for size in sizes] and len(set(sizes)) > 1


def test_a_finished_run_trained_again_says_nothing_about_epochs(tmp_path):
    """`irbm train` on a finished run resumes it and trains nothing, silently: the warning is
    for a second fit of one trainer in a process, not for a trainer restored from disk."""
    import warnings

    from irbm.cli import main
    command = ["train", "rbm", "digits", "--out", str(tmp_path / "run"), "--n-hidden", "4",
               "--epochs", "1", "--quiet"]
    assert main(command) == 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(command) == 0
    assert not [w for w in caught if "epochs" in str(w.message)]


def _spy_on_steps(monkeypatch):
    """The torch threads each AIS/RAISE chain batch and Gibbs run ran on."""
    import irbm.ais as ais
    import irbm.reverse as reverse
    import irbm.sampling as sampling
    seen = []
    for module, name in ((ais, "run_chains"), (reverse, "run_reverse_chains"),
                         (sampling, "bernoulli")):
        original = getattr(module, name)

        def spy(*args, _original=original, **kwargs):
            seen.append(torch.get_num_threads())
            return _original(*args, **kwargs)
        monkeypatch.setattr(module, name, spy)
    return seen


@pytest.mark.parametrize("n_hidden, expected", [(4, 1), (400, 3)])
def test_the_estimators_of_ln_z_run_on_the_policys_threads_and_give_the_callers_back(
        free_cores_three, monkeypatch, n_hidden, expected):
    """AIS, RAISE, the bracket and Gibbs sampling pick threads as `Trainer.fit` does (a second
    thread on a busy core made a bracket 20x slower for a user who left torch's default), or
    take ``threads``; torch's setting is the caller's again after."""
    from irbm import RBM
    from irbm.ais import estimate_log_partition
    from irbm.evaluate import bracket_nll, raise_nll
    from irbm.sampling import sample
    model = RBM(784, n_hidden, generator=torch.Generator().manual_seed(0))
    rows = (torch.rand(40, 784, generator=torch.Generator().manual_seed(1)) < 0.3).float()
    seen = _spy_on_steps(monkeypatch)
    # 40 rows x 784 x 400 = 12.5e6 multiply-adds: above `_threads.SMALL_WORK`.
    estimate_log_partition(model, 40, 10, seed=0, progress=False, data=rows)
    raise_nll(model, rows, n_betas=10, seed=0, progress=False, base="model")
    sample(model, 40, 2, seed=0)
    assert set(seen) == {expected} and torch.get_num_threads() == 2
    seen.clear()
    estimate_log_partition(model, 40, 10, seed=0, progress=False, data=rows, threads=1)
    sample(model, 40, 2, seed=0, threads=1)
    assert set(seen) == {1} and torch.get_num_threads() == 2
    seen.clear()
    bracket_nll(model, rows, base_data=None, rows=20, n_chains=40, n_betas=10, seed=0,
                max_betas=10, threads=4)
    assert seen and set(seen) == {4} and torch.get_num_threads() == 2
    # Inside the bracket its AIS and RAISE runs keep the bracket's choice: the free cores are
    # read once (for a large product), not again by each run while the bracket's threads
    # might be the ones keeping them busy.
    readings = []
    monkeypatch.setattr(_threads, "_FREE_CORES_KEPT", 0.0)
    monkeypatch.setattr(_threads, "free_cores", lambda *args, **kwargs: readings.append(1) or 3)
    seen.clear()
    bracket_nll(model, rows, base_data=None, rows=20, n_chains=40, n_betas=10, seed=0,
                max_betas=10)
    assert set(seen) == {expected} and len(readings) == (expected > 1)


def test_an_evaluation_inside_a_fit_keeps_the_fits_threads(free_cores_three, choices):
    """The validation AIS of a callback runs on the epoch's threads, not the policy's."""
    from irbm import RBM, Trainer
    from irbm.ais import estimate_log_partition
    data = (torch.rand(64, 784, generator=torch.Generator().manual_seed(0)) < 0.3).float()
    trainer = Trainer(RBM(784, 400, generator=torch.Generator().manual_seed(0)), cd_k=1,
                      batch_size=32, seed=0, progress=False)

    def validate(trainer, metrics):
        result = estimate_log_partition(trainer.model, 40, 5, data=data, seed=0, progress=False)
        choices.append((torch.get_num_threads(), result.n_chains))
    trainer.fit(data, 1, threads=1, callbacks=[validate])
    assert choices == [1, (1, 40)] and torch.get_num_threads() == 2


def test_a_fit_inside_a_held_choice_keeps_it_every_epoch(free_cores_three):
    """`irbm demo`'s workers and a command given --threads 1 hold one thread: a fit inside with
    threads None trains every epoch on it (the policy would pick 3 for 400 units), an explicit
    count still applies, and the held setting is torch's again after."""
    from irbm import RBM, Trainer
    data = (torch.rand(64, 784, generator=torch.Generator().manual_seed(0)) < 0.3).float()
    trainer = Trainer(RBM(784, 400, generator=torch.Generator().manual_seed(0)), cd_k=1,
                      batch_size=32, seed=0, progress=False)
    with _threads.using_threads(1):
        trainer.fit(data, 2)
        assert torch.get_num_threads() == 1
        trainer.fit(data, 3, threads=3)
        assert torch.get_num_threads() == 1
    assert [row["threads"] for row in trainer.history] == [1, 1, 3]


def test_a_call_with_threads_none_inside_a_choice_keeps_it(free_cores_three):
    with _threads.using_threads(1):
        with _threads.using_threads(None, work=1e12):
            assert torch.get_num_threads() == 1
        with _threads.using_threads(3):  # an explicit count still applies
            assert torch.get_num_threads() == 3
        assert torch.get_num_threads() == 1
    with _threads.using_threads(None, work=1e12):  # outside any choice: the policy's
        assert torch.get_num_threads() == 3
    assert torch.get_num_threads() == 2


def test_the_command_line_holds_its_threads_for_the_library_calls_and_only_for_them(
        free_cores_three, tmp_path, choices):
    """`irbm evaluate --threads 1`: the estimators inside keep the one thread; after the command
    (run in-process), torch's setting is the caller's and a library call picks for itself."""
    from _cli_helpers import run_cli
    assert run_cli("train", "rbm", "digits", "--n-hidden", 4, "--epochs", 1,
                   "--out", tmp_path / "run", "--quiet").code == 0
    evaluate = ["evaluate", tmp_path / "run", "--latest", "--chains", 20, "--betas", 20]
    result = run_cli(*evaluate, "--threads", 1)
    assert result.code == 0, result.err
    assert choices and set(choices) == {1}, choices
    assert not _threads.held_threads.get() and torch.get_num_threads() == 2
    with _threads.using_threads(None, work=1e12):
        assert torch.get_num_threads() == 3
    # Without --threads the command sets the free cores for its own work, and each estimator
    # still picks for its product: one thread for this small model.
    choices.clear()
    result = run_cli(*evaluate)
    assert result.code == 0, result.err
    assert choices and set(choices) == {1}, choices
    assert torch.get_num_threads() == 2
