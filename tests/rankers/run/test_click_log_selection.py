"""``ultr.select=clicks`` on a click log (datamodules/clicks/held_out.py, issue #43): the
``ultr.select_holdout`` share of the log's queries leaves training and becomes the validation
click sessions; the epoch chosen is the argmax of val/click_dcg@k on exactly those sessions,
and no validation label is read. The .npz log is split in memory; the Parquet log's stream
skips the held-out queries and keeps at most ``ultr.select_holdout_sessions`` of their
sessions."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
import torch

import differank
from differank.datamodules.clicks.click_log import ClickLog, read_click_log
from differank.datamodules.clicks.datamodule import run_features
from differank.datamodules.clicks.held_out import HeldOutSessions, QueryHoldout, held_out_queries
from differank.rankers.run.runs import compose_config
from differank.rankers.run.trainer_tasks import build_run
from tests.conftest import TINY_DATA, run_config
from tests.rankers.run.test_click_selection import corrupt_validation_labels

RUN = [*TINY_DATA, "trainer.max_epochs=4", "logger=csv", "quiet=true", "loss=softmax"]
PBM = ["clicks=pbm", "clicks.top_k=6", "clicks.eta=2"]
IPS_SELECT = ["ultr=ips", "ultr.select=clicks"]


@pytest.fixture(scope="module")
def click_log(tmp_path_factory):
    """Three sessions per training query of TINY_DATA (40 queries), written by task=simulate."""
    folder = tmp_path_factory.mktemp("log")
    path = folder / "clicks.npz"
    simulate = [*RUN, *PBM, "clicks.sessions_per_query=3", "task=simulate", f"clicks.log={path}"]
    run_config(simulate, folder / "simulate")
    return path


def select_on(log, *extra):
    return [*RUN, "clicks=log", f"clicks.log={log}", *IPS_SELECT, *extra]


def a_log(qids, sessions_per_query=2, length=3, propensity=True):
    """A doc_row log: ``sessions_per_query`` sessions of ``length`` slots per query of ``qids``."""
    session_qids = np.repeat(np.asarray(qids), sessions_per_query)
    n = len(session_qids) * length
    rng = np.random.default_rng(0)
    by_position = np.tile(1.0 / (1.0 + np.arange(length)), len(session_qids))
    return ClickLog(
        session=np.repeat(np.arange(len(session_qids)), length),
        qid=np.repeat(session_qids, length),
        position=np.tile(np.arange(length), len(session_qids)),
        click=rng.integers(0, 2, n),
        doc_row=rng.integers(0, 50, n),
        propensity=by_position if propensity else None,
    )


# ---- the split of the log's queries ---------------------------------------------------------


def test_the_held_out_queries_are_a_share_chosen_by_a_hash_of_qid_and_seed():
    qids = np.arange(-5_000, 15_000)
    held = held_out_queries(qids, 0.1, seed=3)
    assert 0.09 < held.mean() < 0.11
    # a query's fate depends on its id and the seed alone: not on the order or the company
    order = np.random.default_rng(1).permutation(len(qids))
    assert np.array_equal(held_out_queries(qids[order], 0.1, seed=3), held[order])
    assert np.array_equal(held_out_queries(qids[:7], 0.1, seed=3), held[:7])
    assert not np.array_equal(held_out_queries(qids, 0.1, seed=4), held)
    # a larger share holds out a superset
    assert (held_out_queries(qids, 0.3, seed=3) >= held).all()


@pytest.mark.parametrize("share", [0, 0.0, 1, 1.0, -0.1, 1.5, math.nan, math.inf, True, "0.1"])
def test_a_holdout_share_outside_0_1_is_refused_naming_the_option(share):
    with pytest.raises(ValueError, match=r"ultr.select_holdout .* a number in \(0, 1\)"):
        held_out_queries(np.arange(10), share, seed=0)
    with pytest.raises(ValueError, match=r"ultr.select_holdout .* a number in \(0, 1\)"):
        QueryHoldout(share, seed=0)


def test_a_query_is_wholly_held_out_or_wholly_trained_on():
    log = a_log(np.arange(100), sessions_per_query=3)
    training, held = QueryHoldout(0.2, seed=0).split(log)
    assert set(training.qid).isdisjoint(held.qid)
    assert set(training.qid) | set(held.qid) == set(range(100))
    assert len(training.click) + len(held.click) == len(log.click)
    expected = np.flatnonzero(held_out_queries(np.arange(100), 0.2, seed=0))
    assert sorted(set(held.qid.tolist())) == expected.tolist()
    # every session kept whole, with its rows as logged
    in_held = np.isin(log.qid, expected)
    assert np.array_equal(held.doc_row, log.doc_row[in_held])
    assert np.array_equal(held.click, log.click[in_held])
    assert len(held.offsets) - 1 == 3 * len(expected)


@pytest.mark.parametrize(
    ("qids", "share", "match"),
    [
        ([7], 0.5, "holds out (none|all) of the log's 1 queries"),
        (np.arange(20), 1e-6, r"holds out none of the log's 20 queries .* raise it"),
        (np.arange(20), 1 - 1e-6, r"holds out all of the log's 20 queries .* lower it"),
    ],
)
def test_a_log_too_small_to_hold_out_and_train_is_refused(qids, share, match):
    with pytest.raises(ValueError, match=match):
        QueryHoldout(share, seed=0).split(a_log(qids))


def test_held_out_sessions_of_a_log_are_one_row_each_as_logged():
    log = a_log([3, 5], sessions_per_query=2, length=3)
    features = np.arange(len(log.click) * 2, dtype=np.float32).reshape(-1, 2)
    sessions = HeldOutSessions.logged(log, features)
    columns = sessions.columns
    assert len(sessions) == 4 and sessions.sessions == 1 and "labels" not in columns
    assert columns["qid"].tolist() == [3, 3, 5, 5]
    assert columns["clicks"].shape[:2] == (4, 1)
    mask = columns["mask"]
    assert mask.sum(dim=1).tolist() == [3, 3, 3, 3]
    assert columns["clicks"][:, 0][mask].tolist() == log.click.astype(float).tolist()
    assert (columns["clicks"][:, 0][~mask] == 0).all()
    assert columns["positions"][mask].tolist() == log.position.tolist()
    assert (columns["positions"][~mask] == -1).all()
    assert torch.equal(columns["propensities"][mask], torch.from_numpy(log.propensity))
    assert (columns["propensities"][~mask] == 1).all()
    assert torch.equal(columns["features"][mask], torch.from_numpy(features))
    without = HeldOutSessions.logged(a_log([3], propensity=False), features[:6])
    assert "propensities" not in without.columns  # the estimate reads ultr.propensities


# ---- runs on a log task=simulate wrote ------------------------------------------------------


def test_the_held_out_queries_never_appear_in_a_training_batch(click_log, tmp_path):
    datamodule, model = build_run(compose_config(select_on(click_log), run_dir=tmp_path))
    held = datamodule.held_out
    assert isinstance(held, HeldOutSessions) and model.click_validation is not None
    held_qids = set(held.columns["qid"].tolist())
    trained = set()
    for batch in datamodule.train_dataloader():
        trained |= set(batch["qid"].tolist())
    logged = read_click_log(click_log)
    assert held_qids and trained.isdisjoint(held_qids)
    assert trained | held_qids == set(logged.qid.tolist())
    # every session of a held-out query is a validation row, none trained on
    assert len(held) == int(np.isin(logged.qid[logged.offsets[:-1]], list(held_qids)).sum())
    batch = next(iter(datamodule.val_dataloader()))
    assert "labels" not in batch and batch["clicks"].shape[1] == 1


def ips_dcg_by_hand(model, data, logged, held_qids, k=10, clip=100.0):
    """The mean over the held-out sessions of the IPS estimate of DCG@k: session by session,
    from the log's rows and the training split's features."""
    features = data.split_data("train").features
    values = []
    offsets = logged.offsets
    for start, end in zip(offsets[:-1], offsets[1:], strict=True):
        if logged.qid[start] not in held_qids:
            continue
        rows = logged.doc_row[start:end]
        with torch.no_grad():
            x = torch.from_numpy(features[rows]).unsqueeze(0)
            scores = model(x, torch.ones(1, len(rows), dtype=torch.bool))[0].double().numpy()
        theta = np.maximum(logged.propensity[start:end].astype(np.float64), 1 / clip)
        clicks = logged.click[start:end]
        value = 0.0
        for rank, slot in enumerate(np.argsort(-scores, kind="stable")[:k]):
            value += clicks[slot] / theta[slot] / math.log2(rank + 2)
        values.append(value)
    return float(np.mean(values))


def chosen_by_held_out_clicks(result, click_log, tmp_path) -> dict[int, float]:
    """Assert that ``result``'s tested epoch is the argmax of its logged val/click_dcg@10 and
    that the value, recomputed by hand on the held-out sessions of ``click_log`` with the chosen
    weights, is the run's; the logged value per epoch."""
    with open(next(result.run_dir.rglob("metrics.csv"))) as file:
        rows = [row for row in csv.DictReader(file) if row.get("val/click_dcg@10")]
    by_epoch = {int(row["epoch"]): float(row["val/click_dcg@10"]) for row in rows}
    state = torch.load(result.run_dir / "checkpoints" / "best.ckpt", weights_only=True)
    assert len(by_epoch) == 4 and state["epoch"] == max(by_epoch, key=by_epoch.get)
    datamodule, model = build_run(compose_config(select_on(click_log), run_dir=tmp_path / "b"))
    model.load_state_dict(state["state_dict"])
    model.eval()
    held_qids = set(datamodule.held_out.columns["qid"].tolist())
    by_hand = ips_dcg_by_hand(model, datamodule, read_click_log(click_log), held_qids)
    assert by_hand == pytest.approx(result.best_validation, rel=1e-5)
    return by_epoch


