"""ConeRank's static path (compiled or on an accelerator): the same loss as the eager path, with
static shapes and no host read; it compiles with ``fullgraph=True`` and matches eager."""

from __future__ import annotations

import pytest
import torch

import differank.losses.algorithms.cone_active_set as active_set_module
import differank.losses.cone as cone_module
from differank.losses.algorithms.cone_active_set import (
    active_set_fold_in,
    static_active_set_fold_in,
)
from differank.losses.cone import ConeLoss
from tests.losses.test_cone import random_basis, random_batch
from tests.oracles import cone_query_loss_oracle

OPTIONS = [
    {"max_pairs_per_query": None},  # simplex, every pair
    {"constraint": "cone", "max_pairs_per_query": None},
    {"constraint": "band", "band": (0.5, 2.0), "max_pairs_per_query": None},
    {"max_pairs_per_query": 7},
    {"solver": "fista", "max_iter": 400, "tol": 0.0, "max_pairs_per_query": None},
]


def value_and_grads(loss, features, labels, mask, basis, seed=0):
    """Loss value and the gradients of features and basis; the RNG seeded for sampled pairs."""
    features = features.detach().clone().requires_grad_(True)
    basis = basis.detach().clone().requires_grad_(True)
    torch.manual_seed(seed)
    value = loss(features, labels, mask, basis)
    value.backward()
    return value.detach(), features.grad, basis.grad


def static_path(monkeypatch):
    """Make the eager CPU run take the path compiled and accelerator runs take."""
    monkeypatch.setattr(cone_module, "may_read_values", lambda tensor: False)


@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_static_path_equals_eager_path(monkeypatch, options):
    features, labels, mask = random_batch()
    basis = random_basis()
    eager = value_and_grads(ConeLoss(**options), features, labels, mask, basis)
    static_path(monkeypatch)
    static = value_and_grads(ConeLoss(**options), features, labels, mask, basis)
    torch.testing.assert_close(static, eager, rtol=1e-10, atol=1e-12)


def test_static_path_matches_the_float64_oracle(monkeypatch):
    features, labels, mask = random_batch(seed=3)
    basis = random_basis(seed=4)
    static_path(monkeypatch)
    got = ConeLoss(reduction="none", max_pairs_per_query=None)(features, labels, mask, basis)
    expected = []
    for b in range(len(features)):
        keep = mask[b]
        expected.append(cone_query_loss_oracle(features[b][keep], labels[b][keep], basis))
    torch.testing.assert_close(got, torch.stack(expected).to(got.dtype), rtol=1e-8, atol=1e-10)


def check_compiled_matches_eager(options):
    features, labels, mask = random_batch(batch=3)
    basis = random_basis()
    eager = value_and_grads(ConeLoss(**options), features, labels, mask, basis)
    compiled = torch.compile(ConeLoss(**options), fullgraph=True, backend="aot_eager")
    got = value_and_grads(compiled, features, labels, mask, basis)
    torch.testing.assert_close(got, eager, rtol=1e-10, atol=1e-12)


# the default compiles in the default suite: tests/losses/test_loss_contract.py (the cone entry)
@pytest.mark.slow  # about 10 s each: the default's compilation covers the same code
@pytest.mark.parametrize("options", OPTIONS[1:4], ids=str)
def test_other_options_compile_fullgraph_and_match_eager(options):
    check_compiled_matches_eager(options)


