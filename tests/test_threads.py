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
