"""Float64 oracles of the distillation losses (docs/objectives/distill.md), written from the
equations with Python loops over each query's real documents, sharing no code with losses/.

``distill_oracle(scores, labels, mask, teacher, **options)`` -> per-query loss [B]. The teacher
term counts every query with a real document, labels all equal or not; the label term (α > 0)
only a query with two distinct real labels, 0 elsewhere (the label loss's own rule); with α = 1
only those queries count (:func:`distill_counted`). RankDistil's sampled orders use the
same uniform draws as the loss: one ``torch.rand(B, S, L)`` in the scores' dtype, taken first.
"""

from __future__ import annotations

import math

import torch

from tests import oracles


def _listwise(scores, teacher, temperature):
    """τ² · (−Σ_i p_i log q_i), p = softmax(t/τ), q = softmax(s/τ)."""
    exp_t = [math.exp(float(t) / temperature) for t in teacher]
    total = sum(exp_t)
    log_z = torch.logsumexp(scores / temperature, dim=0)
    cross = -sum((exp_t[i] / total) * (scores[i] / temperature - log_z) for i in range(len(exp_t)))
    return temperature**2 * cross


def _regression(scores, teacher):
    """(1/n) Σ_i (s_i − t_i)²."""
    n = len(teacher)
    return sum((scores[i] - float(teacher[i])) ** 2 for i in range(n)) / n


def _rankdistil(scores, teacher, noise, temperature, top_k):
    """Mean over samples m of −Σ_{i<k} [s_π(i)/τ − log Σ_{j≥i} exp(s_π(j)/τ)], π sorting
    t/τ + g_m (g = −log(−log u)) in decreasing order. ``noise``: [S][n] uniforms."""
    total = 0.0
    for uniforms in noise:
        keys = [float(teacher[i]) / temperature - math.log(-math.log(u)) for i, u in
                enumerate(uniforms)]  # fmt: skip
        order = sorted(range(len(keys)), key=lambda i: -keys[i])
        k = len(order) if top_k is None else min(top_k, len(order))
        for position in range(k):
            rest = torch.stack([scores[j] / temperature for j in order[position:]])
            total = total - (scores[order[position]] / temperature - torch.logsumexp(rest, 0))
    return total / len(noise)


def distill_oracle(scores, labels, mask, teacher, *, form="listwise", alpha=0.0,
                   label_oracle=None, temperature=1.0, top_k=None, num_samples=8):  # fmt: skip
    batch, length = scores.shape
    uniforms = (
        torch.rand(batch, num_samples, length, dtype=scores.dtype) if form == "rankdistil" else None
    )
    losses = []
    for b in range(batch):
        keep = [i for i in range(length) if bool(mask[b, i])]
        query_scores, query_teacher = scores[b, keep], [float(teacher[b, i]) for i in keep]
        has_pair = _has_pair(labels[b, keep])
        if not keep or (alpha == 1 and not has_pair):
            losses.append(query_scores.sum() * 0.0)
            continue
        if form == "listwise":
            term = _listwise(query_scores, query_teacher, temperature)
        elif form == "regression":
            term = _regression(query_scores, query_teacher)
        else:
            noise = [[float(uniforms[b, m, i]) for i in keep] for m in range(num_samples)]
            term = _rankdistil(query_scores, query_teacher, noise, temperature, top_k)
        if alpha > 0:
            label_term = label_oracle(query_scores, labels[b, keep]) if has_pair else 0.0
            term = (1 - alpha) * term + alpha * label_term
        losses.append(torch.as_tensor(term, dtype=scores.dtype).reshape(()))
    return torch.stack(losses) if losses else scores.new_zeros(0)


def _has_pair(query_labels) -> bool:
    """Two distinct real labels: a preference pair."""
    return len({float(label) for label in query_labels}) >= 2


def distill_counted(labels, mask, alpha=0.0):
    """[B] bool: the queries the distillation loss counts: those with a real document, or with
    ``alpha = 1`` (no teacher term) those with two distinct real labels."""
    if alpha == 1:
        return torch.tensor([_has_pair(labels[b][mask[b]]) for b in range(len(mask))])
    return torch.tensor([bool(mask[b].any()) for b in range(len(mask))])


LABEL_ORACLE = oracles.listnet_oracle  # the label loss the registry mixes in (ListNetLoss)
