"""Every loss of ``differank.losses`` as one :class:`LossCase`: what the shared contract suite
(tests/losses/test_loss_contract.py) needs to run it. Adding a loss to the suite = one entry in
``CASES``.

An entry names the loss function and its module class, the hyperparameters both take, a batch
builder, the float64 oracle (tests/oracles.py) and tolerances. What a loss legitimately cannot
satisfy is written in ``cannot`` (check -> reason): the suite then expects that check to FAIL
(strict xfail), so a stale reason is caught as soon as the loss starts passing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import nn

from differank.losses import (
    ApproxMetricLoss,
    ApproxNDCGLoss,
    ConeLoss,
    ConvexLoss,
    DominationLoss,
    LambdaLoss,
    ListMLELoss,
    ListNetLoss,
    MSELoss,
    NeuralNDCGLoss,
    OrdinalLoss,
    Poly1SoftmaxLoss,
    RankNetLoss,
    SigmoidBCELoss,
    SoftmaxLoss,
    StructuredHingeLoss,
    approx_metric_loss,
    approx_ndcg_loss,
    cone_loss,
    convex_loss,
    domination_loss,
    label_margins,
    lambda_loss,
    listmle_loss,
    listnet_loss,
    mse_loss,
    neural_ndcg_loss,
    ordinal_loss,
    poly1_softmax_loss,
    ranknet_loss,
    sigmoid_bce_loss,
    softmax_loss,
    structured_hinge_loss,
)
from differank.losses.distill import DistillLoss, distill_loss
from differank.losses.lambdaloss import WEIGHTINGS
from tests import oracles, oracles_distill, oracles_standard

Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor]

# The checks of tests/losses/test_loss_contract.py, the keys of ``cannot`` and ``slow``.
CHECKS = (
    "oracle",  # value and gradient vs the float64 oracle, per query
    "nan_padding",  # NaN in padded slots changes nothing, padding gradient 0
    "padding_width",  # extra padded columns change nothing
    "permutation",  # reordering the documents of a query changes nothing
    "reduction",  # none/sum/mean agree; invalid queries are 0 and out of the mean
    "label_dtypes",  # int and bool labels equal float labels
    "nonfinite_label",  # a non-finite label drops its query
    "nonfinite_score",  # a non-finite score makes its query NaN
    "half",  # float16/bfloat16 computed in float32, gradient in the input dtype
    "empty",  # B = 0 or L = 0 give a graph-connected 0
    "unpadded",  # lists without padding (mask all true): oracle, invalid and non-finite queries
    "module",  # the module equals the function
    "compile",  # torch.compile(fullgraph=True, backend="aot_eager") equals eager
    "host_reads",  # the static path runs on the meta device (no host read of a value)
)


def ranking_batch(
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    *,
    feature_dim: int | None = None,
    levels: int = 3,
    max_docs: int = 5,
    length: int = 7,
) -> Batch:
    """A padded batch of 5 queries, deterministic given ``seed``; NaN in every padded slot.

    Query 0 has ``max_docs`` documents and query 1 one fewer (labels in ``0..levels-1`` with
    ties), query 2 is a short list of 2, query 3 has 3 documents of one label (no pair), query 4
    a single document and query 5 none (no pair either). Padding is scattered over each row.
    Values are scores [B, L], or features [B, L, F] with ``feature_dim=F`` (ConeRank).
    """
    g = torch.Generator().manual_seed(seed)
    sizes = torch.tensor([max_docs, max_docs - 1, 2, 3, 1, 0])
    batch = len(sizes)
    mask = torch.arange(length) < sizes.unsqueeze(1)
    labels = torch.randint(0, levels, (batch, length), generator=g)
    labels[:3, 0], labels[:3, 1] = levels - 1, 0  # queries 0-2 surely have a pair
    labels[3] = 1
    shape = (batch, length) if feature_dim is None else (batch, length, feature_dim)
    values = 1.5 * torch.randn(shape, generator=g, dtype=dtype)
    order = torch.rand(batch, length, generator=g).argsort(dim=1)  # scatter the padding
    mask, labels = mask.gather(1, order), labels.gather(1, order).to(dtype)
    index = order if feature_dim is None else order.unsqueeze(-1).expand(shape)
    values = values.gather(1, index)
    real = mask if feature_dim is None else mask.unsqueeze(-1)
    return values.masked_fill(~real, float("nan")), labels.masked_fill(~mask, float("nan")), mask


def pair_queries(labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B] bool: a query with two distinct real labels has a preference pair."""
    return torch.tensor([torch.unique(labels[b][mask[b]]).numel() > 1 for b in range(len(mask))])


