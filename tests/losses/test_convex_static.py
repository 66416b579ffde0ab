"""ConvexLoss's static path: what it runs compiled or on an accelerator (no host read of a tensor
value, shapes from hyperparameters), checked against the CPU eager path on the same draws."""

from __future__ import annotations

import pytest
import torch

from differank.losses.algorithms.permutation_sampler import _hash_coefficients, query_tables
from differank.losses.convex import ConvexLoss, convex_loss
from tests.oracles import sample_orders

STATIC = "differank.losses.algorithms.permutation_sampler.may_read_values"


def batch(dtype=torch.float64, batch_size=3, length=6, seed=0):
    """Labels 0..2 (3 levels, under num_levels = 5), NaN scores at padded slots, and query 2
    without a preference pair (one label value)."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch_size, length, generator=g, dtype=dtype)
    labels = torch.randint(0, 3, (batch_size, length), generator=g).to(dtype)
    mask = torch.rand(batch_size, length, generator=g) < 0.8
    mask[:, :2] = True
    mask[0, -1] = False
    labels[0, :2] = torch.tensor([2.0, 0.0], dtype=dtype)
    labels[2] = 1.0
    return scores.masked_fill(~mask, float("nan")), labels, mask


def forward_backward(loss, scores, labels, mask, seed=0, **kwargs):
    """Value and score gradient after ``torch.manual_seed(seed)``: with ``generator=None`` the
    sampler draws from the global RNG, and ``backend="aot_eager"`` makes the same draws as eager,
    so eager and compiled calls see the same samples."""
    leaf = scores.detach().clone().requires_grad_(True)
    torch.manual_seed(seed)
    value = loss(leaf, labels, mask, **kwargs)
    value.sum().backward()
    return value.detach(), leaf.grad


def compiled(loss):
    torch._dynamo.reset()
    return torch.compile(loss, fullgraph=True, backend="aot_eager")


def test_compiling_module_ignores_seed_and_epoch_cache(monkeypatch):
    """While compiling, ``seed`` and the ``refresh="epoch"`` cache do not apply: the samples are
    the global RNG's, as for an eager ``ConvexLoss`` without either (checked eagerly, with the
    compiler's flag raised, to spare a second compilation)."""
    options = dict(delta="auc", objective="expgain", num_samples=12, walk_length=3)
    scores, labels, mask = batch()
    expected = forward_backward(ConvexLoss(**options), scores, labels, mask, seed=5)
    loss = ConvexLoss(**options, refresh="epoch", seed=1)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    got = forward_backward(loss, scores, labels, mask, seed=5, qid=torch.arange(3))
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    assert loss.cache == {} and loss.generator is None


def test_compiled_given_samples_match_eager():
    scores, labels, mask = batch()
    tables = query_tables(labels, mask, delta="map", dtype=scores.dtype)
    safe = torch.where(mask, scores, torch.zeros_like(scores))
    generator = torch.Generator().manual_seed(0)
    samples = sample_orders(safe, tables, num_samples=10, generator=generator)
    loss = ConvexLoss(delta="map", reduction="none")
    expected = forward_backward(loss, scores, labels, mask, samples=samples)
    got = forward_backward(compiled(loss), scores, labels, mask, samples=samples)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    "options",
    [
        dict(),
        dict(delta="auc"),
        dict(delta="map", objective="expgain"),
        dict(objective="mle", ndcg_k=2, accept="all"),
    ],
)
def test_static_path_matches_cpu_eager_path(monkeypatch, options):
    """The path compiled or accelerator calls take, run eagerly: tables sized by num_levels
    (5 here, 3 on the eager path), the same draws, the same values and gradients."""
    scores, labels, mask = batch()
    loss = ConvexLoss(**options, num_samples=40, reduction="none")
    eager = forward_backward(loss, scores, labels, mask)
    monkeypatch.setattr(STATIC, lambda tensor: False)
    assert query_tables(labels, mask, num_levels=5).num_levels == 5
    static = forward_backward(loss, scores, labels, mask)
    torch.testing.assert_close(static, eager, rtol=1e-10, atol=1e-10)
    assert eager[0][2] == 0 and torch.isfinite(eager[0]).all()  # no pair: 0
    assert (eager[1][~mask] == 0).all()


