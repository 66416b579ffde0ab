"""Convert LETOR text to Parquet: ``python -m differank.datamodules.to_parquet SRC DST``.

``SRC`` is one LETOR text file (``DST`` is then the ``.parquet`` file to write) or a folder of
``FoldN/{train,vali,test}.txt[.gz]`` (``DST`` receives ``FoldN/{train,vali,test}.parquet``, the
layout ``data.format=parquet`` reads). The folder ``DST`` is written whole beside it and swapped
in at once, so a failure or a kill leaves the old ``DST`` or the new one, never a mix; an
existing ``DST`` must hold only files the conversion writes again.

Each file is read by the text reader (its rules, its cache) and written by
:func:`differank.datamodules.parquet.write_parquet` with one float32 column per feature,
``feature_1..feature_F`` where F is the largest index over all the files converted (absent
features are 0, as in the text), ``NULL`` cells as nulls, and integer labels and qids, and the
doc ids in a ``docid`` column. Each file's footer records the sha256 of its text
(``differank.source_sha256``) and one sha256 over every source of the conversion
(``differank.conversion_sha256``): a fold that mixes files of two conversions is refused when
it is read (``parquet.fold_files``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import uuid
from pathlib import Path

import numpy as np

from differank.datamodules.atomic_files import replace_folder
from differank.datamodules.folds import resolve_fold_files
from differank.datamodules.parquet import CONVERSION_SHA256, SOURCE_SHA256, write_parquet
from differank.datamodules.reader import LetorFile, read_letor_file

_FOLD = re.compile(r"Fold([0-9]+)")


def _targets(source: Path, target: Path) -> dict[Path, Path]:
    """Each text file to convert -> the Parquet file it becomes."""
    if source.is_file():
        return {source: target}
    folds = sorted(int(m[1]) for p in source.iterdir() if (m := _FOLD.fullmatch(p.name)))
    if not folds:
        raise FileNotFoundError(
            f"{source} is neither a LETOR file nor a folder of FoldN/{{train,vali,test}}.txt"
        )
    stems = {"train": "train", "val": "vali", "test": "test"}
    return {
        path: target / f"Fold{fold}" / f"{stems[split]}.parquet"
        for fold in folds
        for split, paths in resolve_fold_files(source, fold).items()
        for path in paths
    }


def convert(source, target) -> list[Path]:
    """Write the Parquet files for ``source`` (see the module docstring); returns them. A
    folder ``target`` is written whole under a hidden sibling name and swapped in at once
    (:func:`~differank.datamodules.atomic_files.replace_folder`): a failure or a kill at any
    point leaves the old ``target`` (or none) or the new one, never new splits beside old
    ones. An existing ``target`` is replaced only when it holds nothing but files this
    conversion writes again."""
    source, target = Path(source).expanduser(), Path(target).expanduser()
    plan = _targets(source, target)
    if source.is_file():  # one file: write_parquet writes it whole or not at all
        return _write(plan)
    _check_replaceable(target, list(plan.values()))
    staging = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        _write({path: staging / out.relative_to(target) for path, out in plan.items()})
        replace_folder(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)  # ours: the new files, or the old folder
        raise
    return list(plan.values())


def _write(plan: dict[Path, Path]) -> list[Path]:
    """Convert each text file of ``plan`` into its Parquet file; returns them."""
    parsed: dict[Path, LetorFile] = {path: read_letor_file(path) for path in plan}
    width = max(part.max_feature_index for part in parsed.values())
    conversion = hashlib.sha256(
        "\n".join(parsed[path].meta["sha256"] for path in plan).encode()
    ).hexdigest()
    written = []
    for path, out in plan.items():
        part = parsed[path]
        identity = {SOURCE_SHA256: part.meta["sha256"], CONVERSION_SHA256: conversion}
        features = np.zeros((part.num_rows, width), np.float32)
        features[:, : part.max_feature_index] = part.features
        nulls = np.zeros(features.shape, bool)
        nulls[part.null_rows, part.null_cols] = True
        written.append(
            write_parquet(
                out,
                features,
                part.labels,
                part.qids,
                null_mask=nulls,
                docids=part.docids,
                metadata=identity,
            )
        )
        part.release_pages()
    return written


def _check_replaceable(target: Path, outputs: list[Path]) -> None:
    """An existing ``target`` is replaced whole: it must be a folder holding only the files
    this conversion writes (a conversion's own earlier output), so that no other file of the
    user's goes with it."""
    if not os.path.lexists(target):
        return
    if target.is_symlink() or not target.is_dir():
        raise ValueError(f"{target} exists and is not a folder: convert into a new folder")
    expected = {out.relative_to(target) for out in outputs}
    folders = {parent for relative in expected for parent in relative.parents}
    for folder, subfolders, files in os.walk(target):
        for name in [*subfolders, *files]:
            relative = (Path(folder) / name).relative_to(target)
            if relative not in expected and relative not in folders:
                raise ValueError(
                    f"{target} holds {relative}, which this conversion does not write: the "
                    "target folder is replaced whole, so convert into a new or empty folder "
                    "(or move that file away)"
                )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m differank.datamodules.to_parquet",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("source", help="a LETOR text file, or a folder of FoldN/ folders")
    parser.add_argument("target", help="the .parquet file, or the folder to write FoldN/ into")
    args = parser.parse_args(argv)
    for path in convert(args.source, args.target):
        print(path)


if __name__ == "__main__":
    main()
