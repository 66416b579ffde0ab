"""Convert LETOR text to Parquet: ``python -m differank.datamodules.to_parquet SRC DST``.

``SRC`` is one LETOR text file (``DST`` is then the ``.parquet`` file to write) or a folder of
``FoldN/{train,vali,test}.txt[.gz]`` (``DST`` receives ``FoldN/{train,vali,test}.parquet``, the
layout ``data.format=parquet`` reads). Each file is read by the text reader (its rules, its
cache) and written by :func:`differank.datamodules.parquet.write_parquet` with one float32
column per feature, ``feature_1..feature_F`` where F is the largest index over all the files
converted (absent features are 0, as in the text), ``NULL`` cells as nulls, and integer labels
and qids, and the doc ids in a ``docid`` column. Each file's footer records the sha256 of its
text (``differank.source_sha256``) and one sha256 over every source of the conversion
(``differank.conversion_sha256``): a fold that mixes files of two conversions is refused when
it is read (``parquet.fold_files``).
"""

from __future__ import annotations

import argparse
import hashlib
import re
from pathlib import Path

import numpy as np

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
    """Write the Parquet files for ``source`` (see the module docstring); returns them."""
    plan = _targets(Path(source).expanduser(), Path(target).expanduser())
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
