"""The loss API for plain torch users (docs/architecture.md#the-input-rule), one test per rule,
each over all six losses: ``mask=None``, 0/1 masks, one unbatched query, negative labels,
errors in torch terms; the class defaults are ``conf/loss/*.yaml``'s, and every ``forward``
documents its shapes."""

from __future__ import annotations

import importlib
import inspect
import types
from functools import partial

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

import differank.losses
import differank.losses.inputs as inputs_module
import differank.losses.module_form as module_form
import differank.losses.ranknet as ranknet_module
from differank.losses import (
    cone_loss,
    convex_loss,
    domination_loss,
    listnet_loss,
    ranknet_loss,
    structured_hinge_loss,
)
from tests.conftest import ROOT

BASIS = torch.tensor([[0.5]], dtype=torch.float64)  # F = K = 1 for the cone on scores


def cone_on_scores(scores, labels, mask=None, reduction="mean"):
    """The cone loss on one-feature documents ([B, L] or [L] -> [..., 1]), every pair."""
    return cone_loss(scores.unsqueeze(-1), labels, mask, BASIS.to(scores.dtype),
                     reduction=reduction, max_pairs_per_query=None)  # fmt: skip


def seeded_convex(scores, labels, mask=None, reduction="mean"):
    """ConvexLoss' sampler on a fresh seeded generator: every call draws the same orders."""
    return convex_loss(scores, labels, mask, num_samples=20, reduction=reduction,
                       generator=torch.Generator().manual_seed(0))  # fmt: skip


LOSSES = {
    "ranknet": ranknet_loss,
    "listnet": listnet_loss,
    "domination": domination_loss,
    "hinge": structured_hinge_loss,
    "convex": seeded_convex,
    "cone": cone_on_scores,
    "lambdaloss": differank.losses.lambda_loss,
    "approxndcg": differank.losses.approx_ndcg_loss,
    "neuralndcg": differank.losses.neural_ndcg_loss,
    "listmle": partial(differank.losses.listmle_loss, ties="index"),  # deterministic ties
    "softmax": differank.losses.softmax_loss,
    "poly1": differank.losses.poly1_softmax_loss,
    "bce": differank.losses.sigmoid_bce_loss,
    "mse": differank.losses.mse_loss,
    "ordinal": partial(differank.losses.ordinal_loss, n=2),
    "approxmetric": differank.losses.approx_metric_loss,
}
MODULES = [
    value
    for value in vars(differank.losses).values()
    if isinstance(value, type) and issubclass(value, torch.nn.Module)
]


