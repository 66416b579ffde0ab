"""A comparison-based click model (CBCM; after Zhang et al., WWW 2021, as Niu et al., SIGIR 2025
use it): users read the list one viewport at a time and decide whether to click a document after
comparing it with the others in the same viewport, so a document's click depends on its
relevance compared with its neighbours', not on its own alone.

The list is cut into viewports of ``w`` consecutive positions (viewport v holds 0-based
positions ``v·w .. v·w + w − 1``). The user reads viewport 1, and after reading viewport v goes on
to v + 1 with probability ``λ`` if they clicked in v and ``γ`` if not (the cascade family's walk,
over viewports). In a viewport they read, each document is clicked independently with

    q_k = α_k · (α_k / max_{j in viewport(k)} α_j)^κ

``α`` the relevance's click probability (ε⁻ + (ε⁺ − ε⁻)(2^y − 1)/(2^y_max − 1)) and ``κ >= 0``
the strength of the comparison: the best document of a viewport is clicked with its own ``α``,
a worse one less the better its neighbour (``κ = 0``: no comparison, and with ``w = 1`` the model
is the DCM). Every slot of a read viewport is examined:

    e_1 = 1,   e_{v+1} = e_v · (λ · A_v + γ · (1 − A_v)),   A_v = 1 − Π_{k in v} (1 − q_k)

and ``propensities`` are the ``e`` of each slot's viewport (they depend on the documents above),
so ``E[C_k] = e_k · q_k``; ``q_k`` depends on the neighbours, so a click divided by its
propensity estimates the compared, not the absolute, relevance: the bias this model adds.

:meth:`ComparisonClickModel.session_probability` is the exact probability of a whole observed
click vector (the walk's unobserved stop summed out), for oracle tests and click likelihoods.
"""

from __future__ import annotations

import math

import torch

from differank.datamodules.clicks.base import ClickModel
from differank.datamodules.clicks.relevance import check_probability


