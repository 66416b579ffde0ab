"""Smoke tests: every benchmark script runs end to end on tiny inputs; the MSLR-shaped generator
keeps its shape promises. The real benchmark runs are not part of the test suite."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import papers  # benchmarks/ is on the path (tests/conftest.py), as in `python benchmarks/x.py`
import peers
import pytest
import reproduce
import scale
import throughput
import torch

from differank.datamodules.mslr_synthetic import (
    MSLR_WEB30K,
    generate_mslr,
    iterate_batches,
    query_lengths,
)
from tests.conftest import MQ2008, requires_mq2008

ROOT = Path(__file__).resolve().parents[1]
RUN_LINE = re.compile(r"^Run: commit ([0-9a-f]+(\+dirty)?|unknown), torch ", re.MULTILINE)


class TestMslrSynthetic:
    def test_full_shape_lengths(self):
        lengths = query_lengths(
            MSLR_WEB30K["n_queries"], MSLR_WEB30K["n_docs"], MSLR_WEB30K["max_list"], seed=0
        )
        assert len(lengths) == 31531 and lengths.sum() == 3771125
        assert lengths.max() == 1251 and lengths.min() >= 1

    def test_small_set_is_deterministic_and_labelled(self):
        a = generate_mslr(
            n_queries=30, n_docs=900, n_features=12, max_list=80, seed=3, chunk_queries=7
        )
        b = generate_mslr(
            n_queries=30, n_docs=900, n_features=12, max_list=80, seed=3, chunk_queries=7
        )
        assert np.array_equal(a.features, b.features) and np.array_equal(a.labels, b.labels)
        assert a.features.dtype == np.float32 and a.features.shape == (900, 12)
        assert set(np.unique(a.labels)) <= {0.0, 1.0, 2.0, 3.0, 4.0}
        assert a.offsets[-1] == 900 and a.lengths.max() == 80

    def test_batches_follow_the_contract_and_cap(self):
        data = generate_mslr(n_queries=20, n_docs=600, n_features=5, max_list=90)
        seen = 0
        for batch in iterate_batches(data, 8, max_list=32):
            b, length, f = batch["features"].shape
            assert f == 5 and length <= 32 and batch["mask"].dtype == torch.bool
            assert batch["labels"].shape == (b, length)
            assert bool((batch["features"][~batch["mask"]] == 0).all())
            seen += b
        assert seen == 20


def test_papers_tables_pin_published_numbers():
    text = papers.all_tables()
    assert "| ConeRank-SG | 0.454 | 0.464 |" in text
    assert "ConvexLoss_NDCG" in text and "DomRank-Layered" in text
    assert papers.mq2008_reference()["RankBoost (paper)"]["map"] == 0.467


def test_reproduce_tiny_suite_with_a_peer(tmp_path):
    out = tmp_path / "tiny.md"
    reproduce.main(
        [
            "--suite",
            "tiny",
            "--only",
            "ranknet",
            "--peers",
            "ranksvm",
            "--tiny",
            "--out",
            str(out),
            "--runs",
            str(tmp_path / "runs"),
        ]
    )
    text = out.read_text()
    assert "| ranknet | ours |" in text and "| peer_ranksvm | peer |" in text
    assert "failed" not in text
    assert RUN_LINE.search(text.strip().splitlines()[-1])  # provenance, the last line
    rows = json.loads(out.with_suffix(".json").read_text())
    assert set(rows["ranknet"][0]) >= {"map", "mean_ndcg", "seconds", "val_map"}
    assert rows["meta"]["torch"] == torch.__version__
    assert out.with_suffix(".png").stat().st_size > 0
    predictions = tmp_path / "runs" / "peer_ranksvm" / "fold1" / "predictions" / "test.txt"
    assert predictions.is_file()
    # an earlier run's JSON: its rows join the table, its "meta" is not a row
    again = tmp_path / "again.md"
    reproduce.main(["--include", str(out.with_suffix(".json")), "--out", str(again)])
    text = again.read_text()
    assert "| ranknet | ours |" in text and "| meta |" not in text


def test_peers_script_reads_the_data_of_hydra_overrides(tmp_path, monkeypatch, capsys):
    """``peers.py --overrides data=...`` reads the fold through the same data config as
    train.py and reproduce.py (here the tiny synthetic set), not through --root."""
    overrides = ["data=synthetic", "data.n_train_queries=40", "data.n_val_queries=20"]
    argv = ["peers.py", "--peers", "ranksvm", "--tiny", "--folds", "1", "--runs", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", [*argv, "--overrides", *overrides, "data.n_test_queries=20"])
    peers.main()
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["peer"] == "ranksvm" and row["fold"] == 1 and 0.0 < row["map"] <= 1.0
    assert (tmp_path / "peer_ranksvm" / "fold1" / "predictions" / "test.txt").is_file()


@pytest.mark.parametrize("peer", ["lightgbm", "xgboost"])
def test_tree_peers_tiny(peer, tmp_path):
    pytest.importorskip(peers.MODULES[peer])
    from differank.datamodules.synthetic import SyntheticLetorDataModule

    datamodule = SyntheticLetorDataModule(n_train_queries=40, n_val_queries=20, n_test_queries=20)
    row = peers.run_peer(peer, datamodule, tmp_path, tiny=True)
    assert 0.0 <= row["map"] <= 1.0 and 0.0 <= row["val_map"] <= 1.0
    lines = (tmp_path / "predictions" / "test.txt").read_text().splitlines()
    assert len(lines) == datamodule.num_rows("test")


def test_throughput_tiny(tmp_path):
    out = tmp_path / "throughput.md"
    throughput.main(["--tiny", "--losses", "ranknet", "domination", "--out", str(out)])
    text = out.read_text()
    assert "| ranknet | 8 |" in text and "| domination | 16 |" in text
    assert "queries / s" in text and out.with_suffix(".png").stat().st_size > 0
    assert RUN_LINE.search(text.strip().splitlines()[-1])


@pytest.mark.slow  # 5 s
def test_scale_tiny(tmp_path):
    out = tmp_path / "scale.md"
    scale.main(["--tiny", "--losses", "listnet", "--out", str(out)])
    text = out.read_text()
    assert "| listnet | full lists |" in text and "failed" not in text
    assert RUN_LINE.search(text) and "meta" in json.loads(out.with_suffix(".json").read_text())


def _ratio_bounds(numerator: str, denominator: str) -> tuple[float, float]:
    """The range of the quotient of two printed numbers, each rounded to its last decimal."""
    a, b = float(numerator), float(denominator)
    a_half, b_half = (
        0.5 * 10.0 ** -len(text.partition(".")[2]) for text in (numerator, denominator)
    )
    upper = (a + a_half) / (b - b_half) if b > b_half else float("inf")
    return max(a - a_half, 0.0) / (b + b_half), upper


def test_cone_throughput_tiny(capsys):
    import cone_throughput
    from omegaconf import OmegaConf

    cone_throughput.main(["--lengths", "6", "--batch", "3", "--repeats", "1", "--no-memory"])
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| 6 |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert len(cells) == 10
    # the batch it measured: 3 queries of 6 documents, pairs (l, m) with label_l > label_m
    _, labels, _, _ = cone_throughput.make_batch(3, 6, 46, 10, "cpu")
    assert int(cells[1]) == int((labels.unsqueeze(-1) > labels.unsqueeze(-2)).sum()) > 0
    fista, active, default, domination = (float(cells[i]) for i in (2, 3, 5, 6))
    assert min(fista, active, default, domination) >= 0
    # each ratio column is the quotient of the timings printed beside it (up to their rounding)
    for ratio, a, b in ((cells[4], cells[2], cells[3]), (cells[7], cells[5], cells[6])):
        low, high = _ratio_bounds(a, b)
        assert low - 0.05 <= float(ratio.removesuffix("x")) <= high + 0.05, (ratio, a, b)
    differences = [float(value) for value in cells[8].split(",")]
    assert len(differences) == 2 and all(0 <= value < 1e-5 for value in differences)  # float64
    assert cells[9] == "—"  # --no-memory
    config = OmegaConf.load(ROOT / "conf" / "loss" / "cone.yaml")  # what the default row builds
    assert (
        f"default = conf/loss/cone.yaml (solver {config.solver}, max_pairs_per_query "
        f"{config.max_pairs_per_query})" in out
    )
    assert "B=3, F=46, K=10" in out and "median of 1" in out


def test_no_script_edits_sys_path():
    """`python benchmarks/<name>.py` finds its siblings (benchmarks/ is sys.path[0]) and the
    installed packages (differank.run trains)."""
    edit = re.compile(r"sys\.path\.(insert|append|extend)|sys\.path\s*(\+?=|\[)")
    editing = {p.name for p in (ROOT / "benchmarks").glob("*.py") if edit.search(p.read_text())}
    assert not editing


@pytest.mark.parametrize("script", ["reproduce.py", "convex_curves.py", "scale.py"])
def test_scripts_run_from_another_directory(script, tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage:")


def test_loss_cost_tiny(tmp_path):
    import loss_cost

    out = tmp_path / "loss_cost.md"
    loss_cost.main(
        ["--batch", "2", "--length", "6", "--features", "5", "--rounds", "1"]
        + [
            "--long-batch",
            "1",
            "--long-length",
            "12",
            "--tiny-epoch",
            "--epoch-rounds",
            "1",
            "--out",
            str(out),
        ]
    )
    text = out.read_text()
    assert "| domination (default) | " in text and " | 1.0 | " in text
    assert "| convex, num_samples 64 |" in text and RUN_LINE.search(text)
    header = "epoch ms | epoch x domination | peak MiB, B = 2, L = 6 | peak MiB, B = 1, L = 12 |"
    assert header in text
    assert "one training epoch on synthetic" in text
    # one row per default of every conf/loss file it times, each with times and two peaks
    timed = (p.stem for p in (ROOT / "conf" / "loss").glob("*.yaml"))
    for name in (name for name in timed if name not in loss_cost.NOT_TIMED):
        row = next(line for line in text.splitlines() if line.startswith(f"| {name} (default) |"))
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert len(cells) == 7 and all(float(cell) >= 0 for cell in cells[1:]), row


def test_training_throughput_tiny(tmp_path):
    import training_throughput

    out = tmp_path / "training_throughput.md"
    training_throughput.main(["--tiny", "--no-epoch", "--out", str(out)])
    text = out.read_text()
    assert (
        "| domination | linear | no | 16 | 4 |" in text and "| cone | conerank | no | 8 |" in text
    )
    assert "skipped" not in text and RUN_LINE.search(text)


def test_training_throughput_epoch_runs_through_train_py_s_trainer(tmp_path):
    import training_throughput

    epoch = training_throughput.mslr_epoch(0.002, tmp_path / "set")
    assert epoch["docs"] > 0 and epoch["epoch wall"] > 0


def test_epoch_overhead_tiny(tmp_path):
    import epoch_overhead

    out = tmp_path / "epoch_overhead.md"
    epoch_overhead.main(
        ["--tiny", "--rounds", "1", "--data", str(tmp_path / "set"), "--out", str(out)]
    )
    text = out.read_text()
    assert "| DataLoader, num_workers=0 (train.py's loader) |" in text and "Target:" in text
    assert "| DataLoader, num_workers=1, persistent worker |" in text
    assert "| `Trainer.fit` as train.py builds it (callbacks, loggers), num_workers=0 |" in text
    assert RUN_LINE.search(text)


def test_ultr_results_select_compares_both_choices_or_refuses():
    import ultr_results

    with pytest.raises(SystemExit, match="--select clicks labels"):
        ultr_results.main(["--select", "clicks", "--rows", "naive"])


@pytest.mark.slow
@requires_mq2008
def test_ultr_results_select_writes_the_comparison_table(tmp_path, monkeypatch):
    """``--select clicks labels`` on MQ2008 (one fold, one seed, one epoch): one row per click
    estimator, the click-chosen against the label-chosen model with a paired interval."""
    import ultr_results

    monkeypatch.setenv("LETOR_DIR", str(MQ2008.parent))
    out = tmp_path / "select.md"
    ultr_results.main(
        [
            *("--select", "clicks", "labels", "--rows", "naive", "ips", "full"),
            *("--folds", "1", "--seeds", "0", "--max-epochs", "1"),
            *("--runs", str(tmp_path / "runs"), "--out", str(out), "--scope", "a test"),
        ]
    )
    text = out.read_text()
    assert "Reduced scope: a test" in text and "Command: `python benchmarks/ultr_results.py" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "runs" not in line]
    assert [row.split(" | ")[0] for row in rows] == [
        f"| {ultr_results.ROWS[name].title}"
        for name in ("naive", "ips")  # full has no clicks
    ]
    assert all(re.search(r"\[[-+]\d\.\d{4}, [-+]\d\.\d{4}\]", row) for row in rows)
    assert (
        tmp_path / "runs" / "pbm_eta2_lr0.001_e1" / "ips_select_clicks_s10" / "fold1_seed0"
    ).is_dir()


def test_ultr_grid_counts_each_estimators_verdicts_by_axis():
    """The verdict tables count each estimator's cells by one axis of the grid (production
    strength or sessions), summing over the other."""
    import collections

    import ultr_grid

    verdicts = collections.Counter(
        {
            ("ips", (0.01, 10), "better"): 1,
            ("ips", (0.01, 100), "worse"): 1,
            ("ips", (0.1, 10), "indistinguishable"): 1,
        }
    )
    by_strength = ultr_grid.verdict_table(verdicts, 0, [0.01, 0.1], "production")
    ips = next(line for line in by_strength if line.startswith("| IPS"))
    assert ips.endswith("| 1 / 0 / 1 | 0 / 1 / 0 | 1 / 1 / 1 |")
    by_sessions = ultr_grid.verdict_table(verdicts, 1, [10, 100], "sessions ×")
    ips = next(line for line in by_sessions if line.startswith("| IPS"))
    assert ips.endswith("| 1 / 1 / 0 | 0 / 0 / 1 | 1 / 1 / 1 |")


@pytest.mark.slow
@requires_mq2008
def test_ultr_grid_writes_every_cell_against_naive(tmp_path, monkeypatch):
    """benchmarks/ultr_grid.py on MQ2008 Fold1, one cell (and the Baidu pair), one seed, one
    epoch: each estimator's cell has its paired interval against naive, the pointwise ones also
    against naive on BCE, and the reduction is written."""
    import ultr_grid

    monkeypatch.setenv("LETOR_DIR", str(MQ2008.parent))
    out = tmp_path / "grid.md"
    ultr_grid.main(
        [
            *("--datasets", "mq2008", "--strengths", "0.01", "--click-models", "pbm"),
            *("--sessions", "1", "--seeds", "0", "--max-epochs", "1", "--baidu", "1"),
            *("--jobs", "1", "--runs", str(tmp_path / "runs"), "--out", str(out)),
            *("--scope", "a test"),
        ]
    )
    text = out.read_text()
    assert "Reduced scope: a test" in text and "Command: `python benchmarks/ultr_grid.py" in text
    cells = [line for line in text.splitlines() if line.startswith("| 0.01 |")]
    assert len(cells) == 3  # the cell, then eye tracking and Baidu at 5 positions
    interval = r"[-+]\d\.\d{4} \[[-+]\d\.\d{4}, [-+]\d\.\d{4}\]"
    for cell in cells:
        assert len(re.findall(interval, cell)) == 5 + 2  # 5 estimators, 2 also against BCE
    assert RUN_LINE.search(text)
