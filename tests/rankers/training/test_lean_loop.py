"""The lean training epoch loop (differank.rankers.training.lean_loop) against Lightning's own:
the same hooks in the same order, the same weights bit for bit, the same progress counters,
logged metrics and learning rates; runs it cannot serve go through Lightning's loop."""

from functools import partial

import pytest
import pytorch_lightning as pl
import torch

from differank.datamodules.synthetic import SyntheticLetorDataModule
from differank.losses.domination import DominationLoss
from differank.rankers.scorers.linear import LinearRanker
from differank.rankers.training.lean_loop import LeanEpochLoop, install_lean_loop
from differank.rankers.training.module import RankingModule, warmup_cosine

# Lightning's note that the recording module's batch hooks win over the datamodule's.
pytestmark = pytest.mark.filterwarnings("ignore:You have overridden `on_:UserWarning")

# Every hook a callback can have (Lightning's list, not the lean loop's): whatever either loop
# calls, in whatever order, is recorded.
CALLBACK_HOOKS = [name for name in dir(pl.Callback) if name.startswith("on_")]


class Recorder(pl.Callback):
    """Every callback hook, with its step and what it can see."""

    def __init__(self, calls: list):
        self.calls = calls

    def __getattribute__(self, name):
        if name in CALLBACK_HOOKS:
            calls = object.__getattribute__(self, "calls")

            def record(trainer, module, *args):
                calls.append(("callback", name, trainer.global_step, module._current_fx_name))

            return record
        return object.__getattribute__(self, name)


for _hook in CALLBACK_HOOKS:  # overridden, so that the lean loop calls them
    setattr(Recorder, _hook, lambda self, *args: None)


class RecordingModule(RankingModule):
    """RankingModule whose per-step hooks are recorded and whose training step logs per step."""

    calls: list

    def training_step(self, batch, batch_idx):
        self.calls.append(("module", "training_step", self.global_step, self._current_fx_name))
        loss = super().training_step(batch, batch_idx)
        self.log("train/step_loss", loss, on_step=True, on_epoch=True, batch_size=8)
        return loss

    def on_before_batch_transfer(self, batch, dataloader_idx):
        if self.trainer.training:
            self.calls.append(("module", "on_before_batch_transfer", self._current_fx_name, None))
        return batch

    def on_after_batch_transfer(self, batch, dataloader_idx):
        if self.trainer.training:
            self.calls.append(("module", "on_after_batch_transfer", self._current_fx_name, None))
        return batch

    def on_before_zero_grad(self, optimizer):
        self.calls.append(("module", "on_before_zero_grad", self.global_step, None))

    def on_before_backward(self, loss):
        self.calls.append(("module", "on_before_backward", self.global_step, None))

    def on_after_backward(self):
        self.calls.append(("module", "on_after_backward", self.global_step, None))

    def on_train_batch_end(self, outputs, batch, batch_idx):
        loss = float(outputs["loss"])
        self.calls.append(("module", "on_train_batch_end", batch_idx, round(loss, 6)))


class RecordingData(SyntheticLetorDataModule):
    """The datamodule's own batch hook: Lightning calls it instead of the module's."""

    calls: list

    def on_after_batch_transfer(self, batch, dataloader_idx):
        if self.trainer.training:
            self.calls.append(("datamodule", "on_after_batch_transfer", batch["mask"].shape))
        return batch


def fit(
    tmp_path,
    lean: bool,
    module_class=RecordingModule,
    ckpt_path=None,
    data_class=SyntheticLetorDataModule,
    **trainer_options,
):
    calls: list = []
    torch.manual_seed(0)
    module = module_class(
        LinearRanker,
        DominationLoss(),
        partial(torch.optim.Adam, lr=0.05),
        n_features=46,
        scheduler=partial(warmup_cosine, warmup_fraction=0.2),
    )
    module.calls = calls
    data = data_class(
        n_train_queries=40,
        n_val_queries=10,
        n_test_queries=10,
        batch_size=8,
        root=tmp_path / "data",
        seed=3,
    )
    data.calls = calls
    options = dict(
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        num_sanity_val_steps=0,
        default_root_dir=tmp_path,
        callbacks=[Recorder(calls)],
    )
    trainer = pl.Trainer(**{**options, **trainer_options})
    loop = install_lean_loop(trainer) if lean else None
    trainer.fit(module, datamodule=data, ckpt_path=ckpt_path)
    return trainer, module, calls, loop


def outcome(trainer, module):
    return {
        "weights": [p.detach().clone() for p in module.parameters()],
        "progress": trainer.fit_loop.state_dict(),
        "global_step": trainer.global_step,
        "metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
        "lr": trainer.optimizers[0].param_groups[0]["lr"],
    }


