"""One LETOR split as read: its rows in source order and their query grouping. Plain data (no
Lightning): the data module builds it, and so do the readers of standalone files
(``task=predict files=[...]``), which score without a data module.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from differank.datamodules.reader import LetorFile


@dataclass
class LetorSplit:
    """One split as read: rows in source order, and the query grouping.

    ``features`` float32 [N, F] (normalised; memory-mapped from the cache), ``labels`` float32
    [N], ``qids`` int64 [N]; query ``q`` has id ``query_ids[q]`` and rows ``query_rows[q]``
    (int64, file order). ``queries`` are the indices of the queries served by the loaders
    (all of them except for a training split with a drop policy). ``sources`` are the parsed
    files; :attr:`docids` decodes their doc ids on demand.
    """

    name: str
    files: list[Path]
    features: np.ndarray
    labels: np.ndarray
    qids: np.ndarray
    query_ids: np.ndarray
    query_rows: list[np.ndarray]
    queries: np.ndarray
    sources: list[LetorFile]

    @property
    def num_rows(self) -> int:
        return len(self.labels)

    @property
    def docids(self) -> np.ndarray:
        """Doc id of every row (str [N])."""
        return np.concatenate([source.docids for source in self.sources])
