"""Training on a Parquet click log of any size: its row groups streamed, sharded across DDP ranks
and data-loader workers, turned into click batches (``clicks=parquet_log``,
docs/clicks.md#the-parquet-click-log).

Every (rank, worker) reads its own row groups: with R ranks and W workers, reader
``k = rank · W + worker`` reads row groups ``g`` with ``g mod (R · W) = k``, so each row group is
read by exactly one (rank, worker) per epoch, and a session (which lies in one row group) is
served exactly once. A reader holds one row group (two while a batch takes sessions from both)
and the batch it is filling, never the log.
Each epoch it visits its row groups, and the sessions of each, in an order drawn from
``(seed, epoch, rank, worker)``.

The batches are THE CLICK BATCH CONTRACT (docs/clicks.md#the-click-batch), built in the
workers: ``features`` float32 [B, L, F] (the run's feature transform and z-score applied to raw
features), ``mask``, ``qid``, ``doc_index`` (the log's file row, -1 at padding), ``clicks``,
``positions`` (0-based, -1 at padding) and ``propensities`` when the log has them. ``labels``
never exists. Validation, test and everything else are the wrapped LETOR data module's, but
under ``ultr.select=clicks``: a :class:`~differank.datamodules.clicks.held_out.QueryHoldout`
holds out a share of the log's queries, whose sessions the stream skips and whose first
``held_out_cap`` sessions in file order (a bound on memory: one row group is read at a time)
are the validation click batches.

With DDP every rank must step as often as the others (a rank that runs out first would leave
the others waiting in their gradient all-reduce). Row groups hold different numbers of sessions,
so before the first epoch the session count of every row group is read (its ``session`` column
alone) and each (rank, worker) serves at most as many batches as the same worker of the rank
with the fewest (:func:`equal_batches`); the sessions left out are logged, and differ per epoch
as the order does. One process serves every session.

Public API::

    StreamingClickDataModule(data, log: ParquetClickLog, *, feature_table=None, seed=0,
                             held_out: QueryHoldout | None = None, held_out_cap=None)
    ClickLogStream(log, features, batch_size, *, seed=0, rank=0, world_size=1,
                   held_out=None)  # the dataset
    shard_row_groups(row_groups, rank, world_size, worker, workers) -> [int]
    equal_batches(sessions_per_group, batch_size, world_size, workers) -> int64 [workers]
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from differank.datamodules.clicks.click_log import ClickLog, ClickLogError
from differank.datamodules.clicks.datamodule import check_same_data, run_features
from differank.datamodules.clicks.held_out import HeldOutSessions, QueryHoldout
from differank.datamodules.clicks.parquet_log import FeatureTable, LoggedRows, ParquetClickLog
from differank.datamodules.clicks.wrapping import WrappingDataModule
from differank.datamodules.letor import LetorDataModule

log = logging.getLogger(__name__)


def shard_row_groups(
    row_groups: int, rank: int, world_size: int, worker: int, workers: int
) -> list[int]:
    """The row groups reader ``(rank, worker)`` reads: ``g mod (world_size · workers) = rank ·
    workers + worker`` (every row group read by exactly one reader).

    Example:
        >>> shard_row_groups(5, rank=1, world_size=2, worker=0, workers=2)
        [2]
    """
    readers = world_size * workers
    return list(range(rank * workers + worker, row_groups, readers))


def _shard_sessions(sessions_per_group, world_size: int, workers: int) -> np.ndarray:
    """int64 [world_size, workers]: the sessions each (rank, worker) reads."""
    counts = np.asarray(sessions_per_group, dtype=np.int64)
    groups = len(counts)
    return np.array(
        [
            [
                counts[shard_row_groups(groups, r, world_size, w, workers)].sum()
                for w in range(workers)
            ]
            for r in range(world_size)
        ],
        dtype=np.int64,
    )


def equal_batches(sessions_per_group, batch_size: int, world_size: int, workers: int) -> np.ndarray:
    """int64 [workers]: how many batches worker w of every rank serves per epoch, the fewest
    that worker fills on any rank, so that every rank steps as often as the others.

    Example:
        >>> equal_batches([10, 3, 4], batch_size=4, world_size=2, workers=1).tolist()
        [1]
    """
    batches = -(-_shard_sessions(sessions_per_group, world_size, workers) // batch_size)
    return batches.min(axis=0)


class ClickLogStream(IterableDataset):
    """The click batches of one rank's share of a Parquet click log (module docstring).
    ``features(rows) -> float32 [n, F]``: each row's features as the run trains on them;
    ``held_out``: the queries whose sessions are skipped (``ultr.select_holdout``)."""

    def __init__(
        self,
        log: ParquetClickLog,
        features: Callable[[LoggedRows], np.ndarray],
        batch_size: int,
        *,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        batches_per_worker: np.ndarray | None = None,
        held_out: QueryHoldout | None = None,
    ) -> None:
        self.log, self.features, self.batch_size = log, features, int(batch_size)
        self.held_out = held_out  # the queries whose sessions are not trained on
        self.seed, self.rank, self.world_size = int(seed), int(rank), int(world_size)
        # at most this many batches from worker w (equal_batches; None: every session)
        self.batches_per_worker = batches_per_worker
        self.epoch = 0  # advanced by each pass (persistent workers each advance their copy)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        groups = shard_row_groups(self.log.row_groups, self.rank, self.world_size, worker, workers)
        rng = np.random.default_rng([self.seed, self.epoch, self.rank, worker])
        self.epoch += 1
        quota = None if self.batches_per_worker is None else int(self.batches_per_worker[worker])
        for served, batch in enumerate(self._batches(groups, rng)):
            if served == quota:
                return
            yield batch

    def _batches(self, groups: list[int], rng: np.random.Generator) -> Iterator[dict]:
        pending: list[tuple[LoggedRows, np.ndarray, int, int]] = []
        for group in rng.permutation(groups).tolist():
            rows = self.log.read_group(group)
            features = self.features(rows)
            offsets = rows.offsets
            held = np.zeros(len(offsets) - 1, bool)
            if self.held_out is not None:
                held = self.held_out(rows.qid[offsets[:-1]])
            for s in rng.permutation(len(offsets) - 1).tolist():
                if held[s]:
                    continue
                pending.append((rows, features, int(offsets[s]), int(offsets[s + 1])))
                if len(pending) == self.batch_size:
                    yield click_batch(pending)
                    pending = []
        if pending:
            yield click_batch(pending)


def click_batch(sessions: list[tuple[LoggedRows, np.ndarray, int, int]]) -> dict:
    """Padded click batch of ``(rows, features, start, end)`` sessions (module docstring)."""
    lengths = [end - start for _, _, start, end in sessions]
    size, width = len(sessions), max(lengths)
    n_features = sessions[0][1].shape[1]
    features = np.zeros((size, width, n_features), np.float32)
    clicks = np.zeros((size, width), np.float32)
    doc_index = np.full((size, width), -1, np.int64)
    qid = np.zeros(size, np.int64)
    with_propensity = sessions[0][0].propensity is not None
    propensities = np.ones((size, width), np.float32)
    for b, (rows, block, start, end) in enumerate(sessions):
        n = end - start
        features[b, :n] = block[start:end]
        clicks[b, :n] = rows.click[start:end]
        doc_index[b, :n] = rows.first_row + np.arange(start, end)
        qid[b] = rows.qid[start]
        if rows.propensity is not None:
            propensities[b, :n] = rows.propensity[start:end]
    mask = torch.from_numpy(doc_index >= 0)
    slots = torch.arange(width).expand(size, width)
    batch = {
        "features": torch.from_numpy(features),
        "mask": mask,
        "qid": torch.from_numpy(qid),
        "doc_index": torch.from_numpy(doc_index),
        "clicks": torch.from_numpy(clicks),
        "positions": slots.masked_fill(~mask, -1),
    }
    if with_propensity:
        batch["propensities"] = torch.from_numpy(propensities)
    return batch


def _held_out_rows(rows: LoggedRows, features: np.ndarray, take: np.ndarray) -> dict:
    """The rows ``take`` of a row group as ClickLog columns (positions 0-based), with
    ``features`` (the group's, as the run normalises them)."""
    columns = {
        "session": rows.session[take],
        "qid": rows.qid[take],
        "position": rows.position[take] - 1,
        "click": rows.click[take],
        "features": features[take],
    }
    if rows.propensity is not None:
        columns["propensity"] = rows.propensity[take]
    return columns


class _LoggedFeatures:
    """The ``features`` column, as the run normalises raw features."""

    def __init__(self, data, log: ParquetClickLog) -> None:
        self.data, self.source = data, str(log.path)

    def __call__(self, rows: LoggedRows) -> np.ndarray:
        assert rows.features is not None
        return run_features(self.data, rows.features, self.source)


class _TableFeatures:
    """The feature table's row of each ``doc_key``, as the run normalises raw features."""

    def __init__(self, data, table: FeatureTable, log: ParquetClickLog) -> None:
        self.data, self.table, self.log_path = data, table, log.path

    def __call__(self, rows: LoggedRows) -> np.ndarray:
        assert rows.doc_key is not None
        return run_features(
            self.data, self.table.lookup(rows.doc_key, rows, self.log_path), str(self.log_path)
        )


class _TrainingRows:
    """The training split's row of each ``doc_row`` (already normalised by the run)."""

    def __init__(self, features: np.ndarray, log: ParquetClickLog) -> None:
        self.split_features, self.log_path = features, log.path

    def __call__(self, rows: LoggedRows) -> np.ndarray:
        assert rows.doc_row is not None
        outside = rows.doc_row >= len(self.split_features)
        if outside.any():
            row = int(np.argmax(outside))
            raise ClickLogError(
                f"{self.log_path}: file row {rows.first_row + row} (session "
                f"{rows.session[row]}): doc_row {rows.doc_row[row]} is outside the "
                f"{len(self.split_features)} rows of this run's training split (a doc_row log "
                "needs the data it was written for: same data and fold)"
            )
        return np.ascontiguousarray(self.split_features[rows.doc_row])


class StreamingClickDataModule(WrappingDataModule):
    """A LETOR data module trained on a streamed Parquet click log (module docstring): its
    training loader is the log's; everything else is the wrapped module's, but the validation
    batches under ``held_out`` (``ultr.select=clicks``): the sessions of the queries it holds
    out, which the stream skips, the first ``held_out_cap`` of them in file order read here
    (:class:`~differank.datamodules.clicks.held_out.HeldOutSessions`)."""

    def __init__(
        self,
        data: LetorDataModule,
        log: ParquetClickLog,
        *,
        feature_table: FeatureTable | None = None,
        seed: int = 0,
        held_out: QueryHoldout | None = None,
        held_out_cap: int | None = None,
    ) -> None:
        super().__init__()
        if (log.document == "doc_key") != (feature_table is not None):
            raise ValueError(
                f"{log.path}: a doc_key log needs its feature table (clicks.feature_table=PATH), "
                "and only a doc_key log takes one"
            )
        self.data, self.log, self.feature_table, self.seed = data, log, feature_table, int(seed)
        self._stream: ClickLogStream | None = None
        self.held_out_queries = held_out
        self.held_out: HeldOutSessions | None = None
        if held_out is not None:
            self.held_out = self._read_held_out(held_out, held_out_cap)

    def _read_held_out(self, held_out: QueryHoldout, cap: int | None) -> HeldOutSessions:
        """The sessions of the held-out queries, the first ``cap`` in file order (memory:
        ``cap`` sessions and one row group): the validation click batches."""
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise ValueError(f"ultr.select_holdout_sessions must be an integer >= 1, got {cap!r}")
        features_of = self._features()
        parts: list[dict[str, np.ndarray]] = []
        kept, group = 0, 0
        while kept < cap and group < self.log.row_groups:
            rows = self.log.read_group(group)
            offsets = rows.offsets
            held = np.flatnonzero(held_out(rows.qid[offsets[:-1]]))[: cap - kept]
            if len(held):
                take = np.concatenate([np.arange(offsets[s], offsets[s + 1]) for s in held])
                parts.append(_held_out_rows(rows, features_of(rows), take))
                kept += len(held)
            group += 1
        if kept == 0:
            raise held_out.refused(self.log.source, every=False)
        if self.log.sessions_per_group(held_out).sum() == 0:
            raise held_out.refused(self.log.source, every=True)
        if kept == cap:
            log.warning(
                "%s: %d held-out sessions kept to choose the epoch by (the cap, ultr.select_"
                "holdout_sessions), the first in file order (row groups 0 to %d); any later "
                "sessions of held-out queries are neither trained on nor validated",
                self.log.path,
                cap,
                group - 1,
            )
        column = {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
        # a ClickLog of the held-out rows, their features as the run normalises them
        sessions = ClickLog(
            session=column["session"],
            qid=column["qid"],
            position=column["position"],
            click=column["click"],
            features=column["features"],
            propensity=column.get("propensity"),
            source=self.log.source,
        )
        return HeldOutSessions.logged(sessions, column["features"])

    def _features(self) -> Callable[[LoggedRows], np.ndarray]:
        data = self._wrapped()
        if self.log.document == "doc_row":
            check_same_data(self.log, data)
            return _TrainingRows(data.split_data("train").features, self.log)
        if self.log.n_features is not None and self.log.n_features != data.n_features:
            raise ClickLogError(
                f"{self.log.path}: features has {self.log.n_features} values per row, the data "
                f"{data.n_features}: a log's features must be the run's features, in order"
            )
        self.log.n_features = data.n_features
        if self.feature_table is not None:
            width = self.feature_table.features.shape[1]
            if width != data.n_features:  # before the first batch fails in the z-score
                raise ClickLogError(
                    f"{self.feature_table.source}: the feature table holds {width} features per "
                    f"document, the data {data.n_features}: a table's features must be the "
                    "run's features, in order"
                )
            return _TableFeatures(data, self.feature_table, self.log)
        return _LoggedFeatures(data, self.log)

    def stream(self) -> ClickLogStream:
        """The training dataset, built once (it counts its epochs)."""
        if self._stream is None:
            trainer = self.trainer
            rank, world_size = (trainer.global_rank, trainer.world_size) if trainer else (0, 1)
            batch_size = self._wrapped().batch_size
            quotas = None
            if world_size > 1:
                quotas = self._equal_batches(batch_size, world_size, rank)
            self._stream = ClickLogStream(
                self.log,
                self._features(),
                batch_size,
                seed=self.seed,
                rank=rank,
                world_size=world_size,
                batches_per_worker=quotas,
                held_out=self.held_out_queries,
            )
        return self._stream

    def _equal_batches(self, batch_size: int, world_size: int, rank: int) -> np.ndarray:
        """The batches per worker every rank serves (:func:`equal_batches`), and a warning of
        the sessions this rank leaves out each epoch."""
        workers = max(1, self.data.num_workers)
        sessions = self.log.sessions_per_group(self.held_out_queries)
        quotas = equal_batches(sessions, batch_size, world_size, workers)
        read = _shard_sessions(sessions, world_size, workers)[rank]
        served = np.minimum(read, quotas * batch_size)
        if (served < read).any():
            log.warning(
                "%s: rank %d reads %d sessions per epoch in %d batches, the rank with the fewest "
                "fills %d: it serves %d batches and leaves %d sessions out each epoch (others "
                "each epoch) so that every rank steps equally often; write row groups of equal "
                "session counts to serve all",
                self.log.path,
                rank,
                int(read.sum()),
                int((-(-read // batch_size)).sum()),
                int(quotas.sum()),
                int(quotas.sum()),
                int((read - served).sum()),
            )
        return quotas

    def val_dataloader(self):
        if self.held_out is None:
            return self._wrapped().val_dataloader()
        return self.held_out.loader(self.data.eval_batch_size, self.trainer)

    def train_dataloader(self) -> DataLoader:
        workers = self.data.num_workers
        return DataLoader(
            self.stream(),
            batch_size=None,  # the stream yields whole batches
            num_workers=workers,
            persistent_workers=workers > 0,
        )
