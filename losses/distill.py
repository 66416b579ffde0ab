"""Distillation: a student's scores fitted to a teacher's scores of the same documents, optionally
mixed with a label loss (docs/objectives/distill.md).

Three forms, one per entry of :data:`FORMS`:

* ``listwise``: listwise knowledge distillation (Hinton et al. 2015 applied to a query's list):
  ``τ² · CE(softmax(t/τ), softmax(s/τ))`` over the query's real documents.
* ``regression``: score regression, the mean squared difference ``(1/n) Σ_i (s_i − t_i)²``.
* ``rankdistil``: RankDistil's top-k Plackett–Luce form (Reddi et al., AISTATS 2021; TF-Ranking's
  ``CoupledRankDistilLoss``): orders π are sampled from the teacher's Plackett–Luce distribution
  with logits ``t/τ`` (Gumbel-perturbed sort), and the loss is the mean over the samples of the
  student's top-k Plackett–Luce negative log-likelihood
  ``−Σ_{i≤k} [s_π(i)/τ − log Σ_{j≥i} exp(s_π(j)/τ)]``.

The loss is ``(1 − α) · L_distill + α · L_label`` per query, ``L_label`` any differank loss
module built with ``reduction="none"``. Distillation needs no labels: every query with a real
document counts, also one whose labels are all equal (28% of MQ2008's fold-1 training queries),
which gets ``(1 − α) · L_distill`` since the label loss keeps its own rule (such a query gets 0
from it). The mean is over the counted queries; with ``α = 1`` the teacher has no weight and the
loss is the label loss, counting its queries (:func:`counted_queries`). A query with a
non-finite label is dropped, as by every differank loss (the input rule of
``differank.losses.inputs``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from differank.losses.inputs import (
    bool_mask,
    compute_dtype,
    decorated_mask,
    finite_label_mask,
    finite_scores,
    float_labels,
    in_dtype,
    list_inputs,
    list_loss,
    nan_for_nonfinite_scores,
    query_documents,
)
from differank.losses.module_form import LISTWISE, ListMemory
from differank.losses.options import COUNT, OPTIONAL_COUNT, POSITIVE, Allowed
from differank.losses.reduction import check_reduction, reduce_queries
from differank.losses.softmax import softmax_cross_entropy

WEIGHT = Allowed(low=0.0, high=1.0)


def listwise_distillation(
    scores: torch.Tensor,
    teacher: torch.Tensor,
    real: torch.Tensor,
    temperature: float,
    top_k: int | None,
    num_samples: int,
) -> torch.Tensor:
    """``τ² · (−Σ_i softmax(t/τ)_i log softmax(s/τ)_i)`` per query [B] over ``real`` (the τ²
    keeps the gradient's size as τ grows, Hinton et al. 2015)."""
    targets = torch.where(real, teacher / temperature, torch.finfo(teacher.dtype).min)
    return temperature**2 * softmax_cross_entropy(scores / temperature, real, targets.softmax(-1))


def score_regression(
    scores: torch.Tensor,
    teacher: torch.Tensor,
    real: torch.Tensor,
    temperature: float,
    top_k: int | None,
    num_samples: int,
) -> torch.Tensor:
    """``(1/n) Σ_i (s_i − t_i)²`` per query [B] over its ``n`` real documents."""
    squared = torch.where(real, (scores - teacher).square(), 0.0).sum(dim=-1)
    return squared / real.sum(dim=-1).clamp(min=1)


def rankdistil(
    scores: torch.Tensor,
    teacher: torch.Tensor,
    real: torch.Tensor,
    temperature: float,
    top_k: int | None,
    num_samples: int,
) -> torch.Tensor:
    """The mean over ``num_samples`` teacher orders of the student's top-k Plackett–Luce
    negative log-likelihood, per query [B]. One ``torch.rand`` draw of [B, S, L] in the scores'
    dtype (the Gumbel noise) is the only randomness."""
    lowest = torch.finfo(scores.dtype).min
    batch, length = scores.shape
    uniform = torch.rand(batch, num_samples, length, dtype=scores.dtype, device=scores.device)
    gumbel = -torch.log(-torch.log(uniform.clamp(min=torch.finfo(scores.dtype).tiny)))
    # padding sorts last (key -inf), so each sampled order lists the real documents first
    keys = torch.where(real.unsqueeze(1), teacher.unsqueeze(1) / temperature + gumbel, -torch.inf)
    order = keys.argsort(dim=-1, descending=True)  # [B, S, L]
    student = torch.where(real, scores / temperature, lowest).unsqueeze(1).expand_as(order)
    ordered = student.gather(-1, order)
    # log Σ_{j ≥ i} exp(s_π(j)): a reversed cumulative logsumexp (padding adds exp(min) = 0)
    remaining = ordered.flip(-1).logcumsumexp(dim=-1).flip(-1)
    counted = real.unsqueeze(1).expand_as(order).gather(-1, order)
    if top_k is not None:
        counted = counted & (torch.arange(length, device=scores.device) < top_k)
    log_likelihood = torch.where(counted, ordered - remaining, 0.0).sum(dim=-1)
    return -log_likelihood.mean(dim=-1)


def counted_queries(mask: torch.Tensor, pairs: torch.Tensor, alpha: float) -> torch.Tensor:
    """[B] bool: the queries the loss counts, those a term of non-zero weight has a value for.
    The teacher orders any query with a real document (``mask``, the input rule applied); the
    label loss only a query with a preference pair (``pairs``).

    Example:
        >>> mask = torch.tensor([[True, True], [True, True], [False, False]])
        >>> pairs = torch.tensor([True, False, False])  # query 1: labels all equal
        >>> counted_queries(mask, pairs, alpha=0.5), counted_queries(mask, pairs, alpha=1.0)
        (tensor([ True,  True, False]), tensor([ True, False, False]))
    """
    return mask.any(dim=-1) if alpha < 1 else pairs


# form name -> per-query distillation term (scores, teacher, real, temperature, top_k, samples)
FORMS: dict[str, Callable[..., torch.Tensor]] = {
    "listwise": listwise_distillation,
    "regression": score_regression,
    "rankdistil": rankdistil,
}


@list_loss()
def distill_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None,
    teacher_scores: torch.Tensor,
    *,
    form: str = "listwise",
    alpha: float = 0.0,
    label_loss: nn.Module | None = None,
    temperature: float = 1.0,
    top_k: int | None = None,
    num_samples: int = 8,
    reduction: str = "mean",
) -> torch.Tensor:
    """``(1 − α) · L_distill(s, t) + α · L_label(s, labels)`` per query
    (docs/objectives/distill.md).

    Args:
        teacher_scores: the teacher's score of every document, like ``scores`` (its padding is
            never read; no gradient flows into it).
        form: a key of :data:`FORMS` (``listwise``, ``regression``, ``rankdistil``).
        alpha: weight of the label loss in [0, 1]; ``alpha > 0`` needs ``label_loss``.
        label_loss: a differank loss module with ``reduction="none"`` (e.g. ``ListNetLoss``).
        temperature: τ > 0, divides teacher and student scores (listwise, rankdistil).
        top_k: rankdistil's k (None: the whole list).
        num_samples: rankdistil's number of sampled teacher orders.

    Shape:
        scores, labels, mask, teacher_scores: [B, L] -> [B] for ``reduction="none"``, else a
        scalar.

    Example:
        >>> scores = torch.tensor([[0.0, 0.0]])
        >>> distill_loss(scores, torch.tensor([[1, 0]]), None, torch.tensor([[9.0, 9.0]]))
        tensor(0.6931)
        >>> equal_labels = torch.tensor([[1, 1]])  # no pair, but the teacher still counts
        >>> distill_loss(scores, equal_labels, None, torch.tensor([[9.0, 0.0]]))
        tensor(0.6931)
    """
    check_reduction(reduction)
    if form not in FORMS:
        raise ValueError(f"distill_loss: form must be one of {tuple(FORMS)}, got {form!r}")
    WEIGHT.check("distill_loss", alpha=alpha)
    POSITIVE.check("distill_loss", temperature=temperature)
    OPTIONAL_COUNT.check("distill_loss", top_k=top_k)
    COUNT.check("distill_loss", num_samples=num_samples)
    if alpha > 0 and label_loss is None:
        raise ValueError("distill_loss: alpha > 0 mixes in a label loss; give label_loss=...")
    if teacher_scores.dim() == 1 and scores.dim() == 2 and scores.shape[0] == 1:
        teacher_scores = teacher_scores.unsqueeze(0)  # one unbatched query, like the scores
    if teacher_scores.shape != scores.shape:
        raise ValueError(
            f"teacher_scores must match scores {list(scores.shape)}, got shape "
            f"{tuple(teacher_scores.shape)}: one teacher score per document"
        )
    mask = decorated_mask(mask)
    # one cast to the compute dtype, shared by both terms: their gradients add up before the
    # single cast back to a half input's dtype
    scores = in_dtype(scores, compute_dtype(scores.dtype))
    raw_scores, raw_labels, raw_mask = scores, labels, mask
    scores, labels, mask, pairs = list_inputs(scores, labels, mask)
    valid = counted_queries(mask, pairs, alpha)
    teacher = teacher_scores.detach().to(scores.dtype)
    if teacher.shape[1] < scores.shape[1]:  # L = 0 was given one padded slot
        teacher = torch.zeros_like(scores)
    real = query_documents(mask, valid)
    safe_teacher = torch.where(real, teacher, 0.0)
    term = FORMS[form](
        finite_scores(scores, real), safe_teacher, real, temperature, top_k, num_samples
    )
    per_query = torch.where(valid, term, 0.0)
    if alpha > 0 and label_loss is not None:
        label_term = label_loss(raw_scores, raw_labels, raw_mask)  # 0 where it has no pair
        if label_term.shape != per_query.shape:
            raise ValueError(
                f"label_loss must give one loss per query [{per_query.shape[0]}] (build it with "
                f"reduction='none'), got shape {tuple(label_term.shape)}"
            )
        per_query = (1.0 - alpha) * per_query + alpha * label_term.to(per_query.dtype)
    per_query = nan_for_nonfinite_scores(per_query, scores, mask, valid)
    return reduce_queries(per_query, valid, reduction)


