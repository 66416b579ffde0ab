"""The two libraries a tree student is boosted with, each trained on the distillation objective
(:class:`~differank.rankers.students.objective.DistillObjective`) as its custom objective, with
early stopping on a validation metric computed as the project's metrics compute it
(:func:`differank.rankers.metrics.evaluate.evaluate_arrays`, the run's ``metrics.convention``).

``conf/student/lightgbm.yaml`` and ``xgboost.yaml`` instantiate :class:`LightGBMStudent` and
:class:`XGBoostStudent`; their ``params`` go to the library as they are, under the few this
module sets itself (the objective, the seed, no base score: a student's score is the sum of
its trees' leaves, which is what the exported dump adds up). Both libraries are the optional
``bench`` extra.

Public API::

    QueryRows.of(split, teacher_scores=None)   # a split's rows grouped by query
    ValidationMetric(monitor, convention)      # val/map, val/ndcg@10, ... on a QueryRows
    LightGBMStudent(...).fit(train, val, metric, seed) -> FittedStudent
    XGBoostStudent(...).fit(...)               -> FittedStudent
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from differank.rankers.students.objective import DistillObjective, QueryGroups


@dataclass(frozen=True)
class QueryRows:
    """A split's rows reordered so that each query's rows are contiguous (the libraries' query
    groups): raw ``features`` float32 [rows, F], ``labels``, ``qids``, ``groups`` and, for the
    training split, the teacher's score of each row."""

    features: np.ndarray
    labels: np.ndarray
    qids: np.ndarray
    groups: QueryGroups
    teacher: np.ndarray | None = None

    @classmethod
    def of(cls, split, teacher_scores: np.ndarray | None = None) -> QueryRows:
        """Every query of ``split`` (a :class:`~differank.datamodules.letor_split.LetorSplit`;
        a training split's queries without a preference included: the teacher still orders
        them), ``teacher_scores`` [rows of the split] reordered with its rows."""
        queries = [split.query_rows[q] for q in range(len(split.query_rows))]
        order = np.concatenate(queries)
        teacher = None if teacher_scores is None else np.asarray(teacher_scores)[order]
        return cls(
            features=np.asarray(split.features)[order],
            labels=np.asarray(split.labels, np.float64)[order],
            qids=np.asarray(split.qids)[order],
            groups=QueryGroups(np.array([len(rows) for rows in queries])),
            teacher=teacher,
        )


class ValidationMetric:
    """The run's ``monitor`` (``val/map``, ``val/ndcg@10``, ``val/p@5``, ``val/mean_ndcg``) of
    a validation split's scores, under ``convention`` (``metrics.convention``); higher is
    better."""

    def __init__(self, monitor: str, convention: str = "letor") -> None:
        name = monitor.removeprefix("val/")
        cut = name.partition("@")[2]
        self.ks = (int(cut),) if cut.isdigit() else (10,)
        self.name, self.monitor, self.convention = name, monitor, convention
        probe = np.array([1.0, 0.0])
        known = evaluate_rows(probe, probe, np.zeros(2), self.ks, convention)
        if not monitor.startswith("val/") or name not in known:
            raise ValueError(
                f"a tree student stops early on a validation metric: monitor must be val/ with "
                f"one of {sorted(known)} (e.g. monitor=val/map), got monitor={monitor}"
            )

    def __call__(self, scores: np.ndarray, rows: QueryRows) -> float:
        return evaluate_rows(scores, rows.labels, rows.qids, self.ks, self.convention)[self.name]


def evaluate_rows(scores, labels, qids, ks, convention: str) -> dict[str, float]:
    from differank.rankers.metrics.evaluate import evaluate_arrays

    scores = np.asarray(scores, np.float64)
    return evaluate_arrays(scores, labels, qids, ks=ks, convention=convention)


@dataclass(frozen=True)
class FittedStudent:
    """A trained student: ``text`` its model file (the best round's trees only), ``predict``
    its float64 score of each row of raw features, the best round and its validation value."""

    text: str
    predict: Callable[[np.ndarray], np.ndarray]
    best_round: int
    best_value: float


