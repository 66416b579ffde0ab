"""The README is what the project does: its install and test commands are CI's (.ci/run), its
console sample is what ``python train.py`` prints (line shapes, numbers and paths masked, from a
tiny default run in-process), and it stays a short front door."""

import logging
import re

import pytest

from tests.conftest import ROOT, TINY_RUN, run_config

README = (ROOT / "README.md").read_text()
PATH = re.compile(r"(?<!\S)/\S+")  # an absolute path: the run folder differs per run
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def shape(line: str) -> str:
    """A console line with its paths and numbers masked, trailing blanks dropped."""
    return NUMBER.sub("N", PATH.sub("PATH", line)).rstrip()


def console_sample() -> list[str]:
    """The README's code block that shows a run's console ("..." elides repeated lines)."""
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```$", README, flags=re.S | re.M)
    (sample,) = [block for block in blocks if "test metrics of epoch" in block]
    return [line for line in sample.splitlines() if line.strip() not in ("", "...")]


@pytest.fixture(scope="module")
def console_lines(tmp_path_factory):
    """Every line the tiny default run logs (differank's and Lightning's), as the CLI's console
    shows them: ``train.py`` lets Lightning's messages reach the root logger under the CLI."""
    run_dir = tmp_path_factory.mktemp("readme-run")
    records: list[logging.LogRecord] = []
    collect = logging.Handler(logging.INFO)
    collect.emit = records.append
    root, lightning = logging.getLogger(), logging.getLogger("pytorch_lightning")
    saved = root.level, lightning.propagate
    root.addHandler(collect)
    root.setLevel(logging.INFO)
    lightning.propagate = True
    try:
        run_config([*TINY_RUN, "quiet=true"], run_dir)
    finally:
        root.removeHandler(collect)
        root.setLevel(saved[0])
        lightning.propagate = saved[1]
    return [
        (record.name, line)
        for record in records
        for line in record.getMessage().splitlines()
        if line.strip()
    ]


def test_every_line_of_the_readme_console_sample_is_printed_by_a_run(console_lines):
    printed = {shape(line) for _, line in console_lines}
    sample = console_sample()
    assert len(sample) >= 10
    missing = [line for line in sample if shape(line) not in printed]
    assert not missing, f"README console lines that python train.py no longer prints: {missing}"


def test_the_readme_sample_shows_every_kind_of_line_differank_prints(console_lines):
    """Each line shape of differank's own console (epoch, checkpoint, test table, outputs)
    appears in the README sample, so a new or changed line must be shown there too."""
    shown = {shape(line) for line in console_sample()}
    own = {shape(line) for name, line in console_lines if not name.startswith("pytorch_lightning")}
    assert own, "the run logged no console line of its own"
    assert not own - shown, f"lines a run prints that the README does not show: {own - shown}"


def test_install_and_test_commands_are_the_ones_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    for marker in ("# README: user install", "# README: contributors install", "# README: test"):
        (command,) = [line.split("#")[0].strip() for line in ci.splitlines() if marker in line]
        assert re.search(rf"^{re.escape(command)}\s+#", README, flags=re.M), command


def test_readme_is_a_short_front_door_without_stale_rows():
    assert len(README.splitlines()) <= 250
    assert "stale" not in README.lower() and "| Δ | L | S | old | new | × |" not in README
    for section in ("## Changes in 0.2.0", "## Trust model", "## Licence"):
        assert section in README, section
    assert "from differank.losses import" in README
