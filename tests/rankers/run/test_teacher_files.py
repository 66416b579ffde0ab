"""Teacher and ensemble files held to the rules of every file differank reads (issue #41):
foreign model files are scored where a crash cannot take the run down, special files and
oversized files are refused by name before they are opened, and the cached scores are tied to
their teacher and data and checked for alteration."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from differank.rankers.run import ensemble
from differank.rankers.run import teacher_scores as cached
from differank.rankers.run.teachers import (
    EnsembleTeacher,
    LightGBMTeacher,
    Teacher,
    TeacherFileError,
    XGBoostTeacher,
)

lightgbm = pytest.importorskip("lightgbm")
xgboost = pytest.importorskip("xgboost")

ROWS, GROUP = 120, 12


def ranking_data(n_features: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    features = rng.random((ROWS, n_features)).astype(np.float32)
    labels = rng.integers(0, 3, ROWS)
    return features, labels, [GROUP] * (ROWS // GROUP)


@pytest.fixture(scope="module")
def lightgbm_model(tmp_path_factory) -> Path:
    """A small LightGBM lambdarank model of 5 features, saved as text."""
    features, labels, groups = ranking_data(5)
    params = {"objective": "lambdarank", "num_leaves": 4, "min_data_in_leaf": 5, "verbose": -1}
    booster = lightgbm.train(params, lightgbm.Dataset(features, labels, group=groups), 3)
    path = tmp_path_factory.mktemp("lightgbm") / "model.txt"
    booster.save_model(str(path))
    return path


def xgboost_model(folder: Path, n_features: int) -> Path:
    features, labels, groups = ranking_data(n_features)
    matrix = xgboost.DMatrix(features, labels, group=groups)
    booster = xgboost.train({"objective": "rank:ndcg", "max_depth": 2}, matrix, 3)
    path = folder / f"model_{n_features}.json"
    booster.save_model(str(path))
    return path


def split_of(n_features: int) -> SimpleNamespace:
    """What a teacher reads of a split: its raw features."""
    return SimpleNamespace(features=ranking_data(n_features, seed=1)[0])


def forged(source: Path, folder: Path, edit) -> Path:
    path = folder / f"forged_{source.name}"
    path.write_text(edit(source.read_text()))
    return path


def test_a_sound_gradient_boosted_teacher_scores_as_its_library(lightgbm_model, tmp_path):
    """The child process gives the library's own scores, row for row."""
    split = split_of(5)
    want = lightgbm.Booster(model_file=str(lightgbm_model)).predict(split.features)
    np.testing.assert_array_equal(LightGBMTeacher(lightgbm_model).score(split), want)
    model = xgboost_model(tmp_path, 5)
    want = xgboost.Booster(model_file=str(model)).predict(xgboost.DMatrix(split.features))
    np.testing.assert_allclose(XGBoostTeacher(model).score(split), want, rtol=0, atol=0)


def test_foreign_file_an_absurd_lightgbm_tree_size_is_a_named_error(lightgbm_model, tmp_path):
    """tree_sizes claiming 10^11 bytes: LightGBM reads past the file (SIGSEGV)."""
    path = forged(
        lightgbm_model,
        tmp_path,
        lambda text: re.sub(r"tree_sizes=(\d+) ", "tree_sizes=99999999999 ", text, count=1),
    )
    with pytest.raises(TeacherFileError, match=rf"{re.escape(str(path))} .*lightgbm crashed"):
        LightGBMTeacher(path).score(split_of(5))


def test_foreign_file_one_extra_nan_leaf_is_a_named_error(lightgbm_model, tmp_path):
    """One more leaf value than leaves: LightGBM's loader aborts (SIGABRT); the run does not."""
    path = forged(
        lightgbm_model,
        tmp_path,
        lambda text: re.sub(r"(leaf_value=[^\n]*)", r"\1 nan", text, count=1),
    )
    with pytest.raises(TeacherFileError, match=r"lightgbm crashed \(SIGABRT\).*Model format"):
        LightGBMTeacher(path).score(split_of(5))


def test_foreign_file_an_xgboost_model_of_other_features_is_refused(tmp_path):
    """XGBoost itself scores 5 features with a model of 9 without a word."""
    model = xgboost_model(tmp_path, 9)
    with pytest.raises(TeacherFileError, match="reads 9 features, the data has 5"):
        XGBoostTeacher(model).score(split_of(5))


def test_foreign_file_a_file_of_another_library_is_a_named_error(lightgbm_model):
    """The library's refusal, its first line (not its C++ stack), named with the file."""
    with pytest.raises(TeacherFileError, match=r"xgboost failed .*Invalid model format") as error:
        XGBoostTeacher(lightgbm_model).score(split_of(5))
    assert str(lightgbm_model) in str(error.value) and "[bt]" not in str(error.value)


# ---- the cached scores ----------------------------------------------------------------------


class Constant(Teacher):
    """A teacher scoring row i as i (no model file to run), counting its calls."""

    calls = 0

    def score(self, split):
        type(self).calls += 1
        return np.arange(len(split.features), dtype=np.float64)


