"""A split held as flat tensors on the training device, and batches gathered from it there.

Public API::

    SplitTensors(features, labels, rows, offsets, query_ids, weights=None)
    SplitTensors.from_queries(features, labels, query_rows, query_ids, weights=None)
      .lengths                 int64 numpy [Q]: documents of each query (host metadata)
      .weights                 float32 [Q] query weights, or None (the default: unweighted)
      .nbytes                  bytes the tensors hold
      .to(device)              one copy (through a pinned staging buffer onto a GPU)
      .batch(queries, *, max_list=None, generator=None) -> dict      # the batch contract
    padded_length(longest, cap) -> int      # the static list lengths L (rule below)
    fits_on_device(nbytes, device) -> bool  # whether a split is copied onto ``device``
    QueryBatchDataset(tensors, max_list=None)   # a Dataset of whole batches for DataLoader

Layout: ``features`` [N, F] and ``labels`` [N] are the split's rows in file order (on CPU a
memory-mapped cache entry is used as is, no copy); query ``q`` is the rows
``rows[offsets[q]:offsets[q + 1]]`` (file order), id ``query_ids[q]``. The constructor checks
this layout once (rows within the N rows, offsets increasing from 0 to ``len(rows)``: every query
has a document); ``batch`` refuses an empty or out-of-range list of query positions
(``ValueError`` on every path: the builder never reads outside the split). A batch of queries is
formed by ONE builder, :meth:`SplitTensors.batch`, the same torch ops on every device: the
documents of each list are chosen (all of them, or the ``max_list`` draw below), then ONE index
gather forms the padded ``[B, L, F]`` on the tensors' device: no Python loop over queries, and
nothing is read back to the host (the list lengths the padding needs are host metadata,
``lengths``). When whole lists are served and the split's rows are in query order (the usual
file), each list is copied as one block of rows (one memcpy per list instead of a per-row
gather). Padding slots gather some real row and are then overwritten with zeros, row by row,
from indices computed on the host (a broadcast ``masked_fill`` over the batch costs as much as
the gather).

Static lengths: L is the smallest of 8, 12, 16, 24, 32, 48, 64, 96, ... (``2^k`` and
``3·2^(k-1)``) that holds the batch's longest list, capped at ``cap`` (the split's longest
list, after any ``max_list``). So a batch is padded by less than 1.5x beyond 8 documents, and a
split has at most ``2·log2(cap / 8) + 2`` distinct shapes (16 for MSLR-WEB30K's 1,251): compiled
graphs are reused across batches instead of recompiled per length.

``max_list`` (training) draws each longer query's documents by the rule of
:func:`differank.datamodules.query_batches.subsample_query`, vectorised: every document gets a
uniform key, documents above the query's lowest label get +2 (kept first), and when they do not
leave a slot one random lowest-label document gets +3; the ``max_list`` largest keys are kept,
in file order. The draws come from ``generator`` (seeded per batch by the loaders).

Query weights (``sample_weight``): ``weights`` is one float32 weight per query, finite and
>= 0 with at least one above 0, on the tensors' device (``to`` moves it). With weights, every
batch also holds ``"weights"`` [B], the weight of each of its queries (every batch row is a real
query, so no row has a padding weight); without (the default), batches are exactly as before,
with no ``"weights"`` key. The training module weighs each query's loss by it
(:class:`differank.rankers.training.module.RankingModule`). The two outside definitions a
caller converts from: XGBoost's ranking ``sample_weight`` is already one weight per query
group; LightGBM's ``weight`` is one per row, and LightGBM takes a query's weight as the mean of
its rows' weights (its objective scales each row's gradient by the row's own weight, which is
the same when the weights are constant within a query).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

_SHORTEST_PADDING = 8
_STAGING_BYTES = 64 * 2**20  # pinned host buffer a split passes through on its way to a GPU
_DEVICE_SHARE = 0.5  # a split goes onto a GPU when it takes at most this share of free memory


def padded_length(longest: int, cap: int) -> int:
    """The static L for a batch whose longest list is ``longest`` (see the module docstring).

    Example:
        >>> [padded_length(n, 1251) for n in (3, 9, 13, 100, 1000, 1251)]
        [8, 12, 16, 128, 1024, 1251]
    """
    if longest <= _SHORTEST_PADDING:
        return min(_SHORTEST_PADDING, cap)
    power = 2 ** math.ceil(math.log2(longest))
    three_quarters = 3 * power // 4
    return min(three_quarters if longest <= three_quarters else power, cap)


def fits_on_device(nbytes: int, device: torch.device) -> bool:
    """CPU: always (the tensors are the host arrays themselves). CUDA: when ``nbytes`` is at
    most half the device's free memory (the rest is the model's). Other devices: no (batches are
    streamed)."""
    if device.type == "cpu":
        return True
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return nbytes <= _DEVICE_SHARE * free
    return False


def _copy_to(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` on ``device``: one copy; onto a GPU through a pinned staging buffer, block by
    block, so a memory-mapped split is never duplicated in host memory."""
    if device.type != "cuda":
        return tensor.to(device)
    out = torch.empty(tensor.shape, dtype=tensor.dtype, device=device)
    row_bytes = max(tensor[:1].nbytes, 1)
    block = max(1, _STAGING_BYTES // row_bytes)
    staging = torch.empty((min(block, len(tensor)), *tensor.shape[1:]), dtype=tensor.dtype)
    staging = staging.pin_memory()
    for start in range(0, len(tensor), block):
        part = tensor[start : start + block]
        staging[: len(part)].copy_(part)
        out[start : start + len(part)].copy_(staging[: len(part)])
    return out


class SplitTensors:
    """One split as flat tensors (see the module docstring)."""

    def __init__(self, features, labels, rows, offsets, query_ids, weights=None):
        self.features = torch.as_tensor(features)
        self.labels = torch.as_tensor(labels)
        self.rows = torch.as_tensor(rows, dtype=torch.int64)
        self.offsets = torch.as_tensor(offsets, dtype=torch.int64)
        self.query_ids = torch.as_tensor(query_ids, dtype=torch.int64)
        self.weights = (
            None
            if weights is None
            else torch.as_tensor(weights, dtype=torch.float32, device=self.features.device)
        )
        _check_layout(self.features, self.labels, self.rows, self.offsets, self.query_ids)
        self._host_offsets = self.offsets.cpu().numpy()
        self._host_query_ids = self.query_ids.cpu().numpy()
        # host copy, like the ids: a batch's weights go to the device as one small copy
        self._host_weights = (
            None if weights is None else _checked_weights(self.weights, self._host_query_ids)
        )
        self.lengths = np.diff(self._host_offsets)
        self.device = self.features.device
        # Rows in file order, one query after another (the usual file): no row gather needed.
        self._rows_in_order = bool(
            self.features.is_contiguous()
            and len(self.rows) == len(self.labels)
            and torch.equal(self.rows, torch.arange(len(self.rows), device=self.rows.device))
        )
        self._host_rows = None if self._rows_in_order else self.rows.cpu().numpy()

    @classmethod
    def from_queries(
        cls, features, labels, query_rows: Sequence[np.ndarray], query_ids, weights=None
    ):
        """From one row array per query (the queries served, in order), and optionally one
        weight per query (in the same order)."""
        lengths = np.asarray([len(r) for r in query_rows], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        rows = np.concatenate(query_rows) if len(query_rows) else np.zeros(0, np.int64)
        return cls(features, labels, rows, offsets, np.asarray(query_ids), weights)

    def _tensors(self) -> list[torch.Tensor]:
        tensors = [self.features, self.labels, self.rows, self.offsets, self.query_ids]
        return tensors if self.weights is None else [*tensors, self.weights]

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self._tensors())

    def to(self, device) -> SplitTensors:
        device = torch.device(device)
        if device == self.device:
            return self
        return SplitTensors(*(_copy_to(t, device) for t in self._tensors()))

    def cap(self, max_list: int | None = None) -> int:
        """The longest list of the split (after ``max_list``): the largest L."""
        longest = int(self.lengths.max())
        return longest if max_list is None else min(longest, max_list)

    def batch(
        self,
        queries,
        *,
        max_list: int | None = None,
        generator: torch.Generator | None = None,
    ) -> dict[str, torch.Tensor]:
        """The batch contract for query positions ``queries`` (host ints), on ``self.device``:
        whole lists, or with ``max_list`` each longer list's draw (from ``generator``). An empty
        or out-of-range ``queries``, or a ``max_list`` below 1, is a ValueError."""
        queries = self._checked_queries(queries)
        if max_list is not None and max_list < 1:
            raise ValueError(f"max_list must be at least 1 (or None), got {max_list}")
        counts = self.lengths[queries]
        longest = int(counts.max())
        drawn = max_list if max_list is not None and longest > max_list else None
        real = counts if drawn is None else np.minimum(counts, drawn)
        width = padded_length(int(real.max()), self.cap(max_list))
        if drawn is not None:
            # width == max_list here: a list longer than max_list makes max_list the split's cap
            doc, mask = self._drawn_lists(queries, longest, drawn, generator)
            features = self.features.index_select(0, doc.reshape(-1))
        else:
            doc, mask, features = self._whole_lists(queries, counts, width)
        features = features.view(len(queries), width, -1)
        slots = _padding_slots(real, width)
        if len(slots):
            features.view(-1, features.shape[-1]).index_fill_(0, self._device(slots), 0.0)
        labels = self.labels.index_select(0, doc.reshape(-1)).view_as(doc)
        batch = {
            "features": features,
            "labels": labels.mul_(mask),
            "mask": mask,
            "qid": self._device(self._host_query_ids[queries]),
            "doc_index": doc.masked_fill(~mask, -1),
        }
        if self._host_weights is not None:
            batch["weights"] = self._device(self._host_weights[queries])
        return batch

    def _checked_queries(self, queries) -> np.ndarray:
        """``queries`` as int64 positions, each in [0, Q): numpy would wrap a negative one to
        another query and a batch without queries has no shape."""
        positions = np.asarray(queries)
        if positions.ndim != 1 or len(positions) == 0:
            raise ValueError(
                f"a batch needs a non-empty 1-D list of query positions, got shape "
                f"{positions.shape}"
            )
        if not np.issubdtype(positions.dtype, np.integer):
            raise ValueError(f"query positions must be integers, got dtype {positions.dtype}")
        outside = (positions < 0) | (positions >= len(self.lengths))
        if outside.any():
            raise ValueError(
                f"query position {int(positions[outside][0])} is outside this split's "
                f"{len(self.lengths)} queries (positions are 0 .. {len(self.lengths) - 1})"
            )
        return positions.astype(np.int64, copy=False)

    def _whole_lists(self, queries, counts, width):
        """Rows ``doc`` [B, width] (padding slots: some real row), ``mask`` and the gathered
        features of whole lists. The [B, L] index tensors follow from the host's offsets (a
        few numpy operations, one copy each), and the device does the one big gather."""
        starts = self._host_offsets[queries]
        mask = np.arange(width) < counts[:, None]
        slot = np.where(mask, starts[:, None] + np.arange(width), 0)
        doc = slot if self._rows_in_order else self._host_rows[slot]
        if self._rows_in_order and int(starts.max()) + width <= len(self.features):
            # Each list is one block of rows: copy blocks of width x F values (a memcpy each),
            # not width separate rows; the rows past a list's end are zeroed by ``batch``.
            blocks = self.features.view(-1).as_strided(
                (len(self.features) - width + 1, width * self.features.shape[1]),
                (self.features.shape[1], 1),
            )
            features = blocks.index_select(0, self._device(starts))
        else:
            features = self.features.index_select(0, self._device(doc.reshape(-1)))
        return self._device(doc), self._device(mask), features

    def _drawn_lists(self, queries, longest, max_list, generator):
        """Rows ``doc`` [B, max_list] (padding slots: some real row) and ``mask`` of the
        ``max_list`` draws, computed on the device (nothing read back)."""
        index = self._device(queries)
        starts = self.offsets[index]
        count = self.offsets[index + 1] - starts
        positions = self._draw(starts, count, longest, max_list, generator)
        mask = positions < count[:, None]
        slot = torch.where(mask, starts[:, None] + positions, 0)
        return (slot if self._rows_in_order else self.rows[slot]), mask

    def _device(self, array: np.ndarray) -> torch.Tensor:
        """A host index array on the tensors' device. Onto a GPU it goes through pinned memory:
        a copy from pageable memory may wait for the stream (the training step's kernels queued
        ahead of it), a pinned one is queued behind them, and PyTorch's pinned allocator keeps
        the buffer until the copy is done."""
        host = torch.from_numpy(np.ascontiguousarray(array))
        if self.device.type == "cuda":
            host = host.pin_memory()
        return host.to(self.device, non_blocking=True)

    def _draw(self, starts, count, longest, max_list, generator) -> torch.Tensor:
        """Positions [B, max_list] kept of each query (all of a short one, then padding
        positions), sorted: the ``max_list`` rule of the module docstring."""
        positions = torch.arange(longest, device=self.device).expand(len(starts), longest)
        valid = positions < count[:, None]
        slot = torch.where(valid, starts[:, None] + positions, 0)
        labels = self.labels[slot if self._rows_in_order else self.rows[slot]]
        lowest = labels.masked_fill(~valid, math.inf).amin(1, keepdim=True)
        low = valid & (labels == lowest)
        high = valid & ~low
        keys = torch.rand(
            labels.shape, generator=generator, device=self.device, dtype=torch.float32
        )
        priority = keys + 2.0 * high
        crowded = high.sum(1) > max_list - 1
        chosen_low = keys.masked_fill(~low, -1.0).argmax(1, keepdim=True)
        priority.scatter_add_(1, chosen_low, 3.0 * crowded[:, None].to(priority.dtype))
        priority.masked_fill_(~valid, -1.0)
        return priority.topk(max_list, dim=1).indices.sort(1).values


def _check_layout(features, labels, rows, offsets, query_ids) -> None:
    """The layout of the module docstring, checked once (every batch relies on it): features
    [N, F] and labels [N]; rows in [0, N); offsets 0 = o_0 < o_1 < ... < o_Q = len(rows) (every
    query has a document); one id per query. Each error names the tensor and what it holds."""
    if features.ndim != 2 or labels.shape != (features.shape[0],):
        raise ValueError(
            f"features must be [N, F] and labels [N]; got features {tuple(features.shape)}, "
            f"labels {tuple(labels.shape)}"
        )
    if rows.ndim != 1 or offsets.ndim != 1 or query_ids.ndim != 1:
        raise ValueError(
            f"rows, offsets and query_ids must be 1-D; got {rows.ndim}-D, {offsets.ndim}-D, "
            f"{query_ids.ndim}-D"
        )
    if len(rows) == 0 or len(offsets) != len(query_ids) + 1:
        raise ValueError(
            f"a split needs rows and Q + 1 offsets for Q queries; got {len(rows)} rows, "
            f"{len(offsets)} offsets, {len(query_ids)} queries"
        )
    low, high = (int(bound) for bound in torch.aminmax(rows))  # two values read back
    host_offsets = offsets.cpu()
    if low < 0 or high >= len(labels):
        bad = low if low < 0 else high
        raise ValueError(
            f"rows must index the {len(labels)} rows of features and labels (0 .. "
            f"{len(labels) - 1}); got row {bad}"
        )
    if int(host_offsets[0]) != 0 or int(host_offsets[-1]) != len(rows):
        raise ValueError(
            f"offsets must run from 0 to len(rows) = {len(rows)}; got {int(host_offsets[0])} "
            f".. {int(host_offsets[-1])}"
        )
    steps = host_offsets.diff()
    if (steps <= 0).any():
        q = int(torch.nonzero(steps <= 0)[0])
        raise ValueError(
            f"offsets must increase (every query has a document): query {q} has offsets "
            f"{int(host_offsets[q])} .. {int(host_offsets[q + 1])}"
        )


def _checked_weights(weights: torch.Tensor, query_ids: np.ndarray) -> np.ndarray:
    """``weights`` on the host once checked: one per query, finite and >= 0, not all 0 (a
    negative weight would turn a query's loss into a reward; all zero would train nothing).
    Each error names the first bad query position and value."""
    host, num_queries = weights.cpu().numpy(), len(query_ids)
    if host.shape != (num_queries,):
        raise ValueError(
            f"weights must be one per query, shape ({num_queries},); got {tuple(host.shape)}"
        )
    bad = ~np.isfinite(host) | (host < 0)
    if bad.any():
        q = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"query weights must be finite and >= 0; query {q} (id {query_ids[q]}) has "
            f"weight {host[q]}"
        )
    if not (host > 0).any():
        raise ValueError(f"every one of the {num_queries} query weights is 0: nothing would train")
    return host