class TreeStudent:
    """A gradient-boosted student on the distillation objective: ``alpha`` the label loss's
    weight and ``temperature`` the softmax temperature (as ``loss=distill``'s), at most
    ``max_rounds`` trees, stopped after ``early_stopping_rounds`` rounds without a better
    validation metric (the best round's trees are kept), ``params`` the library's own."""

    library = ""  # the subclass's package
    model_file = ""  # the model's file name in the run's student/ folder

    def __init__(
        self,
        *,
        alpha: float = 0.5,
        temperature: float = 1.0,
        max_rounds: int = 500,
        early_stopping_rounds: int = 50,
        params: dict | None = None,
    ) -> None:
        if max_rounds < 1 or early_stopping_rounds < 1:
            raise ValueError(
                f"student.max_rounds and student.early_stopping_rounds must be >= 1, got "
                f"{max_rounds} and {early_stopping_rounds}"
            )
        self.alpha, self.temperature = alpha, temperature
        self.max_rounds, self.early_stopping_rounds = max_rounds, early_stopping_rounds
        self.params = dict(params or {})

    def package(self) -> ModuleType:
        try:
            return importlib.import_module(self.library)
        except ImportError as error:
            raise ImportError(
                f"student={self.library} needs the {self.library} package: pip install "
                f"'differank[bench]' (the bench extra), or {self.library} itself"
            ) from error

    def objective(self, train: QueryRows) -> DistillObjective:
        if train.teacher is None:
            raise ValueError("a tree student's training rows need the teacher's scores")
        return DistillObjective(
            train.groups, train.teacher, train.labels, self.alpha, self.temperature
        )

    def fit(self, train: QueryRows, val: QueryRows, metric: ValidationMetric, seed: int = 0):
        """The student boosted on ``train``, its round chosen by ``metric`` on ``val``."""
        raise NotImplementedError


class LightGBMStudent(TreeStudent):
    """A LightGBM student (``student=lightgbm``), saved as LightGBM's text model."""

    library = "lightgbm"
    model_file = "model.txt"

    def fit(self, train: QueryRows, val: QueryRows, metric: ValidationMetric, seed: int = 0):
        lightgbm = self.package()
        objective = self.objective(train)

        def gradients(scores, _dataset):
            return objective.gradient_hessian(scores)

        def validation(scores, _dataset):
            return metric.name, metric(scores, val), True

        params = {
            "verbosity": -1,
            **self.params,
            "objective": gradients,
            "seed": seed,
            "deterministic": True,
        }
        training = lightgbm.Dataset(train.features, group=train.groups.sizes)
        checking = lightgbm.Dataset(val.features, group=val.groups.sizes, reference=training)
        booster = lightgbm.train(
            params,
            training,
            num_boost_round=self.max_rounds,
            valid_sets=[checking],
            valid_names=["val"],
            feval=validation,
            callbacks=[lightgbm.early_stopping(self.early_stopping_rounds, verbose=False)],
        )
        best = booster.best_iteration or booster.current_iteration()
        value = booster.best_score["val"][metric.name] if booster.best_score else float("nan")
        text = booster.model_to_string(num_iteration=best)
        kept = lightgbm.Booster(model_str=text)  # the best round's trees only, as saved

        def predict(features: np.ndarray) -> np.ndarray:
            return np.asarray(kept.predict(features), np.float64)

        return FittedStudent(text, predict, best, float(value))


class XGBoostStudent(TreeStudent):
    """An XGBoost student (``student=xgboost``), saved as XGBoost's JSON model."""

    library = "xgboost"
    model_file = "model.json"

    def fit(self, train: QueryRows, val: QueryRows, metric: ValidationMetric, seed: int = 0):
        xgboost = self.package()
        objective = self.objective(train)

        def gradients(scores, _matrix):
            return objective.gradient_hessian(scores)

        def validation(scores, _matrix):
            return metric.name, metric(scores, val)

        params = {
            **self.params,
            "seed": seed,
            "base_score": 0.0,  # the score is the trees' sum, as the dump adds them up
            "disable_default_eval_metric": 1,
        }
        training = xgboost.DMatrix(train.features, group=train.groups.sizes)
        checking = xgboost.DMatrix(val.features, group=val.groups.sizes)
        booster = xgboost.train(
            params,
            training,
            num_boost_round=self.max_rounds,
            evals=[(checking, "val")],
            obj=gradients,
            custom_metric=validation,
            maximize=True,
            early_stopping_rounds=self.early_stopping_rounds,
            verbose_eval=False,
        )
        best = int(booster.best_iteration) + 1
        kept = booster[:best]
        text = bytes(kept.save_raw("json")).decode()

        def predict(features: np.ndarray) -> np.ndarray:
            return np.asarray(kept.predict(xgboost.DMatrix(features)), np.float64)

        return FittedStudent(text, predict, best, float(booster.best_score))
