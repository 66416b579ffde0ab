"""benchmarks/parquet_read.py end to end on the tiny set: every reader row and both criteria."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.slow
def test_parquet_read_tiny(tmp_path):
    out = tmp_path / "parquet_read.md"
    command = [
        sys.executable,
        "benchmarks/parquet_read.py",
        "--tiny",
        "--data",
        str(tmp_path / "set"),
        "--out",
        str(out),
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    text = out.read_text()
    assert "Command (from the repository root): `python benchmarks/parquet_read.py --tiny" in text
    rows = [line for line in text.splitlines() if line.startswith("| read_parquet")]
    assert len(rows) == 5 and "| text (LETOR parse) | LETOR text |" in text
    assert "| cold read / text cold parse (OS cache evicted) |" in text
    assert "| peak memory / float32 features |" in text
