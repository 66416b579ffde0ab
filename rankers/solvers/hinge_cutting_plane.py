"""The report's Algorithm 1: cutting-plane training of a linear scorer on the NDCG@k hinge.

Primal (report eq. 8, margin rescaling), written on the scale of a mean loss so that it is the
objective the gradient path minimises with Adam's (coupled) ``weight_decay``::

    min_w  (1/Q) Σ_q ξ_q + (weight_decay/2)·‖w‖²,
    ξ_q ≥ Δ_q(y) − wᵀ(Ψ_q(y*) − Ψ_q(y))   for all rankings y,     Ψ_q(y) = Σ_i x_i A(y_i),

i.e. the paper's ``λ/2‖w‖² + Σ_q ξ_q`` with ``λ = Q·weight_decay`` (Q = valid training queries).
Each :meth:`HingeCuttingPlane.fit_step` is one round of Algorithm 1 over all queries: exact
loss-augmented inference (``differank.losses.hinge.hinge_inference``, the batched label-level DP)
finds each query's most violated ranking ŷ, every constraint violated by more than ``epsilon`` joins
its query's working set, and the dual QP over the working sets (report eq. 13),

    max_α  Σ α_qj Δ_qj − 1/(2λ)·‖Σ α_qj a_qj‖²,   α ≥ 0,  Σ_j α_qj ≤ 1 per query,

is re-solved, warm-started, through its primal in R^F: a log-sum-exp smoothing of the
working-set hinge minimised by damped Newton steps while the smoothing shrinks to 1e-7; the
softmax weights are the dual α and ``w = Σ α_qj a_qj / λ`` (see ``_solve_dual``). The QP solver
is written here in torch (no optional extra): w has F entries, so each Newton step is a few
[Q, J, F] contractions and one F×F solve. (The report re-solves the QP after each query's
new constraint; one QP per round over all new constraints is the usual batched variant and has
the same stopping rule.) The primal/dual gap uses the exact primal (all rankings, by the same
inference), so it bounds the suboptimality. Training stops when no constraint is violated by
more than ``epsilon``.

With ``ystar="index"`` y* is fixed and this is exactly the convex problem of the paper. With the
default ``"compatible"`` (docs/objectives/hinge.md#the-correct-ranking-ystar) y* follows the current
scores: each round recomputes
``Ψ_q(y*)`` and the working-set constraints with it (a concave-convex step), so the gap is that
of the convex problem of the round's y*.
"""

from __future__ import annotations

import math

import torch

from differank.losses.hinge import YSTARS, hinge_inference
from differank.rankers.scorers.linear import LinearRanker