def batch(seed=0):
    """Three queries of 5 documents in float64; query 1 has two padded slots (NaN)."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(3, 5, generator=g, dtype=torch.float64)
    labels = torch.tensor([[2, 0, 1, 0, 1], [1, 0, 2, 0, 0], [0, 2, 1, 1, 0]]).double()
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1, 3:] = False
    return scores, labels.masked_fill(~mask, float("nan")), mask


def value_and_grad(loss, scores, labels, mask, reduction="none"):
    leaf = scores.detach().clone().requires_grad_(True)
    value = loss(leaf, labels, mask, reduction=reduction)
    (grad,) = torch.autograd.grad(value.sum(), leaf)
    return value, grad


@pytest.mark.parametrize("name", LOSSES)
class TestLossApi:
    def test_mask_none_means_every_document_is_real(self, name):
        scores, labels, _ = batch()
        labels = labels.nan_to_num(0.0)
        everything = torch.ones_like(scores, dtype=torch.bool)
        torch.testing.assert_close(
            value_and_grad(LOSSES[name], scores, labels, None),
            value_and_grad(LOSSES[name], scores, labels, everything),
            rtol=0,
            atol=0,
        )

    @pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.float32, torch.float64])
    def test_zero_one_masks_equal_the_bool_mask(self, name, dtype):
        scores, labels, mask = batch()
        torch.testing.assert_close(
            value_and_grad(LOSSES[name], scores, labels, mask.to(dtype)),
            value_and_grad(LOSSES[name], scores, labels, mask),
            rtol=0,
            atol=0,
        )

    @pytest.mark.parametrize("bad", [torch.tensor(2), torch.tensor(0.5)])
    def test_a_mask_value_other_than_zero_or_one_is_an_error(self, name, bad):
        scores, labels, mask = batch()
        odd = mask.to(bad.dtype)
        odd[0, 0] = bad
        with pytest.raises(ValueError, match="mask must be bool, or 0/1"):
            LOSSES[name](scores, labels, odd)

    @pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
    def test_one_unbatched_query_is_the_batch_of_one(self, name, reduction):
        scores, labels, mask = batch()
        single = LOSSES[name](scores[0], labels[0], mask[0], reduction=reduction)
        batched = LOSSES[name](scores[:1], labels[:1], mask[:1], reduction=reduction)
        assert single.shape == ()  # "none": the query's loss, unbatched as torch's losses do
        torch.testing.assert_close(single, batched.reshape(()), rtol=0, atol=0)
        assert LOSSES[name](scores[0], labels[0], reduction=reduction).shape == ()  # mask=None

    def test_a_negative_label_at_a_real_document_is_an_error_on_the_cpu(self, name):
        scores, labels, mask = batch()
        allrank = labels.nan_to_num(-1.0)  # allRank pads with -1
        with pytest.raises(ValueError, match=r"labels must be >= 0.*mask=labels >= 0"):
            LOSSES[name](scores, allrank, mask | True)
        torch.testing.assert_close(  # the suggested mask is the rule's padding
            value_and_grad(LOSSES[name], scores, allrank, allrank >= 0),
            value_and_grad(LOSSES[name], scores, labels, mask),
            rtol=0,
            atol=0,
        )

    def test_a_negative_label_drops_its_query_where_values_are_not_read(self, name, monkeypatch):
        scores, labels, mask = batch()
        clean_value, clean_grad = value_and_grad(LOSSES[name], scores, labels, mask)
        labels[0, 1] = -1.0
        with monkeypatch.context() as patch:  # the rule's reads, as compiled or on a GPU
            patch.setattr(inputs_module, "may_read_values", lambda tensor: False)
            value, grad = value_and_grad(LOSSES[name], scores, labels, mask)
        assert value[0] == 0 and not grad[0].any()
        torch.testing.assert_close(value[1:], clean_value[1:], rtol=0, atol=0)
        torch.testing.assert_close(grad[1:], clean_grad[1:], rtol=0, atol=0)

    def test_the_wrong_layout_error_names_the_expected_shape(self, name):
        scores, labels, mask = batch()
        if name == "cone":  # scalar scores [B, L] given to the feature-space loss
            call = lambda: cone_loss(scores, labels, mask, BASIS)  # noqa: E731
        else:  # a feature axis [B, L, 1] given to a scalar loss
            call = lambda: LOSSES[name](scores.unsqueeze(-1), labels, mask)  # noqa: E731
        with pytest.raises(ValueError, match=r"must be \[B, L(, F)?\]") as error:
            call()
        assert "model=" not in str(error.value)  # torch terms, not the harness' config names


@pytest.mark.parametrize("path", sorted((ROOT / "conf" / "loss").glob("*.yaml")), ids=str)
def test_class_defaults_equal_the_loss_config(path):
    """A loss built in Python is the loss the configs (and the published numbers) use."""
    config = OmegaConf.to_container(OmegaConf.load(path))
    module_name, _, class_name = config.pop("_target_").rpartition(".")
    parameters = inspect.signature(getattr(importlib.import_module(module_name), class_name))
    differ = {
        key: (value, parameters.parameters[key].default)
        for key, value in config.items()
        if key not in parameters.parameters
        or _plain(parameters.parameters[key].default) != _plain(value)
    }
    assert not differ, f"{path.name}: yaml value vs class default {differ}"
    assert isinstance(instantiate(OmegaConf.load(path)), torch.nn.Module)


def _plain(value):
    """Tuples as lists: a YAML sequence reads as a list."""
    return list(value) if isinstance(value, tuple) else value


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_every_forward_documents_its_shapes(module):
    doc = inspect.getdoc(module.forward) or ""
    assert "Shape:" in doc and "[B, L" in doc and "mask=None" in doc, module.__name__


def test_ranknet_refuses_a_pair_batch_over_its_memory_budget(monkeypatch):
    """The O(L²) loss says what it would need before allocating it (a budget of 1 MiB here: a
    list of 300 documents in float32 needs 300² pairs × 21 bytes ≈ 1.8 MiB)."""
    monkeypatch.setattr(ranknet_module, "MAX_PAIR_BYTES", 2**20)
    scores, labels = torch.randn(1, 300), torch.randint(0, 3, (1, 300))
    with pytest.raises(
        ValueError, match=r"90,000 pairs need about 1\.8 MiB.*1\.0 MiB.*data\.max_list"
    ):
        ranknet_loss(scores, labels)
    assert ranknet_loss(scores[:, :200], labels[:, :200]).isfinite()  # 200² × 21 B < 1 MiB


_FUNCTION_PARTS = ("__globals__", "__name__", "__defaults__", "__doc__", "__annotations__")


class _CodeWithoutQualname:
    """A code object as Python 3.10 has it: ``replace`` takes no ``co_qualname``."""

    def __init__(self, code):
        self.code = code

    def replace(self, **changes):
        assert "co_qualname" not in changes, "Python 3.10's code.replace() has no co_qualname"
        return self.code.replace(**changes)


@pytest.mark.parametrize("python_310", [False, True])
def test_each_loss_module_gets_its_own_forward_code(python_310):
    """torch.compile counts recompilations per code object: every LossModule subclass gets a
    forward of its own, named after it, on Python 3.10 (no co_qualname) as on 3.11+."""
    forward = module_form.LossModule.forward
    method = forward
    if python_310:
        method = types.SimpleNamespace(
            __code__=_CodeWithoutQualname(forward.__code__),
            **{name: getattr(forward, name) for name in _FUNCTION_PARTS},
        )
    copy = module_form._own_copy(method, differank.losses.ListNetLoss)
    assert copy.__code__ is not forward.__code__
    assert copy.__qualname__ == "ListNetLoss.forward"
    scores, labels = torch.tensor([[0.0, 1.0]]), torch.tensor([[1.0, 0.0]])
    module = differank.losses.ListNetLoss(reduction="sum")
    assert torch.equal(copy(module, scores, labels), module(scores, labels))
