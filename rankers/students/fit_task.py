"""``task=fit`` with ``student=lightgbm|xgboost``: a tree student boosted on a teacher's cached
scores of the training split (``teacher=...``, the teachers of ``loss=distill``), its trees
chosen by the run's ``monitor`` on the validation split, then scored on the test split. No
Lightning loop runs; the run folder gets what any run writes about its test split
(``test_metrics.json``, ``predictions/``) and ``student/``: the model file
(``model.txt``, LightGBM's text model, or ``model.json``, XGBoost's JSON model) and
``student.json`` (the library, the rounds kept, the validation value, the teacher's file and
digest). Everything is read raw (no normalization, no transform), as the teacher reads it and
as the exported trees will be served.

Public API::

    fit_student(cfg, run_dir) -> float   # the best validation value of cfg.monitor
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from differank.datamodules.atomic_files import write_files
from differank.rankers.run.scoring import prediction_files, report
from differank.rankers.students.boosters import QueryRows, TreeStudent, ValidationMetric

log = logging.getLogger(__name__)

TEST_CUTOFFS = (1, 3, 5, 10)  # NDCG@k and P@k in test_metrics.json, as a neural run's


def fit_student(cfg: DictConfig, run_dir: Path) -> float:
    """Boost ``cfg.student`` on ``cfg.teacher``'s scores and write the run's outputs."""
    from differank.rankers.run.teacher_scores import split_teacher_scores
    from differank.rankers.run.trainer_tasks import raw_data, seed_run

    if cfg.get("teacher") is None:
        raise ValueError(
            "student=... learns from a teacher: add teacher=checkpoint|ensemble|lightgbm|xgboost "
            "teacher.path=FILE (docs/objectives/distill.md#tree-students)"
        )
    if cfg.ckpt_path:
        raise ValueError(
            f"ckpt_path={cfg.ckpt_path}: a tree student is boosted afresh and resumes from "
            "nothing; drop ckpt_path (its teacher is teacher.path)"
        )
    seed_run(cfg)
    student: TreeStudent = instantiate(cfg.student)
    metric = ValidationMetric(cfg.monitor, cfg.metrics.convention)  # refused before any work
    teacher = instantiate(cfg.teacher)
    data, cache_dir = raw_data(cfg)
    scores = split_teacher_scores(teacher, data, "train", cache_dir)
    train = QueryRows.of(data.split_data("train"), scores)
    fitted = student.fit(train, QueryRows.of(data.split_data("val")), metric, seed=cfg.seed)
    test = data.split_data("test")
    test_scores = torch.from_numpy(fitted.predict(test.features))
    convention = cfg.metrics.convention
    files, metrics = prediction_files(
        run_dir, test_scores, test, evaluate=True, ks=TEST_CUTOFFS, convention=convention
    )
    folder = run_dir / "student"
    record = {
        "library": student.library,
        "model_file": student.model_file,
        "rounds": fitted.best_round,
        "monitor": cfg.monitor,
        "best_value": fitted.best_value,
        "teacher": str(teacher.path),
        "teacher_sha256": teacher.sha256(),
    }
    files[folder / student.model_file] = fitted.text
    files[folder / "student.json"] = json.dumps(record, indent=2) + "\n"
    write_files(files)
    weights = (
        f"the {student.library} student ({fitted.best_round} trees, {cfg.monitor} "
        f"{fitted.best_value:.4f}), {folder / student.model_file}"
    )
    report(run_dir, metrics, weights, convention)
    return fitted.best_value
