"""``differank tune`` end to end on tiny data: the smoke profile of benchmarks/protocol.py
through ``differank.tune`` (the report, trials per row, the chosen checkpoint that
``load_ranker`` reads), a LETOR folder given by path (tuned, then its chosen checkpoint tested
with ``task=test data.root=DIR``), the budget stop, and failures named, never scored."""

from __future__ import annotations

import json
import re
from pathlib import Path

import protocol  # benchmarks/ is on the path (tests/conftest.py)
import pytest

import differank
from differank.cli import hydra_arguments
from differank.rankers.tuning import trials
from differank.rankers.tuning.selection import NoCandidatesError, select_ensemble
from differank.rankers.tuning.tune import data_folds, ensemble_recipe

pytest.importorskip("lightgbm")
pytest.importorskip("optuna")

TINY = ("trainer.max_epochs=1", "logger=csv", "quiet=true")


def smoke_with(*overrides: str) -> list[str]:
    """The smoke profile's overrides, those of the same keys replaced by ``overrides``."""
    keys = {o.split("=", 1)[0] for o in overrides}
    return [o for o in protocol.SMOKE_TUNE if o.split("=", 1)[0] not in keys] + list(overrides)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tune")
    result = differank.tune([*protocol.SMOKE_TUNE, "quiet=true"], output_dir=folder / "run")
    return result, json.loads((folder / "run" / "tune.json").read_text())


@pytest.mark.slow
def test_the_smoke_profile_through_differank_tune_reports_every_row(smoke):
    result, record = smoke
    smoke_rows = {row.name for row in protocol.PROFILES["smoke"].rows}
    assert set(record["rows"]) == smoke_rows  # the benchmark's smoke rows, same code path
    for name, row in record["rows"].items():
        assert len(row["trials"]) == 2 and row["seeds"] == 2, name
        assert row["trials"][0]["setting"] == row["default"]
    table = result.report.read_text()
    assert "## What was searched" in table and "| peer_lightgbm | 2 | 2 |" in table
    assert "Validation-chosen differank row: **" in table
    assert result.report.with_suffix(".png").read_bytes().startswith(b"\x89PNG")
    assert result.chosen in record[record["dataset"]]["rows"]


@pytest.mark.slow
def test_the_chosen_checkpoint_is_read_by_load_ranker_predict_and_export(smoke, tmp_path):
    result, record = smoke
    assert result.checkpoint == result.run_dir / "checkpoints" / "best.ckpt"
    differank.load_ranker(result.checkpoint)
    done = differank.run(
        ["task=predict", f"ckpt_path={result.checkpoint}", "quiet=true"], output_dir=tmp_path
    )
    assert (done.run_dir / "predictions" / "test.txt").is_file()
    exported = differank.run(
        ["task=export", f"ckpt_path={result.checkpoint}", "export.format=torchscript"],
        output_dir=tmp_path / "export",
    )
    assert (exported.run_dir / "export" / "scorer.pt").is_file()
    chosen = r"= (\S+) \(fold 1, seed (\d); copied from `([^`]+)`"
    line = re.search(chosen, result.report.read_text())
    assert line is not None and line[1] in record["rows"]
    assert result.checkpoint.read_bytes() == Path(line[3]).read_bytes()


def test_a_chosen_ensemble_of_several_is_written_as_the_command_that_builds_it():
    text = ensemble_recipe([(Path("a/best.ckpt"), 2), (Path("b/best.ckpt"), 1)], 1)
    assert "ensemble a/best.ckpt b/best.ckpt --weights 2 1 --out DIR" in text


def test_the_cli_word_tune_is_task_tune():
    assert hydra_arguments(["tune", "tune.budget=30m"]) == ["task=tune", "tune.budget=30m"]


