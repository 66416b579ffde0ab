"""The LETOR text scanner: one compiled pass over the bytes that applies every line rule.

This module implements the text rules stated in ``docs/data.md`` (the one statement of them);
nothing else parses LETOR text. The pass itself is C (``datamodules/_letor_text.c``, built when
the package is installed, so a first run compiles nothing); this module is its Python face.

:func:`scan` walks a buffer of whole lines once. With ``fill=False`` it only checks the lines and
counts rows, NULL tokens and the largest feature index; with ``fill=True`` it also writes the
rows into preallocated arrays (sized by a counting scan, or by :func:`capacity` and a width
guess). Both modes run the same code, so what counting accepts is exactly what filling
writes. The scan releases the GIL, so chunks of one file can be scanned in parallel threads.

The limits (``MAX_LABEL``, ``MAX_QID_DIGITS``, ``MAX_FEATURE_INDEX``), the error codes
(``OK``, ``BAD_LABEL`` ... ``CHANGED``; messages in :mod:`differank.datamodules.reader`) and the
layout of the result vector (``R_*``) are the C file's, re-exported here.
"""

from __future__ import annotations

import numpy as np

from differank.datamodules import _letor_text as _c
from differank.datamodules._letor_text import (  # noqa: F401  (re-exported)
    BAD_FEATURE,
    BAD_INDEX,
    BAD_LABEL,
    BAD_QID,
    BAD_VALUE,
    CHANGED,
    INDEX_ORDER,
    INDEX_TOO_LARGE,
    LABEL_TOO_LARGE,
    MAX_FEATURE_INDEX,
    MAX_LABEL,
    MAX_QID_DIGITS,
    NO_QID,
    OK,
    R_ERROR,
    R_ERROR_LINE,
    R_ERROR_POS,
    R_LINES,
    R_MAX_INDEX,
    R_NONFINITE,
    R_NONFINITE_BITS,
    R_NONFINITE_COL,
    R_NONFINITE_LINE,
    R_NULLS,
    R_ROWS,
    R_SIZE,
)

POW10 = np.array([10.0**k for k in range(_c.POW10_SIZE)], dtype=np.float64)


def capacity(buf) -> tuple[int, int]:
    """Upper bounds on what :func:`scan` finds in ``buf``: (rows, NULL tokens). Every row ends
    at a line end (a ``\\n`` or ``\\r`` byte) or at the end of the buffer; every NULL token
    starts with ``N``."""
    return _c.capacity(buf)


def scan(
    buf,
    fill,
    features,
    labels,
    qids,
    lines,
    doc_start,
    doc_end,
    null_rows,
    null_cols,
    present,
    pow10,
) -> np.ndarray:
    """Scan whole lines of ``buf`` (uint8); returns an int64 result vector (see ``R_*``).

    Line numbers are 1-based within ``buf``; ``R_ERROR_POS`` is the byte offset of the bad
    token. With ``fill`` the arrays (sized for the same bytes by a counting scan, or by
    :func:`capacity` and a width) receive:
    features [rows, F] float32 (absent features stay as they are, i.e. 0; a value beyond
    float32's range is stored as inf and counted as non-finite), labels uint8,
    qids int64, lines int64, doc_start / doc_end int64 (the doc id's byte span in ``buf``),
    null_rows / null_cols int64 (the cells written as ``NULL``), present bool [F] (columns
    written on some line). NULL cells are written as NaN. Arrays of another dtype, layout or
    disagreeing sizes are refused (``TypeError`` / ``ValueError`` naming the array).
    """
    out = np.zeros(R_SIZE, dtype=np.int64)
    _c.scan(
        out, buf, fill, features, labels, qids, lines, doc_start, doc_end, null_rows, null_cols,
        present, pow10,
    )  # fmt: skip
    return out


def _parse_value(buf, i, n, pow10) -> tuple[float, int]:
    """A decimal number at ``buf[i]``: (value, end); end == -1 if it is not one.

    Accepts ``[+-]`` digits with an optional ``.`` fraction and ``e``/``E`` exponent, or
    nan / inf / infinity (any case). Up to 19 significant digits are kept; the value is the
    float64 nearest to them (exact for up to 15 digits and exponents within 1e±22).
    """
    return _c.parse_value(buf, i, n, pow10)
