"""Shared fixtures and the suite's parallelism.

Real data is never committed: tests find it the way a user points irbm at it, through
``$IRBM_DATA_DIR``. When that is unset, the developers' layout ``../shared/data`` beside the
repository is used (the tests may know the layout; the library does not).

The suite runs in pytest-xdist worker processes, one per free core (``--numprocesses=auto``
in pyproject's addopts, `pytest_xdist_auto_num_workers` below; ``--dist=worksteal`` lets an
idle worker take tests from the other, so module-scoped fixtures are built at most once per
worker), and every process of the suite
-- the workers, and the CLI runs, Dask and joblib workers and benchmarks that tests start --
uses one thread in each thread pool (torch's, and the BLAS behind numpy and scipy). So the suite
never runs more busy threads than there are free cores: on a busy core, a second OpenMP or
OpenBLAS thread spin-waits for a time slice at every barrier, which made scikit-learn's logistic
regression up to 75 times slower and small torch products 100 times slower. ``-n 0`` (or
``-p no:xdist``) runs the tests in this one process.
"""

import os

# One thread per pool, read by each library as it loads (below: torch, numpy, scipy), here and
# in every subprocess.
os.environ.update(dict.fromkeys(("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"),
                                "1"))

from pathlib import Path

import pytest
import torch
from threadpoolctl import threadpool_limits

threadpool_limits(1)  # in case a library was loaded before this file (by a plugin, say)


def pytest_addoption(parser, pluginmanager):
    """Without pytest-xdist (not installed, or ``-p no:xdist``), pyproject's
    ``--numprocesses`` and ``--dist`` are accepted and ignored: the tests run in this process."""
    if not pluginmanager.has_plugin("xdist"):
        group = parser.getgroup("xdist (not active)")
        for option in ("--numprocesses", "--dist"):
            group.addoption(option, help="ignored: pytest-xdist is not active")


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, absent with -p no:xdist
def pytest_xdist_auto_num_workers(config):
    """What ``-n auto`` means: one worker per free core (`irbm._threads.free_cores`, sampled
    over half a second), at least one; ``$PYTEST_XDIST_AUTO_NUM_WORKERS`` overrides it."""
    override = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if override:
        return int(override)
    from irbm._threads import free_cores
    return free_cores(0.5)


def pytest_configure(config):
    """In a pytest-xdist worker: compile this worker's share of the numba kernels first
    (`irbm.kernels.warm_up`), so that on a fresh clone the workers split the compile (6-8 s
    each on 2 cores, where each compiled all of them, about 12 s, as its tests first called
    them; the helpers both shares call are compiled by both) and load the rest from numba's
    cache."""
    worker = getattr(config, "workerinput", None)
    if worker is not None:
        from irbm.kernels import warm_up
        # A worker that replaces a crashed one is numbered on (gw2 of 2): the crashed one's share.
        count = int(worker["workercount"])
        warm_up(int(worker["workerid"].removeprefix("gw")) % count, count)


DATA_DIR_ENV = "IRBM_DATA_DIR"
SHARED_DATA = Path(os.environ.get(DATA_DIR_ENV)
                   or Path(__file__).resolve().parents[1].parent / "shared" / "data")
_PRESENT = (SHARED_DATA / "mnist.npz").is_file()


@pytest.fixture(scope="session", autouse=True)
def _data_dir_environment():
    """``$IRBM_DATA_DIR`` names the data for the whole session when it is present, so library
    calls and CLI subprocesses without --data-dir find it as a user's would."""
    with pytest.MonkeyPatch.context() as patch:
        if _PRESENT:
            patch.setenv(DATA_DIR_ENV, str(SHARED_DATA))
        yield


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """$IRBM_DATA_DIR, else ../shared/data; skip when absent (fail in CI, where it must be)."""
    if _PRESENT:
        return SHARED_DATA
    if os.environ.get("CI"):
        pytest.fail(f"CI is set but the data directory {SHARED_DATA} (${DATA_DIR_ENV}, else "
                    f"../shared/data) has no mnist.npz")
    pytest.skip(f"no mnist.npz in {SHARED_DATA} (${DATA_DIR_ENV}, else ../shared/data): set "
                f"${DATA_DIR_ENV} to the directory holding the paper's .npz files")


@pytest.fixture(autouse=True)
def _few_threads():
    # Test models are small: a second thread only waits for a time slice on a busy machine,
    # which made small matrix products 100x slower there. Held, so that the estimators keep
    # it rather than choose for themselves (tests/test_threads.py lifts the hold).
    from irbm._threads import held_threads
    torch.set_num_threads(1)
    token = held_threads.set(True)
    yield
    held_threads.reset(token)
