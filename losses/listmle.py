"""ListMLE: the Plackett-Luce likelihood of the label order (Xia et al., ICML 2008), and its
position-aware form p-ListMLE (Lan et al., UAI 2014); docs/objectives/standard.md#listmle."""

from __future__ import annotations

import torch

from differank.losses.inputs import decorated_mask, list_inputs, list_loss, query_documents
from differank.losses.module_form import LISTWISE, LossModule
from differank.losses.options import NON_NEGATIVE
from differank.losses.reduction import check_reduction, reduce_queries

TIES = ("random", "index")


def check_listmle_options(ties: str, eps: float) -> None:
    """Raise ValueError for an unknown tie rule or an ``eps`` not finite and >= 0."""
    if ties not in TIES:
        raise ValueError(f"ties must be one of {TIES}, got {ties!r}")
    NON_NEGATIVE.check("listmle_loss", eps=eps)


def reversed_label_order(
    labels: torch.Tensor, mask: torch.Tensor, *, ties: str = "random"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The label order read backwards: ``(keys, order)`` with ``order`` a permutation sorting
    each query by increasing label, padding first, and ``keys`` the sorted labels (padding
    ``-inf``). Read from the end, ``order`` is the Plackett-Luce order ``π`` (decreasing label,
    padding last); kept backwards, the tail sums ``Σ_{j≥i}`` of ``π`` are one cumulative sum.

    Equal labels are ordered at random, afresh on every call (``ties="random"``: one random
    permutation of the slots from the global stream, shared by the batch as allRank's shuffle,
    then a sort), or by index in ``π`` (``ties="index"``: the lower slot first).

    Shape:
        labels, mask: [B, L] -> ([B, L] labels' dtype, [B, L] int64).

    Example:
        >>> reversed_label_order(torch.tensor([[1.0, 2.0, 1.0, 0.0]]),
        ...                      torch.tensor([[True, True, True, False]]), ties="index")
        (tensor([[-inf, 1., 1., 2.]]), tensor([[3, 2, 0, 1]]))
    """
    key = torch.where(mask, labels, float("-inf"))
    length = labels.shape[-1]
    if ties == "index":  # a stable sort of the reversed slots puts the higher slot first
        keys, order = key.flip(-1).sort(dim=-1, stable=True)
        return keys, (length - 1) - order
    # one uniform shuffle of the slots (shared by the batch, as allRank's), then any sort: the
    # tied documents' order is a fixed function of their shuffled slots, hence uniform too
    shuffle = torch.randperm(length, device=labels.device)
    keys, order = key.index_select(-1, shuffle).sort(dim=-1)
    return keys, shuffle.take(order)


class _PlackettLuce(torch.autograd.Function):
    """:func:`plackett_luce` with its gradient written out: one autograd node instead of a
    dozen, which is what an O(L) loss costs at the list sizes of LETOR data. The gradient of
    ``T_i = Σ_{j≥i} exp(s_πj - m) + eps`` is a prefix sum over ``π``; ``m`` is differentiated
    like ``amax``: ``∂L/∂m = eps · Σ_i α_i / T_i``, shared evenly by tied maxima."""

    @staticmethod
    def forward(ctx, scores, mask, order, alpha, eps):
        scores = torch.where(mask, scores, torch.finfo(scores.dtype).min / 2)
        # s + 0 · s is NaN at a non-finite real score, and the maximum then NaN: the rule's NaN
        # for the query (alone, a -inf score would give +inf and a finite gradient)
        ranked = scores.add_(scores, alpha=0.0).gather(-1, order)  # backwards, padding first
        top = ranked.amax(dim=-1, keepdim=True)
        shifted = ranked.sub_(top)  # exactly 0 at the maxima
        exps = shifted.exp()
        tails = exps.cumsum(dim=-1).add_(eps)  # T_i, backwards: a prefix sum of the layout
        if eps == 0:  # T_i = 0 at padding: keep log, 1 / T_i finite
            tails.add_(alpha == 0)
        ctx.eps = eps
        ctx.save_for_backward(mask, order, alpha, shifted, exps, tails, top.mul_(0.0))
        # Σ_i α_i·term_i as a product and a sum, not linalg.vecdot: autocast (16-mixed) casts
        # vecdot to float16, where a padded term (about finfo.min / 2 in size) is inf and its
        # weight 0 makes the query NaN
        return tails.log().sub_(shifted).mul_(alpha).sum(dim=-1)

    @staticmethod
    def backward(ctx, grad):
        mask, order, alpha, shifted, exps, tails, nonfinite = ctx.saved_tensors
        share = alpha / tails  # α_i / T_i
        # ∂L/∂(s_πk - m) = exp(s_πk - m) · Σ_{i≤k} α_i / T_i - α_k: a suffix sum of the layout
        suffix = share.flip(-1).cumsum(dim=-1).flip(-1)
        ranked_grad = suffix * exps
        ranked_grad.sub_(alpha)
        if ctx.eps > 0:  # the suffix sum at slot 0 is Σ_i α_i / T_i
            is_top = shifted == 0
            through_top = suffix[:, :1] * ctx.eps
            ranked_grad.add_(is_top * through_top.div_(is_top.sum(dim=-1, keepdim=True)))
        ranked_grad.mul_(grad.unsqueeze(-1) + nonfinite)  # NaN at every document of such a query
        scores_grad = torch.empty_like(ranked_grad).scatter_(-1, order, ranked_grad)
        return torch.where(mask, scores_grad, 0.0), None, None, None, None  # padding: 0


def plackett_luce(
    scores: torch.Tensor,
    mask: torch.Tensor,
    order: torch.Tensor,
    alpha: torch.Tensor,
    eps: float,
) -> torch.Tensor:
    """``Σ_i α_i (log(Σ_{j≥i} exp(s_πj - m) + eps) + m - s_πi)`` per query [B] from the scores
    (padding may hold anything, it is never read; a non-finite real score makes the query NaN,
    its gradient NaN at its real documents), the mask, and in
    :func:`reversed_label_order`'s layout the order and the weights ``α`` (0 at padding; 1 at
    the real documents for ListMLE). ``m`` is the real maximum. Laid out backwards, the tail
    sums are one cumulative sum; padding is the dtype's lowest float / 2 (its exp is 0 and, with
    ``m`` never below it, every term is finite) and the terms are weighted by a product.

    Shape:
        scores, mask, order, alpha: [B, L] -> [B].
    """
    return _PlackettLuce.apply(scores, mask, order, alpha, eps)


def _position_weights(real: torch.Tensor) -> torch.Tensor:
    """p-ListMLE's ``α_i = 2^{1-i} - 2^{1-n}`` in :func:`reversed_label_order`'s layout (slot
    ``j`` is position ``i = L - j`` of ``π``), 0 at padding; ``real`` is 0/1 floats."""
    length = real.shape[-1]
    count = real.sum(dim=-1, keepdim=True)
    positions = torch.arange(length, 0, -1, device=real.device, dtype=real.dtype)
    return real * (torch.exp2(1.0 - positions) - torch.exp2(1.0 - count))


def _per_query(scores, labels, mask, ties, position_aware, eps):
    """The per-query loss [B] of :func:`plackett_luce` in :func:`reversed_label_order`'s
    layout."""
    keys, order = reversed_label_order(labels, mask, ties=ties)
    real = keys.clamp(min=-1.0, max=0.0).add_(1.0)  # labels >= 0: 1, padding (-inf): 0
    alpha = _position_weights(real) if position_aware else real
    return plackett_luce(scores, mask, order, alpha, eps)


@list_loss()
def listmle_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    ties: str = "random",
    position_aware: bool = False,
    eps: float = 1e-10,
    reduction: str = "mean",
) -> torch.Tensor:
    """Negative Plackett-Luce log-likelihood of the label order (Xia et al. 2008).

    With ``π`` the documents sorted by decreasing label (ties: :func:`reversed_label_order`)
    and ``n`` the query's real documents::

        L_q = Σ_{i=1..n} α_i · ( log(Σ_{j≥i} exp(s_πj - m) + eps) + m - s_πi ),   m = max_j s_j

    ``α_i = 1`` (ListMLE), or with ``position_aware`` p-ListMLE's ``α_i = 2^{n-i} - 1`` (Lan et
    al. 2014; TF-Ranking's ``create_p_list_mle_lambda_weight``) divided by ``2^{n-1}`` so that
    long lists do not overflow: ``α_i = 2^{1-i} - 2^{1-n}``. ``eps`` is allRank's 1e-10 inside
    the log. Inputs follow ``differank.losses.inputs``.

    Shape:
        scores, labels, mask: [B, L] -> [B] for ``reduction="none"``, else a scalar.

    Example:
        >>> listmle_loss(torch.tensor([0.0, 0.0]), torch.tensor([1, 0]))  # one query, all real
        tensor(0.6931)
    """
    check_reduction(reduction)
    check_listmle_options(ties, eps)
    scores, labels, mask, valid = list_inputs(scores, labels, decorated_mask(mask))
    real = query_documents(mask, valid)  # a query without a pair: all padding, never read
    return reduce_queries(
        _per_query(scores, labels, real, ties, position_aware, eps), valid, reduction
    )


class ListMLELoss(LossModule, function=listmle_loss, memory=LISTWISE):
    """Module form of :func:`listmle_loss`."""