@pytest.mark.slow
def test_compiles_with_inductor():
    features, labels, mask = random_batch(batch=3)
    basis = random_basis()
    every_pair = ConeLoss(max_pairs_per_query=None)  # inductor draws from its own RNG
    eager = value_and_grads(every_pair, features, labels, mask, basis)
    compiled = torch.compile(every_pair, fullgraph=True, backend="inductor")
    got = value_and_grads(compiled, features, labels, mask, basis)
    torch.testing.assert_close(got, eager, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("options", OPTIONS[2:4], ids=str)
def test_static_path_reads_no_value_on_the_host(options):
    """Every host read raises on the meta device (simplex and cone: the loss contract)."""
    features, labels, mask = (t.to("meta") for t in random_batch(nan_padding=False))
    features = features.float().requires_grad_(True)
    basis = random_basis().float().to("meta").requires_grad_(True)
    value = ConeLoss(**options)(features, labels, mask, basis)
    value.backward()
    assert value.shape == () and features.grad.shape == features.shape
    assert basis.grad.shape == basis.shape


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_static_path_half_features_give_finite_float32(monkeypatch, dtype):
    features, labels, mask = random_batch(nan_padding=False)
    static_path(monkeypatch)
    features = features.to(dtype).requires_grad_(True)
    value = ConeLoss(max_pairs_per_query=None)(features, labels, mask, random_basis().to(dtype))
    value.backward()
    assert value.dtype == torch.float32 and torch.isfinite(value)
    assert features.grad.dtype == dtype and torch.isfinite(features.grad).all()


def test_static_fold_in_equals_the_eager_solver_and_reports_convergence():
    g = torch.Generator().manual_seed(0)
    basis = torch.randn(6, 4, generator=g, dtype=torch.float64)
    gram, linear = basis.T @ basis, torch.randn(200, 4, generator=g, dtype=torch.float64) * 3
    for total in (None, 1.0, 2.5):
        exact, _, needed = active_set_fold_in(gram, linear, total=total, tol=0.0, max_iter=100)
        w, support, converged = static_active_set_fold_in(
            gram, linear, total=total, tol=0.0, iterations=needed, full_rank=True
        )
        torch.testing.assert_close(w, exact, rtol=1e-12, atol=1e-12)
        assert converged.all() and torch.equal(support, w > 0)
        # too few iterations: rows still going keep a feasible point and say so
        w, _, converged = static_active_set_fold_in(
            gram, linear, total=total, tol=0.0, iterations=1, full_rank=True
        )
        assert (w >= 0).all()
        if total is not None:
            torch.testing.assert_close(w.sum(-1), torch.full((200,), total, dtype=w.dtype))
        objective = lambda v: ((v @ gram) * v).sum(-1) - 2 * (linear * v).sum(-1)  # noqa: E731
        assert (objective(w) >= objective(exact) - 1e-9).all()
        assert not converged.all()


def test_static_fold_in_gives_the_same_minimiser_from_the_face_table_and_per_row_solves(
    monkeypatch,
):
    """Each row's face map gathered from the table of all 2^K faces, or each row's bordered
    system solved: the same iterations (the table when it has fewer faces than the solves)."""
    g = torch.Generator().manual_seed(2)
    basis = torch.randn(9, 6, generator=g, dtype=torch.float64)
    gram, linear = basis.T @ basis, torch.randn(300, 6, generator=g, dtype=torch.float64) * 3
    for total in (None, 1.0):
        options = dict(total=total, tol=0.0, iterations=8, full_rank=True)
        table = static_active_set_fold_in(gram, linear, **options)
        with monkeypatch.context() as patched:
            patched.setattr(active_set_module, "_TABLE_MAX_BASIS", 0)  # per-row solves
            solved = static_active_set_fold_in(gram, linear, **options)
        torch.testing.assert_close(table[0], solved[0], rtol=1e-10, atol=1e-12)
        assert torch.equal(table[1], solved[1]) and torch.equal(table[2], solved[2])
        assert table[2].all()


def test_static_fold_in_with_a_singular_basis_starts_classically():
    """K > F: G is singular; without a rank test the static path starts from the origin
    (cone) or the nearest vertex (simplex) and still ends at the minimum distance."""
    g = torch.Generator().manual_seed(1)
    basis = torch.randn(3, 5, generator=g, dtype=torch.float64)
    gram, linear = basis.T @ basis, torch.randn(50, 3, generator=g, dtype=torch.float64) @ basis
    for total in (None, 1.0):
        exact, _, _ = active_set_fold_in(gram, linear, total=total, tol=0.0, max_iter=200)
        w, _, converged = static_active_set_fold_in(
            gram, linear, total=total, tol=0.0, iterations=30, full_rank=False
        )
        assert converged.all()
        objective = lambda v: ((v @ gram) * v).sum(-1) - 2 * (linear * v).sum(-1)  # noqa: E731
        torch.testing.assert_close(objective(w), objective(exact), rtol=1e-9, atol=1e-9)


def test_static_iterations_is_validated():
    with pytest.raises(ValueError, match="static_iterations"):
        ConeLoss(static_iterations=0)