def test_the_chosen_epoch_is_the_argmax_of_click_dcg_on_those_sessions(click_log, tmp_path):
    result = differank.run(select_on(click_log), output_dir=tmp_path / "run")
    assert result.monitor == "val/click_dcg@10"
    by_epoch = chosen_by_held_out_clicks(result, click_log, tmp_path)
    assert len(set(by_epoch.values())) > 1  # a choice to make
    assert result.best_validation == pytest.approx(max(by_epoch.values()), rel=1e-6)


@pytest.mark.parametrize("how", ["nan", "unreadable"])
def test_no_validation_label_is_read_the_same_epoch_is_chosen(
    click_log, tmp_path, monkeypatch, how
):
    truth = differank.run(select_on(click_log), output_dir=tmp_path / "truth")
    corrupt_validation_labels(monkeypatch, how, built_by="logged")
    blind = differank.run(select_on(click_log), output_dir=tmp_path / how)
    assert math.isfinite(truth.best_validation)
    assert blind.best_validation == truth.best_validation
    assert blind.test_metrics == truth.test_metrics
    truth_state, blind_state = (
        torch.load(run.run_dir / "checkpoints" / "best.ckpt", weights_only=True)
        for run in (truth, blind)
    )
    assert truth_state["epoch"] == blind_state["epoch"]
    assert set(truth_state["differank"]["validation"]) == {"val/click_dcg@10"}


