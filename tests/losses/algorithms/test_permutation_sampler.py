"""The orderings' statistics and the batched MCMC swap sampler
(docs/objectives/convex.md#the-mcmc-swap-sampler): exact Δ and
coefficients against per-order oracles, deduplication, padding, reproducibility, and the
sampler's statistics (restart skew shifts Δ; Metropolis chains target exp(E))."""

from __future__ import annotations

import itertools

import pytest
import torch

from differank.losses.algorithms.pairs import sample_pairs
from differank.losses.algorithms.permutation_sampler import (
    QueryTables,
    _arrange,
    _restart,
    _shuffle,
    _step,
    _walk_tables,
    order_constants,
    order_deltas,
    order_hashes,
    query_tables,
    run_sampler,
)
from tests.oracles import (
    convex_delta_oracle,
    convex_energy_oracle,
    convex_exact_oracle,
    distinct_orders,
    sample_orders,
)

DELTAS = ("auc", "map", "ndcg")


def _seed_orders(
    tables: QueryTables, chains: int, generator: torch.Generator | None
) -> torch.Tensor:
    """``[3, B, C, L]`` restart candidates: ideal (random order within a label, Δ = 0), a uniform
    shuffle (E[Δ_AUC] = 1/2) and the reversed ideal (Δ_AUC = 1), padding after in slot order."""
    walk = _walk_tables(tables)
    order, _, rank, at_level, _ = _shuffle(walk, chains, generator)
    seeds = []
    for kind in range(3):
        target = _arrange(walk, rank, at_level, torch.full_like(order[..., 0], kind))
        seeds.append(torch.empty_like(order).scatter_(-1, target.long(), order))
    return torch.stack([seeds[0], seeds[1], seeds[2]])


def padded(counts, length, seed, levels=3):
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(len(counts), length, dtype=torch.bool)
    for b, n in enumerate(counts):
        mask[b, torch.randperm(length, generator=g)[:n]] = True
    labels = torch.randint(0, levels, (len(counts), length), generator=g).double()
    scores = torch.randn(len(counts), length, generator=g, dtype=torch.float64)
    return torch.where(mask, scores, 0.0), torch.where(mask, labels, float("nan")), mask


def random_orders(mask, count, seed):
    """[B, S, L] uniform orders of the real slots, padding after in slot order."""
    g = torch.Generator().manual_seed(seed)
    keys = torch.rand(mask.shape[0], count, mask.shape[1], generator=g, dtype=torch.float64)
    keys = torch.where(mask.unsqueeze(1), keys, 2.0 + torch.arange(mask.shape[1]))
    return keys.argsort(dim=-1)


def to_real(order, mask_row):
    slots = {int(s): k for k, s in enumerate(mask_row.nonzero().squeeze(-1))}
    return [slots[int(d)] for d in order[: len(slots)]]


def draw(scores, labels, mask, delta="ndcg", seed=0, **options):
    tables = query_tables(labels, mask, delta=delta, dtype=scores.dtype)
    g = torch.Generator().manual_seed(seed)
    return sample_orders(scores, tables, generator=g, **options), tables


class TestOrderStatistics:
    @pytest.mark.parametrize("delta", DELTAS)
    @pytest.mark.parametrize("ndcg_k", (None, 3))
    def test_delta_and_energy_match_the_oracles(self, delta, ndcg_k):
        scores, labels, mask = padded([7, 5, 2, 1, 0], 8, seed=1, levels=4)
        tables = query_tables(labels, mask, delta=delta, ndcg_k=ndcg_k, dtype=torch.float64)
        orders = random_orders(mask, 12, seed=2)
        deltas, coefficients = order_constants(orders, tables)
        torch.testing.assert_close(deltas, order_deltas(orders, tables), rtol=0, atol=1e-12)
        energies = deltas + (coefficients * scores.unsqueeze(1)).sum(-1)
        for b in range(mask.shape[0]):
            real_labels, real_scores = labels[b, mask[b]], scores[b, mask[b]]
            if torch.unique(real_labels).numel() < 2:
                continue
            for s in range(orders.shape[1]):
                order = to_real(orders[b, s], mask[b])
                expected = convex_energy_oracle(order, real_scores, real_labels, delta, ndcg_k)
                assert abs(float(energies[b, s]) - float(expected)) < 1e-12
                oracle_delta = convex_delta_oracle(order, real_labels, delta, ndcg_k)
                assert abs(float(deltas[b, s]) - oracle_delta) < 1e-12
            assert bool((coefficients[b, :, ~mask[b]] == 0).all())

    def test_ideal_order_has_zero_delta_and_zero_coefficients(self):
        scores, labels, mask = padded([7, 5, 3], 8, seed=3)
        for delta in DELTAS:
            tables = query_tables(labels, mask, delta=delta, dtype=torch.float64)
            deltas, coefficients = order_constants(tables.ideal.unsqueeze(1), tables)
            assert bool((deltas == 0).all()) and bool((coefficients == 0).all())

    def test_distinct_orders_keeps_first_occurrences_of_real_prefixes(self):
        _, labels, mask = padded([5, 3], 6, seed=4)
        orders = random_orders(mask, 40, seed=5)  # 3 real docs: at most 6 distinct
        tables = query_tables(labels, mask)
        keep = distinct_orders(orders, tables)
        for b in range(2):
            seen, expected = set(), []
            for s in range(40):
                key = tuple(to_real(orders[b, s], mask[b]))
                expected.append(key not in seen)
                seen.add(key)
            assert keep[b].tolist() == expected
        assert int(keep[1].sum()) == 6


