"""``differank.Ranker``: a scikit-learn estimator that trains through ``train.py``'s own run.

``fit`` writes the rows it is given as a LETOR fold (``Fold1/{train,vali,test}.txt``, float32
values written with ``%.9g``, which round-trips them exactly) into the run folder and runs
``train.run_training`` on it with ``data=letor`` and overrides built from the estimator's
parameters (``overrides_``). The rows are thus read, checked, normalised, batched and trained by
``LetorDataModule``, ``RankingModule``, the losses and the callbacks of any ``python train.py``
run, and the checkpoint is the one ``differank.load_ranker`` and ``task=predict|export`` read:
``python train.py <overrides_> data=letor data.root=<those files>`` trains the same model.
``predict`` scores rows with the checkpoint's raw-feature scorer, as ``task=predict
files=[...]`` does (:func:`~differank.rankers.run.scoring.score_split`). docs/python.md has the
whole reference.

Public API::

    Ranker(loss="lambdaloss", loss_options=None, model="mlp", model_options=None, ...)
      .fit(X, y, *, qid=None, group=None, eval_set=None, eval_qid=None, eval_group=None)
      .predict(X, qid=None, group=None) -> float64 [N]
      .score(X, y, qid=None, group=None) -> NDCG@10 (``convention``)
      .save(path), Ranker.load(path), .get_params(), .set_params(**params)
      .plot_curves(path=None) -> matplotlib Figure (the fit's curves.png)
      fitted: n_features_in_, feature_names_in_, run_dir_, checkpoint_path_, overrides_,
              best_score_, eval_metrics_, scorer_, feature_importances_, coef_ (linear)
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import inspect
import io
import json
import logging
import re
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator
from os import PathLike
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch

from differank.datamodules.arrays import read_letor
from differank.datamodules.atomic_files import write_file
from differank.datamodules.letor_split import LetorSplit
from differank.datamodules.reader import write_letor
from differank.rankers.checkpoints import load_checkpoint, scorer_from_checkpoint
from differank.rankers.metrics.evaluate import evaluate_arrays
from differank.rankers.run.ranker_inputs import RankingRows, ranking_rows
from differank.rankers.run.scoring import score_split
from differank.rankers.scorers.linear import LinearRanker

PROJECT = Path(__file__).resolve().parents[2]  # rankers/run/ -> the project (train.py, conf/)
MONITOR = "val/ndcg@10"  # what picks the epoch: the metric score() reports
PREDICT_CHUNK = 1024  # rows per padded list when per-document scores need no queries
EVAL_BATCH = 128  # queries per scoring batch: conf/data/letor.yaml's eval_batch_size
_OPTION_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_ACCELERATORS = {"auto": "auto", "cpu": "cpu", "cuda": "gpu", "gpu": "gpu", "mps": "mps"}


@functools.cache
def train_script() -> ModuleType:
    """``train.py`` (``run_training``, ``compose_run``) from its file: a script at the project
    root, not an installed module. A wheel holds no ``train.py`` or ``conf/``; the estimator
    trains from a source checkout (``pip install -e .``)."""
    path = PROJECT / "train.py"
    loaded = sys.modules.get("train")
    if loaded is not None and Path(getattr(loaded, "__file__", "")).resolve() == path:
        return loaded
    if not path.is_file() or not (PROJECT / "conf").is_dir():
        raise RuntimeError(
            f"differank.Ranker trains with the project's train.py and conf/, not found in "
            f"{PROJECT}: install differank from a source checkout (pip install -e .)"
        )
    spec = importlib.util.spec_from_file_location("train", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"{path} cannot be loaded as a module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def hydra_value(value: Any) -> str:
    """``value`` in Hydra's override grammar (strings quoted, None as null, lists and dicts
    element by element)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, np.integer, np.floating)):
        return repr(value.item() if isinstance(value, np.generic) else value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"{value!r} ({type(value).__name__}) is not a config value")


