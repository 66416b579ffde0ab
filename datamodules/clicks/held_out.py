"""Held-out click sessions on the validation queries: what ``ultr.select=clicks`` chooses the
epoch from (docs/clicks.md#choosing-a-model-without-labels).

The production ranker shows its top k of every validation query, and the run's click model
draws ``sessions`` sessions on each list, from a generator of its own (``seed`` and a stream
number no training draw uses): the same simulated users as the training sessions, never the
same sessions. The simulator reads the true labels once, here, as the users of a real log would
"read" relevance; what is kept is only what a click log records (features, shown positions,
clicks, the logging propensities). No validation batch carries ``labels``.

THE VALIDATION CLICK BATCH (what :class:`HeldOutSessions` yields, one row per validation
query): ``features`` [B, K, F], ``mask`` [B, K], ``qid`` [B], ``doc_index`` [B, K] (the
validation split's row, -1 at padding), ``positions`` [B, K] (0-based shown position, -1 at
padding), ``propensities`` [B, K] (the click model's P(examined), 1 at padding) and ``clicks``
[B, S, K] (S sessions per list, 0 at padding).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from differank.datamodules.clicks.base import ClickModel
from differank.datamodules.clicks.shown_lists import shown_list_tensors

# The validation sessions' stream of the run's seed: training batches use (seed, batch number)
# and the production ranker (seed, 35) and (seed, 36), so these never share a draw with them.
VALIDATION_STREAM = 43


class HeldOutSessions(Dataset):
    """The validation click batches (module docstring), all lists padded to the ``K`` shown
    slots; a batch is a list of query positions (:meth:`__getitems__`)."""

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

    @property
    def sessions(self) -> int:
        return int(self.columns["clicks"].shape[1])

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitems__(self, keys: list) -> dict[str, torch.Tensor]:
        index = torch.as_tensor(keys, dtype=torch.int64)
        return {name: column[index] for name, column in self.columns.items()}

    @staticmethod
    def collate_fn(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return batch  # __getitems__ built the whole batch