class TestSampler:
    @pytest.mark.parametrize("accept", ("metropolis", "all"))
    def test_padding_never_moves_and_orders_are_permutations(self, accept):
        scores, labels, mask = padded([9, 4, 1, 0, 6], 10, seed=6)
        orders, _ = draw(scores, labels, mask, num_samples=60, walk_length=7, accept=accept)
        assert orders.shape == (5, 60, 10)
        counts = mask.sum(-1)
        for b in range(5):
            n = int(counts[b])
            real = sorted(mask[b].nonzero().squeeze(-1).tolist())
            padding = (~mask[b]).nonzero().squeeze(-1)
            assert bool((orders[b, :, n:] == padding).all())
            assert all(sorted(row[:n]) == real for row in orders[b].tolist())

    @pytest.mark.parametrize("delta", DELTAS)
    @pytest.mark.parametrize("target", ("convex", "model"))
    def test_incremental_constants_equal_recomputed_ones(self, delta, target):
        scores, labels, mask = padded([12, 7, 3, 1, 0, 10], 12, seed=13, levels=4)
        tables = query_tables(labels, mask, delta=delta, ndcg_k=5, dtype=torch.float64)
        g = torch.Generator().manual_seed(1)
        sampled = run_sampler(scores, tables, num_samples=300, walk_length=30, num_chains=4,
                              target=target, generator=g)  # fmt: skip
        deltas, coefficients = order_constants(sampled.orders, tables)
        torch.testing.assert_close(sampled.deltas, deltas, rtol=0, atol=1e-9)
        torch.testing.assert_close(sampled.coefficients, coefficients, rtol=0, atol=1e-9)
        assert torch.equal(sampled.hashes, order_hashes(sampled.orders, tables))

    def test_generator_reproducibility(self):
        scores, labels, mask = padded([9, 6], 10, seed=7)
        first, _ = draw(scores, labels, mask, seed=11, num_samples=50)
        again, _ = draw(scores, labels, mask, seed=11, num_samples=50)
        other, _ = draw(scores, labels, mask, seed=12, num_samples=50)
        assert torch.equal(first, again) and not torch.equal(first, other)

    def test_seeds_sit_at_delta_zero_one_half_and_one(self):
        _, labels, mask = padded([30, 25], 30, seed=8)
        tables = query_tables(labels, mask, delta="auc", dtype=torch.float64)
        seeds = _seed_orders(tables, 400, torch.Generator().manual_seed(0))
        deltas = torch.stack([order_deltas(seed, tables) for seed in seeds])  # [3, B, C]
        assert bool((deltas[0] == 0).all()) and bool((deltas[2] == 1).all())
        assert abs(float(deltas[1].mean()) - 0.5) < 0.02

    @pytest.mark.parametrize("delta", DELTAS)
    def test_negative_restart_skew_gives_lower_mean_delta(self, delta):
        scores, labels, mask = padded([30, 20, 25, 12], 30, seed=9)
        mean_delta = {}
        for skew in (-20.0, 0.0, 5.0):
            orders, tables = draw(scores, labels, mask, delta=delta, num_samples=400,
                                  restart_skew=skew)  # fmt: skip
            mean_delta[skew] = float(order_deltas(orders, tables).mean())
        assert mean_delta[-20.0] < mean_delta[0.0] < mean_delta[5.0]

    @pytest.mark.parametrize(
        "delta, target",
        [("auc", "convex"), ("map", "convex"), ("ndcg", "convex"), ("ndcg", "model")],
    )
    def test_metropolis_sample_mean_gradient_approaches_the_exact_gradient(self, delta, target):
        labels = torch.tensor([[2.0, 0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 0.0, 1.0, 0.0]])
        mask = torch.ones(2, 5, dtype=torch.bool)
        scores = torch.tensor([[0.3, 1.2, -0.5, 0.1, 2.0], [-1.0, 0.4, 0.9, 0.0, -0.3]]).double()
        orders, tables = draw(scores, labels.double(), mask, delta=delta, num_samples=60000,
                              walk_length=3000, num_chains=20, target=target)  # fmt: skip
        _, coefficients = order_constants(orders, tables)
        estimate = coefficients.mean(1)
        objective = "convex" if target == "convex" else "mle"
        for b in range(2):
            s = scores[b].clone().requires_grad_(True)
            exact = convex_exact_oracle(s, labels[b].double(), delta, None, objective)
            (gradient,) = torch.autograd.grad(exact, s)
            torch.testing.assert_close(estimate[b], gradient, rtol=0, atol=0.02)

    def test_accept_all_is_a_random_walk_over_all_orders(self):
        labels = torch.tensor([[1.0, 0.0, 2.0, 0.0]]).double()
        mask = torch.ones(1, 4, dtype=torch.bool)
        scores = torch.tensor([[50.0, -50.0, 0.0, 10.0]]).double()  # Metropolis would stick
        orders, tables = draw(scores, labels, mask, num_samples=2000, restart_skew=0.0,
                              accept="all", walk_length=50)  # fmt: skip
        every = len(list(itertools.permutations(range(4))))
        assert int(distinct_orders(orders, tables).sum()) == every


