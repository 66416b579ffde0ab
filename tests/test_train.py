"""End to end: ``python train.py`` writes what docs/architecture.md#what-a-run-writes promises,
and the prediction file scored by the evaluator's command line
(``differank.rankers.metrics.evaluate.main``) reproduces ``test_metrics.json`` exactly; the run
shows one line per validation epoch, checkpoint and early-stopping lines and the tested epoch, also
in ``train.log``, without known third-party noise; ``--help`` explains the CLI."""

import json
import logging
import os
import re
import subprocess
import sys

import pytest
import torch

from differank.cli import help_text
from differank.rankers.metrics.evaluate import main as evaluate_main
from differank.rankers.run.runs import compose_config, compose_with_hydra, console_logging
from tests.conftest import ROOT, TINY_DATA, requires_mq2008, run_config

TINY = TINY_DATA


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("default-run")
    command = [sys.executable, "train.py", f"hydra.run.dir={run_dir}", "trainer.max_epochs=5"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir, result.stdout, result.stderr


def test_run_writes_checkpoints_logs_predictions_and_metrics(default_run):
    run_dir, stdout, _ = default_run
    for name in [
        "checkpoints/best.ckpt",
        "checkpoints/last.ckpt",
        "predictions/test.txt",
        "predictions/test.qrels",
        "test_metrics.json",
        ".hydra/config.yaml",
    ]:
        assert (run_dir / name).is_file(), name
    assert list((run_dir / "csv").rglob("metrics.csv")) and list(
        (run_dir / "tensorboard").rglob("events.*")
    )
    metrics = json.loads((run_dir / "test_metrics.json").read_text())
    conventions = metrics.pop("conventions")  # docs/metrics.md#conventions
    assert set(metrics) == {
        "map",
        "mean_ndcg",
        *(f"{m}@{k}" for m in ("ndcg", "p") for k in (1, 3, 5, 10)),
    }
    assert conventions["letor"] == {"queries": conventions["letor"]["queries"]} | {
        key: metrics[key] for key in ("map", "ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10")
    }
    assert f"{metrics['map']:.4f}" in stdout  # the printed table
    assert metrics["map"] > 0.5  # the synthetic set's planted signal is learnable (random ≈ 0.4)


def test_prediction_file_is_aligned_and_full_precision(default_run):
    run_dir, _, _ = default_run
    sources = (run_dir / "predictions" / "test.sources").read_text().splitlines()
    rows = sum(len(open(path).read().splitlines()) for path in sources)
    lines = (run_dir / "predictions" / "test.txt").read_text().splitlines()
    assert len(lines) == rows
    assert all(repr(float(line)) == repr(float(f"{float(line):.17g}")) for line in lines)


def test_evaluate_cli_reproduces_test_metrics_exactly(default_run, tmp_path):
    run_dir, _, _ = default_run
    sources = (run_dir / "predictions" / "test.sources").read_text().splitlines()
    cli_json = tmp_path / "cli.json"
    prediction = str(run_dir / "predictions" / "test.txt")
    assert evaluate_main([*sources, prediction, "--json", str(cli_json)]) == 0
    assert json.loads(cli_json.read_text()) == json.loads(
        (run_dir / "test_metrics.json").read_text()
    )


def test_logged_test_metrics_agree_with_the_prediction_file(default_run):
    run_dir, _, _ = default_run
    written = json.loads((run_dir / "test_metrics.json").read_text())
    written.pop("conventions")
    import csv

    rows = list(csv.DictReader(next((run_dir / "csv").rglob("metrics.csv")).open()))
    logged = next(row for row in rows if row.get("test/map"))
    for key, value in written.items():
        assert float(logged[f"test/{key}"]) == pytest.approx(value, abs=1e-6)


def test_console_shows_epochs_checkpoints_and_the_tested_epoch_also_in_train_log(default_run):
    run_dir, stdout, stderr = default_run
    log = (run_dir / "train.log").read_text()
    for epoch in range(5):
        assert re.search(rf"epoch {epoch}/4  train/loss [\d.]+  val/map 0\.\d{{4}}  best", log)
    assert "epoch 4/4" in stdout and "checkpoint: val/map improved to" in log
    best = torch.load(run_dir / "checkpoints/best.ckpt", weights_only=True)
    value = best["differank"]["validation"]["val/map"]
    assert f"test metrics of epoch {best['epoch']}, val/map {value:.4f}:" in log
    for noise in ("LeafSpec", "litlogger", "srun"):  # filtered third-party warnings
        assert noise not in stdout + stderr


def test_quiet_hides_progress_on_the_terminal_and_keeps_every_line_in_train_log(tmp_path):
    root, lightning = logging.getLogger(), logging.getLogger("pytorch_lightning")
    saved = root.handlers[:], lightning.handlers[:], lightning.propagate
    terminal, log_file = logging.StreamHandler(), logging.FileHandler(tmp_path / "train.log")
    root.handlers[:] = [terminal, log_file]
    try:
        console_logging(quiet=True)
        assert lightning.propagate and not lightning.handlers  # its lines reach train.log
    finally:
        root.handlers[:], lightning.handlers[:], lightning.propagate = saved
        log_file.close()

    def record(name, level, message):
        return logging.LogRecord(name, level, __file__, 1, message, None, None)

    epoch = record("differank.rankers.training.callbacks", logging.INFO, "epoch 0/4  val/map 0.5")
    set_up = record("pytorch_lightning.utilities.rank_zero", logging.INFO, "GPU available: False")
    table = record("__main__", logging.INFO, "test metrics of epoch 3 ... outputs: RUN")
    warning = record("pytorch_lightning.trainer", logging.WARNING, "a warning")
    assert not terminal.filter(epoch) and not terminal.filter(set_up)
    assert terminal.filter(table) and terminal.filter(warning)
    assert all(log_file.filter(r) for r in (epoch, set_up, table, warning))


def test_early_stopping_and_conerank_epochs_are_announced(tmp_path, caplog, capsys):
    caplog.set_level(logging.INFO, logger="differank.rankers.training")
    never_better = [
        "callbacks.early_stopping.patience=1",
        "+callbacks.early_stopping.min_delta=1",
        "trainer.max_epochs=5",
        "logger=csv",
        "quiet=true",
        *TINY,
    ]
    run_config(never_better, tmp_path / "a")
    assert "early stopping: val/map has not improved for 1 validations (patience 1); best" in (
        caplog.text
    )
    assert "epoch 2/4" not in caplog.text  # stopped after epoch 1
    assert "━" not in capsys.readouterr().out  # quiet: no progress bar
    caplog.clear()
    conerank = ["model=conerank", "loss=cone", "trainer.max_epochs=1", "logger=csv", *TINY]
    run_config(conerank, tmp_path / "b")
    assert "epoch 0/0  train/loss" in caplog.text
    assert "━" in capsys.readouterr().out  # the progress bar


@pytest.mark.parametrize("value", ["true", "false"])
def test_lean_loop_is_accepted_for_one_release_and_warns_that_it_does_nothing(
    tmp_path, caplog, value
):
    from differank.rankers.run.trainer_tasks import make_trainer

    caplog.set_level(logging.WARNING, logger="differank.rankers.run.trainer_tasks")
    make_trainer(compose_config(["logger=csv"], run_dir=tmp_path))
    assert "lean_loop" not in caplog.text  # the default (null) says nothing
    settings = [f"lean_loop={value}", "logger=csv"]
    trainer = make_trainer(compose_config(settings, run_dir=tmp_path))
    assert f"lean_loop={value.capitalize()} has no effect" in caplog.text
    assert "Lightning's own loop" in caplog.text
    assert type(trainer.fit_loop.epoch_loop).__module__.startswith("pytorch_lightning.")


HELP_TOPICS = (
    "task=",
    "fit",
    "test",
    "predict",
    "export",
    "ckpt_path",
    "+sweep=",
    "+hparams_search=",
    "hydra.run.dir",
    "test_metrics.json",
    "checkpoints/{best,last}.ckpt",
    "quiet=true",
    "LETOR_DIR",
    "python -m differank.datamodules.download",
    "allow_data_mismatch",
    "files=[a.txt,b.txt]",
    "predictions/test.qrels",
)


def test_help_explains_tasks_checkpoints_groups_and_outputs(tmp_path):
    template = compose_with_hydra([], run_dir=tmp_path).hydra.help.template  # ``--help``'s
    for text in HELP_TOPICS:
        assert text in template, text


def test_help_text_is_the_template_with_the_composed_config():
    text = help_text(["model=mlp"])
    for topic in HELP_TOPICS:
        assert topic in text, topic
    assert "$LETOR_DIR" in text and "MLPRanker" in text and "$CONFIG" not in text


def test_the_entry_point_loads_no_torch_until_a_task_runs():
    """``--help`` and a mistyped override answer in about a second: importing the command
    (differank.cli, and train.py, its shim) loads Hydra only (Lightning and torch load when a
    task runs)."""
    code = (
        "import sys, differank.cli, train\n"
        "print(sorted({'torch', 'pytorch_lightning'} & set(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def printed_config_groups(help_output: str) -> dict[str, set[str]]:
    """The ``group: a, b, ...`` entries of ``--help``'s output (wrapped lines rejoined)."""
    section = help_output.split("conf/GROUP/OPTION.yaml):\n", 1)[1].split("\n\n", 1)[0]
    entries = re.sub(r"\n {4}", " ", section).splitlines()
    return {
        group: set(options.split(", "))
        for group, options in (entry.split(": ", 1) for entry in entries)
    }


def test_dash_dash_help_prints_the_topics_and_every_group_with_its_options():
    result = subprocess.run(
        [sys.executable, "train.py", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    for text in HELP_TOPICS:
        assert text in result.stdout, text
    assert "$APP_CONFIG_GROUPS" not in result.stdout and "$CONFIG" not in result.stdout
    conf = ROOT / "conf"
    expected = {
        folder.relative_to(conf).as_posix(): {path.stem for path in folder.glob("*.yaml")}
        for folder in conf.glob("**/")
        if folder != conf and folder.relative_to(conf).parts[0] != "hydra"
    }
    assert {"model", "loss", "data", "model/scheduler"} <= set(expected)
    assert printed_config_groups(result.stdout) == expected


@pytest.mark.parametrize("full_error", [False, True], ids=["message", "HYDRA_FULL_ERROR=1"])
def test_a_cli_error_is_one_message_and_the_failed_run_leaves_no_folder(tmp_path, full_error):
    """A missing LETOR root: the message alone, no traceback (unless HYDRA_FULL_ERROR=1), and
    the run folder the run claimed under outputs/ (there was none) is gone."""
    missing = tmp_path / "no-such-letor"
    environment = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    if full_error:
        environment["HYDRA_FULL_ERROR"] = "1"
    result = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "data=letor", f"data.root={missing}"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    assert f"data.root {missing} does not exist" in result.stderr
    assert ("Traceback" in result.stderr) == full_error, result.stderr[-3000:]
    if not full_error:
        assert f"error: data.root {missing} does not exist" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no outputs/DATE/TIME left


@requires_mq2008
@pytest.mark.slow
def test_ranknet_reproduces_the_readme_map_on_mq2008_fold1(tmp_path):
    """README's RankNet row: Fold1 test MAP 0.4509 (5-fold mean 0.4747). The run is seeded;
    the margin only allows for thread-count float noise (README: differences below ~0.005 MAP
    are noise), so a real regression fails."""
    command = [
        sys.executable,
        "train.py",
        "data=mq2008",
        "data.fold=1",
        "loss=ranknet",
        f"hydra.run.dir={tmp_path}",
    ]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, timeout=900)
    assert json.loads((tmp_path / "test_metrics.json").read_text())["map"] == pytest.approx(
        0.4509, abs=0.005
    )
