"""differank's ranking objectives: plain torch loss functions and modules (imports only torch)."""

from losses.pairs import pair_differences, preference_mask, sample_pairs, valid_queries
from losses.reduction import reduce_queries

__all__ = [
    "pair_differences",
    "preference_mask",
    "reduce_queries",
    "sample_pairs",
    "valid_queries",
]
