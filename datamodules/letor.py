"""LETOR DataModule: read a fold, cache, normalise, group queries, batch.

Public API::

    LetorDataModule(root, fold=1, normalization="zscore", batch_size=32, eval_batch_size=64,
                    max_list=None, bucket_by_length=True, nan_policy="error", null_value=None,
                    label_range=None, unseen_features="error",
                    drop_train_queries_without_pairs=False, cache_dir=None,
                    verify_cache_hash=False, num_workers=0, seed=0, transform="none")
      .n_features              F = max feature index over the fold's files (loads lazily)
      .label_levels            sorted distinct labels over all splits (loads lazily)
      .feature_mean / .feature_std   zscore statistics of the training split (else None)
      .feature_transform       the fitted ``transform`` as a torch module (else None)
      .setup(stage=None)       idempotent; parses (or loads the cache)
      .train_dataloader() / .val_dataloader() / .test_dataloader() / .predict_dataloader()
      .full_batch(split)       all queries of "train" | "val" | "test" as one padded batch
      .split_files(split)      source files in concatenation order (no parsing)
      .num_rows(split), .split_data(split) -> LetorSplit
      .file_sha256(split)      sha256 of each source file, from the cache (no re-read)
    resolve_fold_files(root, fold) -> {"train": [Path], "val": [Path], "test": [Path]}
    ShardedQueryBatchSampler(lengths, batch_size, rank=, world_size=, shuffle=, ...)

Layouts: ``root/FoldN/{train,vali,test}.txt[.gz]``, or ``root/S1..S5.txt[.gz]`` with
``root/folds.tsv`` (header ``fold train vali test``; rows like ``Fold1 S1,S2,S3 S4 S5``; a split
is the concatenation of its S files in that order). A directory holding both layouts, a name
present as both ``x.txt`` and ``x.txt.gz``, a split without files, and a file used twice
(within a split or by two splits) are errors. A split's rows are numbered 0.. in that
concatenation (``doc_index``). Rows of one qid form ONE query even when not contiguous, in file
order; queries are ordered by first appearance. Batches follow ``datamodules/collate.py``.

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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from differank.datamodules import cache, transforms
from differank.datamodules.collate import collate_queries
from differank.datamodules.query_batches import QueryBatchSampler, subsample_query
from differank.datamodules.reader import (
    LetorFile,
    check_fold_budget,
    check_read_options,
    default_cache_dir,
    group_queries,
    read_letor_file,
)

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")
NORMALIZATIONS = ("none", "zscore", "query_minmax")
UNSEEN_FEATURES = ("error", "drop")
# Bump when the cached split arrays' meaning changes.
_SPLIT_CACHE_VERSION = 1
_BLOCK_ROWS = 65536  # rows per block when copying and normalising features
_SPLIT_ALIASES = {
    "train": "train",
    "val": "val",
    "vali": "val",
    "validation": "val",
    "test": "test",
    "predict": "test",
}
_FOLD_FILE_STEMS = {"train": "train", "val": "vali", "test": "test"}


class MissingLetorFileError(FileNotFoundError, ValueError):
    """A file the fold needs is missing (a FileNotFoundError that is also a ValueError)."""


def _existing(base: Path) -> Path:
    """``base`` + ``.txt`` / ``.txt.gz`` (or ``base`` itself if it names a file); both
    ``x.txt`` and ``x.txt.gz`` present is an error (which one is meant?)."""
    candidates = [base] if base.suffix in (".txt", ".gz") else []
    candidates += [base.with_name(base.name + ".txt"), base.with_name(base.name + ".txt.gz")]
    found = [c for c in candidates if c.is_file()]
    if len(found) > 1:
        raise ValueError(
            f"ambiguous LETOR file: both {found[0]} and {found[1]} exist; remove one of them"
        )
    if found:
        return found[0]
    tried = " or ".join(str(c) for c in candidates)
    raise MissingLetorFileError(f"missing LETOR fold file: {tried}")


def resolve_fold_files(root, fold: int) -> dict[str, list[Path]]:
    """The source files of each split of ``fold``, in concatenation order (layout checks of
    the module docstring included)."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise MissingLetorFileError(f"LETOR root directory does not exist: {root}")
    fold_dir = root / f"Fold{fold}"
    table = root / "folds.tsv"
    fold_dirs = sorted(p.name for p in root.glob("Fold[0-9]*") if p.is_dir())
    if fold_dirs and table.is_file():
        raise ValueError(
            f"{root} holds both LETOR layouts ({', '.join(fold_dirs)} and "
            "folds.tsv); keep one of them"
        )
    if fold_dir.is_dir():
        files = {split: [_existing(fold_dir / stem)] for split, stem in _FOLD_FILE_STEMS.items()}
    elif not table.is_file():
        raise MissingLetorFileError(
            f"{root} is not a LETOR directory: neither {fold_dir}/ nor {table} exists"
        )
    else:
        files = _folds_table_row(table, root, fold)
    seen: dict[Path, str] = {}
    for split, paths in files.items():
        for path in paths:
            key = path.resolve()
            if key in seen:
                where = "twice in" if seen[key] == split else f"in {seen[key]} and in"
                raise ValueError(
                    f"fold {fold}: {path} is used {where} {split}; the splits must not share files"
                )
            seen[key] = split
    return files


