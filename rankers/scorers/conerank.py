"""ConeRank: a learned polyhedral cone (basis U) over pair differences, and its prediction rule.

Tran & Pham (docs/objectives/conerank.md). The model is the basis ``U = [u_1 … u_K]`` ([D, K]) with
``‖u_k‖ <= c``
(Algorithm 1, step 2b, enforced by :meth:`ConeRank.constrain` after every optimizer step),
optionally over a learned embedding ``enc(x)`` of the features (identity by default). The loss
(``differank.losses.cone``) sees the (encoded) features and ``{"basis": U}``.

Prediction (Algorithm 2) votes over pairs with the unconstrained fold-in ``w = U⁺ z``; since
``Σ_k w_k = vᵀ z`` with ``v = (U⁺)ᵀ 1``, it ranks exactly by the linear score ``s = enc(x)·v``
(docs/objectives/conerank.md#prediction-algorithm-2), which :meth:`ConeRank.forward` returns;
:meth:`ConeRank.algorithm2_scores` is the
literal voting path kept as the tested reference.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import torch
from torch import nn

from differank.losses.algorithms.cone_fold_in import cone_fold_in
from differank.losses.cone import normalise_differences
from differank.rankers.scorers.base import Ranker
from differank.rankers.scorers.linear import LinearRanker
from differank.rankers.scorers.transformer import ListEncoder

PREDICTIONS = ("linear", "rank", "two_direction")


def tie_rule_scores(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Rank-based scores that order by ``(score desc, index desc)``, Algorithm 2's tie rule.

    Exact ties (duplicate documents) go to the later document, as Algorithm 2's votes do
    (A5). Real documents get ``n - position`` (n, …, 1); padded slots get 0.

    Shape:
        scores, mask: [B, L] -> [B, L] in the dtype of ``scores``.

    Example:
        >>> tie_rule_scores(torch.tensor([[1.0, 3.0, 1.0]]), torch.ones(1, 3, dtype=torch.bool))
        tensor([[1., 3., 2.]])
    """
    keyed = torch.where(mask, scores, torch.full_like(scores, float("-inf"))).flip(-1)
    order = keyed.argsort(dim=-1, descending=True, stable=True)  # later index first on ties
    length = scores.shape[-1]
    position = torch.empty_like(order).scatter_(
        -1, order, torch.arange(length, device=scores.device).expand_as(order).contiguous()
    )
    position = position.flip(-1)
    points = mask.sum(dim=-1, keepdim=True) - position
    return torch.where(mask, points, torch.zeros_like(points)).to(scores.dtype)


