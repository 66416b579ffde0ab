"""ConeRank's cone loss and fold-in against float64 per-query oracles (docs/objectives/conerank.md,
§8): the band constraint and weightings, every fold-in solver, the active set's internals, paper
identities and pair sampling. The contract every loss keeps (padding, permutation, reductions,
feature and basis gradients vs the oracle for the simplex and the cone) is
tests/losses/test_loss_contract.py."""

from __future__ import annotations

import math
import warnings
from functools import partial

import numpy as np
import pytest
import torch

import differank.losses.cone as cone_module
from differank.losses.algorithms.cone_active_set import active_set_fold_in
from differank.losses.algorithms.cone_fold_in import project_simplex
from differank.losses.cone import ConeLoss as SampledConeLoss
from differank.losses.cone import cone_fold_in
from differank.losses.cone import cone_loss as sampled_cone_loss
from tests.oracles import (
    cone_fold_in_exact,
    cone_query_loss_oracle,
    distance_to_probability_simplex,
)

TIGHT = {"max_iter": 20000, "tol": 1e-13}  # fold-in to convergence for oracle comparisons
# The oracles sum over every pair; the loss's default draws 64 per query (conf/loss/cone.yaml),
# so these tests take every pair unless they pass max_pairs_per_query themselves.
cone_loss = partial(sampled_cone_loss, max_pairs_per_query=None)
ConeLoss = partial(SampledConeLoss, max_pairs_per_query=None)


def random_batch(batch=4, length=6, n_features=5, seed=0, nan_padding=True):
    """A padded float64 batch with graded labels, a single-label query and an n = 1 query."""
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(batch, length, n_features, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 3, (batch, length), generator=g).to(torch.float64)
    lengths = torch.randint(2, length + 1, (batch,), generator=g)
    lengths[0] = length
    mask = torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)
    labels[0, :3] = torch.tensor([2.0, 1.0, 0.0])  # query 0 surely valid
    if batch > 2:
        labels[1] = 1.0  # single-label query
    if batch > 3:
        mask[2] = False
        mask[2, 0] = True  # n = 1
    if nan_padding:
        features = torch.where(mask.unsqueeze(-1), features, torch.nan)
        labels = torch.where(mask, labels, torch.nan)
    return features, labels, mask


def random_basis(n_features=5, n_basis=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n_features, n_basis, generator=g, dtype=torch.float64)


def oracle_per_query(features, labels, mask, basis, **options):
    values = []
    for b in range(features.shape[0]):
        keep = mask[b]
        values.append(cone_query_loss_oracle(features[b][keep], labels[b][keep], basis, **options))
    return torch.stack(values)


