"""The production ranker of the semi-synthetic click protocol (as ULTRA's pipelines run it):
a ranker trained on a small random sample of the training queries with their true labels
(1 % by default; ULTRA trains a RankSVM on it), whose top k documents per training query are the
lists users are shown. Its strength is set by the share of queries it learns from
(``clicks.production.fraction``: 0.001, 0.01, 0.1, ... as Niu et al. vary it), and it may be
stochastic: ``clicks.production.temperature=T`` shows the top k of a Plackett–Luce draw from its
scores / T instead of its deterministic top k.

Public API::

    sampled_queries(n_queries, fraction, seed) -> np.ndarray   # the queries it learns from
    production_scores(data, production, seed, split="train") -> float64 [N]  # a score per row
    shown_lists(data, production, top_k, seed, split="train") -> list[np.ndarray]  # top first
"""

from __future__ import annotations

import contextlib
import logging
import math
import warnings
from collections.abc import Iterator

import numpy as np
import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig
from torch.utils.data import DataLoader

from differank.datamodules.clicks.shown_lists import plackett_luce_rows, top_k_rows
from differank.datamodules.query_batches import QueryBatchSampler
from differank.datamodules.split_tensors import QueryBatchDataset, SplitTensors

log = logging.getLogger(__name__)
_SCORING_QUERIES = 256  # queries scored per batch


def sampled_queries(n_queries: int, fraction: float, seed: int) -> np.ndarray:
    """Positions of ``max(1, round(fraction · n_queries))`` training queries drawn without
    replacement from ``seed``, sorted.

    Example:
        >>> len(sampled_queries(471, 0.01, seed=0))
        5
    """
    is_number = isinstance(fraction, (int, float)) and not isinstance(fraction, bool)
    if not (is_number and 0 < fraction <= 1):
        raise ValueError(
            f"clicks.production.fraction must be in (0, 1] (a share of the training queries), "
            f"got {fraction}"
        )
    count = max(1, round(fraction * n_queries))
    rng = np.random.default_rng([seed, 35])
    return np.sort(rng.choice(n_queries, size=count, replace=False))


@contextlib.contextmanager
def _quiet_lightning() -> Iterator[None]:
    """Lightning's set-up lines ("GPU available", "max_epochs reached") of the production
    ranker's small fit stay off the run's console."""
    lightning = logging.getLogger("pytorch_lightning")
    level = lightning.level
    lightning.setLevel(logging.WARNING)
    try:
        yield
    finally:
        lightning.setLevel(level)


def production_scores(data, production: DictConfig, seed: int, split: str = "train") -> np.ndarray:
    """Train ``production.model`` (a gradient-trained differank model, e.g. the linear ranker)
    with ``production.loss`` on a ``production.fraction`` sample of the training queries (true
    labels) for ``production.max_epochs`` epochs, and score every row of ``split`` with it (the
    same ranker for every split: the same seed trains it). The global random state is left as
    it was (a click run and a log-trained run start alike)."""
    train = data.split_data("train")
    chosen = train.queries[sampled_queries(len(train.queries), production.fraction, seed)]
    sample = SplitTensors.from_queries(
        torch.from_numpy(train.features),
        torch.from_numpy(train.labels),
        [train.query_rows[q] for q in chosen],
        train.query_ids[chosen],
    )
    dataset = QueryBatchDataset(sample)
    sampler = QueryBatchSampler(
        dataset.lengths, int(production.batch_size), shuffle=True, seed=seed
    )
    loader = DataLoader(
        dataset,
        batch_sampler=sampler,
        collate_fn=QueryBatchDataset.collate_fn,  # type: ignore[arg-type]  # whole batches
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = instantiate(
            production.model, loss=instantiate(production.loss), n_features=data.n_features
        )
        trainer = pl.Trainer(
            max_epochs=int(production.max_epochs),
            accelerator="cpu",
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
            num_sanity_val_steps=0,
        )
        with warnings.catch_warnings(), _quiet_lightning():
            warnings.filterwarnings("ignore", message=".*no `val_dataloader`")  # none: by design
            trainer.fit(module, train_dataloaders=loader)
    log.info(
        "production ranker: %s trained on %d of %d training queries (%.1f %%), scoring the %s "
        "split",
        type(module.ranker).__name__,
        len(chosen),
        len(train.queries),
        100 * len(chosen) / len(train.queries),
        split,
    )
    return _score_rows(module, data.split_data(split))


def _score_rows(module, split) -> np.ndarray:
    """float64 [N]: the module's score of every row of ``split`` (rows of unserved queries:
    NaN)."""
    tensors = SplitTensors.from_queries(
        torch.from_numpy(split.features),
        torch.from_numpy(split.labels),
        split.query_rows,
        split.query_ids,
    )
    scores = np.full(split.num_rows, math.nan)
    module.eval()
    with torch.no_grad():
        for start in range(0, len(split.query_rows), _SCORING_QUERIES):
            queries = np.arange(start, min(start + _SCORING_QUERIES, len(split.query_rows)))
            batch = tensors.batch(queries)
            values = module(batch["features"], batch["mask"])
            real = batch["mask"]
            scores[batch["doc_index"][real].numpy()] = values[real].double().numpy()
    return scores


# the Plackett-Luce draws' stream of the run's seed, per split: never another split's
_PLACKETT_LUCE_STREAMS = {"train": 36, "val": 37}


def shown_lists(
    data, production: DictConfig, top_k: int, seed: int, split: str = "train"
) -> list[np.ndarray]:
    """The rows the production ranker shows for every served query of ``split`` (``train``,
    or ``val`` for held-out sessions; top first): its top ``top_k``, or with
    ``production.temperature`` set the top ``top_k`` of one Plackett–Luce ranking per query
    drawn from ``seed`` (its own stream per split, so the run's other draws are unchanged)."""
    temperature = production.get("temperature")
    scores = production_scores(data, production, seed, split)
    served = data.split_data(split)
    query_rows = [served.query_rows[q] for q in served.queries]
    if temperature is None:
        return top_k_rows(scores, query_rows, top_k)
    log.info("production ranker: Plackett-Luce rankings at temperature %g", temperature)
    rng = np.random.default_rng([seed, _PLACKETT_LUCE_STREAMS[split]])
    return plackett_luce_rows(scores, query_rows, top_k, temperature, rng)