def test_static_path_marks_queries_over_num_levels_nan(monkeypatch):
    scores, labels, mask = batch()
    labels[1] = torch.arange(6, dtype=labels.dtype)  # 6 distinct labels, over num_levels = 5
    mask[1] = True
    scores[1] = torch.randn(6, dtype=scores.dtype)
    loss = ConvexLoss(num_samples=30, reduction="none")
    eager = forward_backward(loss, scores, labels, mask)
    assert torch.isfinite(eager[0]).all()  # the CPU eager path has no bound
    monkeypatch.setattr(STATIC, lambda tensor: False)
    value, grad = forward_backward(loss, scores, labels, mask)
    keep = torch.tensor([True, False, True])
    assert torch.isnan(value[1])
    torch.testing.assert_close((value[keep], grad[keep]), (eager[0][keep], eager[1][keep]))
    assert torch.isnan(forward_backward(ConvexLoss(num_samples=30), scores, labels, mask)[0])
    wide_loss = ConvexLoss(num_samples=30, num_levels=6, reduction="none")
    wide = forward_backward(wide_loss, scores, labels, mask)
    torch.testing.assert_close(wide, eager, rtol=1e-10, atol=1e-10)


def test_static_path_counts_the_levels_of_real_documents_only(monkeypatch):
    """Padding is not a label level: query 0 (two real labels, and padding) fits num_levels=2."""
    _, labels, mask = batch()
    monkeypatch.setattr(STATIC, lambda tensor: False)
    assert query_tables(labels, mask, num_levels=2).overflow.tolist() == [False, True, False]


def test_static_path_reads_no_value_on_the_host():
    """On the meta device every host read (``.item()``, ``bool(t)``) raises."""
    scores, labels, mask = (t.to("meta") for t in batch(torch.float32))
    for options in (dict(), dict(delta="auc", objective="mle"), dict(delta="map")):
        leaf = scores.detach().requires_grad_(True)
        value = ConvexLoss(**options)(leaf, labels, mask)
        value.backward()
        assert value.shape == () and leaf.grad.shape == scores.shape


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("static", [False, True])
def test_half_scores_give_a_finite_float32_loss(monkeypatch, dtype, static):
    if static:
        monkeypatch.setattr(STATIC, lambda tensor: False)
    scores, labels, mask = batch()
    value, grad = forward_backward(ConvexLoss(num_samples=20), scores.to(dtype), labels, mask)
    assert value.dtype == torch.float32 and torch.isfinite(value)
    assert grad.dtype == dtype and torch.isfinite(grad).all()


def test_hash_coefficients_are_fixed_distinct_and_bounded():
    length = 300
    weights = _hash_coefficients(length, torch.device("cpu"))
    limit = (1 << 62) // (length * length)
    assert weights.dtype == torch.int64 and bool(((weights >= 1) & (weights < limit)).all())
    assert weights.unique().numel() == length
    assert torch.equal(weights, _hash_coefficients(length, torch.device("cpu")))
    assert _hash_coefficients(length, torch.device("meta")).shape == (length,)


@pytest.mark.slow
def test_compiled_loss_recompiles_for_new_shapes():
    """A second batch shape recompiles with symbolic sizes, still one graph."""
    loss = ConvexLoss(num_samples=20)
    fast = compiled(loss)
    for batch_size, length in ((3, 6), (4, 9), (5, 11)):
        scores, labels, mask = batch(batch_size=batch_size, length=length)
        got = forward_backward(fast, scores, labels, mask)
        expected = forward_backward(loss, scores, labels, mask)
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)


def test_num_levels_is_checked():
    with pytest.raises(ValueError, match="num_levels"):
        ConvexLoss(num_levels=0)
    with pytest.raises(ValueError, match="num_levels"):
        convex_loss(*batch(), num_levels=2.5)
