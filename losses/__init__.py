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
from differank.losses.algorithms.soft_sorting import (
    gumbel_perturbed_scores,
    neural_sort,
    sinkhorn,
    soft_rank,
    soft_sort,
)
from differank.losses.approx_metrics import ApproxMetricLoss, approx_metric_loss
from differank.losses.approx_ndcg import ApproxNDCGLoss, approx_ndcg_loss
from differank.losses.cone import ConeLoss, ConeOptions, cone_fold_in, cone_loss
from differank.losses.convex import ConvexLoss, ConvexOptions, convex_loss
from differank.losses.distill import DistillLoss, distill_loss
from differank.losses.domination import DominationLoss, domination_loss, label_margins
from differank.losses.hinge import StructuredHingeLoss, structured_hinge_loss
from differank.losses.lambdaloss import LambdaLoss, lambda_loss
from differank.losses.listmle import ListMLELoss, listmle_loss
from differank.losses.listnet import ListNetLoss, listnet_loss
from differank.losses.neural_ndcg import NeuralNDCGLoss, neural_ndcg_loss
from differank.losses.pointwise import (
    MSELoss,
    OrdinalLoss,
    SigmoidBCELoss,
    mse_loss,
    ordinal_loss,
    sigmoid_bce_loss,
)
from differank.losses.ranknet import RankNetLoss, ranknet_loss
from differank.losses.reduction import reduce_queries
from differank.losses.softmax import (
    Poly1SoftmaxLoss,
    SoftmaxLoss,
    poly1_softmax_loss,
    softmax_loss,
)

__all__ = [
    "ApproxMetricLoss",
    "ApproxNDCGLoss",
    "ConeLoss",
    "ConeOptions",
    "ConvexLoss",
    "ConvexOptions",
    "DistillLoss",
    "DominationLoss",
    "LambdaLoss",
    "ListMLELoss",
    "ListNetLoss",
    "MSELoss",
    "NeuralNDCGLoss",
    "OrdinalLoss",
    "Poly1SoftmaxLoss",
    "RankNetLoss",
    "SigmoidBCELoss",
    "SoftmaxLoss",
    "StructuredHingeLoss",
    "approx_metric_loss",
    "approx_ndcg_loss",
    "cone_fold_in",
    "cone_loss",
    "convex_loss",
    "distill_loss",
    "domination_loss",
    "gumbel_perturbed_scores",
    "label_margins",
    "lambda_loss",
    "listmle_loss",
    "listnet_loss",
    "mse_loss",
    "neural_ndcg_loss",
    "neural_sort",
    "ordinal_loss",
    "pair_differences",
    "poly1_softmax_loss",
    "preference_mask",
    "ranknet_loss",
    "reduce_queries",
    "sample_pairs",
    "sigmoid_bce_loss",
    "sinkhorn",
    "soft_rank",
    "soft_sort",
    "softmax_loss",
    "structured_hinge_loss",
    "valid_queries",
]
