"""The contract every loss of ``differank.losses`` keeps, run over the registry of
tests/loss_registry.py: one parametrised suite, one entry per loss
(docs/architecture.md#how-a-loss-is-tested). A check a loss cannot satisfy is a strict xfail
with the registry's reason."""

from __future__ import annotations

import pytest
import torch

import differank.losses
from differank.losses.module_form import loss_classes
from tests.loss_registry import CASES, CHECKS, LossCase

REDUCTIONS = ("none", "mean", "sum")


def cases(check: str) -> list:
    """The registry as pytest params for ``check``, with each entry's xfail/slow marks."""
    params = []
    for case in CASES.values():
        marks = []
        if check in case.cannot:
            marks.append(pytest.mark.xfail(strict=True, reason=case.cannot[check]))
        if check in case.slow:
            marks.append(pytest.mark.slow)
        params.append(pytest.param(case, id=case.name, marks=marks))
    return params


def test_every_loss_is_in_the_registry():
    """Every loss class in ``losses/`` (what a checkpoint may name) and every loss function
    ``differank.losses`` exports has a registry entry, so none escapes the contract suite."""
    modules = {case.module for case in CASES.values()}
    functions = {case.function for case in CASES.values()}
    missing = [
        f"{cls.__module__}.{cls.__qualname__}" for cls in loss_classes() if cls not in modules
    ]
    missing += [
        f"differank.losses.{name}"
        for name in differank.losses.__all__
        if name.endswith("_loss") and getattr(differank.losses, name) not in functions
    ]
    assert not missing, f"add a LossCase with a float64 oracle to tests/loss_registry.py: {missing}"


def real(mask: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """The mask broadcast over the values' trailing feature axis (ConeRank's [B, L, F])."""
    return mask.reshape(mask.shape + (1,) * (values.dim() - 2))


def value_and_grad(case: LossCase, values, labels, mask, reduction="none", module=None,
                   all_grads=False):  # fmt: skip
    """The loss (function, or ``module`` when given) and its gradient w.r.t. the values; with
    ``all_grads`` also those w.r.t. the floating ``call_args`` (ConeRank's basis)."""
    leaf = values.detach().clone().requires_grad_(True)
    call_args = tuple(
        arg.detach().clone().requires_grad_(all_grads and arg.is_floating_point())
        for arg in case.call_args
    )
    if module is None:
        value = case.loss(leaf, labels, mask, reduction, call_args)
    else:
        value = case.run_module(module, leaf, labels, mask, call_args)
    inputs = (leaf, *(arg for arg in call_args if arg.requires_grad))
    return value.detach(), *torch.autograd.grad(value.sum(), inputs)


def assert_equal(got, want, case: LossCase | None = None):
    """Exact without a case; to the case's tolerance with one."""
    rtol, atol = (0.0, 0.0) if case is None else (case.rtol, case.atol)
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)


def first_real_slot(mask: torch.Tensor, query: int) -> int:
    return int(mask[query].nonzero()[0])


def test_registry_is_well_formed():
    for case in CASES.values():
        for check, reason in {**case.cannot, **case.slow}.items():
            assert check in CHECKS and reason.strip(), (case.name, check)


@pytest.mark.parametrize("case", cases("oracle"))
def test_value_and_gradient_match_float64_oracle(case):
    values, labels, mask = case.make_batch(seed=1)
    got, *grads = value_and_grad(case, values, labels, mask, all_grads=True)
    clean = values.masked_fill(~real(mask, values), 0.0).requires_grad_(True)
    call_args = tuple(
        arg.detach().clone().requires_grad_(arg.is_floating_point()) for arg in case.call_args
    )
    want = case.expected(clean, labels, mask, call_args)
    inputs = (clean, *(arg for arg in call_args if arg.requires_grad))
    want_grads = torch.autograd.grad(want.sum(), inputs)
    assert got.shape == want.shape == (mask.shape[0],)
    assert_equal(got, want.detach(), case)
    assert_equal(tuple(grads), want_grads, case)
    assert want.detach()[case.counted(labels, mask)].abs().sum() > 0  # the batch is not trivial


@pytest.mark.parametrize("case", cases("nan_padding"))
def test_nan_padding_changes_nothing(case):
    values, labels, mask = case.make_batch()
    finite = values.masked_fill(~real(mask, values), 7.0), labels.masked_fill(~mask, 2.0)
    got, grad = value_and_grad(case, values, labels, mask)
    want, want_grad = value_and_grad(case, *finite, mask)
    assert torch.isfinite(got).all() and torch.isfinite(grad).all()
    assert (grad[~mask] == 0).all()
    assert_equal((got, grad), (want, want_grad))


@pytest.mark.parametrize("case", cases("padding_width"))
def test_extra_padded_columns_change_nothing(case):
    values, labels, mask = case.make_batch()
    extra = 3
    wide_values = torch.cat([values, torch.full_like(values[:, :extra], float("inf"))], dim=1)
    wide_labels = torch.cat([labels, torch.full_like(labels[:, :extra], 9.0)], dim=1)
    wide_mask = torch.cat([mask, torch.zeros_like(mask[:, :extra])], dim=1)
    want, want_grad = value_and_grad(case, values, labels, mask)
    got, grad = value_and_grad(case, wide_values, wide_labels, wide_mask)
    assert (grad[:, -extra:] == 0).all()
    assert_equal((got, grad[:, :-extra]), (want, want_grad), case)


