"""Train a ranker, pick the best validation epoch, test it and write the run's outputs.

``task=fit`` (default) trains (resuming from ``ckpt_path``, e.g. ``RUN/checkpoints/last.ckpt``)
and tests the best epoch; ``task=test`` tests the weights of ``ckpt_path``; ``task=predict``
scores the test split without metrics; ``task=export`` writes ``export/scorer.pt``
(TorchScript) and ``export/scorer.onnx``. Outputs in the Hydra run directory:
``checkpoints/{best,last}.ckpt``, Lightning's CSV and TensorBoard logs, ``predictions/test.txt``
(one ``%.17g`` score per line of the test file(s), scorable by ``Eval-Score-4.0.pl``),
``predictions/test.sources`` (those files, in order), ``predictions/test.run`` (a TREC run) and
``test_metrics.json`` (``test.txt`` scored by SPEC §6). Under DDP only global rank 0 writes.
``ckpt_path=last`` resumes from the run folder's last checkpoint when there is one.
Returns the best monitored validation value (``task=fit``, for sweepers), else NaN.
"""

import json
import logging
from pathlib import Path

import hydra
import pytorch_lightning as pl
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, open_dict
from rich.console import Console
from rich.table import Table

from rankers.evaluate import evaluate_files
from rankers.export import Scorer, export_onnx, export_torchscript, write_trec_run

CONFIG_DIR = Path(__file__).resolve().parent / "conf"
TASKS = ("fit", "test", "predict", "export")
log = logging.getLogger(__name__)


def train(cfg: DictConfig, run_dir: Path) -> float:
    """Run ``cfg.task`` and write the outputs into ``run_dir``; ``cfg`` is the composed
    ``conf/train.yaml``."""
    if cfg.task not in TASKS or (cfg.task != "fit" and not cfg.ckpt_path):
        raise ValueError(f"task must be one of {TASKS} (all but fit need ckpt_path=...), "
                         f"got task={cfg.task} ckpt_path={cfg.ckpt_path}")
    pl.seed_everything(cfg.seed, workers=True)
    datamodule = instantiate(cfg.data)
    model = instantiate(cfg.model, loss=instantiate(cfg.loss), n_features=datamodule.n_features)
    trainer = instantiate(
        cfg.trainer,
        callbacks=[instantiate(callback) for callback in cfg.callbacks.values()],
        logger=[instantiate(logger) for logger in cfg.logger.values()],
    )
    check_ddp_launch(trainer)
    best, value = None, float("nan")
    if cfg.task == "fit":
        trainer.fit(model, datamodule=datamodule, ckpt_path=cfg.ckpt_path, weights_only=True)
        checkpoint = trainer.checkpoint_callback
        best = checkpoint.best_model_path if checkpoint and checkpoint.best_model_path else None
        score = checkpoint.best_model_score if checkpoint else None
        value = float(score if score is not None else trainer.callback_metrics[cfg.monitor])
    else:
        checkpoint = torch.load(cfg.ckpt_path, map_location="cpu", weights_only=True)
        model.load_state_dict(checkpoint["state_dict"])
    if cfg.task == "export":
        export(model, datamodule, run_dir)
        return value
    if cfg.task == "predict":
        trainer.predict(model, datamodule=datamodule, return_predictions=False)
    else:
        trainer.test(model, datamodule=datamodule, ckpt_path=best, verbose=False, weights_only=True)
    if trainer.is_global_zero and not trainer.fast_dev_run:  # fast_dev_run: one batch only
        write_outputs(run_dir, model, datamodule, metrics=cfg.task != "predict")
    return value


def check_ddp_launch(trainer: pl.Trainer) -> None:
    """Lightning starts local DDP ranks by re-running the command line, which under ``-m`` is
    the whole sweep; a SLURM launcher starts the ranks itself."""
    spawns = trainer.world_size > 1
    spawns = spawns and not trainer.strategy.cluster_environment.creates_processes_externally
    if spawns and HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        raise ValueError("local multi-process DDP cannot run inside a sweep (-m): sweep with "
                         "hydra/launcher=slurm_gpu (SLURM starts one process per GPU)")


def write_outputs(run_dir: Path, model, datamodule, metrics: bool) -> None:
    """The prediction, sources and TREC run files of the test split, and its metrics."""
    out = run_dir / "predictions"
    out.mkdir(parents=True, exist_ok=True)
    scores = model.scores_by_row(datamodule.num_rows("test"))
    (out / "test.txt").write_text("".join(f"{score:.17g}\n" for score in scores.tolist()))
    sources = datamodule.split_files("test")  # the files the predictions align with, in order
    (out / "test.sources").write_text("".join(f"{path}\n" for path in sources))
    split = datamodule.split_data("test")
    write_trec_run(out / "test.run", split.qids.tolist(), split.docids.tolist(), scores)
    if not metrics:
        Console().print(f"predictions: {out}")
        return
    values = evaluate_files(sources, out / "test.txt", ks=model.test_metrics.ks)
    (run_dir / "test_metrics.json").write_text(json.dumps(values, indent=2) + "\n")
    table = Table("metric", "test", title="test metrics")
    for key, value in values.items():
        table.add_row(key, f"{value:.4f}")
    Console().print(table, f"outputs: {run_dir}")


def export(model, datamodule, run_dir: Path) -> None:
    """``export/scorer.pt`` and ``export/scorer.onnx``: raw features in, scores out."""
    if datamodule.normalization == "query_minmax":
        raise ValueError("export folds in z-score statistics only; train with "
                         "data.normalization=zscore or none to export")
    stats = datamodule.feature_mean, datamodule.feature_std  # None, None without z-score
    statistics = (None if s is None else torch.as_tensor(s) for s in stats)
    scorer = Scorer(model.ranker.serving_ranker(), *statistics)
    Console().print(f"TorchScript: {export_torchscript(scorer, run_dir / 'export/scorer.pt')}")
    try:
        Console().print(f"ONNX: {export_onnx(scorer, run_dir / 'export/scorer.onnx')}")
    except ImportError as error:  # onnx / onnxscript are the optional "export" extra
        log.warning("ONNX export skipped (pip install 'differank[export]'): %s", error)


def compose_run(overrides: list[str], run_dir: Path) -> DictConfig:
    """``conf/train.yaml`` composed with command-line style ``overrides`` outside the CLI (tests,
    benchmarks), with ``run_dir`` as the Hydra run directory."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(run_dir)
        cfg.hydra.job.num = 0
    HydraConfig.instance().set_config(cfg)
    return cfg


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float:
    return train(cfg, Path(HydraConfig.get().runtime.output_dir))


if __name__ == "__main__":
    main()
