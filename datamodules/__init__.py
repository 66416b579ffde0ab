"""Reading, caching, normalising, grouping and batching LETOR data (never imports losses or
rankers).

``read_letor(path) -> X, y, qid`` and ``read_query_files(root) -> {file: (X, y, qid)}``: data
files as NumPy arrays under the reader's rules (:mod:`differank.datamodules.arrays`;
docs/data.md#letor-files-as-arrays).
"""

_ARRAYS = ("read_letor", "read_query_files")


def __getattr__(name: str):
    # the array readers load the reader (NumPy, the compiled scanner) only when asked for
    if name in _ARRAYS:
        from differank.datamodules import arrays

        return getattr(arrays, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_ARRAYS)