def assert_same(a, b):
    assert all(torch.equal(x, y) for x, y in zip(a["weights"], b["weights"], strict=True))
    assert a["progress"] == b["progress"]
    assert a["global_step"] == b["global_step"]
    assert a["metrics"] == b["metrics"]
    assert a["lr"] == b["lr"]


def test_the_lean_loop_runs_lightnings_hooks_in_order_with_the_same_results(tmp_path):
    lightning, lightning_module, lightning_calls, _ = fit(tmp_path, lean=False)
    lean, lean_module, lean_calls, loop = fit(tmp_path, lean=True)
    assert isinstance(lean.fit_loop.epoch_loop, LeanEpochLoop) and loop.refusal is None
    assert lean_calls == lightning_calls
    assert len(lean_calls) > 10 * 5  # every step's hooks were recorded
    assert_same(outcome(lean, lean_module), outcome(lightning, lightning_module))
    assert "train/step_loss_step" in lean.callback_metrics  # logged from training_step


def test_a_datamodules_batch_hook_is_called_in_place_of_the_modules(tmp_path):
    lightning, lightning_module, lightning_calls, _ = fit(tmp_path, False, data_class=RecordingData)
    lean, lean_module, lean_calls, loop = fit(tmp_path, True, data_class=RecordingData)
    assert loop.refusal is None and lean_calls == lightning_calls
    assert any(call[0] == "datamodule" for call in lean_calls)
    assert not any(
        call[1] == "on_after_batch_transfer" for call in lean_calls if call[0] == "module"
    )
    assert_same(outcome(lean, lean_module), outcome(lightning, lightning_module))


def test_gradient_clipping_gives_lightnings_weights(tmp_path):
    clipped = {"gradient_clip_val": 1e-3}
    lightning, lightning_module, _, _ = fit(tmp_path, lean=False, **clipped)
    lean, lean_module, _, loop = fit(tmp_path, lean=True, **clipped)
    assert loop.refusal is None
    assert_same(outcome(lean, lean_module), outcome(lightning, lightning_module))
    unclipped, unclipped_module, _, _ = fit(tmp_path, lean=True)
    assert not torch.equal(
        next(unclipped_module.parameters()), next(lean_module.parameters())
    )  # the clipping took effect


def test_runs_the_lean_path_cannot_serve_go_through_lightnings_loop(tmp_path):
    accumulate = {"accumulate_grad_batches": 2}
    lightning, lightning_module, lightning_calls, _ = fit(tmp_path, lean=False, **accumulate)
    lean, lean_module, lean_calls, loop = fit(tmp_path, lean=True, **accumulate)
    assert loop.refusal == "gradient accumulation"
    assert lean_calls == lightning_calls
    assert_same(outcome(lean, lean_module), outcome(lightning, lightning_module))


@pytest.mark.parametrize(
    "options, refusal",
    [
        ({"profiler": "simple"}, "a profiler"),
        ({"precision": "bf16-mixed"}, None),
    ],
)
def test_the_refusals_name_what_is_in_the_way(tmp_path, options, refusal):
    _, _, _, loop = fit(tmp_path, lean=True, max_epochs=1, **options)
    assert loop.refusal == refusal


def test_a_module_that_can_skip_the_epoch_goes_through_lightnings_loop(tmp_path):
    class Skipping(RecordingModule):
        def on_train_batch_start(self, batch, batch_idx):
            return -1 if batch_idx == 1 else None

    lightning, lightning_module, lightning_calls, _ = fit(tmp_path, False, Skipping)
    lean, lean_module, lean_calls, loop = fit(tmp_path, True, Skipping)
    assert loop.refusal == "the module overrides on_train_batch_start"
    assert lean_calls == lightning_calls
    assert_same(outcome(lean, lean_module), outcome(lightning, lightning_module))


def test_resuming_mid_epoch_continues_as_lightning_does(tmp_path):
    """A checkpoint written in the middle of an epoch resumes to the same hooks, weights and
    progress with either loop (the first batch after the restart takes Lightning's advance)."""
    checkpoint = pl.callbacks.ModelCheckpoint(
        dirpath=tmp_path / "ckpt", every_n_train_steps=3, save_top_k=-1
    )
    fit(tmp_path, lean=True, enable_checkpointing=True, max_epochs=1, callbacks=[checkpoint])
    path = tmp_path / "ckpt" / "epoch=0-step=3.ckpt"
    assert path.is_file()
    runs = {lean: fit(tmp_path, lean=lean, ckpt_path=path) for lean in (False, True)}
    (lightning, lightning_module, lightning_calls, _), (lean, lean_module, lean_calls, _) = (
        runs[False],
        runs[True],
    )
    first_step = next(call for call in lean_calls if call[1] == "training_step")
    assert lean_calls == lightning_calls and first_step[2] == 3  # resumed at step 3
    assert_same(outcome(lean, lean_module), outcome(lightning, lightning_module))