def _padding_slots(real: np.ndarray, width: int) -> np.ndarray:
    """Flat indices (into ``[B * width]``) of the padding slots of lists of ``real`` documents,
    from the host's lengths: zeroing just these rows writes only the padding (a multiply with
    the mask would read and write the whole batch, and NaN x 0 is NaN)."""
    padding = width - real
    first = np.arange(len(real)) * width + real
    ends = np.cumsum(padding)
    within = np.arange(int(ends[-1]) if len(ends) else 0) - np.repeat(ends - padding, padding)
    return np.repeat(first, padding) + within


def _as_built(batch: dict) -> dict:
    """The DataLoader's collate function: batches come whole from the dataset."""
    return batch


class QueryBatchDataset(Dataset):
    """Queries of one split for a DataLoader with a batch sampler: ``__getitems__`` takes a
    batch of keys (query positions, or ``(position, draw_seed)`` pairs to draw ``max_list``
    subsamples; the first draw seed seeds the batch's generator) and returns the whole batch.
    A weighted split's batches carry its ``"weights"`` (the tensors' batch contract)."""

    collate_fn = staticmethod(_as_built)

    def __init__(self, tensors: SplitTensors, max_list: int | None = None):
        self.tensors = tensors
        self.max_list = max_list
        full = tensors.lengths
        self.lengths = full if max_list is None else np.minimum(full, max_list)
        self._generator: torch.Generator | None = None

    def __len__(self) -> int:
        return len(self.tensors.lengths)

    def __getitems__(self, keys: list) -> dict[str, torch.Tensor]:
        if keys and isinstance(keys[0], tuple):
            if self._generator is None:
                self._generator = torch.Generator(self.tensors.device)
            self._generator.manual_seed(int(keys[0][1]))
            queries = [key[0] for key in keys]
            return self.tensors.batch(queries, max_list=self.max_list, generator=self._generator)
        return self.tensors.batch(keys)

    def __getstate__(self) -> dict:  # a generator does not pickle (DataLoader workers)
        return {**self.__dict__, "_generator": None}