@dataclass(frozen=True)
class LossCase:
    """One loss as the contract suite runs it.

    ``function(values, labels, mask, *call_args, reduction=..., **options)`` and
    ``module(reduction=..., **options)(values, labels, mask, *call_args)`` must compute the
    same thing; ``oracle(values, labels, mask, *call_args)`` gives the per-query loss [B] in
    float64 from the equations, on values whose padding is 0 (autograd through it is the oracle
    gradient, w.r.t. the values and the floating ``call_args``).
    """

    name: str
    function: Callable[..., torch.Tensor]
    module: type[nn.Module]
    oracle: Callable[..., torch.Tensor]
    options: Mapping[str, Any] = field(default_factory=dict)
    # positional inputs after the mask (ConeRank's basis [F, K])
    call_args: tuple[torch.Tensor, ...] = ()
    # None: scalar scores [B, L]; F: feature vectors [B, L, F] (ConeRank)
    feature_dim: int | None = None
    # builds (values, labels, mask) for (seed, dtype); see ranking_batch
    batch: Callable[..., Batch] = ranking_batch
    rtol: float = 1e-9
    atol: float = 1e-12
    # draws random numbers from the global RNG: every call (loss, module, oracle) runs under
    # torch.manual_seed(0), so eager, compiled and oracle see the same draws
    stochastic: bool = False
    # check -> why this loss cannot satisfy it (the suite expects the check to fail)
    cannot: Mapping[str, str] = field(default_factory=dict)
    # per-document inputs after the mask, built from the batch (a distillation teacher's
    # scores): (values, labels, mask) -> tuple of [B, L] tensors; they follow the documents
    # through every check (permutation, padding, dtypes)
    document_args: Callable[..., tuple[torch.Tensor, ...]] | None = None
    # check -> why it is too slow for the default suite (marked @pytest.mark.slow)
    slow: Mapping[str, str] = field(default_factory=dict)
    # each numeric option -> values the loss must refuse by name besides NaN and +-inf
    # (tests/losses/test_loss_options.py); one entry per loss function lists them
    refuses: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    # how far the half-precision check scales the scores: large enough that fp16 pair sums would
    # overflow, small enough that the loss's own gradient is representable in fp16
    half_scale: float = 1e4
    # (labels, mask) -> [B] bool: the queries the loss counts (its mean's denominator; the
    # others get 0): a preference pair, or for distillation any real document
    counted: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = pair_queries

    def make_batch(self, seed: int = 0, dtype: torch.dtype = torch.float64) -> Batch:
        return self.batch(seed, dtype, feature_dim=self.feature_dim)

    def seeded(self) -> contextlib.AbstractContextManager:
        """The RNG state every call runs under (nothing for deterministic losses)."""
        if not self.stochastic:
            return contextlib.nullcontext()
        stack = contextlib.ExitStack()
        stack.enter_context(torch.random.fork_rng(devices=[]))
        torch.manual_seed(0)
        return stack

    def inputs(self, values, labels, mask, call_args=None) -> tuple[torch.Tensor, ...]:
        """What follows the mask in a call: the document arguments, then the call arguments
        (``call_args`` replaces the entry's)."""
        call_args = self.call_args if call_args is None else call_args
        documents = () if self.document_args is None else self.document_args(values, labels, mask)
        return (*documents, *call_args)

    def loss(self, values, labels, mask, reduction="none", call_args=None) -> torch.Tensor:
        """The function; ``call_args`` replaces the entry's (e.g. a basis that requires grad)."""
        call_args = self.inputs(values, labels, mask, call_args)
        with self.seeded():
            return self.function(values, labels, mask, *call_args, reduction=reduction,
                                 **self.options)  # fmt: skip

    def make_module(self, reduction: str = "mean") -> nn.Module:
        return self.module(reduction=reduction, **self.options)

    def run_module(self, module: Callable, values, labels, mask, call_args=None) -> torch.Tensor:
        call_args = self.inputs(values, labels, mask, call_args)
        with self.seeded():
            return module(values, labels, mask, *call_args)

    def expected(self, values, labels, mask, call_args=None) -> torch.Tensor:
        call_args = self.inputs(values, labels, mask, call_args)
        with self.seeded():
            return self.oracle(values, labels, mask, *call_args)


