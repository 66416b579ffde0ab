"""ConvexLoss (docs/objectives/convex.md): the batched set-LSE against per-query oracles for every
Δ and objective, the pair-space MLE closed form, the estimator's bound, stability and the
module's seed and refresh policy. The contract every loss keeps (padding, reductions, gradient vs
the oracle, the sampled and pair-space defaults) is tests/losses/test_loss_contract.py."""

from __future__ import annotations

import itertools

import pytest
import torch

from differank.losses.algorithms.permutation_sampler import query_tables
from differank.losses.convex import ConvexLoss, convex_loss
from tests.oracles import (
    convex_exact_oracle,
    convex_set_lse_oracle,
    distinct_orders,
    sample_orders,
)

DELTAS = ("auc", "map", "ndcg")


def padded_batch(counts, length, seed, levels=3, dtype=torch.float64):
    """Queries with ``counts[b]`` real documents scattered over ``length`` slots; NaN padding."""
    g = torch.Generator().manual_seed(seed)
    batch = len(counts)
    mask = torch.zeros(batch, length, dtype=torch.bool)
    for b, n in enumerate(counts):
        mask[b, torch.randperm(length, generator=g)[:n]] = True
    labels = torch.randint(0, levels, (batch, length), generator=g).to(dtype)
    scores = torch.randn(batch, length, generator=g, dtype=dtype)
    nan = torch.full_like(scores, float("nan"))
    return torch.where(mask, scores, nan), torch.where(mask, labels, nan), mask


def real_view(scores, labels, mask, b):
    """Query b's real documents, and a map slot -> real index (for translating orders)."""
    slots = mask[b].nonzero().squeeze(-1)
    to_real = {int(s): k for k, s in enumerate(slots)}
    return scores[b, slots], labels[b, slots], to_real


def all_orders(mask):
    """[B, S, L] every order of each query's real slots (padding after), short lists repeated."""
    rows = []
    for b in range(mask.shape[0]):
        real = mask[b].nonzero().squeeze(-1).tolist()
        pad = (~mask[b]).nonzero().squeeze(-1).tolist()
        rows.append([list(p) + pad for p in itertools.permutations(real)])
    size = max(len(r) for r in rows)
    return torch.tensor([(r * size)[:size] for r in rows])


