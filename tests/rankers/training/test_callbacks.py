"""The console pieces (differank.rankers.training.console): the terminal's log handler is
Rich's on a terminal and plain, unwrapped lines on a file or pipe."""

import io
import logging

import pytest
from rich.console import Console
from rich.logging import RichHandler

from differank.rankers.training import callbacks
from differank.rankers.training import console as terminal


def test_off_a_terminal_lines_are_written_whole(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=False)
    handler = terminal.console_handler(console)
    assert type(handler) is logging.StreamHandler
    assert console.width == terminal.WIDE_COLUMNS  # the progress bar's lines, too
    line = "epoch 3/29  train/loss 0.1234  val/map 0.4567  best 0.4567 (epoch 3)  " * 3
    handler.handle(logging.LogRecord("x", logging.INFO, __file__, 1, line, None, None))
    assert out.getvalue() == line + "\n"  # one line, no wrapping at 80 columns, no padding


def test_on_a_terminal_rich_prints_above_the_progress_bar():
    console = Console(file=io.StringIO(), force_terminal=True)
    handler = terminal.console_handler(console, show_time=False, show_path=False)
    assert isinstance(handler, RichHandler) and handler.console is console


def test_the_job_logging_config_builds_the_handler():
    import yaml

    from tests.conftest import ROOT

    path = ROOT / "conf" / "hydra" / "job_logging" / "differank.yaml"
    console = yaml.safe_load(path.read_text())["handlers"]["console"]
    assert console["()"] == "differank.rankers.training.console.console_handler"


def test_the_console_pieces_load_no_lightning():
    """Every command's logging is configured through the console module: one that trains
    nothing (predict, export) must not pay for Lightning there."""
    import subprocess
    import sys

    code = (
        "import sys, differank.rankers.training.console\nprint('pytorch_lightning' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_the_old_names_of_the_console_pieces_warn():
    with pytest.warns(DeprecationWarning, match="moved to differank.rankers.training.console"):
        handler = callbacks.console_handler
    assert handler is terminal.console_handler


def test_the_epoch_line_of_a_run_bounded_by_max_steps_and_its_checkpoint_line(caplog, tmp_path):
    """With max_steps alone Lightning's max_epochs is None: the epoch line shows "?" for the
    last epoch; the checkpoint line names the best checkpoint's score and path."""
    from types import SimpleNamespace

    from pytorch_lightning.callbacks import ModelCheckpoint

    saver = ModelCheckpoint(dirpath=tmp_path)
    trainer = SimpleNamespace(
        is_global_zero=True,
        callback_metrics={},
        max_epochs=None,
        checkpoint_callback=saver,
        early_stopping_callbacks=[],
        should_stop=False,
    )
    console = callbacks.RunConsole("val/map")
    console.on_fit_start(trainer, None)  # no checkpoint saved yet
    saver.best_model_score, saver.best_model_path = 0.5, str(tmp_path / "best.ckpt")
    console.pending = (0, 0.5)
    with caplog.at_level(logging.INFO, logger=callbacks.log.name):
        console.on_fit_end(trainer, None)
    assert "epoch 0/?  val/map 0.5000  best 0.5000 (epoch 0)" in caplog.text
    assert f"checkpoint: val/map improved to 0.5000, saved {tmp_path / 'best.ckpt'}" in caplog.text
