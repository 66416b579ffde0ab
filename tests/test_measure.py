"""``benchmarks/measure.py``: the benchmarks' shared timing, peak memory and run metadata."""

from __future__ import annotations

import re
import sys
import time

import measure  # benchmarks/ is on the path (tests/conftest.py), as in `python benchmarks/x.py`
import pytest


def test_metadata_names_commit_torch_threads_device_python_and_date():
    import torch

    meta = measure.run_metadata()
    assert set(meta) == {
        "commit",
        "torch",
        "threads",
        "omp_num_threads",
        "device",
        "python",
        "date",
    }
    assert meta["commit"] == "unknown" or re.fullmatch(r"[0-9a-f]{4,40}(\+dirty)?", meta["commit"])
    assert meta["torch"] == torch.__version__ and meta["threads"] == torch.get_num_threads()
    assert meta["python"] == ".".join(map(str, sys.version_info[:3])) and meta["device"]
    line = measure.metadata_line(meta)
    assert line.startswith("Run: commit ") and line.count("\n") == 1
    assert f"torch {torch.__version__}" in line and meta["date"] in line


def test_commit_is_unknown_outside_a_repository(tmp_path):
    assert measure.git_commit(tmp_path) == "unknown"


@pytest.mark.parametrize("clock", [time.perf_counter, time.process_time])
@pytest.mark.parametrize("warmup", [True, False])
def test_timings_call_the_function_repeats_times_and_are_positive(clock, warmup):
    calls = []

    def work():
        calls.append(1)
        sum(i * i for i in range(20_000))

    seconds = measure.repeat_seconds(work, 4, clock, warmup=warmup)
    assert len(seconds) == 4 and len(calls) == 4 + warmup
    assert all(isinstance(s, float) and s > 0 for s in seconds)
    best = measure.best_seconds(work, 2, clock, warmup=warmup)
    median = measure.median_seconds(work, 3, clock, warmup=warmup)
    assert isinstance(best, float) and best > 0 and isinstance(median, float) and median > 0
    with pytest.raises(ValueError, match="repeats"):
        measure.repeat_seconds(work, 0, clock)


def test_best_is_the_fastest_and_median_the_middle_call():
    pauses = iter([0.0, 0.15, 0.001, 0.02] * 2)  # the first of each run is the warm-up

    def pause():
        time.sleep(next(pauses))

    assert measure.best_seconds(pause, 3) < 0.015
    assert 0.015 < measure.median_seconds(pause, 3) < 0.04  # not the mean nor the mid-range


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/clear_refs: Linux")
def test_rss_peak_sees_a_large_allocation():
    np = pytest.importorskip("numpy")
    size = 200 * 2**20

    def allocate():
        block = np.ones(size, dtype=np.uint8)  # touched: every page resident
        del block

    peak = measure.rss_peak_bytes(allocate)
    assert 0.9 * size <= peak <= 1.5 * size, peak
    assert measure.peak_bytes(allocate, "cpu") >= 0.9 * size
    assert abs(measure.rss_peak_bytes(lambda: None)) < 0.1 * size
    assert measure.max_rss_bytes() >= size


def test_publish_appends_the_provenance_prints_and_writes(tmp_path, capsys):
    out = tmp_path / "new" / "table.md"
    text = measure.publish("| a |\n|---|\n", out, "cpu")
    assert text.startswith("| a |\n|---|\n\nRun: commit ") and text.endswith(".\n")
    assert out.read_text() == text and capsys.readouterr().out == text + "\n"
    assert measure.publish("x", None).startswith("x\n\nRun: ")  # no file: printed only
