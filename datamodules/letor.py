"""LETOR DataModule: read a fold, cache, normalise, group queries, batch.

Public API::

    LetorDataModule(root, fold=1, normalization="zscore", batch_size=32, eval_batch_size=64,
                    max_list=None, bucket_by_length=True, nan_policy="error", null_value=None,
                    label_range=None, unseen_features="error",
                    drop_train_queries_without_pairs=False, cache_dir=None,
                    verify_cache_hash=False, num_workers=0, seed=0, transform="none",
                    batches_on_device=True, format="letor", label_column="label",
                    qid_column="qid", feature_columns=None, docid_column="docid")
      .n_features              F = max feature index over the fold's files (loads lazily)
      .label_levels            sorted distinct labels over all splits (loads lazily)
      .feature_mean / .feature_std   zscore statistics of the training split (else None)
      .feature_transform       the fitted ``transform`` as a torch module (else None)
      .setup(stage=None)       idempotent; parses (or loads the cache)
      .train_dataloader() / .val_dataloader() / .test_dataloader() / .predict_dataloader()
      .full_batch(split)       all queries of "train" | "val" | "test" as one padded batch
      .replace_training_lists(tensors)   serve other training lists (clicks: docs/clicks.md)
      .split_files(split)      source files in concatenation order (no parsing)
      .num_rows(split), .split_data(split) -> LetorSplit
      .file_sha256(split)      sha256 of each source file, from the cache (no re-read)

The files of a fold are :mod:`differank.datamodules.folds`' (``resolve_fold_files``,
``MissingLetorFileError``); batches are sampled by
:mod:`differank.datamodules.query_batches`' ``ShardedQueryBatchSampler``. A split's rows
are numbered 0.. in the concatenation of its files (``doc_index``). Rows of one qid form ONE
query even when not contiguous, in file order; queries are ordered by first appearance.

Batches: each split is held as flat tensors (:mod:`differank.datamodules.split_tensors`) and a
batch is one index gather into padded ``[B, L, F]`` with L from a few static lengths. On CPU the
tensors are the memory-mapped cache itself; on a GPU (``batches_on_device=True``, the default) the
split is copied onto the training device once when it takes at most half the free device memory,
and batches are gathered there; otherwise (a split too large, or ``batches_on_device=False``)
they are gathered on the host and copied per batch from pinned memory (streaming).

Every check runs when the data is first loaded (``setup``, or ``n_features`` which ``train.py``
reads before building the model), so bad data fails before the first training step, with
``file:line`` or file and feature in the message. The text rules are
:mod:`differank.datamodules.reader`'s. F is the largest feature index written in the training files;
a feature written in a validation or test file but in no training file (its weight would never be
trained) is an error, or with ``unseen_features="drop"`` it is dropped (set to 0) and the count
logged. A training split without any preference pair (no query with two distinct labels) logs
a warning; ``trainer.max_epochs=0`` is refused at ``setup("fit")``.

Features are float32 end to end: each split's normalised matrix is cached (keyed by the files'
content hashes and the options) and memory-mapped, so a warm start reads no text and copies no
feature matrix, and processes on one machine (DDP ranks, sweep jobs) share one copy.

``format`` "letor" reads ``root`` as a LETOR folder (:mod:`differank.datamodules.folds`);
"query_files" reads rows without qid and their ``<file>.query`` group sizes (LightGBM's
convention), pooled and split by query into five rotated folds once, as LETOR parts in the cache
(:mod:`differank.datamodules.query_files`); errors in a row name its source file and line.
"parquet" reads ``root/FoldN/{train,vali,test}.parquet`` (or such folders of ``*.parquet``) with
:mod:`differank.datamodules.parquet`, columns named by ``label_column``, ``qid_column`` and
``feature_columns`` (None: every other column) and ``docid_column`` (read when present); errors
name the file, row group, row and column.

Options: ``normalization`` "none" | "zscore" (train mean/std; std 0 -> centred only) |
"query_minmax" (LETOR QueryLevelNorm, 0 where max == min); statistics are accumulated in
float64, applied in row blocks. ``transform`` "none" | "log1p" (sign(x)·log1p(|x|)) |
"gaussrank" (Φ⁻¹ of the training split's per-feature empirical CDF) is applied to the raw
features before the normalization, fitted on the training split only
(:mod:`differank.datamodules.transforms`). ``max_list`` caps training lists by
:func:`differank.datamodules.query_batches.subsample_query` each time a query is drawn; validation,
test and ``full_batch`` never cap. ``drop_train_queries_without_pairs`` drops (and logs) training
queries whose documents share one label. ``nan_policy``, ``null_value`` and ``label_range`` are the
reader's value rules (:mod:`differank.datamodules.reader`); ``verify_cache_hash`` re-hashes every
file instead of trusting size and mtime.
Under DDP (``trainer=ddp``, which sets ``use_distributed_sampler=False``) the loaders shard
queries across processes themselves; evaluation scores every query exactly once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import numbers
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from differank.datamodules import cache, folds, parquet, query_batches, query_files, transforms
from differank.datamodules.letor_split import LetorSplit
from differank.datamodules.normalization import (
    BLOCK_ROWS,
    NORMALIZATIONS,
    apply_zscore,
    column_stats,
    query_minmax,
)
from differank.datamodules.reader import (
    LetorFile,
    check_fold_budget,
    check_read_options,
    default_cache_dir,
    group_queries,
    read_letor_file,
)
from differank.datamodules.split_tensors import QueryBatchDataset, SplitTensors, fits_on_device

log = logging.getLogger(__name__)

FORMATS = ("letor", "query_files", "parquet")
UNSEEN_FEATURES = ("error", "drop")
# Bump when the cached split arrays' meaning changes.
_SPLIT_CACHE_VERSION = 1


def _check_int(name: str, value, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an int, got {value!r}")
    number = int(value)  # exact for an Integral (numpy's included)
    if number < minimum or (maximum is not None and number > maximum):
        bound = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
        raise ValueError(f"{name} must be {bound}, got {value!r}")
    return number


def _check_bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


class LetorDataModule(pl.LightningDataModule):
    """LETOR folds as padded query batches (see the module docstring for every option)."""

    def __init__(
        self,
        root,
        fold: int = 1,
        normalization: str = "zscore",
        batch_size: int = 32,
        eval_batch_size: int = 64,
        max_list: int | None = None,
        bucket_by_length: bool = True,
        nan_policy: str = "error",
        null_value: float | None = None,
        label_range=None,
        unseen_features: str = "error",
        drop_train_queries_without_pairs: bool = False,
        cache_dir=None,
        verify_cache_hash: bool = False,
        num_workers: int = 0,
        seed: int = 0,
        transform: str = "none",
        batches_on_device: bool = True,
        format: str = "letor",
        label_column: str = "label",
        qid_column: str = "qid",
        feature_columns=None,
        docid_column: str = "docid",
    ):
        super().__init__()
        if root is None and type(self) is LetorDataModule:
            raise ValueError("root must be the path of a LETOR directory, got None")
        if root is not None and not isinstance(root, (str, Path)):
            raise ValueError(f"root must be a path, got {root!r}")
        self.root = None if root is None else Path(root).expanduser()
        self.fold = _check_int("fold", fold, 1, 5)
        if normalization not in NORMALIZATIONS:
            raise ValueError(
                f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}"
            )
        self.normalization = normalization
        self.transform = transforms.check_transform(transform)
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.eval_batch_size = _check_int("eval_batch_size", eval_batch_size, 1)
        if max_list is not None:
            max_list = _check_int("max_list", max_list, 2)
        self.max_list = max_list
        self.bucket_by_length = _check_bool("bucket_by_length", bucket_by_length)
        self.null_value, self.label_range = check_read_options(nan_policy, null_value, label_range)
        self.nan_policy = nan_policy
        if unseen_features not in UNSEEN_FEATURES:
            raise ValueError(
                f"unseen_features must be one of {UNSEEN_FEATURES}, got {unseen_features!r}"
            )
        self.unseen_features = unseen_features
        self.drop_train_queries_without_pairs = _check_bool(
            "drop_train_queries_without_pairs", drop_train_queries_without_pairs
        )
        if cache_dir is not None and not isinstance(cache_dir, (str, Path)):
            raise ValueError(f"cache_dir must be a path or None, got {cache_dir!r}")
        self.cache_dir = None if cache_dir is None else Path(cache_dir).expanduser()
        self.verify_cache_hash = _check_bool("verify_cache_hash", verify_cache_hash)
        self.num_workers = _check_int("num_workers", num_workers, 0)
        self.seed = _check_int("seed", seed, 0)
        self.batches_on_device = _check_bool("batches_on_device", batches_on_device)
        if format not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
        self.format = format
        # Hydra hands a list as a ListConfig: a tuple of names (or one list column's name,
        # which ParquetColumns reads as a one-name tuple too)
        names: tuple[str, ...] | None = None
        if isinstance(feature_columns, str):
            names = (feature_columns,)
        elif feature_columns is not None:
            names = tuple(str(n) for n in feature_columns)
        self.parquet_columns = parquet.ParquetColumns(label_column, qid_column, names, docid_column)
        self._parts_dir: Path | None = None
        self._splits: dict[str, LetorSplit] | None = None
        self._datasets: dict[str, QueryBatchDataset] = {}
        self._device_datasets: dict[tuple[str, str], QueryBatchDataset | None] = {}
        self._n_features: int | None = None
        self._zscore: tuple[np.ndarray, np.ndarray] | None = None
        self._transform: transforms.FittedTransform | None = None

    # ---- files -------------------------------------------------------------------------------

    def _data_root(self) -> Path:
        """The directory to read (subclasses may create it first): ``root``, or for
        ``format="query_files"`` its LETOR parts in the cache (built on first use)."""
        if self.root is None:  # only a subclass that makes its own data passes root=None
            raise TypeError(f"{type(self).__name__} has root=None: it must override _data_root")
        if self.format == "letor":
            return self.root
        if self._parts_dir is None:
            self._parts_dir = query_files.letor_parts(self.root, cache_dir=self.cache_dir)
        return self._parts_dir

    def _fold_files(self) -> dict[str, list[Path]]:
        if self.format == "parquet":
            return parquet.fold_files(self.root, self.fold)
        return folds.resolve_fold_files(self._data_root(), self.fold)

    def split_files(self, split: str) -> list[Path]:
        """The source files of ``split`` in concatenation order (no parsing)."""
        return self._fold_files()[self._split_name(split)]

    @staticmethod
    def _split_name(split: str) -> str:
        return folds.split_name(split)

    # ---- loading -----------------------------------------------------------------------------

    def prepare_data(self) -> None:
        """Nothing to download; ``setup`` parses (cached) on every process."""

    def setup(self, stage: str | None = None) -> None:
        trainer = self.trainer
        if stage == "fit" and trainer is not None and trainer.max_epochs == 0:
            raise ValueError(
                "trainer.max_epochs=0 trains nothing: set max_epochs >= 1, or "
                "evaluate a checkpoint with task=test ckpt_path=..."
            )
        self._load()

    def _load(self) -> None:
        if self._splits is not None:
            return
        files = self._fold_files()
        try:
            parsed = self._read_files(files)
        except ValueError as error:
            located = error
            if self._parts_dir is not None:  # name the row's query-file source line
                located = query_files.in_source_terms(error, self._parts_dir)
            if located is error:
                raise
            raise located from error
        n_features, dropped = self._feature_set(files, parsed)
        splits = {
            name: self._build_split(name, paths, [parsed[p] for p in paths])
            for name, paths in files.items()
        }
        self._store_features(splits, n_features, dropped)
        for split in splits.values():  # the features are the split's (cached) copy from here
            for source in split.sources:
                source.release_pages()
        self._n_features = n_features
        self._splits = splits
        self._datasets = {
            name: QueryBatchDataset(
                SplitTensors.from_queries(
                    torch.from_numpy(split.features),
                    torch.from_numpy(split.labels),
                    [split.query_rows[q] for q in split.queries],
                    split.query_ids[split.queries],
                    weights=self._served_weights(name, split),
                ),
                self.max_list if name == "train" else None,
            )
            for name, split in splits.items()
        }

    def _query_weights(self, split: str) -> np.ndarray | None:
        """One weight per query of ``split`` (order of first appearance), or None: every query
        weighs the same. Files carry no weights; :class:`~differank.datamodules.in_memory.
        InMemoryDataModule` takes them with its arrays."""
        return None

    def _served_weights(self, name: str, split: LetorSplit) -> torch.Tensor | None:
        weights = self._query_weights(name)
        return (
            None
            if weights is None
            else torch.as_tensor(weights[split.queries], dtype=torch.float32)
        )

    def _read_files(self, files: dict[str, list[Path]]) -> dict[Path, LetorFile]:
        """Every file of the fold parsed (or from the cache; Parquet decoded) and checked by
        the value rules."""
        paths = [p for split_paths in files.values() for p in split_paths]
        # before anything is allocated
        if self.format == "parquet":
            parquet.check_fold_budget(files, self.parquet_columns, cache_dir=self.cache_dir)
        else:
            check_fold_budget(files, cache_dir=self.cache_dir)
        parsed: dict[Path, LetorFile] = {}
        for path in paths:
            if self.format == "parquet":
                parsed[path] = parquet.read_parquet_file(path, self.parquet_columns)
            else:
                parsed[path] = read_letor_file(
                    path, cache_dir=self.cache_dir, verify_hash=self.verify_cache_hash
                )
            parsed[path].check_values(
                nan_policy=self.nan_policy,
                null_value=self.null_value,
                label_range=self.label_range,
            )
        if self.format == "parquet":
            parquet.check_same_features(
                [(p, parsed[p].meta["feature_names"], parsed[p].max_feature_index) for p in paths]
            )
        return parsed

    def _feature_set(self, files, parsed) -> tuple[int, np.ndarray]:
        """F (the largest feature index written in training) and the features to drop: those
        written only outside training (an error unless ``unseen_features="drop"``)."""
        train = [parsed[p] for p in files["train"]]
        n_features = max(p.max_feature_index for p in train)
        trained = np.zeros(n_features, dtype=bool)
        for part in train:
            trained[: part.max_feature_index] |= part.present
        dropped = np.zeros(n_features, dtype=bool)
        for split in ("val", "test"):
            for path in files[split]:
                present = parsed[path].present
                seen = np.zeros(len(present), dtype=bool)
                width = min(len(present), n_features)
                seen[:width] = trained[:width]
                unseen = np.flatnonzero(present & ~seen)
                if len(unseen) == 0:
                    continue
                if self.unseen_features == "error":
                    shown = ", ".join(str(j + 1) for j in unseen[:5])
                    more = f" and {len(unseen) - 5} more" if len(unseen) > 5 else ""
                    raise ValueError(
                        f"{path}: feature {shown}{more} occurs in no training file, so no "
                        "weight is trained for it; set unseen_features=drop to drop such "
                        "features"
                    )
                dropped[unseen[unseen < n_features]] = True
                log.warning(
                    "%s: dropped %d feature(s) that occur in no training file (%s)",
                    path,
                    len(unseen),
                    ", ".join(str(j + 1) for j in unseen[:10]),
                )
        return n_features, dropped

    def _build_split(self, name, paths, parts) -> LetorSplit:
        labels = np.concatenate([p.labels for p in parts]).astype(np.float32)
        qids = np.concatenate([p.qids for p in parts])
        query_ids, query_rows = _group_queries(qids, name)
        queries = np.arange(len(query_ids))
        if name == "train":
            has_pairs = _has_pairs(labels, query_rows)
            if not has_pairs.any():
                if self.drop_train_queries_without_pairs:
                    raise ValueError(
                        "no training query has two distinct labels; nothing to train on"
                    )
                log.warning(
                    "the training split (%s) has no preference pair: no query has two "
                    "distinct labels, so pairwise and listwise losses learn nothing",
                    ", ".join(str(p) for p in paths),
                )
            if self.drop_train_queries_without_pairs:
                queries = queries[has_pairs]
                log.info(
                    "dropped %d of %d training queries without preference pairs "
                    "(drop_train_queries_without_pairs=True)",
                    len(query_ids) - len(queries),
                    len(query_ids),
                )
        return LetorSplit(
            name=name,
            files=list(paths),
            features=np.zeros((0, 0), np.float32),  # set by _store_features
            labels=labels,
            qids=qids,
            query_ids=query_ids,
            query_rows=query_rows,
            queries=queries,
            sources=list(parts),
        )

    def _store_features(
        self, splits: dict[str, LetorSplit], n_features: int, dropped: np.ndarray
    ) -> None:
        """Each split's normalised float32 features, from the cache or built into it."""
        root = Path(self.cache_dir or default_cache_dir()).expanduser() / "letor" / "splits"
        options = {
            "version": _SPLIT_CACHE_VERSION,
            "normalization": self.normalization,
            "nan_policy": self.nan_policy,
            "null_value": repr(self.null_value),
            "n_features": n_features,
            "dropped": np.flatnonzero(dropped).tolist(),
            "train": [s.meta["sha256"] for s in splits["train"].sources],
        }
        if self.transform != "none":  # absent otherwise: untransformed entries keep their keys
            options["transform"] = self.transform
        keys = {
            name: hashlib.sha256(
                json.dumps(
                    {
                        **options,
                        "split": name,
                        "files": [[s.meta["sha256"], s.meta["version"]] for s in split.sources],
                    },
                    sort_keys=True,
                ).encode()
            ).hexdigest()[:32]
            for name, split in splits.items()
        }

        def shapes(meta):
            return {
                "features": (meta["rows"], n_features),
                "mean": (n_features,),
                "std": (n_features,),
                **transforms.cached_shapes(self.transform, meta, n_features),
            }

        loaded = {name: cache.load(root / keys[name], shapes) for name in splits}
        hits = {name: entry for name, entry in loaded.items() if entry is not None}
        if len(hits) == len(splits):
            for name, split in splits.items():
                split.features = hits[name][0]["features"]
            self._set_zscore(hits["train"][0])
            self._transform = transforms.load(self.transform, hits["train"][0])
            return
        folders = {name: cache.new_entry(root) for name in splits}
        arrays = {
            name: {
                "features": cache.new_array(
                    folders[name], "features", np.float32, (split.num_rows, n_features)
                )
            }
            for name, split in splits.items()
        }
        mean, std, fitted = self._fill_features(
            splits, {name: entry["features"] for name, entry in arrays.items()}, dropped
        )
        for name, split in splits.items():
            features = arrays[name]["features"]
            arrays[name].update(mean=mean, std=std, **(fitted.arrays if fitted else {}))
            meta = {"rows": split.num_rows, **options, "split": name}
            meta.update(fitted.meta if fitted else {})
            entry = cache.commit(
                folders[name], root / keys[name], arrays[name], meta, shapes, same=lambda old: True
            )  # keyed by content: equal data
            split.features = features if entry is None else entry[0]["features"]
        self._set_zscore({"mean": mean, "std": std})
        self._transform = fitted

    def _fill_features(
        self, splits: dict[str, LetorSplit], features: dict[str, np.ndarray], dropped: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, transforms.FittedTransform | None]:
        """Each split's raw values into ``features[split]`` (float32 [N, F]) under the value
        rules, then the feature transform and the normalization fitted on the training split,
        in place; returns the z-score statistics (zeros and ones unless ``zscore``) and the
        fitted transform."""
        for name, split in splits.items():
            self._copy_features(split, features[name], dropped)
        fitted = transforms.fit(self.transform, features["train"])
        if fitted is not None:
            for name in splits:
                fitted.apply_(features[name])
        n_features = features["train"].shape[1]
        mean, std = np.zeros(n_features), np.ones(n_features)
        if self.normalization == "zscore":
            mean, std = column_stats(features["train"])
        for name, split in splits.items():
            if self.normalization == "zscore":
                apply_zscore(features[name], mean, std)
            elif self.normalization == "query_minmax":
                query_minmax(features[name], split.query_rows)
        return mean, std, fitted

    def _set_zscore(self, stats: dict) -> None:
        if self.normalization == "zscore":
            self._zscore = (np.asarray(stats["mean"]), np.asarray(stats["std"]))

    def _copy_features(self, split: LetorSplit, out: np.ndarray, dropped: np.ndarray) -> None:
        """The raw values of the split's files into ``out`` under the value rules."""
        row = 0
        zeroed = 0
        for source in split.sources:
            for start in range(0, source.num_rows, BLOCK_ROWS):
                stop = min(start + BLOCK_ROWS, source.num_rows)
                block = out[row + start : row + stop]
                zeroed += source.copy_rows(
                    block, start, stop, nan_policy=self.nan_policy, null_value=self.null_value
                )
                block[:, dropped] = 0.0
            source.release_pages()
            row += source.num_rows
        if zeroed:
            log.warning(
                "%s: replaced %d non-finite feature values by 0 (nan_policy='zero')",
                split.name,
                zeroed,
            )

    # ---- properties --------------------------------------------------------------------------

    @property
    def n_features(self) -> int:
        """Number of features F (max 1-based index over the fold's files)."""
        self._load()
        assert self._n_features is not None  # _load sets it
        return self._n_features

    @property
    def feature_mean(self) -> np.ndarray | None:
        """Training mean per feature (``normalization="zscore"``; else None)."""
        self._load()
        return None if self._zscore is None else self._zscore[0]

    @property
    def feature_std(self) -> np.ndarray | None:
        """Training std per feature, 1 where it is 0 (``normalization="zscore"``; else None)."""
        self._load()
        return None if self._zscore is None else self._zscore[1]

    @property
    def feature_transform(self) -> torch.nn.Module | None:
        """The fitted ``transform`` as a torch module on raw features (None for "none"): what an
        exported scorer applies before the z-score."""
        self._load()
        return None if self._transform is None else self._transform.module()

    @property
    def label_levels(self) -> tuple[float, ...]:
        """Distinct labels present in the data (all splits)."""
        self._load()
        assert self._splits is not None  # _load sets it
        labels = np.concatenate([s.labels for s in self._splits.values()])
        return tuple(float(v) for v in np.unique(labels))

    def split_data(self, split: str) -> LetorSplit:
        self._load()
        assert self._splits is not None  # _load sets it
        return self._splits[self._split_name(split)]

    def num_rows(self, split: str) -> int:
        """Rows of the split's source files (dropped training queries included)."""
        return self.split_data(split).num_rows

    def file_sha256(self, split: str) -> list[str]:
        """sha256 of the bytes of each source file of ``split`` (as on disk, e.g. gzip), from
        the reader's cache: fingerprints without reading the text again."""
        return [source.meta["sha256"] for source in self.split_data(split).sources]

    def dataset(self, split: str) -> QueryBatchDataset:
        """The split's queries as host tensors (the memory-mapped features, no copy)."""
        self._load()
        return self._datasets[self._split_name(split)]

    # ---- loaders -----------------------------------------------------------------------------

    def _training_device(self) -> torch.device:
        trainer = self.trainer  # set by Lightning when it runs this DataModule
        return trainer.strategy.root_device if trainer is not None else torch.device("cpu")

    def _device_dataset(self, split: str, device: torch.device) -> QueryBatchDataset | None:
        """The split on ``device`` (copied once, kept), or None when batches are streamed: the
        option is off, or the split does not fit (see ``fits_on_device``)."""
        host = self.dataset(split)
        if device.type == "cpu":
            return host
        if not self.batches_on_device:
            return None
        key = (self._split_name(split), str(device))
        if key not in self._device_datasets:
            tensors = host.tensors
            if fits_on_device(tensors.nbytes, device):
                self._device_datasets[key] = QueryBatchDataset(tensors.to(device), host.max_list)
            else:
                log.warning(
                    "%s: the split's %.2f GiB do not fit on %s; batches are gathered on the "
                    "host and copied per batch (streaming)",
                    key[0],
                    tensors.nbytes / 2**30,
                    device,
                )
                self._device_datasets[key] = None
        return self._device_datasets[key]

    def _loader(self, split: str) -> DataLoader:
        device = self._training_device()
        on_device = self._device_dataset(split, device)
        dataset = self.dataset(split) if on_device is None else on_device
        train = self._split_name(split) == "train"
        batch_size = self.batch_size if train else self.eval_batch_size
        trainer = self.trainer
        rank, world_size = (trainer.global_rank, trainer.world_size) if trainer else (0, 1)
        sampler = query_batches.ShardedQueryBatchSampler(
            dataset.lengths,
            batch_size,
            rank=rank,
            world_size=world_size,
            shuffle=train,
            bucket_by_length=self.bucket_by_length,
            seed=self.seed,
            draw_seeds=train and self.max_list is not None,
        )
        # Batches gathered on an accelerator are built in this process (worker processes
        # cannot hand over device tensors); streamed ones are pinned for the copy.
        workers = self.num_workers if dataset.tensors.device.type == "cpu" else 0
        return DataLoader(
            dataset,
            batch_sampler=sampler,
            # __getitems__ builds the batch dict; torch types collate_fn for a list of samples
            collate_fn=QueryBatchDataset.collate_fn,  # type: ignore[arg-type]
            num_workers=workers,
            persistent_workers=workers > 0,
            pin_memory=on_device is None and device.type == "cuda",
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")

    def predict_dataloader(self) -> DataLoader:
        return self._loader("test")

    def replace_training_lists(self, tensors: SplitTensors) -> None:
        """Serve ``tensors`` as the training queries instead of the training files' (whole
        lists, never capped by ``max_list``): a click run's shown lists, or the sessions of a
        click log (docs/clicks.md). ``split_data("train")``, validation and test are unchanged;
        the loaders, the device copy and DDP sharding are the usual ones."""
        self._load()
        self._datasets["train"] = QueryBatchDataset(tensors)
        self._device_datasets = {
            key: value for key, value in self._device_datasets.items() if key[0] != "train"
        }

    def full_batch(self, split: str) -> dict[str, torch.Tensor]:
        """Every served query of ``split`` as one padded batch (L = its longest list), whole
        lists (no ``max_list``), on the host."""
        tensors = self.dataset(split).tensors
        return tensors.batch(np.arange(len(tensors.lengths)))


def _group_queries(qids: np.ndarray, split: str) -> tuple[np.ndarray, list[np.ndarray]]:
    """The reader's grouping rule (:func:`differank.datamodules.reader.group_queries`) as query ids
    and one row array per query; logs qids that occur in several blocks."""
    query_ids, rows, lengths = group_queries(qids)
    block_qids = qids[np.flatnonzero(np.r_[True, qids[1:] != qids[:-1]])]
    split_qids = int(np.count_nonzero(np.unique(block_qids, return_counts=True)[1] > 1))
    if split_qids:
        log.info(
            "%s: %d query ids occur in non-contiguous blocks; each is grouped into one query "
            "(file order kept)",
            split,
            split_qids,
        )
    return query_ids, np.split(rows, np.cumsum(lengths)[:-1])


def _has_pairs(labels: np.ndarray, query_rows: list[np.ndarray]) -> np.ndarray:
    """bool [Q]: the query has two distinct labels (at least one preference pair)."""
    order = np.concatenate(query_rows)
    starts = np.cumsum([0] + [len(r) for r in query_rows[:-1]])
    grouped = labels[order]
    return np.maximum.reduceat(grouped, starts) > np.minimum.reduceat(grouped, starts)
