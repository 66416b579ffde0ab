"""LETOR-4.0-exact ranking metrics, batched over padded queries
(docs/metrics.md#the-letor-script-rules).

``letor_metrics`` reproduces ``Eval-Score-4.0.pl`` (LETOR 4.0, Jun Xu, March 2009) per query:

* ranking: scores descending, **stable** (ties keep the document's position in the list, which is
  its file order); padded slots always go last, whatever their score;
* relevance for P@k and AP: label > 0; NDCG gain ``2^label - 1``;
* LETOR discount ``D(1) = D(2) = 1``, ``D(p) = 1/log2(p)`` for p >= 3 (not ``1/log2(1+p)``);
* NDCG@k = DCG@k / IDCG@k, and 0 when IDCG@k = 0 (queries without relevant documents count as 0);
* NDCG@k for k > n is 0 (the script's undef-as-0 quirk,
docs/metrics.md#ndcg-beyond-the-list-length);
* P@k = #relevant in the first min(k, n) / k; AP = (1/R) sum_{p relevant} (#rel in top p) / p;
* MeanNDCG = mean of NDCG@1..NDCG@n over all n positions of the query.

``convention`` names the rules of one evaluation tool (docs/metrics.md#conventions): ``"letor"``
(the default, above), ``"trec"`` (trec_eval: discount ``1/log2(1+p)``, NDCG@k = NDCG@n for
k > n), and two that differ from ``trec`` only for queries without a relevant document:
``"no_relevant_as_1"`` (allRank, LightGBM: their NDCG and AP are 1) and ``"no_relevant_dropped"``
(the DASALC paper: they are left out of the dataset means, :func:`counted_queries`).
``short_list="ndcg_at_n"`` keeps the LETOR discount but reports the intended NDCG@n for k > n.
The choice is always explicit; conventions are never mixed silently.

Everything is float64 and vectorised over queries; every per-query value is a running sum over
positions (``cumsum``), so appending padding never changes a query's value.

``LetorMetric`` is the torchmetrics ``Metric`` of the same values (their dataset means, summed
across processes), beside the functional form as in torchmetrics itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torchmetrics

from differank.losses.inputs import check_list_inputs

CONVENTIONS = ("letor", "trec", "no_relevant_as_1", "no_relevant_dropped")
# What the dataset means do with a query without a relevant document, per convention.
NO_RELEVANT = {"no_relevant_as_1": "one", "no_relevant_dropped": "drop"}  # others: count it as 0
SHORT_LIST_RULES = ("zero", "ndcg_at_n")
_LN2 = math.log(2.0)


def metric_keys(ks: Sequence[int] = (1, 3, 5, 10)) -> list[str]:
    """The keys ``letor_metrics`` returns, in order: ``map, mean_ndcg, ndcg@k..., p@k...``."""
    return ["map", "mean_ndcg", *(f"ndcg@{k}" for k in ks), *(f"p@{k}" for k in ks)]


def check_metric_options(
    ks: Sequence[int], convention: str, short_list: str | None
) -> tuple[tuple[int, ...], str]:
    """Validate the options; return ``ks`` as a tuple and the resolved ``short_list`` rule.

    ``short_list=None`` means the convention's own rule: ``"zero"`` for letor (the script),
    ``"ndcg_at_n"`` for trec. ``trec`` with ``"zero"`` is refused: that would mix conventions.
    """
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
    if short_list is not None and short_list not in SHORT_LIST_RULES:
        raise ValueError(
            f"short_list must be None or one of {SHORT_LIST_RULES}, got {short_list!r}"
        )
    if convention != "letor" and short_list == "zero":
        raise ValueError(
            f"short_list='zero' is the LETOR script's quirk; convention={convention!r} always "
            "reports NDCG@k = NDCG@n for k > n (use convention='letor' for the script's rule)"
        )
    if short_list is None:
        short_list = "zero" if convention == "letor" else "ndcg_at_n"
    if isinstance(ks, (int, str)):
        raise ValueError(f"ks must be a sequence of positive ints, got {ks!r}")
    ks = tuple(ks)
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"ks must be positive ints, got {ks!r}")
    if len(set(ks)) != len(ks):
        raise ValueError(f"ks must not repeat a cut-off, got {ks!r}")
    return ks, short_list


def _check_inputs(scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> None:
    """The losses' shape and dtype rule, plus the metrics' own: graded (not bool) labels and,
    unlike the losses, no NaN score and no negative label at a real document."""
    check_list_inputs(scores, labels, mask, suggest_model=False)
    if labels.dtype == torch.bool:
        raise ValueError(f"labels must be real numbers, got {labels.dtype}")
    # Checked on real documents only: padded entries may hold anything (NaN included).
    if bool((torch.isnan(scores) & mask).any()):
        raise ValueError("scores contain NaN at real documents (mask=True)")
    real_labels = torch.where(mask, labels.to(torch.float64), 0.0)
    if bool((torch.isnan(real_labels) | (real_labels < 0)).any()):
        raise ValueError("labels must be non-negative numbers at real documents (mask=True)")


def letor_ranking(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Document indices [B, L] from rank 1 down: real documents by score descending, ties in
    list order, then the padded slots (in list order), whatever their scores.

    Two stable sorts make the lexicographic key (real first, score descending, index).
    """
    filled = torch.where(mask, scores, torch.zeros((), dtype=scores.dtype, device=scores.device))
    by_score = torch.sort(filled + 0.0, dim=1, descending=True, stable=True).indices  # -0.0 == 0.0
    padded_last = torch.sort((~mask.gather(1, by_score)).to(torch.int8), dim=1, stable=True)
    return by_score.gather(1, padded_last.indices)


