"""The input rule every loss follows, and the helpers that apply it (one helper per idea).

Every loss accepts whatever ``(scores, labels, mask)`` its shapes allow and treats it the same:

* **Shapes.** ``B = 0`` or ``L = 0`` is a batch without a preference pair: the loss is 0, with a
  zero gradient that is still connected to the graph (:func:`nonempty_lists`).
* **Labels** may be any real, integer or bool dtype (:func:`float_labels`). A query with a
  non-finite label (NaN, ±inf) at a real document is dropped: it has no preference pair, so its
  loss is 0 with a zero gradient (:func:`finite_label_mask`). Padded labels are never read.
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

import torch

HALF_DTYPES = (torch.float16, torch.bfloat16)

# The other layout in place of the expected one is the common mistake of pairing a model with
# the wrong kind of loss: the message names the pairing to use.
_WRONG_LAYOUT = {
    "scores": (
        "this loss ranks scalar scores [B, L] but got a tensor of shape {shape} (features "
        "[B, L, F]?): use a scalar model such as model=linear or model=mlp, or the feature-space "
        "loss loss=cone with model=conerank"
    ),
    "features": (
        "cone_loss ranks feature vectors [B, L, F] but got shape {shape} (scalar scores [B, L]?): "
        "pass the features, i.e. use model=conerank with loss=cone"
    ),
}


def check_list_inputs(
    values: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    features: bool = False,
    suggest_model: bool = True,
) -> None:
    """Validate ``(scores [B, L], labels [B, L], mask [B, L] bool)``, or with ``features=True``
    ConeRank's ``(features [B, L, F], labels, mask)``: the shapes, floating values, a bool mask
    and real, integer or bool labels.

    With ``suggest_model`` (losses) a value tensor of the other layout gets a message naming the
    model and loss to pair; the metrics, which have no model to suggest, turn it off.
    """
    name, layout, dims = ("features", "[B, L, F]", 3) if features else ("scores", "[B, L]", 2)
    shape = tuple(values.shape)
    if suggest_model and values.dim() in (2, 3) and values.dim() != dims:  # the other layout
        raise ValueError(_WRONG_LAYOUT[name].format(shape=shape))
    if values.dim() != dims:
        raise ValueError(f"{name} must be {layout}, got shape {shape}")
    if not values.is_floating_point():
        raise ValueError(f"{name} must be floating point, got {values.dtype}")
    batch = list(shape[:2])
    if tuple(labels.shape) != shape[:2]:
        raise ValueError(f"labels must match {name} {batch}, got shape {tuple(labels.shape)}")
    if tuple(mask.shape) != shape[:2]:
        raise ValueError(f"mask must match {name} {batch}, got shape {tuple(mask.shape)}")
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be bool (True = real document), got {mask.dtype}")
    if labels.is_complex():
        raise ValueError(f"labels must be real, integer or bool, got {labels.dtype}")


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a loss computes in: float32 for half inputs, else ``dtype`` itself."""
    return torch.float32 if dtype in HALF_DTYPES else dtype


def may_read_values(tensor: torch.Tensor) -> bool:
    """True on the CPU eager path, the only place a loss may read tensor values on the host.

    Compiled (``torch.compile``) or on an accelerator, counts must come from hyperparameters or
    shapes: a host read there is a device synchronisation or a data-dependent graph break.
    """
    return tensor.device.type == "cpu" and not torch.compiler.is_compiling()


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
    return labels.to(dtype)


def finite_label_mask(labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The mask with every query that has a non-finite label at a real document dropped.

    Shape:
        labels, mask: [B, L] -> [B, L] bool.

    Example:
        >>> labels = torch.tensor([[1.0, float("nan")], [1.0, 0.0], [2.0, float("inf")]])
        >>> finite_label_mask(labels, torch.tensor([[True, True], [True, True], [True, False]]))
        tensor([[False, False],
                [ True,  True],
                [ True, False]])
    """
    bad = (mask & ~torch.isfinite(labels)).any(dim=-1, keepdim=True)
    return mask & ~bad


def list_inputs(
    scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A scalar loss's inputs under the rule above: checked, ``L ≥ 1``, in the compute dtype.

    Returns ``(scores, labels, mask)``: scores cast to :func:`compute_dtype` (still in the
    graph), labels as that float dtype, and the mask without queries that have a non-finite
    label. Scores are not sanitised: compute on :func:`finite_scores`, then apply
    :func:`nan_for_nonfinite_scores` to the per-query loss.
    """
    check_list_inputs(scores, labels, mask)
    scores, labels, mask = nonempty_lists(scores, labels, mask)
    dtype = compute_dtype(scores.dtype)
    labels = float_labels(labels, dtype)
    return scores.to(dtype), labels, finite_label_mask(labels, mask)


def finite_scores(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``values`` with padded slots and non-finite entries set to 0: what a loss computes on.

    Mask first, compute second: nothing non-finite reaches an exp, a log or an index, so no NaN
    leaks into other queries or into the gradient of a query without pairs. The rule's NaN for
    non-finite scores is added back by :func:`nan_for_nonfinite_scores`.
    """
    real = mask.reshape(mask.shape + (1,) * (values.dim() - 2))
    return torch.where(real & torch.isfinite(values), values, torch.zeros_like(values))


def nan_for_nonfinite_scores(
    per_query: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, valid: torch.Tensor
) -> torch.Tensor:
    """``per_query`` [B] with NaN where a valid query has a non-finite score at a real document.

    The added term is ``Σ_i s_i · c_i`` with ``c_i = NaN`` at such a query's real documents and
    0 elsewhere, so those documents also get a NaN gradient and everything else is unchanged.

    Shape:
        per_query: [B]; values: [B, L] scores or [B, L, F] features; mask: [B, L];
        valid: [B] bool -> [B].
    """
    real = mask.reshape(mask.shape + (1,) * (values.dim() - 2))
    nonfinite = (real & ~torch.isfinite(values)).flatten(1).any(dim=-1)  # [B]
    poisoned = real & (nonfinite & valid).reshape((-1,) + (1,) * (values.dim() - 1))
    marker = torch.where(poisoned, float("nan"), 0.0).to(per_query.dtype)
    kept = torch.where(poisoned, values.to(per_query.dtype), 0.0)
    return per_query + (kept * marker).flatten(1).sum(dim=-1)
