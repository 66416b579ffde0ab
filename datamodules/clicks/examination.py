"""Examination probabilities by position: the curves the position-based, trust-bias and
user-browsing models raise to the power η (the severity of position bias).

Registry :data:`EXAMINATION_CURVES` (``examination=`` in ``conf/clicks/*.yaml``):

* ``eye_tracking``: ULTRA's PBM vector, from the eye-tracking study of Joachims et al. (2005):
  0.68, 0.61, 0.48, 0.34, 0.28, 0.20, 0.11, 0.10, 0.08, 0.06 for positions 1..10 (later
  positions keep the last value, as ULTRA does).
* ``inverse``: ``1 / k`` for position ``k`` (1-based), the curve of Joachims et al. (2017).
* ``baidu``: the examination Baidu-ULTR measured on real search sessions, as reported by Hager et
  al. (SIGIR 2024): 1, 0.674, 0.414, 0.293, 0.208 for positions 1..5. Only these five values
  are known here, so longer lists are refused (no extrapolation): give the whole curve as a
  vector instead.
* a vector of numbers (``clicks.propensity=[1,0.674,...]``): the examination of positions 1, 2,
  ... as given, each in (0, 1], at least as many as the lists' positions.

For the user-browsing model the examination depends on the position ``k`` and on the distance
``d`` to the last click above (``d = k`` with no click above, 1-based): ``eye_tracking`` is
ULTRA's table (Dupret and Piwowarski, 2008, fitted values), ``inverse`` is ``1 / d``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

# ULTRA_pytorch ultra/utils/click_models.py, PositionBiasedModel.original_exam_prob
_EYE_TRACKING = (0.68, 0.61, 0.48, 0.34, 0.28, 0.20, 0.11, 0.10, 0.08, 0.06)
# Hager et al. (SIGIR 2024), Baidu-ULTR's measured examination at positions 1..5 (the issue's
# values; the rest of the published curve is not known here, so it is not extrapolated)
_BAIDU = (1.0, 0.674, 0.414, 0.293, 0.208)
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


def _baidu(length: int) -> torch.Tensor:
    if length > len(_BAIDU):
        raise ValueError(
            f"clicks.propensity=baidu knows Baidu-ULTR's measured examination for {len(_BAIDU)} "
            f"positions, the lists have {length}: set clicks.top_k <= {len(_BAIDU)}, or give the "
            "whole curve as a vector (clicks.propensity=[1,0.674,0.414,...], one per position)"
        )
    return torch.tensor(_BAIDU[:length], dtype=torch.float64)


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


# name -> (position curve [K], user-browsing table [K, K]: [k, d - 1], or None: a measured
# curve by position only)
_Curve = Callable[[int], torch.Tensor]
EXAMINATION_CURVES: dict[str, tuple[_Curve, _Curve | None]]
EXAMINATION_CURVES = {
    "eye_tracking": (_eye_tracking, _ubm_eye_tracking),
    "inverse": (_inverse, _ubm_inverse),
    "baidu": (_baidu, None),
}


def _check(kind: str, length: int, eta: float) -> None:
    if kind not in EXAMINATION_CURVES:
        raise ValueError(
            f"examination must be one of {sorted(EXAMINATION_CURVES)} or a vector of examination "
            f"probabilities (clicks.propensity=[1,0.674,...]), got {kind!r}"
        )
    _check_length_and_eta(length, eta)


def _check_length_and_eta(length: int, eta: float) -> None:
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise ValueError(f"the number of positions must be a positive int, got {length!r}")
    if isinstance(eta, bool) or not isinstance(eta, (int, float)) or not eta >= 0:
        raise ValueError(f"eta must be a number >= 0 (the severity of position bias), got {eta!r}")


def examination_curve(kind: str | Sequence[float], length: int, eta: float) -> torch.Tensor:
    """float64 [length]: ``p_k^η`` for positions ``k = 1..length``; ``kind`` a curve's name or
    the vector ``p_1, p_2, ...`` itself (:func:`vector_curve`).

    Example:
        >>> examination_curve("inverse", 3, eta=2.0)
        tensor([1.0000, 0.2500, 0.1111], dtype=torch.float64)
        >>> examination_curve("eye_tracking", 2, eta=1.0)
        tensor([0.6800, 0.6100], dtype=torch.float64)
        >>> examination_curve([1.0, 0.5, 0.25], 2, eta=1.0)
        tensor([1.0000, 0.5000], dtype=torch.float64)
    """
    if not isinstance(kind, str):
        _check_length_and_eta(length, eta)
        return vector_curve(kind, length) ** eta
    _check(kind, length, eta)
    return EXAMINATION_CURVES[kind][0](length) ** eta


def vector_curve(values: Sequence[float], length: int) -> torch.Tensor:
    """float64 [length]: the first ``length`` of ``values``, the examination of positions 1, 2,
    ...; each must be a number in (0, 1] (an examination probability a click can be divided
    by), and there must be at least ``length`` of them. Errors name ``clicks.propensity``."""
    try:
        items = list(values)
    except TypeError:
        raise ValueError(
            f"clicks.propensity must be a curve's name or a vector of numbers, got {values!r}"
        ) from None
    for position, value in enumerate(items, start=1):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(
                f"clicks.propensity[{position - 1}] (position {position}) is {value!r}: the "
                "vector holds numbers, the examination probability of each position"
            )
        if not (math.isfinite(value) and 0 < value <= 1):
            raise ValueError(
                f"clicks.propensity[{position - 1}] (position {position}) is {value!r}: an "
                "examination probability must be finite and in (0, 1]"
            )
    if len(items) < length:
        raise ValueError(
            f"clicks.propensity has {len(items)} values, the lists have {length} positions: give "
            f"one per position (at least {length}) or lower clicks.top_k"
        )
    return torch.tensor(items[:length], dtype=torch.float64)


def browsing_table(kind: str | Sequence[float], length: int, eta: float) -> torch.Tensor:
    """float64 [length, length]: ``γ_{k,d}^η`` at ``[k - 1, d - 1]``, for position ``k`` and
    distance ``d <= k`` to the last click above (``d = k``: no click above); entries with
    ``d > k`` are unused.

    Example:
        >>> browsing_table("inverse", 2, eta=1.0)
        tensor([[1.0000, 0.5000],
                [1.0000, 0.5000]], dtype=torch.float64)
    """
    table = None
    if isinstance(kind, str):
        _check(kind, length, eta)
        table = EXAMINATION_CURVES[kind][1]
    if table is None:
        raise ValueError(
            f"examination={kind!r} is a curve by position; the user-browsing model needs a table "
            "by position and distance to the last click: use eye_tracking or inverse"
        )
    return table(length) ** eta