def counted_queries(labels: torch.Tensor, mask: torch.Tensor, convention: str) -> torch.Tensor:
    """The rows [B] a dataset mean counts: queries (rows with a real document) and, under
    ``no_relevant_dropped``, only those with a relevant one (label > 0)."""
    counted = mask.any(dim=1)
    if NO_RELEVANT.get(convention) == "drop":
        counted = counted & (mask & (labels > 0)).any(dim=1)
    return counted


def _discounted(gains: torch.Tensor, convention: str) -> torch.Tensor:
    """``gain(p) * D(p)`` at 1-based positions p, with the script's operation order
    ``gain * log(2) / log(p)`` (LETOR, p >= 3) or ``gain * log(2) / log(p + 1)`` (the others)."""
    p = torch.arange(1, gains.shape[1] + 1, dtype=torch.float64, device=gains.device)
    if convention == "letor":
        return torch.where(p > 2, gains * _LN2 / torch.log(p.clamp(min=3.0)), gains)
    return gains * _LN2 / torch.log(p + 1.0)


@torch.no_grad()
def letor_metrics(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    ks: Sequence[int] = (1, 3, 5, 10),
    convention: str = "letor",
    short_list: str | None = None,
) -> dict[str, torch.Tensor]:
    """Per-query ranking metrics exactly as the LETOR 4.0 script computes them
    (docs/metrics.md#the-letor-script-rules).

    Args:
        scores: predicted scores; higher ranks first. NaN is allowed only at padded slots.
        labels: graded relevance (non-negative; LETOR 4.0 uses 0, 1, 2). Padding is ignored.
        mask: True = real document (authoritative; padded slots may hold NaN anywhere).
        ks: cut-offs for ``ndcg@k`` and ``p@k``.
        convention: ``"letor"`` (``Eval-Score-4.0.pl``: ``D(1) = D(2) = 1``, ``D(p) = 1/log2 p``)
            or ``"trec"`` (``D(p) = 1/log2(1 + p)``, NDCG@k = NDCG@n for k > n);
            ``"no_relevant_as_1"`` is ``trec`` with NDCG, MeanNDCG and AP 1 for a query without
            a relevant document; ``"no_relevant_dropped"`` is ``trec`` here (the means drop those
            queries: :func:`counted_queries`).
        short_list: NDCG@k for k > n: ``"zero"`` (the script) or ``"ndcg_at_n"`` (the intended
            value); ``None`` takes the convention's rule (letor: zero, trec: ndcg_at_n).

    Returns:
        float64 tensors [B] keyed ``map`` (per-query AP; MAP is their mean), ``mean_ndcg``,
        ``ndcg@k`` and ``p@k`` for each k. A row without real documents gets 0 everywhere.
        The dataset value of every key is the plain mean over queries.

    Shape:
        - scores, labels, mask: [B, L]
        - each output: [B]

    Example:
        >>> scores = torch.tensor([[0.5, 0.9, 0.5, 0.1, float("nan")]])
        >>> labels = torch.tensor([[2.0, 0.0, 1.0, 1.0, float("nan")]])
        >>> mask = torch.tensor([[True, True, True, True, False]])
        >>> m = letor_metrics(scores, labels, mask, ks=(1, 2, 5))
        >>> [round(m[k].item(), 4) for k in ("map", "ndcg@2", "ndcg@5", "p@5")]
        [0.6389, 0.75, 0.0, 0.6]
        >>> m = letor_metrics(scores, labels, mask, ks=(5,), short_list="ndcg_at_n")
        >>> round(m["ndcg@5"].item(), 4)
        0.892
    """
    ks, short_list = check_metric_options(ks, convention, short_list)
    _check_inputs(scores, labels, mask)
    batch, length = scores.shape
    f64 = torch.float64
    if length == 0:
        zeros = scores.new_zeros(batch, dtype=f64)
        return {key: zeros.clone() for key in metric_keys(ks)}

    scores = scores.detach().to(f64)
    # Mask first: padded labels become 0 (no gain, not relevant) before any arithmetic.
    labels = torch.where(mask, labels.detach().to(f64), 0.0)
    n = mask.sum(dim=1)  # [B] int64
    order = letor_ranking(scores, mask)
    ranked = labels.gather(1, order)  # padded slots sit after position n with label 0

    # NDCG at every position 1..L; beyond n the running sums stay at DCG@n and IDCG@n.
    discount = "letor" if convention == "letor" else "trec"
    dcg = torch.cumsum(_discounted(torch.pow(2.0, ranked) - 1.0, discount), dim=1)
    ideal = torch.sort(labels, dim=1, descending=True).values
    idcg = torch.cumsum(_discounted(torch.pow(2.0, ideal) - 1.0, discount), dim=1)
    has_ideal = idcg > 0
    ndcg = torch.where(has_ideal, dcg / torch.where(has_ideal, idcg, 1.0), 0.0)  # [B, L]

    # MeanNDCG: NDCG@1..NDCG@n summed in position order, divided by n (0 for an empty row).
    within = torch.arange(length, device=mask.device) < n.unsqueeze(1)
    ndcg_sum = torch.cumsum(torch.where(within, ndcg, 0.0), dim=1)[:, -1]
    n_f = n.to(f64)
    out = {}

    # AP: (1/R) sum over relevant positions p of (#relevant in top p) / p.
    relevant = ranked > 0
    hits = torch.cumsum(relevant.to(f64), dim=1)  # [B, L], exact small integers
    positions = torch.arange(1, length + 1, dtype=f64, device=scores.device)
    ap_sum = torch.cumsum(torch.where(relevant, hits / positions, 0.0), dim=1)[:, -1]
    num_rel = hits[:, -1]
    out["map"] = torch.where(num_rel > 0, ap_sum / num_rel.clamp(min=1.0), 0.0)
    out["mean_ndcg"] = torch.where(n > 0, ndcg_sum / n_f.clamp(min=1.0), 0.0)

    for k in ks:
        at_k = ndcg[:, min(k, length) - 1]  # = NDCG@n when k > n (padding adds nothing)
        if short_list == "zero":
            at_k = torch.where(n >= k, at_k, 0.0)
        out[f"ndcg@{k}"] = at_k
    if NO_RELEVANT.get(convention) == "one":
        perfect = (n > 0) & (num_rel == 0)  # nothing to find, so nothing missed
        for key in ("map", "mean_ndcg", *(f"ndcg@{k}" for k in ks)):
            out[key] = torch.where(perfect, 1.0, out[key])
    for k in ks:
        # Holes beyond n count as irrelevant and the division is still by k.
        out[f"p@{k}"] = hits[:, min(k, length) - 1] / float(k)
    return {key: out[key] for key in metric_keys(ks)}