@pytest.mark.slow
def test_tune_on_a_letor_folder_given_by_path_then_test_its_checkpoint(tmp_path, monkeypatch):
    from differank.datamodules.synthetic import SyntheticLetorDataModule

    heldout = tmp_path / "heldout"
    SyntheticLetorDataModule(40, 20, 20, root=heldout).split_files("train")  # writes Fold1
    monkeypatch.setenv("LETOR_DIR", str(tmp_path / "data_home"))  # the folder is not under it
    data = ["data=letor", f"data.root={heldout}"]
    rows = ["tune.rows=[ranknet/linear]", "tune.trials=1", "tune.seeds=1"]
    result = differank.tune([*data, *TINY, *rows], output_dir=tmp_path / "tune")
    record = json.loads((result.run_dir / "tune.json").read_text())
    assert (
        record["dataset"] == "heldout"
        and record["rows"]["ranknet/linear"]["trials"][0]["error"] is None
    )
    tested = differank.run(
        ["task=test", f"ckpt_path={result.checkpoint}", f"data.root={heldout}", "quiet=true"],
        output_dir=tmp_path / "test",
    )
    assert 0.0 <= tested.test_metrics["map"] <= 1.0


@pytest.mark.slow
def test_the_budget_stops_each_row_after_its_default_trial_and_marks_it(tmp_path):
    rows = ["tune.rows=[lightgbm,ranknet/linear]", "tune.trials=4", "tune.budget=0.1s"]
    result = differank.tune([*smoke_with(*rows), "quiet=true"], output_dir=tmp_path)
    record = json.loads((result.run_dir / "tune.json").read_text())
    for name in ("peer_lightgbm", "ranknet/linear"):
        row = record["rows"][name]
        assert len(row["trials"]) == 1 and row["seeds"] == 1 and row["over_budget"], name
    assert "over budget" in result.report.read_text()
    assert record["budget_seconds"] == 0.1


def test_the_folds_are_those_the_data_has(tmp_path):
    from differank.datamodules.synthetic import SyntheticLetorDataModule

    synthetic = trials.Dataset("synthetic", ("data=synthetic",))
    assert data_folds(synthetic, protocol.TINY_OVERRIDES, tmp_path) == (1,)
    letor = tmp_path / "letor"
    for fold in (1, 2):
        SyntheticLetorDataModule(4, 2, 2, seed=fold, root=letor / "gen").split_files("train")
        (letor / "gen" / "Fold1").rename(letor / f"Fold{fold}")
    given = trials.Dataset("letor", ("data=letor", f"data.root={letor}"))
    assert data_folds(given, (), tmp_path) == (1, 2)
    missing = trials.Dataset("nowhere", ("data=letor", f"data.root={tmp_path / 'nowhere'}"))
    with pytest.raises(FileNotFoundError, match="nowhere"):
        data_folds(missing, (), tmp_path)  # fold 1's error, as it is


def test_a_bad_budget_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="tune.budget='20 minutes' is not a duration"):
        differank.tune(["tune.budget=20 minutes"], output_dir=tmp_path)
    assert not (tmp_path / "runs").exists()


def test_an_ensemble_without_candidates_is_a_named_error():
    with pytest.raises(NoCandidatesError, match="no candidate"):
        select_ensemble({}, {}, {})


@pytest.mark.slow
def test_failed_trials_are_named_never_scored(tmp_path, monkeypatch):
    def fails(overrides, run_dir):
        raise ValueError("the loss refuses this option pair")

    monkeypatch.setattr(trials, "training_run", fails)
    rows = ["tune.rows=[ranknet/linear]", "tune.trials=2", "tune.seeds=1"]
    with pytest.raises(NoCandidatesError, match=r"ranknet/linear: trial 0 fold 1: ValueError: "):
        differank.tune([*smoke_with(*rows), "quiet=true"], output_dir=tmp_path)


def test_a_tune_without_optuna_or_lightgbm_is_refused_naming_the_install(monkeypatch):
    from differank.rankers.tuning import tune as tune_module

    installed = tune_module.find_spec
    monkeypatch.setattr(
        tune_module, "find_spec", lambda name: None if name == "lightgbm" else installed(name)
    )
    with pytest.raises(ModuleNotFoundError, match=r"needs lightgbm .*pip install lightgbm"):
        tune_module.require_search_packages()
    with pytest.raises(ModuleNotFoundError, match=r"needs lightgbm .*pip install lightgbm"):
        tune_module.require_search_packages(["lightgbm", "listmle/linear"])
    # without a lightgbm row (a click tune refuses it) LightGBM is not needed
    tune_module.require_search_packages(["listmle/linear"])
