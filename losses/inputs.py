"""The input rule every loss follows, and the helpers that apply it (one helper per idea).

Every loss accepts whatever ``(scores, labels, mask)`` its shapes allow and treats it the same:

* **Shapes.** ``scores [B, L]`` (ConeRank: ``features [B, L, F]``), ``labels`` and ``mask``
  ``[B, L]``. One query may be given unbatched, ``[L]`` (``[L, F]``): it is the batch ``B = 1``
  and ``reduction="none"`` returns its loss as a 0-dim tensor, as torch's losses do for
  unbatched input (:func:`list_loss`; extra tensors such as margins or samples keep their
  batched shapes). ``B = 0`` or ``L = 0`` is a batch without a preference pair: the loss is 0,
  with a zero gradient that is still connected to the graph (:func:`nonempty_lists`).
* **Mask.** ``mask=None`` means every document is real. A mask may be bool or hold 0/1 in an
  integer or floating dtype (:func:`bool_mask`); other values are a ValueError on the CPU eager
  path, and count as real documents (non-zero) where values are not read.
* **Labels** may be any real, integer or bool dtype (:func:`float_labels`). A query with a
  non-finite label (NaN, ±inf) at a real document is dropped: it has no preference pair, so its
  loss is 0 with a zero gradient (:func:`finite_label_mask`). Labels are grades ``>= 0``: a
  negative label at a real document (allRank pads with -1) is a ValueError on the CPU eager path
  that suggests ``mask=labels >= 0``; compiled or on an accelerator, where no value is read, it
  drops its query like a non-finite label. Padded labels are never read.
* **Scores** (features for ConeRank) that are non-finite at a real document of a query with a
  preference pair make that query's loss NaN, and its gradient NaN at its real documents:
  NaN in, NaN out, never an exception and never a host synchronisation
  (:func:`nan_for_nonfinite_scores`). ``"mean"``/``"sum"`` are then NaN too; other queries'
  ``reduction="none"`` values and gradients are unaffected. Padding may hold anything.
* **Precision.** Half inputs (float16, bfloat16) are computed in float32 and the loss is
  returned in float32; float32 and float64 are kept (:func:`compute_dtype`). The gradient
  reaches the scores in their own dtype.
* **Host reads.** A loss reads tensor values on the host (a label count, a pair count) only on
  the CPU eager path, where it is free; compiled or on an accelerator it takes such counts from
  its hyperparameters or from shapes (:func:`may_read_values`), so it runs without a device
  synchronisation and compiles with ``fullgraph=True``.

:func:`list_inputs` applies the shape, dtype and label rules to a scalar loss's inputs at once.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, ParamSpec, cast

import torch

HALF_DTYPES = (torch.float16, torch.bfloat16)

Parameters = ParamSpec("Parameters")  # a decorated loss's own parameters

# The other layout in place of the expected one is the common mistake of pairing a scorer with
# the wrong kind of loss: the message says what the loss expects.
_WRONG_LAYOUT = {
    "scores": (
        "scores must be [B, L] (one score per document; one query: [L]), got shape {shape}: a "
        "[B, L, F] tensor holds feature vectors. Score them first (a trailing F = 1: "
        "scores[..., 0]), or rank features with the feature-space cone_loss"
    ),
    "features": (
        "cone_loss ranks feature vectors: features must be [B, L, F] (one query: [L, F]), got "
        "shape {shape}; scalar scores [B, L] belong to the scalar losses (ranknet_loss, ...)"
    ),
}
MASK_DTYPE_RULE = "bool, or 0/1 in an integer or floating dtype (True/1 = real document)"


def check_list_inputs(
    values: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    features: bool = False,
    suggest_model: bool = True,
) -> None:
    """Validate batched ``(scores [B, L], labels [B, L], mask [B, L])``, or with
    ``features=True`` ConeRank's ``(features [B, L, F], labels, mask)``: the shapes, floating
    values, the mask's dtype (:data:`MASK_DTYPE_RULE`) and real, integer or bool labels.

    With ``suggest_model`` (losses) a value tensor of the other layout gets a message saying
    which tensor the loss expects; the metrics turn it off. Only shapes and dtypes are read.
    """
    name, layout, dims = ("features", "[B, L, F]", 3) if features else ("scores", "[B, L]", 2)
    if values.dim() != dims:
        shape = tuple(values.shape)
        if suggest_model and values.dim() in (2, 3):  # the other layout
            raise ValueError(_WRONG_LAYOUT[name].format(shape=shape))
        raise ValueError(f"{name} must be {layout}, got shape {shape}")
    if not values.is_floating_point():
        raise ValueError(f"{name} must be floating point, got {values.dtype}")
    batch = values.shape[:2]
    if labels.shape != batch:
        raise ValueError(f"labels must match {name} {list(batch)}, got shape {tuple(labels.shape)}")
    if mask.shape != batch:
        raise ValueError(f"mask must match {name} {list(batch)}, got shape {tuple(mask.shape)}")
    if mask.dtype != torch.bool:  # the losses have made a 0/1 mask bool already (bool_mask)
        raise ValueError(f"mask must be {MASK_DTYPE_RULE}, got {mask.dtype}")
    if labels.is_complex():
        raise ValueError(f"labels must be real, integer or bool, got {labels.dtype}")


def bool_mask(mask: torch.Tensor) -> torch.Tensor:
    """The mask as bool: a bool mask as is, a 0/1 integer or floating mask compared with 0.

    On the CPU eager path a value other than 0 and 1 is a ValueError; elsewhere values are not
    read (no host synchronisation) and any non-zero value marks a real document.

    Example:
        >>> bool_mask(torch.tensor([[1.0, 0.0, 1.0]]))
        tensor([[ True, False,  True]])
    """
    if mask.dtype == torch.bool:
        return mask
    real = mask != 0
    if may_read_values(mask) and not bool(((mask == 1) | ~real).all()):
        raise ValueError(
            f"mask must be {MASK_DTYPE_RULE}; got {mask.dtype} values other than 0 and 1"
        )
    return real


def single_query(
    values: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor | None, *, features: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]:
    """The rule's shapes: one unbatched query (``labels [L]``) as the batch ``B = 1``, and
    ``mask=None`` as every document real. Returns ``(values, labels, mask, unbatched)``; the
    mask is bool (:func:`bool_mask`). Shapes are checked by :func:`check_list_inputs` after."""
    unbatched = labels.dim() == 1
    if unbatched:
        labels = labels.unsqueeze(0)
        if values.dim() == (2 if features else 1):
            values = values.unsqueeze(0)
        if mask is not None and mask.dim() == 1:
            mask = mask.unsqueeze(0)
    if mask is None:
        mask = torch.ones(labels.shape, dtype=torch.bool, device=labels.device)
    elif mask.dtype != torch.bool and tuple(mask.shape) == tuple(labels.shape):
        mask = bool_mask(mask)
    return values, labels, mask, unbatched


def batch_result(loss: torch.Tensor, unbatched: bool) -> torch.Tensor:
    """A loss over ``B = 1`` returned for an unbatched query: ``[1] -> []`` (``"none"``)."""
    return loss.squeeze(0) if unbatched and loss.dim() == 1 else loss


def list_loss(
    *, features: bool = False
) -> Callable[[Callable[Parameters, torch.Tensor]], Callable[Parameters, torch.Tensor]]:
    """Decorate a loss ``function(values, labels, mask, *rest, **keywords)`` written for
    batched tensors with the rule's shapes: ``mask=None`` (every document real), 0/1 masks and
    one unbatched query (:func:`single_query`, :func:`batch_result`). ``features``: the values
    are ConeRank's ``[B, L, F]`` features.

    The decorated loss keeps ``function``'s signature, for ``help()`` and for type checkers: the
    body is written with the public parameters (``mask: Tensor | None = None``) and narrows the
    mask it is given with :func:`decorated_mask`."""

    def decorate(
        function: Callable[Parameters, torch.Tensor],
    ) -> Callable[Parameters, torch.Tensor]:
        body: Callable[..., torch.Tensor] = function  # called with the normalised tensors

        @functools.wraps(function)
        def loss(
            values: torch.Tensor,
            labels: torch.Tensor,
            mask: torch.Tensor | None = None,
            *rest: Any,
            **keywords: Any,
        ) -> torch.Tensor:
            values, labels, mask, unbatched = single_query(values, labels, mask, features=features)
            return batch_result(body(values, labels, mask, *rest, **keywords), unbatched)

        # The wrapper takes exactly `function`'s arguments (it only normalises the first three),
        # which its written signature cannot say.
        return cast("Callable[Parameters, torch.Tensor]", loss)

    return decorate


def decorated_mask(mask: torch.Tensor | None) -> torch.Tensor:
    """The mask of a loss body decorated with :func:`list_loss`, which has made ``mask=None``
    a bool mask of real documents before the body runs: narrows the public parameter's type.
    ``None`` here means the body was called undecorated (``loss.__wrapped__``), a TypeError."""
    if mask is None:
        raise TypeError(
            "a loss body got mask=None: call the decorated loss (None there means every "
            "document is real) or pass a [B, L] bool mask"
        )
    return mask


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a loss computes in: float32 for half inputs, else ``dtype`` itself."""
    return torch.float32 if dtype in HALF_DTYPES else dtype


