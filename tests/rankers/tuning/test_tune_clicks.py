"""``differank tune`` chosen from clicks (rankers/tuning/signal.py,
docs/tuning.md#tuning-from-clicks): under ``ultr.select=clicks`` every trial's epoch, each row's
setting and the chosen row are the argmax of the held-out click monitor, no validation label is
read (the trials' labels unreadable once their held-out sessions are drawn, the tune's own
validation splits unreadable, no validation scores written), the label-chosen references are
refused up front, and a cached run chosen by another monitor is redone, never mixed in."""

from __future__ import annotations

import json

import protocol  # benchmarks/ is on the path (tests/conftest.py)
import pytest

import differank
from differank.rankers.run.runs import compose_config
from differank.rankers.tuning import search, trials
from differank.rankers.tuning.signal import LABELS, Signal, selection_signal
from differank.rankers.tuning.space import Row
from tests.rankers.run.test_click_selection import Unreadable, corrupt_validation_labels

pytest.importorskip("lightgbm")
pytest.importorskip("optuna")

CLICKS = ["clicks=pbm", "clicks.top_k=6", "clicks.eta=2", "ultr=ips", "ultr.select=clicks"]
TINY = [*protocol.TINY_OVERRIDES, "data.seed=0", "trainer.max_epochs=3", "quiet=true"]
TUNE = [*TINY, *CLICKS, "tune.folds=[1]", "tune.seeds=1", "tune.trials=4"]


def unreadable_validation_labels(monkeypatch):
    """The tune's own data modules (the folds' splits it reports on) serve validation labels
    nobody may read; the trials' become unreadable once their held-out sessions are drawn;
    writing validation scores (the ensemble's) fails."""
    original = search.data_module

    def data_module(overrides, run_dir):
        datamodule = original(overrides, run_dir)
        datamodule.split_data("val").labels = Unreadable()
        return datamodule

    def write_val_scores(*args):
        raise AssertionError("validation scores were written under click selection")

    monkeypatch.setattr(search, "data_module", data_module)
    monkeypatch.setattr(trials, "write_val_scores", write_val_scores)
    corrupt_validation_labels(monkeypatch, "unreadable")


@pytest.mark.slow
def test_a_click_tune_chooses_the_argmax_of_the_click_monitor_and_reads_no_label(
    tmp_path, monkeypatch
):
    unreadable_validation_labels(monkeypatch)
    rows = "tune.rows=[softmax/linear,listmle/linear]"
    result = differank.tune([*TUNE, rows], output_dir=tmp_path)
    record = json.loads((result.run_dir / "tune.json").read_text())
    assert record["selection"]["monitor"] == result.monitor == "val/click_dcg@10"
    for name, row in record["rows"].items():
        values = [trial["validation"] for trial in row["trials"]]
        assert all(trial["error"] is None and trial["val_map"] is None for trial in row["trials"])
        assert row["chosen_trial"] == values.index(max(values)), name  # the click argmax
    assert record["rows"]["listmle/linear"]["chosen_trial"] > 0  # a search, not the default
    table = record[record["dataset"]]
    means = {name: entry["validation_mean"] for name, entry in table["rows"].items()}
    assert result.chosen == table["chosen"] == max(means, key=means.get)
    assert result.mean_validation == means and result.mean_val_map == {}
    assert table["ensemble"] is None and not any(name.startswith("ensemble") for name in means)
    for path in (result.run_dir / "runs").rglob("result.json"):
        run = json.loads(path.read_text())
        assert run["monitor"] == "val/click_dcg@10" and "val_map" not in run
        assert 0.0 <= run["map"] <= 1.0  # the test labels still measure the choice
    report = result.report.read_text()
    assert "chosen by val/click_dcg@10 on held-out click sessions" in report
    assert "No ensemble:" in report and "| val/click_dcg@10 |" in report
    assert "minus lightgbm" not in report  # no reference, no interval against it
    assert f"Validation-chosen differank row: **{result.chosen}**" in report
    assert result.checkpoint is not None
    differank.load_ranker(result.checkpoint)


@pytest.mark.parametrize("reference", ["lightgbm", "xgboost"])
def test_a_click_tune_refuses_a_reference_row_before_anything_runs(tmp_path, reference):
    rows = f"tune.rows=[{reference},listmle/linear]"
    with pytest.raises(ValueError, match=rf"tune.rows has peer_{reference}: .*tune.rows=\["):
        differank.tune([*TUNE, rows], output_dir=tmp_path)
    assert not list(tmp_path.rglob("result.json"))


def test_a_tune_by_another_label_monitor_is_refused_naming_it(tmp_path):
    rows = ["tune.rows=[listmle/linear]", "monitor=val/ndcg@10"]
    with pytest.raises(ValueError, match=r"monitor=val/ndcg@10 is neither: drop monitor="):
        differank.tune([*TINY, "tune.folds=[1]", *rows], output_dir=tmp_path)


def test_the_signal_is_the_monitor_the_trials_choose_their_epoch_by(tmp_path):
    assert selection_signal(compose_config(TINY, run_dir=tmp_path)) == LABELS
    loglik = [*CLICKS, "ultr=twotower", "loss=bce", "ultr.select_metric=loglik"]
    signal = selection_signal(compose_config([*TINY, *loglik], run_dir=tmp_path))
    assert signal == Signal("val/click_loglik", clicks=True)
    assert signal.description == (
        "val/click_loglik on held-out click sessions (no validation label read)"
    )


def _job(run_dir, signal: Signal) -> trials.Job:
    return trials.Job(Row("listmle"), ("loss=listmle",), (), 1, 0, run_dir, 3, True, signal)


def _cache(run_dir, record: dict) -> None:
    """A finished run's result.json (and validation scores) as an earlier invocation left it."""
    job = {"overrides": ["loss=listmle"], "setting": {}}
    numbers = {"map": 0.5, "mean_ndcg": 0.5, "ndcg@10": 0.5, "seconds": 1.0, "cpu_seconds": 1.0}
    (run_dir / "predictions").mkdir(parents=True)
    (run_dir / "predictions" / "val.txt").write_text("0.1\n0.2\n0.3\n")
    (run_dir / "result.json").write_text(
        json.dumps({**numbers, **record, "fold": 1, "seed": 0, "job": job})
    )


def test_an_earlier_cached_val_map_is_read_as_chosen_by_val_map(tmp_path):
    _cache(tmp_path, {"val_map": 0.4})  # written before the monitor was recorded
    cached = trials.cached_result(_job(tmp_path, LABELS))
    assert cached is not None
    assert (cached["monitor"], cached["validation"], cached["val_map"]) == ("val/map", 0.4, 0.4)


@pytest.mark.parametrize(
    "record", [{"val_map": 0.4}, {"monitor": "val/map", "validation": 0.4, "val_map": 0.4}]
)
def test_a_cached_run_chosen_by_another_monitor_is_redone_not_mixed_in(tmp_path, caplog, record):
    _cache(tmp_path, record)
    clicks = Signal("val/click_dcg@10", clicks=True)
    assert trials.cached_result(_job(tmp_path, clicks)) is None
    assert "was chosen by 'val/map', this tune by 'val/click_dcg@10'" in caplog.text
