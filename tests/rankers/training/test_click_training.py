"""Training from clicks in the Lightning module: the estimator (config group ``ultr``) turns
click batches into the loss, its parameters train with the ranker and are saved, a checkpoint
rebuilds them (allowlisted), and the served scorer is the ranker alone; ``ultr`` without a
click model is refused with the fix."""

import copy

import pytest
import torch
from hydra.utils import instantiate

from differank.losses import SoftmaxLoss
from differank.losses.unbiased import DLA, ESTIMATORS, TwoTower
from differank.rankers.checkpoints import (
    UnsafeCheckpointError,
    rebuild_module,
    resolved,
    serving_scorer,
)
from differank.rankers.run.click_selection import estimator_config
from differank.rankers.run.runs import compose_config
from differank.rankers.run.trainer_tasks import build_run
from differank.rankers.scorers.linear import LinearRanker
from differank.rankers.training.module import RankingModule
from tests.conftest import MQ2008, ROOT, TINY_RUN, requires_mq2008

F = 7


def click_batch(seed=0, batch=4, length=5):
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(batch, length, dtype=torch.bool)
    mask[0, -1] = False
    positions = torch.arange(length).expand(batch, length).masked_fill(~mask, -1)
    clicks = (torch.rand(batch, length, generator=g) < 0.5).float().masked_fill(~mask, 0.0)
    clicks[:, 0] = 1.0
    return {
        "features": torch.randn(batch, length, F, generator=g),
        "mask": mask,
        "clicks": clicks,
        "positions": positions,
        "qid": torch.arange(batch),
        "doc_index": torch.arange(batch * length).view(batch, length),
    }


def module_with(estimator):
    return RankingModule(
        LinearRanker, SoftmaxLoss(), torch.optim.Adam, n_features=F, estimator=estimator
    )


def test_the_estimator_trains_with_the_ranker_on_click_batches():
    module = module_with(DLA(max_positions=5, lr_scale=50.0))
    optimizer = module.configure_optimizers()
    ranker_group, estimator_group = optimizer.param_groups
    assert estimator_group["params"] == [module.estimator.propensity_logits]
    assert {id(p) for p in ranker_group["params"]} == {id(p) for p in module.ranker.parameters()}
    assert estimator_group["lr"] == 50.0 * ranker_group["lr"]
    loss = module.training_step(click_batch(), 0)
    loss.backward()
    assert module.estimator.propensity_logits.grad.abs().sum() > 0
    assert all(p.grad is not None for p in module.ranker.parameters())
    want = module.estimator(
        SoftmaxLoss(),
        module(click_batch()["features"]),
        click_batch()["clicks"],
        click_batch()["positions"],
        click_batch()["mask"],
    )
    torch.testing.assert_close(loss, want)


def test_a_click_batch_without_an_estimator_names_the_fix():
    with pytest.raises(ValueError, match="ultr=naive"):
        module_with(None).training_step(click_batch(), 0)


def test_a_checkpoint_rebuilds_the_estimator_and_serves_the_ranker_alone(tmp_path):
    cfg = compose_config(TINY_RUN, run_dir=tmp_path)
    config = resolved(cfg)
    config["loss"] = {"_target_": "differank.losses.softmax.SoftmaxLoss", "reduction": "mean"}
    config["ultr"] = {
        "_target_": "differank.losses.unbiased.two_tower.TwoTower",
        "max_positions": 5,
    }
    module = RankingModule(
        lambda n_features: LinearRanker(n_features=n_features),
        SoftmaxLoss(),
        torch.optim.Adam,
        n_features=F,
        estimator=TwoTower(max_positions=5),
    )
    with torch.no_grad():
        module.estimator.position_bias.copy_(torch.tensor([0.5, 0.1, -0.2, -0.4, -0.9]))
    checkpoint = {
        "state_dict": module.state_dict(),
        "differank": {"config": config, "monitor": "val/map", "serving": {"n_features": F}},
    }
    assert "estimator.position_bias" in checkpoint["state_dict"]
    restored = rebuild_module(checkpoint, "best.ckpt")
    torch.testing.assert_close(restored.estimator.position_bias, module.estimator.position_bias)
    zscore = {
        "mean": torch.zeros(F, dtype=torch.float64),
        "std": torch.ones(F, dtype=torch.float64),
    }
    serving = {"n_features": F, "normalization": "zscore", "transform": None, **zscore}
    scorer = serving_scorer(restored.ranker, serving)
    assert not [
        name for name in scorer.state_dict() if "estimator" in name or "position_bias" in name
    ]
    features = click_batch()["features"]
    torch.testing.assert_close(scorer(features), module.ranker(features))

    hostile = copy.deepcopy(checkpoint)
    hostile["differank"]["config"]["ultr"] = {"_target_": "os.system", "command": "true"}
    with pytest.raises(UnsafeCheckpointError, match="ultr._target_"):
        rebuild_module(hostile, "best.ckpt")


@pytest.mark.parametrize("option", sorted(p.stem for p in (ROOT / "conf" / "ultr").glob("*.yaml")))
def test_every_ultr_option_instantiates_an_allowlisted_estimator(train_config, option):
    ultr = train_config([f"ultr={option}"]).ultr
    assert ultr.select == "labels"  # every option chooses its epoch on labels unless told
    estimator = instantiate(estimator_config(ultr))
    assert type(estimator) in ESTIMATORS


def test_ultr_without_a_click_model_is_refused(train_config):
    cfg = train_config([*TINY_RUN, "ultr=ips"])
    with pytest.raises(ValueError, match="clicks=none trains on the true labels"):
        build_run(cfg)


def test_a_click_run_gets_its_estimator_and_naive_without_one(train_config):
    small = [*TINY_RUN, "clicks=pbm", "clicks.top_k=6"]
    _, model = build_run(train_config([*small, "ultr=dla", "ultr.max_positions=6"]))
    assert isinstance(model.estimator, DLA)
    _, model = build_run(train_config(small))
    assert type(model.estimator).__name__ == "Naive"


@pytest.mark.slow
@requires_mq2008
@pytest.mark.parametrize("ultr", ["ips", "dla"])
def test_the_issues_mq2008_click_command_trains_and_reports_true_label_metrics(tmp_path, ultr):
    """``python train.py clicks=pbm clicks.eta=2 ultr=ips data=mq2008 data.fold=1`` (2 epochs):
    the test metrics are measured on MQ2008's true labels."""
    import differank

    overrides = ["clicks=pbm", "clicks.eta=2", f"ultr={ultr}", "data=mq2008", "data.fold=1"]
    overrides += [f"data.root={MQ2008}", "trainer.max_epochs=2", "logger=csv", "quiet=true"]
    metrics = differank.run(overrides, output_dir=tmp_path / ultr).test_metrics
    assert 0.2 < metrics["map"] < 0.7 and 0.0 < metrics["ndcg@10"] <= 1.0
    checkpoint = torch.load(tmp_path / ultr / "checkpoints" / "best.ckpt", weights_only=True)
    assert checkpoint["differank"]["config"]["ultr"]["_target_"].endswith(
        {"ips": "IPS", "dla": "DLA"}[ultr]
    )
