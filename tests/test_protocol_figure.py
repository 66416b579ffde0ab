"""The protocol's forest plot (benchmarks/protocol_figure.py, ``protocol.py --plot-only``): the
rows, means and intervals it draws are protocol.json's."""

import json

import pytest
from protocol import main as protocol_main
from protocol_figure import COLORS, forest_plot, forest_rows


def interval(mean, low, high, verdict):
    return {
        "mean": mean,
        "low": low,
        "high": high,
        "queries": 10,
        "confidence": 0.95,
        "verdict": verdict,
    }


def table(first, second):
    return {
        "rows": {
            "a/linear": {
                "paired": {"map": first, "ndcg@10": interval(0.01, 0.002, 0.02, "better")}
            },
            "peer_lightgbm": {"paired": None},
            "b/linear": {
                "paired": {"map": second, "ndcg@10": interval(-0.03, -0.05, -0.01, "worse")}
            },
            "c/linear": {"error": "failed", "paired": None},
        },
        "chosen": "a/linear",
    }


RECORD = {
    "rows": {"a/linear": {"trials": []}},  # the search record: not a dataset
    "mq2008": table(
        interval(0.002, -0.004, 0.008, "indistinguishable"), interval(-0.02, -0.03, -0.01, "worse")
    ),
    "other": table(
        interval(0.004, 0.001, 0.007, "better"), interval(0.0, -0.01, 0.01, "indistinguishable")
    ),
}


def test_the_rows_are_the_records_intervals_in_table_order():
    rows = forest_rows(RECORD)
    assert list(rows) == ["mq2008", "other"]
    first = rows["mq2008"]["map"]
    assert [i.row for i in first] == ["a/linear", "b/linear"]  # the reference and failures left out
    assert (first[1].mean, first[1].low, first[1].high, first[1].verdict) == (
        -0.02,
        -0.03,
        -0.01,
        "worse",
    )
    assert [i.verdict for i in rows["other"]["ndcg@10"]] == ["better", "worse"]


def test_each_panel_draws_each_rows_mean_and_interval(tmp_path):
    figure = forest_plot(RECORD, tmp_path / "forest.png")
    assert (tmp_path / "forest.png").read_bytes().startswith(b"\x89PNG")
    assert [ax.get_title() for ax in figure.axes] == [
        "mq2008: Δ AP vs lightgbm",
        "mq2008: Δ NDCG@10 vs lightgbm",
        "other: Δ AP vs lightgbm",
        "other: Δ NDCG@10 vs lightgbm",
    ]
    assert [t.get_text() for t in figure.axes[0].get_yticklabels()] == ["b/linear", "a/linear"]
    rows = forest_rows(RECORD)
    for ax, (dataset, metric) in zip(
        figure.axes, [(d, m) for d in rows for m in ("map", "ndcg@10")], strict=True
    ):
        drawn = {c.get_label(): c for c in ax.containers}
        for expected in rows[dataset][metric]:
            container = drawn[expected.row]
            x, y = container.lines[0].get_data()
            assert list(x) == [expected.mean]
            assert y[0] == (1 if expected.row == "a/linear" else 0)  # the first row on top
            segment = container.lines[2][0].get_segments()[0]
            assert [p[0] for p in segment] == pytest.approx([expected.low, expected.high])
            assert container.lines[0].get_color() == COLORS[expected.verdict]


def test_plot_only_redraws_from_the_json_without_running(tmp_path):
    (tmp_path / "protocol.json").write_text(json.dumps(RECORD))
    protocol_main(["--plot-only", "--out", str(tmp_path / "protocol.md")])
    assert (tmp_path / "protocol.png").read_bytes().startswith(b"\x89PNG")
    assert not (tmp_path / "protocol.md").exists()
    with pytest.raises(ValueError, match="no dataset table"):
        forest_plot({"rows": {}})
