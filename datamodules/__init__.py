"""Reading, caching, normalising, grouping and batching LETOR data (never imports losses or
rankers).

``read_letor(path) -> X, y, qid``: LETOR files as NumPy arrays under the reader's rules
(:mod:`differank.datamodules.arrays`; docs/data.md#letor-files-as-arrays).
"""


def __getattr__(name: str):
    # read_letor loads the reader (NumPy, the compiled scanner) only when it is asked for
    if name == "read_letor":
        from differank.datamodules.arrays import read_letor

        return read_letor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["read_letor"]
