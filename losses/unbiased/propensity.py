"""Where an estimator's examination propensities come from: a fixed per-position vector (known,
or estimated by result randomisation or intervention harvesting) or the click batch's own
logged ``propensities`` [B, L]."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from differank.losses.unbiased.estimator import at_positions, shown


def check_propensity_vector(name: str, values: Sequence[float] | None) -> None:
    """Raise ValueError unless ``values`` is None or a non-empty list of numbers in (0, 1]."""
    if values is None:
        return
    values = [float(value) for value in values]
    bad = [value for value in values if not 0.0 < value <= 1.0]
    if not values or bad:
        raise ValueError(
            f"{name}: propensities must be examination probabilities in (0, 1], one per "
            f"position (0-based), got {values}"
        )


def check_clip(name: str, clip: float) -> None:
    """Raise ValueError unless ``clip`` (the largest inverse propensity weight) is >= 1."""
    if (
        isinstance(clip, bool)
        or not isinstance(clip, (int, float))
        or not 1.0 <= clip < float("inf")
    ):
        raise ValueError(f"{name}: clip must be a finite number >= 1, got {clip!r}")


def propensity_vector(
    name: str, values: Sequence[float] | None, clip: float
) -> tuple[torch.Tensor | None, float]:
    """A known per-position propensity vector (float64, or None: from the batch) and the
    clip, both checked: what an inverse-propensity estimator is configured with."""
    check_propensity_vector(name, values)
    check_clip(name, clip)
    return (None if values is None else torch.tensor(values, dtype=torch.float64)), float(clip)


def document_propensities(
    name: str,
    vector: torch.Tensor | None,
    positions: torch.Tensor,
    mask: torch.Tensor,
    logged: torch.Tensor | None,
) -> torch.Tensor:
    """Each shown document's propensity [B, L] (1 where nothing was shown): ``vector`` read at
    its position, else the batch's ``logged`` propensities, which must be in (0, 1] at every
    shown slot (NaN, 0, negative or above 1 is a ValueError naming the slot; read where they
    are on the CPU). Every estimator's logged propensities enter here."""
    visible = shown(positions, mask)
    if vector is not None:
        if positions.is_cpu and positions.numel() and int(positions.max()) >= vector.numel():
            raise ValueError(
                f"{name}: positions reach {int(positions.max())}, but propensities holds "
                f"{vector.numel()} positions: give one propensity per shown position"
            )
        values = at_positions(vector.to(positions.device), positions)
    elif logged is not None:
        if logged.shape != positions.shape:
            raise ValueError(
                f"{name}: the batch's propensities must be [B, L] like positions "
                f"{list(positions.shape)}, got {tuple(logged.shape)}"
            )
        if logged.is_cpu:  # values are read on the CPU only, as positions' are
            # NaN fails both comparisons; a propensity of 0 would divide, one > 1 is no probability
            bad = visible & ~((logged > 0) & (logged <= 1))
            if bad.any():
                b, slot = (int(i) for i in bad.nonzero()[0])
                raise ValueError(
                    f"{name}: the batch's propensities[{b}, {slot}] (query {b}, shown position "
                    f"{int(positions[b, slot])}) is {float(logged[b, slot])}; a logged "
                    "propensity is P(examined) in (0, 1] at every shown slot: fix the log's "
                    "propensity column or the tensor passed"
                )
        values = logged
    else:
        raise ValueError(
            f"{name} needs examination propensities: set ultr.propensities (one per position, "
            "known or estimated) or train on a click log that records them (propensities "
            "[B, L] in the batch)"
        )
    return torch.where(visible, values, torch.ones_like(values))
