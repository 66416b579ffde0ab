"""differank's ranking objectives: plain torch loss functions and modules (imports only torch).

Every loss takes ``(scores [B, L], labels [B, L], mask [B, L] = None)`` — ConeRank takes
``(features [B, L, F], labels, mask, basis [F, K])`` — then keyword-only hyperparameters and
``reduction="none" | "mean" | "sum"``. Every loss follows one input rule
(``differank.losses.inputs``): ``mask=None`` means every document is real, 0/1 masks are
accepted, one query may be given unbatched ([L]), empty batches and lists give a connected zero,
integer labels are accepted, a query with a non-finite label is dropped, a negative label at a
real document is an error (dropped where values are not read), a non-finite score makes its
query's loss NaN, half inputs are computed in float32, and compiled or on an accelerator no tensor
value is read on the host.
"""

from differank.losses.algorithms.pairs import (
    pair_differences,
    preference_mask,
    sample_pairs,
    valid_queries,
)
from differank.losses.cone import ConeLoss, ConeOptions, cone_fold_in, cone_loss
from differank.losses.convex import ConvexLoss, ConvexOptions, convex_loss
from differank.losses.domination import DominationLoss, domination_loss, label_margins
from differank.losses.hinge import StructuredHingeLoss, structured_hinge_loss
from differank.losses.listnet import ListNetLoss, listnet_loss
from differank.losses.ranknet import RankNetLoss, ranknet_loss
from differank.losses.reduction import reduce_queries

__all__ = [
    "ConeLoss",
    "ConeOptions",
    "ConvexLoss",
    "ConvexOptions",
    "DominationLoss",
    "ListNetLoss",
    "RankNetLoss",
    "StructuredHingeLoss",
    "cone_fold_in",
    "cone_loss",
    "convex_loss",
    "domination_loss",
    "label_margins",
    "listnet_loss",
    "pair_differences",
    "preference_mask",
    "ranknet_loss",
    "reduce_queries",
    "sample_pairs",
    "structured_hinge_loss",
    "valid_queries",
]
