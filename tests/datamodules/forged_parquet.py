"""Forged Parquet footers for the hostile-input tests: a Parquet file's footer is a Thrift
compact-protocol ``FileMetaData``; :func:`forge_footer` rewrites integer fields in it (row
counts) and writes the footer length again, leaving the data pages as they were."""

from __future__ import annotations

import struct

# Thrift compact types (the low nibble of a field header)
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _skip(data: bytes, pos: int, kind: int, in_list: bool = False) -> int:
    if kind in (_TRUE, _FALSE):
        return pos + (1 if in_list else 0)  # a bool element of a list takes a byte
    if kind == _BYTE:
        return pos + 1
    if kind in (_I16, _I32, _I64):
        return _varint(data, pos)[1]
    if kind == _DOUBLE:
        return pos + 8
    if kind == _BINARY:
        size, pos = _varint(data, pos)
        return pos + size
    if kind in (_LIST, _SET):
        size, element, pos = _list_header(data, pos)
        for _ in range(size):
            pos = _skip(data, pos, element, in_list=True)
        return pos
    if kind == _MAP:
        size, pos = _varint(data, pos)
        if size:
            types, pos = data[pos], pos + 1
            for _ in range(size):
                pos = _skip(data, pos, types >> 4, in_list=True)
                pos = _skip(data, pos, types & 0x0F, in_list=True)
        return pos
    if kind == _STRUCT:
        return _walk(data, pos, (), [])
    raise ValueError(f"unknown Thrift compact type {kind}")


def _list_header(data: bytes, pos: int) -> tuple[int, int, int]:
    header, pos = data[pos], pos + 1
    size, element = header >> 4, header & 0x0F
    if size == 15:
        size, pos = _varint(data, pos)
    return size, element, pos


def _walk(data: bytes, pos: int, prefix: tuple, integers: list) -> int:
    """Walk one struct from ``pos`` to its end, collecting ``(path, start, end)`` of every
    i32 / i64 field, the path being field ids and list indices from the footer's root."""
    last = 0
    while True:
        header, pos = data[pos], pos + 1
        if header == 0:
            return pos
        delta, kind = header >> 4, header & 0x0F
        if delta:
            field = last + delta
        else:
            raw, pos = _varint(data, pos)
            field = (raw >> 1) ^ -(raw & 1)
        last, path = field, (*prefix, field)
        if kind in (_I32, _I64):
            start = pos
            pos = _varint(data, pos)[1]
            integers.append((path, start, pos))
        elif kind == _LIST:
            size, element, pos = _list_header(data, pos)
            for index in range(size):
                if element == _STRUCT:
                    pos = _walk(data, pos, (*path, index), integers)
                else:
                    pos = _skip(data, pos, element, in_list=True)
        elif kind == _STRUCT:
            pos = _walk(data, pos, path, integers)
        else:
            pos = _skip(data, pos, kind)


FILE_ROWS = (3,)  # FileMetaData.num_rows


def row_group_rows(group: int) -> tuple:
    """The path of row group ``group``'s num_rows (FileMetaData.row_groups[group].num_rows)."""
    return (4, group, 3)


def forge_footer(raw: bytes, changes: dict[tuple, int]) -> bytes:
    """The Parquet file ``raw`` with the integer fields at the paths of ``changes`` set."""
    assert raw[-4:] == b"PAR1", "not a Parquet file"
    length = struct.unpack("<I", raw[-8:-4])[0]
    start_of_footer = len(raw) - 8 - length
    footer = raw[start_of_footer:-8]
    integers: list = []
    _walk(footer, 0, (), integers)
    found = {path for path, _, _ in integers}
    assert set(changes) <= found, f"no such fields: {set(changes) - found}"
    out, copied = bytearray(), 0
    for path, start, end in integers:
        if path in changes:
            value = changes[path]
            out += footer[copied:start] + _encode_varint((value << 1) ^ (value >> 63))
            copied = end
    out += footer[copied:]
    return raw[:start_of_footer] + bytes(out) + struct.pack("<I", len(out)) + b"PAR1"