class ConeRank(Ranker):
    """The cone basis ``U`` [D, K] (+ optional MLP encoder ``F -> D``) and Algorithm 2's scorer.

    Args:
        n_features: F, the input feature count.
        n_basis: K, the number of cone generators (paper: 10). K > D is allowed (warned once).
        rho: eq. 5's ρ; only used for the default radius. Defaults to ``sqrt(D)``.
        radius: c, the ball radius of each column; defaults to ``2 ρ`` (paper, Sec. 6).
        encoder_hidden: hidden widths of an MLP encoder ``F -> D`` (ReLU); None = identity.
        embed_dim: D for the encoder (defaults to F).
        transformer: instead of the MLP, a self-attention list encoder ``F -> D``
            (:class:`~differank.rankers.scorers.transformer.ListEncoder`; its options, e.g.
            ``{"d_model": 64, "num_layers": 2}``): documents are embedded in the context of their
            query, and the ranker then takes the batch mask (``uses_mask``).
        init_scale: columns start uniformly inside the ball of radius ``init_scale · c``.
        prediction: ``"linear"`` returns ``s = enc(x)·v``; ``"rank"`` returns the rank-based
            scores of :func:`tie_rule_scores`, bit-exact to Algorithm 2 on duplicates;
            ``"two_direction"`` the blog's rule, see :meth:`two_direction_scores`.
        constraint, alpha: the loss's fold-in constraint and eq. 5's α, used only by the
            two-direction rule (which compares constrained distances of normalised pairs).
        seed: seeds the basis initialisation (None: torch's global generator).

    Shape:
        features: [B, L, F] -> scores [B, L]; ``loss_target`` -> [B, L, D].

    Example:
        >>> ranker = ConeRank(n_features=4, n_basis=3, seed=0)
        >>> ranker(torch.randn(2, 5, 4)).shape, ranker.loss_inputs()["basis"].shape
        (torch.Size([2, 5]), torch.Size([4, 3]))
    """

    def __init__(
        self,
        n_features: int,
        n_basis: int = 10,
        radius: float | None = None,
        encoder_hidden: Sequence[int] | None = None,
        embed_dim: int | None = None,
        rho: float | None = None,
        init_scale: float = 1.0,
        prediction: str = "linear",
        constraint: str = "simplex",
        alpha: float = 1.0,
        seed: int | None = None,
        transformer: dict | None = None,
    ) -> None:
        super().__init__()
        if n_features < 1:
            raise ValueError(f"n_features must be >= 1, got {n_features}")
        if n_basis < 1:
            raise ValueError(f"n_basis must be >= 1, got {n_basis}")
        if prediction not in PREDICTIONS:
            raise ValueError(f"prediction must be one of {PREDICTIONS}, got {prediction!r}")
        if not 0.0 < init_scale <= 1.0:
            raise ValueError(f"init_scale must be in (0, 1], got {init_scale}")
        self.n_features = n_features
        self.prediction = prediction
        if constraint not in ("simplex", "cone"):
            raise ValueError(f"constraint must be 'simplex' or 'cone', got {constraint!r}")
        self.constraint, self.alpha = constraint, float(alpha)
        if transformer is not None:
            if encoder_hidden is not None:
                raise ValueError("give encoder_hidden (an MLP) or transformer, not both")
            dim = int(embed_dim or n_features)
            self.encoder: nn.Module = ListEncoder(n_features, out_features=dim, **dict(transformer))
            self.uses_mask = True
        elif encoder_hidden is None:
            if embed_dim not in (None, n_features):
                raise ValueError("embed_dim needs an encoder (encoder_hidden); identity keeps F")
            self.encoder = nn.Identity()
            dim = n_features
        else:
            dim = int(embed_dim or n_features)
            layers: list[nn.Module] = []
            width = n_features
            for size in encoder_hidden:
                layers += [nn.Linear(width, int(size)), nn.ReLU()]
                width = int(size)
            layers.append(nn.Linear(width, dim))
            self.encoder = nn.Sequential(*layers)
        self.embed_dim = dim
        rho = math.sqrt(dim) if rho is None else float(rho)
        self.rho = rho
        self.radius = 2.0 * rho if radius is None else float(radius)
        if self.radius <= 0:
            raise ValueError(f"radius must be > 0, got {self.radius}")
        if n_basis > dim:
            warnings.warn(
                f"ConeRank with K={n_basis} > D={dim}: UᵀU is singular; prediction uses the "
                "pseudo-inverse",
                stacklevel=2,
            )
        generator = None if seed is None else torch.Generator().manual_seed(int(seed))
        direction = torch.randn(dim, n_basis, generator=generator)
        direction = direction / direction.norm(dim=0, keepdim=True).clamp(min=1e-12)
        # uniform in the ball: radius c·u^(1/D)
        length = torch.rand(1, n_basis, generator=generator).pow(1.0 / dim)
        self.basis = nn.Parameter(direction * length * (init_scale * self.radius))

    def encode(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``enc(x)`` [B, L, D]; ``mask`` reaches only a list encoder (``uses_mask``)."""
        return self.encoder(features, mask) if self.uses_mask else self.encoder(features)

    def loss_target(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The vectors the cone orders: the encoded features [B, L, D]."""
        return self.encode(features, mask)

    def loss_inputs(self) -> dict[str, torch.Tensor]:
        return {"basis": self.basis}

    @torch.no_grad()
    def constrain(self) -> None:
        """Project each column back onto the ball ``‖u_k‖ <= c`` (Algorithm 1, step 2b)."""
        norms = self.basis.norm(dim=0, keepdim=True)
        scale = (self.radius / norms.clamp(min=1e-30)).clamp(max=1.0)
        self.basis.mul_(scale)

    def direction(self) -> torch.Tensor:
        """``v = (U⁺)ᵀ 1_K`` [D]: Algorithm 2's Σ_k w_k is ``vᵀ z``
        (docs/objectives/conerank.md#prediction-algorithm-2)."""
        pinv = torch.linalg.pinv(self.basis)  # [K, D], min-norm least squares
        return pinv.sum(dim=0)

    def forward(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Closed-form Algorithm 2: ``s = enc(x)·v`` (or its rank-based tie-rule scores)."""
        if self.prediction == "two_direction":
            return self.two_direction_scores(features, mask)
        scores = self.encode(features, mask) @ self.direction()
        if self.prediction == "rank":
            if mask is None:
                mask = torch.ones(scores.shape, dtype=torch.bool, device=scores.device)
            return tie_rule_scores(scores, mask)
        return scores

    @torch.no_grad()
    def algorithm2_scores(
        self, features: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Algorithm 2 literally: the vote counts A [B, L] (reference path, O(L²·D·K)).

        For every unordered pair l < m of real documents, fold ``z = x_l - x_m`` in without
        constraints (min-norm least squares ``w = U⁺ z``); vote for l if ``Σ w > 0``, else
        (including 0) for m. Padded slots get 0 votes.
        """
        encoded = self.encode(features, mask)
        if mask is None:
            mask = torch.ones(encoded.shape[:2], dtype=torch.bool, device=encoded.device)
        encoded = torch.where(mask.unsqueeze(-1), encoded, torch.zeros_like(encoded))
        z = encoded.unsqueeze(2) - encoded.unsqueeze(1)  # [B, L, L, D]
        w = z @ torch.linalg.pinv(self.basis).T  # [B, L, L, K]: the fold-in of every pair
        positive = w.sum(dim=-1) > 0
        length = encoded.shape[1]
        upper = torch.ones(length, length, dtype=torch.bool, device=encoded.device).triu(1)
        pairs = upper & mask.unsqueeze(-1) & mask.unsqueeze(-2)  # l < m, both real
        wins_first = (pairs & positive).sum(dim=2)  # l beats m > l
        wins_second = (pairs & ~positive).sum(dim=1)  # m beats l < m
        return (wins_first + wins_second).to(encoded.dtype)

    @torch.no_grad()
    def two_direction_scores(
        self, features: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The blog's rule: "try both orders and compare the error of the two directions".

        For every pair l < m, l wins when ``d²(z̃_lm) < d²(z̃_ml)`` with the constrained fold-in
        the loss trains (``constraint``, eq. 5 normalisation), else m (ties, e.g. duplicates,
        go to m as in A5). Scores are the votes plus ``sigmoid(s_linear) / 2`` to break vote
        ties. Without ``mask``, all-zero rows (batch padding) are treated as padding.
        Cost: two fold-ins per pair, O(L²·K·T) per query.
        """
        encoded = self.encode(features, mask)
        if mask is None:
            mask = encoded.ne(0).any(dim=-1)
        encoded = torch.where(mask.unsqueeze(-1), encoded, torch.zeros_like(encoded))
        batch, length, dim = encoded.shape
        upper = torch.ones(length, length, dtype=torch.bool, device=encoded.device).triu(1)
        pairs = upper & mask.unsqueeze(-1) & mask.unsqueeze(-2)
        query, first, second = torch.where(pairs)
        z = normalise_differences(
            encoded[query, first] - encoded[query, second], self.alpha, self.rho
        )
        both = torch.cat([z, -z])
        w = cone_fold_in(both, self.basis, constraint=self.constraint)
        distance = (both - w @ self.basis.T).pow(2).sum(dim=-1)
        forward_wins = distance[: len(z)] < distance[len(z) :]
        votes = torch.zeros(batch * length, dtype=encoded.dtype, device=encoded.device)
        winner = torch.where(forward_wins, first, second) + query * length
        votes = votes.index_add(0, winner, torch.ones_like(winner, dtype=encoded.dtype))
        linear = encoded @ self.direction()
        scores = votes.view(batch, length) + 0.5 * torch.sigmoid(linear)
        return torch.where(mask, scores, torch.zeros_like(scores))

    def serving_ranker(self) -> Ranker:
        """With the identity encoder, the equivalent :class:`LinearRanker`; with an encoder and
        ``prediction="linear"``, the encoder followed by the fixed direction v
        (:class:`EncodedLinear`): no pseudo-inverse at serving time (ONNX has no
        ``linalg_pinv``). Other predictions with an encoder serve ConeRank itself."""
        if isinstance(self.encoder, nn.Identity):
            return self.export_linear()
        if self.prediction == "linear":
            with torch.no_grad():
                direction = self.direction()
            return EncodedLinear(self.encoder, direction, self.uses_mask, self.n_features)
        return self

    @torch.no_grad()
    def export_linear(self) -> LinearRanker:
        """The trained cone as a :class:`LinearRanker` with weight v and bias 0 (same scores)."""
        if not isinstance(self.encoder, nn.Identity):
            raise ValueError("export_linear needs the identity encoder (encoder_hidden=None)")
        linear = LinearRanker(self.n_features)
        direction = self.direction()
        linear.linear.weight.copy_(direction.unsqueeze(0).to(linear.linear.weight.dtype))
        return linear.to(self.basis.device)


class EncodedLinear(Ranker):
    """``enc(x) · v`` with a fixed direction ``v`` [D]: ConeRank's linear prediction for serving.

    Shape:
        features: [B, L, F] (and ``mask`` [B, L] when the encoder takes it) -> scores [B, L].
    """

    def __init__(
        self, encoder: nn.Module, direction: torch.Tensor, uses_mask: bool, n_features: int
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.uses_mask = uses_mask
        self.n_features = n_features
        self.register_buffer("direction", direction.detach().clone())

    def forward(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        encoded = self.encoder(features, mask) if self.uses_mask else self.encoder(features)
        return encoded @ self.direction
