"""The CUDA kernels (`irbm.kernels._triton`) checked without a GPU: tests/_triton_check.py
runs them on CPU tensors through Triton's interpreter against the numba kernels, draw for draw
(every kernel, float32 and float64, edge values, stream positions past 2^32, seeds past 2^63,
and float32 ties of the z draw). On a GPU, tests/test_devices.py runs them compiled. PyTorch's
CPU wheels do not bring Triton; requirements-dev.txt installs it on Linux x86_64, so CI runs this
check (about 40 s on one core); skipped where Triton is not installed."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from _cli_helpers import subprocess_environment

from irbm.kernels import compiled_available

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                       reason="Triton is not installed (it comes with PyTorch's CUDA wheels)"),
    pytest.mark.skipif(not compiled_available(), reason="numba missing or IRBM_KERNELS=off"),
]


def test_the_triton_kernels_draw_what_the_numba_kernels_draw():
    # Triton reads TRITON_INTERPRET when it is imported: a process of its own.
    result = subprocess.run([sys.executable, str(Path(__file__).with_name("_triton_check.py"))],
                            env={**subprocess_environment(), "TRITON_INTERPRET": "1"},
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 mismatches" in result.stdout
