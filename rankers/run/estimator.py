"""``differank.Ranker``: a scikit-learn estimator over differank's core, training from memory.

``fit`` checks the rows it is given (:mod:`~differank.rankers.run.ranker_inputs`), hands them to
:class:`~differank.datamodules.in_memory.InMemoryDataModule` (the LETOR data module's own value
rules, grouping, transform and normalization, no file written) and trains the module the
configs ``conf/loss/<loss>.yaml`` and ``conf/model/<model>.yaml`` describe, with the data
options of ``conf/data/letor.yaml``, through
:func:`~differank.rankers.training.fitting.fit_in_memory` (the best ``eval_set`` epoch kept in
memory). ``python train.py <ranker.train_overrides()> data=letor data.root=<the same rows as a
LETOR fold>`` trains the same model. The fitted model is a checkpoint held in memory, the one
``save`` writes and ``differank.load_ranker`` and ``task=predict|export`` read; ``predict``
scores rows with its raw-feature scorer, as ``task=predict files=[...]`` does. No file is
written unless ``output_dir`` is given. docs/python.md has the whole reference.

Public API::

    Ranker(loss="lambdaloss", loss_options=None, model="mlp", model_options=None,
           feature_transform="none", ...)
      .fit(X, y, *, qid=None, group=None, sample_weight=None, eval_set=None, eval_qid=None,
           eval_group=None)
      .predict(X, qid=None, group=None) -> float64 [N]
      .score(X, y, qid=None, group=None) -> NDCG@10 (``convention``)
      .save(path), Ranker.load(path), get_params / set_params (scikit-learn's)
      .plot_curves(path=None) -> matplotlib Figure
      fitted: n_features_in_, feature_names_in_, history_, best_score_, best_epoch_,
              eval_metrics_, eval_results_, scorer_, checkpoint_, run_dir_, checkpoint_path_,
              overrides_, feature_importances_, coef_ (linear)
"""

from __future__ import annotations

import copy
import functools
import io
import re
import sys
import tempfile
import warnings
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from omegaconf import OmegaConf
from sklearn.exceptions import NotFittedError

from differank.datamodules.arrays import read_letor
from differank.datamodules.atomic_files import write_file
from differank.datamodules.in_memory import InMemoryDataModule, SplitArrays
from differank.datamodules.letor_split import LetorSplit
from differank.rankers.checkpoints import (
    checkpoint_scorer,
    data_fingerprint,
    load_checkpoint,
    serving_record,
    serving_scorer,
)
from differank.rankers.metrics.evaluate import evaluate_arrays
from differank.rankers.run.ranker_inputs import RankingRows, ranking_rows
from differank.rankers.run.scoring import score_split
from differank.rankers.scorers.linear import LinearRanker

if TYPE_CHECKING:  # scikit-learn ships no types: a base of type Any would make a Ranker any type
    from typing_extensions import Self

    class _Estimator:
        """What the Ranker inherits from ``sklearn.base.BaseEstimator``, as type checkers see it."""

        def get_params(self, deep: bool = True) -> dict[str, Any]: ...
        def set_params(self, **params: Any) -> Self: ...
        def set_fit_request(self, **requests: bool | str | None) -> Self: ...
        def set_score_request(self, **requests: bool | str | None) -> Self: ...
        def set_predict_request(self, **requests: bool | str | None) -> Self: ...
        def __sklearn_tags__(self) -> Any: ...
        @classmethod
        def _get_param_names(cls) -> list[str]: ...

else:
    from sklearn.base import BaseEstimator as _Estimator

