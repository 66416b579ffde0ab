"""What a run does with the ``clicks`` config group (conf/clicks/, docs/clicks.md): the
training data of a click run, and ``task=simulate``, which writes the click log the online
simulation would draw.

Public API::

    click_datamodule(cfg, datamodule) -> datamodule   # the run's data, on clicks when asked
    simulate(cfg, run_dir) -> Path                    # task=simulate: the click log written
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
from hydra.utils import instantiate
from omegaconf import DictConfig

from differank.datamodules.clicks.click_log import ClickLog, read_click_log
from differank.datamodules.clicks.datamodule import ClickDataModule, training_identity
from differank.datamodules.clicks.held_out import HeldOutSessions, QueryHoldout
from differank.datamodules.clicks.parquet_log import (
    FeatureTable,
    ParquetClickLog,
    write_click_log_parquet,
)
from differank.datamodules.clicks.stream import StreamingClickDataModule
from differank.rankers.run.click_selection import ClickSelection, click_selection
from differank.rankers.run.production import shown_lists

log = logging.getLogger(__name__)
MODES = ("online", "offline")
LOG_FORMATS = ("npz", "parquet")  # clicks.format (reading) and clicks.output_format (simulate)


def click_datamodule(cfg: DictConfig, datamodule):
    """``datamodule`` itself for ``clicks=none``; else a
    :class:`~differank.datamodules.clicks.datamodule.ClickDataModule` around it: offline, the
    log at ``clicks.log`` (``clicks.format=parquet``: streamed, a
    :class:`~differank.datamodules.clicks.stream.StreamingClickDataModule`); online,
    ``clicks.model`` simulating on the production ranker's top ``clicks.top_k`` of every
    training query. Under ``ultr.select=clicks`` its validation batches are held-out sessions:
    online, ``ultr.select_sessions`` sessions of the same users on the production ranker's top
    ``clicks.top_k`` of every validation query (drawn here, once); offline, the sessions of the
    ``ultr.select_holdout`` share of the log's queries, removed from training."""
    clicks = cfg.get("clicks")
    if clicks is None or clicks.get("mode") is None:
        return datamodule
    if clicks.mode not in MODES:
        raise ValueError(f"clicks.mode must be one of {MODES}, got {clicks.mode!r}")
    if clicks.mode == "offline":
        if not clicks.get("log"):
            raise ValueError(
                "clicks.mode=offline trains on a click log: set clicks.log=PATH (write one with "
                "task=simulate, docs/clicks.md#the-click-log-format)"
            )
        log_format = clicks.get("format", "npz")
        if log_format not in LOG_FORMATS:
            raise ValueError(f"clicks.format must be one of {LOG_FORMATS}, got {log_format!r}")
        selection = click_selection(cfg)
        if log_format == "parquet":
            return _streamed(clicks, datamodule, int(cfg.seed), selection, cfg.get("ultr"))
        logged, held_out_log = read_click_log(clicks.log), None
        if selection is not None:
            logged, held_out_log = QueryHoldout(selection.holdout, int(cfg.seed)).split(logged)
            _require_propensities(logged.source, held_out_log.propensity is not None, cfg.ultr)
            log.info(
                "ultr.select=clicks: %d sessions of %d queries held out of the click log "
                "(ultr.select_holdout=%s)",
                len(held_out_log.offsets) - 1,
                len(np.unique(held_out_log.qid)),
                selection.holdout,
            )
        log.info("training on the click log %s (%d sessions)", clicks.log, len(logged.offsets) - 1)
        return ClickDataModule.logged(datamodule, logged, seed=cfg.seed, held_out=held_out_log)
    if clicks.get("model") is None:
        raise ValueError(
            f"clicks={cfg.clicks.get('name', '?')} has no click model to simulate with: choose "
            "clicks=pbm|cascade|dcm|ubm|trust|cbcm, or clicks.mode=offline with clicks.log=PATH"
        )
    make_model = instantiate(clicks.model)  # a partial: the data and top_k complete it
    model = make_model(max_label=max(datamodule.label_levels), positions=int(clicks.top_k))
    top_k, seed = int(clicks.top_k), int(cfg.seed)
    shown = shown_lists(datamodule, clicks.production, top_k, seed)
    selection = click_selection(cfg)
    held_out = None
    if selection is not None:
        validation = shown_lists(datamodule, clicks.production, top_k, seed, split="val")
        split = datamodule.split_data("val")
        held_out = HeldOutSessions.simulate(split, validation, model, selection.sessions, seed)
        log.info(
            "ultr.select=clicks: %d held-out sessions on each of %d validation queries",
            selection.sessions,
            len(validation),
        )
    return ClickDataModule.simulated(datamodule, shown, model, seed=cfg.seed, held_out=held_out)


def _require_propensities(source: str, logged: bool, ultr: DictConfig) -> None:
    """Refuse ``ultr.select=clicks`` on the log ``source`` when neither it (``logged``: it has
    a propensity column) nor ``ultr.propensities`` gives the IPS estimate its θ."""
    if not logged and ultr.get("propensities") is None:
        raise ValueError(
            f"{source} has no propensity column, and ultr.select=clicks's IPS estimate of DCG "
            "needs each shown position's examination propensity: add the logging propensities "
            "to the log (docs/clicks.md#the-click-log-format), or train with ultr=ips|dr and "
            "ultr.propensities=[θ_1, θ_2, ...] (known or estimated)"
        )


