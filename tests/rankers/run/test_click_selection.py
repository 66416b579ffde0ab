"""``ultr.select=clicks`` end to end (rankers/run/click_selection.py): the epoch is chosen from
held-out click sessions on the validation queries, drawn apart from the training sessions, and
no validation label is read: a run whose validation labels are garbage, or unreadable, once the
sessions are drawn trains and selects exactly as the run on the true ones."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import differank
from differank.datamodules.clicks.datamodule import ClickDataModule
from differank.datamodules.clicks.held_out import HeldOutSessions
from differank.rankers.run.click_selection import click_selection, estimator_config
from differank.rankers.run.production import shown_lists
from differank.rankers.run.runs import compose_config
from differank.rankers.run.trainer_tasks import build_run
from tests.conftest import MQ2008, TINY_DATA, requires_mq2008

RUN = [*TINY_DATA, "trainer.max_epochs=4", "logger=csv", "quiet=true", "loss=softmax"]
CLICKS = ["clicks=pbm", "clicks.top_k=6", "clicks.eta=2"]
SELECT = [*RUN, *CLICKS, "ultr=ips", "ultr.label_sum_weighting=true", "ultr.select=clicks"]


def ranker_weights(run_dir):
    state = torch.load(run_dir / "checkpoints" / "best.ckpt", weights_only=True)
    return state, {k: v for k, v in state["state_dict"].items() if k.startswith("ranker.")}


class Unreadable:
    """Stands for a label array nobody may read: any use raises."""

    def __getattr__(self, name):
        raise AssertionError(f"a validation label was read ({name})")

    def __array__(self, *args, **kwargs):
        raise AssertionError("a validation label was read (as an array)")

    def __getitem__(self, key):
        raise AssertionError("a validation label was read (indexed)")

    def __len__(self):
        raise AssertionError("a validation label was read (its length)")


def corrupt_validation_labels(monkeypatch, how, built_by="simulated"):
    """Once the click data module is built (``ClickDataModule.simulated`` or ``.logged``: the
    held-out sessions drawn or read), the validation split's labels become NaN or unreadable,
    in the split and in its served tensors."""
    original = getattr(ClickDataModule, built_by).__func__

    def build(cls, data, *args, **kwargs):
        built = original(cls, data, *args, **kwargs)
        split, tensors = data.split_data("val"), data.dataset("val").tensors
        if how == "nan":
            split.labels[:] = np.nan
            tensors.labels.fill_(math.nan)
        else:
            split.labels = Unreadable()
            tensors.labels = Unreadable()
        return built

    monkeypatch.setattr(ClickDataModule, built_by, classmethod(build))


@pytest.mark.parametrize("how", ["nan", "unreadable"])
def test_no_validation_label_is_read_the_same_epoch_is_chosen(tmp_path, monkeypatch, how):
    truth = differank.run(SELECT, output_dir=tmp_path / "truth")
    corrupt_validation_labels(monkeypatch, how)
    blind = differank.run(SELECT, output_dir=tmp_path / how)
    assert truth.monitor == blind.monitor == "val/click_dcg@10"
    assert math.isfinite(truth.best_validation)
    assert blind.best_validation == truth.best_validation
    assert blind.test_metrics == truth.test_metrics  # the test split's labels are its own
    (truth_state, truth_weights), (blind_state, blind_weights) = (
        ranker_weights(truth.run_dir),
        ranker_weights(blind.run_dir),
    )
    assert truth_state["epoch"] == blind_state["epoch"]  # the same epoch chosen
    for key, value in truth_weights.items():
        assert torch.equal(value, blind_weights[key]), key
    validation = truth_state["differank"]["validation"]
    assert set(validation) == {"val/click_dcg@10"}  # no label metric was computed


def test_selection_by_labels_reads_them(tmp_path, monkeypatch):
    """The control of the test above: with ultr.select=labels the garbage changes the run."""
    labels = [*RUN, *CLICKS, "ultr=ips", "ultr.label_sum_weighting=true"]
    corrupt_validation_labels(monkeypatch, "unreadable")
    with pytest.raises(AssertionError, match="validation label was read"):
        differank.run(labels, output_dir=tmp_path / "labels")


def test_the_held_out_sessions_are_the_run_users_on_the_validation_lists(tmp_path):
    overrides = [*SELECT, "ultr.select_sessions=7"]
    cfg = compose_config([*overrides, "seed=5"], run_dir=tmp_path)
    datamodule, model = build_run(cfg)
    sessions = datamodule.held_out
    assert isinstance(sessions, HeldOutSessions)
    split = datamodule.split_data("val")
    assert len(sessions) == len(split.queries) and sessions.sessions == 7
    columns = sessions.columns
    assert columns["clicks"].shape == (len(split.queries), 7, 6)
    assert "labels" not in columns
    assert torch.equal(columns["qid"], torch.as_tensor(split.query_ids[split.queries]))
    shown = columns["mask"]
    rows = columns["doc_index"][shown].numpy()
    assert np.isin(rows, np.arange(split.num_rows)).all()  # rows of the validation split
    # the production ranker's top 6 of every validation query, in its order
    expected = shown_lists(datamodule, cfg.clicks.production, 6, 5, split="val")
    for query, listed in enumerate(expected):
        assert columns["doc_index"][query][shown[query]].tolist() == listed.tolist()
    assert (columns["clicks"].sum(dim=1)[~shown] == 0).all()
    assert columns["clicks"].any()
    # the sessions differ from one another (own draws), and another seed draws others
    assert not torch.equal(columns["clicks"][:, 0], columns["clicks"][:, 1])
    again, _ = build_run(
        compose_config([*SELECT, "ultr.select_sessions=7", "seed=5"], run_dir=tmp_path)
    )
    assert torch.equal(again.held_out.columns["clicks"], columns["clicks"])
    other, _ = build_run(
        compose_config([*SELECT, "ultr.select_sessions=7", "seed=6"], run_dir=tmp_path)
    )
    assert not torch.equal(other.held_out.columns["clicks"], columns["clicks"])
    # the loader serves them in batches without labels
    batch = next(iter(datamodule.val_dataloader()))
    assert "labels" not in batch and batch["clicks"].dim() == 3
    assert model.click_validation is not None and model.click_validation.k == 10


def test_select_by_labels_is_the_default_and_keeps_the_true_validation(tmp_path):
    cfg = compose_config([*RUN, *CLICKS, "ultr=ips"], run_dir=tmp_path)
    assert cfg.ultr.select == "labels" and click_selection(cfg) is None
    datamodule, model = build_run(cfg)
    assert datamodule.held_out is None and model.click_validation is None
    assert "labels" in next(iter(datamodule.val_dataloader()))
    assert "select" not in estimator_config(cfg.ultr)


def test_the_log_likelihood_monitor_of_a_click_model_estimator(tmp_path):
    overrides = [*RUN, *CLICKS, "loss=bce", "ultr=twotower", "ultr.select=clicks"]
    result = differank.run([*overrides, "ultr.select_metric=loglik"], output_dir=tmp_path)
    assert result.monitor == "val/click_loglik"
    assert -math.inf < result.best_validation < 0
    state, _ = ranker_weights(result.run_dir)
    assert set(state["differank"]["validation"]) == {"val/click_dcg@10", "val/click_loglik"}


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["ultr.select=best"], "ultr.select must be one of"),
        (["ultr.select=clicks", "ultr.select_metric=ndcg"], "ultr.select_metric must be one of"),
        (["ultr.select=clicks", "ultr.select_metric=loglik"], "IPS fits no click model"),
        (["ultr.select=clicks", "monitor=val/ndcg@10"], "reads validation labels"),
        (["ultr.select=clicks", "ultr.select_sessions=0"], "select_sessions must be"),
        (["ultr.select=clicks", "ultr.select_k=0"], "select_k must be"),
    ],
)
def test_bad_selections_are_refused_with_the_fix(tmp_path, overrides, match):
    with pytest.raises(ValueError, match=match):
        differank.run([*RUN, *CLICKS, "ultr=ips", *overrides], output_dir=tmp_path)


def test_selecting_by_clicks_needs_a_click_run(tmp_path):
    """(On a click log, part of the log is held out: test_click_log_selection.py.)"""
    cfg = compose_config([*RUN, "ultr=ips", "ultr.select=clicks"], run_dir=tmp_path)
    with pytest.raises(
        ValueError, match="needs a click run, simulated online .* or on a click log"
    ):
        click_selection(cfg)


def test_a_click_selected_checkpoint_restores_for_test(tmp_path):
    trained = differank.run(SELECT, output_dir=tmp_path / "fit")
    checkpoint = trained.run_dir / "checkpoints" / "best.ckpt"
    tested = differank.run(
        ["task=test", f"ckpt_path={checkpoint}", "quiet=true"], output_dir=tmp_path / "test"
    )
    assert tested.test_metrics == trained.test_metrics


@pytest.mark.slow
@requires_mq2008
def test_the_issues_select_by_clicks_command_runs_on_mq2008(tmp_path):
    """``python train.py clicks=pbm ultr=ips ultr.select=clicks data=mq2008`` (2 epochs)."""
    overrides = ["clicks=pbm", "ultr=ips", "ultr.select=clicks", "data=mq2008"]
    overrides += [f"data.root={MQ2008}", "trainer.max_epochs=2", "logger=csv", "quiet=true"]
    result = differank.run(overrides, output_dir=tmp_path)
    assert result.monitor == "val/click_dcg@10" and result.best_validation > 0
    assert 0.2 < result.test_metrics["map"] < 0.7
