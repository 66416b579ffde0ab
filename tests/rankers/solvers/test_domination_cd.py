"""Coordinate-descent domination solver (thesis Algs. 1–7,
docs/objectives/domination.md#coordinate-descent-with-feature-induction) against the loss module."""

from __future__ import annotations

import math

import pytest
import torch

from differank.losses.domination import domination_loss
from differank.rankers.solvers.domination_cd import DominationCD, soft_threshold


def random_set(seed: int, queries: int = 6, length: int = 8, features: int = 5, density=0.5):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(queries, length, features, generator=g, dtype=torch.float64)
    x = x * (torch.rand(queries, length, features, generator=g) < density)
    labels = torch.randint(0, 3, (queries, length), generator=g).double()
    mask = torch.rand(queries, length, generator=g) < 0.85
    mask[:, :2] = True
    labels[0] = 1.0  # a single-label query: contributes nothing
    return x, labels, mask


def loss_of(solver: DominationCD, x, labels, mask, w):
    options = dict(
        margin_scale=solver.margin_scale,
        margin_offset=solver.margin_offset,
        flat=solver.flat,
        pool=solver.pool,
    )
    return domination_loss(x @ w, labels, mask, **options)


VARIANTS = [
    {},
    {"margin_scale": 0.5, "margin_offset": 0.2},
    {"flat": True},
    {"pool": True},
    {"bound": "range"},
]


