"""NeuralNDCG: NDCG of the NeuralSort relaxation made doubly stochastic by Sinkhorn scaling
(Pobrotyn & Białobrzeski, 2021); docs/objectives/standard.md#neuralndcg."""

from __future__ import annotations

import torch

from differank.losses.algorithms.dcg import dcg_gains, ideal_dcg, position_discounts
from differank.losses.algorithms.soft_sorting import (
    gumbel_perturbed_scores,
    neural_sort,
    position_mask,
    sinkhorn_scalings,
)
from differank.losses.inputs import (
    decorated_mask,
    finite_scores,
    list_inputs,
    list_loss,
    nan_for_nonfinite_scores,
)
from differank.losses.module_form import PAIRWISE, LossModule
from differank.losses.options import COUNT, NON_NEGATIVE, OPTIONAL_COUNT, POSITIVE
from differank.losses.reduction import check_reduction, reduce_queries

IDCG_EPS = 1e-10  # allRank's DEFAULT_EPS added to the ideal DCG


def check_neural_options(
    temperature: float,
    k: int | None,
    n_samples: int,
    beta: float,
    iterations: int,
    tolerance: float,
) -> None:
    """Raise ValueError for a temperature not > 0, ``k``, ``n_samples`` or ``iterations`` < 1,
    or a negative ``beta`` or tolerance (each finite)."""
    POSITIVE.check("neural_ndcg_loss", temperature=temperature)
    OPTIONAL_COUNT.check("neural_ndcg_loss", k=k)
    COUNT.check("neural_ndcg_loss", n_samples=n_samples, sinkhorn_iterations=iterations)
    NON_NEGATIVE.check("neural_ndcg_loss", beta=beta, sinkhorn_tolerance=tolerance)


@list_loss()
def neural_ndcg_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    temperature: float = 1.0,
    k: int | None = None,
    powered_relevancies: bool = True,
    transposed: bool = False,
    stochastic: bool = False,
    n_samples: int = 32,
    beta: float = 0.1,
    log_scores: bool = True,
    sinkhorn_tolerance: float = 1e-6,
    sinkhorn_iterations: int = 50,
    reduction: str = "mean",
) -> torch.Tensor:
    """Minus NeuralNDCG@k (Pobrotyn & Białobrzeski 2021), as allRank computes it.

    ``P̂ = sinkhorn(neural_sort(s, temperature))`` (rows: positions, columns: documents), then

    * default: ``NDCG = Σ_{p<k} (P̂ g)_p / log2(1 + p) / (IDCG@k + 1e-10)``, the expected gain at
      each position;
    * ``transposed=True``: ``NDCG = Σ_d g_d (P̂ᵀ disc_k)_d / (IDCG@k + 1e-10)``, each document's
      expected discount (NeuralNDCG-Transposed),

    with gains ``g = 2^l - 1`` (``l`` if not ``powered_relevancies``; the ideal DCG uses the same
    gains). ``stochastic=True`` averages over ``n_samples`` Gumbel-perturbed sorts
    (:func:`~differank.losses.algorithms.soft_sorting.gumbel_perturbed_scores`, drawn from the
    global random stream). Sinkhorn runs at most ``sinkhorn_iterations`` and stops per query at
    ``sinkhorn_tolerance``. Inputs follow ``differank.losses.inputs``.

    Shape:
        scores, labels, mask: [B, L] -> [B] for ``reduction="none"``, else a scalar.
        Memory: a few [B, L, L] (times ``n_samples`` when stochastic); the Sinkhorn iterations
        only keep vectors.

    Example:
        >>> scores = torch.tensor([[5.0, -5.0, 0.0]])
        >>> labels = torch.tensor([[1.0, 0.0, float("nan")]])
        >>> mask = torch.tensor([[True, True, False]])
        >>> neural_ndcg_loss(scores, labels, mask).round(decimals=3)
        tensor(-1.)
    """
    check_reduction(reduction)
    check_neural_options(temperature, k, n_samples, beta, sinkhorn_iterations, sinkhorn_tolerance)
    scores, labels, mask, valid = list_inputs(scores, labels, decorated_mask(mask))
    safe = finite_scores(scores, mask)
    gains = dcg_gains(labels, mask, powered=powered_relevancies)
    ideal = ideal_dcg(gains, k)
    length = scores.shape[-1]
    discounts = position_discounts(length, safe)
    if k is not None:
        discounts = torch.where(torch.arange(length, device=safe.device) < k, discounts, 0.0)

    samples = 1
    sorted_scores = safe
    if stochastic:
        samples = n_samples
        sorted_scores = gumbel_perturbed_scores(
            safe, mask, n_samples=n_samples, beta=beta, log_scores=log_scores
        ).flatten(0, 1)
    documents = mask.repeat(samples, 1)
    matrix = neural_sort(sorted_scores, documents, temperature=temperature)
    row_scale, column_scale = sinkhorn_scalings(
        matrix,
        position_mask(documents),
        documents,
        tolerance=sinkhorn_tolerance,
        max_iterations=sinkhorn_iterations,
    )
    sample_gains = gains.repeat(samples, 1)
    if transposed:  # each document's expected discount under P̂ = diag(r) M diag(c)
        expected = (matrix.transpose(-1, -2) @ (row_scale * discounts).unsqueeze(-1)).squeeze(-1)
        dcg = (sample_gains * column_scale * expected).sum(dim=-1)
    else:  # each position's expected gain
        expected = (matrix @ (column_scale * sample_gains).unsqueeze(-1)).squeeze(-1)
        dcg = (discounts * row_scale * expected).sum(dim=-1)
    ndcg = dcg.reshape(samples, -1).mean(dim=0) / (ideal + IDCG_EPS)
    per_query = nan_for_nonfinite_scores(-ndcg, scores, mask, valid)
    return reduce_queries(per_query, valid, reduction)


class NeuralNDCGLoss(LossModule, function=neural_ndcg_loss, memory=PAIRWISE):
    """Module form of :func:`neural_ndcg_loss`."""
