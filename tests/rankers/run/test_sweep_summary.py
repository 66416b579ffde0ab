"""The sweep summary's mean ± std over folds and seeds (differank.rankers.run.sweep_summary)."""

import csv
import json
import statistics

import pytest
from omegaconf import OmegaConf

from differank.rankers.run.sweep_summary import SweepSummary, over_runs, summarize


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


def test_over_runs_gives_mean_and_sample_std_per_setting(tmp_path):
    write_jobs(tmp_path, JOBS)
    rows, common = summarize(tmp_path)
    assert common == ["trainer.max_epochs=2"] and "conventions" not in rows[0]
    a, b = over_runs(rows)
    assert (a["overrides"], a["seeds"], a["runs"]) == ("loss=a", 3, 3)
    assert (b["overrides"], b["seeds"], b["runs"]) == ("loss=b", 1, 1)
    assert a["folds"] == b["folds"] == 1  # data.fold was not swept
    assert a["value"] == pytest.approx((0.6, statistics.stdev([0.5, 0.7, 0.6])))
    assert a["map"] == pytest.approx((0.43, 0.03))
    assert b["map"] == (0.30, 0.0)  # one completed seed: std 0; the failed job is left out


def end_of_sweep(sweep_dir):
    SweepSummary().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}}}))


def test_sweep_end_writes_the_mean_std_table(tmp_path, capsys):
    write_jobs(tmp_path, JOBS)
    end_of_sweep(tmp_path)
    with open(tmp_path / "summary_mean_std.csv") as handle:
        first = next(csv.DictReader(handle))
    assert (first["overrides"], first["folds"], first["seeds"], first["runs"]) == (
        "loss=a",
        "1",
        "3",
        "3",
    )
    assert float(first["map_mean"]) == pytest.approx(0.43)
    assert float(first["map_std"]) == pytest.approx(0.03)
    markdown = (tmp_path / "summary.md").read_text()
    assert "Mean ± std over folds and seeds" in markdown
    assert "| loss=a | 1 | 3 | 3 | 0.6000 ± 0.1000 |" in markdown
    assert "0.4300 ± 0.0300" in capsys.readouterr().out


def test_a_fold_sweep_with_seeds_pools_folds_and_seeds(tmp_path):
    """Two settings x folds 1-2 x seeds 0-1 (``data.fold=1,2 seed=0,1``, the folds also as the
    ``++data.fold`` the benchmarks write): one row per setting over its four runs."""
    maps = {("a", 1, 0): 0.40, ("a", 1, 1): 0.42, ("a", 2, 0): 0.50, ("a", 2, 1): 0.56}
    maps |= {("b", fold, seed): 0.30 + 0.1 * fold for fold in (1, 2) for seed in (0, 1)}
    fold_key = {"a": "data.fold", "b": "++data.fold"}
    write_jobs(
        tmp_path,
        [
            ([f"loss={loss}", f"{fold_key[loss]}={fold}", f"seed={seed}"], "ok", 0.5, test_map)
            for (loss, fold, seed), test_map in maps.items()
        ],
    )
    a, b = over_runs(summarize(tmp_path)[0])
    assert (a["overrides"], a["folds"], a["seeds"], a["runs"]) == ("loss=a", 2, 2, 4)
    assert a["map"] == pytest.approx((0.47, statistics.stdev([0.40, 0.42, 0.50, 0.56])))
    assert (b["overrides"], b["folds"], b["seeds"], b["runs"]) == ("loss=b", 2, 2, 4)
    assert b["map"] == pytest.approx((0.45, statistics.stdev([0.4, 0.4, 0.5, 0.5])))
    end_of_sweep(tmp_path)
    spread = statistics.stdev([0.40, 0.42, 0.50, 0.56])
    row = f"| loss=a | 2 | 2 | 4 | 0.5000 ± 0.0000 | 0.4700 ± {spread:.4f} |"
    assert row in (tmp_path / "summary.md").read_text()


def test_a_fold_sweep_alone_gets_the_table(tmp_path):
    """``+sweep=folds`` (data.fold=1..5, one seed): mean ± std over the folds."""
    write_jobs(tmp_path, [([f"data.fold={fold}"], "ok", 0.5, 0.1 * fold) for fold in (1, 2, 3)])
    (setting,) = over_runs(summarize(tmp_path)[0])
    assert (setting["overrides"], setting["folds"], setting["seeds"]) == ("(every job)", 3, 1)
    assert setting["map"] == pytest.approx((0.2, 0.1))


def test_no_mean_std_table_without_repeated_runs(tmp_path):
    write_jobs(tmp_path, [(["loss=a"], "ok", 0.5, 0.4), (["loss=b"], "ok", 0.6, 0.5)])
    end_of_sweep(tmp_path)
    assert (tmp_path / "summary.md").is_file() and not (tmp_path / "summary_mean_std.csv").exists()
