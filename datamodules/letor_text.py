"""The LETOR text scanner: one compiled pass over the bytes that applies every line rule.

This module implements the text rules stated in ``docs/data.md`` (the one statement of them);
nothing else parses LETOR text.

:func:`scan` walks a buffer of whole lines once. With ``fill=False`` it only checks the lines and
counts rows, NULL tokens and the largest feature index; with ``fill=True`` it also writes the
rows into preallocated arrays (sized by a counting scan, or by :func:`capacity` and a width
guess). Both modes run the same code, so what counting accepts is exactly what filling
writes. It is compiled by numba (``nogil``), so chunks of one file can be scanned in parallel
threads.
"""

from __future__ import annotations

import numba
import numpy as np

MAX_LABEL = 31
MAX_QID_DIGITS = 18  # < 2**63: every qid fits int64
MAX_FEATURE_INDEX = 2**31 - 1

# Error codes returned by scan (messages in differank.datamodules.reader).
OK = 0
BAD_LABEL = 1
LABEL_TOO_LARGE = 2
NO_QID = 3
BAD_QID = 4
BAD_FEATURE = 5
BAD_INDEX = 6
INDEX_ORDER = 7
BAD_VALUE = 8
INDEX_TOO_LARGE = 9
CHANGED = 10  # a row does not fit the arrays: the file changed since it was counted, or a
# single-pass fill met a feature index beyond the width it was given

# Layout of the int64 result vector of scan.
R_ROWS, R_LINES, R_MAX_INDEX, R_NULLS, R_NONFINITE = 0, 1, 2, 3, 4
R_NONFINITE_LINE, R_NONFINITE_COL, R_ERROR, R_ERROR_LINE, R_ERROR_POS = 5, 6, 7, 8, 9
R_NONFINITE_BITS = 10  # the first non-finite value as written (float64 bits)
R_SIZE = 11

POW10 = np.array([10.0**k for k in range(23)], dtype=np.float64)


@numba.njit(cache=True, inline="always")
def _is_space(c):
    return c == 32 or c == 9


@numba.njit(cache=True, inline="always")
def _is_eol(c):
    return c == 10 or c == 13


@numba.njit(cache=True, inline="always")
def _ends_token(c):
    return c == 32 or c == 9 or c == 10 or c == 13 or c == 35  # space tab LF CR #


@numba.njit(cache=True, inline="always")
def _lower(c):
    return c + 32 if 65 <= c <= 90 else c


@numba.njit(cache=True)
def _match_word(buf, i, n, word):
    """Does ``buf[i:]`` start with ``word`` (lower-case ASCII codes, case-insensitive)?"""
    if i + len(word) > n:
        return False
    for k in range(len(word)):
        if _lower(buf[i + k]) != word[k]:
            return False
    return True


_NAN = np.frombuffer(b"nan", dtype=np.uint8).copy()
_INF = np.frombuffer(b"inf", dtype=np.uint8).copy()
_INFINITY = np.frombuffer(b"infinity", dtype=np.uint8).copy()


@numba.njit(cache=True)
def _parse_value(buf, i, n, pow10):
    """A decimal number at ``buf[i]``: (value, end); end == -1 if it is not one.

    Accepts ``[+-]`` digits with an optional ``.`` fraction and ``e``/``E`` exponent, or
    nan / inf / infinity (any case). Up to 19 significant digits are kept; the value is the
    float64 nearest to them (exact for up to 15 digits and exponents within 1e±22).
    """
    negative = False
    if i < n and (buf[i] == 43 or buf[i] == 45):
        negative = buf[i] == 45
        i += 1
    if _match_word(buf, i, n, _INFINITY):
        value, end = np.inf, i + 8
    elif _match_word(buf, i, n, _INF):
        value, end = np.inf, i + 3
    elif _match_word(buf, i, n, _NAN):
        value, end = np.nan, i + 3
    else:
        mantissa = np.uint64(0)
        significant = 0
        digits = 0
        exponent = 0
        while i < n and 48 <= buf[i] <= 57:
            if significant < 19:
                mantissa = mantissa * np.uint64(10) + np.uint64(buf[i] - 48)
                if mantissa > 0:
                    significant += 1
            else:
                exponent += 1
            digits += 1
            i += 1
        if i < n and buf[i] == 46:  # '.'
            i += 1
            while i < n and 48 <= buf[i] <= 57:
                if significant < 19:
                    mantissa = mantissa * np.uint64(10) + np.uint64(buf[i] - 48)
                    exponent -= 1
                    if mantissa > 0:
                        significant += 1
                digits += 1
                i += 1
        if digits == 0:
            return 0.0, -1
        if i < n and (buf[i] == 101 or buf[i] == 69):  # e E
            i += 1
            exp_negative = False
            if i < n and (buf[i] == 43 or buf[i] == 45):
                exp_negative = buf[i] == 45
                i += 1
            exp_digits = 0
            written = 0
            while i < n and 48 <= buf[i] <= 57:
                if written < 100000:
                    written = written * 10 + (buf[i] - 48)
                exp_digits += 1
                i += 1
            if exp_digits == 0:
                return 0.0, -1
            exponent += -written if exp_negative else written
        if mantissa == 0:
            value = 0.0
        elif 0 <= exponent <= 22 and mantissa < np.uint64(2**53):
            value = float(mantissa) * pow10[exponent]
        elif -22 <= exponent < 0 and mantissa < np.uint64(2**53):
            value = float(mantissa) / pow10[-exponent]
        elif exponent > 330:
            value = np.inf
        elif exponent < -360:
            value = 0.0
        elif exponent < -300:
            value = float(mantissa) * 1e-300 * 10.0 ** (exponent + 300)
        else:
            value = float(mantissa) * 10.0**exponent
        end = i
    if end < n and not _ends_token(buf[end]):
        return 0.0, -1
    return (-value if negative else value), end


