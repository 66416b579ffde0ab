"""Property tests of the data rules (datamodules/reader.py): generated LETOR text with random
whitespace, line endings, comments, blank lines, qid and label spellings and sparse features.

Invariants: the reader either rejects a file naming ``file:line`` of the first bad line, or
reads exactly its data lines; the evaluator on an accepted file equals the per-query oracle of
``Eval-Score-4.0.pl`` on the generated rows; ``train.py`` on generated folds either refuses the
data before its first training step or finishes with its outputs. ``-m slow`` runs the long
profile."""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from differank.datamodules.reader import read_letor_file
from differank.rankers.metrics.evaluate import evaluate_files
from tests.oracles import letor_query_metrics_oracle

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LONG = settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])

BLANKS = st.text(alphabet=" \t", min_size=0, max_size=3)
SEPARATOR = st.text(alphabet=" \t", min_size=1, max_size=3)
ENDINGS = st.sampled_from(["\n", "\r\n", "\r"])
# Corruptions of one token and what the reader must say about the line.
BAD_LABELS = ["1.5", "+1", "1e0", "-1", "x", "32", "1024", "nan"]
BAD_QIDS = ["qid:0201", "qid:", "qid:1.5", "qid:-3", "qid:12345678901234567890", "qid=4", "4"]
BAD_FEATURES = ["0:1", "a:1", "1:", "1:x", "1", "2:1e", "3:--1"]


@st.composite
def values(draw) -> tuple[str, np.float32]:
    """A feature value spelled in one of several ways, and its float32."""
    value = np.float32(draw(st.floats(-1e6, 1e6, width=32, allow_subnormal=False)))
    spelling = draw(st.sampled_from(["{:.9g}", "{!r}", "{:.9e}", "{:.12f}"]))
    text = spelling.format(float(value))
    if draw(st.booleans()) and float(value) == int(value) and abs(value) < 1e6:
        text = str(int(value))
    return text, np.float32(float(text))


@st.composite
def data_line(draw) -> dict:
    label = draw(st.integers(0, 31))
    qid = draw(st.integers(0, 40))
    indices = sorted(draw(st.sets(st.integers(1, 8), max_size=6)))
    features = {index: draw(values()) for index in indices}
    label_text = str(label).zfill(draw(st.integers(1, 3)))  # leading zeros are fine on labels
    tokens = [label_text, f"qid:{qid}"] + [f"{j}:{features[j][0]}" for j in indices]
    bad = draw(st.sampled_from([None] * 6 + ["label", "qid", "feature"]))
    if bad == "label":
        tokens[0] = draw(st.sampled_from(BAD_LABELS))
    elif bad == "qid":
        tokens[1] = draw(st.sampled_from(BAD_QIDS))
    elif bad == "feature":
        tokens.insert(draw(st.integers(2, len(tokens))), draw(st.sampled_from(BAD_FEATURES)))
    text = draw(BLANKS)
    for token in tokens:
        text += token + draw(SEPARATOR)
    docid = draw(st.sampled_from([None, "docid", "free"]))
    if docid == "docid":
        text += f"#docid = D{qid}-{label} inc = 1"
    elif docid == "free":
        text += "# some words "
    return {
        "text": text,
        "bad": bad is not None,
        "label": label,
        "qid": qid,
        "features": {j: v for j, (_, v) in features.items()},
        "docid": {"docid": f"D{qid}-{label}", "free": "some words", None: ""}[docid],
    }


@st.composite
def letor_files(draw) -> tuple[bytes, list[dict], int | None, int]:
    """(file bytes, the rows, 1-based line of the first bad line or None, line count)."""
    kinds = draw(st.lists(st.sampled_from(["data"] * 4 + ["blank", "comment"]), max_size=14))
    text, rows, first_bad, previous_end = "", [], None, ""
    for number, kind in enumerate(kinds, start=1):
        if kind == "data":
            line = draw(data_line())
            content = line["text"]
            if line["bad"]:
                first_bad = first_bad or number
            else:
                rows.append({**line, "line": number})
        elif kind == "comment":
            content = draw(BLANKS) + "# comment " + draw(BLANKS)
        else:
            content = draw(BLANKS)
        end = draw(ENDINGS)
        if previous_end == "\r" and content == "" and end.startswith("\n"):
            content = " "  # "\r" + "\n" would be one line end, not two
        text += content + end
        previous_end = end
    if kinds and draw(st.booleans()):  # no line end after the last line
        text = text[: -len(previous_end)]
    return text.encode(), rows, first_bad, len(kinds)


def check_file(data, directory: Path) -> list[dict] | None:
    raw, rows, first_bad, _ = data
    path = directory / "data.txt"
    path.write_bytes(gzip.compress(raw) if len(raw) % 2 else raw)
    if first_bad is not None:
        with pytest.raises(ValueError, match=rf"data\.txt:{first_bad}: "):
            read_letor_file(path, cache_dir=directory / "cache")
        return None
    if not rows:
        with pytest.raises(ValueError, match=r"data\.txt: empty file"):
            read_letor_file(path, cache_dir=directory / "cache")
        return None
    parsed = read_letor_file(path, cache_dir=directory / "cache")
    assert parsed.labels.tolist() == [r["label"] for r in rows]
    assert parsed.qids.tolist() == [r["qid"] for r in rows]
    assert parsed.line_numbers.tolist() == [r["line"] for r in rows]
    assert parsed.docids.tolist() == [r["docid"] for r in rows]
    width = max([max(r["features"], default=0) for r in rows])
    expected = np.zeros((len(rows), width), np.float32)
    for i, row in enumerate(rows):
        for j, value in row["features"].items():
            expected[i, j - 1] = value
    np.testing.assert_array_equal(parsed.features, expected)
    return rows


