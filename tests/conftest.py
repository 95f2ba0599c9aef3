"""Shared fixtures. Real data is never committed: tests find it the way a user points irbm at
it, through ``$IRBM_DATA_DIR``. When that is unset, the developers' layout ``../shared/data``
beside the repository is used (the tests may know the layout; the library does not).

Every process of the suite -- this one, and the CLI runs, Dask and joblib workers and
benchmarks that tests start -- uses one thread in each thread pool (torch's, and the BLAS behind
numpy and scipy): on a busy core, a second OpenMP or OpenBLAS thread spin-waits for a time slice
at every barrier, which made scikit-learn's logistic regression up to 75 times slower and small
torch products 100 times slower.
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
    # Test models are tiny: a second thread only waits for a time slice on a busy machine,
    # which made small matrix products 100x slower there.
    torch.set_num_threads(1)
