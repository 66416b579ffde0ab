"""benchmarks/click_log_stream.py end to end on a tiny log: the stream alone and, with --run,
one epoch through differank.run, every row served once, nothing left in its folder."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytest.importorskip("pyarrow")


@pytest.mark.slow  # about 25 s: two child processes, one a whole differank run
def test_click_log_stream_tiny_through_the_run_layer(tmp_path):
    out = tmp_path / "click_log_stream.md"
    folder = tmp_path / "work"
    folder.mkdir()
    command = [
        sys.executable,
        "benchmarks/click_log_stream.py",
        *("--rows", "3000", "--train", "--run", "--folder", str(folder), "--out", str(out)),
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    text = out.read_text()
    shown = " ".join(["python", *command[1:]])
    assert f"Command: `{shown}`" in text
    assert "## The stream alone" in text and "## Through the run layer" in text
    rows = [line for line in text.splitlines() if line.startswith("| 3,000 |")]
    # the stream's row, then the run's: 300 sessions of 10 in 2 batches of 256 sessions
    assert len(rows) == 2 and rows[1].startswith("| 3,000 | 2 |")
    assert not list(folder.iterdir())  # the logs, the table and the run's folder removed
