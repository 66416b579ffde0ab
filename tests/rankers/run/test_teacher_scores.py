"""The teacher side of loss=distill: a student trains from a checkpoint teacher (the
self-distillation config), the teacher's scores are computed once per split, cached with the data
under the teacher file's sha256 and verified before use, and a restored student never reads its
teacher."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

import differank
from differank.rankers.run import teacher_scores as cached
from differank.rankers.run.teachers import (
    CheckpointTeacher,
    EnsembleTeacher,
    LightGBMTeacher,
    Teacher,
)
from tests.conftest import TINY_DATA

TINY = [*TINY_DATA, "trainer.max_epochs=1", "logger=csv", "callbacks=none"]


@pytest.fixture(scope="module")
def teacher_run(tmp_path_factory) -> Path:
    """A small MLP run: the teacher (and, for self-distillation, the same model)."""
    run_dir = tmp_path_factory.mktemp("teacher")
    differank.run(["model=mlp", "loss=listnet", *TINY, "callbacks=default"], output_dir=run_dir)
    return run_dir / "checkpoints" / "best.ckpt"


def raw_data():
    from hydra.utils import instantiate

    from differank.rankers.run.runs import compose_config

    cfg = compose_config(TINY_DATA, run_dir=Path("unused"))
    return instantiate(cfg.data, normalization="none", transform="none")


def test_self_distillation_trains_from_a_previous_run(teacher_run, tmp_path):
    overrides = ["experiment=distill/self_distill", f"teacher.path={teacher_run}", *TINY]
    student = differank.run([*overrides, "callbacks=default"], output_dir=tmp_path / "student")
    assert 0.0 <= student.test_metrics["map"] <= 1.0
    record = torch.load(tmp_path / "student" / "checkpoints" / "best.ckpt", weights_only=True)
    assert record["differank"]["config"]["loss"]["label_loss"]["_target_"].endswith("ListNetLoss")


def test_the_loss_sees_the_teachers_score_of_each_document(teacher_run, tmp_path, monkeypatch):
    """What reaches the loss per document is the teacher's score of that document's row."""
    from differank.losses.distill import DistillLoss

    data = raw_data()
    data.setup()
    want = {
        split: CheckpointTeacher(teacher_run).score(data.split_data(split))
        for split in ("train", "val")
    }
    seen = []
    forward = DistillLoss.forward

    def spy(self, scores, labels, mask, teacher_scores):
        if mask is not None:  # None: the options check of the module's constructor
            seen.append((self.training, teacher_scores.detach().clone(), mask.clone()))
        return forward(self, scores, labels, mask, teacher_scores)

    monkeypatch.setattr(DistillLoss, "forward", spy)
    rows = []
    from differank.rankers.training.module import EvaluationModule

    batch_loss = EvaluationModule.batch_loss

    def keep_rows(self, batch, target=None):
        rows.append(batch["doc_index"].clone())
        return batch_loss(self, batch, target)

    monkeypatch.setattr(EvaluationModule, "batch_loss", keep_rows)
    overrides = ["model=mlp", "loss=distill", "teacher=checkpoint", f"teacher.path={teacher_run}"]
    differank.run([*overrides, *TINY], output_dir=tmp_path / "student")
    assert {training for training, _, _ in seen} == {True, False}
    for (training, teacher, mask), doc_index in zip(seen, rows, strict=True):
        table = want["train" if training else "val"]
        expected = torch.from_numpy(table)[doc_index[mask]].float()
        torch.testing.assert_close(teacher[mask], expected, rtol=1e-6, atol=1e-6)


def test_scores_are_cached_by_the_teacher_files_digest_and_checked(teacher_run, tmp_path, caplog):
    data = raw_data()
    calls = []

    class Counting(CheckpointTeacher):
        def score(self, split):
            calls.append(split.name)
            return super().score(split)

    teacher = Counting(teacher_run)
    first = cached.teacher_scores(teacher, data, tmp_path)
    again = cached.teacher_scores(teacher, data, tmp_path)
    assert len(calls) == 2  # train and val, once
    assert torch.equal(first.train, again.train) and torch.equal(first.val, again.val)
    # a tampered entry (a NaN written into the cache) is not trusted: rebuilt, with a warning
    [entry] = [e for e in (tmp_path / "distill" / "teacher_scores").iterdir()
               if json.loads((e / "meta.json").read_text())["split"] == "train"]  # fmt: skip
    scores = np.load(entry / "scores.npy")
    scores[0] = np.nan
    np.save(entry / "scores.npy", scores)
    with caplog.at_level(logging.WARNING):
        rebuilt = cached.teacher_scores(teacher, data, tmp_path)
    assert "does not match" in caplog.text and len(calls) == 3
    assert torch.equal(rebuilt.train, first.train)
    # another teacher file (one byte more) is another entry: its scores are computed afresh
    other = tmp_path / "other.ckpt"
    other.write_bytes(Path(teacher_run).read_bytes() + b"\0")
    assert Counting(other).sha256() != teacher.sha256()


def test_a_teacher_that_scores_a_row_nan_is_named(tmp_path):
    class Broken(Teacher):
        def score(self, split):
            values = np.zeros(split.num_rows)
            values[3] = np.nan
            return values

    path = tmp_path / "model.txt"
    path.write_text("broken")
    with pytest.raises(ValueError, match="row 4 of the train split .* not finite"):
        cached.teacher_scores(Broken(path), raw_data(), tmp_path)


def test_a_missing_teacher_file_and_a_missing_teacher_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="teacher file .* does not exist"):
        CheckpointTeacher(tmp_path / "none.ckpt")
    with pytest.raises(ValueError, match="distils a teacher, and this run has none"):
        differank.run(["model=linear", "loss=distill", *TINY], output_dir=tmp_path / "run")


def test_a_broken_ensemble_json_is_named(tmp_path):
    path = tmp_path / "ensemble.json"
    path.write_text(json.dumps({"weights": [1.0]}))
    with pytest.raises(ValueError, match="not an ensemble.json"):
        EnsembleTeacher(path).files()


def test_a_gradient_boosting_teacher_without_its_library_names_the_extra(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "lightgbm", None)  # import lightgbm: ImportError
    path = tmp_path / "model.txt"
    path.write_text("tree")
    with pytest.raises(ImportError, match=r"differank\[bench\]"):
        LightGBMTeacher(path).score(None)


def test_a_restored_student_never_reads_its_teacher(teacher_run, tmp_path):
    """The teacher path in a checkpoint is data: task=test from the student's checkpoint works
    with the teacher file gone (and a path the file names is never opened)."""
    from tests.conftest import run_config

    copy = tmp_path / "teacher.ckpt"
    copy.write_bytes(Path(teacher_run).read_bytes())
    overrides = ["model=linear", "loss=distill", "teacher=checkpoint", f"teacher.path={copy}"]
    differank.run([*overrides, *TINY, "callbacks=default"], output_dir=tmp_path / "student")
    copy.unlink()
    best = tmp_path / "student" / "checkpoints" / "best.ckpt"
    run_config(["task=test", f"ckpt_path={best}", "logger=csv"], tmp_path / "restored")
    assert (tmp_path / "restored" / "test_metrics.json").is_file()
