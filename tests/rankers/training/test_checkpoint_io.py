"""rankers/training/checkpoint_io.py: Lightning's checkpoint files are written whole or not at
all, by every trainer the config builds."""

from __future__ import annotations

import os

import pytest
import torch
from hydra.utils import instantiate

from differank.rankers.run.runs import compose_config
from differank.rankers.training import checkpoint_io
from differank.rankers.training.checkpoint_io import AtomicCheckpointIO


def test_whole_or_absent_a_checkpoint_save_that_fails_midway_keeps_the_old_file(
    tmp_path, monkeypatch
):
    path = tmp_path / "checkpoints" / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"epoch": 1, "state_dict": {}}, path)
    before = path.read_bytes()

    def half_then_full_disk(checkpoint, file):
        file.write(b"PK\x03\x04 half a checkpoint")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint_io.torch, "save", half_then_full_disk)
    with pytest.raises(OSError, match="No space"):
        AtomicCheckpointIO().save_checkpoint({"epoch": 2, "state_dict": {}}, path)
    assert path.read_bytes() == before
    assert os.listdir(path.parent) == ["last.ckpt"]  # no temporary file left
    assert torch.load(path, weights_only=True)["epoch"] == 1


def test_whole_or_absent_a_checkpoint_is_saved_with_the_umask_mode(tmp_path):
    path = tmp_path / "best.ckpt"
    AtomicCheckpointIO().save_checkpoint({"state_dict": {"w": torch.ones(2)}}, path)
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask
    assert torch.equal(torch.load(path, weights_only=True)["state_dict"]["w"], torch.ones(2))


@pytest.mark.parametrize("trainer", ["default", "ddp"])
def test_whole_or_absent_every_configured_trainer_saves_checkpoints_atomically(trainer, tmp_path):
    cfg = compose_config([f"trainer={trainer}", "trainer.accelerator=cpu"], run_dir=tmp_path)
    built = instantiate(cfg.trainer, logger=False, enable_progress_bar=False)
    assert isinstance(built.strategy.checkpoint_io, AtomicCheckpointIO)
