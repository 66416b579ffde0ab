"""``benchmarks/protocol.py`` end to end on its smoke profile (tiny synthetic data): the search
starts from the defaults and keeps the best validation trial, every row gets its seeds and its
paired interval against LightGBM, the ensemble is chosen on validation, and a second invocation
reuses every cached run."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import numpy as np
import protocol  # benchmarks/ is on the path (tests/conftest.py)
import pytest

from differank.rankers.run.runs import compose_config
from differank.rankers.tuning import report, search, selection, space, trials
from tests.conftest import ROOT

pytest.importorskip("lightgbm")
pytest.importorskip("optuna")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    folder = tmp_path_factory.mktemp("protocol")
    out = folder / "table.md"
    experiments = ["--write-experiments", str(folder / "experiments")]
    protocol.main(
        ["--profile", "smoke", "--runs", str(folder / "runs"), "--out", str(out), *experiments]
    )
    return folder, out.read_text(), json.loads(out.with_suffix(".json").read_text())


def test_every_search_starts_from_the_defaults_and_keeps_the_best_validation_trial(smoke):
    _, _, record = smoke
    budget = protocol.PROFILES["smoke"].trials
    for name, row in record["rows"].items():
        tried = row["trials"]
        assert len(tried) == budget["peer" if name.startswith("peer_") else "linear"]
        assert tried[0]["setting"] == row["default"]
        best = max(range(len(tried)), key=lambda i: tried[i]["val_map"])
        assert row["chosen_trial"] == best and row["chosen"] == tried[best]["setting"]
    assert record["rows"]["ranknet/linear"]["default"] == {
        "model.optimizer.lr": 0.01,
        "model.optimizer.weight_decay": 0.0,
    }


def test_each_row_has_its_seeds_and_a_paired_interval_against_lightgbm(smoke):
    _, table, record = smoke
    rows = record["synthetic"]["rows"]
    seeds = protocol.PROFILES["smoke"].seeds
    for name in ("ranknet/linear", "listnet/linear"):
        assert rows[name]["runs"] == seeds  # one fold
        paired = rows[name]["paired"]
        assert set(paired) == {"map", "ndcg@10"}
        for interval in paired.values():
            assert interval["low"] <= interval["mean"] <= interval["high"]
            assert interval["queries"] == 20 and interval["verdict"] in report.VERDICTS
        assert f"| {name} |" in table
    assert rows["peer_lightgbm"]["paired"] is None  # the reference itself
    ensemble = next(name for name in rows if name.startswith("ensemble"))
    assert rows[ensemble]["paired"] is not None
    assert "Validation-chosen differank row: **" in table
    assert "## What was searched (synthetic validation)" in table


def test_a_second_invocation_reuses_every_cached_run(smoke, capsys):
    folder, table, _ = smoke
    records = sorted((folder / "runs").rglob("result.json"))
    stamps = [path.stat().st_mtime_ns for path in records]
    again = folder / "again.md"
    protocol.main(["--profile", "smoke", "--runs", str(folder / "runs"), "--out", str(again)])
    assert [path.stat().st_mtime_ns for path in sorted(records)] == stamps
    assert sorted((folder / "runs").rglob("result.json")) == records
    first, second = (
        text.split("## synthetic")[1].split("## What was searched")[0]
        for text in (table, again.read_text())
    )
    assert first == second  # the same table (the command line above it names another --out)


def test_a_cached_run_of_another_setting_is_redone(smoke, monkeypatch):
    """A run folder is named by its trial number: when the space changes, trial 1 is another
    setting, and its old result must not stand in for it."""
    folder, _, _ = smoke
    row = space.Row("listnet")
    run_dir = folder / "runs" / "synthetic" / "listnet-linear" / "trial1" / "fold1"
    cached = json.loads((run_dir / "result.json").read_text())
    rows = len((run_dir / "predictions" / "val.txt").read_text().splitlines())
    same = trials.Job(row, tuple(cached["job"]["overrides"]), (), 1, 0, run_dir, rows, True)
    assert trials.run_job(same) == cached  # read, not redone
    trained = []
    monkeypatch.setattr(trials, "training_run", lambda *run: trained.append(run))
    changed = trials.Job(
        row, (*same.overrides, "model.optimizer.lr=0.5"), (), 1, 0, run_dir, rows, True
    )
    assert "error" in trials.run_job(changed)  # redone: the stand-in training_run fails it
    assert trained == [([*changed.overrides, "seed=0", "++data.fold=1", "quiet=true"], run_dir)]
    assert not (run_dir / "result.json").exists() and not (run_dir / "checkpoints").exists()


def _without_job(text: str, _: str) -> str:
    record = json.loads(text)
    del record["job"]
    return json.dumps(record)


def _of_seed_1(text: str, _: str) -> str:
    return json.dumps({**json.loads(text), "seed": 1})


def _with_line_2(value: str):
    def damage(text: str, _: str) -> str:
        lines = text.splitlines(keepends=True)
        return "".join([lines[0], f"{value}\n", *lines[2:]])

    return damage


# file of the run -> how it is damaged (its text, another trial's result.json) -> the reason
# the warning gives ({rows}: the validation split's rows)
DAMAGES = {
    "result.json cut mid-write": (
        "result.json",
        lambda text, _: text[: len(text) // 2],
        "is not JSON",
    ),
    "result.json of []": ("result.json", lambda *_: "[]\n", "holds a JSON list"),
    "result.json of 3": ("result.json", lambda *_: "3\n", "holds a JSON int"),
    "result.json without its job": ("result.json", _without_job, "names no job"),
    "result.json of another job": ("result.json", lambda _, other: other, "is another job's"),
    "result.json of another seed": ("result.json", _of_seed_1, "has seed 1, the job's is 0"),
    "result.json with a nan metric": (
        "result.json",
        lambda text, _: text.replace('"map": ', '"map": NaN, "was": ', 1),
        "has map nan, not a finite number",
    ),
    "val.txt with an extra line": (
        "predictions/val.txt",
        lambda text, _: text + "0.5\n",
        "has {more} lines, one per validation row is {rows}",
    ),
    "val.txt with a nan line": ("predictions/val.txt", _with_line_2("nan"), "line 2 is 'nan'"),
    "val.txt with an empty line": ("predictions/val.txt", _with_line_2(""), "line 2 is ''"),
    "val.txt missing a line": (
        "predictions/val.txt",
        lambda text, _: "".join(text.splitlines(keepends=True)[:-1]),
        "has {fewer} lines, one per validation row is {rows}",
    ),
    "val.txt missing": ("predictions/val.txt", None, "is missing"),
}


@pytest.fixture
def cached_job(smoke, tmp_path):
    """A copy of ranknet's trial 1 (a finished, sound run; the test above redoes listnet's)
    under another runs folder, and its job as the protocol makes it (the fold's validation rows
    counted from the split)."""
    folder, _, record = smoke
    ranknet = folder / "runs" / "synthetic" / "ranknet-linear"
    runs = tmp_path / "runs"
    shutil.copytree(ranknet / "trial1", runs / "synthetic" / "ranknet-linear" / "trial1")
    row, dataset = space.Row("ranknet"), trials.Dataset.parse("synthetic")
    setting = record["rows"]["ranknet/linear"]["trials"][1]["setting"]
    overrides = [*space.row_space(row)[0], *space.setting_overrides(setting)]
    chooser = search.Protocol(protocol.PROFILES["smoke"], [dataset], runs, trials.Runner(1))
    (job,) = chooser.jobs(row, overrides, setting, dataset, "trial1", 0)
    return job, (ranknet / "trial0" / "fold1" / "result.json").read_text()


def test_a_sound_cached_run_is_read_where_it_now_lies(cached_job, monkeypatch):
    job, _ = cached_job
    monkeypatch.setattr(trials, "training_run", pytest.fail)
    result = trials.run_job(job)
    assert result["run_dir"] == str(job.run_dir) and result["fold"] == 1 and result["seed"] == 0
    assert 0 <= result["val_map"] <= 1


@pytest.mark.parametrize("case", DAMAGES)
def test_a_damaged_or_foreign_cached_file_is_named_and_its_run_redone(
    cached_job, case, monkeypatch, caplog
):
    job, other = cached_job
    name, damage, reason = DAMAGES[case]
    path = job.run_dir / name
    rows = len((job.run_dir / "predictions" / "val.txt").read_text().splitlines())
    assert job.val_rows == rows  # the sound run's scores: one per validation row
    if damage is None:
        path.unlink()
    else:
        path.write_text(damage(path.read_text(), other))
    trained = []
    monkeypatch.setattr(trials, "training_run", lambda *run: trained.append(run))
    result = trials.run_job(job)
    assert "error" in result  # redone: the stand-in training_run fails it
    assert trained == [([*job.overrides, "seed=0", "++data.fold=1", "quiet=true"], job.run_dir)]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and warnings[0].startswith(f"{path} ")  # the file, then why
    assert reason.format(rows=rows, more=rows + 1, fewer=rows - 1) in warnings[0]
    assert not (job.run_dir / "result.json").exists()


def test_each_chosen_setting_is_written_as_an_experiment_that_composes(smoke):
    import yaml

    folder, _, record = smoke
    path = folder / "experiments" / "listnet_linear.yaml"
    text = path.read_text()
    assert text.startswith("# @package _global_")
    assert "  - override /data: synthetic\n  - override /model: linear\n" in text
    assert "  - override /loss: listnet\n" in text
    chosen = record["rows"]["listnet/linear"]["chosen"]
    optimizer = yaml.safe_load(text)["model"]["optimizer"]
    assert optimizer == {
        "lr": chosen["model.optimizer.lr"],
        "weight_decay": chosen["model.optimizer.weight_decay"],
    }
    experiment = ROOT / "conf" / "experiment" / "protocol_test_tmp.yaml"
    experiment.write_text(text)
    try:
        cfg = compose_config(["experiment=protocol_test_tmp"], run_dir=folder / "compose")
    finally:
        experiment.unlink()
    assert cfg.model.optimizer.lr == chosen["model.optimizer.lr"]
    assert cfg.loss._target_.endswith("ListNetLoss")
    assert not (folder / "experiments" / "peer_lightgbm.yaml").exists()


def _member(folder, name, scores):
    predictions = folder / name / "predictions"
    predictions.mkdir(parents=True)
    for split in ("val", "test"):
        (predictions / f"{split}.txt").write_text("".join(f"{s}\n" for s in scores))
    return [{"fold": 1, "run_dir": str(folder / name)}]


def test_the_greedy_ensemble_adds_a_member_only_while_validation_map_rises(tmp_path):
    """Two members each put the relevant document first in one query and second in the other:
    their per-query standardised sum ranks both right; a copy of one adds nothing."""
    labels = np.array([1.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    qids = np.array([1, 1, 1, 2, 2, 2])
    split = selection.Split.of(SimpleNamespace(labels=labels, qids=qids))
    first = _member(tmp_path, "first", [3.0, 0.0, 1.0, 0.9, 1.0, 0.0])
    second = _member(tmp_path, "second", [0.9, 1.0, 0.0, 3.0, 0.0, 1.0])
    alone = selection.select_ensemble({"first": first}, {1: split}, {1: split})
    assert alone[:2] == ({"first": 1}, 0.75)
    counts, val_map, test_runs = selection.select_ensemble(
        {"first": first, "second": second}, {1: split}, {1: split}
    )
    assert counts == {"first": 1, "second": 1} and val_map == 1.0
    assert test_runs[0]["map"] == 1.0
    assert selection.per_query(test_runs, {1: split}, "map") == {(1, 1): 1.0, (1, 2): 1.0}


def test_a_run_on_a_letor_folder_given_by_path_scores_its_own_validation(tmp_path, monkeypatch):
    """A LETOR folder outside the data folder: the trial's validation scores are read from that
    folder (not looked up by its name under $LETOR_DIR), so the run succeeds."""
    from differank.datamodules.synthetic import SyntheticLetorDataModule

    heldout = tmp_path / "heldout"
    SyntheticLetorDataModule(40, 20, 20, root=heldout).split_files("train")  # writes Fold1
    monkeypatch.setenv("LETOR_DIR", str(tmp_path / "data_home"))
    dataset = trials.Dataset.parse(f"heldout={heldout}")
    overrides = (*dataset.overrides, "model=linear", "loss=ranknet", *TINY)
    row, rows = space.Row("ranknet"), _val_rows(heldout)
    job = trials.Job(row, overrides, (), 1, 0, tmp_path / "run", rows)
    result = trials.run_job(job)
    assert "error" not in result, result.get("error")
    assert len((tmp_path / "run" / "predictions" / "val.txt").read_text().splitlines()) == rows


TINY = ("trainer.max_epochs=1", "logger=csv")


def _val_rows(root) -> int:
    return sum(1 for _ in (root / "Fold1" / "vali.txt").open())
