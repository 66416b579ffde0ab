"""Reading, caching, normalising, grouping and batching LETOR data (never imports losses or
rankers).

Public data functions (imported on first use, so ``import differank.datamodules`` stays light)::

    read_parquet(path, ...) -> (X, y, qid)      # differank.datamodules.parquet
    write_parquet(path, X, y, qid, ...) -> Path
    ParquetColumns(label="label", qid="qid", features=None)
"""

from importlib import import_module

# public name -> the module that defines it
_PUBLIC = {
    "read_parquet": "differank.datamodules.parquet",
    "write_parquet": "differank.datamodules.parquet",
    "ParquetColumns": "differank.datamodules.parquet",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_PUBLIC[name]), name)
