"""What every click model shares: its options, the relevance-to-click rule, the checks, the
per-device copies of its position parameters.

A click model turns the true labels of shown lists (``labels`` [B, L], slot ``k`` shown at
0-based position ``k``; ``mask`` [B, L] the real slots) into sampled clicks, batched, on the
labels' device, with every draw taken from a ``torch.Generator`` (so a seed fixes the clicks; a
CPU generator gives the same uniforms whatever the labels' device):

    model.simulate(labels, mask, generator=None) -> clicks [B, L] in {0, 1}, 0 at padding
    model.propensities(labels, mask) -> [B, L]: P(slot k is examined), 1 at padding

``propensities`` is the marginal examination probability of each slot of THESE lists (for the
position-based and trust-bias models it is the position's alone; for the cascade family and the
user-browsing model it depends on the documents above), so ``E[click_k] = propensity_k ·
P(click | examined)`` and a click divided by it is an unbiased relevance signal (IPS).
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from differank.datamodules.clicks.relevance import check_probability, click_probability


class ClickModel(ABC):
    """Base of the click models (see the module docstring). ``max_label`` is the data's
    largest label, ``positions`` the longest list the model accepts (``clicks.top_k``),
    ``neg_click_prob``/``pos_click_prob`` ε⁻/ε⁺ of
    :func:`~differank.datamodules.clicks.relevance.click_probability`."""

    #: uniform draws per slot that :meth:`sample` consumes
    draws_per_slot = 1

    def __init__(
        self,
        *,
        max_label: float,
        positions: int = 10,
        neg_click_prob: float = 0.1,
        pos_click_prob: float = 1.0,
    ) -> None:
        if not isinstance(max_label, (int, float)) or not max_label > 0:
            raise ValueError(f"max_label must be > 0 (the data's largest label), got {max_label}")
        if isinstance(positions, bool) or not isinstance(positions, int) or positions < 1:
            raise ValueError(f"positions must be a positive int (clicks.top_k), got {positions!r}")
        self.max_label = float(max_label)
        self.positions = positions
        self.neg_click_prob = check_probability("neg_click_prob", neg_click_prob)
        self.pos_click_prob = check_probability("pos_click_prob", pos_click_prob)
        self._copies: dict[tuple[str, torch.device, torch.dtype], torch.Tensor] = {}

    def attractiveness(self, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """P(click | examined) of every slot (0 at padding), in the labels' floating dtype."""
        labels = labels if labels.is_floating_point() else labels.float()
        probability = click_probability(
            labels, self.max_label, self.neg_click_prob, self.pos_click_prob
        )
        return probability * mask

    def simulate(
        self,
        labels: torch.Tensor,
        mask: torch.Tensor,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Clicks [B, L] (the labels' floating dtype, 0/1, 0 at padding) of one session per
        list; the uniforms come from ``generator``, drawn on its device and moved to the labels'
        (a CPU generator gives the same uniforms on every device, so the same clicks up to the
        float32 rounding of the click probabilities), or from the labels' device's default
        generator without one."""
        self._check(labels, mask)
        source = labels.device if generator is None else generator.device
        uniforms = torch.rand(
            (*labels.shape, self.draws_per_slot),
            generator=generator,
            device=source,
            dtype=torch.float32,
            # pinned, the copy to the GPU does not wait for the GPU's queued work
            pin_memory=source.type == "cpu" and labels.device.type == "cuda",
        )
        return self.sample(labels, mask.bool(), uniforms.to(labels.device, non_blocking=True))

    def propensities(self, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """P(examined) of every slot of these lists [B, L], 1 at padding (never 0: a division
        by it is safe)."""
        self._check(labels, mask)
        mask = mask.bool()
        return self.examination(labels, mask).masked_fill(~mask, 1.0)

    @abstractmethod
    def sample(
        self, labels: torch.Tensor, mask: torch.Tensor, uniforms: torch.Tensor
    ) -> torch.Tensor:
        """Clicks from ``uniforms`` [B, L, draws_per_slot]."""

    @abstractmethod
    def examination(self, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """P(examined) of every slot [B, L] (any value at padding)."""

    def _check(self, labels: torch.Tensor, mask: torch.Tensor) -> None:
        if labels.ndim != 2 or mask.shape != labels.shape:
            raise ValueError(
                f"labels and mask must both be [B, L]; got labels {tuple(labels.shape)}, mask "
                f"{tuple(mask.shape)}"
            )
        if labels.shape[1] > self.positions:
            raise ValueError(
                f"lists of {labels.shape[1]} slots, but the click model has {self.positions} "
                "positions: raise clicks.top_k (positions=) or show shorter lists"
            )

    def on(self, name: str, values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """The position parameter ``values`` on ``like``'s device and floating dtype, copied
        once per device (not once per batch)."""
        dtype = like.dtype if like.is_floating_point() else torch.float32
        key = (name, like.device, dtype)
        if key not in self._copies:
            self._copies[key] = values.to(like.device, dtype)
        return self._copies[key]

    def __getstate__(self) -> dict:  # device copies are rebuilt, never pickled
        return {**self.__dict__, "_copies": {}}
