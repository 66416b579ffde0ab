"""Float64 oracles of the standard objectives (docs/objectives/standard.md), written from the
papers' equations with Python loops and allRank's stated conventions, sharing no code with
losses/.

Every public oracle has the batched signature ``oracle(scores, labels, mask, **options) ->
per-query loss [B]``: each query's real documents are taken out one by one (padding is never
read), a per-query function of plain loops computes its loss with autograd-capable scalar
operations, and queries without two distinct labels get 0 (the loss contract).
"""

from __future__ import annotations

import math

import torch

EPS = 1e-10  # allRank's DEFAULT_EPS


def _batched(query_loss):
    """Lift ``query_loss(scores [n], labels list[n], **options) -> scalar`` to the batch."""

    def oracle(scores, labels, mask, **options):
        losses = []
        for b in range(scores.shape[0]):
            keep = [i for i in range(scores.shape[1]) if bool(mask[b, i])]
            query_scores = scores[b, keep]
            query_labels = [float(labels[b, i]) for i in keep]
            if len(set(query_labels)) < 2:
                losses.append(query_scores.sum() * 0.0)
            else:
                losses.append(query_loss(query_scores, query_labels, **options))
        if not losses:
            return scores.new_zeros(0)
        return torch.stack(losses)

    oracle.__doc__ = query_loss.__doc__
    oracle.__name__ = query_loss.__name__.lstrip("_")
    return oracle


def _gain(label, powered=True):
    label = max(label, 0.0)
    return 2.0**label - 1.0 if powered else label


def _discount(position):  # 1-based
    return 1.0 / math.log2(1.0 + position)


def _ideal_dcg(labels, k=None, powered=True):
    gains = sorted((_gain(label, powered) for label in labels), reverse=True)
    cut = len(gains) if k is None else min(k, len(gains))
    return sum(gains[p] * _discount(p + 1) for p in range(cut))


def _score_order(scores):
    """Documents by decreasing score, equal scores by index."""
    n = len(scores)
    return sorted(range(n), key=lambda i: (-float(scores[i].detach()), i))


# ---- LambdaLoss (Wang et al. 2018; allRank's clamps) ----


def _lambda_loss(
    scores,
    labels,
    weighting="ndcgLoss2++",
    k=None,
    sigma=1.0,
    mu=10.0,
    eps=EPS,
    logarithm="binary",
):
    """-Σ over sorted position pairs (p, q), both < k, l_p > l_q (all pairs for ndcgLoss1) of
    log2(max(max(σ(sigma(s_p - s_q)), eps)^w_pq, eps))."""
    order = _score_order(scores)
    n = len(order)
    cut = n if k is None else min(k, n)
    max_dcg = max(_ideal_dcg(labels, k), eps)
    G = [_gain(labels[i]) / max_dcg for i in order]
    lab = [max(labels[i], 0.0) for i in order]

    def weight(p, q):
        if weighting == "ndcgLoss1":
            return G[p] * _discount(p + 1)
        if weighting == "rankNet":
            return 1.0
        if weighting == "rankNetWeightedByGTDiff":
            return abs(lab[p] - lab[q])
        if weighting == "rankNetWeightedByGTDiffPowed":
            return abs(lab[p] ** 2 - lab[q] ** 2)
        distance = abs(p - q)
        delta = abs(_discount(distance) - _discount(distance + 1)) if distance else 0.0
        lambda_rank = abs(_discount(p + 1) - _discount(q + 1))
        gap = abs(G[p] - G[q])
        return {
            "ndcgLoss2": delta * gap,
            "lambdaRank": lambda_rank * gap,
            "ndcgLoss2++": (mu * delta + lambda_rank) * gap,
        }[weighting]

    total = scores.sum() * 0.0
    log = torch.log2 if logarithm == "binary" else torch.log
    for p in range(cut):
        for q in range(cut):
            if weighting != "ndcgLoss1" and not lab[p] > lab[q]:
                continue
            difference = scores[order[p]] - scores[order[q]]
            probability = torch.sigmoid(sigma * difference).clamp(min=eps)
            total = total - log((probability ** weight(p, q)).clamp(min=eps))
    return total


lambda_loss_oracle = _batched(_lambda_loss)


# ---- ApproxNDCG (Qin et al. 2010, eqs. 19-21) ----


