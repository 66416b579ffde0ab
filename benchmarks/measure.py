"""How the benchmarks measure, in one place: timing by a chosen clock, peak memory, and the
provenance every result file records (commit, torch, threads, device, Python, date).

The scripts beside this file import it by name (``import measure``): ``python
benchmarks/<name>.py`` puts ``benchmarks/`` on ``sys.path``. torch is imported only where a
function needs it, so a parent process that only launches workers stays small (Linux hands a
child the parent's peak RSS as its starting ``ru_maxrss``).

Clocks: ``time.process_time`` (the process' CPU time: what an idle core would take, so timings
stay meaningful on a shared machine; one thread) or ``time.perf_counter`` (wall time); each
script keeps its own choice, :func:`device_clock` is the "CPU time on CPU, wall time on CUDA"
one. On CUDA every timed call is synchronised before and after.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

Clock = Callable[[], float]


# ---------------------------------------------------------------------------------------------
# Time
# ---------------------------------------------------------------------------------------------


def _is_cuda(device) -> bool:
    return device is not None and str(device).startswith("cuda")


def synchronize(device) -> None:
    """Wait for the queued CUDA work of ``device`` (nothing on CPU or ``None``)."""
    if _is_cuda(device):
        import torch

        torch.cuda.synchronize(device)


def device_clock(device) -> Clock:
    """The process' CPU time on CPU, wall time on CUDA (where the work is not the process')."""
    return time.perf_counter if _is_cuda(device) else time.process_time


def call_seconds(fn: Callable[[], object], clock: Clock = time.perf_counter, device=None) -> float:
    """Seconds of one call of ``fn`` by ``clock`` (on CUDA, synchronised before and after)."""
    synchronize(device)
    start = clock()
    fn()
    synchronize(device)
    return clock() - start


def repeat_seconds(
    fn: Callable[[], object],
    repeats: int,
    clock: Clock = time.perf_counter,
    device=None,
    warmup: bool = True,
) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``fn`` (after one untimed call with ``warmup``)."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    if warmup:
        fn()
    return [call_seconds(fn, clock, device) for _ in range(repeats)]


def best_seconds(
    fn: Callable[[], object],
    repeats: int,
    clock: Clock = time.perf_counter,
    device=None,
    warmup: bool = True,
) -> float:
    """The fastest of ``repeats`` timed calls: on a shared machine noise only ever adds time."""
    return min(repeat_seconds(fn, repeats, clock, device, warmup))


def median_seconds(
    fn: Callable[[], object],
    repeats: int,
    clock: Clock = time.perf_counter,
    device=None,
    warmup: bool = True,
) -> float:
    """The median of ``repeats`` timed calls."""
    return statistics.median(repeat_seconds(fn, repeats, clock, device, warmup))


# ---------------------------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------------------------


def max_rss_bytes() -> int:
    """The process' peak resident set so far (``ru_maxrss``; KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _status_bytes(key: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(f"{key} not in /proc/self/status")


def rss_peak_bytes(fn: Callable[[], object]) -> int:
    """How far one call of ``fn`` raises the peak resident set above the resident set before it:
    ``VmHWM`` after resetting it to ``VmRSS`` by writing ``5`` to ``/proc/self/clear_refs``,
    minus ``VmRSS`` before the call (Linux only: raises ``OSError`` elsewhere). Page-granular;
    memory the allocator reuses without touching new pages is not seen."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")
    before = _status_bytes("VmRSS")
    fn()
    return _status_bytes("VmHWM") - before


def cuda_peak_bytes(fn: Callable[[], object], device=None) -> int:
    """``torch.cuda.max_memory_allocated`` during one call of ``fn`` minus the allocation
    before it."""
    import torch

    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before


def peak_bytes(fn: Callable[[], object], device=None) -> int:
    """:func:`cuda_peak_bytes` on CUDA, :func:`rss_peak_bytes` otherwise."""
    return cuda_peak_bytes(fn, device) if _is_cuda(device) else rss_peak_bytes(fn)


# ---------------------------------------------------------------------------------------------
# Provenance
# ---------------------------------------------------------------------------------------------


def git_commit(root: Path = ROOT) -> str:
    """The checked-out commit's short hash, ``+dirty`` when tracked files differ from it;
    ``"unknown"`` without git or outside a repository."""
    try:

        def git(*args: str) -> str:
            done = subprocess.run(
                ["git", "-C", str(root), *args],
                capture_output=True,
                text=True,
                check=True,
                timeout=30,
            )
            return done.stdout.strip()

        commit = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{commit}+dirty" if dirty else commit


def cpu_name() -> str:
    """The CPU model (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def device_name(device=None) -> str:
    """``device``'s model: the CPU's, or the GPU's for ``cuda[:N]``. ``None``: the CPU's, plus
    the GPU's when CUDA is available (what a run on ``accelerator=auto`` may use)."""
    import torch

    if _is_cuda(device):
        return torch.cuda.get_device_name(torch.device(device))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    name = f"{cpu_name()} ({cores} cores)"
    if device is None and torch.cuda.is_available():
        name += f"; CUDA: {torch.cuda.get_device_name()}"
    return name


def run_metadata(*devices) -> dict[str, str | int]:
    """The provenance of a result: commit, torch version, torch's thread count,
    ``OMP_NUM_THREADS``, the device(s) (see :func:`device_name`), Python version and the date."""
    import torch

    names = [device_name(d) for d in devices] if devices else [device_name()]
    return {
        "commit": git_commit(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset"),
        "device": "; ".join(dict.fromkeys(names)),
        "python": platform.python_version(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def metadata_line(meta: dict) -> str:
    """``meta`` as one markdown line, the last line of a result file."""
    return (
        f"Run: commit {meta['commit']}, torch {meta['torch']}, {meta['threads']} torch "
        f"thread(s), OMP_NUM_THREADS={meta['omp_num_threads']}, {meta['device']}, Python "
        f"{meta['python']}, {meta['date']}.\n"
    )


def worker_json(script: str | Path, args: list[str], env=None) -> dict:
    """``script`` run as a worker in a fresh Python process (from the repository root) with
    ``args``: the JSON object its last line of output prints; a failed worker raises with the
    end of its stderr."""
    done = subprocess.run(
        [sys.executable, str(Path(script).resolve()), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode != 0:
        raise RuntimeError(f"worker {args[:3]} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def mib(size: float) -> str:
    """Bytes as MiB with thousands separators, no decimals."""
    return f"{size / 2**20:,.0f}"


def publish(text: str, out: Path | None, *devices) -> str:
    """``text`` with the provenance line of ``devices`` appended (a blank line between), printed
    and, when ``out`` is given, written there (folders created); returns the published text."""
    text = text.rstrip("\n") + "\n\n" + metadata_line(run_metadata(*devices))
    print(text, flush=True)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    return text
