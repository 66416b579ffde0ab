"""rankers/training/guards.py: a validation split that cannot select an epoch is announced
before training (and what the monitor will do is what it does); a non-finite loss or weight
stops the run at once, naming epoch, step and learning rate, with the saved checkpoints kept."""

import logging
import math
import re
from types import SimpleNamespace

import pytest
import pytorch_lightning as pl
import torch

from differank.datamodules.reader import write_letor
from differank.rankers.training.guards import (
    FiniteGuard,
    NonFiniteRunError,
    validation_signal_problem,
)
from tests.conftest import TINY_DATA, TINY_RUN, run_config


def letor_fold(root, vali_labels):
    """A small fold whose validation labels are ``vali_labels`` (4 queries of 4 documents)."""
    generator = torch.Generator().manual_seed(0)
    for name in ("train", "vali", "test"):
        features = torch.rand(16, 3, generator=generator).numpy()
        qids = [q for q in range(4) for _ in range(4)]
        labels = vali_labels if name == "vali" else [0, 1, 2, 1] * 4
        write_letor(root / "Fold1" / f"{name}.txt", features, labels, qids)
    return root


def run(tmp_path, overrides, data=TINY_DATA):
    settings = [*data, *TINY_RUN[len(TINY_DATA) :], "quiet=true", *overrides]
    return run_config(settings, tmp_path / "run")


@pytest.mark.parametrize(
    "vali_labels, problem",
    [
        ([0] * 16, r"has no relevant document \(every label is 0\): val/map is 0 at every epoch"),
        ([1] * 8 + [0] * 8, "has no preference pair .* val/map is the same at every epoch"),
    ],
)
def test_a_validation_split_that_cannot_select_is_announced_and_does_what_it_says(
    tmp_path, caplog, vali_labels, problem
):
    root = letor_fold(tmp_path / "data", vali_labels)
    overrides = ["data=letor", f"data.root={root}", "trainer.max_epochs=3"]
    with caplog.at_level(logging.WARNING, logger="differank.rankers.training.guards"):
        run(tmp_path, overrides, data=[])
    warnings = [r.getMessage() for r in caplog.records if r.name.endswith("guards")]
    assert len(warnings) == 1 and re.search(problem, warnings[0]), warnings
    assert "vali.txt" in warnings[0] and "best checkpoint stays at epoch 0" in warnings[0]
    best = torch.load(tmp_path / "run" / "checkpoints" / "best.ckpt", weights_only=True)
    assert best["epoch"] == 0  # as announced


def test_a_validation_split_with_signal_is_not_announced():
    class Split:
        labels = torch.tensor([0.0, 1.0, 1.0, 1.0])
        query_rows = [torch.tensor([0, 1]), torch.tensor([2, 3])]

    assert validation_signal_problem(Split, "val/map") is None


def test_a_learning_rate_of_1e30_stops_at_the_first_nan_loss_naming_epoch_step_and_lr(tmp_path):
    overrides = ["model=mlp", "loss=listnet", "model.optimizer.lr=1e30"]
    with pytest.raises(NonFiniteRunError) as stopped:
        run(tmp_path, overrides)
    message = str(stopped.value)
    assert "the training loss is nan at epoch 0, step " in message
    assert "learning rate 1e+30" in message and "lower model.optimizer.lr (now 1e+30)" in message
    assert "no checkpoint had been saved yet" in message


class PoisonWeights(pl.Callback):
    """Sets every weight to NaN at the end of epoch ``epoch``'s training batches (test only)."""

    def __init__(self, epoch: int = 1, then: str = "validate"):
        self.epoch, self.then = epoch, then

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        last = batch_idx == trainer.num_training_batches - 1
        if trainer.current_epoch == self.epoch and (last or self.then == "train"):
            with torch.no_grad():
                for parameter in pl_module.parameters():
                    parameter.fill_(math.nan)