class ComparisonClickModel(ClickModel):
    """CBCM (the module docstring). ``viewport``: positions per viewport (w); ``comparison``:
    κ; ``continuation``: γ, going on after a viewport without a click; ``continuation_after_click``:
    λ, going on after a viewport with one.

    Example:
        >>> model = ComparisonClickModel(max_label=1, viewport=2, neg_click_prob=0.0,
        ...                              continuation_after_click=0.5)
        >>> model.propensities(torch.tensor([[1.0, 0.0, 1.0]]), torch.ones(1, 3))
        tensor([[1.0000, 1.0000, 0.5000]])
    """

    draws_per_slot = 2  # one for the click, one (the viewport's first slot's) for going on

    def __init__(
        self,
        *,
        max_label: float,
        viewport: int = 3,
        comparison: float = 1.0,
        continuation: float = 1.0,
        continuation_after_click: float = 0.5,
        positions: int = 10,
        neg_click_prob: float = 0.1,
        pos_click_prob: float = 1.0,
    ) -> None:
        super().__init__(
            max_label=max_label,
            positions=positions,
            neg_click_prob=neg_click_prob,
            pos_click_prob=pos_click_prob,
        )
        if isinstance(viewport, bool) or not isinstance(viewport, int) or viewport < 1:
            raise ValueError(
                f"viewport must be a positive int (positions read together), got {viewport!r}"
            )
        if (
            isinstance(comparison, bool)
            or not isinstance(comparison, (int, float))
            or not (math.isfinite(comparison) and comparison >= 0)
        ):
            raise ValueError(
                f"comparison must be a finite number >= 0 (kappa; 0: no comparison), got "
                f"{comparison!r}"
            )
        self.viewport = viewport
        self.comparison = float(comparison)
        self.after_skip = check_probability("continuation", continuation)
        self.after_click = check_probability("continuation_after_click", continuation_after_click)

    def click_given_read(self, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``q_k`` of every slot [B, L] (0 at padding): the click probability of a read slot,
        its ``α`` scaled by how it compares with the best of its viewport."""
        attractive = self._by_viewport(self.attractiveness(labels, mask))
        best = attractive.amax(2, keepdim=True)
        # a viewport of zero-probability documents: ratio 0, never 0/0
        ratio = attractive / best.clamp_min(torch.finfo(best.dtype).tiny)
        compared = attractive * ratio.pow(self.comparison)
        return compared.flatten(1)[:, : labels.shape[1]]

    def sample(
        self, labels: torch.Tensor, mask: torch.Tensor, uniforms: torch.Tensor
    ) -> torch.Tensor:
        """Decide at every slot whether it would be clicked if read (``u0 < q_k``) and at every
        viewport whether the user would go on (its first slot's ``u1`` below ``λ`` after a click
        in it, ``γ`` after none); viewport v is read when the user would have gone on at every
        viewport above (an exclusive cumulative product over viewports): no loop over
        positions, the same clicks as the step-by-step walk."""
        read_click = self.click_given_read(labels, mask)
        click_draw, go_on_draw = uniforms.unbind(2)
        would_click = self._by_viewport((click_draw < read_click).to(read_click.dtype))
        clicked_in = would_click.amax(2)  # [B, V]: 1 where the viewport would hold a click
        go_on = self.after_skip + (self.after_click - self.after_skip) * clicked_in
        first_draws = self._by_viewport(go_on_draw, fill=1.0)[:, :, 0]
        would_go_on = (first_draws < go_on).to(read_click.dtype)
        reading = torch.ones_like(would_go_on)
        torch.cumprod(would_go_on[:, :-1], dim=1, out=reading[:, 1:])
        clicks = reading[:, :, None] * would_click
        return clicks.flatten(1)[:, : labels.shape[1]]

    def examination(self, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        read_click = self._by_viewport(self.click_given_read(labels, mask))
        clicked_in = 1 - (1 - read_click).prod(2)  # A_v
        steps = self.after_click * clicked_in + self.after_skip * (1 - clicked_in)
        reached = torch.cumprod(steps, dim=1)  # e_{v+1}; e_1 = 1: exclusive
        reached = torch.cat([torch.ones_like(reached[:, :1]), reached[:, :-1]], dim=1)
        by_slot = reached[:, :, None].expand(-1, -1, self.viewport)
        return by_slot.flatten(1)[:, : labels.shape[1]]

    def session_probability(
        self, labels: torch.Tensor, mask: torch.Tensor, clicks: torch.Tensor
    ) -> torch.Tensor:
        """The exact probability [B] of each list's observed ``clicks`` [B, L] (0/1, 0 at
        padding): ``S_V = 1`` past the last viewport and, backwards,

            S_v = b_v · ((1 − g_v) · [no click after v] + g_v · S_{v+1})

        with ``b_v = Π_{k in v} q_k^{c_k} (1 − q_k)^{1 − c_k}`` and ``g_v`` the chance of going
        on after v (λ if v holds a click, γ if not); the probability is ``S_1``. A click on a
        padding slot has probability 0."""
        self._check(labels, mask)
        if clicks.shape != labels.shape:
            raise ValueError(
                f"clicks must be [B, L] like labels {tuple(labels.shape)}, got "
                f"{tuple(clicks.shape)}"
            )
        read_click = self._by_viewport(self.click_given_read(labels, mask.bool()))
        clicked = self._by_viewport(clicks.to(read_click.dtype))
        pattern = torch.where(clicked > 0, read_click, 1 - read_click).prod(2)  # b_v [B, V]
        clicked_in = clicked.amax(2)
        go_on = self.after_skip + (self.after_click - self.after_skip) * clicked_in
        after = torch.ones_like(pattern[:, 0])  # S_{v+1}
        none_later = torch.ones_like(after)  # 1 when no viewport after v holds a click
        for v in range(pattern.shape[1] - 1, -1, -1):
            after = pattern[:, v] * ((1 - go_on[:, v]) * none_later + go_on[:, v] * after)
            none_later = none_later * (1 - clicked_in[:, v])
        return after

    def _by_viewport(self, values: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
        """[B, L] -> [B, V, w], the last viewport filled with ``fill`` past the list's end."""
        batch, length = values.shape
        viewports = -(-length // self.viewport)
        padded = values.new_full((batch, viewports * self.viewport), fill)
        padded[:, :length] = values
        return padded.view(batch, viewports, self.viewport)
