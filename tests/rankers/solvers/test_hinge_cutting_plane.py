"""The report's Algorithm 1 (rankers/solvers/hinge_cutting_plane.py) on small synthetic ranking
sets."""

from __future__ import annotations

import pytest
import torch

from differank.losses.hinge import structured_hinge_loss
from differank.rankers.solvers.hinge_cutting_plane import HingeCuttingPlane


def synthetic(queries=40, length=15, features=6, seed=0):
    """Linear-ish relevance with noise, 3 label levels, ragged lists."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(queries, length, features, generator=g)
    truth = torch.randn(features, generator=g)
    signal = x @ truth + 0.7 * torch.randn(queries, length, generator=g)
    labels = (signal > 0.8).float() + (signal > 1.8).float()
    sizes = torch.randint(5, length + 1, (queries,), generator=g)
    mask = torch.arange(length).unsqueeze(0) < sizes.unsqueeze(1)
    x = torch.where(mask.unsqueeze(-1), x, torch.zeros_like(x))
    return x, labels.masked_fill(~mask, float("nan")), mask


def objective(w, x, labels, mask, k, weight_decay, ystar):
    """Mean ξ over valid queries + weight_decay/2·‖w‖², straight from the loss function."""
    scores = torch.where(mask, x.double() @ w, torch.zeros_like(mask, dtype=torch.float64))
    xi = structured_hinge_loss(scores, labels.double(), mask, k=k, ystar=ystar, reduction="mean")
    return xi + 0.5 * weight_decay * w.square().sum()


def fit(solver, x, labels, mask, rounds=60):
    history = []
    for _ in range(rounds):
        history.append(solver.fit_step(x, labels, mask))
        if solver.converged:
            break
    return history


class TestHingeCuttingPlane:
    @pytest.mark.parametrize("ystar", ["index", "compatible"])
    def test_converges_with_small_gap_and_no_violated_constraint(self, ystar):
        x, labels, mask = synthetic()
        solver = HingeCuttingPlane(n_features=6, k=5, weight_decay=0.01, ystar=ystar)
        history = fit(solver, x, labels, mask)
        assert solver.converged
        last = history[-1]
        assert last["max_violation"] <= solver.epsilon and last["added"] == 0
        assert 0 <= last["gap"] < 5e-3 < history[1]["gap"]
        assert last["dual"] <= last["objective"] + 1e-9  # weak duality
        assert [h["constraints"] for h in history] == sorted(h["constraints"] for h in history)
        # the stats' objective is the loss module's objective at the fitted weights
        w = solver.ranker.linear.weight.detach().double().squeeze(0)
        value = objective(w, x, labels, mask, 5, 0.01, ystar)
        assert value.item() == pytest.approx(last["objective"], rel=1e-5)

    @pytest.mark.slow  # 6 s
    def test_index_ystar_reaches_the_convex_optimum(self):
        """With a fixed y* the problem is convex: no long subgradient run beats the fit."""
        x, labels, mask = synthetic(seed=1)
        solver = HingeCuttingPlane(n_features=6, k=5, weight_decay=0.01, ystar="index")
        fit(solver, x, labels, mask)
        fitted = objective(solver.w, x, labels, mask, 5, 0.01, "index").item()
        w = torch.zeros(6, dtype=torch.float64, requires_grad=True)
        optimizer = torch.optim.Adam([w], lr=0.01)
        best = float("inf")
        for step in range(1500):
            if step == 1000:
                optimizer.param_groups[0]["lr"] = 0.001
            optimizer.zero_grad()
            value = objective(w, x, labels, mask, 5, 0.01, "index")
            best = min(best, value.item())
            value.backward()
            optimizer.step()
        assert fitted <= best + 2e-3
        assert solver.rounds > 1

    def test_ranker_scores_with_the_fitted_weights(self):
        x, labels, mask = synthetic(queries=10)
        solver = HingeCuttingPlane(n_features=6, k=3)
        solver.fit_step(x, labels, mask)
        expected = (x.double() @ solver.w).float()
        torch.testing.assert_close(solver.ranker(x), expected)
        assert solver.ranker.linear.bias is None  # the hinge is invariant to a shared shift

    def test_no_valid_query_converges_at_once(self):
        x, _, mask = synthetic(queries=5)
        labels = torch.zeros(mask.shape)
        solver = HingeCuttingPlane(n_features=6)
        stats = solver.fit_step(x, labels, mask)
        assert solver.converged and stats["constraints"] == 0 and stats["objective"] == 0

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            ({"k": 0}, "k"),
            ({"weight_decay": 0.0}, "weight_decay"),
            ({"ystar": "x"}, "ystar"),
            ({"epsilon": 0.0}, "epsilon"),
        ],
    )
    def test_bad_hyperparameters(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            HingeCuttingPlane(n_features=3, **kwargs)