def test_another_seed_or_share_holds_out_other_queries(click_log, tmp_path):
    def held(*extra):
        cfg = compose_config([*select_on(click_log), *extra], run_dir=tmp_path)
        return set(build_run(cfg)[0].held_out.columns["qid"].tolist())

    # the data keeps its seed (the log's doc_row indexes it); the run's seed changes
    first = held("seed=1", "data.seed=0")
    assert held("seed=1", "data.seed=0") == first
    assert held("seed=2", "data.seed=0") != first
    assert held("seed=1", "data.seed=0", "ultr.select_holdout=0.5") > first


def test_a_features_log_holds_out_its_features_as_the_run_normalises_them(click_log, tmp_path):
    logged = read_click_log(click_log)
    raw = np.random.default_rng(0).normal(5.0, 3.0, (len(logged.click), 46)).astype(np.float32)
    features_log = tmp_path / "features.npz"
    ClickLog(
        session=logged.session,
        qid=logged.qid,
        position=logged.position,
        click=logged.click,
        features=raw,
        propensity=logged.propensity,
    ).write(features_log)
    cfg = compose_config(select_on(features_log), run_dir=tmp_path)  # data.normalization=zscore
    datamodule, _ = build_run(cfg)
    columns = datamodule.held_out.columns
    in_held = np.isin(logged.qid, columns["qid"].numpy())
    expected = run_features(datamodule, raw[in_held])
    assert not np.allclose(expected, raw[in_held])  # normalised: not the raw values
    assert torch.equal(columns["features"][columns["mask"]], torch.from_numpy(expected))


def test_a_log_without_propensities_needs_ultr_propensities(click_log, tmp_path):
    logged = read_click_log(click_log)
    bare = tmp_path / "bare.npz"
    ClickLog(
        session=logged.session,
        qid=logged.qid,
        position=logged.position,
        click=logged.click,
        doc_row=logged.doc_row,
        train_qids_sha256=logged.train_qids_sha256,
        train_files_sha256=logged.train_files_sha256,
    ).write(bare)
    with pytest.raises(ValueError, match=r"bare.npz has no propensity column.*ultr.propensities="):
        differank.run(select_on(bare), output_dir=tmp_path / "refused")
    known = "ultr.propensities=[1.0,0.5,0.33,0.25,0.2,0.17]"
    result = differank.run([*select_on(bare), known], output_dir=tmp_path / "known")
    assert result.monitor == "val/click_dcg@10" and math.isfinite(result.best_validation)


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["ultr.select_holdout=1.5"], r"ultr.select_holdout .* in \(0, 1\)"),
        (["ultr.select_holdout=0.0001"], "holds out none of the log's 40 queries"),
    ],
)
def test_bad_holdouts_are_refused_before_training(click_log, tmp_path, extra, match):
    with pytest.raises(ValueError, match=match):
        differank.run([*select_on(click_log), *extra], output_dir=tmp_path)
    assert not list(tmp_path.rglob("*.ckpt"))


