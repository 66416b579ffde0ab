"""Which files make each split of a LETOR fold (no parsing).

Public API::

    resolve_fold_files(root, fold) -> {"train": [Path], "val": [Path], "test": [Path]}
    split_name(split) -> "train" | "val" | "test"     # accepts vali, validation, predict
    MissingLetorFileError                            # FileNotFoundError and ValueError

Layouts: ``root/FoldN/{train,vali,test}.txt[.gz]``, or ``root/S1..S5.txt[.gz]`` with
``root/folds.tsv`` (header ``fold train vali test``; rows like ``Fold1 S1,S2,S3 S4 S5``; a split
is the concatenation of its S files in that order). A directory holding both layouts, a name
present as both ``x.txt`` and ``x.txt.gz``, a split without files, and a file used twice
(within a split or by two splits) are errors.
"""

from __future__ import annotations

from pathlib import Path

from differank.datamodules.regular_files import require_regular_file

SPLITS = ("train", "val", "test")
_SPLIT_ALIASES = {
    "train": "train",
    "val": "val",
    "vali": "val",
    "validation": "val",
    "test": "test",
    "predict": "test",
}
_FOLD_FILE_STEMS = {"train": "train", "val": "vali", "test": "test"}


def split_name(split: str) -> str:
    """The canonical name of ``split`` (``vali``/``validation`` -> ``val``, ``predict`` ->
    ``test``)."""
    if split not in _SPLIT_ALIASES:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return _SPLIT_ALIASES[split]


class MissingLetorFileError(FileNotFoundError, ValueError):
    """A file the fold needs is missing (a FileNotFoundError that is also a ValueError)."""


def _existing(base: Path) -> Path:
    """``base`` + ``.txt`` / ``.txt.gz`` (or ``base`` itself if it names a file); both
    ``x.txt`` and ``x.txt.gz`` present is an error (which one is meant?)."""
    candidates = [base] if base.suffix in (".txt", ".gz") else []
    candidates += [base.with_name(base.name + ".txt"), base.with_name(base.name + ".txt.gz")]
    # A directory, FIFO, device or link loop under a LETOR name is refused, not passed over.
    found = [require_regular_file(c, "a LETOR file") for c in candidates if _present(c)]
    if len(found) > 1:
        raise ValueError(
            f"ambiguous LETOR file: both {found[0]} and {found[1]} exist; remove one of them"
        )
    if found:
        return found[0]
    tried = " or ".join(str(c) for c in candidates)
    raise MissingLetorFileError(f"missing LETOR fold file: {tried}")


def _present(path: Path) -> bool:
    """Whether ``path`` names something, a symbolic link (even a looping one) included."""
    return path.is_symlink() or path.exists()


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
