"""Differentiable sorting operators: NeuralSort (Grover et al., ICLR 2019; deterministic and
Gumbel-perturbed), SoftSort (Prillo & Eisenschlos, ICML 2020) and Sinkhorn scaling to a doubly
stochastic matrix; docs/objectives/standard.md#differentiable-sorting.

A relaxed permutation matrix ``P`` is [B, L, L] with rows for the sorted positions (descending:
row 0 is the top) and columns for the documents. With a mask, a query of ``n`` real documents
uses rows ``0..n-1`` and its real columns; every other entry is 0. Padded slots are never read.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from differank.losses.inputs import may_read_values

SINKHORN_EPS = 1e-10  # allRank's clamp of row and column sums


def _checked_scores(
    scores: torch.Tensor, mask: torch.Tensor | None, temperature: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mask, scores with 0 at padded slots)`` after checking the temperature (when there is
    one); ``mask=None``: every slot is real."""
    if temperature is not None and not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    mask = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask
    return mask, torch.where(mask, scores, torch.zeros_like(scores))


def position_mask(mask: torch.Tensor) -> torch.Tensor:
    """``[B, L]`` bool: position ``p`` is real when ``p <`` the query's number of real documents."""
    count = mask.sum(dim=-1, keepdim=True)
    return torch.arange(mask.shape[-1], device=mask.device) < count


