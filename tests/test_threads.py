"""The thread policy: small problems get one thread, never more than the allowed cores."""

import os

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
