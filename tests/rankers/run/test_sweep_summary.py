"""The sweep summary's mean ± std over seeds (differank.rankers.run.sweep_summary)."""

import csv
import json
import statistics

import pytest
from omegaconf import OmegaConf

from differank.rankers.run.sweep_summary import SweepSummary, over_seeds, summarize


def write_jobs(sweep_dir, jobs):
    """jobs: [(overrides, status, value, test map or None)] -> job folders 0, 1, ..."""
    for number, (overrides, status, value, test_map) in enumerate(jobs):
        folder = sweep_dir / str(number)
        folder.mkdir()
        record = {"job": number, "overrides": overrides, "status": status, "value": value}
        (folder / "job.json").write_text(json.dumps({**record, "seconds": 1.0 + number}))
        if test_map is not None:
            metrics = {"map": test_map, "conventions": {"trec": {"map": test_map}}}
            (folder / "test_metrics.json").write_text(json.dumps(metrics))


JOBS = [
    (["loss=a", "seed=0", "trainer.max_epochs=2"], "ok", 0.5, 0.40),
    (["loss=a", "seed=1", "trainer.max_epochs=2"], "ok", 0.7, 0.46),
    (["loss=a", "seed=2", "trainer.max_epochs=2"], "ok", 0.6, 0.43),
    (["loss=b", "seed=0", "trainer.max_epochs=2"], "ok", 0.2, 0.30),
    (["loss=b", "seed=1", "trainer.max_epochs=2"], "failed", None, None),
]


def test_over_seeds_gives_mean_and_sample_std_per_setting(tmp_path):
    write_jobs(tmp_path, JOBS)
    rows, common = summarize(tmp_path)
    assert common == ["trainer.max_epochs=2"] and "conventions" not in rows[0]
    a, b = over_seeds(rows)
    assert (a["overrides"], a["seeds"], b["overrides"], b["seeds"]) == ("loss=a", 3, "loss=b", 1)
    assert a["value"] == pytest.approx((0.6, statistics.stdev([0.5, 0.7, 0.6])))
    assert a["map"] == pytest.approx((0.43, 0.03))
    assert b["map"] == (0.30, 0.0)  # one completed seed: std 0; the failed job is left out


def test_sweep_end_writes_the_seed_table(tmp_path, capsys):
    write_jobs(tmp_path, JOBS)
    SweepSummary().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}))
    with open(tmp_path / "summary_seeds.csv") as handle:
        first = next(csv.DictReader(handle))
    assert (first["overrides"], first["seeds"]) == ("loss=a", "3")
    assert float(first["map_mean"]) == pytest.approx(0.43)
    assert float(first["map_std"]) == pytest.approx(0.03)
    markdown = (tmp_path / "summary.md").read_text()
    assert "Mean ± std over seeds" in markdown and "| loss=a | 3 | 0.6000 ± 0.1000 |" in markdown
    assert "0.4300 ± 0.0300" in capsys.readouterr().out


def test_no_seed_table_without_repeated_seeds(tmp_path):
    write_jobs(tmp_path, [(["loss=a"], "ok", 0.5, 0.4), (["loss=b"], "ok", 0.6, 0.5)])
    SweepSummary().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}))
    assert (tmp_path / "summary.md").is_file() and not (tmp_path / "summary_seeds.csv").exists()
