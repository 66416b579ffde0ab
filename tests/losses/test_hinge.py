"""Structured NDCG@k hinge (docs/objectives/hinge.md#the-loss): both exact solvers against brute
force and scipy's LSA, the static path and the bounds; the contract every loss keeps (padding,
permutation, reductions, gradient vs the oracle, both solvers) is
tests/losses/test_loss_contract.py."""

from __future__ import annotations

import math

import pytest
import torch

from differank.losses.algorithms.ndcg_assignment import (
    assignment_positions,
    gains_and_ideal_dcg,
    hungarian_min,
    label_level_dp,
)
from differank.losses.hinge import StructuredHingeLoss, structured_hinge_loss
from tests import oracles

SOLVERS = ("dp", "assignment")


def random_batch(batch, length, levels, *, seed, min_docs=1, dtype=torch.float64):
    """Padded batch with NaN padding, integer labels in [0, levels), generic (untied) scores."""
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(min_docs, length + 1, (batch,), generator=g)
    mask = torch.arange(length).unsqueeze(0) < sizes.unsqueeze(1)
    labels = torch.randint(0, levels, (batch, length), generator=g).to(dtype)
    scores = torch.randn(batch, length, generator=g, dtype=dtype)
    perm = torch.rand(batch, length, generator=g).argsort(dim=1)  # padding anywhere in the row
    mask, labels, scores = mask.gather(1, perm), labels.gather(1, perm), scores.gather(1, perm)
    labels = labels.masked_fill(~mask, float("nan"))
    scores = scores.masked_fill(~mask, float("nan"))
    return scores, labels, mask


def real(tensor, mask, b):
    return tensor[b][mask[b]].tolist()


def inference(solver, scores, labels, mask, k):
    gains, ideal = gains_and_ideal_dcg(labels, mask, k, scores.dtype)
    safe = torch.where(mask, scores, torch.zeros_like(scores))
    if solver == "dp":
        return label_level_dp(safe, gains, ideal, labels, mask, k)
    return assignment_positions(safe, gains, ideal, mask, k)