class HingeCuttingPlane:
    """Cutting-plane (Algorithm 1) fit of a bias-free linear scorer on the NDCG@k hinge.

    Args:
        n_features: F.
        k: NDCG truncation, also in A(r) (docs/objectives/hinge.md#defaults-and-why).
        weight_decay: the ridge ``weight_decay/2·‖w‖²`` on the mean-ξ scale (λ = Q·weight_decay).
        ystar: ``"compatible"`` or ``"index"`` (docs/objectives/hinge.md#the-correct-ranking-ystar).
        epsilon: a constraint joins the working set if it is violated by more than this (on the
            ξ_q scale); training converges when none is.

    Example:
        >>> features = torch.randn(4, 6, 3, generator=torch.Generator().manual_seed(0))
        >>> labels = torch.tensor([[2.0, 1, 0, 0, 0, 1]]).repeat(4, 1)
        >>> solver = HingeCuttingPlane(n_features=3, k=3)
        >>> stats = solver.fit_step(features, labels, torch.ones(4, 6, dtype=torch.bool))
        >>> stats["constraints"] > 0 and solver.ranker(features).shape == (4, 6)
        True
    """

    def __init__(
        self,
        n_features: int,
        *,
        k: int = 10,
        weight_decay: float = 0.01,
        ystar: str = "compatible",
        epsilon: float = 1e-3,
    ) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(
                f"k must be an integer >= 1, got {k!r} (model=hinge_cutting_plane takes it from "
                "loss.k: pair with loss=hinge, or set model.solver.k)"
            )
        if weight_decay <= 0:
            raise ValueError(f"weight_decay must be > 0 (the paper's λ/Q), got {weight_decay}")
        if ystar not in YSTARS:
            raise ValueError(f"ystar must be one of {YSTARS}, got {ystar!r}")
        if epsilon <= 0:
            raise ValueError(f"epsilon must be > 0, got {epsilon}")
        self.ranker = LinearRanker(n_features, bias=False)
        self.k, self.weight_decay, self.ystar = k, float(weight_decay), ystar
        self.epsilon = epsilon
        self.converged = False
        self.rounds = 0
        self.w = torch.zeros(n_features, dtype=torch.float64)
        # the working set (Ψ_q(ŷ) of each constraint [Q, J, F], Δ_q(ŷ) [Q, J], active [Q, J]
        # bool, dual variables [Q, J]): empty until the first round makes it for its queries
        self._reset(0, n_features, self.w.device)
        self.psi_star: torch.Tensor | None = None  # Ψ_q(y*) the last QP used [Q, F]

    # -- one round ---------------------------------------------------------------------------

    @torch.no_grad()
    def fit_step(
        self, features: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor
    ) -> dict[str, float]:
        x = torch.where(mask.unsqueeze(-1), features, torch.zeros_like(features)).double()
        self.w = self.w.to(x.device)
        queries = x.shape[0]
        weight_hat, weight_star, delta_hat, valid = self._inference(x, labels, mask)
        count = max(int(valid.sum()), 1)
        lam = self.weight_decay * count
        psi_hat = torch.einsum("ql,qlf->qf", weight_hat, x)
        psi_star = torch.einsum("ql,qlf->qf", weight_star, x)
        zero = torch.zeros_like(delta_hat)
        xi = torch.where(valid, delta_hat + (psi_hat - psi_star) @ self.w, zero)
        ridge = 0.5 * lam * self.w.square().sum()
        if self.rounds == 0:
            self._reset(queries, x.shape[-1], x.device)
        # Gap of the last QP's convex problem (its y*; ŷ does not depend on y*) at the current w.
        reference = psi_star if self.psi_star is None else self.psi_star
        xi_reference = torch.where(valid, delta_hat + (psi_hat - reference) @ self.w, zero)
        dual = self._dual(reference, lam)
        working_xi = self._working_slack(psi_star)
        violation = torch.where(valid, xi - working_xi, zero)
        add = violation > self.epsilon
        stats = {
            "objective": float(ridge + xi.sum()) / count,
            "dual": float(dual) / count,
            "gap": float(ridge + xi_reference.sum() - dual) / count,
            "max_violation": float(violation.max()) if queries else 0.0,
        }
        if bool(add.any()):
            self._append(add, psi_hat, delta_hat)
            steps = self._solve_dual(psi_star, lam)
            self.psi_star = psi_star
        else:
            self.converged = True
            steps = 0
        self.rounds += 1
        self.ranker.linear.weight.copy_(self.w.to(self.ranker.linear.weight).unsqueeze(0))
        stats.update(
            added=float(add.sum()),
            constraints=float(self.active.sum()),
            newton_steps=float(steps),
            weight_norm=float(self.w.norm()),
        )
        return stats

    # -- pieces ------------------------------------------------------------------------------

    def _inference(self, x, labels, mask):
        scores = x @ self.w
        return hinge_inference(scores, labels, mask, k=self.k, ystar=self.ystar)

    def _reset(self, queries: int, features: int, device: torch.device) -> None:
        self.psi = torch.zeros(queries, 0, features, dtype=torch.float64, device=device)
        self.delta = torch.zeros(queries, 0, dtype=torch.float64, device=device)
        self.active = torch.zeros(queries, 0, dtype=torch.bool, device=device)
        self.alpha = torch.zeros(queries, 0, dtype=torch.float64, device=device)

    def _append(self, add, psi_hat, delta_hat) -> None:
        """One new working-set column; only the queries with a violated constraint fill it."""
        self.psi = torch.cat([self.psi, psi_hat.unsqueeze(1)], dim=1)
        self.delta = torch.cat([self.delta, delta_hat.unsqueeze(1)], dim=1)
        self.active = torch.cat([self.active, add.unsqueeze(1)], dim=1)
        self.alpha = torch.cat([self.alpha, torch.zeros_like(delta_hat).unsqueeze(1)], dim=1)

    def _margins(self, psi_star: torch.Tensor) -> torch.Tensor:
        """Constraint vectors ``a_qj = Ψ_q(y*) − Ψ_q(ŷ_j)`` [Q, J, F] (0 where inactive)."""
        a = psi_star.unsqueeze(1) - self.psi
        return torch.where(self.active.unsqueeze(-1), a, torch.zeros_like(a))

    def _working_slack(self, psi_star: torch.Tensor) -> torch.Tensor:
        """``max(0, max_j Δ_qj − wᵀa_qj)`` over the working set [Q]."""
        if self.active.shape[1] == 0:
            return torch.zeros(psi_star.shape[0], dtype=torch.float64, device=psi_star.device)
        slack = self.delta - self._margins(psi_star) @ self.w
        slack = torch.where(self.active, slack, torch.zeros_like(slack))
        return slack.amax(dim=1).clamp(min=0.0)

    def _dual(self, psi_star: torch.Tensor, lam: float) -> torch.Tensor:
        if self.active.shape[1] == 0:
            return torch.zeros((), dtype=torch.float64)
        direction = torch.einsum("qj,qjf->f", self.alpha, self._margins(psi_star))
        return (self.alpha * self.delta).sum() - direction.square().sum() / (2.0 * lam)

    def _solve_dual(self, psi_star: torch.Tensor, lam: float) -> int:
        """Solve the working-set QP; sets ``w`` and the dual ``alpha``. Returns Newton steps.

        The primal over the working sets, ``λ/2‖w‖² + Σ_q max(0, max_j Δ_qj − wᵀa_qj)``, is
        smoothed as ``μ·log(1 + Σ_j exp((Δ_qj − wᵀa_qj)/μ))`` and minimised by damped Newton
        steps in R^F (exact F×F Hessian) while μ shrinks tenfold from 1 to ``1e-7``. The
        softmax weights ``α_qj`` are dual feasible (α ≥ 0, Σ_j α_qj ≤ 1) and at each smoothed
        optimum ``w = Σ α_qj a_qj / λ``, so the duality gap shrinks with μ (≤ μ·Σ_q log(1 + J_q)
        at the exact smoothed optimum); the stage with the best dual value gives ``alpha``.
        """
        a = self._margins(psi_star)  # [Q, J, F]
        delta = torch.where(self.active, self.delta, torch.zeros_like(self.delta))
        eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
        w = self.w.clone()
        steps = 0

        def smoothed(w: torch.Tensor, mu: float) -> tuple[torch.Tensor, torch.Tensor]:
            z = torch.where(self.active, (delta - a @ w) / mu, torch.full_like(delta, -math.inf))
            z = torch.cat([torch.zeros_like(z[:, :1]), z], dim=1)  # the ξ_q ≥ 0 option
            lse = torch.logsumexp(z, dim=1)
            value = 0.5 * lam * w.square().sum() + mu * lse.sum()
            return value, torch.exp(z[:, 1:] - lse.unsqueeze(1))  # α [Q, J]

        mu, best_dual, best_alpha = 1.0, -math.inf, self.alpha
        while mu >= 1e-7:
            for _ in range(50):
                value, alpha = smoothed(w, mu)
                mean_a = torch.einsum("qj,qjf->qf", alpha, a)
                gradient = lam * w - mean_a.sum(dim=0)
                weighted = (alpha.unsqueeze(-1) * a).reshape(-1, a.shape[-1])
                second = a.reshape(-1, a.shape[-1]).T @ weighted - mean_a.T @ mean_a
                hessian = lam * eye + second / mu
                direction = -torch.linalg.solve(hessian, gradient)
                decrement = float(-(gradient @ direction))
                if decrement < 1e-12 * max(1.0, float(value)):
                    break
                step = 1.0
                while step > 1e-10:  # Armijo backtracking
                    if float(smoothed(w + step * direction, mu)[0]) <= float(value) - (
                        0.25 * step * decrement
                    ):
                        break
                    step *= 0.5
                w = w + step * direction
                steps += 1
            # Every stage's softmax weights are dual feasible: keep the best dual value seen.
            alpha = smoothed(w, mu)[1]
            direction_sum = torch.einsum("qj,qjf->f", alpha, a)
            dual = float((alpha * delta).sum() - direction_sum.square().sum() / (2.0 * lam))
            if dual > best_dual:
                best_dual, best_alpha = dual, alpha
            mu /= 10.0
        # Newton's w, not Σαa/λ: at μ = 1e-7 the residual gradient is tiny in value but not in w.
        self.alpha = best_alpha
        self.w = w
        return steps
