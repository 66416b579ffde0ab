"""Scores computed in pieces (batches, DDP shards), put back in their split's source-row order,
as the prediction files list them: torch only, so scoring files with a checkpoint
(``task=predict files=[...]``) needs no Lightning.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def scores_in_row_order(
    rows: Sequence[torch.Tensor], scores: Sequence[torch.Tensor], num_rows: int
) -> torch.Tensor:
    """Scores given in pieces with the source row of each, as one float64 [num_rows] vector in
    row order. Raises if a row got no score or two, so a prediction file never misaligns."""
    rows_ = torch.cat(list(rows)) if rows else torch.empty(0, dtype=torch.long)
    values = torch.cat(list(scores)) if scores else torch.empty(0)
    hits = torch.bincount(rows_, minlength=num_rows) if rows_.numel() else torch.zeros(num_rows)
    if hits.numel() != num_rows or bool((hits != 1).any()):
        missing, doubled = int((hits == 0).sum()), int((hits > 1).sum())
        raise RuntimeError(
            f"scores cover the {num_rows} rows badly: {missing} rows without a score, "
            f"{doubled} with several (was the loader sharded or capped?)"
        )
    by_row = torch.empty(num_rows, dtype=torch.float64)
    by_row[rows_] = values.to(torch.float64)
    return by_row
