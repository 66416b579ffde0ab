"""benchmarks/doors.py: its pieces run on tiny inputs (the real run prints
benchmarks/results/doors.md)."""

from __future__ import annotations

import doors  # benchmarks/ is on the path (tests/conftest.py)
import numpy as np
import pytest


def test_the_synthetic_fold_has_the_stated_shape():
    (X, y, qid), (Xv, _, _), (Xt, _, _) = doors.synthetic_fold()
    assert X.shape == (60 * 150, 45) and Xv.shape[0] == Xt.shape[0] == 20 * 150
    assert set(np.unique(y)) == {0, 1, 2, 3, 4} and len(np.unique(qid)) == 60


def test_fit_pair_times_both_and_the_share_outside_the_steps(monkeypatch):
    monkeypatch.setitem(doors.SYNTHETIC, "queries", (6, 3, 3))
    monkeypatch.setitem(doors.SYNTHETIC, "documents", 12)
    row = doors.fit_pair(doors.synthetic_fold(), repeats=1)
    assert row["ranker_s"] > 0 and row["lightgbm_s"] > 0 and 0 < row["outside"] < 1
    assert row["epochs"] == 30 and 0 <= row["ranker_ndcg10"] <= 1
    text = doors.report({"tiny": row}, {"torch": 1.0, "predict": 1.5, "export": 2.0}, 1)
    assert "| tiny |" in text and "1.5x" in text and "2.0x" in text


@pytest.mark.slow  # three fresh processes, each importing torch
def test_the_command_doors_run_as_fresh_processes():
    seconds = doors.command_doors(repeats=1)
    assert set(seconds) == {"torch", "predict", "export"} and min(seconds.values()) > 0