# ---- a Parquet log: streamed, its held-out part capped in memory -----------------------------


@pytest.fixture(scope="module")
def parquet_log(click_log):
    """The sessions of ``click_log`` as a Parquet log (a doc_row log, as task=simulate writes)."""
    pytest.importorskip("pyarrow")
    from differank.datamodules.clicks.parquet_log import write_click_log_parquet

    path = click_log.parent / "clicks.parquet"
    write_click_log_parquet(read_click_log(click_log), path)
    return path


def select_on_parquet(log, *extra):
    return [*RUN, "clicks=parquet_log", f"clicks.log={log}", *IPS_SELECT, *extra]


def test_a_parquet_log_holds_out_the_same_sessions_and_never_streams_them(
    click_log, parquet_log, tmp_path
):
    npz, _ = build_run(compose_config(select_on(click_log), run_dir=tmp_path / "npz"))
    streamed, model = build_run(compose_config(select_on_parquet(parquet_log), run_dir=tmp_path))
    assert model.click_validation is not None
    # the same hash of the same queries: the same held-out sessions, as logged
    for name, column in npz.held_out.columns.items():
        assert torch.equal(streamed.held_out.columns[name], column), name
    held_qids = set(streamed.held_out.columns["qid"].tolist())
    trained = set()
    for batch in streamed.train_dataloader():
        trained |= set(batch["qid"].tolist())
    assert held_qids and trained.isdisjoint(held_qids)
    assert trained | held_qids == set(read_click_log(click_log).qid.tolist())
    batch = next(iter(streamed.val_dataloader()))
    assert "labels" not in batch and batch["clicks"].shape[1] == 1
    # the DDP quotas count the training sessions alone
    training, _ = QueryHoldout(0.1, seed=0).split(read_click_log(click_log))
    counted = streamed.log.sessions_per_group(streamed.held_out_queries).sum()
    assert counted == len(training.offsets) - 1 < streamed.log.sessions_per_group().sum()


def test_a_parquet_log_keeps_at_most_the_cap_of_held_out_sessions(parquet_log, tmp_path, caplog):
    overrides = select_on_parquet(parquet_log, "ultr.select_holdout_sessions=5")
    with caplog.at_level("WARNING", logger="differank.datamodules.clicks.stream"):
        streamed, _ = build_run(compose_config(overrides, run_dir=tmp_path))
    assert len(streamed.held_out) == 5
    assert "5 held-out sessions kept" in caplog.text
    uncapped, _ = build_run(compose_config(select_on_parquet(parquet_log), run_dir=tmp_path / "b"))
    # the first five in file order; the others of held-out queries are not trained on either
    for name, column in uncapped.held_out.columns.items():
        assert torch.equal(streamed.held_out.columns[name], column[:5]), name
    held_qids = set(uncapped.held_out.columns["qid"].tolist())
    for batch in streamed.train_dataloader():
        assert held_qids.isdisjoint(batch["qid"].tolist())


def test_a_parquet_run_chooses_by_its_held_out_sessions(parquet_log, click_log, tmp_path):
    """Trained on the same sessions in another order than the npz run, so not the same model:
    the chosen epoch is the argmax of the click metric on the held-out sessions."""
    result = differank.run(select_on_parquet(parquet_log), output_dir=tmp_path / "run")
    chosen_by_held_out_clicks(result, click_log, tmp_path)


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["ultr.select_holdout_sessions=0"], "ultr.select_holdout_sessions must be an integer"),
        (["ultr.select_holdout=0.0001"], "holds out none of the log's queries"),
        (["ultr.select_holdout=0.9999"], "holds out all of the log's queries"),
    ],
)
def test_bad_parquet_holdouts_are_refused(parquet_log, tmp_path, extra, match):
    with pytest.raises(ValueError, match=match):
        differank.run(select_on_parquet(parquet_log, *extra), output_dir=tmp_path)
