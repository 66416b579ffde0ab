"""Held-out click sessions: what ``ultr.select=clicks`` chooses the epoch from
(docs/clicks.md#choosing-a-model-without-labels), simulated on the validation queries or held
out of a click log.

* Online (:meth:`HeldOutSessions.simulate`): the production ranker shows its top k of every
  validation query, and the run's click model draws ``sessions`` sessions on each list, from a
  generator of its own (``seed`` and a stream number no training draw uses): the same simulated
  users as the training sessions, never the same sessions. The simulator reads the true labels
  once, here, as the users of a real log would "read" relevance; what is kept is only what a
  click log records (features, shown positions, clicks, the logging propensities).
* From a click log (:class:`QueryHoldout`, then :meth:`HeldOutSessions.logged`): a share of
  the log's QUERIES (``ultr.select_holdout``), chosen by a hash of ``(qid, seed)``
  (:func:`held_out_queries`), leaves the training sessions; its sessions, as logged, become the
  validation batches. A query is wholly held out or wholly trained on, so no held-out session
  shares a query with a training one. A log can show one query different lists, so each
  held-out session is a row of its own (S = 1): the metrics average over sessions, a query
  weighing as many sessions as it has.

No validation batch carries ``labels``.

THE VALIDATION CLICK BATCH (what :class:`HeldOutSessions` yields): ``features`` [B, K, F],
``mask`` [B, K], ``qid`` [B], ``doc_index`` [B, K] (-1 at padding: online, the validation
split's row; from a log, the row among the held-out rows of the log), ``positions`` [B, K]
(0-based shown position, -1 at padding), ``propensities`` [B, K] (P(examined): the click
model's, or the log's ``propensity`` column; 1 at padding; absent for a log without one, whose
estimate then reads ``ultr.propensities``) and ``clicks`` [B, S, K] (S sessions per list, 0 at
padding). Online a row is a validation query and its S = ``sessions`` sessions; from a log, a
held-out session (S = 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from differank.datamodules.clicks.base import ClickModel
from differank.datamodules.clicks.click_log import ClickLog
from differank.datamodules.clicks.shown_lists import shown_list_tensors
from differank.datamodules.query_batches import ShardedQueryBatchSampler
from differank.datamodules.split_tensors import SplitTensors

# The validation sessions' stream of the run's seed: training batches use (seed, batch number)
# and the production ranker (seed, 35) and (seed, 36), so these never share a draw with them.
VALIDATION_STREAM = 43
# splitmix64's constants (Steele, Lea and Flood, OOPSLA 2014): a stable 64-bit hash of a
# query id, the same on every platform and NumPy version
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))


def _splitmix64(values: np.ndarray) -> np.ndarray:
    """uint64 [n]: splitmix64's output for each of ``values`` (uint64, wrapping arithmetic)."""
    z = values + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX[0]
    z = (z ^ (z >> np.uint64(27))) * _MIX[1]
    return z ^ (z >> np.uint64(31))


def held_out_queries(qids: np.ndarray, share: float, seed: int) -> np.ndarray:
    """bool [n]: whether each query id of ``qids`` is held out: query ``q`` is when
    ``u(q, seed) < share``, ``u`` a uniform in [0, 1) from the 53 high bits of
    ``splitmix64(splitmix64(seed) + q)`` (ids as int64, wrapping). The same query is held out
    wherever it appears, in any order, by any reader (the npz and the Parquet log alike);
    about ``share`` of the queries are, not exactly.

    Example:
        >>> held = held_out_queries(np.arange(10_000), 0.1, seed=0)
        >>> round(float(held.mean()), 2)
        0.1
        >>> bool((held_out_queries(np.arange(10_000)[::-1], 0.1, seed=0) == held[::-1]).all())
        True
    """
    _check_share(share)
    key = _splitmix64(np.array([seed], dtype=np.int64).astype(np.uint64))
    hashed = _splitmix64(np.asarray(qids, dtype=np.int64).astype(np.uint64) + key)
    return (hashed >> np.uint64(11)).astype(np.float64) * 2.0**-53 < share


def _check_share(share: float) -> None:
    if (
        isinstance(share, bool)
        or not isinstance(share, (int, float))
        or not (math.isfinite(share) and 0 < share < 1)
    ):
        raise ValueError(
            "ultr.select_holdout is the share of the click log's queries held out for "
            f"ultr.select=clicks: a number in (0, 1) (e.g. 0.1), got {share!r}"
        )


