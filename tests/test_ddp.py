"""DDP: the LETOR loaders shard queries so evaluation sees every query exactly once and training
ranks step in lockstep; a 2-process CPU (gloo) run trains, and its evaluation of a checkpoint
equals a single process's exactly."""

import json
import subprocess
import sys

import numpy as np
import pytest
from lightning_fabric.utilities.data import _set_sampler_epoch
from torch.utils.data import DataLoader

from differank.datamodules.query_batches import QueryBatchSampler, ShardedQueryBatchSampler
from differank.rankers.run.runs import compose_config
from tests.conftest import ROOT, run_config

LENGTHS = np.random.default_rng(0).integers(1, 60, size=23)
TINY = [
    "data.n_train_queries=40",
    "data.n_val_queries=20",
    "data.n_test_queries=21",
    "data.batch_size=8",
    "data.eval_batch_size=4",
    "trainer.max_epochs=4",
    "logger=csv",
]


def shares(world_size, shuffle, epoch=0, **options):
    batches = []
    for rank in range(world_size):
        sampler = ShardedQueryBatchSampler(
            LENGTHS, 4, rank=rank, world_size=world_size, shuffle=shuffle, seed=3, **options
        )
        sampler.set_epoch(epoch)
        batches.append(list(sampler))
        assert len(batches[-1]) == len(sampler)
    return batches


@pytest.mark.parametrize("world_size", [2, 3, 5])
def test_evaluation_shards_cover_every_query_exactly_once(world_size):
    batches = shares(world_size, shuffle=False)
    served = sorted(i for rank in batches for batch in rank for i in batch)
    assert served == list(range(len(LENGTHS)))
    sizes = [sum(map(len, rank)) for rank in batches]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("world_size", [2, 3])
def test_training_shards_step_in_lockstep_and_reshuffle_per_epoch(world_size):
    epoch0, epoch1 = shares(world_size, shuffle=True), shares(world_size, shuffle=True, epoch=1)
    assert len({len(rank) for rank in epoch0}) == 1  # same number of batches on every rank
    served = [i for rank in epoch0 for batch in rank for i in batch]
    assert set(served) == set(range(len(LENGTHS)))  # padding repeats, never drops
    assert len(served) == -(-len(LENGTHS) // world_size) * world_size
    assert epoch0 != epoch1 and epoch0 == shares(world_size, shuffle=True)


@pytest.mark.parametrize("shuffle", [True, False])
def test_one_process_is_exactly_the_query_batch_sampler(shuffle):
    for epoch in (0, 4):
        reference = QueryBatchSampler(LENGTHS, 4, shuffle=shuffle, seed=3, draw_seeds=shuffle)
        reference.set_epoch(epoch)
        mine = ShardedQueryBatchSampler(
            LENGTHS, 4, rank=0, world_size=1, shuffle=shuffle, seed=3, draw_seeds=shuffle
        )
        mine.set_epoch(epoch)
        assert list(mine) == list(reference) and len(mine) == len(reference)


def test_lightning_sets_the_epoch_of_the_batch_sampler():
    sampler = ShardedQueryBatchSampler(LENGTHS, 4, rank=0, world_size=1, shuffle=True)
    _set_sampler_epoch(DataLoader(range(len(LENGTHS)), batch_sampler=sampler), 7)
    assert sampler.epoch == 7  # what makes a resumed run draw the uninterrupted run's batches


def test_fewer_queries_than_processes_is_refused():
    with pytest.raises(ValueError, match="cannot be shared by 3 processes"):
        ShardedQueryBatchSampler([5, 6], 4, rank=0, world_size=3, shuffle=False)


@pytest.fixture(scope="module")
def single_process_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("single")
    value = run_config(TINY, run_dir)
    return run_dir, value


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    """Two gloo processes on CPU: fit, then test the best checkpoint (sharded, gathered)."""
    run_dir = tmp_path_factory.mktemp("ddp")
    command = [
        sys.executable,
        "train.py",
        *TINY,
        f"hydra.run.dir={run_dir}",
        "trainer=ddp",
        "trainer.devices=2",
        "trainer.accelerator=cpu",
    ]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (run_dir / "train_ddp_process_1.log").is_file()  # a second rank really ran
    return run_dir


@pytest.mark.slow  # two gloo processes training for real
def test_ddp_evaluation_equals_single_process_exactly(ddp_run, tmp_path):
    best = ddp_run / "checkpoints" / "best.ckpt"
    run_config([*TINY, "task=test", f"ckpt_path={best}"], tmp_path)
    for name in ("test_metrics.json", "predictions/test.txt", "predictions/test.run"):
        assert (ddp_run / name).read_bytes() == (tmp_path / name).read_bytes(), name


@pytest.mark.slow  # two gloo processes training for real
def test_ddp_training_lands_near_single_process(ddp_run, single_process_run):
    single_dir, _ = single_process_run
    ddp = json.loads((ddp_run / "test_metrics.json").read_text())
    single = json.loads((single_dir / "test_metrics.json").read_text())
    # Two ranks average gradients of two batches per step: a different (not worse) trajectory.
    assert ddp["map"] == pytest.approx(single["map"], abs=0.1)
    assert ddp["map"] > 0.5  # learnt the planted signal (random ranking ≈ 0.4)


def test_local_ddp_inside_a_sweep_is_refused_before_it_starts(tmp_path):
    overrides = [*TINY, "trainer=ddp", "trainer.devices=2", "trainer.accelerator=cpu"]
    from differank.rankers.run.tasks import run_task

    cfg = compose_config(overrides, run_dir=tmp_path)
    with pytest.raises(ValueError, match="hydra/launcher=slurm_gpu"):
        run_task(cfg, tmp_path, overrides=overrides, multirun=True)