def check_against(oracle, scores, labels, mask, samples, **options):
    """Value and gradient of every query equal ``oracle`` to 1e-9 (float64)."""
    leaf = scores.clone().requires_grad_(True)
    per_query = convex_loss(leaf, labels, mask, samples=samples, reduction="none", **options)
    per_query.sum().backward()
    for b in range(mask.shape[0]):
        s, y, to_real = real_view(scores.detach(), labels, mask, b)
        if torch.unique(y).numel() < 2:
            assert per_query[b] == 0 and bool((leaf.grad[b] == 0).all())
            continue
        s = s.clone().requires_grad_(True)
        orders = [[to_real[int(d)] for d in row[: len(to_real)]] for row in samples[b]]
        expected = oracle(s, y, orders)
        (expected_grad,) = torch.autograd.grad(expected, s)
        torch.testing.assert_close(per_query[b], expected.detach(), rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(leaf.grad[b, mask[b]], expected_grad, rtol=1e-9, atol=1e-9)
        assert bool((leaf.grad[b, ~mask[b]] == 0).all())


class TestConvexLoss:
    @pytest.mark.parametrize("delta", DELTAS)
    @pytest.mark.parametrize("objective", ("convex", "mle", "expgain"))
    def test_all_orders_equal_exact_enumeration(self, delta, objective):
        scores, labels, mask = padded_batch([5, 4, 3, 2, 1, 5], 7, seed=1)
        samples = all_orders(mask)
        exact = lambda s, y, _orders: convex_exact_oracle(s, y, delta, None, objective)  # noqa: E731
        check_against(exact, scores, labels, mask, samples, delta=delta, objective=objective)

    def test_exact_enumeration_six_documents_ndcg_at_k(self):
        scores, labels, mask = padded_batch([6], 7, seed=2)
        exact = lambda s, y, _orders: convex_exact_oracle(s, y, "ndcg", 3)  # noqa: E731
        check_against(exact, scores, labels, mask, all_orders(mask), delta="ndcg", ndcg_k=3)

    @pytest.mark.parametrize("delta", DELTAS)
    @pytest.mark.parametrize("objective", ("convex", "mle", "expgain"))
    def test_sampled_set_equals_set_lse_oracle(self, delta, objective):
        scores, labels, mask = padded_batch([9, 6, 3, 1, 0, 8], 10, seed=3)
        tables = query_tables(labels, mask, delta=delta, dtype=scores.dtype)
        g = torch.Generator().manual_seed(0)
        safe = torch.where(mask, scores, torch.zeros_like(scores))
        samples = sample_orders(safe, tables, num_samples=40, walk_length=5, generator=g)
        oracle = lambda s, y, orders: convex_set_lse_oracle(s, y, orders, delta, 4, objective)  # noqa: E731
        options = dict(delta=delta, objective=objective, ndcg_k=4)
        check_against(oracle, scores, labels, mask, samples, **options)

    def test_estimator_is_a_lower_bound_and_exact_once_complete(self):
        scores, labels, mask = padded_batch([5, 5, 4], 6, seed=4)
        exact = convex_loss(scores, labels, mask, samples=all_orders(mask), reduction="none")
        for num_samples in (5, 30):
            g = torch.Generator().manual_seed(num_samples)
            sampled = convex_loss(
                scores, labels, mask, num_samples=num_samples, generator=g, reduction="none"
            )
            assert bool((sampled >= 0).all()) and bool((sampled <= exact + 1e-12).all())
        g = torch.Generator().manual_seed(0)
        tables = query_tables(labels, mask, delta="ndcg", dtype=scores.dtype)
        safe = torch.where(mask, scores, torch.zeros_like(scores))
        samples = sample_orders(
            safe, tables, num_samples=6000, restart_skew=0.0, accept="all", generator=g
        )
        assert distinct_orders(samples, tables).sum(-1).tolist() == [120, 120, 24]
        complete = convex_loss(scores, labels, mask, samples=samples, reduction="none")
        torch.testing.assert_close(complete, exact, rtol=1e-12, atol=1e-12)

    def test_pair_space_mle_is_the_margin_free_closed_form(self):
        scores, labels, mask = padded_batch([5, 4], 6, seed=6)
        loss = convex_loss(scores, labels, mask, delta="auc", space="pairs", objective="mle",
                           reduction="none")  # fmt: skip
        for b in range(2):
            s, y, _ = real_view(scores, labels, mask, b)
            pairs = [(i, j) for i in range(len(y)) for j in range(len(y)) if y[i] > y[j]]
            expected = sum(torch.nn.functional.softplus(-2 * (s[i] - s[j]) / len(pairs))
                           for i, j in pairs)  # fmt: skip
            torch.testing.assert_close(loss[b], expected, rtol=1e-12, atol=1e-12)

    def test_permutation_invariance_within_a_query_once_every_order_is_in_the_set(self):
        # the sampled estimate is not invariant (a permuted query draws other orders) and the
        # pairs space is checked with every loss: tests/losses/test_loss_contract.py
        scores, labels, mask = padded_batch([5, 4], 6, seed=7)
        perm = torch.randperm(6, generator=torch.Generator().manual_seed(1))
        options = dict(delta="auc", reduction="none")
        before = convex_loss(scores, labels, mask, samples=all_orders(mask), **options)
        moved = (scores[:, perm], labels[:, perm], mask[:, perm])
        after = convex_loss(*moved, samples=all_orders(moved[2]), **options)
        torch.testing.assert_close(before, after, rtol=1e-12, atol=1e-12)

    @pytest.mark.parametrize("objective", ("convex", "mle", "expgain"))
    def test_extreme_scores_stay_finite(self, objective):
        scores, labels, mask = padded_batch([8, 5, 2], 9, seed=10, dtype=torch.float32)
        for magnitude in (1e3, -1e3):
            leaf = torch.where(mask, magnitude * scores.sign(), scores).requires_grad_(True)
            g = torch.Generator().manual_seed(0)
            loss = convex_loss(leaf, labels, mask, objective=objective, num_samples=100,
                               generator=g)  # fmt: skip
            loss.backward()
            assert bool(torch.isfinite(loss)) and bool(torch.isfinite(leaf.grad).all())
        pairs = convex_loss(1e3 * scores.nan_to_num(), labels, mask, delta="auc", space="pairs")
        assert bool(torch.isfinite(pairs))

    def test_generator_reproducibility(self):
        scores, labels, mask = padded_batch([7, 5], 8, seed=12)
        seeded = [torch.Generator().manual_seed(s) for s in (5, 5, 6)]
        runs = [convex_loss(scores, labels, mask, num_samples=20, generator=g) for g in seeded]
        assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])

    def test_module_seed_is_the_functions_generator(self):
        scores, labels, mask = padded_batch([7, 5], 8, seed=13)
        options = dict(delta="map", num_samples=30, restart_skew=-5.0, walk_length=5)
        module = ConvexLoss(seed=3, **options)
        expected = convex_loss(scores, labels, mask, generator=torch.Generator().manual_seed(3),
                               **options)  # fmt: skip
        assert torch.equal(module(scores, labels, mask), expected)

    def test_epoch_refresh_reuses_samples_until_the_next_epoch(self):
        scores, labels, mask = padded_batch([7, 5, 6], 8, seed=14)
        qid = torch.tensor([10, 11, 12])
        module = ConvexLoss(num_samples=8, walk_length=2, refresh="epoch", seed=0, reduction="none")
        first = module(scores, labels, mask, qid=qid)
        assert torch.equal(module(scores, labels, mask, qid=qid), first)  # same epoch: cached
        part = module(scores[1:], labels[1:], mask[1:], qid=qid[1:])  # served from the cache
        assert torch.equal(part, first[1:])
        module.eval()
        module.train()  # back to training: a new epoch
        assert not torch.equal(module(scores, labels, mask, qid=qid), first)
        step = ConvexLoss(num_samples=8, walk_length=2, seed=0)
        assert not torch.equal(step(scores, labels, mask), step(scores, labels, mask))
        by_rows = ConvexLoss(num_samples=8, walk_length=2, refresh="epoch", seed=0)
        assert torch.equal(by_rows(scores, labels, mask), by_rows(scores, labels, mask))

    @pytest.mark.parametrize(
        "options, match",
        [
            (dict(delta="err"), "delta"),
            (dict(num_samples=0), "num_samples"),
            (dict(walk_length=1.5), "walk_length"),
            (dict(space="tree"), "space"),
            (dict(space="pairs", delta="ndcg"), "pairs"),
            (dict(objective="hinge"), "objective"),
            (dict(accept="some"), "accept"),
            (dict(ndcg_k=0), "ndcg_k"),
            (dict(num_chains=0), "num_chains"),
            (dict(refresh="batch"), "refresh"),
            (dict(reduction="avg"), "reduction"),
            (dict(restart_skew=float("nan")), "restart_skew"),
        ],
    )
    def test_bad_hyperparameters_raise(self, options, match):
        with pytest.raises(ValueError, match=match):
            ConvexLoss(**options)

    def test_bad_inputs_raise(self):
        scores, labels, mask = padded_batch([3], 4, seed=15)
        with pytest.raises(ValueError, match="samples"):
            convex_loss(scores, labels, mask, samples=torch.zeros(1, 2, 3, dtype=torch.long))
        with pytest.raises(ValueError, match=r"scores must be \[B, L\]"):
            convex_loss(torch.zeros(1, 4, 2), labels, mask)


def test_throughput_benchmark_runs_and_its_baseline_matches_the_loss():
    """benchmarks/convex_throughput.py on tiny inputs; its baseline copy of the earlier sampler
    and the shipped one give the same loss given the same sample set."""
    import convex_throughput  # benchmarks/ is on the path (tests/conftest.py)

    tables = convex_throughput.main(
        ["--batch", "2", "--lengths", "6", "--samples", "20", "--deltas", "auc", "--repeats", "1"]
    )
    assert "| auc | 6 | 20 |" in tables[-1]
    scores, labels, mask = padded_batch([6, 4], 7, seed=16)
    safe = torch.where(mask, scores, 0.0)
    table = query_tables(labels, mask, delta="ndcg", dtype=scores.dtype)
    old = convex_throughput.baseline_run_sampler(
        safe, table, num_samples=30, generator=torch.Generator().manual_seed(0)
    )
    expected = convex_throughput.baseline_convex_loss(
        scores, labels, mask, delta="ndcg", num_samples=30,
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    torch.testing.assert_close(
        convex_loss(scores, labels, mask, delta="ndcg", samples=old.orders), expected,
        rtol=1e-12, atol=1e-12,
    )  # fmt: skip
