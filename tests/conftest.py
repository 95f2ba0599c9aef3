"""Shared fixtures. Real data lives in ../shared/data beside the repo (never committed)."""

import os
from pathlib import Path

import pytest
import torch

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """../shared/data, or skip (fail in CI, where it must be present)."""
    if (SHARED_DATA / "mnist.npz").exists():
        return SHARED_DATA
    if os.environ.get("CI"):
        pytest.fail(f"CI is set but the shared data directory {SHARED_DATA} is missing")
    pytest.skip(f"shared data directory {SHARED_DATA} is absent (not a developer machine)")


@pytest.fixture(autouse=True)
def _few_threads():
    # Test models are tiny: a second thread only waits for a time slice on a busy machine,
    # which made small matrix products 100x slower there.
    torch.set_num_threads(1)