class Ranker:
    """A learning-to-rank estimator with scikit-learn's conventions, trained by ``train.py``'s
    run code (docs/python.md).

    Args:
        loss: a ``conf/loss/`` option (``lambdaloss``, ``listnet``, ``domination``, ...).
        loss_options: that config's keys, e.g. ``{"weighting": "ndcgLoss2"}``.
        model: a ``conf/model/`` option (``mlp``, ``linear``, ``transformer``, ...).
        model_options: keys of that config (``{"optimizer.lr": 0.01}``); a plain name that is
            not a top-level key is the scorer's (``{"hidden": [128, 64]}`` sets
            ``model.ranker.hidden``).
        transform: ``data.transform`` (``none``, ``log1p``, ``gaussrank``).
        max_epochs, batch_size (queries per batch), lr, weight_decay: the trainer's, the data's
            and the optimizer's (None: the model config's own).
        early_stopping: None (train ``max_epochs``, keep the best ``eval_set`` epoch) or the
            patience in epochs (needs ``eval_set``).
        seed, device (``auto``, ``cpu``, ``cuda``), precision (``32-true``, ``bf16-mixed``...).
        verbose: a progress bar; None: only when stdout is a terminal.
        nan_policy: the reader's ``error`` | ``zero`` | ``allow`` for NaN / inf features.
        convention: the NDCG convention of ``score`` and of validation (docs/metrics.md).
        qid_column: a DataFrame column holding the query id (not a feature).
        output_dir: where run folders are made (None: the system's temporary folder).

    Example:
        >>> import numpy as np, differank
        >>> rng = np.random.default_rng(0)
        >>> X = rng.normal(size=(60, 4)); qid = np.repeat(np.arange(6), 10)
        >>> y = (X[:, 0] > 0.5).astype(int) + (X[:, 0] > 1.2)
        >>> ranker = differank.Ranker(model="linear", max_epochs=2, verbose=False)
        >>> ranker.fit(X, y, qid=qid).predict(X[:3]).shape
        (3,)
        >>> 0.0 <= ranker.score(X, y, qid=qid) <= 1.0
        True
    """

    # fitted state (set by fit / load)
    run_dir_: Path | None
    _feature_importances: np.ndarray | None

    def __init__(
        self,
        loss: str = "lambdaloss",
        loss_options: dict | None = None,
        model: str = "mlp",
        model_options: dict | None = None,
        transform: str = "none",
        max_epochs: int = 30,
        batch_size: int = 32,
        lr: float | None = None,
        weight_decay: float | None = None,
        early_stopping: int | None = None,
        seed: int = 0,
        device: str = "auto",
        precision: str = "32-true",
        verbose: bool | None = None,
        nan_policy: str = "error",
        convention: str = "letor",
        qid_column: str | None = "qid",
        output_dir: str | None = None,
    ) -> None:
        self.loss = loss
        self.loss_options = loss_options
        self.model = model
        self.model_options = model_options
        self.transform = transform
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.early_stopping = early_stopping
        self.seed = seed
        self.device = device
        self.precision = precision
        self.verbose = verbose
        self.nan_policy = nan_policy
        self.convention = convention
        self.qid_column = qid_column
        self.output_dir = output_dir

    # ---- scikit-learn's parameter protocol ---------------------------------------------------

    @classmethod
    def _param_names(cls) -> list[str]:
        return [name for name in inspect.signature(cls.__init__).parameters if name != "self"]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's parameters (scikit-learn's protocol; nothing nested)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> Ranker:
        """Set constructor parameters by name; returns ``self``."""
        names = self._param_names()
        for name, value in params.items():
            if name not in names:
                raise ValueError(f"Ranker has no parameter {name!r}; its parameters: {names}")
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        defaults = {
            name: p.default for name, p in inspect.signature(type(self).__init__).parameters.items()
        }
        changed = [f"{k}={v!r}" for k, v in self.get_params().items() if v != defaults[k]]
        return f"Ranker({', '.join(changed)})"

    def __sklearn_tags__(self):
        """scikit-learn's tags (asked for by scikit-learn only, which is then installed)."""
        from sklearn.utils import InputTags, Tags, TargetTags

        return Tags(
            estimator_type=None,
            target_tags=TargetTags(required=True),
            input_tags=InputTags(sparse=True, allow_nan=self.nan_policy != "error"),
        )

    # ---- training ----------------------------------------------------------------------------

    def train_overrides(self) -> list[str]:
        """The ``python train.py`` overrides of this estimator's parameters, without the data's
        place: ``python train.py <these> data=letor data.root=FOLDER`` trains the same model."""
        overrides = [f"loss={self.loss}", f"model={self.model}"]
        overrides += [f"loss.{key}={hydra_value(value)}" for key, value in self._options("loss")]
        overrides += [f"model.{key}={hydra_value(value)}" for key, value in self._model_keys()]
        overrides += [
            f"data.transform={self.transform}",
            f"data.batch_size={self._int('batch_size', self.batch_size, 1)}",
            f"data.nan_policy={self.nan_policy}",
            f"trainer.max_epochs={self._int('max_epochs', self.max_epochs, 1)}",
            f"seed={self._int('seed', self.seed, 0)}",
            f"trainer.accelerator={self._accelerator()}",
            f"trainer.precision={self.precision}",
            f"metrics.convention={self.convention}",
            f"monitor={hydra_value(MONITOR)}",
            "logger=csv",  # per-epoch metrics (csv/version_0/metrics.csv) for the curves
        ]
        for name in ("lr", "weight_decay"):
            value = getattr(self, name)
            if value is not None:
                overrides.append(f"model.optimizer.{name}={hydra_value(float(value))}")
        if self.early_stopping is None:
            overrides.append("~callbacks.early_stopping")
        else:
            patience = self._int("early_stopping", self.early_stopping, 1)
            overrides.append(f"callbacks.early_stopping.patience={patience}")
        return overrides

    def _options(self, group: str) -> list[tuple[str, Any]]:
        options = getattr(self, f"{group}_options") or {}
        if not isinstance(options, dict):
            raise ValueError(f"{group}_options must be a dict, got {options!r}")
        for key in options:
            if not isinstance(key, str) or not _OPTION_KEY.fullmatch(key):
                raise ValueError(f"{group}_options: {key!r} is not a config key (a.b.c)")
        return list(options.items())

    def _model_keys(self) -> list[tuple[str, Any]]:
        from omegaconf import OmegaConf

        path = PROJECT / "conf" / "model" / f"{self.model}.yaml"
        top = set(OmegaConf.load(path)) if path.is_file() else set()  # missing: Hydra says so
        return [
            (key if "." in key or key in top or "ranker" not in top else f"ranker.{key}", value)
            for key, value in self._options("model")
        ]

    def _accelerator(self) -> str:
        if self.device not in _ACCELERATORS:
            raise ValueError(f"device must be one of {list(_ACCELERATORS)}, got {self.device!r}")
        return _ACCELERATORS[self.device]

    @staticmethod
    def _int(name: str, value: Any, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
            raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
        return int(value)

    def fit(
        self,
        X,
        y=None,
        *,
        qid=None,
        group=None,
        eval_set=None,
        eval_qid=None,
        eval_group=None,
    ) -> Ranker:
        """Train on ``X, y`` grouped by ``qid`` (one id per row; rows of a query need not be
        contiguous) or ``group`` (sizes of consecutive queries). ``eval_set`` ``(X, y)`` (or a
        list holding one such pair) with ``eval_qid`` / ``eval_group`` picks the epoch by
        NDCG@10 (and stops early with ``early_stopping``); without it the last epoch is kept and
        validation runs on the training rows. ``X`` (and ``eval_set``) may be the path of a
        LETOR file, which holds its labels and qids (``y`` None). Returns ``self``."""
        overrides = self.train_overrides()  # parameters checked before any data is written
        train = self._rows(X, y, qid, group, "X")
        evals = self._eval_rows(eval_set, eval_qid, eval_group, train)
        if evals is None and self.early_stopping is not None:
            raise ValueError("early_stopping needs an eval_set to watch")
        parent = None if self.output_dir is None else Path(self.output_dir).expanduser()
        if parent is not None:
            parent.mkdir(parents=True, exist_ok=True)
        run_dir = Path(tempfile.mkdtemp(prefix="ranker-", dir=parent))
        root = run_dir / "data"
        write_fold(root, train, evals if evals is not None else train)
        if evals is None:  # no epoch to pick: the last one is tested and kept
            overrides.append("~callbacks.model_checkpoint")
        run = [
            *overrides,
            "data=letor",
            f"data.root={hydra_value(str(root))}",
            f"data.cache_dir={hydra_value(str(run_dir / 'cache'))}",
            f"hydra.run.dir={hydra_value(str(run_dir))}",
            f"quiet={hydra_value(not self._verbose())}",
        ]
        try:
            with self._lightning_messages():
                metrics = train_script().run_training(run, run_dir)
        except BaseException:  # a failed fit leaves no folder behind
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
        finally:  # the fold and its cache were only the run's input
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(run_dir / "cache", ignore_errors=True)
        best = run_dir / "checkpoints" / ("best.ckpt" if evals is not None else "last.ckpt")
        self._set_fitted(load_checkpoint(best), best, train.feature_names)
        self.run_dir_ = run_dir
        self.overrides_ = overrides
        self.best_score_ = metrics.pop(MONITOR)
        self.eval_metrics_ = metrics if evals is not None else None
        self._importance_rows = evals if evals is not None else train
        return self

    def _verbose(self) -> bool:
        return sys.stdout.isatty() if self.verbose is None else bool(self.verbose)

    @contextlib.contextmanager
    def _lightning_messages(self) -> Iterator[None]:
        """Lightning's set-up lines (accelerator, seed) and its advice on the logging interval
        (a small set has fewer batches than ``log_every_n_steps``) only when verbose."""
        logger = logging.getLogger("pytorch_lightning")
        level = logger.level
        with warnings.catch_warnings():
            if not self._verbose():
                logger.setLevel(logging.WARNING)
                warnings.filterwarnings("ignore", message=".*smaller than the logging interval")
            try:
                yield
            finally:
                logger.setLevel(level)

    def _rows(
        self, X, y, qid, group, where: str, require_queries: bool = True, n_features=None
    ) -> RankingRows:
        """Checked rows; a LETOR file's path is read with ``n_features`` (the fitted count: a
        file need not write the last features)."""
        if isinstance(X, (str, PathLike)):  # the one place a path becomes arrays
            if y is not None or qid is not None or group is not None:
                raise ValueError(
                    f"{where}: {X} is a data file (LETOR text or Parquet), which holds its "
                    "labels and query ids: pass the path alone (or arrays with y and qid=)"
                )
            X, y, qid = self._read_path(Path(X), n_features)
        elif y is None and require_queries:
            raise ValueError(f"{where}: labels are needed: pass y (graded relevance 0..31)")
        return ranking_rows(
            X,
            y,
            qid=qid,
            group=group,
            where=where,
            qid_column=self.qid_column,
            nan_policy=self.nan_policy,
            require_queries=require_queries,
        )

    def _read_path(self, path: Path, n_features) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A Parquet file or folder of them (``.parquet``; data.md#parquet-data, the pyarrow
        of the ``parquet`` extra) or a LETOR text file, as ``X, y, qid``."""
        if path.suffix == ".parquet" or (path.is_dir() and any(path.glob("*.parquet"))):
            from differank.datamodules.parquet import read_parquet

            return read_parquet(path, nan_policy=self.nan_policy)
        return read_letor(path, nan_policy=self.nan_policy, n_features=n_features)

    def plot_curves(self, path=None):
        """The fit's training loss and validation metrics per epoch, the chosen epoch marked
        (the run folder's ``curves.png``, redrawn): a ``matplotlib.figure.Figure``, also
        written to ``path`` (PNG) when given."""
        from differank.rankers.run.curves import plot_run_curves

        self._fitted()
        if self.run_dir_ is None:
            raise ValueError(
                "this Ranker was loaded from a checkpoint, which keeps no per-epoch metrics: "
                "its curves are the training run folder's curves.png"
            )
        return plot_run_curves(self.run_dir_, path, monitor=MONITOR, mode="max")

    def _eval_rows(self, eval_set, eval_qid, eval_group, train: RankingRows) -> RankingRows | None:
        if eval_set is None:
            if eval_qid is not None or eval_group is not None:
                raise ValueError("eval_qid / eval_group were given without an eval_set")
            return None
        if isinstance(eval_set, (str, PathLike)):
            eval_set = (eval_set, None)
        if isinstance(eval_set, list):
            if len(eval_set) != 1:
                raise ValueError(
                    f"eval_set: one (X, y) pair picks the epoch, got {len(eval_set)} pairs"
                )
            eval_set = eval_set[0]
            eval_qid = eval_qid[0] if isinstance(eval_qid, list) else eval_qid
            eval_group = eval_group[0] if isinstance(eval_group, list) else eval_group
        if not isinstance(eval_set, tuple) or len(eval_set) != 2:
            raise ValueError("eval_set must be an (X, y) pair or a list holding one")
        count = train.features.shape[1]
        rows = self._rows(*eval_set, eval_qid, eval_group, "eval_set X", n_features=count)
        check_same_features(rows, train.features.shape[1], train.feature_names, "eval_set X")
        return rows

    def _set_fitted(self, checkpoint: dict, path: Path, names: list[str] | None) -> None:
        self.scorer_, _ = scorer_from_checkpoint(checkpoint, path)
        self.checkpoint_path_ = path
        self.n_features_in_ = self.scorer_.n_features
        if names is not None:
            self.feature_names_in_ = np.asarray(names, dtype=object)
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        self._feature_importances = None

    # ---- scoring -----------------------------------------------------------------------------

    def _fitted(self) -> None:
        if not hasattr(self, "scorer_"):
            raise NotFittedError(
                "this Ranker is not fitted yet: call fit(X, y, qid=...) or Ranker.load(path)"
            )

    def predict(self, X, qid=None, group=None) -> np.ndarray:
        """One score per row of ``X`` (float64, input order), higher ranks first. ``qid`` /
        ``group`` are needed only by a scorer that reads the whole list (``model=transformer``);
        per-document scores do not depend on them. ``X`` may be a LETOR file's path."""
        self._fitted()
        rows = self._rows(X, None, qid, group, "X", False, self.n_features_in_)
        return self._scores(rows)

    def _scores(self, rows: RankingRows) -> np.ndarray:
        names = getattr(self, "feature_names_in_", None)
        check_same_features(rows, self.n_features_in_, names, "X")
        queries = rows.queries
        if queries is None:
            if self.scorer_.uses_mask:
                raise ValueError(
                    "X: this ranker scores each document in the context of its query's list: "
                    "pass qid= or group="
                )
            queries = np.arange(rows.num_rows, dtype=np.int64) // PREDICT_CHUNK
        split = as_split(rows.features, np.zeros(rows.num_rows, np.float32), queries)
        return score_split(self.scorer_, split, batch_size=EVAL_BATCH).numpy()

    def score(self, X, y=None, qid=None, group=None) -> float:
        """Mean NDCG@10 over the queries of ``X`` under ``convention`` (default ``letor``:
        LETOR 4.0's rules, docs/metrics.md#conventions)."""
        self._fitted()
        rows = self._rows(X, y, qid, group, "X", n_features=self.n_features_in_)
        return self._ndcg10(rows, self._scores(rows))

    def _ndcg10(self, rows: RankingRows, scores: np.ndarray) -> float:
        means = evaluate_arrays(
            scores, rows.labels, rows.queries, ks=(10,), convention=self.convention
        )
        return float(means["ndcg@10"])

    @property
    def feature_importances_(self) -> np.ndarray:
        """float64 [F]: permutation importance, the drop in NDCG@10 on the ``eval_set`` (the
        training rows without one) when feature j's column is shuffled across rows (one
        permutation drawn with ``seed``). A loaded estimator has no rows to permute."""
        self._fitted()
        rows = getattr(self, "_importance_rows", None)
        if rows is None:
            raise AttributeError(
                "feature_importances_ needs the eval_set of fit(); a loaded Ranker has none"
            )
        if self._feature_importances is None:
            base = self._ndcg10(rows, self._scores(rows))
            order = np.random.default_rng(self.seed).permutation(rows.num_rows)
            drops = np.zeros(rows.features.shape[1])
            for column in range(len(drops)):
                shuffled = rows.features.copy()
                shuffled[:, column] = rows.features[order, column]
                moved = RankingRows(shuffled, rows.labels, rows.queries, rows.feature_names)
                drops[column] = base - self._ndcg10(rows, self._scores(moved))
            self._feature_importances = drops
        return self._feature_importances

    @property
    def coef_(self) -> np.ndarray:
        """float64 [F]: a linear scorer's weights (``model=linear``, and ConeRank's serving
        form), on the normalised features the scorer sees (``transform``, then z-score)."""
        self._fitted()
        ranker = self.scorer_.ranker
        if not isinstance(ranker, LinearRanker):
            raise AttributeError(f"coef_: the scorer is a {type(ranker).__name__}, not linear")
        return ranker.linear.weight.detach().double().reshape(-1).numpy()

    # ---- files -------------------------------------------------------------------------------

    def save(self, path) -> Path:
        """The fitted model as one checkpoint file: the run's checkpoint, which
        ``differank.load_ranker``, ``python train.py task=predict|export ckpt_path=...`` and
        :meth:`load` read, with the estimator's parameters added to its record."""
        self._fitted()
        checkpoint = load_checkpoint(self.checkpoint_path_)
        try:  # plain values only: a checkpoint is read with weights_only=True
            params = json.loads(json.dumps(self.get_params()))
        except TypeError as error:
            raise ValueError(f"a parameter is not a plain value ({error})") from None
        names = getattr(self, "feature_names_in_", None)
        checkpoint["differank"]["estimator"] = {
            "params": params,
            "feature_names": None if names is None else [str(n) for n in names],
        }
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        return write_file(Path(path).expanduser(), buffer.getvalue())

    @classmethod
    def load(cls, path) -> Ranker:
        """A fitted estimator from :meth:`save`'s file or any ``train.py`` checkpoint (then
        with default parameters besides what the scorer holds)."""
        path = Path(path).expanduser()
        checkpoint = load_checkpoint(path)
        saved = checkpoint.get("differank", {}).get("estimator") or {}
        params = saved.get("params") or {}
        ranker = cls(**{k: v for k, v in params.items() if k in cls._param_names()})
        ranker._set_fitted(checkpoint, path, saved.get("feature_names"))
        ranker.run_dir_ = None
        return ranker


class NotFittedError(ValueError, AttributeError):
    """A fitted attribute or method of a :class:`Ranker` that has not been fitted (what
    scikit-learn's ``NotFittedError`` is: both a ValueError and an AttributeError)."""


def check_same_features(rows: RankingRows, n_features: int, names, where: str) -> None:
    """The features the model was fitted on: the count, and a DataFrame's column names."""
    count = rows.features.shape[1]
    if count != n_features:
        raise ValueError(
            f"{where} has {count} features, but the Ranker was fitted with {n_features}"
        )
    if names is not None and rows.feature_names is not None:
        if list(rows.feature_names) != [str(n) for n in names]:
            raise ValueError(
                f"{where}: columns {rows.feature_names} are not the fitted features "
                f"{[str(n) for n in names]} (the same names, in the same order)"
            )


def as_split(features: np.ndarray, labels: np.ndarray, queries: np.ndarray) -> LetorSplit:
    """Rows in memory as the split ``score_split`` scores (queries by first appearance)."""
    from differank.datamodules.reader import group_queries

    query_ids, order, lengths = group_queries(queries)
    return LetorSplit(
        name="test",
        files=[],
        features=features,
        labels=labels,
        qids=queries,
        query_ids=query_ids,
        query_rows=np.split(order, np.cumsum(lengths)[:-1]),
        queries=np.arange(len(query_ids)),
        sources=[],
    )


def write_fold(root: Path, train: RankingRows, evals: RankingRows) -> None:
    """``root/Fold1/{train,vali,test}.txt``: the training rows, and the evaluation rows as
    validation and test (the run's test table is then the eval set's)."""
    folder = root / "Fold1"
    write_letor(folder / "train.txt", train.features, train.labels, train.queries)
    write_letor(folder / "vali.txt", evals.features, evals.labels, evals.queries)
    shutil.copyfile(folder / "vali.txt", folder / "test.txt")