@pytest.mark.parametrize(
    "then, what",
    [("validate", "weight .* is not finite, so validation scores"), ("train", "training loss")],
)
def test_weights_gone_non_finite_stop_the_run_and_keep_the_finite_checkpoints(tmp_path, then, what):
    poison = [
        "+callbacks.poison._target_=tests.rankers.training.test_guards.PoisonWeights",
        f"+callbacks.poison.then={then}",
        "trainer.max_epochs=3",
    ]
    with pytest.raises(NonFiniteRunError, match=f"{what}.* at epoch 1, step") as stopped:
        run(tmp_path, poison)
    assert "checkpoints saved so far are kept unchanged" in str(stopped.value)
    for name in ("best.ckpt", "last.ckpt"):
        checkpoint = torch.load(tmp_path / "run" / "checkpoints" / name, weights_only=True)
        assert checkpoint["epoch"] == 0
        assert all(torch.isfinite(v).all() for v in checkpoint["state_dict"].values())


def fake_trainer(all_processes_finite=None):
    """What FiniteGuard reads of a Trainer; ``all_processes_finite``: another process' answer."""

    def reduce_boolean_decision(finite, all):
        return finite if all_processes_finite is None else all_processes_finite

    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.5)
    strategy = SimpleNamespace(reduce_boolean_decision=reduce_boolean_decision)
    return SimpleNamespace(
        global_step=0,
        current_epoch=2,
        strategy=strategy,
        optimizers=[optimizer],
        checkpoint_callbacks=[],
        sanity_checking=False,
        callback_metrics={},
    )


def feed(guard, trainer, losses):
    for value in losses:
        guard.on_before_backward(trainer, None, torch.tensor(value))
        trainer.global_step += 1


def test_finite_guard_reads_the_losses_every_n_steps_and_names_the_step_of_the_first_bad_one():
    guard, trainer = FiniteGuard(check_every_n_steps=3), fake_trainer()
    feed(guard, trainer, [1.0, math.nan])  # kept on the device: not read yet
    found = r"\(found at step 2: the losses are read every 3 steps\)"
    with pytest.raises(NonFiniteRunError, match=rf"loss is nan at epoch 2, step 1 {found}"):
        feed(guard, trainer, [math.inf])  # the third loss: the buffer is read
    guard, trainer = FiniteGuard(check_every_n_steps=1), fake_trainer()
    feed(guard, trainer, [1.0])
    with pytest.raises(NonFiniteRunError, match=r"loss is inf at epoch 2, step 1 \(learning"):
        feed(guard, trainer, [math.inf])  # every loss read: found at its own step


@pytest.mark.parametrize("hook", ["on_train_epoch_end", "on_validation_start"])
def test_finite_guard_reads_the_unread_losses_at_an_epoch_end_and_before_a_validation(hook):
    guard, trainer = FiniteGuard(check_every_n_steps=50), fake_trainer()
    feed(guard, trainer, [1.0, 2.0])
    getattr(guard, hook)(trainer, torch.nn.Linear(2, 1))  # finite: the run goes on
    feed(guard, trainer, [3.0, -math.inf, 4.0])
    with pytest.raises(NonFiniteRunError, match="loss is -inf at epoch 2, step 3 .found at step 5"):
        getattr(guard, hook)(trainer, torch.nn.Linear(2, 1))


def test_finite_guard_stops_every_process_when_another_one_saw_a_bad_loss():
    guard, trainer = FiniteGuard(check_every_n_steps=2), fake_trainer(all_processes_finite=False)
    with pytest.raises(NonFiniteRunError, match="loss of steps 0-1 is finite here, not elsewhere"):
        feed(guard, trainer, [1.0, 2.0])


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "50"])
def test_finite_guard_refuses_a_check_interval_that_is_not_a_positive_integer(bad):
    with pytest.raises(ValueError, match="check_every_n_steps must be an integer >= 1"):
        FiniteGuard(check_every_n_steps=bad)