def _approx_ndcg(scores, labels, alpha=1.0, eps=EPS):
    """-Σ_i (2^l_i - 1)/maxDCG / log2(1 + π̂_i), π̂_i = 1 + Σ_{j≠i} max(σ(-α(s_i - s_j)), eps)."""
    n = len(labels)
    max_dcg = max(_ideal_dcg(labels), eps)
    total = scores.sum() * 0.0
    for i in range(n):
        position = 1.0
        for j in range(n):
            if j != i:
                position = position + torch.sigmoid(-alpha * (scores[i] - scores[j])).clamp(eps)
        total = total - _gain(labels[i]) / max_dcg / torch.log2(1.0 + position)
    return total


approx_ndcg_oracle = _batched(_approx_ndcg)


# ---- NeuralNDCG (Pobrotyn & Białobrzeski 2021; NeuralSort, Grover et al. 2019) ----


def _neural_sort_matrix(scores, temperature):
    """P[p][d] = softmax_d(((n + 1 - 2p) s_d - Σ_e |s_d - s_e|) / τ), p = 1..n."""
    n = len(scores)
    spread = [sum(abs(scores[d] - scores[e]) for e in range(n)) for d in range(n)]
    rows = []
    for p in range(1, n + 1):
        logits = torch.stack(
            [((n + 1 - 2 * p) * scores[d] - spread[d]) / temperature for d in range(n)]
        )
        rows.append(torch.softmax(logits, dim=0))
    return torch.stack(rows)


def _sinkhorn_matrix(matrix, tolerance, iterations):
    """Alternate column then row normalisation (sums clamped at 1e-10), stopping once both
    sums are within ``tolerance`` of 1."""
    for _ in range(iterations):
        matrix = matrix / matrix.sum(dim=0, keepdim=True).clamp(min=EPS)
        matrix = matrix / matrix.sum(dim=1, keepdim=True).clamp(min=EPS)
        row_error = (matrix.sum(dim=1) - 1).abs().max()
        column_error = (matrix.sum(dim=0) - 1).abs().max()
        if row_error < tolerance and column_error < tolerance:
            break
    return matrix


def _neural_ndcg(
    scores,
    labels,
    temperature=1.0,
    k=None,
    powered_relevancies=True,
    transposed=False,
    sinkhorn_tolerance=1e-6,
    sinkhorn_iterations=50,
):
    """-Σ_p disc_p Σ_d P̂[p][d] g_d / (IDCG@k + 1e-10), discounts 0 from position k on."""
    n = len(labels)
    P = _sinkhorn_matrix(
        _neural_sort_matrix(scores, temperature), sinkhorn_tolerance, sinkhorn_iterations
    )
    cut = n if k is None else min(k, n)
    total = scores.sum() * 0.0
    for p in range(cut):
        for d in range(n):
            # NeuralNDCG (gains per position) and its transpose (discounts per document) sum
            # the same double sum in the two orders
            total = total + _discount(p + 1) * P[p, d] * _gain(labels[d], powered_relevancies)
    ideal = _ideal_dcg(labels, k, powered_relevancies)
    return -total / (ideal + EPS)


neural_ndcg_oracle = _batched(_neural_ndcg)


# ---- ListMLE (Xia et al. 2008) and p-ListMLE (Lan et al. 2014) ----


def _listmle(scores, labels, position_aware=False, eps=EPS, ties="index"):
    """Σ_i α_i (log(Σ_{j≥i} exp(s_πj - m) + eps) + m - s_πi), π by decreasing label, ties by
    index; α_i = (2^{n-i} - 1) / 2^{n-1} for p-ListMLE, else 1."""
    assert ties == "index", "the oracle follows the deterministic tie rule"
    n = len(labels)
    order = sorted(range(n), key=lambda i: (-labels[i], i))
    top = torch.stack([scores[i] for i in range(n)]).max()
    total = scores.sum() * 0.0
    for position in range(1, n + 1):
        tail = sum(torch.exp(scores[order[j]] - top) for j in range(position - 1, n))
        term = torch.log(tail + eps) + top - scores[order[position - 1]]
        alpha = (2.0 ** (n - position) - 1.0) / 2.0 ** (n - 1) if position_aware else 1.0
        total = total + alpha * term
    return total


listmle_oracle = _batched(_listmle)


# ---- softmax cross-entropy and Poly-1 (TF-Ranking / Rax; Leng et al. 2022) ----