def may_read_values(tensor: torch.Tensor) -> bool:
    """True on the CPU eager path, the only place a loss may read tensor values on the host.

    Compiled (``torch.compile``) or on an accelerator, counts must come from hyperparameters or
    shapes: a host read there is a device synchronisation or a data-dependent graph break.
    """
    return tensor.is_cpu and not torch.compiler.is_compiling()


def nonempty_lists(
    values: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Give ``L = 0`` inputs one padded slot, so every reduction over L is defined.

    ``values`` is [B, L] scores or [B, L, F] features; the padding keeps it in the graph, so the
    loss of such a batch is a connected 0 with a zero gradient. ``L > 0`` is returned as is.
    """
    if values.shape[1] > 0:
        return values, labels, mask
    pad = lambda t: torch.cat([t, t.new_zeros(t.shape[:1] + (1,) + t.shape[2:])], dim=1)  # noqa: E731
    return pad(values), pad(labels), pad(mask)


def float_labels(labels: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Labels as the floating ``dtype`` the loss computes in (integer and bool labels too)."""
    return in_dtype(labels, dtype)


def in_dtype(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``tensor.to(dtype)``, without the call (a microsecond of an O(L) loss) when it is one."""
    return tensor if tensor.dtype == dtype else tensor.to(dtype)


def finite_label_mask(
    labels: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The mask with every query dropped that has an unusable label at a real document
    (non-finite, or negative where values are not read), and each query's validity: whether
    its real documents, once dropped ones are gone, carry two distinct labels
    (:func:`~differank.losses.algorithms.pairs.valid_queries`). On the CPU eager path a
    negative label is a ValueError (padding written as -1 belongs in the mask:
    ``mask=labels >= 0``). Both come from each query's lowest and highest real label.

    Shape:
        labels (floating), mask: [B, L] -> ([B, L] bool, [B] bool).

    Example:
        >>> labels = torch.tensor([[1.0, float("nan")], [1.0, 0.0], [2.0, float("inf")]])
        >>> finite_label_mask(labels, torch.tensor([[True, True], [True, True], [True, False]]))
        (tensor([[False, False],
                [ True,  True],
                [ True, False]]), tensor([False,  True, False]))
    """
    # each query's lowest and highest real label: NaN if one is NaN (amin/amax propagate it)
    lowest = torch.where(mask, labels, math.inf).amin(dim=-1)
    highest = torch.where(mask, labels, -math.inf).amax(dim=-1)
    usable = (lowest >= 0) & (highest < math.inf)  # [B]: no NaN, ±inf or negative real label
    valid = usable & (highest > lowest)
    if may_read_values(labels):
        if bool(usable.all()):  # the common case: one free read of [B] values
            return mask, valid
        negative = mask & (labels < 0) & (labels > -math.inf)
        if bool(negative.any()):
            where = [tuple(index) for index in negative.nonzero()[:3].tolist()]
            raise ValueError(
                f"labels must be >= 0 at real documents (mask True), got "
                f"{labels[negative][0].item():g} at [b, i] = {where}: mark padding in the mask, "
                "e.g. mask=labels >= 0 for lists padded with -1 (as allRank does)"
            )
    return query_documents(mask, usable), valid


def query_documents(mask: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """``mask & queries.unsqueeze(-1)``: the real documents of the selected queries.

    The query flags are expanded to a contiguous [B, L] first: on the CPU a bool ``&`` that
    broadcasts is not vectorised (at B = 64, L = 1024 it costs 36 us, this 5 us).

    Shape:
        mask: [B, L] bool; queries: [B] bool -> [B, L] bool.
    """
    return mask & queries.unsqueeze(-1).expand_as(mask).contiguous()


def list_inputs(
    scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A scalar loss's inputs under the rule above: checked, ``L ≥ 1``, in the compute dtype.

    Returns ``(scores, labels, mask, valid)``: scores cast to :func:`compute_dtype` (still in
    the graph), labels as that float dtype, the mask without queries that have a non-finite
    label, and ``valid`` [B], the queries with a preference pair (:func:`finite_label_mask`).
    Scores are not sanitised: compute on :func:`finite_scores`, then apply
    :func:`nan_for_nonfinite_scores` to the per-query loss.
    """
    check_list_inputs(scores, labels, mask)
    scores, labels, mask = nonempty_lists(scores, labels, mask)
    dtype = compute_dtype(scores.dtype)
    labels = float_labels(labels, dtype)
    return in_dtype(scores, dtype), labels, *finite_label_mask(labels, mask)


def finite_scores(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``values`` with padded slots and non-finite entries set to 0: what a loss computes on.

    Mask first, compute second: nothing non-finite reaches an exp, a log or an index, so no NaN
    leaks into other queries or into the gradient of a query without pairs. The rule's NaN for
    non-finite scores is added back by :func:`nan_for_nonfinite_scores`.
    """
    real = mask.reshape(mask.shape + (1,) * (values.dim() - 2))
    finite = values.abs() < math.inf  # torch.isfinite in one pass: NaN compares False
    return torch.where(real & finite, values, torch.zeros_like(values))


def nan_for_nonfinite_scores(
    per_query: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, valid: torch.Tensor
) -> torch.Tensor:
    """``per_query`` [B] with NaN where a valid query has a non-finite score at a real document.

    The added term is ``Σ_i s_i · c_q`` over the real documents of valid queries, with
    ``c_q = Σ_i 0 · s_i`` (detached): NaN for a query with a non-finite score, else 0. So those
    documents also get a NaN gradient and everything else is unchanged.

    Shape:
        per_query: [B]; values: [B, L] scores or [B, L, F] features; mask: [B, L];
        valid: [B] bool -> [B].
    """
    counted = (mask & valid.unsqueeze(-1)).reshape(mask.shape + (1,) * (values.dim() - 2))
    kept = torch.where(counted, values, 0.0).to(per_query.dtype).flatten(1)
    marker = kept.detach().mul(0.0).sum(dim=-1, keepdim=True)  # NaN, or 0 when all are finite
    return per_query + (kept * marker).sum(dim=-1)