class FakeData:
    """The raw data module's face to the teacher cache, with the split it is given."""

    def __init__(self, qids: np.ndarray, features: np.ndarray) -> None:
        self.split = SimpleNamespace(qids=qids, features=features, name="train")

    def file_sha256(self, split):
        return ["same files"]

    def num_rows(self, split):
        return len(self.split.qids)

    def split_data(self, split):
        return self.split


def fake_data(qids=None) -> FakeData:
    features = np.arange(20, dtype=np.float32).reshape(10, 2)
    return FakeData(np.repeat([1, 2], 5) if qids is None else np.asarray(qids), features)


@pytest.fixture
def teacher(tmp_path) -> Constant:
    path = tmp_path / "teacher.txt"
    path.write_text("a teacher")
    Constant.calls = 0
    return Constant(path)


def test_foreign_file_an_altered_score_cache_is_rebuilt_with_a_warning(teacher, tmp_path, caplog):
    """A finite score changed in the cached file is caught by the digest stored beside it."""
    data, cache_dir = fake_data(), tmp_path / "cache"
    first = cached.split_teacher_scores(teacher, data, "train", cache_dir)
    [entry] = (cache_dir / "distill" / "teacher_scores").iterdir()
    scores = np.load(entry / "scores.npy")
    scores[3] = 1234.0
    np.save(entry / "scores.npy", scores)
    with caplog.at_level(logging.WARNING):
        again = cached.split_teacher_scores(teacher, data, "train", cache_dir)
    assert "was altered" in caplog.text and Constant.calls == 2
    np.testing.assert_array_equal(again, first)
    caplog.clear()
    cached.split_teacher_scores(teacher, data, "train", cache_dir)  # the entry was repaired
    assert Constant.calls == 2 and "altered" not in caplog.text


def test_companion_identity_the_cache_follows_the_query_ids_not_only_the_files(teacher, tmp_path):
    """The same files read otherwise (other query ids or features) are other data: the cache
    records the split's fingerprint and the teacher's digest, and is rebuilt for another."""
    cache_dir = tmp_path / "cache"
    cached.split_teacher_scores(teacher, fake_data(), "train", cache_dir)
    cached.split_teacher_scores(teacher, fake_data(), "train", cache_dir)
    assert Constant.calls == 1
    cached.split_teacher_scores(teacher, fake_data(np.repeat([1, 3], 5)), "train", cache_dir)
    assert Constant.calls == 2
    metas = [json.loads(p.read_text()) for p in cache_dir.rglob("meta.json")]
    assert {m["teacher_sha256"] for m in metas} == {teacher.sha256()}
    assert len({m["data_sha256"] for m in metas}) == 2


# ---- special and oversized files ------------------------------------------------------------


def special_file(kind: str, folder: Path) -> Path:
    path = folder / kind
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "dev_zero":
        path.symlink_to("/dev/zero")
    elif kind == "dangling_link":
        path.symlink_to(folder / "gone.ckpt")
    return path


SPECIAL = {
    "fifo": "a FIFO",
    "directory": "a directory",
    "dev_zero": "a character device",
    "dangling_link": "a dangling symbolic link",
}


@pytest.mark.timeout(20)
@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_special_file_an_ensemble_member_is_refused_before_it_is_opened(kind, tmp_path):
    member = special_file(kind, tmp_path)
    record = tmp_path / "ensemble.json"
    record.write_text(json.dumps({"checkpoints": [str(member)], "weights": [1.0]}))
    with pytest.raises((ValueError, FileNotFoundError), match=SPECIAL[kind]) as error:
        EnsembleTeacher(record).files()
    assert "member 1 of" in str(error.value)


@pytest.mark.timeout(20)
@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_special_file_a_teacher_path_is_refused_by_what_it_is(kind, tmp_path):
    with pytest.raises((ValueError, FileNotFoundError), match=SPECIAL[kind]):
        LightGBMTeacher(special_file(kind, tmp_path))


@pytest.mark.timeout(20)
def test_special_file_the_ensemble_cli_names_a_fifo_member(tmp_path, capsys):
    fifo = special_file("fifo", tmp_path)
    assert ensemble.main([str(fifo), "--out", str(tmp_path / "out")]) == 2
    assert "a FIFO" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_claimed_size_an_ensemble_json_larger_than_a_record_is_refused(tmp_path):
    record = tmp_path / "ensemble.json"
    with open(record, "wb") as handle:  # sparse: no disk used
        handle.truncate(ensemble.MAX_RECORD_BYTES + 1)
    with pytest.raises(ValueError, match=r"more than an ensemble.json may hold"):
        EnsembleTeacher(record).files()


def test_claimed_size_a_member_larger_than_the_free_memory_is_refused(tmp_path, monkeypatch):
    member = tmp_path / "member.ckpt"
    member.write_bytes(b"\0" * 4096)
    record = tmp_path / "ensemble.json"
    record.write_text(json.dumps({"checkpoints": [str(member)], "weights": [1.0]}))
    monkeypatch.setattr(ensemble, "available_memory_bytes", lambda: 1024)
    with pytest.raises(ValueError, match=r"member 1 of .* may hold \(1024 bytes\)"):
        EnsembleTeacher(record).files()
