"""A trial's logging: its own train.log gets every line, the search's terminal its warnings."""

import io
import logging

from differank.rankers.tuning.trials import _terminal_warnings_only


def test_a_trial_shows_the_terminal_its_warnings_only_and_its_log_file_everything(tmp_path):
    """A search prints its trials' validation figures, never their test tables: under a
    trial, the root's terminal handlers pass warnings only, its file handlers every line."""
    stream = io.StringIO()
    terminal = logging.StreamHandler(stream)
    log_file = logging.FileHandler(tmp_path / "train.log")
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    root.addHandler(terminal)
    root.addHandler(log_file)
    try:
        with _terminal_warnings_only():
            logging.getLogger("differank.x").info("test metrics of epoch 3")
            logging.getLogger("differank.x").warning("a warning")
        logging.getLogger("differank.x").info("after the trial")
    finally:
        root.removeHandler(terminal)
        root.removeHandler(log_file)
        log_file.close()
        root.setLevel(level)
    assert stream.getvalue().splitlines() == ["a warning", "after the trial"]
    assert "test metrics of epoch 3" in (tmp_path / "train.log").read_text()
