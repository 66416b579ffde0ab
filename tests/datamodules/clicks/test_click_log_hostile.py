"""Hostile click logs (issue #41), one class per test name: sizes an archive claims
(``test_claimed_size_...``), values checked at their stored width (``test_narrowed_value_...``),
special files (``test_special_file_...``) and the data a log belongs to
(``test_companion_identity_...``)."""

from __future__ import annotations

import io
import os
import threading
import zipfile

import numpy as np
import pytest

from differank.datamodules.clicks import click_log
from differank.datamodules.clicks import datamodule as click_datamodule
from differank.datamodules.clicks.click_log import ClickLogError, read_click_log
from differank.datamodules.letor import LetorDataModule
from differank.datamodules.reader import write_letor


def npy(array: np.ndarray, shape: tuple | None = None) -> bytes:
    """``array`` as .npy bytes, its header claiming ``shape`` (default: its own)."""
    buffer = io.BytesIO()
    header = {"descr": np.lib.format.dtype_to_descr(array.dtype), "fortran_order": False}
    np.lib.format.write_array_header_1_0(buffer, {**header, "shape": shape or array.shape})
    buffer.write(np.ascontiguousarray(array).tobytes())
    return buffer.getvalue()


def columns(**changes) -> dict[str, np.ndarray]:
    base = dict(
        format=np.array(click_log.FORMAT),
        session=np.array([0, 0, 1]),
        qid=np.array([7, 7, 9]),
        position=np.array([0, 1, 0]),
        click=np.array([1, 0, 0], np.uint8),
        doc_row=np.array([4, 2, 8]),
    )
    return {**base, **changes}


