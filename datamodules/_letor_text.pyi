"""Type stub of the C scanner ``_letor_text.c`` (built at install): what mypy and IDEs read."""

from typing import Any

MAX_LABEL: int
MAX_QID_DIGITS: int
MAX_FEATURE_INDEX: int
OK: int
BAD_LABEL: int
LABEL_TOO_LARGE: int
NO_QID: int
BAD_QID: int
BAD_FEATURE: int
BAD_INDEX: int
INDEX_ORDER: int
BAD_VALUE: int
INDEX_TOO_LARGE: int
CHANGED: int
R_ROWS: int
R_LINES: int
R_MAX_INDEX: int
R_NULLS: int
R_NONFINITE: int
R_NONFINITE_LINE: int
R_NONFINITE_COL: int
R_ERROR: int
R_ERROR_LINE: int
R_ERROR_POS: int
R_NONFINITE_BITS: int
R_SIZE: int
POW10_SIZE: int

def scan(
    out: Any,
    buf: Any,
    fill: int,
    features: Any,
    labels: Any,
    qids: Any,
    lines: Any,
    doc_start: Any,
    doc_end: Any,
    null_rows: Any,
    null_cols: Any,
    present: Any,
    pow10: Any,
    /,
) -> None: ...
def capacity(buf: Any, /) -> tuple[int, int]: ...
def parse_value(buf: Any, i: int, n: int, pow10: Any, /) -> tuple[float, int]: ...
