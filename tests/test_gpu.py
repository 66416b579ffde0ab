"""On a CUDA device: every loss equals its CPU value, one training epoch per objective runs, and a
training step of the static path makes no host-device synchronisation. Skipped without CUDA."""

from __future__ import annotations

import pytest
import torch

from differank.losses import (
    ConeLoss,
    ConvexLoss,
    DominationLoss,
    ListNetLoss,
    RankNetLoss,
    StructuredHingeLoss,
)
from differank.rankers.scorers.conerank import ConeRank
from differank.rankers.scorers.linear import LinearRanker
from tests.conftest import LOSS_RUNS, run_without_sync

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

LOSSES = {
    "ranknet": RankNetLoss,
    "listnet": ListNetLoss,
    "domination": DominationLoss,
    "hinge": StructuredHingeLoss,
    "convex": ConvexLoss,
}


def batch(dtype=torch.float64, batch_size=8, length=32, n_features=0, seed=0):
    """Labels 0..2, a fifth of the slots padded (NaN scores there); features when asked.
    Scores are distinct multiples of 1/8 (exact in float16), so the hinge's argmax is unique."""
    g = torch.Generator().manual_seed(seed)
    ranks = torch.rand(batch_size, length, generator=g).argsort(dim=-1)
    scores = (ranks.to(dtype) - length / 2) / 8
    labels = torch.randint(0, 3, (batch_size, length), generator=g).to(dtype)
    mask = torch.rand(batch_size, length, generator=g) < 0.8
    features = torch.randn(batch_size, length, n_features, generator=g, dtype=dtype)
    return scores.masked_fill(~mask, float("nan")), labels, mask, features


def value_and_grad(loss, scores, labels, mask):
    # the same seed on each device: a sampled loss (ConvexLoss' sampler, on the CPU's global
    # RNG wherever the scores are) then draws the same rankings on CUDA as on the CPU
    torch.manual_seed(0)
    leaf = scores.detach().clone().requires_grad_(True)
    value = loss(leaf, labels, mask)
    value.backward()
    return value.detach().cpu(), leaf.grad.cpu()


@pytest.mark.parametrize("name", LOSSES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_loss_on_cuda_equals_cpu(name, dtype):
    scores, labels, mask, _ = batch(dtype)
    cpu = value_and_grad(LOSSES[name](), scores, labels, mask)
    cuda = value_and_grad(LOSSES[name]().cuda(), scores.cuda(), labels.cuda(), mask.cuda())
    tolerance = 1e-9 if dtype == torch.float64 else 1e-3
    torch.testing.assert_close(cuda, cpu, rtol=tolerance, atol=tolerance)
    assert torch.isfinite(cuda[0]) and torch.isfinite(cuda[1]).all()


@pytest.mark.parametrize("objective", sorted(LOSS_RUNS))
@pytest.mark.parametrize("precision", ["32-true", "16-mixed", "bf16-mixed"])
def test_one_training_epoch_on_cuda(objective, precision, tmp_path):
    from tests.conftest import run_config

    overrides = [
        *LOSS_RUNS[objective],
        f"++trainer.precision={precision}",
        "trainer.accelerator=gpu",
        "trainer.devices=1",
        "trainer.max_epochs=1",
        "logger=csv",
    ]
    value = run_config(overrides, tmp_path / "run")
    assert 0.0 <= value <= 1.0
    assert (tmp_path / "run" / "test_metrics.json").is_file()


@pytest.mark.parametrize("name", LOSSES)
def test_training_step_makes_no_device_sync(name):
    """Forward, loss, backward and an Adam step of the default loss under sync debug "error":
    any ``.item()``, host read or blocking copy raises."""
    _, labels, mask, features = batch(torch.float32, n_features=16)
    features, labels, mask = features.cuda(), labels.cuda(), mask.cuda()
    ranker = LinearRanker(16).cuda()
    loss = LOSSES[name]().cuda()
    optimizer = torch.optim.Adam(ranker.parameters(), lr=0.01)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss(ranker.loss_target(features), labels, mask).backward()
        optimizer.step()

    run_without_sync(step)


CONE_OPTIONS = {"all pairs": {"max_pairs_per_query": None}, "64 pairs per query (default)": {}}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_cone_loss_on_cuda_equals_cpu(dtype):
    """CUDA takes the static path (all B·L² slot pairs, a fixed number of active-set
    iterations), the CPU the eager one: the same loss and gradients."""
    _, labels, mask, features = batch(dtype, n_features=16)
    basis = ConeRank(16, n_basis=10, seed=0).basis.detach().to(dtype)

    def value_and_grads(device):
        # detach: a leaf of its own per device (features.to("cpu") is features itself)
        leaf = features.detach().to(device).requires_grad_(True)
        base = basis.detach().to(device).requires_grad_(True)
        value = ConeLoss(max_pairs_per_query=None)(leaf, labels.to(device), mask.to(device), base)
        value.backward()
        return value.detach().cpu(), leaf.grad.cpu(), base.grad.cpu()

    cpu, cuda = value_and_grads("cpu"), value_and_grads("cuda")
    tolerance = 1e-9 if dtype == torch.float64 else 1e-3
    torch.testing.assert_close(cuda, cpu, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("options", CONE_OPTIONS.values(), ids=CONE_OPTIONS.keys())
def test_cone_training_step_makes_no_device_sync(options):
    """ConeRank's step (encode, loss, backward, SGD, the basis' norm constraint) under sync
    debug "error"."""
    _, labels, mask, features = batch(torch.float32, n_features=16)
    features, labels, mask = features.cuda(), labels.cuda(), mask.cuda()
    ranker = ConeRank(16, n_basis=10, seed=0).cuda()
    loss = ConeLoss(**options).cuda()
    optimizer = torch.optim.SGD(ranker.parameters(), lr=0.05)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss(ranker.loss_target(features), labels, mask, **ranker.loss_inputs()).backward()
        optimizer.step()
        ranker.constrain()

    run_without_sync(step)