@dataclass(frozen=True)
class QueryHoldout:
    """``ultr.select_holdout``'s split of a click log's queries: about ``share`` of them, by a
    hash of ``(qid, seed)`` (:func:`held_out_queries`; a share outside (0, 1) is refused here).
    Called on query ids: bool, True where held out. Picklable (data-loader workers)."""

    share: float
    seed: int

    def __post_init__(self) -> None:
        _check_share(self.share)

    def __call__(self, qids: np.ndarray) -> np.ndarray:
        return held_out_queries(qids, self.share, self.seed)

    def split(self, log: ClickLog) -> tuple[ClickLog, ClickLog]:
        """``(training, held out)``: the sessions of ``log``'s queries this split keeps, and
        those it holds out. A log of which it holds out no query, or every query, is refused
        with the fix."""
        queries = np.unique(log.qid)
        held = self(queries)
        if not held.any() or held.all():
            raise self.refused(log.source, every=bool(held.all()), queries=len(queries))
        in_held_out = np.isin(log.qid, queries[held])
        return log.rows(~in_held_out), log.rows(in_held_out)

    def refused(self, source: str, *, every: bool, queries: int | None = None) -> ValueError:
        """The error for the log ``source`` of which this split holds out no query, or
        (``every``) all of them; ``queries``: how many the log has, where counted."""
        which, fix = ("all", "lower it") if every else ("none", "raise it, or log more queries")
        counted = f"{queries} queries" if queries is not None else "queries"
        return ValueError(
            f"{source}: ultr.select_holdout={self.share} holds out {which} of the log's "
            f"{counted} (seed {self.seed}); ultr.select=clicks needs held-out queries and "
            f"training queries: {fix}"
        )


class HeldOutSessions(Dataset):
    """The validation click batches (module docstring), all lists padded to the ``K`` shown
    slots; a batch is a list of row positions (:meth:`__getitems__`)."""

    def __init__(self, columns: dict[str, torch.Tensor]) -> None:
        self.columns = columns
        self.lengths = columns["mask"].sum(dim=1).numpy()

    @classmethod
    def simulate(
        cls,
        split,
        shown_rows: Sequence[np.ndarray],
        click_model: ClickModel,
        sessions: int,
        seed: int,
    ) -> HeldOutSessions:
        """``sessions`` sessions of ``click_model`` on ``shown_rows`` (rows of the validation
        ``split``, top first, one list per served query in the split's order), drawn from
        ``(seed, VALIDATION_STREAM)``."""
        if isinstance(sessions, bool) or not isinstance(sessions, int) or sessions < 1:
            raise ValueError(f"ultr.select_sessions must be an integer >= 1, got {sessions!r}")
        lists = shown_list_tensors(split, shown_rows, "validation")
        batch = lists.batch(np.arange(len(shown_rows)))
        labels, mask = batch.pop("labels"), batch["mask"]
        generator = torch.Generator().manual_seed(
            int(np.random.SeedSequence([seed, VALIDATION_STREAM]).generate_state(1)[0])
        )
        clicks = [click_model.simulate(labels, mask, generator) for _ in range(sessions)]
        slots = torch.arange(mask.shape[1]).expand(mask.shape)
        return cls(
            {
                **batch,
                "positions": slots.masked_fill(~mask, -1),
                "propensities": click_model.propensities(labels, mask).float(),
                "clicks": torch.stack(clicks, dim=1).float(),
            }
        )

    @classmethod
    def logged(cls, log: ClickLog, features: np.ndarray) -> HeldOutSessions:
        """Every session of ``log`` (the held-out part of a click log: :meth:`QueryHoldout.split`)
        as a row of its own, S = 1; ``features`` float32 [N, F]: its rows' features as this run
        normalises them. Without a ``propensity`` column the batches have no
        ``propensities``."""
        offsets = log.offsets
        lists = SplitTensors(
            torch.from_numpy(features),
            torch.from_numpy(log.click.astype(np.float32)),
            np.arange(len(log.click)),
            offsets,
            log.qid[offsets[:-1]],
        )
        batch = lists.batch(np.arange(len(offsets) - 1))
        clicks, mask = batch.pop("labels"), batch["mask"]
        rows = batch["doc_index"].clamp(min=0)
        columns = {
            **batch,
            "positions": torch.from_numpy(log.position)[rows].masked_fill(~mask, -1),
            "clicks": (clicks * mask).unsqueeze(1),
        }
        if log.propensity is not None:
            columns["propensities"] = torch.from_numpy(log.propensity)[rows].masked_fill(~mask, 1.0)
        return cls(columns)

    @property
    def sessions(self) -> int:
        return int(self.columns["clicks"].shape[1])

    def __len__(self) -> int:
        return len(self.lengths)

    def loader(self, batch_size: int, trainer) -> DataLoader:
        """The validation click batches of ``batch_size`` rows, each row served by one process
        under ``trainer``'s DDP (as the validation split's queries are; None: one process)."""
        rank, world_size = (trainer.global_rank, trainer.world_size) if trainer else (0, 1)
        sampler = ShardedQueryBatchSampler(
            self.lengths, batch_size, rank=rank, world_size=world_size, shuffle=False
        )
        # __getitems__ builds the batch dict; torch types collate_fn for a list of samples
        return DataLoader(self, batch_sampler=sampler, collate_fn=self.collate_fn)  # type: ignore[arg-type]

    def __getitems__(self, keys: list) -> dict[str, torch.Tensor]:
        index = torch.as_tensor(keys, dtype=torch.int64)
        return {name: column[index] for name, column in self.columns.items()}

    @staticmethod
    def collate_fn(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return batch  # __getitems__ built the whole batch