def _folds_table_row(table: Path, root: Path, fold: int) -> dict[str, list[Path]]:
    rows = [line.split() for line in table.read_text().splitlines()]
    numbered = [(n, row) for n, row in enumerate(rows, start=1) if row]
    if not numbered or [c.lower() for c in numbered[0][1]] != ["fold", "train", "vali", "test"]:
        raise ValueError(f"{table}:1: header must be 'fold train vali test'")
    for number, row in numbered[1:]:
        if row[0].lower() not in (f"fold{fold}", str(fold)):
            continue
        if len(row) != 4:
            raise ValueError(f"{table}:{number}: expected 4 columns (fold train vali test)")
        files = {}
        for split, column in zip(SPLITS, row[1:], strict=True):
            names = [name for name in column.split(",") if name]
            if not names:
                raise ValueError(f"{table}:{number}: the {split} column names no file")
            files[split] = [_existing(root / name) for name in names]
        return files
    raise ValueError(f"{table}: no row for Fold{fold}")


@dataclass
class LetorSplit:
    """One split as read: rows in source order, and the query grouping.

    ``features`` float32 [N, F] (normalised; memory-mapped from the cache), ``labels`` float32
    [N], ``qids`` int64 [N]; query ``q`` has id ``query_ids[q]`` and rows ``query_rows[q]``
    (int64, file order). ``queries`` are the indices of the queries served by the loaders
    (all of them except for a training split with a drop policy). ``sources`` are the parsed
    files; :attr:`docids` decodes their doc ids on demand.
    """

    name: str
    files: list[Path]
    features: np.ndarray
    labels: np.ndarray
    qids: np.ndarray
    query_ids: np.ndarray
    query_rows: list[np.ndarray]
    queries: np.ndarray
    sources: list[LetorFile]

    @property
    def num_rows(self) -> int:
        return len(self.labels)

    @property
    def docids(self) -> np.ndarray:
        """Doc id of every row (str [N])."""
        return np.concatenate([source.docids for source in self.sources])


class LetorQueryDataset(Dataset):
    """Queries of one split. A key is a query position, or ``(position, draw_seed)`` to draw a
    ``max_list`` subsample (what the training sampler yields); plain keys give whole lists."""

    def __init__(self, split: LetorSplit, max_list: int | None = None):
        self.features = torch.from_numpy(split.features)
        self.labels = torch.from_numpy(split.labels)
        self.rows = [split.query_rows[q] for q in split.queries]
        self.query_ids = split.query_ids[split.queries]
        self.max_list = max_list
        full = np.asarray([len(r) for r in self.rows], dtype=np.int64)
        self.lengths = full if max_list is None else np.minimum(full, max_list)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, key) -> dict:
        index, draw_seed = key if isinstance(key, tuple) else (key, None)
        rows = self.rows[index]
        if draw_seed is not None and self.max_list is not None and len(rows) > self.max_list:
            labels = self.labels.numpy()[rows]
            rows = rows[subsample_query(labels, self.max_list, np.random.default_rng(draw_seed))]
        index_tensor = torch.from_numpy(rows)
        return {
            "features": self.features[index_tensor],
            "labels": self.labels[index_tensor],
            "qid": int(self.query_ids[index]),
            "doc_index": index_tensor,
        }


