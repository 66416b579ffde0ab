"""Slow, obviously-correct per-query oracles written straight from the equations in docs/.

Each oracle takes ONE query's real documents only (padding already dropped), as float64
tensors or Python lists, and uses naive loops, brute force or exact solvers. They are the
reference the batched code in losses/ and rankers/ is tested against
(docs/architecture.md#how-a-loss-is-tested). Beside them, views of the batched code that only
tests need (the sampler's orders and their deduplication).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch

from differank.losses.algorithms.permutation_sampler import (
    first_occurrences,
    order_hashes,
    run_sampler,
)

# ---- baseline oracles: RankNet, ListNet ----


def ranknet_oracle(scores, labels):
    """Mean over ordered pairs (i, j), label_i > label_j, of log(1 + exp(-(s_i - s_j)))."""
    terms = [
        torch.nn.functional.softplus(-(scores[i] - scores[j]))
        for i in range(len(labels))
        for j in range(len(labels))
        if labels[i] > labels[j]
    ]
    return torch.stack(terms).mean() if terms else scores.sum() * 0.0


def listnet_oracle(scores, labels):
    """-Σ_i softmax(labels)_i log softmax(scores)_i; 0 when all labels are equal."""
    if len(set(float(label) for label in labels)) < 2:
        return scores.sum() * 0.0
    target = [math.exp(float(label)) for label in labels]
    total = sum(target)
    log_z = torch.logsumexp(scores, dim=0)
    return -sum((target[i] / total) * (scores[i] - log_z) for i in range(len(labels)))


# ---- LETOR 4.0 metric oracles (docs/metrics.md#the-letor-script-rules) ----


def letor_query_metrics_oracle(scores, labels, ks=(1, 3, 5, 10), short_list="zero"):
    """One query, loop by loop as ``Eval-Score-4.0.pl`` (LETOR 4.0) does it
    (docs/metrics.md#the-letor-script-rules).

    ``scores``/``labels``: the query's documents in file order (plain numbers). The script's
    hashes ``{0:0, 1:1, 2:3}`` and ``{0:0, 1:1, 2:1}`` are written as ``2^l - 1`` and ``l > 0``
    (docs/metrics.md#relevance-and-gains). ``short_list="ndcg_at_n"`` reports NDCG@n for k > n
    instead of the script's
    undef-as-0. Returns plain floats keyed ``map, mean_ndcg, ndcg@k, p@k``.
    """
    scores = [float(s) for s in scores]
    labels = [float(r) for r in labels]

    def gain(r):  # %hsNdcgRelScore
        return 2.0**r - 1.0

    def is_rel(r):  # %hsPrecisionRel
        return r > 0

    # EvalQuery: docs by lineNum, then perl's stable sort { $b{pred} <=> $a{pred} }.
    by_line = list(range(len(scores)))
    docids = sorted(by_line, key=lambda d: scores[d], reverse=True)  # reverse keeps stability
    rates = [labels[d] for d in docids]
    n = len(rates)

    def average_precision(rates):  # sub MAP
        num_relevant = 0
        avg_precision = 0.0
        for i_pos in range(len(rates)):
            if is_rel(rates[i_pos]):
                num_relevant += 1
                avg_precision += num_relevant / (i_pos + 1)
        if num_relevant == 0:
            return 0.0
        return avg_precision / num_relevant

    def precision_at_n(top_n, rates):  # sub PrecisionAtN: holes are irrelevant
        prec = []
        num_relevant = 0
        for i_pos in range(top_n):
            r = rates[i_pos] if i_pos < len(rates) else 0
            if is_rel(r):
                num_relevant += 1
            prec.append(num_relevant / (i_pos + 1))
        return prec

    def dcg(top_n, rates):  # sub DCG
        out = [gain(rates[0])]
        for i_pos in range(1, top_n):
            r = rates[i_pos] if i_pos < len(rates) else 0
            if i_pos < 2:
                out.append(out[i_pos - 1] + gain(r))
            else:
                out.append(out[i_pos - 1] + (gain(r) * math.log(2.0) / math.log(i_pos + 1.0)))
        return out

    def ndcg(top_n, rates):  # sub NDCG
        tmp_dcg = dcg(top_n, rates)
        tmp_ideal = dcg(top_n, sorted(rates, reverse=True))
        out = []
        for i_pos in range(top_n):
            out.append(0)
            if tmp_ideal[i_pos] != 0:
                out[i_pos] = tmp_dcg[i_pos] / tmp_ideal[i_pos]
        return out

    result = {"map": average_precision(rates)}
    ndcg_q = ndcg(n, rates)  # "calculate all possible positions' NDCG for MeanNDCG"
    mean_ndcg = 0.0
    for value in ndcg_q:
        mean_ndcg += value
    result["mean_ndcg"] = mean_ndcg / len(ndcg_q)
    p_at_n = precision_at_n(max(ks), rates)
    for k in ks:
        if k <= n:
            result[f"ndcg@{k}"] = float(ndcg_q[k - 1])
        else:  # the script reads undef (0) past the query's n entries
            result[f"ndcg@{k}"] = 0.0 if short_list == "zero" else float(ndcg_q[n - 1])
    for k in ks:
        result[f"p@{k}"] = p_at_n[k - 1]
    return result


def trec_query_metrics_oracle(scores, labels, ks=(1, 3, 5, 10)):
    """One query with the common NDCG: gain 2^l - 1, discount 1/log2(1 + p), NDCG@k over the
    available list (NDCG@min(k, n)); AP and P@k as in LETOR. Stable ties, plain loops."""
    order = sorted(range(len(scores)), key=lambda d: float(scores[d]), reverse=True)
    rates = [float(labels[d]) for d in order]
    ideal = sorted(rates, reverse=True)
    n = len(rates)

    def dcg_at(rs, k):
        return sum((2.0 ** rs[p - 1] - 1.0) / math.log2(1 + p) for p in range(1, min(k, n) + 1))

    def ndcg_at(k):
        best = dcg_at(ideal, k)
        return dcg_at(rates, k) / best if best > 0 else 0.0

    rel_positions = [p for p in range(1, n + 1) if rates[p - 1] > 0]
    ap = (
        sum((i + 1) / p for i, p in enumerate(rel_positions)) / len(rel_positions)
        if (rel_positions)
        else 0.0
    )
    result = {"map": ap, "mean_ndcg": sum(ndcg_at(k) for k in range(1, n + 1)) / n}
    for k in ks:
        result[f"ndcg@{k}"] = ndcg_at(k)
    for k in ks:
        result[f"p@{k}"] = sum(1 for p in rel_positions if p <= k) / k
    return result


# ---- structured NDCG@k hinge oracles (docs/objectives/hinge.md#the-loss) ----


def _hinge_parts(labels, k):
    """A(r), D(r), gains and ideal DCG@k straight from docs/objectives/hinge.md#the-loss for one
    query."""
    labels = [float(x) for x in labels]

    def weight(r):
        return max(k + 1 - r, 0)

    def discount(r):
        return 1.0 / math.log2(1 + r) if r <= k else 0.0

    gains = [2.0**x - 1.0 for x in labels]
    ideal = sum(g * discount(r) for r, g in enumerate(sorted(gains, reverse=True), start=1))
    return weight, discount, gains, ideal


def hinge_ystar_oracle(scores, labels, ystar="compatible"):
    """1-based positions of y*: (label desc, score desc) or (label desc, index asc)."""
    n = len(labels)
    if ystar == "compatible":
        order = sorted(range(n), key=lambda i: (-float(labels[i]), -float(scores[i]), i))
    else:
        order = sorted(range(n), key=lambda i: (-float(labels[i]), i))
    positions = [0] * n
    for r, i in enumerate(order, start=1):
        positions[i] = r
    return positions


def hinge_brute_force_oracle(scores, labels, k, ystar="compatible"):
    """ξ_q by enumerating every permutation (n <= 7). Returns (value, maximisers, subgradient):
    maximisers is the list of position tuples within 1e-12 of the max, subgradient is
    A(ŷ_i) − A(y*_i) for the first of them. Invalid queries (one label value or N_q = 0) give
    (0, [], zeros)."""
    scores = [float(x) for x in scores]
    n = len(scores)
    weight, discount, gains, ideal = _hinge_parts(labels, k)
    if len({float(x) for x in labels}) < 2 or ideal <= 0:
        return 0.0, [], [0.0] * n
    star = hinge_ystar_oracle(scores, labels, ystar)
    star_value = sum(weight(star[i]) * scores[i] for i in range(n))
    results = []
    for perm in itertools.permutations(range(1, n + 1)):
        ndcg = sum(gains[i] * discount(perm[i]) for i in range(n)) / ideal
        value = 1.0 - ndcg + sum(weight(perm[i]) * scores[i] for i in range(n))
        results.append((value, perm))
    best = max(v for v, _ in results)
    maximisers = [p for v, p in results if v >= best - 1e-12 * max(1.0, abs(best))]
    hat = maximisers[0]
    grad = [float(weight(hat[i]) - weight(star[i])) for i in range(n)]
    return best - star_value, maximisers, grad


def hinge_lsa_oracle(scores, labels, k):
    """Loss-augmented maximum by scipy's linear_sum_assignment on the [n, k'] benefit matrix.

    Returns (max_y [Δ(y) + Σ A(y_i) s_i], positions with k + 1 for documents outside the top k')."""
    from scipy.optimize import linear_sum_assignment

    scores = np.asarray([float(x) for x in scores])
    n = len(scores)
    weight, discount, gains, ideal = _hinge_parts(labels, k)
    top = min(n, k)
    benefit = np.array(
        [
            [weight(r) * scores[i] - gains[i] * discount(r) / ideal for r in range(1, top + 1)]
            for i in range(n)
        ]
    )
    docs, slots = linear_sum_assignment(benefit, maximize=True)
    positions = [k + 1] * n
    for i, r in zip(docs, slots, strict=True):
        positions[i] = int(r) + 1
    return 1.0 + float(benefit[docs, slots].sum()), positions


def hinge_loss_augmented_value_oracle(scores, labels, k, positions):
    """Δ(y) + Σ A(y_i) s_i for a given position vector (positions > k carry nothing)."""
    weight, discount, gains, ideal = _hinge_parts(labels, k)
    ndcg = sum(g * discount(p) for g, p in zip(gains, positions, strict=True)) / ideal
    return 1.0 - ndcg + sum(weight(p) * float(s) for p, s in zip(positions, scores, strict=True))


def ndcg_at_k_loss_side_oracle(scores, labels, k):
    """1 − NDCG@k of sort(s) with the loss-side discount 1/log2(1 + r)
    (docs/objectives/hinge.md#interpretations-chosen)."""
    weight, discount, gains, ideal = _hinge_parts(labels, k)
    order = sorted(range(len(scores)), key=lambda i: -float(scores[i]))
    dcg = sum(gains[i] * discount(r) for r, i in enumerate(order, start=1))
    return 1.0 - dcg / ideal


# ---- domination loss oracles (docs/objectives/domination.md#the-loss) ----


def domination_query_oracle(scores, labels, pairwise_margins=None):
    """One query's domination loss ``Σ_i log(1 + Σ_{j: r_j < r_i} exp(s_j − s_i + Δ(i, j)))``.

    Naive O(n²) loops straight from thesis eqs. 5–6 (docs/objectives/domination.md#margins).
    ``scores`` is a float64 tensor
    (may require grad, so autograd gives the oracle gradient); ``labels`` a list or tensor;
    ``pairwise_margins`` an n×n tensor/array of Δ(i, j) or None (Δ = 0).
    """
    labels = [float(v) for v in labels]
    n = len(labels)
    total = scores.new_zeros(())
    for i in range(n):
        terms = []
        for j in range(n):
            if labels[j] < labels[i]:
                delta = 0.0 if pairwise_margins is None else pairwise_margins[i][j]
                terms.append(torch.exp(scores[j] - scores[i] + delta))
        if terms:
            total = total + torch.log(1 + sum(terms))
    return total


# ---- ConeRank oracles (docs/objectives/conerank.md) ----


def _cone_face_solve(gram, linear, total):
    """min wᵀGw − 2bᵀw on one support: free (total None) or with Σw = total (KKT, lstsq)."""
    size = len(linear)
    if total is None:
        return np.linalg.lstsq(gram, linear, rcond=None)[0]
    kkt = np.zeros((size + 1, size + 1))
    kkt[:size, :size] = 2.0 * gram
    kkt[:size, size] = 1.0
    kkt[size, :size] = 1.0
    rhs = np.concatenate([2.0 * linear, [total]])
    return np.linalg.lstsq(kkt, rhs, rcond=None)[0][:size]


def cone_fold_in_exact(z, basis, constraint="simplex", band=(1.0, 1.0)):
    """Exact fold-in ``argmin_{w ∈ C} ‖z − U w‖²`` by enumerating all 2^K supports (active sets).

    On each support the problem is an equality-constrained least squares solved by its KKT
    system (free sum, or the sum on a face Σw = λ); among the non-negative candidates that meet
    C the best value is the optimum, since the optimum solves the problem on its own support.
    Returns (w [K] numpy, value float).
    """
    z = np.asarray(z, dtype=np.float64)
    basis = np.asarray(basis, dtype=np.float64)
    n_basis = basis.shape[1]
    if constraint == "simplex":
        faces = [1.0]
    elif constraint == "cone":
        faces = [None]
    else:
        faces = [None, band[0], band[1]]
    best_w, best_value = None, math.inf
    if constraint == "cone" or (constraint == "band" and band[0] == 0):
        best_w, best_value = np.zeros(n_basis), float(z @ z)
    for size in range(1, n_basis + 1):
        for support in itertools.combinations(range(n_basis), size):
            columns = basis[:, support]
            gram, linear = columns.T @ columns, columns.T @ z
            for total in faces:
                if total is not None and not math.isfinite(total):
                    continue
                coefficients = _cone_face_solve(gram, linear, total)
                if coefficients.min() < -1e-12:
                    continue
                mass = coefficients.sum()
                if constraint == "band" and not band[0] - 1e-12 <= mass <= band[1] + 1e-12:
                    continue
                w = np.zeros(n_basis)
                w[list(support)] = np.clip(coefficients, 0.0, None)
                residual = z - basis @ w
                value = float(residual @ residual)
                if value < best_value - 1e-15:
                    best_w, best_value = w, value
    return best_w, best_value


def cone_query_loss_oracle(  # alpha: ConeLoss's default, conf/loss/cone.yaml's
    features, labels, basis, alpha=0.102, rho=None, constraint="simplex",
    weighting="label_diff", band=(1.0, 1.0),
):  # fmt: skip
    """One query's ConeRank loss ``(1/n_q) Σ_{r_l > r_m} φ ‖z̃ − U w*‖²`` by naive pair loops.

    ``features`` [n, F] and ``basis`` [F, K] are float64 tensors (may require grad); w* comes
    from :func:`cone_fold_in_exact` and is held fixed, so autograd gives the Danskin gradient
    (docs/objectives/conerank.md#the-loss). Returns a 0-d tensor (0 when the query has no pair).
    """
    labels = [float(v) for v in labels]
    n, n_features = features.shape
    rho = math.sqrt(n_features) if rho is None else rho
    total, count = features.new_zeros(()) + 0.0 * basis.sum(), 0
    for l in range(n):
        for m in range(n):
            if not labels[l] > labels[m]:
                continue
            z = features[l] - features[m]
            norm = math.sqrt(float((z.detach() ** 2).sum()))
            # the norm's gradient at z = 0 is taken as 0, as in the batched code
            norm_term = torch.sqrt((z**2).sum()) if norm > 0 else features.new_zeros(())
            z_tilde = rho * z / (alpha + norm_term)
            w, _ = cone_fold_in_exact(z_tilde.detach().numpy(), basis.detach().numpy(),
                                      constraint, band)  # fmt: skip
            w = torch.as_tensor(w, dtype=basis.dtype)
            residual = z_tilde - basis @ w
            phi = labels[l] - labels[m] if weighting == "label_diff" else 1.0
            total = total + phi * (residual**2).sum()
            count += 1
    return total / max(count, 1)


def distance_to_probability_simplex(z):
    """‖z − P(z)‖² with P the projection onto {w ≥ 0, Σw = 1}, found by bisection on τ."""
    z = np.asarray(z, dtype=np.float64)
    low, high = z.min() - 1.0, z.max()
    for _ in range(200):
        tau = 0.5 * (low + high)
        if np.clip(z - tau, 0.0, None).sum() > 1.0:
            low = tau
        else:
            high = tau
    projection = np.clip(z - 0.5 * (low + high), 0.0, None)
    return float(((z - projection) ** 2).sum())


# ---- ConvexLoss oracles (docs/objectives/convex.md) ----


def sample_orders(scores, tables, **options):
    """The orders ``[B, S, L]`` of
    :func:`differank.losses.algorithms.permutation_sampler.run_sampler` (same keyword options),
    which the loss itself never materialises.

    Example:
        >>> from differank.losses.algorithms.permutation_sampler import query_tables
        >>> labels = torch.tensor([[1.0, 0.0, 2.0, 0.0]])
        >>> mask = torch.tensor([[True, True, True, False]])
        >>> tables = query_tables(labels, mask, delta="ndcg")
        >>> g = torch.Generator().manual_seed(0)
        >>> orders = sample_orders(torch.zeros(1, 4), tables, num_samples=6, generator=g)
        >>> orders.shape, bool((orders[..., 3] == 3).all())  # padding stays last
        (torch.Size([1, 6, 4]), True)
    """
    return run_sampler(scores, tables, keep_orders=True, **options).orders


def distinct_orders(order, tables):
    """``[B, S]`` bool: the first occurrence of each distinct order of a query's real documents
    (slot order is kept, so slot 0 always survives)."""
    return first_occurrences(order_hashes(order, tables))


def convex_delta_oracle(order, labels, delta, ndcg_k=None):
    """Δ(y) of one order (a sequence of real-document indices, rank 1 first), from §5.3."""
    labels = [float(v) for v in labels]
    n = len(labels)
    if delta == "auc":
        pairs = inverted = 0
        for i in range(n):
            for j in range(n):
                if labels[i] > labels[j]:
                    pairs += 1
                    inverted += list(order).index(j) < list(order).index(i)
        return inverted / pairs if pairs else 0.0
    if delta == "map":
        relevant = [labels[d] > 0 for d in order]
        total = sum(relevant)
        if total == 0:
            return 0.0
        hits, precision_sum = 0, 0.0
        for rank, rel in enumerate(relevant, start=1):
            if rel:
                hits += 1
                precision_sum += hits / rank
        return 1.0 - precision_sum / total
    k = n if ndcg_k is None else min(ndcg_k, n)

    def dcg(sequence):
        return sum((2.0 ** labels[d] - 1.0) / math.log2(1.0 + r) for r, d in
                   enumerate(sequence[:k], start=1))  # fmt: skip

    ideal = dcg(sorted(range(n), key=lambda d: -labels[d]))
    return 1.0 - dcg(list(order)) / ideal if ideal > 0 else 0.0


def convex_energy_oracle(order, scores, labels, delta, ndcg_k=None, objective="convex"):
    """E(y) = Δ(y) − w·δφ_po(y) for one order, straight from §5.2 (torch scalar, differentiable).

    w·δφ(y) = (1/|P|) Σ_{(i,j)∈P} (1 − y_ij)(s_i − s_j), y_ij = +1 if i is above j in y.
    """
    n = len(labels)
    position = {d: r for r, d in enumerate(order)}
    pairs = [(i, j) for i in range(n) for j in range(n) if float(labels[i]) > float(labels[j])]
    total = scores.new_zeros(())
    for i, j in pairs:
        y_ij = 1.0 if position[i] < position[j] else -1.0
        total = total + (1.0 - y_ij) * (scores[i] - scores[j])
    linear = -total / max(len(pairs), 1)
    if objective == "convex":
        return linear + convex_delta_oracle(order, labels, delta, ndcg_k)
    return linear


def convex_ideal_order_oracle(labels):
    """y_q: label descending, ties by document index."""
    return tuple(sorted(range(len(labels)), key=lambda d: (-float(labels[d]), d)))


def convex_set_lse_oracle(scores, labels, orders, delta, ndcg_k=None, objective="convex"):
    """Set-LSE of §5.5 over the distinct ``orders`` ∪ {y_q} of one query (torch scalar).

    ``objective="expgain"``: −log Σ_y p(y)(1 − Δ(y)) with p ∝ exp(−w·δφ) on the set.
    """
    distinct = {convex_ideal_order_oracle(labels)} | {tuple(int(d) for d in o) for o in orders}
    distinct = sorted(distinct)
    if objective == "expgain":
        linear = torch.stack([convex_energy_oracle(o, scores, labels, delta, ndcg_k, "mle")
                              for o in distinct])  # fmt: skip
        gain = torch.tensor([1.0 - convex_delta_oracle(o, labels, delta, ndcg_k) for o in distinct],
                            dtype=scores.dtype)  # fmt: skip
        weights = torch.softmax(linear, 0)
        return -torch.log((weights * gain).sum())
    energies = [convex_energy_oracle(o, scores, labels, delta, ndcg_k, objective) for o in distinct]
    return torch.logsumexp(torch.stack(energies), 0)


def convex_exact_oracle(scores, labels, delta, ndcg_k=None, objective="convex"):
    """The exact L_q = log Σ over all n! permutations (n <= 7)."""
    orders = list(itertools.permutations(range(len(labels))))
    return convex_set_lse_oracle(scores, labels, orders, delta, ndcg_k, objective)


def convex_pair_space_oracle(scores, labels):
    """Δ = AUC over the pair-sign space {±1}^|P| by enumerating every sign vector (§5.4)."""
    n = len(labels)
    pairs = [(i, j) for i in range(n) for j in range(n) if float(labels[i]) > float(labels[j])]
    energies = []
    for signs in itertools.product((1.0, -1.0), repeat=len(pairs)):
        loss = sum(1.0 for y in signs if y < 0) / len(pairs)
        w_delta_phi = sum(
            (1.0 - y) * (scores[i] - scores[j]) for y, (i, j) in zip(signs, pairs, strict=True)
        )
        energies.append(loss - w_delta_phi / len(pairs))
    return torch.logsumexp(torch.stack([torch.as_tensor(e) for e in energies]), 0)


# ---- batched views: a per-query oracle applied to a padded batch (tests/loss_registry.py) ----


def per_query_oracle(query_oracle):
    """Turn ``query_oracle(values, labels, *extra)`` (one query's real documents) into a batch
    oracle ``(values [B, L] or [B, L, F], labels [B, L], mask [B, L], *extra) -> [B]``; ``extra``
    are inputs shared by every query (ConeRank's basis).

    A query whose real labels are all equal has no preference pair: 0. Queries are sliced with
    differentiable indexing, so autograd through the result gives the oracle gradient at the
    real documents (0 at padding, which the caller fills with 0).
    """

    def query(values, labels, extra):
        if torch.unique(labels).numel() < 2:  # no preference pair: 0, still in the graph
            return 0.0 * (values.sum() + sum(t.sum() for t in extra))
        return torch.as_tensor(query_oracle(values, labels, *extra)).to(values.dtype).reshape(())

    def batch_oracle(values, labels, mask, *extra):
        return torch.stack([query(values[b][mask[b]], labels[b][mask[b]], extra) for b in
                            range(values.shape[0])])  # fmt: skip

    return batch_oracle


def hinge_query_oracle(scores, labels, k, ystar="compatible"):
    """ξ_q of :func:`hinge_brute_force_oracle` as a differentiable scalar: ŷ and y* are fixed,
    so ξ is linear in s with gradient ``A(ŷ_i) − A(y*_i)`` (docs/objectives/hinge.md#the-loss)."""
    value, _, grad = hinge_brute_force_oracle(scores.detach().tolist(), labels.tolist(), k, ystar)
    slope = torch.tensor(grad, dtype=scores.dtype)
    return value + ((scores - scores.detach()) * slope).sum()


def convex_sampled_oracle(delta="ndcg", ndcg_k=None, objective="convex", **sampler_options):
    """Batch oracle of the sampled :func:`~differank.losses.convex.convex_loss`: the set-LSE of
    :func:`convex_set_lse_oracle` over the orders the sampler draws from the global RNG (the
    caller seeds it as it seeds the loss), translated from slots to real documents."""
    from differank.losses.algorithms.permutation_sampler import query_tables

    def batch_oracle(scores, labels, mask):
        tables = query_tables(labels, mask, delta=delta, ndcg_k=ndcg_k, dtype=scores.dtype)
        target = "convex" if objective == "convex" else "model"
        safe = torch.where(mask, scores, 0.0).detach()
        orders = sample_orders(safe, tables, target=target, **sampler_options)
        values = []
        for b in range(scores.shape[0]):
            slots = mask[b].nonzero().squeeze(-1)
            real_labels = labels[b, slots]
            if torch.unique(real_labels).numel() < 2:
                values.append(0.0 * scores[b].sum())
                continue
            to_real = {int(slot): index for index, slot in enumerate(slots)}
            real_orders = [[to_real[int(d)] for d in row[: len(slots)]] for row in orders[b]]
            values.append(
                convex_set_lse_oracle(
                    scores[b, slots], real_labels, real_orders, delta, ndcg_k, objective
                )
            )
        return torch.stack(values)

    return batch_oracle