class TestConeLoss:
    @pytest.mark.parametrize(
        "options",
        [
            # simplex (the default) and cone: tests/loss_registry.py's cone and cone_orthant
            {"constraint": "band", "band": (0.5, 2.0)},
            {"weighting": "none", "alpha": 0.5, "rho": 3.0},
        ],
    )
    def test_value_and_gradient_match_oracle(self, options):
        features, labels, mask = random_batch()
        basis = random_basis()
        f1 = features.clone().requires_grad_(True)
        u1 = basis.clone().requires_grad_(True)
        got = cone_loss(f1, labels, mask, u1, reduction="none", **options, **TIGHT)
        got.sum().backward()
        clean = torch.where(mask.unsqueeze(-1), features, 0.0).requires_grad_(True)
        u2 = basis.clone().requires_grad_(True)
        want = oracle_per_query(clean, labels, mask, u2, **options)
        want.sum().backward()
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-9)
        torch.testing.assert_close(u1.grad, u2.grad, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(f1.grad, clean.grad, rtol=1e-5, atol=1e-7)
        assert got[1] == 0 and got[2] == 0  # single-label and n = 1 queries

    @pytest.mark.parametrize("solver", ["active_set", "fista"])
    @pytest.mark.parametrize("constraint", ["simplex", "cone", "band"])
    def test_fold_in_matches_exact_fold_in(self, constraint, solver):
        g = torch.Generator().manual_seed(3)
        basis = torch.randn(12, 10, generator=g, dtype=torch.float64)  # K = 10, UᵀU ≻ 0
        z = 3.0 * torch.randn(12, 12, generator=g, dtype=torch.float64)
        band = (0.5, 3.0)
        w = cone_fold_in(z, basis, constraint=constraint, band=band, solver=solver,
                         max_iter=20000, tol=1e-12)  # fmt: skip
        values = ((z - w @ basis.T) ** 2).sum(-1)
        for j in range(z.shape[0]):
            w_exact, value = cone_fold_in_exact(z[j].numpy(), basis.numpy(), constraint, band)
            assert values[j].item() == pytest.approx(value, rel=1e-6, abs=1e-9)
            np.testing.assert_allclose(w[j].numpy(), w_exact, atol=1e-6)

    @pytest.mark.parametrize("solver", ["active_set", "fista"])
    def test_default_tolerance_is_accurate(self, solver):
        # each solver's defaults (tol 1e-7; FISTA's 500 iterations) give 1e-6 relative values
        g = torch.Generator().manual_seed(4)
        basis = torch.randn(8, 5, generator=g, dtype=torch.float64)
        z = torch.randn(20, 8, generator=g, dtype=torch.float64)
        w = cone_fold_in(z, basis, solver=solver)
        values = ((z - w @ basis.T) ** 2).sum(-1)
        for j in range(z.shape[0]):
            _, value = cone_fold_in_exact(z[j].numpy(), basis.numpy())
            assert values[j].item() == pytest.approx(value, rel=1e-6)

    @pytest.mark.parametrize("constraint", ["simplex", "cone", "band"])
    @pytest.mark.parametrize(("n_features", "n_basis"), [(12, 8), (3, 6), (2, 7), (6, 1)])
    def test_active_set_is_exact_on_every_basis_shape(self, constraint, n_features, n_basis):
        # well-posed (K <= F) and singular (K > F) bases, many pairs at once, tight tolerance
        g = torch.Generator().manual_seed(n_features * 100 + n_basis)
        basis = torch.randn(n_features, n_basis, generator=g, dtype=torch.float64)
        z = 3.0 * torch.randn(30, n_features, generator=g, dtype=torch.float64)
        band = (0.5, 2.0)
        w = cone_fold_in(z, basis, constraint=constraint, band=band, tol=1e-12)
        assert torch.all(w >= 0)
        values = ((z - w @ basis.T) ** 2).sum(-1)
        for j in range(z.shape[0]):
            _, value = cone_fold_in_exact(z[j].numpy(), basis.numpy(), constraint, band)
            assert values[j].item() == pytest.approx(value, rel=1e-6, abs=1e-9)

    def test_active_set_repeated_columns_and_pairs_inside_the_hull(self):
        # a repeated column (affinely dependent faces) and points inside the hull (distance 0)
        g = torch.Generator().manual_seed(11)
        basis = torch.randn(5, 4, generator=g, dtype=torch.float64)
        basis = torch.cat([basis, basis[:, :1]], dim=1)
        inside = torch.softmax(torch.randn(10, 5, generator=g, dtype=torch.float64), -1)
        z = torch.cat([inside @ basis.T, 2.0 * torch.randn(10, 5, generator=g).double()])
        w = cone_fold_in(z, basis, tol=1e-12)
        values = ((z - w @ basis.T) ** 2).sum(-1)
        torch.testing.assert_close(w.sum(-1), torch.ones(20, dtype=torch.float64))
        for j in range(z.shape[0]):
            _, value = cone_fold_in_exact(z[j].numpy(), basis.numpy())
            assert values[j].item() == pytest.approx(value, rel=1e-6, abs=1e-12)

    def test_active_set_stops_in_few_iterations_and_any_seed_gives_the_same_answer(self):
        g = torch.Generator().manual_seed(12)
        basis = torch.randn(20, 10, generator=g, dtype=torch.float64)
        linear = 3.0 * torch.randn(500, 20, generator=g, dtype=torch.float64) @ basis
        gram = basis.T @ basis
        for total in (1.0, None):
            w, support, cold = active_set_fold_in(gram, linear, total=total, tol=1e-12,
                                                  max_iter=100)  # fmt: skip
            assert cold <= 12 and torch.equal(support, w > 0)
            warm = active_set_fold_in(gram, linear, total=total, tol=1e-12, max_iter=100,
                                      support=support)  # fmt: skip
            assert warm[2] == 1  # the right support: one solve and one KKT check
            torch.testing.assert_close(warm[0], w, rtol=0, atol=1e-12)
            seeds = torch.rand(500, 10, generator=g) < 0.5  # arbitrary seeds, empty ones too
            other = active_set_fold_in(gram, linear, total=total, tol=1e-12, max_iter=100,
                                       support=seeds)  # fmt: skip
            torch.testing.assert_close(other[0], w, rtol=0, atol=1e-10)

    def test_active_set_cap_keeps_a_feasible_point(self):
        g = torch.Generator().manual_seed(13)
        basis = torch.randn(20, 10, generator=g, dtype=torch.float64)
        linear = 3.0 * torch.randn(200, 20, generator=g, dtype=torch.float64) @ basis
        w, _, iterations = active_set_fold_in(basis.T @ basis, linear, total=1.0, tol=1e-12,
                                              max_iter=1)  # fmt: skip
        assert iterations == 1 and torch.all(w >= 0)
        torch.testing.assert_close(w.sum(-1), torch.ones(200, dtype=torch.float64))
        with pytest.raises(ValueError, match="max_iter"):
            active_set_fold_in(basis.T @ basis, linear, total=1.0, tol=0.0, max_iter=0)

    def test_float32_features_agree_with_float64(self):
        # float32 features solve in float32 (the face inverses stay float64): per query the
        # loss agrees with the float64 computation to well under 1e-5
        features, labels, mask = random_batch(batch=8, length=30, n_features=46, seed=3)
        basis = random_basis(n_features=46, n_basis=10, seed=4) * 3.0
        wide = cone_loss(features, labels, mask, basis, reduction="none", tol=1e-12)
        narrow = cone_loss(features.float(), labels.float(), mask, basis.float(),
                           reduction="none")  # fmt: skip
        torch.testing.assert_close(narrow.double(), wide, rtol=1e-5, atol=1e-7)

    def test_warm_start_changes_only_time(self):
        features, labels, mask = random_batch(6, 12, 8, seed=5, nan_padding=False)
        basis = random_basis(n_features=8, n_basis=5, seed=6)
        other, _, _ = random_batch(6, 12, 8, seed=7, nan_padding=False)  # same labels: same pairs
        cold, warm = ConeLoss(), ConeLoss(warm_start=True)
        for batch in (features, features, other, features):
            f1 = batch.clone().requires_grad_(True)
            f2 = batch.clone().requires_grad_(True)
            a, b = cold(f1, labels, mask, basis), warm(f2, labels, mask, basis)
            a.backward()
            b.backward()
            torch.testing.assert_close(b, a, rtol=1e-12, atol=0)
            torch.testing.assert_close(f2.grad, f1.grad, rtol=1e-10, atol=1e-14)
        assert warm._support is not None and cold._support is None

    def test_wide_basis_value_matches_exact_and_warns_once(self, monkeypatch):
        monkeypatch.setattr(cone_module, "_WARNED_WIDE_BASIS", False)
        g = torch.Generator().manual_seed(5)
        basis = torch.randn(3, 6, generator=g, dtype=torch.float64)  # K > F: UᵀU singular
        features, labels, mask = random_batch(n_features=3, nan_padding=False)
        with pytest.warns(UserWarning, match="singular"):
            got = cone_loss(features, labels, mask, basis, reduction="none", **TIGHT)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            cone_loss(features, labels, mask, basis)  # second call: silent
        want = oracle_per_query(features, labels, mask, basis)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-9)

    @pytest.mark.parametrize("solver", ["sg", "eg"])
    def test_paper_solvers(self, solver):
        g = torch.Generator().manual_seed(6)
        basis = torch.randn(6, 4, generator=g, dtype=torch.float64)
        z = torch.randn(30, 6, generator=g, dtype=torch.float64)
        w = cone_fold_in(z, basis, solver=solver, max_iter=5000, tol=0)
        assert torch.all(w >= 0)
        torch.testing.assert_close(w.sum(-1), torch.ones(30, dtype=torch.float64))
        values = ((z - w @ basis.T) ** 2).sum(-1)
        exact = torch.tensor(
            [cone_fold_in_exact(r.numpy(), basis.numpy())[1] for r in z], dtype=torch.float64
        )
        assert torch.all(values >= exact - 1e-9)
        if solver == "eg":  # EG converges (slowly); SG's clamp-and-normalise is a heuristic
            torch.testing.assert_close(values, exact, rtol=1e-4, atol=1e-6)
        else:
            assert (values - exact).mean() < 0.25 * exact.mean()  # ~11% here

    def test_identity_cone_is_negative_part(self):
        features, labels, mask = random_batch(nan_padding=False)
        got = cone_loss(features, labels, mask, torch.eye(5, dtype=torch.float64), alpha=1.0,
                        constraint="cone", reduction="none", **TIGHT)  # fmt: skip
        want = []
        for b in range(features.shape[0]):
            x, r, total, count = features[b][mask[b]], labels[b][mask[b]], 0.0, 0
            for l in range(len(r)):
                for m in range(len(r)):
                    if r[l] > r[m]:
                        z = x[l] - x[m]
                        z_tilde = math.sqrt(5) * z / (1 + z.norm())
                        total += float((r[l] - r[m]) * (z_tilde.clamp(max=0) ** 2).sum())
                        count += 1
            want.append(total / max(count, 1))
        torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64))

    def test_identity_simplex_is_distance_to_probability_simplex(self):
        g = torch.Generator().manual_seed(7)
        features = torch.randn(1, 2, 4, generator=g, dtype=torch.float64)
        labels = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
        mask = torch.ones(1, 2, dtype=torch.bool)
        got = cone_loss(
            features, labels, mask, torch.eye(4, dtype=torch.float64), alpha=1.0, **TIGHT
        )
        z = features[0, 0] - features[0, 1]
        z_tilde = 2.0 * z / (1.0 + z.norm())
        assert got.item() == pytest.approx(distance_to_probability_simplex(z_tilde.numpy()))

    def test_project_simplex_matches_bisection(self):
        g = torch.Generator().manual_seed(8)
        values = 3.0 * torch.randn(50, 7, generator=g, dtype=torch.float64)
        projected = project_simplex(values)
        distances = ((values - projected) ** 2).sum(-1)
        for j in range(50):
            assert distances[j].item() == pytest.approx(
                distance_to_probability_simplex(values[j].numpy()), rel=1e-9, abs=1e-12
            )

    def test_duplicate_documents(self):
        # identical feature vectors with different labels: z = 0, loss = φ·dist(0, conv U)²
        basis = random_basis(n_features=4, n_basis=3, seed=9).requires_grad_(True)
        x = torch.randn(1, 4, dtype=torch.float64).expand(3, 4).clone()
        features = x.unsqueeze(0).requires_grad_(True)
        labels = torch.tensor([[2.0, 0.0, 1.0]], dtype=torch.float64)
        mask = torch.ones(1, 3, dtype=torch.bool)
        value = cone_loss(features, labels, mask, basis, **TIGHT)
        value.backward()
        _, distance = cone_fold_in_exact(np.zeros(4), basis.detach().numpy())
        # φ = 2, 1, 1 over three pairs; mean = (4/3) dist²
        assert value.item() == pytest.approx(4.0 / 3.0 * distance, rel=1e-8)
        assert torch.isfinite(features.grad).all() and torch.isfinite(basis.grad).all()
        u2 = basis.detach().clone().requires_grad_(True)
        f2 = features.detach()[0].clone().requires_grad_(True)
        cone_query_loss_oracle(f2, labels[0], u2).backward()
        torch.testing.assert_close(basis.grad, u2.grad, rtol=1e-6, atol=1e-9)
        torch.testing.assert_close(features.grad[0], f2.grad, rtol=1e-6, atol=1e-9)

    def test_extreme_features_are_finite(self):
        features, labels, mask = random_batch(nan_padding=False)
        features = (features.sign() * 1e3).float().requires_grad_(True)
        basis = random_basis().float().requires_grad_(True)
        value = cone_loss(features, labels.float(), mask, basis)
        value.backward()
        assert torch.isfinite(value) and value.item() > 0
        assert torch.isfinite(features.grad).all() and torch.isfinite(basis.grad).all()

    def test_sampled_pairs_static_shape_and_exact_for_one_pair(self):
        features, labels, mask = random_batch(nan_padding=True)
        basis = random_basis()
        g = torch.Generator().manual_seed(0)
        sampled = cone_loss(features, labels, mask, basis, max_pairs_per_query=8, generator=g,
                            reduction="none")  # fmt: skip
        assert sampled.shape == (4,) and torch.isfinite(sampled).all()
        assert sampled[1] == 0 and sampled[2] == 0
        # a query with exactly one pair: every sample is that pair
        one = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
        f = features[:1, :2]
        exact = cone_loss(f, one, torch.ones(1, 2, dtype=torch.bool), basis)
        drawn = cone_loss(f, one, torch.ones(1, 2, dtype=torch.bool), basis,
                          max_pairs_per_query=5, generator=g)  # fmt: skip
        torch.testing.assert_close(drawn, exact)

    def test_sampled_pairs_are_unbiased(self):
        features, labels, mask = random_batch(batch=1, length=6, nan_padding=False)
        basis = random_basis()
        exact = cone_loss(features, labels, mask, basis)
        g = torch.Generator().manual_seed(1)
        many = (features.expand(400, -1, -1), labels.expand(400, -1), mask.expand(400, -1))
        drawn = cone_loss(*many, basis, max_pairs_per_query=20, generator=g)
        assert drawn.item() == pytest.approx(exact.item(), rel=0.05)

    def test_module_equals_function(self):
        features, labels, mask = random_batch(nan_padding=True)
        basis = random_basis()
        module = ConeLoss(constraint="band", band=[0.5, 1.5], weighting="none")
        torch.testing.assert_close(
            module(features, labels, mask, basis),
            cone_loss(features, labels, mask, basis, constraint="band", band=(0.5, 1.5),
                      weighting="none"),
        )  # fmt: skip

    @pytest.mark.parametrize(
        "kwargs",
        [
            {"constraint": "ball"},
            {"weighting": "gain"},
            {"solver": "newton"},
            {"reduction": "avg"},
            {"alpha": -1.0},
            {"rho": 0.0},
            {"band": (2.0, 1.0)},
            {"max_iter": 0},
            {"tol": -1.0},
            {"max_pairs_per_query": 0},
        ],
    )
    def test_bad_hyperparameters(self, kwargs):
        with pytest.raises(ValueError):
            ConeLoss(**kwargs)

    def test_scores_instead_of_features(self):
        with pytest.raises(ValueError, match=r"features must be \[B, L, F\]"):
            cone_loss(torch.randn(2, 4), torch.zeros(2, 4), torch.ones(2, 4, dtype=torch.bool),
                      torch.eye(4))  # fmt: skip

    def test_basis_width_mismatch(self):
        with pytest.raises(ValueError, match="F = 5"):
            cone_loss(torch.randn(2, 4, 5), torch.zeros(2, 4), torch.ones(2, 4, dtype=torch.bool),
                      torch.randn(4, 3))  # fmt: skip
