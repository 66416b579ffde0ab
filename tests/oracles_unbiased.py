"""Float64 oracles of the click estimators (docs/objectives/unbiased.md#estimators), written from
the papers' equations with Python loops, sharing no code with losses/unbiased/.

Each oracle takes ``(base, scores, clicks, positions, mask, ...)`` with ``base`` a batched
per-query oracle of tests/oracles_standard.py or tests/oracles.py (``base(scores, labels,
mask) -> [B]``) and returns the estimator's batch loss: the mean over the B queries of the base
loss on the estimator's labels, over the shown documents, times the labels' sum when
``label_sum_weighting``. Targets are built document by document.
"""

from __future__ import annotations

import math

import torch


def _shown(positions, mask, b, i):
    return bool(mask[b, i]) and int(positions[b, i]) >= 0


def _batch_mean(base, scores, targets, visible, label_sum_weighting):
    per_query = base(scores, targets, visible)
    if label_sum_weighting:
        sums = torch.stack([targets[b][visible[b]].sum() for b in range(targets.shape[0])])
        per_query = per_query * sums
    return per_query.sum() / scores.shape[0]


def _visible(positions, mask):
    B, L = mask.shape
    return torch.tensor([[_shown(positions, mask, b, i) for i in range(L)] for b in range(B)])


def naive_oracle(base, scores, clicks, positions, mask, label_sum_weighting=False):
    """L = mean_q base(s_q, c_q)."""
    visible = _visible(positions, mask)
    targets = torch.where(visible, clicks.double(), 0.0)
    return _batch_mean(base, scores, targets, visible, label_sum_weighting)


def ips_oracle(base, scores, clicks, positions, mask, theta, clip=100.0, label_sum_weighting=False):
    """ĉ_i = c_i / max(θ_{k_i}, 1/clip) (Joachims et al. 2017); ``theta`` a list per position
    or a [B, L] tensor of per-document propensities."""
    B, L = mask.shape
    targets = torch.zeros(B, L, dtype=torch.float64)
    for b in range(B):
        for i in range(L):
            if _shown(positions, mask, b, i):
                t = theta[int(positions[b, i])] if isinstance(theta, list) else float(theta[b, i])
                targets[b, i] = float(clicks[b, i]) / max(t, 1.0 / clip)
    return _batch_mean(base, scores, targets, _visible(positions, mask), label_sum_weighting)


def dla_oracle(base, scores, clicks, positions, mask, logits, clip=100.0, label_sum_weighting=True):
    """Ai et al. 2018: base(s, c·min(θ̂_0/θ̂_k, clip)) + base(π_k, c·min(r̂_top/r̂_i, clip)),
    θ̂ = exp(π), r̂ = exp(s), each model's weights from the other (detached)."""
    B, L = mask.shape
    visible = _visible(positions, mask)
    ranker_targets = torch.zeros(B, L, dtype=torch.float64)
    propensity_targets = torch.zeros(B, L, dtype=torch.float64)
    position_logits = []
    values = logits.detach().tolist()
    for b in range(B):
        top = [i for i in range(L) if _shown(positions, mask, b, i) and int(positions[b, i]) == 0]
        row = []
        for i in range(L):
            k = max(int(positions[b, i]), 0)
            row.append(logits[k])
            if not _shown(positions, mask, b, i):
                continue
            inverse_propensity = min(math.exp(values[0] - values[k]), clip)
            plain = scores.detach()
            reference = float(plain[b, top[0]]) if top else float(plain[b, i])
            inverse_relevance = min(math.exp(reference - float(plain[b, i])), clip)
            ranker_targets[b, i] = float(clicks[b, i]) * inverse_propensity
            propensity_targets[b, i] = float(clicks[b, i]) * inverse_relevance
        position_logits.append(torch.stack(row))
    position_logits = torch.stack(position_logits)
    ranker = _batch_mean(base, scores, ranker_targets, visible, label_sum_weighting)
    propensity = _batch_mean(
        base, position_logits, propensity_targets, visible, label_sum_weighting
    )
    return ranker + propensity


