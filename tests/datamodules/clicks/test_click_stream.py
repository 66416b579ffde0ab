"""Streaming a Parquet click log: every session served exactly once per epoch over DDP ranks ×
data-loader workers, in click batches of the contract's shape, one row group held at a time."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

pytest.importorskip("pyarrow")

from differank.datamodules.clicks.click_log import ClickLogError  # noqa: E402
from differank.datamodules.clicks.parquet_log import (  # noqa: E402
    ClickLogWriter,
    FeatureTable,
    ParquetClickLog,
)
from differank.datamodules.clicks.stream import (  # noqa: E402
    ClickLogStream,
    StreamingClickDataModule,
    equal_batches,
    shard_row_groups,
)


def raw_features(rows):
    return rows.features


def synthetic_log(path, groups=7, sessions_per_group=5, n_features=3, seed=0):
    """A features log of ``groups`` row groups; session s has 1 + s % 4 documents, query s % 6,
    feature 0 = the session id, feature 1 = the position."""
    rng = np.random.default_rng(seed)
    with ClickLogWriter(path, "features", n_features=n_features, with_propensity=True) as writer:
        for g in range(groups):
            sessions = np.arange(g * sessions_per_group, (g + 1) * sessions_per_group)
            lengths = 1 + sessions % 4
            session = np.repeat(sessions, lengths)
            position = np.concatenate([np.arange(1, n + 1) for n in lengths])
            features = rng.normal(size=(len(session), n_features)).astype(np.float32)
            features[:, 0], features[:, 1] = session, position
            writer.write(
                session=session,
                qid=session % 6,
                position=position,
                click=rng.integers(0, 2, len(session)),
                propensity=1.0 / position,
                features=features,
            )
    return ParquetClickLog(path)


def served_sessions(batches) -> list[int]:
    """The session of every list served (feature 0 of its top document)."""
    return [int(s) for batch in batches for s in batch["features"][:, 0, 0].tolist()]


def test_row_groups_are_shared_out_one_reader_each():
    readers = [shard_row_groups(11, rank, 2, worker, 3) for rank in range(2) for worker in range(3)]
    assert sorted(g for groups in readers for g in groups) == list(range(11))


def test_two_ranks_by_two_workers_serve_every_session_exactly_once(tmp_path):
    log = synthetic_log(tmp_path / "log.parquet")
    served = []
    for rank in range(2):
        stream = ClickLogStream(log, raw_features, batch_size=4, seed=1, rank=rank, world_size=2)
        loader = DataLoader(stream, batch_size=None, num_workers=2)
        served.append(served_sessions(loader))
    assert sorted(served[0] + served[1]) == list(range(35))
    assert set(served[0]).isdisjoint(served[1]) and served[0] and served[1]


def test_a_batch_is_the_click_batch_of_its_sessions(tmp_path):
    log = synthetic_log(tmp_path / "log.parquet", groups=2)
    stream = ClickLogStream(log, raw_features, batch_size=3, seed=0)
    batches = list(stream)
    assert sum(len(b["qid"]) for b in batches) == 10
    for batch in batches:
        mask, features = batch["mask"], batch["features"]
        assert features.dtype == torch.float32 and features.shape[:2] == mask.shape
        assert "labels" not in batch
        lengths = mask.sum(1)
        session = features[:, 0, 0].long()
        assert torch.equal(lengths, 1 + session % 4) and torch.equal(batch["qid"], session % 6)
        slots = torch.arange(mask.shape[1]).expand(mask.shape)
        assert torch.equal(batch["positions"], slots.masked_fill(~mask, -1))
        assert torch.equal(features[..., 1][mask], (batch["positions"] + 1)[mask].float())
        assert torch.equal(batch["propensities"][mask], 1 / (batch["positions"][mask] + 1.0))
        assert (batch["propensities"][~mask] == 1).all() and (batch["clicks"][~mask] == 0).all()
        assert (batch["doc_index"][~mask] == -1).all()
    # doc_index: the log's file row of each slot, every row once
    rows = torch.cat([b["doc_index"][b["mask"]] for b in batches]).sort().values
    assert torch.equal(rows, torch.arange(log.rows))


def test_each_epoch_draws_another_order_from_the_seed(tmp_path):
    log = synthetic_log(tmp_path / "log.parquet")
    stream = ClickLogStream(log, raw_features, batch_size=4, seed=3)
    first, second = served_sessions(stream), served_sessions(stream)
    again = ClickLogStream(log, raw_features, batch_size=4, seed=3)
    assert first == served_sessions(again) and first != second
    assert sorted(first) == sorted(second) == list(range(35))


def test_a_log_of_other_features_is_refused_when_opened(tmp_path):
    path = tmp_path / "log.parquet"
    synthetic_log(path, groups=2)
    with pytest.raises(ClickLogError, match="features holds 3 values per row, the run's data 4"):
        ParquetClickLog(path, n_features=4)  # the run has 4 features, the log 3


def test_a_feature_table_of_other_features_is_refused_before_a_batch(tmp_path):
    """A doc_key log's table of 3 features on data of 4: refused naming the table, not a
    broadcasting error from the z-score at the first batch."""
    path = tmp_path / "keyed.parquet"
    with ClickLogWriter(path, "doc_key") as writer:
        writer.write(session=[0, 0], qid=[1, 1], position=[1, 2], click=[0, 1], doc_key=[0, 1])
    table = FeatureTable(np.arange(2), np.ones((2, 3), np.float32), "table.parquet")
    data = SimpleNamespace(n_features=4, batch_size=2, num_workers=0)  # only these are read
    module = StreamingClickDataModule(data, ParquetClickLog(path), feature_table=table)  # type: ignore[arg-type]
    with pytest.raises(ClickLogError, match="table.parquet: the feature table holds 3 features"):
        module.stream()


def test_ranks_of_unequal_row_groups_step_equally_often(tmp_path):
    """Over 2 ranks x 2 workers, 5 row groups give rank 0 three of them: without quotas it
    fills more batches than rank 1; with equal_batches' quotas each rank serves as many as
    the other, every session at most once."""
    path = tmp_path / "log.parquet"
    synthetic_log(path, groups=5)  # 25 sessions, 5 per row group
    log = ParquetClickLog(path)
    assert log.sessions_per_group().tolist() == [5] * 5
    quotas = equal_batches(log.sessions_per_group(), 2, world_size=2, workers=2)

    def batches(rank, quotas):
        stream = ClickLogStream(
            log, raw_features, 2, rank=rank, world_size=2, batches_per_worker=quotas
        )
        return list(DataLoader(stream, batch_size=None, num_workers=2))

    assert [len(batches(rank, None)) for rank in range(2)] == [8, 6]
    equal = [batches(rank, quotas) for rank in range(2)]
    assert [len(b) for b in equal] == [6, 6] == [quotas.sum()] * 2
    served = served_sessions(equal[0]) + served_sessions(equal[1])
    assert len(served) == len(set(served)) == 21  # 4 sessions of rank 0 left out this epoch


def test_the_data_module_says_how_many_sessions_a_rank_leaves_out(tmp_path, caplog):
    log = synthetic_log(tmp_path / "log.parquet", groups=5)
    data = SimpleNamespace(num_workers=0)  # one worker per rank; only its count is read
    module = StreamingClickDataModule(data, log)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING):
        quotas = module._equal_batches(batch_size=2, world_size=2, rank=0)
    assert quotas.tolist() == [5]  # rank 0: 15 sessions, 8 batches; rank 1: 10 sessions, 5
    said = (
        "rank 0 reads 15 sessions per epoch in 8 batches, the rank with the fewest fills 5: it "
        "serves 5 batches and leaves 5 sessions out"
    )
    assert said in caplog.text
