"""The click data module: training batches follow the click batch contract (docs/clicks.md),
sessions are reproducible from the seed and keyed by (seed, epoch, batch index) alone, also
inside Lightning's loop; validation batches keep the true labels, and a log's ``features``
column gives the batches its ``doc_row`` column gives."""

from __future__ import annotations

import numpy as np
import pytest
import pytorch_lightning as pl
import torch

from differank.datamodules.clicks.click_log import ClickLog, ClickLogError
from differank.datamodules.clicks.datamodule import ClickDataModule, batch_seed, session_seed
from differank.datamodules.clicks.pbm import PositionBasedModel
from differank.datamodules.clicks.shown_lists import top_k_rows
from differank.datamodules.synthetic import SyntheticLetorDataModule

TOP_K = 5


def make_data(**options):
    return SyntheticLetorDataModule(
        n_train_queries=30, n_val_queries=10, n_test_queries=10, batch_size=8, **options
    )


def shown(data, seed=0):
    split = data.split_data("train")
    scores = np.random.default_rng(seed).normal(size=split.num_rows)
    return scores, top_k_rows(scores, [split.query_rows[q] for q in split.queries], TOP_K)


def online(seed=0):
    data = make_data()
    scores, rows = shown(data)
    model = PositionBasedModel(max_label=2, eta=1.0, positions=TOP_K)
    return ClickDataModule.simulated(data, rows, model, seed=seed), scores


def test_a_training_batch_follows_the_click_batch_contract():
    clicks, scores = online()
    split = clicks.split_data("train")
    batch = next(iter(clicks.train_dataloader()))
    session = clicks.click_batch(batch, epoch=0, batch_index=0)
    assert "labels" not in session
    mask, rows = session["mask"], session["doc_index"]
    assert set(session) == {
        "features",
        "mask",
        "qid",
        "doc_index",
        "clicks",
        "positions",
        "propensities",
    }
    for b in range(len(mask)):
        real = rows[b][mask[b]].numpy()
        assert (np.diff(scores[real]) <= 0).all(), "not in shown order (top first)"
        torch.testing.assert_close(
            session["features"][b][mask[b]], torch.from_numpy(split.features[real])
        )
    assert session["clicks"].dtype == torch.float32
    assert set(session["clicks"].unique().tolist()) <= {0.0, 1.0}
    assert not session["clicks"][~mask].any()
    slots = torch.arange(mask.shape[1]).expand(mask.shape)
    assert torch.equal(session["positions"], slots.masked_fill(~mask, -1))
    theta = clicks.click_model.examination_by_position.float()[slots]
    assert torch.equal(session["propensities"], theta.masked_fill(~mask, 1.0))


