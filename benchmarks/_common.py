"""What the benchmarks share: interleaved timing, thread settings, the busy-core mode, tables."""

from __future__ import annotations

import atexit
import contextlib
import statistics
import subprocess
import sys
import time

import torch

from irbm._threads import apply_threads, held_threads

BUSY_LOOP = "while True: pass"


def start_busy_core() -> subprocess.Popen:
    """A child process spinning one core until this process exits (the --busy mode)."""
    process = subprocess.Popen([sys.executable, "-c", BUSY_LOOP])
    atexit.register(process.kill)
    time.sleep(0.3)  # let it get scheduled before anything is measured
    return process


@contextlib.contextmanager
def threads(n: int | None, work: float | None = None):
    """torch and the BLAS behind numpy set to ``n`` threads (None: irbm's default for ``work``)
    inside the block; yields the count."""
    previous = torch.get_num_threads()
    n = apply_threads(n, work)
    try:
        from threadpoolctl import threadpool_limits
        limit = threadpool_limits(n)
    except ImportError:
        limit = contextlib.nullcontext()
    token = held_threads.set(True)  # the estimators measured inside keep the count
    try:
        with limit:
            yield n
    finally:
        held_threads.reset(token)
        torch.set_num_threads(previous)


def interleaved(functions: dict, repeats: int, warmup: int = 1,
                device="cpu") -> dict[str, list[float]]:
    """Seconds of each function per repeat, the functions run back to back in every repeat so
    that load from other processes hits them alike (compare them by per-repeat ratios). On
    CUDA each timing waits for the work the function queued (kernels run asynchronously)."""
    device = torch.device(device)
    wait = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        for function in functions.values():
            function()
    times = {name: [] for name in functions}
    for _ in range(repeats):
        for name, function in functions.items():
            wait()
            start = time.perf_counter()
            function()
            wait()
            times[name].append(time.perf_counter() - start)
    return times


def median_ratio(numerator: list[float], denominator: list[float]) -> float:
    return statistics.median(a / b for a, b in zip(numerator, denominator))


def median_ms(times: list[float]) -> float:
    return 1e3 * statistics.median(times)


def table(header: list[str], rows: list[list]) -> str:
    """A Markdown table; floats with 2 decimals."""
    cells = [[f"{x:.2f}" if isinstance(x, float) else str(x) for x in row] for row in rows]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in cells])


def cpu_name() -> str:
    """The CPU's model name and its widest vector extensions (ratios from machines with other
    ones are not comparable)."""
    import platform
    name, flags = platform.processor() or platform.machine(), set()
    try:
        for line in open("/proc/cpuinfo"):
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                name = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
                break
    except OSError:
        pass
    vectors = [flag for flag in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if flag in flags]
    return f"{name} ({', '.join(vectors) or 'no AVX2'})"


def conditions(busy: bool, device="cpu") -> str:
    """The machine a table was measured on: the CPU (and the GPU when ``device`` is one)."""
    load = open("/proc/loadavg").read().split()[0] if sys.platform == "linux" else "?"
    device = torch.device(device)
    gpu = (f"; on {torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda})"
           if device.type == "cuda" else "")
    return (f"{cpu_name()}{gpu}; torch {torch.__version__}, float32, 1-min load average {load} "
            "at start"
            + (", one core kept busy by a spinning process (--busy)" if busy else ""))