@pytest.mark.parametrize("case", cases("permutation"))
def test_permuting_a_querys_documents_changes_nothing(case):
    values, labels, mask = case.make_batch()
    order = torch.rand(mask.shape, generator=torch.Generator().manual_seed(5)).argsort(dim=1)
    index = order.reshape(order.shape + (1,) * (values.dim() - 2)).expand(values.shape)
    moved = values.gather(1, index), labels.gather(1, order), mask.gather(1, order)
    want, want_grad = value_and_grad(case, values, labels, mask)
    got, grad = value_and_grad(case, *moved)
    assert_equal((got, grad), (want, want_grad.gather(1, index)), case)


@pytest.mark.parametrize("case", cases("reduction"))
def test_reductions_agree_and_invalid_queries_are_left_out(case):
    values, labels, mask = case.make_batch()
    per_query, *grads = value_and_grad(case, values, labels, mask, "none", all_grads=True)
    valid = case.counted(labels, mask)
    assert 0 < valid.sum() < len(valid)  # the batch has queries of both kinds
    assert (per_query[~valid] == 0).all() and (grads[0][~valid] == 0).all()
    total, *total_grads = value_and_grad(case, values, labels, mask, "sum", all_grads=True)
    mean, *mean_grads = value_and_grad(case, values, labels, mask, "mean", all_grads=True)
    assert total.shape == mean.shape == ()
    assert_equal((total, *total_grads), (per_query.sum(), *grads), case)
    count = valid.sum().to(per_query.dtype)
    want = (per_query.sum() / count, *(grad / count for grad in grads))
    assert_equal((mean, *mean_grads), want, case)
    # a batch of invalid queries only: 0 for every reduction (no 0/0), zero gradients
    invalid = values[~valid], labels[~valid], mask[~valid]
    for reduction in REDUCTIONS:
        value, *zeros = value_and_grad(case, *invalid, reduction, all_grads=True)
        assert not value.any() and not any(grad.any() for grad in zeros)


@pytest.mark.parametrize("case", cases("label_dtypes"))
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool])
def test_integer_and_bool_labels_equal_float_labels(case, dtype):
    values, labels, mask = case.make_batch()
    labels = labels.nan_to_num(0.0)
    if dtype == torch.bool:
        labels = (labels > 0).to(labels.dtype)
    got = value_and_grad(case, values, labels.to(dtype), mask)
    assert_equal(got, value_and_grad(case, values, labels, mask))


NONFINITE = (float("nan"), float("inf"), float("-inf"))


@pytest.mark.parametrize("case", cases("nonfinite_label"))
def test_nonfinite_label_drops_its_query(case):
    values, labels, mask = case.make_batch()
    clean_value, clean_grad = value_and_grad(case, values, labels, mask)
    for bad in NONFINITE:
        labels[0, first_real_slot(mask, 0)] = bad
        value, grad = value_and_grad(case, values, labels, mask)
        assert value[0] == 0 and not grad[0].any(), bad
        assert_equal((value[1:], grad[1:]), (clean_value[1:], clean_grad[1:]), case)


@pytest.mark.parametrize("case", cases("nonfinite_score"))
def test_nonfinite_score_makes_its_query_nan(case):
    values, labels, mask = case.make_batch()
    clean_value, clean_grad = value_and_grad(case, values, labels, mask)
    real_slots = real(mask, values).expand_as(values)
    counted = case.counted(labels, mask)
    # a query with documents that the loss does not count (query 3: no pair): never used
    idle = [q for q in range(len(mask)) if mask[q].any() and not counted[q]][:1]
    others = [q for q in range(len(mask)) if q not in (0, *idle)]
    for bad in NONFINITE:
        for query in (0, *idle):
            values[query, first_real_slot(mask, query)] = bad
        value, grad = value_and_grad(case, values, labels, mask)
        assert torch.isnan(value[0]) and torch.isnan(grad[0][real_slots[0]]).all(), bad
        assert all(value[q] == 0 and not grad[q].any() for q in idle), bad
        assert_equal((value[others], grad[others]), (clean_value[others], clean_grad[others]), case)
        assert (grad[~mask] == 0).all(), bad
        assert torch.isnan(case.loss(values, labels, mask, "mean")), bad


@pytest.mark.parametrize("case", cases("half"))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_compute_in_float32(case, dtype):
    values, labels, mask = case.make_batch(seed=3, dtype=torch.float32)
    values = (values * case.half_scale).to(dtype)  # fp16 pair sums and A(r)·s overflow near 1e4
    value, grad = value_and_grad(case, values, labels, mask, "sum")
    assert value.dtype == torch.float32 and grad.dtype == dtype
    assert torch.isfinite(value) and torch.isfinite(grad).all()
    want, want_grad = value_and_grad(case, values.float(), labels, mask, "sum")
    assert_equal((value, grad), (want, want_grad.to(dtype)))