def _masked_rows(logits: torch.Tensor, rows: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """Row softmax over the real columns, with the padded rows and columns exactly 0."""
    logits = torch.where(columns.unsqueeze(-2), logits, torch.full_like(logits, float("-inf")))
    logits = torch.where(rows.unsqueeze(-1), logits, torch.zeros_like(logits))  # finite rows
    probabilities = logits.softmax(dim=-1)
    both = rows.unsqueeze(-1) & columns.unsqueeze(-2)
    return torch.where(both, probabilities, torch.zeros_like(probabilities))


def neural_sort(
    scores: torch.Tensor, mask: torch.Tensor | None = None, *, temperature: float = 1.0
) -> torch.Tensor:
    """NeuralSort's relaxed sorting matrix (Grover et al. 2019), rows in descending order.

    For a query of ``n`` real documents, row ``p = 1..n`` is
    ``softmax_d( ((n + 1 - 2p)·s_d - Σ_e |s_d - s_e|) / temperature )`` over the real documents;
    as ``temperature -> 0`` it tends to the sorting permutation. Scores must be finite at real
    slots; padded slots are never read.

    Shape:
        scores, mask: [B, L] -> [B, L, L]. Memory: a few [B, L, L].

    Example:
        >>> neural_sort(torch.tensor([[0.0, 10.0]]), temperature=0.1).round()
        tensor([[[0., 1.],
                 [1., 0.]]])
    """
    mask, safe = _checked_scores(scores, mask, temperature)
    spread = (safe.unsqueeze(-1) - safe.unsqueeze(-2)).abs()
    spread = torch.where(mask.unsqueeze(-2), spread, torch.zeros_like(spread)).sum(dim=-1)  # [B, L]
    count = mask.sum(dim=-1, keepdim=True).to(scores.dtype)
    positions = torch.arange(1, scores.shape[-1] + 1, device=scores.device, dtype=scores.dtype)
    coefficient = count + 1.0 - 2.0 * positions  # [B, L], per row
    logits = (coefficient.unsqueeze(-1) * safe.unsqueeze(-2) - spread.unsqueeze(-2)) / temperature
    return _masked_rows(logits, position_mask(mask), mask)


def gumbel_perturbed_scores(
    scores: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    n_samples: int = 32,
    beta: float = 0.1,
    log_scores: bool = True,
    eps: float = 1e-10,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``n_samples`` Gumbel perturbations of the scores, for stochastic NeuralSort (Grover et al.
    2019, section 4.1, with allRank's scaling ``beta`` and log of the shifted scores).

    Each query's scores are shifted by its real minimum (not the batch's, as allRank: padding is
    never read), optionally logged (``log(s - min + eps)``), and perturbed by ``beta·g`` with
    ``g = -log(-log(U + eps) + eps)``, ``U ~ U(0, 1)`` from ``generator`` (default: the global
    stream).

    Shape:
        scores, mask: [B, L] -> [n_samples, B, L].
    """
    if n_samples < 1:
        raise ValueError(f"n_samples must be >= 1, got {n_samples!r}")
    mask, safe = _checked_scores(scores, mask)
    lowest = torch.where(mask, safe, torch.full_like(safe, float("inf"))).amin(dim=-1, keepdim=True)
    shifted = torch.where(mask, safe - torch.where(lowest.isfinite(), lowest, 0.0), 0.0)
    if log_scores:
        shifted = torch.log(shifted + eps)
    uniform = torch.rand(
        (n_samples,) + tuple(scores.shape),
        generator=generator,
        device=scores.device,
        dtype=scores.dtype,
    )
    gumbel = -torch.log(-torch.log(uniform + eps) + eps)
    return shifted.unsqueeze(0) + beta * gumbel


def soft_sort(
    scores: torch.Tensor, mask: torch.Tensor | None = None, *, temperature: float = 1.0
) -> torch.Tensor:
    """SoftSort's relaxed sorting matrix (Prillo & Eisenschlos 2020), descending:
    row ``p`` is ``softmax_d(-|sort(s)_p - s_d| / temperature)`` over the real documents.

    Shape:
        scores, mask: [B, L] -> [B, L, L]. Memory: a few [B, L, L].

    Example:
        >>> soft_sort(torch.tensor([[1.0, 3.0, 2.0]]), temperature=0.01).argmax(dim=-1)
        tensor([[1, 2, 0]])
    """
    mask, safe = _checked_scores(scores, mask, temperature)
    key = torch.where(mask, safe, torch.full_like(safe, float("-inf")))
    ordered = safe.gather(-1, key.argsort(dim=-1, descending=True, stable=True))
    logits = -(ordered.unsqueeze(-1) - safe.unsqueeze(-2)).abs() / temperature
    return _masked_rows(logits, position_mask(mask), mask)


def soft_rank(
    scores: torch.Tensor, mask: torch.Tensor | None = None, *, temperature: float = 1.0
) -> torch.Tensor:
    """Each document's expected 1-based position under :func:`soft_sort` (``Σ_p p·P[p, d]``);
    0 at padded slots.

    Shape:
        scores, mask: [B, L] -> [B, L].

    Example:
        >>> soft_rank(torch.tensor([[0.0, 10.0, 5.0]]), temperature=0.01)
        tensor([[3., 1., 2.]])
    """
    matrix = soft_sort(scores, mask, temperature=temperature)
    positions = torch.arange(1, scores.shape[-1] + 1, device=scores.device, dtype=matrix.dtype)
    return (matrix * positions.unsqueeze(-1)).sum(dim=-2)


class _Step(NamedTuple):
    """What one Sinkhorn iteration saves for the backward pass (per query: [B, L] each)."""

    row_scale: torch.Tensor
    column_scale: torch.Tensor
    column_mass: torch.Tensor
    column_sums: torch.Tensor
    new_columns: torch.Tensor
    row_mass: torch.Tensor
    row_sums: torch.Tensor
    frozen: torch.Tensor  # [B, 1]: the query had converged before this iteration


_STEP_SIZE = len(_Step._fields)


def _normalisation_backward(
    grad_new: torch.Tensor,
    grad_scale: torch.Tensor,
    scale: torch.Tensor,
    sums: torch.Tensor,
    mass: torch.Tensor,
    real: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Through ``new = scale / max(sums, eps)`` with ``sums = scale ⊙ mass`` on the ``real``
    entries: ``grad_scale`` plus the new scale's share, and the gradient of ``mass``."""
    clamped = sums.clamp(min=SINKHORN_EPS)
    grad_scale = grad_scale + grad_new / clamped
    grad_sums = -grad_new * scale / clamped.square()
    grad_sums = torch.where(real & (sums >= SINKHORN_EPS), grad_sums, 0.0)
    return grad_scale + grad_sums * mass, grad_sums * scale


class _SinkhornScalings(torch.autograd.Function):
    """Sinkhorn's scaling vectors with the exact gradient of the unrolled iterations, written
    out: the backward pass runs the iterations in reverse on vectors and gathers the matrix's
    gradient, a sum of two outer products per iteration, as one [N, L, 2T] x [N, 2T, L]
    product (autograd would allocate and add one [N, L, L] tensor per product)."""

    @staticmethod
    def forward(ctx, matrix, rows, columns, tolerance, max_iterations):
        row_scale = torch.ones(matrix.shape[:-1], dtype=matrix.dtype, device=matrix.device)
        column_scale = torch.ones_like(row_scale)
        done = torch.zeros(matrix.shape[:1], dtype=torch.bool, device=matrix.device)
        row_error = torch.zeros_like(row_scale)
        steps = []
        for iteration in range(max_iterations):
            column_mass = (row_scale.unsqueeze(-2) @ matrix).squeeze(-2)  # u = rᵀM
            column_sums = torch.where(columns, column_scale * column_mass, 1.0)
            if iteration > 0:  # the previous iteration's result, as allRank tests after each
                column_error = torch.where(columns, (column_sums - 1.0).abs(), 0.0)
                error = torch.maximum(column_error.amax(dim=-1), row_error.amax(dim=-1))
                done = done | (error < tolerance)
                if may_read_values(done) and bool(done.all()):
                    break  # CPU eager: nothing left to do (frozen iterations change nothing)
            new_columns = column_scale / column_sums.clamp(min=SINKHORN_EPS)
            row_mass = (matrix @ new_columns.unsqueeze(-1)).squeeze(-1)  # v = M c'
            row_sums = torch.where(rows, row_scale * row_mass, 1.0)
            clamped = row_sums.clamp(min=SINKHORN_EPS)
            row_error = torch.where(rows, (row_sums / clamped - 1.0).abs(), 0.0)
            steps.append(
                _Step(
                    row_scale,
                    column_scale,
                    column_mass,
                    column_sums,
                    new_columns,
                    row_mass,
                    row_sums,
                    frozen=done.unsqueeze(-1),
                )  # fmt: skip
            )
            frozen = done.unsqueeze(-1)
            row_scale = torch.where(frozen, row_scale, row_scale / clamped)
            column_scale = torch.where(frozen, column_scale, new_columns)
        ctx.save_for_backward(matrix, rows, columns, *[t for step in steps for t in step])
        ctx.iterations = len(steps)
        return row_scale, column_scale

    @staticmethod
    def backward(ctx, grad_rows, grad_columns):
        matrix, rows, columns, *saved = ctx.saved_tensors
        left, right = [], []  # grad_matrix = Σ left_k right_kᵀ
        for t in reversed(range(ctx.iterations)):
            step = _Step(*saved[_STEP_SIZE * t : _STEP_SIZE * (t + 1)])
            zero = torch.zeros_like(grad_rows)
            grad_new_rows = torch.where(step.frozen, zero, grad_rows)
            grad_new_columns = torch.where(step.frozen, zero, grad_columns)
            grad_row_scale = torch.where(step.frozen, grad_rows, zero)
            grad_column_scale = torch.where(step.frozen, grad_columns, zero)
            # r' = r / max(row_sums, eps), row_sums = r ⊙ v on real rows
            grad_row_scale, grad_row_mass = _normalisation_backward(
                grad_new_rows, grad_row_scale, step.row_scale, step.row_sums, step.row_mass, rows
            )
            # v = M c'
            grad_new_columns = grad_new_columns + (grad_row_mass.unsqueeze(-2) @ matrix).squeeze(-2)
            left.append(grad_row_mass)
            right.append(step.new_columns)
            # c' = c / max(column_sums, eps), column_sums = c ⊙ u on real columns
            grad_column_scale, grad_column_mass = _normalisation_backward(
                grad_new_columns,
                grad_column_scale,
                step.column_scale,
                step.column_sums,
                step.column_mass,
                columns,
            )
            # u = rᵀ M
            grad_row_scale = grad_row_scale + (matrix @ grad_column_mass.unsqueeze(-1)).squeeze(-1)
            left.append(step.row_scale)
            right.append(grad_column_mass)
            grad_rows, grad_columns = grad_row_scale, grad_column_scale
        if not left:
            return torch.zeros_like(matrix), None, None, None, None
        # the outer products in iteration order: a query's iterations come first and the frozen
        # ones after it add exact zeros, so its gradient does not depend (even by rounding) on
        # how many iterations the rest of its batch ran
        grad_matrix = torch.stack(left[::-1], dim=-1) @ torch.stack(right[::-1], dim=-2)
        return grad_matrix, None, None, None, None


def sinkhorn_scalings(
    matrix: torch.Tensor,
    rows: torch.Tensor,
    columns: torch.Tensor,
    *,
    tolerance: float = 1e-6,
    max_iterations: int = 50,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sinkhorn's alternating column and row normalisation, kept as the two scaling vectors.

    Iteration t divides the columns of ``diag(r) M diag(c)`` by their sums, then its rows (each
    sum clamped at 1e-10, as allRank). A query stops once every real row and column sums to 1
    within ``tolerance`` (allRank's test, here per query: no host read, and a query's result
    does not depend on its batch). The matrix is only multiplied with vectors (2 per iteration,
    4 in the backward pass), so memory stays O(L²) however many iterations run. ``matrix`` must
    be 0 outside the real ``rows`` x ``columns`` block. The gradient is that of the unrolled
    iterations (as autograd through allRank's loop gives).

    Shape:
        matrix: [N, L, L]; rows, columns: [N, L] bool -> (r [N, L], c [N, L]).
    """
    return _SinkhornScalings.apply(matrix, rows, columns, tolerance, max_iterations)


def sinkhorn(
    matrix: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    tolerance: float = 1e-6,
    max_iterations: int = 50,
) -> torch.Tensor:
    """The doubly stochastic scaling ``diag(r) M diag(c)`` of a relaxed permutation matrix from
    :func:`neural_sort` or :func:`soft_sort` (see :func:`sinkhorn_scalings`).

    ``mask`` is the documents' mask; rows use :func:`position_mask`. Entries outside the real
    block must be 0 (as the sorting operators give).

    Shape:
        matrix: [B, L, L]; mask: [B, L] -> [B, L, L].

    Example:
        >>> sinkhorn(torch.tensor([[[4.0, 2.0], [1.0, 1.0]]])).round(decimals=4)
        tensor([[[0.5858, 0.4142],
                 [0.4142, 0.5858]]])
    """
    if mask is None:
        mask = torch.ones(matrix.shape[:-1], dtype=torch.bool, device=matrix.device)
    row_scale, column_scale = sinkhorn_scalings(
        matrix,
        position_mask(mask),
        mask,
        tolerance=tolerance,
        max_iterations=max_iterations,
    )
    return row_scale.unsqueeze(-1) * matrix * column_scale.unsqueeze(-2)
