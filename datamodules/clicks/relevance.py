"""From a graded relevance label to the probability that an examined document is clicked.

ULTRA's rule (``ClickModel.setClickProb``, after ERR's gain), for labels ``y`` in ``0..y_max``:

    P(click | examined, y) = ε⁻ + (ε⁺ − ε⁻) · (2^y − 1) / (2^y_max − 1)

``ε⁻`` (``neg_click_prob``, click noise) is the chance a non-relevant examined document is
clicked, ``ε⁺`` (``pos_click_prob``) that of a perfectly relevant one; ULTRA's example click
models use ε⁻ = 0.1, ε⁺ = 1. The fraction ``(2^y − 1) / (2^y_max − 1)`` alone is the probability
that the document is relevant, which the trust-bias model uses with its per-position ε.
"""

from __future__ import annotations

import torch


def relevance_probability(labels: torch.Tensor, max_label: float) -> torch.Tensor:
    """``(2^y − 1) / (2^y_max − 1)``: 0 for label 0, 1 for ``max_label``. Labels are clamped to
    ``[0, max_label]`` (padding slots hold 0; the data's largest label is ``max_label``).

    Example:
        >>> relevance_probability(torch.tensor([0.0, 1.0, 2.0]), max_label=2)
        tensor([0.0000, 0.3333, 1.0000])
    """
    if not max_label > 0:
        raise ValueError(f"max_label must be > 0 (the data's largest label), got {max_label}")
    grades = labels.clamp(0, max_label)
    return (torch.exp2(grades) - 1) / (2.0**max_label - 1)


def click_probability(
    labels: torch.Tensor, max_label: float, neg_click_prob: float, pos_click_prob: float
) -> torch.Tensor:
    """``ε⁻ + (ε⁺ − ε⁻) · (2^y − 1) / (2^y_max − 1)``: the click probability of an examined
    document (the module docstring), elementwise.

    Example:
        >>> click_probability(torch.tensor([0.0, 1.0, 2.0]), 2, 0.1, 1.0)
        tensor([0.1000, 0.4000, 1.0000])
    """
    check_probability("neg_click_prob", neg_click_prob)
    check_probability("pos_click_prob", pos_click_prob)
    if not max_label > 0:
        raise ValueError(f"max_label must be > 0 (the data's largest label), got {max_label}")
    # ε⁻ + c (2^y − 1) = (ε⁻ − c) + c 2^y with c = (ε⁺ − ε⁻)/(2^y_max − 1): three kernels a batch
    scale = (pos_click_prob - neg_click_prob) / (2.0**max_label - 1)
    grades = labels.clamp(0, max_label)
    return torch.exp2(grades).mul_(scale).add_(neg_click_prob - scale)


def check_probability(name: str, value: float) -> float:
    """``value`` as a float in [0, 1], else a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    return float(value)