# ---- fixed hyperparameters the entries share ----

CONE_BASIS = torch.randn(4, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
CONE_TIGHT = {"max_iter": 20000, "tol": 1e-13}  # fold-in to convergence for the oracle
LAYER_MARGINS = [[0.0, 0.0, 0.0], [0.5, 0.0, 0.0], [1.0, 0.25, 0.0]]  # exact in float32
CONVEX_SAMPLER = {"num_samples": 20, "walk_length": 4, "delta": "ndcg"}
ASSIGNMENT_ON_HOST = (
    'solver="assignment" solves one assignment per query on the host (the static path is '
    'solver="dp")'
)
LAMBDA_VARIANT = "a weighting of lambda_loss, whose ndcgLoss2++ compiles in the default suite"
LISTMLE_TIES_BY_INDEX = (
    'ties="index" orders tied labels by their slot, so permuting tied documents changes the '
    'Plackett-Luce order it scores (ties="random", the default, averages over tie orders)'
)
# eps > 0: lambda_loss takes its log (eps=0 was "math domain error")
LAMBDA_REFUSES = {"k": [0], "sigma": [0.0], "mu": [-1.0], "eps": [0.0, -1e-10]}
SAMPLER_WALKS_SLOTS = (
    "the sampler walks over slot positions: other slots (a permutation, extra padded columns) "
    "draw other orders from the same seed, so the estimate moves (it is exact only once every "
    "order is drawn)"
)


def teacher_of(values, labels, mask) -> tuple[torch.Tensor]:
    """A distillation teacher's scores of the batch's documents: a fixed function of each
    document's value (detached; computed in float64, kept in the loss's compute dtype so half
    and float32 inputs see the same teacher), so it follows the documents wherever they move."""
    dtype = torch.float32 if values.dtype in (torch.float16, torch.bfloat16) else values.dtype
    return ((2.0 * torch.cos(3.0 * values.detach().double()) + 0.5).to(dtype),)


DISTILL_LABEL_LOSS = ListNetLoss(reduction="none")
DISTILL_SAMPLES_SLOTS = (
    "the Gumbel noise is drawn per slot: moved documents or extra padded columns get other "
    "draws from the same seed, so the sampled orders (and the estimate) change"
)


def _distill_case(name: str, refuses=None, **options) -> LossCase:
    mixes = options.get("alpha", 0.0) > 0
    stochastic = options.get("form") == "rankdistil"
    label = {"label_loss": DISTILL_LABEL_LOSS} if mixes else {}
    oracle_label = {"label_oracle": oracles_distill.LABEL_ORACLE} if mixes else {}
    return LossCase(
        name,
        distill_loss,
        DistillLoss,
        partial(oracles_distill.distill_oracle, **options, **oracle_label),
        options={**options, **label},
        document_args=teacher_of,
        stochastic=stochastic,
        cannot=(
            {"permutation": DISTILL_SAMPLES_SLOTS, "padding_width": DISTILL_SAMPLES_SLOTS}
            if stochastic
            else {}
        ),
        # the regression gradient 2(s - t)/n leaves fp16's range at scores of 3e4, as MSE's
        half_scale=1e3,
        refuses=refuses or {},
        counted=partial(oracles_distill.distill_counted, alpha=options.get("alpha", 0.0)),
    )


def _domination_oracle(margins: Callable | None = None, flat: bool = False):
    """Thesis eqs. 5-6 per query; ``margins(labels)`` gives the pairwise Δ [n, n]."""

    def query(scores, labels):
        labels = (labels > 0).to(labels.dtype) if flat else labels
        return oracles.domination_query_oracle(
            scores, labels, None if margins is None else margins(labels)
        )

    return oracles.per_query_oracle(query)


def _label_margin_pairs(labels, scale=0.5, offset=0.25):
    margin = label_margins(labels, scale, offset)
    return margin.unsqueeze(-1) - margin.unsqueeze(-2)


def _layer_margin_pairs(labels):
    matrix = torch.tensor(LAYER_MARGINS, dtype=torch.float64)
    level = labels.long()
    return matrix[level.unsqueeze(-1), level.unsqueeze(-2)]


CASES: dict[str, LossCase] = {
    case.name: case
    for case in [
        LossCase(
            "ranknet", ranknet_loss, RankNetLoss, oracles.per_query_oracle(oracles.ranknet_oracle)
        ),
        LossCase(
            "listnet", listnet_loss, ListNetLoss, oracles.per_query_oracle(oracles.listnet_oracle)
        ),
        LossCase(
            "domination",
            domination_loss,
            DominationLoss,
            _domination_oracle(),
            refuses={"margin_scale": [], "margin_offset": []},
        ),
        LossCase(
            "domination_flat",
            domination_loss,
            DominationLoss,
            _domination_oracle(flat=True),
            options={"flat": True},
            slow={"compile": "a variant of domination, which compiles in the default suite"},
        ),
        LossCase(
            "domination_label_margins",
            domination_loss,
            DominationLoss,
            _domination_oracle(_label_margin_pairs),
            options={"margin_scale": 0.5, "margin_offset": 0.25},
            slow={"compile": "a variant of domination, which compiles in the default suite"},
        ),
        LossCase(
            "domination_layer_margins",
            domination_loss,
            DominationLoss,
            _domination_oracle(_layer_margin_pairs),
            options={"layer_margins": LAYER_MARGINS},
            slow={"compile": "a variant of domination, which compiles in the default suite"},
        ),
        LossCase(
            "hinge",
            structured_hinge_loss,
            StructuredHingeLoss,
            oracles.per_query_oracle(partial(oracles.hinge_query_oracle, k=3)),
            options={"k": 3},
            refuses={"k": [0, True], "num_levels": [0]},
        ),
        LossCase(
            "hinge_assignment",
            structured_hinge_loss,
            StructuredHingeLoss,
            oracles.per_query_oracle(partial(oracles.hinge_query_oracle, k=3)),
            options={"k": 3, "solver": "assignment"},
            cannot={
                "compile": ASSIGNMENT_ON_HOST,
                "host_reads": ASSIGNMENT_ON_HOST,
            },
        ),
        LossCase(
            "convex",
            convex_loss,
            ConvexLoss,
            oracles.convex_sampled_oracle(**CONVEX_SAMPLER),
            options=CONVEX_SAMPLER,
            stochastic=True,
            cannot={"permutation": SAMPLER_WALKS_SLOTS, "padding_width": SAMPLER_WALKS_SLOTS},
            slow={"compile": "the sampler's graph takes ~8 s to compile on 2 cores"},
            refuses={
                "num_samples": [0],
                "walk_length": [0],
                "num_levels": [0],
                "num_chains": [0],
                "ndcg_k": [0],
                "restart_skew": [],
            },
        ),
        LossCase(
            "convex_pairs",
            convex_loss,
            ConvexLoss,
            oracles.per_query_oracle(oracles.convex_pair_space_oracle),
            options={"delta": "auc", "space": "pairs"},
            slow={"unpadded": "the pair-space oracle takes ~18 s on the full lists"},
        ),
        LossCase(
            "cone",
            cone_loss,
            ConeLoss,
            oracles.per_query_oracle(oracles.cone_query_loss_oracle),
            options={**CONE_TIGHT, "max_pairs_per_query": None},  # every pair, as the oracle
            call_args=(CONE_BASIS,),
            feature_dim=4,
            rtol=1e-6,
            atol=1e-9,
            refuses={
                "alpha": [-1.0],
                "rho": [0.0],
                "max_pairs_per_query": [0],
                "static_iterations": [0, 1.5],
                "max_iter": [0],
                "tol": [-1e-9],
            },
        ),
        LossCase(
            "cone_orthant",
            cone_loss,
            ConeLoss,
            oracles.per_query_oracle(partial(oracles.cone_query_loss_oracle, constraint="cone")),
            options={**CONE_TIGHT, "max_pairs_per_query": None, "constraint": "cone"},
            call_args=(CONE_BASIS,),
            feature_dim=4,
            rtol=1e-6,
            atol=1e-9,
            slow={"compile": "a variant of cone, which compiles in the default suite"},
        ),
        *(
            LossCase(
                f"lambdaloss_{weighting}",
                lambda_loss,
                LambdaLoss,
                partial(oracles_standard.lambda_loss_oracle, weighting=weighting),
                options={"weighting": weighting},
                slow={} if weighting == "ndcgLoss2++" else {"compile": LAMBDA_VARIANT},
                refuses=LAMBDA_REFUSES if weighting == "ndcgLoss2++" else {},
            )
            for weighting in WEIGHTINGS
        ),
        LossCase(
            "approxndcg",
            approx_ndcg_loss,
            ApproxNDCGLoss,
            oracles_standard.approx_ndcg_oracle,
            refuses={"alpha": [0.0], "eps": [-1e-3]},
        ),
        LossCase(
            "neuralndcg",
            neural_ndcg_loss,
            NeuralNDCGLoss,
            oracles_standard.neural_ndcg_oracle,
            rtol=1e-6,
            refuses={
                "temperature": [0.0],
                "k": [0],
                "n_samples": [0],
                "beta": [-0.1],
                "sinkhorn_tolerance": [-1e-6],
                "sinkhorn_iterations": [0],
            },
        ),
        LossCase(
            "listmle",
            listmle_loss,
            ListMLELoss,
            partial(oracles_standard.listmle_oracle, ties="index"),
            options={"ties": "index"},
            cannot={"permutation": LISTMLE_TIES_BY_INDEX},
            refuses={"eps": [-1.0]},
        ),
        _distill_case(
            "distill_listwise",
            refuses={
                "alpha": [-0.1, 1.5],
                "temperature": [0.0],
                "num_samples": [0, 2.0],
                "top_k": [0],
            },  # fmt: skip
            form="listwise",
            alpha=0.3,
            temperature=2.0,
        ),
        _distill_case("distill_regression", form="regression"),
        _distill_case(
            "distill_rankdistil",
            form="rankdistil",
            alpha=0.5,
            temperature=0.5,
            top_k=3,
            num_samples=4,
        ),
        LossCase("softmax", softmax_loss, SoftmaxLoss, oracles_standard.softmax_oracle),
        LossCase(
            "poly1",
            poly1_softmax_loss,
            Poly1SoftmaxLoss,
            oracles_standard.poly1_softmax_oracle,
            refuses={"epsilon": []},
        ),
        LossCase(
            "bce",
            sigmoid_bce_loss,
            SigmoidBCELoss,
            oracles_standard.sigmoid_bce_oracle,
            refuses={"max_label": [0.0]},
        ),
        # the squared error's gradient 2(s - l) leaves fp16's range (65504) at scores of 3e4
        LossCase("mse", mse_loss, MSELoss, oracles_standard.mse_oracle, half_scale=1e3),
        LossCase(
            "ordinal",
            ordinal_loss,
            OrdinalLoss,
            partial(oracles_standard.ordinal_oracle, n=2),
            options={"n": 2},
            refuses={"n": [0]},
        ),
        LossCase(
            "ordinal_thresholds",
            ordinal_loss,
            OrdinalLoss,
            partial(oracles_standard.ordinal_oracle, n=3, thresholds=(-0.5, 0.25, 2.0)),
            options={"n": 3, "thresholds": (-0.5, 0.25, 2.0)},
            slow={"compile": "a variant of ordinal, which compiles in the default suite"},
        ),
        *(
            LossCase(
                f"approx_{metric}",
                approx_metric_loss,
                ApproxMetricLoss,
                partial(oracles_standard.approx_metric_oracle, metric=metric),
                options={"metric": metric},
                slow={} if metric == "ndcg" else {"compile": "a variant of approx_ndcg"},
                refuses={"k": [0, 2.0], "temperature": [0.0, -1.0]} if metric == "ndcg" else {},
            )
            for metric in ("ndcg", "map", "mrr", "precision")
        ),
    ]
}
