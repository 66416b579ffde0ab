"""Device numerics on CPU proxies (issue #41): what tests/test_gpu.py checks on a CUDA device,
reproduced without one. ListMLE under 16-mixed precision is CPU autocast to float16 (the same
autocast rules cast the same ops to half); the ConvexLoss sampler's device independence is its
random draws made on a device without values (meta): every draw must still be the CPU stream's."""

from __future__ import annotations

import pytest
import torch

from differank.losses import ConvexLoss, ListMLELoss

LISTMLE_OPTIONS = {
    "ListMLE": {"ties": "index"},
    "p-ListMLE": {"ties": "index", "position_aware": True},
}


def padded_batch(dtype: torch.dtype, batch: int = 6, length: int = 40, seed: int = 0):
    """Labels 0..2 with a fifth of the slots padded (NaN scores there), scores in ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    scores = (3.0 * torch.randn(batch, length, generator=g)).to(dtype)
    labels = torch.randint(0, 3, (batch, length), generator=g).float()
    mask = torch.rand(batch, length, generator=g) < 0.8
    return scores.masked_fill(~mask, float("nan")), labels, mask


def value_and_grad(loss, scores, labels, mask, autocast_dtype=None):
    leaf = scores.detach().clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=autocast_dtype or torch.float16, enabled=bool(autocast_dtype)):
        value = loss(leaf, labels, mask)
    value.backward()
    return value.detach(), leaf.grad


@pytest.mark.parametrize("options", LISTMLE_OPTIONS.values(), ids=LISTMLE_OPTIONS.keys())
@pytest.mark.parametrize("autocast_dtype", [torch.float16, torch.bfloat16])
def test_device_numerics_listmle_is_finite_under_mixed_precision(options, autocast_dtype):
    """16-mixed: the ranker's scores are half and the loss runs under autocast, which casts
    ``linalg.vecdot`` to half; a padded slot's term (about finfo(float32).min / 2 in size) was
    inf there and its weight 0 made the loss NaN at step 0. It must be finite, in float32, and
    equal to the loss of the same half scores without autocast."""
    scores, labels, mask = padded_batch(torch.float16)
    loss = ListMLELoss(**options)
    mixed = value_and_grad(loss, scores, labels, mask, autocast_dtype)
    plain = value_and_grad(loss, scores, labels, mask)
    assert mixed[0].dtype == torch.float32 and torch.isfinite(mixed[0])
    assert torch.isfinite(mixed[1][mask]).all() and (mixed[1][~mask] == 0).all()
    torch.testing.assert_close(mixed, plain)


def recorded_draws(monkeypatch) -> list[torch.Tensor]:
    """Every tensor ``torch.rand`` and ``torch.randint`` return from here on, in call order."""
    draws: list[torch.Tensor] = []

    def recording(draw):
        def drawing(*args, **kwargs):
            draws.append(draw(*args, **kwargs))
            return draws[-1]

        return drawing

    monkeypatch.setattr(torch, "rand", recording(torch.rand))
    monkeypatch.setattr(torch, "randint", recording(torch.randint))
    return draws


def convex_draws(monkeypatch, device: str, seed: int | None) -> list[torch.Tensor]:
    """The random draws of one ConvexLoss forward on ``device``: seeded (``seed``, the module's
    own stream) or from the global RNG after ``torch.manual_seed(0)`` (``seed=None``)."""
    scores, labels, mask = padded_batch(torch.float32, batch=4, length=12)
    scores = scores.nan_to_num(0.0)
    torch.manual_seed(0)
    loss = ConvexLoss(seed=seed, num_samples=20)
    with monkeypatch.context() as patch:
        draws = recorded_draws(patch)
        loss(scores.to(device), labels.to(device), mask.to(device))
    return draws


DEVICES = ["meta"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", [0, None], ids=["seeded module", "global RNG"])
def test_device_numerics_convex_sampler_draws_the_cpu_stream_on_every_device(
    monkeypatch, device, seed
):
    """The sampler's random numbers on another device are those of the CPU path for the same
    seed: drawn on the CPU generator (or the CPU's global RNG) and moved, never from the
    device's own generator, whose stream differs (CUDA's Philox is not the CPU's Mersenne
    twister). Everything after the draws is arithmetic on the device, so on CUDA the rankings
    and the loss equal the CPU's (tests/test_gpu.py::test_loss_on_cuda_equals_cpu[convex])."""
    reference = convex_draws(monkeypatch, "cpu", seed)
    drawn = convex_draws(monkeypatch, device, seed)
    assert len(reference) >= 3  # pair proposals, acceptance uniforms, a restart's noise
    assert [d.device.type for d in drawn] == ["cpu"] * len(reference)
    for mine, expected in zip(drawn, reference, strict=True):
        assert torch.equal(mine, expected)