class TestStructuredHinge:
    @pytest.mark.parametrize("solver", SOLVERS)
    @pytest.mark.parametrize("ystar", ["compatible", "index"])
    @pytest.mark.parametrize("k", [1, 3, 10])
    def test_brute_force_value_argmax_subgradient(self, solver, ystar, k):
        scores, labels, mask = random_batch(12, 7, 3, seed=k, min_docs=1)
        scores = scores.clone().requires_grad_(True)
        loss = structured_hinge_loss(
            scores, labels, mask, k=k, ystar=ystar, solver=solver, reduction="none"
        )
        loss.sum().backward()
        positions = inference(solver, scores.detach(), labels, mask, k)
        for b in range(scores.shape[0]):
            s, y = real(scores.detach(), mask, b), real(labels, mask, b)
            value, maximisers, grad = oracles.hinge_brute_force_oracle(s, y, k, ystar)
            assert loss[b].item() == pytest.approx(value, rel=1e-9, abs=1e-12)
            if not maximisers:
                assert real(scores.grad, mask, b) == [0.0] * len(s)
                continue
            # argmax up to ties: same top-k' (positions beyond k are free in a full permutation)
            mine = [min(p, k + 1) for p in real(positions, mask, b)]
            clipped = {tuple(min(p, k + 1) for p in m) for m in maximisers}
            assert tuple(mine) in clipped
            assert real(scores.grad, mask, b) == pytest.approx(grad, abs=1e-12)

    @pytest.mark.parametrize("ystar", ["compatible", "index"])
    def test_static_path_matches_brute_force(self, ystar, monkeypatch):
        """The path compiled or accelerator runs take: DP sized by num_levels, no host read."""
        monkeypatch.setattr(
            "differank.losses.algorithms.ndcg_assignment.may_read_values", lambda tensor: False
        )
        scores, labels, mask = random_batch(12, 7, 3, seed=31, min_docs=1)
        scores = scores.clone().requires_grad_(True)
        loss = structured_hinge_loss(scores, labels, mask, k=3, ystar=ystar, reduction="none")
        loss.sum().backward()
        for b in range(scores.shape[0]):
            s, y = real(scores.detach(), mask, b), real(labels, mask, b)
            value, maximisers, grad = oracles.hinge_brute_force_oracle(s, y, 3, ystar)
            assert loss[b].item() == pytest.approx(value, rel=1e-9, abs=1e-12)
            if maximisers:
                assert real(scores.grad, mask, b) == pytest.approx(grad, abs=1e-12)

    @pytest.mark.parametrize("levels", [2, 3, 4, 5])
    def test_dp_equals_assignment_and_scipy(self, levels):
        k = 10
        scores, labels, mask = random_batch(6, 200, levels, seed=levels, min_docs=2)
        dp = inference("dp", scores, labels, mask, k)
        lsa = inference("assignment", scores, labels, mask, k)
        for b in range(scores.shape[0]):
            s, y = real(scores, mask, b), real(labels, mask, b)
            if len(set(y)) < 2:
                continue
            reference, _ = oracles.hinge_lsa_oracle(s, y, k)
            for positions in (dp, lsa):
                value = oracles.hinge_loss_augmented_value_oracle(s, y, k, real(positions, mask, b))
                assert value == pytest.approx(reference, rel=1e-9)
            assert real(dp, mask, b) == real(lsa, mask, b)  # generic scores: unique argmax
        a = structured_hinge_loss(scores, labels, mask, k=k, solver="dp", reduction="none")
        c = structured_hinge_loss(scores, labels, mask, k=k, solver="assignment", reduction="none")
        torch.testing.assert_close(a, c, rtol=1e-9, atol=1e-12)

    @pytest.mark.parametrize("n", [2, 5, 17, 40])
    def test_dp_small_and_mid_lists_match_scipy(self, n):
        scores, labels, mask = random_batch(8, n, 3, seed=100 + n, min_docs=1)
        for k in (1, 4, 10):
            dp = inference("dp", scores, labels, mask, k)
            for b in range(scores.shape[0]):
                s, y = real(scores, mask, b), real(labels, mask, b)
                if len(set(y)) < 2:
                    continue
                reference, _ = oracles.hinge_lsa_oracle(s, y, k)
                value = oracles.hinge_loss_augmented_value_oracle(s, y, k, real(dp, mask, b))
                assert value == pytest.approx(reference, rel=1e-9)

    def test_hungarian_matches_scipy(self):
        from scipy.optimize import linear_sum_assignment

        g = torch.Generator().manual_seed(3)
        for rows, cols in [(1, 1), (3, 3), (4, 9), (10, 57)]:
            cost = torch.randn(rows, cols, generator=g, dtype=torch.float64)
            column = hungarian_min(cost)
            r, c = linear_sum_assignment(cost.numpy())
            assert len(set(column.tolist())) == rows
            assert cost[torch.arange(rows), column].sum().item() == pytest.approx(
                float(cost.numpy()[r, c].sum()), rel=1e-12
            )

    @pytest.mark.parametrize("ystar", ["compatible", "index"])
    def test_upper_bounds_ndcg_loss_of_prediction(self, ystar):
        scores, labels, mask = random_batch(30, 25, 3, seed=7, min_docs=2)
        for k in (1, 5, 10):
            loss = structured_hinge_loss(scores, labels, mask, k=k, ystar=ystar, reduction="none")
            for b in range(scores.shape[0]):
                s, y = real(scores, mask, b), real(labels, mask, b)
                if len(set(y)) < 2 or max(y) <= 0:
                    continue
                assert loss[b].item() >= oracles.ndcg_at_k_loss_side_oracle(s, y, k) - 1e-12
                assert loss[b].item() >= 0.0

    @pytest.mark.parametrize("solver", SOLVERS)
    def test_zero_for_well_separated_correct_scores(self, solver):
        _, labels, mask = random_batch(10, 30, 3, seed=11, min_docs=2)
        g = torch.Generator().manual_seed(0)
        jitter = 0.01 * torch.rand(labels.shape, generator=g, dtype=torch.float64)
        scores = torch.where(mask, 10.0 * labels.nan_to_num(0.0) + jitter, torch.nan)
        loss = structured_hinge_loss(scores, labels, mask, k=10, solver=solver, reduction="none")
        torch.testing.assert_close(loss, torch.zeros_like(loss), rtol=0, atol=1e-12)

    @pytest.mark.parametrize("solver", SOLVERS)
    def test_extreme_scores_finite(self, solver):
        scores, labels, mask = random_batch(6, 20, 3, seed=17, min_docs=2)
        for scale in (1e3, -1e3):
            big = (scale * scores).requires_grad_(True)
            loss = structured_hinge_loss(big, labels, mask, solver=solver)
            loss.backward()
            assert torch.isfinite(loss) and torch.isfinite(big.grad).all()
        huge = structured_hinge_loss(1e3 * scores.float(), labels.float(), mask)
        assert torch.isfinite(huge)

    def test_module_repr_names_its_options(self):
        # module == function: tests/losses/test_loss_contract.py
        module = StructuredHingeLoss(k=5, ystar="index", reduction="sum")
        assert "k=5" in repr(module) and "ystar='index'" in repr(module)

    def test_float32_dp_matches_float64(self):
        scores, labels, mask = random_batch(16, 64, 3, seed=23, min_docs=2)
        a = structured_hinge_loss(scores.float(), labels.float(), mask, reduction="none")
        b = structured_hinge_loss(scores, labels, mask, reduction="none")
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-5)

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            ({"k": 0}, "k"),
            ({"k": 2.5}, "k"),
            ({"ystar": "best"}, "ystar"),
            ({"solver": "lp"}, "solver"),
            ({"num_levels": 0}, "num_levels"),
            ({"num_levels": 2.0}, "num_levels"),
            ({"reduction": "max"}, "reduction"),
        ],
    )
    def test_bad_hyperparameters(self, kwargs, message):
        with pytest.raises(ValueError, match=message):
            StructuredHingeLoss(**kwargs)
        scores, labels, mask = random_batch(2, 4, 2, seed=0, min_docs=2)
        with pytest.raises(ValueError, match=message):
            structured_hinge_loss(scores, labels, mask, **kwargs)

    def test_too_many_levels_points_to_assignment(self):
        scores = torch.randn(1, 12, dtype=torch.float64)
        labels = torch.arange(12, dtype=torch.float64).unsqueeze(0) / 4  # 12 label levels
        mask = torch.ones(1, 12, dtype=torch.bool)
        with pytest.raises(ValueError, match="solver='assignment'"):
            structured_hinge_loss(scores, labels, mask, k=10)
        value = structured_hinge_loss(scores, labels, mask, k=3, solver="assignment")
        assert math.isfinite(value.item())

    @pytest.mark.parametrize("ystar", ["compatible", "index"])
    def test_many_label_levels_assignment_matches_scipy(self, ystar):
        g = torch.Generator().manual_seed(4)
        scores = torch.randn(3, 30, generator=g, dtype=torch.float64)
        labels = torch.rand(3, 30, generator=g, dtype=torch.float64) * 3  # ~30 distinct levels
        labels[:, :4] = 0.5  # some ties too
        mask = torch.ones(3, 30, dtype=torch.bool)
        mask[0, 25:] = False
        k = 6
        loss = structured_hinge_loss(
            scores, labels, mask, k=k, ystar=ystar, solver="assignment", reduction="none"
        )
        for b in range(3):
            s, y = real(scores, mask, b), real(labels, mask, b)
            best, _ = oracles.hinge_lsa_oracle(s, y, k)
            star = oracles.hinge_ystar_oracle(s, y, ystar)
            value = best - sum(max(k + 1 - p, 0) * si for p, si in zip(star, s, strict=True))
            assert loss[b].item() == pytest.approx(value, rel=1e-9, abs=1e-12)

    def test_feature_tensor_rejected(self):
        with pytest.raises(ValueError, match=r"scores must be \[B, L\]"):
            structured_hinge_loss(
                torch.zeros(2, 3, 4), torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool)
            )