def archive(path, members: dict[str, bytes], method=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", method) as handle:
        for name, data in members.items():
            handle.writestr(f"{name}.npy", data)
    return path


def log_file(path, method=zipfile.ZIP_STORED, **changes):
    return archive(path, {k: npy(v) for k, v in columns(**changes).items()}, method)


# ---- claimed sizes ----------------------------------------------------------------------------


def test_claimed_size_a_header_of_10_to_the_12_rows_is_refused_before_numpy_allocates(tmp_path):
    members = {k: npy(v) for k, v in columns().items()}
    members["session"] = npy(np.array([0, 0, 1]), shape=(10**12,))
    path = archive(tmp_path / "huge.npz", members)
    with pytest.raises(
        ClickLogError, match=r"huge\.npz: column 'session': its header claims shape \(10{12},\)"
    ):
        read_click_log(path)


def test_claimed_size_a_header_claiming_more_rows_than_stored_is_named(tmp_path):
    members = {k: npy(v) for k, v in columns().items()}
    members["qid"] = npy(np.array([7, 7, 9]), shape=(6,))
    path = archive(tmp_path / "short.npz", members)
    with pytest.raises(ClickLogError, match=r"short\.npz: column 'qid'.* holds 152 bytes"):
        read_click_log(path)


def test_claimed_size_a_deflated_log_past_the_budget_is_refused_before_inflating(
    tmp_path, monkeypatch
):
    rows = 4096
    features = np.zeros((rows, 256), np.float32)  # 4 MiB that deflate to a few KiB
    path = log_file(
        tmp_path / "bomb.npz",
        zipfile.ZIP_DEFLATED,
        session=np.arange(rows),
        qid=np.arange(rows),
        position=np.zeros(rows, np.int64),
        click=np.zeros(rows, np.uint8),
        doc_row=np.arange(rows),
        features=features,
    )
    assert path.stat().st_size < features.nbytes / 50
    monkeypatch.setattr(click_log, "available_memory_bytes", lambda: 2**20, raising=False)
    inflated = []
    real_load = np.load
    monkeypatch.setattr(np, "load", lambda *a, **k: inflated.append(a) or real_load(*a, **k))
    with pytest.raises(
        ClickLogError, match=r"bomb\.npz: reading it takes .* inflate to .* but 0\.00 GiB of memory"
    ):
        read_click_log(path)
    assert inflated == []
    monkeypatch.setattr(click_log, "available_memory_bytes", lambda: 2**30)
    assert read_click_log(path).features.shape == (rows, 256)  # within the budget: read


# ---- special files ----------------------------------------------------------------------------


def test_special_file_a_fifo_log_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "clicks.npz"
    os.mkfifo(fifo)
    outcome = []

    def read():
        try:
            read_click_log(fifo)
        except ValueError as error:
            outcome.append(str(error))

    reader = threading.Thread(target=read, daemon=True)  # a blocked open stays behind
    reader.start()
    reader.join(timeout=5)
    if reader.is_alive():  # unblock the reader so that the thread can end
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert not reader.is_alive(), "reading a FIFO blocked"
    assert outcome and f"{fifo} is a FIFO" in outcome[0]


def test_special_file_a_log_whose_column_appears_twice_is_named(tmp_path):
    members = {k: npy(v) for k, v in columns().items()}
    path = archive(tmp_path / "twice.npz", members)
    with pytest.warns(UserWarning, match="Duplicate name"), zipfile.ZipFile(path, "a") as handle:
        handle.writestr("click.npy", npy(np.array([0, 0, 1], np.uint8)))
    with pytest.raises(ClickLogError, match=r"twice\.npz: column\(s\) \['click'\] appear more"):
        read_click_log(path)


# ---- narrowed values --------------------------------------------------------------------------


@pytest.mark.parametrize(("stored", "shown"), [(np.uint16, "256"), (np.int64, "257")])
def test_narrowed_value_a_click_is_checked_before_it_becomes_uint8(tmp_path, stored, shown):
    click = np.array([1, 0, int(shown)], stored)
    path = log_file(tmp_path / "log.npz", click=click)
    with pytest.raises(
        ClickLogError, match=rf"log\.npz: row 2 \(session 1\): click {shown} is not"
    ):
        read_click_log(path)


@pytest.mark.parametrize(
    ("doc_row", "message"),
    [
        (np.array([4, 2**63, 8], np.uint64), "doc_row 9223372036854775808 is beyond int64"),
        (np.array([4, 1e19, 8]), r"doc_row 1e\+19 is beyond int64"),
        (np.array([4, 2.0**63, 8]), r"doc_row 9.223372036854776e\+18 is beyond int64"),
        (np.array([4, -1.0, 8]), r"doc_row -1.0 is negative"),
    ],
)
def test_narrowed_value_a_doc_row_beyond_int64_is_refused_as_stored(tmp_path, doc_row, message):
    path = log_file(tmp_path / "log.npz", doc_row=doc_row)
    with pytest.raises(ClickLogError, match=rf"log\.npz: row 1 \(session 0\): {message}"):
        read_click_log(path)


@pytest.mark.parametrize(("value", "shown"), [(1 + 1e-9, "1.000000001"), (1e-50, "1e-50")])
def test_narrowed_value_a_float64_propensity_is_checked_before_float32(tmp_path, value, shown):
    path = log_file(tmp_path / "log.npz", propensity=np.array([1.0, value, 0.5]))
    with pytest.raises(
        ClickLogError, match=rf"log\.npz: row 1 \(session 0\): propensity {shown} is not in"
    ):
        read_click_log(path)


def test_narrowed_value_a_float64_feature_beyond_float32_is_named(tmp_path):
    features = np.array([[0.5], [1e300], [2.0]])
    path = log_file(tmp_path / "log.npz", features=features)
    with pytest.raises(ClickLogError, match=r"row 1 \(session 0\): a feature is .*beyond float32"):
        read_click_log(path)


# ---- companion identity -----------------------------------------------------------------------


def letor_fold(root, first_qid):
    """A one-fold LETOR folder of 4 training rows (two queries from ``first_qid``)."""
    rng = np.random.default_rng(first_qid)
    for stem in ("train", "vali", "test"):
        qids = [first_qid, first_qid, first_qid + 1, first_qid + 1]
        features = rng.normal(size=(4, 3))
        write_letor(root / "Fold1" / f"{stem}.txt", features, [1, 0, 2, 0], qids)
    return root


def test_companion_identity_a_log_is_refused_on_another_fold_of_the_same_row_count(tmp_path):
    training_identity = click_datamodule.training_identity
    ours, other = (
        LetorDataModule(letor_fold(tmp_path / name, qid), cache_dir=tmp_path / "cache")
        for name, qid in (("ours", 10), ("other", 20))
    )
    assert ours.num_rows("train") == other.num_rows("train") == 4
    identity = training_identity(ours)
    rows = columns(doc_row=np.array([0, 1, 3]))
    log = click_log.ClickLog(**{k: v for k, v in rows.items() if k != "format"}, **identity)
    path = log.write(tmp_path / "clicks.npz")
    read = read_click_log(path)
    assert read.train_qids_sha256 == identity["train_qids_sha256"]
    assert read.train_files_sha256 == identity["train_files_sha256"]
    click_datamodule.ClickDataModule.logged(ours, read)  # the data it was written for
    theirs = training_identity(other)["train_qids_sha256"]
    with pytest.raises(
        ClickLogError,
        match=rf"clicks\.npz: written for other data: .* query ids it records have "
        rf"train_qids_sha256 {identity['train_qids_sha256']}, this run's training split has "
        rf"{theirs}\. Train on the data and fold it was written for",
    ):
        click_datamodule.ClickDataModule.logged(other, read_click_log(path))