def _softmax(scores, labels, epsilon=None):
    """-Σ_i t_i log softmax(s)_i, t_i = l_i / Σ l; Poly-1 adds epsilon (1 - Σ_i t_i p_i)."""
    n = len(labels)
    relevance = [max(label, 0.0) for label in labels]
    total_relevance = sum(relevance)
    normaliser = sum(torch.exp(scores[j]) for j in range(n))
    loss = scores.sum() * 0.0
    p_target = scores.sum() * 0.0
    for i in range(n):
        target = relevance[i] / total_relevance if total_relevance > 0 else 0.0
        probability = torch.exp(scores[i]) / normaliser
        loss = loss - target * torch.log(probability)
        p_target = p_target + target * probability
    return loss if epsilon is None else loss + epsilon * (1.0 - p_target)


softmax_oracle = _batched(_softmax)


def _poly1_softmax(scores, labels, epsilon=1.0):
    return _softmax(scores, labels, epsilon)


poly1_softmax_oracle = _batched(_poly1_softmax)


# ---- pointwise baselines ----


def _sigmoid_bce(scores, labels, max_label=1.0):
    """Σ_i -(t log σ(s_i) + (1 - t) log(1 - σ(s_i))), t = clamp(l_i / max_label, 0, 1)."""
    total = scores.sum() * 0.0
    for i, label in enumerate(labels):
        target = min(max(label / max_label, 0.0), 1.0)
        p = torch.sigmoid(scores[i])
        total = total - (target * torch.log(p) + (1.0 - target) * torch.log(1.0 - p))
    return total


sigmoid_bce_oracle = _batched(_sigmoid_bce)


def _mse(scores, labels):
    """Σ_i (s_i - l_i)²."""
    return sum(((scores[i] - label) ** 2 for i, label in enumerate(labels)), scores.sum() * 0.0)


mse_oracle = _batched(_mse)


def _ordinal(scores, labels, n=4, thresholds=None):
    """(1/|q|) Σ_i Σ_{k=1..n} −(y_ik log σ(s_i − θ_k) + (1 − y_ik) log(1 − σ(s_i − θ_k))),
    y_ik = [l_i ≥ k], θ_k = k − 1/2 unless given (allRank's ordinal on one score)."""
    thetas = [k - 0.5 for k in range(1, n + 1)] if thresholds is None else list(thresholds)
    total = scores.sum() * 0.0
    for i, label in enumerate(labels):
        for k, theta in enumerate(thetas, start=1):
            p = torch.sigmoid(scores[i] - theta)
            answer = 1.0 if label >= k else 0.0
            total = total - (answer * torch.log(p) + (1.0 - answer) * torch.log(1.0 - p))
    return total / len(labels)


ordinal_oracle = _batched(_ordinal)


# ---- approximate metrics (Rax's approx_t12n style; Qin et al. 2010) ----


def _approx_metric(scores, labels, metric="ndcg", k=None, temperature=1.0):
    """-metric with π̂_i = 1 + Σ_{j≠i} σ((s_j - s_i)/T) and cutoffs σ((k + 1/2 - π̂_i)/T)."""
    n = len(labels)

    def above(i, j):
        return torch.sigmoid((scores[j] - scores[i]) / temperature)

    ranks = [
        1.0 + sum((above(i, j) for j in range(n) if j != i), scores.sum() * 0.0) for i in range(n)
    ]
    if k is None:
        cutoffs = [1.0] * n
    else:
        cutoffs = [torch.sigmoid((k + 0.5 - ranks[i]) / temperature) for i in range(n)]
    relevant = [1.0 if label > 0 else 0.0 for label in labels]
    if metric == "ndcg":
        ideal = _ideal_dcg(labels, k)
        dcg = sum(cutoffs[i] * _gain(labels[i]) / torch.log2(1.0 + ranks[i]) for i in range(n))
        value = dcg / ideal if ideal > 0 else dcg
    elif metric == "map":
        total = scores.sum() * 0.0
        for i in range(n):
            hits = 1.0 + sum(relevant[j] * above(i, j) for j in range(n) if j != i)
            total = total + relevant[i] * cutoffs[i] * hits / ranks[i]
        value = total / max(sum(relevant), 1.0)
    elif metric == "mrr":
        value = torch.stack([relevant[i] * cutoffs[i] / ranks[i] for i in range(n)]).max()
    else:
        hits = sum((relevant[i] * cutoffs[i] for i in range(n)), scores.sum() * 0.0)
        value = hits / (n if k is None else k)
    return -value


approx_metric_oracle = _batched(_approx_metric)
