"""Shape and dtype checks shared by the losses: bad input fails naming the tensor and shape."""

from __future__ import annotations

import torch


def check_list_inputs(scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> None:
    """Validate the ``(scores [B, L], labels [B, L], mask [B, L] bool)`` triple of a scalar loss.

    A feature tensor ``[B, L, F]`` in place of scores is the common mistake of pairing a
    feature-space loss's model with a scalar loss; the message says which model to use.
    """
    if scores.dim() == 3:
        raise ValueError(
            f"this loss ranks scalar scores [B, L] but got a tensor of shape {tuple(scores.shape)} "
            "(features [B, L, F]?): use a scalar model such as model=linear or model=mlp, or the "
            "feature-space loss loss=cone with model=conerank"
        )
    if scores.dim() != 2:
        raise ValueError(f"scores must be [B, L], got shape {tuple(scores.shape)}")
    check_labels_and_mask(labels, mask, tuple(scores.shape), "scores")
    if not scores.is_floating_point():
        raise ValueError(f"scores must be floating point, got {scores.dtype}")


def check_labels_and_mask(
    labels: torch.Tensor, mask: torch.Tensor, batch_shape: tuple[int, ...], source: str
) -> None:
    """Check that ``labels`` and the bool ``mask`` are both ``batch_shape`` ([B, L])."""
    if tuple(labels.shape) != batch_shape:
        raise ValueError(
            f"labels must match {source} {list(batch_shape)}, got shape {tuple(labels.shape)}"
        )
    if tuple(mask.shape) != batch_shape:
        raise ValueError(
            f"mask must match {source} {list(batch_shape)}, got shape {tuple(mask.shape)}"
        )
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be bool (True = real document), got {mask.dtype}")