class DistillLoss(nn.Module):
    """Module form of :func:`distill_loss` (``loss=distill``): ``forward(scores, labels, mask,
    teacher_scores)``; in training the teacher's scores come from the run's teacher
    (:mod:`differank.rankers.run.teacher_scores`). ``label_loss`` is a submodule.

    Example:
        >>> from differank.losses.listnet import ListNetLoss
        >>> loss = DistillLoss(alpha=0.5, label_loss=ListNetLoss(reduction="none"))
        >>> loss(torch.zeros(1, 2), torch.tensor([[1, 0]]), None, torch.zeros(1, 2))
        tensor(0.6931)
    """

    def __init__(
        self,
        *,
        form: str = "listwise",
        alpha: float = 0.0,
        label_loss: nn.Module | None = None,
        temperature: float = 1.0,
        top_k: int | None = None,
        num_samples: int = 8,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        self.form, self.alpha, self.label_loss = form, alpha, label_loss
        self.temperature, self.top_k, self.num_samples = temperature, top_k, num_samples
        self.reduction = reduction
        # refuse bad options now, as a call would (the RNG forked: rankdistil draws)
        with torch.random.fork_rng(devices=[]):
            self(torch.zeros(1, 2), torch.tensor([[1.0, 0.0]]), None, torch.zeros(1, 2))

    def forward(
        self,
        scores: torch.Tensor,
        labels: torch.Tensor,
        mask: torch.Tensor | None,
        teacher_scores: torch.Tensor,
    ) -> torch.Tensor:
        """The loss function with this module's options.

        Shape:
            scores [B, L] (one query: [L]); labels, mask, teacher_scores like scores
            (``mask=None``: every document is real) -> [B] for ``reduction="none"``, else a
            scalar.
        """
        return distill_loss(
            scores,
            labels,
            mask,
            teacher_scores,
            form=self.form,
            alpha=self.alpha,
            label_loss=self.label_loss,
            temperature=self.temperature,
            top_k=self.top_k,
            num_samples=self.num_samples,
            reduction=self.reduction,
        )

    def counted_queries(self, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """[B] bool: the queries this loss counts in a batch (``labels``, ``mask`` [B, L]), for
        a caller that weighs its per-query values (query weights): every query with a real
        document, labels all equal or not (:func:`counted_queries`)."""
        dtype = compute_dtype(labels.dtype) if labels.is_floating_point() else torch.float32
        real, pairs = finite_label_mask(float_labels(labels, dtype), bool_mask(mask))
        return counted_queries(real, pairs, self.alpha)

    @property
    def memory(self) -> ListMemory:
        """The distillation terms are O(B·L) (RankDistil's samples: O(B·S·L)); the label loss,
        when there is one, may need more."""
        own = ListMemory(power=1, tensors=LISTWISE.tensors + 2 * self.num_samples)
        label = getattr(self.label_loss, "memory", own)
        return label if (label.power, label.tensors) > (own.power, own.tensors) else own

    def extra_repr(self) -> str:
        return (
            f"form={self.form!r}, alpha={self.alpha}, temperature={self.temperature}, "
            f"top_k={self.top_k}, num_samples={self.num_samples}, reduction={self.reduction!r}"
        )
