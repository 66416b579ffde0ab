"""Per-feature transforms of the data path, fitted on the training split, applied before the
normalization (``data.transform``), and their torch forms that an exported scorer applies.

Public API::

    TRANSFORMS = ("none", "log1p", "gaussrank")
    fit(name, train_features) -> FittedTransform | None     # None for "none"
    load(name, arrays) -> FittedTransform | None            # from the arrays a fit cached
    FittedTransform.apply_(features)     # in place, float32, one row block at a time
    FittedTransform.arrays / .meta       # what the split cache stores to restore it
    FittedTransform.module()             # the same map as a torch module (export, ensembles)
    SignedLog1p(), GaussRank(knots, values)                 # the torch modules
    check_gaussrank_tables(knots, values)   # finite, each row non-decreasing (else ValueError)

``log1p``: ``sign(x) · log1p(|x|)`` (DASALC, Qin et al., ICLR 2021), nothing to fit.

``gaussrank``: per feature, the empirical CDF of the training split (mid-ranks, so tied
values, e.g. LETOR's many zeros, share one value) mapped through the standard normal quantile
function Φ⁻¹, the CDF clipped to ``[GAUSSRANK_CLIP, 1 - GAUSSRANK_CLIP]`` (scikit-learn's
QuantileTransformer bound, |output| <= 5.2). It is tabulated at up to ``GAUSSRANK_KNOTS`` knots
per feature: every distinct training value when there are at most that many, else the values at
evenly spaced quantiles (min and max included), each knot with its exact mid-rank CDF. Between
knots the output is interpolated linearly; outside the training range it is the end value; NaN
stays NaN (NaN and ±inf are left out of the fit). A constant feature maps to 0. Fitting sorts a
few columns at a time (no float64 copy of the matrix); applying works in row blocks, in place.

The torch forms take raw features ``[..., F]`` and use only operations that TorchScript and
ONNX export (the knot search is a fixed-length binary search by gathers).

Example:
    >>> x = np.array([[0.0, -3.0], [1.0, 0.0], [3.0, 8.0]], dtype=np.float32)
    >>> fitted = fit("gaussrank", x)
    >>> y = x.copy()
    >>> fitted.apply_(y)
    >>> bool(np.all(np.diff(y, axis=0) > 0)), abs(float(y[1, 0])) < 1e-6
    (True, True)
    >>> torch.allclose(fitted.module()(torch.from_numpy(x)), torch.from_numpy(y), atol=1e-6)
    True
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch
from scipy.special import ndtri
from torch import nn

TRANSFORMS = ("none", "log1p", "gaussrank")
GAUSSRANK_KNOTS = 1000
GAUSSRANK_CLIP = 1e-7
_BLOCK_ROWS = 65536  # rows per block when applying
_FIT_COLUMNS = 8  # columns sorted at a time when fitting


def check_gaussrank_tables(knots: torch.Tensor, values: torch.Tensor) -> None:
    """Raise ValueError naming the first entry of GaussRank's tables [F, K] that is not finite
    or smaller than the one before it in its row: a fit gives finite knots that increase (then
    repeat the last) and values that increase with them; others give NaN or reordered scores."""
    for name, table in (("knots", knots), ("values", values)):
        problem = ~torch.isfinite(table)
        if not bool(problem.any()):
            problem = torch.nn.functional.pad(table.diff(dim=1) < 0, (1, 0))
        if bool(problem.any()):
            row, column = problem.nonzero()[0].tolist()
            raise ValueError(
                f"{name}[{row}, {column}] is {float(table[row, column])!r}: GaussRank tables "
                "must be finite and increasing along each row (non-decreasing)"
            )


def check_transform(name: str) -> str:
    if name not in TRANSFORMS:
        raise ValueError(f"transform must be one of {TRANSFORMS}, got {name!r}")
    return name


class SignedLog1p(nn.Module):
    """``sign(x) · log1p(|x|)``, elementwise."""

    name = "log1p"

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return torch.sign(features) * torch.log1p(features.abs())

    def describe(self) -> str:
        return self.name


class GaussRank(nn.Module):
    """The fitted Gaussian-rank map: per feature ``f``, linear interpolation of ``values[f]``
    over ``knots[f]`` (non-decreasing; a feature with fewer knots repeats its last one), the end
    values outside, NaN kept.

    Shape:
        knots, values: [F, K] with K >= 2; features: [..., F] -> [..., F].
    """

    name = "gaussrank"
    knots: torch.Tensor  # buffers (register_buffer), [F, K'] after the padding below
    values: torch.Tensor

    def __init__(self, knots: torch.Tensor, values: torch.Tensor) -> None:
        super().__init__()
        knots, values = torch.as_tensor(knots), torch.as_tensor(values)
        if knots.ndim != 2 or knots.shape != values.shape or knots.shape[1] < 2:
            raise ValueError(
                f"knots and values must both be [F, K >= 2], got {tuple(knots.shape)} and "
                f"{tuple(values.shape)}"
            )
        check_gaussrank_tables(knots, values)
        # Padded (with repeats) to a power of two for a branchless binary search.
        width = 1 << (knots.shape[1] - 1).bit_length()
        extra = width - knots.shape[1]
        knots = torch.cat([knots, knots[:, -1:].expand(-1, extra)], dim=1)
        values = torch.cat([values, values[:, -1:].expand(-1, extra)], dim=1)
        self.register_buffer("knots", knots.to(torch.float32).contiguous())
        self.register_buffer("values", values.to(torch.float32).contiguous())
        self.steps = [width >> k for k in range(1, width.bit_length())]  # width/2, ..., 1

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        n_features, width = self.knots.shape
        x = features.reshape(-1, n_features).transpose(0, 1)  # [F, N]
        # How many knots are <= x (capped at width - 1, which the clamp below makes harmless),
        # by a fixed number of gathers: it traces and exports (ONNX has no searchsorted).
        count = torch.zeros(x.shape, dtype=torch.long, device=x.device)
        for step in self.steps:
            candidate = count + step
            below = self.knots.gather(1, candidate - 1) <= x
            count = torch.where(below, candidate, count)
        upper = count.clamp(min=1)
        lower = upper - 1
        x0, x1 = self.knots.gather(1, lower), self.knots.gather(1, upper)
        y0, y1 = self.values.gather(1, lower), self.values.gather(1, upper)
        span = x1 - x0
        inside = ((x - x0) / torch.where(span > 0, span, 1.0)).clamp(0.0, 1.0)
        weight = torch.where(span > 0, inside, (x >= x1).to(x.dtype))
        out = torch.where(torch.isnan(x), x, y0 + weight * (y1 - y0))
        return out.transpose(0, 1).reshape(features.shape)

    def describe(self) -> str:
        digest = hashlib.sha256()
        for table in (self.knots, self.values):
            digest.update(table.detach().cpu().numpy().tobytes())
        return f"{self.name} (tables sha256 {digest.hexdigest()[:12]})"


class FittedTransform:
    """A transform with its fitted state: ``apply_`` for the data path, ``module`` for serving,
    ``arrays``/``meta`` for the split cache (:func:`load` rebuilds it from them)."""

    def __init__(self, name: str, arrays: dict[str, np.ndarray] | None = None) -> None:
        self.name = check_transform(name)
        self.arrays = arrays or {}

    @property
    def meta(self) -> dict:
        if self.name == "gaussrank":
            return {"gaussrank_knots": int(self.arrays["gaussrank_knots"].shape[1])}
        return {}

    def apply_(self, features: np.ndarray) -> None:
        """Transform float32 ``features`` [N, F] in place, one row block at a time."""
        for start in range(0, len(features), _BLOCK_ROWS):
            block = features[start : start + _BLOCK_ROWS]
            if self.name == "log1p":
                magnitude = np.abs(block)
                np.log1p(magnitude, out=magnitude)
                np.copysign(magnitude, block, out=block)
            elif self.name == "gaussrank":
                knots, values = self.arrays["gaussrank_knots"], self.arrays["gaussrank_values"]
                for j in range(block.shape[1]):
                    count = _knot_count(knots[j])
                    block[:, j] = np.interp(block[:, j], knots[j, :count], values[j, :count])

    def module(self) -> nn.Module:
        if self.name == "log1p":
            return SignedLog1p()
        return GaussRank(
            torch.from_numpy(np.array(self.arrays["gaussrank_knots"])),
            torch.from_numpy(np.array(self.arrays["gaussrank_values"])),
        )


def cached_shapes(name: str, meta: dict, n_features: int) -> dict[str, tuple[int, ...]]:
    """The shapes of the arrays a fitted ``name`` stores in a cache entry with ``meta``."""
    if check_transform(name) == "gaussrank":
        shape = (n_features, int(meta["gaussrank_knots"]))
        return {"gaussrank_knots": shape, "gaussrank_values": shape}
    return {}


def fit(name: str, train_features: np.ndarray) -> FittedTransform | None:
    """Fit ``name`` on the raw training features [N, F] (float32; not modified)."""
    if check_transform(name) == "none":
        return None
    if name == "log1p":
        return FittedTransform(name)
    knots, values = _fit_gaussrank(train_features)
    return FittedTransform(name, {"gaussrank_knots": knots, "gaussrank_values": values})


def load(name: str, arrays: dict[str, np.ndarray]) -> FittedTransform | None:
    """The transform a :func:`fit` cached as ``arrays`` (None for "none")."""
    if check_transform(name) == "none":
        return None
    keys = ("gaussrank_knots", "gaussrank_values") if name == "gaussrank" else ()
    return FittedTransform(name, {key: arrays[key] for key in keys})


def _knot_count(knots: np.ndarray) -> int:
    """The knots in use: strictly increasing, then repeats of the last one."""
    return 1 + int(np.count_nonzero(np.diff(knots) > 0))


def _fit_gaussrank(
    features: np.ndarray, max_knots: int = GAUSSRANK_KNOTS, clip: float = GAUSSRANK_CLIP
) -> tuple[np.ndarray, np.ndarray]:
    """Knots and Φ⁻¹ of the clipped mid-rank ECDF at them, float32 [F, K] (see the module
    docstring), sorting ``_FIT_COLUMNS`` columns at a time."""
    n_features = features.shape[1]
    columns: list[tuple[np.ndarray, np.ndarray]] = []
    for first in range(0, n_features, _FIT_COLUMNS):
        block = np.ascontiguousarray(features[:, first : first + _FIT_COLUMNS].T, np.float32)
        block.sort(axis=1)
        for column in block:
            columns.append(_column_knots(column[np.isfinite(column)], max_knots, clip))
    width = max(2, max(len(knots) for knots, _ in columns))
    knots = np.empty((n_features, width), np.float32)
    values = np.empty((n_features, width), np.float32)
    for j, (column_knots, column_values) in enumerate(columns):
        count = len(column_knots)
        knots[j, :count], knots[j, count:] = column_knots, column_knots[-1]
        values[j, :count], values[j, count:] = column_values, column_values[-1]
    return knots, values


def _column_knots(ordered: np.ndarray, max_knots: int, clip: float):
    n = len(ordered)
    if n == 0:  # no finite training value: map everything to 0
        return np.zeros(1, np.float32), np.zeros(1, np.float32)
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    if len(starts) <= max_knots:
        knots = ordered[starts]
        left, right = starts, np.r_[starts[1:], n]
    else:
        positions = np.rint(np.linspace(0, n - 1, max_knots)).astype(np.int64)
        knots = np.unique(ordered[positions])
        left = np.searchsorted(ordered, knots, side="left")
        right = np.searchsorted(ordered, knots, side="right")
    cdf = (left + right) / (2.0 * n)  # (#below + #equal / 2) / n
    values = ndtri(np.clip(cdf, clip, 1.0 - clip))
    return knots.astype(np.float32), values.astype(np.float32)
