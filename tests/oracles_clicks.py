"""Slow float64 oracles of the click models, written from the equations of docs/clicks.md.

Each takes ONE shown list (its real documents only, position 1 first) as Python floats and the
model's parameters as plain lists, and returns ``(click_rate, examination)``: the expected
click and the probability of examination of every position, by enumerating every session the
user could have (every path of the cascade walk, every click vector of the user-browsing model).
"""

from __future__ import annotations

import itertools


def click_probability(label, max_label, neg=0.1, pos=1.0):
    """ε⁻ + (ε⁺ − ε⁻)(2^y − 1)/(2^y_max − 1)."""
    return neg + (pos - neg) * (2.0**label - 1) / (2.0**max_label - 1)


def pbm_oracle(labels, max_label, theta, neg=0.1, pos=1.0):
    """PBM: P(C_k) = θ_k α(y_k); P(E_k) = θ_k."""
    rates = [theta[k] * click_probability(y, max_label, neg, pos) for k, y in enumerate(labels)]
    return rates, [theta[k] for k in range(len(labels))]


def trust_oracle(labels, max_label, theta, eps_plus, eps_minus):
    """Trust bias: P(C_k) = θ_k (ε⁻_k + (ε⁺_k − ε⁻_k) r(y_k)), r(y) = (2^y − 1)/(2^y_max − 1)."""
    rates = []
    for k, y in enumerate(labels):
        relevant = (2.0**y - 1) / (2.0**max_label - 1)
        rates.append(theta[k] * (eps_minus[k] + (eps_plus[k] - eps_minus[k]) * relevant))
    return rates, [theta[k] for k in range(len(labels))]


def scan_oracle(labels, max_label, after_click, after_skip, neg=0.1, pos=1.0):
    """The cascade family by enumerating every path of the walk: at a reached position the
    user clicks (α) or not, then goes on (λ_k after a click, γ after a skip) or stops."""
    n = len(labels)
    rates, reached = [0.0] * n, [0.0] * n

    def walk(k, probability):
        if k == n or probability == 0.0:
            return
        reached[k] += probability
        alpha = click_probability(labels[k], max_label, neg, pos)
        rates[k] += probability * alpha
        walk(k + 1, probability * alpha * after_click[k])  # clicked, goes on
        walk(k + 1, probability * (1 - alpha) * after_skip)  # skipped, goes on

    walk(0, 1.0)
    return rates, reached


def ubm_oracle(labels, max_label, gamma, neg=0.1, pos=1.0):
    """UBM by enumerating all 2^n click vectors: P(c) = Π_k q_k^{c_k} (1 − q_k)^{1 − c_k} with
    q_k = γ[k][d − 1] α_k, d the distance to the last click above (k + 1 when none, 0-based k)."""
    n = len(labels)
    rates, examined = [0.0] * n, [0.0] * n
    for clicks in itertools.product((0, 1), repeat=n):
        probability, last, exams = 1.0, -1, []
        for k, c in enumerate(clicks):
            exam = gamma[k][k - last - 1]
            exams.append(exam)
            q = exam * click_probability(labels[k], max_label, neg, pos)
            probability *= q if c else 1 - q
            if c:
                last = k
        for k in range(n):
            rates[k] += probability * clicks[k]
            examined[k] += probability * exams[k]
    return rates, examined


def ubm_walk(model, labels, mask, uniforms):
    """The user-browsing model walked position by position from the same uniforms
    [B, L, 1] as ``UserBrowsingModel.sample``: the reference its loop-free form must equal."""
    attractive = model.attractiveness(labels, mask)
    clicks = [[0.0] * labels.shape[1] for _ in range(labels.shape[0])]
    for b in range(labels.shape[0]):
        last = -1
        for k in range(labels.shape[1]):
            examined = float(model.gamma[k, k - last - 1])
            if float(uniforms[b, k, 0]) < examined * float(attractive[b, k]):
                clicks[b][k] = 1.0
                last = k
    return clicks


def cbcm_oracle(labels, max_label, viewport, comparison, after_click, after_skip, neg=0.1, pos=1.0):
    """CBCM by enumerating every session: the user reads viewports of ``viewport`` positions from
    the top; in a read viewport each document is clicked independently with
    q_k = α_k (α_k / max of α in its viewport)^κ; then the user goes on (λ after a viewport with
    a click, γ after one without) or stops. Returns ``(rates, examined, sessions)``, sessions
    mapping every possible click vector (a tuple of 0/1) to its exact probability."""
    n = len(labels)
    alpha = [click_probability(y, max_label, neg, pos) for y in labels]
    starts = list(range(0, n, viewport))
    q = [0.0] * n
    for start in starts:
        members = range(start, min(start + viewport, n))
        best = max(alpha[k] for k in members)
        for k in members:
            q[k] = 0.0 if best == 0 else alpha[k] * (alpha[k] / best) ** comparison
    rates, examined = [0.0] * n, [0.0] * n
    sessions: dict[tuple, float] = {}

    def walk(v, probability, clicks):
        if v == len(starts) or probability == 0.0:  # stopped or past the end: a session
            full = tuple(clicks + [0] * (n - len(clicks)))
            sessions[full] = sessions.get(full, 0.0) + probability
            return
        members = list(range(starts[v], min(starts[v] + viewport, n)))
        for pattern in itertools.product((0, 1), repeat=len(members)):
            chance = probability
            for k, c in zip(members, pattern, strict=True):
                chance *= q[k] if c else 1 - q[k]
            for k, c in zip(members, pattern, strict=True):
                examined[k] += chance
                rates[k] += chance * c
            go_on = after_click if any(pattern) else after_skip
            walk(v + 1, chance * go_on, clicks + list(pattern))  # goes on
            stopped = tuple(clicks + list(pattern) + [0] * (n - len(clicks) - len(pattern)))
            sessions[stopped] = sessions.get(stopped, 0.0) + chance * (1 - go_on)  # stops

    walk(0, 1.0, [])
    return rates, examined, sessions


def cbcm_walk(model, labels, mask, uniforms):
    """The CBCM walked viewport by viewport, slot by slot, from the same uniforms [B, L, 2] as
    ``ComparisonClickModel.sample``: in a read viewport slot k is clicked when u[k, 0] < q_k
    (its α times (α / the viewport's best α)^κ); then the user goes on when the viewport's first
    slot's u[., 1] is below λ (a click in it) or γ (none), else stops."""
    attractive = model.attractiveness(labels, mask)
    batch, length = labels.shape
    clicks = [[0.0] * length for _ in range(batch)]
    for b in range(batch):
        for start in range(0, length, model.viewport):
            members = range(start, min(start + model.viewport, length))
            best = max(float(attractive[b, k]) for k in members)
            clicked = False
            for k in members:
                alpha = float(attractive[b, k])
                q = 0.0 if best == 0 else alpha * (alpha / best) ** model.comparison
                if float(uniforms[b, k, 0]) < q:
                    clicks[b][k] = 1.0
                    clicked = True
            go_on = model.after_click if clicked else model.after_skip
            if not float(uniforms[b, start, 1]) < go_on:
                break
    return clicks