MONITOR = "val/ndcg@10"  # what picks the epoch: the metric score() reports
PREDICT_CHUNK = 1024  # rows per padded list when per-document scores need no queries
EVAL_BATCH = 128  # queries per scoring batch: conf/data/letor.yaml's eval_batch_size
KS = (1, 3, 5, 10)  # the cut-offs of eval_metrics_ (the run's test table)
_OPTION_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_CONFIG_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_/\-]*")
_ACCELERATORS = {"auto": "auto", "cpu": "cpu", "cuda": "gpu", "gpu": "gpu", "mps": "mps"}
# conf/data/letor.yaml's keys that name files (the rows are given as arrays)
_FILE_OPTIONS = (
    "_target_", "root", "fold", "format", "label_column", "qid_column", "feature_columns",
    "docid_column", "cache_dir", "verify_cache_hash",
)  # fmt: skip


@functools.cache
def _composed(loss: str, model: str) -> dict[str, Any]:
    """``conf/train.yaml`` with ``loss``, ``model`` and ``data=letor``, resolved, as plain
    values (composed once per pair; callers copy it)."""
    from differank.rankers.run.runs import compose_config

    cfg = compose_config([f"loss={loss}", f"model={model}", "data=letor"], run_dir=Path("."))
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def literal(value: Any) -> Any:
    """``value`` with every ``${`` of its strings escaped: a parameter is a value, never an
    interpolation that OmegaConf would resolve (``"${oc.env:SECRET}"`` stays that string)."""
    if isinstance(value, str):
        return value.replace("${", "\\${")
    if isinstance(value, (list, tuple)):
        return [literal(v) for v in value]
    if isinstance(value, dict):
        return {k: literal(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        return value.item()
    return value


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


def _set(config: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = config
    for key in parents:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ValueError(f"{dotted}: {key} is not a config group with keys")
    node[leaf] = value


class Ranker(_Estimator):
    """A learning-to-rank estimator with scikit-learn's conventions, trained from memory by
    differank's data module, Lightning module and losses (docs/python.md).

    Args:
        loss: a ``conf/loss/`` option (``lambdaloss``, ``listnet``, ``domination``, ...).
        loss_options: that config's keys, e.g. ``{"weighting": "ndcgLoss2"}``.
        model: a ``conf/model/`` option (``mlp``, ``linear``, ``transformer``, ...).
        model_options: keys of that config (``{"optimizer.lr": 0.01}``); a plain name that is
            not a top-level key is the scorer's (``{"hidden": [128, 64]}`` sets
            ``model.ranker.hidden``).
        feature_transform: ``data.transform`` (``none``, ``log1p``, ``gaussrank``); the name
            ``transform`` is deprecated (scikit-learn reads a ``transform`` attribute as a
            transformer's method).
        max_epochs, batch_size (queries per batch), lr, weight_decay: the trainer's, the data's
            and the optimizer's (None: the model config's own).
        early_stopping: None (train ``max_epochs``, keep the best ``eval_set`` epoch) or the
            patience in epochs (needs ``eval_set``).
        seed, device (``auto``, ``cpu``, ``cuda``), precision (``32-true``, ``bf16-mixed``...).
        n_jobs: torch's CPU threads while fitting (None: the process's setting). One by
            default: the default models' steps are small, and on a shared CPU two threads
            that wait for each other train several times slower
            (benchmarks/results/doors.md).
        verbose: one line per epoch on stdout (epoch, training loss, validation NDCG@10, the
            best so far); False prints nothing; None: only when stdout is a terminal.
        nan_policy: the reader's ``error`` | ``zero`` | ``allow`` for NaN / inf features.
        convention: the NDCG convention of ``score`` and of validation (docs/metrics.md).
        qid_column: a DataFrame column holding the query id (not a feature).
        output_dir: None (nothing is written), or a folder where each fit writes a run folder
            with its checkpoint (``model.ckpt``, what :meth:`save` writes).

    Every parameter is a literal value: strings are never resolved as interpolations.

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

    # fitted state, set by fit or load (annotations only: scikit-learn's rule, nothing in init)
    checkpoint_: dict[str, Any]
    history_: list[dict[str, float]] | None

    def __init__(
        self,
        loss: str = "lambdaloss",
        loss_options: dict | None = None,
        model: str = "mlp",
        model_options: dict | None = None,
        feature_transform: str = "none",
        max_epochs: int = 30,
        batch_size: int = 32,
        lr: float | None = None,
        weight_decay: float | None = None,
        early_stopping: int | None = None,
        seed: int = 0,
        device: str = "auto",
        precision: str = "32-true",
        n_jobs: int | None = 1,
        verbose: bool | int | None = None,
        nan_policy: str = "error",
        convention: str = "letor",
        qid_column: str | None = "qid",
        output_dir: str | PathLike[str] | None = None,
        **deprecated: Any,
    ) -> None:
        self.loss = loss
        self.loss_options = loss_options
        self.model = model
        self.model_options = model_options
        self.feature_transform = feature_transform
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.early_stopping = early_stopping
        self.seed = seed
        self.device = device
        self.precision = precision
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.nan_policy = nan_policy
        self.convention = convention
        self.qid_column = qid_column
        self.output_dir = output_dir
        if "transform" in deprecated:  # renamed in 0.3.0
            warnings.warn(
                "Ranker(transform=...) is deprecated and will be removed in 0.4.0: use "
                "Ranker(feature_transform=...)",
                FutureWarning,
                stacklevel=2,
            )
            self.feature_transform = deprecated.pop("transform")
        if deprecated:
            raise TypeError(
                f"Ranker() got unexpected keyword argument(s) {sorted(deprecated)}; its "
                f"parameters: {sorted(self._get_param_names())}"
            )

    def __sklearn_tags__(self):
        """scikit-learn's tags: a supervised estimator of no classifier / regressor kind."""
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        tags.input_tags.sparse = True
        tags.input_tags.allow_nan = self.nan_policy != "error"
        return tags

    # ---- the configuration -------------------------------------------------------------------

    def train_overrides(self) -> list[str]:
        """The ``python train.py`` overrides of this estimator's parameters, without the data's
        place: ``python train.py <these> data=letor data.root=FOLDER`` trains the same model on
        the same rows written as a LETOR fold (``Fold1/{train,vali,test}``)."""
        settings = self._settings()
        groups = [f"{key}={value}" for key, value in settings[:2]]  # checked config names
        return (
            groups
            + [f"{key}={hydra_value(value)}" for key, value in settings[2:]]
            + [
                "logger=csv",
                "~callbacks.early_stopping"
                if self.early_stopping is None
                else f"callbacks.early_stopping.patience={self._patience()}",
            ]
        )

    def _settings(self) -> list[tuple[str, Any]]:
        """``(dotted config key, value)`` of every parameter, checked; group choices first."""
        settings: list[tuple[str, Any]] = [
            ("loss", self._config_name("loss", self.loss)),
            ("model", self._config_name("model", self.model)),
        ]
        settings += [(f"loss.{key}", value) for key, value in self._options("loss")]
        settings += [(f"model.{key}", value) for key, value in self._model_keys()]
        seed = self._int("seed", self.seed, 0)
        settings += [
            ("data.transform", self._text("feature_transform", self.feature_transform)),
            ("data.batch_size", self._int("batch_size", self.batch_size, 1)),
            ("data.nan_policy", self._text("nan_policy", self.nan_policy)),
            ("trainer.max_epochs", self._int("max_epochs", self.max_epochs, 1)),
            ("seed", seed),
            ("trainer.accelerator", self._accelerator()),
            ("trainer.precision", self._text("precision", self.precision)),
            ("metrics.convention", self._text("convention", self.convention)),
            ("monitor", MONITOR),
        ]
        for name in ("lr", "weight_decay"):
            value = getattr(self, name)
            if value is not None:
                settings.append((f"model.optimizer.{name}", self._float(name, value)))
        return settings

    def _config(self) -> dict[str, Any]:
        """The run's config: ``conf/train.yaml`` composed with the loss, the model and
        ``data=letor``, every parameter set as a literal value."""
        settings = self._settings()
        config = copy.deepcopy(_composed(settings[0][1], settings[1][1]))
        for key, value in settings[2:]:
            _set(config, key, literal(value))
        config["data"]["seed"] = config["seed"]  # conf/data/*.yaml: seed: ${seed}
        return config

    @staticmethod
    def _config_name(group: str, name: Any) -> str:
        if not isinstance(name, str) or not _CONFIG_NAME.fullmatch(name):
            raise ValueError(f"{group} must name a conf/{group}/ option, got {name!r}")
        return name

    def _options(self, group: str) -> list[tuple[str, Any]]:
        options = getattr(self, f"{group}_options") or {}
        if not isinstance(options, dict):
            raise ValueError(f"{group}_options must be a dict, got {options!r}")
        for key in options:
            if not isinstance(key, str) or not _OPTION_KEY.fullmatch(key):
                raise ValueError(f"{group}_options: {key!r} is not a config key (a.b.c)")
        return list(options.items())

    def _model_keys(self) -> list[tuple[str, Any]]:
        top = set(_composed(self._config_name("loss", self.loss), self.model)["model"])
        return [
            (key if "." in key or key in top or "ranker" not in top else f"ranker.{key}", value)
            for key, value in self._options("model")
        ]

    def _accelerator(self) -> str:
        if self.device not in _ACCELERATORS:
            raise ValueError(f"device must be one of {list(_ACCELERATORS)}, got {self.device!r}")
        return _ACCELERATORS[self.device]

    def _patience(self) -> int:
        return self._int("early_stopping", self.early_stopping, 1)

    @staticmethod
    def _int(name: str, value: Any, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
            raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
        return int(value)

    @staticmethod
    def _float(name: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
            raise ValueError(f"{name} must be a number, got {value!r}")
        return float(value)

    @staticmethod
    def _text(name: str, value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError(f"{name} must be a string, got {value!r}")
        return value

    # ---- training ----------------------------------------------------------------------------

    def fit(
        self,
        X,
        y=None,
        *,
        qid=None,
        group=None,
        sample_weight=None,
        eval_set=None,
        eval_qid=None,
        eval_group=None,
    ) -> Ranker:
        """Train on ``X, y`` grouped by ``qid`` (one id per row; rows of a query need not be
        contiguous) or ``group`` (sizes of consecutive queries). ``sample_weight`` weighs each
        query's loss: one weight per row (LightGBM's form: a query weighs the mean of its rows'
        weights) or one per query (XGBoost's, in order of first appearance). ``eval_set``: an
        ``(X, y)`` pair or a list of them, with ``eval_qid`` / ``eval_group`` (a list, one per
        pair); the first picks the epoch by NDCG@10 (and stops early with
        ``early_stopping``), every one is scored at the end (``eval_results_``). Without one
        the last epoch is kept and no validation runs. ``X`` (and each ``eval_set`` entry) may
        be the path of a LETOR or Parquet file, which holds its labels and qids (``y`` None).
        Returns ``self``."""
        from differank.rankers.training.fitting import fit_in_memory

        config = self._config()  # parameters checked before any data is read
        patience = None if self.early_stopping is None else self._patience()
        threads = None if self.n_jobs is None else self._int("n_jobs", self.n_jobs, 1)
        train = self._rows(X, y, qid, group, "X")
        evals = self._eval_rows(eval_set, eval_qid, eval_group, train)
        if not evals and patience is not None:
            raise ValueError("early_stopping needs an eval_set to watch")
        weights = query_weights(sample_weight, train)
        data_options = {k: v for k, v in config["data"].items() if k not in _FILE_OPTIONS}
        datamodule = InMemoryDataModule(
            split_arrays(train, "X", weights),
            split_arrays(evals[0], "eval_set[0] X") if evals else None,
            **data_options,
        )
        weighted = {} if weights is None else {"query_weights": True}  # gradient models only

        def build_module():
            return _built(
                "model",
                config["model"],
                loss=_built("loss", config["loss"]),
                n_features=datamodule.n_features,
                metric_convention=config["metrics"]["convention"],
                **weighted,
            )

        guards = [_built("callbacks", config["callbacks"]["finite_guard"])]
        if evals:
            guards.append(_built("callbacks", config["callbacks"]["validation_signal"]))
        result = fit_in_memory(
            build_module,
            datamodule,
            max_epochs=config["trainer"]["max_epochs"],
            seed=config["seed"],
            monitor=MONITOR if evals else None,
            patience=patience,
            accelerator=config["trainer"]["accelerator"],
            precision=config["trainer"]["precision"],
            deterministic=config["trainer"]["deterministic"],
            callbacks=guards,
            verbose=self._verbose(),
            threads=threads,
        )
        module = result.module.cpu().eval()
        serving = serving_record(datamodule)
        self.checkpoint_ = {
            "epoch": result.best_epoch if result.best_epoch is not None else result.epochs - 1,
            "state_dict": module.state_dict(),
            "differank": {
                "config": OmegaConf.to_container(OmegaConf.create(config), resolve=True),
                "monitor": MONITOR,
                "data": data_fingerprint(datamodule),
                "serving": serving,
                "validation": _validation(result.history, result.best_epoch),
            },
        }
        self.scorer_ = serving_scorer(module.ranker, serving).eval()  # type: ignore[arg-type]
        self.n_features_in_ = self.scorer_.n_features
        self._set_feature_names(train.feature_names)
        self.history_ = result.history
        self.best_epoch_ = result.best_epoch
        self.best_score_ = result.best_score
        self.eval_results_ = [self._metrics(rows) for rows in evals]
        self.eval_metrics_ = self.eval_results_[0] if evals else None
        self.overrides_ = self.train_overrides()
        self._importance_rows = evals[0] if evals else train
        self._feature_importances: np.ndarray | None = None
        self.run_dir_ = self.checkpoint_path_ = None
        if self.output_dir is not None:
            self.run_dir_ = self._new_run_folder()
            self.checkpoint_path_ = self.save(self.run_dir_ / "model.ckpt")
        return self

    def _new_run_folder(self) -> Path:
        parent = Path(self.output_dir).expanduser()  # type: ignore[arg-type]
        parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix="ranker-", dir=parent))

    def _verbose(self) -> bool:
        return sys.stdout.isatty() if self.verbose is None else bool(self.verbose)

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
            raise ValueError(
                f"{where}: labels are needed: Ranker requires y to be passed, but the target y "
                "is None (graded relevance 0..31)"
            )
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
        """The fit's training loss and validation metrics per epoch, the chosen epoch marked:
        a ``matplotlib.figure.Figure``, also written to ``path`` (PNG) when given. Drawn only
        when asked for (a fit draws nothing)."""
        from differank.rankers.run.curves import history_curves, plot_curves

        self._fitted()
        if getattr(self, "history_", None) is None:
            raise ValueError(
                "this Ranker was loaded from a checkpoint, which keeps no per-epoch metrics: "
                "its curves are those of the fit that trained it"
            )
        curves = history_curves(self.history_, monitor=MONITOR, mode="max")
        return plot_curves(curves, path, title="differank.Ranker")

    def _eval_rows(self, eval_set, eval_qid, eval_group, train: RankingRows) -> list[RankingRows]:
        """The ``eval_set`` pairs as checked rows (the first picks the epoch)."""
        if eval_set is None:
            if eval_qid is not None or eval_group is not None:
                raise ValueError("eval_qid / eval_group were given without an eval_set")
            return []
        single = not isinstance(eval_set, list)
        pairs = [eval_set] if single else list(eval_set)
        if not pairs:
            raise ValueError("eval_set is an empty list: pass (X, y) pairs, or None")
        qids = _per_pair("eval_qid", eval_qid, len(pairs), single)
        groups = _per_pair("eval_group", eval_group, len(pairs), single)
        count = train.features.shape[1]
        rows = []
        for index, pair in enumerate(pairs):
            where = f"eval_set[{index}] X"
            if isinstance(pair, (str, PathLike)):
                pair = (pair, None)
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise ValueError(f"eval_set[{index}] must be an (X, y) pair or a data file path")
            checked = self._rows(*pair, qids[index], groups[index], where, n_features=count)
            check_same_features(checked, count, train.feature_names, where)
            rows.append(checked)
        return rows

    def _set_feature_names(self, names: list[str] | None) -> None:
        if names is not None:
            self.feature_names_in_ = np.asarray(names, dtype=object)
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_

    # ---- scoring -----------------------------------------------------------------------------

    def _fitted(self) -> None:
        if not hasattr(self, "scorer_"):
            raise NotFittedError(
                "This Ranker instance is not fitted yet. Call 'fit' with appropriate arguments "
                "(fit(X, y, qid=...)) or Ranker.load(path) before using this estimator."
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
        LETOR 4.0's rules, docs/metrics.md#conventions). In scikit-learn's model selection on
        arrays, ``qid`` reaches ``score`` through metadata routing
        (``sklearn.set_config(enable_metadata_routing=True)`` and
        ``Ranker(...).set_fit_request(qid=True).set_score_request(qid=True)``)."""
        self._fitted()
        if not isinstance(X, (str, PathLike)) and qid is None and group is None:
            frame_qid = self.qid_column is not None and _has_column(X, self.qid_column)
            if not frame_qid:
                raise ValueError(
                    "score needs the query of each row: pass qid= or group=; in scikit-learn's "
                    "model selection (GridSearchCV, cross_val_score) on arrays, route it: "
                    "sklearn.set_config(enable_metadata_routing=True) and "
                    "Ranker(...).set_fit_request(qid=True).set_score_request(qid=True), then "
                    "search.fit(X, y, groups=qid, qid=qid)"
                )
        rows = self._rows(X, y, qid, group, "X", n_features=self.n_features_in_)
        return float(self._metrics_at(rows, (10,))["ndcg@10"])

    def _metrics(self, rows: RankingRows) -> dict[str, float]:
        return self._metrics_at(rows, KS)

    def _metrics_at(self, rows: RankingRows, ks: tuple[int, ...]) -> dict[str, float]:
        scores = self._scores(rows)
        means = evaluate_arrays(
            scores, rows.labels, rows.queries, ks=ks, convention=self.convention
        )
        return {name: float(value) for name, value in means.items()}

    @property
    def feature_importances_(self) -> np.ndarray:
        """float64 [F]: permutation importance, the drop in NDCG@10 on the first ``eval_set``
        (the training rows without one) when feature j's column is shuffled across rows (one
        permutation drawn with ``seed``). A loaded estimator has no rows to permute."""
        self._fitted()
        rows = getattr(self, "_importance_rows", None)
        if rows is None:
            raise AttributeError(
                "feature_importances_ needs the eval_set of fit(); a loaded Ranker has none"
            )
        if self._feature_importances is None:
            base = self._metrics_at(rows, (10,))["ndcg@10"]
            order = np.random.default_rng(self.seed).permutation(rows.num_rows)
            drops = np.zeros(rows.features.shape[1])
            for column in range(len(drops)):
                shuffled = rows.features.copy()
                shuffled[:, column] = rows.features[order, column]
                moved = RankingRows(shuffled, rows.labels, rows.queries, rows.feature_names)
                drops[column] = base - self._metrics_at(moved, (10,))["ndcg@10"]
            self._feature_importances = drops
        return self._feature_importances

    @property
    def coef_(self) -> np.ndarray:
        """float64 [F]: a linear scorer's weights (``model=linear``, and ConeRank's serving
        form), on the normalised features the scorer sees (``feature_transform``, then
        z-score)."""
        self._fitted()
        ranker = self.scorer_.ranker
        if not isinstance(ranker, LinearRanker):
            raise AttributeError(f"coef_: the scorer is a {type(ranker).__name__}, not linear")
        return ranker.linear.weight.detach().double().reshape(-1).numpy()

    # ---- files -------------------------------------------------------------------------------

    def save(self, path: str | PathLike[str]) -> Path:
        """The fitted model as one checkpoint file (written whole or not at all), which
        ``differank.load_ranker``, ``differank task=predict|export ckpt_path=...`` and
        :meth:`load` read, with the estimator's parameters added to its record."""
        self._fitted()
        checkpoint: dict[str, Any] = dict(self.checkpoint_)
        try:  # plain values only: a checkpoint is read with weights_only=True
            params = _plain(self.get_params())
        except TypeError as error:
            raise ValueError(f"a parameter is not a plain value ({error})") from None
        names = getattr(self, "feature_names_in_", None)
        checkpoint["differank"] = {
            **checkpoint["differank"],
            "estimator": {
                "params": params,
                "feature_names": None if names is None else [str(n) for n in names],
            },
        }
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        return write_file(Path(path).expanduser(), buffer.getvalue())

    @classmethod
    def load(cls, path: str | PathLike[str]) -> Ranker:
        """A fitted estimator from :meth:`save`'s file or any ``train.py`` checkpoint (then
        with default parameters besides what the scorer holds). The estimator record is
        checked entry by entry: a tampered one is refused naming the entry."""
        path = Path(path).expanduser()
        checkpoint = load_checkpoint(path)
        params, names = estimator_record(checkpoint, path)
        ranker = cls(**params)
        ranker.scorer_ = checkpoint_scorer(checkpoint, path)
        ranker.checkpoint_ = checkpoint
        ranker.checkpoint_path_ = path
        ranker.n_features_in_ = ranker.scorer_.n_features
        if names is not None and len(names) != ranker.n_features_in_:
            raise ValueError(
                f"{path}: estimator['feature_names'] has {len(names)} names for "
                f"{ranker.n_features_in_} features; the file was altered: save it again"
            )
        ranker._set_feature_names(names)
        ranker.run_dir_ = None
        ranker.history_ = None
        ranker._feature_importances = None
        return ranker


def estimator_record(checkpoint: dict, path: Path) -> tuple[dict[str, Any], list[str] | None]:
    """The estimator's parameters and feature names saved with ``checkpoint`` (none: a
    ``train.py`` checkpoint), each entry checked: a known parameter name with a plain value,
    names as strings; anything else is refused naming the entry."""
    record = checkpoint.get("differank")
    saved = record.get("estimator") if isinstance(record, dict) else None
    if saved is None:
        return {}, None
    if not isinstance(saved, dict):
        raise ValueError(f"{path}: estimator is a {type(saved).__name__}, not a record")
    params = saved.get("params") or {}
    if not isinstance(params, dict):
        raise ValueError(f"{path}: estimator['params'] is not a dict of parameters")
    known = Ranker._get_param_names()
    for name, value in params.items():
        if name not in known:
            raise ValueError(f"{path}: estimator['params'][{name!r}] is not a Ranker parameter")
        try:
            _plain(value)
        except TypeError:
            raise ValueError(
                f"{path}: estimator['params'][{name!r}] is not a plain value ({value!r})"
            ) from None
    names = saved.get("feature_names")
    if names is not None and (
        not isinstance(names, list) or not all(isinstance(n, str) for n in names)
    ):
        raise ValueError(f"{path}: estimator['feature_names'] is not a list of strings")
    return params, names


def _built(group: str, node: dict[str, Any], **arguments: Any) -> Any:
    """The object a config node describes; a refused value is the ValueError or TypeError of
    the class that refused it, prefixed with the group (not Hydra's wrapper)."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate(node, **arguments)
    except InstantiationException as error:
        cause = error.__cause__
        if isinstance(cause, ValueError):
            raise ValueError(f"{group} ({node.get('_target_')}): {cause}") from cause
        if isinstance(cause, TypeError):
            raise TypeError(f"{group} ({node.get('_target_')}): {cause}") from cause
        raise


def _plain(value: Any) -> Any:
    """``value`` as JSON's plain values (TypeError for anything else)."""
    import json

    return json.loads(json.dumps(value))


def _per_pair(name: str, value, pairs: int, single: bool) -> list:
    """``eval_qid`` / ``eval_group`` as one entry per ``eval_set`` pair."""
    if value is None:
        return [None] * pairs
    if single:
        return [value]
    if not isinstance(value, list) or len(value) != pairs:
        raise ValueError(
            f"{name} must be a list with one entry per eval_set pair ({pairs}), got {value!r}"
        )
    return value


def _has_column(X, name: str) -> bool:
    columns = getattr(X, "columns", None)
    return columns is not None and name in [str(c) for c in columns]


def _validation(history: list[dict[str, float]], epoch: int | None) -> dict[str, float]:
    """The validation metrics of ``epoch`` (a checkpoint's ``validation`` entry)."""
    for row in history:
        if epoch is not None and int(row["epoch"]) == epoch:
            return {k: v for k, v in row.items() if k.startswith("val/")}
    return {}


def query_weights(sample_weight, rows: RankingRows) -> np.ndarray | None:
    """float64 [Q]: each query's weight, in order of first appearance, from one weight per row
    (LightGBM's form: the mean of the query's rows) or one per query (XGBoost's)."""
    if sample_weight is None:
        return None
    if isinstance(sample_weight, torch.Tensor):
        sample_weight = sample_weight.detach().cpu().numpy()
    weights = np.asarray(sample_weight)
    if weights.dtype.kind not in "biuf" or weights.ndim != 1:
        raise ValueError(
            f"sample_weight must be a 1-D array of numbers, got dtype {weights.dtype} and "
            f"shape {weights.shape}"
        )
    weights = weights.astype(np.float64)
    if rows.queries is None:
        raise ValueError("sample_weight weighs queries: pass qid= or group=")
    queries = int(rows.queries.max()) + 1
    if len(weights) == rows.num_rows:
        sums = np.bincount(rows.queries, weights=weights, minlength=queries)
        weights = sums / np.bincount(rows.queries, minlength=queries)
    elif len(weights) != queries:
        raise ValueError(
            f"sample_weight has {len(weights)} values: give one per row ({rows.num_rows}) or "
            f"one per query ({queries})"
        )
    bad = ~np.isfinite(weights) | (weights < 0)
    if bad.any():
        raise ValueError(
            f"sample_weight: query {int(np.argmax(bad))} has weight {weights[bad][0]}; weights "
            "must be finite and non-negative"
        )
    if not weights.any():
        raise ValueError("sample_weight: every weight is zero: there is nothing to train on")
    return weights


def split_arrays(rows: RankingRows, name: str, weights: np.ndarray | None = None) -> SplitArrays:
    """Checked rows as the in-memory data module's split (query codes as its qids)."""
    assert rows.labels is not None and rows.queries is not None  # fit's rows have both
    return SplitArrays(rows.features, rows.labels, rows.queries, name, weights)


def check_same_features(rows: RankingRows, n_features: int, names, where: str) -> None:
    """The features the model was fitted on: the count, and a DataFrame's column names."""
    count = rows.features.shape[1]
    if count != n_features:
        raise ValueError(
            f"{where} has {count} features, but Ranker is expecting {n_features} features as "
            "input (the count it was fitted with)"
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


__all__ = ["Ranker", "NotFittedError", "query_weights", "hydra_value", "literal"]
