"""Examination probabilities by position: the curves the position-based, trust-bias and
user-browsing models raise to the power η (the severity of position bias).

Registry :data:`EXAMINATION_CURVES` (``examination=`` in ``conf/clicks/*.yaml``):

* ``eye_tracking``: ULTRA's PBM vector, from the eye-tracking study of Joachims et al. (2005):
  0.68, 0.61, 0.48, 0.34, 0.28, 0.20, 0.11, 0.10, 0.08, 0.06 for positions 1..10 (later
  positions keep the last value, as ULTRA does).
* ``inverse``: ``1 / k`` for position ``k`` (1-based), the curve of Joachims et al. (2017).

For the user-browsing model the examination depends on the position ``k`` and on the distance
``d`` to the last click above (``d = k`` with no click above, 1-based): ``eye_tracking`` is
ULTRA's table (Dupret and Piwowarski, 2008, fitted values), ``inverse`` is ``1 / d``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

# ULTRA_pytorch ultra/utils/click_models.py, PositionBiasedModel.original_exam_prob
_EYE_TRACKING = (0.68, 0.61, 0.48, 0.34, 0.28, 0.20, 0.11, 0.10, 0.08, 0.06)
# ULTRA_pytorch UserBrowsingModel.original_rd_exam_table: row = position (0-based), column =
# distance to the previous click minus 1; the last entry of row k is "no click above".
_UBM_TABLE = (
    (1.0,),
    (0.98, 1.0),
    (1.0, 0.62, 0.95),
    (1.0, 0.77, 0.42, 0.82),
    (1.0, 0.92, 0.55, 0.31, 0.69),
    (1.0, 0.96, 0.63, 0.4, 0.22, 0.54),
    (1.0, 0.99, 0.73, 0.46, 0.29, 0.17, 0.47),
    (1.0, 1.0, 0.89, 0.52, 0.35, 0.24, 0.14, 0.43),
    (1.0, 1.0, 0.95, 0.68, 0.4, 0.29, 0.19, 0.12, 0.41),
    (1.0, 1.0, 1.0, 0.96, 0.52, 0.36, 0.27, 0.18, 0.12, 0.43),
)


def _eye_tracking(length: int) -> torch.Tensor:
    values = list(_EYE_TRACKING[:length]) + [_EYE_TRACKING[-1]] * (length - len(_EYE_TRACKING))
    return torch.tensor(values, dtype=torch.float64)


def _inverse(length: int) -> torch.Tensor:
    return 1.0 / torch.arange(1, length + 1, dtype=torch.float64)


def _ubm_eye_tracking(length: int) -> torch.Tensor:
    if length > len(_UBM_TABLE):
        raise ValueError(
            f"the eye_tracking user-browsing table has {len(_UBM_TABLE)} positions, the lists "
            f"have {length}: set clicks.top_k <= {len(_UBM_TABLE)} or clicks.examination=inverse"
        )
    table = torch.ones(length, length, dtype=torch.float64)
    for k in range(length):
        table[k, : k + 1] = torch.tensor(_UBM_TABLE[k], dtype=torch.float64)
    return table


def _ubm_inverse(length: int) -> torch.Tensor:
    distance = torch.arange(1, length + 1, dtype=torch.float64)
    return (1.0 / distance).expand(length, length).clone()


# name -> (position curve [K], user-browsing table [K, K]: [k, d - 1])
EXAMINATION_CURVES: dict[str, tuple[Callable[[int], torch.Tensor], Callable[[int], torch.Tensor]]]
EXAMINATION_CURVES = {
    "eye_tracking": (_eye_tracking, _ubm_eye_tracking),
    "inverse": (_inverse, _ubm_inverse),
}


def _check(kind: str, length: int, eta: float) -> None:
    if kind not in EXAMINATION_CURVES:
        raise ValueError(f"examination must be one of {sorted(EXAMINATION_CURVES)}, got {kind!r}")
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ValueError(f"the number of positions must be a positive int, got {length!r}")
    if isinstance(eta, bool) or not isinstance(eta, (int, float)) or not eta >= 0:
        raise ValueError(f"eta must be a number >= 0 (the severity of position bias), got {eta!r}")


def examination_curve(kind: str, length: int, eta: float) -> torch.Tensor:
    """float64 [length]: ``p_k^η`` for positions ``k = 1..length``.

    Example:
        >>> examination_curve("inverse", 3, eta=2.0)
        tensor([1.0000, 0.2500, 0.1111], dtype=torch.float64)
        >>> examination_curve("eye_tracking", 2, eta=1.0)
        tensor([0.6800, 0.6100], dtype=torch.float64)
    """
    _check(kind, length, eta)
    return EXAMINATION_CURVES[kind][0](length) ** eta


def browsing_table(kind: str, length: int, eta: float) -> torch.Tensor:
    """float64 [length, length]: ``γ_{k,d}^η`` at ``[k - 1, d - 1]``, for position ``k`` and
    distance ``d <= k`` to the last click above (``d = k``: no click above); entries with
    ``d > k`` are unused.

    Example:
        >>> browsing_table("inverse", 2, eta=1.0)
        tensor([[1.0000, 0.5000],
                [1.0000, 0.5000]], dtype=torch.float64)
    """
    _check(kind, length, eta)
    return EXAMINATION_CURVES[kind][1](length) ** eta