@pytest.mark.parametrize("case", cases("empty"))
@pytest.mark.parametrize("shape", [(0, 5), (3, 0), (0, 0)])
def test_empty_batch_or_lists_give_a_connected_zero(case, shape):
    values_shape = shape if case.feature_dim is None else (*shape, case.feature_dim)
    labels, mask = torch.zeros(shape), torch.zeros(shape, dtype=torch.bool)
    for reduction in REDUCTIONS:
        values = torch.zeros(values_shape, dtype=torch.float64, requires_grad=True)
        value = case.loss(values, labels, mask, reduction)
        assert value.shape == ((shape[0],) if reduction == "none" else ()), reduction
        assert torch.equal(value, torch.zeros_like(value)) and value.requires_grad, reduction
        value.sum().backward()
        assert values.grad.shape == values_shape and not values.grad.any(), reduction


@pytest.mark.parametrize("case", cases("unpadded"))
def test_lists_without_padding_keep_the_rule(case):
    """Lists without padding (a mask that is all true): the oracle, the invalid queries and
    the non-finite values follow the rule there as on padded lists."""
    values, labels, mask = case.make_batch(seed=1)
    fill = torch.randn(values.shape, generator=torch.Generator().manual_seed(2), dtype=values.dtype)
    values = torch.where(real(mask, values), values, fill)  # distinct scores: no subgradient ties
    labels = labels.masked_fill(~mask, 0.0)  # padding becomes real documents of grade 0
    labels[2] = 1.0  # a query of one grade: no pair
    full = torch.ones_like(mask)
    got, grad = value_and_grad(case, values, labels, full)
    clean = values.clone().requires_grad_(True)
    want = case.expected(clean, labels, full)
    (want_grad,) = torch.autograd.grad(want.sum(), clean)
    assert_equal((got, grad), (want.detach(), want_grad), case)
    counted = case.counted(labels, full)
    assert (got[~counted] == 0).all() and not grad[~counted].any() and got[counted].all()
    mean = case.loss(values, labels, full, "mean")
    assert_equal(mean, got.sum() / counted.sum(), case)
    for bad in NONFINITE:
        bad_labels, bad_values = labels.clone(), values.clone()
        bad_labels[0, 1], bad_values[1, 0] = bad, bad
        value, bad_grad = value_and_grad(case, bad_values, bad_labels, full)
        assert value[0] == 0 and not bad_grad[0].any(), bad
        assert torch.isnan(value[1]) and torch.isnan(bad_grad[1]).all(), bad
        assert_equal((value[3:], bad_grad[3:]), (got[3:], grad[3:]), case)


@pytest.mark.parametrize("case", cases("module"))
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_module_equals_function(case, reduction):
    values, labels, mask = case.make_batch()
    module = case.make_module(reduction)
    assert not list(module.parameters())
    got = value_and_grad(case, values, labels, mask, module=module, all_grads=True)
    assert_equal(got, value_and_grad(case, values, labels, mask, reduction, all_grads=True))


def check_compiled_matches_eager(case: LossCase, backend: str, rtol: float, atol: float):
    # a fresh compile cache per case: a program compiles its one loss, while this suite compiles
    # dozens of configurations of the same functions, past dynamo's recompile limit
    torch._dynamo.reset()
    values, labels, mask = case.make_batch()
    module = case.make_module()
    compiled = torch.compile(module, fullgraph=True, backend=backend)
    got = value_and_grad(case, values, labels, mask, module=compiled, all_grads=True)
    want = value_and_grad(case, values, labels, mask, module=module, all_grads=True)
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("case", cases("compile"))
def test_compiles_fullgraph_and_matches_eager(case):
    """aot_eager keeps eager's kernels and random stream: the same values to the tolerance."""
    check_compiled_matches_eager(case, "aot_eager", case.rtol, case.atol)


@pytest.mark.slow
@pytest.mark.parametrize("case", cases("compile"))
def test_compiles_with_inductor(case):
    """Inductor fuses kernels (other rounding) and draws from its own random stream."""
    if case.stochastic:
        pytest.skip("inductor draws other random numbers than eager: nothing to compare")
    check_compiled_matches_eager(case, "inductor", rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("case", cases("host_reads"))
def test_static_path_reads_no_value_on_the_host(case):
    """On the meta device every host read (``.item()``, ``bool(t)``) raises: the accelerator
    path runs forward and backward without one (no device synchronisation)."""
    values, labels, mask = (t.to("meta") for t in case.make_batch(dtype=torch.float32))
    values.requires_grad_(True)
    call_args = tuple(arg.to("meta").requires_grad_(True) for arg in case.call_args)
    with case.seeded():
        value = case.make_module()(
            values, labels, mask, *case.inputs(values, labels, mask, call_args)
        )
    value.backward()
    assert value.shape == () and values.grad.shape == values.shape
    assert all(arg.grad.shape == arg.shape for arg in call_args)
