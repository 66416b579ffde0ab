"""Reading, caching, normalising, grouping and batching LETOR data (never imports losses or
rankers).

Public data functions (imported on first use, so ``import differank.datamodules`` stays light)::

    read_letor(path) -> (X, y, qid)             # differank.datamodules.arrays (reader's rules)
    read_query_files(root) -> {file: (X, y, qid)}
    read_parquet(path, ...) -> (X, y, qid)      # differank.datamodules.parquet
    write_parquet(path, X, y, qid, ...) -> Path
    ParquetColumns(label="label", qid="qid", features=None)

docs/data.md#letor-files-as-arrays and docs/data.md (Parquet).
"""

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers see: the same names, from the modules of _PUBLIC
    from differank.datamodules.arrays import read_letor as read_letor
    from differank.datamodules.arrays import read_query_files as read_query_files
    from differank.datamodules.parquet import ParquetColumns as ParquetColumns
    from differank.datamodules.parquet import read_parquet as read_parquet
    from differank.datamodules.parquet import write_parquet as write_parquet

# public name -> the module that defines it
_PUBLIC = {
    "read_letor": "differank.datamodules.arrays",
    "read_query_files": "differank.datamodules.arrays",
    "read_parquet": "differank.datamodules.parquet",
    "write_parquet": "differank.datamodules.parquet",
    "ParquetColumns": "differank.datamodules.parquet",
}
__all__ = sorted(_PUBLIC)


if not TYPE_CHECKING:  # type checkers see the imports above, and no other lazy name

    def __getattr__(name: str) -> object:
        if name not in _PUBLIC:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return getattr(import_module(_PUBLIC[name]), name)
