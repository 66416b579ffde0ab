"""RankingModule / FullBatchModule glue: compatibility checks, penalties, constraints, outputs,
the run record in checkpoints, the progress bar's metrics and the console callback."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from differank.losses.ranknet import RankNetLoss
from differank.rankers.scorers.base import Ranker
from differank.rankers.scorers.linear import LinearRanker
from differank.rankers.training.callbacks import ProgressBar, RunConsole
from differank.rankers.training.module import (
    FullBatchModule,
    RankingModule,
    check_loss_fits_ranker,
)


class BasisRanker(Ranker):
    """A stand-in feature-space ranker that hands the loss a basis, like ConeRank."""

    radius = 1.0

    def __init__(self, n_features):
        super().__init__()
        self.n_features = n_features
        self.basis = nn.Parameter(torch.ones(n_features, 2))
        self.constrained = 0

    def forward(self, features):
        return features.sum(-1)

    def loss_target(self, features):
        return features

    def loss_inputs(self):
        return {"basis": self.basis}

    @torch.no_grad()
    def constrain(self):  # ConeRank's: each column back onto the ball ||u_k|| <= radius
        self.constrained += 1
        norms = self.basis.norm(dim=0, keepdim=True)
        self.basis.mul_((self.radius / norms.clamp(min=1e-30)).clamp(max=1.0))


class BasisLoss(nn.Module):
    def forward(self, features, labels, mask, basis):
        return (features @ basis).sum() * 0 + basis.square().sum()


def adam(params):
    return torch.optim.Adam(params, lr=0.1)


def test_incompatible_pairs_name_the_fix():
    with pytest.raises(ValueError, match="does not take \\['basis'\\].*model=conerank"):
        check_loss_fits_ranker(BasisRanker(3), RankNetLoss())
    with pytest.raises(ValueError, match="needs \\['basis'\\].*pair with"):
        check_loss_fits_ranker(LinearRanker(3), BasisLoss())
    check_loss_fits_ranker(BasisRanker(3), BasisLoss())
    check_loss_fits_ranker(LinearRanker(3), RankNetLoss())


def batch(b=2, l=4, f=3):
    g = torch.Generator().manual_seed(0)
    return {
        "features": torch.randn(b, l, f, generator=g),
        "labels": torch.tensor([[2.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]),
        "mask": torch.tensor([[True] * 4, [True, True, True, False]]),
        "qid": torch.tensor([1, 2]),
        "doc_index": torch.tensor([[0, 1, 2, 3], [4, 5, 6, -1]]),
    }


def test_penalty_is_l1_plus_l2_on_weights_only():
    module = RankingModule(LinearRanker, RankNetLoss(), adam, n_features=3, l1=0.5, l2=2.0)
    with torch.no_grad():
        module.ranker.linear.weight.copy_(torch.tensor([[1.0, -2.0, 3.0]]))
        module.ranker.linear.bias.fill_(100.0)
    assert module.penalty().item() == pytest.approx(0.5 * 6 + 2.0 * 14)
    with pytest.raises(ValueError, match="l1 and l2"):
        RankingModule(LinearRanker, RankNetLoss(), adam, n_features=3, l1=-1.0)


def test_training_step_and_constraint_hook():
    # training_step: the batch's loss plus the weight penalty
    linear = RankingModule(LinearRanker, RankNetLoss(), adam, n_features=3, l2=2.0)
    with torch.no_grad():
        linear.ranker.linear.weight.copy_(torch.tensor([[1.0, -2.0, 3.0]]))
    penalty = linear.penalty()
    assert penalty.item() == pytest.approx(2.0 * 14)
    assert linear.training_step(batch(), 0).item() == pytest.approx(
        (linear.batch_loss(batch()) + penalty).item()
    )
    # optimizer_step: the optimizer's step on training_step's loss, then the ranker's constraint
    module = RankingModule(BasisRanker, BasisLoss(), adam, n_features=3)
    with torch.no_grad():
        module.ranker.basis[:, 1] = 0.3  # column norms sqrt(3) (outside the ball), 0.3·sqrt(3)
    assert module.training_step(batch(), 0).item() == pytest.approx(3 * (1 + 0.09))  # Σ u²
    optimizer = module.configure_optimizers()
    assert isinstance(optimizer, torch.optim.Adam)

    def closure():
        optimizer.zero_grad()
        loss = module.training_step(batch(), 0)
        loss.backward()
        return loss

    module.optimizer_step(0, 0, optimizer, closure)
    # Adam's first step moves every entry by lr 0.1 towards 0: the first column (1 -> 0.9, norm
    # 0.9·sqrt(3) > 1) is projected back onto the unit ball, the second (0.3 -> 0.2) is inside
    assert module.ranker.constrained == 1
    expected = torch.tensor([[3**-0.5, 0.2]]).expand(3, 2)
    torch.testing.assert_close(module.ranker.basis.detach(), expected)
    assert module.ranker.basis.norm(dim=0).tolist() == pytest.approx([1.0, 0.2 * 3**0.5])


def test_train_loss_is_logged_once_per_epoch_as_the_query_weighted_mean(monkeypatch):
    """No ``self.log`` per step (Lightning's bookkeeping cost more than the batch's gather):
    the steps sum ``queries x loss`` on the device and the epoch's end logs the weighted mean,
    the value a per-step ``self.log(on_epoch=True, batch_size=B)`` gave."""
    module = RankingModule(LinearRanker, RankNetLoss(), adam, n_features=3, l2=1.0)
    logged = []
    monkeypatch.setattr(module, "log", lambda name, value, **kw: logged.append((name, value, kw)))
    one_query = {key: value[:1] for key, value in batch().items()}
    losses = [module.batch_loss(b).item() for b in (batch(), one_query)]
    module.on_train_epoch_start()
    for b in (batch(), one_query):
        module.training_step(b, 0)
    assert logged == []
    module.on_train_epoch_end()
    ((name, value, options),) = logged
    assert name == "train/loss" and options["batch_size"] == 3
    assert value.item() == pytest.approx((2 * losses[0] + losses[1]) / 3)  # no penalty in it
    assert options["sync_dist"] and options["prog_bar"]
    module.on_train_epoch_end()  # an epoch without steps logs nothing
    assert len(logged) == 1


def test_scores_by_row_requires_every_row_exactly_once():
    module = RankingModule(LinearRanker, RankNetLoss(), adam, n_features=3)
    module.test_rows = [torch.tensor([2, 0]), torch.tensor([1])]
    module.test_scores = [torch.tensor([0.2, 0.0]), torch.tensor([0.1])]
    assert module.scores_by_row(3).tolist() == pytest.approx([0.0, 0.1, 0.2])
    with pytest.raises(RuntimeError, match="1 rows without a score"):
        module.scores_by_row(4)
    module.test_rows.append(torch.tensor([1]))
    module.test_scores.append(torch.tensor([0.3]))
    with pytest.raises(RuntimeError, match="1 with several"):
        module.scores_by_row(3)


class CountingSolver:
    """A FullBatchSolver that moves the weights towards 1 and converges after three steps."""

    def __init__(self, n_features):
        self.ranker = LinearRanker(n_features)
        self.converged = False
        self.steps = 0

    def fit_step(self, features, labels, mask):
        self.steps += 1
        with torch.no_grad():
            self.ranker.linear.weight.add_(1.0)
        self.converged = self.steps == 3
        return {"steps": self.steps}


def test_full_batch_module_runs_one_solver_step_per_epoch(tmp_path):
    import pytorch_lightning as pl
    from torch.utils.data import DataLoader

    class Data(pl.LightningDataModule):
        def full_batch(self, split):
            return batch()

        def train_dataloader(self):
            return DataLoader([batch()] * 5, batch_size=None)

        def val_dataloader(self):
            return DataLoader([batch()], batch_size=None)

    class CountingValidation(pl.Callback):
        epochs = 0

        def on_validation_epoch_end(self, trainer, module):
            CountingValidation.epochs += 1

    module = FullBatchModule(CountingSolver, RankNetLoss(), n_features=3)
    checkpoint = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, monitor="val/map", mode="max")
    trainer = pl.Trainer(
        callbacks=[CountingValidation(), checkpoint],
        num_sanity_val_steps=0,
        max_epochs=10,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(module, datamodule=Data())
    assert module.solver.steps == 3  # stopped at convergence, one step per epoch
    assert CountingValidation.epochs == 3  # validated after every solver step
    assert trainer.global_step == 3 and checkpoint.best_model_path  # best epoch checkpointed
    assert module.ranker.linear.weight.tolist() == [[3.0, 3.0, 3.0]]
    assert "val/map" in trainer.callback_metrics


def test_progress_bar_shows_logged_metrics_without_the_logger_version(monkeypatch):
    import pytorch_lightning as pl

    monkeypatch.setattr(
        pl.callbacks.RichProgressBar,
        "get_metrics",
        lambda self, trainer, module: {"v_num": 3, "val/map": 0.5},
    )
    assert ProgressBar().get_metrics(None, None) == {"val/map": 0.5}


def test_progress_bar_redraws_the_training_bar_at_most_every_min_interval(monkeypatch):
    import pytorch_lightning as pl

    drawn = []
    monkeypatch.setattr(
        pl.callbacks.RichProgressBar,
        "on_train_batch_end",
        lambda self, trainer, module, outputs, batch, batch_idx: drawn.append(batch_idx),
    )
    trainer = SimpleNamespace(num_training_batches=5)
    for interval, expected in ((3600.0, [0, 4]), (0.0, [0, 1, 2, 3, 4])):
        drawn.clear()
        bar = ProgressBar(min_interval=interval)
        for batch_idx in range(5):
            bar.on_train_batch_end(trainer, None, None, None, batch_idx)
        assert drawn == expected  # the first batch, then the epoch's last (or every one)
    with pytest.raises(ValueError, match="min_interval must be >= 0"):
        ProgressBar(min_interval=-1)


def test_run_console_keeps_its_best_across_a_resume_and_checks_its_mode():
    console = RunConsole("val/map")
    console.best, console.best_epoch = 0.5, 3
    resumed = RunConsole("val/map")
    resumed.load_state_dict(console.state_dict())
    assert (resumed.best, resumed.best_epoch) == (0.5, 3)
    with pytest.raises(ValueError, match="mode must be"):
        RunConsole("val/map", mode="up")


def test_checkpoints_get_the_run_record_and_the_saved_epochs_validation(tmp_path):
    import pytorch_lightning as pl

    module = RankingModule(LinearRanker, RankNetLoss(), adam, n_features=3)
    module.run_record = {"config": {"seed": 0}}
    module.trainer = pl.Trainer(logger=False, enable_progress_bar=False, default_root_dir=tmp_path)
    module.trainer.callback_metrics.update({"val/map": torch.tensor(0.25), "train/loss": 1.0})
    checkpoint = {}
    module.on_save_checkpoint(checkpoint)
    assert checkpoint == {"differank": {"config": {"seed": 0}, "validation": {"val/map": 0.25}}}
