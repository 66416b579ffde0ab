"""Parquet click logs end to end through train.py: task=simulate writes either format with the
same sessions, and clicks=parquet_log trains through the streamed log (doc_row, features and
doc_key logs), its batches the click batches of the log's sessions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hydra.utils import instantiate

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import differank  # noqa: E402
from differank.datamodules.clicks.click_log import ClickLog, ClickLogError, read_click_log  # noqa: E402
from differank.datamodules.clicks.parquet_log import ParquetClickLog, write_click_log_parquet  # noqa: E402
from differank.rankers.run.runs import compose_config  # noqa: E402
from tests.conftest import TINY_DATA, run_config  # noqa: E402

RUN = [*TINY_DATA, "trainer.max_epochs=1", "logger=csv", "quiet=true", "seed=3"]
SIMULATE = [*RUN, "clicks=pbm", "clicks.top_k=6", "clicks.eta=2", "task=simulate"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """The same simulation written as .npz and as Parquet."""
    folder = tmp_path_factory.mktemp("logs")
    for suffix in ("npz", "parquet"):
        overrides = [*SIMULATE, f"clicks.output_format={suffix}"]
        run_config(overrides, folder / suffix)
    return folder


def test_simulate_writes_either_format_with_the_same_sessions(logs):
    npz = read_click_log(logs / "npz" / "clicks.npz")
    parquet = ParquetClickLog(logs / "parquet" / "clicks.parquet")
    rows = [parquet.read_group(g) for g in range(parquet.row_groups)]
    assert parquet.document == "doc_row"
    assert parquet.train_qids_sha256 == npz.train_qids_sha256  # the data it belongs to
    assert parquet.train_files_sha256 == npz.train_files_sha256
    np.testing.assert_array_equal(np.concatenate([r.doc_row for r in rows]), npz.doc_row)
    np.testing.assert_array_equal(np.concatenate([r.click for r in rows]), npz.click)
    np.testing.assert_array_equal(np.concatenate([r.position for r in rows]), npz.position + 1)
    np.testing.assert_array_equal(np.concatenate([r.propensity for r in rows]), npz.propensity)
    with pytest.raises(ValueError, match="clicks.output_format must be one of"):
        run_config([*SIMULATE, "clicks.output_format=csv"], logs / "csv")


def test_a_parquet_log_trains_through_the_stream(logs, tmp_path):
    path = logs / "parquet" / "clicks.parquet"
    result = differank.run(
        [*RUN, "clicks=parquet_log", f"clicks.log={path}", "ultr=ips"], output_dir=tmp_path / "run"
    )
    assert math.isfinite(result.best_validation)
    assert all(math.isfinite(v) for v in result.test_metrics.values())
    state = torch.load(result.run_dir / "checkpoints" / "best.ckpt", weights_only=True)
    assert state["global_step"] > 0  # it stepped on the streamed batches


def test_a_features_log_and_a_doc_key_log_train_like_each_other(logs, tmp_path):
    """The same raw features given in the log or through a feature table train the same
    model (the run normalises both alike)."""
    npz = read_click_log(logs / "npz" / "clicks.npz")
    data = instantiate(compose_config(RUN, run_dir=tmp_path / "data").data)
    # the raw features: the training split's rows before the run's z-score
    features = data.split_data("train").features * data.feature_std + data.feature_mean
    logged = ClickLog(
        session=npz.session,
        qid=npz.qid,
        position=npz.position,
        click=npz.click,
        propensity=npz.propensity,
        features=features[npz.doc_row],
    )
    write_click_log_parquet(logged, tmp_path / "features.parquet")
    table = pa.table(
        {"doc_key": pa.array(np.arange(len(features))), "features": list(features.astype(float))}
    )
    pq.write_table(table, tmp_path / "table.parquet")
    log = pq.read_table(tmp_path / "features.parquet")
    keyed_log = log.drop_columns(["features"]).append_column("doc_key", pa.array(npz.doc_row))
    pq.write_table(keyed_log, tmp_path / "keyed.parquet", row_group_size=10**6)
    runs = {}
    for name, extra in {
        "features": [f"clicks.log={tmp_path / 'features.parquet'}"],
        "keyed": [
            f"clicks.log={tmp_path / 'keyed.parquet'}",
            f"clicks.feature_table={tmp_path / 'table.parquet'}",
        ],
    }.items():
        runs[name] = differank.run(
            [*RUN, "clicks=parquet_log", *extra], output_dir=tmp_path / name
        ).test_metrics
    assert runs["features"] == runs["keyed"]
    with pytest.raises(ValueError, match="a doc_key log needs its feature table"):
        differank.run(
            [*RUN, "clicks=parquet_log", f"clicks.log={tmp_path / 'keyed.parquet'}"],
            output_dir=tmp_path / "no_table",
        )


def test_a_doc_row_log_is_refused_on_other_data(logs, tmp_path):
    path = logs / "parquet" / "clicks.parquet"
    other = [*RUN, "data.n_train_queries=41", "clicks=parquet_log", f"clicks.log={path}"]
    with pytest.raises(ClickLogError, match="written for other data"):
        differank.run(other, output_dir=tmp_path / "other")
