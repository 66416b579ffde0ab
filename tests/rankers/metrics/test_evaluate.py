"""The LETOR prediction-file evaluator: reading, grouping by qid, the CLI and its errors."""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

from differank.datamodules import letor_text
from differank.datamodules.reader import NUMBER
from differank.rankers.metrics.evaluate import (
    convention_means,
    evaluate_arrays,
    evaluate_files,
    main,
    per_query_metrics,
    read_labels_and_qids,
    read_rows,
)
from tests.conftest import ROOT, requires_mq2008
from tests.oracles import letor_query_metrics_oracle, trec_query_metrics_oracle

MQ2008 = ROOT.parent / "shared" / "data" / "MQ2008"

# Two queries; qid 7's lines are split into two blocks around qid 3 (they still form one query).
#   qid 7, file order: labels [2, 0, 1] + [1], scores [0.5, 0.9, 0.5] + [0.1]  (= query A below)
#   qid 3: labels [0, 0], scores [1.0, 2.0]  (no relevant document: 0 everywhere, counted)
FEATURES = """\
2 qid:7 1:0.1 2:0.2 #docid = a1
0 qid:7 1:0.3 2:0.4 #docid = a2
1 qid:7 1:0.5 2:0.6 #docid = a3
0 qid:3 1:0.1 2:0.1 #docid = b1
0 qid:3 1:0.2 2:0.2 #docid = b2
1 qid:7 1:0.7 2:0.8 #docid = a4
"""
PREDICTIONS = "0.5\n0.9\n0.5\n1.0\n2.0\n0.1\n"
D3 = 1.0 / math.log2(3.0)
# Query qid 7 = query A of test_metrics: ranked labels [0, 2, 1, 1] (tie 0.5/0.5 keeps file
# order), NDCG@1..4 = [0, 3/4, (3 + D3)/(4 + D3), (3.5 + D3)/(4 + D3)], NDCG@5 = 0 (k > n),
# AP = (1/2 + 2/3 + 3/4)/3, P@1 = 0, P@3 = 2/3, P@5 = 3/5. Dataset means halve these (qid 3: 0).
QA_NDCG = [0.0, 0.75, (3 + D3) / (4 + D3), (3.5 + D3) / (4 + D3)]
EXPECTED = {
    "map": (1 / 2 + 2 / 3 + 3 / 4) / 3 / 2,
    "mean_ndcg": sum(QA_NDCG) / 4 / 2,
    "ndcg@1": 0.0,
    "ndcg@3": QA_NDCG[2] / 2,
    "ndcg@5": 0.0,
    "p@1": 0.0,
    "p@3": 2 / 3 / 2,
    "p@5": 3 / 5 / 2,
}


@pytest.fixture
def tiny(tmp_path):
    features = tmp_path / "test.txt"
    features.write_text(FEATURES)
    predictions = tmp_path / "pred.txt"
    predictions.write_text(PREDICTIONS)
    return features, predictions


@pytest.fixture
def cli(capsys):
    """``main(argv)`` in-process -> (exit code, stdout, stderr); argparse errors exit 2."""

    def call(*args):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exit_:
            code = exit_.code
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return call


def test_evaluate_files_golden(tiny):
    means = evaluate_files([tiny[0]], tiny[1], ks=(1, 3, 5))
    assert list(means) == list(EXPECTED)
    for key, value in EXPECTED.items():
        assert isinstance(means[key], float)
        assert means[key] == pytest.approx(value, abs=1e-15), key


def test_non_contiguous_qid_blocks_join_one_query_in_first_appearance_order(tiny):
    qids, values = per_query_metrics([tiny[0]], tiny[1], ks=(5,))
    assert qids == [7, 3]
    assert values["p@5"].tolist() == pytest.approx([3 / 5, 0.0], abs=1e-15)