def test_sessions_come_from_the_seed_and_the_batch_number():
    first, _ = online(seed=1)
    again, _ = online(seed=1)
    other, _ = online(seed=2)
    a = [c["clicks"] for _, _, c in first.sessions(2)]
    b = [c["clicks"] for _, _, c in again.sessions(2)]
    c = [c["clicks"] for _, _, c in other.sessions(2)]
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(a, c, strict=True))
    assert not torch.equal(a[0], a[len(a) // 2]) or len(a) == 1  # a new session every batch


def test_a_batch_s_sessions_are_the_same_whatever_was_drawn_before():
    fresh, _ = online(seed=1)
    busy, _ = online(seed=1)
    batches = list(busy.train_dataloader())
    for index, batch in enumerate(batches):  # a whole epoch drawn before
        busy.click_batch(batch, epoch=0, batch_index=index)
    key = {"epoch": 1, "batch_index": 2}
    expected = fresh.click_batch(batches[2], **key)["clicks"]
    assert torch.equal(busy.click_batch(batches[2], **key)["clicks"], expected)
    elsewhere = [
        busy.click_batch(batches[2], epoch=epoch, batch_index=index)["clicks"]
        for epoch, index in ((0, 2), (1, 1), (2, 2))
    ]
    assert not any(torch.equal(clicks, expected) for clicks in elsewhere)  # another key: new draws


def test_sessions_are_drawn_on_the_cpu_from_the_key():
    """The uniforms of a batch are the CPU generator's for its key, whatever the labels' device
    (so a GPU run draws the sessions a CPU run draws)."""
    clicks, _ = online(seed=5)
    batch = next(iter(clicks.train_dataloader()))
    model = clicks.click_model
    generator = torch.Generator().manual_seed(session_seed(5, 3, 4))
    uniforms = torch.rand((*batch["labels"].shape, model.draws_per_slot), generator=generator)
    expected = model.sample(batch["labels"], batch["mask"], uniforms)
    drawn = clicks.click_batch(batch, epoch=3, batch_index=4)["clicks"]
    assert torch.equal(drawn, expected.float())


@pytest.mark.parametrize("key", [{"epoch": -1, "batch_index": 0}, {"epoch": 0, "batch_index": 1.5}])
def test_a_bad_key_is_named(key):
    clicks, _ = online()
    batch = next(iter(clicks.train_dataloader()))
    name = "epoch" if key["epoch"] == -1 else "batch_index"
    with pytest.raises(ValueError, match=f"click_batch: {name} must be an int >= 0"):
        clicks.click_batch(batch, **key)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_batch_on_the_gpu_gets_the_cpu_s_sessions():
    clicks, _ = online(seed=7)
    batch = next(iter(clicks.train_dataloader()))
    on_gpu = {key: value.cuda() for key, value in batch.items()}
    expected = clicks.click_batch(batch, epoch=1, batch_index=0)["clicks"]
    drawn = clicks.click_batch(on_gpu, epoch=1, batch_index=0)["clicks"]
    assert drawn.is_cuda and torch.equal(drawn.cpu(), expected)


def test_a_batch_without_its_keys_is_deprecated_and_batch_seed_too():
    clicks, _ = online()
    batches = list(clicks.train_dataloader())
    with pytest.warns(FutureWarning, match="without epoch= and batch_index= is deprecated"):
        first = [clicks.click_batch(batch)["clicks"] for batch in batches[:2]]
    keyed = [clicks.click_batch(b, epoch=0, batch_index=i)["clicks"] for i, b in enumerate(batches)]
    assert torch.equal(first[0], keyed[0]) and torch.equal(first[1], keyed[1])
    with pytest.warns(FutureWarning, match="session_seed"):
        assert batch_seed(0, 1) != batch_seed(0, 2)


class KeysSeen(pl.LightningModule):
    """A one-weight module that records the (epoch, batch_idx) Lightning gives every training
    step, and the data module's click keys for the same steps."""

    def __init__(self, data: ClickDataModule) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.steps: list[tuple[int, int]] = []
        self.keys: list[tuple[int, int]] = []
        draw = data.click_batch

        def recorded(batch, *, epoch, batch_index):
            self.keys.append((epoch, batch_index))
            return draw(batch, epoch=epoch, batch_index=batch_index)

        data.click_batch = recorded

    def training_step(self, batch, batch_idx):
        assert "clicks" in batch and "labels" not in batch
        self.steps.append((self.current_epoch, batch_idx))
        return self.weight.sum() * batch["clicks"].sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.filterwarnings("ignore:You passed in a `val_dataloader` but have no")
def test_lightning_s_training_loop_keys_each_batch_by_its_epoch_and_index(tmp_path):
    """The keys ``on_after_batch_transfer`` reads from the trainer are the epoch and batch_idx
    of the step that trains on the batch (it reads Lightning's batch counter before Lightning
    advances it: a Lightning upgrade that moved it would fail here)."""
    clicks, _ = online()
    module = KeysSeen(clicks)
    trainer = pl.Trainer(
        max_epochs=2,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(module, datamodule=clicks)
    batches = len(clicks.train_dataloader())
    assert module.keys == module.steps == [(e, i) for e in range(2) for i in range(batches)]


def test_validation_batches_keep_the_true_labels():
    clicks, _ = online()
    batch = next(iter(clicks.val_dataloader()))
    assert "labels" in batch and "clicks" not in batch
    assert clicks.on_after_batch_transfer(batch, 0) is batch  # no trainer: not training


def test_a_features_log_trains_on_the_batches_its_doc_row_twin_gives():
    data = make_data(normalization="zscore")
    split = data.split_data("train")
    rows = np.array([3, 1, 4, 1, 5])
    raw = np.stack([source_row for source_row in raw_features(data, rows)])
    columns = dict(
        session=np.array([0, 0, 0, 1, 1]),
        qid=split.qids[rows][[0, 0, 0, 3, 3]],
        position=np.array([0, 1, 2, 0, 1]),
        click=np.array([1, 0, 0, 0, 1]),
    )
    by_row = ClickDataModule.logged(data, ClickLog(**columns, doc_row=rows))
    by_features = ClickDataModule.logged(
        make_data(normalization="zscore"), ClickLog(**columns, features=raw)
    )
    a = by_row.click_batch(by_row.dataset("train").tensors.batch([0, 1]))
    b = by_features.click_batch(by_features.dataset("train").tensors.batch([0, 1]))
    torch.testing.assert_close(a["features"], b["features"], rtol=1e-5, atol=1e-5)
    assert torch.equal(a["clicks"], b["clicks"]) and torch.equal(a["positions"], b["positions"])
    assert "propensities" not in a  # the log has none


def raw_features(data, rows):
    """The unnormalised features of training rows (the inverse of the z-score)."""
    split = data.split_data("train")
    return split.features[rows] * data.feature_std.astype(np.float32) + data.feature_mean.astype(
        np.float32
    )


def test_a_doc_row_outside_the_training_split_is_named():
    data = make_data()
    n = data.split_data("train").num_rows
    log = ClickLog(
        session=np.array([0]),
        qid=np.array([1]),
        position=np.array([0]),
        click=np.array([0]),
        doc_row=np.array([n]),
    )
    with pytest.raises(ClickLogError, match=f"row 0 \\(session 0\\): doc_row {n} is outside"):
        ClickDataModule.logged(data, log)


def test_full_batch_solvers_are_refused():
    clicks, _ = online()
    with pytest.raises(ValueError, match="full-batch solvers"):
        clicks.full_batch("train")
