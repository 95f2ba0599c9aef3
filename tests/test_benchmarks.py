"""Each benchmark runs end to end on tiny sizes (--quick), so that it cannot rot.

They run as ``python benchmarks/NAME.py --quick`` would, but in this process (`runpy`): a
subprocess spent about 2 of each benchmark's 2.5-4.5 s importing torch and irbm again. In
exchange, each must leave the process as it found it (grad mode, threads, default dtype,
environment), which the test checks.
"""

import os
import re
import runpy
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _global_state() -> dict:
    """What a benchmark may change and must restore (the environment's irbm and thread
    settings; scikit-learn sets KMP_* variables when first imported, which is not a leak)."""
    return {"grad": torch.is_grad_enabled(), "threads": torch.get_num_threads(),
            "dtype": torch.get_default_dtype(),
            "environment": {key: value for key, value in os.environ.items()
                            if key.startswith("IRBM_") or key.endswith("_NUM_THREADS")}}


@pytest.mark.parametrize("script", ["bench_training.py", "bench_ais.py", "bench_precision.py",
                                    "bench_bracket.py", "bench_raise_schedule.py",
                                    "bench_kernels.py"])
def test_benchmark_quick(script, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # as for a script: its folder first (_common)
    monkeypatch.setattr(sys, "argv", [str(BENCHMARKS / script), "--quick"])
    before, environment = _global_state(), dict(os.environ)
    try:
        runpy.run_path(str(BENCHMARKS / script), run_name="__main__")
        out = capsys.readouterr().out
        assert re.search(r"^\| .+ \|\n\|---", out, re.MULTILINE), "no table printed"
        assert "nan" not in out.lower()
        assert _global_state() == before, f"{script} changed this process's global state"
    finally:  # whatever happened, the tests after this one in the worker get it back
        torch.set_grad_enabled(before["grad"])
        torch.set_num_threads(before["threads"])
        torch.set_default_dtype(before["dtype"])
        os.environ.clear()
        os.environ.update(environment)
        sys.modules.pop("_common", None)  # benchmarks/_common.py, imported by the script
