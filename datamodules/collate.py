"""Pad a list of queries into the batch contract (docs/data.md#the-batch-contract).

Public API::

    collate_queries(items) -> dict[str, Tensor]

Each item is one query: a mapping with ``features`` [n, F], ``labels`` [n], ``qid`` (int) and
``doc_index`` [n] (row of each document in its split's source text), as tensors or arrays.
The batch holds ``features`` float32 [B, L, F] (padding 0), ``labels`` float32 [B, L]
(padding 0), ``mask`` bool [B, L] (True = real document), ``qid`` int64 [B] and ``doc_index``
int64 [B, L] (padding -1), with L the longest list in the batch (dynamic padding).

Example:
    >>> import torch
    >>> q1 = {"features": torch.ones(2, 3), "labels": torch.tensor([1.0, 0.0]), "qid": 7,
    ...       "doc_index": torch.tensor([0, 1])}
    >>> q2 = {"features": torch.ones(1, 3), "labels": torch.tensor([2.0]), "qid": 9,
    ...       "doc_index": torch.tensor([2])}
    >>> batch = collate_queries([q1, q2])
    >>> batch["features"].shape, batch["mask"].tolist(), batch["doc_index"].tolist()
    (torch.Size([2, 2, 3]), [[True, True], [True, False]], [[0, 1], [2, -1]])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch


def collate_queries(items: Sequence[Mapping]) -> dict[str, torch.Tensor]:
    """Stack queries of different lengths into one padded batch (see module docstring)."""
    if len(items) == 0:
        raise ValueError("collate_queries needs at least one query")
    features = [torch.as_tensor(item["features"], dtype=torch.float32) for item in items]
    labels = [torch.as_tensor(item["labels"], dtype=torch.float32) for item in items]
    doc_index = [torch.as_tensor(item["doc_index"], dtype=torch.int64) for item in items]
    n_features = features[0].shape[-1] if features[0].ndim == 2 else -1
    for i, (x, y, d) in enumerate(zip(features, labels, doc_index, strict=True)):
        if x.ndim != 2 or x.shape[1] != n_features:
            raise ValueError(f"query {i}: features must be [n, {n_features}], got {tuple(x.shape)}")
        if y.shape != (x.shape[0],) or d.shape != (x.shape[0],):
            raise ValueError(
                f"query {i}: labels {tuple(y.shape)} and doc_index {tuple(d.shape)} must be "
                f"[{x.shape[0]}] like its features"
            )
    batch_size, longest = len(items), max(x.shape[0] for x in features)
    out_features = torch.zeros(batch_size, longest, n_features, dtype=torch.float32)
    out_labels = torch.zeros(batch_size, longest, dtype=torch.float32)
    out_mask = torch.zeros(batch_size, longest, dtype=torch.bool)
    out_index = torch.full((batch_size, longest), -1, dtype=torch.int64)
    for b, (x, y, d) in enumerate(zip(features, labels, doc_index, strict=True)):
        n = x.shape[0]
        out_features[b, :n] = x
        out_labels[b, :n] = y
        out_mask[b, :n] = True
        out_index[b, :n] = d
    qid = torch.tensor([int(item["qid"]) for item in items], dtype=torch.int64)
    return {
        "features": out_features,
        "labels": out_labels,
        "mask": out_mask,
        "qid": qid,
        "doc_index": out_index,
    }