def check_evaluator(rows: list[dict], directory: Path, seed: int) -> None:
    scores = np.random.default_rng(seed).integers(0, 4, size=len(rows)).tolist()  # many ties
    predictions = directory / "pred.txt"
    predictions.write_text("".join(f"{s}\n" for s in scores))
    ks = (1, 3, 5, 10)
    means = evaluate_files([directory / "data.txt"], predictions, ks=ks)
    queries: dict[int, tuple[list, list]] = {}
    for row, score in zip(rows, scores, strict=True):
        queries.setdefault(row["qid"], ([], []))
        queries[row["qid"]][0].append(score)
        queries[row["qid"]][1].append(row["label"])
    oracle = [letor_query_metrics_oracle(s, y, ks) for s, y in queries.values()]
    for key, value in means.items():
        assert value == pytest.approx(sum(q[key] for q in oracle) / len(oracle), abs=1e-12), key


def reader_and_evaluator(data, seed):
    with tempfile.TemporaryDirectory() as name:
        rows = check_file(data, Path(name))
        if rows is not None:
            check_evaluator(rows, Path(name), seed)


@FAST
@given(letor_files(), st.integers(0, 2**16))
def test_reader_reads_exactly_the_data_lines_or_names_the_bad_line(data, seed):
    reader_and_evaluator(data, seed)


@pytest.mark.slow
@LONG
@given(letor_files(), st.integers(0, 2**16))
def test_reader_and_evaluator_long_profile(data, seed):
    reader_and_evaluator(data, seed)


# ---- train.py never fails after its first step because of data ---------------------------------


@st.composite
def folds(draw) -> dict[str, bytes]:
    """Three split files of generated lines (a few bad or unseen features at random)."""
    return {name: draw(letor_files())[0] for name in ("train.txt", "vali.txt", "test.txt")}


def train_on(files: dict[str, bytes], directory: Path) -> str:
    """``train`` in-process; "refused" (a data error before any training step) or "trained"."""
    from differank.rankers.training.module import RankingModule
    from tests.conftest import run_config

    root = directory / "data"
    (root / "Fold1").mkdir(parents=True)
    for name, raw in files.items():
        (root / "Fold1" / name).write_bytes(raw)
    steps = []
    original = RankingModule.training_step

    def counted(self, batch, batch_idx):
        steps.append(batch_idx)
        return original(self, batch, batch_idx)

    RankingModule.training_step = counted
    overrides = [
        "data=letor",
        f"data.root={root}",
        f"data.cache_dir={directory / 'cache'}",
        "data.batch_size=4",
        "trainer.max_epochs=1",
        "logger=csv",
    ]
    try:
        run_config(overrides, directory / "run")
    except ValueError as error:
        assert not steps, f"failed after {len(steps)} training steps: {error}"
        return "refused"
    finally:
        RankingModule.training_step = original
    assert json.loads((directory / "run" / "test_metrics.json").read_text())
    return "trained"


CLEAN = (
    "1 qid:1 1:0.5 2:1 # docid = a\r\n0\tqid:1 1:0.25 2:3\r\n\n# c\n2 qid:2 1:1 2:2\r0 qid:2 2:1\n"
)


@pytest.mark.parametrize(
    "test_text, outcome",
    [
        (CLEAN, "trained"),
        (CLEAN + "1 qid:3 1:1 3:1\n0 qid:3 1:0\n", "refused"),  # feature 3 never trained
        (CLEAN + "1 qid:3 1:1.5e0\n0 qid:03 1:0\n", "refused"),
        (CLEAN + "40 qid:3 1:1\n", "refused"),
    ],
    ids=["clean", "unseen-feature", "bad-label-and-qid", "label-40"],
)
def test_train_refuses_bad_data_before_training_or_finishes(tmp_path, test_text, outcome):
    files = {
        "train.txt": CLEAN.encode(),
        "vali.txt": CLEAN.encode(),
        "test.txt": test_text.encode(),
    }
    assert train_on(files, tmp_path) == outcome


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(folds())
def test_train_never_fails_after_its_first_step_because_of_data(files):
    with tempfile.TemporaryDirectory() as name:
        train_on(files, Path(name))


def test_max_epochs_zero_is_refused_before_anything_runs(tmp_path):
    from tests.conftest import run_config

    overrides = [
        "data.n_train_queries=10",
        "data.n_val_queries=5",
        "data.n_test_queries=5",
        "trainer.max_epochs=0",
        "logger=csv",
    ]
    with pytest.raises(ValueError, match="trainer.max_epochs=0 trains nothing"):
        run_config(overrides, tmp_path / "run")
    assert not (tmp_path / "run" / "test_metrics.json").exists()