@numba.njit(cache=True)
def _float_bits(value):
    """The bits of a float64 as an int64 (the result vector is int64)."""
    box = np.empty(1, np.float64)
    box[0] = value
    return box.view(np.int64)[0]


@numba.njit(nogil=True, cache=True)
def capacity(buf):
    """Upper bounds on what :func:`scan` finds in ``buf``: (rows, NULL tokens). Every row ends
    at a line end (a ``\\n`` or ``\\r`` byte) or at the end of the buffer; every NULL token
    starts with ``N``."""
    line_ends = 0
    capitals = 0
    for c in buf:
        line_ends += c == 10 or c == 13
        capitals += c == 78
    return line_ends + 1, capitals


@numba.njit(nogil=True, cache=True)
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
):
    """Scan whole lines of ``buf`` (uint8); returns an int64 result vector (see ``R_*``).

    Line numbers are 1-based within ``buf``; ``R_ERROR_POS`` is the byte offset of the bad
    token. With ``fill`` the arrays (sized for the same bytes by a counting scan, or by
    :func:`capacity` and a width) receive:
    features [rows, F] float32 (absent features stay as they are, i.e. 0; a value beyond
    float32's range is stored as inf and counted as non-finite), labels uint8,
    qids int64, lines int64, doc_start / doc_end int64 (the doc id's byte span in ``buf``),
    null_rows / null_cols int64 (the cells written as ``NULL``), present bool [F] (columns
    written on some line). NULL cells are written as NaN.
    """
    out = np.zeros(R_SIZE, dtype=np.int64)
    n = len(buf)
    i = 0
    row = 0
    line = 0
    nulls = 0
    max_index = 0
    while i < n:
        line += 1
        # leading blanks; blank and comment-only lines hold no row
        while i < n and _is_space(buf[i]):
            i += 1
        if i >= n or _is_eol(buf[i]) or buf[i] == 35:
            while i < n and not _is_eol(buf[i]):
                i += 1
            if i < n and buf[i] == 13 and i + 1 < n and buf[i + 1] == 10:
                i += 1
            i += 1
            continue
        # label: digits only, 0..MAX_LABEL
        start = i
        label = 0
        while i < n and 48 <= buf[i] <= 57:
            if label <= MAX_LABEL:
                label = label * 10 + (buf[i] - 48)
            i += 1
        if i == start or (i < n and not _ends_token(buf[i])):
            out[R_ERROR], out[R_ERROR_LINE], out[R_ERROR_POS] = BAD_LABEL, line, start
            return out
        if label > MAX_LABEL:
            out[R_ERROR], out[R_ERROR_LINE], out[R_ERROR_POS] = LABEL_TOO_LARGE, line, start
            return out
        # qid:<digits>, no leading zero, at most MAX_QID_DIGITS digits
        while i < n and _is_space(buf[i]):
            i += 1
        start = i
        if not (
            i + 4 <= n
            and buf[i] == 113
            and buf[i + 1] == 105
            and buf[i + 2] == 100
            and buf[i + 3] == 58
        ):
            out[R_ERROR], out[R_ERROR_LINE], out[R_ERROR_POS] = NO_QID, line, start
            return out
        i += 4
        qid = 0
        digits = 0
        while i < n and 48 <= buf[i] <= 57:
            if digits < MAX_QID_DIGITS:
                qid = qid * 10 + (buf[i] - 48)
            digits += 1
            i += 1
        if (
            digits == 0
            or digits > MAX_QID_DIGITS
            or (digits > 1 and buf[start + 4] == 48)
            or (i < n and not _ends_token(buf[i]))
        ):
            out[R_ERROR], out[R_ERROR_LINE], out[R_ERROR_POS] = BAD_QID, line, start
            return out
        if fill and row >= len(labels):
            out[R_ERROR], out[R_ERROR_LINE], out[R_ERROR_POS] = CHANGED, line, start
            return out
        if fill:
            labels[row] = label
            qids[row] = qid
            lines[row] = line
            doc_start[row] = 0
            doc_end[row] = 0
        # features index:value, indices 1-based and increasing
        previous = 0
        while True:
            while i < n and _is_space(buf[i]):
                i += 1
            if i >= n or _is_eol(buf[i]):
                break
            if buf[i] == 35:  # '#': the rest of the line is a comment
                comment = i + 1
                while i < n and not _is_eol(buf[i]):
                    i += 1
                if fill:
                    _docid_span(buf, comment, i, doc_start, doc_end, row)
                break
            start = i
            index = 0
            digits = 0
            while i < n and 48 <= buf[i] <= 57:
                if index <= MAX_FEATURE_INDEX:
                    index = index * 10 + (buf[i] - 48)
                digits += 1
                i += 1
            if i >= n or buf[i] != 58:  # no ':' right after the digits
                while i < n and not _ends_token(buf[i]) and buf[i] != 58:
                    i += 1
                code = BAD_INDEX if i < n and buf[i] == 58 else BAD_FEATURE
                out[R_ERROR], out[R_ERROR_LINE], out[R_ERROR_POS] = code, line, start
                return out
            if digits == 0 or index == 0:
                out[R_ERROR], out[R_ERROR_LINE], out[R_ERROR_POS] = BAD_INDEX, line, start
                return out
            if index > MAX_FEATURE_INDEX:
                out[R_ERROR], out[R_ERROR_LINE], out[R_ERROR_POS] = INDEX_TOO_LARGE, line, start
                return out
            if fill and index > len(present):
                out[R_ERROR], out[R_ERROR_LINE], out[R_ERROR_POS] = CHANGED, line, start
                return out
            if index <= previous:
                out[R_ERROR], out[R_ERROR_LINE], out[R_ERROR_POS] = INDEX_ORDER, line, start
                return out
            previous = index
            i += 1  # ':'
            if (
                i + 4 <= n
                and buf[i] == 78
                and buf[i + 1] == 85
                and buf[i + 2] == 76
                and buf[i + 3] == 76
                and (i + 4 == n or _ends_token(buf[i + 4]))
            ):
                i += 4
                if fill and nulls >= len(null_rows):
                    out[R_ERROR], out[R_ERROR_LINE], out[R_ERROR_POS] = CHANGED, line, start
                    return out
                if fill:
                    null_rows[nulls] = row
                    null_cols[nulls] = index - 1
                    features[row, index - 1] = np.nan
                    present[index - 1] = True
                nulls += 1
            else:
                value, end = _parse_value(buf, i, n, pow10)
                if end < 0:
                    out[R_ERROR], out[R_ERROR_LINE], out[R_ERROR_POS] = BAD_VALUE, line, start
                    return out
                i = end
                # Stored as float32: a value beyond its range (|x| > 3.4e38) becomes inf, so it
                # is as non-finite as a written inf.
                if not np.isfinite(np.float32(value)):
                    if out[R_NONFINITE] == 0:
                        out[R_NONFINITE_LINE] = line
                        out[R_NONFINITE_COL] = index
                        out[R_NONFINITE_BITS] = _float_bits(value)
                    out[R_NONFINITE] += 1
                if fill:
                    features[row, index - 1] = value
                    present[index - 1] = True
            if index > max_index:
                max_index = index
        row += 1
        if i < n and buf[i] == 13 and i + 1 < n and buf[i + 1] == 10:
            i += 1
        i += 1
    out[R_ROWS], out[R_LINES], out[R_MAX_INDEX], out[R_NULLS] = row, line, max_index, nulls
    return out


@numba.njit(cache=True)
def _docid_span(buf, start, end, doc_start, doc_end, row):
    """The doc id in the comment ``buf[start:end]``: the token after ``docid =``, else the
    whole comment without surrounding blanks."""
    for k in range(start, end - 4):
        if (
            buf[k] == 100
            and buf[k + 1] == 111
            and buf[k + 2] == 99
            and buf[k + 3] == 105
            and buf[k + 4] == 100
        ):  # "docid"
            j = k + 5
            while j < end and _is_space(buf[j]):
                j += 1
            if j < end and buf[j] == 61:  # '='
                j += 1
                while j < end and _is_space(buf[j]):
                    j += 1
                first = j
                while j < end and not _is_space(buf[j]):
                    j += 1
                if j > first:
                    doc_start[row], doc_end[row] = first, j
                    return
    while start < end and _is_space(buf[start]):
        start += 1
    while end > start and _is_space(buf[end - 1]):
        end -= 1
    doc_start[row], doc_end[row] = start, end