def rem_oracle(base, scores, clicks, positions, mask, theta, update, label_sum_weighting=False):
    """Wang et al. 2018: labels P(R=1 | c) = c + (1-c)(1-θ)γ/(1-θγ), γ = σ(s); returns the
    loss and the blended M-step θ_k ← (1-update)θ_k + update·mean_k[c + (1-c)θ(1-γ)/(1-θγ)]."""
    B, L = mask.shape
    targets = torch.zeros(B, L, dtype=torch.float64)
    examined = {k: [] for k in range(len(theta))}
    for b in range(B):
        for i in range(L):
            if not _shown(positions, mask, b, i):
                continue
            k, c = int(positions[b, i]), float(clicks[b, i])
            gamma = 1.0 / (1.0 + math.exp(-float(scores.detach()[b, i])))
            skip = 1.0 - theta[k] * gamma
            targets[b, i] = c + (1 - c) * (1 - theta[k]) * gamma / skip
            examined[k].append(c + (1 - c) * theta[k] * (1 - gamma) / skip)
    new_theta = [
        (1 - update) * theta[k] + update * (sum(v) / len(v)) if v else theta[k]
        for k, v in examined.items()
    ]
    loss = _batch_mean(base, scores, targets, _visible(positions, mask), label_sum_weighting)
    return loss, new_theta


def pairwise_oracle(scores, clicks, positions, mask, t_plus, t_minus):
    """Hu et al. 2019: mean_q Σ_{c_i=1,c_j=0} log(1+exp(-(s_i-s_j))) / (t⁺_{k_i} t⁻_{k_j}) /
    #pairs, with the biases ``t_plus``, ``t_minus`` (lists per position) as given."""
    B, L = mask.shape
    total = scores.sum() * 0.0
    for b in range(B):
        query, count = scores.sum() * 0.0, 0
        for i in range(L):
            for j in range(L):
                if not (_shown(positions, mask, b, i) and _shown(positions, mask, b, j)):
                    continue
                if float(clicks[b, i]) > 0 and float(clicks[b, j]) == 0:
                    pair = torch.log1p(torch.exp(-(scores[b, i] - scores[b, j])))
                    ki, kj = int(positions[b, i]), int(positions[b, j])
                    query = query + pair / (t_plus[ki] * t_minus[kj])
                    count += 1
        total = total + query / max(count, 1)
    return total / B


def pairwise_bias_oracle(scores, clicks, positions, mask, t_plus, t_minus, p, update):
    """One batch's t⁺, t⁻ (Hu et al. 2019, eqs. 11-12, normalised at position 0), blended."""
    B, L = mask.shape
    plus_sum = [0.0] * len(t_plus)
    minus_sum = [0.0] * len(t_minus)
    for b in range(B):
        for i in range(L):
            for j in range(L):
                if not (_shown(positions, mask, b, i) and _shown(positions, mask, b, j)):
                    continue
                if float(clicks[b, i]) > 0 and float(clicks[b, j]) == 0:
                    plain = scores.detach()
                    pair = math.log1p(math.exp(-(float(plain[b, i]) - float(plain[b, j]))))
                    ki, kj = int(positions[b, i]), int(positions[b, j])
                    plus_sum[ki] += pair / t_minus[kj]
                    minus_sum[kj] += pair / t_plus[ki]

    def blend(old, sums):
        if sums[0] <= 0:
            return list(old)
        return [
            (1 - update) * o + update * (s / sums[0]) ** (1 / (p + 1)) if s > 0 else o
            for o, s in zip(old, sums, strict=True)
        ]

    return blend(t_plus, plus_sum), blend(t_minus, minus_sum)


def two_tower_oracle(base, scores, clicks, positions, mask, bias, label_sum_weighting=False):
    """base(s_i + b_{k_i}, c) (Yan et al. 2022)."""
    B, L = mask.shape
    rows = []
    for b in range(B):
        rows.append(
            torch.stack([scores[b, i] + bias[max(int(positions[b, i]), 0)] for i in range(L)])
        )
    visible = _visible(positions, mask)
    targets = torch.where(visible, clicks.double(), 0.0)
    return _batch_mean(base, torch.stack(rows), targets, visible, label_sum_weighting)


def dr_oracle(base, scores, clicks, positions, mask, theta, clip=100.0, label_sum_weighting=False):
    """Oosterhuis 2023: ĉ_i = R̂_i + 1[shown](c_i − θ_{k_i} R̂_i)/max(θ_{k_i}, 1/clip), R̂ = σ(s),
    clamped at 0; the loss over every real document."""
    B, L = mask.shape
    targets = torch.zeros(B, L, dtype=torch.float64)
    for b in range(B):
        for i in range(L):
            if not bool(mask[b, i]):
                continue
            direct = 1.0 / (1.0 + math.exp(-float(scores.detach()[b, i])))
            value = direct
            if _shown(positions, mask, b, i):
                t = theta[int(positions[b, i])]
                value += (float(clicks[b, i]) - t * direct) / max(t, 1.0 / clip)
            targets[b, i] = max(value, 0.0)
    return _batch_mean(base, scores, targets, mask.clone(), label_sum_weighting)
