"""Compiling the losses, beyond the contract every loss keeps (tests/losses/test_loss_contract.py:
fullgraph compile with aot_eager and inductor, no host read on the static path): the hinge's
static path marks queries over ``num_levels``, and the throughput benchmark compares compiled and
eager."""

from __future__ import annotations

import torch

from differank.losses import structured_hinge_loss


def test_hinge_static_path_marks_queries_over_num_levels_nan(monkeypatch):
    """The path compiled or accelerator runs take (the host-read rule answers no), eagerly."""
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(3, 6, generator=g, dtype=torch.float64)
    labels = torch.tensor([[2.0, 0, 1, 0, 0, 1], [0, 1, 2, 3, 4, 5], [1, 0, 0, 2, 2, 0]])
    mask = torch.ones(3, 6, dtype=torch.bool)  # query 1: 6 distinct labels, over num_levels=5
    mask[2, 4:] = False
    scores = scores.masked_fill(~mask, float("nan"))
    monkeypatch.setattr(
        "differank.losses.algorithms.ndcg_assignment.may_read_values", lambda tensor: False
    )
    value = structured_hinge_loss(scores, labels, mask, reduction="none")
    monkeypatch.undo()
    keep = torch.tensor([True, False, True])
    eager = structured_hinge_loss(scores[keep], labels[keep], mask[keep], reduction="none")
    assert torch.isnan(value[1])
    torch.testing.assert_close(value[keep], eager, rtol=1e-12, atol=1e-12)


def test_throughput_benchmark_compares_compiled_and_eager(tmp_path):
    import throughput  # benchmarks/ is on the path (tests/conftest.py)

    out = tmp_path / "compile.md"
    throughput.main(
        [
            "--tiny",
            "--compile",
            "--compile-backend",
            "aot_eager",
            "--no-epoch",
            "--losses",
            "listnet",
            "--out",
            str(out),
        ]
    )
    text = out.read_text()
    assert "| loss | L | eager ms | compiled ms | eager / compiled |" in text
    assert "| listnet | 8 |" in text and "| listnet | 16 |" in text