def _streamed(
    clicks: DictConfig,
    datamodule,
    seed: int,
    selection: ClickSelection | None,
    ultr: DictConfig | None,
) -> StreamingClickDataModule:
    """``clicks=parquet_log``: the Parquet log at ``clicks.log`` streamed (and, for a
    ``doc_key`` log, its feature table at ``clicks.feature_table``); under
    ``ultr.select=clicks``, less the ``ultr.select_holdout`` share of its queries, whose first
    ``ultr.select_holdout_sessions`` sessions are the validation batches."""
    parquet_log = ParquetClickLog(clicks.log)
    table_path = clicks.get("feature_table")
    table = FeatureTable.read(table_path, parquet_log.n_features) if table_path else None
    log.info(
        "streaming the Parquet click log %s (%d rows in %d row groups)",
        clicks.log,
        parquet_log.rows,
        parquet_log.row_groups,
    )
    if selection is None:
        return StreamingClickDataModule(datamodule, parquet_log, feature_table=table, seed=seed)
    assert ultr is not None  # click_selection found ultr.select=clicks
    streamed = StreamingClickDataModule(
        datamodule,
        parquet_log,
        feature_table=table,
        seed=seed,
        held_out=QueryHoldout(selection.holdout, seed),
        held_out_cap=selection.holdout_sessions,
    )
    assert streamed.held_out is not None
    _require_propensities(parquet_log.source, "propensities" in streamed.held_out.columns, ultr)
    log.info(
        "ultr.select=clicks: %d sessions held out of the Parquet click log "
        "(ultr.select_holdout=%s)",
        len(streamed.held_out),
        selection.holdout,
    )
    return streamed


def simulate(cfg: DictConfig, run_dir: Path) -> Path:
    """``task=simulate``: ``clicks.sessions_per_query`` epochs of the online simulation (the
    sessions ``task=fit`` would draw on the CPU, in its order) written as a click log at
    ``clicks.log`` (default ``RUN/clicks.npz``, or ``RUN/clicks.parquet`` with
    ``clicks.output_format=parquet``), atomically; session ``p·Q + i`` is query
    ``i``'s in epoch ``p``, so a one-session log trains like the online run's first epoch. An
    existing file there is refused unless ``clicks.overwrite=true``."""
    clicks = cfg.get("clicks")
    if clicks is None or clicks.get("model") is None or clicks.get("mode") != "online":
        raise ValueError(
            "task=simulate needs a click model simulating online: clicks=pbm|cascade|dcm|ubm|"
            "trust|cbcm (and clicks.mode=online)"
        )
    passes = int(clicks.get("sessions_per_query", 1))
    if passes < 1:
        raise ValueError(f"clicks.sessions_per_query must be >= 1, got {passes}")
    output_format = clicks.get("output_format", "npz")
    if output_format not in LOG_FORMATS:
        raise ValueError(
            f"clicks.output_format must be one of {LOG_FORMATS}, got {output_format!r}"
        )
    path = Path(clicks.log) if clicks.get("log") else run_dir / f"clicks.{output_format}"
    overwrite = bool(clicks.get("overwrite", False))
    if os.path.lexists(path) and not overwrite:  # before minutes of simulation
        raise FileExistsError(
            f"{path} exists: task=simulate does not replace it; set clicks.overwrite=true to "
            "replace it, or choose another clicks.log"
        )
    data = click_datamodule(cfg, instantiate(cfg.data))
    split = data.split_data("train")
    position_of = {int(q): i for i, q in enumerate(split.query_ids[split.queries])}
    n_queries = len(position_of)
    sessions: dict[int, tuple] = {}
    for epoch, batch, click_batch in data.sessions(passes):
        mask = batch["mask"]
        for b, qid in enumerate(batch["qid"].tolist()):
            real = mask[b]
            sessions[epoch * n_queries + position_of[qid]] = (
                qid,
                batch["doc_index"][b, real].numpy(),
                click_batch["clicks"][b, real].numpy(),
                click_batch["propensities"][b, real].numpy(),
            )
    order = sorted(sessions)
    lengths = [len(sessions[s][1]) for s in order]
    identity = training_identity(data)
    written = ClickLog(
        session=np.repeat(order, lengths),
        qid=np.repeat([sessions[s][0] for s in order], lengths),
        position=np.concatenate([np.arange(n) for n in lengths]),
        click=np.concatenate([sessions[s][2] for s in order]).astype(np.uint8),
        doc_row=np.concatenate([sessions[s][1] for s in order]),
        propensity=np.concatenate([sessions[s][3] for s in order]),
        # the data it was written for: refused on other data (docs/clicks.md)
        train_qids_sha256=identity["train_qids_sha256"],
        train_files_sha256=identity.get("train_files_sha256"),
    )
    # checked again as the file is put in place
    if output_format == "parquet":
        write_click_log_parquet(written, path, overwrite=overwrite)
    else:
        written.write(path, overwrite=overwrite)
    clicked = int(written.click.sum())
    log.info(
        "click log: %d sessions, %d shown documents, %d clicks -> %s",
        len(order),
        len(written.click),
        clicked,
        path,
    )
    return path
