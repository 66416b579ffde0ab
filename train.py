"""Train a ranker, pick the best validation epoch, test it and write the run's outputs.

Writes into the Hydra run directory: ``checkpoints/{best,last}.ckpt``, Lightning's CSV and
TensorBoard logs, ``predictions/test.txt`` (one ``%.17g`` score per line of the test file(s),
scorable by ``Eval-Score-4.0.pl``), ``predictions/test.sources`` (those test files, in order) and ``test_metrics.json`` (that file scored by SPEC §6).
Returns the best monitored validation value, for sweepers.
"""

import json
from pathlib import Path

import hydra
import pytorch_lightning as pl
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, open_dict
from rich.console import Console
from rich.table import Table

from rankers.evaluate import evaluate_files

CONFIG_DIR = Path(__file__).resolve().parent / "conf"


def train(cfg: DictConfig, run_dir: Path) -> float:
    """Fit, test the best checkpoint and write the outputs into ``run_dir``; ``cfg`` is the
    composed ``conf/train.yaml``. Returns the best monitored validation value."""
    pl.seed_everything(cfg.seed, workers=True)
    datamodule = instantiate(cfg.data)
    model = instantiate(cfg.model, loss=instantiate(cfg.loss), n_features=datamodule.n_features)
    trainer = instantiate(
        cfg.trainer,
        callbacks=[instantiate(callback) for callback in cfg.callbacks.values()],
        logger=[instantiate(logger) for logger in cfg.logger.values()],
    )
    trainer.fit(model, datamodule=datamodule)
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    trainer.test(model, datamodule=datamodule, ckpt_path=best or None, verbose=False)
    if trainer.fast_dev_run:  # one test batch only: no whole-file outputs to write
        return float(trainer.callback_metrics[cfg.monitor])

    predictions = run_dir / "predictions" / "test.txt"
    predictions.parent.mkdir(parents=True, exist_ok=True)
    scores = model.scores_by_row(datamodule.num_rows("test"))
    predictions.write_text("".join(f"{score:.17g}\n" for score in scores.tolist()))
    sources = datamodule.split_files("test")  # the files the predictions align with, in order
    (run_dir / "predictions" / "test.sources").write_text("".join(f"{path}\n" for path in sources))
    metrics = evaluate_files(sources, predictions, ks=model.test_metrics.ks)
    (run_dir / "test_metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")

    table = Table("metric", "test", title="test metrics")
    for key, value in metrics.items():
        table.add_row(key, f"{value:.4f}")
    Console().print(table, f"outputs: {run_dir}")
    best_score = trainer.checkpoint_callback.best_model_score if trainer.checkpoint_callback else None
    return float(best_score if best_score is not None else trainer.callback_metrics[cfg.monitor])


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
