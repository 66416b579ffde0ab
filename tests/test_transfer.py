"""``benchmarks/transfer.py`` end to end on its smoke profile (two tiny synthetic data sets):
both directions' tables pair each row with LightGBM searched on the target, the defaults table
picks the best mean of the two datasets' validation MAP, no run is trained twice, and a setting
the target's search never tried is trained there once and then read from the cache."""

from __future__ import annotations

import dataclasses
import json
import statistics

import pytest
import transfer  # benchmarks/ is on the path (tests/conftest.py)

from differank.rankers.tuning import search, trials

pytest.importorskip("lightgbm")
pytest.importorskip("optuna")

SMOKE = transfer.PROFILES["smoke"]
A, B = (dataset.name for dataset in SMOKE.datasets)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    folder = tmp_path_factory.mktemp("transfer")
    out = folder / "transfer.md"
    transfer.main(["--profile", "smoke", "--runs", str(folder / "runs"), "--out", str(out)])
    return folder, out.read_text(), json.loads(out.with_suffix(".json").read_text())


def test_each_direction_pairs_every_row_with_lightgbm_searched_on_the_target(smoke):
    _, table, record = smoke
    for source, target in ((A, B), (B, A)):
        assert f"## Chosen on {source}, tested on {target}" in table
        assert f"Δ AP vs lightgbm searched on {target} [95% CI]" in table
        rows = record[f"{source}->{target}"]
        # the row chosen on the source and the one chosen on the target, and LightGBM's
        # setting chosen on the source (against its own search on the target)
        assert set(rows["ranknet/linear"]) == {source, target}
        assert set(rows["peer_lightgbm"]) == {source}
        for chosen_on in rows["ranknet/linear"].values():
            for interval in chosen_on["paired"].values():
                assert interval["low"] <= interval["mean"] <= interval["high"]
                assert interval["queries"] == 20  # the target's test queries
        # the row chosen on the target is the target's own search's (its validation MAP)
        own = record[target]["rows"]["ranknet/linear"]
        chosen = own["trials"][own["chosen_trial"]]
        assert rows["ranknet/linear"][target]["val_map_mean"] == pytest.approx(chosen["val_map"])


def test_the_default_is_the_best_mean_of_both_datasets_validation(smoke):
    _, table, record = smoke
    assert "## Defaults chosen on both datasets" in table
    entry = record["defaults"]["ranknet/linear"]
    candidates = entry["candidates"]
    default = next(c for label, c in candidates.items() if label.startswith("shipped default"))
    for name in (A, B):  # the default's validation MAP is each search's trial 0
        assert (
            default["val_map"][name]
            == record[name]["rows"]["ranknet/linear"]["trials"][0]["val_map"]
        )
    for candidate in candidates.values():
        assert candidate["mean"] == pytest.approx(statistics.fmean(candidate["val_map"].values()))
    assert entry["best"] == max(candidates, key=lambda label: candidates[label]["mean"])


def test_no_run_is_trained_twice(smoke):
    folder, _, _ = smoke
    done = [json.loads(path.read_text()) for path in (folder / "runs").rglob("result.json")]
    jobs = [json.dumps([r["job"], r["fold"], r["seed"]], sort_keys=True) for r in done]
    assert len(jobs) == len(set(jobs)) > 0


def test_a_setting_the_target_never_tried_is_trained_there_once(smoke, monkeypatch):
    folder, _, _ = smoke
    profile = dataclasses.replace(SMOKE.profile, default_trials=2)
    runner = trials.Runner(1)
    searched = transfer.search_each(profile, list(SMOKE.datasets), folder / "runs", 1, None, runner)
    source, target = searched
    result = source.result(transfer.Row("ranknet"))
    setting = {"model.optimizer.lr": 0.0321, "model.optimizer.weight_decay": 0.0}
    untried = dataclasses.replace(result, chosen=search.Trial(7, setting, []))
    runs = transfer.transferred(untried, source.dataset, target, runner, seeds=1)
    assert [run["run_dir"] for run in runs] == [
        str(folder / "runs" / B / "ranknet-linear" / f"from_{A}" / "seed0" / "fold1")
    ]
    assert "model.optimizer.lr=0.0321" in runs[0]["job"]["overrides"]
    assert runs[0]["val_map"] > 0
    trained = []
    monkeypatch.setattr(trials, "training_run", lambda *run: trained.append(run))
    assert transfer.transferred(untried, source.dataset, target, runner, seeds=1) == runs
    assert trained == []  # read from the cache


def test_the_command_is_in_the_table(smoke):
    _, table, record = smoke
    assert "Command (from the repository root): `python benchmarks/transfer.py --profile smoke" in (
        table
    )
    assert record["seeds"] == SMOKE.profile.seeds
