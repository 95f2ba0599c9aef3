"""Each benchmark runs end to end on tiny sizes (--quick), so that it cannot rot."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("script", ["bench_training.py", "bench_ais.py", "bench_precision.py",
                                    "bench_bracket.py", "bench_raise_schedule.py"])
def test_benchmark_quick(script):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--quick"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "| hidden |" in result.stdout and "nan" not in result.stdout.lower()