class TestDominationCD:
    @pytest.mark.parametrize("options", VARIANTS)
    def test_coordinate_gradient_and_objective_match_autograd(self, options):
        x, labels, mask = random_set(0)
        solver = DominationCD(5, l1=0.01, l2=0.02, **options)
        solver.prepare(x, labels, mask)
        for r in range(5):  # move away from w = 0 so every cache is exercised
            solver.step(r)
        w = solver.w.clone().requires_grad_(True)
        loss = loss_of(solver, x, labels, mask, w)
        (grad,) = torch.autograd.grad(loss, w)
        ours = torch.tensor([solver.coordinate_gradient(r) for r in range(5)], dtype=torch.float64)
        torch.testing.assert_close(ours, grad, rtol=1e-9, atol=1e-12)
        penalty = 0.01 * w.abs().sum() + 0.02 * w.square().sum()
        assert solver.objective() == pytest.approx(float((loss + penalty).detach()), rel=1e-12)

    def test_bound_is_an_upper_bound(self):
        x, labels, mask = random_set(1)
        for bound in ("thesis", "range"):
            solver = DominationCD(5, bound=bound)
            solver.prepare(x, labels, mask)
            base = solver.objective()
            for r in range(5):
                g, beta = solver.coordinate_gradient(r), solver.beta_list[r]
                for delta in (-1.0, -0.1, 0.3, 2.0):
                    w = solver.w.clone()
                    w[r] += delta
                    value = float(loss_of(solver, x, labels, mask, w))
                    assert value <= base + g * delta + 0.5 * beta * delta**2 + 1e-12

    def test_soft_threshold(self):
        assert soft_threshold(3.0, 1.0) == 2.0
        assert soft_threshold(-3.0, 1.0) == -2.0
        assert soft_threshold(0.5, 1.0) == 0.0
        values = torch.tensor([-2.0, -0.5, 0.0, 0.5, 2.0])
        expected = torch.tensor([-1.0, 0.0, 0.0, 0.0, 1.0])
        torch.testing.assert_close(soft_threshold(values, 1.0), expected)

    @pytest.mark.parametrize("l1", [0.0, 0.005, 0.05, 10.0])
    def test_l1_update_is_soft_threshold(self, l1):
        x, labels, mask = random_set(2)
        solver = DominationCD(5, l1=l1)
        solver.prepare(x, labels, mask)
        solver.w[2] = 0.3  # a non-zero start, so both sides of the threshold are exercised
        solver._key = None  # margins are rebuilt from the new w
        solver.prepare(x, labels, mask)
        for r in range(5):
            old, g, beta = float(solver.w[r]), solver.coordinate_gradient(r), solver.beta_list[r]
            solver.step(r)
            expected = soft_threshold(old - g / beta, l1 / beta)
            assert float(solver.w[r]) == pytest.approx(expected, rel=1e-12, abs=1e-15)
        if l1 == 10.0:
            assert torch.all(solver.w == 0)

    def test_l2_update(self):
        x, labels, mask = random_set(3)
        solver = DominationCD(5, l2=0.1)
        solver.prepare(x, labels, mask)
        for r in range(5):
            old, g, beta = float(solver.w[r]), solver.coordinate_gradient(r), solver.beta_list[r]
            solver.step(r)
            expected = old + (-g - 0.2 * old) / (beta + 0.2)
            assert float(solver.w[r]) == pytest.approx(expected, rel=1e-12)

    @pytest.mark.parametrize("options", [{"l1": 0.01}, {"l2": 0.01}, {"l1": 0.002, "l2": 0.003}])
    def test_objective_decreases_monotonically(self, options):
        x, labels, mask = random_set(4, features=8)
        solver = DominationCD(8, **options)
        solver.prepare(x, labels, mask)
        previous = solver.objective()
        for _ in range(15):
            for r in range(8):
                promised = solver.step(r)
                current = solver.objective()
                assert current <= previous + 1e-12 * abs(previous)
                assert previous - current >= promised - 1e-10  # the bound's guarantee holds
                previous = current

    def test_fit_step_protocol_and_convergence(self):
        x, labels, mask = random_set(5)
        solver = DominationCD(5, l2=0.01, sweeps_per_step=50, tol=1e-4)
        for _ in range(20):
            stats = solver.fit_step(x.float(), labels, mask)
            if solver.converged:
                break
        assert solver.converged
        assert {"objective", "nnz", "sweeps"} <= set(stats)
        weight = solver.ranker.linear.weight[0].double()
        torch.testing.assert_close(weight, solver.w.float().double())
        scores = solver.ranker(x.float())
        assert scores.shape == mask.shape

    def test_feature_induction_returns_sparse_model(self):
        g = torch.Generator().manual_seed(6)
        queries, length, features = 40, 10, 60
        x = torch.randn(queries, length, features, generator=g, dtype=torch.float64)
        truth = torch.zeros(features, dtype=torch.float64)
        truth[:3] = torch.tensor([2.0, -1.5, 1.0])
        utility = x @ truth + 0.3 * torch.randn(queries, length, generator=g, dtype=torch.float64)
        labels = torch.bucketize(utility, torch.tensor([0.0, 1.5], dtype=torch.float64)).double()
        mask = torch.ones(queries, length, dtype=torch.bool)
        solver = DominationCD(features, l1=0.02, induction=True, alpha=2, induction_tol=1e-3)
        rounds = 0
        while not solver.converged and rounds < 30:
            stats = solver.fit_step(x, labels, mask)
            rounds += 1
        assert solver.converged
        assert stats["nnz"] <= 10 and torch.all(solver.w[:3] != 0)
        assert torch.sign(solver.w[:3]).tolist() == [1.0, -1.0, 1.0]

    @pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
    def test_sparse_inputs_match_dense(self):
        x, labels, mask = random_set(7, features=6, density=0.3)
        results = []
        csr = x.reshape(-1, 6).to_sparse_csr()
        for features in (x, x.to_sparse(), csr):
            solver = DominationCD(6, l1=0.001)
            for _ in range(3):
                solver.fit_step(features, labels, mask)
            results.append(solver.w)
        torch.testing.assert_close(results[0], results[1], rtol=1e-12, atol=0)
        torch.testing.assert_close(results[0], results[2], rtol=1e-12, atol=0)

    def test_negative_sampling_keeps_fraction_of_lowest_layer(self):
        g = torch.Generator().manual_seed(8)
        x = torch.randn(50, 20, 3, generator=g)
        labels = (torch.rand(50, 20, generator=g) < 0.2).double()
        mask = torch.ones(50, 20, dtype=torch.bool)
        full, sampled = DominationCD(3), DominationCD(3, negative_fraction=0.3, seed=1)
        full.prepare(x, labels, mask)
        sampled.prepare(x, labels, mask)
        negatives = int((labels == 0).sum())
        kept = sampled.n_docs - int((labels > 0).sum())
        assert full.n_docs == 1000
        assert 0.2 * negatives < kept < 0.4 * negatives

    def test_label_margins_are_the_thesis_offsets(self):
        """The solver's margins s(i) = k1·label_i + k2 for positives (thesis Alg. 5), checked
        against the loss given the pairwise margins Δ(i, j) = s(i) − s(j) written out here."""
        x, labels, mask = random_set(3)
        solver = DominationCD(5, margin_scale=0.5, margin_offset=0.2)
        solver.prepare(x, labels, mask)
        for r in range(5):
            solver.step(r)
        real = torch.where(mask, labels, 0.0)
        s = torch.where(real > 0, 0.5 * real + 0.2, 0.0)
        pairwise = s.unsqueeze(-1) - s.unsqueeze(-2)
        expected = domination_loss(x @ solver.w, labels, mask, margins=pairwise)
        assert solver.objective() == pytest.approx(float(expected), rel=1e-12)

    def test_extreme_margins_finite(self):
        x, labels, mask = random_set(9)
        solver = DominationCD(5)
        solver.w[:] = torch.tensor([500.0, -800.0, 300.0, 1000.0, -1000.0])
        solver.prepare(x, labels, mask)
        assert math.isfinite(solver.objective())
        assert torch.isfinite(solver.h).all()
        for r in range(5):
            assert math.isfinite(solver.coordinate_gradient(r))
            solver.step(r)
        assert math.isfinite(solver.objective())

    def test_update_cost_follows_feature_nonzeros(self):
        """10,000 sparse features at 1% density: an update touches O(nnz_r · list length)
        entries, independent of the number of documents and features (counted, not timed)."""
        g = torch.Generator().manual_seed(10)
        queries, length, features = 200, 10, 10_000
        n_rows = queries * length
        density = torch.linspace(0.001, 0.019, features)  # mean 1%
        counts = torch.binomial(torch.full((features,), float(n_rows)), density, generator=g)
        cols = torch.repeat_interleave(torch.arange(features), counts.long())
        rows = torch.randint(0, n_rows, (cols.numel(),), generator=g)
        vals = torch.rand(cols.numel(), generator=g, dtype=torch.float64) + 0.1
        index = torch.stack([rows, cols])
        x = torch.sparse_coo_tensor(index, vals, (n_rows, features), check_invariants=True)
        labels = torch.randint(0, 3, (queries, length), generator=g).double()
        mask = torch.ones(queries, length, dtype=torch.bool)
        solver = DominationCD(features)
        solver.prepare(x, labels, mask)
        assert 0.009 < solver.vals.numel() / (n_rows * features) < 0.011
        for r in range(0, features, 250):
            nnz = solver.col_ptr[r + 1] - solver.col_ptr[r]
            before = solver.work
            solver.step(r)
            work = solver.work - before
            assert nnz <= work <= nnz * (1 + length)
        sparse_r, dense_r = 0, features - 1  # nnz ≈ 2 vs ≈ 38
        costs = []
        for r in (sparse_r, dense_r):
            before = solver.work
            solver.step(r)
            costs.append(solver.work - before)
        assert costs[0] < 0.05 * n_rows and costs[0] * 5 < costs[1]

    def test_bad_hyperparameters(self):
        with pytest.raises(ValueError, match="l1"):
            DominationCD(3, l1=-1.0)
        with pytest.raises(ValueError, match="bound"):
            DominationCD(3, bound="exact")
        with pytest.raises(ValueError, match="negative_fraction"):
            DominationCD(3, negative_fraction=0.0)
        x, labels, mask = random_set(11)
        with pytest.raises(ValueError, match="columns"):
            DominationCD(4).fit_step(x, labels, mask)