def _check_int(name: str, value, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
        raise ValueError(f"{name} must be {bound}, got {value!r}")
    return int(value)


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
        self._splits: dict[str, LetorSplit] | None = None
        self._datasets: dict[str, LetorQueryDataset] = {}
        self._n_features: int | None = None
        self._zscore: tuple[np.ndarray, np.ndarray] | None = None
        self._transform: transforms.FittedTransform | None = None

    # ---- files -------------------------------------------------------------------------------

    def _data_root(self) -> Path:
        """The directory to read (subclasses may create it first)."""
        return self.root

    def split_files(self, split: str) -> list[Path]:
        """The source files of ``split`` in concatenation order (no parsing)."""
        return resolve_fold_files(self._data_root(), self.fold)[self._split_name(split)]

    @staticmethod
    def _split_name(split: str) -> str:
        if split not in _SPLIT_ALIASES:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        return _SPLIT_ALIASES[split]

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
        files = resolve_fold_files(self._data_root(), self.fold)
        check_fold_budget(files, cache_dir=self.cache_dir)  # before anything is allocated
        parsed = {}
        for path in (p for paths in files.values() for p in paths):
            parsed[path] = read_letor_file(
                path, cache_dir=self.cache_dir, verify_hash=self.verify_cache_hash
            )
            parsed[path].check_values(
                nan_policy=self.nan_policy,
                null_value=self.null_value,
                label_range=self.label_range,
            )
        n_features, dropped = self._feature_set(files, parsed)
        splits = {
            name: self._build_split(name, paths, [parsed[p] for p in paths])
            for name, paths in files.items()
        }
        self._store_features(splits, n_features, dropped)
        self._n_features = n_features
        self._splits = splits
        self._datasets = {
            name: LetorQueryDataset(split, self.max_list if name == "train" else None)
            for name, split in splits.items()
        }

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
        if all(entry is not None for entry in loaded.values()):
            for name, split in splits.items():
                split.features = loaded[name][0]["features"]
            self._set_zscore(loaded["train"][0])
            self._transform = transforms.load(self.transform, loaded["train"][0])
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
        for name, split in splits.items():
            self._copy_features(split, arrays[name]["features"], dropped)
        fitted = transforms.fit(self.transform, arrays["train"]["features"])
        if fitted is not None:
            for name in splits:
                fitted.apply_(arrays[name]["features"])
        mean = np.zeros(n_features)
        std = np.ones(n_features)
        if self.normalization == "zscore":
            mean, std = _column_stats(arrays["train"]["features"])
        for name, split in splits.items():
            features = arrays[name]["features"]
            if self.normalization == "zscore":
                _apply_zscore(features, mean, std)
            elif self.normalization == "query_minmax":
                _query_minmax(features, split.query_rows)
            arrays[name].update(mean=mean, std=std, **(fitted.arrays if fitted else {}))
            meta = {"rows": split.num_rows, **options, "split": name}
            meta.update(fitted.meta if fitted else {})
            entry = cache.commit(
                folders[name], root / keys[name], arrays[name], meta, shapes, same=lambda old: True
            )  # keyed by content: equal data
            split.features = features if entry is None else entry[0]["features"]
        self._set_zscore({"mean": mean, "std": std})
        self._transform = fitted

    def _set_zscore(self, stats: dict) -> None:
        if self.normalization == "zscore":
            self._zscore = (np.asarray(stats["mean"]), np.asarray(stats["std"]))

    def _copy_features(self, split: LetorSplit, out: np.ndarray, dropped: np.ndarray) -> None:
        """The raw values of the split's files into ``out`` under the value rules."""
        row = 0
        zeroed = 0
        for source in split.sources:
            for start in range(0, source.num_rows, _BLOCK_ROWS):
                stop = min(start + _BLOCK_ROWS, source.num_rows)
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
        labels = np.concatenate([s.labels for s in self._splits.values()])
        return tuple(float(v) for v in np.unique(labels))

    def split_data(self, split: str) -> LetorSplit:
        self._load()
        return self._splits[self._split_name(split)]

    def num_rows(self, split: str) -> int:
        """Rows of the split's source files (dropped training queries included)."""
        return self.split_data(split).num_rows

    def file_sha256(self, split: str) -> list[str]:
        """sha256 of the bytes of each source file of ``split`` (as on disk, e.g. gzip), from
        the reader's cache: fingerprints without reading the text again."""
        return [source.meta["sha256"] for source in self.split_data(split).sources]

    def dataset(self, split: str) -> LetorQueryDataset:
        self._load()
        return self._datasets[self._split_name(split)]

    # ---- loaders -----------------------------------------------------------------------------

    def _loader(self, split: str) -> DataLoader:
        dataset = self.dataset(split)
        train = self._split_name(split) == "train"
        options = dict(
            shuffle=train,
            bucket_by_length=self.bucket_by_length,
            seed=self.seed,
            draw_seeds=train and self.max_list is not None,
        )
        batch_size = self.batch_size if train else self.eval_batch_size
        trainer = self.trainer  # set by Lightning when it runs this DataModule
        rank, world_size = (trainer.global_rank, trainer.world_size) if trainer else (0, 1)
        sampler = ShardedQueryBatchSampler(
            dataset.lengths, batch_size, rank=rank, world_size=world_size, **options
        )
        return DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=collate_queries,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")

    def predict_dataloader(self) -> DataLoader:
        return self._loader("test")

    def full_batch(self, split: str) -> dict[str, torch.Tensor]:
        """Every served query of ``split`` as one padded batch, whole lists (no ``max_list``)."""
        dataset = self.dataset(split)
        return collate_queries([dataset[i] for i in range(len(dataset))])


class ShardedQueryBatchSampler(Sampler):
    """The loaders' batches: :class:`~differank.datamodules.query_batches.QueryBatchSampler` over
    the share of the queries that process ``rank`` of ``world_size`` serves (all of them in one
    process).

    Under DDP (``use_distributed_sampler=False``) queries are dealt round-robin:

    * Evaluation (``shuffle=False``): queries sorted by length are dealt once, so every query is
      scored by exactly one process (no padding, no duplicates; shares differ by at most one
      query) and synced metrics and gathered predictions equal a single process's.
    * Training (``shuffle=True``): a new permutation each epoch, seeded by ``(seed, epoch)`` and
      the same on every process, padded by repeating its first queries to a multiple of
      ``world_size``, so every process has the same number of batches (DDP all-reduces
      gradients once per batch).

    ``sampler`` is this object itself: Lightning calls ``batch_sampler.sampler.set_epoch`` at
    every epoch start (never ``batch_sampler.set_epoch``), and that is what makes a run resumed
    from a checkpoint draw the same batches as an uninterrupted one.
    """

    def __init__(
        self, lengths, batch_size: int, *, rank: int, world_size: int, shuffle: bool, **options
    ):
        self.lengths = np.asarray(lengths, dtype=np.int64)
        world_size = _check_int("world_size", world_size, 1)
        self.rank = _check_int("rank", rank, 0, world_size - 1)
        if len(self.lengths) < world_size:
            raise ValueError(
                f"{len(self.lengths)} queries cannot be shared by {world_size} processes "
                "(every process needs one); use fewer devices"
            )
        self.world_size, self.batch_size, self.shuffle = world_size, batch_size, shuffle
        self.options = options
        self.epoch = 0

    @property
    def sampler(self) -> ShardedQueryBatchSampler:
        return self

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def _share(self, epoch: int) -> tuple[np.ndarray, QueryBatchSampler]:
        n = len(self.lengths)
        if self.world_size == 1:
            order = np.arange(n)
        elif self.shuffle:
            order = np.random.default_rng([self.options.get("seed", 0), epoch, 2]).permutation(n)
            order = np.resize(order, -(-n // self.world_size) * self.world_size)
        else:
            order = np.argsort(self.lengths, kind="stable")
        mine = order[self.rank :: self.world_size]
        batches = QueryBatchSampler(
            self.lengths[mine], self.batch_size, shuffle=self.shuffle, **self.options
        )
        batches.set_epoch(epoch)
        return mine, batches

    def __len__(self) -> int:
        return len(self._share(self.epoch)[1])

    def __iter__(self) -> Iterator[list]:
        epoch = self.epoch
        self.epoch += 1
        mine, batches = self._share(epoch)
        for batch in batches:  # local positions -> the split's query positions
            if self.options.get("draw_seeds"):
                yield [(int(mine[i]), seed) for i, seed in batch]
            else:
                yield [int(mine[i]) for i in batch]


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


def _column_stats(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and std (NaN ignored), accumulated in float64 over row blocks; a std
    of 0 becomes 1 (a constant feature is centred only)."""
    n_features = features.shape[1]
    total, count = np.zeros(n_features), np.zeros(n_features)
    _add_column_sums(features, _BLOCK_ROWS, np.zeros(n_features), False, total, count)
    mean = total / np.maximum(count, 1)
    squares = np.zeros(n_features)
    _add_column_sums(features, _BLOCK_ROWS, mean, True, squares, np.zeros(n_features))
    std = np.sqrt(squares / np.maximum(count, 1))
    return mean, np.where(std > 0, std, 1.0)


# The two kernels below are compiled loops over the float32 rows (no float64 copy of a block);
# they add in the order numpy's block-wise ``nansum(block, axis=0)`` does (row after row within
# a block, then the block's sum into the total), so the statistics are the same to the bit.
@numba.njit(nogil=True, cache=True)
def _add_column_sums(features, block_rows, center, square, total, count):
    """``total += Σ (x - center)`` (or its square) and ``count += Σ 1`` per column over the
    non-NaN values, summed per block of ``block_rows`` rows."""
    rows, cols = features.shape
    block_total, block_count = np.zeros(cols), np.zeros(cols)
    for start in range(0, rows, block_rows):
        block_total[:] = 0.0
        block_count[:] = 0.0
        for i in range(start, min(start + block_rows, rows)):
            for j in range(cols):
                value = np.float64(features[i, j])
                if not np.isnan(value):
                    centred = value - center[j]
                    block_total[j] += centred * centred if square else centred
                    block_count[j] += 1.0
        total += block_total
        count += block_count


@numba.njit(nogil=True, cache=True)
def _apply_zscore(features, mean, std):
    """``(x - mean) / std`` in place, computed in float64 and stored as float32."""
    rows, cols = features.shape
    for i in range(rows):
        for j in range(cols):
            features[i, j] = np.float32((np.float64(features[i, j]) - mean[j]) / std[j])


def _query_minmax(features: np.ndarray, query_rows: list[np.ndarray]) -> None:
    """LETOR QueryLevelNorm in place: per query and feature (x - min) / (max - min), 0 where
    max == min; computed in float64 over blocks of queries."""
    first = 0
    while first < len(query_rows):
        last, rows_in_block = first, 0
        while last < len(query_rows) and (last == first or rows_in_block < _BLOCK_ROWS):
            rows_in_block += len(query_rows[last])
            last += 1
        block_rows = query_rows[first:last]
        order = np.concatenate(block_rows)
        lengths = np.asarray([len(r) for r in block_rows])
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        grouped = features[order].astype(np.float64)
        low = np.minimum.reduceat(grouped, starts, axis=0)
        high = np.maximum.reduceat(grouped, starts, axis=0)
        low, span = np.repeat(low, lengths, axis=0), np.repeat(high - low, lengths, axis=0)
        safe = np.where(span > 0, span, 1.0)
        features[order] = np.where(span > 0, (grouped - low) / safe, 0.0)
        first = last
