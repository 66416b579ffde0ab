"""benchmarks/distill_results.py end to end on tiny synthetic data (slow: about 25 trainings):
teachers, label-only and distilled students (a LightGBM tree student among them), the (α, τ)
choice on validation, and the table with its paired intervals and the issue's criterion line."""

from __future__ import annotations

import json
import re

import distill_results  # benchmarks/ is on the path (tests/conftest.py)
import pytest

pytestmark = pytest.mark.slow


def test_tiny_run_writes_the_table_and_chooses_on_validation(tmp_path, monkeypatch):
    out = tmp_path / "distill.md"
    argv = ["distill_results.py", "--tiny", "--students", "mlp", "linear", "lightgbm",
            "--seeds", "0", "1", "--alphas", "0", "0.5",
            "--temperatures", "1", "--runs", str(tmp_path / "runs"), "--out", str(out)]  # fmt: skip
    monkeypatch.setattr("sys.argv", argv)
    monkeypatch.delenv("LETOR_DIR", raising=False)  # the command line names it when it is set
    distill_results.main()
    text = out.read_text()
    assert "Command: `python benchmarks/distill_results.py --tiny --students mlp linear" in text
    rows = [line for line in text.splitlines() if line.startswith("| synthetic |")]
    assert len(rows) == 6  # (mlp, linear, lightgbm) x (lightgbm, ensemble)
    # the criterion lines are MQ2008's MLP and tree-student rows only: none for synthetic data
    assert "Against the teacher on MQ2008 (the issue's criterion):" in text
    assert not re.search(r"^- (MLP|LightGBM) from", text, re.MULTILINE)
    # the chosen (α, τ) is the grid point of the best mean validation MAP of seed 0
    folder = tmp_path / "runs" / "synthetic" / "fold1"
    for row in rows:
        student, seeds, teacher, chosen = (cell.strip() for cell in row.split("|")[2:6])
        # a booster without randomness runs the first seed only; the neural students every seed
        assert seeds == ("0" if student == "lightgbm" else "0 1")
        stem = "lightgbm" if teacher == "lightgbm" else "ensemble_seed0"
        values = {
            alpha: json.loads(
                (folder / f"{student}_from_{stem}_a{alpha}_t1_seed0" / "result.json").read_text()
            )["val_map"]
            for alpha in ("0", "0.5")
        }
        assert chosen == f"({max(values, key=values.get)}, 1)"
    # the tree student on labels alone is student.alpha=1 (the teacher's weight 0), run once
    label_only = folder / "lightgbm_labels_seed0"
    assert (label_only / "student" / "model.txt").is_file()
    assert "student.alpha=1.0" in (label_only / ".hydra" / "overrides.yaml").read_text()
    assert not list(folder.glob("lightgbm_*seed1"))