class LetorMetric(torchmetrics.Metric):
    """Dataset means of :func:`letor_metrics` over batches of queries
    (docs/metrics.md#dataset-averages).

    States are float64 per-key sums and the number of queries, summed across processes, so the
    result is the plain mean over every query seen. Rows without a real document are not
    queries (they exist only as padding) and are not counted; under ``no_relevant_dropped``
    neither are queries without a relevant document.
    """

    full_state_update = False
    is_differentiable = False
    higher_is_better = True
    sums: torch.Tensor  # states (add_state): float64 [len(keys)], and the query count
    queries: torch.Tensor

    def __init__(
        self,
        ks: Sequence[int] = (1, 3, 5, 10),
        convention: str = "letor",
        short_list: str | None = None,
        **kwargs,
    ) -> None:
        super().__init__(**kwargs)
        # Validate now, not at the first update: a bad config fails at construction.
        self.ks, self.short_list = check_metric_options(ks, convention, short_list)
        self.convention = convention
        self.keys = metric_keys(self.ks)
        self.add_state(
            "sums", torch.zeros(len(self.keys), dtype=torch.float64), dist_reduce_fx="sum"
        )
        self.add_state("queries", torch.zeros((), dtype=torch.int64), dist_reduce_fx="sum")

    def update(self, scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> None:
        per_query = letor_metrics(
            scores,
            labels,
            mask,
            ks=self.ks,
            convention=self.convention,
            short_list=self.short_list,
        )
        counted = counted_queries(labels, mask, self.convention)
        sums = [torch.where(counted, per_query[key], 0.0).sum() for key in self.keys]
        self.sums = self.sums + torch.stack(sums)
        self.queries = self.queries + counted.sum()

    def compute(self) -> dict[str, torch.Tensor]:
        means = self.sums / self.queries.clamp(min=1).to(torch.float64)
        return {key: means[index] for index, key in enumerate(self.keys)}