class TestSamplerSteps:
    """The rewritten sampler's pieces: the acceptance energy, the seeds, the optional orders."""

    @pytest.mark.parametrize("delta", DELTAS)
    @pytest.mark.parametrize("target", ("convex", "model"))
    def test_acceptance_compares_the_exact_energy_change(self, delta, target):
        scores, labels, mask = padded([12, 9, 5, 2, 1, 0], 12, seed=21, levels=4)
        tables = query_tables(labels, mask, delta=delta, ndcg_k=5, dtype=torch.float64)
        walk = _walk_tables(tables, scores)
        g = torch.Generator().manual_seed(2)
        state, inverse = _restart(walk, tables, 8, 0.0, g)
        first, second, valid = sample_pairs(labels, mask, 8, generator=g)
        moved = valid & (first != second)

        def energy(s):  # E = Δ + c·s (model: c·s) from the state's count rows
            linear = (s[1] * walk.scale.unsqueeze(-1) * scores.unsqueeze(1)).sum(-1)
            return linear + (s[2] if target == "convex" else 0.0)

        def after(log_uniform, accept):
            copy = [x.clone() for x in state]
            copy_inverse = None if inverse is None else inverse.clone()
            _step(walk, tables, copy, copy_inverse, first.view(6, 8), second.view(6, 8),
                  log_uniform, accept, target)  # fmt: skip
            return copy

        proposed = after(torch.full((6, 8), -1e9, dtype=torch.float64), "all")
        change = energy(proposed) - energy(state)
        for shift, expected in ((-1e-9, True), (1e-9, False)):
            taken = (after(change + shift, "metropolis")[0] != state[0]).any(-1)
            assert bool((taken[moved] == expected).all())

    def test_reordered_seeds_keep_the_within_label_order_of_the_shuffle(self):
        _, labels, mask = padded([9, 7], 10, seed=22)
        tables = query_tables(labels, mask, delta="auc", dtype=torch.float64)
        ideal, shuffle, reverse = _seed_orders(tables, 50, torch.Generator().manual_seed(1))

        def of_level(row, b, level):
            real = mask[b].nonzero().squeeze(-1).tolist()
            return [d for d in row.tolist() if d in real and labels[b, d] == level]

        for b in range(2):
            for level in set(labels[b, mask[b]].tolist()):
                for c in range(50):
                    expected = of_level(shuffle[b, c], b, level)
                    assert of_level(ideal[b, c], b, level) == expected
                    assert of_level(reverse[b, c], b, level) == expected

    def test_orders_are_optional_and_change_nothing_else(self):
        scores, labels, mask = padded([9, 4, 1, 0, 6], 10, seed=23)
        tables = query_tables(labels, mask, delta="map", dtype=torch.float64)
        full, bare = (
            run_sampler(scores, tables, num_samples=60, walk_length=7,
                        generator=torch.Generator().manual_seed(4), keep_orders=keep)
            for keep in (True, False)
        )  # fmt: skip
        assert bare.orders is None and full.orders is not None
        for name in ("deltas", "coefficients", "hashes"):
            assert torch.equal(getattr(full, name), getattr(bare, name))

    @pytest.mark.parametrize("delta", DELTAS)
    def test_many_label_levels(self, delta):
        scores, labels, mask = padded([14, 11, 6, 0], 14, seed=24, levels=12)
        tables = query_tables(labels, mask, delta=delta, dtype=torch.float64)
        assert tables.num_levels > 8  # past the per-level-pair row table
        sampled = run_sampler(scores, tables, num_samples=90, walk_length=9,
                              generator=torch.Generator().manual_seed(5))  # fmt: skip
        deltas, coefficients = order_constants(sampled.orders, tables)
        torch.testing.assert_close(sampled.deltas, deltas, rtol=0, atol=1e-9)
        torch.testing.assert_close(sampled.coefficients, coefficients, rtol=0, atol=1e-9)
