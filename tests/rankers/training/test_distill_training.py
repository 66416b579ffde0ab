"""A distilled run trains on the teacher's scores of every query: RankingModule's training step
(with and without query weights) gives a query whose labels are all equal its distillation
gradient, and the run keeps such queries in the data."""

from __future__ import annotations

import logging

import torch
from omegaconf import OmegaConf

from differank.losses.distill import DistillLoss
from differank.losses.listnet import ListNetLoss
from differank.rankers.run.teacher_scores import TeacherScores
from differank.rankers.run.trainer_tasks import distilled_data
from differank.rankers.scorers.linear import LinearRanker
from differank.rankers.training.module import RankingModule


def distilled_module(**loss_options) -> RankingModule:
    module = RankingModule(
        LinearRanker,
        DistillLoss(**loss_options),
        lambda params: torch.optim.SGD(params, lr=0.1),
        n_features=3,
    )
    with torch.no_grad():
        module.ranker.linear.weight.copy_(torch.tensor([[0.7, -1.3, 0.4]], dtype=torch.float64))
    g = torch.Generator().manual_seed(3)
    module.teacher = TeacherScores(train=torch.randn(8, generator=g), val=torch.zeros(1))
    return module.double()


def batch(labels: list[list[float]]) -> dict[str, torch.Tensor]:
    """Two queries of four documents, rows 0..7 of the training split."""
    g = torch.Generator().manual_seed(1)
    return {
        "features": torch.randn(2, 4, 3, generator=g, dtype=torch.float64),
        "labels": torch.tensor(labels, dtype=torch.float64),
        "mask": torch.ones(2, 4, dtype=torch.bool),
        "qid": torch.arange(2),
        "doc_index": torch.arange(8).view(2, 4),
    }


def step(module: RankingModule, data: dict[str, torch.Tensor]):
    module.zero_grad()
    loss = module.training_step(data, 0)
    loss.backward()
    return loss.detach(), module.ranker.linear.weight.grad.clone()


def test_a_batch_of_equal_labels_trains_the_student():
    module = distilled_module(alpha=0.5, label_loss=ListNetLoss(reduction="none"))
    module.train()
    loss, grad = step(module, batch([[1.0] * 4, [0.0] * 4]))
    assert loss > 0 and grad.abs().sum() > 1e-3


def test_query_weights_count_the_equal_label_queries():
    """All-ones weights train exactly as no weights, and weight 0 on the query of equal labels
    changes the step: its distillation term is counted."""
    module = distilled_module()
    module.train()
    data = batch([[2.0, 0.0, 1.0, 0.0], [1.0] * 4])
    plain = step(module, data)
    ones = step(module, {**data, "weights": torch.ones(2, dtype=torch.float64)})
    torch.testing.assert_close(ones, plain, rtol=1e-12, atol=1e-15)
    first_only = step(module, {**data, "weights": torch.tensor([1.0, 0.0], dtype=torch.float64)})
    assert not torch.allclose(first_only[1], plain[1])


def test_a_distilled_run_keeps_the_queries_without_pairs(caplog):
    data = {"_target_": "x", "drop_train_queries_without_pairs": True}
    distilled = OmegaConf.create({"data": data, "teacher": {"path": "t.ckpt"}})
    with caplog.at_level(logging.WARNING):
        assert distilled_data(distilled) == {"drop_train_queries_without_pairs": False}
    assert "kept for distillation" in caplog.text
    assert distilled_data(OmegaConf.create({"data": data, "teacher": None})) == {}
    kept = {**data, "drop_train_queries_without_pairs": False}
    assert distilled_data(OmegaConf.create({"data": kept, "teacher": {"path": "t"}})) == {}
