"""The helpers of the one input rule (``losses/inputs.py``), and every objective trains with
bf16-mixed. The rule itself (empty shapes, integer and bool labels, non-finite labels and scores,
half precision) is checked for every loss by tests/losses/test_loss_contract.py."""

from __future__ import annotations

import pytest
import torch

from differank.losses import structured_hinge_loss
from differank.losses.inputs import compute_dtype, finite_label_mask, may_read_values
from tests.conftest import LOSS_RUNS, run_config


def test_helpers():
    assert compute_dtype(torch.bfloat16) == compute_dtype(torch.float16) == torch.float32
    assert compute_dtype(torch.float64) == torch.float64
    assert may_read_values(torch.zeros(1)) and not may_read_values(torch.zeros(1, device="meta"))
    labels = torch.tensor([[0.0, float("nan")], [1.0, 0.0]])
    mask = torch.tensor([[True, False], [True, True]])
    kept, valid = finite_label_mask(labels, mask)
    assert torch.equal(kept, mask)  # NaN only at padding
    assert valid.tolist() == [False, True]  # one real document; two distinct grades


def test_hinge_more_label_levels_than_num_levels_is_an_error_on_cpu():
    scores = torch.zeros(1, 3)
    labels = torch.tensor([[2.0, 1.0, 0.0]])  # three levels
    mask = torch.ones(1, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="num_levels=2"):
        structured_hinge_loss(scores, labels, mask, num_levels=2)
    with pytest.raises(ValueError, match="num_levels"):
        structured_hinge_loss(scores, labels, mask, num_levels=0)


@pytest.mark.parametrize("objective", sorted(LOSS_RUNS))
def test_every_objective_trains_with_bf16_mixed(objective, tmp_path):
    overrides = [
        *LOSS_RUNS[objective],
        "++trainer.precision=bf16-mixed",
        "trainer.fast_dev_run=true",
        "logger=csv",
        "callbacks=none",
    ]
    value = run_config(overrides, tmp_path / "run")
    assert 0.0 <= value <= 1.0
