"""Smoke test of benchmarks/serving_latency.py: a default-size scorer and a trained checkpoint
(``--checkpoint NAME=PATH``, as a distilled student is added) timed in the three runtimes,
each row with its speed-up over ``--reference``, the command and the load in the file."""

import re

import serving_latency  # benchmarks/ is on the path (tests/conftest.py)

from tests.conftest import TINY_RUN, run_config


def test_serving_latency_tiny_with_a_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    run_config(TINY_RUN, run_dir)
    out = tmp_path / "latency.md"
    checkpoint = run_dir / "checkpoints" / "best.ckpt"
    serving_latency.main(
        [
            "--models",
            "linear",
            "--checkpoint",
            f"student={checkpoint}",
            "--reference",
            "student",
            "--documents",
            "3",
            "--batches",
            "1",
            "2",
            "--min-repeats",
            "2",
            "--cell-seconds",
            "0",
            "--out",
            str(out),
        ]
    )
    text = out.read_text()
    assert "Command: `python benchmarks/serving_latency.py --models linear" in text
    assert re.search(r"Load average \(1, 5, 15 min\) [\d.]+, [\d.]+, [\d.]+ before", text)
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| student")]
    assert sorted((r[1], r[3]) for r in rows) == sorted(
        (runtime, batch)
        for runtime in ("eager", "onnxruntime", "torchscript")
        for batch in ("1", "2")
    )
    assert all(row[-1] == "1.000 |" for row in rows)  # the reference against itself
    assert re.search(r"^Run: commit ", text, re.MULTILINE)