def test_cli_prints_table_and_writes_json(tiny, tmp_path, cli):
    out = tmp_path / "metrics.json"
    code, stdout, stderr = cli(*tiny, "--ks", "1", "3", "5", "--json", out)
    assert code == 0, stderr
    header, _, row = stdout.strip().splitlines()
    columns = [c.strip() for c in header.strip("|").split("|")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert columns == ["queries", "MAP", "MeanNDCG", "NDCG@1", "NDCG@3", "NDCG@5", "P@1", "P@3",
                       "P@5"]  # fmt: skip
    assert cells[0] == "2"
    assert cells[1:] == [f"{value:.4f}" for value in EXPECTED.values()]
    written = json.loads(out.read_text())
    conventions = written.pop("conventions")
    assert written == evaluate_files([tiny[0]], tiny[1], ks=(1, 3, 5))  # the same floats
    assert conventions == convention_means(*read_rows([tiny[0]], tiny[1]), ks=(1, 3, 5))


@pytest.mark.slow
def test_python_dash_m_runs_the_same_command_line(tiny, cli):
    """The module entry point, in a subprocess (slow: imports torch); the rest run ``main``."""
    result = subprocess.run(
        [sys.executable, "-m", "differank.rankers.metrics.evaluate", *map(str, tiny)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == cli(*tiny)[1]


def test_cli_conventions(tiny, tmp_path, cli):
    out = tmp_path / "trec.json"
    assert cli(*tiny, "--ks", "5", "--convention", "trec", "--json", out)[0] == 0
    trec = json.loads(out.read_text())
    oracle = trec_query_metrics_oracle([0.5, 0.9, 0.5, 0.1], [2, 0, 1, 1], (5,))
    assert trec["ndcg@5"] == pytest.approx(oracle["ndcg@5"] / 2, abs=1e-15)
    assert cli(*tiny, "--ks", "5", "--short-list", "ndcg_at_n", "--json", out)[0] == 0
    assert json.loads(out.read_text())["ndcg@5"] == pytest.approx(QA_NDCG[3] / 2, abs=1e-15)
    code, _, err = cli(*tiny, "--convention", "trec", "--short-list", "zero")
    assert code == 2 and "quirk" in err


def test_several_feature_files_gz_and_trailing_blank_line(tmp_path, cli):
    first, second = tmp_path / "S1.txt", tmp_path / "S2.txt.gz"
    lines = FEATURES.splitlines(keepends=True)
    first.write_text("".join(lines[:4]))
    with gzip.open(second, "wt") as handle:
        handle.write("".join(lines[4:]))
    predictions = tmp_path / "pred.txt"
    predictions.write_text(PREDICTIONS + "\n")
    means = evaluate_files([first, second], predictions, ks=(1, 3, 5))
    for key, value in EXPECTED.items():
        assert means[key] == pytest.approx(value, abs=1e-15), key
    code, out, _ = cli(first, second, predictions)
    assert code == 0 and "| 2 |" in out


def test_line_count_mismatch_names_both_counts_and_files(tiny, cli):
    tiny[1].write_text("0.5\n0.9\n")
    code, _, err = cli(*tiny)
    assert code == 2
    for part in ("6 rows", "2 scores", str(tiny[0]), str(tiny[1])):
        assert part in err
    with pytest.raises(ValueError, match="line count mismatch"):
        evaluate_files([tiny[0]], tiny[1])


@pytest.mark.parametrize("bad", ["abc", "nan", "", "1.0 2.0", "3_0", "0x10", "1e", "."])
def test_bad_score_line_names_file_and_line(tiny, bad, cli):
    tiny[1].write_text(PREDICTIONS.replace("2.0\n", f"{bad}\n"))
    code, _, err = cli(*tiny)
    assert code == 2 and f"{tiny[1]}:5" in err


def test_an_underscore_is_not_read_as_a_digit_separator(tiny):
    """Python's float("3_0") is 30.0; the reader's syntax has no underscores."""
    tiny[1].write_text(PREDICTIONS.replace("2.0\n", "3_0\n"))
    with pytest.raises(ValueError, match=rf"{tiny[1].name}:5: score is not a number: '3_0'"):
        evaluate_files([tiny[0]], tiny[1])


def test_a_non_ascii_byte_names_file_line_and_column(tiny, cli):
    tiny[1].write_bytes(PREDICTIONS.encode().replace(b"0.9\n", b"0.9\xb5\n"))
    message = f"{tiny[1]}:2: byte 0xb5 at column 4 is not ASCII"
    with pytest.raises(ValueError, match=re.escape(message)):
        evaluate_files([tiny[0]], tiny[1])
    code, _, err = cli(*tiny)
    assert code == 2 and message in err


def evaluate_within(seconds, *args):
    """``main(args)`` in a thread: its exit code, or None when it is still running after
    ``seconds`` (blocked, e.g. opening a FIFO that no process writes)."""
    done = []
    worker = threading.Thread(target=lambda: done.append(main([str(a) for a in args])))
    worker.daemon = True
    worker.start()
    worker.join(seconds)
    return done[0] if done else None


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_scores_file_that_is_not_a_regular_file_is_refused_without_blocking(
    tiny, tmp_path, kind, capsys
):
    scores = tmp_path / f"scores.{kind}"
    if kind == "fifo":
        os.mkfifo(scores)
    else:
        scores.mkdir()
    code = evaluate_within(20, tiny[0], scores)
    if code is None and kind == "fifo":  # the blocked reader gets end-of-file and ends
        os.close(os.open(scores, os.O_WRONLY | os.O_NONBLOCK))
    assert code == 2, "the evaluator blocked or accepted it"
    what = {"fifo": "a FIFO (named pipe)", "directory": "a directory"}[kind]
    assert f"{scores} is {what}, not a regular file" in capsys.readouterr().err


@pytest.mark.parametrize(
    "token",
    [
        "3",
        "-0.5",
        ".5",
        "1.",
        "+2E2",
        "1e-3",
        "inf",
        "-Infinity",
        "NaN",
        "3_0",
        "1e",
        ".",
        "",
        "0x10",
        "1.5.2",
        "e3",
        "+",
        "1e+",
        "infinit",
        "nan1",
        "1 2",
        "١",
    ],
)
def test_the_scores_syntax_is_the_readers(token):
    """``reader.NUMBER`` accepts a token exactly when the compiled scanner reads it as a
    feature value."""
    buffer = np.frombuffer(token.encode(), np.uint8)
    _, end = letor_text._parse_value(buffer, 0, len(buffer), letor_text.POW10)
    assert bool(NUMBER.fullmatch(token)) == (end == len(buffer) and len(buffer) > 0)


@pytest.mark.parametrize(
    "bad, message",
    [
        ("qid:7 1:0.1", "label 'qid:7' is not an integer"),
        ("-1 qid:7 1:0.1", "label '-1' is not an integer"),
        ("1.5 qid:7 1:0.1", "label '1.5' is not an integer"),
        ("1024 qid:7 1:0.1", "label 1024 is larger than 31"),
        ("1 7 1:0.1", "expected 'qid:<integer>'"),
        ("1 qid: 1:0.1", "a qid is a decimal integer"),
        ("1 qid:07 1:0.1", "without leading zeros"),
        ("1 qid:99999999999999999999 1:0.1", "at most 18 digits"),
    ],
)
def test_bad_feature_line_names_file_and_line(tiny, bad, message, cli):
    lines = FEATURES.splitlines()
    lines[2] = bad
    tiny[0].write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"{tiny[0].name}:3: .*{message}"):
        read_labels_and_qids([tiny[0]])
    code, _, err = cli(*tiny)
    assert code == 2 and f"{tiny[0]}:3: " in err and message in err


def test_accepts_what_training_accepts_blank_comment_lines_cr_and_tabs(tiny, tmp_path):
    """The same reader as training: formatting that the reader accepts scores identically."""
    messy = tmp_path / "messy.txt.gz"
    lines = FEATURES.splitlines()
    text = "# header comment\r\n\r\n" + "\r".join(lines[:3]) + "\r\n\t\n" + "\n".join(lines[3:])
    messy.write_bytes(gzip.compress(text.replace(" qid", "\tqid").encode()))
    assert evaluate_files([messy], tiny[1], ks=(1, 3, 5)) == evaluate_files(
        [tiny[0]], tiny[1], ks=(1, 3, 5)
    )


def test_damaged_gzip_is_an_error_naming_the_file(tiny, tmp_path, cli):
    broken = tmp_path / "test.txt.gz"
    broken.write_bytes(gzip.compress(FEATURES.encode() * 20)[:-30])
    code, _, err = cli(broken, tiny[1])
    assert code == 2 and f"error: {broken}: truncated gzip file" in err


def test_json_into_a_missing_directory_is_created(tiny, tmp_path, cli):
    out = tmp_path / "new" / "dir" / "m.json"
    assert cli(*tiny, "--json", out)[0] == 0
    assert json.loads(out.read_text())["map"] == evaluate_files([tiny[0]], tiny[1])["map"]


def test_evaluate_arrays_equals_evaluate_files(tiny):
    labels, qids = read_labels_and_qids([tiny[0]])
    scores = [float(v) for v in PREDICTIONS.split()]
    assert evaluate_arrays(scores, labels, qids, ks=(1, 3, 5)) == evaluate_files(
        [tiny[0]], tiny[1], ks=(1, 3, 5)
    )
    with pytest.raises(ValueError, match="one entry per row"):
        evaluate_arrays(scores[:2], labels, qids)


def test_cli_needs_a_prediction_file(tiny, cli):
    code, _, err = cli(tiny[0])
    assert code == 2 and "PREDICTION_FILE" in err


@pytest.mark.skipif(not MQ2008.is_dir(), reason=f"MQ2008 not found at {MQ2008}")
def test_mq2008_fold_file_matches_oracle(tmp_path):
    """A real test file (S5, 156 queries) scored by feature 1 (many ties) against the oracle."""
    path = MQ2008 / "S5.txt.gz"
    with gzip.open(path, "rt") as handle:
        lines = handle.read().splitlines()
    predictions = tmp_path / "pred.txt"
    scores = [float(line.split()[2].split(":")[1]) for line in lines]
    predictions.write_text("".join(f"{s:.17g}\n" for s in scores))
    ks = (1, 3, 5, 10)
    means = evaluate_files([path], predictions, ks=ks)
    queries: dict[str, tuple[list[float], list[int]]] = {}
    for line, score in zip(lines, scores, strict=True):
        label, qid = line.split()[:2]
        queries.setdefault(qid, ([], []))
        queries[qid][0].append(score)
        queries[qid][1].append(int(label))
    oracle = [letor_query_metrics_oracle(s, y, ks) for s, y in queries.values()]
    assert len(oracle) == 156
    for key, value in means.items():
        assert value == pytest.approx(sum(q[key] for q in oracle) / len(oracle), abs=1e-12), key


def test_convention_means_side_by_side(tiny):
    """qid 7 is query A; qid 3 has no relevant document: 0 (letor, trec), 1, or dropped."""
    means = convention_means(*read_rows([tiny[0]], tiny[1]), ks=(1, 3, 5))
    assert list(means) == ["letor", "trec", "no_relevant_as_1", "no_relevant_dropped"]
    keys = ["map", "ndcg@1", "ndcg@3", "ndcg@5"]
    assert means["letor"] == {"queries": 2, **{k: pytest.approx(EXPECTED[k]) for k in keys}}
    query_a = trec_query_metrics_oracle([0.5, 0.9, 0.5, 0.1], [2, 0, 1, 1], (1, 3, 5))
    for name, queries, other in [
        ("trec", 2, 0.0),
        ("no_relevant_as_1", 2, 1.0),
        ("no_relevant_dropped", 1, None),
    ]:
        assert means[name]["queries"] == queries
        for key in keys:
            expected = query_a[key] if other is None else (query_a[key] + other) / 2
            assert means[name][key] == pytest.approx(expected, abs=1e-15), (name, key)


def test_cli_convention_no_relevant_dropped_counts_the_kept_queries(tiny, cli):
    code, stdout, _ = cli(*tiny, "--convention", "no_relevant_dropped")
    assert code == 0 and stdout.splitlines()[2].startswith("| 1 |")


def test_trec_convention_is_trec_evals(tiny):
    """trec_eval (through ir-measures' pytrec_eval) on untied random queries, some without a
    relevant document (trec_eval counts them as 0), agrees with convention='trec', given the
    gains 2^label - 1 (trec_eval's own default gain is the label)."""
    ir_measures = pytest.importorskip("ir_measures", reason="ir-measures is a dev extra")
    g = torch.Generator().manual_seed(0)
    qids = torch.randint(0, 40, (600,), generator=g)
    labels = torch.randint(0, 3, (600,), generator=g).double() * (qids % 5 != 0)
    scores = torch.randn(600, generator=g, dtype=torch.float64)
    rows = list(enumerate(zip(qids.tolist(), labels.tolist(), scores.tolist(), strict=True)))
    qrels = [ir_measures.Qrel(str(q), str(d), int(y)) for d, (q, y, _) in rows]
    run = [ir_measures.ScoredDoc(str(q), str(d), s) for d, (q, _, s) in rows]
    gains = {0: 0, 1: 1, 2: 3}
    measures = [ir_measures.AP, *(ir_measures.nDCG(gains=gains) @ k for k in (1, 3, 10))]
    trec_eval = ir_measures.pytrec_eval.calc_aggregate(measures, qrels, run)
    ours = evaluate_arrays(scores, labels, qids, ks=(1, 3, 10), convention="trec")
    assert ours["map"] == pytest.approx(trec_eval[ir_measures.AP], abs=1e-4)
    for k in (1, 3, 10):
        assert ours[f"ndcg@{k}"] == pytest.approx(
            trec_eval[ir_measures.nDCG(gains=gains) @ k], abs=1e-4
        )


@pytest.mark.slow
@requires_mq2008
def test_mq2008_fold1_hinge_run_under_letor_and_trec_rules(tmp_path):
    """The issue's reference run: one ranking, NDCG@10 0.2029 by the LETOR script and 0.4652 by
    trec_eval's rules (docs/metrics.md#conventions)."""
    from tests.conftest import run_config

    overrides = ["experiment=hinge_paper", "data.fold=1", f"data.root={MQ2008}"]  # docs/metrics.md
    run_config([*overrides, "logger=csv", "quiet=true"], tmp_path)
    conventions = json.loads((tmp_path / "test_metrics.json").read_text())["conventions"]
    assert conventions["letor"]["ndcg@10"] == pytest.approx(0.2029, abs=5e-4)
    assert conventions["trec"]["ndcg@10"] == pytest.approx(0.4652, abs=5e-4)
    assert conventions["letor"]["map"] == conventions["trec"]["map"]  # AP has no discount
