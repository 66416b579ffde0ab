"""``curves.png`` in every training run folder, and the data behind it: training loss and every
validation metric per epoch from the run's CSV log, the best epoch the one best.ckpt holds."""

import csv
import subprocess
import sys

import pytest

import differank
from differank.rankers.checkpoints import load_checkpoint
from differank.rankers.run.curves import plot_run_curves, run_curves
from tests.conftest import ROOT, TINY_DATA

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("curves-run")
    differank.run(
        [*TINY_DATA, "trainer.max_epochs=4", "logger=csv", "quiet=true"], output_dir=run_dir
    )
    return run_dir


def logged(run_dir, name):
    """{epoch: value} of one column of the run's metrics.csv, read independently."""
    with open(next((run_dir / "csv").rglob("metrics.csv")), newline="") as handle:
        return {int(r["epoch"]): float(r[name]) for r in csv.DictReader(handle) if r[name]}


def test_a_training_run_leaves_a_png_of_its_curves(trained):
    data = (trained / "curves.png").read_bytes()
    assert data.startswith(PNG_MAGIC)
    import matplotlib.image

    image = matplotlib.image.imread(trained / "curves.png")
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_the_curves_are_the_logged_values_and_the_best_epoch_is_best_ckpts(trained):
    curves = run_curves(trained)
    assert curves.names[0] == "train/loss" and "val/ndcg@10" in curves.names
    assert all(name == "train/loss" or name.startswith("val/") for name in curves.names)
    for name in ("train/loss", "val/map", "val/ndcg@10"):
        assert curves.series[name] == logged(trained, name)
    assert sorted(curves.series["train/loss"]) == [0, 1, 2, 3]
    best = load_checkpoint(trained / "checkpoints" / "best.ckpt")
    assert curves.best_epoch == best["epoch"]
    values = curves.series["val/map"]
    assert values[curves.best_epoch] == max(values.values())


def test_every_panel_plots_its_series_and_marks_the_best_epoch(trained, tmp_path):
    figure = plot_run_curves(trained, tmp_path / "again.png")
    curves = run_curves(trained)
    panels = {ax.get_title(): ax for ax in figure.axes if ax.get_visible()}
    assert sorted(panels) == sorted(curves.names)
    for name, ax in panels.items():
        lines = {line.get_label(): line for line in ax.get_lines()}
        epochs, values = lines[name].get_data()
        assert list(epochs) == sorted(curves.series[name])
        assert list(values) == [curves.series[name][e] for e in epochs]
        assert list(lines["best epoch"].get_xdata()) == [curves.best_epoch] * 2
    marker = {line.get_label(): line for line in panels["val/map"].get_lines()}["best val/map"]
    assert list(marker.get_xdata()) == [curves.best_epoch]
    assert list(marker.get_ydata()) == [curves.series["val/map"][curves.best_epoch]]
    assert (tmp_path / "again.png").read_bytes().startswith(PNG_MAGIC)


def write_log(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["epoch,step,train/loss,val/loss,test/map"]
    lines += [",".join("" if v is None else str(v) for v in row) for row in rows]
    path.write_text("\n".join(lines) + "\n")


def test_min_mode_ties_and_a_resumed_runs_versions(tmp_path):
    write_log(
        tmp_path / "csv" / "version_0" / "metrics.csv",
        [(0, 1, 3.0, 2.0, None), (1, 2, 2.5, 1.0, None)],
    )
    # resumed from epoch 1: version_1 repeats epoch 1 and goes on; version_10 sorts after 2
    write_log(
        tmp_path / "csv" / "version_1" / "metrics.csv",
        [(1, 2, 2.4, 1.0, None), (2, 3, 2.0, 1.5, None)],
    )
    write_log(
        tmp_path / "csv" / "version_10" / "metrics.csv",
        [(3, 4, 1.9, 1.0, None), (3, 4, None, None, 0.7)],
    )
    curves = run_curves(tmp_path, monitor="val/loss", mode="min")
    assert curves.series == {
        "train/loss": {0: 3.0, 1: 2.4, 2: 2.0, 3: 1.9},
        "val/loss": {0: 2.0, 1: 1.0, 2: 1.5, 3: 1.0},
    }
    assert curves.best_epoch == 1  # the first of the tied best, as ModelCheckpoint keeps
    assert run_curves(tmp_path, monitor="val/map").best_epoch is None  # not logged: no mark
    figure = plot_run_curves(tmp_path, monitor="val/map")
    assert all(
        "best epoch" not in [line.get_label() for line in ax.get_lines()] for ax in figure.axes
    )


def test_bad_requests_are_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="has no CSV log"):
        run_curves(tmp_path)
    with pytest.raises(ValueError, match="mode must be one of"):
        run_curves(tmp_path, mode="best")


def test_matplotlib_stays_out_of_the_light_imports():
    code = (
        "import sys, differank, differank.losses, differank.rankers.run.curves\n"
        "print('matplotlib' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr
